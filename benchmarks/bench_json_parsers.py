"""Which JSON parser for trace loading: every candidate on real and synthetic Kineto traces.

Each measurement runs in a fresh interpreter (as a notebook's first load or the CLI pays it) on
uncompressed JSON from the page cache (the files are read once beforehand), and reports:

* the time in the process from reading the file to having the parsed result, imports excluded;
* the time of the whole process (interpreter start, imports, the parse);
* the process's peak resident memory (``ru_maxrss``) and its growth during the parse.

Tools are run in turn within each repetition (so a change in the machine's load hits them all) and
the median of ``--repeat`` runs is shown. The candidates:

=================  =================================================================================
``json``           the standard library, ``json.loads(bytes)``: Python objects
``orjson``         ``orjson.loads``: Python objects
``msgspec``        ``msgspec.json.decode``, untyped: Python objects
``msgspec-typed``  ``msgspec.json.Decoder(Trace)`` into ``msgspec.Struct`` of only the fields a
                   breakdown needs (ph, cat, name, pid, tid, ts, dur, args' External id and
                   correlation); everything else is skipped without building objects
``pysimdjson``     ``simdjson.loads``: Python objects
``pysimdjson-dom`` ``simdjson.Parser().parse``: simdjson's DOM only, no Python objects (a lower bound
                   for any simdjson-based loader, which must still build its columns)
``cysimdjson-dom`` ``cysimdjson.JSONParser().parse``: likewise
``ijson``          ``ijson.items(file, "traceEvents.item")`` with the ``yajl2_c`` backend, streamed:
                   Python objects one event at a time
``hta``            HolisticTraceAnalysis 0.5.0 ``TraceAnalysis(trace_dir=...)`` (``--hta-python``: the
                   interpreter of a separate venv where ``pip install holistictraceanalysis==0.5.0``)
=================  =================================================================================

    python benchmarks/bench_json_parsers.py [--sizes 10 100 400] [--real 4] [--repeat 3]
        [--hta-python /path/to/hta-venv/bin/python] [--tools json orjson ...] [--workdir DIR]
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

from synth_traces import write_kineto  # noqa: E402

TOOLS = [
    "json",
    "orjson",
    "msgspec",
    "msgspec-typed",
    "pysimdjson",
    "pysimdjson-dom",
    "cysimdjson-dom",
    "ijson",
    "hta",
]

_CHILD = r"""
import json, os, resource, sys, time
tool, path = sys.argv[1], sys.argv[2]

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

if tool == "json":
    def run():
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        return len(doc["traceEvents"])
elif tool == "orjson":
    import orjson
    def run():
        with open(path, "rb") as f:
            doc = orjson.loads(f.read())
        return len(doc["traceEvents"])
elif tool == "msgspec":
    import msgspec
    def run():
        with open(path, "rb") as f:
            doc = msgspec.json.decode(f.read())
        return len(doc["traceEvents"])
elif tool == "msgspec-typed":
    import msgspec
    from msgspec import Struct, field

    class Args(Struct, gc=False, frozen=True):
        correlation: int = -1
        external_id: int = field(name="External id", default=-1)

    NO_ARGS = Args()

    class Event(Struct, gc=False):
        ph: str = ""
        cat: str = ""
        name: str = ""
        pid: int | str | None = None
        tid: int | str | None = None
        ts: float = float("nan")
        dur: float = float("nan")
        args: Args = NO_ARGS

    class Trace(Struct, gc=False):
        traceEvents: list[Event]

    decoder = msgspec.json.Decoder(Trace)
    def run():
        with open(path, "rb") as f:
            doc = decoder.decode(f.read())
        return len(doc.traceEvents)
elif tool == "pysimdjson":
    import simdjson
    def run():
        with open(path, "rb") as f:
            doc = simdjson.loads(f.read())
        return len(doc["traceEvents"])
elif tool == "pysimdjson-dom":
    import simdjson
    parser = simdjson.Parser()
    def run():
        with open(path, "rb") as f:
            doc = parser.parse(f.read())
        return len(doc["traceEvents"])
elif tool == "cysimdjson-dom":
    import cysimdjson
    parser = cysimdjson.JSONParser()
    def run():
        with open(path, "rb") as f:
            doc = parser.parse(f.read())
        return sum(1 for _ in doc["traceEvents"])
elif tool == "ijson":
    import ijson
    assert ijson.backend == "yajl2_c", ijson.backend
    def run():
        with open(path, "rb") as f:
            return sum(1 for _ in ijson.items(f, "traceEvents.item"))
