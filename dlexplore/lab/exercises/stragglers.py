"""Exercises of the stragglers lab (``notebooks/stragglers-lab.ipynb``), numbers 401 and up.

The expected values are worked out here from the published formulas, not with
:mod:`dlexplore.model.stragglers` or :mod:`dlexplore.model.workflow`:

- the maximum of two independent ``N(mu, sigma)``: ``E[max] = mu + sigma / sqrt(pi)`` (David &
  Nagaraja, *Order Statistics*, 2003, from ``E|X1 - X2| = 2 sigma / sqrt(pi)``);
- the maximum of ``n`` independent exponentials of mean ``m``: ``m H_n`` (Renyi's representation);
- a producer/consumer line: throughput ``min(n r_p, r_c)``, consumer idle ``1 - X / r_c``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..core import Exercise, Solution, register

_MU, _SIGMA = 100.0, 10.0  # ms, exercise 401
_BASE, _JITTER, _RANKS = 50.0, 5.0, 8  # ms, ms, count: exercise 402
_SIMS, _SIM_RATE, _TRAIN_RATE = 4, 20.0, 100.0  # count, samples/s, samples/s: exercise 403

EX_TWO_RANKS = Exercise(
    401,
    "straggler-two-ranks",
    "Two ranks, one step",
    f"Each of 2 ranks needs N({_MU:g} ms, {_SIGMA:g} ms) per step, independently; the step ends when "
    "both are done. Expected step time?",
    "ms",
    0.01,
    "a number",
)
EX_EXPONENTIAL = Exercise(
    402,
    "straggler-exponential",
    "Exponential jitter on 8 ranks",
    f"Each of {_RANKS} ranks needs {_BASE:g} ms plus an exponential delay of mean {_JITTER:g} ms. "
    "Expected synchronous step time?",
    "ms",
    0.01,
    "a number",
)
EX_STARVED = Exercise(
    403,
    "coupled-starved",
    "Training waiting for the simulation",
    f"{_SIMS} simulations each produce {_SIM_RATE:g} samples/s; training can consume {_TRAIN_RATE:g} "
    "samples/s. In steady state, what fraction of the time does training wait?",
    "",
    0.01,
    "a fraction 0..1",
)


def _two_ranks() -> Solution:
    value = _MU + _SIGMA / math.sqrt(math.pi)
    working = (
        f"E[max(X1, X2)] = mu + sigma / sqrt(pi) = {_MU:g} + {_SIGMA:g} x "
        f"{1 / math.sqrt(math.pi):.4f} "
        f"= {value:.2f} ms: one straggler more than half a sigma late on average."
    )
    return Solution(
        EX_TWO_RANKS,
        value,
        working,
        (
            (_MU, "that is one rank's mean; the step waits for the slower of the two."),
            (_MU + _SIGMA, "mean + sigma is too much: E[max of 2 N(0,1)] = 1/sqrt(pi) = 0.564."),
        ),
    )


def _exponential() -> Solution:
    h = Fraction(0)
    for k in range(1, _RANKS + 1):
        h += Fraction(1, k)
    value = _BASE + _JITTER * float(h)
    working = (
        f"E[max] = base + m H_n; H_{_RANKS} = 1 + 1/2 + ... + 1/{_RANKS} = {h} = {float(h):.4f}, "
        f"so {_BASE:g} + {_JITTER:g} x {float(h):.4f} = {value:.2f} ms."
    )
    return Solution(
        EX_EXPONENTIAL,
        value,
        working,
        (
            (_BASE + _JITTER, "that is the mean of one rank; the step waits for the largest of 8 delays."),
            (_BASE + _JITTER * _RANKS, "the delays overlap: the maximum is m H_n, not m n."),
        ),
    )


def _starved() -> Solution:
    produced = _SIMS * _SIM_RATE
    x = min(produced, _TRAIN_RATE)
    value = 1 - x / _TRAIN_RATE
    working = (
        f"Producers make n r_p = {_SIMS} x {_SIM_RATE:g} = {produced:g} samples/s < r_c = "
        f"{_TRAIN_RATE:g}: throughput X = {x:g} samples/s, and training is busy X / r_c = "
        f"{x / _TRAIN_RATE:g} of the time, so it waits 1 - {x / _TRAIN_RATE:g} = {value:g}."
    )
    return Solution(
        EX_STARVED,
        value,
        working,
        (
            (
                x / _TRAIN_RATE,
                "that is the fraction of time training is busy; the question asks for waiting.",
            ),
            (100 * value, "give a fraction (0..1), not a percentage."),
        ),
    )


for _exercise, _solver, _hint in (
    (EX_TWO_RANKS, _two_ranks, "E[max of 2 N(mu, sigma)] = mu + sigma / sqrt(pi)."),
    (EX_EXPONENTIAL, _exponential, "E[max of n exponentials of mean m] = m H_n, H_n = 1 + 1/2 + ... + 1/n."),
    (EX_STARVED, _starved, "throughput X = min(n r_p, r_c); training waits 1 - X / r_c of the time."),
):
    register(_exercise, _solver, _hint)
