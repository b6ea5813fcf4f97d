"""Energy of a training step, sample and epoch, and the time-energy trade-off (seed 001).

A prediction of :func:`dlexplore.predict` splits each step into phases on every GPU: compute
(forward, backward, update; communication that overlaps backward happens inside it), exposed
communication (the GPU waits on the allreduce) and exposed input reading (the GPU waits on the
loader). Each phase gets a power per GPU between the device's idle power and its TDP::

    P_compute = P_idle + (P_tdp - P_idle) u            (u: utilisation, default 1)
    P_comm    = P_idle + (P_tdp - P_idle) f            (f: comm_power_fraction, default 0.5)
    P_wait    = P_idle                                 (waiting for input)
    E_gpu     = t_compute P_compute + t_comm_exposed P_comm + t_io_exposed P_wait        [J]
    E_step    = PUE (gpus E_gpu + nodes P_node step_time)                                [J]
    E_sample  = E_step / (gpus batch_size);   E_epoch = samples_per_epoch E_sample       [J]

with ``nodes = ceil(gpus / gpus_per_node)`` and ``P_node`` the rest of a node (CPUs, memory, NICs,
fans). Why ``u = 1`` by default rather than the compute efficiency: a GPU running dense training
kernels draws close to its TDP even at 30-50 % of peak FLOP/s, because its memory system and
clocks are busy regardless; ``utilization="efficiency"`` takes the prediction's
``compute_efficiency`` instead, a lower bound on compute power. Communication keeps the GPU's
copy engines, NVLink/PCIe and a few SMs (NCCL kernels) busy, hence a fraction between idle and TDP.

What this lacks: power capping and clock boosting (power is not linear in utilisation), the switch
fabric's power, cooling that varies with load (PUE is one constant), and the energy of storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from .. import catalog
from ..errors import DlexploreError
from .conventions import PREDICTED_SOURCE, OnDims

__all__ = [
    "energy",
    "parallel_phases",
    "pareto_front",
    "time_energy_tradeoff",
    "ENERGY_VARIABLES",
    "ENERGY_SOURCE",
]

ENERGY_SOURCE = f"{PREDICTED_SOURCE} + phase-power energy model"

#: Joules per kilowatt-hour.
J_PER_KWH = 3.6e6

#: units and long names of the variables :func:`energy` and :func:`time_energy_tradeoff` write.
ENERGY_VARIABLES: dict[str, tuple[str, str]] = {
    "power_compute": ("W", "GPU power while computing"),
    "power_comm": ("W", "GPU power while only communicating"),
    "power_idle": ("W", "GPU power while waiting (idle)"),
    "power_node": ("W", "node power besides its GPUs (CPU, memory, NIC)"),
    "nodes": ("count", "nodes"),
    "energy_compute": ("J", "energy per step of all GPUs computing (x PUE)"),
    "energy_comm": ("J", "energy per step of all GPUs in exposed communication (x PUE)"),
    "energy_idle": ("J", "energy per step of all GPUs waiting for input (x PUE)"),
    "energy_node": ("J", "energy per step of the nodes besides their GPUs (x PUE)"),
    "energy_step": ("J", "energy per training step, all GPUs and nodes, x PUE"),
    "energy_sample": ("J", "energy per training sample"),
    "energy_epoch": ("J", "energy per epoch"),
    "energy_epoch_kwh": ("kWh", "energy per epoch"),
    "time_epoch": ("s", "time per epoch"),
    "time_sample": ("s", "time per sample (1 / throughput)"),
    "power_average": ("W", "average facility power during training (x PUE)"),
    "pareto": ("1", "on the time-energy Pareto front (no point is both faster and cheaper)"),
}


def _gpu_figures(
    prediction: xr.Dataset, gpu: str | catalog.GPU | None
) -> tuple[float | xr.DataArray, float | xr.DataArray]:
    """TDP and idle power (W) as scalars, or DataArrays along a swept ``gpu`` dimension."""
    if gpu is not None:
        dev = catalog.gpu(gpu)
        return dev.tdp_w, dev.idle_w
    if "gpu" not in prediction.coords:
        raise DlexploreError("the prediction has no 'gpu' coordinate: pass gpu=... to energy()")
    names = prediction["gpu"]
    if names.ndim == 0:
        dev = catalog.gpu(str(names.item()))
        return dev.tdp_w, dev.idle_w
    devs = [catalog.gpu(str(n)) for n in names.values]
    tdp = xr.DataArray([d.tdp_w for d in devs], dims=names.dims, coords={names.dims[0]: names.values})
    idle = xr.DataArray([d.idle_w for d in devs], dims=names.dims, coords={names.dims[0]: names.values})
    return tdp, idle


def _check_fraction(name: str, value: object) -> None:
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise DlexploreError(f"{name} must be a fraction within [0, 1], got {arr.ravel().tolist()}")


def energy(
    prediction: xr.Dataset,
    *,
    gpu: str | catalog.GPU | None = None,
    pue: float = 1.0,
    node_power_w: float = 0.0,
    gpus_per_node: int | None = None,
    utilization: float | str | xr.DataArray | None = None,
    comm_power_fraction: float = 0.5,
    samples_per_epoch: float | None = None,
) -> xr.Dataset:
    """Power per phase and energy per step, sample and epoch of a predicted training step.

    Parameters
    ----------
    prediction:
        A dataset from :func:`dlexplore.predict` (needs ``time_compute``, ``time_comm_exposed``,
        ``time_io_exposed``, ``step_time`` in s, and ``gpus``, ``batch_size`` coordinates).
    gpu:
        Catalog GPU (name or record) for the power figures; default the prediction's ``gpu``
        coordinate (a swept ``gpu`` dimension gets each device's figures).
    pue:
        Power usage effectiveness of the data centre (>= 1): facility energy / IT energy.
    node_power_w:
        Power of each node besides its GPUs (CPUs, memory, NICs), W.
    gpus_per_node:
        GPUs per node, to count nodes; default the prediction's ``gpus_per_node``, else 1.
    utilization:
        ``u`` in ``P_compute = P_idle + (P_tdp - P_idle) u``, a fraction. ``None`` (default) means
        1.0 (dense training kernels run near TDP); ``"efficiency"`` uses the prediction's
        ``compute_efficiency`` (fraction of peak FLOP/s).
    comm_power_fraction:
        Where GPU power sits between idle (0) and TDP (1) while it only communicates.
    samples_per_epoch:
        Samples in one epoch; adds ``energy_epoch`` (J), ``energy_epoch_kwh`` and ``time_epoch`` (s).

    Returns
    -------
    xarray.Dataset
        The prediction's dimensions, with ``power_compute``, ``power_comm``, ``power_idle`` (W per
        GPU), ``power_node`` (W), ``nodes``, ``energy_compute``, ``energy_comm``, ``energy_idle``,
        ``energy_node``, ``energy_step`` (J per step, all GPUs, x PUE), ``energy_sample`` (J),
        ``time_sample`` (s), ``power_average`` (W, x PUE), plus the epoch variables when
        ``samples_per_epoch`` is given. ``attrs["source"]`` starts with "predicted: ".
    """
    u = _checked_utilization(
        prediction, pue, node_power_w, comm_power_fraction, samples_per_epoch, utilization
    )

    figures = _gpu_figures(prediction, gpu)
    if gpus_per_node is None:
        per_node = prediction["gpus_per_node"] if "gpus_per_node" in prediction.coords else 1
    else:
        if gpus_per_node < 1:
            raise DlexploreError(f"gpus_per_node must be >= 1, got {gpus_per_node!r}")
        per_node = gpus_per_node
    # Numpy arrays laid out as the step time is, the dataset built once with the prediction's
    # coordinates: xarray's arithmetic merges a prediction's ~40 scalar coordinates again at every
    # operation, which made this function most of an explorer slider move.
    grid = OnDims(prediction.variables["step_time"], prediction.indexes)
    dims = grid.dims
    tdp, idle, utilisation, node_size = (grid(v) for v in (*figures, u, per_node))
    gpus, batch_size, t_step = (grid(prediction.variables[n]) for n in ("gpus", "batch_size", "step_time"))
    nodes = np.ceil(gpus / node_size)
    p_compute = idle + (tdp - idle) * utilisation
    p_comm = idle + (tdp - idle) * comm_power_fraction
    e_compute = pue * gpus * grid(prediction.variables["time_compute"]) * p_compute
    e_comm = pue * gpus * grid(prediction.variables["time_comm_exposed"]) * p_comm
    e_idle = pue * gpus * grid(prediction.variables["time_io_exposed"]) * idle
    e_node = pue * nodes * node_power_w * t_step
    e_step = e_compute + e_comm + e_idle + e_node
    samples_per_step = gpus * batch_size
    out = {
        "power_compute": p_compute,
        "power_comm": p_comm,
        "power_idle": idle,
        "power_node": node_power_w * grid.ones,
        "nodes": nodes,
        "energy_compute": e_compute,
        "energy_comm": e_comm,
        "energy_idle": e_idle,
        "energy_node": e_node,
        "energy_step": e_step,
        "energy_sample": e_step / samples_per_step,
        "time_sample": t_step / samples_per_step,
        "power_average": e_step / t_step,
    }
    if samples_per_epoch is not None:
        out["energy_epoch"] = out["energy_sample"] * samples_per_epoch
        out["energy_epoch_kwh"] = out["energy_epoch"] / J_PER_KWH
        out["time_epoch"] = out["time_sample"] * samples_per_epoch
    coords = prediction.coords.assign(pue=float(pue), comm_power_fraction=float(comm_power_fraction))
    ds = xr.Dataset({name: (dims, grid.whole(value)) for name, value in out.items()}, coords=coords)
    ds.variables["pue"].attrs.update(units="1", long_name="power usage effectiveness (facility / IT energy)")
    ds.variables["comm_power_fraction"].attrs.update(
        units="1", long_name="GPU power while communicating, as a fraction from idle (0) to TDP (1)"
    )
    return _finish(ds, prediction)


def _checked_utilization(
    prediction: xr.Dataset,
    pue: float,
    node_power_w: float,
    comm_power_fraction: float,
    samples_per_epoch: float | None,
    utilization: float | str | xr.DataArray | None,
) -> float | xr.DataArray:
    """Check :func:`energy`'s arguments; the compute utilisation (a fraction, or the prediction's
    ``compute_efficiency``)."""
    missing = [
        v
        for v in ("time_compute", "time_comm_exposed", "time_io_exposed", "step_time")
        if v not in prediction
    ]
    missing += [c for c in ("gpus", "batch_size") if c not in prediction.coords]
    if missing:
        raise DlexploreError(
            f"energy() needs a prediction from dlexplore.predict; missing {', '.join(missing)}"
        )
    if not np.isfinite(pue) or pue < 1:
        raise DlexploreError(f"pue must be >= 1 (facility / IT energy), got {pue!r}")
    if not np.isfinite(node_power_w) or node_power_w < 0:
        raise DlexploreError(f"node_power_w must be >= 0 W, got {node_power_w!r}")
    _check_fraction("comm_power_fraction", comm_power_fraction)
    if samples_per_epoch is not None and not (np.isfinite(samples_per_epoch) and samples_per_epoch > 0):
        raise DlexploreError(f"samples_per_epoch must be > 0, got {samples_per_epoch!r}")

    if utilization is None:
        u: float | xr.DataArray = 1.0
    elif isinstance(utilization, str):
        if utilization != "efficiency":
            raise DlexploreError(f"utilization must be a fraction or 'efficiency', got {utilization!r}")
        if "compute_efficiency" not in prediction.coords:
            raise DlexploreError("utilization='efficiency' needs the prediction's compute_efficiency")
        u = prediction["compute_efficiency"]
    else:
        u = utilization
    _check_fraction("utilization", u)

    return u


def _finish(ds: xr.Dataset, prediction: xr.Dataset) -> xr.Dataset:
    for name, variable in ds.variables.items():  # not ds[name]: each would gather every coordinate
        if name in ENERGY_VARIABLES:
            units, long_name = ENERGY_VARIABLES[name]
            variable.attrs.update(units=units, long_name=long_name)
        elif name in prediction.variables and not variable.attrs:
            variable.attrs.update(prediction.variables[name].attrs)
    ds.attrs.update(
        source=ENERGY_SOURCE,
        kind="predicted",
        title=prediction.attrs.get("title", "training step") + ": energy",
    )
    return ds


def parallel_phases(prediction: xr.Dataset) -> xr.Dataset:
    """A hybrid-parallel step (:func:`dlexplore.predict_parallel`, or the same variables along any
    dimension) as the phases :func:`energy` prices, so that ``energy(parallel_phases(p))`` is its
    energy.

    Computing: ``time_compute`` (recomputation included) + ``time_optimizer`` + ``time_offload``;
    exposed communication: ``time_tp_comm + time_pp_comm + time_dp_comm_exposed`` (the
    tensor-parallel part as ``time_tp_comm_exposed`` where the prediction has it); waiting at idle
    power: the pipeline bubble ``time_bubble``. The three add up to ``step_time`` (s). The global
    ``batch_size`` becomes the per-GPU batch :func:`energy` counts samples with.
    """
    p = prediction
    needed = [
        "step_time",
        "time_compute",
        "time_optimizer",
        "time_offload",
        "time_tp_comm",
        "time_pp_comm",
        "time_dp_comm_exposed",
        "time_bubble",
    ]
    missing = [name for name in needed if name not in p]
    missing += [name for name in ("gpus", "batch_size") if name not in p.variables]
    if missing:
        raise DlexploreError(
            "parallel_phases() needs a prediction from dlexplore.predict_parallel; "
            f"missing {', '.join(missing)}"
        )
    seconds = {"units": "s"}
    # what the GEMMs do not hide (tp_overlap) where the prediction says so
    tp_comm = p["time_tp_comm_exposed"] if "time_tp_comm_exposed" in p else p["time_tp_comm"]
    phases = xr.Dataset(
        {
            "time_compute": (p["time_compute"] + p["time_optimizer"] + p["time_offload"]).assign_attrs(
                seconds, long_name="compute, optimizer update and offload per step"
            ),
            "time_comm_exposed": (tp_comm + p["time_pp_comm"] + p["time_dp_comm_exposed"]).assign_attrs(
                seconds, long_name="tensor-, pipeline- and exposed data-parallel communication per step"
            ),
            "time_io_exposed": p["time_bubble"].assign_attrs(
                seconds, long_name="pipeline bubble (waiting at idle power) per step"
            ),
            "step_time": p["step_time"],
        },
    )
    coords = {name: p[name] for name in ("gpu", "gpus_per_node", "compute_efficiency") if name in p.coords}
    coords["gpus"] = p["gpus"]
    coords["batch_size"] = (p["batch_size"] / p["gpus"]).assign_attrs(
        units="samples", long_name="samples per GPU per step (global batch / gpus)"
    )
    phases = phases.assign_coords(coords)
    phases.attrs.update(p.attrs)
    return phases


def pareto_front(times: object, energies: object) -> np.ndarray:
    """Boolean mask of the points no other point dominates, minimising both time and energy.

    A point is dominated when another one is no slower and no costlier, and strictly better in one
    of the two. Identical points are all kept. NaN points are never on the front and dominate
    nothing. ``times`` and ``energies`` share a shape (any units); the mask has that shape.
    """
    t = np.asarray(times, dtype=float)
    e = np.asarray(energies, dtype=float)
    if t.shape != e.shape:
        raise DlexploreError(f"times and energies differ in shape: {t.shape} and {e.shape}")
    tf, ef = t.ravel(), e.ravel()
    valid = np.isfinite(tf) & np.isfinite(ef)
    # Pairwise comparison [j dominates i] in one broadcast: O(n^2) memory, fine for sweeps of a
    # few thousand points.
    no_worse = (tf[None, :] <= tf[:, None]) & (ef[None, :] <= ef[:, None])
    better = (tf[None, :] < tf[:, None]) | (ef[None, :] < ef[:, None])
    dominated = np.any(no_worse & better & valid[None, :], axis=1)
    return (valid & ~dominated).reshape(t.shape)


def time_energy_tradeoff(
    workload: str | catalog.Workload,
    gpu: str | catalog.GPU | Sequence[str],
    network: str | catalog.Link | None,
    *,
    gpus: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    batch_size: int = 32,
    samples_per_epoch: float | None = None,
    pue: float = 1.0,
    node_power_w: float = 0.0,
    utilization: float | str | None = None,
    comm_power_fraction: float = 0.5,
    **predict_kwargs: Any,
) -> xr.Dataset:
    """Time and energy of the same training work on different GPU counts (and GPU types).

    Predicts with :func:`dlexplore.predict` (``batch_size`` per GPU, weak scaling; other keyword
    arguments go to it), adds :func:`energy`, and marks the Pareto front of (time per sample,
    energy per sample): the configurations where finishing sooner needs more energy. Both objectives
    scale by the same sample count, so the front is the same per epoch. Configurations that do not
    fit in GPU memory are never on the front.

    Returns the :func:`energy` dataset over ``gpus`` (and ``gpu`` when a list is given) with the
    prediction's ``step_time`` (s), ``throughput`` (samples/s), ``efficiency`` and ``fits`` added,
    and ``pareto`` (bool).
    """
    from .step import predict

    gpus = list(gpus)
    if not gpus:
        raise DlexploreError("gpus: give at least one GPU count")
    pred = predict(workload, gpu, network, gpus=gpus, batch_size=batch_size, **predict_kwargs)
    ds = energy(
        pred,
        pue=pue,
        node_power_w=node_power_w,
        utilization=utilization,
        comm_power_fraction=comm_power_fraction,
        samples_per_epoch=samples_per_epoch,
    )
    for name in ("step_time", "throughput", "efficiency", "fits"):
        ds[name] = pred[name]
    ts, es = xr.broadcast(ds["time_sample"], ds["energy_sample"])
    fits = ds["fits"].broadcast_like(ts).transpose(*ts.dims)
    # Memory that does not fit is no option: hide it from the front by making it NaN.
    t = np.where(fits.values, ts.values, np.nan)
    mask = pareto_front(t, es.transpose(*ts.dims).values)
    ds["pareto"] = xr.DataArray(mask, dims=ts.dims, coords=ts.coords)
    return _finish(ds, pred)
