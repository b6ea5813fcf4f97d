"""Where each rank's step time goes, measured from a trace: an ``xarray.Dataset`` on (rank, step).

**Steps partition each rank's timeline** (:func:`step_windows`): step ``s`` on rank ``r`` runs from
the start of its marker (``ProfilerStep#s``; a reader that marks no step events gives the step's
earliest event) to the start of the rank's next step; the last step runs to the later of its
marker's end and its last event's end. Nested or overlapping markers, and GPU work that runs on
while the host has moved to the next step, thus count once: the windows tile the timeline, and the
sum of ``step_time`` over steps is the rank's span from its first step to the end of its last.

Definitions, per rank ``r`` and step ``s`` (all times in seconds, on the rank's own clock), over
what happened on the rank *during the step's window* (whichever step an event was launched in):

``step_time``
    The window's length.
``time_compute``, ``time_comm``, ``time_memcpy``, ``time_memset``, ``time_data``
    The length of the *union* of the rank's intervals of that category (``compute``,
    ``communication``, ``memcpy``, ``memset``, ``data``) within the window, so nested CPU operators
    (``aten::linear`` inside ``aten::addmm`` ...) and work on parallel streams or threads count once.
``time_comm_exposed``
    Communication not overlapped by compute on that rank: the length of ``comm \\ compute``,
    computed as ``|comm U compute| - |compute|``.
``overlap_fraction``
    The fraction of communication hidden behind compute, ``1 - time_comm_exposed / time_comm``;
    NaN when the step has no communication.
``time_idle``
    ``step_time`` minus the union of all busy intervals (compute, communication, memcpy,
    memset, data) of that rank in the window.
``events``
    How many events carry step ``s`` on that rank (all categories; the reader's label: the step of
    the host op, or of the launch for GPU work).

Which streams count: on a rank whose trace has device streams (``cuda:<device>:<stream>``, and
other devices' ``mtia:``, ``hpu:``), compute, memcpy and memset count only on device streams (the
GPU's work; host-side launch calls are not the work itself), while ``data`` (data loading, a host
activity) counts on every stream. Communication counts on device streams on a rank whose device
runs communication (NCCL kernels: the host's ``nccl:*`` annotations and ``record_param_comms``
only launch them), and otherwise on the host where the event names its collective (MPI calls,
gloo). On a CPU-only rank every thread counts.

Time before a rank's first step (set-up) and after its last is left out; the events that carry no
step are in ``attrs["events_outside_steps"]``. A trace that marks no step at all is taken as one
step, numbered 0, spanning the whole trace on each rank (said in ``attrs["steps_note"]``).

Every union is computed without a Python loop per event or step
(:class:`~dlexplore.traces.intervals.BusyTime`): each rank's
intervals of a category set are merged once into disjoint segments, and the busy time within any
window is the difference of two binary-searched cumulative sums.

:func:`stragglers` compares ranks on the per-rank mean of one of these variables.

Kept whole: the breakdown per rank and step and the stragglers read from it: the same step windows
and busy time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from .events import COLLECTIVES, DEVICE_STREAM_PREFIXES, category_mask, device_streams, events_of
from .intervals import BusyTime

if TYPE_CHECKING:
    from .schema import Trace

__all__ = [
    "BREAKDOWN_VARIABLES",
    "DEVICE_STREAM_PREFIXES",
    "BusyTime",
    "breakdown",
    "step_windows",
    "stragglers",
]

#: Breakdown variables: units and long name. The names are the model's (DESIGN.md), so a measured
#: breakdown lays over :func:`dlexplore.predict` output.
BREAKDOWN_VARIABLES: dict[str, tuple[str, str]] = {
    "step_time": ("s", "time per training step (the step's window on the rank's timeline)"),
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


def step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """Each rank's steps as a partition of its timeline: one row per (rank, step).

    A step begins where its marker begins (the earliest ``step``-category event of that number on
    the rank, e.g. ``ProfilerStep#N``; where a reader marks none, its earliest event) and ends where
    the rank's next step begins; the last step ends at the later of its marker's end and its last
    event's end (GPU work trails the host). So nested or overlapping markers, and device work that
    runs on while the host is in the next step, neither count twice nor leave gaps: the windows
    tile the rank's timeline from its first step to its last. Columns ``rank``, ``step``,
    ``begin``, ``end`` (s).
    """
    step = events["step"]
    has = step.notna().to_numpy(dtype=bool).copy()
    start = events["start"].to_numpy(dtype=float)
    end = start + events["duration"].to_numpy(dtype=float)
    has &= np.isfinite(start) & np.isfinite(end)
    if not has.any():
        return pd.DataFrame(
            {
                "rank": pd.Series(dtype=np.int64),
                "step": pd.Series(dtype=np.int64),
                "begin": pd.Series(dtype=float),
                "end": pd.Series(dtype=float),
            }
        )
    marker = category_mask(events["category"], ("step",))[has]
    rank = events["rank"].to_numpy(dtype=np.int64)[has]
    number = step.to_numpy(dtype=np.int64, na_value=-1)[has]
    start, end = start[has], end[has]
    # per (rank, step), in that order: numpy's reductions over the sorted runs (a pandas groupby
    # with four named aggregations cost more than the rest of the breakdown on small traces)
    order = np.lexsort((number, rank))
    rank, number, start, end, marker = rank[order], number[order], start[order], end[order], marker[order]
    runs = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (number[1:] != number[:-1])])
    first = np.minimum.reduceat(start, runs)
    last = np.maximum.reduceat(end, runs)
    marker_start = np.fmin.reduceat(np.where(marker, start, np.nan), runs)  # NaN: no marker
    marker_end = np.fmax.reduceat(np.where(marker, end, np.nan), runs)
    windows = pd.DataFrame(
        {
            "rank": rank[runs],
            "step": number[runs],
            "begin": np.where(np.isnan(marker_start), first, marker_start),
            "marker_end": marker_end,
            "last": last,
        }
    ).sort_values(["rank", "begin", "step"], kind="stable")
    rank = windows["rank"].to_numpy()
    begin = windows["begin"].to_numpy()
    following = np.append(begin[1:], np.nan)
    last_of_rank = np.append(rank[1:] != rank[:-1], True)
    tail = np.fmax(windows["marker_end"].to_numpy(), windows["last"].to_numpy())
    windows["end"] = np.where(last_of_rank, tail, following)
    return windows[["rank", "step", "begin", "end"]].reset_index(drop=True)


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
    events, source, fmt = events_of(trace)
    n_all = len(events)
    has_step = events["step"].notna().to_numpy(dtype=bool) if n_all else np.zeros(0, dtype=bool)
    steps_note = "steps partition each rank's timeline (step_window); events with no step are counted by time"
    if n_all and not has_step.any():
        events = events.assign(step=pd.array(np.zeros(n_all, dtype=np.int64), dtype="Int64"))
        steps_note = "the trace marks no steps: the whole trace on each rank is one step, numbered 0"
    windows = step_windows(events) if n_all else step_windows(events.iloc[:0])
    if steps is not None:
        wanted = np.unique(np.asarray(list(steps), dtype=np.int64))
        windows = windows[windows["step"].isin(wanted)].reset_index(drop=True)
    rank_coords, step_coords = np.unique(windows["rank"].to_numpy()), np.unique(windows["step"].to_numpy())
    n_r, n_s = len(rank_coords), len(step_coords)
    w_rank = np.searchsorted(rank_coords, windows["rank"].to_numpy())
    w_step = np.searchsorted(step_coords, windows["step"].to_numpy())
    cell = w_rank * n_s + w_step
    data = {name: np.full(n_r * n_s, np.nan) for name in BREAKDOWN_VARIABLES if name != "events"}
    if len(windows):
        begin, end = windows["begin"].to_numpy(), windows["end"].to_numpy()
        covered = _coverage(events, rank_coords, w_rank, begin, end)
        compute, comm = covered(("compute",)), covered(("communication",))
        window = end - begin
        data["step_time"][cell] = window
        data["time_compute"][cell] = compute
        data["time_comm"][cell] = comm
        # Never below zero: the two unions are sums of differences and may round differently.
        exposed = np.clip(covered(("compute", "communication")) - compute, 0.0, comm)
        data["time_comm_exposed"][cell] = exposed
        with np.errstate(divide="ignore", invalid="ignore"):
            data["overlap_fraction"][cell] = np.where(comm > 0, 1.0 - exposed / comm, np.nan)
        data["time_memcpy"][cell] = covered(("memcpy",))
        data["time_memset"][cell] = covered(("memset",))
        data["time_data"][cell] = covered(("data",))
        data["time_idle"][cell] = np.maximum(window - covered(_BUSY), 0.0)
    count = _events_per_cell(events, rank_coords, step_coords)
    return _breakdown_dataset(
        data,
        count,
        rank_coords,
        step_coords,
        source,
        fmt,
        steps_note,
        int(n_all - has_step.sum()) if has_step.any() else 0,
    )


def _coverage(
    events: pd.DataFrame, rank_coords: np.ndarray, w_rank: np.ndarray, begin: np.ndarray, end: np.ndarray
):
    """A function: category names -> busy time of those categories within each window (s)."""
    start_all = events["start"].to_numpy(dtype=float)
    end_all = start_all + events["duration"].to_numpy(dtype=float)
    rank_all = events["rank"].to_numpy(dtype=np.int64)
    position = np.searchsorted(rank_coords, rank_all)
    known = (position < len(rank_coords)) & np.isfinite(start_all) & np.isfinite(end_all)
    known[known] &= rank_coords[position[known]] == rank_all[known]
    on_device = device_streams(events)
    category = events["category"]
    where = np.minimum(position, len(rank_coords) - 1)
    # A rank is a GPU rank when any of its events is on a device stream; its communication is the
    # device's when any of its communication events is (NCCL); else the host's (MPI, gloo).
    gpu_rank = np.bincount(position[on_device & known], minlength=len(rank_coords)) > 0
    is_comm = category_mask(category, ("communication",))
    device_comm_rank = np.bincount(position[on_device & known & is_comm], minlength=len(rank_coords)) > 0
    # host communication that does the work names its collective (MPI_Send, gloo:all_reduce); the
    # host's NCCL calls (nccl:*, c10d::*, record_param_comms) name none: they only launch kernels
    names_collective = (
        category_mask(events["collective"], tuple(c for c in COLLECTIVES))
        if "collective" in events.columns
        else np.zeros(len(events), dtype=bool)
    )
    host_comm_ok = ~device_comm_rank[where] & (names_collective | ~gpu_rank[where])
    counts_as_device = on_device | np.where(is_comm, host_comm_ok, ~gpu_rank[where])
    origin = float(min(start_all[known].min(), begin.min())) if known.any() else float(begin.min())
    span = float(max(end_all[known].max() if known.any() else 0.0, end.max()) - origin)

    def covered(names: tuple[str, ...]) -> np.ndarray:
        selected = category_mask(category, names) & known
        device_names = tuple(n for n in names if n in _DEVICE_ONLY)
        if device_names:
            selected &= counts_as_device | ~category_mask(category, device_names)
        busy = BusyTime(position[selected], start_all[selected], end_all[selected], origin, span)
        return np.maximum(busy.covered(w_rank, begin, end), 0.0)

    return covered


def _events_per_cell(events: pd.DataFrame, rank_coords: np.ndarray, step_coords: np.ndarray) -> np.ndarray:
    """How many events carry each (rank, step), in the dataset's cell order."""
    count = np.zeros(len(rank_coords) * len(step_coords), dtype=np.int64)
    if not len(events) or not len(count):
        return count
    rank = events["rank"].to_numpy(dtype=np.int64)
    step = events["step"].to_numpy(dtype=np.int64, na_value=np.iinfo(np.int64).min)
    r, s = np.searchsorted(rank_coords, rank), np.searchsorted(step_coords, step)
    ok = (r < len(rank_coords)) & (s < len(step_coords))
    ok[ok] &= (rank_coords[r[ok]] == rank[ok]) & (step_coords[s[ok]] == step[ok])
    return np.bincount(r[ok] * len(step_coords) + s[ok], minlength=len(count))


def _breakdown_dataset(
    data: dict[str, np.ndarray],
    count: np.ndarray,
    rank_coords: np.ndarray,
    step_coords: np.ndarray,
    source: str,
    fmt: str,
    steps_note: str,
    outside: int,
) -> xr.Dataset:
    shape = (len(rank_coords), len(step_coords))
    variables = {}
    for name, (units, long_name) in BREAKDOWN_VARIABLES.items():
        values = count if name == "events" else data[name]
        variables[name] = (("rank", "step"), values.reshape(shape), {"units": units, "long_name": long_name})
    ds = xr.Dataset(
        variables,
        coords={
            "rank": ("rank", rank_coords.astype(np.int64), {"units": "1", "long_name": "process rank"}),
            "step": ("step", step_coords.astype(np.int64), {"units": "1", "long_name": "training step"}),
        },
    )
    ds.attrs.update(
        source=source,
        kind="measured",
        format=fmt,
        title="measured time breakdown per rank and step",
        step_window="steps partition the rank's timeline: from the step's marker (ProfilerStep#N) to the "
        "next step's; the last to its last event",
        busy_streams="device streams (cuda:*) on ranks that have them (data loading: every stream); "
        "every thread on CPU-only ranks",
        steps_note=steps_note,
        events_outside_steps=outside,
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


def stragglers(
    trace: Trace | pd.DataFrame | xr.Dataset,
    *,
    threshold: float = 0.1,
    metric: str = "time_work",
    steps: Any = None,
) -> pd.DataFrame:
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
    for name, values in (
        ("step_time", ds["step_time"]),
        ("time_compute", ds["time_compute"]),
        ("time_comm_exposed", ds["time_comm_exposed"]),
        ("time_idle", ds["time_idle"]),
        ("time_work", work),
    ):
        means[name] = (
            values.mean("step", skipna=True).values if ds.sizes["step"] else np.full(ds.sizes["rank"], np.nan)
        )
        columns[name] = means[name]
    if metric in means:
        value = means[metric]
    else:
        value = (
            ds[metric].mean("step", skipna=True).values
            if ds.sizes["step"]
            else np.full(ds.sizes["rank"], np.nan)
        )
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
        units={
            "rank": "1",
            "steps": "count",
            "step_time": "s",
            "time_compute": "s",
            "time_comm_exposed": "s",
            "time_idle": "s",
            "time_work": "s",
            "metric": metric_units,
            "reference": metric_units,
            "ratio": "1",
            "zscore": "1",
            "straggler": "bool",
        },
    )
    return table
