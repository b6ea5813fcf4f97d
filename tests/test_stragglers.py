"""Straggler model: expected maximum over ranks, against values worked out by hand.

Reference values: E[max of n N(0,1)] from David & Nagaraja, *Order Statistics* (2003), table of
expected normal order statistics (n=2: 1/sqrt(pi) = 0.564190, n=3: 3/(2 sqrt(pi)) = 0.846284,
n=5: 1.162964, n=10: 1.538753); harmonic numbers as fractions; the empirical formula on a 3-point
sample by hand. The measured trace is data/traces/gloo-cnn-2rank (written by torch 2.13 profiler).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dlexplore
from dlexplore import lab
from dlexplore._data import data_dir
from dlexplore.errors import DlexploreError
from dlexplore.model.stragglers import (
    compare_with_measured,
    expected_max,
    expected_max_standard_normal,
    harmonic,
    straggler_slowdown,
)


def test_standard_normal_known_values():
    got = expected_max_standard_normal([1, 2, 3, 5, 10])
    want = [0.0, 1 / math.sqrt(math.pi), 1.5 / math.sqrt(math.pi), 1.162964, 1.538753]
    np.testing.assert_allclose(got, want, atol=2e-6)
    # grows like sqrt(2 ln n) for large n: the Blom approximation Phi^-1((n - 0.375)/(n + 0.25))
    from scipy.stats import norm

    n = 10**6
    assert abs(expected_max_standard_normal(n) - norm.ppf((n - 0.375) / (n + 0.25))) < 0.02


def test_normal_scales_mean_and_sigma():
    assert expected_max("normal", 2, mean=0.100, std=0.010) == pytest.approx(0.1 + 0.01 / math.sqrt(math.pi))
    assert expected_max("normal", 1, mean=0.1, std=0.01) == pytest.approx(0.1)


def test_exponential_is_harmonic():
    assert harmonic(8) == pytest.approx(761 / 280)
    np.testing.assert_allclose(expected_max("exponential", [1, 2, 3], mean=2.0), [2.0, 3.0, 2 * 11 / 6])
    # digamma beyond the exact sums: H_n ~ ln n + gamma + 1/(2n)
    n = 5_000_000
    assert harmonic(n) == pytest.approx(math.log(n) + 0.5772156649 + 1 / (2 * n), rel=1e-12)


def test_empirical_three_points_by_hand():
    # sample {1, 2, 3}, two draws: P(max=1) = 1/9, P(max=2) = 4/9 - 1/9 = 3/9, P(max=3) = 5/9
    assert expected_max([3.0, 1.0, 2.0], 2) == pytest.approx((1 + 6 + 15) / 9)
    assert expected_max([1.0, 2.0, 3.0], 1) == pytest.approx(2.0)
    assert expected_max([1.0, 2.0, np.nan, 3.0], 1000) == pytest.approx(3.0)


def test_lognormal_against_monte_carlo_and_limits():
    mean, std = 1.0, 0.5
    s2 = math.log(1 + (std / mean) ** 2)
    rng = np.random.default_rng(1)
    draws = rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), size=(200_000, 4)).max(axis=1)
    assert expected_max("lognormal", 4, mean=mean, std=std) == pytest.approx(draws.mean(), rel=5e-3)
    assert expected_max("lognormal", 1, mean=mean, std=std) == pytest.approx(1.0)


def test_bad_inputs():
    with pytest.raises(DlexploreError, match="ranks"):
        expected_max("normal", 0, mean=1, std=1)
    with pytest.raises(DlexploreError, match="needs mean and std"):
        expected_max("normal", 2, mean=1)
    with pytest.raises(DlexploreError, match="unknown distribution"):
        expected_max("gamma", 2, mean=1, std=1)
    with pytest.raises(DlexploreError, match="empty"):
        expected_max([], 2)


def test_slowdown_dataset():
    ds = straggler_slowdown([1.0, 2.0, 3.0], ranks=[1, 2, 1024])
    assert ds.attrs["source"].startswith("predicted: ")
    assert ds.expected_step_time.attrs["units"] == "s" and ds.slowdown.attrs["units"] == "1"
    np.testing.assert_allclose(ds.expected_step_time, [2.0, 22 / 9, 3.0])
    np.testing.assert_allclose(ds.slowdown, [1.0, 11 / 9, 1.5])
    np.testing.assert_allclose(ds.expected_step_time_normal[1], 2 + 1 / math.sqrt(math.pi))


def test_compare_with_measured_trace():
    trace = dlexplore.load_trace(data_dir() / "traces" / "gloo-cnn-2rank")
    ds = compare_with_measured(trace)
    work = (trace_breakdown := dlexplore.traces.breakdown.breakdown(trace))["step_time"] - trace_breakdown[
        "time_comm_exposed"
    ]
    assert int(ds.world_size) == 2
    assert float(ds.measured_max) == pytest.approx(float(work.max("rank").mean()))
    assert float(ds.predicted_max) == pytest.approx(expected_max(work.values, 2))
    # rank 0 is slower in every step (systematic imbalance): above the i.i.d. prediction
    assert float(ds.measured_max) > float(ds.predicted_max) > float(ds.measured_mean)
    assert ds.attrs["source"].startswith("predicted: ") and "measured" in ds.attrs["source"]


def test_compare_with_measured_takes_the_breakdown_not_the_event_table():
    # The model sits below the readers: it takes a trace or its breakdown, and says what to do with a
    # bare event table instead of importing dlexplore.traces for it.
    trace = dlexplore.load_trace(data_dir() / "traces" / "gloo-cnn-2rank")
    steps = sorted(set(trace.events["step"].dropna().astype(int)))[1:]
    from_breakdown = compare_with_measured(trace.breakdown(), steps=steps)
    work = trace.breakdown(steps=steps)
    work = work["step_time"] - work["time_comm_exposed"]
    assert float(from_breakdown.measured_max) == pytest.approx(float(work.max("rank").mean()))
    assert float(from_breakdown.measured_max) == pytest.approx(
        float(compare_with_measured(trace, steps=steps).measured_max)
    )
    with pytest.raises(DlexploreError, match=r"got a DataFrame; for an event table, pass .*breakdown"):
        compare_with_measured(trace.events)


def test_exercises():
    assert lab.check(401, 100 + 10 / math.sqrt(math.pi)).correct
    assert lab.check(402, 50 + 5 * 761 / 280).correct
    assert lab.check(403, 0.2).correct
    assert not lab.check(401, 100.0).correct
    assert lab.check(402, None).status == "unanswered"
    # the exercise values agree with the model
    assert lab.solution(401).value == pytest.approx(expected_max("normal", 2, mean=100, std=10))
    assert lab.solution(402).value == pytest.approx(50 + expected_max("exponential", 8, mean=5))
