"""dlexplore's temporal breakdown against HolisticTraceAnalysis' on every real PyTorch trace.

For each PyTorch profiler trace in ``../shared/traces-real/pytorch/`` that HTA reads, per rank:
idle, compute and non-compute time (HTA's ``get_temporal_breakdown``) and communication and memory
time (from HTA's ``get_gpu_kernel_breakdown(include_memory_kernels=True)``: the union of the kernels
of that type, summed over its exclusive and overlapping rows), beside
``dlexplore.traces.temporal_breakdown(trace, exclude_last_step=True)`` (the same selection of
device work as HTA's loader: launched in a step before the last).

Where they differ the script says why, by computing dlexplore's numbers again with HTA's choice
applied to the event table: ``us`` rounds each event as HTA rounds nanosecond-resolution traces
(start up, end down to whole µs); ``sync`` counts Kineto's ``cuda_sync`` events as HTA does
(``Stream Wait Event`` as compute, the other syncs as non-compute; the adjusted column counts them
as memory time too, which HTA's kernel breakdown does not). The error is relative to the span
(HTA's ``kernel_time``), the quantity the three parts add up to: it is the difference of HTA's
percentage columns (``idle_time_pctg`` ...).

HTA must live in its own virtual environment (it pins jupyterlab, plotly, pytest ...; it needs
no torch):

    python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install holistictraceanalysis==0.5.0
    .venv/bin/python benchmarks/compare_hta.py --hta-python /tmp/hta-venv/bin/python [--json out.json]

The script runs itself under ``--hta-python`` with ``--hta-only`` to collect HTA's figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces-real" / "pytorch"
HTA_KEYS = ("idle", "compute", "non_compute", "span", "comm", "memory")


def hta_figures(path: Path) -> dict[str, float] | str:
    """HTA 0.5's figures (µs) for one trace file, or the reason it could not read it."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    folder = tempfile.mkdtemp()
    try:
        os.symlink(path, Path(folder) / path.name)
        analysis = TraceAnalysis(trace_dir=folder)
        temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
        kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
    except Exception as err:  # noqa: BLE001 - record why HTA cannot read a file, go on
        return f"{type(err).__name__}: {err}"
    finally:
        shutil.rmtree(folder)

    def union(kind: str) -> float:
        return float(kinds.loc[kinds["kernel_type"].str.contains(kind), "sum"].sum())

    return {
        "rank": int(temporal["rank"]),
        "idle": float(temporal["idle_time(us)"]),
        "compute": float(temporal["compute_time(us)"]),
        "non_compute": float(temporal["non_compute_time(us)"]),
        "span": float(temporal["kernel_time(us)"]),
        "comm": union("COMMUNICATION"),
        "memory": union("MEMORY"),
    }


def _as_hta(trace, rounding: bool, syncs: bool):
    """The trace with HTA's choices applied to its events (see the module docstring)."""
    import numpy as np

    from dlexplore.traces import Trace

    events = trace.events.copy()
    if rounding:
        # back to the file's own µs (HTA works on them): ts = start + (zero - baseTimeNanoseconds)
        (info,) = trace.meta["ranks"].values()
        offset = ((trace.meta["epoch_ns"] or 0) - (info["baseTimeNanoseconds"] or 0)) / 1000
        ts = np.round(events["start"].to_numpy() * 1e6, 3) + offset
        end = ts + np.round(events["duration"].to_numpy() * 1e6, 3)  # float64 at the file's scale, as HTA
        start = np.ceil(ts)
        events["start"] = (start - offset) * 1e-6
        events["duration"] = np.maximum(np.floor(end) - start, 0.0) * 1e-6
    if syncs:
        name = events["name"].astype(str)
        on_device = ~events["stream"].astype(str).str.startswith("cpu:")
        category = events["category"].astype(str)
        category[on_device & (name == "Stream Wait Event")] = "compute"
        category[on_device & name.isin(["Stream Sync", "Context Sync", "Event Sync"])] = "memset"
        events["category"] = category.astype(events["category"].dtype)
    return Trace(events, trace.format, trace.files, trace.world_size, trace.meta)


def dlexplore_figures(path: Path, rounding: bool = False, syncs: bool = False) -> dict[str, float]:
    """dlexplore's figures (µs) for one trace file."""
    import warnings

    from dlexplore.traces import load_trace
    from dlexplore.traces.temporal import temporal_breakdown

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = load_trace(path)
    if rounding or syncs:
        trace = _as_hta(trace, rounding, syncs)
    ds = temporal_breakdown(trace, exclude_last_step=True)
    if not ds.sizes["rank"]:
        return {}
    cell = ds.isel(rank=0)
    values = {
        "rank": int(cell["rank"]),
        "idle": cell.time_idle,
        "compute": cell.time_compute,
        "non_compute": cell.time_non_compute,
        "span": cell.time_span,
        "comm": cell.time_comm,
        "memory": cell.time_memcpy,
    }
    return {k: (v if k == "rank" else float(v) * 1e6) for k, v in values.items()}


def _needs(path: Path) -> tuple[bool, bool]:
    """Whether a trace has fractional µs times (HTA rounds them) and cuda_sync events."""
    import gzip

    text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    document = json.loads(text)
    events = [e for e in document.get("traceEvents", []) if e.get("ph") == "X"]
    fractional = any(isinstance(e.get("ts"), float) and e["ts"] != int(e["ts"]) for e in events)
    return fractional, any(e.get("cat") == "cuda_sync" for e in events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hta-python", help="python of a venv with holistictraceanalysis==0.5.0")
    parser.add_argument("--hta-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="write the table as JSON to this file")
    args = parser.parse_args()
    files = sorted(TRACES.glob("*.json*"))
    if not files:
        sys.exit(f"no traces in {TRACES}")
    if args.hta_only:
        print(json.dumps({f.name: hta_figures(f) for f in files}))
        return
    if not args.hta_python:
        sys.exit("give --hta-python (see the docstring for installing HTA)")
    run = subprocess.run(
        [args.hta_python, __file__, "--hta-only"], capture_output=True, text=True, check=True
    )
    hta = json.loads(run.stdout.strip().splitlines()[-1])
    rows = []
    for path in files:
        theirs = hta[path.name]
        if isinstance(theirs, str):
            print(f"{path.name}: HTA cannot read it ({theirs[:80]})")
            continue
        fractional, syncs = _needs(path)
        ours = dlexplore_figures(path)
        adjusted = dlexplore_figures(path, rounding=fractional, syncs=syncs) if fractional or syncs else ours
        reason = ", ".join(r for r, on in (("us", fractional), ("sync", syncs)) if on) or "-"
        rows.append(
            {
                "file": path.name,
                "rank": theirs["rank"],
                "reason": reason,
                "hta": theirs,
                "dlexplore": ours,
                "dlexplore_as_hta": adjusted,
            }
        )
    print(
        f"{'file':46} {'quantity':12} {'HTA µs':>12} {'dlexplore µs':>13} {'err %span':>9} "
        f"{'as HTA µs':>12} {'err %span':>9}  why"
    )
    for row in rows:
        span = row["hta"]["span"]
        for key in HTA_KEYS:
            h, d, a = row["hta"][key], row["dlexplore"][key], row["dlexplore_as_hta"][key]
            e1, e2 = (100 * (x - h) / span if span else math.nan for x in (d, a))
            print(
                f"{row['file'][:46]:46} {key:12} {h:12.0f} {d:13.0f} {e1:9.3f} {a:12.0f} {e2:9.3f}  "
                f"{row['reason']}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
