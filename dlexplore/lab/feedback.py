"""What a check cell tells a student about an answer: right, or which mistake it looks like.

:func:`diagnose` compares an answer with the expected value and goes from the most specific
diagnosis to the most general, stopping at the first that applies:

1. the answer's form (a number in quotes, a name where a number is due, a pair with three parts,
   a fraction where a whole number is due: the exercise says which way to round);
2. a known slip of that exercise (the whole buffer instead of 2(p-1)/p of it, Gbit/s read as
   GB/s ...), matched tightly (0.5%, or exactly for whole numbers);
3. a near-miss (within :data:`NEAR` but outside the tolerance): rounding, never units;
4. a factor of two too much or too little;
5. a units slip: the answer is the expected value times a unit factor (1e3, 1e6, 1e9, 1024, 8,
   100 ...) that is far from 1, so that no near-miss can look like one;
6. the exercise's general hint.

Plain values in, text out: no notebook, no catalog; :func:`dlexplore.lab.check` calls it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["NEAR", "UNIT_FACTORS", "Verdict", "diagnose", "as_number", "show_answer", "show_value"]

#: How far off (relative) an answer still counts as a near-miss rather than another mistake.
NEAR = 0.15

#: Unit factors a student can slip by, each with what it usually means. All are at least 15%
#: from 1: 1000/1024 (2.4%) is left out on purpose, since a rounding slip lands there too.
UNIT_FACTORS: tuple[tuple[float, str], ...] = (
    (1e3, "a factor of 1000"),
    (1e-3, "a factor of 1000"),
    (1e6, "a factor of 10^6"),
    (1e-6, "a factor of 10^6"),
    (1e9, "a factor of 10^9"),
    (1e-9, "a factor of 10^9"),
    (1024.0, "a factor of 1024"),
    (1 / 1024, "a factor of 1024"),
    (2.0**20, "a factor of 2^20"),
    (2.0**-20, "a factor of 2^20"),
    (8.0, "bits and bytes"),
    (1 / 8, "bits and bytes"),
    (100.0, "percent"),
    (0.01, "percent"),
    (3.6e6, "J and kWh"),
    (1 / 3.6e6, "J and kWh"),
    (60.0, "seconds and minutes"),
    (1 / 60, "seconds and minutes"),
)


@dataclass(frozen=True)
class Verdict:
    """``status`` is ``"correct"``, ``"wrong"`` or ``"unanswered"``; ``hint`` says what to look at."""

    status: str
    hint: str = ""


def as_number(value: object) -> float | None:
    """A finite float from a Python, numpy or 0-d xarray number; None for anything else."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _items(answer: object) -> list | None:
    """The elements of a tuple, list or 1-D array answer; None for anything else."""
    if isinstance(answer, (str, bytes)) or not hasattr(answer, "__len__"):
        return None
    try:
        return list(answer)  # type: ignore[call-overload]
    except Exception:  # an odd object from a student must not break the check cell
        return None


def _quoted_number(answer: object) -> float | None:
    if not isinstance(answer, str):
        return None
    try:
        number = float(answer.strip().replace(",", ""))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def show_value(value: object) -> str:
    """An expected value as the check shows it: whole numbers whole, others to 4 figures."""
    if isinstance(value, tuple):
        return "(" + ", ".join(show_value(v) for v in value) + ")"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if abs(float(value)) >= 1e4:
        return f"{float(value):,.0f}"
    return f"{float(value):.4g}"


def show_answer(answer: object) -> str:
    """The student's answer as they wrote it (up to 10 significant figures: 2500.6 stays 2500.6)."""
    try:
        if isinstance(answer, (tuple, list)):
            return "(" + ", ".join(show_answer(a) for a in answer) + ")"
        number = as_number(answer)
        if number is not None and not isinstance(answer, str):
            return f"{number:.10g}"
        return repr(answer)[:60]
    except Exception:  # a student's odd object must not break the check cell
        return "this answer"


def _close(answer: object, expected: object, tolerance: float, aliases: dict[str, str]) -> bool:
    if isinstance(expected, str):
        if not isinstance(answer, str):
            return False
        key = " ".join(answer.strip().lower().replace("_", " ").split())
        return aliases.get(key, key) == expected
    if isinstance(expected, tuple):
        items = _items(answer)
        return (
            items is not None
            and len(items) == len(expected)
            and all(_close(a, e, tolerance, aliases) for a, e in zip(items, expected, strict=True))
        )
    number = as_number(answer)
    if number is None:
        return False
    if tolerance == 0:
        return number == expected
    return abs(number - float(expected)) <= tolerance * abs(float(expected))  # type: ignore[arg-type]


