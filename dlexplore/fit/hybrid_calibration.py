"""Calibration of hybrid-parallel tables.

:func:`calibrate_hybrid` is what :func:`dlexplore.calibrate` runs on a hybrid table (a ``tp`` or
``pp`` column): the least squares, identifiability checks, standard errors and prediction
intervals of :mod:`dlexplore.fit.calibrate`, on the rows' model of :mod:`dlexplore.fit.hybrid`.
(:func:`dlexplore.fit.leave_one_out`, which validates any calibration, lives with
:func:`dlexplore.calibrate` in :mod:`dlexplore.fit.calibrate`.)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError, UnknownNameError
from ..model.parallel import CALIBRATED_PARAMETERS
from ._select import Selection, select
from .band import DEFAULT_LEVEL
from .calibration import Calibration
from .hybrid import HYBRID_MEASURED, HybridPoints
from .least_squares import (
    dof_note,
    fit_free,
    free_parameters,
    hold,
    identify,
    normalize_per,
    params_frame,
    unidentified_messages,
    with_uncertainty,
)
from .parameters import CalibrationWarning, shared_settings

__all__ = ["calibrate_hybrid"]

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
    per_map = normalize_per(per, params, list(frame.columns))
    free = free_parameters(params, per_map, points, frame, selected)

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
    usable = _usable(selected, y, start, fit_text)
    fit = selected & usable
    for f in free:
        f.fit_points = int(((f.members if f.members is not None else True) & fit).sum())
    log_y = np.log(np.where(fit, y, 1.0))

    def residual(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(predictions(x, fit)) - log_y)[fit]

    def hold_at_default(f: Any) -> None:
        hold(f, points.defaults[f.name][f.members if f.members is not None else slice(None)])

    identify(free, residual, int(fit.sum()))
    for f in free:
        if not f.identifiable:
            hold_at_default(f)
    dof = fit_free(free, residual, np.array([]), hold_at_default)
    messages = unidentified_messages(free)
    for message in messages:
        warnings.warn(CalibrationWarning(message), stacklevel=3)
    x = np.array([f.value if f.identifiable else f.start for f in free], dtype=float)
    final = predictions(x, None)
    notes = [*messages, *points.notes, *dof_note(dof, free)]
    if (selected & ~usable).any():
        notes.append(
            f"{int((selected & ~usable).sum())} selected row(s) cannot be fitted (no "
            "positive measurement, or a configuration the model cannot run)"
        )
    result = _hybrid_result(ds, points, free, final, fit, fit_text, notes, per_map, model_kwargs)
    result.level = None if level is None else float(level)
    return with_uncertainty(result, free, x, lambda v: predictions(v, None), residual(x), dof)


def _usable(selected: np.ndarray, y: np.ndarray, start: np.ndarray, fit_text: str) -> np.ndarray:
    """Rows with a positive measurement that the model can run; none among the selected is an error."""
    usable = np.isfinite(y) & (y > 0) & np.isfinite(start) & (start > 0)
    if not (selected & usable).any():
        raise DlexploreError(
            f"none of the {int(selected.sum())} row(s) selected by {fit_text} can be "
            "run by the hybrid model (check tp, pp, dp and the batch)"
        )
    return usable


def _hybrid_result(
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
        params=params_frame(free),
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
        settings=shared_settings(setups, "hybrid"),
        setups=setups,
    )
