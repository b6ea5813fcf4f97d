"""What-if replay of a measured iteration: the trace's own dependency graph, run with other parameters.

    import dlexplore as dlx
    from dlexplore.sim import whatif
    trace = dlx.load_trace("data/traces/gloo-mlp-2rank")
    ds = whatif(trace, bandwidth=[1, 2, 4], compute=1.5)        # xarray, (scenario, rank, step)
    ds.step_time.mean(["rank", "step"])                          # s, per scenario

The graph (:mod:`dlexplore.sim.graph`) holds every rank's lanes cut into segments, the collective
operations matched across ranks, and the dependencies between them. :func:`replay` runs it as a
discrete-event simulation, node by node in dependency order, for all scenarios at once (every time
is a vector over scenarios):

- a lane node starts at the latest of: the end of what ran before it on the lane plus the gap
  kept, and each dependency's source plus its lag; between nodes a lane's compute is divided by
  the compute factor, and everything else on it (gaps, data loading, host calls) keeps its length;
- a collective starts on its rank like a lane node (its sources: the issuing call, the launch,
  the compute stream, the previous operation on its comm lane), and ends on rank ``r`` at the
  last rank's start plus its measured transfer ``T`` times the network ratio of
  :mod:`dlexplore.sim.network` (bandwidth, latency, ranks) -- the same moment on every rank;
  each rank's recorded end adds its measured lateness.

Every event of the trace is then moved with its lane (collectives with their operation; events on
other streams with their rank's collectives), giving a replayed event table, and
:func:`dlexplore.traces.breakdown.breakdown` measures it exactly as it measures the trace: so
``step_time``, ``time_comm`` and ``time_comm_exposed`` of a replay mean what they mean for the
measurement, and at unchanged parameters the replay gives the measured numbers back.

More ranks (``gpus``) is weak scaling: each rank's work is kept as measured, the extra ranks are
copies of the measured ones (they start every operation when the rank they copy does, so they
change no maximum), and only the transfers grow with the group (the alpha-beta model). Fewer ranks
than measured replays the first ``gpus`` ranks.

Limits. Host threads of GPU ranks run at the measured speed (the compute factor is the device's);
a replay cannot invent work the trace does not show (a Horovod timeline has no compute: its
operations start no earlier than measured); dependencies are read from the trace's timing, so a
consumer that the trace never shows waiting is placed at the first work after the step's last
issue (module :mod:`dlexplore.sim.graph`).

Kept whole: the replay: the discrete-event run and the replayed event table it gives, which share
the graph's segment arithmetic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ..fit.alpha_beta import AlphaBeta, fit_network
from ..traces.schema import Trace
from .graph import ReplayGraph, build_graph
from .network import transfer_ratio

__all__ = [
    "Scenario",
    "ReplayResult",
    "parse_factor",
    "replay",
    "replay_events",
]


@dataclass(frozen=True)
class Scenario:
    """One what-if: factors on the measured run (1 = as measured).

    Attributes
    ----------
    bandwidth:
        Factor on the network bandwidth (2: twice the bandwidth, the bandwidth part of every
        transfer takes half the time), > 0.
    latency:
        Factor on the per-message latency (0.5: half the latency), >= 0.
    compute:
        Factor on compute speed (1.5: compute takes 1/1.5 of the time), > 0.
    gpus:
        Ranks in the job; None keeps the measured world size.
    """

    bandwidth: float = 1.0
    latency: float = 1.0
    compute: float = 1.0
    gpus: int | None = None

    def __post_init__(self) -> None:
        for name, low, strict in (("bandwidth", 0.0, True), ("latency", 0.0, False), ("compute", 0.0, True)):
            value = getattr(self, name)
            if (
                not isinstance(value, (int, float, np.integer, np.floating))
                or not math.isfinite(value)
                or (value <= low if strict else value < low)
            ):
                raise DlexploreError(
                    f"{name} factor must be a finite number {'>' if strict else '>='} {low:g}, got {value!r}"
                )
        if self.gpus is not None and (int(self.gpus) != self.gpus or self.gpus < 1):
            raise DlexploreError(f"gpus must be a whole number >= 1, got {self.gpus!r}")

    def label(self, world_size: int) -> str:
        """A short name: "as measured", or the factors that differ from 1 ("bandwidth x2, gpus 64")."""
        parts = [
            f"{name} x{value:g}"
            for name, value in (
                ("bandwidth", self.bandwidth),
                ("latency", self.latency),
                ("compute", self.compute),
            )
            if value != 1
        ]
        if self.gpus is not None and self.gpus != world_size:
            parts.append(f"gpus {self.gpus}")
        return ", ".join(parts) or "as measured"


_FACTOR = re.compile(r"^\s*[x×*]?\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*[x×]?\s*$")


def parse_factor(text: str | float) -> float:
    """A factor from the command line: ``x2``, ``2x``, ``2``, ``x0.5``, ``*1.5`` -> float."""
    if isinstance(text, (int, float)):
        return float(text)
    match = _FACTOR.match(str(text))
    if not match:
        raise DlexploreError(f"expected a factor such as x2, 2 or x0.5, got {text!r}")
    return float(match.group(1))


# --- the simulation -------------------------------------------------------------------------------


def _as_graph(trace: Trace | pd.DataFrame | ReplayGraph) -> ReplayGraph:
    return trace if isinstance(trace, ReplayGraph) else build_graph(trace)


@dataclass
class ReplayResult:
    """What :func:`replay` returns: replayed times for every scenario.

    Attributes
    ----------
    graph:
        The :class:`~dlexplore.sim.graph.ReplayGraph` replayed.
    scenarios:
        The :class:`Scenario` s, in the order of the last axis below.
    start:
        Replayed start (s, aligned clock) of every node of ``graph.nodes``, shape (nodes, scenarios).
    op_end:
        Replayed completion (s) of every (operation, rank) row of ``graph.ops`` (before the rank's
        recorded lateness), shape (rows, scenarios).
    shrink:
        ``1 - 1/compute`` per scenario: the fraction of compute time removed (1).
    kept:
        Which ranks take part in each scenario, shape (ranks, scenarios).
    fit:
        The :class:`~dlexplore.fit.alpha_beta.AlphaBeta` the transfers were scaled with.
    unscaled:
        (operation, rank) rows whose transfer kept its measured time (count).
    """

    graph: ReplayGraph
    scenarios: list[Scenario]
    start: np.ndarray
    op_end: np.ndarray
    shrink: np.ndarray
    kept: np.ndarray
    fit: AlphaBeta
    unscaled: int

    def __repr__(self) -> str:
        return (
            f"<dlexplore.sim.ReplayResult scenarios={len(self.scenarios)} nodes={self.start.shape[0]} "
            f"fit={self.fit.method.rsplit('.', 1)[-1]}>"
        )


def replay(
    trace: Trace | pd.DataFrame | ReplayGraph,
    scenarios: Sequence[Scenario] | Scenario = (),
    *,
    algorithm: str | Mapping[str, str] | None = None,
    fit: AlphaBeta | str = "auto",
) -> ReplayResult:
    """Run the dependency graph of ``trace`` under each scenario (module docstring).

    Returns a :class:`ReplayResult` (replayed node starts and operation ends, per scenario);
    :func:`replay_events` turns it into event tables. ``algorithm`` names the collective
    algorithm of the alpha-beta model (default: the model's first, ring for allreduce); ``fit``:
    how latency and bandwidth are fitted to the trace's collectives (``"auto"``, ``"calibrate"``,
    ``"own"``: :func:`~dlexplore.fit.alpha_beta.fit_network`), or an
    :class:`~dlexplore.fit.alpha_beta.AlphaBeta`.
    """
    graph = _as_graph(trace)
    scenarios = [scenarios] if isinstance(scenarios, Scenario) else list(scenarios) or [Scenario()]
    world = graph.world_size
    gpus = np.array([s.gpus if s.gpus is not None else world for s in scenarios], dtype=float)
    shrink = np.array([1.0 - 1.0 / s.compute for s in scenarios])
    ops = graph.ops
    if not isinstance(fit, AlphaBeta):
        key = (fit, repr(algorithm))
        if key not in graph.fits:
            graph.fits[key] = fit_network(graph.trace, ops, algorithm, fit)
        fit = graph.fits[key]
    ratio, unscaled = transfer_ratio(
        ops,
        fit,
        bandwidth=np.array([s.bandwidth for s in scenarios]),
        latency=np.array([s.latency for s in scenarios]),
        gpus=gpus,
        world_size=world,
        algorithm=algorithm,
    )
    node_rank = graph.nodes["rank"].to_numpy(dtype=np.int64)
    kept = np.array([[r < g for g in gpus] for r in range(int(node_rank.max(initial=0)) + 1)], dtype=bool)
    S, op_end = _Replay(graph, ratio, shrink, kept).run()
    return ReplayResult(graph, list(scenarios), S, op_end, shrink, kept, fit, unscaled)


class _Replay:
    """One replay of a graph under every scenario at once: node starts ``S`` (nodes x scenarios) and
    operation ends, in the graph's topological order."""

    def __init__(self, graph: ReplayGraph, ratio: np.ndarray, shrink: np.ndarray, kept: np.ndarray):
        self.graph, self.ratio, self.shrink, self.kept = graph, ratio, shrink, kept
        nodes = graph.nodes
        self.start0 = nodes["start"].to_numpy(dtype=float)
        self.node_type = nodes["type"].to_numpy()
        self.prev = nodes["prev"].to_numpy(dtype=np.int64)
        self.prev_span = nodes["prev_span"].to_numpy(dtype=np.int64)
        self.keep_gap = nodes["keep_gap"].to_numpy(dtype=float)
        self.release = nodes["release"].to_numpy(dtype=np.int64)
        self._segment_offsets()
        self._dependency_offsets()
        ops = graph.ops
        self.op_rows: dict[int, np.ndarray] = {}
        if len(ops):
            for op, group in ops.groupby("op"):
                self.op_rows[int(op)] = group.index.to_numpy()
        none_int, none_float = np.zeros(0, dtype=np.int64), np.zeros(0)
        self.span_op = ops["op"].to_numpy(dtype=np.int64) if len(ops) else none_int
        self.span_node = ops["node"].to_numpy(dtype=np.int64) if len(ops) else none_int
        self.span_rank = ops["rank"].to_numpy(dtype=np.int64) if len(ops) else none_int
        self.transfer = ops["transfer"].to_numpy(dtype=float) if len(ops) else none_float
        self.late = ops["late"].to_numpy(dtype=float) if len(ops) else none_float
        self.last_in: dict[int, np.ndarray] = {}
        self.S = np.full((len(nodes), shrink.size), np.nan)
        self.op_end = np.full((len(ops), shrink.size), np.nan)

    def _segment_offsets(self) -> None:
        # A point t on a lane, in the segment of node k, replays at S'[k] + (t - S[k]) - shrink x
        # (compute on the lane between S[k] and t): the offsets and compute amounts are fixed, so
        # computed once here.
        graph, start0, prev = self.graph, self.start0, self.prev
        n = len(graph.nodes)
        node_lane = graph.nodes["lane"].to_numpy(dtype=np.int64)
        wait_from = graph.nodes["wait_from"].to_numpy(dtype=float)
        self.node_compute = np.zeros(n)
        for lane in graph.lanes:
            if lane.nodes:
                self.node_compute[lane.nodes] = lane.compute_until(start0[lane.nodes])
        lane_nodes = np.flatnonzero((self.node_type == "lane") & (prev >= 0))
        self.prev_dt = np.zeros(n)
        self.prev_du = np.zeros(n)
        for lane_id, lane in enumerate(graph.lanes):
            mine = lane_nodes[node_lane[lane_nodes] == lane_id]
            if mine.size:
                p = prev[mine]
                self.prev_dt[mine] = wait_from[mine] - start0[p]
                self.prev_du[mine] = lane.compute_until(wait_from[mine]) - self.node_compute[p]

    def _dependency_offsets(self) -> None:
        deps = self.graph.deps
        n_d = len(deps)

        def column(name: str, dtype: Any) -> np.ndarray:
            return deps[name].to_numpy(dtype=dtype) if n_d else np.zeros(0, dtype=dtype)

        self.d_source, self.d_kind = column("source", object), column("kind", object)
        self.d_time, self.d_lag = column("time", float), column("lag", float)
        self.d_src_node, self.d_src_lane = column("src_node", np.int64), column("src_lane", np.int64)
        self.d_src_span = column("src_span", np.int64)
        self.d_dt = np.zeros(n_d)
        self.d_du = np.zeros(n_d)
        for lane_id, lane in enumerate(self.graph.lanes):
            mine = np.flatnonzero((self.d_source == "lane") & (self.d_src_lane == lane_id))
            if mine.size:
                self.d_dt[mine] = self.d_time[mine] - self.start0[self.d_src_node[mine]]
                self.d_du[mine] = (
                    lane.compute_until(self.d_time[mine]) - self.node_compute[self.d_src_node[mine]]
                )
        self.deps_of: dict[int, list[int]] = {}
        for d, node in enumerate(column("node", np.int64)):
            self.deps_of.setdefault(int(node), []).append(d)

    def end_of(self, span: int) -> np.ndarray:
        """The replayed end of an operation's span: the last replayed rank in, plus the scaled transfer."""
        op = int(self.span_op[span])
        if op not in self.last_in:
            rows = self.op_rows[op]
            starts = self.S[self.span_node[rows]]
            mask = self.kept[self.span_rank[rows]]
            # ranks replayed in this scenario; with none of them in the operation, its own ranks
            masked = np.where(mask, starts, -np.inf).max(axis=0)
            self.last_in[op] = np.where(np.isfinite(masked), masked, starts.max(axis=0))
        if np.isnan(self.op_end[span, 0]):
            self.op_end[span] = self.last_in[op] + self.transfer[span] * self.ratio[span]
        return self.op_end[span]

    def _base(self, node: int) -> np.ndarray:
        """When a node could start on its own lane: after its predecessor's segment (or transfer)."""
        n_s = self.shrink.size
        if self.node_type[node] == "lane" and self.prev[node] >= 0:
            return (
                self.S[self.prev[node]]
                + (self.prev_dt[node] + self.keep_gap[node])
                - self.shrink * self.prev_du[node]
            )
        if self.node_type[node] != "lane" and self.prev_span[node] >= 0:
            # the worker is free once the previous transfer is done
            return self.end_of(int(self.prev_span[node])) + self.keep_gap[node]
        return np.full(n_s, self.start0[node] if self.release[node] < 0 else -np.inf)

    def run(self) -> tuple[np.ndarray, np.ndarray]:
        """Node starts and operation ends (s), nodes or operations x scenarios."""
        for node in self.graph.order:
            value = self._base(node)
            for d in self.deps_of.get(int(node), ()):
                if self.d_source[d] == "lane":
                    src = self.S[self.d_src_node[d]] + self.d_dt[d] - self.shrink * self.d_du[d]
                elif self.d_source[d] == "op":
                    span = int(self.d_src_span[d])
                    src = self.end_of(span) + (self.late[span] if self.d_kind[d] == "sync" else 0.0)
                else:
                    src = np.full(self.shrink.size, self.d_time[d])
                value = np.maximum(value, src + self.d_lag[d])
            self.S[node] = value
        for span in range(len(self.graph.ops)):
            self.end_of(span)
        return self.S, self.op_end


