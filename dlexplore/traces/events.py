"""The one event table every trace reader produces: its columns, categories and collective names,
and the helpers every analysis uses on it. :class:`~dlexplore.traces.schema.Trace` carries it.

One row per event (an interval on one rank's stream). Columns, in this order:

========== ========== ======= ==============================================================
column     dtype      units   meaning
========== ========== ======= ==============================================================
rank       int32      1       process rank in the job, 0-based
stream     category           where it ran: ``cpu:<pid>:<tid>``, ``cuda:<device>:<stream>``,
                              or a tool's own row (a Horovod tensor, an MPI location)
name       category           the event's name as the tool wrote it
category   category           one of :data:`CATEGORIES`
start      float64    s       start on the rank's own clock (the tool's timestamps in seconds)
duration   float64    s       length, >= 0
bytes      float64    bytes   message size for communication (the per-rank buffer, as
                              nccl-tests counts it), bytes copied for memcpy; NaN if unknown
collective category           :data:`COLLECTIVES` name for communication events, else ""
step       Int64      1       training step (iteration) the event belongs to; <NA> outside
========== ========== ======= ==============================================================

Readers may add columns after these (``group_size``, ``dtype``, ``correlation``, ``op`` ...).
``events.attrs`` hold ``source`` ("measured: <tool> trace <files>"), ``format`` and ``files``.

Categories decide the breakdown (:mod:`dlexplore.traces.breakdown`): ``compute`` (GPU kernels that
are not communication; CPU operators in CPU-only runs), ``communication`` (NCCL kernels, gloo and
MPI collectives, Horovod's allreduce), ``memcpy``, ``memset``, ``data`` (data loading),
``runtime`` (CUDA runtime and driver calls), ``cpu`` (host operators in GPU runs, which launch
rather than compute), ``annotation`` (user ranges, NVTX), ``step`` (one event per training step,
e.g. ``ProfilerStep#N``), ``other``.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError

if TYPE_CHECKING:
    from .schema import Trace

__all__ = [
    "COLUMNS",
    "storable_labels",
    "MEMORY_COLUMNS",
    "CATEGORIES",
    "COLLECTIVES",
    "POINT_TO_POINT",
    "DEVICE_STREAM_PREFIXES",
    "category_mask",
    "device_streams",
    "empty_events",
    "events_of",
    "make_events",
    "normalize_collective_name",
]

#: Column name -> (dtype, units, long name).
COLUMNS: dict[str, tuple[str, str, str]] = {
    "rank": ("int32", "1", "process rank"),
    "stream": ("category", "", "thread, stream or row the event ran on"),
    "name": ("category", "", "event name"),
    "category": ("category", "", "event category"),
    "start": ("float64", "s", "start time on the rank's clock"),
    "duration": ("float64", "s", "duration"),
    "bytes": ("float64", "bytes", "message size or bytes copied"),
    "collective": ("category", "", "collective operation"),
    "step": ("Int64", "1", "training step"),
}

#: Columns of :attr:`Trace.memory`: units and long name.
MEMORY_COLUMNS: dict[str, tuple[str, str]] = {
    "rank": ("1", "process rank"),
    "device": ("", "device the memory belongs to (cpu, cuda:0 ...)"),
    "time": ("s", "time of the allocation or release, on the events' axis"),
    "bytes": ("bytes", "bytes allocated (> 0) or released (< 0)"),
    "allocated": ("bytes", "allocator's total allocated after the event"),
    "reserved": ("bytes", "allocator's total reserved after the event"),
    "address": ("1", "address of the block"),
}

CATEGORIES = (
    "compute",
    "communication",
    "memcpy",
    "memset",
    "data",
    "runtime",
    "cpu",
    "annotation",
    "step",
    "other",
)

COLLECTIVES = (
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "barrier",
    "send",
    "recv",
    "gather",
    "scatter",
    "sendrecv",
)

#: Point-to-point operations: they join two ranks, not a group (NCCL's ``SendRecv`` kernel and
#: ``MPI_Sendrecv`` do both directions at once).
POINT_TO_POINT = ("send", "recv", "sendrecv")

# Longest first, on names lowered with separators removed: "reducescatter" before "reduce".
_COLLECTIVE_PATTERNS = (
    ("reducescatter", "reduce_scatter"),
    ("allreduce", "allreduce"),
    ("allgather", "allgather"),
    ("alltoall", "alltoall"),
    ("broadcast", "broadcast"),
    ("bcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "sendrecv"),
    ("send", "send"),
    ("recv", "recv"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("reduce", "reduce"),
)
_SEPARATORS = re.compile(r"[\s_\-:.]+")


def normalize_collective_name(name: str) -> str:
    """The :data:`COLLECTIVES` name in a tool's event name, or "" if there is none.

    ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``, ``gloo:all_reduce``, ``c10d::allreduce_``,
    ``MPI_Allreduce``, ``NCCL_ALLREDUCE`` -> ``allreduce``; ``ReduceScatter`` ->
    ``reduce_scatter``; ``MPI_Isend`` -> ``send``; ``ncclKernel_SendRecv``, ``MPI_Sendrecv`` ->
    ``sendrecv``. Apply it only to events already known to be
    communication: ``aten::gather`` is an indexing operator, not a collective.
    """
    return _collective_in(str(name))


@functools.lru_cache(maxsize=4096)
def _collective_in(name: str) -> str:
    # a trace names a few collectives over and over: each is looked up once (a regex substitution
    # and a dozen searches; 2,020 NCCL kernels of a 54 MB trace are described twice each)
    key = _SEPARATORS.sub("", name.lower())
    for pattern, collective in _COLLECTIVE_PATTERNS:
        if pattern in key:
            return collective
    return ""


def empty_events() -> pd.DataFrame:
    """An event table with the schema's columns and no rows."""
    return make_events({name: [] for name in COLUMNS})


