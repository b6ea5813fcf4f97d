"""TensorBoard event files: logged scalars (loss, accuracy, learning rate ...) as an xarray dataset.

    runs = dlexplore.traces.read_tensorboard("logs/")      # a folder of runs, a file, or {run: path}
    runs["loss"].sel(run="bs256")                          # dims (run, step); NaN where not logged
    runs["wall_time"]                                      # s since the epoch, per run and step

**Format.** An event file (``events.out.tfevents.*``) is a TFRecord stream: per record an 8-byte
little-endian length, a 4-byte masked CRC-32C of that length, the data (one serialized
``tensorboard.Event`` protocol buffer) and a 4-byte masked CRC-32C of the data. Scalars are
``summary.value`` entries with a ``simple_value`` (``torch.utils.tensorboard``, TF1 ``tf.summary``,
tensorboardX) or a 0-d ``tensor`` with the ``scalars`` plugin (TF2 ``tf.summary.scalar``); images,
histograms, text and graphs are skipped.

**Why our own loop over the records** (with tensorboard's ``Event`` protobuf and CRC code, the
``tensorboard`` package is the dependency): TensorBoard's ``EventAccumulator`` keeps a reservoir
sample of 10,000 points per tag by default, silently dropping points of long runs; its
``EventFileLoader`` logs a truncated or corrupted record as a warning and stops, so a damaged file
reads as a shorter run. Here the length CRC of every record is checked and a bad one is an
:class:`~dlexplore.errors.InputFileError` naming the file, the record and its byte offset; a file
cut in its last record (a run still writing, or killed) keeps what was read and says so in
``attrs["truncated"]`` with a warning. ``benchmarks/bench_tensorboard.py`` compares the speed with
``EventFileLoader`` and ``tbparse``.

**Layout.** One ``run`` per event-file folder (its path relative to the folder given; a file given
directly is named after its folder). Several files of one run (a resumed run) are read in name
order (their names start with the creation time) and a later value at the same step replaces an
earlier one, as TensorBoard shows a resumed run. Variable names are the tags with ``/`` replaced by
``.`` (``train/loss`` -> ``train.loss``; netCDF forbids ``/``); ``attrs["tag"]`` keeps the tag.
Scalars carry no units in the file: each variable's ``units`` is ``"1"`` (as logged).
"""

from __future__ import annotations

import os
import struct
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError, InputFileError

__all__ = ["read_tensorboard", "EVENT_FILE_PATTERN", "is_event_file"]

EVENT_FILE_PATTERN = "events.out.tfevents.*"
_HEADER = struct.Struct("<QI")
_MAX_RECORD = 1 << 30  # a record longer than 1 GiB is a damaged length field, not a scalar


def _require_tensorboard():
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
        from tensorboard.util import tensor_util
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise DlexploreError(
            "reading TensorBoard event files needs the tensorboard package: "
            "pip install 'dlexplore[tensorboard]'"
        ) from None
    return event_pb2, masked_crc32c, tensor_util


def is_event_file(head: bytes) -> bool:
    """Whether the first bytes of a file look like a TensorBoard event file (the first record is
    the ``file_version`` event, ``brain.Event:N``)."""
    return len(head) >= 12 and b"brain.Event:" in head[12:64]


def _records(path: Path, data: bytes, masked_crc32c) -> Iterable[tuple[int, int, bytes]]:
    """(record number, byte offset, data) of every complete record; a cut last record stops."""
    offset, number = 0, 0
    size = len(data)
    while offset < size:
        if offset + _HEADER.size > size:
            raise _Truncated(number, offset)
        length, length_crc = _HEADER.unpack_from(data, offset)
        if masked_crc32c(data[offset : offset + 8]) != length_crc or length > _MAX_RECORD:
            raise InputFileError(
                path,
                f"record {number} at byte {offset}: the length field fails its CRC; expected a "
                "TensorBoard event file (TFRecord: length, CRC, Event protobuf, CRC)",
            )
        end = offset + _HEADER.size + length + 4
        if end > size:
            raise _Truncated(number, offset)
        yield number, offset, data[offset + _HEADER.size : offset + _HEADER.size + length]
        offset, number = end, number + 1


class _Truncated(Exception):
    def __init__(self, number: int, offset: int):
        self.number, self.offset = number, offset


def _read_file(path: Path) -> tuple[dict[str, dict[int, tuple[float, float]]], bool]:
    """tag -> step -> (value, wall time) of one event file, and whether its end was cut."""
    event_pb2, masked_crc32c, tensor_util = _require_tensorboard()
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputFileError(path, f"cannot be read ({err}); expected a TensorBoard event file") from None
    if not data:
        raise InputFileError(path, "is empty; expected a TensorBoard event file")
    scalars: dict[str, dict[int, tuple[float, float]]] = {}
    truncated = False
    first = True
    try:
        for number, offset, record in _records(path, data, masked_crc32c):
            try:
                event = event_pb2.Event.FromString(record)
            except Exception:  # protobuf's DecodeError and friends
                raise InputFileError(
                    path,
                    f"record {number} at byte {offset} is not a TensorBoard "
                    "Event protobuf; expected a TensorBoard event file",
                ) from None
            if first:
                if event.WhichOneof("what") != "file_version":
                    raise InputFileError(
                        path, "record 0 is not the file_version event; expected a TensorBoard event file"
                    )
                first = False
                continue
            if event.WhichOneof("what") != "summary":
                continue
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    number_value = float(value.simple_value)
                elif kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size != 1:
                        continue
                    number_value = float(array.reshape(()))
                else:
                    continue
                scalars.setdefault(value.tag, {})[int(event.step)] = (number_value, event.wall_time)
    except _Truncated as cut:
        if cut.number == 0:
            raise InputFileError(
                path, "ends inside its first record; expected a TensorBoard event file"
            ) from None
        truncated = True
        warnings.warn(
            f"{path}: the file ends inside record {cut.number} (byte {cut.offset}); kept "
            "the records before it (a run still writing, or killed)",
            stacklevel=3,
        )
    return scalars, truncated


