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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .detect import FORMATS, MEASURED_FORMATS, detect_format
from .loading import load, load_trace
from .netcdf import write_netcdf
from .registry import Reader, get_reader, readers, register_reader, unregister_reader
from .schema import CATEGORIES, COLLECTIVES, COLUMNS, Trace, make_events

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
