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

Clocks (:func:`~dlexplore.sim.operations.causal_offsets`): every symmetric collective must be causal
(no rank leaves before every rank has come in). When the clocks as recorded already are, they are
kept (ranks of one host share a clock; the median of end differences,
:func:`dlexplore.traces.collectives.clock_offsets`, would read the spread of a ring's last steps as
an offset); otherwise that median estimate, moved just enough to make every operation causal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ..traces.events import events_of
from ..traces.schema import Trace
from .dependencies import _Builder, _collective_nodes, _EventArrays, _finish, _launch_nodes, _sync_nodes
from .lanes import _DEVICE_PREFIX, BUSY_CATEGORIES, SYNC_NAMES, Lane, _consumer_lanes, _lanes
from .operations import _aligned_operations, causal_offsets

__all__ = [
    "BUSY_CATEGORIES",
    "DEPENDENCY_KINDS",
    "SYNC_NAMES",
    "Lane",
    "ReplayGraph",
    "build_graph",
    "causal_offsets",
]


#: The kinds of dependency (module docstring).
DEPENDENCY_KINDS = ("issue", "launch", "stream", "op", "sync", "fixed")


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


# --- collectives ----------------------------------------------------------------------------------


# --- the graph ------------------------------------------------------------------------------------


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

    ops, row_op, row_span, offsets, start, end = _aligned_operations(
        events, ranks, world_size, start_raw, end_raw, notes
    )

    category = events["category"].astype(str).to_numpy()
    stream = events["stream"].astype(str).to_numpy()
    name = events["name"].astype(str).to_numpy()
    on_device = np.char.startswith(stream.astype(str), _DEVICE_PREFIX) if len(stream) else np.zeros(0, bool)
    is_op_row = row_op >= 0
    busy = np.isin(category, BUSY_CATEGORIES) & finite & ~is_op_row
    compute = (category == "compute") & busy

    lanes, lane_rows, event_lane, lane_id_of = _lanes(rank, stream, start, end, busy, compute)

    consumer = _consumer_lanes(lanes)
    b = _Builder()

    def busy_node(lane_id: int, i: int) -> int:
        lane = lanes[lane_id]
        wait_from = float(lane.busy_end[i - 1]) if i > 0 else np.nan
        return b.lane_node(lane_id, lane, float(lane.busy_start[i]), wait_from, np.nan)

    for lane_id in range(len(lanes)):
        busy_node(lane_id, 0)

    ev = _EventArrays(rank, start, end, category, name, finite, on_device, busy, row_op, row_span, event_lane)
    _launch_nodes(b, events, lanes, lane_rows, ev)
    _sync_nodes(b, lanes, ev)
    if len(ops):  # collectives: nodes, issue and consumer dependencies
        _collective_nodes(b, ops, lanes, lane_id_of, consumer, busy_node, ev, notes)
    else:
        for column in ("comm_lane", "issue", "node"):
            ops[column] = []

    nodes = pd.DataFrame(b.nodes)
    deps = pd.DataFrame(
        b.deps, columns=["node", "kind", "source", "src_lane", "src_op", "src_rank", "src_span", "time"]
    )
    nodes, deps, order = _finish(nodes, deps, lanes, ops, notes)
    return ReplayGraph(
        events=events.assign(start_aligned=start, end_aligned=end, lane=event_lane, span=row_span),
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
