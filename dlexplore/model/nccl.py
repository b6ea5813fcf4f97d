"""NCCL's own cost model of allreduce: which algorithm and protocol it picks by message size.

NCCL times every (algorithm, protocol) pair as ``latency + bytes / algorithm bandwidth`` and runs
the fastest (``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in NCCL's ``src/graph/tuning.cc``,
2.18-2.20). This module reproduces that model on the catalog's links, vectorised over sizes, rank
counts and link figures:

**Bandwidths.** ``B_intra`` and ``B_inter`` are the links' bandwidths times their ``efficiency``
(NCCL's per-link figures: 20 GB/s per V100/A100 NVLink, 20.6 on H100, 12 for PCIe Gen3; see
``data/catalog/networks.csv``). The bus bandwidth is ``B_intra`` inside one node, else
``min(B_intra, B_inter)`` (one NIC per GPU). Per protocol (tuning.cc "model refinements"):

=========  ============================================  =========================================
algorithm  protocol factors on the bus bandwidth         algorithm bandwidth
=========  ============================================  =========================================
ring       LL 1/4, LL128 0.92 (0.7 with one GPU per      busbw x p / (2(p - 1))
           node), Simple 1
tree       x 0.92; LL 1/3.8, LL128 120/128, Simple 1     busbw / 2 (up the tree, then down)
nvls       Simple only                                   busbw x 5/6
=========  ============================================  =========================================

LL128 is on only where NCCL enables it by default: NVLink inside the node on Volta, Ampere and
Hopper GPUs. Tree runs between nodes only (inside one node NCCL's tree is a chain). NVLS (NVLink
SHARP, the reduction done in third-generation NVSwitches) runs inside one node where the intra-node
link offers it (``reduction == "nvls"``).

**Latencies** (microseconds; ``baseLat`` plus per-hop ``hwLat``, tuning.cc)::

    ring:  base + (2(p-1) - 2N) hop_intra + 2N hop_inter      (N nodes; 2N = 0 inside one node)
    tree:  base + 2 ((p/N - 1) hop_intra + log2(N) hop_inter)
    nvls:  hop_nvls (+ hop_inter across nodes)

======================  ==================  ===================  ===================
                        LL                  LL128                Simple
======================  ==================  ===================  ===================
base: ring / tree       6.6 / 6.8           14.0 / 14.0          8.4 / 0
hop, NVLink: ring/tree  0.6 / 0.6           1.9 / 1.25           3.4 / 28
hop, PCIe: ring/tree    1.0 / 1.0           2.5 / 1.9            5.7 / 28
hop, network: r/t       2.7 / 5.0           4.0 / 8.5            14.0 / 28
======================  ==================  ===================  ===================

plus NVLS's 23 us hop. The intra-node hops scale with the link's latency (the catalog's latencies
are NCCL's LL hop latencies, so the table is reproduced at the defaults, and a calibrated latency
moves every protocol alike); a network hop adds the network's own latency (the NIC, or the kernel's
TCP stack) to NCCL's.

What this lacks: NCCL's channel counts and their per-channel caps (``llMaxBw``,
``perChMaxTreeBw``), the tree's size-dependent correction factors, CollNet, the ring's "plateau"
latency factor, and the topology search (the rings NCCL finds on a real machine may be slower than
the links suggest, e.g. through a PCIe host bridge).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["PROTOCOLS", "NCCL_ALGORITHMS", "nccl_allreduce"]

PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_ALGORITHMS = ("ring", "tree", "nvls")

# tuning.cc (NCCL 2.18-2.20), microseconds
_BASE = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 0.0), "nvls": (0.0, 0.0, 0.0)}
_HOP = {
    "nvlink": {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 28.0), "nvls": (0.0, 0.0, 23.0)},
    "pcie": {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 28.0), "nvls": (0.0, 0.0, 0.0)},
    "net": {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 28.0), "nvls": (0.0, 0.0, 18.0)},
}
_LL128_ARCHITECTURES = ("Volta", "Ampere", "Hopper")


def nccl_allreduce(
    nbytes: npt.ArrayLike,
    ranks: npt.ArrayLike,
    gpus_per_node: npt.ArrayLike,
    intra_bandwidth: npt.ArrayLike,
    intra_latency: npt.ArrayLike,
    inter_bandwidth: npt.ArrayLike,
    inter_latency: npt.ArrayLike,
    *,
    intra_fabric: str = "nvlink",
    architecture: str = "",
    nvls: bool = False,
    algorithms: tuple[str, ...] = NCCL_ALGORITHMS,
    protocols: tuple[str, ...] = PROTOCOLS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time (s) of one NCCL allreduce of ``nbytes`` on ``ranks`` GPUs, ``gpus_per_node`` per node,
    and which algorithm and protocol NCCL picks (indices into ``algorithms`` and :data:`PROTOCOLS`).

    Bandwidths in GB/s are the *effective* ones (link bandwidth x efficiency); latencies in s are
    the links' (the intra-node one is NCCL's LL hop). ``intra_fabric`` is ``"nvlink"`` or
    ``"pcie"``; ``architecture`` the GPU's (LL128 needs Volta, Ampere or Hopper on NVLink);
    ``nvls`` whether the intra-node link offers NVLink SHARP. ``algorithms`` and ``protocols``
    restrict the choice (``NCCL_ALGO``, ``NCCL_PROTO``). Arguments broadcast together; one rank
    costs nothing.
    """
    n = np.asarray(nbytes, dtype=float)
    p = np.asarray(ranks, dtype=float)
    g = np.minimum(np.asarray(gpus_per_node, dtype=float), p)
    nodes = np.ceil(p / g)
    multi = nodes > 1
    b_intra = np.asarray(intra_bandwidth, dtype=float)
    bus = np.where(multi, np.minimum(b_intra, np.asarray(inter_bandwidth, dtype=float)), b_intra)
    fabric = "nvlink" if intra_fabric == "nvlink" else "pcie"
    hop_scale = np.asarray(intra_latency, dtype=float) / (_HOP[fabric]["ring"][0] * 1e-6)
    net_latency = np.asarray(inter_latency, dtype=float)
    ppn = p / nodes
    lg_nodes = np.log2(np.maximum(nodes, 1.0))

    candidates = []
    with np.errstate(divide="ignore", invalid="ignore"):
        _collect(
            candidates,
            algorithms,
            protocols,
            fabric,
            architecture,
            n,
            p,
            nodes,
            multi,
            ppn,
            lg_nodes,
            bus,
            hop_scale,
            net_latency,
            nvls,
        )
    if not candidates:
        raise ValueError(f"no NCCL algorithm among {algorithms} with protocols {protocols} applies")
    shape = np.broadcast_shapes(*(c[0].shape for c in candidates))
    stack = np.stack([np.broadcast_to(c[0], shape) for c in candidates])
    best = np.argmin(stack, axis=0)
    time = np.take_along_axis(stack, best[np.newaxis], axis=0)[0]
    algorithm_index = np.array([c[1] for c in candidates])[best]
    protocol_index = np.array([c[2] for c in candidates])[best]
    return np.where(p > 1, time, 0.0), algorithm_index, protocol_index


