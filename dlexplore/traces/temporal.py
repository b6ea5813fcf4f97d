"""How busy each rank's devices were over the whole trace: the temporal breakdown HTA users know.

HolisticTraceAnalysis' ``get_temporal_breakdown`` splits, per rank, the time from the start of the
first GPU event to the end of the last into *idle* (no GPU event running), *compute* (compute
kernels running) and *non-compute* (the rest: only communication or memory kernels running).
:func:`temporal_breakdown` computes the same, plus communication and memory copies on their own,
from dlexplore's event table, in seconds:

``time_span``
    From the start of the rank's first device event to the end of its last (HTA's
    ``kernel_time``).
``time_compute``, ``time_comm``, ``time_memcpy``
    The union of the rank's device intervals of that kind (``memcpy`` includes memsets, as HTA's
    memory kernels do), across all its streams and devices.
``time_non_compute``
    ``time_span - time_idle - time_compute``: when the devices ran only communication or copies.
``time_idle``
    ``time_span`` minus the union of all device events.

Device events are the ``compute``, ``communication``, ``memcpy`` and ``memset`` events on device
streams (:data:`dlexplore.traces.breakdown.DEVICE_STREAM_PREFIXES`). Where dlexplore differs from
HTA 0.5 on purpose:

- GPU synchronisation events (Kineto's ``cuda_sync``: ``Stream Sync``, ``Context Sync``, ``Stream
  Wait Event``) are not device work here; HTA counts them as busy time (``Stream Wait Event`` as
  compute). They are the device *waiting*.
- Times are not rounded: HTA rounds nanosecond-resolution traces to whole microseconds (start up,
  end down), which shortens every event by up to 1 µs.
- By default every device event of the trace counts. ``exclude_last_step=True`` keeps, as HTA does,
  only the work launched within the steps before each rank's last one (HTA assumes the profiler cut
  the last step short; work launched before the profiler started, whose launch is not in the trace,
  is left out too). HTA also keeps work launched before the first step; dlexplore does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from .events import category_mask, device_streams, events_of
from .intervals import BusyTime

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["TEMPORAL_VARIABLES", "temporal_breakdown"]

#: Variables of :func:`temporal_breakdown`: units and long name.
TEMPORAL_VARIABLES: dict[str, tuple[str, str]] = {
    "time_span": ("s", "from the first device event's start to the last one's end"),
    "time_compute": ("s", "device time with a compute kernel running"),
    "time_comm": ("s", "device time with a communication kernel running"),
    "time_memcpy": ("s", "device time with a memory copy or set running"),
    "time_non_compute": ("s", "device time with only communication or memory kernels running"),
    "time_idle": ("s", "device time with nothing running"),
    "idle_fraction": ("1", "time_idle / time_span"),
    "compute_fraction": ("1", "time_compute / time_span"),
    "non_compute_fraction": ("1", "time_non_compute / time_span"),
}
_DEVICE_WORK = ("compute", "communication", "memcpy", "memset")


def temporal_breakdown(
    trace: Trace | pd.DataFrame, *, steps: Any = None, exclude_last_step: bool = False
) -> xr.Dataset:
    """Per rank, the device's span split into compute, non-compute and idle time (module docstring).

    Parameters
    ----------
    trace:
        A :class:`~dlexplore.traces.schema.Trace` or its event table.
    steps:
        Only the device events of these steps (the step their launch was in); ``None``: all.
    exclude_last_step:
        Only the device events launched in a step before each rank's last one, as HTA counts.

    Returns
    -------
    xarray.Dataset
        Dim ``rank``; :data:`TEMPORAL_VARIABLES` with units. Ranks without device events are
        left out (a CPU-only trace gives an empty dataset, said in ``attrs["note"]``).
    """
    events, source, fmt = events_of(trace)
    keep = (
        device_streams(events) & category_mask(events["category"], _DEVICE_WORK)
        if len(events)
        else np.zeros(0, dtype=bool)
    )
    start = events["start"].to_numpy(dtype=float)
    end = start + events["duration"].to_numpy(dtype=float)
    keep &= np.isfinite(start) & np.isfinite(end)
    rank = events["rank"].to_numpy(dtype=np.int64)
    step = (
        events["step"].to_numpy(dtype=np.int64, na_value=np.iinfo(np.int64).min)
        if len(events)
        else np.zeros(0, dtype=np.int64)
    )
    if steps is not None:
        keep &= np.isin(step, np.asarray(list(steps), dtype=np.int64))
    if exclude_last_step and keep.any():
        labelled = events["step"].notna().to_numpy(dtype=bool)
        last = pd.Series(step[labelled]).groupby(rank[labelled]).max()  # the host's last step
        last = last.reindex(rank).to_numpy(dtype=float)
        stepless = np.isnan(last)  # a rank that marks no step: all its work counts, as in HTA
        keep &= stepless | (labelled & (step != np.nan_to_num(last, nan=-1).astype(np.int64)))
    ranks = np.unique(rank[keep])
    position = np.searchsorted(ranks, rank)
    first = np.full(len(ranks), np.inf)
    last = np.full(len(ranks), -np.inf)
    np.minimum.at(first, position[keep], start[keep])
    np.maximum.at(last, position[keep], end[keep])
    data: dict[str, np.ndarray] = {}
    if len(ranks):
        origin, span = float(first.min()), float(last.max() - first.min())
        index = np.arange(len(ranks))

        def covered(*names: str) -> np.ndarray:
            chosen = keep & category_mask(events["category"], names)
            busy = BusyTime(position[chosen], start[chosen], end[chosen], origin, span)
            return busy.covered(index, first, last)

        data["time_span"] = last - first
        data["time_compute"] = covered("compute")
        data["time_comm"] = covered("communication")
        data["time_memcpy"] = covered("memcpy", "memset")
        data["time_idle"] = np.maximum(data["time_span"] - covered(*_DEVICE_WORK), 0.0)
        rest = data["time_span"] - data["time_idle"] - data["time_compute"]
        data["time_non_compute"] = np.maximum(rest, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            for name, part in (
                ("idle_fraction", "time_idle"),
                ("compute_fraction", "time_compute"),
                ("non_compute_fraction", "time_non_compute"),
            ):
                data[name] = np.where(data["time_span"] > 0, data[part] / data["time_span"], np.nan)
    variables = {
        name: ("rank", data.get(name, np.zeros(0)), {"units": units, "long_name": long_name})
        for name, (units, long_name) in TEMPORAL_VARIABLES.items()
    }
    ds = xr.Dataset(variables, coords={"rank": ("rank", ranks, {"units": "1", "long_name": "process rank"})})
    ds.attrs.update(
        source=source,
        kind="measured",
        format=fmt,
        title="device time per rank: compute, non-compute (communication, copies) and idle",
        device_events="compute, communication, memcpy, memset events on device streams",
        steps="all" if steps is None else str(sorted(set(steps))),
        exclude_last_step=int(bool(exclude_last_step)),
        note="" if len(ranks) else "no device events: a CPU-only trace",
    )
    return ds
