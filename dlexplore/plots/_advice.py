"""The headline's words: the bottleneck at the selected GPU count and what would help, following
from the prediction's settings (never what is set already nor what the GPU cannot do)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from ._columns import ANY_BATCH, _at, _Point, largest_batch
from .palette import GIB

__all__ = ["bottleneck", "advice", "headline"]


def bottleneck(pred: xr.Dataset, gpus: int) -> tuple[str, float]:
    """What the step spends most of its time on at ``gpus`` GPUs, and that share of the step.

    One of ``"compute"``, ``"communication"`` (exposed communication) or ``"input I/O"``.
    """
    point = _at(pred, gpus)
    step = float(point.step_time)
    parts = {
        "compute": float(point.time_compute),
        "communication": float(point.time_comm_exposed),
        "input I/O": float(point.time_io_exposed),
    }
    name = max(parts, key=parts.__getitem__)
    return name, parts[name] / step


def _coord(point: _Point, name: str, default: object = None) -> object:
    if name not in point:
        return default
    value = np.asarray(point[name])
    return value.item() if value.ndim == 0 else default


def _faster_precisions(point: _Point) -> list[str]:
    """Precisions the GPU computes faster in than the one set (none if the GPU is unknown)."""
    from .. import catalog, validation
    from ..model.compute import training_peak_flops

    name, precision = _coord(point, "gpu"), _coord(point, "precision", "fp32")
    try:
        dev = catalog.gpu(str(name))
    except DlexploreError:
        return []
    supported = validation.supported_precisions(dev)
    # The rate training gets (16-bit on a GPU whose 16-bit is slow runs at the fp32 rate).
    here = training_peak_flops(dev, str(precision)) if precision in supported else 0.0
    return [p for p in supported if p != precision and training_peak_flops(dev, p) > 1.5 * here]


def advice(pred: xr.Dataset, gpus: int) -> str:
    """What would make this configuration faster, following from its settings: never what is set
    already (mixed precision in fp16), nor what the GPU cannot do (bf16 on a P100), nor a larger
    batch that does not fit. Plain text, one sentence."""
    point = _at(pred, gpus)
    name, _ = bottleneck(pred, gpus)
    batch = int(_coord(point, "batch_size", 0) or 0)
    fits = bool(point.fits)
    room = largest_batch(pred, gpus)
    precision = str(_coord(point, "precision", "fp32"))
    faster = _faster_precisions(point)
    if not fits:
        if room >= 1:
            return (
                f"lower the batch to {room} per GPU or fewer, or shard the model (ZeRO, tensor or "
                "pipeline parallelism: open the strategy advisor)"
            )
        return (
            "even one sample per GPU does not fit: shard the model (ZeRO, tensor or pipeline "
            "parallelism: open the strategy advisor) or use a GPU with more memory"
        )
    if name == "compute":
        options = []
        sixteen = [p for p in faster if p in ("fp16", "bf16")]
        if sixteen:
            options.append(f"mixed precision ({' or '.join(sixteen)})")
        elif "tf32" in faster:
            options.append("TF32 (tf32)")
        options.append("a GPU with a higher peak")
        already = "" if faster else f" ({precision} is the fastest this GPU offers)"
        scaling = "; more GPUs scale almost linearly here" if float(point.efficiency) >= 0.9 else ""
        return f"{' or '.join(options)} would help most{already}{scaling}"
    if name == "communication":
        options = []
        bandwidth = _coord(point, "bandwidth")
        options.append(
            f"more network bandwidth (now {float(bandwidth):.3g} GB/s per link)"
            if bandwidth is not None
            else "more network bandwidth"
        )
        if room > batch:
            up_to = "" if room == ANY_BATCH else f" (up to {room} fits)"
            options.append(f"a larger batch per GPU{up_to} to amortise each allreduce")
        if precision in ("fp32", "tf32") and any(p in ("fp16", "bf16") for p in faster):
            options.append("mixed precision, which halves the gradient bytes")
        per_node = int(_coord(point, "gpus_per_node", 1) or 1)
        if per_node > 1 and _coord(point, "algorithm") not in ("hierarchical",) and gpus > per_node:
            options.append("the hierarchical allreduce (reduce inside each node first)")
        return (
            ", ".join(options[:-1]) + (" or " if len(options) > 1 else "") + options[-1] + " would help most"
        )
    return "faster storage, more reader threads or node-local caching would help most"


def headline(pred: xr.Dataset, gpus: int) -> str:
    """One sentence: throughput, scaling efficiency, the bottleneck and what would help (or that the
    configuration does not fit), in words (plain text)."""
    point = _at(pred, gpus)
    name, share = bottleneck(pred, gpus)
    workload = str(point.workload) if "workload" in point else "the workload"
    gpu = str(point.gpu) if "gpu" in point else "GPU"
    text = (
        f"{workload} on {gpus} x {gpu}: {float(point.throughput):,.0f} samples/s, "
        f"{float(point.step_time) * 1e3:,.1f} ms per step, "
        f"{float(point.efficiency):.0%} scaling efficiency. "
    )
    if not bool(point.fits):
        text += (
            f"Does NOT fit in memory: needs {float(point.mem_total) / GIB:.1f} GiB of "
            f"{float(point.mem_capacity) / GIB:.1f} GiB (largest batch that fits: "
            f"{largest_batch(pred, gpus)}); {advice(pred, gpus)}."
        )
        return text
    return text + f"Bottleneck: {name} ({share:.0%} of the step); {advice(pred, gpus)}."
