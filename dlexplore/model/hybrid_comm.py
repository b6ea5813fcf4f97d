"""Communication of hybrid-parallel training: tensor-, pipeline- and data-parallel traffic, vectorised.

Every collective is NCCL's (:func:`dlexplore.model.nccl.nccl_allreduce`: its algorithm and protocol
choice on the catalog's links); a reduce-scatter or an all-gather of ``n`` bytes takes half the
time of NCCL's *ring* allreduce of ``n`` bytes, whose two halves they are (NCCL runs both as rings).
Which link: a group whose ranks all sit in one node runs on the intra-node link, else across the
network, with Megatron-LM's rank order (tensor-parallel ranks adjacent, then data-parallel, then
pipeline stages), so a data-parallel group has ``min(dp, gpus_per_node / tp)`` ranks per node.

**Tensor parallelism** (Shoeybi et al. 2019; ``t`` ranks, the layer output ``s b h`` values): every
layer runs 2 allreduces in the forward (after the attention output and the second MLP product) and
2 in the backward (the input gradients of the QKV and first MLP products); full recomputation adds
the forward's 2 again. With **sequence parallelism** (Korthikanti et al. 2022, section 4.2.2) each
allreduce becomes a reduce-scatter plus an all-gather of the same ring volume, so it takes the ring
allreduce's time; the backward also re-gathers the sequence-parallel input of the two
column-parallel products for their weight gradients (2 all-gathers per layer, counted in bytes,
hidden behind the input-gradient products as Megatron-LM's asynchronous all-gather runs them).
``tp_overlap`` (0..1, default 0: Megatron-LM without ``--tp-comm-overlap``) is the share of the
tensor-parallel time allowed to hide behind the layers' matrix products::

    exposed_tp = t_tp - tp_overlap min(t_tp, t_gemm)

**Pipeline parallelism** (Narayanan et al. 2021): each boundary crossing sends one micro-batch's
activations forward and their gradient back, ``2 v`` messages per micro-batch and stage with ``v``
virtual stages (:func:`dlexplore.model.pipeline.p2p_messages`). Megatron-LM's scatter/gather
optimisation (section 4.1) sends ``s b h / t`` per tensor-parallel rank, then all-gathers the
tensor inside the node (not needed with sequence parallelism, whose activations are sharded).

**Data parallelism.** Without a distributed optimizer the ``d`` replicas allreduce their gradients;
ZeRO stage 1 and 2 (Megatron-LM's distributed optimizer) reduce-scatter the gradients and
all-gather the updated parameters; stage 3 all-gathers the parameters for the forward and again
for the backward of every micro-batch (Rajbhandari et al. 2020, section 7: 1.5x the allreduce's
volume with one micro-batch). ``overlap`` (0..1) is the share allowed to hide: the gradient
reduction behind the last micro-batch's backward (``--overlap-grad-reduce``), the parameter
all-gather of stages 1-2 behind the first micro-batch's forward (``--overlap-param-gather``), and
stage 3's gathers behind the whole step's compute::

    exposed = (1 - overlap) t + overlap max(0, t - window)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .nccl import NCCL_ALGORITHMS, nccl_allreduce

__all__ = ["Links", "allreduce_time", "half_ring_time", "tp_comm", "pp_comm", "dp_comm", "exposed"]


@dataclass(frozen=True)
class Links:
    """What collectives see of the links: effective bandwidths (GB/s, the link's efficiency
    applied) and latencies (s) inside a node and across the network, the node's fabric, the GPU's
    architecture and whether the node offers NVLink SHARP."""

    intra_bandwidth: npt.ArrayLike
    intra_latency: npt.ArrayLike
    inter_bandwidth: npt.ArrayLike
    inter_latency: npt.ArrayLike
    fabric: str = "nvlink"
    architecture: str = ""
    nvls: bool = False


def allreduce_time(
    links: Links,
    nbytes: npt.ArrayLike,
    ranks: npt.ArrayLike,
    per_node: npt.ArrayLike,
    *,
    ring_only: bool = False,
) -> np.ndarray:
    """NCCL's allreduce of ``nbytes`` over ``ranks`` GPUs, ``per_node`` of them per node (s)."""
    return nccl_allreduce(
        nbytes,
        ranks,
        per_node,
        links.intra_bandwidth,
        links.intra_latency,
        links.inter_bandwidth,
        links.inter_latency,
        intra_fabric=links.fabric,
        architecture=links.architecture,
        nvls=links.nvls and not ring_only,
        algorithms=("ring",) if ring_only else NCCL_ALGORITHMS,
    )[0]


def half_ring_time(
    links: Links, nbytes: npt.ArrayLike, ranks: npt.ArrayLike, per_node: npt.ArrayLike
) -> np.ndarray:
    """A reduce-scatter or all-gather of ``nbytes`` (the whole buffer): half NCCL's ring allreduce."""
    return 0.5 * allreduce_time(links, nbytes, ranks, per_node, ring_only=True)


