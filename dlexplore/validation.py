"""Checks of user input, in one place, for every entry point: the command line, the widgets and the
Python API all refuse a bad value here, with the same words.

Each check takes the argument's name and its value (a number, a sequence or an array of them) and
returns the value as floats (ints for counts) of the same shape, or raises
:class:`~dlexplore.errors.InvalidValueError`, whose message says what was expected, the allowed
range and the value received, written as a person would write it (``-1``, ``[1, 2, -1]``), never
as a numpy repr::

    >>> positive("bandwidth", -1, units="GB/s")
    InvalidValueError: bandwidth must be a positive number of GB/s; got -1

The rules are physical: times, sizes and rates are finite and non-negative (bandwidths and
efficiencies strictly positive); counts are whole numbers; a GPU count is at most
:data:`MAX_GPUS`; a precision must be one the chosen GPU computes in.

This module sits at the bottom of the package (it imports only :mod:`dlexplore.errors`), so that
every layer, the model included, can use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .errors import InvalidValueError, describe, describe_number

__all__ = [
    "MAX_GPUS",
    "PRECISIONS",
    "describe",
    "number",
    "positive",
    "nonnegative",
    "fraction",
    "count",
    "gpu_count",
    "batch_size",
    "MAX_BATCH",
    "choice",
    "supported_precisions",
    "precision_for",
]

#: The largest GPU count the models accept. The largest training clusters built so far hold about
#: 1e5 GPUs; past a million the catalog's networks (one flat fabric, one latency) mean nothing,
#: so a larger count is a typo (``1e9``) rather than a question the model can answer.
MAX_GPUS = 1_048_576

#: The largest batch per GPU (samples) the models accept: a billion samples in one step of one GPU
#: fit no GPU's memory for any workload, and beyond it products such as gpus x batch leave 64-bit
#: integers.
MAX_BATCH = 2**30

#: Training precisions, in the order the catalog lists their peak rates.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def _as_array(name: str, value: Any, expected: Callable[[], str]) -> np.ndarray:
    # ``expected`` is called only for an error: its text costs more than a valid value's check
    if value is None or isinstance(value, (str, bytes, bool, np.bool_)):
        raise InvalidValueError(name, value, expected())
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise InvalidValueError(name, value, expected()) from None
    if arr.size == 0:
        raise InvalidValueError(name, value, expected(), note="the sequence is empty")
    if isinstance(value, np.ndarray) and value.dtype.kind != "O":
        # a typed array's dtype says it all (a boolean array is no number), with no per-item look,
        # which would cost a Python object per element of a large sweep
        if value.dtype.kind not in "iuf":
            raise InvalidValueError(name, value, expected())
    elif arr.ndim > 0:
        # a list holding booleans or strings that numpy turned into numbers
        for item in np.asarray(value, dtype=object).ravel():
            if isinstance(item, (str, bytes, bool, np.bool_)) or item is None:
                raise InvalidValueError(name, value, expected())
    return arr


def _out(value: Any, arr: np.ndarray, integer: bool = False) -> Any:
    if np.ndim(value) == 0 and arr.ndim == 0:
        return int(arr) if integer else float(arr)
    return arr.astype(np.int64) if integer else arr


def _range_text(minimum: float | None, maximum: float | None, strict_min: bool) -> str:
    if minimum is not None and maximum is not None:
        low = f"above {describe_number(minimum)}" if strict_min else f"from {describe_number(minimum)}"
        return f"{low} to {describe_number(maximum)}"
    if minimum is not None:
        return f"> {describe_number(minimum)}" if strict_min else f">= {describe_number(minimum)}"
    if maximum is not None:
        return f"<= {describe_number(maximum)}"
    return ""


def number(
    name: str,
    value: Any,
    *,
    units: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    strict_min: bool = False,
    integer: bool = False,
    allow_inf: bool = False,
) -> Any:
    """``value`` as float(s) if every element is a finite number within the bounds, else an error.

    ``strict_min`` excludes ``minimum`` itself; ``integer`` asks for whole numbers (returned as
    ints); ``allow_inf`` accepts ``+inf`` (a bucket "as large as the model", say).
    """
    if (
        type(value) is float
        or type(value) is int  # exactly: a bool is an int, and no number
        or (isinstance(value, (np.ndarray, np.generic)) and value.ndim == 0 and value.dtype.kind in "iuf")
    ):
        # A model evaluation checks some 45 scalar parameters: a check in plain floats costs a
        # tenth of numpy's on 0-d arrays (a calibration evaluates the model thousands of times).
        v = float(value)
        if (
            v == v
            and (v != math.inf or allow_inf)
            and v != -math.inf
            and (minimum is None or (v > minimum if strict_min else v >= minimum))
            and (maximum is None or v <= maximum)
            and (not integer or not math.isfinite(v) or v == math.floor(v))
        ):
            return int(v) if integer else v

    def expected() -> str:
        kind = "a whole number" if integer else "a number"
        bounds = _range_text(minimum, maximum, strict_min)
        return f"{kind}{' of ' + units if units else ''}" + (f" {bounds}" if bounds else "")

    arr = _as_array(name, value, expected)
    bad = np.isnan(arr) | (np.isinf(arr) & ~(allow_inf & (arr > 0)))
    if minimum is not None:
        bad |= (arr <= minimum) if strict_min else (arr < minimum)
    if maximum is not None:
        bad |= arr > maximum
    if integer:
        with np.errstate(invalid="ignore"):
            bad |= np.isfinite(arr) & (arr != np.floor(arr))
    if np.any(bad):
        first = arr[bad].ravel()[0]
        shown = float(first)
        note = f"in {describe(value)}" if arr.size > 1 else ""
        raise InvalidValueError(name, shown, expected(), note=note)
    return _out(value, arr, integer)


def positive(
    name: str, value: Any, *, units: str = "", maximum: float | None = None, allow_inf: bool = False
) -> Any:
    """Finite (or ``+inf`` with ``allow_inf``) and > 0: bandwidths, rates, sizes a model divides by."""
    return number(name, value, units=units, minimum=0, strict_min=True, maximum=maximum, allow_inf=allow_inf)


def nonnegative(name: str, value: Any, *, units: str = "", allow_inf: bool = False) -> Any:
    """Finite and >= 0: latencies, byte counts, times, costs."""
    return number(name, value, units=units, minimum=0, allow_inf=allow_inf)


def fraction(name: str, value: Any, *, allow_zero: bool = True, maximum: float = 1.0) -> Any:
    """Within [0, 1] (or (0, 1] without ``allow_zero``): efficiencies, overlaps, shares."""
    return number(name, value, minimum=0, maximum=maximum, strict_min=not allow_zero)


def count(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None, units: str = "") -> Any:
    """Whole numbers within ``minimum``..``maximum``: ranks, servers, threads, batch sizes."""
    return number(name, value, units=units, minimum=minimum, maximum=maximum, integer=True)


def gpu_count(name: str, value: Any) -> Any:
    """A GPU (or rank) count: a whole number from 1 to :data:`MAX_GPUS`."""
    return count(name, value, minimum=1, maximum=MAX_GPUS)


def batch_size(name: str, value: Any, *, gpus: int = 1) -> Any:
    """A batch size in samples: a whole number from 1 to :data:`MAX_BATCH` per GPU (``gpus`` GPUs
    for a global batch)."""
    return count(name, value, maximum=MAX_BATCH * gpus, units="samples")


def choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """``value`` (case-insensitive, ``-`` and ``_`` alike) as one of ``choices``, else an error."""
    options = list(choices)
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        for option in options:
            if option.lower().replace("-", "_") == key:
                return option
    raise InvalidValueError(name, value, "one of " + ", ".join(options))


def supported_precisions(gpu: Any) -> tuple[str, ...]:
    """The training precisions ``gpu`` (a catalog GPU record) computes in: fp32 always, each other
    one where the catalog gives it a peak rate (``tf32_tflops`` and so on are NaN where missing)."""
    out = []
    for precision in PRECISIONS:
        rate = getattr(gpu, f"{precision}_tflops", float("nan"))
        if precision == "fp32" or (rate is not None and math.isfinite(float(rate))):
            out.append(precision)
    return tuple(out)


def precision_for(gpu: Any, precision: str) -> str:
    """``precision`` if ``gpu`` supports it, else an error that names the ones it does.

    ``precision`` must already be canonical (fp32, tf32, fp16 or bf16).
    """
    supported = supported_precisions(gpu)
    if precision not in supported:
        name = getattr(gpu, "name", "this GPU")
        raise InvalidValueError(
            "precision",
            precision,
            "one of " + ", ".join(supported),
            note=f"{name} has no {precision} arithmetic",
        )
    return precision
