"""nccl-tests output (``all_reduce_perf``, ``all_gather_perf`` ...) as a measured communication dataset.

nccl-tests (https://github.com/NVIDIA/nccl-tests) print, per test, a header, the devices, and one
row per message size with an out-of-place and an in-place measurement::

    # nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid 1583223 on gpu-dp-2jvzl-pqq7p device  0 [0000:29:00] NVIDIA H100 80GB HBM3
    ...
    #                                                 out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us) ...
               8             2     float     sum      -1    34.98    0.00    0.00       0    34.52 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 122.955

The columns are read from the column header line, so every version is understood: recent ones
(``size count type redop root`` then ``time algbw busbw #wrong`` twice; ``#wrong`` is a count of
wrong elements, ``N/A`` where not checked), older ones without ``root`` for all-reduce or without
``redop`` for all-gather, whose last column is ``error`` (the largest error, ``2e-07``).

The result of one test is an ``xarray.Dataset`` on dims ``bytes`` (the ``size`` column, bytes, as
nccl-tests counts it: the buffer of each rank for all-reduce, broadcast and reduce, the total
gathered buffer for all-gather, reduce-scatter and all-to-all, the same convention as
:func:`dlexplore.predict_comm`) and ``placement`` (``out-of-place``, ``in-place``), so that it lays
over a prediction by coordinate::

    meas = dlexplore.traces.read_nccl_tests("all_reduce.out")
    pred = dlexplore.predict_comm("allreduce", nbytes=meas.bytes.values, gpus=int(meas.gpus), ...)
    meas.busbw.sel(placement="out-of-place") / pred.busbw       # aligned on bytes

Variables: ``time`` (s; nccl-tests prints µs), ``algbw`` and ``busbw`` (GB/s, as printed, two
decimals), ``wrong`` (count) or ``error`` (largest error) for older versions. Coordinates:
``collective`` (from the binary's name, e.g. ``all_reduce_perf`` -> ``allreduce``, or the
``collective=`` option), ``gpus`` (the ranks listed under "Using devices", i.e. processes x
threads x GPUs per thread), ``dtype``, ``redop``, ``root``, ``count`` (elements, on ``bytes``).

Where nccl-tests repeats a size (reduce-scatter and all-gather round small sizes down to 0 bytes;
runs started with ``-b 0`` repeat size 0), the default ``by="bytes"`` aggregates the repeated rows:
``time``, ``algbw`` and ``busbw`` are their means, ``wrong`` their sum, ``error`` their maximum,
and the variable ``rows`` says how many rows each size stands for (the lines are in
``attrs["aggregated_lines"]``). ``by="point"`` keeps every row (dims ``point``, ``placement``, with
``bytes`` a coordinate on ``point``).

A file may hold several tests (one run after another, or pasted from a log); :func:`read_all`
returns them all, :func:`read` the only one or the one chosen with ``collective=``, and
:func:`read_tests` all of them in one dataset (a ``test`` dimension). Lines that launchers prefix
(``mpirun``'s ``[1,0]<stdout>:``, ``srun -l``'s ``0:``, ``pdsh``'s ``host:``) and NCCL's own log
lines (``host:pid:tid [0] NCCL INFO``) are understood; any other line inside a table that is not a
row is skipped and listed in ``attrs["skipped_lines"]``. Rows whose ``redop`` (or ``root``) is
blank, as all-to-all prints them, read with an empty value. A row that cannot be read is an
:class:`~dlexplore.errors.InputFileError` naming the file, the line and the expected columns. A
file that does not name its binary (``all_reduce_perf`` ...) takes the collective from its file
name when that names one (``nccl_allreduce.log``), with a warning.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from .._io import read_text
from ..errors import DlexploreError, InputFileError
from .schema import normalize_collective_name

__all__ = ["read", "read_all", "read_tests", "COLLECTIVE_OF_BINARY", "PLACEMENTS"]

#: nccl-tests binary stem (``<stem>_perf``) -> collective name (the model's names where it has one).
COLLECTIVE_OF_BINARY = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}

PLACEMENTS = ("out-of-place", "in-place")

# What launchers put before each line: mpirun --tag-output, srun -l, pdsh/clush "host: ".
_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s|[A-Za-z][\w.-]*:\s(?=\s*[#\d]))")
_NCCL_LOG = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE|ABORT)")
_BINARY = re.compile(
    r"(?<![A-Za-z0-9])("
    + "|".join(sorted(COLLECTIVE_OF_BINARY, key=len, reverse=True))
    + r")_perf(?:_mpi)?(?![A-Za-z0-9])"
)
_HEADER = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_DEVICE = re.compile(r"^#\s+Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(.*)$")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|[-+]?nan|[-+]?inf)")
_ROW_START = re.compile(r"^\s*[-+]?\d")

_LEADING = ("size", "count", "type", "redop", "root")
_GROUP_NEW = ("time", "algbw", "busbw", "#wrong")
_GROUP_OLD = ("time", "algbw", "busbw", "error")
_MICROSECOND = 1e-6  # s


@dataclass
class _Test:
    """One test's lines as found in the file, before they become a dataset."""

    first_line: int
    binary: str | None = None
    header: str = ""
    nthreads: int | None = None
    ngpus: int | None = None
    version: str = ""
    devices: list[str] = field(default_factory=list)
    columns: tuple[str, ...] = ()
    placements: tuple[str, ...] = ()
    column_line: int = 0
    rows: list[tuple[int, list[str]]] = field(default_factory=list)
    avg_busbw: float | None = None
    out_of_bounds: str = ""
    skipped: list[int] = field(default_factory=list)
    closed: bool = False


