"""The checker of the labs' exercises: what an exercise is, the registry, and the verdict on an answer.

A student writes an answer in the notebook and runs a check cell::

    from dlexplore import lab
    answer_1 = 178.9            # MB
    lab.check(1, answer_1)      # -> "Exercise 1 (ring-bytes): correct ..."

:func:`check` never raises for a bad answer, so the notebook runs headless with every answer still
``None``: it says "not answered yet" for ``None``, "correct" within the exercise's tolerance, and
otherwise "not yet" with a hint (a specific one when the answer matches a common mistake, found by
:mod:`dlexplore.lab.feedback`). :func:`solution` gives teachers the worked answer. :data:`EXERCISES`
lists the exercises with their units and tolerance; the modules of :mod:`dlexplore.lab.exercises`
fill it through :func:`register`.
"""

from __future__ import annotations

import html
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .feedback import diagnose, show_answer, show_value

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

Answer = float | int | str | tuple[float, ...]


@dataclass(frozen=True)
class Exercise:
    """One exercise: ``number`` (1, 2, ...) and ``id`` both select it in :func:`check`.

    ``tolerance`` is relative (0.01 = 1%) for numbers; 0 means the exact value (whole numbers,
    named choices). ``answer_form`` says what the answer cell expects, ``units`` its units ("" for
    a name or a pair whose form names them), ``parts`` the names of a pair's components.
    """

    number: int
    id: str
    title: str
    question: str
    units: str
    tolerance: float
    answer_form: str
    parts: tuple[str, ...] = ()
    #: For a whole-number answer: what a fractional one is told (which way to round, and why).
    rounding: str = ""

    @property
    def expects(self) -> str:
        """What to write in the answer cell, e.g. "a number, in ms"."""
        if self.units in ("", "1"):
            return self.answer_form
        if self.units == "x":
            return f"{self.answer_form} (how many times)"
        return f"{self.answer_form}, in {self.units}"

    @property
    def tolerance_text(self) -> str:
        """How close counts as right: "within 1%" or "exactly"."""
        return f"within {self.tolerance:.0%}" if self.tolerance else "exactly"

    @property
    def prompt(self) -> str:
        """The question with what to answer and how close it must be, as the notebooks state it."""
        return f"{self.question} Answer with {self.expects}, {self.tolerance_text}."


