"""The dependency graph of a measured iteration, read off the event table of every rank.

The trace is cut into **lanes** and **collectives**, and tied together by **dependencies**.

Lanes
    Every stream of a rank (a host thread, a CUDA stream) with busy events: categories
    :data:`BUSY_CATEGORIES` (``step``, ``annotation`` and ``other`` events, such as
    ``ProfilerStep#N``, ``DistributedDataParallel.forward`` or Python frames, wrap work and waits
    alike, so they ride along but never make a lane busy), leaving out the collective operations
    themselves. A lane is cut into **segments** at its **nodes**: the points where something else
    can hold it back. Between two nodes the lane runs as measured, except that its compute
    (the union of its ``compute`` events) is divided by the compute factor; gaps, data loading and
    host-side communication calls keep their length. Each rank's **consumer lane** is the lane with
    the most compute: the main thread of a CPU run, the compute stream of a GPU.
Collectives
    The communication events that stand for one operation each on their rank, matched across ranks
    by :mod:`dlexplore.traces.collectives` (same functions: in order per collective and size, or by
    the reader's operation id). Each one is a node on its **comm lane** (its stream: a
    ``pt_gloo_runloop`` thread, an NCCL stream; one lane per rank when the reader matched by id,
    as Horovod's background thread), which runs its operations in order (when the measured ones do
    not overlap). An operation ends on rank ``r`` at ``max over ranks of its start + T[r]``: no rank
    is done before the last one has come in; ``T[r]`` (the measured end on ``r`` less the last
    start, aligned clocks) is split into the operation's **transfer** ``T`` (the smallest over its
    ranks: the network's time; the operation is complete on every rank at ``last start + T``) and
    each rank's **lateness** ``T[r] - T`` (its worker woken late or descheduled before closing its
    range, a ring's last steps), kept as measured on its recorded end and in the lag of the wait
    it released; a what-if scales ``T``.
Dependencies (a node starts at the latest of its sources, each plus a lag)
    ``issue``: a collective starts after the host call that issued it (the last host-side
    communication event on the rank's lanes before it, ``c10d::allreduce_``, ``nccl:all_reduce``:
    its end) -- or, with none, after the consumer lane reached the same point.
    ``launch``: a device event after the runtime call with its ``correlation``
    (``cudaLaunchKernel``); every launched device event is a node, since a kernel queued behind
    others may wait for its launch once the device runs faster.
    ``stream``: a collective on a device stream after the compute stream's last work before it,
    or where the compute stream was when it started if it was busy (the event NCCL's stream
    waits on).
    ``op``: the consumer lane's first busy start at or after both the operation's end and the last
    issue of the step on that rank waits for it -- DDP waits for its buckets once backward has
    issued them all, the optimizer after them.
    ``sync``: a host thread leaving a ``cuda*Synchronize`` (or a blocking ``cudaMemcpy``) waited
    for the device's last work that ended inside the call.
    ``fixed``: a collective on a rank with no lane (a Horovod timeline) starts no earlier than
    measured.

Which dependency held a node back (its **release**) is read from the trace: the one with the
latest source inside the gap before the node. It keeps its measured lag (the wake-up time);
the gap before it may shrink down to the lane's typical gap (the median of its gaps between busy
periods that no dependency released). Dependencies that did not hold the node back get a lag of
at most the rank's typical release lag of that kind, and the gap is kept: so at unchanged
parameters every node starts where it was measured, and a faster network or faster compute can
only take slack away, not add it.

Clocks (:func:`causal_offsets`): every symmetric collective must be causal (no rank leaves before
every rank has come in). When the clocks as recorded already are, they are kept (ranks of one host
share a clock; the median of end differences, :func:`dlexplore.traces.collectives.clock_offsets`,
would read the spread of a ring's last steps as an offset); otherwise that median estimate,
moved just enough to make every operation causal.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ..traces.collectives import SYMMETRIC_COLLECTIVES, match_operations, offsets_from_ends, operation_events
from ..traces.events import events_of
from ..traces.intervals import merge_intervals
from ..traces.schema import Trace

__all__ = [
    "BUSY_CATEGORIES",
    "DEPENDENCY_KINDS",
    "SYNC_NAMES",
    "Lane",
    "ReplayGraph",
    "build_graph",
    "causal_offsets",
]

#: Categories that make a lane busy (a lane with none of them is not a lane).
BUSY_CATEGORIES = ("compute", "cpu", "communication", "data", "runtime", "memcpy", "memset")

#: Host runtime calls that block until the device is done (substrings of the event name).
SYNC_NAMES = ("Synchronize",)
_BLOCKING_COPIES = ("cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "hipMemcpy")

_DEVICE_PREFIX = "cuda:"
#: The kinds of dependency (module docstring).
DEPENDENCY_KINDS = ("issue", "launch", "stream", "op", "sync", "fixed")


@dataclass
class Lane:
    """One stream of one rank, replayed as segments between nodes (times in s, aligned clocks)."""

    rank: int
    stream: str
    device: bool
    busy_start: np.ndarray
    busy_end: np.ndarray
    busy_first: np.ndarray  # event row of the first event of each busy period
    compute_start: np.ndarray
    compute_end: np.ndarray
    compute_before: np.ndarray  # compute time before each compute interval
    typical_gap: float  # median gap between busy periods, waits for other lanes left out (s)
    nodes: list[int] = field(default_factory=list)

    def compute_until(self, t: np.ndarray) -> np.ndarray:
        """Compute time (s) on the lane from its start up to each time in ``t`` (s)."""
        t = np.asarray(t, dtype=float)
        if self.compute_start.size == 0:
            return np.zeros(t.shape)
        i = np.searchsorted(self.compute_start, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - self.compute_start[j], 0.0, self.compute_end[j] - self.compute_start[j])
        return np.where(i >= 0, self.compute_before[j] + inside, 0.0)

    @property
    def compute_total(self) -> float:
        """Compute time (s) on the whole lane."""
        if self.compute_start.size == 0:
            return 0.0
        return float(self.compute_before[-1] + self.compute_end[-1] - self.compute_start[-1])


@dataclass
class ReplayGraph:
    """The dependency graph of a measured trace (:func:`build_graph`); what :func:`replay` runs.

    Attributes
    ----------
    events:
        The trace's event table (index 0..n-1) with ``start_aligned`` and ``end_aligned`` (s).
    lanes:
        The lanes (:class:`Lane`), indexed by lane id.
    nodes:
        One row per node: ``node``, ``type`` ("lane" or "collective"), ``rank``, ``lane`` (lane id,
        -1 for collectives), ``comm_lane`` (-1 for lane nodes), ``op`` and ``span`` (operation and
        row of ``ops``; -1 for lane nodes), ``start`` (s, measured, aligned), ``wait_from`` (s: the
        end of what ran before on the lane or comm lane; NaN for a first node), ``prev`` (the lane's
        previous node), ``prev_span`` (the comm lane's previous operation row), ``release`` (the
        dependency that held it back, -1 if none), ``typical_gap`` and ``keep_gap`` (s: the gap
        kept before it at the least: the measured gap, or when a dependency released the node the
        smaller of that and the lane's typical gap).
    deps:
        One row per dependency: ``node``, ``kind`` (:data:`DEPENDENCY_KINDS`), ``source`` ("lane", "op",
        "fixed"), ``src_node`` (the lane node whose segment holds the source point), ``src_op``,
        ``src_rank``, ``time`` (s: the source point, measured), ``lag_measured`` (s: node start
        less source), ``lag`` (s: the lag the replay uses), ``releasing`` (bool).
    ops:
        One row per (operation, rank): ``op``, ``rank``, ``collective``, ``bytes``, ``group_size``,
        ``start``, ``end`` (s, aligned), ``transfer`` (s: the operation's, the smallest over its ranks
        of ``end`` less the operation's last start), ``late`` (s: the rank's recorded end beyond
        that, kept as measured),
        ``issue`` (s: the issuing point), ``step``, ``node``, ``comm_lane``.
    offsets:
        Clock offset (s) per rank: aligned time = time - offset.
    order:
        Node ids in an order where every node comes after its sources.
    world_size, source, format, files, meta:
        From the trace.
    trace:
        The trace itself (a :class:`~dlexplore.traces.schema.Trace` made from the table when an
        event table was given), for the network fit.
    fits:
        Network fits already made for this graph, by (method, algorithm): a graph replayed many
        times is fitted once.
    notes:
        What the build had to assume, in words (non-causal operations, operations nothing waits for).
    """

    events: pd.DataFrame
    lanes: list[Lane]
    nodes: pd.DataFrame
    deps: pd.DataFrame
    ops: pd.DataFrame
    offsets: pd.Series
    order: np.ndarray
    world_size: int
    source: str
    format: str
    files: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    trace: Trace | None = None
    fits: dict[Any, Any] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        kinds = self.deps["kind"].value_counts().to_dict() if len(self.deps) else {}
        return (
            f"<dlexplore.sim.ReplayGraph ranks={len(self.offsets)} lanes={len(self.lanes)} "
            f"nodes={len(self.nodes)} operations={self.ops['op'].nunique() if len(self.ops) else 0} "
            f"deps={kinds}>"
        )


# --- clocks ---------------------------------------------------------------------------------------


def causal_offsets(ops: pd.DataFrame, ranks: np.ndarray) -> pd.Series:
    """Clock offsets (s) per rank that make every symmetric collective causal.

    ``ops`` has one row per (op, rank) with ``op``, ``rank``, ``collective``, ``start`` and ``end``
    (s, each rank's clock). For every pair of ranks ``q``, ``r`` of an operation, the end on ``r``
    cannot come before the start on ``q``: ``offset[r] - offset[q] <= end[r] - start[q]``.

    When all-zero offsets meet every bound, the ranks' clocks agree as far as the trace can tell
    (ranks of one host share a clock; the PyTorch reader puts every file on one time axis) and
    they stay 0: the median of end differences would read the spread of a ring's last steps as an
    offset. Otherwise the clocks differ: the median estimate of
    :func:`dlexplore.traces.collectives.clock_offsets` is the start, and each violated bound is
    met by moving both offsets half way, until none is (or 50 sweeps: a trace that cannot be
    made causal, e.g. with drifting clocks, keeps the best found). The lowest rank is the reference
    (offset 0); aligned time = time - offset.
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    offsets = pd.Series(0.0, index=pd.Index(ranks, name="rank"), name="offset")
    if len(ops) == 0 or ranks.size < 2:
        return offsets
    use = ops[ops["collective"].isin(SYMMETRIC_COLLECTIVES).to_numpy()]
    if use.empty:
        return offsets
    position = {int(r): i for i, r in enumerate(ranks)}
    n = ranks.size
    bound = np.full((n, n), np.inf)  # bound[q, r] >= offset[r] - offset[q]
    starts = use.pivot_table(index="op", columns="rank", values="start", aggfunc="min")
    ends = use.pivot_table(index="op", columns="rank", values="end", aggfunc="max")
    for q in starts.columns:
        for r in ends.columns:
            if q == r:
                continue
            diff = (ends[r] - starts[q]).to_numpy()
            diff = diff[np.isfinite(diff)]
            if diff.size:
                bound[position[int(q)], position[int(r)]] = diff.min()
    o = np.zeros(n)
    if (o[None, :] - o[:, None] - bound).max() > 1e-12:
        median, _, _ = offsets_from_ends(use)
        o = median.reindex(ranks).fillna(0.0).to_numpy(dtype=float, copy=True)
        for _ in range(50):
            excess = o[None, :] - o[:, None] - bound
            if excess.max() <= 1e-12:
                break
            for q, r in zip(*np.nonzero(excess > 1e-12), strict=True):
                amount = o[r] - o[q] - bound[q, r]
                if amount > 0:
                    o[r] -= amount / 2
                    o[q] += amount / 2
    offsets[:] = o - o[0]
    return offsets


# --- collectives ----------------------------------------------------------------------------------


def _operations(events: pd.DataFrame, world_size: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Matched operations, one row per (op, rank), and each collective event row's op (-1: none).

    Returns the ops table (columns: op, rank, collective, bytes, group_size, start, end, stream,
    id_matched), ``row_op`` (op of each event row or -1) and ``row_span`` (the ops-table row).
    """
    n = len(events)
    row_op = np.full(n, -1, dtype=np.int64)
    row_span = np.full(n, -1, dtype=np.int64)
    table = operation_events(events)
    empty = pd.DataFrame(
        {
            "op": [],
            "rank": [],
            "collective": [],
            "bytes": [],
            "group_size": [],
            "start": [],
            "end": [],
            "stream": [],
            "id_matched": [],
        }
    )
    if table.empty:
        return empty, row_op, row_span
    keys = pd.DataFrame(
        {
            "rank": events["rank"].to_numpy(dtype=np.int64),
            "stream": events["stream"].astype(str).to_numpy(),
            "name": events["name"].astype(str).to_numpy(),
            "start": events["start"].to_numpy(dtype=float),
            "end": events["start"].to_numpy(dtype=float) + events["duration"].to_numpy(dtype=float),
            "row": np.arange(n, dtype=np.int64),
        }
    ).drop_duplicates(["rank", "stream", "name", "start", "end"])
    table = table.assign(rank=table["rank"].astype(np.int64)).merge(
        keys, on=["rank", "stream", "name", "start", "end"], how="left"
    )
    matched = match_operations(table)
    if "row" in matched.columns:  # matched by order: one event per (op, rank)
        spans = matched.reset_index(drop=True)
        spans["id_matched"] = False
        rows = spans["row"].to_numpy(dtype=np.int64)
        row_op[rows] = spans["op"].to_numpy(dtype=np.int64)
        row_span[rows] = np.arange(len(spans))
    else:  # matched by the reader's operation id: spans over several events per rank
        spans = matched.reset_index(drop=True)
        spans["id_matched"] = True
        spans["stream"] = [f"ops:{r}" for r in spans["rank"]]
        # an event belongs to the span of its rank and collective that contains it
        for i, span in enumerate(spans.itertuples(index=False)):
            inside = (
                (table["rank"].to_numpy() == span.rank)
                & (table["collective"].to_numpy() == span.collective)
                & (table["start"].to_numpy() >= span.start)
                & (table["end"].to_numpy() <= span.end)
            )
            rows = table["row"].to_numpy()[inside]
            rows = rows[np.isfinite(rows)].astype(np.int64)
            row_op[rows] = int(span.op)
            row_span[rows] = i
    if "group_size" in spans.columns:
        size = pd.to_numeric(spans["group_size"], errors="coerce").to_numpy(dtype=float)
    else:
        size = np.full(len(spans), np.nan)
    spans["group_size"] = np.where(np.isfinite(size) & (size > 0), size, world_size).astype(np.int64)
    cols = ["op", "rank", "collective", "bytes", "group_size", "start", "end", "stream", "id_matched"]
    return spans[cols].astype({"op": np.int64, "rank": np.int64}), row_op, row_span


# --- the graph ------------------------------------------------------------------------------------


class _Builder:
    """Accumulates nodes and dependencies."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.deps: list[dict[str, Any]] = []
        self.lane_points: dict[int, dict[float, int]] = {}

    def lane_node(self, lane_id: int, lane: Lane, start: float, wait_from: float, gap: float) -> int:
        points = self.lane_points.setdefault(lane_id, {})
        if start in points:
            return points[start]
        node = len(self.nodes)
        self.nodes.append(
            {
                "node": node,
                "type": "lane",
                "rank": lane.rank,
                "lane": lane_id,
                "comm_lane": -1,
                "op": -1,
                "span": -1,
                "start": start,
                "wait_from": wait_from,
                "typical_gap": gap,
            }
        )
        points[start] = node
        return node

    def dep(
        self,
        node: int,
        kind: str,
        source: str,
        time: float,
        *,
        src_lane: int = -1,
        src_op: int = -1,
        src_rank: int = -1,
        src_span: int = -1,
    ) -> None:
        self.deps.append(
            {
                "node": node,
                "kind": kind,
                "source": source,
                "src_lane": src_lane,
                "src_op": src_op,
                "src_rank": src_rank,
                "src_span": src_span,
                "time": time,
            }
        )


def build_graph(trace: Trace | pd.DataFrame) -> ReplayGraph:
    """The dependency graph of a measured trace (module docstring): lanes, collectives, dependencies.

    Parameters
    ----------
    trace:
        A :class:`~dlexplore.traces.schema.Trace` or its event table (schema of
        :mod:`dlexplore.traces.schema`; ``correlation`` is used when present).

    Raises
    ------
    DlexploreError
        When the trace has no events with finite times, or its dependencies form a cycle.
    """
    events, source, fmt = events_of(trace)
    events = events.reset_index(drop=True)
    meta = dict(trace.meta) if isinstance(trace, Trace) else {}
    files = list(trace.files) if isinstance(trace, Trace) else list(events.attrs.get("files", []))
    start_raw = events["start"].to_numpy(dtype=float)
    end_raw = start_raw + events["duration"].to_numpy(dtype=float)
    finite = np.isfinite(start_raw) & np.isfinite(end_raw)
    if not finite.any():
        raise DlexploreError(f"{source}: no event with a finite start and duration to replay")
    rank = events["rank"].to_numpy(dtype=np.int64)
    ranks = np.unique(rank)
    world_size = int(trace.world_size) if isinstance(trace, Trace) and trace.world_size else int(ranks.size)
    world_size = max(world_size, int(ranks.size))
    notes: list[str] = []

    ops, row_op, row_span = _operations(events, world_size)
    offsets = causal_offsets(ops, ranks)
    shift = offsets.reindex(rank).to_numpy(dtype=float)
    start = start_raw - shift
    end = end_raw - shift
    if len(ops):
        op_shift = offsets.reindex(ops["rank"].to_numpy()).to_numpy(dtype=float)
        ops["start"] = ops["start"].to_numpy(dtype=float) - op_shift
        ops["end"] = ops["end"].to_numpy(dtype=float) - op_shift
        last_in = ops.groupby("op")["start"].transform("max").to_numpy()
        transfer = ops["end"].to_numpy() - last_in
        if (transfer < -1e-9).any():
            notes.append(
                f"{int((transfer < -1e-9).sum())} operation end(s) came before the last rank's "
                "start even after clock alignment; their transfer is taken as 0"
            )
        transfer = np.maximum(transfer, 0.0)
        # The network's part is the operation's, the same on every rank: the fastest rank's transfer.
        # What a rank took beyond it (woken late, descheduled, a ring's last steps) is its own lateness.
        common = pd.Series(transfer).groupby(ops["op"].to_numpy()).transform("min").to_numpy()
        ops["transfer"] = common
        ops["late"] = transfer - common
    else:
        ops["transfer"] = []
        ops["late"] = []
    step_all = events["step"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    if len(ops):
        # an op's step: the step of its (first) event on the rank
        first_row = pd.Series(np.flatnonzero(row_span >= 0)).groupby(row_span[row_span >= 0]).min()
        ops["step"] = step_all[first_row.reindex(np.arange(len(ops))).to_numpy(dtype=np.int64)]
    else:
        ops["step"] = []

    category = events["category"].astype(str).to_numpy()
    stream = events["stream"].astype(str).to_numpy()
    name = events["name"].astype(str).to_numpy()
    on_device = np.char.startswith(stream.astype(str), _DEVICE_PREFIX) if len(stream) else np.zeros(0, bool)
    is_op_row = row_op >= 0
    busy = np.isin(category, BUSY_CATEGORIES) & finite & ~is_op_row
    compute = (category == "compute") & busy

    # lanes: (rank, stream) with busy events; rows grouped by lane with one sort
    lane_codes, lane_uniques = pd.factorize(pd.MultiIndex.from_arrays([rank, stream]))
    lanes: list[Lane] = []
    lane_rows: list[np.ndarray] = []
    lane_of_code = np.full(len(lane_uniques), -1, dtype=np.int64)
    busy_rows = np.flatnonzero(busy)
    busy_rows = busy_rows[np.argsort(lane_codes[busy_rows], kind="stable")]
    cuts = np.flatnonzero(np.diff(lane_codes[busy_rows])) + 1
    for rows in np.split(busy_rows, cuts) if busy_rows.size else []:
        code = lane_codes[rows[0]]
        r, st = lane_uniques[code]
        busy_runs = merge_intervals(start[rows], end[rows])
        bs, be, bfirst = busy_runs.start, busy_runs.end, busy_runs.first
        crow = rows[compute[rows]]
        compute_runs = merge_intervals(start[crow], end[crow])
        cs, ce = compute_runs.start, compute_runs.end
        before = np.concatenate([[0.0], np.cumsum(ce - cs)[:-1]]) if cs.size else cs
        lane_of_code[code] = len(lanes)
        lane_rows.append(rows)
        lanes.append(
            Lane(
                rank=int(r),
                stream=str(st),
                device=str(st).startswith(_DEVICE_PREFIX),
                busy_start=bs,
                busy_end=be,
                busy_first=rows[bfirst],
                compute_start=cs,
                compute_end=ce,
                compute_before=before,
                typical_gap=0.0,
            )
        )
    event_lane = np.where(lane_codes >= 0, lane_of_code[lane_codes], -1)
    lane_id_of = {(lane.rank, lane.stream): i for i, lane in enumerate(lanes)}

    consumer: dict[int, int] = {}
    for lane_id, lane in enumerate(lanes):
        best = consumer.get(lane.rank)
        if lane.compute_total > 0 and (best is None or lane.compute_total > lanes[best].compute_total):
            consumer[lane.rank] = lane_id

    b = _Builder()

    def busy_node(lane_id: int, i: int) -> int:
        lane = lanes[lane_id]
        wait_from = float(lane.busy_end[i - 1]) if i > 0 else np.nan
        return b.lane_node(lane_id, lane, float(lane.busy_start[i]), wait_from, np.nan)

    for lane_id in range(len(lanes)):
        busy_node(lane_id, 0)

    # launches: device events after the runtime call with the same correlation
    launch_lane = np.full(len(events), -1, dtype=np.int64)
    launch_end = np.full(len(events), np.nan)
    if "correlation" in events.columns:
        correlation = pd.to_numeric(events["correlation"], errors="coerce").to_numpy(dtype=float)
        known = np.isfinite(correlation) & finite
        runtime = (category == "runtime") & known & (event_lane >= 0)
        device_row = on_device & known
        calls = pd.DataFrame(
            {
                "rank": rank[runtime],
                "corr": correlation[runtime],
                "lane": event_lane[runtime],
                "end": end[runtime],
            }
        )
        calls = calls.drop_duplicates(["rank", "corr"], keep="last")
        want = pd.DataFrame(
            {"rank": rank[device_row], "corr": correlation[device_row], "row": np.flatnonzero(device_row)}
        )
        hit = want.merge(calls, on=["rank", "corr"], how="inner")
        launch_lane[hit["row"].to_numpy()] = hit["lane"].to_numpy()
        launch_end[hit["row"].to_numpy()] = hit["end"].to_numpy()
    # every launched device event is a node: a kernel queued behind others today may wait for its
    # launch once the device runs faster
    for lane_id, lane in enumerate(lanes):
        if not lane.device:
            continue
        rows = lane_rows[lane_id]
        rows = rows[np.argsort(start[rows], kind="stable")]
        before = np.concatenate([[np.nan], np.maximum.accumulate(end[rows])[:-1]])
        for j in np.flatnonzero(launch_lane[rows] >= 0):
            row, s0 = rows[j], float(start[rows[j]])
            node = b.lane_node(lane_id, lane, s0, min(float(before[j]), s0), np.nan)
            b.dep(node, "launch", "lane", min(float(launch_end[row]), s0), src_lane=int(launch_lane[row]))

    # syncs: host runtime calls that block until the device is done: they wait for the device's
    # last work that ended inside them
    sync = (category == "runtime") & finite & (event_lane >= 0) & ~on_device
    runtime_rows = np.flatnonzero(sync)
    sync[runtime_rows] = [
        any(k in name[i] for k in SYNC_NAMES) or name[i] in _BLOCKING_COPIES for i in runtime_rows
    ]
    device_rows = np.flatnonzero(((busy & on_device) | (is_op_row & on_device)) & finite)
    device_rows = device_rows[np.lexsort((end[device_rows], rank[device_rows]))]
    for row in np.flatnonzero(sync):
        r = rank[row]
        lo, hi = np.searchsorted(rank[device_rows], [r, r + 1])
        ends = end[device_rows[lo:hi]]
        k = np.searchsorted(ends, end[row], side="right") - 1
        if k < 0 or ends[k] <= start[row]:
            continue
        last = device_rows[lo + k]
        lane_id = int(event_lane[row])
        node = b.lane_node(lane_id, lanes[lane_id], float(end[row]), float(start[row]), 0.0)
        if row_op[last] >= 0:  # waits for the recorded end, the rank's lateness included
            b.dep(
                node,
                "sync",
                "op",
                float(end[last]),
                src_op=int(row_op[last]),
                src_rank=int(r),
                src_span=int(row_span[last]),
            )
        else:
            b.dep(node, "sync", "lane", float(end[last]), src_lane=int(event_lane[last]))

    # collectives: nodes, issue and consumer dependencies
    if len(ops):
        _collective_nodes(
            b,
            ops,
            lanes,
            lane_id_of,
            consumer,
            busy_node,
            start,
            end,
            rank,
            category,
            is_op_row,
            finite,
            event_lane,
            launch_lane,
            launch_end,
            row_span,
            notes,
        )
    else:
        for name_ in ("comm_lane", "issue", "node"):
            ops[name_] = []

    nodes = pd.DataFrame(b.nodes)
    deps = pd.DataFrame(
        b.deps, columns=["node", "kind", "source", "src_lane", "src_op", "src_rank", "src_span", "time"]
    )
    nodes, deps, order = _finish(nodes, deps, lanes, ops, notes)
    ev = events.copy()
    ev["start_aligned"] = start
    ev["end_aligned"] = end
    ev["lane"] = event_lane
    ev["span"] = row_span
    return ReplayGraph(
        events=ev,
        lanes=lanes,
        nodes=nodes,
        deps=deps,
        ops=ops,
        offsets=offsets,
        order=order,
        world_size=world_size,
        source=source,
        format=fmt,
        files=[str(f) for f in files],
        meta=meta,
        notes=notes,
        trace=_as_trace(trace, events, fmt, files, world_size),
    )


def _as_trace(trace: Trace | pd.DataFrame, events: pd.DataFrame, fmt: str, files: list, world: int) -> Trace:
    if isinstance(trace, Trace):
        return trace
    table = events.copy()
    table.attrs = dict(events.attrs)
    return Trace(table, fmt or "events", tuple(str(f) for f in files), world, {})


def _collective_nodes(
    b: _Builder,
    ops: pd.DataFrame,
    lanes: list[Lane],
    lane_id_of: dict,
    consumer: dict[int, int],
    busy_node: Any,
    start: np.ndarray,
    end: np.ndarray,
    rank: np.ndarray,
    category: np.ndarray,
    is_op_row: np.ndarray,
    finite: np.ndarray,
    event_lane: np.ndarray,
    launch_lane: np.ndarray,
    launch_end: np.ndarray,
    row_span: np.ndarray,
    notes: list[str],
) -> None:
    """Nodes for the collectives, their issue dependencies and their consumers (module docstring)."""
    ops["comm_lane"] = pd.factorize(
        pd.MultiIndex.from_arrays([ops["rank"].to_numpy(), ops["stream"].astype(str).to_numpy()])
    )[0]
    # host-side communication calls per rank, by start: the issuing calls
    host = np.flatnonzero((category == "communication") & ~is_op_row & finite & (event_lane >= 0))
    host = host[np.lexsort((start[host], rank[host]))]
    host_rank, host_start = rank[host], start[host]
    span_rows = np.flatnonzero(row_span >= 0)
    first_row = pd.Series(span_rows).groupby(row_span[span_rows]).min().reindex(np.arange(len(ops)))
    first_row = first_row.fillna(-1).to_numpy(dtype=np.int64)
    op_rank = ops["rank"].to_numpy(dtype=np.int64)
    op_start = ops["start"].to_numpy(dtype=float)
    op_end = ops["end"].to_numpy(dtype=float)
    op_id = ops["op"].to_numpy(dtype=np.int64)
    op_stream = ops["stream"].astype(str).to_numpy()
    comm_lane = ops["comm_lane"].to_numpy(dtype=np.int64)
    op_nodes = np.full(len(ops), -1, dtype=np.int64)
    issue_point = np.full(len(ops), np.nan)
    previous_start: dict[int, float] = {}
    for i in np.lexsort((op_start, op_rank)):
        r, s0 = int(op_rank[i]), float(op_start[i])
        node = len(b.nodes)
        b.nodes.append(
            {
                "node": node,
                "type": "collective",
                "rank": r,
                "lane": -1,
                "comm_lane": int(comm_lane[i]),
                "op": int(op_id[i]),
                "span": int(i),
                "start": s0,
                "wait_from": np.nan,
                "typical_gap": 0.0,
            }
        )
        op_nodes[i] = node
        issued = False
        # the host call that issued it: the last host-side communication call before it (and after
        # the rank's previous operation started)
        lo, hi = np.searchsorted(host_rank, [r, r + 1])
        k = lo + np.searchsorted(host_start[lo:hi], s0, side="right") - 1
        if k >= lo and host_start[k] > previous_start.get(r, -np.inf):
            row = host[k]
            t = min(float(end[row]), s0)
            b.dep(node, "issue", "lane", t, src_lane=int(event_lane[row]))
            issue_point[i] = t
            issued = True
        row = first_row[i]
        if row >= 0 and launch_lane[row] >= 0:
            t = min(float(launch_end[row]), s0)
            b.dep(node, "launch", "lane", t, src_lane=int(launch_lane[row]))
            issue_point[i] = np.fmax(issue_point[i], t)
            issued = True
        own_lane = lane_id_of.get((r, op_stream[i]))
        work = consumer.get(r)
        if own_lane is not None:  # a blocking collective on a lane (MPI on the main thread)
            b.dep(node, "issue", "lane", s0, src_lane=own_lane)
            issue_point[i] = s0
            issued = True
        elif work is not None and lanes[work].device and op_stream[i].startswith(_DEVICE_PREFIX):
            # the compute stream's point the NCCL stream waited for: its last work before the
            # kernel, or, while it was busy, where it was then
            lane = lanes[work]
            k = np.searchsorted(lane.busy_start, s0, side="right") - 1
            if k >= 0:
                b.dep(node, "stream", "lane", min(float(lane.busy_end[k]), s0), src_lane=work)
        if not issued:
            if work is not None:
                b.dep(node, "issue", "lane", s0, src_lane=work)
            else:
                b.dep(node, "fixed", "fixed", s0)
            issue_point[i] = s0
        previous_start[r] = s0
    ops["issue"] = np.where(np.isfinite(issue_point), issue_point, op_start)
    ops["node"] = op_nodes
    # consumers: the consumer lane's first busy start after the op's end and the step's last issue.
    # The end is the operation's (last start + transfer), the same on every rank: what a rank
    # recorded beyond it (its worker thread woken late or descheduled before closing its range,
    # the last steps of a ring) shows in the lag of the wait it released.
    step = ops["step"].to_numpy()
    step_key = np.where(step >= 0, step, -1 - np.arange(len(ops)))
    last_issue = ops.assign(k=step_key).groupby(["rank", "k"])["issue"].transform("max").to_numpy()
    common_end = op_end - ops["late"].to_numpy(dtype=float)
    unconsumed = 0
    for i in range(len(ops)):
        r = int(op_rank[i])
        work = consumer.get(r)
        if work is None:
            continue
        lane = lanes[work]
        # a blocking collective on the consumer lane itself: the lane goes on after it
        blocking = lane_id_of.get((r, op_stream[i])) == work
        after = op_end[i] if blocking else max(common_end[i], last_issue[i])
        k = np.searchsorted(lane.busy_start, after, side="left")
        if k < lane.busy_start.size:
            node = busy_node(work, int(k))
            b.dep(node, "op", "op", float(common_end[i]), src_op=int(op_id[i]), src_rank=r, src_span=i)
        else:
            unconsumed += 1
    if unconsumed:
        notes.append(
            f"{unconsumed} operation(s) ended after their rank's last work in the trace: nothing "
            "in the trace waits for them"
        )


def _finish(
    nodes: pd.DataFrame, deps: pd.DataFrame, lanes: list[Lane], ops: pd.DataFrame, notes: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Lane order, comm-lane order, source nodes, releases and lags, and a topological order."""
    n = len(nodes)
    start = nodes["start"].to_numpy(dtype=float)
    wait_from = nodes["wait_from"].to_numpy(dtype=float, copy=True)
    prev = np.full(n, -1, dtype=np.int64)
    node_lane = nodes["lane"].to_numpy(dtype=np.int64)
    by_lane = np.lexsort((start, node_lane))
    by_lane = by_lane[node_lane[by_lane] >= 0]
    for lane_id, lane in enumerate(lanes):
        lo, hi = np.searchsorted(node_lane[by_lane], [lane_id, lane_id + 1])
        mine = by_lane[lo:hi]
        lane.nodes = [int(x) for x in mine]
        prev[mine[1:]] = mine[:-1]
    # comm-lane order: the next operation waits for the previous one's transfer when they did not
    # overlap
    op_prev_span = np.full(n, -1, dtype=np.int64)
    if len(ops):
        done = ops["end"].to_numpy(dtype=float) - ops["late"].to_numpy(dtype=float)
        op_start = ops["start"].to_numpy(dtype=float)
        op_node = ops["node"].to_numpy(dtype=np.int64)
        order = np.lexsort((op_start, ops["comm_lane"].to_numpy()))
        lane_of = ops["comm_lane"].to_numpy()[order]
        a, c = order[:-1], order[1:]
        chained = (lane_of[:-1] == lane_of[1:]) & (done[a] <= op_start[c] + 1e-12)
        op_prev_span[op_node[c[chained]]] = a[chained]
        wait_from[op_node[c[chained]]] = done[a[chained]]
    nodes["prev"] = prev
    nodes["prev_span"] = op_prev_span
    nodes["wait_from"] = wait_from

    # the lane node whose segment holds each lane source
    src_node = np.full(len(deps), -1, dtype=np.int64)
    if len(deps):
        for lane_id, lane in enumerate(lanes):
            rows = np.flatnonzero(
                (deps["source"].to_numpy() == "lane") & (deps["src_lane"].to_numpy() == lane_id)
            )
            if rows.size:
                points = start[lane.nodes]
                k = np.searchsorted(points, deps["time"].to_numpy()[rows], side="right") - 1
                src_node[rows] = np.asarray(lane.nodes)[np.maximum(k, 0)]
    deps["src_node"] = src_node
    dep_node = deps["node"].to_numpy(dtype=np.int64)
    dep_time = deps["time"].to_numpy(dtype=float)
    deps["lag_measured"] = start[dep_node] - dep_time if len(deps) else []

    # releases: per node, the latest source inside the gap before it
    release = np.full(n, -1, dtype=np.int64)
    if len(deps):
        floor = np.where(np.isfinite(wait_from[dep_node]), wait_from[dep_node], -np.inf)
        inside = dep_time > floor
        cand = pd.DataFrame({"node": dep_node, "time": dep_time, "dep": np.arange(len(deps))})[inside]
        if len(cand):
            best = cand.sort_values(["node", "time", "dep"]).groupby("node").tail(1)
            release[best["node"].to_numpy()] = best["dep"].to_numpy()
    releasing = np.zeros(len(deps), dtype=bool)
    releasing[release[release >= 0]] = True
    deps["releasing"] = releasing
    # lags: a release keeps its measured lag; others at most the rank's typical release lag of their kind
    dep_rank = nodes["rank"].to_numpy()[dep_node] if len(deps) else np.zeros(0, dtype=np.int64)
    lag_measured = deps["lag_measured"].to_numpy(dtype=float) if len(deps) else np.zeros(0)
    lags = pd.DataFrame({"rank": dep_rank, "kind": deps["kind"].to_numpy(), "lag": lag_measured})
    typical = lags[releasing].groupby(["rank", "kind"])["lag"].median()
    key = pd.MultiIndex.from_arrays([dep_rank, deps["kind"].to_numpy()]) if len(deps) else None
    typ = typical.reindex(key).fillna(0.0).to_numpy() if len(deps) else np.zeros(0)
    deps["lag"] = np.where(releasing, lag_measured, np.minimum(lag_measured, np.maximum(typ, 0.0)))
    nodes["release"] = release
    # a lane's typical gap: the median of its gaps between busy periods that no other lane ended
    typical_gap = nodes["typical_gap"].to_numpy(dtype=float, copy=True)
    for lane in lanes:
        released = start[[x for x in lane.nodes if release[x] >= 0]]
        gaps = lane.busy_start[1:] - lane.busy_end[:-1]
        free = gaps[~np.isin(lane.busy_start[1:], released) & (gaps > 0)]
        lane.typical_gap = float(np.median(free)) if free.size else 0.0
        mine = np.asarray(lane.nodes, dtype=np.int64)
        typical_gap[mine] = np.where(np.isnan(typical_gap[mine]), lane.typical_gap, typical_gap[mine])
    nodes["typical_gap"] = typical_gap
    gap = start - wait_from
    nodes["keep_gap"] = np.where(release >= 0, np.minimum(gap, typical_gap), gap)

    # topological order (Kahn), earliest measured start first
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = np.zeros(n, dtype=np.int64)
    op_start_nodes: dict[int, list[int]] = {}
    if len(ops):
        for op, group in ops.groupby("op"):
            op_start_nodes[int(op)] = [int(x) for x in group["node"]]

    def edge(a: int, c: int) -> None:
        if a != c:
            succ[a].append(c)
            indeg[c] += 1

    op_column = ops["op"].to_numpy(dtype=np.int64) if len(ops) else np.zeros(0, dtype=np.int64)
    for node in np.flatnonzero(prev >= 0):
        edge(int(prev[node]), int(node))
    for node in np.flatnonzero(op_prev_span >= 0):
        for a in op_start_nodes[int(op_column[op_prev_span[node]])]:
            edge(a, int(node))
    source = deps["source"].to_numpy() if len(deps) else np.zeros(0, dtype=object)
    src_op = deps["src_op"].to_numpy(dtype=np.int64) if len(deps) else np.zeros(0, dtype=np.int64)
    for d in range(len(deps)):
        node = int(dep_node[d])
        if source[d] == "lane":
            edge(int(src_node[d]), node)
        elif source[d] == "op":
            for a in op_start_nodes[int(src_op[d])]:
                edge(a, node)
    heap = [(start[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for c in succ[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (start[c], c))
    if len(order) < n:
        stuck = np.flatnonzero(indeg > 0)
        first = nodes.loc[stuck[np.argmin(start[stuck])]]
        raise DlexploreError(
            f"the trace's dependencies form a cycle (rank {int(first['rank'])}, around t = "
            f"{float(first['start']):.9f} s): its events are not in causal order; cannot replay it"
        )
    return nodes, deps, np.asarray(order, dtype=np.int64)
