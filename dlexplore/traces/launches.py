"""Kernel launches: how long the host takes to launch device work, how long it waits in the stream's
queue, which kernels are shorter than their launch, and how many operations each stream holds.

Every device event (kernel, copy, set) that a traced runtime call launched is linked to that call by
the trace's ``correlation`` id (PyTorch profiler and Nsight Systems traces have it). Per event:

``launch_duration``
    The runtime call's duration (``cudaLaunchKernel``, ``cudaMemcpyAsync`` ...): host time spent
    launching (s).
``launch_delay``
    From the start of the launch call to the start of the device event (s): launch overhead plus
    the time the event waited behind earlier work in its stream's queue.
``short``
    The device event ran for less time than its launch took (``duration < launch_duration``): the
    host cannot keep the device busy with such kernels, whatever the device's speed (HTA's "short
    kernels"; fuse them or capture them in a CUDA graph).

:func:`queue_length` counts, for each stream, the operations launched and not yet finished: it
steps up at each launch call's start and down at each device event's end. Device events whose
launch is not in the trace (launched before the profiler started) are left out of both, so the
count never goes below zero. :func:`launch_stats`' ``attrs["unlinked"]`` counts the device events
left out: those whose launch is not in the trace and those without a correlation id at all.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from .events import category_mask, device_streams, events_of

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["LAUNCH_COLUMNS", "launch_stats", "launch_summary", "queue_length", "queue_summary"]

#: Columns of :func:`launch_stats`: units and meaning.
LAUNCH_COLUMNS: dict[str, tuple[str, str]] = {
    "rank": ("1", "process rank"),
    "stream": ("", "device stream the event ran on"),
    "name": ("", "device event (kernel, copy, set)"),
    "category": ("", "event category"),
    "step": ("1", "step of the launch"),
    "launch": ("", "runtime call that launched it"),
    "launch_start": ("s", "start of the launch call"),
    "launch_duration": ("s", "duration of the launch call"),
    "start": ("s", "start of the device event"),
    "duration": ("s", "duration of the device event"),
    "launch_delay": ("s", "launch call start to device event start"),
    "short": ("bool", "the device event is shorter than its launch call"),
}
_DEVICE_WORK = ("compute", "communication", "memcpy", "memset")


def launch_stats(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """One row per device event with its launch call (module docstring): :data:`LAUNCH_COLUMNS`.

    Raises :class:`~dlexplore.errors.DlexploreError` when the trace has no ``correlation`` column
    (Horovod timelines, OTF2): launches cannot be linked to device work there.
    """
    events, source, fmt = events_of(trace)
    if "correlation" not in events.columns:
        raise DlexploreError(
            f"{source}: this trace has no correlation ids (format {fmt or 'unknown'}), so "
            "launches cannot be linked to device work; expected a PyTorch profiler or "
            "Nsight Systems trace"
        )
    corr = events["correlation"].to_numpy(dtype=np.float64, na_value=np.nan)
    on_device = device_streams(events)
    work = on_device & category_mask(events["category"], _DEVICE_WORK)
    uncorrelated = int((work & np.isnan(corr)).sum())  # unlinked too: no id to link them by
    device = np.flatnonzero(work & ~np.isnan(corr))
    runtime = np.flatnonzero(~on_device & category_mask(events["category"], ("runtime",)) & ~np.isnan(corr))
    rank = events["rank"].to_numpy(dtype=np.int64)
    launches = pd.Series(runtime, index=pd.MultiIndex.from_arrays([rank[runtime], corr[runtime]]))
    launches = launches[~launches.index.duplicated()]
    found = launches.reindex(pd.MultiIndex.from_arrays([rank[device], corr[device]])).to_numpy()
    linked = ~np.isnan(found)
    device, launch = device[linked], found[linked].astype(np.int64)
    start = events["start"].to_numpy(dtype=float)
    duration = events["duration"].to_numpy(dtype=float)
    table = pd.DataFrame(
        {
            "rank": rank[device],
            "stream": events["stream"].to_numpy()[device],
            "name": events["name"].to_numpy()[device],
            "category": events["category"].to_numpy()[device],
            "step": events["step"].array[launch],
            "launch": events["name"].to_numpy()[launch],
            "launch_start": start[launch],
            "launch_duration": duration[launch],
            "start": start[device],
            "duration": duration[device],
        }
    )
    table["launch_delay"] = table["start"] - table["launch_start"]
    table["short"] = table["duration"].to_numpy() < table["launch_duration"].to_numpy()
    for name in ("stream", "name", "category", "launch"):
        table[name] = table[name].astype(str).astype("category")
    table = table.sort_values(["rank", "launch_start"], kind="stable").reset_index(drop=True)
    table.attrs.update(
        source=source,
        format=fmt,
        kind="measured",
        title="kernel launches",
        units={n: u for n, (u, _) in LAUNCH_COLUMNS.items()},
        long_names={n: long for n, (_, long) in LAUNCH_COLUMNS.items()},
        unlinked=int((~linked).sum()) + uncorrelated,
    )
    if uncorrelated and not len(table):
        warnings.warn(
            f"{source}: none of its {uncorrelated} kernels, copies and memsets carries a correlation "
            "id, so none is linked to its launch call: the launch statistics are empty",
            stacklevel=2,
        )
    return table


def launch_summary(trace: Trace | pd.DataFrame | pd.DataFrame, *, by: str = "rank") -> xr.Dataset:
    """Launch statistics per rank (``by="rank"``) or per device event name (``by="name"``).

    Variables: ``launches`` (count), ``launch_duration_median``, ``launch_delay_median``,
    ``launch_delay_p95`` (s), ``short_kernels`` (count), ``short_fraction`` (1), ``time_short`` (s,
    device time in short kernels), ``time_device`` (s, device time of all linked events).
    ``trace`` may also be :func:`launch_stats` output.
    """
    if by not in ("rank", "name"):
        raise DlexploreError(f"launch_summary by must be 'rank' or 'name', got {by!r}")
    table = _launches(trace)
    grouped = table.groupby(by, observed=True, sort=True)
    frame = pd.DataFrame(
        {
            "launches": grouped.size(),
            "launch_duration_median": grouped["launch_duration"].median(),
            "launch_delay_median": grouped["launch_delay"].median(),
            "launch_delay_p95": grouped["launch_delay"].quantile(0.95),
            "short_kernels": grouped["short"].sum().astype(np.int64),
            "time_short": table.assign(t=table["duration"].where(table["short"], 0.0))
            .groupby(by, observed=True, sort=True)["t"]
            .sum(),
            "time_device": grouped["duration"].sum(),
        }
    )
    frame["short_fraction"] = frame["short_kernels"] / frame["launches"]
    units = {
        "launches": "count",
        "launch_duration_median": "s",
        "launch_delay_median": "s",
        "launch_delay_p95": "s",
        "short_kernels": "count",
        "short_fraction": "1",
        "time_short": "s",
        "time_device": "s",
    }
    ds = xr.Dataset.from_dataframe(frame.rename_axis(by))
    if by == "name":
        ds = ds.assign_coords(name=ds["name"].astype(str))
    for name, unit in units.items():
        ds[name].attrs.update(units=unit, long_name=name.replace("_", " "))
    ds.attrs.update(
        source=table.attrs.get("source", ""), kind="measured", title=f"kernel launch statistics per {by}"
    )
    return ds


def queue_length(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """Operations launched and not finished, per stream, as a step function of time.

    One row per change: ``rank``, ``stream``, ``time`` (s) and ``queue_length`` (count, from that
    time until the stream's next row). ``attrs["units"]`` says so.
    """
    table = _launches(trace)
    n = len(table)
    frame = pd.DataFrame(
        {
            "rank": np.concatenate([table["rank"].to_numpy(), table["rank"].to_numpy()]),
            "stream": np.concatenate([table["stream"].astype(str).to_numpy()] * 2),
            "time": np.concatenate(
                [table["launch_start"].to_numpy(), (table["start"] + table["duration"]).to_numpy()]
            ),
            "change": np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)]),
        }
    )
    # at equal times the launch counts first, so the count never dips below zero at a tie
    frame = frame.sort_values(
        ["rank", "stream", "time", "change"], ascending=[True, True, True, False], kind="stable"
    )
    frame["queue_length"] = frame.groupby(["rank", "stream"], sort=False)["change"].cumsum()
    out = frame.drop(columns="change").reset_index(drop=True)
    out["stream"] = out["stream"].astype("category")
    out.attrs.update(
        source=table.attrs.get("source", ""),
        kind="measured",
        title="operations queued on each stream (launched, not finished)",
        units={"rank": "1", "stream": "", "time": "s", "queue_length": "count"},
    )
    return out


def _launches(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """:func:`launch_stats` of a trace, or the table itself when it is one already."""
    if isinstance(trace, pd.DataFrame) and "launch_delay" in trace.columns:
        return trace
    return launch_stats(trace)


def queue_summary(trace: Trace | pd.DataFrame, **kwargs: Any) -> xr.Dataset:
    """Per (rank, stream): the largest and the time-weighted mean queue length (count), from
    :func:`queue_length`."""
    series = (
        trace
        if isinstance(trace, pd.DataFrame) and "queue_length" in trace.columns
        else queue_length(trace, **kwargs)
    )
    rows = []
    for (rank, stream), part in series.groupby(["rank", "stream"], observed=True, sort=True):
        time = part["time"].to_numpy()
        length = part["queue_length"].to_numpy(dtype=float)
        span = time[-1] - time[0]
        mean = float(np.sum(length[:-1] * np.diff(time)) / span) if span > 0 else float(length.max())
        rows.append({"rank": rank, "stream": str(stream), "queue_max": int(length.max()), "queue_mean": mean})
    frame = pd.DataFrame(rows, columns=["rank", "stream", "queue_max", "queue_mean"])
    ds = xr.Dataset.from_dataframe(frame.set_index(["rank", "stream"]))
    ds["queue_max"].attrs.update(units="count", long_name="largest queue length")
    ds["queue_mean"].attrs.update(units="count", long_name="time-weighted mean queue length")
    ds.attrs.update(source=series.attrs.get("source", ""), kind="measured", title="stream queue lengths")
    return ds
