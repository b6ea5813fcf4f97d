"""Measured traces in: one reader per format, one event table, analyses on top.

    trace = dlexplore.load_trace("runs/step-traces/")     # a file, a folder, a glob, or a list
    trace.events                                          # pandas DataFrame, schema in .schema
    trace.breakdown()                                     # xarray Dataset on (rank, step)
    trace.collectives()                                   # one row per collective and size

Formats, detected from the files' contents: PyTorch profiler Chrome traces (``.json``,
``.json.gz``), Horovod timelines, Nsight Systems SQLite exports, Score-P OTF2 archives (optional
extra ``otf2``). nccl-tests output is a measured communication dataset rather than a trace: read it
with :func:`read_nccl_tests` (or ``dlexplore.measured.load``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DlexploreError
from .cache import cached
from .detect import FORMATS, detect_format
from .netcdf import write_netcdf
from .schema import CATEGORIES, COLLECTIVES, COLUMNS, Trace, as_paths, make_events

__all__ = [
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
    "Trace",
    "FORMATS",
    "COLUMNS",
    "CATEGORIES",
    "COLLECTIVES",
    "make_events",
    "write_netcdf",
]

# format -> module with ``read(paths, **options) -> Trace``
_READERS = {
    "pytorch": ".pytorch",
    "horovod": ".horovod",
    "nsys": ".nsys",
    "otf2": ".otf2",
    "netcdf": ".netcdf",
}


@cached
def load_trace(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    format: str | None = None,  # noqa: A002 - the natural name for users
    **options: Any,
) -> Trace:
    """Read a trace: one file, a folder of per-rank files, a glob pattern, or a list of these.

    ``format`` (``pytorch``, ``horovod``, ``nsys``, ``otf2``, ``netcdf`` for a converted trace)
    skips detection; otherwise every file's
    format is detected from its contents and all must agree. Every problem with the input is a
    :class:`~dlexplore.errors.DlexploreError` naming the file and the position or event.
    """
    files = as_paths(paths)
    if format is None:
        found = {path: detect_format(path) for path in files}
        kinds = sorted(set(found.values()))
        if len(kinds) > 1:
            listing = "; ".join(f"{p.name}: {k}" for p, k in list(found.items())[:6])
            raise DlexploreError(f"these files hold different formats ({', '.join(kinds)}): {listing}")
        format = kinds[0]
    if format == "nccl-tests":
        raise DlexploreError(
            f"{files[0]}: this is nccl-tests output, a measured communication dataset rather than a "
            "trace; read it with dlexplore.traces.read_nccl_tests(path) or dlexplore.measured.load(path)"
        )
    if format in _PROFILES:
        raise DlexploreError(
            f"{files[0]}: this is {_PROFILES[format][0]}, not an event trace; read it with "
            f"dlexplore.traces.{_PROFILES[format][1]}(path)"
        )
    if format not in _READERS:
        raise DlexploreError(f"unknown trace format {format!r}; expected one of {sorted(_READERS)}")
    reader = importlib.import_module(_READERS[format], __name__)
    return reader.read(files, **options)


# Formats that are not event traces (no start times): their own readers give datasets or tables.
_PROFILES = {
    "tensorboard": ("a TensorBoard event file (logged scalars)", "read_tensorboard"),
    "tau": ("a TAU profile (per-function totals)", "read_tau_profile"),
    "nccl-log": ("an NCCL debug log (collectives as called)", "read_nccl_log"),
}


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