elif tool == "hta":
    import logging, tempfile
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    folder = tempfile.mkdtemp(prefix="hta-one-")
    os.symlink(os.path.abspath(path), os.path.join(folder, "rank-0.json"))
    def run():
        analysis = TraceAnalysis(trace_dir=folder)
        return sum(len(analysis.t.get_trace(r)) for r in analysis.t.get_ranks())
before = rss()
t0 = time.perf_counter()
events = run()
seconds = time.perf_counter() - t0
usage = resource.getrusage
peak = max(usage(resource.RUSAGE_SELF).ru_maxrss, usage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024
print(json.dumps({"seconds": seconds, "rss": peak, "rss_before": before, "events": events}))
"""


def run_tool(tool: str, path: Path, python: str) -> dict:
    """One fresh process: the tool's in-process time, the whole process's time, its peak memory."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [python, "-c", _CHILD, tool, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1][:100] if done.stderr.strip() else "failed"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    return result


def prepare(workdir: Path, sizes: list[float], real: int) -> list[tuple[str, Path]]:
    """The files measured: the ``real`` largest real traces (gunzipped) and synthetic ones."""
    files = []
    if real and REAL.is_dir():
        sources = sorted(REAL.glob("*.json.gz"), key=lambda p: -p.stat().st_size)[:real]
        for source in sources:
            target = workdir / source.name.removesuffix(".gz")
            if not target.exists():
                with gzip.open(source) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            files.append((f"real {source.name.split('__')[-1].split('.')[0][:28]}", target))
    for size in sizes:
        target = workdir / f"synthetic-{size:g}MB.json"
        if not target.exists():
            write_kineto(target, size)
        files.append((f"synthetic {size:g} MB", target))
    return files


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[10, 100, 400], help="synthetic MB")
    parser.add_argument("--real", type=int, default=4, help="how many of the largest real traces")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tools", nargs="*", default=TOOLS, choices=TOOLS)
    parser.add_argument("--hta-python", help="python of a venv with holistictraceanalysis==0.5.0")
    parser.add_argument("--workdir", type=Path, help="keep the generated files here")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    tools = [t for t in args.tools if t != "hta" or args.hta_python]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dlx-parsers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    files = prepare(workdir, args.sizes, args.real)
    print(
        f"{os.cpu_count()} cores; in-process and whole-process medians of {args.repeat} fresh processes, "
        "tools in turn within each repetition",
        flush=True,
    )
    header = (
        f"{'file':<32} {'MB':>6} {'tool':<15} {'in-proc s':>9} {'process s':>9} {'MB/s':>7} "
        f"{'peak RSS MB':>11} {'RSS/JSON':>8} {'growth/JSON':>11}"
    )
    print(header, flush=True)
    results = []
    for label, path in files:
        size = path.stat().st_size
        path.read_bytes()  # into the page cache for every tool alike
        runs: dict[str, list[dict]] = {t: [] for t in tools}
        for k in range(args.repeat):
            order = tools[k % len(tools) :] + tools[: k % len(tools)]
            for tool in order:
                runs[tool].append(run_tool(tool, path, args.hta_python if tool == "hta" else sys.executable))
        for tool in tools:
            ok = [r for r in runs[tool] if "error" not in r]
            if not ok:
                print(
                    f"{label:<32} {size / 1e6:>6.1f} {tool:<15} failed: {runs[tool][0]['error']}", flush=True
                )
                results.append({"file": label, "bytes": size, "tool": tool, "error": runs[tool][0]["error"]})
                continue
            seconds = statistics.median(r["seconds"] for r in ok)
            process = statistics.median(r["process_seconds"] for r in ok)
            rss = max(r["rss"] for r in ok)
            growth = max(r["rss"] - r["rss_before"] for r in ok)
            results.append(
                {
                    "file": label,
                    "bytes": size,
                    "tool": tool,
                    "seconds": seconds,
                    "seconds_all": [r["seconds"] for r in ok],
                    "process_seconds": process,
                    "rss": rss,
                    "rss_growth": growth,
                    "events": ok[0]["events"],
                }
            )
            print(
                f"{label:<32} {size / 1e6:>6.1f} {tool:<15} {seconds:>9.3f} {process:>9.2f} "
                f"{size / 1e6 / seconds:>7.0f} {rss / 1e6:>11.0f} {rss / size:>8.2f} {growth / size:>11.2f}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return {"results": results}


if __name__ == "__main__":
    main()
