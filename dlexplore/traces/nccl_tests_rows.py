"""The result rows of one nccl-tests test, for :mod:`dlexplore.traces.nccl_tests`: read as numbers
(:func:`row_values`), chosen by data type, reduction operation and root (:func:`select_rows`), and
made one row per size (``by="bytes"``) where a size repeats; and the ranks they were measured on
(:func:`ranks_listed`, and where no device list says, :func:`ranks_unlisted`).

nccl-tests repeat a size where reduce-scatter and all-gather round small sizes down to 0 bytes, and
where a run starts at ``-b 0``: the same measurement again, which :func:`aggregate_repeats` makes one
row (means; wrong elements summed; the largest error kept). ``--datatype all`` and ``--op all``
measure each size once per data type or reduction operation: different measurements, which
:func:`refuse_mixed_rows` refuses to average and :func:`select_rows` chooses among.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputFileError
from .nccl_tests_parse import Test

__all__ = [
    "ranks_from_bandwidths",
    "row_values",
    "aggregate_repeats",
    "refuse_mixed_rows",
    "select_rows",
    "CHOICES",
]


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


#: A placement's columns beyond time, algbw, busbw and the check: the variable each becomes.
EXTRA_VALUES = {
    "#bitdiff": "bitdiff",
    "i_min": "time_min",
    "i_max": "time_max",
    "i_p99": "time_p99",
    "i_cv%": "time_cv",
}


def row_values(path: Path, test: Test) -> tuple:
    """The result rows as numbers: sizes, counts, the text columns (type, redop, root and the
    row's trailing columns: rccl-tests' algo, proto, nchannels; timestamp), time, algbw, busbw, the
    check column and the group's extras (:data:`EXTRA_VALUES`) per placement, and the check
    column's name."""
    layout = test.layout
    leading, n_groups = layout.leading, layout.n_groups
    sizes, counts = [], []
    extra: dict[str, list] = {c: [] for c in ("type", "redop", "root") if c in leading}
    extra.update({c: [] for c in layout.trailing})
    named = {"time": "time", "algbw": "algbw", "busbw": "busbw", layout.check: "check"}
    named.update({c: EXTRA_VALUES[c] for c in layout.group[4:]})
    values = {v: np.full((len(test.rows), n_groups), np.nan) for v in named.values()}
    trailing_at = len(layout.columns) - len(layout.trailing)
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
        for name, text in zip(layout.trailing, fields[trailing_at:], strict=True):
            extra[name].append(text)
        for g in range(n_groups):
            for column, var in named.items():
                at = layout.cell(g, column)
                header = layout.time_header if column == "time" else column
                # float for #wrong too: nccl-tests prints the count with %g, 1.04858e+06 from a million on
                values[var][i, g] = _number(path, fields[at], line, header, float)
    if any(math.isnan(s) for s in sizes):
        raise InputFileError(path, "a row has 'N/A' as its size", line=test.rows[0][0])
    return sizes, counts, extra, values, layout.check


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
    """Rows of repeated sizes as one row per size (first appearance order): time, algbw, busbw (and
    the per-iteration p99 and spread) means; wrong elements and differing bits summed; the largest
    error, the least minimum and the largest maximum kept. Returns the new columns and a note."""
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
        elif name == "bitdiff":
            out[name] = frame.sum(min_count=1).to_numpy(float)
        elif name in ("time_min", "time_max"):
            out[name] = (frame.min() if name == "time_min" else frame.max()).to_numpy(float)
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


#: nccl-tests' bus-bandwidth factor of the ranks, ``scale (n - 1) / n``: the scale per collective.
RANK_FACTOR_SCALE = {"allreduce": 2.0, "allgather": 1.0, "reduce_scatter": 1.0, "alltoall": 1.0}


def ranks_from_bandwidths(collective: str, algbw: np.ndarray, busbw: np.ndarray) -> int | None:
    """The ranks that nccl-tests' bus-bandwidth factor of ``collective`` implies (``busbw = algbw x
    2(n-1)/n`` for allreduce, ``(n-1)/n`` for allgather, reduce_scatter and alltoall), from the rows
    whose two printed decimals fix it to +-0.5 rank; None where the collective has no such factor,
    no row is that precise, or the precise rows disagree."""
    scale = RANK_FACTOR_SCALE.get(collective)
    if scale is None:
        return None
    ok = np.isfinite(algbw) & np.isfinite(busbw) & (algbw > 0) & (busbw < scale * algbw)
    ratio = busbw[ok] / algbw[ok]
    ranks = scale / (scale - ratio)  # factor = scale (n - 1) / n
    # each printed value is within 0.005 GB/s, so the ratio within 0.005 (1 + ratio) / algbw, and
    # the ranks within that times dn/dratio = n^2 / scale
    spread = 0.005 * (1 + ratio) / algbw[ok] * ranks**2 / scale
    sure = np.rint(ranks[spread < 0.5]).astype(np.int64)
    if not len(sure) or (sure != sure[0]).any():
        return None
    return int(sure[0])


