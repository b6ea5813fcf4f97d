"""Compute time of a training step: forward, backward and optimizer update.

Forward time is ``FLOPs per sample x batch / (peak FLOP/s x efficiency)``; backward costs twice the
forward (one GEMM for the input gradient, one for the weight gradient, per forward GEMM). The
optimizer update is memory-bound: its time is the bytes it streams through GPU memory divided by the
memory bandwidth.

What this lacks: efficiency does not depend on batch size or layer shape (small batches and
small layers reach a lower fraction of peak than large ones); algorithms that do fewer FLOPs than the
direct convolution (Winograd, FFT; used by cuDNN for 3x3 convolutions, which is why VGG-16 can
appear to run above "peak"); kernel-launch overheads; data augmentation on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from ..catalog import GPU, PRECISIONS, architecture_defaults, gemm_plateau, model_default
from ..catalog import gpu as catalog_gpu
from ..catalog.gemm import unit_kind
from ..errors import DlexploreError
from .operators import Operators, operator_times

__all__ = [
    "DEFAULT_COMPUTE_EFFICIENCY",
    "BACKWARD_TO_FORWARD",
    "OPTIMIZERS",
    "OPTIMIZER_TRAFFIC_BYTES",
    "default_compute_efficiency",
    "forward_time",
    "optimizer_time",
    "normalize_optimizer",
    "normalize_precision",
    "training_peak_flops",
    "COMPUTE_PARAMETERS",
    "compute_defaults",
    "fill_compute_defaults",
    "plateau_source",
    "default_source",
    "kernel_times",
]

#: The numeric parameters of the per-operator compute model (:mod:`dlexplore.model.operators`).
COMPUTE_PARAMETERS = (
    "compute_efficiency",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "unaligned_efficiency",
)

#: Default fraction of peak FLOP/s reached by the whole training step, by precision. These are
#: round, commonly reported utilisations for convolution- and GEMM-heavy training (about half of
#: peak in fp32; tensor-core peaks are harder to approach, so 16-bit and TF32 reach a smaller
#: fraction). They are starting points, not fits: calibrate against your own measurements.
DEFAULT_COMPUTE_EFFICIENCY: dict[str, float] = {"fp32": 0.5, "tf32": 0.4, "fp16": 0.35, "bf16": 0.35}

#: Backward FLOPs per forward FLOP.
BACKWARD_TO_FORWARD = 2.0

OPTIMIZERS = ("sgd", "momentum", "adam")

#: Bytes read and written in GPU memory per parameter by one update. fp32 SGD reads the weight and
#: gradient and writes the weight (12); momentum adds a read and write of the velocity (20); Adam of
#: two moments (28). Mixed precision reads a 16-bit gradient and writes a 16-bit weight copy on top
#: of the fp32 master weight, which comes to the same totals.
OPTIMIZER_TRAFFIC_BYTES: dict[str, float] = {"sgd": 12.0, "momentum": 20.0, "adam": 28.0}

_OPTIMIZER_ALIASES = {"sgd-momentum": "momentum", "nesterov": "momentum", "adamw": "adam"}


def normalize_optimizer(optimizer: str) -> str:
    """Canonical optimizer name: ``sgd``, ``momentum`` or ``adam`` (``adamw`` counts as adam)."""
    key = str(optimizer).strip().lower().replace("_", "-")
    key = _OPTIMIZER_ALIASES.get(key, key)
    if key not in OPTIMIZERS:
        raise DlexploreError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
    return key


def normalize_precision(precision: str) -> str:
    """Canonical precision: ``fp32``, ``tf32``, ``fp16`` or ``bf16`` (the last two mean mixed)."""
    key = str(precision).strip().lower()
    key = {
        "float32": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "amp": "fp16",
        "mixed": "fp16",
        "bfloat16": "bf16",
    }.get(key, key)
    if key not in PRECISIONS:
        raise DlexploreError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    return key


def default_compute_efficiency(precision: str, gpu: GPU | str | None = None) -> float:
    """The default fraction of peak that large GEMMs reach on ``gpu``: fitted to the bundled
    training runs on it, else from its published GEMM measurements
    (:func:`dlexplore.catalog.gemm_plateau`); without a GPU, the whole-step round figure of
    :data:`DEFAULT_COMPUTE_EFFICIENCY` (the model before per-operator compute)."""
    precision = normalize_precision(precision)
    if gpu is None:
        return DEFAULT_COMPUTE_EFFICIENCY[precision]
    return gemm_plateau(gpu, precision).value


def default_source(name: str, gpus: Sequence[GPU | str]) -> str:
    """Where the default of the compute parameter ``name`` comes from on each of ``gpus``, for the
    ``source`` attribute of a prediction's variable: the GPU's architecture's fitted value
    (``defaults_by_architecture.csv``) or ``defaults.csv``'s."""
    said = {}
    for gpu in gpus:
        device = gpu if isinstance(gpu, GPU) else catalog_gpu(gpu)
        fitted = architecture_defaults().get((device.architecture, name))
        where = f"fitted for {device.architecture} GPUs ({fitted.source})" if fitted else "defaults.csv"
        said[device.name] = f"default {model_default(name, device):.3g}, {where}"
    return "; ".join(f"{k}: {v}" for k, v in said.items())