def _units_text(units: str) -> str:
    if units in ("", "1"):
        return "a plain number (no unit)"
    if units == "x":
        return "a plain ratio (how many times)"
    return units


def _numeric(
    number: float, expected: float, *, tolerance: float, units: str, rounding: str, general: str
) -> str:
    """The hint for a wrong number (steps 3-6 of the module docstring)."""
    whole = isinstance(expected, numbers.Integral)
    if expected == 0:
        return general
    ratio = number / float(expected)
    off = ratio - 1
    if whole and number != math.floor(number):
        return rounding or "the answer is a whole number"
    if abs(off) <= NEAR:
        if whole:
            return (
                f"close: {number:g} is {abs(number - expected):g} from the answer, which must be "
                f"exact. {rounding or 'Check how you rounded.'}"
            )
        return (
            f"close: {abs(off):.1%} {'over' if off > 0 else 'under'}, but the answer must be within "
            f"{tolerance:.0%}: keep more digits in the intermediate results, or check each figure "
            "you used."
        )
    loose = max(tolerance, 0.005)
    for factor, twice in ((2.0, "twice"), (0.5, "half")):
        if abs(ratio / factor - 1) <= loose:
            return (
                f"your answer is {twice} the expected one: look for a factor of 2 "
                f"{'counted twice' if factor > 1 else 'left out'}. {general}"
            )
    for factor, meaning in UNIT_FACTORS:
        if abs(ratio / factor - 1) <= loose:
            if meaning == "percent":
                return f"off by 100: give {_units_text(units)}, not in %."
            return f"the digits look right but the units do not ({meaning}): give it in {_units_text(units)}."
    return general


def diagnose(
    answer: object,
    expected: object,
    *,
    tolerance: float,
    units: str,
    expects: str,
    mistakes: Iterable[tuple[object, str]] = (),
    general: str = "",
    rounding: str = "",
    choices: Sequence[str] = (),
    aliases: dict[str, str] | None = None,
) -> Verdict:
    """The verdict on ``answer`` (see the module docstring).

    ``expected`` is a number, a name (``choices`` the names a student may give, ``aliases`` other
    spellings of them) or a tuple of numbers; ``tolerance`` relative (0: exact); ``units`` the
    answer's units ("" for none, "x" for a ratio); ``expects`` what to write, in words;
    ``mistakes`` known slips as (value, hint); ``general`` the exercise's hint; ``rounding`` what
    to tell a fractional answer to a whole-number question.
    """
    aliases = aliases or {}
    if answer is None:
        return Verdict("unanswered")
    if _close(answer, expected, tolerance, aliases):
        return Verdict("correct")
    quoted = _quoted_number(answer)
    if isinstance(expected, str):
        known = set(choices) | {expected}
        if not isinstance(answer, str) or not any(_close(answer, c, 0, aliases) for c in known):
            return Verdict("wrong", f"answer with {expects}.")
    elif isinstance(expected, tuple):
        items = _items(answer)
        if items is None or len(items) != len(expected):
            return Verdict("wrong", f"answer with {expects}.")
    elif quoted is not None:
        return Verdict("wrong", f"write the number without quotes: {quoted:g}, not {answer!r}.")
    elif as_number(answer) is None:
        return Verdict("wrong", f"answer with {expects}.")
    # A known slip: tight, so that a near-miss is not taken for one.
    slips = [
        hint
        for value, hint in mistakes
        if _close(
            answer,
            value,
            0 if isinstance(value, (str, numbers.Integral)) else min(max(tolerance, 1e-9), 0.005),
            aliases,
        )
    ]
    if slips:
        return Verdict("wrong", " Or: ".join(slips))
    if isinstance(expected, str):
        return Verdict("wrong", general)
    if isinstance(expected, tuple):
        items = _items(answer)
        assert items is not None
        for index, (item, value) in enumerate(zip(items, expected, strict=True)):
            number = as_number(item)
            if number is None:
                return Verdict("wrong", f"answer with {expects}.")
            if not _close(number, value, tolerance, aliases):
                part = f"part {index + 1} of the pair: "
                return Verdict(
                    "wrong",
                    part
                    + _numeric(
                        number, value, tolerance=tolerance, units=units, rounding=rounding, general=general
                    ),
                )
        return Verdict("wrong", general)
    number = as_number(answer)
    assert number is not None
    return Verdict(
        "wrong",
        _numeric(
            number,
            expected,
            tolerance=tolerance,
            units=units,  # type: ignore[arg-type]
            rounding=rounding,
            general=general,
        ),
    )
