"""Parse a measurement CSV (bundled or the user's) into an ``xarray.Dataset``.

The parser is our own, not ``pandas.read_csv``: it must report every problem as an
:class:`~dlexplore.errors.InputFileError` with the line number an editor shows, keep ``#`` lines
apart from values (pandas' ``comment=`` would also cut a value at a ``#``), and never hand back a
half-checked table. The files are small (tens to thousands of rows), so speed does not matter.

Kept whole: one reader of measurement CSVs, in the order a file is read: preamble, header, units,
rows, dataset.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import xarray as xr

from .._io import read_text
from ..catalog import PRECISIONS
from ..errors import DlexploreError, InputFileError, suggest
from ..model.comm import busbw_factor, normalize_collective
from ..model.operators import NORMALIZERS
from ._columns import (
    COLUMNS,
    COMMUNICATION,
    CONVERGENCE,
    HYBRID,
    MEASURED,
    NOISE_SCALE,
    REQUIRED,
    TRAINING,
    UNIT_ALIASES,
    Column,
)
from ._convergence import derive_amounts

__all__ = ["read_table", "MEASURED_PREFIX"]

#: Every measured dataset's ``attrs["source"]`` starts with this, so it can never pass for a
#: prediction (whose source starts with "predicted:").
MEASURED_PREFIX = "measured: "

# "# key: value" opens a metadata entry; "#   more text" (two or more spaces) continues the last
# one. Anything else after "#" is a plain comment.
_KEY_LINE = re.compile(r"^#\s?([A-Za-z][A-Za-z0-9_]*)\s*:(?!//)\s*(.*)$")
_CONTINUATION = re.compile(r"^#\s{2,}(\S.*)$")

# Integer columns where 0 means something (servers: one per node; ZeRO stage 0: none; NICs: one
# per GPU).
_ZERO_OK = ("servers", "zero", "nics_per_node")
#: Text columns of hybrid tables that take one of a few values.
_CHOICES = {
    "recompute": ("none", "selective", "full"),
    "schedule": ("1f1b", "gpipe", "interleaved"),
    "sequence_parallel": ("yes", "no"),
}
#: The sizes that define a transformer where a hybrid table has no workload column.
_SIZES = ("layers", "hidden", "heads", "seq", "vocab")

# Metadata every dataset carries, empty when a file does not give it.
_STANDARD_META = ("name", "title", "source", "url", "setup", "notes")


@dataclass
class _Meta:
    values: dict[str, str]
    lines: dict[str, int]  # key -> line where it first appears


def read_table(path: str | Path) -> xr.Dataset:
    """Read the measurement CSV at ``path``; see :mod:`dlexplore.measured` for the format."""
    path = Path(path)
    text = read_text(path, "a measurement CSV")
    lines = [line.rstrip("\r") for line in text.split("\n")]
    meta, header_at = _preamble(path, lines)
    names = _header(path, lines[header_at - 1], header_at)
    table = (
        COMMUNICATION
        if "collective" in names
        else HYBRID
        if "tp" in names or "pp" in names
        else CONVERGENCE
        if "global_batch" in names
        else NOISE_SCALE
        if "b_crit" in names or "b_simple" in names
        else TRAINING
    )
    _check_columns(path, names, table, header_at)
    divisors = _units(path, meta, names)
    default_source = meta.values.get("source") or str(path)
    rows = _rows(path, lines, header_at, names)
    columns = _parse_rows(path, rows, names, table, divisors, default_source)
    _check_duplicates(path, rows, columns, table)
    return _dataset(path, meta, table, columns)


# --- metadata and header ---------------------------------------------------------------------


def _preamble(path: Path, lines: list[str]) -> tuple[_Meta, int]:
    """Parse the leading ``#`` lines; return the metadata and the header's line number."""
    values: dict[str, str] = {}
    where: dict[str, int] = {}
    last: str | None = None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            return _Meta(values, where), number
        if m := _KEY_LINE.match(stripped):
            key, value = m.group(1).lower(), m.group(2).strip()
            # A repeated key continues the earlier entry rather than silently replacing it.
            values[key] = f"{values[key]} {value}".strip() if key in values else value
            where.setdefault(key, number)
            last = key
        elif (m := _CONTINUATION.match(stripped)) and last is not None:
            values[last] = f"{values[last]} {m.group(1).strip()}".strip()
        else:
            last = None  # a plain comment ends the entry above it
    if not any(line.strip() for line in lines):
        raise InputFileError(
            path,
            "the file is empty; expected a header line such as "
            f"{','.join((*REQUIRED[TRAINING], 'throughput'))!r} and one row per measured point",
        )
    raise InputFileError(
        path,
        "no header line after the comments; expected a header line such as "
        f"{','.join((*REQUIRED[TRAINING], 'throughput'))!r} and one row per measured point",
    )


