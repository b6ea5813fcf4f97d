"""The fitter every calibration shares: free parameters (:class:`Free`, one per parameter and group
of points), the identifiability check, least squares on the relative error with bounds, the search of
whole-number parameters, standard errors and the prediction intervals of the result.

See :mod:`dlexplore.fit.calibrate` for the method in words.

Kept whole: the fitter's stages (identifiability, bounded least squares, the grid of whole numbers,
standard errors, intervals) share the free parameters' state and are used in this order by every
calibration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, suggest
from .band import gradients, interval
from .calibration import Calibration, _num
from .parameters import _DEPENDENT, _PROBE, _ZERO, PARAMETERS, ParameterSpec
from .point_model import PointModel
from .points import canonical, is_blank


@dataclass
class Free:
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
    def spec(self) -> ParameterSpec:
        return PARAMETERS.get(self.name, ParameterSpec("", -math.inf, math.inf, 1.0, self.name))

    @property
    def scale(self) -> float:
        return abs(self.start) if self.start and np.isfinite(self.start) else self.spec.typical


def free_label(free: Free) -> str:
    return free.name if free.group == "all" else f"{free.name} [{free.group}]"


def identify(free: list[Free], residual: Callable[[np.ndarray], np.ndarray], m: int) -> None:
    """Mark the parameters the fitted points cannot determine (module docstring), with the reason
    in ``note``."""
    x0 = np.array([f.start for f in free], dtype=float)
    r0 = residual(x0)
    basis: list[np.ndarray] = []
    kept: list[str] = []
    for j, f in enumerate(free):
        if f.spec.integer:
            continue  # whole numbers are searched on a grid (fit_free)
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
        kept.append(free_label(f))


def unidentified_messages(free: list[Free]) -> list[str]:
    """One warning per parameter the points could not determine: why, and what it was held at."""
    return [
        f"{free_label(f)} cannot be determined from these points: {f.note}"
        for f in free
        if not f.identifiable
    ]


def bounded_least_squares(
    free: list[Free], residual: Callable[[np.ndarray], np.ndarray], fixed: np.ndarray
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


def dof_note(dof: int, free: list[Free]) -> list[str]:
    if dof <= 0 and any(f.identifiable and not f.spec.integer for f in free):
        return [
            "as many fitted points as parameters: no residual is left to estimate the noise, so "
            "the standard errors are unknown (NaN); fit more points for them"
        ]
    return []


def servers_candidates(gpus: np.ndarray) -> np.ndarray:
    top = int(max(gpus.max(), 1)) if gpus.size else 1
    if top <= 64:
        return np.arange(1, top + 1)
    return np.unique(np.round(np.geomspace(1, top, 48)).astype(int))


def fit_free(
    free: list[Free],
    residual: Callable[[np.ndarray], np.ndarray],
    server_gpus: np.ndarray,
    hold: Callable[[Free], None],
) -> int:
    """Fit the identifiable parameters in place (``servers`` on a grid); return the residual
    degrees of freedom.

    A parameter the best fit drives to where it no longer changes any fitted prediction (a
    bandwidth run off towards infinity: the Jacobian is singular in its direction, ``stderr`` inf)
    was not determined after all: it is held with ``hold`` and the others are fitted again.
    """
    for _ in range(len(free) + 1):
        dof = fit_free_once(free, residual, server_gpus)
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


def fit_free_once(
    free: list[Free], residual: Callable[[np.ndarray], np.ndarray], server_gpus: np.ndarray
) -> int:
    for f in free:
        if f.identifiable:
            f.note = ""  # a bound reached in an earlier pass
    x0 = np.array([f.start for f in free], dtype=float)
    grid = [j for j, f in enumerate(free) if f.spec.integer and f.identifiable]
    if not grid:
        return bounded_least_squares(free, residual, x0)[1]
    # Coordinate descent: fit the others at the current number of servers, then scan every
    # candidate number with the others held, until the number stays (a joint fit at every
    # candidate costs 20-50x more for the same answer on these smooth costs).
    j = grid[0]
    f = free[j]
    candidates = servers_candidates(server_gpus)
    current = float(np.clip(round(f.start), candidates[0], candidates[-1]))
    costs = np.zeros(len(candidates))
    dof = 0
    for _ in range(8):
        x = np.array([g.start for g in free], dtype=float)
        x[j] = current
        _, dof = bounded_least_squares(free, residual, x)
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


def hold(f: Free, defaults: np.ndarray | None, neutral: float | None = None) -> None:
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


def normalize_per(per: Any, params: Sequence[str], columns: Sequence[str]) -> dict[str, tuple[str, ...]]:
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


def free_parameters(
    params: Sequence[str], per_map: dict, model: PointModel, frame: pd.DataFrame, selected: np.ndarray
) -> list[Free]:
    free = []
    for name in params:
        defaults = model.defaults[name]
        given = model.kwargs.get(name)
        columns = per_map.get(name, ())
        if columns:
            rows = list(frame[list(columns)].itertuples(index=False))
            keys = [tuple(canonical(c, str(v)) for c, v in zip(columns, row, strict=True)) for row in rows]
            codes, uniques = pd.factorize(pd.Series(keys, dtype=object))
            groups = []
            for g, key in enumerate(uniques):
                first = rows[int(np.flatnonzero(codes == g)[0])]  # labelled as the table writes it
                if all(is_blank(v) for v in first):
                    continue  # points that name no group keep their defaults
                label = ", ".join(f"{c}={v}" for c, v in zip(columns, first, strict=True))
                groups.append((label, codes == g, tuple(key)))
            if not groups:
                raise DlexploreError(
                    f"per {name}: every point's {', '.join(columns)} is blank, so no group is left to fit"
                )
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
            free.append(Free(name, label, members, default, start, 0, key=key))
    return free


def covariance_frame(free: list[Free]) -> pd.DataFrame:
    """The fitted parameters' covariance (their units), labelled like :func:`free_label`; NaN where
    a parameter was not fitted."""
    labels = [free_label(f) for f in free]
    matrix = np.full((len(free), len(free)), math.nan)
    for i, f in enumerate(free):
        if f.identifiable:
            for j, value in f.cov.items():
                matrix[i, j] = value
    return pd.DataFrame(matrix, index=labels, columns=labels)


def with_uncertainty(
    result: Calibration,
    free: list[Free],
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
    names = [free_label(free[j]) for j in active]

    def evaluate(values: Mapping[str, float]) -> np.ndarray:
        y = x.copy()
        for j in active:
            y[j] = values[free_label(free[j])]
        return predict_all(y)

    pred = result.points["predicted"].to_numpy(dtype=float)
    grads = gradients(
        evaluate,
        {free_label(free[j]): float(x[j]) for j in active},
        {free_label(free[j]): (free[j].spec.lower, free[j].spec.upper) for j in active},
        {free_label(free[j]): free[j].scale for j in active},
        base=pred,
    )
    cov = result.covariance.loc[names, names].to_numpy() if names else np.zeros((0, 0))
    lower, upper = interval(pred, grads, cov, names, result.residual_variance, result.dof, result.level)
    measured = result.points["measured"].to_numpy(dtype=float)
    result.points["lower"] = lower
    result.points["upper"] = upper
    result.points["in_band"] = (measured >= lower) & (measured <= upper)
    return result


def params_frame(free: list[Free]) -> pd.DataFrame:
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
