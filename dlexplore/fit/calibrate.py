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

import html
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog
from ..errors import DlexploreError, UnknownNameError, suggest
from ..model.comm import ALGORITHMS, collective_time, normalize_algorithm, predict_comm
from ..model.compute import (
    BACKWARD_TO_FORWARD,
    default_compute_efficiency,
    normalize_precision,
    optimizer_time,
    training_peak_flops,
)
from ..model.step import predict as model_predict
from ..traces.schema import Trace
from ._select import Selection, select
from .band import BAND_TEXT, BAND_VARIABLES, DEFAULT_LEVEL, gradients, interval
from .compare import ERROR_DEFINITION, PointModel, _canonical, as_points

__all__ = ["PARAMETERS", "Calibration", "CalibrationWarning", "calibrate", "calibrate_from_trace"]


class CalibrationWarning(UserWarning):
    """A parameter that the chosen points cannot determine, or points that cannot be used."""


@dataclass(frozen=True)
class _Spec:
    units: str
    lower: float
    upper: float
    typical: float  # starting value and scale when there is no default
    long_name: str
    integer: bool = False


#: The parameters :func:`calibrate` fits: units, bounds, and meaning.
PARAMETERS: dict[str, _Spec] = {
    "compute_efficiency": _Spec("1", 1e-4, 1.0, 0.5, "fraction of peak FLOP/s achieved by compute"),
    "bandwidth": _Spec("GB/s", 1e-6, 1e6, 10.0, "network bandwidth per link and direction"),
    "latency": _Spec("s", 0.0, math.inf, 5e-6, "network latency per message"),
    "intra_bandwidth": _Spec("GB/s", 1e-6, 1e6, 50.0, "intra-node link bandwidth per direction"),
    "intra_latency": _Spec("s", 0.0, math.inf, 1e-6, "intra-node link latency per message"),
    "overlap": _Spec("1", 0.0, 1.0, 1.0, "fraction of communication allowed to overlap backward"),
    "gamma": _Spec("s/byte", 0.0, math.inf, 1e-11, "reduction cost per byte"),
    "servers": _Spec("count", 1.0, math.inf, 1.0, "parameter servers", integer=True),
    "memory_efficiency": _Spec(
        "1", 1e-3, 1.0, 0.8, "fraction of GPU memory bandwidth reached by memory-bound kernels"
    ),
    "kernel_time": _Spec("s", 0.0, 1e-3, 5e-6, "fixed time of one GPU kernel"),
    "winograd_speedup": _Spec(
        "1", 1.0, 4.0, 1.5, "FLOP saving of Winograd's algorithm on 3x3 convolutions (vector units)"
    ),
    "flash_efficiency": _Spec("1", 1e-3, 1.0, 0.6, "fraction of peak a flash-attention kernel reaches"),
    "tcp_efficiency": _Spec(
        "1", 1e-3, 1.0, 0.5, "fraction of a network's bandwidth collectives reach over kernel TCP"
    ),
    "ps_efficiency": _Spec(
        "1", 1e-3, 1.0, 0.5, "fraction of a link's bandwidth parameter-server transfers reach"
    ),
    "cycle_time": _Spec("s", 0.0, 1.0, 5e-3, "Horovod's cycle time"),
    "negotiation_time": _Spec("s", 0.0, 1e-2, 1e-5, "Horovod's negotiation time per tensor and tree level"),
    "host_bandwidth": _Spec("GB/s", 0.05, 500.0, 20.0, "host memory traffic one CPU core sustains"),
    "server_bandwidth": _Spec("GB/s", 0.05, 500.0, 20.0, "host memory traffic of a parameter server's CPU"),
    "tp_overlap": _Spec(
        "1", 0.0, 1.0, 0.5, "fraction of tensor-parallel communication allowed to hide behind GEMMs"
    ),
}
_TRAINING_ONLY = (
    "compute_efficiency",
    "overlap",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
    "tp_overlap",
)
#: dlexplore.predict's arguments: the settings Calibration.predict passes on.
_PREDICT_ARGUMENTS = (
    "workload",
    "gpu",
    "network",
    "gpus",
    "batch_size",
    "bandwidth",
    "latency",
    "gpus_per_node",
    "nics_per_node",
    "intra_link",
    "intra_bandwidth",
    "intra_latency",
    "algorithm",
    "servers",
    "precision",
    "optimizer",
    "compute_efficiency",
    "bucket_size",
    "overlap",
    "gamma",
    "storage",
    "io_threads",
    "prefetch",
    "workspace",
    "buckets",
    "grad_accum",
    "seq",
    "attention",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "framework",
    "transport",
    "servers_colocated",
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_staging",
    "host_bandwidth",
    "server_bandwidth",
    "operators",
)
#: dlexplore.predict_parallel's settings a hybrid calibration's points can share.
_HYBRID_ARGUMENTS = (
    "gpu",
    "network",
    "gpus_per_node",
    "intra_link",
    "precision",
    "optimizer",
    "micro_batch",
    "recompute",
    "schedule",
    "virtual_stages",
    "attention",
    "memory_convention",
    "sequence_parallel",
    "zero",
    "tp",
    "pp",
    "seq",
)
_IDENTIFYING = {
    "training": (
        "workload",
        "gpu",
        "network",
        "precision",
        "algorithm",
        "gpus",
        "gpus_per_node",
        "batch_size",
        "grad_accum",
        "seq",
        "baseline_gpus",
        "setup",
    ),
    "communication": ("collective", "algorithm", "gpu", "network", "gpus", "gpus_per_node", "bytes", "setup"),
}
_MEASURED_ORDER = {"training": ("throughput", "efficiency"), "communication": ("time", "busbw", "algbw")}
_UNITS = {"throughput": "samples/s", "efficiency": "1", "time": "s", "busbw": "GB/s", "algbw": "GB/s"}
_PROBE = 0.05  # relative move of a parameter in the identifiability check
_ZERO = 1e-9  # smaller changes of log(prediction) count as none
_DEPENDENT = 1e-6  # relative size of what a column adds to the span of the ones before it


