"""How long ``import dlexplore`` takes and how much a core install weighs.

Import time: the median of fresh interpreter processes (``--repeat``), each timing ``import
dlexplore`` with ``time.perf_counter`` (wall) and ``time.process_time`` (CPU, less sensitive to a
busy machine), against the named baseline ``import xarray`` (numpy + pandas + xarray: the floor
that every dataset dlexplore returns needs) measured in the same run, alternating the two. It also
lists which heavy optional packages the import pulled in (none should be).

Install size (``--install``): a fresh virtual environment in a temporary folder, ``pip install`` of
this checkout (not editable, with the extras named by ``--extras``), then every installed
distribution's files summed (pip and setuptools, which the venv brings itself, left out).

Before and after (``--before DIR``): ``import dlexplore`` from another checkout (``git worktree add
DIR <commit>``) against this one, alternating, both with ``python -S`` and this environment's
site-packages on PYTHONPATH (an editable install's finder would otherwise always find this one).

Run::

    python benchmarks/bench_import.py [--repeat 15] [--install] [--extras plots] [--json out.json]
    python benchmarks/bench_import.py --before /tmp/dlexplore-main

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
file = getattr(sys.modules[{module!r}], "__file__", "")
row = {{"wall": t1 - t0, "cpu": c1 - c0, "modules": len(sys.modules), "heavy": heavy, "file": file}}
print(json.dumps(row))
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


def bench_before_after(before: Path, repeat: int) -> dict:
    """Median wall and CPU seconds of ``import dlexplore`` from the checkout ``before`` and from
    this one, alternating, in the same environment."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    code = _PROBE.format(module="dlexplore", heavy=HEAVY)
    roots = {"before": Path(before).resolve(), "after": ROOT}
    runs: dict[str, list[dict]] = {name: [] for name in roots}
    for turn in range(repeat + 1):
        for name, root in roots.items():
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), site]))
            out = subprocess.run(
                [sys.executable, "-S", "-c", code],
                env=env,
                cwd=root,
                check=True,
                capture_output=True,
                text=True,
            ).stdout  # cwd: "-c" puts the working folder first on sys.path
            if turn:  # the first turn byte-compiles
                runs[name].append(json.loads(out.strip().splitlines()[-1]))
    result = {
        name: {
            "checkout": str(roots[name]),
            "file": rows[-1]["file"],
            "wall_median_s": statistics.median(r["wall"] for r in rows),
            "cpu_median_s": statistics.median(r["cpu"] for r in rows),
            "modules": rows[-1]["modules"],
            "heavy_imported": rows[-1]["heavy"],
        }
        for name, rows in runs.items()
    }
    result["speedup_wall"] = result["before"]["wall_median_s"] / result["after"]["wall_median_s"]
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
    parser.add_argument("--before", type=Path, help="another checkout to compare import times with")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    result = {"load_average": os.getloadavg(), "python": sys.version.split()[0]}
    result["import"] = bench_import(sys.executable, args.repeat)
    if args.before:
        result["before_after"] = bench_before_after(args.before, args.repeat)
    if args.install:
        result["install"] = bench_install(args.extras)
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