def read(
    path: str | os.PathLike, *, collective: str | None = None, gpus: int | None = None, by: str = "bytes"
) -> xr.Dataset:
    """One nccl-tests result of the file at ``path`` as a measured dataset (see the module docs).

    ``collective`` picks the test when the file holds several (``"allreduce"``, ``"allgather"``
    ...), and names the collective when the file does not (no binary name in it). ``gpus``
    overrides the number of ranks when the device list is missing. ``by`` is ``"bytes"`` (dims
    ``bytes``, ``placement``) or ``"point"`` (dims ``point``, ``placement``).
    """
    path = Path(path)
    tests = _parse(path)
    if collective is not None:
        wanted = _canonical(collective)
        chosen = [t for t in tests if _collective_of(t) in (wanted, None)]
        if not chosen:
            found = ", ".join(f"{_collective_of(t)} (line {t.first_line})" for t in tests)
            raise InputFileError(path, f"holds no {wanted} test; it holds {found}")
        if len(chosen) > 1:
            where = ", ".join(str(t.first_line) for t in chosen)
            raise InputFileError(
                path,
                f"holds {len(chosen)} {wanted} tests (starting on lines {where}); "
                "use read_all() and pick one",
            )
        return _dataset(path, chosen[0], collective=wanted, gpus=gpus, by=by)
    if len(tests) > 1:
        found = ", ".join(f"{_collective_of(t) or 'unknown'} (line {t.first_line})" for t in tests)
        raise InputFileError(
            path,
            f"holds {len(tests)} nccl-tests results: {found}; pass collective=... "
            "to pick one, or use read_all()",
        )
    return _dataset(path, tests[0], collective=None, gpus=gpus, by=by)


def read_all(path: str | os.PathLike, *, gpus: int | None = None, by: str = "bytes") -> list[xr.Dataset]:
    """Every nccl-tests result in the file at ``path``, in file order (see :func:`read`)."""
    path = Path(path)
    return [_dataset(path, test, collective=None, gpus=gpus, by=by) for test in _parse(path)]


def read_tests(path: str | os.PathLike, *, gpus: int | None = None, by: str = "bytes") -> xr.Dataset:
    """Every nccl-tests result in the file at ``path`` as one dataset: :func:`read_all`'s results
    along a ``test`` dimension (0, 1, ... in file order), with ``collective`` and ``gpus`` (and
    ``dtype``, ``redop``, ``root``) as coordinates on ``test``; sizes a test lacks are NaN. A file
    with one test gives that test's dataset, without the ``test`` dimension."""
    tests = read_all(path, gpus=gpus, by=by)
    if len(tests) == 1:
        return tests[0]
    names = set().union(*(t.data_vars for t in tests))
    filled = []
    for test in tests:  # old and new formats differ in their check column: give each the other's
        missing = {
            n: xr.full_like(test["time"], np.nan).assign_attrs(tests[0].get(n, test["time"]).attrs)
            for n in names - set(test.data_vars)
        }
        filled.append(test.assign(missing))
    ds = xr.concat(
        filled, dim="test", join="outer", coords="different", compat="equals", combine_attrs="drop_conflicts"
    )
    ds = ds.assign_coords(test=("test", np.arange(len(tests)), {"long_name": "result in the file"}))
    first_lines = ", ".join(str(t.attrs.get("first_line")) for t in tests)
    kinds = ", ".join(str(t.collective.item()) for t in tests)
    ds.attrs.update(title=f"{len(tests)} nccl-tests results: {kinds}", first_line=first_lines)
    return ds