def _split(path: Path, line: str, number: int) -> list[str]:
    try:
        return next(csv.reader([line], strict=True))
    except (csv.Error, StopIteration) as exc:
        raise InputFileError(
            path, f"cannot be split into comma-separated fields ({exc})", line=number
        ) from None


def _header(path: Path, line: str, number: int) -> list[str]:
    names = [n.strip().lower() for n in _split(path, line, number)]
    if len(names) == 1 and (";" in names[0] or "\t" in names[0]):
        raise InputFileError(
            path,
            "the header has one column; expected comma-separated columns "
            "(this looks like a semicolon- or tab-separated file)",
            line=number,
        )
    for position, name in enumerate(names, start=1):
        if not name:
            raise InputFileError(
                path, f"column {position} of the header has no name; expected a column name", line=number
            )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputFileError(
                path, f"column {name!r} appears twice in the header; expected each column once", line=number
            )
        seen.add(name)
    return names


_TABLE_MARK = {
    TRAINING: "no 'collective' or 'global_batch' column",
    COMMUNICATION: "a 'collective' column",
    CONVERGENCE: "a 'global_batch' column",
    NOISE_SCALE: "a 'b_crit' or 'b_simple' column",
    HYBRID: "a 'tp' or 'pp' column",
}


def _misplaced(name: str, column: Column, table: str) -> str:
    """Why a column does not belong in this kind of table, naming the columns that do."""
    if table in (CONVERGENCE, NOISE_SCALE, HYBRID):
        fits = ", ".join(n for n, c in COLUMNS.items() if table in c.tables)
        return (
            f"column {name!r} does not belong to {table.replace('_', '-')} tables (which have "
            f"{_TABLE_MARK[table]}); expected {fits}"
        )
    owner = next(t for t in (COMMUNICATION, TRAINING, CONVERGENCE, NOISE_SCALE, HYBRID) if t in column.tables)
    if table == TRAINING:
        return (
            f"column {name!r} belongs to {owner.replace('_', '-')} tables (which have "
            f"{_TABLE_MARK[owner]}); expected the columns of a training table"
        )
    return (
        f"column {name!r} belongs to {owner.replace('_', '-')} tables; a table with a "
        "'collective' column is a communication table"
    )


def _check_columns(path: Path, names: list[str], table: str, line: int) -> None:
    for name in names:
        column = COLUMNS.get(name)
        if column is None:
            hint = suggest(name, COLUMNS)
            raise InputFileError(
                path,
                f"unknown column {name!r}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; expected columns among: {', '.join(COLUMNS)}",
                line=line,
            )
        if table not in column.tables:
            raise InputFileError(path, _misplaced(name, column, table), line=line)
    missing = [c for c in REQUIRED[table] if c not in names]
    if table == HYBRID and "workload" not in names:
        missing += [c for c in _SIZES if c not in names]
    measured = MEASURED[table]
    if not any(c in names for c in measured):
        missing.append(measured[0])
    if missing:
        needs = ", ".join(REQUIRED[table])
        if table == HYBRID:
            needs += f", and workload or the transformer's sizes ({', '.join(_SIZES)})"
        alternatives = " or ".join(measured)
        raise InputFileError(
            path,
            f"missing column(s): {', '.join(missing)}; a {table} table needs {needs} and "
            f"a measured column ({alternatives})",
            line=line,
        )


def _units(path: Path, meta: _Meta, names: list[str]) -> dict[str, float]:
    """Divisors that bring each column's values to the canonical unit, from the units line."""
    text = meta.values.get("units", "")
    line = meta.lines.get("units")
    divisors: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        column_name, sep, unit = (s.strip() for s in item.partition("="))
        column = COLUMNS.get(column_name.lower())
        if not sep or not unit:
            raise InputFileError(
                path,
                f"units entry {item!r}: expected column=unit, e.g. 'throughput=images/s, time=ms'",
                line=line,
            )
        if column is None or column.units is None:
            with_units = [c.name for c in COLUMNS.values() if c.units]
            raise InputFileError(
                path,
                f"units entry {item!r}: expected one of the columns with units ({', '.join(with_units)})",
                line=line,
            )
        accepted = UNIT_ALIASES[column.units]
        if unit not in accepted:
            raise InputFileError(
                path,
                f"units entry {item!r}: expected {column.name} in one of {', '.join(accepted)}",
                line=line,
            )
        if column.name in names:
            divisors[column.name] = accepted[unit]
    return divisors


# --- rows --------------------------------------------------------------------------------------


