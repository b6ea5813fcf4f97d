"""Prediction intervals of calibrated predictions, from the residuals and the parameters' uncertainty.

A calibration fits ``log(predicted / measured)`` by least squares (:mod:`dlexplore.fit.calibrate`).
For a new prediction ``y(theta)`` at the fitted parameters ``theta`` the linearised (delta-method)
prediction interval at level ``c`` is::

    var   = s^2 + g' C g             g = d log y / d theta (central differences),
                                     C = s^2 (J'J)^-1 the parameters' covariance,
                                     s^2 = sum r^2 / (m - k) the residual variance (log units)
    y_lo  = y exp(-q sqrt(var)),     y_hi = y exp(q sqrt(var)),   q = t_{m-k}((1 + c) / 2)

``s^2`` is what the fitted points scatter around the model (the model's own error on such points,
measured), ``g' C g`` how far the prediction moves within the parameters' uncertainty; Student's
``t`` with ``m - k`` degrees of freedom widens the band when few points were fitted. With no residual
degree of freedom (as many points as parameters) there is no estimate of ``s``: the band is NaN.
The level is nominal; :func:`dlexplore.calibrate`'s points and ``benchmarks/fidelity.py`` report how
often the band covers measurements the calibration did not see.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["DEFAULT_LEVEL", "BAND_VARIABLES", "t_quantile", "interval", "gradients", "BAND_TEXT"]

#: The nominal coverage of a band unless asked otherwise.
DEFAULT_LEVEL = 0.9
#: Variables a band is attached to when a prediction has them.
BAND_VARIABLES = (
    "step_time",
    "throughput",
    "tokens_per_s",
    "model_flops_per_gpu",
    "hardware_flops_per_gpu",
    "mfu",
    "efficiency",
    "time",
    "algbw",
    "busbw",
)
BAND_TEXT = (
    "linearised prediction interval: log prediction +- t_(m-k) x sqrt(s^2 + g'Cg), s^2 the "
    "calibration's residual variance, C its parameters' covariance, g the prediction's "
    "gradient in the parameters (dlexplore.fit.band)"
)


def t_quantile(level: float, dof: int) -> float:
    """The two-sided Student-t quantile for nominal coverage ``level`` with ``dof`` degrees of
    freedom (NaN when ``dof < 1``)."""
    if dof < 1 or not 0 < level < 1:
        return math.nan
    # scipy.special's inverse of the t distribution, which scipy.optimize has already imported:
    # scipy.stats (t.ppf, the same numbers) took 1.4 s to import, most of a first calibration's time
    from scipy.special import stdtrit

    return float(stdtrit(dof, (1 + level) / 2))


def gradients(
    evaluate: Callable[[Mapping[str, float]], np.ndarray],
    values: Mapping[str, float],
    bounds: Mapping[str, tuple[float, float]],
    scales: Mapping[str, float],
    base: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """``d log y / d theta_j`` by forward differences (backward at an upper bound) of ``evaluate``,
    which returns the predictions for a dict of parameter values: one evaluation per parameter
    beyond the prediction itself (a step of 1e-4 relative, so the truncation error is of that order
    while the band needs two digits). ``base`` is the prediction at ``values`` when the caller has
    it already."""
    out = {}
    if not values:
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        y0 = np.log(np.asarray(evaluate(dict(values)) if base is None else base, dtype=float))
        for name, value in values.items():
            step = 1e-4 * (abs(value) if value else scales.get(name, 1.0))
            upper = bounds.get(name, (-math.inf, math.inf))[1]
            moved = value + step if value + step <= upper else value - step
            y1 = np.log(np.asarray(evaluate({**values, name: moved}), dtype=float))
            out[name] = (y1 - y0) / (moved - value)
    return out


def interval(
    prediction: np.ndarray,
    grads: Mapping[str, np.ndarray],
    covariance: np.ndarray,
    names: Sequence[str],
    residual_variance: float,
    dof: int,
    level: float = DEFAULT_LEVEL,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds around ``prediction`` (module docstring); ``covariance`` is over
    ``names`` in their order, in the parameters' units."""
    y = np.asarray(prediction, dtype=float)
    var = np.full(y.shape, float(residual_variance))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            c = covariance[i, j]
            if np.isfinite(c) and c:
                var = var + grads[a] * grads[b] * c
    q = t_quantile(level, dof)
    half = q * np.sqrt(np.maximum(var, 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        return y * np.exp(-half), y * np.exp(half)
