"""Calibration from a trace: :func:`calibrate_from_trace` fits ``latency`` (alpha) and ``bandwidth``
(1/beta) to the measured collective table, by least squares on the relative errors of each
collective's time against :func:`dlexplore.model.collective_time` (ring allreduce:
``2(p-1) alpha + 2(p-1)/p n beta``), and compute time per sample from the breakdown.

Kept whole: one calibration (a trace's collectives and compute), its steps each a function here.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import catalog
from ..errors import DlexploreError
from ..model.comm import ALGORITHMS, algorithm_for, collective_time
from ..model.compute import (
    BACKWARD_TO_FORWARD,
    default_compute_efficiency,
    normalize_precision,
    optimizer_time,
    training_peak_flops,
)
from ..traces.schema import Trace
from ._select import Selection, select
from .calibration import Calibration
from .least_squares import Free, dof_note, fit_free, hold, identify, params_frame, unidentified_messages
from .parameters import PARAMETERS, CalibrationWarning


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

    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    params = _checked(params, statistic, model_kwargs)

    points = _collective_points(trace, algorithm, statistic)
    selected = select(points, fit_on)
    y = points["measured"].to_numpy(float)
    fit = selected & np.isfinite(y) & (y > 0)
    if not fit.any():
        raise DlexploreError("no selected collective point has a positive measured time")

    free, pred, messages, dof = _fit(points, fit, y, params, network, model_kwargs)
    notes = list(messages) + dof_note(dof, free)
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
    params_table = (
        pd.concat([params_frame(free), pd.DataFrame(compute_rows)], ignore_index=True)
        if compute_rows
        else params_frame(free)
    )

    return _result(
        trace,
        points,
        pred,
        y,
        fit,
        fit_on,
        params_table,
        notes,
        model_kwargs,
        dict(workload=workload, gpu=gpu, precision=precision, batch_size=batch),
    )


def _checked(params: Sequence[str] | str, statistic: str | None, model_kwargs: dict) -> tuple[str, ...]:
    """The parameters to fit, after checking the arguments :func:`calibrate_from_trace` was given."""
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

    return params


def _collective_points(
    trace: Trace, algorithm: str | Mapping[str, str] | None, statistic: str | None
) -> pd.DataFrame:
    """One row per collective, algorithm, size and rank count (or per operation, ``statistic`` None)
    of the trace's collectives the alpha-beta model covers: its measured time (s) and spread."""
    from ..traces.collectives import collective_ops

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
    ops["algorithm"] = [algorithm_for(c, algorithm) for c in ops["collective"]]
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
    return points


def _fit(
    points: pd.DataFrame,
    fit: np.ndarray,
    y: np.ndarray,
    params: tuple[str, ...],
    network: str | None,
    model_kwargs: dict,
) -> tuple[list[Free], np.ndarray, list[str], int]:
    """Latency, bandwidth (and gamma) fitted to the ``fit`` points: the free parameters, every
    point's prediction (s), the warnings about parameters the points cannot determine, and the
    residual degrees of freedom."""
    link = catalog.network(network) if network else None
    defaults = {
        "latency": float(model_kwargs.get("latency", link.latency_s if link else math.nan)),
        "bandwidth": float(model_kwargs.get("bandwidth", link.bandwidth_gbs if link else math.nan)),
        "gamma": float(model_kwargs.get("gamma", 0.0)),
    }
    free = [
        Free(
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
    identify(free, residual, int(fit.sum()))
    for f in free:
        if not f.identifiable:
            hold(f, None, neutral[f.name])
    dof = fit_free(free, residual, np.array([]), lambda f: hold(f, None, neutral[f.name]))
    messages = unidentified_messages(free)
    for message in messages:
        warnings.warn(CalibrationWarning(message), stacklevel=3)
    x_final = np.array([f.value if f.identifiable else f.start for f in free], dtype=float)
    pred = times(x_final, np.ones(len(points), dtype=bool))
    return free, pred, messages, dof


def _result(
    trace: Trace,
    points: pd.DataFrame,
    pred: np.ndarray,
    y: np.ndarray,
    fit: np.ndarray,
    fit_on: Any,
    params_table: pd.DataFrame,
    notes: list[str],
    model_kwargs: dict,
    setup: dict,
) -> Calibration:
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
    settings.update({key: value for key, value in setup.items() if value is not None})
    fit_text = (
        f"fit_on {fit_on!r}"
        if isinstance(fit_on, str)
        else ("all collective points" if fit_on is None else "the points selected by fit_on")
    )
    abs_error = np.abs(error)
    return Calibration(
        params=params_table,
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