def _rows(path: Path, lines: list[str], header_at: int, names: list[str]) -> list[tuple[int, list[str]]]:
    rows = []
    for number in range(header_at + 1, len(lines) + 1):
        line = lines[number - 1]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = [f.strip() for f in _split(path, line, number)]
        # Spreadsheets sometimes pad rows with empty trailing fields: harmless.
        while len(fields) > len(names) and not fields[-1]:
            fields.pop()
        if len(fields) != len(names):
            raise InputFileError(
                path,
                f"found {len(fields)} fields; expected {len(names)}, as in the header on line {header_at}",
                line=number,
            )
        rows.append((number, fields))
    if not rows:
        raise InputFileError(
            path, "no data rows after the header; expected one row per measured point", line=header_at
        )
    return rows


def _bad(path: Path, number: int, column: Column, value: str, expect: str | None = None) -> NoReturn:
    found = repr(value) if value else "an empty cell"
    raise InputFileError(
        path, f"column {column.name!r}: expected {expect or column.expect}, found {found}", line=number
    )


def _parse_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)  # accept "16.0" and "2.58e8", as spreadsheets write them
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value.is_integer() else None


def _parse_rows(
    path: Path,
    rows: list[tuple[int, list[str]]],
    names: list[str],
    table: str,
    divisors: dict[str, float],
    default_source: str,
) -> dict[str, list]:
    """Check every cell and return the table column-wise, in canonical units."""
    columns: dict[str, list] = {name: [] for name in names}
    required = set(REQUIRED[table])
    measured = [c for c in MEASURED[table] if c in names]
    for number, fields in rows:
        row: dict[str, object] = {}
        for name, text in zip(names, fields, strict=True):
            column = COLUMNS[name]
            row[name] = _cell(path, number, column, text, name in required, divisors)
        if all(math.isnan(row[c]) for c in measured):  # type: ignore[arg-type]
            raise InputFileError(
                path, f"no measured value; expected a number in {' or '.join(measured)}", line=number
            )
        for name in ("gpus_per_node", "baseline_gpus"):
            if name in row and row[name] > row["gpus"]:  # type: ignore[operator]
                _bad(
                    path,
                    number,
                    COLUMNS[name],
                    str(row[name]),
                    f"a positive integer no larger than gpus ({row['gpus']})",
                )
        for name, value in row.items():
            columns[name].append(value)
    # Optional labels a file leaves out, or leaves empty, get defaults; optional numbers stay
    # absent (no sentinel values), except the efficiency baseline, which defaults to 1 GPU as in
    # the model.
    n = len(rows)
    defaults = {
        "setup": [""] * n,
        "source": [default_source] * n,
    }
    if table not in (CONVERGENCE, NOISE_SCALE, HYBRID):
        defaults["algorithm"] = ["none" if g == 1 else "unknown" for g in columns["gpus"]]
    if table == COMMUNICATION:
        defaults.update(gpu=["unknown"] * n, network=["unknown"] * n)
    for name, fallback in defaults.items():
        given = columns.get(name, fallback)
        columns[name] = [v if v else d for v, d in zip(given, fallback, strict=True)]
    if "efficiency" in columns:
        columns.setdefault("baseline_gpus", [1] * n)
    return columns


def _cell(
    path: Path, number: int, column: Column, text: str, required: bool, divisors: dict[str, float]
) -> object:
    if column.kind == "str":
        if column.name == "precision":
            value = text.lower()
            if value not in PRECISIONS:
                _bad(path, number, column, text, f"one of {', '.join(PRECISIONS)}")
            return value
        if not text:
            if required:
                _bad(path, number, column, text)
            return ""
        if column.name == "bound" and text not in ("lower", "min", "max"):
            _bad(path, number, column, text)
        if column.name in _CHOICES:
            value = text.lower()
            if value not in _CHOICES[column.name]:
                _bad(path, number, column, text)
            return value
        if column.name == "collective":
            try:
                return normalize_collective(text)
            except DlexploreError as exc:
                raise InputFileError(path, f"column 'collective': {exc}", line=number) from None
        if column.name in NORMALIZERS and text.lower() not in ("unknown", "nan"):
            # checked here, where the file and line are known, by the model's rule; kept as written
            try:
                NORMALIZERS[column.name](text)
            except DlexploreError as exc:
                raise InputFileError(path, f"column {column.name!r}: {exc}", line=number) from None
        return text
    if column.kind == "int":
        count = _parse_int(text)
        if (
            count is None
            or count < (0 if column.name in _ZERO_OK else 1)
            or (column.name == "zero" and count > 3)
        ):
            _bad(path, number, column, text)
        return count
    # A measured quantity: an empty cell is "not measured" (NaN); the row check above makes
    # sure that every row has at least one measured value.
    if not text:
        return math.nan
    try:
        quantity = float(text)
    except ValueError:
        quantity = math.nan
    too_small = quantity <= column.minimum if column.strict else quantity < column.minimum
    if not math.isfinite(quantity) or too_small:
        _bad(path, number, column, text)
    return quantity / divisors.get(column.name, 1.0)


