"""One data-parallel configuration's step (every categorical choice fixed, the numeric parameters
a :class:`~dlexplore.model.step_grid.Grid`): compute from the operator table, gradient buckets
allreduced on one stream while backward runs, input from storage, memory per GPU. The formulas are
in :mod:`dlexplore.model.step`'s docstring.

Kept whole: one configuration's step, its stages (setup, compute, buckets, input, memory) each a
function, in the order the model adds them up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import xarray as xr

from .. import catalog, validation
from ..errors import DlexploreError
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
from .memory import ACTIVATION_SCALE, bytes_per_param, flash_activation_saving
from .operator_table import operator_table
from .operators import CATEGORIES, PHASES, category_sums, normalize_fusion, normalize_layout, phase_sums
from .step_grid import COMM_PARAMETERS, INTEGER_PARAMETERS, NUMERIC_PARAMETERS, Grid, along, along_raw, choose
from .topology import nic_share

#: PyTorch DistributedDataParallel's default ``bucket_cap_mb`` (25 MiB).
DEFAULT_BUCKET_SIZE = 25 * 2**20


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


def _bucket_schedule(
    grid: Grid, nbytes: np.ndarray, schedule: dict[str, list], ranks: np.ndarray
) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Per-bucket variables over every sweep dimension plus ``bucket`` (last), as (dimensions,
    values) for the prediction's dataset (its ``bucket`` coordinate: ``arange(len(nbytes))``)."""
    dims = (*grid.dims, "bucket")

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
    return {name: (dims, value) for name, value in out.items()}


@dataclass
class _Setup:
    """One configuration's catalog entries and names, resolved, and its numeric grid."""

    wl: catalog.Workload
    dev: catalog.GPU
    precision: str
    optimizer: str
    algorithm: str
    tier: catalog.StorageTier | None
    framework: str
    transport: str
    colocated: bool
    staged: bool
    bucket_size: float
    net: catalog.Link | None
    intra: catalog.Link
    values: dict
    grid: Grid


def _setup(args: dict, numeric: dict) -> _Setup:
    framework = choose("framework", args["framework"], FRAMEWORKS)
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
    dev = catalog.gpu(args["gpu"])
    precision = normalize_precision(args["precision"])
    fill_compute_defaults(values, dev, precision)
    for name in COMM_PARAMETERS:
        if values[name] is None:
            values[name] = catalog.model_default(name)
    return _Setup(
        wl=catalog.with_sequence(args["workload"], args["seq"]),
        dev=dev,
        precision=precision,
        optimizer=normalize_optimizer(args["optimizer"]),
        algorithm=normalize_algorithm(args["algorithm"], "allreduce"),
        tier=None if args["storage"] is None else catalog.storage(args["storage"]),
        framework=framework,
        transport=choose("transport", args["transport"], TRANSPORTS),
        colocated=bool(args["servers_colocated"]),
        staged=bool(args["host_staging"]),
        bucket_size=bucket_size,
        net=net,
        intra=intra,
        values=values,
        grid=Grid(values),
    )


def _compute(st: _Setup, attention: object, layout: object, fusion: object) -> dict:
    """Every kernel of one micro-batch, then ``grad_accum`` of them and one update (s)."""
    grid = st.grid
    B, A = grid["batch_size"], grid["grad_accum"]
    ops = operator_table(
        st.wl,
        st.precision,
        attention=attention,
        optimizer_traffic=OPTIMIZER_TRAFFIC_BYTES[st.optimizer],
        layout=layout,
        fusion=fusion,
    )
    times = kernel_times(ops, B, st.dev, st.precision, grid)
    phases = phase_sums(ops, times)
    t_fwd_mb, t_bwd_mb, t_opt = phases["forward"], phases["backward"], phases["optimizer"]
    per_step = np.where(ops.phase == PHASES.index("optimizer"), 1.0, 0.0)
    step_times = times * (per_step + (1.0 - per_step) * A[..., np.newaxis])
    return {
        "ops": ops,
        "peak": training_peak_flops(st.dev, st.precision),
        "t_bwd_mb": t_bwd_mb,
        "t_fwd": A * t_fwd_mb,
        "t_bwd": A * t_bwd_mb,
        "t_opt": t_opt,
        "t_compute": A * t_fwd_mb + A * t_bwd_mb + t_opt,
        "step_times": step_times,
        "by_operator": category_sums(ops, step_times),
        # the last micro-batch's forward starts after the others' forward and backward
        "t_before": (A - 1) * (t_fwd_mb + t_bwd_mb) + t_fwd_mb,
    }


