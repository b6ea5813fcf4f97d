"""Step time, throughput, scaling efficiency and memory of synchronous data-parallel training.

One step on each GPU: forward, backward, gradient allreduce, optimizer update, with the next batch
read from storage meanwhile. Gradients are grouped into buckets (fusion buffers) in the order the
backward pass produces them; a bucket's allreduce starts when its last gradient is ready and the
previous bucket's allreduce has finished (one communication stream), so communication overlaps the
rest of the backward pass. With ``t_f`` forward, ``t_b`` backward, bucket ``k`` ready at
``r_k = t_f + f_k t_b`` (``f_k`` the fraction of backward done) and taking ``c_k``::

    e_k = max(r_k, e_{k-1}) + c_k                      (e_0 = 0)
    time_comm          = sum_k c_k
    time_comm_exposed  = overlap * max(0, e_K - t_f - t_b) + (1 - overlap) * time_comm
    step_time          = t_f + t_b + time_comm_exposed + t_update + time_io_exposed
    throughput         = gpus * batch_size / step_time
    efficiency         = step_time(1 GPU) / step_time

Which link carries the allreduce: when all GPUs sit in one node (``gpus <= gpus_per_node``) the
intra-node link; otherwise a flat algorithm is limited by the network (its slowest link), while the
``hierarchical`` algorithm uses both (see :mod:`dlexplore.model.comm`).

Frameworks' own delays (Horovod's cycle and negotiation, parameter servers) are in
:mod:`dlexplore.model.gradsync`, reduction in host memory (Horovod's CPU allreduce) in
:mod:`dlexplore.model.hoststaging`, NICs shared by a node's GPUs in :mod:`dlexplore.model.topology`.

What this lacks: contention between communication and compute for GPU memory bandwidth and SMs,
rail-optimised networks, stragglers (every rank is assumed identical), and the dependence of
compute efficiency on batch size. Compare with measurements and calibrate before trusting
extrapolations.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog, validation
from ..errors import DlexploreError
from ._sweep import as_dataarray, finish_dataset, is_sweep
from .comm import collective_time, normalize_algorithm
from .compute import (
    OPTIMIZER_TRAFFIC_BYTES,
    fill_compute_defaults,
    kernel_times,
    normalize_optimizer,
    normalize_precision,
    training_peak_flops,
)
from .gradsync import (
    FRAMEWORKS,
    FUSION_THRESHOLD,
    TRANSPORTS,
    horovod_delay,
    parameter_server_time,
    resolve_transport,
    server_load_fraction,
)
from .hoststaging import host_allreduce_time, host_link, server_work_time
from .io import io_time
from .memory import ACTIVATION_SCALE, DEFAULT_WORKSPACE, bytes_per_param
from .operators import CATEGORIES, PHASES, category_sums, operator_table, phase_sums
from .topology import nic_share

__all__ = ["predict", "gradient_buckets", "DEFAULT_BUCKET_SIZE", "NUMERIC_PARAMETERS"]

#: PyTorch DistributedDataParallel's default ``bucket_cap_mb`` (25 MiB).
DEFAULT_BUCKET_SIZE = 25 * 2**20

#: Parameters evaluated as vectorised sweeps (each becomes a dimension when given as a sequence),
#: in the order their dimensions appear in the result.
NUMERIC_PARAMETERS = (
    "gpus",
    "batch_size",
    "bandwidth",
    "latency",
    "gpus_per_node",
    "nics_per_node",
    "intra_bandwidth",
    "intra_latency",
    "servers",
    "compute_efficiency",
    "overlap",
    "gamma",
    "io_threads",
    "grad_accum",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)
#: Parameters that select catalog entries or change the bucket structure: a sequence of them is
#: evaluated one value at a time and concatenated along a dimension of that name.
CATEGORICAL_PARAMETERS = (
    "workload",
    "gpu",
    "network",
    "intra_link",
    "algorithm",
    "precision",
    "optimizer",
    "storage",
    "bucket_size",
    "seq",
    "attention",
    "framework",
    "transport",
    "servers_colocated",
    "host_staging",
)
_INTEGER_PARAMETERS = {
    "gpus",
    "batch_size",
    "gpus_per_node",
    "nics_per_node",
    "servers",
    "io_threads",
    "grad_accum",
}
#: Fractions in (0, 1].
_FRACTIONS = (
    "compute_efficiency",
    "memory_efficiency",
    "flash_efficiency",
    "tcp_efficiency",
    "ps_efficiency",
)
#: Communication overheads and their defaults' names in data/catalog/defaults.csv.
COMM_PARAMETERS = (
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)


@dataclass(frozen=True)
class Buckets:
    """Gradient buckets in backward order: ``nbytes`` each, ready after ``ready_fraction`` of the
    backward pass."""

    nbytes: np.ndarray
    ready_fraction: np.ndarray
    tensors: np.ndarray  # gradient tensors (layers with parameters) fused into each bucket


def gradient_buckets(
    workload: catalog.Workload | str, bytes_per_gradient: float, bucket_size: float
) -> Buckets:
    """Group the workload's gradients, in backward order, into buckets of at least ``bucket_size``
    bytes (the last may be smaller), as PyTorch DDP and Horovod's tensor fusion do.

    ``bucket_size`` 0 gives one bucket per layer; ``inf`` one bucket for the whole model.
    """
    wl = catalog.workload(workload)
    bytes_per_gradient = validation.positive(
        "bytes_per_gradient", bytes_per_gradient, units="bytes", maximum=16
    )
    bucket_size = validation.nonnegative("bucket_size", bucket_size, units="bytes", allow_inf=True)
    sizes = wl.gradient_params_backward.astype(float) * bytes_per_gradient
    ready = wl.gradient_ready_fraction
    nbytes, ready_at, tensors, current, count = [], [], [], 0.0, 0
    for size, frac in zip(sizes, ready, strict=True):
        current += size
        count += 1
        if current >= bucket_size:
            nbytes.append(current)
            ready_at.append(frac)
            tensors.append(count)
            current, count = 0.0, 0
    if current > 0:
        nbytes.append(current)
        ready_at.append(ready[-1])
        tensors.append(count)
    return Buckets(np.array(nbytes), np.array(ready_at), np.array(tensors, dtype=float))


class _Grid:
    """Numeric sweeps laid out on separate numpy axes so that arithmetic forms their outer product."""

    def __init__(self, values: dict[str, object]):
        self.dims = [name for name in NUMERIC_PARAMETERS if is_sweep(values[name])]
        self.coords = {name: as_dataarray(name, values[name]).values for name in self.dims}
        self.shape = tuple(len(self.coords[d]) for d in self.dims)
        self.arrays: dict[str, np.ndarray] = {}
        for name in NUMERIC_PARAMETERS:
            value = values[name]
            arr = np.asarray(self.coords[name] if name in self.dims else value, dtype=float)
            _validate(name, arr)
            if name in self.dims:
                shape = [1] * len(self.dims)
                shape[self.dims.index(name)] = arr.size
                arr = arr.reshape(shape)
            self.arrays[name] = arr

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def wrap(self, value: np.ndarray | float) -> xr.DataArray:
        """A DataArray over the dimensions ``value`` varies along (size-1 axes are dropped)."""
        arr = np.asarray(value)
        if arr.ndim == 0:
            return xr.DataArray(arr)
        arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, (1,) * len(self.dims)))
        keep = [i for i, n in enumerate(arr.shape) if n > 1 or self.shape[i] == 1]
        squeezed = arr.reshape([arr.shape[i] for i in keep])
        dims = [self.dims[i] for i in keep]
        return xr.DataArray(squeezed, dims=dims, coords={d: self.coords[d] for d in dims})


def _validate(name: str, arr: np.ndarray) -> None:
    rule = _RULES.get(name, validation.nonnegative)
    rule(name, arr, **({"units": _UNITS[name]} if name in _UNITS else {}))


def _fraction(name: str, value: object, **_: object) -> object:
    return validation.fraction(name, value, allow_zero=False)


# How each numeric parameter of predict is checked (dlexplore.validation); the rest (times, gamma)
# are >= 0.
_RULES = {
    "gpus": lambda name, value, **_: validation.gpu_count(name, value),
    "gpus_per_node": lambda name, value, **_: validation.gpu_count(name, value),
    # 0 is the default: one NIC per GPU
    "nics_per_node": lambda name, value, **_: validation.count(
        name, value, minimum=0, maximum=validation.MAX_GPUS
    ),
    # 0 is the default: one server per node
    "servers": lambda name, value, **_: validation.count(name, value, minimum=0, maximum=validation.MAX_GPUS),
    "io_threads": validation.count,
    "grad_accum": lambda name, value, **_: validation.count(name, value, maximum=validation.MAX_BATCH),
    "batch_size": lambda name, value, **_: validation.batch_size(name, value),
    "bandwidth": validation.positive,
    "intra_bandwidth": validation.positive,
    "host_bandwidth": validation.positive,
    "server_bandwidth": validation.positive,
    **{name: _fraction for name in _FRACTIONS},
    "winograd_speedup": lambda name, value, **_: validation.number(name, value, minimum=1),
    "overlap": lambda name, value, **_: validation.fraction(name, value),
}
_UNITS = {
    "bandwidth": "GB/s",
    "intra_bandwidth": "GB/s",
    "host_bandwidth": "GB/s",
    "server_bandwidth": "GB/s",
    "latency": "s",
    "intra_latency": "s",
    "gamma": "s/byte",
    "kernel_time": "s",
    "cycle_time": "s",
    "negotiation_time": "s",
}


def predict(
    workload: str | catalog.Workload | Sequence[str] = "resnet50",
    gpu: str | catalog.GPU | Sequence[str] = "V100-16GB",
    network: str | catalog.Link | Sequence[str] | None = "100GbE",
    *,
    gpus: int | Sequence[int] = 1,
    batch_size: int | Sequence[int] = 32,
    bandwidth: float | Sequence[float] | None = None,
    latency: float | Sequence[float] | None = None,
    gpus_per_node: int | Sequence[int] = 1,
    nics_per_node: int | Sequence[int] = 0,
    intra_link: str | catalog.Link | Sequence[str] = "PCIe3",
    intra_bandwidth: float | Sequence[float] | None = None,
    intra_latency: float | Sequence[float] | None = None,
    algorithm: str | Sequence[str] = "nccl",
    servers: int | Sequence[int] = 0,
    precision: str | Sequence[str] = "fp32",
    optimizer: str | Sequence[str] = "momentum",
    compute_efficiency: float | Sequence[float] | None = None,
    bucket_size: float | Sequence[float] | None = None,
    overlap: float | Sequence[float] = 1.0,
    gamma: float | Sequence[float] = 0.0,
    storage: str | catalog.StorageTier | Sequence[str] | None = None,
    io_threads: int | Sequence[int] = 4,
    prefetch: bool = True,
    workspace: float = DEFAULT_WORKSPACE,
    buckets: bool = False,
    grad_accum: int | Sequence[int] = 1,
    seq: int | Sequence[int] | None = None,
    attention: str | Sequence[str] = "fused",
    memory_efficiency: float | Sequence[float] | None = None,
    kernel_time: float | Sequence[float] | None = None,
    winograd_speedup: float | Sequence[float] | None = None,
    flash_efficiency: float | Sequence[float] | None = None,
    framework: str | Sequence[str] = "ddp",
    transport: str | Sequence[str] = "auto",
    servers_colocated: bool | Sequence[bool] = True,
    tcp_efficiency: float | Sequence[float] | None = None,
    ps_efficiency: float | Sequence[float] | None = None,
    cycle_time: float | Sequence[float] | None = None,
    negotiation_time: float | Sequence[float] | None = None,
    host_staging: bool | Sequence[bool] = False,
    host_bandwidth: float | Sequence[float] | None = None,
    server_bandwidth: float | Sequence[float] | None = None,
    operators: bool = False,
) -> xr.Dataset:
    """Predict step time, throughput, scaling efficiency and memory of data-parallel training.

    Every argument may be a scalar or a 1-D sequence (a sweep); each sweep becomes a dimension of
    the result, named like the argument. Units: ``bandwidth``/``intra_bandwidth`` GB/s (1e9 bytes/s)
    per direction, ``latency``/``intra_latency`` s, ``batch_size`` samples per GPU, ``bucket_size``
    and ``workspace`` bytes, ``gamma`` s/byte, ``compute_efficiency`` and ``overlap`` fractions.

    Parameters
    ----------
    workload, gpu, network, intra_link, storage:
        Catalog ids (or catalog records). ``bandwidth``/``latency`` override the network's figures
        and ``intra_bandwidth``/``intra_latency`` the intra-node link's; ``network=None`` requires
        both ``bandwidth`` and ``latency``. ``storage=None`` means synthetic data (no reading).
    gpus, gpus_per_node, nics_per_node:
        Total GPUs, GPUs per node (default 1: every GPU talks over the network) and network
        adapters per node (default 0: one per GPU); the GPUs of a node share its NICs in the
        algorithms that send from all of them at once (:mod:`dlexplore.model.topology`).
    algorithm:
        Gradient allreduce: ``ring``, ``tree``, ``recursive_doubling``, ``halving_doubling``,
        ``hierarchical`` (ring inside nodes, ring between them) or ``parameter_server`` with
        ``servers`` servers.
    precision:
        ``fp32``, ``tf32``, or mixed precision ``fp16``/``bf16`` (16-bit compute, activations and
        gradients; fp32 master weights).
    optimizer:
        ``sgd``, ``momentum`` or ``adam``: sets optimizer-state memory and update traffic.
    compute_efficiency:
        Fraction of peak FLOP/s that large GEMMs and convolutions reach (the plateau of the GEMM
        efficiency curve, :mod:`dlexplore.model.operators`); default from published GEMM
        measurements of the GPU (or its architecture) at the precision,
        :func:`dlexplore.catalog.gemm_efficiency`.
    memory_efficiency, kernel_time, winograd_speedup, flash_efficiency:
        The rest of the per-operator compute model: the fraction of memory bandwidth that
        memory-bound kernels reach, the fixed time of one kernel (s), the FLOP saving of
        Winograd's algorithm on 3x3 convolutions (applied on vector units only), and the fraction
        of peak of a flash-attention kernel. Defaults: :func:`dlexplore.catalog.model_defaults`.
    grad_accum:
        Micro-batches per step (gradient accumulation): each GPU runs ``grad_accum`` forward and
        backward passes of ``batch_size`` samples, then one allreduce and one update; only the
        last micro-batch's backward hides the allreduce. The global batch is
        ``gpus * batch_size * grad_accum``.
    seq, attention:
        Transformers only: the sequence length (tokens; default the workload's) and the attention
        kernels (``fused``, ``unfused`` or ``flash``).
    bucket_size:
        Gradient fusion buffer, bytes (default 25 MiB, as PyTorch DDP; 64 MiB with Horovod);
        0 = one allreduce per layer.
    overlap:
        1 lets communication overlap the backward pass as the bucket schedule allows; 0 serialises it.
    framework, transport, servers_colocated, tcp_efficiency, ps_efficiency, cycle_time, negotiation_time:
        How the framework synchronises gradients: Horovod's cycle and negotiation, kernel TCP's
        efficiency, parameter servers' placement and link efficiency
        (:mod:`dlexplore.model.gradsync`).
    host_staging, host_bandwidth, server_bandwidth:
        ``host_staging=True`` reduces gradients in host memory: copied off the GPU, through a
        fusion buffer, Open MPI's ring with the sums on the CPU, and back (Horovod's CPU
        allreduce; :mod:`dlexplore.model.hoststaging`). ``host_bandwidth`` (GB/s) is the memory
        traffic one host CPU core sustains; ``server_bandwidth`` (GB/s) the memory traffic of a
        parameter server's CPU receiving, summing and sending gradients.
    prefetch:
        Whether the next batch is read while the current one computes.
    buckets:
        Also return the schedule of every gradient bucket's allreduce on a ``bucket`` dimension
        (bucket 0 is the first one the backward pass fills): ``bucket_bytes``,
        ``bucket_ready``, ``bucket_start``, ``bucket_end`` (s from the start of the step),
        ``bucket_time`` (s), ``bucket_algbw`` and ``bucket_busbw`` (GB/s).
    operators:
        Also return ``time_kernel``, the time of every kernel of one step on a ``kernel``
        dimension (with its ``kernel_category`` and ``kernel_phase``): the per-operator detail
        behind ``time_operator``.

    Returns
    -------
    xarray.Dataset
        Variables ``step_time``, ``time_forward``, ``time_backward``, ``time_optimizer``,
        ``time_compute``, ``time_operator`` (compute time per step by operator category, on an
        ``operator`` dimension), ``time_comm``, ``time_comm_exposed``, ``time_io``, ``time_io_exposed``
        (s), ``throughput`` (samples/s), ``efficiency`` (1), ``comm_bytes`` (bytes),
        ``n_buckets``, ``mem_params``, ``mem_grads``, ``mem_optimizer``, ``mem_activations``,
        ``mem_workspace``, ``mem_total``, ``mem_capacity`` (bytes) and ``fits``; every variable has
        ``units`` and ``long_name``; ``attrs["source"]`` says the numbers are predicted.
    """
    args = dict(
        workload=workload,
        gpu=gpu,
        network=network,
        intra_link=intra_link,
        algorithm=algorithm,
        precision=precision,
        optimizer=optimizer,
        storage=storage,
        bucket_size=bucket_size,
        seq=seq,
        attention=attention,
        framework=framework,
        transport=transport,
        servers_colocated=servers_colocated,
        host_staging=host_staging,
    )
    numeric = dict(
        gpus=gpus,
        batch_size=batch_size,
        bandwidth=bandwidth,
        latency=latency,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        servers=servers,
        compute_efficiency=compute_efficiency,
        overlap=overlap,
        gamma=gamma,
        io_threads=io_threads,
        grad_accum=grad_accum,
        memory_efficiency=memory_efficiency,
        kernel_time=kernel_time,
        winograd_speedup=winograd_speedup,
        flash_efficiency=flash_efficiency,
        tcp_efficiency=tcp_efficiency,
        ps_efficiency=ps_efficiency,
        cycle_time=cycle_time,
        negotiation_time=negotiation_time,
        host_bandwidth=host_bandwidth,
        server_bandwidth=server_bandwidth,
    )
    workspace = validation.nonnegative("workspace", workspace, units="bytes")
    if bucket_size is not None:
        validation.nonnegative("bucket_size", bucket_size, units="bytes", allow_inf=True)
    for one_gpu, one_precision in itertools.product(_each(gpu), _each(precision)):
        validation.precision_for(catalog.gpu(one_gpu), normalize_precision(one_precision))
    swept = [name for name in CATEGORICAL_PARAMETERS if is_sweep(args[name])]
    for name in swept:
        values = list(args[name])
        if not values:
            raise DlexploreError(f"{name}: the sweep is empty")
        labels = [_label(v) for v in values]
        if len(set(labels)) != len(labels):
            raise DlexploreError(f"{name}: the sweep repeats values {labels}")
    pieces = []
    for combo in itertools.product(*(list(args[name]) for name in swept)):
        one = dict(args, **dict(zip(swept, combo, strict=True)))
        pieces.append(
            _predict_one(one, numeric, bool(prefetch), float(workspace), bool(buckets), bool(operators))
        )
    ds = _combine(pieces, swept, [[_label(v) for v in args[name]] for name in swept])
    title = "data-parallel training step"
    return finish_dataset(ds, title=title)


def _bucket_schedule(
    grid: _Grid, nbytes: np.ndarray, schedule: dict[str, list], ranks: np.ndarray
) -> dict[str, xr.DataArray]:
    """Per-bucket variables over every sweep dimension plus ``bucket`` (last)."""
    dims = [*grid.dims, "bucket"]
    coords = {**{d: grid.coords[d] for d in grid.dims}, "bucket": np.arange(len(nbytes))}

    def stack(values: list) -> np.ndarray:
        return np.stack([np.broadcast_to(v, grid.shape) for v in values], axis=-1)

    start, time = stack(schedule["bucket_start"]), stack(schedule["bucket_time"])
    size = np.broadcast_to(nbytes, time.shape)
    p = np.broadcast_to(np.asarray(ranks, dtype=float), grid.shape)[..., np.newaxis]
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(time > 0, size / time / 1e9, np.nan)
        factor = np.where(p > 1, 2.0 * (p - 1.0) / p, np.nan)
    out = {
        "bucket_bytes": size,
        "bucket_ready": stack(schedule["bucket_ready"]),
        "bucket_start": start,
        "bucket_end": start + time,
        "bucket_time": time,
        "bucket_algbw": algbw,
        "bucket_busbw": algbw * factor,
    }
    return {name: xr.DataArray(value, dims=dims, coords=coords) for name, value in out.items()}


def _each(value: object) -> list:
    return list(value) if is_sweep(value) else [value]


def _label(value: object) -> object:
    name = getattr(value, "name", None)
    return name if name is not None else value


def _combine(pieces: list[xr.Dataset], dims: list[str], labels: list[list]) -> xr.Dataset:
    """Concatenate per-combination datasets along the categorical sweep dimensions."""
    if not dims:
        return pieces[0]
    size = len(pieces) // len(labels[0])
    groups = [
        _combine(pieces[i * size : (i + 1) * size], dims[1:], labels[1:]) for i in range(len(labels[0]))
    ]
    groups = [g.drop_vars(dims[0]) if dims[0] in g.coords else g for g in groups]
    # Names get object dtype: pandas 3 would infer its string dtype, which xarray's idxmax cannot
    # handle. Numbers (bucket_size) keep their numeric dtype.
    names = all(isinstance(label, str) for label in labels[0])
    index = pd.Index(labels[0], name=dims[0], dtype=object if names else None)
    out = xr.concat(groups, dim=index, coords="different", compat="equals", join="outer")
    return out


def _predict_one(
    args: dict,
    numeric: dict,
    prefetch: bool,
    workspace: float,
    detail: bool = False,
    kernels: bool = False,
) -> xr.Dataset:
    wl = catalog.with_sequence(args["workload"], args["seq"])
    dev = catalog.gpu(args["gpu"])
    precision = normalize_precision(args["precision"])
    optimizer = normalize_optimizer(args["optimizer"])
    algorithm = normalize_algorithm(args["algorithm"], "allreduce")
    tier = None if args["storage"] is None else catalog.storage(args["storage"])
    framework = _choice("framework", args["framework"], FRAMEWORKS)
    transport = _choice("transport", args["transport"], TRANSPORTS)
    colocated = bool(args["servers_colocated"])
    staged = bool(args["host_staging"])
    bucket_size = (
        float(args["bucket_size"])
        if args["bucket_size"] is not None
        else float(FUSION_THRESHOLD if framework == "horovod" else DEFAULT_BUCKET_SIZE)
    )

    values = dict(numeric)
    net = None
    if args["network"] is not None:
        net = catalog.network(args["network"])
    elif values["bandwidth"] is None or values["latency"] is None:
        raise DlexploreError("give a network, or both bandwidth (GB/s) and latency (s)")
    if values["bandwidth"] is None:
        values["bandwidth"] = net.bandwidth_gbs
    if values["latency"] is None:
        values["latency"] = net.latency_s
    intra = catalog.network(args["intra_link"])
    if values["intra_bandwidth"] is None:
        values["intra_bandwidth"] = intra.bandwidth_gbs
    if values["intra_latency"] is None:
        values["intra_latency"] = intra.latency_s
    fill_compute_defaults(values, dev, precision)
    for name in COMM_PARAMETERS:
        if values[name] is None:
            values[name] = catalog.model_default(name)
    grid = _Grid(values)
    P, B, G, A = grid["gpus"], grid["batch_size"], grid["gpus_per_node"], grid["grad_accum"]

    # compute: every kernel of one micro-batch, then grad_accum of them and one update
    peak = training_peak_flops(dev, precision)
    ops = operator_table(
        wl, precision, attention=args["attention"], optimizer_traffic=OPTIMIZER_TRAFFIC_BYTES[optimizer]
    )
    times = kernel_times(ops, B, dev, precision, grid)
    phases = phase_sums(ops, times)
    t_fwd_mb, t_bwd_mb, t_opt = phases["forward"], phases["backward"], phases["optimizer"]
    t_fwd, t_bwd = A * t_fwd_mb, A * t_bwd_mb
    t_compute = t_fwd + t_bwd + t_opt
    per_step = np.where(ops.phase == PHASES.index("optimizer"), 1.0, 0.0)
    step_times = times * (per_step + (1.0 - per_step) * A[..., np.newaxis])
    by_operator = category_sums(ops, step_times)
    # the last micro-batch's forward starts after the others' forward and backward
    t_before = (A - 1) * (t_fwd_mb + t_bwd_mb) + t_fwd_mb

    # communication: one allreduce per bucket, serialised on one stream, overlapping backward
    per_param = bytes_per_param(precision, optimizer)
    buckets = gradient_buckets(wl, per_param["grads"], bucket_size)
    schedule: dict[str, list] = {"bucket_ready": [], "bucket_start": [], "bucket_time": []}
    one_node = P <= G
    # what collectives see of each link: its efficiency, and kernel TCP's between nodes
    tcp = resolve_transport(transport, net) == "tcp"
    bw_net = (
        grid["bandwidth"]
        * (net.efficiency if net is not None else 1.0)
        * (grid["tcp_efficiency"] if tcp else 1.0)
    )
    bw_intra = grid["intra_bandwidth"] * intra.efficiency
    # the node's NICs shared by its GPUs where they all send at once
    bw_nic = bw_net * nic_share(algorithm, np.minimum(G, P), grid["nics_per_node"])
    if algorithm in ("hierarchical", "nccl", "nvls"):
        bw, lat = bw_nic, grid["latency"]
    else:
        bw = np.where(one_node, bw_intra, bw_nic)
        lat = np.where(one_node, grid["intra_latency"], grid["latency"])
    if algorithm == "parameter_server":
        servers = np.where(grid["servers"] > 0, grid["servers"], np.ceil(P / np.minimum(G, P)))
        share = server_load_fraction(wl, servers)
        # gRPC rather than NCCL: ps_efficiency of the link in place of the transport's
        bw_ps = (
            np.where(one_node, bw_intra, bw_net / (grid["tcp_efficiency"] if tcp else 1.0))
            * grid["ps_efficiency"]
        )
    node = (
        dict(
            intra_fabric=intra.fabric or "pcie", architecture=dev.architecture, nvls=intra.reduction == "nvls"
        )
        if algorithm in ("nccl", "nvls")
        else {}
    )
    multi = P > 1
    if staged:
        pcie = host_link(dev)
        pcie_bw = pcie.bandwidth_gbs * pcie.efficiency
    t_comm = 0.0
    end = 0.0
    for nbytes, ready_frac, tensors in zip(
        buckets.nbytes, buckets.ready_fraction, buckets.tensors, strict=True
    ):
        if algorithm == "parameter_server":
            c = parameter_server_time(nbytes, P, G, servers, share, colocated, bw_ps, lat, grid["gamma"])
            c = c + server_work_time(nbytes, P, share, grid["server_bandwidth"])
        elif staged:
            c = host_allreduce_time(nbytes, P, G, bw_net, grid["latency"], pcie_bw, grid["host_bandwidth"])
        else:
            c = collective_time(
                "allreduce",
                algorithm,
                nbytes,
                P,
                bw,
                lat,
                grid["gamma"],
                gpus_per_node=G,
                intra_bandwidth=bw_intra,
                intra_latency=grid["intra_latency"],
                **node,
            )
        if framework == "horovod":
            c = c + horovod_delay(tensors, P, grid["cycle_time"], grid["negotiation_time"])
        c = np.where(multi, c, 0.0)
        t_comm = t_comm + c
        ready_at = t_before + ready_frac * t_bwd_mb
        if detail:
            schedule["bucket_ready"].append(ready_at)
            schedule["bucket_start"].append(np.maximum(ready_at, end))
            schedule["bucket_time"].append(c)
        end = np.maximum(ready_at, end) + c
    hidden_limit = np.maximum(end - (t_fwd + t_bwd), 0.0)
    ov = grid["overlap"]
    # Never more than all of it: the blend can round one ulp above time_comm.
    t_comm_exposed = np.minimum(ov * hidden_limit + (1.0 - ov) * t_comm, t_comm)

    # input
    t_io = io_time(tier, wl.input_bytes_per_sample, B * A, P, G, grid["io_threads"])
    busy = t_compute + t_comm_exposed
    t_io_exposed = np.maximum(t_io - busy, 0.0) if prefetch else t_io
    step = busy + t_io_exposed
    throughput = P * B * A / step

    t_io_1 = io_time(tier, wl.input_bytes_per_sample, B * A, 1, G, grid["io_threads"])
    step_1 = t_compute + (np.maximum(t_io_1 - t_compute, 0.0) if prefetch else t_io_1)
    efficiency = step_1 / step

    # memory
    mem_params = wl.params * per_param["params"]
    mem_grads = wl.params * per_param["grads"]
    mem_opt = wl.params * per_param["optimizer"]
    mem_act = wl.activation_bytes_per_sample * ACTIVATION_SCALE[precision] * B
    fusion = min(bucket_size, float(buckets.nbytes.sum())) if bucket_size > 0 else 0.0
    mem_work = workspace + np.where(multi, fusion, 0.0)
    mem_total = mem_params + mem_grads + mem_opt + mem_act + mem_work

    data = {
        "step_time": step,
        "throughput": throughput,
        "efficiency": efficiency,
        "time_forward": t_fwd,
        "time_backward": t_bwd,
        "time_optimizer": t_opt,
        "time_compute": t_compute,
        "time_comm": np.asarray(t_comm, dtype=float),
        "time_comm_exposed": t_comm_exposed,
        "time_io": t_io,
        "time_io_exposed": t_io_exposed,
        "comm_bytes": np.where(multi, float(buckets.nbytes.sum()), 0.0),
        "n_buckets": np.where(multi, len(buckets.nbytes), 0),
        "mem_params": float(mem_params),
        "mem_grads": float(mem_grads),
        "mem_optimizer": float(mem_opt),
        "mem_activations": mem_act,
        "mem_workspace": mem_work,
        "mem_total": mem_total,
        "mem_capacity": float(dev.memory_bytes),
        "fits": mem_total <= dev.memory_bytes,
    }
    ds = xr.Dataset({name: grid.wrap(value) for name, value in data.items()})
    ds["time_operator"] = _along(grid, by_operator, "operator", list(CATEGORIES))
    if kernels:
        ds["time_kernel"] = _along(grid, step_times, "kernel", np.arange(len(ops)))
        ds = ds.assign_coords(
            kernel_name=("kernel", np.array(ops.name, dtype=object)),
            kernel_category=("kernel", np.array([CATEGORIES[i] for i in ops.category], dtype=object)),
            kernel_phase=("kernel", np.array([PHASES[i] for i in ops.phase], dtype=object)),
        )
    if detail:
        ds = ds.assign(_bucket_schedule(grid, buckets.nbytes, schedule, P))
    scalar_coords = {
        name: float(values[name]) if name not in _INTEGER_PARAMETERS else int(values[name])
        for name in NUMERIC_PARAMETERS
        if name not in grid.dims
    }
    labels = {
        "workload": catalog.workload(args["workload"]).name,
        "gpu": dev.name,
        "network": net.name if net is not None else "custom",
        "intra_link": intra.name,
        "algorithm": algorithm,
        "precision": precision,
        "optimizer": optimizer,
        "storage": tier.name if tier is not None else "none",
        "bucket_size": bucket_size,
        "peak_flops": peak,
        "attention": str(args["attention"]),
        "framework": framework,
        "transport": resolve_transport(transport, net),
        "servers_colocated": colocated,
        "host_staging": staged,
    }
    if wl.kind == "transformer":
        labels["seq"] = int(wl.config["seq"])
    return ds.assign_coords({**scalar_coords, **labels})


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    key = str(value).strip().lower()
    if key not in allowed:
        raise DlexploreError(f"unknown {name} {value!r}; expected one of {', '.join(allowed)}")
    return key


def _along(grid: _Grid, value: np.ndarray, dim: str, labels: object) -> xr.DataArray:
    """``value`` (last axis along ``dim``, the others the grid's) as a DataArray with ``dim``
    last, over the grid dimensions it varies along."""
    arr = np.asarray(value, dtype=float)
    arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, (1,) * len(grid.dims) + arr.shape[-1:]))
    keep = [i for i, n in enumerate(arr.shape[:-1]) if n > 1 or grid.shape[i] == 1]
    squeezed = arr.reshape([arr.shape[i] for i in keep] + [arr.shape[-1]])
    dims = [grid.dims[i] for i in keep] + [dim]
    coords = {d: grid.coords[d] for d in dims[:-1]}
    coords[dim] = labels
    return xr.DataArray(squeezed, dims=dims, coords=coords)
