"""How the commands print: a dataset as a table for people (times in ms, memory in GiB), CSV,
JSON or netCDF; a table of rows; a measured dataset."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from .._io import atomic_open, atomic_path
from .options import UsageError

#: What the table format shows besides the swept coordinates.
TABLE_COLUMNS = (
    "throughput",
    "step_time",
    "efficiency",
    "time_compute",
    "time_comm_exposed",
    "time_io_exposed",
    "mem_total",
    "mem_capacity",
    "fits",
    "time",
    "algbw",
    "busbw",
)


def dataset_to_frame(ds: xr.Dataset, columns: Sequence[str]) -> pd.DataFrame:
    """One row per point of the dataset's dimensions: the swept coordinates, then ``columns``."""
    present = [c for c in columns if c in ds.data_vars]
    # the dimensions of the chosen variables (not the compute breakdown's operator)
    dims = [d for d in ds.dims if any(d in ds[c].dims for c in present)]
    if not dims:
        return pd.DataFrame([{c: ds[c].item() for c in present}])
    frame = ds[present].to_dataframe().reset_index()
    keep = dims + [c for c in present if c not in dims]
    return frame[keep]


def _units(ds: xr.Dataset, columns: Sequence[str]) -> dict[str, str]:
    return {c: ds[c].attrs.get("units", "") for c in columns if c in ds.variables}


def _scalar_config(ds: xr.Dataset) -> dict[str, object]:
    out = {}
    for name, coord in ds.coords.items():
        if coord.ndim == 0:
            value = coord.item()
            out[str(name)] = value.item() if isinstance(value, np.generic) else value
    return out


def _json_value(value: object) -> object:
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def _render(
    ds: xr.Dataset, frame: pd.DataFrame, fmt: str, title: str, table_columns: Sequence[str] = TABLE_COLUMNS
) -> str:
    units = _units(ds, frame.columns)
    if fmt == "csv":
        return frame.to_csv(index=False, float_format="%.12g", lineterminator="\n")
    if fmt == "json":
        payload = {
            "title": title,
            "source": ds.attrs.get("source", ""),
            "kind": ds.attrs.get("kind", ""),
            "config": {k: _json_value(v) for k, v in _scalar_config(ds).items()},
            "units": units,
            "rows": [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")],
        }
        return json.dumps(payload, indent=2) + "\n"
    # table: for people; times in ms and memory in GiB, the full set stays in csv/json/netcdf
    shown = frame[[c for c in frame.columns if c in ds.dims or c in table_columns]].copy()
    names = {}
    for column in shown.columns:
        unit = units.get(column, "")
        if unit == "s" and column not in ds.dims:
            shown[column] = shown[column] * 1e3
            unit = "ms"
        elif unit == "bytes" and column not in ds.dims:
            shown[column] = shown[column] / 2**30
            unit = "GiB"
        names[column] = f"{column} [{unit}]" if unit and unit not in ("1", "count") else column
    shown = shown.rename(columns=names)
    lines = [f"# {title}", f"# source: {ds.attrs.get('source', '')}"]
    config = _scalar_config(ds)
    if config:
        lines.append("# " + ", ".join(f"{k}={_fmt(v)}" for k, v in config.items()))
    with pd.option_context("display.max_columns", None, "display.width", 250):
        body = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    return "\n".join(lines) + "\n" + body + "\n"


def readable_table(frame: pd.DataFrame, units: dict[str, str]) -> str:
    """A measured table for people, in the units ``trace summary`` uses: times in ms, message
    sizes as "512 KiB" (csv and json keep s and bytes)."""
    from ..units import format_bytes

    shown = frame.copy()
    names = {}
    for column in shown.columns:
        unit = units.get(column, "")
        if unit == "s":
            shown[column] = shown[column] * 1e3
            unit = "ms"
        elif unit == "bytes":
            shown[column] = [format_bytes(v) for v in shown[column]]
            unit = ""
        names[column] = f"{column} [{unit}]" if unit and unit not in ("1", "count") else column
    with pd.option_context("display.max_columns", None, "display.width", 250):
        return shown.rename(columns=names).to_string(index=False, float_format=lambda v: f"{v:.4g}")


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_text(text: str, output: str | None) -> None:
    """Write ``text`` to ``output`` atomically, or to standard output."""
    if output:
        with atomic_open(output, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)


def emit(
    ds: xr.Dataset,
    frame: pd.DataFrame,
    args: argparse.Namespace,
    title: str,
    table_columns: Sequence[str] = TABLE_COLUMNS,
) -> None:
    if args.format == "netcdf":
        if not args.output:
            raise UsageError("--format netcdf writes a binary file: give -o FILE.nc")
        with atomic_path(args.output) as tmp:
            ds.to_netcdf(tmp, engine="h5netcdf")
        return
    text = _render(ds, frame, args.format, title, table_columns)
    write_text(text, args.output)


def emit_frame(frame: pd.DataFrame, args: argparse.Namespace, title: str) -> None:
    if args.format == "netcdf":
        raise UsageError("this listing is a table: use --format table, csv or json")
    if args.format == "csv":
        text = frame.to_csv(index=False, lineterminator="\n")
    elif args.format == "json":
        rows = [{k: _json_value(v) for k, v in r.items()} for r in frame.to_dict("records")]
        text = json.dumps({"title": title, "rows": rows}, indent=2) + "\n"
    else:
        # sources are long: the table shows their start, csv/json carry them whole
        with pd.option_context("display.max_columns", None, "display.width", 250):
            text = f"# {title}\n" + frame.to_string(index=False, max_colwidth=48, na_rep="n/a") + "\n"
    write_text(text, args.output)