# --- the result --------------------------------------------------------------------------------------


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
            key = []
            for column in columns:
                value = where.get(column, self.settings.get(column))
                if value is None or isinstance(value, (list, tuple, np.ndarray)):
                    groups = "; ".join(rows["group"])
                    raise DlexploreError(
                        f"{name} was fitted per {', '.join(columns)} ({groups}); give one {column}= "
                        f"to choose, or {name}= itself"
                    )
                key.append(_canonical(column, str(value)))
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
            if self.setups is not None and k in self.setups and k not in _PREDICT_ARGUMENTS
        }
        base = {
            k: v for k, v in self._settings_for({**selectors, **kwargs}).items() if k in _PREDICT_ARGUMENTS
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
        shared = {k: v for k, v in self._settings_for(kwargs).items() if k in _HYBRID_ARGUMENTS}
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
            match = rows[[_canonical(name, str(v)) == _canonical(name, str(value)) for v in rows[name]]]
            if not match.empty:
                rows = match
        return _shared(rows, self.kind)

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


# --- the fitter ------------------------------------------------------------------------------------


@dataclass
class _Free:
    """One fitted number: a parameter, for the points of one group."""

    name: str
    group: str
    members: np.ndarray | None  # which points it applies to (None: all)
    default: float
    start: float
    fit_points: int
    identifiable: bool = True
    override: bool = True  # False: each point keeps its own default
    key: tuple = ()  # the group's values of the per columns, normalised (catalog ids, lower case)
    value: float = math.nan
    stderr: float = math.nan
    note: str = ""
    cov: dict[int, float] = field(default_factory=dict)  # covariance with the free[j] it names

    @property
    def spec(self) -> _Spec:
        return PARAMETERS.get(self.name, _Spec("", -math.inf, math.inf, 1.0, self.name))

    @property
    def scale(self) -> float:
        return abs(self.start) if self.start and np.isfinite(self.start) else self.spec.typical


def _label(free: _Free) -> str:
    return free.name if free.group == "all" else f"{free.name} [{free.group}]"


def _identify(free: list[_Free], residual: Callable[[np.ndarray], np.ndarray], m: int) -> None:
    """Mark the parameters the fitted points cannot determine (module docstring), with the reason
    in ``note``."""
    x0 = np.array([f.start for f in free], dtype=float)
    r0 = residual(x0)
    basis: list[np.ndarray] = []
    kept: list[str] = []
    for j, f in enumerate(free):
        if f.spec.integer:
            continue  # whole numbers are searched on a grid (_fit)
        if f.fit_points == 0:
            f.identifiable = False
            f.note = "no fitted point in this group"
            continue
        spec = f.spec
        up, down = x0.copy(), x0.copy()
        up[j] = min(f.start + _PROBE * f.scale, spec.upper)
        down[j] = max(f.start - _PROBE * f.scale, spec.lower)
        r_up, r_down = residual(up), residual(down)
        change = np.nanmax(np.abs(np.concatenate([r_up - r0, r_down - r0]))) if len(r0) else 0.0
        if not np.isfinite(change) or change < _ZERO:
            f.identifiable = False
            f.note = f"moving it by ±{100 * _PROBE:.0f}% changes none of the {m} fitted predictions"
            continue
        column = np.nan_to_num((r_up - r_down) / ((up[j] - down[j]) / f.scale))
        rest = column.copy()
        for b in basis:
            rest -= b * float(b @ rest)
        if np.linalg.norm(rest) <= _DEPENDENT * np.linalg.norm(column):
            f.identifiable = False
            f.note = (
                f"on the fitted points its effect is a combination of the effects of "
                f"{', '.join(kept)} (e.g. latency and bandwidth from one message size)"
            )
            continue
        basis.append(rest / np.linalg.norm(rest))
        kept.append(_label(f))


def _unidentified(free: list[_Free]) -> list[str]:
    """One warning per parameter the points could not determine: why, and what it was held at."""
    return [
        f"{_label(f)} cannot be determined from these points: {f.note}" for f in free if not f.identifiable
    ]


def _least_squares(
    free: list[_Free], residual: Callable[[np.ndarray], np.ndarray], fixed: np.ndarray
) -> tuple[float, int]:
    """Fit the identifiable parameters in place; return the cost (sum of r^2 / 2) and the dof."""
    active = [j for j, f in enumerate(free) if f.identifiable and not f.spec.integer]
    x = fixed.copy()
    if not active:
        r = residual(x)
        return 0.5 * float(np.nansum(r**2)), len(r)
    scale = np.array([free[j].scale for j in active])
    lower = np.array([free[j].spec.lower for j in active]) / scale
    upper = np.array([free[j].spec.upper for j in active]) / scale
    u0 = np.clip(np.array([free[j].start for j in active]) / scale, lower, upper)

    def fun(u: np.ndarray) -> np.ndarray:
        y = x.copy()
        y[active] = u * scale
        # a prediction the model cannot make mid-fit counts as far off, not as a crash
        return np.nan_to_num(residual(y), nan=50.0, posinf=50.0, neginf=-50.0)

    # scipy.optimize takes 0.2 s to import: only when a fit runs, so `import dlexplore` stays quick
    from scipy.optimize import least_squares

    result = least_squares(
        fun,
        u0,
        bounds=(lower, upper),
        method="trf",
        x_scale=1.0,
        ftol=1e-12,
        xtol=1e-12,
        gtol=1e-12,
        max_nfev=400,
    )
    jac = np.asarray(result.jac, dtype=float)
    m, k = jac.shape
    dof = m - k
    s2 = 2.0 * result.cost / dof if dof > 0 else math.nan
    _, sv, vt = np.linalg.svd(jac, full_matrices=False)
    # Below this, a direction is finite-difference noise (relative accuracy ~1e-8): not determined.
    big = sv > (sv.max() if sv.size else 0.0) * 1e-7
    inverse = (vt[big].T / sv[big] ** 2) @ vt[big]
    variance = s2 * np.diag(inverse)
    for i in np.flatnonzero(~big):
        variance[np.abs(vt[i]) > 0.1] = math.inf
    covariance = s2 * inverse * np.outer(scale, scale)
    for i, j in enumerate(active):
        f = free[j]
        f.cov = {active[k]: float(covariance[i, k]) for k in range(len(active))}
        f.value = float(result.x[i] * scale[i])
        f.stderr = (
            float(np.sqrt(variance[i]) * scale[i])
            if np.isfinite(variance[i])
            else (math.inf if variance[i] == math.inf else math.nan)
        )
        tolerance = 1e-6 * scale[i]
        if f.value - f.spec.lower <= tolerance or f.spec.upper - f.value <= tolerance:
            f.note = (f.note + "; " if f.note else "") + "at its bound"
        x[j] = f.value
    return float(result.cost), dof


def _dof_note(dof: int, free: list[_Free]) -> list[str]:
    if dof <= 0 and any(f.identifiable and not f.spec.integer for f in free):
        return [
            "as many fitted points as parameters: no residual is left to estimate the noise, so "
            "the standard errors are unknown (NaN); fit more points for them"
        ]
    return []


def _servers_candidates(gpus: np.ndarray) -> np.ndarray:
    top = int(max(gpus.max(), 1)) if gpus.size else 1
    if top <= 64:
        return np.arange(1, top + 1)
    return np.unique(np.round(np.geomspace(1, top, 48)).astype(int))


def _fit(
    free: list[_Free],
    residual: Callable[[np.ndarray], np.ndarray],
    server_gpus: np.ndarray,
    hold: Callable[[_Free], None],
) -> int:
    """Fit the identifiable parameters in place (``servers`` on a grid); return the residual
    degrees of freedom.

    A parameter the best fit drives to where it no longer changes any fitted prediction (a
    bandwidth run off towards infinity: the Jacobian is singular in its direction, ``stderr`` inf)
    was not determined after all: it is held with ``hold`` and the others are fitted again.
    """
    for _ in range(len(free) + 1):
        dof = _fit_once(free, residual, server_gpus)
        runaway = [f for f in free if f.identifiable and not f.spec.integer and f.stderr == math.inf]
        if not runaway:
            return dof
        for f in runaway:
            f.identifiable = False
            f.note = (
                f"the best fit moves it to {_num(f.value)} {f.spec.units}, where it no longer "
                "changes any fitted prediction"
            )
            hold(f)
    return dof


def _fit_once(
    free: list[_Free], residual: Callable[[np.ndarray], np.ndarray], server_gpus: np.ndarray
) -> int:
    for f in free:
        if f.identifiable:
            f.note = ""  # a bound reached in an earlier pass
    x0 = np.array([f.start for f in free], dtype=float)
    grid = [j for j, f in enumerate(free) if f.spec.integer and f.identifiable]
    if not grid:
        return _least_squares(free, residual, x0)[1]
    # Coordinate descent: fit the others at the current number of servers, then scan every
    # candidate number with the others held, until the number stays (a joint fit at every
    # candidate costs 20-50x more for the same answer on these smooth costs).
    j = grid[0]
    f = free[j]
    candidates = _servers_candidates(server_gpus)
    current = float(np.clip(round(f.start), candidates[0], candidates[-1]))
    costs = np.zeros(len(candidates))
    dof = 0
    for _ in range(8):
        x = np.array([g.start for g in free], dtype=float)
        x[j] = current
        _, dof = _least_squares(free, residual, x)
        for g in free:
            if g.identifiable and not g.spec.integer:
                g.start = g.value  # the next round starts here
        held = np.array([g.start for g in free], dtype=float)
        for i, candidate in enumerate(candidates):
            held[j] = float(candidate)
            r = np.nan_to_num(residual(held), nan=50.0, posinf=50.0, neginf=-50.0)
            costs[i] = 0.5 * float(r @ r)
        best = float(candidates[int(np.argmin(costs))])  # the first of equal costs: fewest servers
        if best == current:
            break
        current = best
    if np.ptp(costs) <= 1e-12 * max(float(np.max(np.abs(costs))), 1e-300):
        f.identifiable = False
        f.note = "no fitted prediction changes with it (no parameter-server point among them)"
        return dof
    f.value = f.start = current
    f.stderr = math.nan
    f.note = f"a whole number, searched over {candidates[0]}..{candidates[-1]}: no standard error"
    return dof - 1


def _hold(f: _Free, defaults: np.ndarray | None, neutral: float | None = None) -> None:
    """Hold a parameter the points cannot determine at its default; say so in its note."""
    f.stderr = math.inf
    if np.isfinite(f.default):
        f.start = f.value = f.default
        f.note += f"; kept the default {_num(f.default)}"
    elif defaults is not None and defaults.size and np.all(np.isfinite(defaults)):
        f.override = False
        f.value = math.nan
        f.note += "; each point keeps its own default"
    elif neutral is not None:
        f.start = neutral
        f.value = math.nan
        f.note += f"; it has no default, so it is left out of the model (held at {_num(neutral)})"
    else:
        f.value = f.start
        f.note += f"; it has no default: held at the starting value {_num(f.start)}"


# --- calibrate ----------------------------------------------------------------------------------


def _normalize_per(per: Any, params: Sequence[str], columns: Sequence[str]) -> dict[str, tuple[str, ...]]:
    if per is None:
        return {}
    if isinstance(per, str):
        per = {name: (per,) for name in params}
    elif isinstance(per, (list, tuple)):
        per = {name: tuple(per) for name in params}
    if not isinstance(per, Mapping):
        raise DlexploreError(
            f"per: expected a column, a tuple of columns or {{parameter: columns}}, got {per!r}"
        )
    out = {}
    for name, cols in per.items():
        if name not in params:
            raise DlexploreError(
                f"per names {name!r}, which is not among the fitted params ({', '.join(params)})"
            )
        cols = (cols,) if isinstance(cols, str) else tuple(cols)
        for col in cols:
            if col not in columns:
                hint = suggest(col, columns)
                raise DlexploreError(
                    f"per {name}: the points have no column {col!r}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + f"; columns: {', '.join(columns)}"
                )
        if PARAMETERS[name].integer and cols:
            raise DlexploreError(
                f"{name} is a whole number searched on a grid: one value for all points, not per group"
            )
        if cols:
            out[name] = cols
    return out


def _measured(ds: xr.Dataset, table: str) -> tuple[np.ndarray, np.ndarray]:
    n = ds.sizes["point"]
    y = np.full(n, np.nan)
    variable = np.full(n, "", dtype=object)
    for name in reversed(_MEASURED_ORDER[table]):
        if name in ds.data_vars:
            values = ds[name].values.astype(float)
            ok = np.isfinite(values)
            y = np.where(ok, values, y)
            variable = np.where(ok, name, variable)
    return y, variable


def _is_trace_source(source: Any) -> bool:
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
        "precision")``), or ``{parameter: columns}``; default one value for all points.
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
        from .hybrid_calibration import leave_one_out

        return leave_one_out(measured, params=params, per=per, level=level, **model_kwargs)
    if _is_trace_source(measured):
        trace_params = params if params is not None else ("latency", "bandwidth")
        return calibrate_from_trace(measured, fit_on=fit_on, params=trace_params, **model_kwargs)
    ds = as_points(measured)
    if ds.attrs.get("table") == "hybrid":
        from .hybrid_calibration import calibrate_hybrid

        return calibrate_hybrid(ds, fit_on=fit_on, params=params, per=per, level=level, **model_kwargs)
    model = PointModel(ds, model_kwargs)
    table = model.table
    frame = model.frame.copy()
    for name in ds.data_vars:
        if ds[name].dims == ("point",):
            frame[name] = ds[name].values
    y, variable = _measured(ds, table)
    selected = select(frame, fit_on)
    fit_text = (
        f"fit_on {fit_on!r}"
        if isinstance(fit_on, str)
        else ("all points" if fit_on is None else "the points selected by fit_on")
    )

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
        if table == "communication" and name in _TRAINING_ONLY:
            raise DlexploreError(
                f"{name} is not a parameter of collectives; a communication table "
                f"can fit {', '.join(p for p in PARAMETERS if p not in _TRAINING_ONLY)}"
            )
    if len(set(params)) != len(params):
        raise DlexploreError(f"params repeats a name: {list(params)}")
    per_map = _normalize_per(per, params, list(frame.columns))

    free = _free_parameters(params, per_map, model, frame, selected)
    needed = _MEASURED_ORDER[table]

    present = tuple(v for v in needed if v in set(variable))

    def predictions(x: np.ndarray, where: np.ndarray | None, reasons: np.ndarray | None = None) -> np.ndarray:
        overrides: dict[str, np.ndarray] = {}
        for j, f in enumerate(free):
            if not f.override:
                continue
            values = overrides.setdefault(f.name, model.defaults[f.name].copy())
            values[f.members if f.members is not None else slice(None)] = x[j]
        out = model.evaluate(overrides, where=where, variables=present or needed[:1], reasons=reasons)
        pred = np.full(model.n, np.nan)
        for name in present:
            pred = np.where(variable == name, out[name], pred)
        return pred

    x_start = np.array([f.start for f in free], dtype=float)
    reasons = model.reason.copy()
    start_pred = predictions(x_start, selected, reasons)
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
    for f in free:
        members = f.members if f.members is not None else np.ones(model.n, dtype=bool)
        f.fit_points = int((members & fit).sum())
    m = int(fit.sum())
    log_y = np.log(np.where(fit, y, 1.0))

    def residual(x: np.ndarray) -> np.ndarray:
        pred = predictions(x, fit)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(pred) - log_y)[fit]

    _identify(free, residual, m)
    for f in free:
        if not f.identifiable:
            members = f.members if f.members is not None else slice(None)
            _hold(f, model.defaults[f.name][members])
    server_rows = fit & (model.algorithm == "parameter_server")

    def hold(f: _Free) -> None:
        _hold(f, model.defaults[f.name][f.members if f.members is not None else slice(None)])

    dof = _fit(free, residual, model.gpus[server_rows], hold)
    for f in free:
        if not f.identifiable and f.spec.integer:
            _hold(f, model.defaults[f.name])
    messages = _unidentified(free)
    notes = messages + notes + _dof_note(dof, free)
    for message in messages:
        warnings.warn(CalibrationWarning(message), stacklevel=2)

    x_final = np.array([f.value if f.identifiable else f.start for f in free], dtype=float)
    reasons = model.reason.copy()
    final = predictions(x_final, None, reasons)
    result = _result(
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


def _free_parameters(
    params: Sequence[str], per_map: dict, model: PointModel, frame: pd.DataFrame, selected: np.ndarray
) -> list[_Free]:
    free = []
    for name in params:
        defaults = model.defaults[name]
        given = model.kwargs.get(name)
        columns = per_map.get(name, ())
        if columns:
            rows = list(frame[list(columns)].itertuples(index=False))
            keys = [tuple(_canonical(c, str(v)) for c, v in zip(columns, row, strict=True)) for row in rows]
            codes, uniques = pd.factorize(pd.Series(keys, dtype=object))
            groups = []
            for g, key in enumerate(uniques):
                first = rows[int(np.flatnonzero(codes == g)[0])]  # labelled as the table writes it
                label = ", ".join(f"{c}={v}" for c, v in zip(columns, first, strict=True))
                groups.append((label, codes == g, tuple(key)))
        else:
            groups = [("all", None, ())]
        for label, members, key in groups:
            chosen = defaults if members is None else defaults[members]
            finite = chosen[np.isfinite(chosen)]
            uniform = finite.size == chosen.size and finite.size and np.ptp(finite) == 0
            default = float(finite[0]) if uniform else math.nan
            if given is not None:
                start = float(given)
            elif finite.size:
                start = float(np.median(finite))
            else:
                start = PARAMETERS[name].typical
            free.append(_Free(name, label, members, default, start, 0, key=key))
    return free


def _result(
    ds: xr.Dataset,
    model: PointModel,
    frame: pd.DataFrame,
    free: list[_Free],
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
    columns = [c for c in _IDENTIFYING[table] if c in frame.columns]
    points = frame[columns].copy().reset_index(drop=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        error = (pred - y) / y
    points["variable"] = variable
    points["units"] = [_UNITS.get(v, "") for v in variable]
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
    setups = _setup_table(model, frame, table)
    name = ds.attrs.get("name", "")
    return Calibration(
        params=_params_frame(free),
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
        settings=_shared(setups, table),
        setups=setups,
    )


def covariance_frame(free: list[_Free]) -> pd.DataFrame:
    """The fitted parameters' covariance (their units), labelled like :func:`_label`; NaN where
    a parameter was not fitted."""
    labels = [_label(f) for f in free]
    matrix = np.full((len(free), len(free)), math.nan)
    for i, f in enumerate(free):
        if f.identifiable:
            for j, value in f.cov.items():
                matrix[i, j] = value
    return pd.DataFrame(matrix, index=labels, columns=labels)


def with_uncertainty(
    result: Calibration,
    free: list[_Free],
    x: np.ndarray,
    predict_all: Callable[[np.ndarray], np.ndarray],
    residuals: np.ndarray,
    dof: int,
) -> Calibration:
    """``result`` with the parameters' covariance, the residual variance (log units), and every
    point's prediction interval (``lower``, ``upper``, ``in_band``) at ``result.level``
    (:mod:`dlexplore.fit.band`)."""
    r = np.asarray(residuals, dtype=float)
    result.dof = int(dof)
    if result.level is None:  # no interval asked for (it costs one evaluation per parameter)
        result.residual_variance = float(np.nansum(r**2) / dof) if dof > 0 else math.nan
        result.covariance = covariance_frame(free)
        return result
    result.residual_variance = float(np.nansum(r**2) / dof) if dof > 0 else math.nan
    result.covariance = covariance_frame(free)
    active = [
        j
        for j, f in enumerate(free)
        if f.identifiable and f.override and np.isfinite(result.covariance.iloc[j, j])
    ]
    names = [_label(free[j]) for j in active]

    def evaluate(values: Mapping[str, float]) -> np.ndarray:
        y = x.copy()
        for j in active:
            y[j] = values[_label(free[j])]
        return predict_all(y)

    pred = result.points["predicted"].to_numpy(dtype=float)
    grads = gradients(
        evaluate,
        {_label(free[j]): float(x[j]) for j in active},
        {_label(free[j]): (free[j].spec.lower, free[j].spec.upper) for j in active},
        {_label(free[j]): free[j].scale for j in active},
        base=pred,
    )
    cov = result.covariance.loc[names, names].to_numpy() if names else np.zeros((0, 0))
    lower, upper = interval(pred, grads, cov, names, result.residual_variance, result.dof, result.level)
    measured = result.points["measured"].to_numpy(dtype=float)
    result.points["lower"] = lower
    result.points["upper"] = upper
    result.points["in_band"] = (measured >= lower) & (measured <= upper)
    return result


def _params_frame(free: list[_Free]) -> pd.DataFrame:
    rows = []
    for f in free:
        spec = f.spec
        rows.append(
            {
                "name": f.name,
                "group": f.group,
                "value": f.value,
                "stderr": f.stderr,
                "units": spec.units,
                "default": f.default,
                "identifiable": bool(f.identifiable),
                "points": int(f.fit_points),
                "note": f.note,
            }
        )
    return pd.DataFrame(
        rows,
        columns=["name", "group", "value", "stderr", "units", "default", "identifiable", "points", "note"],
    )


def _setup_table(model: PointModel, frame: pd.DataFrame, table: str) -> pd.DataFrame:
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


def _shared(rows: pd.DataFrame, table: str) -> dict[str, Any]:
    """The settings a group of points shares, as defaults for :meth:`Calibration.predict`: every
    setting all its points share; the algorithm and GPUs per node of its multi-GPU points (a table
    of one server's GPUs gets the server's GPU count); its GPU counts and message sizes."""
    out: dict[str, Any] = {}
    gpus = rows["gpus"].to_numpy(dtype=np.int64)
    multi = gpus > 1
    for name in rows.columns:
        if name in ("gpus", "bytes"):
            continue
        values = rows[name].to_numpy(dtype=object)
        if name in ("algorithm", "gpus_per_node") and multi.any():
            values = values[multi]
        unique = pd.unique(pd.Series(values, dtype=object))
        if len(unique) == 1 and unique[0] != "":
            value = unique[0]
            out[name] = value.item() if hasattr(value, "item") else value
    per_node = rows["gpus_per_node"].to_numpy(dtype=np.int64)
    if "gpus_per_node" not in out and np.all(gpus <= per_node):
        out["gpus_per_node"] = int(per_node.max())  # every point inside one server
    out["gpus"] = sorted(set(int(g) for g in gpus))
    if "bytes" in rows:
        out["bytes"] = sorted(set(int(b) for b in rows["bytes"]))
    return out


def catalog_link_known(name: str) -> bool:
    """Whether ``name`` is a link or network of the catalog."""
    try:
        catalog.network(name)
        return True
    except DlexploreError:
        return False


# --- traces ------------------------------------------------------------------------------------------


def _batch_size(trace: Trace) -> int | None:
    """The per-rank batch size the trace's metadata, or the collector's manifest beside it, gives."""
    for key in ("batch_size_per_rank", "batch_size"):
        value = trace.meta.get(key)
        if isinstance(value, (int, np.integer)) and value > 0:
            return int(value)
    if trace.files:
        manifest = Path(trace.files[0]).parent / "manifest.json"
        if manifest.is_file():
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            for value in (data.get("batch_size_per_rank"), (data.get("arguments") or {}).get("batch_size")):
                if isinstance(value, int) and value > 0:
                    return value
    return None


def calibrate_from_trace(
    trace: Trace | str | Path | Sequence[str | Path],
    *,
    batch_size: int | None = None,
    fit_on: Selection = None,
    params: Sequence[str] = ("latency", "bandwidth"),
    algorithm: str | Mapping[str, str] | None = None,
    statistic: str | None = "min",
    steps: Sequence[int] | None = None,
    workload: str | None = None,
    gpu: str | None = None,
    precision: str = "fp32",
    optimizer: str = "momentum",
    network: str | None = None,
    **model_kwargs: Any,
) -> Calibration:
    """Latency and bandwidth from a trace's measured collectives; compute time per sample from its
    breakdown.

    Parameters
    ----------
    trace:
        A :class:`~dlexplore.Trace`, or what :func:`dlexplore.load_trace` reads.
    batch_size:
        Samples per rank per step; default from the trace's metadata or the collector's
        ``manifest.json`` beside the files. Without it the compute time is per step.
    fit_on:
        Which collective points to fit (columns ``collective``, ``algorithm``, ``bytes``, ``gpus``,
        ``count``, ``measured``), as in :func:`calibrate`.
    params:
        Fitted among ``latency`` (s), ``bandwidth`` (GB/s) and ``gamma`` (s/byte), in this order of
        precedence when not all can be determined.
    algorithm:
        The algorithm each collective ran (one name or ``{collective: name}``); default the
        collective's first in :data:`dlexplore.model.ALGORITHMS` (``ring`` for allreduce).
    statistic:
        How the operations of one collective, size and rank count make a measured point: ``"min"``
        (default: interference from late ranks and the operating system only ever adds time, so the
        fastest repetition is the closest to the undisturbed transfer the alpha-beta model
        describes), ``"median"``, ``"mean"``, or ``None`` (every operation is a point). An
        operation's time is ``time_last_in`` (from the last rank entering to the last leaving, on
        aligned clocks: the wait for late ranks left out) where it was seen on two or more ranks,
        else its mean duration.
    steps:
        Steps of the breakdown to use for the compute time (default all).
    workload, gpu, precision, optimizer:
        When ``workload`` and ``gpu`` are catalog ids, the compute time also gives
        ``compute_efficiency`` = (1 + 2) x FLOPs per sample x batch / (peak x (time_compute - the
        model's optimizer time)).
    network:
        A catalog network whose figures are the defaults (and starting values) of the fit.
    model_kwargs:
        ``bandwidth``/``latency`` defaults (override ``network``'s).

    Returns
    -------
    Calibration
        ``params``: ``latency``, ``bandwidth`` (and ``gamma``) with standard errors, then
        ``time_compute_per_sample`` (s/sample; median over ranks and steps, standard error
        1.2533 s / sqrt(n)) and, when possible, ``compute_efficiency``. ``points``: one row per
        collective point: ``collective``, ``algorithm``, ``bytes``, ``gpus``, ``count``,
        ``measured`` (s), ``measured_min``, ``measured_max`` (the spread of its operations),
        ``predicted``, ``error``, ``fitted``.
    """
    from ..traces import load_trace
    from ..traces.collectives import collective_ops

    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    unknown = set(model_kwargs) - {"bandwidth", "latency", "gamma"}
    if unknown:
        raise DlexploreError(
            f"calibrate_from_trace: unknown keyword(s) {sorted(unknown)}; expected bandwidth, latency, gamma"
        )
    params = (params,) if isinstance(params, str) else tuple(params)
    for name in params:
        if name not in ("latency", "bandwidth", "gamma"):
            raise DlexploreError(f"calibrate_from_trace fits latency, bandwidth and gamma; got {name!r}")
    if statistic not in ("min", "median", "mean", None):
        raise DlexploreError(f"statistic must be 'min', 'median', 'mean' or None, got {statistic!r}")

    ops = collective_ops(trace)
    ops = ops[
        ops["collective"].isin(list(ALGORITHMS))
        & np.isfinite(ops["bytes"].to_numpy(float))
        & (ops["bytes"].to_numpy(float) > 0)
        & (ops["ranks"].to_numpy() > 1)
    ].copy()
    if ops.empty:
        raise DlexploreError(
            f"{trace.source}: no collective with a known message size on two or more "
            "ranks; nothing to fit latency and bandwidth on"
        )
    last_in = ops["time_last_in"].to_numpy(float)
    ops["measure"] = np.where(np.isfinite(last_in) & (last_in > 0), last_in, ops["time"].to_numpy(float))
    ops["algorithm"] = [_trace_algorithm(c, algorithm) for c in ops["collective"]]
    keys = ["collective", "algorithm", "bytes", "ranks"]
    if statistic is None:
        points = ops[keys].copy()
        points["count"] = 1
        points["measured"] = ops["measure"].to_numpy()
        points["measured_min"] = points["measured"]
        points["measured_max"] = points["measured"]
    else:
        points = (
            ops.groupby(keys, sort=True)
            .agg(
                count=("measure", "size"),
                measured=("measure", statistic),
                measured_min=("measure", "min"),
                measured_max=("measure", "max"),
            )
            .reset_index()
        )
    points = points.rename(columns={"ranks": "gpus"}).reset_index(drop=True)
    points["gpus"] = points["gpus"].astype(np.int64)
    points["bytes"] = points["bytes"].astype(np.int64)
    selected = select(points, fit_on)
    y = points["measured"].to_numpy(float)
    fit = selected & np.isfinite(y) & (y > 0)
    if not fit.any():
        raise DlexploreError("no selected collective point has a positive measured time")

    link = catalog.network(network) if network else None
    defaults = {
        "latency": float(model_kwargs.get("latency", link.latency_s if link else math.nan)),
        "bandwidth": float(model_kwargs.get("bandwidth", link.bandwidth_gbs if link else math.nan)),
        "gamma": float(model_kwargs.get("gamma", 0.0)),
    }
    free = [
        _Free(
            name,
            "all",
            None,
            defaults[name],
            defaults[name]
            if np.isfinite(defaults[name]) and defaults[name] > 0
            else PARAMETERS[name].typical,
            int(fit.sum()),
        )
        for name in params
    ]
    order = {f.name: j for j, f in enumerate(free)}
    log_y = np.log(np.where(fit, y, 1.0))

    def times(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        value = {name: (x[order[name]] if name in order else defaults[name]) for name in defaults}
        out = np.full(len(points), np.nan)
        if not all(
            np.isfinite(value[name]) or (name == "bandwidth" and value[name] == math.inf) for name in value
        ):
            return out
        for (collective, alg), group in points[rows].groupby(["collective", "algorithm"]).groups.items():
            i = np.asarray(group, dtype=np.int64)
            out[i] = collective_time(
                collective,
                alg,
                points["bytes"].to_numpy(float)[i],
                points["gpus"].to_numpy(float)[i],
                value["bandwidth"],
                value["latency"],
                value["gamma"],
            )
        return out

    def residual(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(times(x, fit)) - log_y)[fit]

    # Held without a default, a parameter drops out of the model: no latency term, no bandwidth term.
    neutral = {"latency": 0.0, "bandwidth": math.inf, "gamma": 0.0}
    if not np.isfinite(defaults["latency"]) and "latency" not in order:
        defaults["latency"] = 0.0
    if not np.isfinite(defaults["bandwidth"]) and "bandwidth" not in order:
        defaults["bandwidth"] = math.inf
    _identify(free, residual, int(fit.sum()))
    for f in free:
        if not f.identifiable:
            _hold(f, None, neutral[f.name])
    dof = _fit(free, residual, np.array([]), lambda f: _hold(f, None, neutral[f.name]))
    messages = _unidentified(free)
    for message in messages:
        warnings.warn(CalibrationWarning(message), stacklevel=2)
    x_final = np.array([f.value if f.identifiable else f.start for f in free], dtype=float)
    pred = times(x_final, np.ones(len(points), dtype=bool))
    notes = list(messages) + _dof_note(dof, free)
    if statistic is not None:
        notes.append(
            f"each point is the {statistic} over its operations of time_last_in (the time from "
            "the last rank entering to the last leaving; the mean duration where seen on "
            "one rank)"
        )

    batch = batch_size if batch_size is not None else _batch_size(trace)
    compute_rows, compute_notes = _compute_parameters(
        trace, batch, steps, workload, gpu, precision, optimizer
    )
    notes += compute_notes
    params_frame = (
        pd.concat([_params_frame(free), pd.DataFrame(compute_rows)], ignore_index=True)
        if compute_rows
        else _params_frame(free)
    )

    with np.errstate(divide="ignore", invalid="ignore"):
        error = (pred - y) / y
    points["variable"] = "time"
    points["units"] = "s"
    points["predicted"] = pred
    points["error"] = error
    points["fitted"] = fit
    points["note"] = ""
    order_cols = [
        "collective",
        "algorithm",
        "bytes",
        "gpus",
        "count",
        "variable",
        "units",
        "measured",
        "measured_min",
        "measured_max",
        "predicted",
        "error",
        "fitted",
        "note",
    ]
    points = points[order_cols]
    holdout = ~fit & np.isfinite(error)
    settings: dict[str, Any] = {
        "gpus": sorted(set(points["gpus"].tolist())),
        "bytes": sorted(set(points["bytes"].tolist())),
    }
    if points["collective"].nunique() == 1:
        settings["collective"] = str(points["collective"].iloc[0])
        settings["algorithm"] = str(points["algorithm"].iloc[0])
    for key, value in (("workload", workload), ("gpu", gpu), ("precision", precision), ("batch_size", batch)):
        if value is not None:
            settings[key] = value
    fit_text = (
        f"fit_on {fit_on!r}"
        if isinstance(fit_on, str)
        else ("all collective points" if fit_on is None else "the points selected by fit_on")
    )
    abs_error = np.abs(error)
    return Calibration(
        params=params_frame,
        points=points,
        mape_fit=float(np.nanmean(abs_error[fit])) if np.isfinite(abs_error[fit]).any() else math.nan,
        mape_holdout=float(np.mean(abs_error[holdout])) if holdout.any() else math.nan,
        max_error_holdout=float(np.max(abs_error[holdout])) if holdout.any() else math.nan,
        source=trace.source,
        name=", ".join(Path(f).parent.name or f for f in trace.files[:1]),
        fit_on=fit_text,
        kind="trace",
        notes=notes,
        model_kwargs={k: v for k, v in model_kwargs.items()},
        settings=settings,
    )


def _trace_algorithm(collective: str, algorithm: str | Mapping[str, str] | None) -> str:
    if isinstance(algorithm, Mapping):
        wanted = algorithm.get(collective)
    else:
        wanted = algorithm
    if wanted is None:
        return ALGORITHMS[collective][0]
    try:
        return normalize_algorithm(wanted, collective)
    except DlexploreError:
        return ALGORITHMS[collective][0]


def _compute_parameters(
    trace: Trace,
    batch: int | None,
    steps: Sequence[int] | None,
    workload: str | None,
    gpu: str | None,
    precision: str,
    optimizer: str,
) -> tuple[list[dict], list[str]]:
    """Compute time per sample (or per step) from the breakdown, and the efficiency it implies."""
    notes: list[str] = []
    bd = trace.breakdown(steps=steps)
    values = bd["time_compute"].values.ravel()
    values = values[np.isfinite(values) & (values > 0)]
    if not values.size:
        return [], ["the breakdown has no compute time: no compute parameter"]
    n = values.size
    median = float(np.median(values))
    # standard error of a median of n roughly normal values: sqrt(pi/2) s / sqrt(n)
    stderr = float(1.2533 * np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    rows = []
    if batch is None:
        notes.append("no batch size (give batch_size=): compute time is per step, not per sample")
        warnings.warn(CalibrationWarning(notes[-1]), stacklevel=3)
        rows.append(
            {
                "name": "time_compute_per_step",
                "group": "all",
                "value": median,
                "stderr": stderr,
                "units": "s",
                "default": math.nan,
                "identifiable": True,
                "points": n,
                "note": "median over ranks and steps of the breakdown's time_compute",
            }
        )
        return rows, notes
    per_sample = median / batch
    rows.append(
        {
            "name": "time_compute_per_sample",
            "group": "all",
            "value": per_sample,
            "stderr": stderr / batch,
            "units": "s/sample",
            "default": math.nan,
            "identifiable": True,
            "points": n,
            "note": f"median over ranks and steps of time_compute / {batch} samples",
        }
    )
    if workload is not None and gpu is not None:
        try:
            wl = catalog.workload(workload)
            dev = catalog.gpu(gpu)
            prec = normalize_precision(precision)
        except DlexploreError as exc:
            notes.append(f"no compute_efficiency: {exc}")
            return rows, notes
        peak = training_peak_flops(dev, prec)
        t_opt = optimizer_time(wl.params, optimizer, dev.memory_bandwidth_gbs)
        busy = median - t_opt
        if busy > 0:
            efficiency = (1 + BACKWARD_TO_FORWARD) * wl.flops_per_sample * batch / (peak * busy)
            rows.append(
                {
                    "name": "compute_efficiency",
                    "group": "all",
                    "value": efficiency,
                    "stderr": efficiency * stderr / busy if np.isfinite(stderr) else math.nan,
                    "units": "1",
                    "default": default_compute_efficiency(prec),
                    "identifiable": True,
                    "points": n,
                    "note": f"from time_compute with {wl.name} on {dev.name}",
                }
            )
    return rows, notes
