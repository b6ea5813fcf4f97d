"""The critical path of one step on one rank: the chain of events that set the step's length.

The step's events form a dependency graph (as HTA's critical path analysis builds it):

- on each host thread, an operation waits for the one before it (the innermost operations: an
  ``aten::linear`` stands for itself, not for the ``nn.Module`` range around it);
- a device event (kernel, copy, set, communication kernel) waits for its launch (the runtime call
  with the same ``correlation``) and for the event before it on its stream;
- a synchronising runtime call (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, ``cudaStreamWaitEvent``, a synchronous ``cudaMemcpy``) waits for the
  device work that finished last before it returned;
- any event may wait for what ran last, on any thread or stream of the rank, before it started (a
  thread handing work to another, the autograd engine's backward thread): traces record no event
  for such waits, so the last arrival stands in for them, and only a gap in which nothing ran is
  idle.

The path is found backwards from the event that finishes last in the step's window
(:func:`dlexplore.traces.breakdown.step_windows`): each event's *gate* is, among the events it waits
for, the one that finished last; the walk follows gates until the window's start. Each event on
the path contributes the time from its gate's end (or its own start, if later) to its end, and a
gap between a gate's end and the event's start is ``idle`` (nothing the trace shows held it back:
Python, the OS, a profiler gap). So the contributions add up to the window, and say what the step
time is made of: ``cpu`` (host operators), ``runtime`` (CUDA runtime and driver calls: launches,
allocations, context set-up), ``sync`` (host waiting in a synchronising call), ``compute``,
``communication``, ``memcpy``, ``memset`` (device work), ``data`` (data loading), ``idle``.

The what-if replay (:mod:`dlexplore.sim`) moves every event of a trace under changed parameters;
the critical path of a replayed scenario, ``critical_path(replay_events(result, k))``, shows how
the chain changes (speeding up work off the path does not shorten the step; speeding up the path
may move it elsewhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from .breakdown import step_windows
from .events import device_streams, events_of

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["PATH_PARTS", "critical_path", "critical_path_summary"]

#: What the path's time is made of, in the order plots stack it.
PATH_PARTS = ("compute", "communication", "memcpy", "memset", "cpu", "runtime", "sync", "data", "idle")
_SYNC = ("Synchronize", "StreamWaitEvent", "cudaMemcpy", "hipMemcpy", "cudaMemset", "hipMemset")
_ASYNC = "Async"
_HOST = ("cpu", "compute", "communication", "data", "runtime", "memcpy", "memset")
_DEVICE = ("compute", "communication", "memcpy", "memset")


def _window(events: pd.DataFrame, rank: int | None, step: int | None) -> tuple[int, int, float, float]:
    windows = step_windows(events)
    if not len(windows):
        start = events["start"].to_numpy(dtype=float)
        end = start + events["duration"].to_numpy(dtype=float)
        ranks = np.unique(events["rank"].to_numpy())
        r = int(ranks[0] if rank is None else rank)
        mine = events["rank"].to_numpy() == r
        if not mine.any():
            raise DlexploreError(f"no rank {rank} in the trace; ranks: {ranks.tolist()}")
        return r, 0, float(start[mine].min()), float(end[mine].max())
    if rank is not None:
        windows = windows[windows["rank"] == rank]
        if not len(windows):
            raise DlexploreError(f"no rank {rank} in the trace's steps")
    r = int(windows["rank"].iloc[0])
    mine = windows[windows["rank"] == r]
    if step is None:  # the middle step but the last, which the profiler may have cut short
        full = mine.iloc[:-1] if len(mine) > 1 else mine
        row = full.iloc[len(full) // 2]
    else:
        chosen = mine[mine["step"] == step]
        if not len(chosen):
            raise DlexploreError(f"no step {step} on rank {r}; steps: {mine['step'].tolist()}")
        row = chosen.iloc[0]
    return r, int(row["step"]), float(row["begin"]), float(row["end"])


def _nodes(events: pd.DataFrame, rank: int, begin: float, end: float) -> pd.DataFrame:
    """The graph's nodes: the rank's device work in the window, and each host thread's time cut
    into pieces, each owned by the innermost operation running then (its exclusive time)."""
    start = events["start"].to_numpy(dtype=float)
    stop = start + events["duration"].to_numpy(dtype=float)
    category = events["category"].astype(str).to_numpy()
    on_device = device_streams(events)
    inside = (events["rank"].to_numpy() == rank) & (stop > begin) & (start < end)
    chosen = inside & ((on_device & np.isin(category, _DEVICE)) | (~on_device & np.isin(category, _HOST)))
    rows = np.flatnonzero(chosen)
    frame = pd.DataFrame(
        {
            "row": rows,
            "start": start[rows],
            "end": stop[rows],
            "lane": events["stream"].astype(str).to_numpy()[rows],
            "category": category[rows],
            "device": on_device[rows],
            "name": events["name"].astype(str).to_numpy()[rows],
            "correlation": (
                events["correlation"].to_numpy(dtype=float, na_value=np.nan)[rows]
                if "correlation" in events.columns
                else np.full(len(rows), np.nan)
            ),
        }
    )
    device = frame[frame["device"]]
    pieces = [_exclusive(part) for _, part in frame[~frame["device"]].groupby("lane", sort=False)]
    nodes = pd.concat([device, *pieces], ignore_index=True)
    return nodes.sort_values(["lane", "start", "end"], kind="stable").reset_index(drop=True)


def _exclusive(ops: pd.DataFrame) -> pd.DataFrame:
    """One thread's operations as non-overlapping pieces, each owned by the innermost operation."""
    ops = ops.sort_values(["start", "end"], ascending=[True, False], kind="stable")
    starts, ends = ops["start"].to_numpy(), ops["end"].to_numpy()
    pieces: list[tuple[int, float, float]] = []
    stack: list[int] = []
    now = -np.inf

    def close_until(t: float) -> float:
        nonlocal now
        while stack and ends[stack[-1]] <= t:
            top = stack.pop()
            if ends[top] > now:
                pieces.append((top, now, ends[top]))
                now = ends[top]
        return now

    for i in range(len(ops)):
        close_until(starts[i])
        if stack and starts[i] > now:
            pieces.append((stack[-1], now, starts[i]))
        now = max(now, starts[i])
        stack.append(i)
    close_until(np.inf)
    index = np.fromiter((p[0] for p in pieces), dtype=np.int64, count=len(pieces))
    out = ops.iloc[index].copy()
    out["start"] = [p[1] for p in pieces]
    out["end"] = [p[2] for p in pieces]
    return out[out["end"] > out["start"]]


