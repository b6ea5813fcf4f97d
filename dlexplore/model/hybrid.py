"""The hybrid data x tensor x pipeline parallel step, vectorised over configurations.

:func:`evaluate_hybrid` takes the configuration as numpy arrays that broadcast together (one
configuration, a list of configurations, or an outer product of sweeps laid on separate axes) and
returns every variable of :data:`dlexplore.model.parallel.PARALLEL_VARIABLES` as arrays of the
broadcast shape. Work that depends on few of the settings is done once per distinct value of them:
the kernels of one micro-batch per (tensor-parallel degree, micro-batch size, sequence parallelism,
compute parameters), the collectives per (message size, group, links), so a sweep of millions of
configurations costs a few array operations per configuration.

Per micro-batch on the slowest stage (:mod:`dlexplore.model.stage`,
:mod:`dlexplore.model.hybrid_comm`, :mod:`dlexplore.model.pipeline`)::

    t_mb       = t_forward + t_backward + t_recompute + exposed_tp + t_pp
    t_pipeline = (m + (p - 1)/v) t_mb                    (v = 1 unless interleaved)
    step_time  = t_pipeline + exposed data-parallel communication + t_optimizer + t_offload

with ``m = batch_size / (dp x micro_batch)`` micro-batches per replica. The optimizer streams
:data:`dlexplore.model.compute.OPTIMIZER_TRAFFIC_BYTES` per parameter it updates (the rank's
``P / (tp pp)``, divided by ``dp`` with ZeRO) at ``memory_efficiency`` of the GPU's bandwidth; with
``offload`` the CPU updates at ``cpu_bandwidth`` and the gradient shard goes down and the 16-bit
parameters come back over the offload link (ZeRO-Offload, Ren et al. 2021). Memory:
:mod:`dlexplore.model.states`.

Kept whole: the hybrid model's step (pipeline, tensor-, data-parallel communication, optimizer,
offload) and its flops, evaluated together on one setup for a batch of configurations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .. import catalog
from ..errors import DlexploreError
from .compute import (
    COMPUTE_PARAMETERS,
    OPTIMIZER_TRAFFIC_BYTES,
    compute_defaults,
    normalize_optimizer,
    normalize_precision,
    training_peak_flops,
)
from .hybrid_comm import Links, dp_comm, exposed, pp_comm, tp_comm
from .hybrid_memory import memory_per_gpu
from .hybrid_rules import check_values, configuration_problems, sanitized
from .memory import ACTIVATION_SCALE, DEFAULT_WORKSPACE
from .operators import CATEGORIES
from .pipeline import (
    bubble_fraction,
    bubble_overhead,
    normalize_schedule,
    p2p_messages,
    pipeline_time,
)
from .stage import GROUPS, stage_sums, stage_times
from .states import (
    normalize_convention,
    normalize_recompute,
    state_bytes_per_param,
)

__all__ = ["HybridSetup", "hybrid_setup", "evaluate_hybrid", "resolve_inputs", "HYBRID_INPUTS"]

#: The numeric settings :func:`evaluate_hybrid` takes as arrays, with their defaults (None: from the
#: catalog or the compute defaults).
HYBRID_INPUTS: dict[str, float | None] = {
    "gpus": 8,
    "dp": None,
    "tp": 1,
    "pp": 1,
    "micro_batch": 1,
    "batch_size": None,
    "zero": 0,
    "virtual_stages": 1,
    "gpus_per_node": 8,
    "sequence_parallel": 0,
    "offload": 0,
    "overlap": 0.0,
    "tp_overlap": 0.0,
    "workspace": DEFAULT_WORKSPACE,
    "cpu_bandwidth": 100.0,
    "bandwidth": None,
    "latency": None,
    "intra_bandwidth": None,
    "intra_latency": None,
    **{name: None for name in COMPUTE_PARAMETERS},
}


@dataclass(frozen=True)
class HybridSetup:
    """Catalog records and categorical settings of a hybrid prediction, resolved once."""

    wl: catalog.Workload
    dev: catalog.GPU
    net: catalog.Link | None
    intra: catalog.Link
    offload_link: catalog.Link
    precision: str
    optimizer: str
    memory_convention: str

    @property
    def transformer(self) -> bool:
        return self.wl.kind == "transformer"


def hybrid_setup(
    workload: str | catalog.Workload = "gpt2",
    gpu: str | catalog.GPU = "A100-80GB",
    network: str | catalog.Link | None = "IB-HDR",
    intra_link: str | catalog.Link = "NVLink3",
    offload_link: str | catalog.Link = "PCIe4",
    precision: str = "bf16",
    optimizer: str = "adam",
    seq: int | None = None,
    memory_convention: str = "megatron",
) -> HybridSetup:
    """Resolve the catalog records of a hybrid prediction (``seq`` rebuilds a transformer at
    another sequence length, tokens)."""
    wl = catalog.workload(workload)
    if seq is not None and wl.kind == "transformer" and int(seq) != wl.config["seq"]:
        cfg = dict(wl.config)
        cfg["seq"] = int(seq)
        cfg["max_positions"] = max(cfg["max_positions"], int(seq))
        wl = catalog.transformer(**cfg, name=f"{wl.name}@seq{int(seq)}")
    elif seq is not None and wl.kind != "transformer":
        raise DlexploreError(f"seq applies to transformer workloads; {wl.name!r} is a {wl.kind}")
    return HybridSetup(
        wl=wl,
        dev=catalog.gpu(gpu),
        net=None if network is None else catalog.network(network),
        intra=catalog.network(intra_link),
        offload_link=catalog.network(offload_link),
        precision=normalize_precision(precision),
        optimizer=normalize_optimizer(optimizer),
        memory_convention=normalize_convention(memory_convention),
    )


def resolve_inputs(
    st: HybridSetup, values: Mapping[str, npt.ArrayLike], *, compute: bool = True
) -> dict[str, np.ndarray]:
    """Every :data:`HYBRID_INPUTS` setting as a float array: the given ones, the defaults of the
    others (compute parameters from :func:`dlexplore.model.compute.compute_defaults`, NaN with
    ``compute=False``; links from the catalog; ``dp = gpus / (tp pp)``, ``batch_size = dp
    micro_batch``)."""
    unknown = set(values) - set(HYBRID_INPUTS)
    if unknown:
        raise DlexploreError(
            f"unknown hybrid setting(s) {sorted(unknown)}; expected {', '.join(HYBRID_INPUTS)}"
        )
    given = {k: v for k, v in values.items() if v is not None}
    defaults = compute_defaults(st.dev, st.precision) if compute else {}
    net = st.net
    link = {
        "bandwidth": net.bandwidth_gbs if net else np.nan,
        "latency": net.latency_s if net else np.nan,
        "intra_bandwidth": st.intra.bandwidth_gbs,
        "intra_latency": st.intra.latency_s,
    }
    out = {}
    for name, default in HYBRID_INPUTS.items():
        value = given.get(
            name, default if default is not None else defaults.get(name, link.get(name, np.nan))
        )
        out[name] = np.asarray(value, dtype=float)
    if "dp" not in given:
        out["dp"] = out["gpus"] / (out["tp"] * out["pp"])
    if "batch_size" not in given:
        out["batch_size"] = out["dp"] * out["micro_batch"]
    return out


def _distinct(flat: Mapping[str, np.ndarray], keys: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The distinct combinations of the ``keys`` columns (each a value per distinct combination)
    and, for every row, the index of its combination: one 1-D ``np.unique`` per column and one on
    a mixed-radix code of them (sorting rows of several columns costs far more)."""
    n = next(iter(flat.values())).size
    uniques, inverses = {}, {}
    for k in keys:
        uniques[k], inverse = np.unique(flat[k], return_inverse=True)
        inverses[k] = inverse.ravel()
    if np.prod([float(len(u)) for u in uniques.values()]) >= 2.0**62:  # the code would overflow
        rows = np.stack([inverses[k] for k in keys], axis=1)
        combos, which = np.unique(rows, axis=0, return_inverse=True)
        return {k: uniques[k][combos[:, i]] for i, k in enumerate(keys)}, which.ravel()
    code = np.zeros(n, dtype=np.int64)
    for k in keys:
        code = code * len(uniques[k]) + inverses[k]
    codes, which = np.unique(code, return_inverse=True)
    out = {}
    for k in reversed(keys):
        size = len(uniques[k])
        out[k] = uniques[k][codes % size]
        codes = codes // size
    return out, which.ravel()


