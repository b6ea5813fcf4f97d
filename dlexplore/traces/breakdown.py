"""Where each rank's step time goes, measured from a trace: an ``xarray.Dataset`` on (rank, step).

Definitions, per rank ``r`` and step ``s`` (all times in seconds, on the rank's own clock):

``step_time``
    The step's window: from the earliest start to the latest end of the rank's events that carry
    step ``s`` (the ``ProfilerStep#s`` event included, so on GPU traces the window runs from the
    step's CPU start to the end of its last kernel, memcpy or collective). On GPU traces the
    device's work for step ``s`` may run on while the host is in step ``s + 1``, so windows of
    consecutive steps can overlap and their sum can exceed the run's wall time.
``time_compute``, ``time_comm``, ``time_memcpy``, ``time_memset``, ``time_data``
    The length of the *union* of the step's intervals of that category (``compute``,
    ``communication``, ``memcpy``, ``memset``, ``data``), so nested CPU operators
    (``aten::linear`` inside ``aten::addmm`` ...) and work on parallel streams or threads count once.
``time_comm_exposed``
    Communication not overlapped by compute on that rank: the length of ``comm \\ compute``,
    computed as ``|comm U compute| - |compute|``.
``overlap_fraction``
    The fraction of communication hidden behind compute, ``1 - time_comm_exposed / time_comm``;
    NaN when the step has no communication.
``time_idle``
    ``step_time`` minus the union of all busy intervals (compute, communication, memcpy,
    memset, data) of that rank and step.
``events``
    How many events carry that step on that rank (all categories).

Which streams count: on a rank whose trace has device streams (``cuda:<device>:<stream>``), compute,
communication, memcpy and memset count only on device streams (the GPU's work; host-side launch
calls, ``nccl:*`` annotations and ``record_param_comms`` are not the work itself), while ``data``
(data loading, a host activity) counts on every stream. On a CPU-only rank every thread counts.

Events whose ``step`` is <NA> (outside every step: set-up, the profiler's own events, work after
the last step) are left out; their number is in ``attrs["events_outside_steps"]``. A trace that marks
no step at all is taken as one step, numbered 0, spanning the whole trace on each rank (said in
``attrs["steps_note"]``).

Every interval union is computed in one vectorised pass: the events are sorted once by
(rank, step, start); for each category set, a running maximum of end times within each (rank, step)
finds where a new disjoint segment begins (start > every earlier end), and the segments' lengths
are summed with ``numpy.bincount``. No Python loop runs per event or per step.

:func:`stragglers` compares ranks on the per-rank mean of one of these variables.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from .schema import Trace

__all__ = ["BREAKDOWN_VARIABLES", "DEVICE_STREAM_PREFIXES", "breakdown", "stragglers"]

#: Streams that are a device's (GPU) queues, as the readers name them.
DEVICE_STREAM_PREFIXES = ("cuda:",)

#: Breakdown variables: units and long name. The names are the model's (DESIGN.md), so a measured
#: breakdown lays over :func:`dlexplore.predict` output.
BREAKDOWN_VARIABLES: dict[str, tuple[str, str]] = {
    "step_time": ("s", "time per training step (first event start to last event end on the rank)"),
    "time_compute": ("s", "compute time per step (union of compute intervals)"),
    "time_comm": ("s", "communication time per step (union of communication intervals)"),
    "time_comm_exposed": ("s", "communication time not overlapped by compute on the rank"),
    "overlap_fraction": ("1", "fraction of communication time hidden behind compute"),
    "time_memcpy": ("s", "memory copy time per step (union of memcpy intervals)"),
    "time_memset": ("s", "memory set time per step (union of memset intervals)"),
    "time_data": ("s", "data loading time per step (union of data intervals)"),
    "time_idle": ("s", "step time with no compute, communication, memcpy, memset or data loading"),
    "events": ("count", "events in the step on the rank"),
}

_BUSY = ("compute", "communication", "memcpy", "memset", "data")
_DEVICE_ONLY = ("compute", "communication", "memcpy", "memset")


def _events_of(trace: Trace | pd.DataFrame) -> tuple[pd.DataFrame, str, str]:
    """The event table, the source and the format of a trace or of a bare event table."""
    if isinstance(trace, Trace):
        return trace.events, trace.source, trace.format
    if isinstance(trace, pd.DataFrame):
        attrs = trace.attrs
        return trace, str(attrs.get("source", "measured: event table")), str(attrs.get("format", ""))
    raise DlexploreError(f"expected a dlexplore Trace or an event table, got {type(trace).__name__}")


def _category_mask(categorical: pd.Series, names: tuple[str, ...]) -> np.ndarray:
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


def _index(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values and each element's position among them (``np.unique``'s inverse)."""
    if values.size == 0:
        return values[:0], np.zeros(0, dtype=np.int64)
    low, high = int(values.min()), int(values.max())
    if high - low <= 4 * values.size:  # ranks and steps: a small range, so a lookup table is quickest
        present = np.zeros(high - low + 1, dtype=bool)
        present[values - low] = True
        coords = np.flatnonzero(present) + low
        lookup = np.cumsum(present) - 1
        return coords.astype(np.int64), lookup[values - low].astype(np.int64)
    coords, inverse = np.unique(values, return_inverse=True)
    return coords, inverse.astype(np.int64)


