"""Trace loading, all formats and sizes in one table: dlexplore against HTA and the bare parser.

For each file (the largest real PyTorch traces of ``../shared/traces-real``, as they ship, gzip;
synthetic Kineto traces of 10, 100 and 400 MB of JSON, plain and gzip; synthetic Horovod timelines
of the same sizes; one 8-rank Kineto set), each tool loads it in a fresh interpreter (imports
excluded from the time, as a notebook pays them once), the tools in turn within each repetition,
and the median of ``--repeat`` runs is shown:

* ``dlexplore``: ``dlexplore.load_trace(path).breakdown()`` with the cache off, what a user waits
  for (the readers decode straight into columns: :mod:`dlexplore.traces.kineto_decode`,
  :mod:`dlexplore.traces.horovod_decode`); ``load`` is the load alone;
* ``cached``: ``load_trace(path, cache=True)`` once the trace is in the cache
  (:mod:`dlexplore.traces.cache`, a temporary folder): a notebook reopened, against ``load``;
* ``bare``: the fastest general JSON parser of ``bench_json_parsers.py`` (msgspec, untyped) merely
  parsing the (gunzipped) file into Python objects: the bar a loader must beat;
* ``hta``: HolisticTraceAnalysis 0.5.0 ``TraceAnalysis(trace_dir=...)`` (Kineto only), in the venv
  of ``--hta-python``.

Peak RSS is the loading process's ``ru_maxrss`` (worker processes' too, for sets and HTA), against
the JSON's decompressed size; ``growth`` leaves out what the interpreter and imports held before.
Before its clock starts, every process loads a tiny trace of the same format (50 kB, not timed): the
imports and lazy first-use set-up (pandas' and pyarrow's string kernels, xarray's first index and its
check for pint, the decoders) that a notebook pays once, left out for every tool alike; without it
they are 0.05-0.15 s of each dlexplore load here, most of it xarray importing pint on first use.

    python benchmarks/bench_trace_load.py --hta-python /path/to/hta-venv/bin/python
        [--sizes 10 100 400] [--real 3] [--repeat 3] [--hta-repeat 1]
        [--formats kineto kineto.gz horovod set]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces-real" / "pytorch"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth_traces import write_horovod, write_kineto, write_kineto_set  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "dlx-bench-trace-cache"

_CHILD = r"""
import json, os, resource, sys, time, warnings
warnings.simplefilter("ignore")
tool, kind, target, warm = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

def listing(target):
    return sorted(os.path.join(target, f) for f in os.listdir(target)) if os.path.isdir(target) else [target]

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

parts = {}
if tool in ("dlexplore", "cached"):
    import dlexplore.traces as traces
    def load(target):
        t = time.perf_counter()
        trace = traces.load_trace(target, cache=tool == "cached")
        parts["load"] = time.perf_counter() - t
        if tool == "dlexplore":
            trace.breakdown()
        return len(trace.events)
elif tool == "bare":
    import gzip, msgspec
    def load(target):
        n = 0
        for p in listing(target):
            with open(p, "rb") as f:
                data = f.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            doc = msgspec.json.decode(data)
            n += len(doc["traceEvents"] if isinstance(doc, dict) else doc)
            del doc, data
        return n
elif tool == "hta":
    import logging, tempfile
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    def load(target):
        folder = target
        if not os.path.isdir(target):
            folder = tempfile.mkdtemp(prefix="hta-one-")
            name = "rank-0.json.gz" if target.endswith(".gz") else "rank-0.json"
            os.symlink(os.path.abspath(target), os.path.join(folder, name))
        analysis = TraceAnalysis(trace_dir=folder)
        return sum(len(analysis.t.get_trace(r)) for r in analysis.t.get_ranks())
# A tiny trace of the same format first, uncounted: what the first load in a process pays once
# (imports, lazy initialisation of pandas, pyarrow, xarray and the decoders), as a notebook does.
load(warm)
if tool == "cached":
    load(warm)  # written to the cache by the first, read back by the second
def run():
    return load(target)
def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

