"""Reading any file dlexplore understands: :func:`load_trace` for event traces (every file's format
detected from its contents, a folder's other files skipped with a warning) and :func:`load` for
whatever a file holds (traces, measured tables, profiles, logs). Both are exported by
:mod:`dlexplore.traces`; they live here so that :mod:`.scale`'s workers can import them without
importing the package's ``__init__`` (which imports :mod:`.scale`'s entry point in turn)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DlexploreError
from . import registry
from .cache import cached
from .detect import MEASURED_FORMATS
from .registry import get_reader, readers
from .schema import Trace, expand_paths

__all__ = ["load", "load_trace"]


@cached
def load_trace(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    format: str | None = None,  # noqa: A002 - the natural name for users
    **options: Any,
) -> Trace:
    """Read a trace: one file, a folder of per-rank files, a glob pattern, or a list of these.

    ``format`` (``pytorch``, ``horovod``, ``nsys``, ``otf2``, ``netcdf`` for a converted trace,
    or a plug-in's format) skips detection; otherwise every file's format is detected from its
    contents (:func:`dlexplore.traces.registry.detect`) and all must agree. Files of a folder
    that are not traces (a run's configuration, a metadata JSON, a benchmark table) are skipped
    with a warning naming them (``trace.meta["skipped_files"]``); files named directly are never
    skipped. ``allow_missing_ranks=True`` reads a set of per-rank
    files that leaves ranks of the world out (``trace.meta["missing_ranks"]``). Every problem with
    the input is a :class:`~dlexplore.errors.DlexploreError` naming the file and the position or
    event.
    """
    entries = expand_paths(paths)
    files = [path for path, _ in entries]
    skipped: list[str] = []
    if format is None:
        found, skipped = _detect_all(entries)
        files = list(found)
        kinds = sorted(set(found.values()))
        if len(kinds) > 1:
            listing = "; ".join(f"{p.name}: {k}" for p, k in list(found.items())[:6])
            raise DlexploreError(f"these files hold different formats ({', '.join(kinds)}): {listing}")
        format = kinds[0]
    reader = get_reader(format)
    if reader is not None and reader.kind == "measured":
        also = " (or dlexplore.traces.read_nccl_tests, read_darshan, read_dlio_summary)"
        raise DlexploreError(
            f"{files[0]}: this is {format} output, a measured table rather than a trace; read it with "
            f"dlexplore.load(path){also if format in MEASURED_FORMATS else ''}; on the command line, "
            "'dlexplore trace summary PATH' or 'dlexplore measured show PATH' shows it"
        )
    if reader is not None and reader.kind == "profile":
        how = f"dlexplore.traces.{_PROFILES[format]}" if format in _PROFILES else "dlexplore.load"
        what = reader.description or format
        raise DlexploreError(f"{files[0]}: this is {what}, not an event trace; read it with {how}(path)")
    if reader is None:
        known = sorted(name for name, r in readers().items() if r.kind == "trace")
        raise DlexploreError(f"unknown trace format {format!r}; expected one of {known}")
    trace = registry.read(format, files, **options)
    if skipped:
        trace.meta["skipped_files"] = skipped
    return trace


def _detect_all(entries: list[tuple[Path, bool]], *, warn: bool = True) -> tuple[dict[Path, str], list[str]]:
    """Each file's format; files a folder listing found that are not traces of the set are skipped
    (with a warning naming them), as long as some trace remains."""
    found: dict[Path, str] = {}
    reasons: dict[Path, str] = {}
    for path, listed in entries:
        try:
            found[path] = registry.detect(path)
        except DlexploreError as err:
            if not listed:
                raise
            reasons[path] = str(err).replace(f"{path}: ", "").replace(f"{path}", "").strip(" :")
    traces = {p: k for p, k in found.items() if not _measured(k)}
    if traces:
        named = {p for p, flag in entries if flag}
        for path, kind in found.items():
            if _measured(kind) and path in named:
                reasons[path] = f"{kind} output, not a trace"
        found = {p: k for p, k in found.items() if p not in reasons}
    elif reasons and not found:
        first = next(iter(reasons))
        raise DlexploreError(
            f"{first.parent}: no trace among its files ("
            + "; ".join(f"{p.name}: {r[:80]}" for p, r in list(reasons.items())[:4])
            + ")"
        )
    skipped = [f"{p.name}: {r}" for p, r in reasons.items()]
    if skipped and warn:
        folder = next(iter(reasons)).parent
        warnings.warn(
            f"{folder}: skipped {len(skipped)} file(s) that are not traces of this set: "
            + "; ".join(s[:120] for s in skipped[:5])
            + (" ..." if len(skipped) > 5 else ""),
            stacklevel=3,
        )
    return found, skipped


def load(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    format: str | None = None,  # noqa: A002 - the natural name for users
    **options: Any,
) -> Any:
    """Read any file dlexplore understands, whatever it holds.

    Traces (PyTorch profiler, Horovod, Nsight Systems, OTF2, converted netCDF) give a
    :class:`Trace` (:func:`load_trace`, same options). Measured tables give what their reader
    gives: nccl-tests output an ``xarray.Dataset`` (every test in the file, along ``test`` when
    there are several; ``by="bytes"`` aggregates repeated sizes, ``by="point"`` keeps each row; see
    :mod:`dlexplore.traces.nccl_tests`), a Darshan log (binary, or darshan-parser's text) a
    :class:`~dlexplore.traces.darshan.DarshanLog`, a DLIO / MLPerf Storage ``summary.json`` an
    ``xarray.Dataset``. Profiles and logs give their readers' results: TensorBoard event files
    (:func:`read_tensorboard`), TAU profiles (:func:`read_tau_profile`), NCCL debug logs
    (:func:`read_nccl_log`).
    """
    entries = expand_paths(paths)
    kind = format
    if kind is None:
        kinds = {registry.detect(p) for p, listed in entries if not listed} or _detect_all(
            entries, warn=False
        )[0].values()
        tables = sorted(k for k in set(kinds) if _measured(k))
        kind = tables[0] if tables and len(set(kinds)) == 1 else None
    reader = None if kind is None else get_reader(kind)
    if kind is None or reader is None or reader.kind == "trace":
        return load_trace(paths, format=kind, **options)
    if reader.kind == "profile":  # a profile reader takes the paths as given: TAU's are folders
        return registry.read(kind, paths, **options)
    return registry.read(kind, [path for path, _ in entries], **options)


def _measured(kind: str) -> bool:
    """Whether the format holds a table (measured or profile) rather than a trace of events."""
    reader = get_reader(kind)
    return reader is not None and reader.kind != "trace"


# Built-in formats that are not event traces (no start times): the function that reads each.
_PROFILES = {"tensorboard": "read_tensorboard", "tau": "read_tau_profile", "nccl-log": "read_nccl_log"}
