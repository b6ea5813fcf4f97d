"""The explorer's views of hybrid data x tensor x pipeline parallel training (transformers).

:func:`hybrid_grid` evaluates the hybrid model (:func:`dlexplore.model.parallel.evaluate_hybrid`)
for one setting of tp, pp, micro-batch, ZeRO, recompute, sequence parallelism and schedule at every
GPU count and batch per GPU of the explorer's sliders at once, and lays it out as the explorer's
plots read a prediction: ``throughput``, ``step_time``, ``efficiency`` (scaling, against linear
from the smallest GPU count that can run), the memory terms, ``time_compute`` /
``time_comm_exposed`` (for the headline's bottleneck and the energy), and the hybrid parts
(``time_tp_comm``, ``time_pp_comm``, ``time_bubble``, ``time_dp_comm`` and their exposed parts,
bytes of each kind). A configuration that cannot run is NaN there and ``reason`` says why, in words
(:func:`dlexplore.model.hybrid_rules.configuration_problems`).

The batch slider stays "samples per GPU per step": the global batch is ``gpus x batch``, so a
configuration's tp and pp change how those samples are split, not how many there are; each of the
``dp`` replicas takes ``gpus x batch / dp`` samples in micro-batches of ``micro_batch`` (0: one
micro-batch of the whole replica batch).

Kept whole: the grid and the columns the step, memory and one-step views draw from it share the
variable names and the rule that a configuration which cannot run is NaN; apart, each would
restate them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..model.hybrid import resolve_inputs
from ..model.hybrid_rules import configuration_problems
from ..model.parallel import evaluate_hybrid, hybrid_setup
from ..model.pipeline import normalize_schedule
from ..model.states import normalize_recompute
from ._columns import _at
from .palette import BLUE, GIB, GREY, MIB, ORANGE, PURPLE, SKY, VERMILION, YELLOW

__all__ = [
    "HYBRID_STEP_PARTS",
    "COMM_ROWS",
    "hybrid_grid",
    "is_hybrid",
    "hybrid_step_columns",
    "hybrid_comm_columns",
    "hybrid_memory_text",
    "hybrid_headline",
    "hybrid_problems",
]

#: Step-stack parts only the hybrid model has: (column, legend label, colour).
HYBRID_STEP_PARTS = (
    ("tp_exposed", "tensor parallel (exposed)", PURPLE),
    ("pp_comm", "pipeline send/receive", YELLOW),
    ("bubble", "pipeline bubble", GREY),
)
#: The one-step view's rows in hybrid mode, bottom to top as bokeh lists factors (compute on top, as in
#: the data-parallel view).
COMM_ROWS = ("data parallel", "pipeline", "tensor parallel", "compute")

_OUT = {
    "throughput": ("samples/s", "global training throughput"),
    "step_time": ("s", "time per training step"),
    "mfu": ("1", "model FLOPs utilisation"),
    "time_compute": ("s", "forward, backward, recomputation, optimizer (and offload) time per step"),
    "time_recompute": ("s", "activation recomputation time per step"),
    "time_optimizer": ("s", "optimizer update time per step"),
    "time_bubble": ("s", "pipeline bubble time per step"),
    "time_tp_comm": ("s", "tensor-parallel collective time per step"),
    "time_tp_comm_exposed": ("s", "tensor-parallel time not hidden behind the GEMMs"),
    "time_pp_comm": ("s", "pipeline send/receive time per step"),
    "time_dp_comm": ("s", "data-parallel communication per step"),
    "time_dp_comm_exposed": ("s", "data-parallel communication not hidden behind compute"),
    "tp_comm_bytes": ("bytes", "tensor-parallel bytes sent per GPU per step"),
    "pp_comm_bytes": ("bytes", "pipeline bytes sent per GPU per step"),
    "dp_comm_bytes": ("bytes", "data-parallel bytes sent per GPU per step"),
    "micro_batches": ("count", "micro-batches per replica per step"),
    "bubble_fraction": ("1", "idle share of the pipelined time"),
    "mem_params": ("bytes", "parameter memory per GPU"),
    "mem_grads": ("bytes", "gradient memory per GPU"),
    "mem_optimizer": ("bytes", "optimizer state memory per GPU"),
    "mem_activations": ("bytes", "activation memory per GPU (the most loaded stage)"),
    "mem_workspace": ("bytes", "workspace, CUDA context and the recompute buffer per GPU"),
    "mem_total": ("bytes", "total memory per GPU"),
    "mem_capacity": ("bytes", "GPU memory capacity"),
}


def is_hybrid(pred: xr.Dataset | None) -> bool:
    """Whether ``pred`` is a :func:`hybrid_grid` prediction."""
    return pred is not None and pred.attrs.get("model") == "hybrid"


def hybrid_grid(
    workload: Any,
    gpu: str,
    network: str | None,
    *,
    gpus: Any,
    batch_sizes: Any,
    tp: int = 1,
    pp: int = 1,
    micro_batch: int = 0,
    zero: int = 0,
    recompute: str = "none",
    sequence_parallel: bool = False,
    schedule: str = "1f1b",
    virtual_stages: int = 1,
    precision: str = "bf16",
    optimizer: str = "adam",
    gpus_per_node: int = 8,
    intra_link: str = "NVLink3",
    bandwidth: float | None = None,
    latency: float | None = None,
    params: Mapping[str, float] | None = None,
) -> xr.Dataset:
    """The hybrid model on the ``gpus`` x ``batch_sizes`` (per GPU) grid for one setting of the
    hybrid controls (module docstring); ``params`` are the model's calibrated parameters
    (``compute_efficiency``, ``overlap``, ``intra_bandwidth`` ...). Bandwidth GB/s, latency s."""
    st = hybrid_setup(workload, gpu, network, intra_link, precision=precision, optimizer=optimizer)
    g = np.asarray(gpus, dtype=float)[:, None]
    b = np.asarray(batch_sizes, dtype=float)[None, :]
    shape = (g.shape[0], b.shape[1])
    settings = dict(tp=tp, pp=pp, micro_batch=micro_batch, zero=zero)
    settings.update(sequence_parallel=sequence_parallel, gpus_per_node=gpus_per_node)
    values = _grid_values(g, b, shape, schedule, virtual_stages, params, bandwidth, latency, **settings)
    rec, sch = normalize_recompute(recompute), normalize_schedule(schedule)
    out = evaluate_hybrid(st, values, recompute=rec, schedule=sch, check=False)
    reason = _reasons(st, values, sch, rec, shape)
    data = _grid_variables(out, reason, g, shape)
    ds = xr.Dataset(
        {k: xr.Variable(*v) for k, v in data.items()},
        coords={
            "gpus": ("gpus", np.asarray(gpus, dtype=np.int64), {"units": "count"}),
            "batch_size": ("batch_size", np.asarray(batch_sizes, dtype=np.int64), {"units": "samples"}),
        },
    )
    ds = ds.assign_coords(
        workload=st.wl.name,
        gpu=st.dev.name,
        precision=st.precision,
        tp=int(tp),
        pp=int(pp),
        zero=int(zero),
        recompute=rec,
        schedule=sch,
        sequence_parallel=bool(sequence_parallel),
        micro_batch_setting=int(micro_batch),
        gpus_per_node=int(gpus_per_node),
        bandwidth=float(values.get("bandwidth", st.net.bandwidth_gbs if st.net else np.nan)),
    )
    ds.attrs.update(
        model="hybrid",
        source=f"predicted: dlexplore hybrid model, {st.memory_convention} memory convention",
    )
    return ds


def _grid_values(
    g: np.ndarray,
    b: np.ndarray,
    shape: tuple[int, int],
    schedule: str,
    virtual_stages: int,
    params: Mapping[str, float] | None,
    bandwidth: float | None,
    latency: float | None,
    *,
    tp: int,
    pp: int,
    micro_batch: int,
    zero: int,
    sequence_parallel: bool,
    gpus_per_node: int,
) -> dict[str, Any]:
    """The hybrid model's inputs on the grid: global batch, micro-batch (the whole per-replica
    batch when ``micro_batch`` is 0), and the settings and calibrated parameters as scalars."""
    values = {
        "gpus": np.broadcast_to(g, shape),
        "tp": float(tp),
        "pp": float(pp),
        "batch_size": np.broadcast_to(g * b, shape),
        "zero": float(zero),
        "virtual_stages": float(virtual_stages if normalize_schedule(schedule) == "interleaved" else 1),
        "gpus_per_node": float(gpus_per_node),
        "sequence_parallel": float(bool(sequence_parallel)),
        **{k: v for k, v in (params or {}).items() if v is not None},
    }
    if bandwidth is not None:
        values["bandwidth"] = float(bandwidth)
    if latency is not None:
        values["latency"] = float(latency)
    dp = values["gpus"] / (float(tp) * float(pp))
    whole = values["batch_size"] / np.where(dp >= 1, np.floor(dp), 1.0)
    values["micro_batch"] = (
        np.broadcast_to(float(micro_batch), shape) if micro_batch else np.maximum(whole, 1)
    )
    return values


def _grid_variables(
    out: Mapping[str, Any], reason: np.ndarray, g: np.ndarray, shape: tuple[int, int]
) -> dict[str, tuple]:
    """The prediction's variables on (gpus, batch_size) with their units: NaN throughput, step and
    MFU where a configuration cannot run, and scaling efficiency from the smallest count that runs."""
    data = {}
    for name, (units, long_name) in _OUT.items():
        value = np.broadcast_to(np.asarray(out[name], dtype=float), shape)
        if name == "time_compute":
            value = value + out["time_optimizer"] + out["time_offload"]
        if name == "mem_workspace":
            value = value + out["mem_recompute"]
        data[name] = (("gpus", "batch_size"), np.array(value), {"units": units, "long_name": long_name})
    valid = np.broadcast_to(out["valid"], shape).astype(bool) & (reason == "")
    exposed = out["time_tp_comm_exposed"] + out["time_pp_comm"] + out["time_dp_comm_exposed"]
    extra = {
        "time_comm": (
            out["time_tp_comm"] + out["time_pp_comm"] + out["time_dp_comm"],
            "s",
            "all communication",
        ),
        "time_comm_exposed": (exposed, "s", "communication not hidden behind compute"),
        "time_io": (np.zeros(shape), "s", "input I/O (not modelled in hybrid mode)"),
        "time_io_exposed": (np.zeros(shape), "s", "input I/O the step waits for"),
        "fits": (np.broadcast_to(out["fits"], shape).astype(bool) & valid, "1", "fits in GPU memory"),
    }
    for name, (value, units, long_name) in extra.items():
        data[name] = (
            ("gpus", "batch_size"),
            np.broadcast_to(value, shape).copy(),
            {"units": units, "long_name": long_name},
        )
    data["valid"] = (("gpus", "batch_size"), valid, {"units": "1", "long_name": "the configuration can run"})
    data["reason"] = (("gpus", "batch_size"), reason, {"units": "", "long_name": "why it cannot run"})
    for name in ("throughput", "step_time", "mfu"):
        data[name][1][~valid] = np.nan
    thr = data["throughput"][1]
    per_gpu = np.full(shape[1], np.nan)
    for j in range(shape[1]):
        ok = np.flatnonzero(np.isfinite(thr[:, j]))
        if ok.size:
            per_gpu[j] = thr[ok[0], j] / g[ok[0], 0]
    data["efficiency"] = (
        ("gpus", "batch_size"),
        thr / (g * per_gpu[None, :]),
        {"units": "1", "long_name": "scaling efficiency against linear from the smallest count that runs"},
    )
    return data


def _reasons(st: Any, values: Mapping[str, Any], schedule: str, recompute: str, shape: tuple) -> np.ndarray:
    """Why each configuration of the grid cannot run ("" where it can): the first rule it breaks."""
    plain = resolve_inputs(st, {k: v for k, v in values.items() if k in _INPUTS}, compute=False)
    out = np.full(shape, "", dtype=object)
    for mask, message in configuration_problems(st, plain, schedule, recompute):
        hit = np.broadcast_to(mask, shape) & (out == "")
        for i in np.flatnonzero(hit):
            out.flat[i] = message(int(i))
    return out


_INPUTS = (
    "gpus",
    "tp",
    "pp",
    "micro_batch",
    "batch_size",
    "zero",
    "virtual_stages",
    "gpus_per_node",
    "sequence_parallel",
    "bandwidth",
    "latency",
    "overlap",
    "tp_overlap",
)


def hybrid_problems(pred: xr.Dataset) -> list[str]:
    """The GPU counts that cannot run, grouped by reason: ``["1, 2 GPUs: tp x pp = 2 x 2 = 4 does not
    divide gpus"]``."""
    reasons = pred["reason"].values
    groups: dict[str, list[int]] = {}
    first: dict[str, str] = {}
    for gpus, reason in zip(pred["gpus"].values.tolist(), reasons.tolist(), strict=True):
        if not reason:
            continue
        key = re.sub(r"gpus = \d+", "gpus", reason)
        groups.setdefault(key, []).append(int(gpus))
        first.setdefault(key, key)
    return [
        f"{', '.join(map(str, counts))} GPU{'' if counts == [1] else 's'}: {first[key]}"
        for key, counts in groups.items()
    ]


def hybrid_step_columns(pred: xr.Dataset, selected: int | None = None) -> dict[str, np.ndarray]:
    """The step stack per GPU count (ms): compute (optimizer included), data-parallel
    communication hidden and exposed, tensor-parallel exposed, pipeline sends and the bubble."""
    gpus = pred.gpus.values

    def ms(name: str) -> np.ndarray:
        return np.nan_to_num(pred[name].values.astype(float)) * 1e3

    valid = pred["valid"].values.astype(bool)
    dp, dp_exposed = ms("time_dp_comm"), ms("time_dp_comm_exposed")
    hidden = np.clip(dp - dp_exposed, 0.0, ms("time_compute"))
    chosen = gpus == selected
    zero = np.zeros(gpus.size)
    return {
        "label": np.array([str(int(g)) for g in gpus], dtype=object),
        "gpus": gpus.astype(float),
        "compute_only": np.where(valid, ms("time_compute") - hidden, 0.0),
        "comm_overlapped": np.where(valid, hidden, 0.0),
        "comm_exposed": np.where(valid, dp_exposed, 0.0),
        "io_exposed": zero,
        "tp_exposed": np.where(valid, ms("time_tp_comm_exposed"), 0.0),
        "pp_comm": np.where(valid, ms("time_pp_comm"), 0.0),
        "bubble": np.where(valid, ms("time_bubble"), 0.0),
        "step_time": np.where(valid, ms("step_time"), np.nan),
        "comm_total": np.where(valid, ms("time_comm"), np.nan),
        "alpha": np.where(chosen, 1.0, 0.45),
        "outline": np.where(chosen, "black", "white").astype(object),
    }


def hybrid_comm_columns(pred: xr.Dataset, gpus: int) -> dict[str, np.ndarray]:
    """One step's time by kind at ``gpus`` GPUs (ms): compute, then each kind of traffic, its part
    hidden behind compute (light) and exposed (dark), with its bytes per GPU (MiB)."""
    p = _at(pred, gpus)
    if not bool(p.valid):
        return {
            k: np.array([], dtype=object if k in ("phase", "row", "color") else float) for k in _COMM_KEYS
        }
    t = {
        k: float(p[k]) * 1e3 for k in ("time_compute", "time_tp_comm", "time_tp_comm_exposed", "time_pp_comm")
    }
    dp, dp_exposed = float(p.time_dp_comm) * 1e3, float(p.time_dp_comm_exposed) * 1e3
    # short phase names: the legend holds them in three columns of the narrowest panel
    tp_hidden = t["time_tp_comm"] - t["time_tp_comm_exposed"]
    rows = [
        ("compute", "compute", 0.0, t["time_compute"], BLUE, np.nan),
        ("tensor parallel", "tp hidden", 0.0, tp_hidden, SKY, np.nan),
        (
            "tensor parallel",
            "tp exposed",
            None,
            t["time_tp_comm_exposed"],
            PURPLE,
            float(p.tp_comm_bytes) / MIB,
        ),
        ("pipeline", "pp send/recv", 0.0, t["time_pp_comm"], YELLOW, float(p.pp_comm_bytes) / MIB),
        ("data parallel", "dp hidden", 0.0, dp - dp_exposed, ORANGE, np.nan),
        ("data parallel", "dp exposed", None, dp_exposed, VERMILION, float(p.dp_comm_bytes) / MIB),
    ]
    out: dict[str, list] = {k: [] for k in _COMM_KEYS}
    ends: dict[str, float] = {}
    for row, phase, start, length, color, mib in rows:
        begin = ends.get(row, 0.0) if start is None else start
        out["phase"].append(phase)
        out["row"].append(row)
        out["start"].append(begin)
        out["end"].append(begin + max(length, 0.0))
        out["time"].append(max(length, 0.0))
        out["color"].append(color)
        out["mib"].append(mib)
        ends[row] = begin + max(length, 0.0)
    return {
        k: np.asarray(v, dtype=object if k in ("phase", "row", "color") else float) for k, v in out.items()
    }


_COMM_KEYS = ("phase", "row", "start", "end", "time", "color", "mib")


def hybrid_memory_text(pred: xr.Dataset, gpus: int, *, short: bool = False) -> str:
    """Each memory term at ``gpus`` GPUs against the capacity, in words (``short``: the total and
    the largest term)."""
    p = _at(pred, gpus)
    if not bool(p.valid):
        return f"cannot run: {p.reason}"
    parts = [
        ("params", p.mem_params),
        ("grads", p.mem_grads),
        ("optimizer", p.mem_optimizer),
        ("activations", p.mem_activations),
        ("other", p.mem_workspace),
    ]
    head = f"{float(p.mem_total) / GIB:.1f} of {float(p.mem_capacity) / GIB:.0f} GiB"
    if short:  # a subtitle the narrowest panel holds: the largest term (the bar shows each)
        name, v = max(parts, key=lambda item: float(item[1]))
        return f"{head}; largest: {name} {float(v) / GIB:.2g} GiB"
    terms = ", ".join(f"{name} {float(v) / GIB:.3g}" for name, v in parts)
    return f"{head}: {terms}"


def hybrid_headline(pred: xr.Dataset, gpus: int) -> str:
    """One sentence for a hybrid configuration: throughput, step time, MFU and the largest part of
    the step, or why it cannot run, or that it does not fit (with the terms)."""
    p = _at(pred, gpus)
    dp = f" x dp {gpus // (int(p.tp) * int(p.pp))}" if bool(p.valid) else ""
    setup = (
        f"tp {int(p.tp)} x pp {int(p.pp)}{dp}, ZeRO {int(p.zero)}, "
        f"recompute {p.recompute}{', sequence parallel' if bool(p.sequence_parallel) else ''}"
    )
    head = f"{p.workload} on {gpus} x {p.gpu} ({setup})"
    if not bool(p.valid):
        return f"{head}: cannot run: {p.reason}."
    text = (
        f"{head}: {float(p.throughput):,.0f} samples/s, {float(p.step_time) * 1e3:,.1f} ms per step, "
        f"MFU {float(p.mfu):.0%}. "
    )
    if float(p.mem_total) > float(p.mem_capacity):
        return text + (
            f"Does NOT fit in memory ({hybrid_memory_text(pred, gpus)}): more tp or pp, ZeRO, recompute "
            "or a smaller micro-batch shrink it."
        )
    parts = {
        "compute": float(p.time_compute),
        "tensor-parallel communication": float(p.time_tp_comm_exposed),
        "pipeline sends": float(p.time_pp_comm),
        "the pipeline bubble": float(p.time_bubble),
        "data-parallel communication": float(p.time_dp_comm_exposed),
    }
    name = max(parts, key=parts.__getitem__)
    return text + f"Largest part of the step: {name} ({parts[name] / float(p.step_time):.0%})."
