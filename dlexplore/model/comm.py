"""Collective communication costs in the alpha-beta(-gamma) model, and nccl-tests bandwidths.

Notation (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): ``p`` ranks, ``n`` message bytes,
``alpha`` latency per message (s), ``beta`` = 1/bandwidth (s/byte), ``gamma`` reduction cost (s/byte).
Every function takes scalars or numpy arrays that broadcast together and returns seconds.

Message size conventions follow nccl-tests: for allreduce, broadcast and reduce ``n`` is the buffer
on each rank; for allgather and reduce-scatter ``n`` is the *total* (gathered) buffer, each rank
owning ``n/p``.

Costs, with ``L = ceil(log2 p)`` and, for the recursive algorithms on non-powers of two,
``q = 2**floor(log2 p)`` ranks in the core and ``e = 1`` if ``p != q`` (else 0): the ``p - q`` extra
ranks first fold their data into partners (alpha + n beta + n gamma) and get the result back at the
end (alpha + n beta), Thakur et al. (2005), section 4:

===============  =====================  =============================================================
collective       algorithm              time
===============  =====================  =============================================================
allreduce        ring                   2(p-1) a + 2(p-1)/p n b + (p-1)/p n g
allreduce        tree                   2L a + 2L n b + L n g  (binomial reduce, then broadcast)
allreduce        recursive_doubling     lg q (a + n b + n g) + e (2a + 2n b + n g)
allreduce        halving_doubling       2 lg q a + 2(q-1)/q n b + (q-1)/q n g + e (2a + 2n b + n g)
allreduce        parameter_server       2a + 2 max(1, p/k) n b + (p/k) n g  (k servers)
allreduce        hierarchical           ring reduce-scatter in node + allreduce of n/g between nodes
                                        + ring allgather in node (g GPUs per node)
allreduce        nccl                   NCCL's choice of ring or tree and of the LL, LL128 or Simple
                                        protocol by size, with NVLS where the node offers it
                                        (:mod:`dlexplore.model.nccl`)
allreduce        nvls                   NCCL's NVLink SHARP: the NVSwitches reduce, n / (5/6 B)
broadcast        tree                   L (a + n b)
broadcast        ring                   (L + p - 1) a + 2(p-1)/p n b  (scatter + ring allgather)
reduce           tree                   L (a + n b + n g)
reduce           ring                   (p - 1 + L) a + 2(p-1)/p n b + (p-1)/p n g
                                        (ring reduce-scatter + binomial gather)
allgather        ring                   (p-1) a + (p-1)/p n b
allgather        recursive_doubling     L a + (p-1)/p n b  (Bruck on non-powers of two)
reduce_scatter   ring                   (p-1) a + (p-1)/p n (b + g)
reduce_scatter   halving_doubling       L a + (p-1)/p n (b + g)
alltoall         pairwise               (p-1) a + (p-1)/p n b
===============  =====================  =============================================================

One rank (p = 1) costs nothing, except the parameter server, where the worker still pushes and pulls.

Kept whole: the cost of every collective algorithm in one table of formulas (the module docstring)
and the one function that evaluates it, with the names and factors they share.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import xarray as xr

from .. import validation
from ..errors import DlexploreError, suggest

__all__ = [
    "COLLECTIVES",
    "ALGORITHMS",
    "normalize_collective",
    "normalize_algorithm",
    "collective_time",
    "algorithm_for",
    "busbw_factor",
    "algbw",
    "busbw",
    "predict_comm",
]

ArrayLike = npt.ArrayLike

#: Algorithms available for each collective (the first is the default).
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": (
        "ring",
        "tree",
        "recursive_doubling",
        "halving_doubling",
        "hierarchical",
        "parameter_server",
        "nccl",
    ),
    "broadcast": ("tree", "ring"),
    "reduce": ("tree", "ring"),
    "allgather": ("ring", "recursive_doubling"),
    "reduce_scatter": ("ring", "halving_doubling"),
    "alltoall": ("pairwise",),
}
COLLECTIVES = tuple(ALGORITHMS)
#: Algorithms accepted by name that need particular hardware, so not in the general lists: NVLink
#: SHARP needs third-generation NVSwitches inside one node.
HARDWARE_ALGORITHMS: dict[str, tuple[str, ...]] = {"allreduce": ("nvls",)}

_COLLECTIVE_ALIASES = {
    "all_reduce": "allreduce",
    "bcast": "broadcast",
    "all_gather": "allgather",
    "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall",
}
_ALGORITHM_ALIASES = {
    "rd": "recursive_doubling",
    "rabenseifner": "halving_doubling",
    "recursive_halving": "halving_doubling",
    "rhd": "halving_doubling",
    "binomial": "tree",
    "binomial_tree": "tree",
    "ps": "parameter_server",
    "hier": "hierarchical",
    "two_level": "hierarchical",
    "scatter_allgather": "ring",
    "bruck": "recursive_doubling",
    "auto": "nccl",
    "nvlink_sharp": "nvls",
}


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


def normalize_collective(collective: str) -> str:
    """Canonical collective name (``allreduce``, ``broadcast``, ``reduce``, ``allgather``,
    ``reduce_scatter``, ``alltoall``); accepts ``all-reduce``, ``bcast``, ..."""
    key = _norm(collective)
    key = _COLLECTIVE_ALIASES.get(key, key)
    if key not in ALGORITHMS:
        hint = suggest(key, COLLECTIVES)
        raise DlexploreError(
            f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    return key


def normalize_algorithm(algorithm: str, collective: str = "allreduce") -> str:
    """Canonical algorithm name for ``collective``; accepts aliases such as ``rabenseifner``,
    ``recursive-doubling``, ``ps``."""
    collective = normalize_collective(collective)
    key = _norm(algorithm)
    key = _ALGORITHM_ALIASES.get(key, key)
    allowed = ALGORITHMS[collective] + HARDWARE_ALGORITHMS.get(collective, ())
    if key not in allowed:
        hint = suggest(key, allowed)
        raise DlexploreError(
            f"unknown algorithm {algorithm!r} for {collective}; expected one of "
            f"{', '.join(allowed)}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    return key


def algorithm_for(collective: str, algorithm: str | Mapping[str, str] | None = None) -> str:
    """The algorithm to model ``collective`` (a name of :data:`ALGORITHMS`) with.

    ``algorithm`` is one name for every collective, or ``{collective: name}``. ``None``, or a name
    that does not apply to this collective (``ring`` for an alltoall), gives the collective's default
    (the first of :data:`ALGORITHMS`); aliases are accepted (``rabenseifner``).
    """
    wanted = algorithm.get(collective) if isinstance(algorithm, Mapping) else algorithm
    if wanted is None:
        return ALGORITHMS[collective][0]
    try:
        return normalize_algorithm(str(wanted), collective)
    except DlexploreError:
        return ALGORITHMS[collective][0]


def _check_ranks(ranks: ArrayLike) -> np.ndarray:
    return np.asarray(validation.gpu_count("ranks", ranks), dtype=float)


def _ceil_log2(p: np.ndarray) -> np.ndarray:
    return np.ceil(np.log2(p))


def _recursive_core(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log2 of the power-of-two core, and 1.0 where extra ranks must fold in (p not a power of 2)."""
    lg_q = np.floor(np.log2(p))
    extra = (p != 2.0**lg_q).astype(float)
    return lg_q, extra