def critical_path(
    trace: Trace | pd.DataFrame, *, rank: int | None = None, step: int | None = None
) -> pd.DataFrame:
    """The events on the critical path of one step on one rank, in time order (module docstring).

    ``rank`` defaults to the lowest, ``step`` to the rank's middle step (leaving out the last, which
    the profiler may have cut short). Columns: ``name``,
    ``lane`` (thread or stream), ``category``, ``part`` (what its time counts as:
    :data:`PATH_PARTS`), ``start``, ``end`` (s), ``gate_end`` (s, when what it waited for ended),
    ``critical`` (s, its contribution), ``idle_before`` (s, gap before it). ``attrs``: ``rank``,
    ``step``, ``window`` (s, begin and end), ``source``.
    """
    events, source, _ = events_of(trace)
    if not len(events):
        raise DlexploreError("an empty trace has no critical path")
    r, s, begin, end = _window(events, rank, step)
    nodes = _nodes(events, r, begin, end)
    if not len(nodes):
        raise DlexploreError(f"rank {r} step {s}: no host operation or device work in the step")
    path = _walk(nodes, begin, end)
    path.attrs.update(
        source=source,
        kind="measured",
        rank=r,
        step=s,
        window=(begin, end),
        title=f"critical path of step {s} on rank {r}",
        units={"start": "s", "end": "s", "gate_end": "s", "critical": "s", "idle_before": "s"},
    )
    return path