def _combo_sums(
    st: HybridSetup, a: Mapping[str, np.ndarray], attention: str, operators: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The :data:`dlexplore.model.stage.GROUPS` sums (and, with ``operators``, the breakdown) for
    every configuration, computed once per distinct (tp, micro-batch, sequence parallelism,
    compute parameters)."""
    keys = ["tp", "sequence_parallel", "micro_batch", *COMPUTE_PARAMETERS]
    shape = np.broadcast_shapes(*(a[k].shape for k in keys))
    flat = {k: np.broadcast_to(a[k], shape).ravel() for k in keys}
    swept = ["tp", "sequence_parallel", *(k for k in keys[2:] if a[k].size > 1)]
    combos, which = _distinct(flat, swept)
    n = len(combos["tp"])
    sums = np.full((n, len(GROUPS)), np.nan)
    cats = np.full((n, 5, len(CATEGORIES)), np.nan) if operators else None
    for t, sp in set(zip(combos["tp"].tolist(), combos["sequence_parallel"].tolist(), strict=True)):
        rows = np.flatnonzero((combos["tp"] == t) & (combos["sequence_parallel"] == sp))
        heads_ok = st.wl.config["heads"] % int(t) == 0 if st.transformer else int(t) == 1
        if not (t >= 1 and float(t).is_integer() and heads_ok):
            continue  # a configuration problem: NaN
        params = {k: (combos[k][rows] if k in combos else float(flat[k][0])) for k in COMPUTE_PARAMETERS}
        mb = (
            combos["micro_batch"][rows]
            if "micro_batch" in combos
            else np.full(rows.size, flat["micro_batch"][0])
        )
        s = stage_sums(
            st.wl,
            st.dev,
            st.precision,
            micro_batch=np.maximum(mb, 1.0),
            tp=int(t),
            sequence_parallel=bool(sp),
            attention=attention,
            params=params,
            optimizer_traffic=OPTIMIZER_TRAFFIC_BYTES[st.optimizer],
        )
        sums[rows] = s.sums.reshape(rows.size, len(GROUPS))
        if cats is not None:
            cats[rows] = s.by_category.reshape(rows.size, 5, len(CATEGORIES))
    out_cats = None if cats is None else cats[which].reshape(*shape, 5, len(CATEGORIES))
    return sums[which].reshape(*shape, len(GROUPS)), out_cats


def _links(st: HybridSetup, a: Mapping[str, np.ndarray]) -> Links:
    net_eff = st.net.efficiency if st.net is not None else 1.0
    return Links(
        intra_bandwidth=a["intra_bandwidth"] * st.intra.efficiency,
        intra_latency=a["intra_latency"],
        inter_bandwidth=np.where(np.isfinite(a["bandwidth"]), a["bandwidth"], 1.0) * net_eff,
        inter_latency=np.where(np.isfinite(a["latency"]), a["latency"], 0.0),
        fabric=st.intra.fabric or "pcie",
        architecture=st.dev.architecture,
        nvls=st.intra.reduction == "nvls",
    )


def _step(
    st: HybridSetup, a: Mapping[str, np.ndarray], sums: np.ndarray, schedule: str, recompute: str
) -> dict[str, np.ndarray]:
    """Times and bytes per step (module docstring)."""
    wl, links = st.wl, _links(st, a)
    tp, pp, dp, mb = a["tp"], a["pp"], a["dp"], a["micro_batch"]
    m = a["batch_size"] / (dp * mb)
    v = a["virtual_stages"] if schedule == "interleaved" else np.ones(())
    stage = stage_times(sums, pp, recompute)
    value_bytes = 4.0 * ACTIVATION_SCALE[st.precision]
    sp = a["sequence_parallel"] > 0
    tp_time = tp_bytes = pp_time = pp_bytes = np.zeros(())
    if st.transformer:
        c = wl.config
        act = c["seq"] * mb * c["hidden"] * value_bytes  # one s x b x h tensor
        tp_time, tp_bytes = tp_comm(
            links,
            activation_bytes=act,
            tp=tp,
            gpus_per_node=a["gpus_per_node"],
            layers=c["layers"] / pp,
            full_recompute=recompute == "full",
            sequence_parallel=sp,
        )
        pp_time, pp_bytes = pp_comm(
            links,
            activation_bytes=act,
            tp=tp,
            pp=pp,
            messages=p2p_messages(schedule, v),
            intra=a["gpus"] <= a["gpus_per_node"],
            sequence_parallel=sp,
        )
    window = stage["gemm"] + (stage["recompute"] if recompute == "full" else 0.0)
    tp_exposed = tp_time - a["tp_overlap"] * np.minimum(tp_time, window)
    t_mb = stage["forward"] + stage["backward"] + stage["recompute"] + tp_exposed + pp_time
    t_pipe = pipeline_time(t_mb, pp, m, v)

    per = state_bytes_per_param(st.precision, st.optimizer, st.memory_convention)
    p_rank = wl.params / (tp * pp)
    dpc = dp_comm(
        links,
        grad_bytes=p_rank * per["grads"],
        param_bytes=p_rank * per["params"],
        dp=dp,
        tp=tp,
        gpus_per_node=a["gpus_per_node"],
        zero=a["zero"],
        micro_batches=m,
    )
    dp_exposed = (
        exposed(dpc["reduce"], a["overlap"], stage["backward"])
        + exposed(dpc["gather"], a["overlap"], stage["forward"])
        + exposed(dpc["gather3"], a["overlap"], m * (stage["forward"] + stage["backward"]))
    )
    t_opt, t_off, off_bytes = _optimizer_and_offload(st, a, p_rank, per)
    step = t_pipe + dp_exposed + t_opt + t_off
    return {
        "step_time": step,
        "time_compute": m * (stage["forward"] + stage["backward"] + stage["recompute"]),
        "time_recompute": m * stage["recompute"],
        "time_bubble": t_pipe - m * t_mb,
        "time_tp_comm": m * tp_time,
        "time_tp_comm_exposed": m * tp_exposed,
        "time_pp_comm": m * pp_time,
        "time_dp_comm": dpc["reduce"] + dpc["gather"] + dpc["gather3"],
        "time_dp_comm_exposed": dp_exposed,
        "time_optimizer": t_opt,
        "time_offload": t_off,
        "bubble_fraction": bubble_fraction(pp, m, v),
        "bubble_overhead": bubble_overhead(pp, m, v),
        "micro_batches": m,
        "tp_comm_bytes": m * tp_bytes,
        "pp_comm_bytes": m * pp_bytes,
        "dp_comm_bytes": dpc["bytes"],
        "offload_bytes": off_bytes,
    }


def _optimizer_and_offload(
    st: HybridSetup, a: Mapping[str, np.ndarray], p_rank: np.ndarray, per: Mapping[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The optimizer update's time (s: its traffic at the GPU's memory bandwidth, or the CPU's when
    offloaded), the offload's transfer time (s) and bytes, for this rank's share of the update."""
    dp = a["dp"]
    p_update = p_rank / np.where(a["zero"] >= 1, dp, 1.0)
    traffic = OPTIMIZER_TRAFFIC_BYTES[st.optimizer] * p_update
    off = a["offload"] > 0
    t_opt = np.where(
        off,
        traffic / (a["cpu_bandwidth"] * 1e9),
        traffic / (a["memory_efficiency"] * st.dev.memory_bandwidth_gbs * 1e9),
    )
    off_bytes = np.where(off, p_update * (per["grads"] + per["params"]), 0.0)
    t_off = off_bytes / (st.offload_link.bandwidth_gbs * 1e9)
    return t_opt, t_off, off_bytes


def _flops(st: HybridSetup, recompute: str) -> tuple[float, float]:
    """Forward FLOPs per sample of the whole model, and of what recomputation reruns."""
    wl = st.wl
    if not st.transformer or recompute == "none":
        return wl.flops_per_sample, 0.0
    c = wl.config
    s, h, L = c["seq"], c["hidden"], c["layers"]
    attention = 4.0 * s * s * h * L  # QK^T and PV
    if recompute == "selective":
        return wl.flops_per_sample, attention
    linear = 8.0 * s * h * h + 4.0 * s * h * c["ffn_hidden"]  # QKV, output, the two MLP products
    return wl.flops_per_sample, linear * L + attention


def evaluate_hybrid(
    st: HybridSetup,
    values: Mapping[str, npt.ArrayLike],
    *,
    recompute: str = "none",
    schedule: str = "1f1b",
    attention: str = "fused",
    operators: bool = False,
    strict: bool = False,
    check: bool = True,
) -> dict[str, np.ndarray]:
    """Every variable of the hybrid step for the configurations ``values`` (arrays of the
    :data:`HYBRID_INPUTS` settings that broadcast together; missing ones take their defaults).

    Configurations that break a rule (:func:`configuration_problems`) are NaN and ``valid`` is
    False there; with ``strict`` the first broken rule of the first such configuration raises
    :class:`~dlexplore.errors.DlexploreError` instead. With ``operators``, ``time_operator`` holds
    the compute time per step by operator category (last axis,
    :data:`dlexplore.model.operators.CATEGORIES`).

    A setting outside what it may be by itself (a GPU count below 1, a fraction above 1, a
    precision the GPU lacks) raises :class:`~dlexplore.errors.InvalidValueError` in any case
    (:func:`dlexplore.model.hybrid_rules.check_values`); ``check=False`` skips that for callers
    that checked already or that vary parameters themselves (a calibration's fit).
    """
    if check:
        check_values(st, values)
    recompute, schedule = normalize_recompute(recompute), normalize_schedule(schedule)
    plain = resolve_inputs(st, values, compute=False)
    problems = configuration_problems(st, plain, schedule, recompute)
    shape = np.broadcast_shapes(*(v.shape for v in plain.values()))
    bad = np.zeros(shape, dtype=bool)
    for mask, message in problems:
        if strict and np.any(mask):
            raise DlexploreError(message(int(np.flatnonzero(np.broadcast_to(mask, shape))[0])))
        bad |= mask
    a = resolve_inputs(st, values)
    safe = sanitized(a)
    sums, cats = _combo_sums(st, safe, attention, operators)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _step(st, safe, sums, schedule, recompute)
        out.update(memory_per_gpu(st, safe, schedule, recompute, attention))
        peak = training_peak_flops(st.dev, st.precision)
        F, F_re = _flops(st, recompute)
        batch, gpus, step = safe["batch_size"], safe["gpus"], out["step_time"]
        out["throughput"] = batch / step
        seq = st.wl.config["seq"] if st.transformer else np.nan
        out["tokens_per_s"] = batch * seq / step
        out["model_flops_per_gpu"] = 3 * F * batch / (step * gpus)
        out["hardware_flops_per_gpu"] = (3 * F + F_re) * batch / (step * gpus)
        out["mfu"] = out["model_flops_per_gpu"] / peak
        out["efficiency"] = out["model_flops_per_gpu"] / (peak * safe["compute_efficiency"])
        if cats is not None:
            out["time_operator"] = _categories(cats, safe, recompute)
    for name, value in out.items():
        if name == "time_operator":
            out[name] = np.where(bad[..., np.newaxis], np.nan, value)
        elif name == "fits":
            out[name] = np.where(bad, False, value)
        else:
            out[name] = np.where(bad, np.nan, value)
    out["valid"] = ~bad
    out["peak_flops"] = np.asarray(peak)
    return out


def _categories(cats: np.ndarray, a: Mapping[str, np.ndarray], recompute: str) -> np.ndarray:
    """Compute time per step by operator category on the slowest stage (last axis)."""
    layers_fwd, layers_bwd, core, first, last = (cats[..., g, :] for g in range(5))
    rerun = {"none": 0.0, "full": layers_fwd, "selective": core}[recompute]
    pp = a["pp"][..., np.newaxis]
    heavier_last = last.sum(axis=-1, keepdims=True) >= first.sum(axis=-1, keepdims=True)
    end = np.where(pp > 1, np.where(heavier_last, last, first), first + last)
    m = (a["batch_size"] / (a["dp"] * a["micro_batch"]))[..., np.newaxis]
    return m * ((layers_fwd + layers_bwd + rerun) / pp + end)
