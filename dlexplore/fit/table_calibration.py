"""Calibration of training and communication tables: :func:`calibrate_table` fits the step model's
(or the collective model's) parameters to the points a table measured, each point predicted with its
own setup (:class:`~dlexplore.fit.compare.PointModel`). See :mod:`dlexplore.fit.calibrate` for the
method in words.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog
from ..errors import DlexploreError, UnknownNameError
from ._select import Selection, select
from .band import DEFAULT_LEVEL
from .calibration import Calibration
from .least_squares import (
    Free,
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
from .parameters import (
    IDENTIFYING,
    MEASURED_ORDER,
    MEASURED_UNITS,
    PARAMETERS,
    TRAINING_ONLY,
    CalibrationWarning,
    shared_settings,
)
from .point_model import PointModel


def calibrate_table(
    ds: xr.Dataset,
    *,
    fit_on: Selection = None,
    params: Sequence[str] | str | None = None,
    per: str | Sequence[str] | Mapping[str, str | Sequence[str]] | None = None,
    level: float | None = DEFAULT_LEVEL,
    **model_kwargs: Any,
) -> Calibration:
    """:func:`dlexplore.calibrate` on a training or communication table along ``point``
    (:func:`dlexplore.fit.as_points`); the arguments are :func:`~dlexplore.fit.calibrate.calibrate`'s."""
    model = PointModel(ds, model_kwargs)
    table = model.table
    frame = model.frame.copy()
    for name in ds.data_vars:
        if ds[name].dims == ("point",):
            frame[name] = ds[name].values
    y, variable = measured_values(ds, table)
    selected = select(frame, fit_on)
    fit_text = (
        f"fit_on {fit_on!r}"
        if isinstance(fit_on, str)
        else ("all points" if fit_on is None else "the points selected by fit_on")
    )

    params = _parameters(params, model, selected)
    per_map = normalize_per(per, params, list(frame.columns))

    free = free_parameters(params, per_map, model, frame, selected)
    needed = MEASURED_ORDER[table]

    present = tuple(v for v in needed if v in set(variable))

    def predictions(x: np.ndarray, where: np.ndarray | None, reasons: np.ndarray | None = None) -> np.ndarray:
        return _predictions(model, free, variable, present or needed[:1], x, where, reasons)

    reasons = model.reason.copy()
    start_pred = predictions(np.array([f.start for f in free], dtype=float), selected, reasons)
    fit, notes = _fittable(selected, y, start_pred, reasons, fit_text)
    for f in free:
        members = f.members if f.members is not None else np.ones(model.n, dtype=bool)
        f.fit_points = int((members & fit).sum())
    log_y = np.log(np.where(fit, y, 1.0))

    def residual(x: np.ndarray) -> np.ndarray:
        pred = predictions(x, fit)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(pred) - log_y)[fit]

    dof, messages = _fit(free, residual, model, fit)
    notes = messages + notes + dof_note(dof, free)
    for message in messages:
        warnings.warn(CalibrationWarning(message), stacklevel=3)

    x_final = np.array([f.value if f.identifiable else f.start for f in free], dtype=float)
    reasons = model.reason.copy()
    final = predictions(x_final, None, reasons)
    result = table_result(
        ds,
        model,
        frame,
        free,
        y,
        variable,
        final,
        fit,
        reasons,
        fit_text,
        notes,
        per_map,
        dict(model_kwargs),
        table,
    )
    result.level = None if level is None else float(level)
    return with_uncertainty(result, free, x_final, lambda x: predictions(x, None), residual(x_final), dof)


