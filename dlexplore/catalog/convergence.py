"""Per-workload convergence parameters (``data/catalog/convergence.csv``), each with its source.

Each row names a workload, the target it is trained to, and what is known of the steps to reach it:
McCandlish et al.'s minimal steps ``s_min`` and noise scale ``b_noise`` (samples) where published,
else the published fixed budget (``epochs_budget`` x ``samples_per_epoch``, or ``samples_budget``)
and the largest batch that met the target (``max_batch``) with its learning-rate ``rule``. The
model that uses them is :mod:`dlexplore.model.convergence`; here they are only read and checked.
A row whose name is not a catalog workload (``resnet50-goyal2017``) is another published recipe
for the workload its name starts with, looked up by that name.
"""

from __future__ import annotations

import csv
import math
from functools import cache
from pathlib import Path

from .._data import data_dir
from ..errors import InputFileError, UnknownNameError

__all__ = ["convergence_entry", "convergence_entries", "NUMERIC_FIELDS"]

#: Numeric columns (empty = unknown, NaN); all others are text.
NUMERIC_FIELDS = (
    "samples_per_epoch",
    "s_min",
    "b_noise",
    "s_min_stderr",
    "b_noise_stderr",
    "epochs_budget",
    "samples_budget",
    "max_batch",
)
_TEXT_FIELDS = ("name", "target", "rule", "source", "notes")


def _path() -> Path:
    return data_dir() / "catalog" / "convergence.csv"


@cache
def _read() -> dict[str, dict[str, object]]:
    path = _path()
    lines = path.read_text(encoding="utf-8").splitlines()
    numbered = [
        (n, line)
        for n, line in enumerate(lines, start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    rows = list(csv.reader([line for _, line in numbered]))
    header = [h.strip() for h in rows[0]]
    missing = [c for c in (*_TEXT_FIELDS, *NUMERIC_FIELDS) if c not in header]
    if missing:
        raise InputFileError(path, f"missing column(s) {missing}", line=numbered[0][0])
    entries: dict[str, dict[str, object]] = {}
    for (number, _), fields in zip(numbered[1:], rows[1:], strict=True):
        if len(fields) != len(header):
            raise InputFileError(path, f"found {len(fields)} fields; expected {len(header)}", line=number)
        entry: dict[str, object] = {}
        for key, text in zip(header, fields, strict=True):
            text = text.strip()
            if key in NUMERIC_FIELDS:
                try:
                    value = float(text) if text else math.nan
                except ValueError:
                    value = -1.0
                if not (math.isnan(value) or (math.isfinite(value) and value > 0)):
                    raise InputFileError(
                        path,
                        f"column {key!r}: expected a number > 0 or an empty cell, found {text!r}",
                        line=number,
                    )
                entry[key] = value
            else:
                entry[key] = text
        entries[str(entry["name"]).lower()] = entry
    return entries


def convergence_entries() -> list[dict[str, object]]:
    """Every row of the convergence catalog, as dicts (numbers as floats, NaN when unknown)."""
    return [dict(e) for e in _read().values()]


def convergence_entry(workload: str) -> dict[str, object]:
    """The row for ``workload`` (a catalog workload id or alias, case-insensitive)."""
    from .workloads import workload as find_workload

    entries = _read()
    key = str(workload).strip().lower()
    if key not in entries:
        try:
            key = find_workload(workload).name.lower()
        except Exception:  # an unknown workload: say which ones have convergence parameters
            key = ""
    if key not in entries:
        raise UnknownNameError("workload with convergence parameters", str(workload), entries)
    return dict(entries[key])
