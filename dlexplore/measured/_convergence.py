"""Steps, samples and epochs of a convergence table, each derived from the others where a file
gives one of them.

Papers report the amount of training in whichever unit they think in: optimizer steps (LAMB),
epochs (Goyal et al., LARS, MLPerf's ResNet-50 reference points) or samples (MLPerf's BERT
reference points). The convergence model (:mod:`dlexplore.model.convergence`) works in steps at a
global batch, so the reader fills the units a file leaves out::

    steps   = samples / global_batch
    samples = epochs x samples_per_epoch        (the file's "# samples_per_epoch:" line)

Values given in the file win; derived ones fill only the cells it leaves empty, and say how in
``attrs["comment"]`` (as the nccl-tests bandwidths of communication tables do).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import xarray as xr

from ..errors import InputFileError
from ._columns import COLUMNS

__all__ = ["derive_amounts"]

_AMOUNTS = ("steps", "samples", "epochs")


def _samples_per_epoch(path: Path, text: str, line: int | None) -> float:
    if not text:
        return math.nan
    try:
        value = float(text.replace(",", "").replace("_", ""))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputFileError(
            path,
            f"samples_per_epoch: expected a number > 0 (training samples in one epoch), found {text!r}",
            line=line,
        )
    return value


def derive_amounts(
    path: Path,
    samples_per_epoch: str,
    line: int | None,
    columns: dict[str, list],
    data_vars: dict[str, xr.Variable],
) -> None:
    """Fill ``steps``, ``samples`` and ``epochs`` from each other in ``data_vars``."""
    if not any(name in columns for name in _AMOUNTS):
        return
    per_epoch = _samples_per_epoch(path, samples_per_epoch, line)
    n = len(columns["global_batch"])
    batch = np.asarray(columns["global_batch"], dtype=np.float64)
    given = {
        name: np.asarray(columns[name], dtype=np.float64) if name in columns else np.full(n, np.nan)
        for name in _AMOUNTS
    }
    notes: dict[str, str] = {}

    def fill(name: str, derived: np.ndarray, how: str) -> None:
        values = given[name]
        holes = np.isnan(values) & ~np.isnan(derived)
        if holes.any():
            values[holes] = derived[holes]
            notes[name] = f"derived where not given: {how}"

    fill("samples", given["steps"] * batch, "steps x global_batch")
    fill("samples", given["epochs"] * per_epoch, f"epochs x samples_per_epoch ({per_epoch:.0f})")
    fill("steps", given["samples"] / batch, "samples / global_batch")
    fill("epochs", given["samples"] / per_epoch, f"samples / samples_per_epoch ({per_epoch:.0f})")
    for name in _AMOUNTS:
        if name in notes or name in columns:
            column = COLUMNS[name]
            attrs = {"long_name": column.long_name, "units": column.units}
            if name in notes:
                attrs["comment"] = notes[name]
            data_vars[name] = xr.Variable("point", given[name], attrs)