def _links(st: _Setup) -> dict:
    """What collectives see of each link, once per configuration: its efficiency, and kernel TCP's
    between nodes; a parameter server's gRPC at ``ps_efficiency`` instead; the latency each uses."""
    grid, net, intra, algorithm = st.grid, st.net, st.intra, st.algorithm
    P, G = grid["gpus"], grid["gpus_per_node"]
    one_node = P <= G
    tcp = resolve_transport(st.transport, net) == "tcp"
    bw_net = (
        grid["bandwidth"]
        * (net.efficiency if net is not None else 1.0)
        * (grid["tcp_efficiency"] if tcp else 1.0)
    )
    out = {"bw_intra": grid["intra_bandwidth"] * intra.efficiency, "bw_net": bw_net, "node": {}}
    # the node's NICs shared by its GPUs where they all send at once
    bw_nic = bw_net * nic_share(algorithm, np.minimum(G, P), grid["nics_per_node"])
    if algorithm in ("hierarchical", "nccl", "nvls"):
        out.update(bw=bw_nic, lat=grid["latency"])
    else:
        out.update(
            bw=np.where(one_node, out["bw_intra"], bw_nic),
            lat=np.where(one_node, grid["intra_latency"], grid["latency"]),
        )
    if algorithm == "parameter_server":
        servers = np.where(grid["servers"] > 0, grid["servers"], np.ceil(P / np.minimum(G, P)))
        out.update(
            servers=servers,
            share=server_load_fraction(st.wl, servers),
            bw_ps=np.where(one_node, out["bw_intra"], bw_net / (grid["tcp_efficiency"] if tcp else 1.0))
            * grid["ps_efficiency"],
        )
    if st.staged:
        pcie = host_link(st.dev)
        out["pcie_bw"] = pcie.bandwidth_gbs * pcie.efficiency
    if algorithm in ("nccl", "nvls"):
        out["node"] = dict(
            intra_fabric=intra.fabric or "pcie",
            architecture=st.dev.architecture,
            nvls=intra.reduction == "nvls",
        )
    return out


def _bucket_time(st: _Setup, links: dict, nbytes: float, tensors: float) -> np.ndarray:
    """One bucket's allreduce (s) over :func:`_links`, Horovod's cycle and negotiation added."""
    grid = st.grid
    P, G = grid["gpus"], grid["gpus_per_node"]
    if st.algorithm == "parameter_server":
        c = parameter_server_time(
            nbytes,
            P,
            G,
            links["servers"],
            links["share"],
            st.colocated,
            links["bw_ps"],
            links["lat"],
            grid["gamma"],
        )
        c = c + server_work_time(nbytes, P, links["share"], grid["server_bandwidth"])
    elif st.staged:
        c = host_allreduce_time(
            nbytes, P, G, links["bw_net"], grid["latency"], links["pcie_bw"], grid["host_bandwidth"]
        )
    else:
        c = collective_time(
            "allreduce",
            st.algorithm,
            nbytes,
            P,
            links["bw"],
            links["lat"],
            grid["gamma"],
            gpus_per_node=G,
            intra_bandwidth=links["bw_intra"],
            intra_latency=grid["intra_latency"],
            **links["node"],
        )
    if st.framework == "horovod":
        c = c + horovod_delay(tensors, P, grid["cycle_time"], grid["negotiation_time"])
    return np.where(P > 1, c, 0.0)


#: Largest grid x buckets evaluated on one bucket axis: a large sweep's arrays already amortise the
#: per-call overhead, and NCCL's candidates on the bucket axis would hold 9 x buckets x grid floats.
_BUCKET_AXIS_CELLS = 1 << 16


