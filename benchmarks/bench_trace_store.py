"""Size and speed of a converted trace: the codes-and-labels netCDF layout (``dlexplore trace convert``
today) against the named baseline, the string layout it replaced (every categorical column as
fixed-width strings on ``event``, uncompressed; dlexplore up to commit f730817).

The trace is the real 2-rank gloo trace ``data/traces/gloo-mlp-2rank`` (collector, torch 2.13.0),
its event table repeated to about ``--events`` events, each copy shifted by 50 ms, with start
times jittered by up to 1 us and durations by 2 % so that the floats are distinct, as in a real
long trace (identical copies would compress far better than any real trace). Medians of
``--repeat`` runs after one warm-up; "read" is ``load_trace`` (the child-process probe included)
for netCDF and ``store.open_zarr`` for zarr.

Run::

    python benchmarks/bench_trace_store.py [--events 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from dlexplore import store
from dlexplore.traces import load_trace, write_netcdf
from dlexplore.traces.netcdf import to_dataset
from dlexplore.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data" / "traces" / "gloo-mlp-2rank"
_NEW_ATTRS = ("categories", "na_value", "pandas_dtype")  # what the codes layout added


def long_trace(events: int, seed: int = 0) -> Trace:
    """The sample trace repeated to about ``events`` events, shifted and jittered (see above)."""
    trace = load_trace(SOURCE)
    copies = max(1, events // len(trace.events))
    table = pd.concat(
        [trace.events.assign(start=trace.events["start"] + 0.05 * i) for i in range(copies)],
        ignore_index=True,
    )
    rng = np.random.default_rng(seed)
    table["start"] += rng.uniform(0.0, 1e-6, len(table))
    table["duration"] *= rng.uniform(0.98, 1.02, len(table))
    return Trace(table, trace.format, trace.files, trace.world_size, trace.meta)


def string_layout(trace: Trace) -> xr.Dataset:
    """The baseline layout: categorical and string columns as fixed-width strings, nullable
    integers as float with NaN, as dlexplore wrote converted traces before the codes layout."""
    ds = to_dataset(trace)
    for name in list(ds.data_vars):
        column = trace.events[name]
        attrs = {k: v for k, v in ds[name].attrs.items() if k not in _NEW_ATTRS}
        if "categories" in ds[name].attrs:
            ds[name] = xr.Variable("event", column.astype(str).to_numpy(dtype=str), attrs)
        elif "na_value" in ds[name].attrs:
            ds[name] = xr.Variable("event", column.to_numpy(dtype="float64", na_value=np.nan), attrs)
        else:
            ds[name].attrs = attrs
    return ds.drop_vars([name for name in ds.coords])


def _median(function: Callable[[], object], repeat: int) -> float:
    function()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the trace")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    trace = long_trace(args.events)
    baseline = string_layout(trace)
    codes = to_dataset(trace)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        variants = {
            "strings (baseline)": (
                folder / "strings.nc",
                lambda p: baseline.to_netcdf(p, engine="h5netcdf"),
                lambda p: load_trace(p, format="netcdf"),
            ),
            "codes, uncompressed": (
                folder / "codes.nc",
                lambda p: codes.to_netcdf(p, engine="h5netcdf"),
                lambda p: load_trace(p, format="netcdf"),
            ),
            "codes + zlib 1 (convert)": (
                folder / "convert.nc",
                lambda p: write_netcdf(trace, p),
                lambda p: load_trace(p, format="netcdf"),
            ),
            "zarr (store.to_zarr)": (
                folder / "trace.zarr",
                lambda p: store.to_zarr(trace, p),
                lambda p: store.open_zarr(p),
            ),
        }
        rows = []
        for label, (path, write, read) in variants.items():
            wrote = _median(lambda w=write, p=path: w(p), args.repeat)
            size = sum(f.stat().st_size for f in path.rglob("*")) if path.is_dir() else path.stat().st_size
            loaded = _median(lambda r=read, p=path: r(p), args.repeat)
            rows.append((label, size, wrote, loaded))
    events = len(trace.events)
    base_size, _, base_read = rows[0][1], rows[0][2], rows[0][3]
    print(f"{events:,} events; medians of {args.repeat}")
    print(f"{'layout':<26}{'MB':>8}{'B/event':>9}{'write s':>9}{'read s':>8}{'size x':>8}{'read x':>8}")
    for label, size, wrote, loaded in rows:
        print(
            f"{label:<26}{size / 1e6:>8.1f}{size / events:>9.1f}{wrote:>9.3f}{loaded:>8.3f}"
            f"{base_size / size:>8.1f}{base_read / loaded:>8.1f}"
        )


if __name__ == "__main__":
    main()