def _collect(candidates: list, algorithms, protocols, fabric, architecture, *args) -> None:
    """Append (time, algorithm index, protocol index) of every candidate NCCL would consider."""
    n, p, nodes, multi, ppn, lg_nodes, bus, hop_scale, net_latency, nvls = args
    for a, algorithm in enumerate(algorithms):
        for q, protocol in enumerate(PROTOCOLS):
            if protocol not in protocols:
                continue
            if protocol == "LL128" and not (fabric == "nvlink" and architecture in _LL128_ARCHITECTURES):
                continue
            time = _time(
                algorithm, q, n, p, nodes, multi, ppn, lg_nodes, bus, fabric, hop_scale, net_latency, nvls
            )
            if time is not None:
                candidates.append((time, a, q))


def _time(
    algorithm: str, q: int, n, p, nodes, multi, ppn, lg_nodes, bus, fabric, hop_scale, net_latency, nvls: bool
) -> np.ndarray | None:
    """One (algorithm, protocol) candidate's time, inf where it does not apply; None if never."""
    hop_intra = _HOP[fabric][algorithm][q] * 1e-6 * hop_scale
    hop_inter = _HOP["net"][algorithm][q] * 1e-6 + net_latency
    base = _BASE[algorithm][q] * 1e-6
    protocol = PROTOCOLS[q]
    if algorithm == "ring":
        factor = {"LL": 0.25, "LL128": np.where(ppn < 2, 0.7, 0.92), "Simple": 1.0}[protocol]
        algbw = bus * factor * p / (2 * (p - 1))
        inter_steps = np.where(multi, 2 * nodes, 0.0)
        latency = base + (2 * (p - 1) - inter_steps) * hop_intra + inter_steps * hop_inter
        return latency + n / (algbw * 1e9)
    if algorithm == "tree":
        factor = {"LL": 0.92 / 3.8, "LL128": 0.92 * 120 / 128, "Simple": 0.92}[protocol]
        algbw = bus * factor / 2
        latency = base + 2 * ((ppn - 1) * hop_intra + lg_nodes * hop_inter)
        return np.where(multi, latency + n / (algbw * 1e9), np.inf)
    # nvls: Simple only, inside one node, where the NVSwitches offer it
    if protocol != "Simple" or not nvls:
        return None
    algbw = bus * 5 / 6
    return np.where(multi, np.inf, hop_intra + n / (algbw * 1e9))
