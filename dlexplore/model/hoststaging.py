"""Gradient reduction in host memory: allreduce on CPU buffers and a parameter server's own work.

**Allreduce on host buffers** (``host_staging=True``): Horovod built without
``HOROVOD_GPU_ALLREDUCE`` (its "CPU allreduce", the default of 2017) registers its allreduce for
host tensors, so TensorFlow copies each gradient from the GPU to host memory and the result back;
Horovod copies the ready tensors into its host fusion buffer and out of it again, and
``MPI_Allreduce`` reduces the buffer on the CPU. Open MPI's tuned collectives run the ring for
commutative reductions of 10 kB and more (``ompi_coll_tuned_allreduce_intra_dec_fixed``: the
segmented ring above ``p x 1 MiB``). Per fused buffer of ``n`` bytes on ``p`` ranks::

    t = 2 n / B_pcie                        device-to-host and host-to-device copies
      + 2 x 2 n / B_host                    into and out of the fusion buffer (read and write)
      + 2 (p - 1) alpha + 2 (p - 1)/p n / B_ring          the ring's transfers
      + 3 (p - 1)/p n / B_host              the ring's reductions (two operands read, one written)

``B_pcie`` is the GPU's host link after NCCL's PCIe efficiency (:func:`host_link`), ``B_host``
(``host_bandwidth``) the memory traffic one CPU core sustains, counted as STREAM counts it (bytes
read plus bytes written), and ``B_ring`` the network (after ``tcp_efficiency`` over kernel TCP)
when the ranks span nodes, else shared memory: a copy into a shared segment and one out,
``B_host / 4``. Each step moves the whole buffer before the next starts (Horovod's background
thread does them in turn).

**A parameter server's own work**: the busiest server receives the share ``f`` of every worker's
gradient bytes, sums them, and sends the variables back to every worker. With TensorFlow's gRPC each
received tensor is copied out of the message and each sent one into it, so per worker and byte the
server's CPU moves :data:`PS_SERVER_TRAFFIC` bytes: 2 to receive (read and write), 3 to accumulate,
2 to send. It costs ``PS_SERVER_TRAFFIC x f p n / B_server`` per push-and-pull, after the
transfers (the server sums a variable's gradients once they have arrived, and serves it once
summed). ``B_server`` (``server_bandwidth``) is the memory traffic the server's CPU sustains at this
work: a parameter of its own, since TensorFlow spreads requests over several threads where
``MPI_Allreduce`` sums on one.

What this lacks: the pipelining of the copies with the transfers (Horovod later overlapped them),
MPI libraries whose algorithm differs from Open MPI's ring (MPICH's recursive doubling and
Rabenseifner), a server's several threads, and gRPC's own per-request cost.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import catalog

__all__ = ["PS_SERVER_TRAFFIC", "HOST_LINKS", "host_link", "host_allreduce_time", "server_work_time"]

#: Host memory traffic (bytes) of a parameter server per gradient byte per worker: 2 to copy it out
#: of the gRPC message, 3 to add it to the sum (two reads, one write), 2 to copy the variable into
#: the reply.
PS_SERVER_TRAFFIC = 7.0
#: Bytes of host memory traffic per byte moved through a shared-memory segment: a copy in and a
#: copy out, each a read and a write.
SHARED_MEMORY_TRAFFIC = 4.0
#: The host interface (PCIe x16) of each GPU architecture of the catalog, from the data sheets:
#: K20X, K40, K80, P100, V100 PCIe Gen3; A100 Gen4; H100 and H200 Gen5; MI250X Gen4.
HOST_LINKS = {
    "Kepler": "PCIe3",
    "Pascal": "PCIe3",
    "Volta": "PCIe3",
    "Ampere": "PCIe4",
    "Hopper": "PCIe5",
    "CDNA2": "PCIe4",
}


def host_link(gpu: catalog.GPU | str) -> catalog.Link:
    """The PCIe link between a GPU and its host (PCIe Gen3 for an architecture not listed)."""
    dev = catalog.gpu(gpu)
    return catalog.network(HOST_LINKS.get(dev.architecture, "PCIe3"))


def host_allreduce_time(
    nbytes: npt.ArrayLike,
    ranks: npt.ArrayLike,
    gpus_per_node: npt.ArrayLike,
    network_bandwidth: npt.ArrayLike,
    network_latency: npt.ArrayLike,
    pcie_bandwidth: npt.ArrayLike,
    host_bandwidth: npt.ArrayLike,
) -> np.ndarray:
    """Time (s) of one allreduce of ``nbytes`` of GPU gradients through host memory (module docstring).

    ``network_bandwidth`` (GB/s) is what the ring sees of the network (its efficiency and TCP's
    applied), ``network_latency`` (s) per message; ``pcie_bandwidth`` the GPU's host link (GB/s,
    effective), ``host_bandwidth`` the memory traffic (GB/s, read plus written) of one CPU core.
    Arguments broadcast together; one rank still pays nothing (there is nothing to reduce).
    """
    n = np.asarray(nbytes, dtype=float)
    p = np.asarray(ranks, dtype=float)
    g = np.minimum(np.asarray(gpus_per_node, dtype=float), p)
    host = np.asarray(host_bandwidth, dtype=float) * 1e9
    pcie = np.asarray(pcie_bandwidth, dtype=float) * 1e9
    spans = p > g
    ring_bw = np.where(spans, np.asarray(network_bandwidth, dtype=float) * 1e9, host / SHARED_MEMORY_TRAFFIC)
    alpha = np.where(spans, np.asarray(network_latency, dtype=float), 0.0)
    frac = (p - 1.0) / p
    copies = 2 * n / pcie + 4 * n / host
    ring = 2 * (p - 1) * alpha + 2 * frac * n / ring_bw
    reduce = 3 * frac * n / host
    return np.where(p > 1, copies + ring + reduce, 0.0)


def server_work_time(
    nbytes: npt.ArrayLike, workers: npt.ArrayLike, share: npt.ArrayLike, server_bandwidth: npt.ArrayLike
) -> np.ndarray:
    """Seconds the busiest parameter server's CPU spends on one push-and-pull of ``nbytes`` per
    worker: ``PS_SERVER_TRAFFIC x share x workers x nbytes / server_bandwidth`` (GB/s)."""
    n = np.asarray(nbytes, dtype=float)
    load = np.asarray(share, dtype=float) * np.asarray(workers, dtype=float) * n
    return PS_SERVER_TRAFFIC * load / (np.asarray(server_bandwidth, dtype=float) * 1e9)
