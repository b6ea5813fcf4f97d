"""How long ``import dlexplore`` takes and how much a core install weighs.

Import time: the median of fresh interpreter processes (``--repeat``), each timing ``import
dlexplore`` with ``time.perf_counter`` (wall) and ``time.process_time`` (CPU, less sensitive to a
busy machine), against the named baseline ``import xarray`` (numpy + pandas + xarray: the floor
that every dataset dlexplore returns needs) measured in the same run, alternating the two. It also
lists which heavy optional packages the import pulled in (none should be).

Install size (``--install``): a fresh virtual environment in a temporary folder, ``pip install`` of
this checkout (not editable, with the extras named by ``--extras``), then every installed
distribution's files summed (pip and setuptools, which the venv brings itself, left out).

Run::

    python benchmarks/bench_import.py [--repeat 15] [--install] [--extras plots] [--json out.json]

Figures from a shared machine are only comparable within one run; give ``os.getloadavg()`` with
them (printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Packages ``import dlexplore`` should not import: they belong to plots, widgets, fits or Dask.
HEAVY = (
    "bokeh",
    "ipywidgets",
    "jupyter_bokeh",
    "scipy",
    "dask",
    "distributed",
    "h5py",
    "h5netcdf",
    "IPython",
)

_PROBE = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import {module}
t1, c1 = time.perf_counter(), time.process_time()
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"wall": t1 - t0, "cpu": c1 - c0, "modules": len(sys.modules), "heavy": heavy}}))
"""


def _one(python: str, module: str) -> dict:
    code = _PROBE.format(module=module, heavy=HEAVY)
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_import(python: str, repeat: int) -> dict:
    """Median wall and CPU seconds of ``import dlexplore`` and of the baseline ``import xarray``."""
    runs: dict[str, list[dict]] = {"dlexplore": [], "xarray": []}
    _one(python, "dlexplore")  # byte-compile once, outside the timing
    for _ in range(repeat):
        for module in runs:  # alternating, so a change in load hits both alike
            runs[module].append(_one(python, module))
    result = {}
    for module, rows in runs.items():
        result[module] = {
            "wall_median_s": statistics.median(r["wall"] for r in rows),
            "cpu_median_s": statistics.median(r["cpu"] for r in rows),
            "modules": rows[-1]["modules"],
            "heavy_imported": rows[-1]["heavy"],
        }
    result["ratio_wall_vs_xarray"] = result["dlexplore"]["wall_median_s"] / result["xarray"]["wall_median_s"]
    return result


def bench_install(extras: str) -> dict:
    """Distributions and megabytes of a fresh install of this checkout (with ``extras``)."""
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    with tempfile.TemporaryDirectory(prefix="dlexplore-install-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "-q", target], check=True)
        sizes = subprocess.run([python, "-c", _SIZES], check=True, capture_output=True, text=True).stdout
        rows = json.loads(sizes)
        imported = bench_import(python, 5)["dlexplore"]
    rows = {name: size for name, size in rows.items() if name.lower() not in ("pip", "setuptools")}
    return {
        "extras": extras,
        "distributions": len(rows),
        "megabytes": sum(rows.values()) / 1e6,
        "largest_mb": [
            f"{s / 1e6:.1f} {n}" for s, n in sorted(((s, n) for n, s in rows.items()), reverse=True)[:12]
        ],
        "import_wall_median_s": imported["wall_median_s"],
        "heavy_imported": imported["heavy_imported"],
    }


_SIZES = """
import importlib.metadata as md, json, os
sizes = {}
for dist in md.distributions():
    total = 0
    for name in dist.files or []:
        try:
            total += os.path.getsize(dist.locate_file(name))
        except OSError:
            pass
    sizes[dist.metadata["Name"]] = total
print(json.dumps(sizes))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="fresh processes per module")
    parser.add_argument("--install", action="store_true", help="also measure a fresh core install")
    parser.add_argument("--extras", default="", help="extras for --install, e.g. plots")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    result = {"load_average": os.getloadavg(), "python": sys.version.split()[0]}
    result["import"] = bench_import(sys.executable, args.repeat)
    if args.install:
        result["install"] = bench_install(args.extras)
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
