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
from .conventions import bare
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
    # on bare arrays (conventions.bare); the prediction's coordinates are put back at the end
    step_time = bare(prediction["step_time"])
    global_batch = (bare(prediction["gpus"]) * bare(prediction["batch_size"])).broadcast_like(step_time)
    conv = predict_convergence(global_batch.astype(float), p).reset_coords(drop=True)
    fits = bare(prediction["fits"]) if "fits" in prediction else xr.ones_like(step_time, dtype=bool)
    ok = conv["reachable"] & fits
    out = conv.assign(
        global_batch=global_batch,
        time_to_target=(conv["steps_to_target"] * step_time).where(ok),
        step_time=step_time,
    )
    for name in ("throughput", "fits"):
        if name in prediction:
            out[name] = bare(prediction[name])
    if energy is not None:
        if "energy_step" not in energy:
            raise DlexploreError("energy= must be dlexplore.model.energy(prediction)'s dataset")
        out["energy_to_target"] = (conv["steps_to_target"] * bare(energy["energy_step"])).where(ok)
    out["fastest"] = _fastest(out["time_to_target"])
    if "gpus" in out["time_to_target"].dims and out.sizes["gpus"] > 1:
        out["speedup_per_doubling"] = _speedup_per_doubling(out["time_to_target"])
    out = out.assign_coords({c: prediction.coords[c] for c in prediction.coords if c not in out.coords})
    if energy is not None:  # the energy's own assumptions (pue, ...)
        out = out.assign_coords({c: energy.coords[c] for c in energy.coords if c not in out.coords})
    for name in ("step_time", "throughput", "fits"):
        if name in out:
            out[name].attrs.update(prediction[name].attrs)
    out = finish_convergence(out, p)
    out.attrs["source"] = (
        f"{prediction.attrs.get('source', 'predicted: step time')} + {CONVERGENCE_SOURCE.split(' + ', 1)[1]}"
    )
    return out


def _fastest(time: xr.DataArray) -> xr.DataArray:
    values = time.values
    mask = np.zeros(values.shape, dtype=bool)
    if np.isfinite(values).any():
        mask.flat[int(np.nanargmin(values))] = True
    return xr.DataArray(mask, dims=time.dims, coords=time.coords)


def _speedup_per_doubling(time: xr.DataArray) -> xr.DataArray:
    gpus = time["gpus"].astype(float)
    previous = time.shift(gpus=1)
    doublings = np.log2(gpus / gpus.shift(gpus=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (previous / time) ** (1.0 / doublings)
