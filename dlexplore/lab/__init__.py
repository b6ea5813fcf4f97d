"""Exercises for the classroom and topic labs (``notebooks/*-lab.ipynb``) and their checkers.

A student writes an answer in the notebook and runs a check cell::

    from dlexplore import lab
    answer_1 = 178.9            # MB
    lab.check(1, answer_1)      # -> "Exercise 1 (ring-bytes): correct ..."

:mod:`dlexplore.lab.core` holds the checker and the registry, :mod:`dlexplore.lab.feedback` the hints
for wrong answers, :mod:`dlexplore.lab.exercises` the exercises (one module per lab).
"""

from . import exercises as _exercises  # noqa: F401  (registers every exercise)
from .core import (
    EXERCISES,
    CheckResult,
    Exercise,
    Score,
    Solution,
    check,
    classroom,
    register,
    score,
    solution,
)

__all__ = [
    "Exercise",
    "CheckResult",
    "Solution",
    "Score",
    "EXERCISES",
    "check",
    "solution",
    "register",
    "classroom",
    "score",
]
