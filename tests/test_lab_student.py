"""A student at every exercise of every lab: the right answer, a rounding near-miss, an answer off by
two, one in the wrong units, a string, and nothing yet; each gets the message that fits it.

The expected values themselves are checked against hand derivations in tests/test_lab.py and the
topic labs' tests; here the answers are made from them the way a student's slips make them.
"""

from __future__ import annotations

import pytest

from dlexplore import lab

EXERCISES = list(lab.EXERCISES.values())
IDS = [f"{e.number}-{e.id}" for e in EXERCISES]
# Named choices (ring or tree) cannot be near, off by two or in other units.
NUMERIC = [e for e in EXERCISES if not isinstance(lab.solution(e.number).value, str)]
NUMERIC_IDS = [f"{e.number}-{e.id}" for e in NUMERIC]

# The units slip a student makes for each answer's units: the answer times this factor, and a word
# the hint must use. Dimensionless answers slip into percent.
UNIT_SLIPS = {
    "MB (1e6 bytes)": (1e6, "MB"),  # bytes instead of MB
    "GB (1e9 bytes)": (1e9, "GB"),  # bytes instead of GB
    "ms": (1e-3, "ms"),  # seconds instead of ms
    "GB/s": (1e3, "GB/s"),  # MB/s instead of GB/s
    "bytes": (1 / 1024, "bytes"),  # KiB instead of bytes
    "J": (1e-3, "J"),  # kJ instead of J
    "kWh": (3.6e6, "kWh"),  # J instead of kWh
    "x": (100, "not in %"),  # a percentage instead of a ratio
    "": (100, "not in %"),  # a percentage instead of a fraction
}


def _solution(e: lab.Exercise):
    return lab.solution(e.number).value


def _scaled(value, factor):
    if isinstance(value, tuple):  # a pair: the student slips in its last part
        return (*value[:-1], value[-1] * factor)
    return value * factor


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_the_right_answer(exercise):
    result = lab.check(exercise.number, _solution(exercise))
    assert result.correct and not result.hint, str(result)
    text = str(result)
    assert "correct!" in text
    if exercise.tolerance:
        assert f"within {exercise.tolerance:.0%}" in text
    # the tolerance is stated with the question too
    assert exercise.tolerance_text in exercise.prompt


@pytest.mark.parametrize("exercise", NUMERIC, ids=NUMERIC_IDS)
def test_a_rounding_near_miss(exercise):
    value = _solution(exercise)
    if isinstance(value, int) or exercise.tolerance == 0:
        # a whole number: a fraction near it; the exercise says which way to round
        result = lab.check(exercise.number, value + 0.4)
        assert not result.correct
        assert "whole number" in result.hint, result.hint
        return
    near = _scaled(value, 1 + 3 * exercise.tolerance)  # three tolerances off: rounding, not units
    result = lab.check(exercise.number, near)
    assert not result.correct, str(result)
    assert "close" in result.hint and f"within {exercise.tolerance:.0%}" in result.hint, result.hint
    assert "units" not in result.hint and "not in %" not in result.hint


@pytest.mark.parametrize("exercise", NUMERIC, ids=NUMERIC_IDS)
def test_off_by_two(exercise):
    value = _solution(exercise)
    result = lab.check(exercise.number, _scaled(value, 2))
    assert not result.correct and result.hint, str(result)
    specific = [
        hint
        for mistake, hint in lab.solution(exercise.number).mistakes
        if not isinstance(mistake, str) and mistake == pytest.approx(_scaled(value, 2), rel=5e-3)
    ]
    if specific:  # the exercise knows this slip: its own words
        assert result.hint == " Or: ".join(specific)
    else:
        assert "twice the expected one" in result.hint and "factor of 2" in result.hint, result.hint


def test_every_unit_has_its_slip():
    # whole counts (sequences, GPUs) have no unit to slip in; every other answer's units do
    counted = {e.units for e in NUMERIC if e.tolerance == 0}
    assert counted == {"sequences", "GPUs"}
    assert {e.units for e in NUMERIC if e.tolerance} <= set(UNIT_SLIPS)


@pytest.mark.parametrize(
    "exercise",
    [e for e in NUMERIC if e.tolerance],
    ids=[i for e, i in zip(NUMERIC, NUMERIC_IDS, strict=True) if e.tolerance],
)
def test_wrong_units(exercise):
    value = _solution(exercise)
    factor, word = UNIT_SLIPS[exercise.units]
    result = lab.check(exercise.number, _scaled(value, factor))
    assert not result.correct, str(result)
    specific = [
        hint
        for mistake, hint in lab.solution(exercise.number).mistakes
        if not isinstance(mistake, str) and mistake == pytest.approx(_scaled(value, factor), rel=5e-3)
    ]
    if specific:
        assert result.hint == " Or: ".join(specific)
    else:
        assert word in result.hint and ("units" in result.hint or "%" in result.hint), result.hint
        assert "give it in ." not in result.hint and "give it in x" not in result.hint


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_a_string(exercise):
    value = _solution(exercise)
    result = lab.check(exercise.number, "I don't know")
    assert not result.correct and result.hint.startswith("answer with"), result.hint
    assert exercise.expects in result.hint
    if isinstance(value, (int, float)):
        # the right number, typed in quotes
        quoted = lab.check(exercise.number, str(value))
        assert not quoted.correct and "without quotes" in quoted.hint, quoted.hint


@pytest.mark.parametrize("exercise", EXERCISES, ids=IDS)
def test_none_is_not_answered_yet(exercise):
    result = lab.check(exercise.number, None)
    assert result.status == "unanswered" and not result.hint
    assert f"answer_{exercise.number}" in str(result) and exercise.expects in str(result)


def test_the_issues_examples():
    # exercise 302: 2500.6 is shown as typed, and told to count whole GPUs, not to "round down"
    result = lab.check(302, 2500.6)
    assert "2500.6 is not right" in str(result)
    assert "round down" not in result.hint and "whole number of GPUs" in result.hint
    # a 1-4.5% rounding slip is never "in other units"
    for off in (1.01 + 0.005, 1.02, 1.03, 1.045, 0.985, 0.96):
        hint = lab.check(1, lab.solution(1).value * off).hint
        assert "units" not in hint and "close" in hint, (off, hint)


def test_score_counts_without_showing_solutions():
    score = lab.score([1, 2, 3], {"answer_1": lab.solution(1).value, "answer_2": 1.0})
    assert (score.correct, score.wrong, score.unanswered) == ((1,), (2,), (3,))
    assert str(score) == "1 of 3 correct, 1 not answered yet; not yet right: 2"
    assert "57.5" not in str(score) and "57.5" not in score._repr_html_()
