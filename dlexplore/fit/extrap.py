"""Empirical scaling models in Extra-P's Performance Model Normal Form.

Extra-P (Calotoiu, Hoefler, Poke & Wolf, "Using automated performance modeling to find scalability
bugs in complex codes", SC13) describes how a metric ``y`` (a step time, a throughput) grows with
the number of processes ``p`` by a sum of a few terms of the *Performance Model Normal Form*::

    f(p) = c + sum_k a_k * p^(i_k) * log2(p)^(j_k)

It tries every hypothesis built from a fixed set of exponent pairs ``(i, j)``, fits the
coefficients of each by linear least squares, and keeps the one with the smallest
leave-one-out cross-validated SMAPE (symmetric mean absolute percentage error). The model says
nothing about *why* the metric grows: it is the baseline an analytical model must beat when both
extrapolate from the same measurements.

This module follows Extra-P 4's single-parameter modeler (``extrap/modelers/single_parameter/
basic.py`` and ``abstract_base.py``, ``extrap/entities/hypotheses.py`` in github.com/extra-p/extrap):

- the building blocks are Extra-P's default exponent pairs with logarithms (:data:`BUILDING_BLOCKS`,
  42 pairs from ``p^(1/4)`` to ``p^3 * log2(p)``); Extra-P drops the log terms when a ``p`` is
  below 1, and so does :func:`fit_scaling`;
- a hypothesis is the constant alone or the constant plus one term (Extra-P's default), or, on
  request, plus two terms built from two different blocks (the SC13 paper's ``n = 2``);
  coefficients of either sign;
- a hypothesis whose term contributes less than 0.05% of the measured value at every point is
  ignored (Extra-P's ``epsilon``), so an exact fit is not diluted by near-zero extra terms;
- ``smape`` is the leave-one-out SMAPE in percent, ``2 |predicted - actual| / (|actual| +
  |predicted|)`` averaged over the points, each predicted by the model fitted to the others;
  ``ar2`` is the adjusted coefficient of determination of the fit to all points,
  ``1 - (1 - R^2) (n - 1) / (n - terms - 1)``.

Where it departs from Extra-P: the constant hypothesis is cross-validated like the others (Extra-P
compares it by its in-sample SMAPE); among hypotheses whose SMAPE is within one standard error of
the smallest, the one with the fewest terms wins (Extra-P takes the smallest); and a hypothesis needs
one more distinct ``p`` than it has coefficients (so that leaving any point out still determines
it); Extra-P only warns below five points, here fewer than three distinct ``p`` are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np
import numpy.typing as npt

from ..errors import DlexploreError

__all__ = ["BUILDING_BLOCKS", "Term", "ScalingModel", "fit_scaling", "MIN_TERM_CONTRIBUTION"]

#: Extra-P's default building blocks with log terms, as (numerator, denominator, log exponent):
#: ``p^(num/den) * log2(p)^log`` (SingleParameterModeler.create_default_building_blocks).
_EXTRAP_DEFAULTS = (
    (0, 1, 1),
    (0, 1, 2),
    (1, 4, 0),
    (1, 3, 0),
    (1, 4, 1),
    (1, 3, 1),
    (1, 4, 2),
    (1, 3, 2),
    (1, 2, 0),
    (1, 2, 1),
    (1, 2, 2),
    (2, 3, 0),
    (3, 4, 0),
    (2, 3, 1),
    (3, 4, 1),
    (4, 5, 0),
    (2, 3, 2),
    (3, 4, 2),
    (1, 1, 0),
    (1, 1, 1),
    (1, 1, 2),
    (5, 4, 0),
    (5, 4, 1),
    (4, 3, 0),
    (4, 3, 1),
    (3, 2, 0),
    (3, 2, 1),
    (3, 2, 2),
    (5, 3, 0),
    (7, 4, 0),
    (2, 1, 0),
    (2, 1, 1),
    (2, 1, 2),
    (9, 4, 0),
    (7, 3, 0),
    (5, 2, 0),
    (5, 2, 1),
    (5, 2, 2),
    (8, 3, 0),
    (11, 4, 0),
    (3, 1, 0),
    (3, 1, 1),
)

#: The exponent pairs ``(i, j)`` of the terms ``p^i * log2(p)^j`` that hypotheses are built from.
BUILDING_BLOCKS: tuple[tuple[Fraction, int], ...] = tuple(
    (Fraction(num, den), log) for num, den, log in _EXTRAP_DEFAULTS
)

#: A term whose largest contribution ``|a * p^i * log2(p)^j / y|`` over the points is below this
#: fraction makes its hypothesis invalid (Extra-P's ``epsilon``, 0.0005).
MIN_TERM_CONTRIBUTION = 0.0005

# Leave-one-out needs the point left out to be predictable from the others: a leverage this close
# to 1 means the others do not determine the coefficients.
_LEVERAGE_LIMIT = 1.0 - 1e-9


@dataclass(frozen=True)
class Term:
    """One term ``coefficient * p^poly * log2(p)^log`` (coefficient in the units of ``y``;
    ``stderr`` its standard error, same units)."""

    coefficient: float
    poly: Fraction
    log: int
    stderr: float = float("nan")

    def basis(self, p: npt.ArrayLike) -> np.ndarray:
        """``p^poly * log2(p)^log`` without the coefficient (1 where both exponents are 0)."""
        return _basis(np.asarray(p, dtype=float), self.poly, self.log)

    def evaluate(self, p: npt.ArrayLike) -> np.ndarray:
        """The term's value at ``p``, in the units of ``y``."""
        return self.coefficient * self.basis(p)

    def text(self, variable: str = "p") -> str:
        """The factor without its coefficient: ``p^(1/2) * log2(p)``."""
        parts = []
        if self.poly != 0:
            if self.poly == 1:
                parts.append(variable)
            elif self.poly.denominator == 1:
                parts.append(f"{variable}^{self.poly.numerator}")
            else:
                parts.append(f"{variable}^({self.poly.numerator}/{self.poly.denominator})")
        if self.log:
            parts.append(f"log2({variable})" + (f"^{self.log}" if self.log != 1 else ""))
        return " * ".join(parts) if parts else "1"