def _bucket_times(st: _Setup, links: dict, buckets: Buckets) -> list[np.ndarray]:
    """:func:`_bucket_time` of every bucket, in one call on a leading bucket axis: one call per
    bucket was most of a calibration's time (ResNet-50 has 4-6 buckets, VGG-16 and BERT 14-24)."""
    cells = math.prod(st.grid.shape) * len(buckets.nbytes)
    if len(buckets.nbytes) < 2 or cells > _BUCKET_AXIS_CELLS:
        return [_bucket_time(st, links, n, t) for n, t in zip(buckets.nbytes, buckets.tensors, strict=True)]
    axis = (-1,) + (1,) * len(st.grid.dims)
    times = _bucket_time(st, links, np.reshape(buckets.nbytes, axis), np.reshape(buckets.tensors, axis))
    # The shape one bucket's call gives: () where nothing it reads is swept, else the grid's axes
    # (the bucket axis adds size-1 axes that a 0-d time would not have).
    first = _bucket_time(st, links, buckets.nbytes[0], buckets.tensors[0]) if st.grid.dims else None
    shape = np.shape(first) if first is not None else ()
    return [np.reshape(times[i], shape) for i in range(len(buckets.nbytes))]


def _communication(st: _Setup, compute: dict, buckets: Buckets, detail: bool) -> tuple:
    """One allreduce per bucket, serialised on one stream, overlapping backward: the total and the
    exposed communication time (s), and each bucket's schedule when ``detail``."""
    schedule: dict[str, list] = {"bucket_ready": [], "bucket_start": [], "bucket_time": []}
    links = _links(st)
    t_comm = 0.0
    end = 0.0
    for c, ready_frac in zip(_bucket_times(st, links, buckets), buckets.ready_fraction, strict=True):
        t_comm = t_comm + c
        ready_at = compute["t_before"] + ready_frac * compute["t_bwd_mb"]
        if detail:
            schedule["bucket_ready"].append(ready_at)
            schedule["bucket_start"].append(np.maximum(ready_at, end))
            schedule["bucket_time"].append(c)
        end = np.maximum(ready_at, end) + c
    hidden_limit = np.maximum(end - (compute["t_fwd"] + compute["t_bwd"]), 0.0)
    ov = st.grid["overlap"]
    # Never more than all of it: the blend can round one ulp above time_comm.
    t_comm_exposed = np.minimum(ov * hidden_limit + (1.0 - ov) * t_comm, t_comm)
    return t_comm, t_comm_exposed, schedule


