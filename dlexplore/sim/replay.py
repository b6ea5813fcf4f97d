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
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .._version import __version__
from ..errors import DlexploreError
from ..fit.alpha_beta import AlphaBeta, fit_network
from ..traces.breakdown import breakdown
from ..traces.schema import Trace
from .graph import ReplayGraph, build_graph
from .network import transfer_ratio

__all__ = [
    "Scenario",
    "ReplayResult",
    "REPLAY_VARIABLES",
    "SUMMARY_VARIABLES",
    "parse_factor",
    "replay",
    "replay_events",
    "whatif",
    "scenario_summary",
    "identity_error",
]

#: Replayed variables on (scenario, rank, step): units and long name.
REPLAY_VARIABLES: dict[str, tuple[str, str]] = {
    "step_time": ("s", "replayed time per training step (first event start to last event end on the rank)"),
    "time_compute": ("s", "replayed compute time per step (union of compute intervals)"),
    "time_comm": ("s", "replayed communication time per step (union of communication intervals)"),
    "time_comm_exposed": ("s", "replayed communication time not overlapped by compute on the rank"),
    "time_idle": ("s", "replayed step time with no compute, communication, memcpy, memset or data loading"),
}

#: Variables of :func:`scenario_summary`, on (scenario): units and long name.
SUMMARY_VARIABLES: dict[str, tuple[str, str]] = {
    "step_time_measured": ("s", "measured step time, mean over ranks and steps"),
    "step_time": ("s", "replayed step time, mean over ranks and steps"),
    "change": ("1", "replayed / measured step time - 1"),
    "time_comm": ("s", "replayed communication time per step, mean over ranks and steps"),
    "time_comm_exposed": ("s", "replayed exposed communication per step, mean over ranks and steps"),
    "throughput": ("samples/s", "samples per second: gpus x batch size / step time"),
}


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
    n_s = len(scenarios)
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
    nodes, deps, lanes = graph.nodes, graph.deps, graph.lanes
    n = len(nodes)
    start0 = nodes["start"].to_numpy(dtype=float)
    node_type = nodes["type"].to_numpy()
    node_lane = nodes["lane"].to_numpy(dtype=np.int64)
    prev = nodes["prev"].to_numpy(dtype=np.int64)
    prev_span = nodes["prev_span"].to_numpy(dtype=np.int64)
    wait_from = nodes["wait_from"].to_numpy(dtype=float)
    keep_gap = nodes["keep_gap"].to_numpy(dtype=float)
    release = nodes["release"].to_numpy(dtype=np.int64)
    node_rank = nodes["rank"].to_numpy(dtype=np.int64)
    kept = np.array([[r < g for g in gpus] for r in range(int(node_rank.max(initial=0)) + 1)], dtype=bool)

    # A point t on a lane, in the segment of node k, replays at S'[k] + (t - S[k]) - shrink * (compute on
    # the lane between S[k] and t): the offsets and compute amounts are fixed, so computed once here.
    node_compute = np.zeros(n)
    for lane in lanes:
        if lane.nodes:
            node_compute[lane.nodes] = lane.compute_until(start0[lane.nodes])
    lane_nodes = np.flatnonzero((node_type == "lane") & (prev >= 0))
    prev_dt = np.zeros(n)
    prev_du = np.zeros(n)
    for lane_id, lane in enumerate(lanes):
        mine = lane_nodes[node_lane[lane_nodes] == lane_id]
        if mine.size:
            p = prev[mine]
            prev_dt[mine] = wait_from[mine] - start0[p]
            prev_du[mine] = lane.compute_until(wait_from[mine]) - node_compute[p]
    n_d = len(deps)
    d_source = deps["source"].to_numpy() if n_d else np.zeros(0, dtype=object)
    d_time = deps["time"].to_numpy(dtype=float) if n_d else np.zeros(0)
    d_lag = deps["lag"].to_numpy(dtype=float) if n_d else np.zeros(0)
    d_src_node = deps["src_node"].to_numpy(dtype=np.int64) if n_d else np.zeros(0, dtype=np.int64)
    d_src_lane = deps["src_lane"].to_numpy(dtype=np.int64) if n_d else np.zeros(0, dtype=np.int64)
    d_src_span = deps["src_span"].to_numpy(dtype=np.int64) if n_d else np.zeros(0, dtype=np.int64)
    d_kind = deps["kind"].to_numpy() if n_d else np.zeros(0, dtype=object)
    d_dt = np.zeros(n_d)
    d_du = np.zeros(n_d)
    for lane_id, lane in enumerate(lanes):
        mine = np.flatnonzero((d_source == "lane") & (d_src_lane == lane_id))
        if mine.size:
            d_dt[mine] = d_time[mine] - start0[d_src_node[mine]]
            d_du[mine] = lane.compute_until(d_time[mine]) - node_compute[d_src_node[mine]]
    deps_of: dict[int, list[int]] = {}
    for d, node in enumerate(deps["node"].to_numpy(dtype=np.int64) if n_d else ()):
        deps_of.setdefault(int(node), []).append(d)

    op_rows: dict[int, np.ndarray] = {}
    if len(ops):
        for op, group in ops.groupby("op"):
            op_rows[int(op)] = group.index.to_numpy()
    span_op = ops["op"].to_numpy(dtype=np.int64) if len(ops) else np.zeros(0, dtype=np.int64)
    span_node = ops["node"].to_numpy(dtype=np.int64) if len(ops) else np.zeros(0, dtype=np.int64)
    span_rank = ops["rank"].to_numpy(dtype=np.int64) if len(ops) else np.zeros(0, dtype=np.int64)
    transfer = ops["transfer"].to_numpy(dtype=float) if len(ops) else np.zeros(0)
    late = ops["late"].to_numpy(dtype=float) if len(ops) else np.zeros(0)
    last_in: dict[int, np.ndarray] = {}

    S = np.full((n, n_s), np.nan)
    op_end = np.full((len(ops), n_s), np.nan)

    def end_of(span: int) -> np.ndarray:
        op = int(span_op[span])
        if op not in last_in:
            rows = op_rows[op]
            starts = S[span_node[rows]]
            mask = kept[span_rank[rows]]
            # ranks replayed in this scenario; with none of them in the operation, its own ranks
            masked = np.where(mask, starts, -np.inf).max(axis=0)
            last_in[op] = np.where(np.isfinite(masked), masked, starts.max(axis=0))
        if np.isnan(op_end[span, 0]):
            op_end[span] = last_in[op] + transfer[span] * ratio[span]
        return op_end[span]

    for node in graph.order:
        if node_type[node] == "lane":
            if prev[node] >= 0:
                base = S[prev[node]] + (prev_dt[node] + keep_gap[node]) - shrink * prev_du[node]
            elif release[node] < 0:
                base = np.full(n_s, start0[node])
            else:
                base = np.full(n_s, -np.inf)
        else:
            if prev_span[node] >= 0:  # the worker is free once the previous transfer is done
                base = end_of(int(prev_span[node])) + keep_gap[node]
            elif release[node] < 0:
                base = np.full(n_s, start0[node])
            else:
                base = np.full(n_s, -np.inf)
        value = base
        for d in deps_of.get(int(node), ()):
            if d_source[d] == "lane":
                src = S[d_src_node[d]] + d_dt[d] - shrink * d_du[d]
            elif d_source[d] == "op":
                src = end_of(int(d_src_span[d])) + (late[d_src_span[d]] if d_kind[d] == "sync" else 0.0)
            else:
                src = np.full(n_s, d_time[d])
            value = np.maximum(value, src + d_lag[d])
        S[node] = value
    for span in range(len(ops)):
        end_of(span)
    return ReplayResult(graph, list(scenarios), S, op_end, shrink, kept, fit, unscaled)


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