before = rss()
c0 = cpu()
t0 = time.perf_counter()
rows = run()
seconds = time.perf_counter() - t0
cpu_seconds = cpu() - c0
usage = resource.getrusage
peak = max(usage(resource.RUSAGE_SELF).ru_maxrss, usage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024
out = {"seconds": seconds, "cpu": cpu_seconds, "rss": peak, "rss_before": before, "rows": rows}
print(json.dumps({**out, **parts}))
"""


def run_tool(tool: str, kind: str, target: Path, python: str, warm: Path) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run(
        [python, "-c", _CHILD, tool, kind, str(target), str(warm)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "DLEXPLORE_CACHE_DIR": str(CACHE)},
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1][:120] if lines else f"exit {done.returncode}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - t0
    return result


def json_bytes(target: Path) -> int:
    """Bytes of (decompressed) JSON in a file or a folder of files."""
    files = sorted(target.iterdir()) if target.is_dir() else [target]
    total = 0
    for path in files:
        if path.suffix == ".gz":
            with gzip.open(path) as f:
                while chunk := f.read(1 << 24):
                    total += len(chunk)
        else:
            total += path.stat().st_size
    return total


def warm_up_files(workdir: Path) -> dict[str, Path]:
    """A tiny trace of each format (about 50 kB), loaded by every process before it is timed."""
    files = {
        "kineto": workdir / "warm" / "kineto.json",
        "kineto.gz": workdir / "warm" / "kineto.json.gz",
        "horovod": workdir / "warm" / "horovod.json",
    }
    for kind, path in files.items():
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            (write_horovod if kind == "horovod" else write_kineto)(path, 0.05, seed=1)
    return files


def prepare(workdir: Path, sizes: list[float], real: int, formats: list[str]) -> list[tuple[str, str, Path]]:
    """(format, label, path) of every file measured, built once in ``workdir``."""
    cases = []
    if real and REAL.is_dir():
        for source in sorted(REAL.glob("*.json.gz"), key=lambda p: -p.stat().st_size)[:real]:
            cases.append(("kineto.gz", f"real {source.name.split('__')[-1].split('.')[0][:24]}", source))
    if "set" in formats:
        folder = workdir / "set-8x12.5MB"
        if not folder.exists():
            write_kineto_set(folder, 100, 8)
        cases.append(("kineto set", "synthetic 8 ranks, 100 MB", folder))
    for size in sizes:
        if "kineto" in formats:
            path = workdir / f"kineto-{size:g}MB.json"
            if not path.exists():
                write_kineto(path, size)
            cases.append(("kineto", f"synthetic {size:g} MB", path))
        if "kineto.gz" in formats:
            path = workdir / f"kineto-{size:g}MB.json.gz"
            if not path.exists():
                write_kineto(path, size)
            cases.append(("kineto.gz", f"synthetic {size:g} MB", path))
        if "horovod" in formats:
            path = workdir / f"horovod-{size:g}MB.json"
            if not path.exists():
                write_horovod(path, size)
            cases.append(("horovod", f"synthetic {size:g} MB", path))
    return cases


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[10, 100, 400], help="synthetic MB of JSON")
    parser.add_argument("--real", type=int, default=3, help="how many of the largest real traces")
    parser.add_argument("--formats", nargs="*", default=["kineto", "kineto.gz", "horovod", "set"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--hta-repeat", type=int, help="runs of HTA (default: --repeat; it takes minutes at 400 MB)"
    )
    parser.add_argument("--hta-python", help="python of a venv with holistictraceanalysis==0.5.0")
    parser.add_argument("--workdir", type=Path, help="build the files here and keep them")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dlx-trace-load-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cases = prepare(workdir, args.sizes, args.real, args.formats)
    warm = warm_up_files(workdir)
    print(
        f"{os.cpu_count()} cores; medians of {args.repeat} fresh processes per tool, tools in turn; "
        "times in s in the process, imports excluded",
        flush=True,
    )
    print(HEADER, flush=True)
    results = []
    for kind, label, target in cases:
        size = json_bytes(target)
        for path in sorted(target.iterdir()) if target.is_dir() else [target]:
            path.read_bytes()  # the page cache, warm for every tool alike
        tools = ["dlexplore", "bare", "cached"] + (["hta"] if args.hta_python and kind != "horovod" else [])
        first = warm["horovod" if kind == "horovod" else "kineto.gz" if kind.endswith(".gz") else "kineto"]
        run_tool("cached", kind, target, sys.executable, first)  # into the cache: later runs reload it
        runs: dict[str, list[dict]] = {t: [] for t in tools}
        for k in range(args.repeat):
            for tool in tools[k % len(tools) :] + tools[: k % len(tools)]:
                if tool == "hta" and len(runs[tool]) >= (args.hta_repeat or args.repeat):
                    continue
                python = args.hta_python if tool == "hta" else sys.executable
                runs[tool].append(run_tool(tool, kind.split(".")[0].split()[0], target, python, first))
        row: dict = {"format": kind, "file": label, "json_bytes": size}
        for tool in tools:
            ok = [r for r in runs[tool] if "error" not in r]
            if not ok:
                row[tool] = {"error": runs[tool][0]["error"]}
                continue
            row[tool] = {
                "seconds": statistics.median(r["seconds"] for r in ok),
                "seconds_all": [r["seconds"] for r in ok],
                "process_seconds": statistics.median(r["process_seconds"] for r in ok),
                "cpu": statistics.median(r["cpu"] for r in ok),
                "rss": max(r["rss"] for r in ok),
                "growth": max(r["rss"] - r["rss_before"] for r in ok),
                "rows": ok[0]["rows"],
            }
            if all("load" in r for r in ok):
                row[tool]["load"] = statistics.median(r["load"] for r in ok)
        results.append(row)
        print(_line(row), flush=True)
    print(
        "\nCPU seconds of the loading process and its workers (medians; less sensitive than the times above "
        "to other work on the machine):"
    )
    print(
        f"{'format':<10} {'file':<27} {'dlx':>7} {'HTA':>7} {'bare':>6} {'cached':>6} {'HTA/dlx':>7} "
        f"{'bare/dlx':>8}"
    )
    for row in results:
        c = {t: row.get(t, {}).get("cpu") for t in ("dlexplore", "hta", "bare", "cached")}

        def ratio(a, b, c=c):
            return f"{c[a] / c[b]:.1f}" if c[a] and c[b] else "-"

        shown = " ".join(
            f"{c[t]:>{w}.2f}" if c[t] is not None else f"{'-':>{w}}"
            for t, w in (("dlexplore", 7), ("hta", 7), ("bare", 6), ("cached", 6))
        )
        print(
            f"{row['format']:<10} {row['file']:<27} {shown} {ratio('hta', 'dlexplore'):>7} "
            f"{ratio('bare', 'dlexplore'):>8}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    shutil.rmtree(CACHE, ignore_errors=True)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


#: dlx: load_trace(path).breakdown(); HTA: TraceAnalysis load; bare: the fastest general parser's
#: parse into Python objects; cached: the reload, against the load alone (load/cch); RSS: dlexplore's
#: peak; growth: its peak less what the interpreter and imports held before the load.
HEADER = (
    f"{'format':<10} {'file':<27} {'MB':>6} {'dlx':>7} {'HTA':>7} {'HTA/dlx':>7} {'bare':>6} "
    f"{'bare/dlx':>8} {'load':>6} {'cached':>6} {'load/cch':>8} {'RSS MB':>7} {'RSS/JSON':>8} "
    f"{'growth/JSON':>11}"
)


def _line(row: dict) -> str:
    def s(tool: str) -> float | None:
        return row.get(tool, {}).get("seconds")

    def fmt(value: float | None, width: int, spec: str = ".2f") -> str:
        return f"{value:>{width}{spec}}" if value is not None else f"{'-':>{width}}"

    dlx, hta, bare = s("dlexplore"), s("hta"), s("bare")
    load, cached = row.get("dlexplore", {}).get("load"), row.get("cached", {}).get("load")
    size = row["json_bytes"]
    mine = row.get("dlexplore", {})
    return (
        f"{row['format']:<10} {row['file']:<27} {size / 1e6:>6.1f} {fmt(dlx, 7)} {fmt(hta, 7)} "
        f"{fmt(hta / dlx if hta and dlx else None, 7, '.1f')} {fmt(bare, 6)} "
        f"{fmt(bare / dlx if bare and dlx else None, 8)} {fmt(load, 6)} {fmt(cached, 6)} "
        f"{fmt(load / cached if load and cached else None, 8, '.1f')} "
        f"{fmt(mine.get('rss', 0) / 1e6 or None, 7, '.0f')} "
        f"{fmt(mine['rss'] / size if 'rss' in mine else None, 8)} "
        f"{fmt(mine['growth'] / size if 'growth' in mine else None, 11)}"
    )


if __name__ == "__main__":
    main()
