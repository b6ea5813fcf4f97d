"""A calibration as a JSON file: :func:`save_calibration` writes everything a
:class:`~dlexplore.fit.Calibration` needs to predict and draw its band again (parameters with their
covariance and residual variance, points, settings and each setup's, the columns each parameter
was fitted per and its groups' keys, notes, and a traced run's explained steps);
:func:`load_calibration` reads it back, naming the file and what is wrong in its errors."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np
import pandas as pd

from .._io import atomic_open
from ..errors import DlexploreError
from .calibrate import PARAMETERS, Calibration
from .trace_fit import TraceCalibration

__all__ = ["save_calibration", "load_calibration", "FORMAT"]

#: ``format`` of the JSON files :func:`save_calibration` writes.
FORMAT = "dlexplore-calibration/1"


def save_calibration(cal: Calibration, path: str | os.PathLike) -> None:
    """Write ``cal`` as JSON (written to a temporary file, then renamed): its parameters with their
    covariance and residual variance, its points, settings and notes, everything
    :func:`load_calibration` needs to predict with it and draw its band again."""
    data = cal.to_dict()
    cov = cal.covariance
    data.update(
        format=FORMAT,
        level=cal.level,
        dof=int(cal.dof),
        residual_variance=_plain_number(cal.residual_variance),
        settings={k: _plain_number(v) if isinstance(v, float) else v for k, v in cal.settings.items()},
        model_kwargs=dict(cal.model_kwargs),
        covariance=None
        if cov is None
        else {
            "names": [str(n) for n in cov.index],
            "values": [[_plain_number(float(x)) for x in row] for row in cov.to_numpy()],
        },
        explained=getattr(cal, "explained", None),
        # each setup's own settings (layout, fusion, batch, sequence length ...): without them a
        # reloaded calibration of a table predicts at the model's defaults
        setups=None if cal.setups is None else cal.setups.to_dict(orient="records"),
        # which columns each parameter was fitted per, and each group's key: without them a
        # reloaded calibration per workload gives every workload the first group's value
        per={name: list(columns) for name, columns in cal.per.items()},
        group_keys={
            name: {label: list(key) for label, key in keys.items()} for name, keys in cal.group_keys.items()
        },
    )
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, default=str)


def _plain_number(x: float) -> Any:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _number(x: Any) -> float:
    if x is None:
        return math.nan
    if x in ("inf", "-inf"):
        return math.inf if x == "inf" else -math.inf
    return float(x)


def load_calibration(path: str | os.PathLike) -> Calibration:
    """Read a calibration :func:`save_calibration` wrote; errors name the file and what is wrong."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as err:
        raise DlexploreError(f"{path}: cannot read ({err.strerror})") from None
    except ValueError as err:
        raise DlexploreError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DlexploreError(f'{path}: not a dlexplore calibration (expected "format": "{FORMAT}")')
    for key in ("params", "points", "kind"):
        if key not in data:
            raise DlexploreError(f"{path}: the calibration has no {key!r}")
    params = pd.DataFrame(data["params"])
    for column in ("value", "stderr", "default"):
        if column in params:
            params[column] = [_number(v) for v in params[column]]
    unknown = sorted(set(params.get("name", [])) - set(PARAMETERS) - {"time_compute_per_sample"})
    if unknown:
        raise DlexploreError(f"{path}: unknown parameter(s) {unknown}; expected some of {sorted(PARAMETERS)}")
    points = pd.DataFrame(data["points"])
    cov = None
    if data.get("covariance"):
        names = data["covariance"]["names"]
        values = np.array([[_number(v) for v in row] for row in data["covariance"]["values"]], dtype=float)
        if values.shape != (len(names), len(names)):
            raise DlexploreError(f"{path}: the covariance is not {len(names)} x {len(names)}")
        cov = pd.DataFrame(values, index=names, columns=names)
    cls = TraceCalibration if data.get("explained") is not None else Calibration
    cal = cls(
        params=params,
        points=points,
        mape_fit=_number(data.get("mape_fit")),
        mape_holdout=_number(data.get("mape_holdout")),
        max_error_holdout=_number(data.get("max_error_holdout")),
        source=str(data.get("source", "")),
        name=str(data.get("name", "")),
        fit_on=str(data.get("fit_on", "")),
        kind=str(data["kind"]),
        notes=list(data.get("notes") or []),
        model_kwargs=dict(data.get("model_kwargs") or {}),
        settings={
            k: _number(v) if v in ("inf", "-inf") else v for k, v in (data.get("settings") or {}).items()
        },
        covariance=cov,
        residual_variance=_number(data.get("residual_variance")),
        dof=int(data.get("dof") or 0),
        level=data.get("level"),
        setups=pd.DataFrame(data["setups"]) if data.get("setups") else None,
        per={str(name): tuple(columns) for name, columns in (data.get("per") or {}).items()},
        group_keys={
            str(name): {str(label): tuple(key) for label, key in keys.items()}
            for name, keys in (data.get("group_keys") or {}).items()
        },
    )
    if isinstance(cal, TraceCalibration):
        cal.explained = list(data["explained"])
    return cal
