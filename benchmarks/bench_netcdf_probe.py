"""What the hang-proof netCDF read costs: ``load_trace`` of a converted trace, which first reads the
file in a child process under a time limit (:mod:`dlexplore.hdf5_probe`), against the baseline of opening
it directly in this process (``xarray.open_dataset(engine="h5netcdf").load()`` and the conversion to
a Trace, what ``dlexplore.traces.netcdf.read`` did before the probe). A file whose bytes already
passed the probe in this process is not probed again: "again" is that reload. The child is kept
between probes: "cold" is a probe that starts it (the first netCDF file a process reads), "probe" one
by the kept child (every later file), which "load" also uses.

Measured (2-core machine, load average under 1): the 0.1 MB sample cold 0.14 s, probe 0.03 s, load
0.10 s (1.5x the direct read); 1e6 events (1.3 MB) probe 0.11 s, load 0.36 s (1.5x). Before the
child was kept (``0a51167``) every probe was cold: load 0.225 s (3.45x) and 0.51 s (2.07x).

The traces are the real 2-rank gloo trace ``data/traces/gloo-mlp-2rank`` (collector, torch 2.13.0)
as it is, and its event table repeated to about ``--events`` events, written with
``dlexplore trace convert``'s writer. Medians of ``--repeat`` runs, after one warm-up read.

Run::

    python benchmarks/bench_netcdf_probe.py [--events 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import xarray as xr

from dlexplore import hdf5_probe
from dlexplore.hdf5_probe import probe_hdf5
from dlexplore.traces import load_trace, write_netcdf
from dlexplore.traces.netcdf import from_dataset
from dlexplore.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data" / "traces" / "gloo-mlp-2rank"


def _direct(path: Path) -> Trace:
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        ds.load()
    return from_dataset(ds, str(path))


def _first_probe(path: Path) -> None:
    hdf5_probe.forget_passed()  # as for a file this process has not read yet
    probe_hdf5(path)


def _cold_probe(path: Path) -> None:
    hdf5_probe.forget_passed()
    hdf5_probe.close_worker()  # as for the first netCDF file of a process: the child is started
    probe_hdf5(path)


def _first_load(path: Path) -> Trace:
    hdf5_probe.forget_passed()
    return load_trace(path, format="netcdf")


def _median(function, path: Path, repeat: int) -> float:
    function(path)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function(path)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the large trace")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    trace = load_trace(SOURCE)
    copies = max(1, args.events // len(trace.events))
    big = Trace(
        pd.concat([trace.events] * copies, ignore_index=True),
        trace.format,
        trace.files,
        trace.world_size,
        trace.meta,
    )
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for label, value in (("sample", trace), (f"x{copies}", big)):
            path = write_netcdf(value, Path(tmp) / f"{label}.nc")
            probed = _median(_first_load, path, args.repeat)
            again = _median(lambda p: load_trace(p, format="netcdf"), path, args.repeat)
            direct = _median(_direct, path, args.repeat)
            probe = _median(_first_probe, path, args.repeat)
            cold = _median(_cold_probe, path, args.repeat)
            size = path.stat().st_size / 1e6
            rows.append((label, len(value.events), size, direct, cold, probe, probed, again))
    print(
        "cold: a probe that starts the child (the first netCDF file of a process); probe: by the kept"
        " child;\nload: first load_trace of the file in the process (probed by the kept child); again:"
        " the same bytes reloaded"
    )
    print(
        f"{'trace':<8}{'events':>10}{'MB':>8}{'direct s':>10}{'cold s':>8}{'probe s':>9}{'load s':>8}"
        f"{'ratio':>7}{'again s':>9}{'ratio':>7}"
    )
    for label, events, mb, direct, cold, probe, probed, again in rows:
        print(
            f"{label:<8}{events:>10,}{mb:>8.1f}{direct:>10.3f}{cold:>8.3f}{probe:>9.3f}{probed:>8.3f}"
            f"{probed / direct:>7.2f}{again:>9.3f}{again / direct:>7.2f}"
        )


if __name__ == "__main__":
    main()
