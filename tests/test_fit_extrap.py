"""Extra-P-style empirical scaling models (dlexplore.fit.extrap).

The selection procedure follows Extra-P 4's single-parameter modeler (github.com/extra-p/extrap,
``extrap/modelers/single_parameter/basic.py``, ``abstract_base.py`` and
``extrap/entities/hypotheses.py``): least squares per hypothesis, leave-one-out SMAPE,
adjusted R^2 ``1 - (1 - R^2)(n - 1)/(n - terms - 1)``. The small example's fit, RSS, adjusted R^2
and leave-one-out SMAPE are worked out by hand below.
"""

from fractions import Fraction

import numpy as np
import pytest

from dlexplore.errors import DlexploreError
from dlexplore.fit.extrap import BUILDING_BLOCKS, ScalingModel, fit_scaling

P = 2.0 ** np.arange(0, 11)  # 1 to 1024 processes, as an Extra-P experiment would double them


def _shape(model: ScalingModel) -> tuple:
    return tuple((t.poly, t.log) for t in model.terms)


def test_building_blocks_are_extrap_defaults():
    assert len(BUILDING_BLOCKS) == 42
    assert BUILDING_BLOCKS[0] == (Fraction(0), 1)
    assert (Fraction(1, 2), 1) in BUILDING_BLOCKS and (Fraction(4, 5), 0) in BUILDING_BLOCKS
    assert BUILDING_BLOCKS[-1] == (Fraction(3), 1)


def test_exact_sqrt_log_model_recovered():
    y = 3 + 2 * P**0.5 * np.log2(P)
    model = fit_scaling(P, y)
    assert _shape(model) == ((Fraction(1, 2), 1),)
    assert model.constant == pytest.approx(3, rel=1e-9)
    assert model.terms[0].coefficient == pytest.approx(2, rel=1e-9)
    assert model.formula == "3 + 2 * p^(1/2) * log2(p)"
    assert model.smape < 1e-9 and model.rss < 1e-12 and model.ar2 == pytest.approx(1.0)
    assert model.terms[0].stderr < 1e-9 and model.constant_stderr < 1e-9
    assert model.n_points == 11 and model.p_range == (1.0, 1024.0)
    # extrapolation beyond the fitted range: 3 + 2 * 64 * 12 at p = 4096
    assert model.predict(4096) == pytest.approx(1539.0, rel=1e-9)
    assert isinstance(model.predict(4096), float)
    assert model.predict([4, 16]).tolist() == pytest.approx([11.0, 35.0])


def test_exact_linear_model_recovered_by_both_criteria():
    y = 5 + 0.7 * P
    for selection in ("cv", "ar2"):
        model = fit_scaling(P, y, selection=selection)
        assert _shape(model) == ((Fraction(1), 0),)
        assert model.formula == "5 + 0.7 * p"
        assert model.selection == selection


def test_negative_coefficient_formula():
    model = fit_scaling(P, 100 - 3 * np.log2(P))
    assert model.formula == "100 - 3 * log2(p)"


@pytest.mark.parametrize(
    ("truth", "shape"),
    [
        (lambda p: 3 + 2 * p**0.5 * np.log2(p), ((Fraction(1, 2), 1),)),
        (lambda p: 5 + 0.7 * p, ((Fraction(1), 0),)),
    ],
)
def test_noisy_data_picks_the_right_hypothesis(truth, shape):
    # 1% Gaussian noise on each point; 20 fixed seeds, so the test is deterministic.
    hits, coefs = 0, []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        y = truth(P) * (1 + 0.01 * rng.standard_normal(P.size))
        model = fit_scaling(P, y)
        if _shape(model) == shape:
            hits += 1
            coefs.append(model.terms[0].coefficient)
    assert hits >= 19
    true_coef = 2.0 if shape[0][1] == 1 else 0.7
    assert np.median(coefs) == pytest.approx(true_coef, rel=0.02)


