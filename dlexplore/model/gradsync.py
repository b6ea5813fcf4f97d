"""Gradient synchronisation as real frameworks run it: link efficiency and transport, Horovod's
tensor fusion, cycle and negotiation, and parameter servers under contention.

**Links.** A collective sees ``bandwidth x efficiency`` of a link (the catalog's ``efficiency``:
NCCL's own per-link figure over the line rate). Between nodes over kernel TCP (``transport="tcp"``;
``"auto"`` picks TCP on Ethernet, RDMA elsewhere) only ``tcp_efficiency`` of that is reached: the
kernel's copies, interrupts and NCCL's socket transport with its default few sockets per peer.

**Horovod** (``framework="horovod"``; Sergeev & Del Balso 2018, and Horovod's documentation of its
environment variables): a background thread wakes every ``cycle_time`` (``HOROVOD_CYCLE_TIME``,
5 ms by default), gathers at the coordinator which tensors every rank has ready (the per-tensor
negotiation), fuses ready tensors up to the fusion threshold (``HOROVOD_FUSION_THRESHOLD``,
64 MiB: the default bucket size) and allreduces each fused buffer. A bucket's allreduce thus starts
on average half a cycle after its last gradient is ready, plus the negotiation::

    delay = cycle_time / 2 + negotiation_time x tensors x ceil(log2 p)

(the readiness of each tensor goes up and down a binomial tree of the ``p`` ranks). PyTorch DDP
(``framework="ddp"``) has neither: its buckets (25 MiB) start as soon as they are full.

**Parameter servers** (``algorithm="parameter_server"``): ``k`` servers hold the model; every step
each of the ``p`` workers pushes its gradients to them and pulls the new parameters. Variables are
placed whole, largest first on the least loaded server (TensorFlow's
``GreedyLoadBalancingStrategy``), so the busiest server holds a share
``f = max(1/k, largest placement)`` of the bytes (73% of VGG-16's on one server of four: its first
fully connected layer). With servers on the workers' nodes (``servers_colocated``, one per node by
default: ``servers=0``), the busiest server's node link carries, each way::

    L = n (f (p - g) + g (1 - f))      colocated (the g local workers' shares stay local, their
                                        pulls from the other servers come in)
    L = n f p                          on dedicated nodes

    time = 2 alpha + 2 max(n, L) / (ps_efficiency x B) + f p n gamma

``ps_efficiency``: the fraction of the link a parameter server's transfers reach (TensorFlow's gRPC:
serialisation and copies). Inside one node the links are the intra-node ones. The server's own CPU
work (receiving, summing and sending back every worker's share) comes on top:
:func:`dlexplore.model.hoststaging.server_work_time`.

What this lacks: Horovod's response cache and hierarchical allreduce (later versions), the tensor
readiness order across ranks (stragglers), gRPC's per-variable request overhead, and the memory a
server needs to hold every worker's copy of a large variable at once.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import numpy.typing as npt

from .. import catalog

__all__ = [
    "FRAMEWORKS",
    "TRANSPORTS",
    "FUSION_THRESHOLD",
    "resolve_transport",
    "server_load_fraction",
    "parameter_server_time",
    "horovod_delay",
]

FRAMEWORKS = ("ddp", "horovod")
TRANSPORTS = ("auto", "rdma", "tcp")
#: Horovod's default fusion buffer, HOROVOD_FUSION_THRESHOLD (bytes).
FUSION_THRESHOLD = 64 * 2**20


def resolve_transport(transport: str, network: catalog.Link | None) -> str:
    """``"tcp"`` or ``"rdma"``: ``"auto"`` is TCP on an Ethernet network, RDMA otherwise."""
    if transport != "auto":
        return transport
    if network is not None and network.fabric == "ethernet":
        return "tcp"
    return "rdma"


@lru_cache(maxsize=512)
def _greedy_share(sizes: tuple[float, ...], servers: int) -> float:
    loads = np.zeros(servers)
    for size in sorted(sizes, reverse=True):
        loads[np.argmin(loads)] += size
    total = loads.sum()
    return float(loads.max() / total) if total > 0 else 1.0 / servers


def server_load_fraction(workload: catalog.Workload, servers: npt.ArrayLike) -> np.ndarray:
    """Share of the model's bytes on the busiest of ``servers`` parameter servers when each layer's
    parameters are placed whole, largest first, on the least loaded server (module docstring)."""
    k = np.asarray(servers, dtype=float)
    sizes = tuple(float(x) for x in workload.gradient_params_backward)
    out = np.empty(k.shape)
    for value in np.unique(k):
        out[k == value] = _greedy_share(sizes, max(1, int(value)))
    return out


def parameter_server_time(
    nbytes: npt.ArrayLike,
    workers: npt.ArrayLike,
    gpus_per_node: npt.ArrayLike,
    servers: npt.ArrayLike,
    share: npt.ArrayLike,
    colocated: bool,
    bandwidth: npt.ArrayLike,
    latency: npt.ArrayLike,
    gamma: npt.ArrayLike = 0.0,
) -> np.ndarray:
    """Time (s) of one push-and-pull of ``nbytes`` per worker through parameter servers.

    ``share`` is the busiest server's share of the bytes (:func:`server_load_fraction`),
    ``bandwidth`` (GB/s) the link each node has after ``ps_efficiency``; the module docstring has
    the formula. One worker still pushes and pulls its own bytes.
    """
    n = np.asarray(nbytes, dtype=float)
    p = np.asarray(workers, dtype=float)
    g = np.minimum(np.asarray(gpus_per_node, dtype=float), p)
    f = np.asarray(share, dtype=float)
    if colocated:
        load = n * (f * (p - g) + g * (1.0 - f))
    else:
        load = n * f * p
    busiest = np.maximum(n, load)
    beta = 1.0 / (np.asarray(bandwidth, dtype=float) * 1e9)
    return 2 * np.asarray(latency, dtype=float) + 2 * busiest * beta + f * p * n * np.asarray(gamma)


def horovod_delay(
    tensors: npt.ArrayLike, ranks: npt.ArrayLike, cycle_time: npt.ArrayLike, negotiation_time: npt.ArrayLike
) -> np.ndarray:
    """Seconds from a fused buffer's last gradient being ready to its allreduce starting in
    Horovod: half a cycle on average, plus negotiating its ``tensors`` over ``ranks``."""
    p = np.asarray(ranks, dtype=float)
    rounds = np.ceil(np.log2(np.maximum(p, 1.0)))
    return np.asarray(cycle_time) / 2 + np.asarray(negotiation_time) * np.asarray(tensors) * rounds