def _fit(free: list[Free], residual: Callable, model: PointModel, fit: np.ndarray) -> tuple[int, list[str]]:
    """Identifiability check, then the least squares; a parameter the points cannot determine is
    held at the points' defaults and warned about. Returns the degrees of freedom and the warnings."""
    m = int(fit.sum())
    identify(free, residual, m)
    for f in free:
        if not f.identifiable:
            members = f.members if f.members is not None else slice(None)
            hold(f, model.defaults[f.name][members])
    server_rows = fit & (model.algorithm == "parameter_server")

    def hold_at_default(f: Free) -> None:
        hold(f, model.defaults[f.name][f.members if f.members is not None else slice(None)])

    dof = fit_free(free, residual, model.gpus[server_rows], hold_at_default)
    for f in free:
        if not f.identifiable and f.spec.integer:
            hold(f, model.defaults[f.name])
    messages = unidentified_messages(free)
    return dof, messages


def _parameters(
    params: Sequence[str] | str | None, model: PointModel, selected: np.ndarray
) -> tuple[str, ...]:
    """The parameters to fit: those given (checked), else the table's default ones."""
    table = model.table
    if params is None:
        one_node = (model.gpus <= model.gpus_per_node) & (model.algorithm != "hierarchical")
        if table == "training":
            params = ("compute_efficiency",)
        elif np.all(one_node[selected]):
            params = ("intra_bandwidth", "intra_latency")
        else:
            params = ("bandwidth", "latency")
    params = (params,) if isinstance(params, str) else tuple(params)
    for name in params:
        if name not in PARAMETERS:
            raise UnknownNameError("calibration parameter", name, PARAMETERS)
        if table == "communication" and name in TRAINING_ONLY:
            raise DlexploreError(
                f"{name} is not a parameter of collectives; a communication table "
                f"can fit {', '.join(p for p in PARAMETERS if p not in TRAINING_ONLY)}"
            )
    if len(set(params)) != len(params):
        raise DlexploreError(f"params repeats a name: {list(params)}")
    return params


def _predictions(
    model: PointModel,
    free: list[Free],
    variable: np.ndarray,
    variables: tuple[str, ...],
    x: np.ndarray,
    where: np.ndarray | None,
    reasons: np.ndarray | None,
) -> np.ndarray:
    """Every point's prediction of its own measured variable with the free parameters at ``x``."""
    overrides: dict[str, np.ndarray] = {}
    for j, f in enumerate(free):
        if not f.override:
            continue
        values = overrides.setdefault(f.name, model.defaults[f.name].copy())
        values[f.members if f.members is not None else slice(None)] = x[j]
    out = model.evaluate(overrides, where=where, variables=variables, reasons=reasons)
    pred = np.full(model.n, np.nan)
    for name in variables:
        if name in out:
            pred = np.where(variable == name, out[name], pred)
    return pred


def _fittable(
    selected: np.ndarray, y: np.ndarray, start_pred: np.ndarray, reasons: np.ndarray, fit_text: str
) -> tuple[np.ndarray, list[str]]:
    """The selected points that can be fitted (a positive measurement and prediction), and a note
    on those that cannot; none at all is an error."""
    usable = np.isfinite(y) & (y > 0) & np.isfinite(start_pred) & (start_pred > 0)
    fit = selected & usable
    notes: list[str] = []
    dropped = selected & ~usable
    if dropped.any():
        why = "; ".join(
            f"point {i}: {reasons[i] or 'no positive measured value'}" for i in np.flatnonzero(dropped)[:8]
        )
        notes.append(f"{int(dropped.sum())} selected point(s) cannot be fitted ({why})")
    if not fit.any():
        raise DlexploreError(
            f"none of the {int(selected.sum())} point(s) selected by {fit_text} can be "
            f"predicted by the model: {notes[0] if notes else ''}"
        )
    return fit, notes


def measured_values(ds: xr.Dataset, table: str) -> tuple[np.ndarray, np.ndarray]:
    n = ds.sizes["point"]
    y = np.full(n, np.nan)
    variable = np.full(n, "", dtype=object)
    for name in reversed(MEASURED_ORDER[table]):
        if name in ds.data_vars:
            values = ds[name].values.astype(float)
            ok = np.isfinite(values)
            y = np.where(ok, values, y)
            variable = np.where(ok, name, variable)
    return y, variable