@dataclass(frozen=True)
class ScalingModel:
    """An Extra-P-style model ``c + sum a_k p^i_k log2(p)^j_k`` with its fit quality.

    ``constant`` and every term's coefficient are in the units of the fitted metric ``y``, with
    their standard errors (``constant_stderr``, ``Term.stderr``: the usual least-squares estimate
    ``s^2 (X^T X)^-1`` with ``s^2 = rss / (n - coefficients)``). ``rss`` (units of ``y``
    squared) and ``ar2`` describe the fit to all ``n_points`` points; ``smape`` (percent) is the
    leave-one-out cross-validated SMAPE the hypothesis was chosen by (when ``selection == "cv"``;
    computed all the same when chosen by ``"ar2"``). ``p_range`` is the smallest and largest ``p``
    fitted: beyond it, :meth:`predict` extrapolates. ``hypotheses`` is
    the number of hypotheses compared.
    """

    constant: float
    terms: tuple[Term, ...]
    rss: float
    smape: float
    ar2: float
    n_points: int
    p_range: tuple[float, float]
    selection: str
    hypotheses: int
    variable: str = "p"
    constant_stderr: float = float("nan")

    def predict(self, p: npt.ArrayLike) -> np.ndarray | float:
        """The model at ``p`` (scalar or array), in the units of the fitted metric."""
        arr = np.asarray(p, dtype=float)
        if np.any(arr <= 0) or not np.all(np.isfinite(arr)):
            raise DlexploreError(f"{self.variable} must be finite and > 0, got {np.ravel(arr).tolist()}")
        value = np.full(arr.shape, float(self.constant))
        for term in self.terms:
            value = value + term.evaluate(arr)
        return float(value) if value.ndim == 0 else value

    @property
    def formula(self) -> str:
        """The model as text, coefficients to 4 significant digits:
        ``"12.3 + 4.5 * p^(1/2) * log2(p)"``."""
        text = _number(self.constant)
        for term in self.terms:
            sign = "-" if term.coefficient < 0 else "+"
            text += f" {sign} {_number(abs(term.coefficient))} * {term.text(self.variable)}"
        return text

    def __str__(self) -> str:
        return (
            f"{self.formula}  (n={self.n_points}, SMAPE {self.smape:.2f}% leave-one-out, "
            f"adj. R^2 {self.ar2:.4f})"
        )


def _number(value: float) -> str:
    return f"{value:.4g}"


def _basis(p: np.ndarray, poly: Fraction, log: int) -> np.ndarray:
    out = np.ones_like(p) if poly == 0 else p ** float(poly)
    if log:
        out = out * np.log2(p) ** log
    return out