def collective_time(
    collective: str,
    algorithm: str,
    nbytes: ArrayLike,
    ranks: ArrayLike,
    bandwidth: ArrayLike,
    latency: ArrayLike,
    gamma: ArrayLike = 0.0,
    *,
    servers: ArrayLike = 1,
    gpus_per_node: ArrayLike | None = None,
    intra_bandwidth: ArrayLike | None = None,
    intra_latency: ArrayLike | None = None,
    inter_algorithm: str = "ring",
    intra_fabric: str = "nvlink",
    architecture: str = "",
    nvls: bool = False,
) -> np.ndarray:
    """Time (s) of one collective on ``ranks`` ranks moving ``nbytes`` bytes.

    ``bandwidth`` is GB/s (1e9 bytes/s) per link and direction, ``latency`` seconds per message,
    ``gamma`` seconds per byte reduced. ``servers`` is used by ``parameter_server``; the hierarchical
    allreduce also needs ``gpus_per_node`` and the intra-node ``intra_bandwidth`` (GB/s) and
    ``intra_latency`` (s), and runs ``inter_algorithm`` between nodes. ``nccl`` and ``nvls`` take
    the same and the node's ``intra_fabric`` (``nvlink``, ``pcie``), the GPU ``architecture`` and
    whether the node offers ``nvls`` (:func:`dlexplore.model.nccl.nccl_allreduce`); their
    ``bandwidth``/``intra_bandwidth`` are the effective ones (the links' efficiency applied). See
    the module docstring for every formula. Arguments broadcast together like numpy arrays.
    """
    # Kept whole: one branch per algorithm, each the formula of its row in the module docstring
    # (read side by side with it); the shared terms are computed once above them.
    collective = normalize_collective(collective)
    algorithm = normalize_algorithm(algorithm, collective)
    p = _check_ranks(ranks)
    n = np.asarray(validation.nonnegative("message size", nbytes, units="bytes"))
    # inf is an ideal link (no transfer time): calibration holds bandwidth there to fit latency alone.
    bw = np.asarray(validation.positive("bandwidth", bandwidth, units="GB/s", allow_inf=True))
    a = np.asarray(validation.nonnegative("latency", latency, units="s"))
    b = 1.0 / (bw * 1e9)
    g = np.asarray(validation.nonnegative("gamma", gamma, units="s/byte"))
    frac = (p - 1.0) / p

    if collective == "allreduce":
        if algorithm == "ring":
            return 2 * (p - 1) * a + 2 * frac * n * b + frac * n * g
        if algorithm == "tree":
            lg = _ceil_log2(p)
            return lg * (2 * a + 2 * n * b + n * g)
        if algorithm == "recursive_doubling":
            lg_q, e = _recursive_core(p)
            return lg_q * (a + n * b + n * g) + e * (2 * a + 2 * n * b + n * g)
        if algorithm == "halving_doubling":
            lg_q, e = _recursive_core(p)
            q = 2.0**lg_q
            fq = (q - 1) / q
            return 2 * lg_q * a + 2 * fq * n * b + fq * n * g + e * (2 * a + 2 * n * b + n * g)
        if algorithm == "parameter_server":
            k = np.asarray(validation.gpu_count("servers", servers), dtype=float)
            load = np.maximum(1.0, p / k)
            return 2 * a + 2 * load * n * b + (p / k) * n * g
        if gpus_per_node is None or intra_bandwidth is None or intra_latency is None:
            raise DlexploreError(
                f"the {algorithm} allreduce needs gpus_per_node, intra_bandwidth and intra_latency"
            )
        if algorithm in ("nccl", "nvls"):
            from .nccl import NCCL_ALGORITHMS, nccl_allreduce

            if algorithm == "nvls" and not nvls:
                raise DlexploreError(
                    "the nvls allreduce needs NVLink SHARP: an intra-node link "
                    "whose reduction is 'nvls' (NVLink4 through NVSwitch)"
                )
            time, _, _ = nccl_allreduce(
                n,
                p,
                gpus_per_node,
                intra_bandwidth,
                intra_latency,
                bw,
                a,
                intra_fabric=intra_fabric,
                architecture=architecture,
                nvls=nvls,
                algorithms=NCCL_ALGORITHMS if algorithm == "nccl" else ("nvls",),
            )
            multi_node = np.ceil(p / np.minimum(_check_ranks(gpus_per_node), p)) > 1
            if algorithm == "nvls" and np.any(multi_node & (p > 1)):
                raise DlexploreError("the nvls allreduce runs inside one node (gpus <= gpus_per_node)")
            return time
        # hierarchical
        per_node = _check_ranks(gpus_per_node)
        local = np.minimum(p, per_node)
        nodes = np.ceil(p / per_node)
        inter = normalize_algorithm(inter_algorithm, "allreduce")
        if inter in ("hierarchical",):
            raise DlexploreError("inter_algorithm cannot itself be hierarchical")
        inside = collective_time("reduce_scatter", "ring", n, local, intra_bandwidth, intra_latency, g)
        inside = inside + collective_time("allgather", "ring", n, local, intra_bandwidth, intra_latency)
        between = collective_time("allreduce", inter, n / local, nodes, bw, a, g, servers=servers)
        return inside + np.where(nodes > 1, between, 0.0)

    if collective == "broadcast":
        lg = _ceil_log2(p)
        if algorithm == "tree":
            return lg * (a + n * b)
        return (lg + p - 1) * a + 2 * frac * n * b
    if collective == "reduce":
        lg = _ceil_log2(p)
        if algorithm == "tree":
            return lg * (a + n * b + n * g)
        return (p - 1 + lg) * a + 2 * frac * n * b + frac * n * g
    if collective == "allgather":
        if algorithm == "ring":
            return (p - 1) * a + frac * n * b
        return _ceil_log2(p) * a + frac * n * b
    if collective == "reduce_scatter":
        steps = (p - 1) if algorithm == "ring" else _ceil_log2(p)
        return steps * a + frac * n * (b + g)
    # alltoall, pairwise exchange
    return (p - 1) * a + frac * n * b