@dataclass(frozen=True)
class Solution:
    """The worked answer of an exercise: ``value`` in ``units``, and the working as text."""

    exercise: Exercise
    value: Answer
    working: str
    # Answers a student is likely to reach by a known slip, each with the hint that explains it.
    mistakes: tuple[tuple[Answer, str], ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        value = f"{show_value(self.value)} {self.exercise.units}".rstrip()
        return f"Exercise {self.exercise.number} ({self.exercise.id}): {value}\n{self.working}"

    def _repr_pretty_(self, p, cycle: bool) -> None:  # IPython plain-text display
        p.text(str(self))


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer. ``status`` is ``"correct"``, ``"wrong"`` or ``"unanswered"``;
    ``correct`` is True only for a right answer. Displays itself as a short message (HTML in
    Jupyter, text elsewhere)."""

    exercise: Exercise
    status: str
    message: str
    hint: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def answered(self) -> bool:
        return self.status != "unanswered"

    def __str__(self) -> str:
        head = f"Exercise {self.exercise.number} ({self.exercise.id}): {self.message}"
        return head + (f"\nHint: {self.hint}" if self.hint else "")

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        colour = {"correct": "#1b7f3b", "wrong": "#b3261e"}.get(self.status, "#5f6368")
        mark = {"correct": "&#10004;", "wrong": "&#10008;"}.get(self.status, "&#8230;")
        body = f"<b>{mark} Exercise {self.exercise.number}</b>: {html.escape(self.message)}"
        if self.hint:
            body += f"<br><i>Hint:</i> {html.escape(self.hint)}"
        return f'<div style="border-left: 4px solid {colour}; padding: 4px 8px;">{body}</div>'


#: Every exercise, classroom lab first (numbers below 100), then the topic labs'; filled by
#: :func:`register` when :mod:`dlexplore.lab.exercises` is imported.
EXERCISES: dict[str, Exercise] = {}
_SOLVERS: dict[str, Callable[[], Solution]] = {}
_HINTS: dict[str, str] = {}

_CHOICE_ALIASES = {
    "binomial": "tree",
    "binomial tree": "tree",
    "binomial-tree": "tree",
    "ring allreduce": "ring",
    "tree allreduce": "tree",
}


def register(exercise: Exercise, solver: Callable[[], Solution], hint: str = "") -> Exercise:
    """Add an exercise (and the function that works out its solution) to :data:`EXERCISES`, with
    ``hint``, the general hint a wrong answer gets when no specific mistake matches it.

    The classroom lab and the topic labs in :mod:`dlexplore.lab.exercises` (parallelism, energy,
    I/O, stragglers) register theirs this way, with numbers of their own (1.., 101.., 201.., ...).
    Ids and numbers must be new.
    """
    if exercise.id in EXERCISES or any(e.number == exercise.number for e in EXERCISES.values()):
        raise ValueError(f"exercise {exercise.number} ({exercise.id}) is already registered")
    EXERCISES[exercise.id] = exercise
    _SOLVERS[exercise.id] = solver
    _HINTS[exercise.id] = hint or "compare your working with the formula in the question."
    return exercise


def classroom() -> list[Exercise]:
    """The classroom lab's own exercises (numbers below 100), in order."""
    return [e for e in EXERCISES.values() if e.number < 100]


def _exercise(exercise_id: int | str) -> Exercise:
    if isinstance(exercise_id, numbers.Integral) and not isinstance(exercise_id, bool):
        for e in EXERCISES.values():
            if e.number == int(exercise_id):
                return e
    elif isinstance(exercise_id, str):
        key = exercise_id.strip().lower()
        if key in EXERCISES:
            return EXERCISES[key]
        if key.isdigit():
            return _exercise(int(key))
    known = ", ".join(f"{e.number} ({e.id})" for e in EXERCISES.values())
    raise KeyError(f"unknown exercise {exercise_id!r}; known: {known}")


def solution(exercise_id: int | str) -> Solution:
    """The worked solution of an exercise (by number or id), for teachers."""
    return _SOLVERS[_exercise(exercise_id).id]()


def check(exercise_id: int | str, answer: object) -> CheckResult:
    """Check ``answer`` to an exercise (by number or id) and say whether it is right.

    Never raises for a bad answer: ``None`` gives "not answered yet", a wrong value or form a hint
    that says what it looks like (see :mod:`dlexplore.lab.feedback`). An unknown exercise id raises
    ``KeyError`` (a mistake in the notebook, not in the answer).
    """
    exercise = _exercise(exercise_id)
    if answer is None:
        return CheckResult(
            exercise,
            "unanswered",
            f"not answered yet: set answer_{exercise.number} above to "
            f"{exercise.expects}, then run this cell again.",
        )
    sol = solution(exercise.id)
    choices = [v for v, _ in sol.mistakes if isinstance(v, str)] if isinstance(sol.value, str) else []
    verdict = diagnose(
        answer,
        sol.value,
        tolerance=exercise.tolerance,
        units=exercise.units,
        expects=exercise.expects,
        mistakes=sol.mistakes,
        general=_HINTS[exercise.id],
        rounding=exercise.rounding,
        choices=choices,
        aliases=_CHOICE_ALIASES,
    )
    if verdict.status == "correct":
        if isinstance(sol.value, tuple) and exercise.parts:
            shown = ", ".join(
                f"{name} {show_value(v)}" for name, v in zip(exercise.parts, sol.value, strict=True)
            )
        elif isinstance(sol.value, str):
            shown = sol.value
        else:
            shown = f"{show_value(sol.value)} {exercise.units}".rstrip()
        within = f", {exercise.tolerance_text}" if exercise.tolerance else ""
        return CheckResult(exercise, "correct", f"correct! The answer is {shown}{within}.")
    return CheckResult(exercise, "wrong", f"not yet: {show_answer(answer)} is not right.", verdict.hint)


@dataclass(frozen=True)
class Score:
    """How a lab's answers stand: ``correct``, ``wrong`` and ``unanswered`` exercise numbers."""

    correct: tuple[int, ...]
    wrong: tuple[int, ...]
    unanswered: tuple[int, ...]

    def __str__(self) -> str:
        total = len(self.correct) + len(self.wrong) + len(self.unanswered)
        text = f"{len(self.correct)} of {total} correct, {len(self.unanswered)} not answered yet"
        if self.wrong:
            text += f"; not yet right: {', '.join(str(n) for n in self.wrong)}"
        return text

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        return f"<b>Your score:</b> {html.escape(str(self))}"


def score(numbers: Iterable[int], answers: Mapping[str, object]) -> Score:
    """The score of exercises ``numbers`` with the answers in ``answers`` (``answer_N`` names, as
    the labs write them; pass ``globals()``). Solutions are not shown: only right or not."""
    out: dict[str, list[int]] = {"correct": [], "wrong": [], "unanswered": []}
    for number in numbers:
        status = check(number, answers.get(f"answer_{number}")).status
        out[status].append(int(number))
    return Score(tuple(out["correct"]), tuple(out["wrong"]), tuple(out["unanswered"]))
