"""How the commands print a measured dataset (``trace summary`` of a Darshan log, a DLIO summary, TAU
profiles, nccl-tests output; ``measured show``): the run's facts, its scalars and its tables, each
number with its units.

Variables on different dimensions are never crossed into one table: a TAU profile's functions (on
metric, rank, thread, function) and its user events (on rank, thread, user_event) are two tables, so
that a column of the function table sums to the run and not to the run times the number of events.
The first table (the variables with the most dimensions, and those that only lack a dimension of
length 1) is the one CSV holds; the others go to the table and JSON formats (and netCDF holds all),
and CSV says on standard error which it left out.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd
import xarray as xr

from .output import _json_value, _scalar_config, emit, write_text

#: Attribute naming the units of the run's facts, which readers keep as attributes (a JSON object).
ATTR_UNITS = "attr_units"


def run_facts(ds: xr.Dataset) -> dict[str, tuple[object, str]]:
    """The run's facts the reader kept as attributes (nprocs, run_time, num_hosts ...), each as
    (value, units), from the names ``attrs["attr_units"]`` gives (units "" for text)."""
    try:
        units = json.loads(ds.attrs.get(ATTR_UNITS, "{}"))
    except (TypeError, ValueError):
        units = {}
    if not isinstance(units, dict):
        return {}
    facts = {}
    for name, unit in units.items():
        value = ds.attrs.get(name)
        if isinstance(value, (int, float, str, np.generic)) and not isinstance(value, bool):
            facts[name] = (value.item() if isinstance(value, np.generic) else value, str(unit))
    return facts


def _units_of(ds: xr.Dataset, name: str) -> str:
    unit = str(ds[name].attrs.get("units", ""))
    if unit == "metric_units" and "metric_units" in ds.coords:
        # TAU: one unit per metric; with one metric (or one unit) that unit is the column's
        values = set(np.asarray(ds["metric_units"].values).ravel().tolist())
        unit = values.pop() if len(values) == 1 else unit
    return unit


def split_tables(ds: xr.Dataset) -> tuple[list[str], list[list[str]], list[str]]:
    """The data variables as (first table's, the other tables', scalars): a variable whose dimensions
    are all among a table's, lacking only dimensions of at most two values, joins it (its values
    repeat along them: nccl-tests' ``rows`` on ``bytes`` beside the ``(bytes, placement)`` table, as
    the in- and out-of-place pair); others go to tables of their own, so that no column repeats a
    value over many rows (TAU's per-rank breakdown beside its functions would sum to the run times
    the functions) and no two dimensions are crossed (TAU's functions and user events)."""
    names = [str(n) for n in ds.data_vars]
    scalars = [n for n in names if ds[n].ndim == 0]
    shaped = [n for n in names if ds[n].ndim > 0]
    groups: dict[tuple, list[str]] = {}
    for name in shaped:
        groups.setdefault(tuple(ds[name].dims), []).append(name)
    tables: list[list[str]] = []
    for dims, members in sorted(groups.items(), key=lambda kv: (-len(kv[0]), -len(kv[1]))):
        for table in tables:
            wider = set(ds[table[0]].dims)
            if set(dims) <= wider and all(ds.sizes[d] <= 2 for d in wider - set(dims)):
                table.extend(members)
                break
        else:
            tables.append(list(members))
    # each table in the dataset's order of variables
    tables = [[n for n in names if n in table] for table in tables]
    return (tables[0] if tables else []), tables[1:], scalars


def _frame(ds: xr.Dataset, names: list[str]) -> pd.DataFrame:
    """One table: the variables ``names`` with their coordinates, one row per point of their dims."""
    sub = ds[[n for n in ds.data_vars if n in names]].reset_coords()
    if not sub.dims:
        return pd.DataFrame([{n: sub[n].item() for n in sub.variables}])
    frame = sub.to_dataframe().reset_index()
    if "point" in frame.columns and "point" not in ds.coords:
        frame = frame.drop(columns="point")  # a bare row number
    return frame


#: Units a table's columns of seconds are shown in, by the magnitude of their median (nccl-tests' times
#: of small messages are tens of microseconds: as seconds, six decimals left two digits of them).
_TIME_UNITS = ((1.0, "s", 1.0), (1e-3, "ms", 1e3), (0.0, "µs", 1e6))


def _time_unit(frame: pd.DataFrame, columns: list[str]) -> tuple[str, float]:
    """The unit (and factor from seconds) that shows the median of ``columns`` (seconds) as 1 to 999."""
    values = frame[columns].to_numpy(dtype=float).ravel() if columns else np.zeros(0)
    magnitude = np.abs(values[np.isfinite(values) & (values != 0)])
    median = float(np.median(magnitude)) if len(magnitude) else 1.0
    return next((unit, factor) for floor, unit, factor in _TIME_UNITS if median >= floor)


def _headed(ds: xr.Dataset, frame: pd.DataFrame) -> pd.DataFrame:
    """Column names with their units, ``busbw [GB/s]`` (none for counts and pure numbers); the
    columns of seconds in one unit :func:`_time_unit` picks for the table (csv and json keep
    seconds; a TAU column whose units a ``metric_units`` column gives stays as that column says)."""
    seconds = [
        str(c)
        for c in frame.columns
        if c in ds.data_vars and ds[c].attrs.get("units") == "s" and frame[c].dtype.kind == "f"
    ]
    time_unit, factor = _time_unit(frame, seconds)
    frame = frame.copy()
    names = {}
    for column in frame.columns:
        unit = _units_of(ds, column) if column in ds.variables else ""
        if column in seconds:
            frame[column] = frame[column] * factor
            unit = time_unit
        names[column] = f"{column} [{unit}]" if unit and unit not in ("1", "count") else column
    return frame.rename(columns=names)


def _number_text(value: float) -> str:
    """A table's number: whole values whole (byte and event counts), others to 6 significant digits,
    as many as the tools print (nccl-tests: 4 to 6)."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _fact_text(value: object, unit: str) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        text = str(int(value))  # a byte or event count, whole
    else:
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}" if unit and unit not in ("1", "count") else text


def _table_text(
    ds: xr.Dataset, title: str, first: list[str], others: list[list[str]], scalars: list[str]
) -> str:
    """The table format: title, source, facts, scalars, then each table with units in its header."""
    source = str(ds.attrs.get("source", ""))
    lines = [f"# {title}"] + ([f"# source: {source}"] if source and source != title else [])
    if ds.attrs.get("setup"):
        lines.append(f"# setup: {ds.attrs['setup']}")
    facts = run_facts(ds)
    if facts:
        lines.append("# run: " + ", ".join(f"{k} = {_fact_text(v, u)}" for k, (v, u) in facts.items()))
    blocks = []
    with pd.option_context("display.max_columns", None, "display.width", 250):
        if not first:  # scalars only (a Darshan log): one line each, with its units
            rows = [(n, _fact_text(ds[n].item(), ""), _units_of(ds, n)) for n in scalars]
            table = pd.DataFrame(rows, columns=["name", "value", "units"])
            blocks.append(table.to_string(index=False))
        else:
            lines += [f"# {n} = {_fact_text(ds[n].item(), _units_of(ds, n))}" for n in scalars]
            for names in [first, *others]:
                frame = _headed(ds, _frame(ds, names))
                dims = ", ".join(str(d) for d in ds[names[0]].dims)
                blocks.append(f"# by {dims}\n" + frame.to_string(index=False, float_format=_number_text))
    return "\n".join(lines) + "\n" + "\n\n".join(blocks) + "\n"


def _json_text(
    ds: xr.Dataset, title: str, first: list[str], others: list[list[str]], scalars: list[str]
) -> str:
    """The JSON format: the first table's rows (with the scalars, as before), the other tables, the
    facts and scalar coordinates under "config", and the units of every column and fact."""
    facts = run_facts(ds)
    main = _frame(ds, first + scalars)
    tables = {", ".join(map(str, ds[names[0]].dims)): _frame(ds, names) for names in others}
    columns = set(main.columns).union(*[set(t.columns) for t in tables.values()])
    units = {c: _units_of(ds, c) for c in main.columns if c in ds.variables}
    for table in tables.values():
        units.update({c: _units_of(ds, c) for c in table.columns if c in ds.variables})
    units.update({k: u for k, (_, u) in facts.items() if k not in columns})

    def rows(frame: pd.DataFrame) -> list[dict]:
        return [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]

    payload = {
        "title": title,
        "source": ds.attrs.get("source", ""),
        "kind": ds.attrs.get("kind", ""),
        "config": {
            **{k: _json_value(v) for k, v in _scalar_config(ds).items()},
            **{k: _json_value(v) for k, (v, _) in facts.items()},
        },
        "units": units,
        "rows": rows(main),
        "tables": {dims: rows(frame) for dims, frame in tables.items()},
    }
    return json.dumps(payload, indent=2) + "\n"


def _csv_text(ds: xr.Dataset, first: list[str], others: list[list[str]], scalars: list[str]) -> str:
    """The CSV format: the first table, its scalars and the run's facts as columns (units in JSON)."""
    frame = _frame(ds, first + scalars)
    for name, (value, _) in run_facts(ds).items():
        if name not in frame.columns:
            frame[name] = value
    if others:
        left = "; ".join(", ".join(map(str, ds[names[0]].dims)) for names in others)
        print(
            f"dlexplore: the CSV holds the table by {', '.join(map(str, ds[first[0]].dims))}; "
            f"the tables by {left} are in --format table, json or netcdf",
            file=sys.stderr,
        )
    return frame.to_csv(index=False, float_format="%.12g", lineterminator="\n")


def show_measured(ds: xr.Dataset, args: argparse.Namespace, title: str) -> None:
    """A measured dataset in the format the user asked for (netCDF: the dataset whole)."""
    if args.format == "netcdf":
        emit(ds, pd.DataFrame(), args, title)
        return
    first, others, scalars = split_tables(ds)
    if args.format == "table":
        text = _table_text(ds, title, first, others, scalars)
    elif args.format == "json":
        text = _json_text(ds, title, first, others, scalars)
    else:
        text = _csv_text(ds, first, others, scalars)
    write_text(text, args.output)
