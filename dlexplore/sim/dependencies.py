"""The dependencies of a replay graph (:mod:`dlexplore.sim.graph` says what each kind means): the
nodes on lanes and their launch, sync, issue, op and stream dependencies, then the lanes' order,
each node's release and lags, and a topological order. Built by :func:`dlexplore.sim.build_graph`.

Kept whole: every kind of dependency of the replay graph and the pass that orders and weighs them,
which read the same nodes and lanes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from .lanes import _BLOCKING_COPIES, _DEVICE_PREFIX, SYNC_NAMES, Lane


@dataclass
class _EventArrays:
    """The per-event columns the graph's builders read (one entry per event row, aligned times, s)."""

    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    category: np.ndarray
    name: np.ndarray
    finite: np.ndarray
    on_device: np.ndarray
    busy: np.ndarray
    row_op: np.ndarray  # the event's operation (-1: not a collective's event)
    row_span: np.ndarray  # its (operation, rank) span
    event_lane: np.ndarray  # its lane (-1: none)
    launch_lane: np.ndarray | None = None  # the lane of the runtime call that launched it
    launch_end: np.ndarray | None = None  # that call's end

    @property
    def is_op_row(self) -> np.ndarray:
        return self.row_op >= 0


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

    def collective_node(self, rank: int, comm_lane: int, op: int, span: int, start: float) -> int:
        """A node for one rank's span of a collective operation; returns its number."""
        node = len(self.nodes)
        self.nodes.append(
            {
                "node": node,
                "type": "collective",
                "rank": rank,
                "lane": -1,
                "comm_lane": comm_lane,
                "op": op,
                "span": span,
                "start": start,
                "wait_from": np.nan,
                "typical_gap": 0.0,
            }
        )
        return node


def _launch_nodes(
    b: _Builder, events: pd.DataFrame, lanes: list[Lane], lane_rows: list[np.ndarray], ev: _EventArrays
) -> None:
    """Launch dependencies: every device event after the runtime call with its ``correlation``;
    sets each event's launching lane (-1: none) and the call's end (s) on ``ev``."""
    rank, start, end, category, finite = ev.rank, ev.start, ev.end, ev.category, ev.finite
    on_device, event_lane = ev.on_device, ev.event_lane
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

    ev.launch_lane, ev.launch_end = launch_lane, launch_end


def _sync_nodes(b: _Builder, lanes: list[Lane], ev: _EventArrays) -> None:
    """Sync dependencies: a host thread leaving a ``cuda*Synchronize`` (or a blocking copy) waited for
    the device's last work that ended inside the call."""
    rank, name, category, finite, event_lane = ev.rank, ev.name, ev.category, ev.finite, ev.event_lane
    on_device, busy, row_op, row_span, start, end = (
        ev.on_device,
        ev.busy,
        ev.row_op,
        ev.row_span,
        ev.start,
        ev.end,
    )
    is_op_row = ev.is_op_row
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


def _collective_nodes(
    b: _Builder,
    ops: pd.DataFrame,
    lanes: list[Lane],
    lane_id_of: dict,
    consumer: dict[int, int],
    busy_node: Any,
    ev: _EventArrays,
    notes: list[str],
) -> None:
    """Nodes for the collectives, their issue dependencies and their consumers (module docstring):
    one pass over the operations in rank and start order, each looking for what issued it (the host
    call, the launch, its own lane, the compute stream) in that order of precedence."""
    start, end, rank, category, finite = ev.start, ev.end, ev.rank, ev.category, ev.finite
    event_lane, launch_lane, launch_end, row_span = ev.event_lane, ev.launch_lane, ev.launch_end, ev.row_span
    ops["comm_lane"] = pd.factorize(
        pd.MultiIndex.from_arrays([ops["rank"].to_numpy(), ops["stream"].astype(str).to_numpy()])
    )[0]
    # host-side communication calls per rank, by start: the issuing calls
    host = np.flatnonzero((category == "communication") & ~ev.is_op_row & finite & (event_lane >= 0))
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
        node = b.collective_node(r, int(comm_lane[i]), int(op_id[i]), int(i), s0)
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
    _consumer_dependencies(b, ops, lanes, lane_id_of, consumer, busy_node, op_end, notes)


def _consumer_dependencies(
    b: _Builder,
    ops: pd.DataFrame,
    lanes: list[Lane],
    lane_id_of: dict,
    consumer: dict[int, int],
    busy_node: Any,
    op_end: np.ndarray,
    notes: list[str],
) -> None:
    """Each operation's consumer: the consumer lane's first busy start after the operation's end
    and the step's last issue waits for it (``op`` dependencies)."""
    op_rank = ops["rank"].to_numpy(dtype=np.int64)
    op_id = ops["op"].to_numpy(dtype=np.int64)
    op_stream = ops["stream"].astype(str).to_numpy()
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
    prev, op_prev_span = _chain_lanes(nodes, lanes, ops)
    src_node, release = _releases_and_lags(nodes, deps, lanes)
    _typical_gaps(nodes, lanes, release)
    order = _topological_order(nodes, deps, ops, prev, op_prev_span, src_node)
    return nodes, deps, order


def _chain_lanes(nodes: pd.DataFrame, lanes: list[Lane], ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each node's predecessor on its lane, and on its comm lane (an operation waits for the previous
    one's transfer when they did not overlap); sets ``prev``, ``prev_span`` and ``wait_from``."""
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

    return prev, op_prev_span


def _releases_and_lags(
    nodes: pd.DataFrame, deps: pd.DataFrame, lanes: list[Lane]
) -> tuple[np.ndarray, np.ndarray]:
    """The node each lane source lies in, each node's releasing dependency (the latest source inside
    the gap before it), and every dependency's lag (module docstring)."""
    n = len(nodes)
    start = nodes["start"].to_numpy(dtype=float)
    wait_from = nodes["wait_from"].to_numpy(dtype=float)
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
    return src_node, release


def _typical_gaps(nodes: pd.DataFrame, lanes: list[Lane], release: np.ndarray) -> None:
    """Each lane's typical gap and every node's ``keep_gap``: the gap a faster run may shrink to."""
    start = nodes["start"].to_numpy(dtype=float)
    wait_from = nodes["wait_from"].to_numpy(dtype=float)
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


def _topological_order(
    nodes: pd.DataFrame,
    deps: pd.DataFrame,
    ops: pd.DataFrame,
    prev: np.ndarray,
    op_prev_span: np.ndarray,
    src_node: np.ndarray,
) -> np.ndarray:
    """The nodes in an order every dependency respects (Kahn's, earliest measured start first)."""
    n = len(nodes)
    start = nodes["start"].to_numpy(dtype=float)
    dep_node = deps["node"].to_numpy(dtype=np.int64)
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
    return np.asarray(order, dtype=np.int64)
