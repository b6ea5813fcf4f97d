"""How many network adapters a node's GPUs share, and what that leaves each GPU of the network.

The catalog's network bandwidth is one adapter's (NIC's). By default every GPU has its own NIC
(``nics_per_node=0``: as many as GPUs, as on DGX A100 and H100 systems); servers of 2017 often had
one for all their GPUs (Goyal et al. 2017: each Big Basin server, 8 P100s, "a Mellanox ConnectX-4
50Gbit Ethernet network card").

Which algorithms it slows depends on how many of a node's GPUs talk across the network at once:

- a **ring** (flat, NCCL's, or MPI's on host buffers) crosses each node boundary once each way, so
  one NIC carries a single GPU's stream: its bandwidth is unchanged;
- the **hierarchical** allreduce's between-node phase, and the **tree**, **recursive doubling** and
  **halving-doubling** allreduces spanning nodes, send from every GPU of a node at the same time:
  the ``g`` GPUs of a node share its ``k`` NICs, each GPU seeing ``min(1, k / g)`` of one NIC's
  bandwidth;
- a **parameter server**'s node link is already the node's (:mod:`dlexplore.model.gradsync`).

What this lacks: NICs on the PCIe switches of particular GPUs (rail-optimised networks), where the
traffic of a GPU without its own NIC also crosses the host bridge.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["SHARING_ALGORITHMS", "nic_share"]

#: Allreduce algorithms whose ranks on one node cross the network at the same time.
SHARING_ALGORITHMS = ("hierarchical", "tree", "recursive_doubling", "halving_doubling")


def nic_share(algorithm: str, gpus_per_node: npt.ArrayLike, nics_per_node: npt.ArrayLike) -> np.ndarray:
    """The fraction of one NIC's bandwidth each GPU sees across nodes: ``min(1, nics / g)`` for
    :data:`SHARING_ALGORITHMS`, else 1; ``nics_per_node`` 0 means one NIC per GPU."""
    g = np.asarray(gpus_per_node, dtype=float)
    k = np.asarray(nics_per_node, dtype=float)
    if algorithm not in SHARING_ALGORITHMS:
        return np.ones(np.broadcast_shapes(g.shape, k.shape))
    return np.where(k > 0, np.minimum(1.0, k / g), 1.0)
