"""Hybrid data x tensor x pipeline parallel training, ZeRO, recomputation and CPU offload.

``gpus = dp * tp * pp`` GPUs train with a **global** batch of ``batch_size`` samples per step (as
Megatron-LM's ``--global-batch-size``): each of the ``dp`` replicas takes ``batch_size / dp``
samples, cut into ``m = batch_size / (dp * micro_batch)`` micro-batches that flow through ``pp``
pipeline stages of ``L / pp`` layers (``v`` chunks of ``L / (pp v)`` layers each with the
interleaved schedule), each stage split ``tp`` ways (Megatron tensor parallelism). Rank order is
Megatron's: tensor-parallel ranks adjacent, then data-parallel, then pipeline.

The model, each part in its module with its formulas and sources:

- compute of one micro-batch on the slowest stage, kernel by kernel at the tensor-parallel shapes
  (:mod:`dlexplore.model.stage`, :mod:`dlexplore.model.operators`);
- the schedule: GPipe, 1F1B and Megatron-LM's interleaved 1F1B, their bubble ``(p - 1)/(v m)``,
  point-to-point traffic and activations in flight (:mod:`dlexplore.model.pipeline`);
- tensor-, pipeline- and data-parallel communication with NCCL's algorithm choice, sequence
  parallelism, ZeRO 1-3 / the distributed optimizer, overlap of tensor-parallel communication with
  the matrix products (``tp_overlap``) and of the gradient reduction with the backward
  (``overlap``) (:mod:`dlexplore.model.hybrid_comm`);
- memory: model states under a named convention (``memory_convention``: ``megatron``, 18 B/param
  in bf16 and 20 in fp16, ``megatron-fp32-grads`` 18, ``zero`` 16; sharded by ZeRO), Korthikanti
  et al. (2022)'s
  activations per recomputation mode with and without sequence parallelism, for the micro-batches
  the schedule keeps in flight (:mod:`dlexplore.model.states`);
- the step, vectorised over configurations (:mod:`dlexplore.model.hybrid`).

What this lacks: uneven stages (the embedding and logits sit on the end stages, but parameters are
spread evenly), ZeRO-3's gather buffers, contention of tensor-, pipeline- and data-parallel traffic
for the same links, overlap of pipeline sends with compute, and the framework's host-side time.
Calibrate before trusting (:func:`dlexplore.calibrate` reads hybrid tables).
"""

from __future__ import annotations

from typing import Any

import xarray as xr

from .. import catalog
from .compute import plateau_source
from .hybrid import HybridSetup, evaluate_hybrid, hybrid_setup
from .hybrid_dataset import PARALLEL_VARIABLES, hybrid_dataset
from .hybrid_rules import check_values
from .memory import DEFAULT_WORKSPACE
from .pipeline import SCHEDULES, bubble_fraction, bubble_overhead
from .states import (
    MEMORY_CONVENTIONS,
    RECOMPUTE_MODES,
    activation_bytes_per_layer,
    model_state_bytes,
)

__all__ = [
    "predict_parallel",
    "activation_bytes_per_layer",
    "model_state_bytes",
    "bubble_fraction",
    "bubble_overhead",
    "tp_allreduce_bytes",
    "PARALLEL_VARIABLES",
    "RECOMPUTE_MODES",
    "SCHEDULES",
    "MEMORY_CONVENTIONS",
    "HybridSetup",
    "hybrid_setup",
    "evaluate_hybrid",
    "CALIBRATED_PARAMETERS",
]

#: Parameters a calibration of a hybrid table fits and :func:`predict_parallel` takes from it.
CALIBRATED_PARAMETERS = (
    "compute_efficiency",
    "memory_efficiency",
    "kernel_time",
    "flash_efficiency",
    "bandwidth",
    "latency",
    "intra_bandwidth",
    "intra_latency",
    "overlap",
    "tp_overlap",
)


