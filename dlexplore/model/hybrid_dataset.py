"""The dataset :func:`dlexplore.model.parallel.predict_parallel` returns: numeric sweeps laid on
separate axes (their outer product), categorical sweeps (``recompute``, ``schedule``) concatenated,
units and long names on every variable, the configuration as coordinates.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from .conventions import PREDICTED_SOURCE, is_sweep
from .hybrid import HYBRID_INPUTS, HybridSetup, evaluate_hybrid, resolve_inputs
from .operators import CATEGORIES
from .pipeline import normalize_schedule
from .states import convention_text, normalize_recompute

__all__ = ["PARALLEL_VARIABLES", "hybrid_dataset"]

#: units and long names of the variables :func:`predict_parallel` writes.
PARALLEL_VARIABLES: dict[str, tuple[str, str]] = {
    "step_time": ("s", "time per training step"),
    "time_compute": ("s", "forward, backward and recomputation time per step, bubble excluded"),
    "time_recompute": ("s", "activation recomputation time per step"),
    "time_bubble": ("s", "pipeline bubble (idle) time per step"),
    "time_tp_comm": ("s", "tensor-parallel collective time per step"),
    "time_tp_comm_exposed": ("s", "tensor-parallel collective time not hidden behind the GEMMs"),
    "time_pp_comm": ("s", "pipeline send/receive time per step"),
    "time_dp_comm": ("s", "data-parallel gradient (and ZeRO parameter) communication per step"),
    "time_dp_comm_exposed": ("s", "data-parallel communication not hidden behind compute"),
    "time_optimizer": ("s", "optimizer update time per step"),
    "time_offload": ("s", "CPU offload PCIe transfer time per step"),
    "bubble_fraction": ("1", "idle share of the pipelined time, (p - 1)/(v m + p - 1)"),
    "bubble_overhead": ("1", "pipeline bubble over ideal time, (p - 1)/(v m) (Narayanan et al.)"),
    "micro_batches": ("count", "micro-batches per replica per step"),
    "tp_comm_bytes": ("bytes", "tensor-parallel bytes sent per GPU per step"),
    "pp_comm_bytes": ("bytes", "pipeline activation and gradient bytes sent per GPU per step"),
    "dp_comm_bytes": ("bytes", "data-parallel bytes sent per GPU per step"),
    "offload_bytes": ("bytes", "bytes over PCIe per GPU per step for CPU offload"),
    "throughput": ("samples/s", "global training throughput"),
    "tokens_per_s": ("tokens/s", "global training throughput in tokens"),
    "model_flops_per_gpu": ("FLOP/s", "model FLOP/s per GPU: 3 F x batch / (step time x gpus)"),
    "hardware_flops_per_gpu": (
        "FLOP/s",
        "FLOP/s per GPU counting recomputation (Narayanan et al. eq. 3 with full recomputation)",
    ),
    "efficiency": ("1", "ideal step time (all GPUs busy computing at the GEMM plateau) / step time"),
    "mfu": ("1", "model FLOPs utilisation: 3 F x batch / (step time x gpus x peak FLOP/s)"),
    "mem_params": ("bytes", "parameter memory per GPU"),
    "mem_grads": ("bytes", "gradient memory per GPU"),
    "mem_optimizer": ("bytes", "optimizer state memory per GPU (0 when offloaded)"),
    "mem_activations": (
        "bytes",
        "activation memory per GPU (the most loaded end stage), Korthikanti et al. 2022",
    ),
    "mem_activations_first": ("bytes", "activation memory of the first pipeline stage"),
    "mem_recompute": ("bytes", "working memory of recomputing one layer in the backward"),
    "mem_workspace": ("bytes", "workspace and CUDA context per GPU"),
    "mem_total": ("bytes", "total memory per GPU"),
    "mem_capacity": ("bytes", "GPU memory capacity"),
    "fits": ("1", "whether the step fits in GPU memory"),
    "mem_cpu_offload": ("bytes", "CPU memory per GPU for offloaded optimizer state"),
    "valid": ("1", "whether the configuration can run (sweeps: the others are NaN)"),
    "time_operator": ("s", "compute time per step by operator category (slowest stage)"),
}

_COORD_UNITS = {
    "gpus": ("count", "GPUs (total devices)"),
    "dp": ("count", "data-parallel degree"),
    "tp": ("count", "tensor-parallel degree"),
    "pp": ("count", "pipeline-parallel degree (stages)"),
    "micro_batch": ("samples", "micro-batch size"),
    "batch_size": ("samples", "global batch size per step"),
    "seq": ("tokens", "sequence length"),
    "zero": ("1", "ZeRO stage"),
    "virtual_stages": ("count", "model chunks per GPU (interleaved schedule)"),
    "gpus_per_node": ("count", "GPUs per node"),
    "sequence_parallel": ("1", "Megatron sequence parallelism"),
    "offload": ("1", "optimizer state offloaded to the CPU"),
    "overlap": ("1", "share of data-parallel communication allowed to hide behind compute"),
    "tp_overlap": ("1", "share of tensor-parallel communication allowed to hide behind GEMMs"),
    "workspace": ("bytes", "workspace and CUDA context per GPU"),
    "cpu_bandwidth": ("GB/s", "CPU memory bandwidth for offloaded updates"),
    "bandwidth": ("GB/s", "network bandwidth per GPU and direction"),
    "latency": ("s", "network latency per message"),
    "intra_bandwidth": ("GB/s", "intra-node link bandwidth per GPU and direction"),
    "intra_latency": ("s", "intra-node link latency per message"),
    "peak_flops": ("FLOP/s", "peak dense FLOP/s of the GPU at this precision"),
    "compute_efficiency": ("1", "fraction of peak FLOP/s that large GEMMs reach"),
    "memory_efficiency": ("1", "fraction of GPU memory bandwidth reached by memory-bound kernels"),
    "kernel_time": ("s", "fixed time of one GPU kernel"),
    "winograd_speedup": ("1", "FLOP saving of Winograd's algorithm on 3x3 convolutions"),
    "flash_efficiency": ("1", "fraction of peak FLOP/s a flash-attention kernel reaches"),
    "unaligned_efficiency": (
        "1",
        "share of its aligned rate a GEMM with operand rows aligned to 4-8 bytes reaches",
    ),
}

#: Settings a sequence of which is evaluated one value at a time (a dimension of that name).
_CATEGORICAL = ("recompute", "schedule")


def hybrid_dataset(
    st: HybridSetup, values: dict[str, Any], options: dict[str, Any], operators: bool | None
) -> xr.Dataset:
    """The prediction of ``st`` for the settings ``values`` (numeric sweeps: an outer product),
    ``options`` (``recompute``, ``schedule``, ``attention``; sequences are concatenated) and
    ``operators`` (``time_operator``; None: for single configurations only)."""
    categorical = [name for name in _CATEGORICAL if is_sweep(options[name])]
    if not categorical:
        return _predict_one(st, values, options, operators)
    normal = {"recompute": normalize_recompute, "schedule": normalize_schedule}
    choices = [[normal[name](v) for v in options[name]] for name in categorical]
    for name, values_ in zip(categorical, choices, strict=True):
        if len(set(values_)) != len(values_):
            raise DlexploreError(f"{name}: the sweep repeats values {values_}")
    pieces = [
        _predict_one(
            st,
            values,
            {**options, **dict(zip(categorical, combo, strict=True))},
            operators if operators is not None else False,
        )
        for combo in itertools.product(*choices)
    ]
    datasets = [p.drop_vars(categorical) for p in pieces]
    shape = [len(c) for c in choices]
    index = np.arange(len(pieces)).reshape(shape)
    out = _nest(datasets, index, categorical, choices)
    out = out.transpose(..., *categorical, "operator", missing_dims="ignore")
    out.attrs = pieces[0].attrs
    return out


def _nest(
    datasets: list[xr.Dataset], index: np.ndarray, dims: list[str], choices: list[list[str]]
) -> xr.Dataset:
    if not dims:
        return datasets[int(index)]
    parts = [_nest(datasets, index[i], dims[1:], choices[1:]) for i in range(len(choices[0]))]
    return xr.concat(
        parts,
        dim=xr.DataArray(np.array(choices[0], dtype=object), dims=dims[0], name=dims[0]),
        coords="minimal",
        compat="override",
    )


def _axes(values: dict[str, Any]) -> tuple[list[str], dict[str, np.ndarray], dict[str, Any]]:
    """The swept settings (in :data:`dlexplore.model.hybrid.HYBRID_INPUTS` order), their values,
    and every setting laid on its own axis so that the arrays broadcast to the outer product."""
    dims = [name for name in HYBRID_INPUTS if name in values and is_sweep(values[name])]
    coords: dict[str, np.ndarray] = {}
    laid: dict[str, Any] = {}
    for name, value in values.items():
        if name not in dims:
            laid[name] = value
            continue
        arr = np.asarray(value)
        if arr.ndim != 1 or arr.size == 0:
            raise DlexploreError(
                f"{name}: expected a scalar or a non-empty 1-D sequence, got shape {arr.shape}"
            )
        if len(np.unique(arr)) != arr.size:
            raise DlexploreError(f"{name}: the sweep repeats values {arr.tolist()}")
        coords[name] = arr
        shape = [1] * len(dims)
        shape[dims.index(name)] = arr.size
        laid[name] = arr.astype(float).reshape(shape)
    return dims, coords, laid


def _predict_one(
    st: HybridSetup, values: dict[str, Any], options: dict[str, Any], operators: bool | None
) -> xr.Dataset:
    dims, coords, laid = _axes(values)
    recompute = normalize_recompute(options["recompute"])
    schedule = normalize_schedule(options["schedule"])
    with_operators = (not dims) if operators is None else bool(operators)
    out = evaluate_hybrid(
        st,
        laid,
        recompute=recompute,
        schedule=schedule,
        attention=options["attention"],
        operators=with_operators,
        strict=not dims,
        check=False,  # predict_parallel checked the user's values; a band varies them itself
    )
    peak = float(out.pop("peak_flops"))
    shape = tuple(len(coords[d]) for d in dims)
    data = {}
    for name, value in out.items():
        if name == "time_operator":
            arr = np.broadcast_to(value, (*shape, len(CATEGORIES)))
            data[name] = xr.DataArray(arr, dims=[*dims, "operator"])
        else:
            data[name] = xr.DataArray(np.broadcast_to(value, shape), dims=dims)
    ds = xr.Dataset(data, coords={d: coords[d] for d in dims})
    if "time_operator" in ds:
        ds = ds.assign_coords(operator=list(CATEGORIES))
    ds = ds.assign_coords(
        _scalar_coords(st, laid, dims, shape, recompute, schedule, options["attention"], peak)
    )
    for name, (units, long_name) in {**PARALLEL_VARIABLES, **_COORD_UNITS}.items():
        if name in ds.variables:
            ds.variables[name].attrs.update(units=units, long_name=long_name)
    ds.attrs.update(
        source=PREDICTED_SOURCE + " (hybrid parallelism: Megatron tensor/pipeline, ZeRO, "
        "Korthikanti et al. 2022 activations)",
        kind="predicted",
        title="hybrid-parallel training step",
        memory_convention=convention_text(st.memory_convention, st.precision, st.optimizer),
    )
    return ds


def _scalar_coords(
    st: HybridSetup,
    laid: dict[str, Any],
    dims: list[str],
    shape: tuple,
    recompute: str,
    schedule: str,
    attention: str,
    peak: float,
) -> dict[str, Any]:
    """The configuration's coordinates: settings that are not swept as scalars (``dp`` and
    ``batch_size`` over the dimensions they vary along when derived from swept ones)."""
    resolved = resolve_inputs(st, {k: v for k, v in laid.items() if v is not None})
    coords: dict[str, Any] = {}
    for name in HYBRID_INPUTS:
        if name in dims:
            continue
        value = np.asarray(resolved[name])
        if value.size > 1:  # derived from swept settings
            coords[name] = (dims, np.broadcast_to(value, shape).copy())
            continue
        x = float(value.reshape(()))
        if name in ("sequence_parallel", "offload"):
            coords[name] = bool(x)
        elif name in _INTEGERS and np.isfinite(x) and x.is_integer():
            coords[name] = int(x)
        elif np.isfinite(x):
            coords[name] = x
    transformer = st.transformer
    coords.update(
        seq=st.wl.config["seq"] if transformer else 0,
        recompute=recompute,
        schedule=schedule,
        attention=attention,
        peak_flops=peak,
        workload=st.wl.name,
        gpu=st.dev.name,
        network=st.net.name if st.net is not None else "none",
        intra_link=st.intra.name,
        precision=st.precision,
        optimizer=st.optimizer,
    )
    return coords


_INTEGERS = ("gpus", "dp", "tp", "pp", "micro_batch", "batch_size", "zero", "virtual_stages", "gpus_per_node")
