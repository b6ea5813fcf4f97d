"""Rows of nccl-tests output that repeat a message size: averaged when they repeat one measurement,
refused when they are different ones (:mod:`dlexplore.traces.nccl_tests`, ``by="bytes"``).

nccl-tests repeat a size where reduce-scatter and all-gather round small sizes down to 0 bytes, and
where a run starts at ``-b 0``: the same measurement again, which :func:`aggregate_repeats` makes one
row (means; wrong elements summed; the largest error kept). ``--datatype all`` and ``--op all``
measure each size once per data type or reduction operation: different measurements, which
:func:`refuse_mixed_rows` refuses to average.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputFileError
from .nccl_tests_parse import Test

__all__ = ["aggregate_repeats", "refuse_mixed_rows"]


def refuse_mixed_rows(path: Path, test: Test, sizes: np.ndarray, extra: dict[str, list]) -> None:
    """Repeated sizes are averaged only when they are the same measurement: rows of one size with
    several data types, reduction operations or roots (``--datatype all``, ``--op all``) are not."""
    for column, what, coordinate in (
        ("type", "data types", "dtype"),
        ("redop", "reduction operations", "redop"),
        ("root", "roots", "root"),
    ):
        if column not in extra:
            continue
        seen: dict[int, object] = {}
        for i, (size, value) in enumerate(zip(sizes.tolist(), extra[column], strict=True)):
            if seen.setdefault(size, value) != value:
                kinds = [str(v) for v in sorted(set(extra[column]))]
                raise InputFileError(
                    path,
                    f"measures a size with several {what} ({', '.join(kinds)}; nccl-tests run with "
                    f"--datatype all, --op all or several roots): by='bytes' would average them; read "
                    f"it with by='point' (--by point on the command line; one row each, {coordinate} "
                    "a coordinate on point)",
                    line=test.rows[i][0],
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