def fit_scaling(
    p: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    max_terms: int = 1,
    selection: str = "cv",
    building_blocks: Sequence[tuple[Fraction | float, int]] | None = None,
    variable: str = "p",
) -> ScalingModel:
    """Fit ``y(p) = c + sum_k a_k p^i_k log2(p)^j_k`` the way Extra-P does; return the best model.

    Parameters
    ----------
    p:
        The scaling parameter of each measurement, > 0 (for example GPUs; a count, no units).
        Repeated values are allowed (repetitions of one configuration).
    y:
        The measured metric at each ``p`` (any units: samples/s, s, ...), finite.
    max_terms:
        1 (Extra-P's default) or 2: the most terms beside the constant a hypothesis may have. A
        hypothesis with ``k`` coefficients needs ``k + 1`` distinct values of ``p``, so two terms
        need 4. With two terms there are 861 pairs to choose from, and noise of a few percent is
        often better "explained" by a pair than by the true single term: use 2 with many points
        and little noise.
    selection:
        ``"cv"`` (Extra-P's default): the smallest leave-one-out SMAPE, except that the fewest
        terms within one standard error of that smallest SMAPE win (the one-standard-error
        rule); ``"ar2"``: the largest adjusted R^2. Ties go to fewer terms, then to the earlier
        building block.
    building_blocks:
        The exponent pairs ``(i, j)`` to build terms from; default :data:`BUILDING_BLOCKS`.
    variable:
        The name the formula gives ``p``.

    Raises
    ------
    DlexploreError
        Fewer than 3 distinct ``p`` (the constant plus one term, and one point to validate), a
        ``p`` <= 0, values that are not finite, or arrays of different lengths.
    """
    px = np.asarray(p, dtype=float).ravel()
    yx = np.asarray(y, dtype=float).ravel()
    if px.size != yx.size:
        raise DlexploreError(f"fit_scaling: p has {px.size} values but y has {yx.size}")
    if not (np.all(np.isfinite(px)) and np.all(np.isfinite(yx))):
        raise DlexploreError(f"fit_scaling: p and y must be finite, got p={px.tolist()}, y={yx.tolist()}")
    if np.any(px <= 0):
        raise DlexploreError(f"fit_scaling: {variable} must be > 0, got {px.tolist()}")
    if max_terms not in (1, 2):
        raise DlexploreError(f"fit_scaling: max_terms must be 1 or 2, got {max_terms!r}")
    if selection not in ("cv", "ar2"):
        raise DlexploreError(f"fit_scaling: selection must be 'cv' or 'ar2', got {selection!r}")
    distinct = np.unique(px)
    if distinct.size < 3:
        raise DlexploreError(
            f"fit_scaling: an Extra-P model c + a * {variable}^i * log2({variable})^j has 2 "
            f"coefficients and needs at least 3 distinct values of {variable} (2 to fit, 1 more to "
            f"cross-validate); got {distinct.size} ({', '.join(f'{v:g}' for v in distinct)})"
        )
    blocks = [
        (Fraction(i).limit_denominator(1000), int(j))
        for i, j in (BUILDING_BLOCKS if building_blocks is None else building_blocks)
    ]
    if any((i, j) == (0, 0) for i, j in blocks) or any(j < 0 for _, j in blocks):
        raise DlexploreError("fit_scaling: building blocks need i != 0 or j > 0, and j >= 0")
    if np.any(px < 1):
        # Extra-P drops log terms when a parameter value is below 1 (log2 turns negative).
        blocks = [(i, j) for i, j in blocks if j == 0]
    terms_allowed = min(max_terms, distinct.size - 2)

    hypotheses: list[tuple[tuple[Fraction, int], ...]] = [()]
    hypotheses += [(b,) for b in blocks]
    if terms_allowed >= 2:
        hypotheses += list(combinations(blocks, 2))

    columns = {b: _basis(px, *b) for b in blocks}
    results = []
    for order, hyp in enumerate(hypotheses):
        result = _evaluate(px, yx, hyp, columns)
        if result is not None:
            results.append((order, hyp, *result))
    chosen = _choose(results, selection)
    _, hyp, coef, rss, errors, ar2 = chosen
    smape = float(np.mean(errors))
    stderr = _stderr(np.column_stack([np.ones(px.size), *(columns[b] for b in hyp)]), rss)
    terms = tuple(
        Term(float(a), i, j, float(e)) for a, e, (i, j) in zip(coef[1:], stderr[1:], hyp, strict=True)
    )
    return ScalingModel(
        constant=float(coef[0]),
        terms=terms,
        rss=float(rss),
        smape=float(smape),
        ar2=float(ar2),
        n_points=int(px.size),
        p_range=(float(px.min()), float(px.max())),
        selection=selection,
        hypotheses=len(hypotheses),
        variable=variable,
        constant_stderr=float(stderr[0]),
    )