def _check_duplicates(
    path: Path, rows: list[tuple[int, list[str]]], columns: dict[str, list], table: str
) -> None:
    keys = [name for name, c in COLUMNS.items() if c.role == "coord" and name in columns]
    first: dict[tuple, int] = {}
    for i, (number, _) in enumerate(rows):
        key = tuple(columns[name][i] for name in keys)
        if key in first:
            raise InputFileError(
                path,
                f"repeats the point on line {first[key]} (same {', '.join(keys)}); expected "
                "each point once (give repeated runs different setup labels, or average them)",
                line=number,
            )
        first[key] = number


# --- the dataset ---------------------------------------------------------------------------------


def _dataset(path: Path, meta: _Meta, table: str, columns: dict[str, list]) -> xr.Dataset:
    coords: dict[str, xr.Variable] = {}
    data_vars: dict[str, xr.Variable] = {}
    for name, column in COLUMNS.items():
        if name not in columns:
            continue
        if column.kind == "str":
            values = np.array(columns[name], dtype=object)
        elif column.kind == "int":
            try:
                values = np.array(columns[name], dtype=np.int64)
            except OverflowError:
                raise InputFileError(path, f"column {name!r} has an integer beyond 64 bits") from None
        else:
            values = np.array(columns[name], dtype=np.float64)
        attrs = {"long_name": column.long_name}
        if column.units is not None:
            attrs["units"] = column.units
        target = coords if column.role == "coord" else data_vars
        target[name] = xr.Variable("point", values, attrs)
    if table == COMMUNICATION:
        _derive_bandwidths(columns, data_vars)
    if table == CONVERGENCE:
        derive_amounts(
            path,
            meta.values.get("samples_per_epoch", ""),
            meta.lines.get("samples_per_epoch"),
            columns,
            data_vars,
        )
    ds = xr.Dataset(data_vars, coords=coords)
    # Variables first in canonical order; derived ones were appended at the end.
    ds = ds[[name for name in COLUMNS if name in ds.data_vars]]

    given = dict(meta.values)
    units_line = given.pop("units", "")
    attrs = {key: given.get(key, "") for key in _STANDARD_META}
    attrs.update({k: v for k, v in given.items() if k not in attrs and k != "kind"})
    attrs["name"] = attrs["name"] or path.stem
    attrs["title"] = attrs["title"] or f"measurements from {path.name}"
    attrs["source"] = MEASURED_PREFIX + (given.get("source") or f"file {path}")
    attrs["kind"] = "measured"
    attrs["table"] = table
    attrs["file"] = str(path)
    attrs["file_units"] = units_line
    ds.attrs = attrs
    return ds


def _derive_bandwidths(columns: dict[str, list], data_vars: dict[str, xr.Variable]) -> None:
    """Fill algbw, busbw and time from each other with the nccl-tests definitions.

    Values given in the file win; derived values only fill the cells the file leaves empty, and
    each derived variable says how it was derived in ``attrs["comment"]``.
    """
    n = len(columns["gpus"])
    nan = np.full(n, np.nan)
    gpus = np.asarray(columns["gpus"], dtype=np.int64)
    factor = np.array(
        [busbw_factor(c, g) for c, g in zip(columns["collective"], gpus, strict=True)], dtype=np.float64
    )
    nbytes = np.asarray(columns["bytes"], dtype=np.float64) if "bytes" in columns else nan
    given = {
        k: np.asarray(columns[k], dtype=np.float64) if k in columns else nan.copy()
        for k in ("time", "algbw", "busbw")
    }
    notes: dict[str, str] = {}

    def fill(name: str, derived: np.ndarray, how: str) -> None:
        values = given[name]
        holes = np.isnan(values) & ~np.isnan(derived)
        if holes.any():
            values[holes] = derived[holes]
            notes[name] = how

    with np.errstate(divide="ignore", invalid="ignore"):
        fill("algbw", nbytes / given["time"] / 1e9, "derived where not given: bytes / time / 1e9")
        fill(
            "algbw",
            given["busbw"] / factor,
            "derived where not given: busbw / busbw_factor(collective, gpus)",
        )
        fill(
            "busbw",
            given["algbw"] * factor,
            "derived where not given: algbw x busbw_factor(collective, gpus) (nccl-tests)",
        )
        fill("time", nbytes / (given["algbw"] * 1e9), "derived where not given: bytes / algbw")
    for name in ("time", "algbw", "busbw"):
        if name in notes or name in columns:
            column = COLUMNS[name]
            attrs = {"long_name": column.long_name, "units": column.units}
            if name in notes:
                attrs["comment"] = notes[name]
            data_vars[name] = xr.Variable("point", given[name], attrs)