def ranks_bounds(collective: str, algbw: np.ndarray, busbw: np.ndarray) -> tuple[int, int] | None:
    """The fewest and most ranks that every row's busbw / algbw admits, each printed value within
    0.005 GB/s (``hi`` is a large number where no row bounds it); None where the collective has no
    factor of the ranks, no row has both values, or the rows admit no common count."""
    scale = RANK_FACTOR_SCALE.get(collective)
    if scale is None:
        return None
    ok = np.isfinite(algbw) & np.isfinite(busbw) & (algbw > 0.005)
    if not ok.any():
        return None
    low = np.maximum(busbw[ok] - 0.005, 0.0) / (algbw[ok] + 0.005)
    high = (busbw[ok] + 0.005) / (algbw[ok] - 0.005)

    def ranks(ratio: np.ndarray) -> np.ndarray:  # factor = scale (n - 1) / n
        with np.errstate(divide="ignore"):
            return np.where(ratio < scale, scale / np.maximum(scale - ratio, 0.0), np.inf)

    least = float(ranks(low).max())
    if not math.isfinite(least):  # busbw at or above the factor's limit: no count gives it
        return None
    fewest = max(1, math.ceil(least - 1e-9))
    most = float(ranks(high).min())
    most_int = 2**31 if not math.isfinite(most) else math.floor(most + 1e-9)
    return (fewest, most_int) if fewest <= most_int else None


def ranks_unlisted(path: Path, test: Test, name: str, values: dict) -> int:
    """Ranks of a test without its device list: what busbw / algbw says (nccl-tests' factor of the
    ranks, for the collectives that have one), else the processes an echoed launcher started times
    nThread x nGpus, where busbw / algbw admits that many, else nThread x nGpus of one process, or,
    where busbw / algbw bounds the count on both sides and rules that out, the middle of the counts
    it admits; with a warning."""
    assumed = (test.nthreads or 1) * (test.ngpus or 1)
    algbw, busbw = values["algbw"].ravel(), values["busbw"].ravel()
    said = ranks_from_bandwidths(name, algbw, busbw)
    bounds = ranks_bounds(name, algbw, busbw)
    admits = lambda n: bounds is None or bounds[0] <= n <= bounds[1]  # noqa: E731
    launched = test.processes * assumed if test.processes else None
    if said is None and launched is not None and launched != assumed and admits(launched):
        warnings.warn(
            f"{path}: no 'Using devices' list for the test on line {test.first_line}; gpus = "
            f"{launched}: the echoed command launches {test.processes} process(es) of nThread x nGpus "
            f"= {assumed}" + (f" (busbw / algbw admits {bounds[0]} to {bounds[1]})" if bounds else ""),
            stacklevel=4,
        )
        return launched
    # a row at the factor's limit (busbw = 2 algbw: a formula older nccl-tests used) bounds nothing
    if said is None and bounds is not None and bounds[1] < 2**31 and not admits(assumed):
        middle = (bounds[0] + bounds[1]) // 2
        warnings.warn(
            f"{path}: no 'Using devices' list for the test on line {test.first_line}, and its busbw "
            f"/ algbw admits {bounds[0]} to {bounds[1]} ranks ({name}'s factor of the ranks), not "
            f"nThread x nGpus = {assumed} of one process; gpus = {middle}, an estimate: pass gpus=...",
            stacklevel=4,
        )
        return middle
    if said is not None and said != assumed:
        warnings.warn(
            f"{path}: no 'Using devices' list for the test on line {test.first_line}; gpus = {said}, "
            f"as its busbw / algbw says ({name}'s factor of the ranks; pass gpus=... to override)",
            stacklevel=4,
        )
        return said
    warnings.warn(
        f"{path}: no 'Using devices' list for the test on line {test.first_line}; gpus = "
        f"nThread x nGpus = {assumed} (one process assumed; pass gpus=... for MPI runs)",
        stacklevel=4,
    )
    return assumed


def ranks_listed(path: Path, test: Test, name: str, values: dict) -> int:
    """Ranks in a test with a device list: its highest "Rank N" + 1 (a list pasted with its middle
    left out, or only its last line, names the last rank; a list printed twice counts once), the
    lines where none is numbered. Where busbw / algbw fixes another number (nccl-tests computed it
    from the communicator's size: a list pasted in part), that one, with a warning."""
    numbers = {int(m.group(1)) for d in test.devices if (m := re.match(r"Rank\s+(\d+)", d))}
    listed = max(numbers) + 1 if numbers else len(test.devices)
    said = ranks_from_bandwidths(name, values["algbw"].ravel(), values["busbw"].ravel())
    if said is None or said == listed:
        return listed
    warnings.warn(
        f"{path}: the device list of the test on line {test.first_line} shows {listed} ranks but its "
        f"busbw / algbw says {said} ({name}'s factor of the ranks, which nccl-tests computes from the "
        f"communicator's size); gpus = {said} (pass gpus=... to override)",
        stacklevel=4,
    )
    return said