def _lane_times(graph: ReplayGraph, result: ReplayResult, lane_id: int, t: np.ndarray) -> np.ndarray:
    """Replayed times (s), shape (len(t), scenarios), of measured times ``t`` on a lane."""
    lane = graph.lanes[lane_id]
    nodes = np.asarray(lane.nodes, dtype=np.int64)
    starts = graph.nodes["start"].to_numpy(dtype=float)[nodes]
    wait_from = graph.nodes["wait_from"].to_numpy(dtype=float)[nodes]
    k = np.maximum(np.searchsorted(starts, t, side="right") - 1, 0)
    node = nodes[k]
    du = lane.compute_until(t) - lane.compute_until(starts[k])
    out = result.start[node] + (t - starts[k])[:, None] - np.outer(du, result.shrink)
    # a point inside the wait before the next node is not later than that node
    has_next = k + 1 < nodes.size
    nxt = np.minimum(k + 1, nodes.size - 1)
    clip = has_next & (t > wait_from[nxt])
    if clip.any():
        out[clip] = np.minimum(out[clip], result.start[nodes[nxt[clip]]])
    return out


def replay_events(result: ReplayResult, scenario: int = 0) -> pd.DataFrame:
    """The trace's event table with the replayed ``start`` and ``duration`` (s) of one scenario.

    Times are on the aligned clock of the graph (reference rank's); ranks beyond the scenario's
    ``gpus`` are left out. ``attrs["source"]`` says it is simulated.
    """
    graph = result.graph
    ev = graph.events
    t0 = ev["start_aligned"].to_numpy(dtype=float)
    t1 = ev["end_aligned"].to_numpy(dtype=float)
    new0 = t0.copy()
    new1 = t1.copy()
    lane = ev["lane"].to_numpy(dtype=np.int64)
    span = ev["span"].to_numpy(dtype=np.int64)
    on_lane = (lane >= 0) & (span < 0)
    for lane_id in np.unique(lane[on_lane]):
        rows = np.flatnonzero(on_lane & (lane == lane_id))
        both = _lane_times(graph, result, int(lane_id), np.concatenate([t0[rows], t1[rows]]))[:, scenario]
        new0[rows], new1[rows] = both[: rows.size], both[rows.size :]
    ops = graph.ops
    if len(ops):
        op_start = result.start[ops["node"].to_numpy(dtype=np.int64), scenario]
        op_end = result.op_end[:, scenario] + ops["late"].to_numpy(dtype=float)
        # a rank's recorded lateness never runs into the next operation on its worker
        prev_span = graph.nodes["prev_span"].to_numpy(dtype=np.int64)[ops["node"].to_numpy(dtype=np.int64)]
        has_prev = prev_span >= 0
        np.minimum.at(op_end, prev_span[has_prev], op_start[has_prev])
        s0, s1 = ops["start"].to_numpy(dtype=float), ops["end"].to_numpy(dtype=float)
        rows = np.flatnonzero(span >= 0)
        k = span[rows]
        width = s1[k] - s0[k]
        scale = np.where(width > 0, (op_end[k] - op_start[k]) / np.where(width > 0, width, 1.0), 1.0)
        new0[rows] = op_start[k] + (t0[rows] - s0[k]) * scale
        new1[rows] = op_start[k] + (t1[rows] - s0[k]) * scale
        # everything else moves with its rank's collectives (piecewise linear between their ends)
        rest = np.flatnonzero((lane < 0) & (span < 0))
        ranks = ev["rank"].to_numpy(dtype=np.int64)
        for r in np.unique(ranks[rest]):
            mine = ops.index.to_numpy()[ops["rank"].to_numpy() == r]
            if mine.size == 0:
                continue
            x = np.concatenate([s0[mine], s1[mine]])
            y = np.concatenate([op_start[mine], op_end[mine]])
            order = np.argsort(x, kind="stable")
            x, y = x[order], np.maximum.accumulate(y[order])
            rows_r = rest[ranks[rest] == r]
            for times, out in ((t0, new0), (t1, new1)):
                t = times[rows_r]
                shifted = np.interp(t, x, y)
                before, after = t < x[0], t > x[-1]
                shifted[before] = t[before] + (y[0] - x[0])
                shifted[after] = t[after] + (y[-1] - x[-1])
                out[rows_r] = shifted
    out = ev.drop(columns=["start_aligned", "end_aligned", "lane", "span"]).copy()
    out["start"] = new0
    out["duration"] = np.maximum(new1 - new0, 0.0)
    gpus = result.scenarios[scenario].gpus
    if gpus is not None and gpus < graph.world_size:
        out = out[out["rank"].to_numpy() < gpus].reset_index(drop=True)
    out.attrs = {
        **ev.attrs,
        "source": f"simulated: replay of {graph.source}",
        "scenario": result.scenarios[scenario].label(graph.world_size),
    }
    return out


# --- what-if --------------------------------------------------------------------------------------