def busbw_factor(collective: str, ranks: ArrayLike) -> np.ndarray | float:
    """nccl-tests' bus-bandwidth factor: ``busbw = algbw * factor``.

    allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; broadcast, reduce 1
    (nccl-tests doc/PERFORMANCE.md). The factor makes busbw comparable with the link's bandwidth.
    """
    collective = normalize_collective(collective)
    p = _check_ranks(ranks)
    if collective == "allreduce":
        factor = 2 * (p - 1) / p
    elif collective in ("reduce_scatter", "allgather", "alltoall"):
        factor = (p - 1) / p
    else:
        factor = np.ones_like(p)
    return float(factor) if np.ndim(factor) == 0 else factor


def algbw(nbytes: ArrayLike, time: ArrayLike) -> np.ndarray:
    """Algorithm bandwidth, GB/s: message bytes / time / 1e9 (nccl-tests)."""
    t = np.asarray(time, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 0, np.asarray(nbytes, dtype=float) / t / 1e9, np.nan)


def busbw(collective: str, nbytes: ArrayLike, ranks: ArrayLike, time: ArrayLike) -> np.ndarray:
    """Bus bandwidth, GB/s: :func:`algbw` times :func:`busbw_factor` (nccl-tests)."""
    return algbw(nbytes, time) * busbw_factor(collective, ranks)


