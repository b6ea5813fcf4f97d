"""Calibrating the data-parallel model to traced runs, and predicting the runs held out.

:func:`calibrate_traces` takes the measured points of one or more traced runs of one job
(:func:`dlexplore.fit.trace_setup.trace_point`) and the model's settings (workload, GPU, network,
links, ...), and fits, from the runs chosen by ``fit``:

``bandwidth`` and ``latency`` of each link
    from the runs' collectives (:func:`dlexplore.fit.calibrate_from_trace`: the fastest repetition
    of each message size, alpha-beta with the explorer's algorithm): the intra-node link's for runs
    whose ranks fit in one node, the network's for the others; several runs of one link are
    combined weighting each by its inverse variance. The model's figures are the collectives' ones
    divided by what the model applies to a link (the catalog link's ``efficiency``, and kernel
    TCP's ``tcp_efficiency`` on Ethernet), so the model's transfers take the measured times.
``overlap``
    the share of the communication the runs hid behind compute, ``(time_comm - exposed) /
    time_comm``, measured per rank and step (its standard error from their scatter);
``compute_efficiency``
    by least squares of ``log`` step time over every kept step and rank of the fitted runs, the two
    above held: the step time the model gives to compute then holds everything of the measured step
    that is not communication, including what the model has no term for (data loading, host
    overhead, idle time); :attr:`TraceCalibration.explained` itemises that split.

The result is a :class:`~dlexplore.fit.Calibration` (``kind="training"``): its covariance
(diagonal: the parameters come from different measurements) and residual variance (the steps'
scatter about the fitted model, ``dof`` = steps - 1) give every prediction its interval through
:meth:`~dlexplore.fit.Calibration.add_band`; its ``points`` hold every run, fitted or held out,
with the calibrated prediction's error. :func:`dlexplore.fit.save_calibration` and
:func:`dlexplore.fit.load_calibration` write and read it as JSON.

Kept whole: the three fits above are one protocol (each holds what the one before found), and the
interval and the report read the same fitted parameters and runs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .. import catalog
from ..errors import DlexploreError
from ..model import predict
from ..model.gradsync import resolve_transport
from .band import DEFAULT_LEVEL, interval
from .calibrate import PARAMETERS, Calibration, CalibrationWarning, calibrate_from_trace
from .trace_point import TracePoint

__all__ = ["calibrate_traces", "link_factor", "TraceCalibration"]


def link_factor(link: catalog.Link | None, kind: str) -> float:
    """What the model multiplies a link's bandwidth by before its collectives use it: the catalog
    link's ``efficiency``, and between nodes kernel TCP's ``tcp_efficiency`` on Ethernet."""
    if link is None:
        return 1.0
    factor = float(link.efficiency)
    if kind == "network" and resolve_transport("auto", link) == "tcp":
        factor *= float(catalog.model_default("tcp_efficiency"))
    return factor


def _row(name: str, value: float, stderr: float, default: float, points: int, note: str) -> dict:
    spec = PARAMETERS[name]
    finite = np.isfinite(value)
    return {
        "name": name,
        "group": "all",
        "value": float(value) if finite else math.nan,
        "stderr": float(stderr),
        "units": spec.units,
        "default": float(default),
        "identifiable": bool(finite),
        "points": int(points),
        "note": note,
    }


def _links(
    fitted: Sequence[TracePoint], settings: Mapping[str, Any], notes: list[str]
) -> dict[str, tuple[float, float, int]]:
    """Per link kind ("intra", "network"): effective (bandwidth GB/s, its stderr) and
    (latency s, its stderr), combined over the fitted runs, and how many runs."""
    per_node = int(settings.get("gpus_per_node") or 1)
    found: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for p in fitted:
        if p.gpus < 2 or not len(p.collectives):
            continue
        kind = "intra" if p.gpus <= per_node else "network"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CalibrationWarning)
            try:
                cal = calibrate_from_trace(
                    p.trace,
                    batch_size=p.batch_size,
                    algorithm=settings.get("algorithm"),
                    steps=p.steps,
                )
            except DlexploreError as err:
                notes.append(f"{p.label}: no link fit ({err})")
                continue
        notes.extend(f"{p.label}: {w.message}" for w in caught if issubclass(w.category, CalibrationWarning))
        rows = cal.params.set_index("name")
        for name in ("bandwidth", "latency"):
            if name in rows.index and bool(rows.loc[name, "identifiable"]):
                value, se = float(rows.loc[name, "value"]), float(rows.loc[name, "stderr"])
                found.setdefault(kind, {}).setdefault(name, []).append((value, se))
    out = {}
    for kind, values in found.items():
        combined = {}
        for name, items in values.items():
            ses = np.array([s for _, s in items], dtype=float)
            vals = np.array([v for v, _ in items], dtype=float)
            if np.all(np.isfinite(ses) & (ses > 0)):
                w = 1.0 / ses**2
                combined[name] = (float((w * vals).sum() / w.sum()), float(1.0 / math.sqrt(w.sum())))
            else:
                # exactly determined fits carry no variance: their mean, its spread if several
                spread = float(vals.std(ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else math.nan
                combined[name] = (float(vals.mean()), spread)
        runs = len(values.get("latency", values.get("bandwidth", [])))
        nan = (math.nan, math.nan)
        out[kind] = (combined.get("bandwidth", nan), combined.get("latency", nan), runs)
    return out


def _overlap(fitted: Sequence[TracePoint]) -> tuple[float, float, int]:
    fractions = []
    for p in fitted:
        if p.gpus < 2:  # one rank's "allreduce" moves nothing: no overlap to measure
            continue
        bd = p.breakdown()
        comm, exposed = bd["time_comm"].values.ravel(), bd["time_comm_exposed"].values.ravel()
        ok = np.isfinite(comm) & np.isfinite(exposed) & (comm > 0)
        fractions.extend(np.clip((comm[ok] - exposed[ok]) / comm[ok], 0.0, 1.0).tolist())
    if not fractions:
        return math.nan, math.nan, 0
    values = np.array(fractions)
    se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else math.nan
    return float(values.mean()), se, int(values.size)


def _step_observations(p: TracePoint) -> np.ndarray:
    values = p.breakdown()["step_time"].values.ravel().astype(float)
    return values[np.isfinite(values) & (values > 0)]


def _link_rows(
    fitted: Sequence[TracePoint], base: Mapping[str, Any], notes: list[str]
) -> tuple[dict[str, float], list[dict]]:
    """Each link's bandwidth and latency from the fitted runs' collectives, in the model's terms
    (the collectives' figures divided by what the model applies to the link)."""
    network = base.get("network")
    net = catalog.network(network) if network is not None else None
    intra = catalog.network(base.get("intra_link") or "PCIe3")
    params: dict[str, float] = {}
    rows: list[dict] = []
    for kind, ((bw, bw_se), (lat, lat_se), runs) in _links(fitted, base, notes).items():
        link = intra if kind == "intra" else net
        factor = link_factor(link, kind)
        names = ("intra_bandwidth", "intra_latency") if kind == "intra" else ("bandwidth", "latency")
        where = "the intra-node link" if kind == "intra" else "the network"
        note = f"{where}, from the collectives of {runs} run(s); effective {bw:.4g} GB/s"
        if np.isfinite(bw):
            params[names[0]] = bw / factor
            default = link.bandwidth_gbs if link is not None else math.nan
            rows.append(_row(names[0], bw / factor, bw_se / factor, default, runs, note + f" / {factor:.3g}"))
        if np.isfinite(lat):
            params[names[1]] = lat
            default = link.latency_s if link is not None else math.nan
            rows.append(_row(names[1], lat, lat_se, default, runs, note.split(";")[0]))
    return params, rows


def _fit_compute_efficiency(
    fitted: Sequence[TracePoint], model: Callable[[TracePoint, Mapping[str, float]], Any]
) -> tuple[float, float, float, int, int]:
    """Compute efficiency by least squares of log step time over every kept step and rank of the
    fitted runs: ``(efficiency, its standard error, residual variance, dof, observations)``."""
    observed = [(p, np.log(_step_observations(p))) for p in fitted]
    m = sum(o.size for _, o in observed)
    if m == 0:
        raise DlexploreError("calibrate_traces: the fitted runs have no measured step")

    def residuals(eff: float) -> np.ndarray:
        out = []
        for p, logs in observed:
            step = float(model(p, {"compute_efficiency": eff})["step_time"])
            out.append(np.log(step) - logs)
        return np.concatenate(out)

    from scipy.optimize import minimize_scalar

    spec = PARAMETERS["compute_efficiency"]
    best = minimize_scalar(
        lambda x: float(np.sum(residuals(math.exp(x)) ** 2)),
        bounds=(math.log(spec.lower), math.log(spec.upper)),
        method="bounded",
        options={"xatol": 1e-6},
    )
    eff = math.exp(best.x)
    r = residuals(eff)
    dof = m - 1
    s2 = float(np.sum(r**2) / dof) if dof > 0 else math.nan
    h = 1e-4 * eff
    jac = (residuals(eff + h) - r) / h
    var = s2 / float(np.sum(jac**2)) if np.sum(jac**2) > 0 else math.inf
    return eff, math.sqrt(var), s2, dof, m


def _runs_table(
    points: Sequence[TracePoint],
    chosen: np.ndarray,
    model: Callable[[TracePoint, Mapping[str, float]], Any],
    band: Callable[[TracePoint], tuple[float, float]],
) -> pd.DataFrame:
    """Every run, fitted or held out: measured and calibrated throughput, error and band."""
    table = []
    for p, c in zip(points, chosen, strict=True):
        ds = model(p, {})
        predicted = float(ds["throughput"])
        table.append(
            {
                "label": p.label,
                "gpus": p.gpus,
                "batch_size": p.batch_size,
                "variable": "throughput",
                "units": "samples/s",
                "measured": p.throughput,
                "predicted": predicted,
                "error": (predicted - p.throughput) / p.throughput,
                "fitted": bool(c),
                "step_time": p.step_time,
                "predicted_step_time": float(ds["step_time"]),
                "note": "",
            }
        )
    frame = pd.DataFrame(table)
    bands = [band(p) for p in points]
    frame["lower"] = [lo for lo, _ in bands]
    frame["upper"] = [hi for _, hi in bands]
    frame["in_band"] = (frame["measured"] >= frame["lower"]) & (frame["measured"] <= frame["upper"])
    return frame


def calibrate_traces(
    points: Sequence[TracePoint],
    settings: Mapping[str, Any],
    *,
    fit: Sequence[bool] | None = None,
    level: float = DEFAULT_LEVEL,
) -> TraceCalibration:
    """Fit the model to the traced runs ``fit`` selects (default all) and predict every run
    (module docstring).

    ``settings`` are :func:`dlexplore.predict`'s arguments for the job (``workload`` as a name or
    :class:`~dlexplore.catalog.Workload`, ``gpu``, ``network``, ``precision``, ``algorithm``,
    ``gpus_per_node``, ``intra_link``, and any model keyword); each run's own GPU count and batch
    per GPU replace ``gpus`` and ``batch_size``. Returns a :class:`TraceCalibration`.
    """
    points = list(points)
    if not points:
        raise DlexploreError("calibrate_traces: no traced run")
    chosen = np.ones(len(points), dtype=bool) if fit is None else np.asarray(list(fit), dtype=bool)
    if chosen.shape != (len(points),) or not chosen.any():
        raise DlexploreError(f"calibrate_traces: fit must choose some of the {len(points)} runs")
    for p in points:
        if not p.batch_size:
            raise DlexploreError(f"{p.label}: no batch size; the trace does not say it, so give it")
    base = {k: v for k, v in settings.items() if k not in ("gpus", "batch_size", "buckets")}
    fitted = [p for p, c in zip(points, chosen, strict=True) if c]
    notes: list[str] = []
    params, rows = _link_rows(fitted, base, notes)
    ov, ov_se, ov_n = _overlap(fitted)
    if np.isfinite(ov):
        params["overlap"] = ov
        rows.append(_row("overlap", ov, ov_se, math.nan, ov_n, "measured share of communication hidden"))

    def model(p: TracePoint, extra: Mapping[str, float]) -> Any:
        return predict(gpus=p.gpus, batch_size=p.batch_size, **{**base, **params, **extra})

    eff, eff_se, s2, dof, m = _fit_compute_efficiency(fitted, model)
    spec = PARAMETERS["compute_efficiency"]
    if eff <= spec.lower * 1.001 or eff >= spec.upper * 0.999:
        notes.append(f"compute_efficiency reached its bound {eff:.3g}: the step time cannot be matched")
    params["compute_efficiency"] = eff
    how = "least squares of log step time over every kept step and rank, the links and overlap held"
    rows.insert(0, _row("compute_efficiency", eff, eff_se, math.nan, m, how))
    frame = pd.DataFrame(rows)
    cov = pd.DataFrame(
        np.diag([r_["stderr"] ** 2 if np.isfinite(r_["stderr"]) else math.nan for r_ in rows]),
        index=frame["name"],
        columns=frame["name"],
    )
    points_frame = _runs_table(
        points,
        chosen,
        model,
        lambda p: _band(lambda extra: model(p, extra), cov, params, s2, dof, level),
    )
    err = np.abs(points_frame["error"].to_numpy(float))
    held = ~points_frame["fitted"].to_numpy(bool)
    wl = base.get("workload")
    cal = TraceCalibration(
        params=frame,
        points=points_frame,
        mape_fit=float(np.mean(err[~held])),
        mape_holdout=float(np.mean(err[held])) if held.any() else math.nan,
        max_error_holdout=float(np.max(err[held])) if held.any() else math.nan,
        source="; ".join(p.setup.source or p.label for p in points),
        name=", ".join(p.label for p in fitted),
        fit_on="the traced runs " + ", ".join(f"{p.label} ({p.gpus} GPUs)" for p in fitted),
        kind="training",
        notes=notes,
        model_kwargs={},
        settings={
            **{k: (getattr(v, "name", v)) for k, v in base.items() if k != "workload"},
            "workload": getattr(wl, "name", wl),
        },
        covariance=cov,
        residual_variance=s2,
        dof=dof,
        level=level,
    )
    cal.explained = [_explained(p, model(p, {})) for p in points]
    return cal


def _band(
    evaluate: Any, cov: pd.DataFrame, params: Mapping[str, float], s2: float, dof: int, level: float
) -> tuple[float, float]:
    """The interval of one run's calibrated throughput (samples/s), :mod:`dlexplore.fit.band`."""
    names = [n for n in cov.index if np.isfinite(cov.loc[n, n])]
    y0 = float(evaluate({})["throughput"])
    grads = {}
    for n in names:
        value = params[n]
        step = 1e-4 * (abs(value) or PARAMETERS[n].typical)
        moved = value + step if value + step <= PARAMETERS[n].upper else value - step
        y1 = float(evaluate({n: moved})["throughput"])
        grads[n] = np.array([(math.log(y1) - math.log(y0)) / (moved - value)])
    c = np.array([[cov.loc[a, b] for b in names] for a in names]).reshape(len(names), len(names))
    lo, hi = interval(np.array([y0]), grads, c, names, s2, dof, level)
    return float(lo[0]), float(hi[0])


def _explained(p: TracePoint, ds: Any) -> dict[str, float]:
    """The measured step (s) beside the calibrated model's: what each holds."""
    return {
        "label": p.label,
        "measured_step": p.step_time,
        "measured_compute": p.time_compute,
        "measured_comm": p.time_comm,
        "measured_exposed": p.time_comm_exposed,
        "measured_data": p.time_data,
        "measured_idle": p.time_idle,
        "model_step": float(ds["step_time"]),
        "model_compute": float(ds["time_compute"]),
        "model_comm": float(ds["time_comm"]),
        "model_exposed": float(ds["time_comm_exposed"]),
    }


class TraceCalibration(Calibration):
    """A :class:`~dlexplore.fit.Calibration` from traced runs, with :attr:`explained`: for every run
    the measured step and its parts beside the calibrated model's (seconds)."""

    explained: list[dict[str, float]]

    def report(self) -> list[str]:
        """The calibration in sentences: each parameter with its uncertainty, the error on the
        runs fitted and held out, and what the fitted compute time holds."""
        lines = []
        for row in self.params.itertuples():
            se = row.stderr
            shown_se = (
                f" ± {_fmt(se, row.units)}" if np.isfinite(se) else " (exactly determined: no uncertainty)"
            )
            lines.append(f"{row.name} = {_fmt(row.value, row.units)}{shown_se}: {row.note}")
        for row in self.points.itertuples():
            kind = "fitted" if row.fitted else "held out"
            many = "s" if row.gpus != 1 else ""
            lines.append(
                f"{row.label} ({row.gpus} GPU{many}, {kind}): measured {row.measured:,.4g} samples/s, "
                f"calibrated "
                f"{row.predicted:,.4g} ({row.error:+.1%}), {self.level:.0%} interval "
                f"{row.lower:,.4g} to {row.upper:,.4g}"
            )
        for e in self.explained:
            other = e["measured_data"] + e["measured_idle"]
            lines.append(
                f"{e['label']}: of the measured {e['measured_step'] * 1e3:.3g} ms per step, compute "
                f"{e['measured_compute'] * 1e3:.3g} ms, communication {e['measured_comm'] * 1e3:.3g} ms "
                f"({e['measured_exposed'] * 1e3:.3g} exposed), data loading and idle {other * 1e3:.3g} ms; "
                f"the model's compute {e['model_compute'] * 1e3:.3g} ms holds what is not communication"
            )
        return lines + [f"note: {n}" for n in self.notes]


def _fmt(value: float, units: str) -> str:
    if not np.isfinite(value):
        return "n/a"
    if units == "s":
        return f"{value * 1e6:.3g} µs"
    return f"{value:.3g} {units}" if units not in ("1", "") else f"{value:.3g}"
