"""Calibrate the model on measured points: fit its parameters, with standard errors, predict the rest.

**What is fitted.** The model's numeric parameters (:data:`PARAMETERS`): ``compute_efficiency``,
``bandwidth`` and ``latency`` (the network), ``intra_bandwidth`` and ``intra_latency`` (the link
inside a node), ``overlap``, ``gamma`` (reduction cost) and ``servers`` (parameter servers, a whole
number). Each is one value for all points, or one value per group of points (``per``).

**How.** Least squares on the relative error, ``r_i = log(predicted_i / measured_i)``, over the
points ``fit_on`` selects (``scipy.optimize.least_squares``, trust-region reflective, within the
bounds of :data:`PARAMETERS`: an efficiency in (0, 1], bandwidths in (0, 1e6] GB/s, latencies and
``gamma`` >= 0, ``overlap`` in [0, 1]). The measured quantity of a point is its ``throughput``
(else its ``efficiency``) in a training table, its ``time`` (else ``busbw``, else ``algbw``) in a
communication table. Each point's setup comes from its own coordinates as in
:func:`dlexplore.fit.predict_points`. ``servers`` is searched over whole numbers (1 to the largest
GPU count of the fitted parameter-server points; 48 values spread geometrically beyond 64),
alternating with the fit of the others until the number stays.

**Uncertainty.** Standard errors from the Jacobian ``J`` of the residuals at the solution:
``cov = s^2 (J^T J)^-1`` with ``s^2 = sum r_i^2 / (m - k)`` (``m`` points, ``k`` parameters), the
usual linearised estimate for independent, equal relative noise. With no residual degree of freedom
(``m = k``) the standard errors are NaN; ``servers`` has none (a grid search).

**Identifiability.** Before fitting, each parameter is moved by 5% either way at the starting
values: one that changes no fitted prediction (``bandwidth`` from single-GPU points, a group with no
fitted point), or whose effect is a combination of the effects of parameters listed before it
(``latency`` and ``bandwidth`` from a single message size), is not identifiable from these points.
After fitting, so is one the fit drove to where it no longer changes any prediction (``J``
singular in its direction: a bandwidth run off towards 1e6 GB/s because the points want no
communication at all); the others are then fitted again without it. Such a parameter keeps its
default (its ``stderr`` is ``inf``; where the points' defaults differ, each keeps its own) and a
:class:`CalibrationWarning` says why. The check is local: a bandwidth whose communication is hidden
behind compute at the starting values is not identifiable, even if a much lower one would show.

**Traces** (:func:`calibrate_from_trace`): ``latency`` (alpha) and ``bandwidth`` (1/beta) from the
measured collective table, by least squares on the same relative errors of each collective's time
against :func:`dlexplore.model.collective_time` (ring allreduce: ``2(p-1) alpha + 2(p-1)/p n
beta``); compute time per sample from the breakdown.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from ..traces.schema import Trace
from ._select import Selection
from .band import DEFAULT_LEVEL
from .calibration import Calibration
from .compare import ERROR_DEFINITION
from .hybrid_calibration import calibrate_hybrid
from .parameters import PARAMETERS, CalibrationWarning
from .points import as_points
from .table_calibration import calibrate_table
from .trace_calibration import calibrate_from_trace

__all__ = [
    "PARAMETERS",
    "Calibration",
    "CalibrationWarning",
    "calibrate",
    "calibrate_from_trace",
    "leave_one_out",
]


# --- the result --------------------------------------------------------------------------------------


# --- the fitter ------------------------------------------------------------------------------------


# --- calibrate ----------------------------------------------------------------------------------


def _is_trace_source(source: Any) -> TypeGuard[Trace | str | Path]:
    if isinstance(source, Trace):
        return True
    if not isinstance(source, (str, Path)):
        return False
    path = Path(source)
    if path.is_dir():
        return True
    if not path.is_file() or path.suffix.lower() == ".csv":
        return False
    from ..traces.detect import detect_format

    try:
        return detect_format(path) not in ("nccl-tests",)
    except DlexploreError:
        return False


def calibrate(
    measured: str | Path | xr.Dataset | Trace,
    *,
    fit_on: Selection = None,
    params: Sequence[str] | str | None = None,
    per: str | Sequence[str] | Mapping[str, str | Sequence[str]] | None = None,
    level: float | None = DEFAULT_LEVEL,
    **model_kwargs: Any,
) -> Calibration:
    """Fit model parameters to the measured points ``fit_on`` selects, and predict all the points.

    Parameters
    ----------
    measured:
        A bundled dataset's name (:func:`dlexplore.measured.available`), a measurement CSV, nccl-tests
        output, a measured dataset along ``point``, a hybrid-parallel table (a ``tp`` or ``pp``
        column: LLM runs such as Narayanan et al. 2021's Table 1, which goes to
        :func:`dlexplore.fit.hybrid_calibration.calibrate_hybrid` and fits the hybrid model's
        physical parameters, default ``compute_efficiency``; the result's :meth:`Calibration.predict`
        and ``predict_parallel(..., calibration=cal)`` predict other configurations), or a trace (a
        :class:`~dlexplore.Trace`, or a trace file or folder, which goes to
        :func:`calibrate_from_trace`).
    fit_on:
        Which points to fit: ``"leave-one-out"`` (every point predicted by a fit on the others,
        :func:`dlexplore.fit.leave_one_out`), :func:`dlexplore.fit.smallest` (``smallest(3)``: the
        three smallest configurations), an expression (``"gpus<=8"``, ``"gpus == 1 and precision == fp32"``,
        ``"workload in resnet50,vgg16"``; see :mod:`dlexplore.fit._select`), a boolean mask (one per
        point), a callable taking the points' DataFrame (coordinates and measured variables) and
        returning one, or ``None`` for every point.
    params:
        Names from :data:`PARAMETERS`. Default: ``compute_efficiency`` for training tables;
        ``intra_bandwidth`` and ``intra_latency`` for communication tables whose fitted points
        all run inside one node, else ``bandwidth`` and ``latency``.
    per:
        One value per group of points: a column (``"workload"``), columns (``("workload",
        "precision")``), or ``{parameter: columns}``; default one value for all points. Points whose
        group columns are all blank (empty, NaN) belong to no group: they keep the parameter's
        default.
    level:
        Nominal coverage of the prediction intervals (``points["lower"]``, ``points["upper"]``,
        ``in_band``; and of :meth:`Calibration.predict`'s bounds), :mod:`dlexplore.fit.band`;
        ``None``: no interval for the points (it costs one evaluation of every point per fitted
        parameter), the predictions' at the default level.
    model_kwargs:
        Model settings as in :func:`dlexplore.fit.predict_points` (``intra_link``, ``servers``,
        ``bucket_size``, ...; for hybrid tables ``network``, ``micro_batch``, ``schedule``, ...,
        where the table has no such column); a value given for a fitted parameter is its default
        and start.

    Returns
    -------
    Calibration
        Parameters with standard errors, every point with its prediction and error, MAPE on the
        fitted points and on the others (see the module docstring for the method).
    """
    if isinstance(fit_on, str) and fit_on.strip().lower() in ("leave-one-out", "loo"):
        return leave_one_out(measured, params=params, per=per, level=level, **model_kwargs)
    if isinstance(measured, Trace) or _is_trace_source(measured):  # isinstance: narrows the rest to tables
        trace_params = params if params is not None else ("latency", "bandwidth")
        return calibrate_from_trace(measured, fit_on=fit_on, params=trace_params, **model_kwargs)
    ds = as_points(measured)
    if ds.attrs.get("table") == "hybrid":
        return calibrate_hybrid(ds, fit_on=fit_on, params=params, per=per, level=level, **model_kwargs)
    return calibrate_table(ds, fit_on=fit_on, params=params, per=per, level=level, **model_kwargs)


# --- traces ------------------------------------------------------------------------------------------


def leave_one_out(
    measured: str | Path | xr.Dataset | Trace,
    *,
    params: Sequence[str] | str | None = None,
    per: Any = None,
    level: float | None = DEFAULT_LEVEL,
    **model_kwargs: Any,
) -> Calibration:
    """Every point predicted by a calibration on all the others (any table
    :func:`dlexplore.calibrate` reads): the returned :class:`~dlexplore.Calibration` has the fit
    on all points as ``params``, each point's left-out prediction, error and prediction interval in
    ``points`` (``fitted`` False everywhere), their MAPE as ``mape_holdout``, and each fold's
    fitted values in ``folds``."""
    full = calibrate(measured, fit_on=None, params=params, per=per, level=level, **model_kwargs)
    n = len(full.points)
    if n < 2:
        raise DlexploreError("leave_one_out needs at least 2 points")
    points = full.points.copy()
    folds = []
    columns = {c: np.full(n, np.nan) for c in ("predicted", "lower", "upper")}
    for i in range(n):
        mask = np.ones(n, dtype=bool)
        mask[i] = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CalibrationWarning)
            fold = calibrate(measured, fit_on=mask, params=params, per=per, level=level, **model_kwargs)
        for c in columns:
            columns[c][i] = fold.points[c].iloc[i] if c in fold.points else np.nan
        for _, row in fold.params.iterrows():
            folds.append(
                {
                    "left_out": i,
                    "name": row["name"],
                    "group": row["group"],
                    "value": row["value"],
                    "stderr": row["stderr"],
                }
            )
    measured_values = points["measured"].to_numpy(dtype=float)
    for c, values in columns.items():
        points[c] = values
    points["error"] = (points["predicted"] - measured_values) / measured_values
    points["fitted"] = False
    points["in_band"] = (measured_values >= points["lower"]) & (measured_values <= points["upper"])
    absolute = np.abs(points["error"].to_numpy(dtype=float))
    full.points = points
    full.mape_holdout = float(np.nanmean(absolute))
    full.max_error_holdout = float(np.nanmax(absolute))
    full.fit_on = "leave-one-out (each point predicted by a fit on the others)"
    full.folds = pd.DataFrame(folds)
    full.notes = [
        *full.notes,
        f"error = {ERROR_DEFINITION}; each point's prediction comes from the fit that left it out",
    ]
    return full