def _values(value: float | Iterable[float] | None) -> list:
    if value is None or isinstance(value, (str, int, float, np.integer, np.floating)):
        return [value]
    return list(value)


def _batch_size_from_manifest(graph: ReplayGraph) -> int | None:
    """Samples per rank per step from the collector's manifest.json beside the trace files, if any."""
    for f in graph.files[:1]:
        manifest = Path(f).parent / "manifest.json"
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        value = data.get("batch_size_per_rank") if isinstance(data, dict) else None
        return int(value) if isinstance(value, (int, float)) and value > 0 else None
    return None


def whatif(
    trace: Trace | pd.DataFrame | ReplayGraph,
    *,
    bandwidth: float | Iterable[float] = 1.0,
    latency: float | Iterable[float] = 1.0,
    compute: float | Iterable[float] = 1.0,
    gpus: int | Iterable[int] | None = None,
    batch_size: int | None = None,
    scenarios: Sequence[Scenario] | None = None,
    algorithm: str | Mapping[str, str] | None = None,
    fit: AlphaBeta | str = "auto",
) -> xr.Dataset:
    """Replay a measured trace with other bandwidth, latency, compute speed or rank count.

    Parameters
    ----------
    trace:
        A :class:`~dlexplore.traces.schema.Trace`, its event table, or a graph from
        :func:`dlexplore.sim.build_graph`.
    bandwidth, latency, compute:
        Factors (1 = as measured; bandwidth 2 = twice the bandwidth; latency 0.5 = half the
        latency; compute 1.5 = compute 1.5 times as fast). A list sweeps: every combination of
        the lists (and ``gpus``) is one scenario.
    gpus:
        Ranks (None: as measured). More ranks are copies of the measured ones (weak scaling).
    batch_size:
        Samples per rank per step, for ``throughput``; by default read from the collector's
        ``manifest.json`` beside the trace, else no throughput.
    scenarios:
        Explicit :class:`Scenario` list instead of the sweep.
    algorithm:
        Collective algorithm(s) of the alpha-beta model (default: ring for allreduce).
    fit:
        How latency and bandwidth come from the trace (:func:`dlexplore.fit.alpha_beta.fit_network`:
        ``"auto"``, ``"calibrate"``, ``"own"``), or a given :class:`~dlexplore.sim.AlphaBeta`.

    Returns
    -------
    xarray.Dataset
        Dims ``scenario`` (labels; the first is always "as measured", the identity replay),
        ``rank``, ``step``. Variables (:data:`REPLAY_VARIABLES`, seconds) on (scenario, rank,
        step); ``step_time_measured`` (s) on (rank, step); ``throughput`` (samples/s) on (scenario,
        step) when the batch size is known. Scenario coordinates ``bandwidth_factor``,
        ``latency_factor``, ``compute_factor``, ``gpus``. ``attrs``: ``source`` ("simulated:
        replay of ..."), ``measured_source``, ``identity_error`` (1: the largest relative error of
        the identity replay's per-step mean step time over ranks), the alpha-beta fit, notes.
    """
    graph = _as_graph(trace)
    world = graph.world_size
    if scenarios is None:
        scenarios = [
            Scenario(b, lat, c, g)
            for b, lat, c, g in itertools.product(
                [float(x) for x in _values(bandwidth)],
                [float(x) for x in _values(latency)],
                [float(x) for x in _values(compute)],
                _values(gpus),
            )
        ]
    scenarios = list(scenarios)
    identity = Scenario()
    scenarios = [identity] + [s for s in scenarios if s.label(world) != "as measured"]
    labels: list[str] = []
    for s in scenarios:
        label = s.label(world)
        labels.append(label if label not in labels else f"{label} ({len(labels)})")
    result = replay(graph, scenarios, algorithm=algorithm, fit=fit)
    measured = breakdown(graph.events)
    frames = []
    for i in range(len(scenarios)):
        ds = breakdown(replay_events(result, i), steps=measured["step"].to_numpy())
        frames.append(ds[list(REPLAY_VARIABLES)].reindex(rank=measured["rank"], step=measured["step"]))
    out = xr.concat(
        frames, dim=pd.Index(labels, name="scenario"), coords="minimal", compat="override", join="outer"
    )
    for name, (units, long_name) in REPLAY_VARIABLES.items():
        out[name].attrs = {"units": units, "long_name": long_name}
    out["step_time_measured"] = measured["step_time"].assign_attrs(
        units="s", long_name="measured time per training step (first event start to last event end)"
    )
    out = out.assign_coords(
        bandwidth_factor=(
            "scenario",
            [s.bandwidth for s in scenarios],
            {"units": "1", "long_name": "network bandwidth factor"},
        ),
        latency_factor=(
            "scenario",
            [s.latency for s in scenarios],
            {"units": "1", "long_name": "network latency factor"},
        ),
        compute_factor=(
            "scenario",
            [s.compute for s in scenarios],
            {"units": "1", "long_name": "compute speed factor"},
        ),
        gpus=(
            "scenario",
            [int(s.gpus) if s.gpus is not None else world for s in scenarios],
            {"units": "count", "long_name": "ranks"},
        ),
    )
    out["scenario"].attrs = {"long_name": "what-if scenario"}
    batch = batch_size if batch_size is not None else _batch_size_from_manifest(graph)
    if batch:
        per_step = out["step_time"].mean("rank")
        out["throughput"] = (out["gpus"] * batch / per_step).assign_attrs(
            units="samples/s", long_name="samples per second: gpus x batch size per rank / mean step time"
        )
    error = identity_error(out)
    out.attrs = {
        "source": f"simulated: replay of {graph.source}",
        "measured_source": graph.source,
        "kind": "simulated",
        "title": "what-if replay of a measured trace",
        "dlexplore_version": __version__,
        "identity_error": error,
        "identity_error_definition": "max over steps of |mean over ranks of replayed step_time - mean over "
        "ranks of measured step_time| / the measured mean, at unchanged parameters",
        "weak_scaling": "more ranks: each rank's work as measured, extra ranks copies of measured ones; "
        "transfers from the alpha-beta model fitted to the trace's collectives",
        **({"batch_size": int(batch)} if batch else {}),
        "clock_offsets_s": json.dumps({int(k): float(v) for k, v in graph.offsets.items()}),
        "unscaled_operations": int(result.unscaled),
        "notes": "; ".join(graph.notes) or "none",
        **result.fit.as_attrs(),
    }
    return out


