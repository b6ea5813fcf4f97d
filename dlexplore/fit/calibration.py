"""The result of a calibration: :class:`Calibration` holds the fitted parameters with their standard
errors, every point with its prediction and error, and predicts other configurations with the
fitted values (and their prediction interval).

Kept whole: one class, the result every calibration returns, with its predictions, interval, table
and text forms.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from ..model.comm import normalize_algorithm, predict_comm
from ..model.step import predict as model_predict
from .band import BAND_TEXT, BAND_VARIABLES, DEFAULT_LEVEL, gradients, interval
from .compare import ERROR_DEFINITION
from .parameters import HYBRID_ARGUMENTS, PARAMETERS, PREDICT_ARGUMENTS, shared_settings
from .points import canonical, is_blank


@dataclass
class Calibration:
    """Fitted parameters, their standard errors, and every measured point predicted with them.

    Attributes
    ----------
    params:
        One row per fitted parameter (and group): ``name``, ``group`` (``all`` or
        ``workload=resnet50, precision=fp32``), ``value``, ``stderr`` (same units; ``inf`` when not
        identifiable, NaN when unknown), ``units``, ``default`` (what the model uses uncalibrated;
        NaN when the points' defaults differ or there is none), ``identifiable``, ``points``
        (fitted points in the group), ``note``.
    points:
        One row per measured point: the identifying columns of the input, ``variable`` (which
        measured quantity), ``units``, ``measured``, ``predicted`` (with the fitted parameters),
        ``error`` ((predicted - measured) / measured, a fraction), ``fitted`` (bool), ``note`` (why a
        point is not predicted).
    mape_fit, mape_holdout, max_error_holdout:
        Mean |error| over the fitted points and over the others, and the largest |error| over the
        others (fractions; NaN where there are no such points).
    """

    params: pd.DataFrame
    points: pd.DataFrame
    mape_fit: float
    mape_holdout: float
    max_error_holdout: float
    source: str = ""
    name: str = ""
    fit_on: str = "all points"
    kind: str = "training"
    notes: list[str] = field(default_factory=list)
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    per: dict[str, tuple[str, ...]] = field(default_factory=dict)
    group_keys: dict[str, dict[str, tuple]] = field(default_factory=dict)
    setups: pd.DataFrame | None = field(default=None, repr=False)
    settings: dict[str, Any] = field(default_factory=dict)
    covariance: pd.DataFrame | None = field(default=None, repr=False)
    residual_variance: float = math.nan
    dof: int = 0
    level: float | None = DEFAULT_LEVEL
    folds: pd.DataFrame | None = field(default=None, repr=False)

    # -- predicting with the fitted parameters --------------------------------------------------

    def fitted(self, **where: Any) -> dict[str, float]:
        """The fitted value of each identifiable parameter that applies to the setup ``where``.

        A parameter fitted per group needs the grouping columns in ``where`` (or one value of them
        among the calibration points): ``fitted(workload="vgg16")``.
        """
        out: dict[str, float] = {}
        for name, rows in self.params.groupby("name", sort=False):
            if name == "time_compute_per_sample" or name not in PARAMETERS:
                continue
            columns = self.per.get(str(name), ())
            if not columns:
                row = rows.iloc[0]
                if row["identifiable"]:
                    out[str(name)] = float(row["value"])
                continue
            values = [where.get(column, self.settings.get(column)) for column in columns]
            if all(isinstance(v, str) and is_blank(v) for v in values):
                continue  # a point in no group keeps the parameter's default, as in the fit
            key = []
            for column, value in zip(columns, values, strict=True):
                if value is None or isinstance(value, (list, tuple, np.ndarray)):
                    groups = "; ".join(rows["group"])
                    raise DlexploreError(
                        f"{name} was fitted per {', '.join(columns)} ({groups}); give one {column}= "
                        f"to choose, or {name}= itself"
                    )
                key.append(canonical(column, str(value)))
            labels = self.group_keys.get(str(name), {})
            match = rows[[labels.get(g) == tuple(key) for g in rows["group"]]]
            if match.empty:
                raise DlexploreError(
                    f"{name}: no group with {', '.join(map(str, key))} was fitted; "
                    f"groups: {'; '.join(rows['group'])}"
                )
            if bool(match.iloc[0]["identifiable"]):
                out[str(name)] = float(match.iloc[0]["value"])
        return out

    def predict(self, **kwargs: Any) -> xr.Dataset:
        """The model with the fitted parameters, and the prediction interval.

        Training and trace calibrations call :func:`dlexplore.predict`, hybrid-table calibrations
        :func:`dlexplore.predict_parallel`, communication calibrations
        :func:`dlexplore.predict_comm`. Training and hybrid predictions carry
        ``<variable>_lower`` and ``<variable>_upper`` (the prediction interval at
        :attr:`level`, :mod:`dlexplore.fit.band`) for ``step_time``, ``throughput`` and the
        other rates. The defaults are the settings the measured points share
        (workload, GPU, network, precision, batch size, intra-node link, and the algorithm and GPUs
        per node of the multi-GPU points), and ``gpus`` the measured GPU counts; a label such as
        ``setup="Horovod RDMA, NCCL"`` (or ``workload="vgg16"``) narrows them to the points that
        have it. ``kwargs`` override anything, fitted parameters included.
        ``attrs["calibration"]`` says what was fitted on what.
        """
        if self.kind == "hybrid":
            return self._predict_hybrid(**kwargs)
        selectors = {
            k: kwargs.pop(k)
            for k in list(kwargs)
            if self.setups is not None and k in self.setups and k not in PREDICT_ARGUMENTS
        }
        base = {
            k: v for k, v in self._settings_for({**selectors, **kwargs}).items() if k in PREDICT_ARGUMENTS
        }
        fitted = self.fitted(**{**base, **selectors, **kwargs})
        if self.kind == "communication":
            return self.predict_comm(**kwargs)
        args = {**self.model_kwargs, **base, **fitted, **kwargs}
        if "network" not in args or args["network"] is None:
            if not ("bandwidth" in args and "latency" in args):
                raise DlexploreError(
                    "give network= (or bandwidth= and latency=) to predict with this calibration"
                )
            args["network"] = None
        ds = model_predict(**args)
        where = {**base, **selectors, **kwargs}
        ds = self.add_band(ds, lambda **p: model_predict(**{**args, **p}), **where)
        ds.attrs["calibration"] = self._summary_line()
        return ds

    def _predict_hybrid(self, **kwargs: Any) -> xr.Dataset:
        """:func:`dlexplore.predict_parallel` with this calibration: the settings the matching
        points share as defaults (a label such as ``model="GPT 1.7B"`` narrows them), ``kwargs``
        over them."""
        import inspect

        from ..model.parallel import predict_parallel

        accepted = set(inspect.signature(predict_parallel).parameters)
        shared = {k: v for k, v in self._settings_for(kwargs).items() if k in HYBRID_ARGUMENTS}
        call = {k: v for k, v in kwargs.items() if k in accepted}
        return predict_parallel(**{**shared, **call}, calibration=self)

    def add_band(
        self, ds: xr.Dataset, evaluate: Callable[..., xr.Dataset], level: float | None = None, **where: Any
    ) -> xr.Dataset:
        """``ds`` with ``<variable>_lower`` and ``<variable>_upper`` for each of
        :data:`dlexplore.fit.band.BAND_VARIABLES` it has: the prediction interval at ``level``
        (default :attr:`level`) from the residuals and the covariance of the fitted parameters that
        apply to ``where`` (:mod:`dlexplore.fit.band`). ``evaluate(**parameters)`` recomputes the
        prediction with other parameter values."""
        level = (self.level or DEFAULT_LEVEL) if level is None else float(level)
        chosen = self._band_parameters(where)
        names = [name for name, _, _ in chosen]
        values = {name: value for name, _, value in chosen}
        variables = [v for v in BAND_VARIABLES if v in ds.data_vars]
        if not variables:
            return ds
        sizes = [ds[v].size for v in variables]

        def flat(out: xr.Dataset) -> np.ndarray:
            return np.concatenate(
                [np.asarray(out[v].transpose(*ds[v].dims).values, dtype=float).ravel() for v in variables]
            )

        grads = gradients(
            lambda vals: flat(evaluate(**vals)),
            values,
            {n: (PARAMETERS[n].lower, PARAMETERS[n].upper) for n in names},
            {n: PARAMETERS[n].typical for n in names},
            base=flat(ds),
        )
        cov = np.array(
            [
                [self.covariance.loc[a, b] if self.covariance is not None else math.nan for _, b, _ in chosen]
                for _, a, _ in chosen
            ]
        ).reshape(len(chosen), len(chosen))
        lower, upper = interval(flat(ds), grads, cov, names, self.residual_variance, self.dof, level)
        out = ds.copy()
        start = 0
        for v, size in zip(variables, sizes, strict=True):
            for suffix, bound in (("lower", lower), ("upper", upper)):
                da = xr.DataArray(
                    bound[start : start + size].reshape(ds[v].shape), dims=ds[v].dims, coords=ds[v].coords
                )
                da.attrs = {
                    "units": ds[v].attrs.get("units", ""),
                    "long_name": f"{suffix} bound of the {level:.0%} prediction interval "
                    f"of {ds[v].attrs.get('long_name', v)}",
                }
                out[f"{v}_{suffix}"] = da
            start += size
        out.attrs.update(
            band=BAND_TEXT,
            band_level=level,
            band_parameters=", ".join(label for _, label, _ in chosen) or "none",
        )
        return out

    def _band_parameters(self, where: Mapping[str, Any]) -> list[tuple[str, str, float]]:
        """(name, covariance label, value) of each identifiable fitted parameter that applies to
        ``where`` and has a finite variance."""
        fitted = self.fitted(**where)
        out = []
        for name, value in fitted.items():
            rows = self.params[(self.params["name"] == name) & self.params["identifiable"]]
            for _, row in rows.iterrows():
                label = name if row["group"] == "all" else f"{name} [{row['group']}]"
                if (
                    math.isclose(float(row["value"]), value, rel_tol=0, abs_tol=0)
                    and self.covariance is not None
                    and label in self.covariance.index
                    and np.isfinite(self.covariance.loc[label, label])
                ):
                    out.append((name, label, value))
                    break
        return out

    def _settings_for(self, where: Mapping[str, Any]) -> dict[str, Any]:
        """The shared settings of the points that match ``where`` (all points if none match)."""
        if self.setups is None:
            return dict(self.settings)
        rows = self.setups
        for name, value in where.items():
            if name not in rows or isinstance(value, (list, tuple, np.ndarray, range)):
                continue
            match = rows[[canonical(name, str(v)) == canonical(name, str(value)) for v in rows[name]]]
            if not match.empty:
                rows = match
        return shared_settings(rows, self.kind)

    def predict_comm(
        self, collective: str | None = None, algorithm: str | None = None, **kwargs: Any
    ) -> xr.Dataset:
        """:func:`dlexplore.predict_comm` with the fitted bandwidth (GB/s) and latency (s).

        The network's fitted ``bandwidth``/``latency`` when they were fitted, else the intra-node
        link's; ``nbytes`` and ``gpus`` default to the measured ones.
        """
        fitted = self.fitted(**{**self.settings, **kwargs})
        collective = collective or self.settings.get("collective", "allreduce")
        algorithm = algorithm or self.settings.get("algorithm")
        if algorithm is not None:
            try:
                algorithm = normalize_algorithm(algorithm, collective)
            except DlexploreError:
                algorithm = None
        args: dict[str, Any] = {}
        for name in ("bandwidth", "latency", "gamma"):
            for source in (name, f"intra_{name}"):
                if source in fitted:
                    args[name] = fitted[source]
                    break
        if "bytes" in self.settings:
            args["nbytes"] = self.settings["bytes"]
        if "gpus" in self.settings:
            args["gpus"] = self.settings["gpus"]
        for name in ("bandwidth", "latency"):
            if name not in args and name in self.model_kwargs:
                args[name] = self.model_kwargs[name]
        args.update(kwargs)
        ds = predict_comm(
            collective,
            algorithm,
            **{
                k: v
                for k, v in args.items()
                if k
                in (
                    "nbytes",
                    "gpus",
                    "bandwidth",
                    "latency",
                    "gamma",
                    "servers",
                    "gpus_per_node",
                    "intra_bandwidth",
                    "intra_latency",
                )
            },
        )
        ds.attrs["calibration"] = self._summary_line()
        return ds

    # -- tables and text ------------------------------------------------------------------------

    def to_frame(self) -> pd.DataFrame:
        """The points table (a copy), with ``attrs`` holding the parameters and the error summary."""
        frame = self.points.copy()
        frame.attrs.update(
            source=self.source,
            fit_on=self.fit_on,
            error_definition=ERROR_DEFINITION,
            mape_fit=self.mape_fit,
            mape_holdout=self.mape_holdout,
            max_error_holdout=self.max_error_holdout,
            params=self.params.to_dict(orient="records"),
        )
        return frame

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready values (NaN and inf become None and "inf")."""
        return _plain(
            {
                "source": self.source,
                "name": self.name,
                "kind": self.kind,
                "fit_on": self.fit_on,
                "error_definition": ERROR_DEFINITION,
                "mape_fit": self.mape_fit,
                "mape_holdout": self.mape_holdout,
                "max_error_holdout": self.max_error_holdout,
                "params": self.params.to_dict(orient="records"),
                "points": self.points.to_dict(orient="records"),
                "notes": list(self.notes),
            }
        )

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON text."""
        return json.dumps(self.to_dict(), indent=1)

    def _summary_line(self) -> str:
        fitted = int(self.points["fitted"].sum())
        return (
            f"calibrated on {fitted} of {len(self.points)} points of {self.name or self.source} "
            f"({self.fit_on}); MAPE {_pct(self.mape_fit)} fitted, {_pct(self.mape_holdout)} others"
        )

    def _error_lines(self) -> list[str]:
        fitted = int(self.points["fitted"].sum())
        others = len(self.points) - fitted
        return [
            f"error = {ERROR_DEFINITION}",
            f"MAPE {_pct(self.mape_fit)} on the {fitted} fitted point(s); "
            + (
                f"{_pct(self.mape_holdout)} on the {others} other(s), largest {_pct(self.max_error_holdout)}"
                if others
                else "no other point"
            ),
        ]

    def __repr__(self) -> str:
        head = f"Calibration of {self.name or self.source} on {self.fit_on}"
        params = self.params.copy()
        for column in ("value", "stderr", "default"):
            params[column] = [_num(v) for v in params[column]]
        keep = ["name", "group", "value", "stderr", "units", "default"]
        lines = [head, params[keep].to_string(index=False), *self._error_lines()]
        lines += [f"note: {n}" for n in self._all_notes()]
        return "\n".join(lines)

    def _all_notes(self) -> list[str]:
        """The calibration's notes, then what the parameter table says of fitted parameters (a bound
        reached, a grid search)."""
        extra = [
            f"{row['name']}" + ("" if row["group"] == "all" else f" [{row['group']}]") + f": {row['note']}"
            for _, row in self.params.iterrows()
            if row["identifiable"] and row["note"] and row["name"] in PARAMETERS
        ]
        return [*self.notes, *extra]

    def _repr_html_(self) -> str:
        params = self.params.copy()
        for column in ("value", "stderr", "default"):
            params[column] = [_num(v) for v in params[column]]
        keep = ["name", "group", "value", "stderr", "units", "default"]
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self._all_notes())
        return (
            f"<div><b>Calibration of {html.escape(self.name or self.source)}</b> on "
            f"{html.escape(self.fit_on)}"
            + params[keep].to_html(index=False, escape=True)
            + "".join(f"<p>{html.escape(line)}</p>" for line in self._error_lines())
            + (f"<ul>{notes}</ul>" if notes else "")
            + "</div>"
        )


def _num(value: Any) -> str:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf"
    return f"{x:.4g}"


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:.1f}%"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if math.isnan(x):
            return None
        return ("inf" if x > 0 else "-inf") if math.isinf(x) else x
    if value is pd.NA or value is None:
        return None
    return value
