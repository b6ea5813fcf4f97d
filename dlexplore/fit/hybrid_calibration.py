"""Calibration of hybrid-parallel tables, and leave-one-out validation of any calibration.

:func:`calibrate_hybrid` is what :func:`dlexplore.calibrate` runs on a hybrid table (a ``tp`` or
``pp`` column): the least squares, identifiability checks, standard errors and prediction
intervals of :mod:`dlexplore.fit.calibrate`, on the rows' model of :mod:`dlexplore.fit.hybrid`.
:func:`leave_one_out` fits all points but one, predicts that one, for every point.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError, UnknownNameError
from ..model.parallel import CALIBRATED_PARAMETERS
from ._select import Selection, select
from .band import DEFAULT_LEVEL
from .calibrate import (
    Calibration,
    CalibrationWarning,
    _dof_note,
    _fit,
    _free_parameters,
    _hold,
    _identify,
    _normalize_per,
    _params_frame,
    _shared,
    _unidentified,
    with_uncertainty,
)
from .compare import ERROR_DEFINITION
from .hybrid import HYBRID_MEASURED, HybridPoints

__all__ = ["calibrate_hybrid", "leave_one_out"]

_POINT_COLUMNS = (
    "model",
    "workload",
    "gpu",
    "gpus",
    "tp",
    "pp",
    "dp",
    "micro_batch",
    "global_batch",
    "recompute",
    "sequence_parallel",
    "schedule",
    "setup",
)


def calibrate_hybrid(
    ds: xr.Dataset,
    *,
    fit_on: Selection = None,
    params: Sequence[str] | str | None = None,
    per: Any = None,
    level: float = DEFAULT_LEVEL,
    **model_kwargs: Any,
) -> Calibration:
    """Fit the hybrid model's physical parameters to the rows ``fit_on`` selects (see
    :func:`dlexplore.calibrate`; default ``params``: ``compute_efficiency``)."""
    points = HybridPoints(ds, model_kwargs)
    frame = points.frame.copy()
    for name in ds.data_vars:
        if ds[name].dims == ("point",):
            frame[name] = ds[name].values
    selected = select(frame, fit_on)
    fit_text = (
        f"fit_on {fit_on!r}"
        if isinstance(fit_on, str)
        else (
            "all points" if fit_on is None else f"fit_on {getattr(fit_on, '__name__', 'the points selected')}"
        )
    )
    params = (
        ("compute_efficiency",)
        if params is None
        else ((params,) if isinstance(params, str) else tuple(params))
    )
    for name in params:
        if name not in CALIBRATED_PARAMETERS:
            raise UnknownNameError("hybrid calibration parameter", name, CALIBRATED_PARAMETERS)
    per_map = _normalize_per(per, params, list(frame.columns))
    free = _free_parameters(params, per_map, points, frame, selected)

    def predictions(x: np.ndarray, where: np.ndarray | None) -> np.ndarray:
        overrides: dict[str, np.ndarray] = {}
        for j, f in enumerate(free):
            if f.override:
                values = overrides.setdefault(f.name, points.defaults[f.name].copy())
                values[f.members if f.members is not None else slice(None)] = x[j]
        with np.errstate(all="ignore"):
            return points.evaluate(overrides, where)["measured"]

    y = points.y
    start = predictions(np.array([f.start for f in free]), selected)
    usable = np.isfinite(y) & (y > 0) & np.isfinite(start) & (start > 0)
    fit = selected & usable
    if not fit.any():
        raise DlexploreError(
            f"none of the {int(selected.sum())} row(s) selected by {fit_text} can be "
            "run by the hybrid model (check tp, pp, dp and the batch)"
        )
    for f in free:
        f.fit_points = int(((f.members if f.members is not None else True) & fit).sum())
    log_y = np.log(np.where(fit, y, 1.0))

    def residual(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(predictions(x, fit)) - log_y)[fit]

    def hold(f: Any) -> None:
        _hold(f, points.defaults[f.name][f.members if f.members is not None else slice(None)])

    _identify(free, residual, int(fit.sum()))
    for f in free:
        if not f.identifiable:
            hold(f)
    dof = _fit(free, residual, np.array([]), hold)
    messages = _unidentified(free)
    for message in messages:
        warnings.warn(CalibrationWarning(message), stacklevel=3)
    x = np.array([f.value if f.identifiable else f.start for f in free], dtype=float)
    final = predictions(x, None)
    notes = [*messages, *points.notes, *_dof_note(dof, free)]
    if (selected & ~usable).any():
        notes.append(
            f"{int((selected & ~usable).sum())} selected row(s) cannot be fitted (no "
            "positive measurement, or a configuration the model cannot run)"
        )
    result = _result(ds, points, free, final, fit, fit_text, notes, per_map, model_kwargs)
    result.level = None if level is None else float(level)
    return with_uncertainty(result, free, x, lambda v: predictions(v, None), residual(x), dof)


def _result(
    ds: xr.Dataset,
    points: HybridPoints,
    free: list,
    pred: np.ndarray,
    fit: np.ndarray,
    fit_text: str,
    notes: list[str],
    per_map: dict,
    model_kwargs: dict,
) -> Calibration:
    frame = points.frame
    table = frame[[c for c in _POINT_COLUMNS if c in frame]].copy().reset_index(drop=True)
    y = points.y
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (pred - y) / y
    table["variable"] = points.variable
    table["units"] = [HYBRID_MEASURED.get(v, "") for v in points.variable]
    table["measured"] = y
    table["predicted"] = pred
    table["error"] = error
    table["fitted"] = fit
    table["note"] = np.where(np.isfinite(pred), "", "the model cannot run this configuration")
    holdout = ~fit & np.isfinite(error)
    absolute = np.abs(error)
    setups = points.setups()
    return Calibration(
        params=_params_frame(free),
        points=table,
        mape_fit=float(np.nanmean(absolute[fit])),
        mape_holdout=float(np.mean(absolute[holdout])) if holdout.any() else math.nan,
        max_error_holdout=float(np.max(absolute[holdout])) if holdout.any() else math.nan,
        source=ds.attrs.get("source", ""),
        name=ds.attrs.get("name", ""),
        fit_on=fit_text,
        kind="hybrid",
        notes=notes,
        model_kwargs=dict(model_kwargs),
        per=per_map,
        group_keys={f.name: {g.group: g.key for g in free if g.name == f.name} for f in free},
        settings=_shared(setups, "hybrid"),
        setups=setups,
    )


def leave_one_out(
    measured: str | Path | xr.Dataset,
    *,
    params: Sequence[str] | str | None = None,
    per: Any = None,
    level: float = DEFAULT_LEVEL,
    **model_kwargs: Any,
) -> Calibration:
    """Every point predicted by a calibration on all the others (any table
    :func:`dlexplore.calibrate` reads): the returned :class:`~dlexplore.Calibration` has the fit
    on all points as ``params``, each point's left-out prediction, error and prediction interval in
    ``points`` (``fitted`` False everywhere), their MAPE as ``mape_holdout``, and each fold's
    fitted values in ``folds``."""
    from . import calibrate

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