class _Unions:
    """Lengths of interval unions per group, for any subset of a fixed set of intervals.

    The intervals are sorted once by (group, start). An exact running maximum of end times within
    each group comes from ``numpy.maximum.accumulate`` on an integer key ``group * (n + 1) +
    rank of the end among all ends``: group-major, so a group's maximum never leaks into the next,
    and integers, so no rounding merges or splits intervals.
    """

    def __init__(self, group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int):
        order = np.argsort(start)
        # Then a stable sort by group: numpy radix-sorts 16-bit integers, far quicker than lexsort.
        small = np.uint16 if n_groups <= np.iinfo(np.uint16).max else np.int64
        order = order[np.argsort(group[order].astype(small), kind="stable")]
        self.order = order
        self.group = group[order].astype(np.int64)
        self.start = start[order]
        self.end = end[order]
        self.n = len(order)
        self.n_groups = n_groups
        by_end = np.argsort(self.end, kind="stable")
        self.end_sorted = self.end[by_end]
        self.end_rank = np.empty(self.n, dtype=np.int64)
        self.end_rank[by_end] = np.arange(self.n, dtype=np.int64)

    def length(self, mask: np.ndarray) -> np.ndarray:
        """Union length per group of the intervals where ``mask`` (in the original order) is true."""
        idx = np.flatnonzero(mask[self.order])
        if idx.size == 0:
            return np.zeros(self.n_groups)
        base = self.n + 1
        group = self.group[idx]
        start = self.start[idx]
        running = np.maximum.accumulate(group * base + self.end_rank[idx])
        previous = np.empty_like(running)
        previous[0] = -1
        previous[1:] = running[:-1]
        previous_end = self.end_sorted[np.maximum(previous, 0) % base]  # -1: a new group anyway
        new = (group != previous // base) | (start > previous_end)
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, idx.size - 1)
        lengths = self.end_sorted[running[last] % base] - start[first]
        return np.bincount(group[first], weights=lengths, minlength=self.n_groups)


