"""Time and peak memory of the breakdown of a 1,024-rank trace folder: one file at a time on Dask
(:func:`dlexplore.traces.scale.summarize`, 2 workers, threads and processes) against reading the
whole folder into one event table (``load_trace(folder).breakdown()``).

The 1,024 ranks are made from the real 2-rank gloo traces in ``data/traces/gloo-cnn-2rank`` (torch
2.13.0 profiler, dlexplore's collector) by :func:`dlexplore.traces.scale.replicate_traces`: rank r
is a copy of rank r % 2 with its ``distributedInfo`` rewritten and its times stretched by 1 +- 2 %
and shifted by up to 5 ms. Each variant runs in a fresh Python process; peak memory is the largest
resident set (RSS) of that process and all its children together, sampled every 20 ms.

Run::

    python benchmarks/bench_scale.py [--ranks 1024] [--workers 2] [--cli] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "data" / "traces" / "gloo-cnn-2rank" / f"rank{r}.json.gz" for r in (0, 1)]
VARIANTS = ("in-memory", "dask-threads", "dask-processes")
#: ``dlexplore trace summary`` from the shell, whole process timed (interpreter start and imports too).
CLI_VARIANTS = ("cli-in-memory", "cli-dask-processes")


def run_variant(variant: str, folder: str, workers: int) -> None:
    """Child process: compute the breakdown one way and print its wall time (s) as JSON."""
    import dask  # noqa: F401 - imported before the clock starts, as in a session that has it

    from dlexplore.traces import load_trace
    from dlexplore.traces.scale import summarize

    started = time.perf_counter()
    if variant == "in-memory":
        ds = load_trace(folder).breakdown()
    else:
        ds = summarize(folder, scheduler=variant.split("-")[1], n_workers=workers, progress=False)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "ranks": int(ds.sizes["rank"]),
                "steps": int(ds.sizes["step"]),
                "step_time_mean_s": float(ds["step_time"].mean()),
            }
        )
    )


def _cli_command(variant: str, folder: Path, workers: int, out: Path) -> list[str]:
    exe = shutil.which("dlexplore") or str(Path(sys.executable).parent / "dlexplore")
    command = [exe, "trace", "summary", str(folder), "--format", "csv", "-o", str(out)]
    if variant == "cli-dask-processes":
        command += ["--dask", "processes", "--workers", str(workers), "--quiet"]
    return command


def measure(variant: str, folder: Path, workers: int) -> dict[str, float]:
    """Run one variant in a fresh process; its time (s) and the peak RSS of its process tree (MiB)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, __file__, "--run", variant, str(folder), "--workers", str(workers)]
    out_csv = folder.parent / f"{variant}.csv"
    if variant in CLI_VARIANTS:
        command = _cli_command(variant, folder, workers, out_csv)
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    proc = psutil.Process(child.pid)
    peak_bytes = 0
    while child.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak_bytes = max(peak_bytes, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, _ = child.communicate()
    wall_s = time.perf_counter() - started
    if child.returncode:
        raise SystemExit(f"{variant} failed with exit status {child.returncode}")
    if variant in CLI_VARIANTS:
        import pandas as pd

        table = pd.read_csv(out_csv)
        result = {
            "seconds": wall_s,
            "ranks": int(table["rank"].nunique()),
            "steps": int(table["step"].nunique()),
            "step_time_mean_s": float(table["step_time"].mean()),
        }
    else:
        result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mib"] = peak_bytes / 2**20
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--cli",
        action="store_true",
        help="also time `dlexplore trace summary` from the shell (in memory; --dask processes)",
    )
    parser.add_argument("--run", nargs=2, metavar=("VARIANT", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run_variant(args.run[0], args.run[1], args.workers)
        return

    from dlexplore.traces.scale import replicate_traces

    with tempfile.TemporaryDirectory(prefix="dlexplore-bench-scale-") as tmp:
        folder = Path(tmp) / "ranks"  # the CLI variants write their tables beside it
        folder.mkdir()
        started = time.perf_counter()
        files = replicate_traces(SOURCES, folder, args.ranks)
        made_s = time.perf_counter() - started
        size_mib = sum(f.stat().st_size for f in files) / 2**20
        print(
            f"{args.ranks} rank files made from {SOURCES[0].parent.name} in {made_s:.1f} s "
            f"({size_mib:.0f} MiB gzipped); {args.workers} workers; {os.cpu_count()} cores"
        )
        variants = VARIANTS + (CLI_VARIANTS if args.cli else ())
        rows = {variant: measure(variant, folder, args.workers) for variant in variants}
    print(f"{'variant':<20}{'time [s]':>10}{'peak RSS [MiB]':>16}{'ranks':>7}{'steps':>7}")
    for variant, row in rows.items():
        print(
            f"{variant:<20}{row['seconds']:>10.1f}{row['peak_rss_mib']:>16.0f}"
            f"{row['ranks']:>7}{row['steps']:>7}"
        )
    if args.json:
        figures = {"ranks": args.ranks, "workers": args.workers, "results": rows}
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
