"""Input reading time: every GPU's loader reads its batch from a storage tier.

A shared tier (parallel file system, burst buffer) divides its aggregate bandwidth among all GPUs; a
node-local tier (NVMe, page cache) divides its per-node bandwidth among the GPUs of one node. Each
reader is also capped by the tier's per-client bandwidth. Each sample is one read paying the tier's
latency, with ``io_threads`` reads in flight per GPU::

    time_io = batch x bytes_per_sample / (bandwidth per reader) + batch x latency / io_threads

With prefetching the loader reads the next batch while the GPU computes, so only the part of
``time_io`` longer than the rest of the step is exposed.

What this lacks: metadata-server contention, file-system caching and read-ahead, decode and
augmentation cost on the CPU, dataset shuffling patterns (LMDB vs many small files).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..catalog import StorageTier

__all__ = ["reader_bandwidth", "io_time"]


def reader_bandwidth(tier: StorageTier, gpus: npt.ArrayLike, gpus_per_node: npt.ArrayLike) -> np.ndarray:
    """Bandwidth one GPU's loader gets from ``tier`` (GB/s) when all GPUs read at once."""
    p = np.asarray(gpus, dtype=float)
    if tier.scope == "shared":
        sharing = p
    else:
        sharing = np.minimum(p, np.asarray(gpus_per_node, dtype=float))
    return np.minimum(tier.client_bandwidth_gbs, tier.bandwidth_gbs / sharing)


def io_time(
    tier: StorageTier | None,
    bytes_per_sample: float,
    batch_size: npt.ArrayLike,
    gpus: npt.ArrayLike,
    gpus_per_node: npt.ArrayLike,
    io_threads: npt.ArrayLike = 4,
) -> np.ndarray:
    """Time (s) for one GPU to read one batch; zero without a tier (synthetic data in memory)."""
    b = np.asarray(batch_size, dtype=float)
    if tier is None:
        return np.zeros_like(b)
    bw = reader_bandwidth(tier, gpus, gpus_per_node)
    return b * bytes_per_sample / (bw * 1e9) + b * tier.latency_s / np.asarray(io_threads, float)