def breakdown(trace: Trace | pd.DataFrame, *, steps: Any = None) -> xr.Dataset:
    """Per-rank, per-step time breakdown of a measured trace (see the module docstring).

    Parameters
    ----------
    trace:
        A :class:`~dlexplore.traces.schema.Trace` (or its event table).
    steps:
        Steps to keep (an iterable of step numbers); ``None`` keeps every step.

    Returns
    -------
    xarray.Dataset
        Dims ``rank`` and ``step``; variables ``step_time``, ``time_compute``, ``time_comm``,
        ``time_comm_exposed``, ``overlap_fraction``, ``time_memcpy``, ``time_memset``, ``time_data``,
        ``time_idle`` (seconds; ``overlap_fraction`` a fraction) and ``events`` (count), each with ``units``
        and ``long_name``. A (rank, step) with no event is NaN (``events`` 0). ``attrs``:
        ``source``, ``kind`` ("measured"), ``format``, and notes on the definitions.
    """
    events, source, fmt = _events_of(trace)
    n_all = len(events)
    start_all = events["start"].to_numpy(dtype=float)
    end_all = start_all + events["duration"].to_numpy(dtype=float)
    step_col = events["step"]
    has_step = step_col.notna().to_numpy(dtype=bool) if n_all else np.zeros(0, dtype=bool)
    steps_note = "events with no step (<NA>) are left out"
    if n_all and not has_step.any():
        step_all = np.zeros(n_all, dtype=np.int64)
        has_step = np.ones(n_all, dtype=bool)
        steps_note = "the trace marks no steps: the whole trace on each rank is one step, numbered 0"
    else:
        step_all = step_col.fillna(-1).to_numpy(dtype=np.int64) if n_all else np.zeros(0, np.int64)
    keep = has_step & np.isfinite(start_all) & np.isfinite(end_all)
    if steps is not None:
        wanted = np.unique(np.asarray(list(steps), dtype=np.int64))
        keep &= np.isin(step_all, wanted)

    rank_all = events["rank"].to_numpy(dtype=np.int64)
    rank_coords, rank_index_all = _index(rank_all)
    step_coords, step_index = _index(step_all[keep])
    n_r, n_s = len(rank_coords), len(step_coords)
    n_groups = n_r * n_s

    on_device = device_streams(events) if n_all else np.zeros(0, dtype=bool)
    # A rank is a GPU rank when any of its events (in a step or not) is on a device stream.
    gpu_rank = np.bincount(rank_index_all[on_device], minlength=n_r) > 0
    counts_as_device = on_device | ~gpu_rank[rank_index_all] if n_all else on_device

    rank_index = rank_index_all[keep]
    group = rank_index * n_s + step_index
    start, end = start_all[keep], end_all[keep]
    category = events["category"][keep]
    device_ok = counts_as_device[keep]

    def mask(*names: str) -> np.ndarray:
        selected = _category_mask(category, names)
        device_names = tuple(n for n in names if n in _DEVICE_ONLY)
        if device_names:
            selected &= device_ok | ~_category_mask(category, device_names)
        return selected

    shape = (n_r, n_s)
    count = np.bincount(group, minlength=n_groups) if n_groups else np.zeros(0, dtype=np.int64)
    data: dict[str, np.ndarray] = {}
    if n_groups and group.size:
        unions = _Unions(group, start, end, n_groups)
        first = np.flatnonzero(np.diff(unions.group, prepend=-1))
        window = np.full(n_groups, np.nan)
        window_end = np.maximum.reduceat(unions.end, first)
        window[unions.group[first]] = window_end - unions.start[first]
        compute = unions.length(mask("compute"))
        comm = unions.length(mask("communication"))
        comm_or_compute = unions.length(mask("compute", "communication"))
        busy = unions.length(mask(*_BUSY))
        data["step_time"] = window
        data["time_compute"] = compute
        data["time_comm"] = comm
        # Never below zero: the two unions are sums of differences and may round differently.
        data["time_comm_exposed"] = np.clip(comm_or_compute - compute, 0.0, comm)
        with np.errstate(divide="ignore", invalid="ignore"):
            data["overlap_fraction"] = np.where(comm > 0, 1.0 - data["time_comm_exposed"] / comm, np.nan)
        data["time_memcpy"] = unions.length(mask("memcpy"))
        data["time_memset"] = unions.length(mask("memset"))
        data["time_data"] = unions.length(mask("data"))
        data["time_idle"] = np.maximum(window - busy, 0.0)
    else:
        for name in BREAKDOWN_VARIABLES:
            if name != "events":
                data[name] = np.full(n_groups, np.nan)

    empty = count == 0
    variables = {}
    for name, (units, long_name) in BREAKDOWN_VARIABLES.items():
        if name == "events":
            values = count.astype(np.int64)
        else:
            values = np.where(empty, np.nan, data[name])
        variables[name] = (("rank", "step"), values.reshape(shape), {"units": units, "long_name": long_name})
    ds = xr.Dataset(
        variables,
        coords={
            "rank": ("rank", rank_coords, {"units": "1", "long_name": "process rank"}),
            "step": ("step", step_coords, {"units": "1", "long_name": "training step"}),
        },
    )
    ds.attrs.update(
        source=source,
        kind="measured",
        format=fmt,
        title="measured time breakdown per rank and step",
        step_window="from the earliest start to the latest end of the rank's events in the step",
        busy_streams="device streams (cuda:*) on ranks that have them (data loading: every stream); "
        "every thread on CPU-only ranks",
        steps_note=steps_note,
        events_outside_steps=int(n_all - has_step.sum()),
    )
    return ds