# --- parsing -----------------------------------------------------------------------------------


def _canonical(name: str) -> str:
    key = str(name).strip().lower().replace("-", "_")
    key = key.removesuffix("_perf").removesuffix("_mpi").removesuffix("_perf")
    if key in COLLECTIVE_OF_BINARY:
        return COLLECTIVE_OF_BINARY[key]
    aliases = {"all_to_all": "alltoall", "bcast": "broadcast", "reducescatter": "reduce_scatter"}
    key = aliases.get(key, key)
    known = set(COLLECTIVE_OF_BINARY.values())
    if key not in known:
        raise DlexploreError(f"unknown nccl-tests collective {name!r}; expected one of {sorted(known)}")
    return key


def _collective_of(test: _Test) -> str | None:
    return COLLECTIVE_OF_BINARY[test.binary] if test.binary else None


def _parse(path: Path) -> list[_Test]:
    text = read_text(path, "nccl-tests output")
    tests: list[_Test] = []
    current: _Test | None = None
    # The binary's name and the version come before the test's "# nThread" header.
    binary: str | None = None
    version = ""
    pending_placements: tuple[str, ...] = ()
    for number, raw in enumerate(text.split("\n"), start=1):
        line = _LAUNCHER_PREFIX.sub("", raw.rstrip("\r"), count=1)
        stripped = line.strip()
        if not stripped:
            continue
        in_table = current is not None and bool(current.columns) and not current.closed
        if stripped.startswith("#"):
            match = _HEADER.match(stripped)
            if match:
                same = current is not None and not current.rows and current.header == stripped
                if not same:  # older MPI runs print the header once per process
                    current = _Test(
                        first_line=number,
                        binary=binary,
                        header=stripped,
                        version=version,
                        nthreads=int(match.group(1)),
                        ngpus=int(match.group(2)),
                    )
                    tests.append(current)
                    pending_placements = ()
                    binary, version = None, ""
                continue
            match = _VERSION.match(stripped)
            if match:
                version = match.group(1).strip()
                continue
            match = _BINARY.search(stripped)
            if (
                match
                and "concluded" not in stripped
                and ("starting" in stripped or current is None or current.closed)
            ):
                binary = match.group(1)
                continue
            if current is None:
                continue
            if _DEVICE.match(stripped):
                if not current.rows:
                    current.devices.append(stripped.lstrip("#").strip())
                continue
            tokens = stripped.lstrip("#").split()
            if "out-of-place" in tokens or "in-place" in tokens:
                pending_placements = tuple(t for t in tokens if t in PLACEMENTS)
                continue
            if tokens[:2] == ["size", "count"] or ("size" in tokens and "time" in tokens):
                if current.rows and not current.closed:
                    raise InputFileError(
                        path,
                        "a second column header inside one result table; expected "
                        "'# Avg bus bandwidth' to end the first",
                        line=number,
                    )
                if current.columns and current.closed:
                    # A new table without its own "# nThread" header (e.g. a second run pasted).
                    current = _Test(
                        first_line=number,
                        binary=binary,
                        header=current.header,
                        nthreads=current.nthreads,
                        ngpus=current.ngpus,
                        devices=list(current.devices),
                    )
                    tests.append(current)
                current.columns, current.placements = _columns(path, tokens, pending_placements, number)
                current.column_line = number
                continue
            match = _OOB.match(stripped)
            if match and in_table:
                current.out_of_bounds = f"{match.group(1)} {match.group(2)}".strip()
                continue
            match = _AVG.match(stripped)
            if match and current.columns:
                try:
                    current.avg_busbw = float(match.group(1))
                except ValueError:  # "5e": the pattern admits what float() does not
                    raise InputFileError(
                        path,
                        f"'# Avg bus bandwidth' is {match.group(1)!r}; expected a number of GB/s",
                        line=number,
                    ) from None
                current.closed = True
                continue
            continue
        if in_table and _ROW_START.match(line):
            fields = _fill_blanks(line.split(), current.columns)
            if len(fields) != len(current.columns):
                names = " ".join(current.columns)
                raise InputFileError(
                    path,
                    f"a result row needs {len(current.columns)} columns ({names}, from the header on "
                    f"line {current.column_line}); found {len(fields)}: {stripped[:80]!r}",
                    line=number,
                )
            current.rows.append((number, fields))
            continue
        if in_table and not _NCCL_LOG.match(stripped):
            current.skipped.append(number)
            continue
        match = _BINARY.search(stripped)
        if match and not in_table:
            if current is not None and not current.columns and current.binary is None:
                current.binary = match.group(1)  # e.g. "$ ./all_reduce_perf ..." echoed after the header
            else:
                binary = match.group(1)
    tests = [t for t in tests if t.columns or t.rows]
    if not tests:
        raise InputFileError(
            path,
            "holds no nccl-tests result table; expected a column header line "
            "'#  size  count  type ... time  algbw  busbw ...' followed by result rows",
        )
    for test in tests:
        if not test.rows:
            raise InputFileError(
                path, "the result table has a header but no rows (truncated output?)", line=test.column_line
            )
    return tests


