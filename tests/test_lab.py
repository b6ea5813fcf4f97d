"""The classroom lab's checkers (dlexplore.lab) and the classroom notebook.

Each expected answer is worked out here by hand from the published formula, with the arithmetic
written out and the figures typed in from their sources, independently of dlexplore.lab; the
cross-checks at the end compare them with the model (collective_time, predict, busbw_factor).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from pathlib import Path

import nbformat
import numpy as np
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore import lab

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "classroom-lab.ipynb"

RESNET50_PARAMS = 25_557_032  # torchvision resnet50
BERT_LARGE_PARAMS = 335_141_888  # Hugging Face bert-large-uncased, BertModel with pooler
BERT_LARGE_ACT = 1_992_536_064  # bytes per 512-token sequence, fp32 (Korthikanti et al. 2022, x2)
GIB = 2**30

# 1. Ring allreduce: 2(p-1) steps of n/p bytes. n = 25,557,032 x 4 = 102,228,128 bytes;
#    2 x 7/8 x 102,228,128 = 178,899,224 bytes = 178.899224 MB.
EX1 = 2 * (8 - 1) / 8 * (RESNET50_PARAMS * 4) / 1e6
# 2. 25GbE: B = 25e9 / 8 = 3.125e9 bytes/s, alpha = 20 us.
#    T = 2 x 7 x 20e-6 + 178,899,224 / 3.125e9 = 0.00028 + 0.05724775 = 0.05752775 s = 57.53 ms.
EX2 = (2 * 7 * 20e-6 + 2 * 7 / 8 * RESNET50_PARAMS * 4 / (25e9 / 8)) * 1e3
# 3. Weak scaling: S = p t1 / tp = 16 x 0.250 / 0.290 = 13.793; E = S / p = 0.8621.
EX3 = (16 * 0.250 / 0.290, 16 * 0.250 / 0.290 / 16)
# 4. C = 16 GiB = 17,179,869,184; static = 335,141,888 x (4 + 4 + 8) + 1 GiB = 6,436,012,032;
#    (17,179,869,184 - 6,436,012,032) / 1,992,536,064 = 10,743,857,152 / 1,992,536,064 = 5.39 -> 5.
EX4 = math.floor((16 * GIB - BERT_LARGE_PARAMS * (4 + 4 + 8) - GIB) / BERT_LARGE_ACT)
# 5. p = 64, n = 4096, alpha = 0.6 us, B = 12.5e9: ring 2 x 63 x 0.6 + 2 x 63/64 x 4096 / 12.5e3 us
#    = 75.6 + 0.645 = 76.2 us; tree 2 x 6 x (0.6 + 4096 / 12.5e3) us = 12 x 0.92768 = 11.13 us.
EX5 = "tree"
# 6. (p - 1 - lg p) alpha / ((lg p - (p-1)/p) beta) = 57 x 0.6e-6 / ((6 - 63/64) x 8e-11)
#    = 3.42e-5 / 4.0125e-10 = 85,233.6 bytes.
EX6 = (64 - 1 - 6) * 0.6e-6 / ((6 - 63 / 64) / 12.5e9)
# 7. algbw = busbw / (2(p-1)/p) = 370 / 1.75 = 211.43 GB/s.
EX7 = 370 / (2 * 7 / 8)

CORRECT = {1: EX1, 2: EX2, 3: EX3, 4: EX4, 5: EX5, 6: EX6, 7: EX7}
# One typical wrong answer per exercise, with a word its hint must contain.
WRONG = {
    1: (RESNET50_PARAMS * 4 / 1e6, "2(p-1)/p"),  # the whole buffer n
    2: ((2 * 7 * 20e-6 + 2 * 7 / 8 * RESNET50_PARAMS * 4 / 25e9) * 1e3, "3.125 GB/s"),  # Gbit as GB
    3: ((0.250 / 0.290, 0.250 / 0.290), "16 times"),  # forgot the p
    4: (6, "round down"),
    5: ("ring", "latency"),
    6: (50_000.0, "equal"),
    7: (370 * 1.75, "divide"),
}
NUMBERS = sorted(CORRECT)


def test_the_hand_arithmetic():
    assert EX1 == pytest.approx(178.899224)
    assert EX2 == pytest.approx(57.52775, rel=1e-6)
    assert EX3 == pytest.approx((13.7931, 0.86207), rel=1e-4)
    assert EX4 == 5
    assert EX6 == pytest.approx(85_233.6, rel=1e-5)
    assert EX7 == pytest.approx(211.4286, rel=1e-6)


def test_exercises_are_numbered_and_described():
    numbers = [e.number for e in lab.classroom()]
    assert numbers == NUMBERS
    for e in lab.classroom():
        key = e.id
        assert key == e.id
        assert e.title and e.question and e.answer_form
        assert 0 <= e.tolerance <= 0.05
        assert lab.check(e.id, None).exercise is lab.check(e.number, None).exercise


@pytest.mark.parametrize("number", NUMBERS)
def test_solution_agrees_with_the_hand_derivation(number: int):
    value = lab.solution(number).value
    expected = CORRECT[number]
    if isinstance(expected, (str, int)):
        assert value == expected
    else:
        assert value == pytest.approx(expected, rel=1e-9)
    text = str(lab.solution(number))
    assert f"Exercise {number}" in text and len(text.splitlines()) >= 2


@pytest.mark.parametrize("number", NUMBERS)
def test_correct_answer_passes(number: int):
    result = lab.check(number, CORRECT[number])
    assert result.correct and result.answered and result.status == "correct"
    assert "correct!" in str(result) and not result.hint
    assert "&#10004;" in result._repr_html_()


@pytest.mark.parametrize("number", NUMBERS)
def test_wrong_answer_fails_with_a_hint(number: int):
    answer, word = WRONG[number]
    result = lab.check(number, answer)
    assert not result.correct and result.answered and result.status == "wrong"
    assert result.hint and word in result.hint, result.hint
    assert "Hint:" in str(result) and "not yet" in str(result)
    assert "Hint:" in result._repr_html_()


@pytest.mark.parametrize("number", NUMBERS)
def test_none_is_not_answered_yet(number: int):
    result = lab.check(number, None)
    assert not result.correct and not result.answered and result.status == "unanswered"
    assert "not answered yet" in str(result) and f"answer_{number}" in str(result)
    assert not result.hint


@pytest.mark.parametrize("number", [1, 2, 6, 7])
def test_tolerance_is_relative_and_stated(number: int):
    tol = lab.EXERCISES[[k for k, e in lab.EXERCISES.items() if e.number == number][0]].tolerance
    value = CORRECT[number]
    assert lab.check(number, value * (1 + 0.9 * tol)).correct
    assert lab.check(number, value * (1 - 0.9 * tol)).correct
    assert not lab.check(number, value * (1 + 1.1 * tol)).correct
    assert f"within {tol:.0%}" in str(lab.check(number, value))


def test_specific_hints():
    assert "units" in lab.check(1, EX1 * 1e6).hint  # bytes instead of MB
    assert "units" in lab.check(2, EX2 / 1e3).hint  # seconds instead of ms
    assert "fraction" in lab.check(3, (EX3[0], 100 * EX3[1])).hint  # efficiency in %
    assert "whole number" in lab.check(4, 5.4).hint
    assert "'ring' or 'tree'" in lab.check(5, "butterfly").hint
    assert "MiB" in lab.check(1, EX1 * 1e6 / 2**20).hint


def test_answers_in_other_forms_are_accepted():
    assert lab.check(1, np.float64(EX1)).correct
    assert lab.check(1, xr.DataArray(EX1)).correct
    assert lab.check(3, list(EX3)).correct
    assert lab.check(3, np.array(EX3)).correct
    assert lab.check(4, 5.0).correct and lab.check(4, np.int64(5)).correct
    assert lab.check(5, " Tree ").correct and lab.check(5, "binomial tree").correct


@pytest.mark.parametrize("number", NUMBERS)
@pytest.mark.parametrize(
    "odd",
    [
        "",
        "abc",
        [],
        {},
        (1, 2, 3),
        float("nan"),
        float("inf"),
        True,
        np.array([1.0, 2.0, 3.0]),
        np.zeros((2, 2)),
        object(),
    ],
    ids=lambda v: type(v).__name__,
)
def test_odd_answers_never_raise(number: int, odd: object):
    result = lab.check(number, odd)
    assert isinstance(result, lab.CheckResult) and not result.correct and result.hint
    assert str(result) and result._repr_html_()


def test_unknown_exercise_is_an_error():
    with pytest.raises(KeyError, match="unknown exercise"):
        lab.check(99, 1.0)
    with pytest.raises(KeyError, match="unknown exercise"):
        lab.solution("no-such-exercise")


def test_html_escapes_the_answer():
    assert "<script>" not in lab.check(1, "<script>")._repr_html_()


# --- the hand answers against the model ------------------------------------------------------


def test_ring_bytes_match_the_models_gradient_bytes():
    ds = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=8)
    assert float(ds.comm_bytes) == RESNET50_PARAMS * 4
    assert 2 * (8 - 1) / 8 * float(ds.comm_bytes) / 1e6 == pytest.approx(EX1)


def test_ring_time_matches_collective_time():
    eth = dlx.catalog.network("25GbE")
    assert (eth.bandwidth_gbs, eth.latency_s) == (3.125, 20e-6)
    n = RESNET50_PARAMS * 4
    t = dlx.model.collective_time("allreduce", "ring", n, 8, eth.bandwidth_gbs, eth.latency_s)
    assert float(t) * 1e3 == pytest.approx(EX2, rel=1e-9)


def test_ring_tree_answers_match_collective_time():
    edr = dlx.catalog.network("IB-EDR")
    assert (edr.bandwidth_gbs, edr.latency_s) == (12.5, 0.6e-6)

    def t(algorithm: str, n: float) -> float:
        bw, alpha = edr.bandwidth_gbs, edr.latency_s
        return float(dlx.model.collective_time("allreduce", algorithm, n, 64, bw, alpha))

    assert t("tree", 4096) < t("ring", 4096)
    assert t("ring", EX6) == pytest.approx(t("tree", EX6), rel=1e-9)
    assert t("ring", 2 * EX6) < t("tree", 2 * EX6) and t("tree", EX6 / 2) < t("ring", EX6 / 2)


@pytest.mark.parametrize("gpus", [1, 8])
def test_largest_bert_batch_matches_predict_fits(gpus: int):
    # With 8 GPUs the 25 MiB fusion buffer joins the workspace; the answer must not change.
    ds = dlx.predict(
        "bert-large",
        "V100-16GB",
        "IB-EDR",
        gpus=gpus,
        optimizer="adam",
        precision="fp32",
        batch_size=[EX4, EX4 + 1],
    )
    assert ds.fits.values.tolist() == [True, False]
    wl = dlx.catalog.workload("bert-large")
    assert (wl.params, wl.activation_bytes_per_sample) == (BERT_LARGE_PARAMS, BERT_LARGE_ACT)


def test_algbw_matches_busbw_factor_and_the_shipped_measurement():
    assert dlx.model.busbw_factor("allreduce", 8) == 1.75
    nccl = dlx.measured.load("nccl-tests-h100-allreduce")
    ring = dlx.measured.select(nccl, algorithm="ring")
    assert float(ring.busbw[0]) == 370
    assert float(ring.algbw[0]) == pytest.approx(EX7, rel=1e-9)


# --- the notebook ----------------------------------------------------------------------------

ANSWER_LINE = re.compile(r"^answer_(\d+) = None\b.*$", flags=re.M)


def _check_outputs(nb: nbformat.NotebookNode) -> dict[int, str]:
    """Exercise number -> the plain text its check cell displayed."""
    out = {}
    for cell in nb.cells:
        match = re.match(r"lab\.check\((\d+), answer_\1\)", cell.source.strip())
        if cell.cell_type == "code" and match:
            texts = [o["data"]["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
            out[int(match.group(1))] = "\n".join(texts)
    return out


def _score(nb: nbformat.NotebookNode) -> str:
    """What the score cell showed."""
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("lab.score(")]
    assert len(cells) == 1, "one score cell"
    return "".join(o["data"]["text/plain"] for o in cells[0].outputs if o.output_type == "execute_result")


def test_notebook_has_an_answer_and_a_check_cell_per_exercise():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    answers = [int(m) for c in nb.cells if c.cell_type == "code" for m in ANSWER_LINE.findall(c.source)]
    assert answers == NUMBERS
    assert sorted(_check_outputs(nb)) == NUMBERS


@pytest.mark.notebook
def test_notebook_with_correct_answers_says_correct(run_notebook: Callable):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    filled = copy.deepcopy(nb)
    replaced = []
    for cell in filled.cells:
        if cell.cell_type == "code" and ANSWER_LINE.search(cell.source):
            number = int(ANSWER_LINE.search(cell.source).group(1))
            cell.source = ANSWER_LINE.sub(f"answer_{number} = {CORRECT[number]!r}", cell.source)
            replaced.append(number)
    assert replaced == NUMBERS
    run_notebook(filled)
    checks = _check_outputs(filled)
    assert sorted(checks) == NUMBERS
    for number, text in checks.items():
        assert text.startswith(f"Exercise {number} ") and "correct!" in text, text
    assert _score(filled) == "7 of 7 correct, 0 not answered yet"


@pytest.mark.notebook
def test_notebook_as_committed_says_not_answered(run_notebook: Callable):
    nb = run_notebook(nbformat.read(NOTEBOOK, as_version=4))
    for number, text in _check_outputs(nb).items():
        assert "not answered yet" in text, (number, text)
    assert _score(nb) == "0 of 7 correct, 7 not answered yet"