def tp_allreduce_bytes(seq: int, micro_batch: int, hidden: int, bytes_per_value: float = 2) -> float:
    """Bytes of one Megatron tensor-parallel allreduce: the ``s b h`` layer output, bytes."""
    return float(seq * micro_batch * hidden * bytes_per_value)


def predict_parallel(
    workload: str | catalog.Workload = "gpt2",
    gpu: str | catalog.GPU = "A100-80GB",
    network: str | catalog.Link | None = "IB-HDR",
    *,
    gpus: Any = 8,
    dp: Any = None,
    tp: Any = 1,
    pp: Any = 1,
    micro_batch: Any = 1,
    batch_size: Any = None,
    seq: int | None = None,
    recompute: str | list[str] = "none",
    sequence_parallel: Any = False,
    zero: Any = 0,
    offload: Any = False,
    schedule: str | list[str] = "1f1b",
    virtual_stages: Any = 1,
    precision: str = "bf16",
    optimizer: str = "adam",
    memory_convention: str = "megatron",
    gpus_per_node: Any = 8,
    intra_link: str | catalog.Link = "NVLink3",
    offload_link: str | catalog.Link = "PCIe4",
    cpu_bandwidth: Any = 100.0,
    compute_efficiency: Any = None,
    overlap: Any = None,
    tp_overlap: Any = None,
    workspace: Any = DEFAULT_WORKSPACE,
    attention: str = "fused",
    memory_efficiency: Any = None,
    kernel_time: Any = None,
    flash_efficiency: Any = None,
    unaligned_efficiency: Any = None,
    bandwidth: Any = None,
    latency: Any = None,
    intra_bandwidth: Any = None,
    intra_latency: Any = None,
    operators: bool | None = None,
    calibration: Any = None,
) -> xr.Dataset:
    """Predict step time, throughput and memory per GPU of hybrid dp x tp x pp training.

    Any numeric setting may be a 1-D sequence (a sweep: each becomes a dimension, and the result
    is their outer product, evaluated vectorised), ``recompute`` and ``schedule`` too; a
    configuration of a sweep that cannot run (``tp`` not dividing the heads, ...) is NaN with
    ``valid`` False, while a single configuration that cannot run raises
    :class:`~dlexplore.errors.DlexploreError` saying why. A value wrong by itself (``gpus=0``,
    ``overlap=1.5``, a negative bandwidth, a precision the GPU lacks) is refused with
    :class:`~dlexplore.errors.InvalidValueError`, inside a sweep too. Units: ``batch_size`` and
    ``micro_batch`` samples (``batch_size`` is the **global** batch per step, default
    ``dp * micro_batch``: one micro-batch per replica), ``seq`` tokens,
    ``bandwidth``/``intra_bandwidth`` GB/s per GPU and ``latency``/``intra_latency`` s (default
    the catalog's ``network`` and ``intra_link``),
    ``cpu_bandwidth`` GB/s, ``workspace`` bytes, fractions for the efficiencies and overlaps.

    Parameters
    ----------
    gpus, dp, tp, pp:
        ``dp * tp * pp`` must equal ``gpus``; ``dp`` defaults to ``gpus / (tp * pp)``. ``tp`` must
        divide the heads, ``pp`` the layers; CNN workloads take ``tp = pp = 1`` only.
    recompute:
        ``none``, ``selective`` (attention core recomputed) or ``full`` (each layer's forward rerun).
    sequence_parallel:
        Megatron sequence parallelism (reduce-scatter + all-gather instead of allreduce; sharded
        layer norms and dropouts).
    zero:
        ZeRO stage 0-3 (1 is Megatron-LM's distributed optimizer, 3 FSDP's full sharding); stages
        2-3 need ``pp = 1``.
    offload:
        Optimizer state and master weights in CPU memory, updated by the CPU, over ``offload_link``.
    schedule, virtual_stages:
        ``1f1b``, ``gpipe`` or ``interleaved`` (Megatron-LM's interleaved 1F1B with
        ``virtual_stages`` model chunks per GPU).
    memory_convention:
        How model states are counted (:mod:`dlexplore.model.states`): ``megatron`` (Megatron-LM's
        defaults: 18 B/param in bf16, fp32 gradients; 20 in fp16), ``megatron-fp32-grads`` (18),
        ``zero`` (16, Rajbhandari et al.); recorded in ``attrs["memory_convention"]``.
    overlap, tp_overlap:
        Shares (0..1, default 0) of the data-parallel communication allowed to hide behind the
        backward and forward, and of the tensor-parallel communication behind the GEMMs.
    compute_efficiency, memory_efficiency, kernel_time, flash_efficiency, unaligned_efficiency, attention:
        The per-operator compute model (:mod:`dlexplore.model.operators`); with
        ``attention="flash"`` no attention matrix is kept (:mod:`dlexplore.model.states`).
    operators:
        Also return ``time_operator``, the compute time per step by operator category (dimension
        ``operator``); default on for a single configuration, off for sweeps.
    calibration:
        A :class:`dlexplore.Calibration` of a hybrid table: its fitted parameters replace the
        defaults of the settings left out, and ``<variable>_lower`` / ``<variable>_upper``
        bound ``step_time``, ``throughput``, ``tokens_per_s``, the FLOP/s per GPU and ``mfu``
        (its prediction interval, ``attrs["band"]`` says how it is made).

    Returns
    -------
    xarray.Dataset
        The variables of :data:`PARALLEL_VARIABLES` over the sweep dimensions, each with ``units``
        and ``long_name``; the configuration as coordinates; ``attrs["source"]`` starts with
        ``"predicted: "``.
    """
    st = hybrid_setup(
        workload, gpu, network, intra_link, offload_link, precision, optimizer, seq, memory_convention
    )
    values: dict[str, Any] = dict(
        gpus=gpus,
        dp=dp,
        tp=tp,
        pp=pp,
        micro_batch=micro_batch,
        batch_size=batch_size,
        zero=zero,
        virtual_stages=virtual_stages,
        gpus_per_node=gpus_per_node,
        sequence_parallel=sequence_parallel,
        offload=offload,
        overlap=overlap,
        tp_overlap=tp_overlap,
        workspace=workspace,
        cpu_bandwidth=cpu_bandwidth,
        bandwidth=bandwidth,
        latency=latency,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        compute_efficiency=compute_efficiency,
        memory_efficiency=memory_efficiency,
        kernel_time=kernel_time,
        flash_efficiency=flash_efficiency,
        unaligned_efficiency=unaligned_efficiency,
    )
    check_values(st, values)
    if calibration is not None:
        _take_fitted(values, calibration, st)
    options = dict(recompute=recompute, schedule=schedule, attention=attention)
    ds = hybrid_dataset(st, values, options, operators)
    _say_plateau(ds, st, values)
    if calibration is not None and hasattr(calibration, "add_band"):
        ds = calibration.add_band(ds, lambda **p: hybrid_dataset(st, {**values, **p}, options, False))
    return ds


def _take_fitted(values: dict[str, Any], calibration: Any, st: HybridSetup) -> None:
    """The settings left out take a calibration's fitted values, in place."""
    fitted = calibration.fitted(workload=st.wl.name, gpu=st.dev.name, precision=st.precision)
    for name in CALIBRATED_PARAMETERS:
        if values.get(name) is None and name in fitted:
            values[name] = fitted[name]


def _say_plateau(ds: xr.Dataset, st: HybridSetup, values: dict[str, Any]) -> None:
    """Where the default GEMM plateau came from, on ``compute_efficiency`` (none was given)."""
    if values.get("compute_efficiency") is None and "compute_efficiency" in ds:
        ds["compute_efficiency"].attrs["source"] = plateau_source([st.dev], [st.precision])
