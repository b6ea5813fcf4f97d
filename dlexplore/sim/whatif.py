"""What-if scenarios measured as the trace is: :func:`whatif` replays a trace under a sweep of
scenarios and measures every replay with :func:`dlexplore.traces.breakdown.breakdown` (step time,
communication and exposed communication on (scenario, rank, step)); :func:`scenario_summary` gives one
row per scenario; :func:`identity_error` is the unchanged replay's distance from the measurement.
How the replay runs is in :mod:`dlexplore.sim.replay`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .._version import __version__
from ..fit.alpha_beta import AlphaBeta
from ..traces.breakdown import breakdown
from ..traces.schema import Trace
from .graph import ReplayGraph
from .replay import Scenario, _as_graph, replay, replay_events

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
    scenarios, labels = _with_identity(list(scenarios), world)
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
    out = out.assign_coords(_scenario_coords(scenarios, world))
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


def _with_identity(scenarios: list[Scenario], world: int) -> tuple[list[Scenario], list[str]]:
    """The scenarios with the unchanged replay first (once), and a distinct label for each."""
    identity = Scenario()
    scenarios = [identity] + [s for s in scenarios if s.label(world) != "as measured"]
    labels: list[str] = []
    for s in scenarios:
        label = s.label(world)
        labels.append(label if label not in labels else f"{label} ({len(labels)})")
    return scenarios, labels


def _scenario_coords(scenarios: list[Scenario], world: int) -> dict:
    """Each scenario's factors and ranks, as coordinates along ``scenario`` with units."""
    return dict(
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