def _step(args: dict, numeric: dict, prefetch: bool, workspace: float, detail: bool) -> tuple:
    """The step's numbers: its setup, compute, buckets, their schedule and the variables."""
    st = _setup(args, numeric)
    grid, wl, dev, precision = st.grid, st.wl, st.dev, st.precision
    P, B, G, A = grid["gpus"], grid["batch_size"], grid["gpus_per_node"], grid["grad_accum"]
    compute = _compute(st, args["attention"], args["layout"], args["fusion"])
    per_param = bytes_per_param(precision, st.optimizer)
    buckets = gradient_buckets(wl, per_param["grads"], st.bucket_size)
    t_comm, t_comm_exposed, schedule = _communication(st, compute, buckets, detail)

    # input
    t_compute = compute["t_compute"]
    t_io = io_time(st.tier, wl.input_bytes_per_sample, B * A, P, G, grid["io_threads"])
    busy = t_compute + t_comm_exposed
    t_io_exposed = np.maximum(t_io - busy, 0.0) if prefetch else t_io
    step = busy + t_io_exposed
    t_io_1 = io_time(st.tier, wl.input_bytes_per_sample, B * A, 1, G, grid["io_threads"])
    step_1 = t_compute + (np.maximum(t_io_1 - t_compute, 0.0) if prefetch else t_io_1)

    # memory
    multi = P > 1
    mem_params = wl.params * per_param["params"]
    mem_grads = wl.params * per_param["grads"]
    mem_opt = wl.params * per_param["optimizer"]
    act = wl.activation_bytes_per_sample
    if wl.kind == "transformer" and str(args["attention"]).strip().lower() == "flash":
        c = wl.config
        act -= flash_activation_saving(c["layers"], c["hidden"], c["heads"], c["seq"])
    mem_act = act * ACTIVATION_SCALE[precision] * B
    fusion = min(st.bucket_size, float(buckets.nbytes.sum())) if st.bucket_size > 0 else 0.0
    mem_work = workspace + np.where(multi, fusion, 0.0)
    mem_total = mem_params + mem_grads + mem_opt + mem_act + mem_work

    data = {
        "step_time": step,
        "throughput": P * B * A / step,
        "efficiency": step_1 / step,
        "time_forward": compute["t_fwd"],
        "time_backward": compute["t_bwd"],
        "time_optimizer": compute["t_opt"],
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
    return st, compute, buckets, schedule, data


@dataclass(frozen=True)
class StepArrays:
    """One configuration's step variables as numpy arrays on its numeric grid, without a Dataset:
    what a calibration evaluates thousands of times (:func:`dlexplore.model.predict_arrays`).

    ``dims`` are the swept numeric parameters (in :data:`NUMERIC_PARAMETERS` order), ``coords`` their
    values and ``shape`` their lengths; each of ``values`` (units as :func:`dlexplore.predict`'s
    variables of the same name) broadcasts to ``shape``."""

    dims: tuple[str, ...]
    coords: dict[str, np.ndarray]
    shape: tuple[int, ...]
    values: dict[str, np.ndarray]

    def at(self, name: str, positions: dict[str, np.ndarray]) -> np.ndarray:
        """``name`` at points given by their index along each dimension (``positions[dim]``)."""
        full = np.broadcast_to(np.asarray(self.values[name]), self.shape)
        if not self.dims:
            return np.full(len(next(iter(positions.values()))), full.item(), dtype=full.dtype)
        return full[tuple(positions[d] for d in self.dims)]


def step_arrays(args: dict, numeric: dict, prefetch: bool, workspace: float) -> StepArrays:
    """:func:`predict_one`'s variables (but ``time_operator``) as numpy arrays."""
    st, _, _, _, data = _step(args, numeric, prefetch, workspace, False)
    return StepArrays(tuple(st.grid.dims), st.grid.coords, st.grid.shape, data)


def predict_one(
    args: dict,
    numeric: dict,
    prefetch: bool,
    workspace: float,
    detail: bool = False,
    kernels: bool = False,
) -> xr.Dataset:
    """The step of one configuration (every categorical argument one value) over the numeric grid."""
    st, compute, buckets, schedule, data = _step(args, numeric, prefetch, workspace, detail)
    grid, P = st.grid, st.grid["gpus"]
    # One constructor call: each DataArray assigned with its own coordinates (and the ~40 scalar
    # labels assigned after) was aligned again, most of a prediction's time.
    variables = {name: grid.raw(value) for name, value in data.items()}
    variables["time_operator"] = along_raw(grid, compute["by_operator"], "operator")
    coords = {**grid.coords, "operator": list(CATEGORIES)}
    if detail:
        variables.update(_bucket_schedule(grid, buckets.nbytes, schedule, P))
        coords["bucket"] = np.arange(len(buckets.nbytes))
    coords.update(_labels(st, args, compute["peak"]))
    ds = xr.Dataset(variables, coords=coords)
    return ds.assign(_kernel_variables(grid, compute)) if kernels else ds


def _kernel_variables(grid: Grid, compute: dict) -> xr.Dataset:
    ops = compute["ops"]
    return xr.Dataset(
        {"time_kernel": along(grid, compute["step_times"], "kernel", np.arange(len(ops)))}
    ).assign_coords(
        kernel_name=("kernel", np.array(ops.name, dtype=object)),
        kernel_category=("kernel", np.array([CATEGORIES[i] for i in ops.category], dtype=object)),
        kernel_phase=("kernel", np.array([PHASES[i] for i in ops.phase], dtype=object)),
    )


def _labels(st: _Setup, args: dict, peak: float) -> dict:
    """The configuration's scalar coordinates: unswept numeric values and the categorical names."""
    labels = {
        name: float(st.values[name]) if name not in INTEGER_PARAMETERS else int(st.values[name])
        for name in NUMERIC_PARAMETERS
        if name not in st.grid.dims
    }
    labels.update(
        workload=catalog.workload(args["workload"]).name,
        gpu=st.dev.name,
        network=st.net.name if st.net is not None else "custom",
        intra_link=st.intra.name,
        algorithm=st.algorithm,
        precision=st.precision,
        optimizer=st.optimizer,
        storage=st.tier.name if st.tier is not None else "none",
        bucket_size=st.bucket_size,
        peak_flops=peak,
        attention=str(args["attention"]),
        layout=normalize_layout(args["layout"]),
        fusion=normalize_fusion(args["fusion"]),
        framework=st.framework,
        transport=resolve_transport(st.transport, st.net),
        servers_colocated=st.colocated,
        host_staging=st.staged,
    )
    if st.wl.kind == "transformer":
        labels["seq"] = int(st.wl.config["seq"])
    return labels
