"""Time and energy to accuracy over GPUs x batch size: steps to the target x predicted step time.

The question a user has is not "how many samples per second" but "how many GPUs, at which batch,
reach my target soonest?". For a prediction of :func:`dlexplore.predict` swept over ``gpus`` and
``batch_size`` (per GPU), the global batch is ``gpus x batch_size``; the convergence model
(:mod:`dlexplore.model.convergence`) gives the steps to the target at that batch, and::

    time_to_target   = steps_to_target(gpus x batch_size) x step_time(gpus, batch_size)      [s]
    energy_to_target = steps_to_target(gpus x batch_size) x energy_step(gpus, batch_size)    [J]

``fastest`` marks the configuration (that fits in memory and reaches the target) with the least
time to the target. ``speedup_per_doubling`` is the time at the previous GPU count over the time
here, per doubling of GPUs (the GPU counts need not be powers of two: the ratio is raised to
``1 / log2(gpus / previous gpus)``): 2 is perfect, 1 means adding GPUs no longer helps, below 1
it hurts. Past the noise scale the steps stop falling while communication grows, so this is where
a cluster stops paying for itself.

Only the public prediction variables are used (``step_time``, ``fits``, and ``energy_step`` from
:func:`dlexplore.model.energy`), so any compute or communication model behind them will do.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from .conventions import OnDims
from .convergence import (
    CONVERGENCE_SOURCE,
    ConvergenceParams,
    convergence,
    finish_convergence,
    predict_convergence,
)

__all__ = ["time_to_accuracy"]


def time_to_accuracy(
    prediction: xr.Dataset,
    params: ConvergenceParams | str | Mapping[str, object] | None = None,
    *,
    energy: xr.Dataset | None = None,
) -> xr.Dataset:
    """Steps, time and energy to the target for every configuration of a prediction.

    Parameters
    ----------
    prediction:
        A :func:`dlexplore.predict` dataset with ``step_time`` (s) and ``gpus`` and ``batch_size``
        (per GPU) coordinates, scalars or dimensions.
    params:
        Convergence parameters, a mapping of their fields, or a workload name for the catalog's
        (``data/catalog/convergence.csv``). Default: the prediction's ``workload``.
    energy:
        :func:`dlexplore.model.energy` of the same prediction, for ``energy_to_target`` (J).

    Returns
    -------
    xarray.Dataset
        On the prediction's dimensions: ``global_batch`` (samples), ``steps_to_target`` (count),
        ``samples_to_target``, ``epochs_to_target``, ``reachable``, ``time_to_target`` (s),
        ``energy_to_target`` (J, with ``energy``), ``fastest`` (bool), ``speedup_per_doubling``
        (along ``gpus`` when it is a dimension), plus the prediction's ``step_time``,
        ``throughput`` and ``fits``. Unreachable or out-of-memory configurations have NaN time.
    """
    for name in ("gpus", "batch_size"):
        if name not in prediction.coords:
            raise DlexploreError(
                f"time_to_accuracy needs a prediction with a {name!r} coordinate (from dlexplore.predict)"
            )
    if "step_time" not in prediction:
        raise DlexploreError("time_to_accuracy needs the prediction's step_time")
    if params is None:
        names = np.unique(prediction["workload"].values) if "workload" in prediction.coords else np.array([])
        if len(names) != 1:
            raise DlexploreError(
                "give convergence parameters (or a workload name): the prediction has no single workload"
            )
        params = str(names[0])
    p = convergence(params)
    # Numpy arrays laid out as the step time is, and one dataset built with the prediction's
    # coordinates at the end: xarray's arithmetic and assign_coords re-merged its ~40 scalar
    # coordinates at every step, which was most of an explorer slider move.
    grid = OnDims(prediction.variables["step_time"], prediction.indexes)
    dims = grid.dims
    step_time = grid.whole(grid(prediction.variables["step_time"]))
    global_batch = grid.whole(grid(prediction.variables["gpus"]) * grid(prediction.variables["batch_size"]))
    conv = predict_convergence(xr.DataArray(global_batch.astype(float), dims=dims), p)
    steps = conv.variables["steps_to_target"].values
    fits = grid(prediction.variables["fits"]) if "fits" in prediction else True
    ok = conv.variables["reachable"].values & fits
    data: dict[str, xr.Variable] = {
        name: conv.variables[name] for name in ("steps_to_target", "samples_to_target", "epochs_to_target")
    }
    data["reachable"] = conv.variables["reachable"]
    data["global_batch"] = xr.Variable(dims, global_batch)
    data["time_to_target"] = xr.Variable(dims, np.where(ok, steps * step_time, np.nan))
    data["step_time"] = xr.Variable(dims, step_time, prediction.variables["step_time"].attrs)
    for name in ("throughput", "fits"):
        if name in prediction:
            variable = prediction.variables[name]
            data[name] = xr.Variable(dims, grid.whole(grid(variable)), variable.attrs)
    coords = prediction.coords
    if energy is not None:
        if "energy_step" not in energy:
            raise DlexploreError("energy= must be dlexplore.model.energy(prediction)'s dataset")
        energy_step = grid(energy["energy_step"])
        data["energy_to_target"] = xr.Variable(dims, grid.whole(np.where(ok, steps * energy_step, np.nan)))
        # the energy's own assumptions (pue, ...)
        extra = {c: energy.coords[c].variable for c in energy.coords if c not in coords}
        coords = coords.assign(extra) if extra else coords
    time = data["time_to_target"].values
    data["fastest"] = xr.Variable(dims, _fastest(time))
    if "gpus" in dims and grid.shape[dims.index("gpus")] > 1:
        speedup = _speedup_per_doubling(time, prediction.indexes["gpus"].to_numpy(), dims.index("gpus"))
        data["speedup_per_doubling"] = xr.Variable(dims, speedup)
    out = xr.Dataset(data, coords=coords)
    out = finish_convergence(out, p)
    out.attrs["source"] = (
        f"{prediction.attrs.get('source', 'predicted: step time')} + {CONVERGENCE_SOURCE.split(' + ', 1)[1]}"
    )
    return out


def _fastest(time: np.ndarray) -> np.ndarray:
    """True at the least finite time (the first, on a tie), False elsewhere."""
    mask = np.zeros(time.shape, dtype=bool)
    if np.isfinite(time).any():
        mask.flat[int(np.nanargmin(time))] = True
    return mask


def _speedup_per_doubling(time: np.ndarray, gpus: np.ndarray, axis: int) -> np.ndarray:
    """(time at the previous GPU count / time here) ** (1 / doublings), NaN at the first count."""
    time = np.moveaxis(time, axis, -1)
    previous = np.concatenate([np.full(time.shape[:-1] + (1,), np.nan), time[..., :-1]], axis=-1)
    gpus = gpus.astype(float)
    doublings = np.log2(gpus / np.concatenate([[np.nan], gpus[:-1]]))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.moveaxis((previous / time) ** (1.0 / doublings), -1, axis)