def _leave_one_out_median(values: np.ndarray) -> np.ndarray:
    """For each element, the median of the other elements (NaN when there is no other)."""
    n = len(values)
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(values, kind="stable")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    ordered = values[order]
    m = n - 1

    def others(j: int) -> np.ndarray:
        # the j-th smallest of the others: skip over the element's own position
        return ordered[np.where(j < position, j, j + 1)]

    if m % 2:
        return others(m // 2)
    return 0.5 * (others(m // 2 - 1) + others(m // 2))


def _robust_z(values: np.ndarray) -> np.ndarray:
    """Modified z-scores (Iglewicz & Hoaglin 1993): 0.6745 (x - median) / MAD.

    When the MAD is 0 (more than half the ranks equal), the mean absolute deviation scaled by
    1.2533 stands in (IBM SPSS's rule); when that is 0 too, every rank is at the median: z = 0.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return np.full(len(values), np.nan)
    median = np.median(finite)
    deviation = values - median
    mad = np.median(np.abs(finite - median))
    if mad > 0:
        return 0.6745 * deviation / mad
    mean_ad = np.mean(np.abs(finite - median))
    if mean_ad > 0:
        return deviation / (1.253314 * mean_ad)
    return np.where(np.isfinite(values), 0.0, np.nan)


def stragglers(trace: Trace | pd.DataFrame | xr.Dataset, *, threshold: float = 0.1,
               metric: str = "time_work", steps: Any = None) -> pd.DataFrame:
    """Ranks slower than the others, one row per rank.

    The rule: for each rank, take the mean over steps of ``metric``; its ``reference`` is the
    median of that mean over the *other* ranks (so one slow rank among two is still measured
    against a normal one); the rank is a straggler when ``ratio = value / reference > 1 +
    threshold``. ``zscore`` (the modified z-score across all ranks, 0.6745 (x - median) / MAD) is
    given for reading, not used in the rule.

    The default metric ``time_work`` = ``step_time - time_comm_exposed`` is the time a rank spends
    on its own work (compute, data loading, gaps) per step. In synchronous data-parallel training
    every rank's step time is about the same, because the fast ranks wait for the slow one inside
    the collectives; that wait is exposed communication on the fast ranks, so taking it out leaves
    the slow rank standing out. ``metric`` may also be any breakdown variable (``step_time``,
    ``time_compute``, ...).

    Parameters
    ----------
    trace:
        A trace, its event table, or a breakdown already computed by :func:`breakdown`.
    threshold:
        Fraction (1) above the other ranks' median at which a rank is flagged; 0.1 = 10 % slower.
    metric:
        ``time_work`` or a variable of :func:`breakdown` (seconds).
    steps:
        Steps to use (passed to :func:`breakdown`); ``None`` uses every step. Leave out warm-up
        steps for a fair comparison.

    Returns
    -------
    pandas.DataFrame
        Columns ``rank``, ``steps`` (steps with data), ``step_time``, ``time_compute``,
        ``time_comm_exposed``, ``time_idle``, ``time_work`` (per-step means, s), ``metric`` (the
        chosen metric's mean, in its units: s for times), ``reference`` (same units), ``ratio`` (1),
        ``zscore`` (1), ``straggler``
        (bool); ``attrs`` hold ``source``, ``metric``, ``threshold``, ``rule`` and ``units``.
    """
    if threshold < 0:
        raise DlexploreError(f"threshold must be >= 0 (a fraction, 0.1 = 10 %), got {threshold!r}")
    ds = trace if isinstance(trace, xr.Dataset) else breakdown(trace, steps=steps)
    if isinstance(trace, xr.Dataset) and steps is not None:
        ds = ds.sel(step=[s for s in ds.step.values if s in set(steps)])
    allowed = ["time_work"] + [name for name in BREAKDOWN_VARIABLES if name in ds]
    if metric not in allowed:
        raise DlexploreError(f"unknown straggler metric {metric!r}; expected one of {', '.join(allowed)}")
    work = ds["step_time"] - ds["time_comm_exposed"]
    columns: dict[str, Any] = {
        "rank": ds["rank"].values.astype(np.int64),
        "steps": ds["step_time"].count("step").values.astype(np.int64),
    }
    means = {}
    for name, values in (("step_time", ds["step_time"]), ("time_compute", ds["time_compute"]),
                         ("time_comm_exposed", ds["time_comm_exposed"]), ("time_idle", ds["time_idle"]),
                         ("time_work", work)):
        means[name] = values.mean("step", skipna=True).values if ds.sizes["step"] else \
            np.full(ds.sizes["rank"], np.nan)
        columns[name] = means[name]
    if metric in means:
        value = means[metric]
    else:
        value = ds[metric].mean("step", skipna=True).values if ds.sizes["step"] else \
            np.full(ds.sizes["rank"], np.nan)
    value = np.asarray(value, dtype=float)
    reference = np.full(len(value), np.nan)
    finite = np.isfinite(value)
    reference[finite] = _leave_one_out_median(value[finite])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = value / reference
    columns["metric"] = value
    columns["reference"] = reference
    columns["ratio"] = ratio
    columns["zscore"] = _robust_z(value)
    columns["straggler"] = np.nan_to_num(ratio, nan=0.0) > 1.0 + threshold
    table = pd.DataFrame(columns)
    metric_units = "s" if metric == "time_work" else BREAKDOWN_VARIABLES[metric][0]
    table.attrs.update(
        source=ds.attrs.get("source", ""),
        kind="measured",
        metric=metric,
        threshold=threshold,
        rule=f"straggler when mean {metric} > (1 + {threshold}) x the median of the other ranks' means",
        units={"rank": "1", "steps": "count", "step_time": "s", "time_compute": "s",
               "time_comm_exposed": "s", "time_idle": "s", "time_work": "s", "metric": metric_units,
               "reference": metric_units, "ratio": "1", "zscore": "1", "straggler": "bool"},
    )
    return table
