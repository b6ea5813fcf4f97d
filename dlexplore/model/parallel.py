"""Hybrid data x tensor x pipeline parallel training, ZeRO, recomputation and CPU offload.

``gpus = dp * tp * pp`` GPUs train with a **global** batch of ``batch_size`` samples per step (as
Megatron-LM's ``--global-batch-size``): each of the ``dp`` replicas takes ``batch_size / dp``
samples, cut into ``m = batch_size / (dp * micro_batch)`` micro-batches that flow through ``pp``
pipeline stages of ``L / pp`` layers, each stage split ``tp`` ways (Megatron tensor parallelism).
Rank order is Megatron's: tensor-parallel ranks adjacent, then data-parallel, then pipeline.

Step time (every rank identical)::

    t_mb        = 3 F b / (tp pp R)  (+ F b / (tp pp R) full recomputation; + 4 s^2 h b L / (tp pp R)
                  selective: the attention scores and context are recomputed)
                  + tensor-parallel allreduces + pipeline send/receive           (one micro-batch)
    t_pipeline  = (m + pp - 1) t_mb            bubble fraction (pp - 1)/(m + pp - 1), GPipe and 1F1B
    step_time   = t_pipeline + exposed data-parallel communication + optimizer update + offload

with ``F`` forward FLOPs per sample, ``b`` micro-batch, ``R`` peak FLOP/s x efficiency.

Tensor parallelism (Megatron, Shoeybi et al. 2019): 2 allreduces in the forward and 2 in the
backward of every layer, each of ``s b h`` activation values (2 bytes each in 16-bit); full
recomputation repeats the forward's 2. Sequence parallelism replaces each allreduce by a
reduce-scatter plus an allgather of the same ring volume, so its time is the same (Korthikanti et
al. 2022, section 4.2.2). They run on the intra-node link when ``tp <= gpus_per_node``, else on
the network, and are not overlapped with compute.

Pipeline: each stage boundary sends one micro-batch's activations forward and receives their
gradient back (``s b h`` values each, alpha + n beta per message) on the intra-node link when the
whole job is in one node, otherwise on the network.

Data-parallel gradient reduction of the ``P / (tp pp)`` gradients a rank holds: a ring allreduce
(no ZeRO), a reduce-scatter plus an allgather of the updated parameters (ZeRO 1 and 2; the same
volume: each rank updates only its shard), and ZeRO 3 adds a second parameter allgather (one
for the forward, one for the backward: 1.5x the allreduce volume, Rajbhandari et al. 2020,
section 7). The group spans nodes when ``tp * dp > gpus_per_node``. ``overlap`` (default 0,
Megatron's default without ``--overlap-grad-reduce``) is the fraction of it allowed to hide behind
the last micro-batch's backward.

Memory per GPU (Rajbhandari et al. 2020, ZeRO): parameters, gradients and optimizer state of the
rank's ``P / (tp pp)`` parameters at :func:`dlexplore.model.memory.bytes_per_param` bytes each (2 + 2
+ 12 for mixed-precision Adam); stage 1 divides the optimizer state by ``dp``, stage 2 also the
gradients, stage 3 also the parameters. ``offload`` keeps optimizer state and fp32 master weights in
CPU memory (ZeRO-Offload, Ren et al. 2021): every step the rank's gradient shard goes to the CPU
and its updated 16-bit parameters come back over PCIe, and the CPU runs the update.

Activations of a transformer layer per micro-batch at 16 bits (Korthikanti et al. 2022, Table 2),
``s`` sequence, ``b`` micro-batch, ``h`` hidden, ``a`` heads, ``t = tp``:

=========================  ==========================  =============================
recompute                  without sequence parallel   with sequence parallel
=========================  ==========================  =============================
none                       sbh (10 + 24/t + 5as/(ht))  sbh/t (34 + 5as/h)
selective                  sbh (10 + 24/t)             34 sbh / t
full                       2 sbh                       2 sbh / t
=========================  ==========================  =============================

A stage keeps ``L / pp`` layers' activations for every micro-batch in flight: ``min(pp, m)`` on the
first stage with 1F1B, ``m`` with GPipe (all forwards before any backward). Outside the layers the
embedding and output activations (``5sh + 4sV`` per sequence at 16 bits, the catalog's figure, the
fp32 logits included) are divided over ``tp`` and counted once. fp32 activations are twice the
16-bit figures. CNN workloads only take data parallelism (and ZeRO); their activations are the
catalog's per-sample bytes x micro-batch.

What this lacks: uneven stages (embedding and logits layers sit on the first and last stages but
parameters and FLOPs are spread evenly here), the extra working memory of recomputing a layer, the
ZeRO-3 gather buffers, interleaved (virtual) pipeline schedules, overlap of tensor-parallel
communication with compute, contention of tensor-, pipeline- and data-parallel traffic for the same
links, and efficiency losses of thin GEMMs at large ``tp``. Calibrate before trusting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import xarray as xr

from .. import catalog
from ..errors import DlexploreError
from ._sweep import PREDICTED_SOURCE
from .comm import collective_time
from .compute import (
    OPTIMIZER_TRAFFIC_BYTES,
    fill_compute_defaults,
    normalize_optimizer,
    normalize_precision,
    training_peak_flops,
)
from .memory import ACTIVATION_SCALE, DEFAULT_WORKSPACE, bytes_per_param
from .operators import CATEGORIES
from .stage import stage_compute

__all__ = [
    "predict_parallel",
    "activation_bytes_per_layer",
    "model_state_bytes",
    "bubble_fraction",
    "tp_allreduce_bytes",
    "PARALLEL_VARIABLES",
    "RECOMPUTE_MODES",
    "SCHEDULES",
]

RECOMPUTE_MODES = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe")

#: units and long names of the variables :func:`predict_parallel` writes.
PARALLEL_VARIABLES: dict[str, tuple[str, str]] = {
    "step_time": ("s", "time per training step"),
    "time_compute": ("s", "forward, backward and recomputation time per step, bubble excluded"),
    "time_recompute": ("s", "activation recomputation time per step"),
    "time_bubble": ("s", "pipeline bubble (idle) time per step"),
    "time_tp_comm": ("s", "tensor-parallel collective time per step"),
    "time_pp_comm": ("s", "pipeline send/receive time per step"),
    "time_dp_comm": ("s", "data-parallel gradient (and ZeRO parameter) communication per step"),
    "time_dp_comm_exposed": ("s", "data-parallel communication not hidden behind backward"),
    "time_optimizer": ("s", "optimizer update time per step"),
    "time_offload": ("s", "CPU offload PCIe transfer time per step"),
    "bubble_fraction": ("1", "pipeline bubble fraction (pp - 1)/(m + pp - 1)"),
    "micro_batches": ("count", "micro-batches per replica per step"),
    "tp_comm_bytes": ("bytes", "tensor-parallel allreduce bytes per GPU per step"),
    "pp_comm_bytes": ("bytes", "pipeline activation and gradient bytes sent per stage per step"),
    "dp_comm_bytes": ("bytes", "data-parallel message bytes per GPU per step"),
    "offload_bytes": ("bytes", "bytes over PCIe per GPU per step for CPU offload"),
    "throughput": ("samples/s", "global training throughput"),
    "tokens_per_s": ("tokens/s", "global training throughput in tokens"),
    "efficiency": ("1", "ideal step time (all GPUs busy computing, no bubble or comm) / step time"),
    "mfu": ("1", "model FLOPs utilisation: 3 F x batch / (step time x gpus x peak FLOP/s)"),
    "mem_params": ("bytes", "parameter memory per GPU"),
    "mem_grads": ("bytes", "gradient memory per GPU"),
    "mem_optimizer": ("bytes", "optimizer state memory per GPU (0 when offloaded)"),
    "mem_activations": ("bytes", "activation memory per GPU (first pipeline stage)"),
    "mem_workspace": ("bytes", "workspace and CUDA context per GPU"),
    "mem_total": ("bytes", "total memory per GPU"),
    "mem_capacity": ("bytes", "GPU memory capacity"),
    "fits": ("1", "whether the step fits in GPU memory"),
    "mem_cpu_offload": ("bytes", "CPU memory per GPU for offloaded optimizer state"),
    "time_operator": ("s", "compute time per step by operator category (slowest stage)"),
}


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """Pipeline bubble fraction ``(p - 1) / (m + p - 1)`` of GPipe and 1F1B (Narayanan et al. 2021):
    the share of the pipelined step a stage is idle. Dimensionless."""
    return (pp - 1) / (micro_batches + pp - 1)


def tp_allreduce_bytes(seq: int, micro_batch: int, hidden: int, bytes_per_value: float = 2) -> float:
    """Bytes of one Megatron tensor-parallel allreduce: the ``s b h`` layer output, bytes."""
    return float(seq * micro_batch * hidden * bytes_per_value)


def activation_bytes_per_layer(
    seq: int, micro_batch: int, hidden: int, heads: int, *, tp: int = 1,
    recompute: str = "none", sequence_parallel: bool = False,
) -> float:
    """Korthikanti et al. (2022) activation bytes of one transformer layer for one micro-batch with
    16-bit activations (see the module docstring's table), bytes."""
    s, b, h, a, t = float(seq), float(micro_batch), float(hidden), float(heads), float(tp)
    sbh = s * b * h
    recompute = _recompute(recompute)
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if sequence_parallel:
        return sbh / t * (34 + (5 * a * s / h if recompute == "none" else 0))
    return sbh * (10 + 24 / t + (5 * a * s / (h * t) if recompute == "none" else 0))


def model_state_bytes(
    params: float, dp: int = 1, zero: int = 0, *, precision: str = "bf16", optimizer: str = "adam",
    offload: bool = False,
) -> dict[str, float]:
    """Bytes per GPU of parameters, gradients and optimizer state of ``params`` parameters
    data-parallel over ``dp`` ranks with ZeRO stage ``zero`` (Rajbhandari et al. 2020):
    ``{"params", "grads", "optimizer", "cpu"}``, ``cpu`` being the offloaded optimizer state."""
    per = bytes_per_param(precision, optimizer)
    if zero not in (0, 1, 2, 3):
        raise DlexploreError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    opt = params * per["optimizer"] / (dp if zero >= 1 else 1)
    return {
        "params": params * per["params"] / (dp if zero >= 3 else 1),
        "grads": params * per["grads"] / (dp if zero >= 2 else 1),
        "optimizer": 0.0 if offload else opt,
        "cpu": opt if offload else 0.0,
    }


def _recompute(mode: str) -> str:
    key = str(mode).strip().lower()
    if key not in RECOMPUTE_MODES:
        raise DlexploreError(f"unknown recompute {mode!r}; expected one of {', '.join(RECOMPUTE_MODES)}")
    return key


@dataclass(frozen=True)
class _Setup:
    """Catalog records and derived sizes, resolved once so the advisor can evaluate many
    configurations cheaply."""

    wl: catalog.Workload
    dev: catalog.GPU
    net: catalog.Link | None
    intra: catalog.Link
    offload_link: catalog.Link
    precision: str
    optimizer: str
    seq: int | None


def _setup(workload, gpu, network, intra_link, offload_link, precision, optimizer, seq) -> _Setup:
    wl = catalog.workload(workload)
    if seq is not None and wl.kind == "transformer" and int(seq) != wl.config["seq"]:
        cfg = dict(wl.config)
        cfg["seq"] = int(seq)
        cfg["max_positions"] = max(cfg["max_positions"], int(seq))
        wl = catalog.transformer(**cfg, name=f"{wl.name}@seq{int(seq)}")
    elif seq is not None and wl.kind != "transformer":
        raise DlexploreError(f"seq applies to transformer workloads; {wl.name!r} is a {wl.kind}")
    return _Setup(
        wl=wl, dev=catalog.gpu(gpu), net=None if network is None else catalog.network(network),
        intra=catalog.network(intra_link), offload_link=catalog.network(offload_link),
        precision=normalize_precision(precision), optimizer=normalize_optimizer(optimizer),
        seq=wl.config.get("seq"),
    )


def _check_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not float(value).is_integer() or value < minimum:
        raise DlexploreError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _evaluate(
    st: _Setup, *, gpus: int, dp: int | None, tp: int, pp: int, micro_batch: int, batch_size: int,
    recompute: str, sequence_parallel: bool, zero: int, offload: bool, schedule: str,
    gpus_per_node: int, compute_efficiency: float | None, overlap: float, workspace: float,
    cpu_bandwidth: float, attention: str = "fused", compute: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Every variable of :func:`predict_parallel` as floats (see the module docstring)."""
    wl, dev = st.wl, st.dev
    gpus, tp, pp = _check_int("gpus", gpus), _check_int("tp", tp), _check_int("pp", pp)
    micro_batch, batch_size = _check_int("micro_batch", micro_batch), _check_int("batch_size", batch_size)
    gpus_per_node = _check_int("gpus_per_node", gpus_per_node)
    recompute = _recompute(recompute)
    schedule = str(schedule).strip().lower()
    if schedule not in SCHEDULES:
        raise DlexploreError(f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if zero not in (0, 1, 2, 3):
        raise DlexploreError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    if not 0 <= overlap <= 1:
        raise DlexploreError(f"overlap must be within [0, 1], got {overlap!r}")
    if gpus % (tp * pp):
        raise DlexploreError(f"tp x pp = {tp} x {pp} = {tp * pp} does not divide gpus = {gpus}")
    dp = gpus // (tp * pp) if dp is None else _check_int("dp", dp)
    if dp * tp * pp != gpus:
        raise DlexploreError(f"dp x tp x pp = {dp} x {tp} x {pp} = {dp * tp * pp} != gpus = {gpus}")
    transformer = wl.kind == "transformer"
    if not transformer and (tp > 1 or pp > 1 or recompute != "none" or sequence_parallel):
        raise DlexploreError(
            f"{wl.name!r} is a {wl.kind}: only data parallelism and ZeRO apply "
            "(tp = pp = 1, recompute none, no sequence parallelism)"
        )
    if transformer:
        L, h, a = wl.config["layers"], wl.config["hidden"], wl.config["heads"]
        s, V = wl.config["seq"], wl.config["vocab"]
        if a % tp:
            raise DlexploreError(f"tp = {tp} must divide the {a} attention heads of {wl.name!r}")
        if L % pp:
            raise DlexploreError(f"pp = {pp} must divide the {L} layers of {wl.name!r}")
    if sequence_parallel and tp == 1:
        sequence_parallel = False  # nothing to split: Megatron ignores it without tensor parallelism
    if zero >= 2 and pp > 1:
        raise DlexploreError(
            f"ZeRO stage {zero} with pipeline parallelism (pp = {pp}): DeepSpeed's pipeline engine "
            "supports ZeRO stages 0 and 1 only"
        )
    if batch_size % (dp * micro_batch):
        raise DlexploreError(
            f"the global batch {batch_size} must be a multiple of dp x micro_batch = "
            f"{dp} x {micro_batch} = {dp * micro_batch}"
        )
    if gpus > gpus_per_node and st.net is None:
        raise DlexploreError(f"{gpus} GPUs over {gpus_per_node} per node need a network")
    m = batch_size // (dp * micro_batch)

    peak = training_peak_flops(dev, st.precision)
    params = {"compute_efficiency": compute_efficiency, **dict(compute or {})}
    fill_compute_defaults(params, dev, st.precision)
    eff = params["compute_efficiency"]
    if not 0 < eff <= 1:
        raise DlexploreError(f"compute_efficiency is a fraction of peak in (0, 1], got {eff!r}")
    rate = peak * eff
    value_bytes = 4.0 * ACTIVATION_SCALE[st.precision]  # bytes per activation value
    F = wl.flops_per_sample
    # One micro-batch on the slowest stage of one tensor-parallel group, kernel by kernel.
    stage = stage_compute(wl, dev, st.precision, micro_batch=micro_batch, tp=tp, pp=pp,
                          sequence_parallel=sequence_parallel, recompute=recompute,
                          attention=attention, params=params,
                          optimizer_traffic=OPTIMIZER_TRAFFIC_BYTES[st.optimizer])
    recomp = stage.recompute
    t_comp_mb = stage.total

    def link(intra: bool) -> tuple[float, float]:
        # what collectives see of the link: its efficiency (NCCL's per-link figure)
        lk = st.intra if intra or st.net is None else st.net
        return lk.bandwidth_gbs * lk.efficiency, lk.latency_s

    def allreduce(nbytes: float, ranks: int, per_node: int) -> float:
        """NCCL's allreduce of ``nbytes`` over ``ranks`` GPUs, ``per_node`` of them per node."""
        inter_bw, inter_lat = link(False)
        intra_bw, intra_lat = link(True)
        return float(collective_time(
            "allreduce", "nccl", nbytes, ranks, inter_bw, inter_lat, gpus_per_node=per_node,
            intra_bandwidth=intra_bw, intra_latency=intra_lat, intra_fabric=st.intra.fabric or "pcie",
            architecture=dev.architecture, nvls=st.intra.reduction == "nvls"))

    tp_bytes_mb = pp_bytes_mb = t_tp_mb = t_pp_mb = 0.0
    if transformer and tp > 1:
        n_ar = (4 + (2 if recompute == "full" else 0)) * (L // pp)
        msg = tp_allreduce_bytes(s, micro_batch, h, value_bytes)
        t_tp_mb = n_ar * allreduce(msg, tp, min(tp, gpus_per_node))
        tp_bytes_mb = n_ar * msg
    if transformer and pp > 1:
        msg = s * micro_batch * h * value_bytes
        bw, lat = link(gpus <= gpus_per_node)
        t_pp_mb = 2 * (lat + msg / (bw * 1e9))  # activations forward, their gradient backward
        pp_bytes_mb = 2 * msg
    t_mb = t_comp_mb + t_tp_mb + t_pp_mb
    t_pipeline = (m + pp - 1) * t_mb

    # Data-parallel gradient reduction of this rank's parameters.
    P = wl.params
    p_rank = P / (tp * pp)
    per = bytes_per_param(st.precision, st.optimizer)
    grad_bytes = p_rank * per["grads"]
    t_dp = dp_bytes = 0.0
    if dp > 1:
        bw, lat = link(tp * dp <= gpus_per_node)
        if zero == 0:
            # Megatron's rank order: tensor-parallel ranks adjacent, then data-parallel ones
            t_dp = allreduce(grad_bytes, dp, min(dp, max(1, gpus_per_node // tp)))
            dp_bytes = 2 * (dp - 1) / dp * grad_bytes
        else:
            rs = float(collective_time("reduce_scatter", "ring", grad_bytes, dp, bw, lat))
            ag = float(collective_time("allgather", "ring", p_rank * per["params"], dp, bw, lat))
            t_dp = rs + ag * (2 if zero == 3 else 1)
            dp_bytes = (dp - 1) / dp * (grad_bytes + p_rank * per["params"] * (2 if zero == 3 else 1))
    hide = stage.backward  # the last micro-batch's backward
    t_dp_exposed = (1 - overlap) * t_dp + overlap * max(0.0, t_dp - hide)

    # Optimizer update over the parameters this rank owns.
    p_update = p_rank / (dp if zero >= 1 else 1)
    traffic = OPTIMIZER_TRAFFIC_BYTES[st.optimizer] * p_update
    t_opt = traffic / (params["memory_efficiency"] * dev.memory_bandwidth_gbs * 1e9)
    t_off = off_bytes = 0.0
    if offload:
        t_opt = traffic / (cpu_bandwidth * 1e9)
        off_bytes = p_update * (per["grads"] + per["params"])  # gradients down, parameters up
        t_off = off_bytes / (st.offload_link.bandwidth_gbs * 1e9)

    step = t_pipeline + t_dp_exposed + t_opt + t_off

    # Memory per GPU.
    states = model_state_bytes(p_rank, dp, zero, precision=st.precision, optimizer=st.optimizer,
                               offload=offload)
    if transformer:
        per_layer = activation_bytes_per_layer(s, micro_batch, h, a, tp=tp, recompute=recompute,
                                               sequence_parallel=sequence_parallel)
        outside = (5 * s * h + 4 * s * V) * micro_batch / tp  # embedding and logits, 16-bit figure
        in_flight = min(pp, m) if schedule == "1f1b" else m
        acts = (per_layer * (L // pp) * in_flight + outside) * value_bytes / 2
    else:
        acts = wl.activation_bytes_per_sample * ACTIVATION_SCALE[st.precision] * micro_batch
    total = states["params"] + states["grads"] + states["optimizer"] + acts + workspace

    ideal = 3 * F * batch_size / (gpus * rate)  # every FLOP at the GEMM plateau, nothing else
    out = {
        "step_time": step,
        "time_compute": m * t_comp_mb,
        "time_recompute": m * recomp,
        "time_bubble": (pp - 1) * t_mb,
        "time_tp_comm": m * t_tp_mb,
        "time_pp_comm": m * t_pp_mb,
        "time_dp_comm": t_dp,
        "time_dp_comm_exposed": t_dp_exposed,
        "time_optimizer": t_opt,
        "time_offload": t_off,
        "bubble_fraction": bubble_fraction(pp, m),
        "micro_batches": m,
        "tp_comm_bytes": m * tp_bytes_mb,
        "pp_comm_bytes": m * pp_bytes_mb,
        "dp_comm_bytes": dp_bytes,
        "offload_bytes": off_bytes,
        "throughput": batch_size / step,
        "tokens_per_s": batch_size * (s if transformer else math.nan) / step,
        "efficiency": ideal / step,
        "mfu": 3 * F * batch_size / (step * gpus * peak),
        "mem_params": states["params"],
        "mem_grads": states["grads"],
        "mem_optimizer": states["optimizer"],
        "mem_activations": acts,
        "mem_workspace": float(workspace),
        "mem_total": total,
        "mem_capacity": dev.memory_bytes,
        "fits": bool(total <= dev.memory_bytes),
        "mem_cpu_offload": states["cpu"],
    }
    out["_coords"] = dict(
        gpus=gpus, dp=dp, tp=tp, pp=pp, micro_batch=micro_batch, batch_size=batch_size,
        seq=s if transformer else 0, recompute=recompute, sequence_parallel=bool(sequence_parallel),
        zero=int(zero), offload=bool(offload), schedule=schedule, peak_flops=peak,
        compute_efficiency=eff, attention=attention,
        **{k: float(v) for k, v in params.items() if k != "compute_efficiency"},
    )
    out["_operators"] = stage.by_category * m
    return out


_COORD_UNITS = {
    "gpus": ("count", "GPUs (total devices)"),
    "dp": ("count", "data-parallel degree"),
    "tp": ("count", "tensor-parallel degree"),
    "pp": ("count", "pipeline-parallel degree (stages)"),
    "micro_batch": ("samples", "micro-batch size"),
    "batch_size": ("samples", "global batch size per step"),
    "seq": ("tokens", "sequence length"),
    "zero": ("1", "ZeRO stage"),
    "peak_flops": ("FLOP/s", "peak dense FLOP/s of the GPU at this precision"),
    "compute_efficiency": ("1", "fraction of peak FLOP/s that large GEMMs reach"),
    "memory_efficiency": ("1", "fraction of GPU memory bandwidth reached by memory-bound kernels"),
    "kernel_time": ("s", "fixed time of one GPU kernel"),
    "winograd_speedup": ("1", "FLOP saving of Winograd's algorithm on 3x3 convolutions"),
    "flash_efficiency": ("1", "fraction of peak FLOP/s a flash-attention kernel reaches"),
}


def predict_parallel(
    workload: str | catalog.Workload = "gpt2",
    gpu: str | catalog.GPU = "A100-80GB",
    network: str | catalog.Link | None = "IB-HDR",
    *,
    gpus: int = 8,
    dp: int | None = None,
    tp: int = 1,
    pp: int = 1,
    micro_batch: int = 1,
    batch_size: int | None = None,
    seq: int | None = None,
    recompute: str = "none",
    sequence_parallel: bool = False,
    zero: int = 0,
    offload: bool = False,
    schedule: str = "1f1b",
    precision: str = "bf16",
    optimizer: str = "adam",
    gpus_per_node: int = 8,
    intra_link: str | catalog.Link = "NVLink3",
    offload_link: str | catalog.Link = "PCIe4",
    cpu_bandwidth: float = 100.0,
    compute_efficiency: float | None = None,
    overlap: float = 0.0,
    workspace: float = DEFAULT_WORKSPACE,
    attention: str = "fused",
    memory_efficiency: float | None = None,
    kernel_time: float | None = None,
    flash_efficiency: float | None = None,
) -> xr.Dataset:
    """Predict step time, throughput and memory per GPU of hybrid dp x tp x pp training.

    Scalars only (use :func:`dlexplore.advisor.advise` to compare many configurations). Units:
    ``batch_size`` and ``micro_batch`` samples (``batch_size`` is the **global** batch per step,
    default ``dp * micro_batch``, i.e. one micro-batch per replica), ``seq`` tokens (default the
    workload's), ``cpu_bandwidth`` GB/s (the CPU's memory bandwidth for offloaded updates),
    ``workspace`` bytes, ``compute_efficiency`` and ``overlap`` fractions.

    Parameters
    ----------
    gpus, dp, tp, pp:
        ``dp * tp * pp`` must equal ``gpus``; ``dp`` defaults to ``gpus / (tp * pp)``. ``tp`` must
        divide the heads, ``pp`` the layers; CNN workloads take ``tp = pp = 1`` only.
    recompute:
        ``none``, ``selective`` (attention scores recomputed) or ``full`` (each layer's forward
        rerun in the backward).
    zero:
        ZeRO stage 0-3 (3 is FSDP's full sharding); stages 2-3 need ``pp = 1``.
    offload:
        Optimizer state and master weights in CPU memory, updated by the CPU, over ``offload_link``.
    schedule:
        ``1f1b`` or ``gpipe``: same bubble, different activations in flight.
    gpus_per_node, intra_link:
        Node size and the link inside it; collectives across nodes use ``network``.
    compute_efficiency, memory_efficiency, kernel_time, flash_efficiency, attention:
        The per-operator compute model (:mod:`dlexplore.model.operators`, the same as
        :func:`dlexplore.predict`'s): the GEMM plateau (default from published GEMM measurements of
        the GPU), the memory-bound kernels' share of bandwidth, the fixed time per kernel (s), the
        flash-attention kernel's share of peak, and the attention kernels (``fused``, ``unfused``
        or ``flash``). The compute time is per kernel at the micro-batch, sequence length and
        tensor-parallel shapes (:mod:`dlexplore.model.stage`).

    Returns
    -------
    xarray.Dataset
        Scalar variables of :data:`PARALLEL_VARIABLES` (times s, bytes, samples/s, tokens/s,
        fractions), each with ``units`` and ``long_name``; the configuration as coordinates;
        ``attrs["source"]`` starts with ``"predicted: "``. ``time_operator`` splits the compute
        time per step by operator category (dimension ``operator``).
    """
    st = _setup(workload, gpu, network, intra_link, offload_link, precision, optimizer, seq)
    if batch_size is None:
        d = gpus // (tp * pp) if dp is None else dp
        batch_size = max(1, d) * micro_batch
    values = _evaluate(
        st, gpus=gpus, dp=dp, tp=tp, pp=pp, micro_batch=micro_batch, batch_size=batch_size,
        recompute=recompute, sequence_parallel=sequence_parallel, zero=zero, offload=offload,
        schedule=schedule, gpus_per_node=gpus_per_node, compute_efficiency=compute_efficiency,
        overlap=overlap, workspace=workspace, cpu_bandwidth=cpu_bandwidth, attention=attention,
        compute={k: v for k, v in (("memory_efficiency", memory_efficiency),
                                   ("kernel_time", kernel_time),
                                   ("flash_efficiency", flash_efficiency)) if v is not None},
    )
    coords = values.pop("_coords")
    by_operator = values.pop("_operators")
    ds = xr.Dataset({name: xr.DataArray(np.asarray(v)) for name, v in values.items()})
    ds["time_operator"] = xr.DataArray(by_operator, dims="operator",
                                       coords={"operator": list(CATEGORIES)})
    labels = {"workload": st.wl.name, "gpu": st.dev.name,
              "network": st.net.name if st.net is not None else "none",
              "intra_link": st.intra.name, "precision": st.precision, "optimizer": st.optimizer,
              "gpus_per_node": gpus_per_node}
    ds = ds.assign_coords({**coords, **labels})
    for name, (units, long_name) in {**PARALLEL_VARIABLES, **_COORD_UNITS}.items():
        if name in ds.variables:
            ds[name].attrs.update(units=units, long_name=long_name)
    ds["gpus_per_node"].attrs.update(units="count", long_name="GPUs per node")
    ds.attrs.update(
        source=PREDICTED_SOURCE + " (hybrid parallelism: Megatron tensor/pipeline, ZeRO, "
        "Korthikanti et al. 2022 activations)",
        kind="predicted", title="hybrid-parallel training step",
    )
    return ds
