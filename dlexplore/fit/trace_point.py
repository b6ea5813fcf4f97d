"""A traced run's measured point: step time, throughput, the step's breakdown, the collectives of a
step and the allocator's peak, at the configuration :func:`dlexplore.fit.trace_setup.infer_setup`
says the run had; and several runs as one measured dataset.

Steps more than :data:`~dlexplore.fit.trace_setup.OUTLIER_STEP` times the median step are left out
(warm-up, a checkpoint). Everything is read through the public :class:`~dlexplore.traces.Trace` API.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from ..traces import Trace
from .trace_setup import OUTLIER_STEP, TraceSetup, infer_setup

__all__ = ["TracePoint", "trace_point", "points_dataset", "step_collectives"]


@dataclass
class TracePoint:
    """The measured side of one traced run, per step and per rank unless said otherwise.

    Times in seconds (means over ranks and the steps kept), ``throughput`` in samples/s (all ranks
    together; NaN without a batch size), bytes per rank and step, ``memory_peak`` in bytes (the
    largest over ranks of the allocator's peak on a device; None without allocator events).
    ``collectives`` has one row per collective and message size: count per rank and step, time
    per operation (s) and bytes.
    """

    trace: Trace
    setup: TraceSetup
    gpus: int
    batch_size: int | None
    steps: list[int]
    dropped_steps: list[int]
    step_time: float
    step_times: np.ndarray
    throughput: float
    time_compute: float
    time_comm: float
    time_comm_exposed: float
    time_data: float
    time_idle: float
    comm_bytes: float
    collectives: Any
    memory_peak: float | None = None
    memory_relative: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.setup.label

    def breakdown(self) -> xr.Dataset:
        """The trace's breakdown over the steps kept (for the explorer's measured bars)."""
        return self.trace.breakdown(steps=self.steps)


# --- the measured point --------------------------------------------------------------------------


def _kept_steps(bd: xr.Dataset) -> tuple[list[int], list[int]]:
    per_step = bd["step_time"].mean("rank", skipna=True).values
    steps = bd["step"].values.astype(int)
    finite = np.isfinite(per_step)
    if not finite.any():
        raise DlexploreError(f"{bd.attrs.get('source', 'the trace')}: no step has a measured time")
    median = float(np.median(per_step[finite]))
    keep = finite & (per_step <= OUTLIER_STEP * median)
    return steps[keep].tolist(), steps[~keep].tolist()


def _collectives(trace: Trace, steps: Sequence[int]) -> Any:
    ev = trace.events
    ops = ev[
        (ev["category"].astype(str) == "communication")
        & (ev["collective"].astype(str) != "")
        & ev["step"].isin(list(steps))
        & np.isfinite(ev["bytes"].to_numpy(dtype=float, na_value=np.nan))
    ]
    import pandas as pd

    if ops.empty:
        return pd.DataFrame(columns=["collective", "bytes", "per_step", "time", "time_min"])
    n = max(1, len(steps) * max(1, ops["rank"].nunique()))
    table = (
        ops.assign(collective=ops["collective"].astype(str))
        .groupby(["collective", "bytes"], observed=True)["duration"]
        .agg(["size", "mean", "min"])
        .reset_index()
    )
    return pd.DataFrame(
        {
            "collective": table["collective"],
            "bytes": table["bytes"].astype(float),
            "per_step": table["size"] / n,
            "time": table["mean"].astype(float),
            "time_min": table["min"].astype(float),
        }
    )


def step_collectives(point: TracePoint) -> dict[str, np.ndarray]:
    """The collectives of one step of a traced run, for the one-step view: the kept step whose time
    is the median's, on the lowest rank; ``start``/``end``/``time`` in ms from the step's start,
    ``mib`` the message, ``name`` the event. Empty arrays where the run has none."""
    names = ("start", "end", "time", "mib", "name")
    empty = {k: np.array([], dtype=object if k == "name" else float) for k in names}
    if not point.steps:
        return empty
    ev = point.trace.events
    rank = int(ev["rank"].min())
    times = point.step_times
    step = (
        point.steps[int(np.argsort(times)[len(times) // 2])]
        if len(times) == len(point.steps)
        else point.steps[0]
    )
    mine = ev[(ev["rank"] == rank) & (ev["step"] == step)]
    marker = mine[mine["category"].astype(str) == "step"]
    start = float(marker["start"].min()) if len(marker) else float(mine["start"].min()) if len(mine) else 0.0
    ops = mine[
        (mine["category"].astype(str) == "communication")
        & (mine["collective"].astype(str) != "")
        & np.isfinite(mine["bytes"].to_numpy(dtype=float, na_value=np.nan))
    ]
    if ops.empty:
        return empty
    begin = (ops["start"].to_numpy(float) - start) * 1e3
    length = ops["duration"].to_numpy(float) * 1e3
    return {
        "start": begin,
        "end": begin + length,
        "time": length,
        "mib": ops["bytes"].to_numpy(float) / 2**20,
        "name": np.array(
            [f"{c} (step {step}, rank {rank})" for c in ops["collective"].astype(str)], dtype=object
        ),
    }


def _memory(trace: Trace) -> tuple[float | None, bool]:
    if trace.memory is None or not len(trace.memory):
        return None, False
    timeline = trace.memory_timeline()
    gpu = timeline[~timeline["device"].astype(str).str.lower().str.startswith("cpu")]
    rows = gpu if len(gpu) else timeline
    return float(rows["allocated"].max()), bool(rows["relative"].any())


def trace_point(
    trace: Trace, setup: TraceSetup | None = None, *, batch_size: int | None = None
) -> TracePoint:
    """The measured point of ``trace`` (module docstring); ``batch_size`` (per rank) where the trace
    does not give it."""
    setup = setup or infer_setup(trace)
    full = trace.breakdown()
    steps, dropped = _kept_steps(full)
    bd = trace.breakdown(steps=steps)
    batch = batch_size if batch_size is not None else setup.value("batch_size")

    def mean(name: str) -> float:
        values = bd[name].values.astype(float)
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else 0.0

    step_times = bd["step_time"].mean("rank", skipna=True).values.astype(float)
    step = mean("step_time")
    gpus = setup.value("gpus", 1)
    notes = []
    if dropped:
        notes.append(
            f"steps {', '.join(map(str, dropped))} left out: longer than {OUTLIER_STEP:g}x the median step "
            "(warm-up, a checkpoint)"
        )
    collectives = _collectives(trace, steps)
    comm_bytes = float((collectives["bytes"] * collectives["per_step"]).sum()) if len(collectives) else 0.0
    peak, relative = _memory(trace)
    return TracePoint(
        trace=trace,
        setup=setup,
        gpus=int(gpus),
        batch_size=None if batch is None else int(batch),
        steps=list(steps),
        dropped_steps=list(dropped),
        step_time=step,
        step_times=step_times,
        throughput=gpus * batch / step if batch else math.nan,
        time_compute=mean("time_compute"),
        time_comm=mean("time_comm"),
        time_comm_exposed=mean("time_comm_exposed"),
        time_data=mean("time_data"),
        time_idle=mean("time_idle"),
        comm_bytes=comm_bytes,
        collectives=collectives,
        memory_peak=peak,
        memory_relative=relative,
        notes=notes,
    )


def points_dataset(points: Iterable[TracePoint], **settings: Any) -> xr.Dataset:
    """The traced runs as a measured dataset along ``point`` (what :mod:`dlexplore.measured`
    loads): the setup as coordinates (``settings`` fill what a trace does not say) and
    ``throughput`` (samples/s), ``step_time``, ``time_compute``, ``time_comm`` and
    ``time_comm_exposed`` (s), each with units."""
    points = list(points)
    if not points:
        raise DlexploreError("no traced run to lay out")
    coords: dict[str, list] = {k: [] for k in ("label", "gpus", "batch_size", "workload", "gpu", "precision")}
    for p in points:
        coords["label"].append(p.label)
        coords["gpus"].append(p.gpus)
        coords["batch_size"].append(float(p.batch_size) if p.batch_size else math.nan)
        for name in ("workload", "gpu", "precision"):
            coords[name].append(str(p.setup.value(name, settings.get(name, "unknown"))))
    variables = {
        "throughput": (
            "samples/s",
            "measured training throughput (all ranks)",
            [p.throughput for p in points],
        ),
        "step_time": (
            "s",
            "measured time per step (mean over ranks and kept steps)",
            [p.step_time for p in points],
        ),
        "time_compute": ("s", "measured compute time per step", [p.time_compute for p in points]),
        "time_comm": ("s", "measured communication time per step", [p.time_comm for p in points]),
        "time_comm_exposed": (
            "s",
            "measured communication not hidden by compute",
            [p.time_comm_exposed for p in points],
        ),
    }
    ds = xr.Dataset(
        {
            name: xr.DataArray(np.asarray(values, float), dims="point", attrs={"units": u, "long_name": ln})
            for name, (u, ln, values) in variables.items()
        },
        coords={
            name: xr.DataArray(
                np.asarray(values, dtype=float if name in ("gpus", "batch_size") else object), dims="point"
            )
            for name, values in coords.items()
        },
    )
    ds["gpus"].attrs.update(units="count", long_name="GPUs (ranks)")
    ds["batch_size"].attrs.update(units="samples", long_name="batch per rank")
    ds.attrs["source"] = "measured: " + "; ".join(p.setup.source or p.label for p in points)
    ds.attrs["name"] = ", ".join(p.label for p in points)
    return ds