def _choose(results: list[tuple], selection: str) -> tuple:
    """The hypothesis to keep: by cross-validation with the one-standard-error rule, or by adjusted
    R^2 (``selection`` ``"cv"`` or ``"ar2"``). ``results`` always hold the constant hypothesis,
    which every set of points determines."""
    if selection == "cv":
        scores = np.array([np.mean(r[4]) for r in results])
        best_i = int(np.argmin(scores))
        # One-standard-error rule (Hastie, Tibshirani & Friedman, The Elements of Statistical
        # Learning, 2nd ed., section 7.10): the fewest terms whose cross-validated error is within
        # one standard error of the smallest, so that a second term must earn its place.
        errors = results[best_i][4]
        limit = scores[best_i] + np.std(errors, ddof=1) / np.sqrt(errors.size)
        fewest = min(len(r[1]) for r, sc in zip(results, scores, strict=True) if sc <= limit)
        pick = [i for i, r in enumerate(results) if len(r[1]) == fewest]
        chosen = results[min(pick, key=lambda i: (scores[i], results[i][0]))]
    else:
        chosen = max(results, key=lambda r: (r[5], -len(r[1]), -r[0]))
    return chosen


def _stderr(design: np.ndarray, rss: float) -> np.ndarray:
    """Standard errors of least-squares coefficients: sqrt(diag(s^2 (X^T X)^-1))."""
    n, k = design.shape
    norms = np.linalg.norm(design, axis=0)
    scaled = design / norms
    # The selection guarantees n > k (one more distinct p than coefficients).
    s2 = rss / (n - k)
    cov = s2 * np.linalg.inv(scaled.T @ scaled)
    return np.sqrt(np.maximum(np.diag(cov), 0.0)) / norms


def _evaluate(px: np.ndarray, yx: np.ndarray, hyp: tuple, columns: dict):
    """Coefficients, RSS, the leave-one-out SMAPE of each point (%) and adjusted R^2 of one
    hypothesis, or None when
    it is not determined by the points or one of its terms contributes too little."""
    n = px.size
    k = 1 + len(hyp)
    if np.unique(px).size < k + 1:
        return None
    design = np.column_stack([np.ones(n), *(columns[b] for b in hyp)])
    # Unit-norm columns keep p^3 at p = 1024 and the constant on comparable scales.
    norms = np.linalg.norm(design, axis=0)
    if np.any(norms == 0):
        return None
    scaled = design / norms
    pinv = np.linalg.pinv(scaled)
    if np.linalg.matrix_rank(scaled) < k:
        return None
    coef = (pinv @ yx) / norms
    fitted = design @ coef
    residual = yx - fitted
    rss = float(residual @ residual)
    for idx in range(1, k):
        contribution = np.abs(coef[idx] * design[:, idx])
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(yx != 0, contribution / np.abs(yx), np.inf)
        if not np.max(share) >= MIN_TERM_CONTRIBUTION:
            return None
    # Leave-one-out residuals of a linear least-squares fit: r_i / (1 - h_ii) (hat-matrix identity).
    leverage = np.einsum("ij,ji->i", scaled, pinv)
    if np.any(leverage > _LEVERAGE_LIMIT):
        return None
    loo_pred = yx - residual / (1.0 - leverage)
    denom = np.abs(yx) + np.abs(loo_pred)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms_smape = np.where(denom > 0, 2.0 * np.abs(loo_pred - yx) / denom, 0.0)
    smape = 100.0 * terms_smape
    tss = float(np.sum((yx - yx.mean()) ** 2))
    dof = n - len(hyp) - 1
    if tss == 0:
        ar2 = 1.0 if rss == 0 else -np.inf
    elif dof <= 0:
        ar2 = -np.inf
    else:
        ar2 = 1.0 - (rss / tss) * (n - 1.0) / dof
    return coef, rss, smape, ar2
