"""Measured traces in: one reader per format, one event table, analyses on top.

    trace = dlexplore.load_trace("runs/step-traces/")     # a file, a folder, a glob, or a list
    trace.events                                          # pandas DataFrame, schema in .schema
    trace.breakdown()                                     # xarray Dataset on (rank, step)
    trace.collectives()                                   # one row per collective and size

Formats, detected from the files' contents: PyTorch profiler Chrome traces (``.json``,
``.json.gz``), Horovod timelines, Nsight Systems SQLite exports, Score-P OTF2 archives (optional
extra ``otf2``). nccl-tests output, Darshan logs and DLIO / MLPerf Storage summaries are measured
tables rather than traces: :func:`load` reads every format and gives those as datasets
(:func:`read_nccl_tests`, :func:`read_darshan`, :func:`read_dlio_summary` read one kind each).

Each format is a :class:`Reader` in :mod:`.registry`; other packages add theirs through the
``dlexplore.readers`` entry point (:func:`readers` lists what is registered; CONTRIBUTING.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DlexploreError
from . import registry
from .cache import cached
from .detect import FORMATS, MEASURED_FORMATS, detect_format
from .netcdf import write_netcdf
from .registry import Reader, get_reader, readers, register_reader, unregister_reader
from .schema import CATEGORIES, COLLECTIVES, COLUMNS, Trace, expand_paths, make_events

__all__ = [
    "load",
    "load_trace",
    "read_nccl_tests",
    "summarize",
    "read_darshan",
    "read_dlio_summary",
    "read_tensorboard",
    "read_tau_profile",
    "tau_breakdown",
    "read_nccl_log",
    "nccl_log_table",
    "detect_format",
    "Reader",
    "readers",
    "register_reader",
    "unregister_reader",
    "get_reader",
    "Trace",
    "FORMATS",
    "MEASURED_FORMATS",
    "COLUMNS",
    "CATEGORIES",
    "COLLECTIVES",
    "make_events",
    "write_netcdf",
]


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
            f"dlexplore.load(path){also if format in MEASURED_FORMATS else ''}"
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


def read_tensorboard(paths: Any, **options: Any) -> Any:
    """Logged scalars (loss, accuracy, learning rate) of TensorBoard event files as an xarray
    dataset on (run, step) (:func:`dlexplore.traces.tensorboard.read_tensorboard`; needs the
    ``tensorboard`` extra)."""
    from .tensorboard import read_tensorboard as read

    return read(paths, **options)


def read_tau_profile(paths: Any) -> Any:
    """TAU ``profile.N.C.T`` files (and ``MULTI__<metric>`` folders) as a profile dataset
    (:func:`dlexplore.traces.tau.read_tau_profile`)."""
    from .tau import read_tau_profile as read

    return read(paths)


def tau_breakdown(profile: Any, metric: str = "TIME") -> Any:
    """Per rank and thread: total, MPI communication, MPI-IO and compute time of a TAU profile."""
    from .tau import tau_breakdown as run

    return run(profile, metric)


def read_nccl_log(paths: Any) -> Any:
    """Collectives logged with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL (and TUNING), one row per
    operation (:func:`dlexplore.traces.nccl_log.read_nccl_log`)."""
    from .nccl_log import read_nccl_log as read

    return read(paths)


def nccl_log_table(ops: Any) -> Any:
    """One row per collective and size of :func:`read_nccl_log`'s table."""
    from .nccl_log import nccl_log_table as table

    return table(ops)


def summarize(paths: str | os.PathLike | Iterable[str | os.PathLike], **options: Any) -> Any:
    """The per-rank, per-step breakdown of many per-rank traces, one file at a time on Dask
    (:func:`dlexplore.traces.scale.summarize`; needs the ``scale`` extra)."""
    from .scale import summarize as run

    return run(paths, **options)


def read_darshan(path: str | os.PathLike) -> Any:
    """A Darshan log (needs the optional ``darshan`` package): per-file, per-rank I/O counters and a
    summary (:func:`dlexplore.traces.darshan.read_darshan`)."""
    from .darshan import read_darshan as read

    return read(path)


def read_dlio_summary(path: str | os.PathLike) -> Any:
    """A DLIO benchmark summary.json as an xarray Dataset (:mod:`dlexplore.traces.dlio`)."""
    from .dlio import read_dlio_summary as read

    return read(path)


def read_nccl_tests(path: str | os.PathLike, **options: Any) -> Any:
    """nccl-tests output (``all_reduce_perf`` ...) as a measured communication dataset (xarray);
    ``options`` (``collective=``, ``gpus=``, ``by=``) go to :func:`dlexplore.traces.nccl_tests.read`."""
    from .nccl_tests import read

    return read(Path(path), **options)