def exposed(time: npt.ArrayLike, overlap: npt.ArrayLike, window: npt.ArrayLike) -> np.ndarray:
    """Communication time left on the critical path: ``(1 - o) t + o max(0, t - window)``."""
    t, o, w = (np.asarray(x, dtype=float) for x in (time, overlap, window))
    return (1 - o) * t + o * np.maximum(0.0, t - w)


def tp_comm(
    links: Links,
    *,
    activation_bytes: npt.ArrayLike,
    tp: npt.ArrayLike,
    gpus_per_node: npt.ArrayLike,
    layers: npt.ArrayLike,
    full_recompute: bool,
    sequence_parallel: npt.ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-parallel time (s) and bytes per GPU of one micro-batch through ``layers`` layers;
    ``activation_bytes`` is the ``s b h`` layer output in bytes (module docstring)."""
    t = np.asarray(tp, dtype=float)
    sp = np.asarray(sequence_parallel, dtype=bool)
    per_node = np.minimum(t, gpus_per_node)
    count = (4.0 + (2.0 if full_recompute else 0.0)) * np.asarray(layers, dtype=float)
    plain = allreduce_time(links, activation_bytes, t, per_node)
    ring = allreduce_time(links, activation_bytes, t, per_node, ring_only=True)
    one = np.where(sp, ring, plain)
    n = np.asarray(activation_bytes, dtype=float)
    # bytes each rank sends: a ring allreduce 2(t-1)/t n; the SP re-gather (t-1)/t n twice per layer
    sent = count * 2 * (t - 1) / t * n + np.where(sp, 2 * np.asarray(layers, float) * (t - 1) / t * n, 0.0)
    active = t > 1
    return np.where(active, count * one, 0.0), np.where(active, sent, 0.0)


def pp_comm(
    links: Links,
    *,
    activation_bytes: npt.ArrayLike,
    tp: npt.ArrayLike,
    pp: npt.ArrayLike,
    messages: npt.ArrayLike,
    intra: npt.ArrayLike,
    sequence_parallel: npt.ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """Pipeline send/receive time (s) and bytes per GPU of one micro-batch on a middle stage:
    ``messages`` of ``s b h / t`` bytes each over the intra-node link (``intra``) or the network,
    plus the all-gather inside the node that rebuilds each received tensor without sequence
    parallelism."""
    t = np.asarray(tp, dtype=float)
    n = np.asarray(activation_bytes, dtype=float)
    msg = n / t
    intra = np.asarray(intra, dtype=bool)
    bw = np.where(intra, links.intra_bandwidth, links.inter_bandwidth)
    lat = np.where(intra, links.intra_latency, links.inter_latency)
    send = np.asarray(messages, dtype=float) * (lat + msg / (bw * 1e9))
    gather = half_ring_time(links, n, t, t) * np.asarray(messages, dtype=float)
    gather = np.where(np.asarray(sequence_parallel, dtype=bool) | (t < 2), 0.0, gather)
    active = np.asarray(pp, dtype=float) > 1
    return np.where(active, send + gather, 0.0), np.where(active, np.asarray(messages) * msg, 0.0)


def dp_comm(
    links: Links,
    *,
    grad_bytes: npt.ArrayLike,
    param_bytes: npt.ArrayLike,
    dp: npt.ArrayLike,
    tp: npt.ArrayLike,
    gpus_per_node: npt.ArrayLike,
    zero: npt.ArrayLike,
    micro_batches: npt.ArrayLike,
) -> dict[str, np.ndarray]:
    """Data-parallel communication per step (module docstring): ``reduce`` (the gradient
    allreduce or reduce-scatter, s), ``gather`` (parameter all-gathers of ZeRO 1-2, s),
    ``gather3`` (ZeRO 3's per-micro-batch gathers, s) and ``bytes`` (sent per GPU)."""
    d = np.asarray(dp, dtype=float)
    z = np.asarray(zero, dtype=float)
    per_node = np.maximum(
        1.0, np.minimum(d, np.floor(np.asarray(gpus_per_node, float) / np.asarray(tp, float)))
    )
    g = np.asarray(grad_bytes, dtype=float)
    p = np.asarray(param_bytes, dtype=float)
    sharded = z >= 1
    allreduce = allreduce_time(links, g, d, per_node)
    rs = half_ring_time(links, g, d, per_node)
    ag = half_ring_time(links, p, d, per_node)
    m = np.asarray(micro_batches, dtype=float)
    frac = (d - 1) / d
    active = d > 1
    reduce = np.where(sharded, rs, allreduce)
    gather = np.where(sharded & (z < 3), ag, 0.0)
    gather3 = np.where(z >= 3, 2 * m * ag, 0.0)
    sent = np.where(sharded, frac * (g + p * np.where(z >= 3, 2 * m, 1.0)), 2 * frac * g)
    return {
        "reduce": np.where(active, reduce, 0.0),
        "gather": np.where(active, gather, 0.0),
        "gather3": np.where(active, gather3, 0.0),
        "bytes": np.where(active, sent, 0.0),
    }
