"""Published GEMM measurements (``data/catalog/gemm.csv``) and the plateau efficiency they give.

Each row is one measured matrix product: GPU, precision, shape ``m x n x k`` (blank when the source
does not give it), achieved TFLOP/s and the source. :func:`gemm_efficiency` turns them into the
fraction of peak that large GEMMs reach on a GPU at a precision (the plateau of the compute model's
GEMM efficiency curve, :mod:`dlexplore.model.operators`), with the rule that chose it:

1. the GPU's own large rows (``2 m n k >= 1e11`` FLOPs, or no shape given) at this precision, or at
   a precision with the same peak (fp16 and bf16 share the tensor cores), else at another precision
   on the same kind of unit (TF32 takes the bf16 fraction of the same tensor cores);
2. else the rows of GPUs of the same architecture (``gpus.csv``), same rules;
3. else the median over GPUs of each one's best large row on the same kind of unit: *matrix* (tensor
   cores: tf32, fp16, bf16 where their peak exceeds twice the fp32 peak) or *vector* (fp32, and
   16-bit where it runs on the vector units, as on the P100), so that a GPU measured at many sizes
   counts once.

The best row wins where there are several: the measurements are of tuned libraries at good shapes.

**The model's plateau** (:func:`gemm_plateau`, what an uncalibrated prediction uses) is, where
``benchmarks/fit_defaults.py`` could fit one, the plateau that the bundled measurements of whole
training runs on that GPU imply (``data/catalog/gemm_fitted.csv``: a calibration of the hybrid
model's ``compute_efficiency`` on every bundled LLM table of the GPU at that precision, with its
standard error), else the published figure above. A tuned library's best GEMM is not what a
training run's GEMMs reach: the A100's published 0.86 of peak (CUDA 12.1, 2023) against 0.69 fitted
to Megatron-LM's and DeepSpeed's runs of 2021-2022. A fitted value serves the GPU it was fitted on
and the GPUs of its architecture, at its precision, those with the same peak (fp16, bf16), and the
others on the same kind of unit (TF32 on the tensor cores), as the published rules do.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from .._data import data_dir
from ..errors import DlexploreError, InputFileError
from ._types import GPU, PRECISIONS
from .hardware import GPUS
from .hardware import gpu as _gpu

__all__ = [
    "LARGE_GEMM_FLOPS",
    "GemmEfficiency",
    "gemm_measurements",
    "gemm_efficiency",
    "gemm_plateau",
    "fitted_plateaus",
    "published_plateaus",
    "unit_kind",
]

#: A product of at least this many FLOPs (2 m n k) counts as large: its kernel overhead is negligible.
LARGE_GEMM_FLOPS = 1e11
_COLUMNS = ("gpu", "precision", "m", "n", "k", "tflops", "source")
#: The columns of ``gemm_fitted.csv`` (written by ``benchmarks/fit_defaults.py``).
FITTED_COLUMNS = ("gpu", "precision", "efficiency", "stderr", "points", "source")


@dataclass(frozen=True)
class GemmEfficiency:
    """A plateau GEMM efficiency (fraction of peak), and how it was chosen (``rule``, ``source``)."""

    value: float
    rule: str
    source: str


@cache
def gemm_measurements() -> pd.DataFrame:
    """The bundled GEMM measurements: ``gpu``, ``precision``, ``m``, ``n``, ``k`` (NaN when not
    published), ``tflops`` (TFLOP/s), ``source``, and derived ``flops`` (2 m n k, NaN without a
    shape), ``peak_tflops`` (the catalog's peak for that GPU and precision) and ``efficiency``
    (tflops / peak)."""
    path = data_dir() / "catalog" / "gemm.csv"
    rows = []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(line for line in handle if not line.lstrip().startswith("#"))
        header = next(reader)
        if tuple(h.strip() for h in header) != _COLUMNS:
            raise InputFileError(path, f"expected the columns {', '.join(_COLUMNS)}, got {header}")
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            row = dict(zip(_COLUMNS, (c.strip() for c in cells), strict=True))
            device = _gpu(row["gpu"])
            if row["precision"] not in PRECISIONS:
                raise InputFileError(path, f"precision {row['precision']!r} is not one of {PRECISIONS}")
            shape = [float(row[c]) if row[c] else math.nan for c in ("m", "n", "k")]
            tflops = float(row["tflops"])
            peak = device.peak_flops(row["precision"]) / 1e12
            rows.append(
                {
                    "gpu": device.name,
                    "precision": row["precision"],
                    "m": shape[0],
                    "n": shape[1],
                    "k": shape[2],
                    "tflops": tflops,
                    "source": row["source"],
                    "flops": 2 * shape[0] * shape[1] * shape[2],
                    "peak_tflops": peak,
                    "efficiency": tflops / peak,
                }
            )
    return pd.DataFrame(rows)


def unit_kind(device: GPU, precision: str) -> str:
    """``"matrix"`` where ``precision`` runs on tensor (matrix) cores, else ``"vector"``."""
    if precision == "fp32":
        return "vector"
    return "matrix" if device.peak_flops(precision) > 2 * device.fp32_tflops * 1e12 else "vector"


def _runs_on(device: GPU, precision: str) -> str | None:
    """:func:`unit_kind`, or None for a precision the device lacks."""
    try:
        return unit_kind(device, precision)
    except DlexploreError:  # a precision the device lacks
        return None


#: Whether :func:`gemm_plateau` uses the fitted plateaus (:func:`published_plateaus` turns it off).
_USE_FITTED = [True]


@contextmanager
def published_plateaus() -> Iterator[None]:
    """Within the block, :func:`gemm_plateau` gives the published plateaus only: for the fit that
    writes the fitted ones (``benchmarks/fit_defaults.py``), which must not depend on them."""
    _USE_FITTED[0] = False
    gemm_plateau.cache_clear()
    try:
        yield
    finally:
        _USE_FITTED[0] = True
        gemm_plateau.cache_clear()


def _same_peak(device: GPU, precision: str) -> list[str]:
    """Precisions with the same peak on this device (fp16 and bf16 on tensor cores), this first."""
    peak = device.peak_flops(precision)
    out = [precision]
    for other in PRECISIONS:
        if other == precision:
            continue
        try:
            if math.isclose(device.peak_flops(other), peak, rel_tol=1e-9):
                out.append(other)
        except Exception:  # a precision the device lacks
            continue
    return out


def _best(rows: pd.DataFrame) -> tuple[float, str] | None:
    large = rows[~(rows["flops"] < LARGE_GEMM_FLOPS)]  # NaN (no shape) counts as large
    if large.empty:
        return None
    best = large.loc[large["efficiency"].idxmax()]
    return float(best["efficiency"]), f"{best['gpu']} {best['precision']}: {best['source']}"


@cache
def gemm_efficiency(device: GPU | str, precision: str) -> GemmEfficiency:
    """The fraction of ``device``'s peak at ``precision`` that large GEMMs reach (module docstring)."""
    device = _gpu(device)
    table = gemm_measurements()
    kind = unit_kind(device, precision)
    siblings = [g.name for g in GPUS if device.architecture and g.architecture == device.architecture]
    for scope, rule in (
        ([device.name], "measured on this GPU"),
        (siblings, f"measured on a {device.architecture} GPU"),
    ):
        if not scope:
            continue
        same_unit_precisions = [p for p in PRECISIONS if p not in _same_peak(device, precision)]
        for precisions, how in (
            (_same_peak(device, precision), "as"),
            (same_unit_precisions, "same kind of unit, at"),
        ):
            rows = table[table["gpu"].isin(scope) & table["precision"].isin(precisions)]
            same_unit = np.array(
                [unit_kind(_gpu(g), p) == kind for g, p in zip(rows["gpu"], rows["precision"], strict=True)],
                dtype=bool,
            )
            found = _best(rows[same_unit])
            if found is not None:
                used = found[1].split(":")[0].split()[-1]
                note = f" ({how} {used})" if used != precision else ""
                return GemmEfficiency(found[0], rule + note, found[1])
    kinds = np.array([unit_kind(_gpu(g), p) for g, p in zip(table["gpu"], table["precision"], strict=True)])
    same = table[(kinds == kind) & ~(table["flops"] < LARGE_GEMM_FLOPS)]
    per_gpu = same.groupby("gpu")["efficiency"].max()
    value = float(np.median(per_gpu)) if len(per_gpu) else 0.8
    return GemmEfficiency(
        value,
        f"median of the published {kind}-unit GEMMs ({len(per_gpu)} GPUs)",
        "; ".join(sorted(set(same["gpu"] + " " + same["precision"]))),
    )


@cache
def fitted_plateaus() -> pd.DataFrame:
    """The plateaus fitted to bundled training runs (``data/catalog/gemm_fitted.csv``): ``gpu``,
    ``precision``, ``efficiency`` (fraction of peak), ``stderr``, ``points`` (measurements fitted)
    and ``source`` (the tables)."""
    path = data_dir() / "catalog" / "gemm_fitted.csv"
    if not path.is_file():
        return pd.DataFrame(columns=list(FITTED_COLUMNS))
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(line for line in handle if not line.lstrip().startswith("#"))
        header = tuple(h.strip() for h in next(reader))
        if header != FITTED_COLUMNS:
            raise InputFileError(path, f"expected the columns {', '.join(FITTED_COLUMNS)}, got {header}")
        rows = []
        for number, cells in enumerate(reader, 2):
            if not any(c.strip() for c in cells):
                continue
            row = dict(zip(FITTED_COLUMNS, (c.strip() for c in cells), strict=True))
            try:
                efficiency, stderr, points = (
                    float(row["efficiency"]),
                    float(row["stderr"]),
                    int(row["points"]),
                )
            except ValueError:
                raise InputFileError(
                    path, "expected numbers in efficiency, stderr, points", line=number
                ) from None
            if not 0 < efficiency <= 1:
                raise InputFileError(path, f"efficiency {efficiency} is not a fraction of peak", line=number)
            rows.append(
                {
                    **row,
                    "gpu": _gpu(row["gpu"]).name,
                    "efficiency": efficiency,
                    "stderr": stderr,
                    "points": points,
                }
            )
    return pd.DataFrame(rows, columns=list(FITTED_COLUMNS))


@cache
def gemm_plateau(device: GPU | str, precision: str) -> GemmEfficiency:
    """The plateau an uncalibrated prediction uses: fitted to bundled runs where there is one for
    ``device`` (or a GPU of its architecture) at ``precision`` or a precision with the same peak,
    else :func:`gemm_efficiency`'s published figure (module docstring)."""
    device = _gpu(device)
    fitted = fitted_plateaus() if _USE_FITTED[0] else pd.DataFrame()
    if len(fitted):
        kind = unit_kind(device, precision)
        same_peak = _same_peak(device, precision)
        same_unit = [p for p in PRECISIONS if p not in same_peak and _runs_on(device, p) == kind]
        siblings = [g.name for g in GPUS if device.architecture and g.architecture == device.architecture]
        # a row fitted on another kind of unit says nothing here (a sibling's 16-bit may be vector)
        fitted = fitted[
            [_runs_on(_gpu(g), p) == kind for g, p in zip(fitted["gpu"], fitted["precision"], strict=True)]
        ]
        for scope, where in (([device.name], "this GPU"), (siblings, f"a {device.architecture} GPU")):
            for precisions in (same_peak, same_unit):
                rows = fitted[fitted["gpu"].isin(scope) & fitted["precision"].isin(precisions)]
                if len(rows):
                    row = rows.iloc[0]
                    at = f", at {row['precision']}" if row["precision"] != precision else ""
                    return GemmEfficiency(
                        float(row["efficiency"]),
                        f"fitted to bundled training runs on {where}{at} (+- {row['stderr']:.2g}, "
                        f"{row['points']} points)",
                        f"{row['gpu']} {row['precision']}: {row['source']}",
                    )
    return gemm_efficiency(device, precision)
