"""The model's default efficiencies and overheads (``data/catalog/defaults.csv``).

Each row is one named, calibratable parameter of the compute and communication models with its
default value, the standard error of that value where it was fitted, its units, what it means and
where it comes from: a published figure, or the fit that ``benchmarks/fit_defaults.py`` makes
against the bundled published measurements (that script writes the file; the file says which).

Where the bundled runs of one GPU architecture determine a parameter apart from the others
(``data/catalog/defaults_by_architecture.csv``, written by the same script), the GPUs of that
architecture take that value instead (:func:`model_default` with a ``gpu``). It describes the runs
it was fitted to, the software of their time as much as the chip: the fixed time per kernel of the
Pascal rows is TensorFlow 1.x's and Caffe2's of 2017, on P100s.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .._data import data_dir
from ..errors import DlexploreError, InputFileError, UnknownNameError
from . import hardware
from ._types import GPU

__all__ = [
    "ARCHITECTURE_COLUMNS",
    "DEFAULTS_COLUMNS",
    "ModelDefault",
    "architecture_defaults",
    "model_default",
    "model_defaults",
]

DEFAULTS_COLUMNS = ("parameter", "value", "stderr", "units", "meaning", "source")
#: The columns of ``defaults_by_architecture.csv`` (written by ``benchmarks/fit_defaults.py``).
ARCHITECTURE_COLUMNS = ("architecture", "parameter", "value", "stderr", "points", "source")


@dataclass(frozen=True)
class ModelDefault:
    """One default: ``value`` and ``stderr`` (NaN where not fitted) in ``units``."""

    parameter: str
    value: float
    stderr: float
    units: str
    meaning: str
    source: str


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    """The data rows of a defaults file (``#`` lines are comments), each with its line number,
    after checking the header."""
    with open(path, newline="", encoding="utf-8") as handle:
        lines = [
            (i, line)
            for i, line in enumerate(handle, 1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    if not lines:
        raise InputFileError(path, f"expected the columns {', '.join(columns)}, got an empty file")
    reader = csv.reader(line for _, line in lines)
    header = tuple(c.strip() for c in next(reader))
    if header != columns:
        raise InputFileError(
            path, f"expected the columns {', '.join(columns)}, got {', '.join(header)}", line=lines[0][0]
        )
    out = []
    for (number, _), cells in zip(lines[1:], reader, strict=True):
        if len(cells) != len(columns):
            raise InputFileError(path, f"expected {len(columns)} values, got {len(cells)}", line=number)
        out.append((number, [c.strip() for c in cells]))
    return out


def _numbers(path: Path, number: int, name: str, value: str, stderr: str) -> tuple[float, float]:
    try:
        return float(value), float(stderr) if stderr else math.nan
    except ValueError:
        raise InputFileError(
            path, f"{name}: value and stderr must be numbers, got {value!r}, {stderr!r}", line=number
        ) from None


@cache
def model_defaults() -> dict[str, ModelDefault]:
    """Every default of ``data/catalog/defaults.csv``, by parameter name."""
    path = data_dir() / "catalog" / "defaults.csv"
    out: dict[str, ModelDefault] = {}
    for number, (name, value, stderr, units, meaning, source) in _rows(path, DEFAULTS_COLUMNS):
        out[name] = ModelDefault(name, *_numbers(path, number, name, value, stderr), units, meaning, source)
    return out


@cache
def architecture_defaults() -> dict[tuple[str, str], ModelDefault]:
    """The defaults fitted for one GPU architecture (``data/catalog/defaults_by_architecture.csv``,
    written by ``benchmarks/fit_defaults.py``), by (architecture, parameter); units and meaning as
    in :func:`model_defaults`, ``source`` naming the runs they were fitted to."""
    path = data_dir() / "catalog" / "defaults_by_architecture.csv"
    general = model_defaults()
    known = sorted({g.architecture for g in hardware.GPUS if g.architecture})
    out: dict[tuple[str, str], ModelDefault] = {}
    for number, (arch, name, value, stderr, _points, source) in _rows(path, ARCHITECTURE_COLUMNS):
        if name not in general:
            raise InputFileError(
                path, f"{name!r} is not a parameter of defaults.csv ({', '.join(general)})", line=number
            )
        if arch not in known:
            raise InputFileError(
                path, f"{arch!r} is not the architecture of a catalog GPU ({', '.join(known)})", line=number
            )
        if (arch, name) in out:
            raise InputFileError(path, f"a second {arch} {name}: one value per architecture", line=number)
        numbers = _numbers(path, number, name, value, stderr)
        out[(arch, name)] = ModelDefault(name, *numbers, general[name].units, general[name].meaning, source)
    return out


def model_default(name: str, gpu: GPU | str | None = None) -> float:
    """The default value of the model parameter ``name`` (see :func:`model_defaults`); with a
    ``gpu``, its architecture's fitted value where :func:`architecture_defaults` has one."""
    table = model_defaults()
    if name not in table:
        raise UnknownNameError("model default", name, list(table))
    if gpu is not None:
        architecture = gpu.architecture if isinstance(gpu, GPU) else _architecture(str(gpu))
        fitted = architecture_defaults().get((architecture, name))
        if fitted is not None:
            return fitted.value
    return table[name].value


def _architecture(name: str) -> str:
    # not cached: a catalog file loaded later may add or replace the GPU
    try:
        return hardware.gpu(name).architecture
    except DlexploreError:  # a GPU the catalog lacks has no architecture's defaults
        return ""