def plateau_source(gpus: Sequence[GPU | str], precisions: Sequence[str]) -> str:
    """Where the default GEMM plateau of each ``gpus`` x ``precisions`` comes from, for the
    ``source`` attribute of a prediction's ``compute_efficiency`` (:func:`gemm_plateau`'s rule)."""
    said = {}
    for gpu in gpus:
        for precision in precisions:
            key = normalize_precision(precision)
            found = gemm_plateau(gpu, key)
            name = getattr(gpu, "name", gpu)
            said[f"{name} {key}"] = f"default {found.value:.3g}, {found.rule}"
    return "; ".join(f"{k}: {v}" for k, v in said.items())


def compute_defaults(gpu: GPU | str, precision: str) -> dict[str, float]:
    """Default of every :data:`COMPUTE_PARAMETERS` entry for ``gpu`` at ``precision``: the GEMM
    plateau (fitted to bundled runs, else published GEMM measurements), the others from
    :func:`dlexplore.catalog.model_default` (the GPU's architecture's fitted value where there is
    one)."""
    out = {"compute_efficiency": default_compute_efficiency(precision, gpu)}
    for name in COMPUTE_PARAMETERS[1:]:
        out[name] = model_default(name, gpu)
    return out


def fill_compute_defaults(values: dict, gpu: GPU | str, precision: str) -> None:
    """Replace the ``None`` compute parameters in ``values`` by their defaults, in place."""
    missing = [name for name in COMPUTE_PARAMETERS if values.get(name) is None]
    if missing:
        defaults = compute_defaults(gpu, precision)
        for name in missing:
            values[name] = defaults[name]


def kernel_times(
    ops: Operators, batch: npt.ArrayLike, gpu: GPU, precision: str, params: Mapping[str, npt.ArrayLike]
) -> np.ndarray:
    """Time (s) of every kernel of ``ops`` for ``batch`` samples on ``gpu`` at ``precision``, with
    the compute parameters in ``params`` (:func:`dlexplore.model.operators.operator_times`).
    Winograd's saving applies on vector units only: cuDNN runs tensor-core convolutions as
    implicit GEMMs; the layout transposes (``ops.transpose``) are cuDNN's on tensor cores only: on
    vector units it convolves NCHW as it is, and other vendors' libraries (MIOpen) take NCHW. The
    penalty of unaligned operands (``unaligned_efficiency``) is the matrix units' only."""
    vector = unit_kind(gpu, precision) == "vector"
    winograd = params["winograd_speedup"] if vector else 1.0
    transposes = not vector and gpu.vendor.strip().upper() == "NVIDIA"
    times = operator_times(
        ops,
        batch,
        training_peak_flops(gpu, precision),
        gpu.memory_bandwidth_gbs,
        compute_efficiency=params["compute_efficiency"],
        memory_efficiency=params["memory_efficiency"],
        kernel_time=params["kernel_time"],
        winograd_speedup=winograd,
        flash_efficiency=params["flash_efficiency"],
        unaligned_efficiency=None if vector else params["unaligned_efficiency"],
        sm_count=int(gpu.sm_count),
    )
    return np.where(ops.transpose, 0.0, times) if not transposes and ops.transpose.any() else times


def training_peak_flops(gpu: GPU, precision: str) -> float:
    """Peak FLOP/s the training step can use at ``precision``.

    Mixed precision never runs slower than fp32: where a device's 16-bit arithmetic is slow
    (GP102, e.g. the GTX 1080 Ti, at 1/64 rate), the libraries compute 16-bit tensors with fp32
    arithmetic, so the fp32 peak applies.
    """
    precision = normalize_precision(precision)
    peak = gpu.peak_flops(precision)
    if precision in ("fp16", "bf16"):
        peak = max(peak, gpu.peak_flops("fp32"))
    return peak


def forward_time(
    flops_per_sample: float,
    batch_size: npt.ArrayLike,
    peak_flops: float,
    compute_efficiency: npt.ArrayLike,
) -> np.ndarray:
    """Forward-pass time (s) of ``batch_size`` samples: FLOPs x batch / (peak FLOP/s x efficiency)."""
    return (
        flops_per_sample
        * np.asarray(batch_size, dtype=float)
        / (peak_flops * np.asarray(compute_efficiency, dtype=float))
    )


def optimizer_time(params: float, optimizer: str, memory_bandwidth_gbs: float) -> float:
    """Optimizer update time (s): parameters x bytes streamed per parameter / memory bandwidth."""
    traffic = OPTIMIZER_TRAFFIC_BYTES[normalize_optimizer(optimizer)]
    return params * traffic / (memory_bandwidth_gbs * 1e9)
