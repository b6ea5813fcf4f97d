"""Memory over time, from the allocator's events of a trace (PyTorch's ``profile_memory=True``).

Each ``[memory]`` event of the PyTorch profiler is one allocation (``Bytes`` > 0) or release (< 0)
by PyTorch's allocator on one device, at one time; recent releases add the allocator's totals after
the event (``Total Allocated``, ``Total Reserved``). :func:`memory_timeline` turns them into the
memory in use per (rank, device) as a step function of time:

``allocated``
    ``Total Allocated`` where the trace gives it; else the running sum of ``Bytes`` from the first
    event, which counts from what was allocated when the profiler started (unknown): the curve's
    shape and its rises are right, its level is relative (``attrs["baseline"]`` says which).
``reserved``
    ``Total Reserved`` (the caching allocator's pool), NaN where the trace does not give it.

:func:`memory_summary` gives the peak and the range per (rank, device).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["memory_summary", "memory_timeline"]


def memory_timeline(trace: Trace) -> pd.DataFrame:
    """Memory in use per rank and device after each allocator event (module docstring).

    Columns: ``rank``, ``device``, ``time`` (s, the trace's time axis), ``bytes`` (the event's
    change), ``allocated`` and ``reserved`` (bytes, from then until the device's next row),
    ``relative`` (bool: ``allocated`` counts from the first event, the trace giving no totals).
    Raises :class:`~dlexplore.errors.DlexploreError` when the trace has no memory events.
    """
    memory = getattr(trace, "memory", None)
    if memory is None or not len(memory):
        raise DlexploreError(
            f"{getattr(trace, 'source', 'this trace')}: no memory events; {_why_none(trace)}"
        )
    table = memory.sort_values(["rank", "device", "time"], kind="stable").reset_index(drop=True)
    running = table.groupby(["rank", "device"], observed=True, sort=False)["bytes"].cumsum()
    relative = table["allocated"].isna().to_numpy()
    allocated = np.where(relative, running.to_numpy(dtype=float), table["allocated"].to_numpy(dtype=float))
    out = pd.DataFrame(
        {
            "rank": table["rank"].to_numpy(),
            "device": table["device"],
            "time": table["time"].to_numpy(),
            "bytes": table["bytes"].to_numpy(dtype=float),
            "allocated": allocated,
            "reserved": table["reserved"].to_numpy(dtype=float),
            "relative": relative,
        }
    )
    out.attrs.update(
        source=getattr(trace, "source", ""),
        kind="measured",
        title="memory in use per device",
        units={
            "rank": "1",
            "device": "",
            "time": "s",
            "bytes": "bytes",
            "allocated": "bytes",
            "reserved": "bytes",
            "relative": "bool",
        },
        baseline="allocated is the allocator's total where the trace gives it, else the running sum "
        "of the events since the first one (relative = True)",
    )
    return out


def memory_summary(trace: Trace | pd.DataFrame) -> xr.Dataset:
    """Per (rank, device): ``peak_allocated``, ``min_allocated``, ``peak_reserved`` (bytes),
    ``events`` (count) and ``relative`` (1 when the levels count from the first event)."""
    timeline = trace if isinstance(trace, pd.DataFrame) else memory_timeline(trace)
    grouped = timeline.groupby(["rank", "device"], observed=True, sort=True)
    frame = pd.DataFrame(
        {
            "peak_allocated": grouped["allocated"].max(),
            "min_allocated": grouped["allocated"].min(),
            "peak_reserved": grouped["reserved"].max(),
            "events": grouped.size().astype(np.int64),
            "relative": grouped["relative"].any().astype(np.int64),
        }
    )
    frame.index = frame.index.set_levels(frame.index.levels[1].astype(str), level=1)
    ds = xr.Dataset.from_dataframe(frame)
    for name, units in (
        ("peak_allocated", "bytes"),
        ("min_allocated", "bytes"),
        ("peak_reserved", "bytes"),
        ("events", "count"),
        ("relative", "1"),
    ):
        ds[name].attrs.update(units=units, long_name=name.replace("_", " "))
    ds.attrs.update(
        source=timeline.attrs.get("source", ""), kind="measured", title="memory per rank and device"
    )
    return ds


def _why_none(trace: Any) -> str:
    """What to do about a trace without memory events: its header may say memory was profiled."""
    ranks = (getattr(trace, "meta", None) or {}).get("ranks") or {}
    if not any(info.get("profile_memory") for info in ranks.values() if isinstance(info, dict)):
        return "record them with torch.profiler.profile(profile_memory=True)"
    events = getattr(trace, "events", None)
    host_ops = "cpu" if trace.meta.get("device") == "cuda" else "compute"  # (a CPU-only trace's)
    if events is not None and "category" in events and (events["category"] == host_ops).any():
        return "its header says profile_memory=True: the run allocated and freed nothing while profiled"
    return (
        "its header says profile_memory=True, but PyTorch records memory events with the CPU "
        "activity, and this trace holds no CPU operator: either that activity was not recorded "
        "(profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) or no operator "
        "ran while profiled"
    )