def _run_files(paths: str | os.PathLike | Iterable | Mapping) -> dict[str, list[Path]]:
    if isinstance(paths, Mapping):
        runs: dict[str, list[Path]] = {}
        for name, value in paths.items():
            found = _run_files(value)
            runs[str(name)] = sorted(f for files in found.values() for f in files)
        return runs
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    runs = {}
    for item in items:
        path = Path(item)
        if path.is_dir():
            files = sorted(path.rglob(EVENT_FILE_PATTERN))
            if not files:
                raise InputFileError(path, f"holds no TensorBoard event files ({EVENT_FILE_PATTERN})")
            for f in files:
                rel = f.parent.relative_to(path).as_posix()
                name = rel if rel != "." else path.name
                runs.setdefault(name, []).append(f)
        elif path.is_file():
            runs.setdefault(path.parent.name or str(path), []).append(path)
        else:
            raise InputFileError(path, "no such file or folder; expected TensorBoard event files")
    return runs


def _variable_name(tag: str, taken: dict[str, str], path: Path) -> str:
    name = tag.replace("/", ".")
    if name in ("wall_time", "run", "step"):
        name = f"scalar.{name}"
    if taken.get(name, tag) != tag:
        raise InputFileError(
            path, f"tags {taken[name]!r} and {tag!r} both map to the variable {name!r}; rename one of them"
        )
    taken[name] = tag
    return name


def read_tensorboard(
    paths: str | os.PathLike | Iterable[str | os.PathLike] | Mapping[str, str | os.PathLike],
    *,
    tags: Iterable[str] | None = None,
) -> xr.Dataset:
    """Scalars of TensorBoard event files as a dataset on ``run`` x ``step``.

    ``paths``: an event file, a folder (every event file below it; each folder holding event files
    is a run, named by its path relative to ``paths``), a list of these, or a mapping
    ``{run name: file or folder}``. ``tags`` keeps only those tags.

    Returns one variable per scalar tag (``units`` "1", ``attrs["tag"]`` the tag), ``wall_time``
    (s since the epoch; the earliest event of each run and step), coordinates ``run`` and ``step``
    (the union of every run's steps; NaN where a run logged nothing). ``attrs``: ``source``
    ("measured: TensorBoard event files ..."), ``files``, ``truncated`` (files cut short).
    """
    wanted = None if tags is None else set(tags)
    runs = _run_files(paths)
    per_run: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}
    truncated: list[str] = []
    files: list[str] = []
    for run, run_files in runs.items():
        merged: dict[str, dict[int, tuple[float, float]]] = {}
        for f in run_files:
            scalars, cut = _read_file(f)
            files.append(str(f))
            if cut:
                truncated.append(str(f))
            for tag, points in scalars.items():
                if wanted is None or tag in wanted:
                    merged.setdefault(tag, {}).update(points)
        per_run[run] = merged
    if not any(per_run.values()):
        what = f" with the tags {sorted(wanted)}" if wanted else ""
        raise InputFileError(
            files[0] if files else "?",
            f"holds no scalars{what}; expected logged scalars such as loss (add_scalar)",
        )
    return _dataset(per_run, files, truncated, Path(files[0]))


def _dataset(per_run: dict, files: list[str], truncated: list[str], first: Path) -> xr.Dataset:
    steps = np.unique(
        np.concatenate(
            [np.fromiter(points, dtype=np.int64) for tags in per_run.values() for points in tags.values()]
        )
    )
    index = pd.Index(steps)
    run_names = list(per_run)
    taken: dict[str, str] = {}
    all_tags = sorted({tag for tags in per_run.values() for tag in tags})
    shape = (len(run_names), steps.size)
    wall = np.full(shape, np.nan)
    variables = {}
    for tag in all_tags:
        values = np.full(shape, np.nan)
        for i, run in enumerate(run_names):
            points = per_run[run].get(tag)
            if not points:
                continue
            where = index.get_indexer(np.fromiter(points, dtype=np.int64))
            pairs = np.array(list(points.values()), dtype=float)
            values[i, where] = pairs[:, 0]
            wall[i, where] = np.fmin(wall[i, where], pairs[:, 1])
        name = _variable_name(tag, taken, first)
        variables[name] = xr.Variable(
            ("run", "step"), values, {"units": "1", "long_name": f"{tag} (as logged)", "tag": tag}
        )
    variables["wall_time"] = xr.Variable(
        ("run", "step"),
        wall,
        {"units": "s", "long_name": "wall time of the step's events (seconds since 1970-01-01 UTC)"},
    )
    ds = xr.Dataset(variables, coords={"run": np.array(run_names, dtype=object), "step": steps})
    ds["step"].attrs.update(units="count", long_name="training step (global_step as logged)")
    ds["run"].attrs.update(long_name="run (folder of event files)")
    shown = ", ".join(os.path.basename(f) for f in files[:2]) + (
        f" and {len(files) - 2} more" if len(files) > 2 else ""
    )
    ds.attrs.update(
        source=f"measured: TensorBoard event files {shown}",
        kind="measured",
        format="tensorboard",
        files=files,
        truncated=truncated,
    )
    return ds