def identity_error(ds: xr.Dataset) -> float:
    """Largest relative error (1) over steps of the per-step mean over ranks of the "as measured" replay."""
    replayed = ds["step_time"].isel(scenario=0).mean("rank")
    measured = ds["step_time_measured"].mean("rank")
    with np.errstate(invalid="ignore", divide="ignore"):
        error = np.abs(replayed - measured) / measured
    values = error.to_numpy()
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else float("nan")


def scenario_summary(ds: xr.Dataset) -> xr.Dataset:
    """One row per scenario of a :func:`whatif` dataset: measured and replayed step time, change,
    communication and exposed communication, throughput (variables :data:`SUMMARY_VARIABLES`)."""
    data: dict[str, Any] = {
        "step_time_measured": xr.full_like(ds["scenario"], float(ds["step_time_measured"].mean()), float),
        "step_time": ds["step_time"].mean(["rank", "step"]),
        "time_comm": ds["time_comm"].mean(["rank", "step"]),
        "time_comm_exposed": ds["time_comm_exposed"].mean(["rank", "step"]),
    }
    data["change"] = data["step_time"] / data["step_time_measured"] - 1.0
    if "throughput" in ds:
        data["throughput"] = ds["gpus"] * ds.attrs["batch_size"] / data["step_time"]
    out = xr.Dataset(
        {
            name: data[name].drop_vars([c for c in data[name].coords if c != "scenario"], errors="ignore")
            for name in SUMMARY_VARIABLES
            if name in data
        }
    )
    factors = ("bandwidth_factor", "latency_factor", "compute_factor", "gpus")
    out = out.assign_coords({c: ds[c] for c in factors})
    for name in out.data_vars:
        units, long_name = SUMMARY_VARIABLES[name]
        out[name].attrs = {"units": units, "long_name": long_name}
    out.attrs = dict(ds.attrs)
    return out