def _fill_blanks(fields: list[str], columns: tuple[str, ...]) -> list[str]:
    """A row with ``redop`` (then ``root``) left blank, as all-to-all prints it, with "" there."""
    missing = len(columns) - len(fields)
    blanks = [columns.index(c) for c in ("redop", "root") if c in columns][:missing]
    if missing <= 0 or len(blanks) < missing:
        return fields
    filled = list(fields)
    for position in blanks:
        filled.insert(position, "")
    return filled


def _columns(
    path: Path, tokens: list[str], placements: tuple[str, ...], number: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Column names of a header line, checked against what nccl-tests prints."""
    if "time" not in tokens:
        raise InputFileError(
            path, f"column header without a 'time' column: {' '.join(tokens)!r}", line=number
        )
    first = tokens.index("time")
    leading = tuple(tokens[:first])
    groups = tokens[first:]
    problems = [name for name in leading if name not in _LEADING]
    if problems or leading[:3] != ("size", "count", "type"):
        raise InputFileError(
            path,
            f"unexpected leading columns {leading}; expected size, count, type and optionally redop, root",
            line=number,
        )
    n_groups, rest = divmod(len(groups), 4)
    ok = (
        rest == 0
        and n_groups in (1, 2)
        and all(tuple(groups[4 * i : 4 * i + 4]) in (_GROUP_NEW, _GROUP_OLD) for i in range(n_groups))
    )
    if not ok:
        raise InputFileError(
            path,
            f"unexpected measurement columns {' '.join(groups)!r}; expected "
            "'time algbw busbw #wrong' (or '... error') once or twice",
            line=number,
        )
    if len(placements) != n_groups:
        placements = PLACEMENTS[:n_groups]
    return leading + tuple(groups), placements


# --- building the dataset ----------------------------------------------------------------------


def _number(path: Path, text: str, line: int, column: str, kind: type) -> float:
    if text.upper() == "N/A":
        return math.nan
    try:
        value = kind(text)
        if kind is int and not -(2**63) <= value < 2**63:
            raise ValueError("beyond 64 bits")
        return value
    except ValueError:
        expected = "a whole number" if kind is int else "a number"
        raise InputFileError(path, f"column {column!r}: {text!r} is not {expected}", line=line) from None


def _dataset(path: Path, test: _Test, *, collective: str | None, gpus: int | None, by: str) -> xr.Dataset:
    if by not in ("bytes", "point"):
        raise DlexploreError(f"by must be 'bytes' or 'point', got {by!r}")
    found = _collective_of(test)
    if collective is not None and found is not None and collective != found:
        raise InputFileError(path, f"the test on line {test.first_line} is {found}, not {collective}")
    name = collective or found
    if name is None:
        named = normalize_collective_name(path.stem)
        if named in COLLECTIVE_OF_BINARY.values():
            warnings.warn(
                f"{path}: no nccl-tests binary name (e.g. all_reduce_perf) before line "
                f"{test.first_line}; the collective {named!r} is taken from the file name",
                stacklevel=3,
            )
            name = named
        else:
            warnings.warn(
                f"{path}: no nccl-tests binary name (e.g. all_reduce_perf) before line {test.first_line}; "
                "the collective is 'unknown' (pass collective=...)",
                stacklevel=3,
            )
            name = "unknown"
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
    ranks = gpus if gpus is not None else len(test.devices)
    if not ranks:
        ranks = (test.nthreads or 1) * (test.ngpus or 1)
        warnings.warn(
            f"{path}: no 'Using devices' list for the test on line {test.first_line}; gpus = "
            f"nThread x nGpus = {ranks} (one process assumed; pass gpus=... for MPI runs)",
            stacklevel=3,
        )

    dim = "bytes" if by == "bytes" else "point"
    size_array = np.asarray(sizes, dtype=np.int64)
    rows = np.ones(len(size_array), dtype=np.int64)
    aggregated = ""
    if by == "bytes" and len(np.unique(size_array)) < len(size_array):
        size_array, rows, values, counts, extra, aggregated = _aggregate(
            size_array, values, counts, extra, [line for line, _ in test.rows], check
        )
    data_vars = {
        "time": (
            (dim, "placement"),
            values["time"] * _MICROSECOND,
            {"units": "s", "long_name": "collective time (nccl-tests average over iterations)"},
        ),
        "algbw": (
            (dim, "placement"),
            values["algbw"],
            {"units": "GB/s", "long_name": "algorithm bandwidth (bytes / time)"},
        ),
        "busbw": (
            (dim, "placement"),
            values["busbw"],
            {"units": "GB/s", "long_name": "bus bandwidth (algbw x nccl-tests factor)"},
        ),
    }
    if check == "#wrong":
        data_vars["wrong"] = (
            (dim, "placement"),
            values["check"],
            {"units": "1", "long_name": "wrong elements found by the check (NaN: not checked)"},
        )
    else:
        data_vars["error"] = (
            (dim, "placement"),
            values["check"],
            {"units": "1", "long_name": "largest error found by the check (older nccl-tests)"},
        )
    if by == "bytes":
        data_vars["rows"] = (
            ("bytes",),
            rows,
            {"units": "count", "long_name": "result rows of this size (repeated sizes are means)"},
        )
    coords: dict[str, object] = {
        "placement": ("placement", list(test.placements), {"long_name": "output buffer placement"}),
        "count": (
            dim,
            np.asarray(counts, dtype=np.int64),
            {"units": "elements", "long_name": "elements per rank (nccl-tests count column)"},
        ),
        "collective": ((), name, {"long_name": "collective operation"}),
        "gpus": ((), int(ranks), {"units": "count", "long_name": "GPUs (ranks) in the test"}),
    }
    bytes_attrs = {"units": "bytes", "long_name": "message size (nccl-tests size column)"}
    if by == "bytes":
        coords["bytes"] = ("bytes", size_array, bytes_attrs)
    else:
        coords["point"] = ("point", np.arange(len(sizes)), {"long_name": "result row"})
        coords["bytes"] = ("point", size_array, bytes_attrs)
    for column, coord, long_name in (
        ("type", "dtype", "data type"),
        ("redop", "redop", "reduction operation"),
        ("root", "root", "root rank (-1: none)"),
    ):
        if column not in extra:
            continue
        column_values = extra[column]
        attrs = {"long_name": long_name}
        if coord == "root":
            attrs["units"] = "1"
        if len(set(column_values)) == 1:
            coords[coord] = ((), column_values[0], attrs)
        else:
            coords[coord] = (dim, np.asarray(column_values), attrs)
    ds = xr.Dataset(data_vars, coords=coords)
    shown = test.binary + "_perf" if test.binary else name
    ds.attrs.update(
        source=f"measured: nccl-tests output {path}",
        kind="measured",
        title=f"nccl-tests {shown} on {int(ranks)} GPUs",
        file=str(path),
        first_line=test.first_line,
        command=test.header,
        nccl_tests_version=test.version,
        devices="\n".join(test.devices),
        nthreads=test.nthreads if test.nthreads is not None else -1,
        ngpus_per_thread=test.ngpus if test.ngpus is not None else -1,
        avg_busbw=test.avg_busbw if test.avg_busbw is not None else math.nan,
        avg_busbw_units="GB/s",
        out_of_bounds=test.out_of_bounds,
        skipped_lines=", ".join(str(n) for n in test.skipped),
        aggregated_lines=aggregated,
    )
    return ds


def _aggregate(
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