def predict_comm(
    collective: str = "allreduce",
    algorithm: str | None = None,
    *,
    nbytes: ArrayLike = 1e8,
    gpus: ArrayLike = 8,
    bandwidth: ArrayLike = 10.0,
    latency: ArrayLike = 5e-6,
    gamma: ArrayLike = 0.0,
    servers: ArrayLike = 1,
    gpus_per_node: ArrayLike = 8,
    intra_bandwidth: ArrayLike | None = None,
    intra_latency: ArrayLike | None = None,
    intra_fabric: str = "nvlink",
    architecture: str = "",
    nvls: bool = False,
) -> xr.Dataset:
    """Predicted time, algbw and busbw of one collective as an ``xarray.Dataset``.

    Each of ``nbytes`` (bytes), ``gpus`` (ranks), ``bandwidth`` (GB/s), ``latency`` (s) and ``gamma``
    (s/byte) may be a scalar or a 1-D sequence; each sequence becomes a dimension (``bytes``,
    ``gpus``, ``bandwidth``, ``latency``, ``gamma``). ``algorithm`` defaults to the collective's
    first algorithm. For the hierarchical, ``nccl`` and ``nvls`` allreduces the intra-node link
    defaults to the network's figures unless given; ``intra_fabric``, ``architecture`` and
    ``nvls`` describe the node for the NCCL ones (:func:`collective_time`).
    """
    from .conventions import as_dataarray, finish_dataset

    collective = normalize_collective(collective)
    algorithm = normalize_algorithm(algorithm or ALGORITHMS[collective][0], collective)
    n = as_dataarray("bytes", nbytes)
    p = as_dataarray("gpus", gpus)
    bw = as_dataarray("bandwidth", bandwidth)
    lat = as_dataarray("latency", latency)
    gam = as_dataarray("gamma", gamma)
    kwargs: dict = {}
    if algorithm == "parameter_server":
        kwargs["servers"] = as_dataarray("servers", servers)
    if algorithm in ("hierarchical", "nccl", "nvls"):
        kwargs["gpus_per_node"] = as_dataarray("gpus_per_node", gpus_per_node)
        kwargs["intra_bandwidth"] = (
            bw if intra_bandwidth is None else as_dataarray("intra_bandwidth", intra_bandwidth)
        )
        kwargs["intra_latency"] = (
            lat if intra_latency is None else as_dataarray("intra_latency", intra_latency)
        )
    node = (
        dict(intra_fabric=intra_fabric, architecture=architecture, nvls=nvls)
        if algorithm in ("nccl", "nvls")
        else {}
    )
    time = _comm_time_da(collective, algorithm, n, p, bw, lat, gam, kwargs, node)
    factor = busbw_factor(collective, p.values)
    ds = xr.Dataset({"time": time})
    ds["algbw"] = ds["bytes"] / ds["time"].where(ds["time"] > 0) / 1e9
    ds["busbw"] = ds["algbw"] * xr.DataArray(factor, dims=p.dims, coords=p.coords)
    ds = ds.assign_coords(collective=collective, algorithm=algorithm)
    return finish_dataset(ds, title=f"{collective} ({algorithm}) in the alpha-beta model")


def _comm_time_da(collective, algorithm, n, p, bw, lat, gam, kwargs, node=None) -> xr.DataArray:
    # xarray broadcasts by dimension name (outer product of the sweeps), numpy does the arithmetic.
    arrays = xr.broadcast(n, p, bw, lat, gam, *kwargs.values())
    values = collective_time(
        collective,
        algorithm,
        *(x.values for x in arrays[:5]),
        **{k: v.values for k, v in zip(kwargs, arrays[5:], strict=True)},
        **(node or {}),
    )
    return arrays[0].copy(data=values)
