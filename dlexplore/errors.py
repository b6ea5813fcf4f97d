"""Exceptions raised by dlexplore.

Every error a user can cause derives from :class:`DlexploreError`, so callers (and the CLI) can tell
a bad input from a bug. Messages name the file, the row or event, and what was expected.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from importlib import import_module
from typing import Any

import numpy as np

__all__ = [
    "DlexploreError",
    "UnknownNameError",
    "InputFileError",
    "InvalidValueError",
    "require_extra",
    "describe",
    "describe_number",
    "suggest",
]


class DlexploreError(ValueError):
    """Base class of errors caused by bad input (arguments, files, names)."""

    def __reduce__(self) -> tuple:
        # Subclasses take other constructor arguments than their message, so the default
        # (cls(*args)) cannot rebuild them; Dask and multiprocessing pass errors between processes.
        return (_restore, (type(self), self.args, dict(self.__dict__)))


def _restore(cls: type, args: tuple, state: dict) -> DlexploreError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class UnknownNameError(DlexploreError, KeyError):
    """A catalog or dataset name that does not exist; the message suggests the nearest ids."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        self.kind = kind
        self.name = name
        self.known = sorted(set(known))
        hint = suggest(name, self.known)
        message = f"unknown {kind} {name!r}"
        if hint:
            message += f"; did you mean {', '.join(repr(h) for h in hint)}?"
        else:
            message += f"; known: {', '.join(self.known)}"
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class InputFileError(DlexploreError):
    """A file that cannot be read as expected; names the file, the position and the expectation."""

    def __init__(self, path: object, message: str, *, line: int | None = None, row: int | None = None):
        self.path = str(path)
        self.line = line
        self.row = row
        where = self.path
        if line is not None:
            where += f", line {line}"
        if row is not None:
            where += f", row {row}"
        super().__init__(f"{where}: {message}")


class InvalidValueError(DlexploreError):
    """An argument outside what it may be: names the argument, what was expected and the value
    received (``gpus must be a whole number from 1 to 1,048,576; got 1,000,000,000``).

    Raised by :mod:`dlexplore.validation`, which every entry point uses.
    """

    def __init__(self, name: str, value: object, expected: str, *, note: str = ""):
        self.name = name
        self.value = value
        self.expected = expected
        message = f"{name} must be {expected}; got {describe(value)}"
        if note:
            message += f" ({note})"
        super().__init__(message)


def suggest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Return up to ``n`` ids from ``known`` that look like ``name`` (case-insensitive)."""
    known = list(known)
    lowered = {k.lower(): k for k in known}
    key = name.lower()
    hits = difflib.get_close_matches(key, list(lowered), n=n, cutoff=0.5)
    # Prefix and substring matches catch "a100" -> "A100-40GB", which difflib scores low.
    for k_low in lowered:
        if len(hits) >= n:
            break
        if k_low not in hits and (k_low.startswith(key) or (len(key) >= 3 and key in k_low)):
            hits.append(k_low)
    return [lowered[h] for h in hits[:n]]


def require_extra(what: str, packages: Iterable[str], extra: str = "plots") -> None:
    """Import ``packages`` or raise a ``ModuleNotFoundError`` saying which of dlexplore's extras
    installs them: ``what`` (``dlexplore.plots``) needs bokeh, which a core install lacks."""
    for package in packages:
        try:
            import_module(package)
        except ModuleNotFoundError:
            raise ModuleNotFoundError(
                f"{what} needs {package}, which dlexplore installs only with an extra: "
                f"pip install 'dlexplore[{extra}]' (or 'dlexplore[explore]' for the dashboard too)",
                name=package,
            ) from None


_MAX_SHOWN = 6


def describe(value: Any) -> str:
    """``value`` as a person writes it: ``-1``, ``2.5e+30``, ``[1, 2, -1]``, ``'abc'``, ``None``."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return str(bool(value)) if value is not None else "None"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, numbers.Number):
        return describe_number(value)
    try:
        arr = np.asarray(value)
    except Exception:  # an object numpy cannot hold: say what it is
        return f"a {type(value).__name__}"
    if arr.dtype == object and arr.ndim == 0:
        return f"a {type(value).__name__}"
    if arr.ndim == 0:
        return describe(arr.item())
    items = [describe(v) for v in arr.ravel()[:_MAX_SHOWN].tolist()]
    more = ", ..." if arr.size > _MAX_SHOWN else ""
    return "[" + ", ".join(items) + more + "]"


def describe_number(value: numbers.Number) -> str:
    """A number as a person writes it: ``10,000``, ``2.5e+30``, ``nan``, ``-inf``."""
    if isinstance(value, numbers.Integral) and abs(int(value)) < 10**15:
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    x = float(value)  # type: ignore[arg-type]
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x.is_integer() and abs(x) < 1e15:
        return f"{int(x):,}" if abs(x) >= 10_000 else str(int(x))
    return f"{x:.6g}"