def _walk(nodes: pd.DataFrame, begin: float, end: float) -> pd.DataFrame:
    start, stop = nodes["start"].to_numpy(), nodes["end"].to_numpy()
    lane = nodes["lane"].to_numpy()
    device = nodes["device"].to_numpy()
    category = nodes["category"].to_numpy()
    names = nodes["name"].to_numpy()
    previous = np.where(np.append(False, lane[1:] == lane[:-1]), np.arange(len(nodes)) - 1, -1)
    launch_of = _launches(nodes)
    sync = (
        ~device
        & (category == "runtime")
        & np.array([any(k in n for k in _SYNC) and _ASYNC not in n for n in names], dtype=bool)
    )
    device_rows = np.flatnonzero(device)
    device_by_end = device_rows[np.argsort(stop[device_rows], kind="stable")]
    ends_sorted = stop[device_by_end]
    by_end = np.argsort(stop, kind="stable")
    stop_sorted = stop[by_end]
    current = int(np.argmax(np.minimum(stop, end)))
    chain, gates = [], []
    seen = set()
    while current >= 0 and current not in seen:
        seen.add(current)
        candidates = [previous[current]]
        if device[current]:
            candidates.append(launch_of.get(current, -1))
        elif sync[current]:  # the device work that finished last before the call returned
            k = int(np.searchsorted(ends_sorted, stop[current], side="right")) - 1
            if k >= 0 and ends_sorted[k] > start[current]:
                candidates.append(int(device_by_end[k]))
        # what ran last (on any thread or stream) before it started: another thread it waited
        # for (the autograd engine's, a data loader's), or nothing, and the gap is idle
        k = int(np.searchsorted(stop_sorted, start[current], side="right")) - 1
        if k >= 0:
            candidates.append(int(by_end[k]))
        candidates = [
            c for c in candidates if c >= 0 and stop[c] <= stop[current] and start[c] < stop[current]
        ]
        gate = max(candidates, key=lambda c: stop[c]) if candidates else -1
        chain.append(current)
        gates.append(gate)
        if gate < 0 or stop[gate] <= begin:
            break
        current = gate
    order = chain[::-1]
    gate_end = np.array([max(stop[g], begin) if g >= 0 else begin for g in gates[::-1]])
    own_start = np.maximum(start[order], begin)
    critical = np.clip(np.minimum(stop[order], end) - np.maximum(gate_end, own_start), 0.0, None)
    idle = np.clip(own_start - gate_end, 0.0, None)
    part = [_part(category[i], device[i], sync[i], names[i]) for i in order]
    out = pd.DataFrame(
        {
            "name": names[order],
            "lane": lane[order],
            "category": category[order],
            "part": part,
            "start": start[order],
            "end": stop[order],
            "gate_end": gate_end,
            "critical": critical,
            "idle_before": idle,
        }
    )
    out.attrs["tail_idle"] = max(end - float(stop[order[-1]]), 0.0) if order else end - begin
    return out


def _launches(nodes: pd.DataFrame) -> dict[int, int]:
    """Device node -> the runtime node that launched it (same correlation)."""
    corr = nodes["correlation"].to_numpy()
    runtime = np.flatnonzero(
        ~nodes["device"].to_numpy() & (nodes["category"].to_numpy() == "runtime") & ~np.isnan(corr)
    )
    by_corr = dict(zip(corr[runtime].tolist(), runtime.tolist(), strict=True))
    device = np.flatnonzero(nodes["device"].to_numpy() & ~np.isnan(corr))
    return {
        int(d): by_corr[c]
        for d, c in zip(device.tolist(), corr[device].tolist(), strict=True)
        if c in by_corr
    }


def _part(category: str, device: bool, sync: bool, name: str) -> str:
    if device or category in ("compute", "communication", "memcpy", "memset"):
        return category  # on the host too: CPU-only ranks compute there, gloo communicates there
    if category == "runtime":
        return "sync" if sync else "runtime"
    if category == "data":
        return "data"
    return "cpu"


def critical_path_summary(path: pd.DataFrame) -> xr.Dataset:
    """What the critical path's time is made of: one variable per :data:`PATH_PARTS` (s), their sum
    ``step_time`` (s, the window) and each part's ``fraction`` of it (1), on a ``part`` dimension."""
    begin, end = path.attrs["window"]
    seconds = path.groupby("part")["critical"].sum().reindex(list(PATH_PARTS), fill_value=0.0)
    seconds["idle"] += float(path["idle_before"].sum()) + float(path.attrs.get("tail_idle", 0.0))
    window = end - begin
    values = seconds.to_numpy(dtype=float)
    fraction = values / window if window > 0 else np.full(len(values), np.nan)
    ds = xr.Dataset(
        {
            "time": ("part", values, {"units": "s", "long_name": "time on the critical path"}),
            "fraction": ("part", fraction, {"units": "1", "long_name": "fraction of the step time"}),
        },
        coords={"part": ("part", list(PATH_PARTS), {"long_name": "what the time is spent on"})},
    )
    ds["step_time"] = xr.DataArray(window, attrs={"units": "s", "long_name": "step window"})
    ds.attrs.update(
        source=path.attrs.get("source", ""),
        kind="measured",
        rank=path.attrs.get("rank"),
        step=path.attrs.get("step"),
        title=path.attrs.get("title", "critical path"),
        events_on_path=len(path),
    )
    return ds
