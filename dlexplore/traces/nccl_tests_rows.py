"""The result rows of one nccl-tests test, for :mod:`dlexplore.traces.nccl_tests`: read as numbers
(:func:`row_values`), chosen by data type, reduction operation and root (:func:`select_rows`), and
made one row per size (``by="bytes"``) where a size repeats.

nccl-tests repeat a size where reduce-scatter and all-gather round small sizes down to 0 bytes, and
where a run starts at ``-b 0``: the same measurement again, which :func:`aggregate_repeats` makes one
row (means; wrong elements summed; the largest error kept). ``--datatype all`` and ``--op all``
measure each size once per data type or reduction operation: different measurements, which
:func:`refuse_mixed_rows` refuses to average and :func:`select_rows` chooses among.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputFileError
from .nccl_tests_parse import Test

__all__ = ["row_values", "aggregate_repeats", "refuse_mixed_rows", "select_rows", "CHOICES"]


def _number(path: Path, text: str, line: int, column: str, kind: type) -> float:
    if text.upper() == "N/A" or not text:  # not measured, or a blank cell (a placement not run)
        return math.nan
    try:
        value = kind(text)
        if kind is int and not -(2**63) <= value < 2**63:
            raise ValueError("beyond 64 bits")
        return value
    except ValueError:
        expected = "a whole number" if kind is int else "a number"
        raise InputFileError(path, f"column {column!r}: {text!r} is not {expected}", line=line) from None


def row_values(path: Path, test: Test) -> tuple:
    """The result rows as numbers: sizes, counts, the leading text columns (type, redop, root),
    time, algbw, busbw and the check column per placement, and the check column's name."""
    leading = [c for c in test.columns[: test.columns.index("time")]]
    n_groups = len(test.placements)
    sizes, counts, extra = [], [], {c: [] for c in ("type", "redop", "root") if c in leading}
    values = {v: np.full((len(test.rows), n_groups), np.nan) for v in ("time", "algbw", "busbw", "check")}
    check = test.columns[len(leading) + 3]
    for i, (line, fields) in enumerate(test.rows):
        row = dict(zip(leading, fields[: len(leading)], strict=True))
        sizes.append(_number(path, row["size"], line, "size", int))
        counts.append(_number(path, row["count"], line, "count", int))
        if "type" in extra:
            extra["type"].append(row["type"])
        if "redop" in extra:
            extra["redop"].append(row["redop"])
        if "root" in extra:  # blank (all-to-all): no root, which nccl-tests prints as -1
            extra["root"].append(_number(path, row["root"] or "-1", line, "root", int))
        for g in range(n_groups):
            base = len(leading) + 4 * g
            for offset, var in enumerate(("time", "algbw", "busbw")):
                values[var][i, g] = _number(
                    path, fields[base + offset], line, test.columns[base + offset], float
                )
            kind = int if check == "#wrong" else float
            values["check"][i, g] = _number(path, fields[base + 3], line, check, kind)
    if any(math.isnan(s) for s in sizes):
        raise InputFileError(path, "a row has 'N/A' as its size", line=test.rows[0][0])
    return sizes, counts, extra, values, check


#: The leading columns a reading may choose rows by: (column, what they are, coordinate name).
CHOICES = (
    ("type", "data types", "dtype"),
    ("redop", "reduction operations", "redop"),
    ("root", "roots", "root"),
)


def select_rows(path: Path, wanted: dict[str, object], extra: dict[str, list]) -> np.ndarray:
    """Which rows hold the chosen data type, reduction operation and root (``wanted``: coordinate
    name -> value, ``dtype="float"``, ``redop="sum"``, ``root=0``): a boolean per row. A value the
    test never measured is refused, naming what it did measure."""
    keep = np.ones(len(next(iter(extra.values()), [])), dtype=bool) if extra else None
    for column, what, coordinate in CHOICES:
        value = wanted.get(coordinate)
        if value is None:
            continue
        if column not in extra:
            raise InputFileError(path, f"has no {column} column to choose {coordinate}={value!r} by")
        hit = _matches(path, column, extra[column], value)
        if not hit.any():
            listed = ", ".join(str(v) for v in sorted(set(extra[column])))
            raise InputFileError(path, f"measured no {coordinate}={value!r}; its {what}: {listed}")
        keep = hit if keep is None else keep & hit
    if keep is not None and not keep.any():
        raise InputFileError(path, f"measured no row with {wanted}")
    return keep


def _matches(path: Path, column: str, values: list, wanted: object) -> np.ndarray:
    """Which rows hold ``wanted``: roots as whole numbers (0, 0.0, "0"), the rest as printed."""
    if column != "root":
        return np.asarray([str(v) for v in values]) == str(wanted)
    try:
        root = float(wanted)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputFileError(path, f"root={wanted!r}: expected a whole number (a rank)") from None
    return np.asarray(values, dtype=float) == root


def refuse_mixed_rows(path: Path, lines: list[int], sizes: np.ndarray, extra: dict[str, list]) -> None:
    """Repeated sizes are averaged only when they are the same measurement: rows of one size with
    several data types, reduction operations or roots (``--datatype all``, ``--op all``) are not."""
    for column, what, coordinate in CHOICES:
        if column not in extra:
            continue
        seen: dict[int, object] = {}
        for i, (size, value) in enumerate(zip(sizes.tolist(), extra[column], strict=True)):
            if seen.setdefault(size, value) != value:
                kinds = [str(v) for v in sorted(set(extra[column]))]
                raise InputFileError(
                    path,
                    f"measures a size with several {what} ({', '.join(kinds)}; nccl-tests run with "
                    f"--datatype all, --op all or several roots): by='bytes' would average them; "
                    f"choose one ({coordinate}={kinds[0] if column == 'root' else repr(kinds[0])}; "
                    f"--{coordinate} on the command line), or "
                    f"read every row with by='point' (--by point; {coordinate} a coordinate on point)",
                    line=lines[i],
                )


def aggregate_repeats(
    sizes: np.ndarray,
    values: dict[str, np.ndarray],
    counts: list,
    extra: dict[str, list],
    lines: list[int],
    check: str,
) -> tuple:
    """Rows of repeated sizes as one row per size (first appearance order): time, algbw, busbw
    means; wrong elements summed; the largest error kept. Returns the new columns and a note."""
    unique, first, inverse, repeats = np.unique(
        sizes, return_index=True, return_inverse=True, return_counts=True
    )
    order = np.argsort(first, kind="stable")
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    group = position[inverse]
    out = {}
    for name, array in values.items():
        frame = pd.DataFrame(array).groupby(group, sort=True)
        if name == "check":
            out[name] = (frame.sum(min_count=1) if check == "#wrong" else frame.max()).to_numpy(float)
        else:
            out[name] = frame.mean().to_numpy(float)
    keep = first[order]
    notes = [
        f"{int(unique[i])} B: lines {', '.join(str(lines[j]) for j in np.flatnonzero(inverse == i))}"
        for i in order
        if repeats[i] > 1
    ]
    return (
        unique[order],
        repeats[order],
        out,
        [counts[i] for i in keep],
        {k: [v[i] for i in keep] for k, v in extra.items()},
        "; ".join(notes),
    )
