"""Load time and peak memory of PyTorch profiler traces: dlexplore against HolisticTraceAnalysis.

Builds a multi-rank trace set from the real 2-rank gloo traces in tests/data/traces/pytorch/
(torch 2.13 profiler output): each of ``--ranks`` files repeats one real rank's events, shifted
in time step after step (``ts``, ``ProfilerStep#N``), until the set holds ``--size-mb`` MB of
uncompressed JSON, with its own ``distributedInfo`` (rank, world size). Then, each run in a fresh
subprocess on the same files (page cache warm):

* ``dlexplore.load_trace(folder)``;
* HolisticTraceAnalysis 0.5's loader, ``TraceAnalysis(trace_dir=folder)`` (its defaults: the
  standard json parser, one worker process per rank up to the cores available).

It prints the median load time (imports excluded) and the peak resident memory of the loading
process (``resource.getrusage``; for HTA also its largest worker, whose peers run at the same time,
so HTA's total is higher still), against the targets: >= 10x faster than HTA, peak RSS <= 3x the
uncompressed JSON.

    python benchmarks/bench_traces.py [--size-mb 400] [--ranks 8] [--repeat 3] [--gzip] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "traces" / "pytorch" / "gloo-mlp-2rank"
_TS = re.compile(rb'"ts": (\d+)\.(\d{3})')
_STEP = re.compile(rb"ProfilerStep#(\d+)")


def _split(path: Path) -> tuple[bytes, bytes, bytes]:
    """(header up to and with "traceEvents": [, the events text, the end) of one trace."""
    raw = gzip.open(path).read()
    start = raw.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = raw.rindex(b"]")
    body = raw[start:end].rstrip()
    # Keep the final "Record Window End" instant out of the repeated block.
    last = body.rindex(b"{")
    return raw[:start], body[:last].rstrip().rstrip(b","), b",\n" + body[last:] + b"\n" + raw[end:]


def build(out: Path, size_mb: float, ranks: int, compress: bool) -> int:
    """Write ``ranks`` trace files of about ``size_mb`` MB in all; returns the bytes of JSON."""
    out.mkdir(parents=True, exist_ok=True)
    per_rank = size_mb * 1e6 / ranks
    total = 0
    for rank in range(ranks):
        head, body, tail = _split(SOURCE / f"rank{rank % 2}.pt.trace.json.gz")
        head = re.sub(
            rb'"rank": \d+, "world_size": \d+', b'"rank": %d, "world_size": %d' % (rank, ranks), head
        )
        head = re.sub(
            rb'"pg_size": \d+, "ranks": \[[^\]]*\]',
            b'"pg_size": %d, "ranks": [%s]' % (ranks, b", ".join(b"%d" % r for r in range(ranks))),
            head,
        )
        copies = max(1, int(per_rank // len(body)))
        period_us = 10_000  # each copy holds 3 steps of ~2.5 ms: start the next 10 ms later
        name = out / (f"rank{rank}.pt.trace.json" + (".gz" if compress else ""))
        opener = gzip.open(name, "wb", compresslevel=1) if compress else open(name, "wb")
        with opener as f:
            f.write(head)
            for k in range(copies):
                shift = k * period_us

                def ts(m, shift=shift):
                    return b'"ts": %d.%s' % (int(m.group(1)) + shift, m.group(2))

                def step(m, k=k):
                    return b"ProfilerStep#%d" % (int(m.group(1)) + 3 * k)

                block = _STEP.sub(step, _TS.sub(ts, body))
                f.write(block if k == 0 else b",\n" + block)
                total += len(block) + (0 if k == 0 else 2)
            f.write(tail)
            total += len(head) + len(tail)
    return total


_CHILD = r"""
import json, resource, sys, time
which, folder = sys.argv[1], sys.argv[2]
if which == "dlexplore":
    import dlexplore
    import dlexplore.traces
    load_trace = getattr(dlexplore, "load_trace", dlexplore.traces.load_trace)
    t0 = time.perf_counter()
    trace = load_trace(folder)
    seconds = time.perf_counter() - t0
    rows = len(trace.events)
else:
    import logging
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder)
    seconds = time.perf_counter() - t0
    rows = sum(len(analysis.t.get_trace(r)) for r in analysis.t.get_ranks())
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "rss_bytes": own, "worker_rss_bytes": kids, "rows": rows}))
"""


def measure(which: str, folder: Path) -> dict:
    """Load ``folder`` once with ``which`` in a fresh interpreter; its time and peak memory."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, which, str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "DLEXPLORE_CACHE": "off"},  # time the parse
    )
    if done.returncode != 0:
        raise SystemExit(f"{which} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=400.0, help="uncompressed JSON in all ranks (MB)")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each loader (the median is shown)")
    parser.add_argument("--gzip", action="store_true", help="write .json.gz files (default: .json)")
    parser.add_argument("--skip-hta", action="store_true", help="only time dlexplore")
    parser.add_argument("--keep", type=Path, help="build the trace set in this folder and keep it")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dlx-bench-traces-") as tmp:
        folder = args.keep or Path(tmp) / "traces"
        t0 = time.perf_counter()
        json_bytes = build(folder, args.size_mb, args.ranks, args.gzip)
        files = sorted(folder.iterdir())
        disk = sum(f.stat().st_size for f in files)
        for f in files:  # warm the page cache for both loaders alike
            f.read_bytes()
        print(
            f"trace set: {len(files)} files, {json_bytes / 1e6:.1f} MB of JSON "
            f"({disk / 1e6:.1f} MB on disk), "
            f"built in {time.perf_counter() - t0:.1f} s; {os.cpu_count()} CPU cores"
        )
        results = {}
        for which in ("dlexplore",) + (() if args.skip_hta else ("hta",)):
            runs = [measure(which, folder) for _ in range(args.repeat)]
            results[which] = {
                "seconds_median": statistics.median(r["seconds"] for r in runs),
                "seconds_all": [r["seconds"] for r in runs],
                "rss_bytes": max(r["rss_bytes"] for r in runs),
                "worker_rss_bytes": max(r["worker_rss_bytes"] for r in runs),
                "rows": runs[0]["rows"],
            }
    dl = results["dlexplore"]
    print()
    print(
        f"{'loader':<12} {'median s':>9} {'MB/s':>8} {'rows':>10} {'peak RSS MB':>12} {'RSS / JSON':>10}"
        f" {'largest worker MB':>18}"
    )
    for which, r in results.items():
        print(
            f"{which:<12} {r['seconds_median']:>9.2f} {json_bytes / 1e6 / r['seconds_median']:>8.1f} "
            f"{r['rows']:>10,} {r['rss_bytes'] / 1e6:>12.0f} {r['rss_bytes'] / json_bytes:>10.2f} "
            f"{r['worker_rss_bytes'] / 1e6:>18.0f}"
        )
    summary = {"json_bytes": json_bytes, "files": len(files), "cores": os.cpu_count(), **results}
    if "hta" in results:
        speedup = results["hta"]["seconds_median"] / dl["seconds_median"]
        summary["speedup_vs_hta"] = speedup
        print(f"\nspeed-up over HTA: {speedup:.1f}x (target >= 10x): {'met' if speedup >= 10 else 'NOT met'}")
    ratio = dl["rss_bytes"] / json_bytes
    summary["rss_over_json"] = ratio
    print(
        f"dlexplore peak RSS / uncompressed JSON: {ratio:.2f} (target <= 3): "
        f"{'met' if ratio <= 3 else 'NOT met'}"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
