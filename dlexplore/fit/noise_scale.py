"""The gradient noise scale of a user's run, with its uncertainty, and convergence against published points.

Two ways to ``B_noise`` (samples), the batch beyond which more GPUs stop cutting the steps to a
target (McCandlish et al. 2018, :mod:`dlexplore.model.convergence`):

- :func:`noise_scale_from_gradients`: the *simple noise scale* from squared gradient norms logged
  at two batch sizes on the same steps (their Appendix A.1). Each step gives unbiased estimates of
  ``|G|^2`` and ``tr(Sigma)``; these are averaged over the steps first and divided after, as the
  paper advises (the ratio of per-step estimates is biased and heavy-tailed). The standard error is
  the delta method on the two means: ``se(B)/B = sqrt(se_T^2/T^2 + se_G^2/G^2 - 2 cov/(T G))``.
- :func:`fit_noise_scale`: ``S_min`` and ``B_noise`` fitted to steps-to-target measured at several
  batch sizes (from loss curves with :func:`steps_to_threshold`), least squares on
  ``log S = log S_min + log(1 + B_noise / B)``, standard errors from the Jacobian as
  :func:`dlexplore.fit.calibrate` reports them (``s^2 (J^T J)^-1``; NaN without a residual degree
  of freedom). When the points show no bend (perfect scaling everywhere) ``B_noise`` is only
  bounded below, and the fit says so (``b_noise_lower_bound``).

:func:`fit_published_convergence` fits ``S_min`` and ``B_noise`` to a published convergence
dataset of steps to a target (the mean of the runs at each batch size, one point per batch, so
that a batch measured 28 times does not outweigh one measured 10 times), and
:func:`compare_convergence` lays the convergence model over such a dataset: steps predicted and
published, and the error per point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from ..model.convergence import ConvergenceParams, convergence, predict_convergence

__all__ = [
    "NoiseScale",
    "noise_scale_from_gradients",
    "fit_noise_scale",
    "steps_to_threshold",
    "noise_scale_from_runs",
    "fit_published_convergence",
    "compare_convergence",
]


@dataclass(frozen=True)
class NoiseScale:
    """An estimate of the noise scale.

    ``b_noise`` and ``b_noise_stderr`` in samples; ``s_min`` and ``s_min_stderr`` in steps (NaN for
    the gradient estimator, which says nothing of steps); ``g2`` (``|G|^2``) and ``trace_sigma``
    (``tr(Sigma)``, per-sample gradient variance summed over parameters) for the gradient
    estimator; ``points`` the measurements used; ``method`` how; ``note`` caveats.
    """

    b_noise: float
    b_noise_stderr: float
    method: str
    points: int
    s_min: float = math.nan
    s_min_stderr: float = math.nan
    g2: float = math.nan
    trace_sigma: float = math.nan
    b_noise_lower_bound: bool = False
    note: str = ""

    def params(self, **fields: Any) -> ConvergenceParams:
        """Convergence parameters with this ``s_min`` and ``b_noise`` (and the other fields given),
        for :func:`dlexplore.model.convergence.predict_convergence` and time to accuracy."""
        if math.isnan(self.s_min):
            raise DlexploreError(
                "this estimate has no s_min (the gradient estimator gives only "
                "B_noise): pass s_min=... measured at one batch size"
            )
        return ConvergenceParams(
            s_min=self.s_min,
            b_noise=self.b_noise,
            s_min_stderr=self.s_min_stderr,
            b_noise_stderr=self.b_noise_stderr,
            source=f"dlexplore.fit ({self.method}, {self.points} points)",
            **fields,
        )


def _finite_1d(name: str, values: object) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise DlexploreError(f"{name}: expected finite numbers, got {arr.tolist()[:8]}")
    return arr


def noise_scale_from_gradients(
    b_small: float, sq_norm_small: Sequence[float], b_big: float, sq_norm_big: Sequence[float]
) -> NoiseScale:
    """``B_simple`` (samples) from per-step squared gradient norms at two batch sizes.

    ``sq_norm_small[i]`` and ``sq_norm_big[i]`` are ``|G|^2`` of the gradient averaged over
    ``b_small`` and ``b_big`` samples at the same step ``i`` (in data-parallel training: one
    worker's local gradient and the allreduced one, as McCandlish et al. do). At least 2 steps.
    """
    small = _finite_1d("sq_norm_small", sq_norm_small)
    big = _finite_1d("sq_norm_big", sq_norm_big)
    if small.shape != big.shape:
        raise DlexploreError(
            f"sq_norm_small and sq_norm_big differ in length: {small.size} and {big.size} steps"
        )
    if not (0 < b_small < b_big):
        raise DlexploreError(f"need 0 < b_small < b_big samples, got {b_small!r} and {b_big!r}")
    if small.size < 2:
        raise DlexploreError("need at least 2 steps to estimate an uncertainty")
    g2_steps = (b_big * big - b_small * small) / (b_big - b_small)
    trace_steps = (small - big) / (1.0 / b_small - 1.0 / b_big)
    n = small.size
    g2, trace = g2_steps.mean(), trace_steps.mean()
    if not (g2 > 0):
        raise DlexploreError(
            f"the mean |G|^2 estimate is {g2:.3g} (<= 0): the gradient is drowned in noise at "
            "these batch sizes; log more steps or use a larger b_big"
        )
    cov = np.cov(np.vstack([trace_steps, g2_steps]), ddof=1) / n
    b = trace / g2
    rel2 = cov[0, 0] / trace**2 + cov[1, 1] / g2**2 - 2 * cov[0, 1] / (trace * g2)
    note = "" if trace > 0 else "tr(Sigma) came out <= 0: no noise measured, B_noise ~ 0"
    return NoiseScale(
        b_noise=float(b),
        b_noise_stderr=float(abs(b) * math.sqrt(max(rel2, 0.0))),
        method="simple noise scale from gradient norms (McCandlish et al. 2018, A.1)",
        points=n,
        g2=float(g2),
        trace_sigma=float(trace),
        note=note,
    )


def fit_noise_scale(batch_sizes: Sequence[float], steps: Sequence[float]) -> NoiseScale:
    """``S_min`` (steps) and ``B_noise`` (samples) fitted to steps-to-target at several batches.

    Least squares on ``log S`` (relative errors); at least 2 points, 3 for standard errors.
    """
    b = _finite_1d("batch_sizes", batch_sizes)
    s = _finite_1d("steps", steps)
    if b.shape != s.shape:
        raise DlexploreError(f"batch_sizes and steps differ in length: {b.size} and {s.size}")
    if np.any(b <= 0) or np.any(s <= 0):
        raise DlexploreError("batch sizes and steps must be > 0")
    if np.unique(b).size < 2:
        raise DlexploreError("need steps at 2 or more different batch sizes")

    from scipy.optimize import least_squares  # 0.2-0.4 s to import: on a fit, not with dlexplore

    def residuals(x: np.ndarray) -> np.ndarray:
        return x[0] + np.log1p(np.exp(x[1]) / b) - np.log(s)

    # Start from perfect scaling at the smallest batch (S B = E constant) and B_noise at the median.
    start = np.array([np.log(s.min()), np.log(np.median(b))])
    fit = least_squares(residuals, start, method="lm" if b.size > 2 else "trf")
    s_min, b_noise = float(np.exp(fit.x[0])), float(np.exp(fit.x[1]))
    m, k = b.size, 2
    se = np.array([math.nan, math.nan])
    if m > k:
        s2 = float(np.sum(fit.fun**2)) / (m - k)
        try:
            cov = s2 * np.linalg.inv(fit.jac.T @ fit.jac)
            se = np.sqrt(np.clip(np.diag(cov), 0.0, None))  # of the logs: relative errors
        except np.linalg.LinAlgError:
            se = np.array([math.inf, math.inf])
    lower = bool(b_noise > 10 * b.max())
    note = (
        "the points show no bend towards S_min: perfect scaling at every batch measured, so "
        f"B_noise is only known to exceed about {b.max():.4g}"
        if lower
        else ""
    )
    return NoiseScale(
        b_noise=b_noise,
        b_noise_stderr=b_noise * float(se[1]),
        s_min=s_min,
        s_min_stderr=s_min * float(se[0]),
        method="S = S_min (1 + B_noise / B) fitted to steps to target",
        points=m,
        b_noise_lower_bound=lower,
        note=note,
    )


def steps_to_threshold(
    steps: Sequence[float],
    values: Sequence[float],
    threshold: float,
    *,
    smooth: int = 1,
    lower_is_better: bool = True,
) -> float:
    """The first step at which a logged curve (loss, error) reaches ``threshold``.

    ``smooth`` > 1 takes a trailing moving average of that many points first (noisy training
    losses cross a threshold early by chance). Linear interpolation between the two logged points
    around the crossing; NaN when the curve never reaches the threshold.
    """
    x = _finite_1d("steps", steps)
    y = np.asarray(values, dtype=float).ravel()
    if x.shape != y.shape:
        raise DlexploreError(f"steps and values differ in length: {x.size} and {y.size}")
    if smooth > 1:
        kernel = np.ones(smooth) / smooth
        y = np.convolve(y, kernel, mode="full")[: y.size]
        y[: smooth - 1] = np.nan
    sign = 1.0 if lower_is_better else -1.0
    hit = np.flatnonzero(sign * (y - threshold) <= 0)
    if hit.size == 0:
        return math.nan
    i = int(hit[0])
    if i == 0 or not np.isfinite(y[i - 1]):
        return float(x[i])
    frac = (y[i - 1] - threshold) / (y[i - 1] - y[i])
    return float(x[i - 1] + frac * (x[i] - x[i - 1]))


def noise_scale_from_runs(
    runs: xr.Dataset,
    batch_sizes: Mapping[str, float],
    threshold: float,
    *,
    tag: str = "loss",
    smooth: int = 1,
    lower_is_better: bool = True,
) -> tuple[NoiseScale, pd.DataFrame]:
    """``S_min`` and ``B_noise`` from logged curves of runs at several global batch sizes.

    ``runs`` is :func:`dlexplore.traces.read_tensorboard`'s dataset (dims ``run``, ``step``);
    ``batch_sizes`` maps each run name to its global batch (samples). Returns the fit and a table
    of the runs' ``steps_to_threshold``.
    """
    if tag not in runs:
        raise DlexploreError(f"no scalar {tag!r} in the runs; they have {sorted(map(str, runs.data_vars))}")
    rows = []
    for name, batch in batch_sizes.items():
        if name not in runs["run"].values:
            raise DlexploreError(
                f"run {name!r} is not in the dataset; it has {[str(r) for r in runs['run'].values]}"
            )
        curve = runs[tag].sel(run=name).dropna("step")
        reached = steps_to_threshold(
            curve["step"].values, curve.values, threshold, smooth=smooth, lower_is_better=lower_is_better
        )
        rows.append({"run": name, "global_batch": float(batch), "steps_to_threshold": reached})
    table = pd.DataFrame(rows)
    ok = table["steps_to_threshold"].notna()
    if ok.sum() < 2:
        raise DlexploreError(f"fewer than 2 runs reach {tag} {threshold}: {table.to_dict('records')}")
    return fit_noise_scale(table.loc[ok, "global_batch"], table.loc[ok, "steps_to_threshold"]), table


def _select(published: xr.Dataset, select: Mapping[str, object]) -> xr.Dataset:
    if published.attrs.get("table") != "convergence":
        raise DlexploreError(
            "expected a convergence dataset (dlexplore.measured.load of one of available_convergence())"
        )
    keep = np.ones(published.sizes["point"], dtype=bool)
    for name, value in select.items():
        if name not in published.coords:
            raise DlexploreError(f"no coordinate {name!r}; the dataset has {list(published.coords)}")
        keep &= published[name].values == value
    return published.isel(point=np.flatnonzero(keep))


def fit_published_convergence(published: xr.Dataset, **select: object) -> tuple[NoiseScale, pd.DataFrame]:
    """``S_min`` (steps) and ``B_noise`` (samples) fitted to a published dataset of steps to a target.

    ``published`` is a convergence dataset (:func:`dlexplore.measured.load`) whose ``steps`` are
    steps *to a target* at each global batch (e.g. ``mlperf-rcp-resnet50``), not the length of
    fixed-budget runs; ``select`` keeps the points whose coordinates equal the values. The runs
    at each batch are averaged and :func:`fit_noise_scale` fits the means. Returns the fit and a
    table per batch: ``global_batch``, ``runs``, ``steps`` (mean), ``steps_std`` (standard
    deviation of the runs, ddof 1; NaN for one run), ``predicted`` (``S_min (1 + B_noise / B)``)
    and ``error`` (``(predicted - steps) / steps``).
    """
    ds = _select(published, select)
    if "steps" not in ds or not np.isfinite(ds["steps"].values).any():
        raise DlexploreError(
            f"{published.attrs.get('name', 'the dataset')} has no steps (nor samples or epochs "
            "with a samples_per_epoch line to derive them from)"
        )
    frame = pd.DataFrame({"global_batch": ds["global_batch"].values, "steps": ds["steps"].values})
    frame = frame[np.isfinite(frame["steps"])]
    table = (
        frame.groupby("global_batch")["steps"].agg(runs="count", steps="mean", steps_std="std").reset_index()
    )
    fit = fit_noise_scale(table["global_batch"].astype(float), table["steps"])
    table["predicted"] = fit.s_min * (1.0 + fit.b_noise / table["global_batch"].astype(float))
    table["error"] = (table["predicted"] - table["steps"]) / table["steps"]
    table.attrs.update(source=published.attrs.get("source", ""), name=published.attrs.get("name", ""))
    return fit, table


def compare_convergence(
    params: ConvergenceParams | str | Mapping[str, object], published: xr.Dataset, **select: object
) -> pd.DataFrame:
    """The convergence model at every point of a published convergence dataset.

    One row per point (``select`` keeps points whose coordinates equal the values, e.g.
    ``rule="lamb"``): ``global_batch``, ``setup``, ``steps`` published, ``predicted`` steps,
    ``error`` = (predicted - published) / published, ``reachable`` (False: the model says this
    batch does not reach the target, so there is no predicted step count).
    """
    p = convergence(params)
    ds = _select(published, select)
    model = predict_convergence(ds["global_batch"].astype(float), p)
    frame = pd.DataFrame(
        {
            "global_batch": ds["global_batch"].values,
            "setup": ds["setup"].values,
            "steps": ds["steps"].values,
            "predicted": model["steps_to_target"].values,
            "reachable": model["reachable"].values,
        }
    )
    frame["error"] = (frame["predicted"] - frame["steps"]) / frame["steps"]
    frame.attrs.update(source=f"{model.attrs['source']} vs {published.attrs['source']}")
    return frame