def table_result(
    ds: xr.Dataset,
    model: PointModel,
    frame: pd.DataFrame,
    free: list[Free],
    y: np.ndarray,
    variable: np.ndarray,
    pred: np.ndarray,
    fit: np.ndarray,
    reasons: np.ndarray,
    fit_text: str,
    notes: list[str],
    per_map: dict,
    model_kwargs: dict,
    table: str,
) -> Calibration:
    columns = [c for c in IDENTIFYING[table] if c in frame.columns]
    points = frame[columns].copy().reset_index(drop=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (pred - y) / y
    points["variable"] = variable
    points["units"] = [MEASURED_UNITS.get(v, "") for v in variable]
    points["measured"] = y
    points["predicted"] = pred
    points["error"] = error
    points["fitted"] = fit
    points["note"] = [r if not np.isfinite(p) else "" for r, p in zip(reasons, pred, strict=True)]
    for column in points.columns:
        if points[column].dtype == object:
            points[column] = points[column].astype(str)
    holdout = ~fit & np.isfinite(error)
    absolute = np.abs(error)
    mape_fit = float(np.nanmean(absolute[fit])) if np.isfinite(absolute[fit]).any() else math.nan
    mape_holdout = float(np.mean(absolute[holdout])) if holdout.any() else math.nan
    max_holdout = float(np.max(absolute[holdout])) if holdout.any() else math.nan
    not_predicted = int((~np.isfinite(pred)).sum())
    if not_predicted:
        notes.append(f"{not_predicted} point(s) not predicted (see the points' note column)")
    setups = setup_table(model, frame, table)
    name = ds.attrs.get("name", "")
    return Calibration(
        params=params_frame(free),
        points=points,
        mape_fit=mape_fit,
        mape_holdout=mape_holdout,
        max_error_holdout=max_holdout,
        source=ds.attrs.get("source", ""),
        name=name,
        fit_on=fit_text,
        kind=table,
        notes=notes,
        model_kwargs=model_kwargs,
        per=per_map,
        group_keys={f.name: {g.group: g.key for g in free if g.name == f.name} for f in free},
        settings=shared_settings(setups, table),
        setups=setups,
    )


def setup_table(model: PointModel, frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """Each point's setup as the model ran it, to find the settings of a group of points."""
    columns: dict[str, Any] = {
        "gpus": model.gpus,
        "gpus_per_node": model.gpus_per_node,
        "intra_link": model.intra_link,
        "algorithm": model.algorithm,
    }
    if table == "training":
        columns.update(
            workload=model.workload,
            gpu=model.gpu,
            precision=model.precision,
            batch_size=model.batch_size,
            grad_accum=model.grad_accum,
            nics_per_node=model.nics_per_node,
            seq=[int(v) if v else "" for v in model.seq],  # 0: the point does not say
            layout=model.layout,
            fusion=model.fusion,
            framework=model.framework,
            transport=model.transport,
            servers_colocated=model.colocated,
            host_staging=model.host_staging,
            network=[n if catalog_link_known(n) else "" for n in model.network],
        )
    else:
        columns["collective"] = model.collective
        if "bytes" in frame:
            columns["bytes"] = frame["bytes"].to_numpy()
    out = pd.DataFrame({k: np.asarray(v, dtype=object) for k, v in columns.items()})
    for name in frame.columns:  # labels such as setup, for choosing among the points
        if name not in out and (frame[name].dtype == object or pd.api.types.is_string_dtype(frame[name])):
            out[name] = frame[name].to_numpy(dtype=object)
    return out


def catalog_link_known(name: str) -> bool:
    """Whether ``name`` is a link or network of the catalog."""
    try:
        catalog.network(name)
        return True
    except DlexploreError:
        return False