def make_events(
    columns: dict[str, Any], attrs: dict[str, Any] | None = None, *, copy: bool = True
) -> pd.DataFrame:
    """An event table from column arrays, with the schema's dtypes and column order.

    Missing optional columns get their empty value (``bytes`` NaN, ``collective`` "", ``step``
    <NA>). Extra columns are kept after the schema's. Raises :class:`DlexploreError` when a
    required column (``rank``, ``stream``, ``name``, ``category``, ``start``, ``duration``) is
    missing or a category is not one of :data:`CATEGORIES`. ``copy=False`` lets the table hold the
    given arrays themselves (a reader's own, used nowhere else: no second copy of the table while
    it is made).
    """
    required = ("rank", "stream", "name", "category", "start", "duration")
    missing = [name for name in required if name not in columns]
    if missing:
        raise DlexploreError(f"event table lacks the column(s) {missing}")
    n = len(columns["start"])
    data: dict[str, Any] = {}
    for name, (dtype, _, _) in COLUMNS.items():
        if name in columns:
            values = columns[name]
        elif name == "bytes":
            values = np.full(n, np.nan)
        elif name == "collective":
            values = [""] * n
        else:  # step
            values = pd.array([pd.NA] * n, dtype="Int64")
        if dtype == "category":
            data[name] = pd.Categorical(values)
        else:
            data[name] = (
                pd.array(values, dtype=dtype, copy=copy) if dtype == "Int64" else np.asarray(values, dtype)
            )
    for name, values in columns.items():
        if name not in COLUMNS:
            data[name] = values
    frame = pd.DataFrame(data, copy=copy)
    unknown = set(frame["category"].cat.categories) - set(CATEGORIES)
    if unknown:
        raise DlexploreError(f"unknown event categories {sorted(unknown)}; expected {CATEGORIES}")
    frame.attrs.update(attrs or {})
    return frame


#: Streams that are a device's (GPU) queues, as the readers name them.
DEVICE_STREAM_PREFIXES = ("cuda:", "mtia:", "hpu:")


def events_of(trace: Trace | pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """The event table, the source and the format of a trace or of a bare event table.

    A trace is anything with an ``events`` table, a ``source`` and a ``format``
    (:class:`~dlexplore.traces.schema.Trace`): the analyses take either without importing the class
    whose methods call them.
    """
    if isinstance(trace, pd.DataFrame):
        attrs = trace.attrs
        return trace, str(attrs.get("source", "measured: event table")), str(attrs.get("format", ""))
    if isinstance(getattr(trace, "events", None), pd.DataFrame):
        return trace.events, str(trace.source), str(trace.format)
    raise DlexploreError(f"expected a dlexplore Trace or an event table, got {type(trace).__name__}")


def category_mask(categorical: pd.Series, names: tuple[str, ...]) -> np.ndarray:
    """Boolean array: which rows of a categorical column are one of ``names`` (compares codes)."""
    if not isinstance(categorical.dtype, pd.CategoricalDtype):
        categorical = categorical.astype("category")
    cats = categorical.cat.categories
    wanted = np.isin(np.asarray(cats, dtype=object), list(names))
    codes = categorical.cat.codes.to_numpy()
    # code -1 (missing) maps to the appended False
    return np.append(wanted, False)[codes]


def device_streams(events: pd.DataFrame) -> np.ndarray:
    """Boolean array: which events ran on a device stream (:data:`DEVICE_STREAM_PREFIXES`)."""
    stream = events["stream"]
    if not isinstance(stream.dtype, pd.CategoricalDtype):
        stream = stream.astype("category")
    cats = pd.Index(stream.cat.categories).astype(str)
    on_device = np.zeros(len(cats), dtype=bool)
    for prefix in DEVICE_STREAM_PREFIXES:
        on_device |= cats.str.startswith(prefix)
    return np.append(on_device, False)[stream.cat.codes.to_numpy()]


def storable_labels(labels: list[Any]) -> list[Any]:
    """``labels`` as pandas' string storage (pyarrow: UTF-8) can hold them: a lone surrogate (a
    ``"\\ud800"`` escape in a trace's JSON, which Python keeps) is shown as its escape; other labels
    are returned as they are (the list itself when none has one)."""
    try:
        "".join(v for v in labels if isinstance(v, str)).encode("utf-8")
        return labels
    except UnicodeEncodeError:
        return [
            v.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(v, str) else v for v in labels
        ]
