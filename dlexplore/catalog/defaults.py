"""The model's default efficiencies and overheads (``data/catalog/defaults.csv``).

Each row is one named, calibratable parameter of the compute and communication models with its
default value, the standard error of that value where it was fitted, its units, what it means and
where it comes from: a published figure, or the fit that ``benchmarks/fit_defaults.py`` makes
against the bundled published measurements (that script writes the file; the file says which).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache

from .._data import data_dir
from ..errors import InputFileError, UnknownNameError

__all__ = ["ModelDefault", "model_defaults", "model_default", "DEFAULTS_COLUMNS"]

DEFAULTS_COLUMNS = ("parameter", "value", "stderr", "units", "meaning", "source")


@dataclass(frozen=True)
class ModelDefault:
    """One default: ``value`` and ``stderr`` (NaN where not fitted) in ``units``."""

    parameter: str
    value: float
    stderr: float
    units: str
    meaning: str
    source: str


@cache
def model_defaults() -> dict[str, ModelDefault]:
    """Every default of ``data/catalog/defaults.csv``, by parameter name."""
    path = data_dir() / "catalog" / "defaults.csv"
    out: dict[str, ModelDefault] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        lines = [
            (i, line)
            for i, line in enumerate(handle, 1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    reader = csv.reader(line for _, line in lines)
    header = tuple(c.strip() for c in next(reader))
    if header != DEFAULTS_COLUMNS:
        raise InputFileError(
            path,
            f"expected the columns {', '.join(DEFAULTS_COLUMNS)}, got {', '.join(header)}",
            line=lines[0][0],
        )
    for (number, _), cells in zip(lines[1:], reader, strict=True):
        if len(cells) != len(DEFAULTS_COLUMNS):
            raise InputFileError(
                path, f"expected {len(DEFAULTS_COLUMNS)} values, got {len(cells)}", line=number
            )
        name, value, stderr, units, meaning, source = (c.strip() for c in cells)
        try:
            out[name] = ModelDefault(
                name, float(value), float(stderr) if stderr else math.nan, units, meaning, source
            )
        except ValueError:
            raise InputFileError(
                path, f"{name}: value and stderr must be numbers, got {value!r}, {stderr!r}", line=number
            ) from None
    return out


def model_default(name: str) -> float:
    """The default value of the model parameter ``name`` (see :func:`model_defaults`)."""
    table = model_defaults()
    if name not in table:
        raise UnknownNameError("model default", name, list(table))
    return table[name].value