def test_two_terms_when_asked():
    y = 10 + 3 * np.log2(P) + 0.5 * P**1.5
    one = fit_scaling(P, y, max_terms=1)
    two = fit_scaling(P, y, max_terms=2)
    assert _shape(two) == ((Fraction(0), 1), (Fraction(3, 2), 0))
    assert two.constant == pytest.approx(10, rel=1e-6)
    assert [t.coefficient for t in two.terms] == pytest.approx([3, 0.5], rel=1e-6)
    assert two.formula == "10 + 3 * log2(p) + 0.5 * p^(3/2)"
    assert two.smape < 1e-6 < one.smape
    assert two.hypotheses == 1 + 42 + 42 * 41 // 2


def test_small_example_worked_by_hand():
    # Only the block p: y = c + a p on (1,2), (2,3), (3,5), (4,6).
    # Least squares: mean p 2.5, mean y 4, Sxy 7, Sxx 5 -> a = 1.4, c = 0.5; fitted 1.9, 3.3,
    # 4.7, 6.1; RSS 0.2; TSS 10; adj. R^2 = 1 - 0.02 * 3 / 2 = 0.97.
    # Leave-one-out fits and predictions: without p=1: y = 1/6 + 1.5p -> 5/3, SMAPE term 2/11;
    # without p=2: 5/7 + 19/14 p -> 24/7, 6/45; without p=3: 1/2 + 19/14 p -> 32/7, 6/67;
    # without p=4: 1/3 + 1.5p -> 19/3, 2/37.
    model = fit_scaling([1, 2, 3, 4], [2, 3, 5, 6], building_blocks=[(1, 0)])
    assert model.constant == pytest.approx(0.5)
    assert model.terms[0].coefficient == pytest.approx(1.4)
    assert model.rss == pytest.approx(0.2)
    assert model.ar2 == pytest.approx(0.97)
    expected = 100 * (2 / 11 + 6 / 45 + 6 / 67 + 2 / 37) / 4
    assert model.smape == pytest.approx(expected, rel=1e-12)
    assert model.formula == "0.5 + 1.4 * p"
    assert "SMAPE 11.47% leave-one-out" in str(model)
    # Standard errors: s^2 = RSS / (n - 2) = 0.1; se(a) = sqrt(s^2 / Sxx) = sqrt(0.02);
    # se(c) = sqrt(s^2 (1/n + mean(p)^2 / Sxx)) = sqrt(0.1 * (0.25 + 1.25)) = sqrt(0.15).
    assert model.terms[0].stderr == pytest.approx(0.02**0.5)
    assert model.constant_stderr == pytest.approx(0.15**0.5)


def test_constant_data_gives_constant_model():
    model = fit_scaling([1, 2, 4, 8], [7.0, 7.0, 7.0, 7.0])
    assert model.terms == () and model.formula == "7"
    assert model.predict(1000) == 7.0


def test_log_terms_dropped_below_one():
    p = np.array([0.25, 0.5, 1, 2, 4, 8])
    model = fit_scaling(p, 1 + 2 * p)
    assert all(t.log == 0 for t in model.terms)
    assert model.formula == "1 + 2 * p"


def test_two_terms_need_four_distinct_points():
    # 3 distinct p: the two-term hypotheses are not determined when a point is left out.
    model = fit_scaling([1, 2, 4], [5, 7, 11], max_terms=2)
    assert len(model.terms) == 1 and model.hypotheses == 43
    assert model.formula == "3 + 2 * p"


@pytest.mark.parametrize(
    ("p", "y", "message"),
    [
        ([1, 16], [100, 1500], "at least 3 distinct values of p"),
        ([1, 1, 16, 16], [100, 101, 1500, 1490], "got 2 (1, 16)"),
        ([8], [1734], "got 1 (8)"),
        ([1, 2, 4], [1, 2], "p has 3 values but y has 2"),
        ([0, 1, 2], [1, 2, 3], "must be > 0"),
        ([1, 2, 4], [1, np.nan, 3], "must be finite"),
    ],
)
def test_refusals(p, y, message):
    with pytest.raises(DlexploreError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fit_scaling(p, y)


def test_bad_options():
    with pytest.raises(DlexploreError, match="max_terms must be 1 or 2"):
        fit_scaling(P, P, max_terms=3)
    with pytest.raises(DlexploreError, match="selection must be 'cv' or 'ar2'"):
        fit_scaling(P, P, selection="rss")
    model = fit_scaling(P, 1 + P)
    with pytest.raises(DlexploreError, match="p must be finite and > 0"):
        model.predict(0)
