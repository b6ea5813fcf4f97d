"""Kernel-side latency of the explorer's controls: from a control's new value to the bokeh
document patch being serialised for the browser (what ``jupyter_bokeh`` sends over the comm).

For each control of the default explorer (ResNet-50, V100-16GB, 25GbE) the script moves it through
its values many times and reports the median and p95 of one move. The named baseline is what a
notebook without precomputation does on every move: build a new explorer (predict, make the four
figures and the widget) and serialise its whole document.

Run on one core::

    OMP_NUM_THREADS=1 python benchmarks/bench_explorer.py [--moves 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from dlexplore.widgets import Explorer  # noqa: E402

MOVES = {
    "gpus": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "batch_size": [16, 32, 64, 128, 256],
    "bandwidth": list(np.geomspace(1, 100, 9)),
    "latency": list(np.geomspace(1e-6, 1e-4, 9)),
    "gpus_per_node": [1, 2, 4, 8],
    "workload": ["resnet50", "vgg16", "bert-base", "inception_v3"],
    "measured": ["tf-benchmarks-2017-dgx1", None],
}


def _stats(seconds: list[float]) -> dict:
    ms = np.array(seconds) * 1e3
    return {"n": len(ms), "median_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95))}


def bench_control(explorer: Explorer, name: str, moves: int) -> dict:
    control = explorer.controls[name]
    values = [
        explorer._control_value(name, v) if name != "measured" else (v or "(none)") for v in MOVES[name]
    ]
    times = []
    for value in itertools.islice(itertools.cycle(values), moves):
        if control.value == value:
            continue
        start = time.perf_counter()
        control.value = value
        times.append(time.perf_counter() - start)
    return _stats(times)


def bench_rebuild(repeat: int) -> dict:
    times = []
    for batch in itertools.islice(itertools.cycle(MOVES["batch_size"]), repeat):
        start = time.perf_counter()
        Explorer(batch_size=batch)  # its BokehModel serialises the whole document
        times.append(time.perf_counter() - start)
    return _stats(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=200, help="moves per control")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    explorer = Explorer()
    # The comm-less widget still serialises every patch: jupyter_bokeh builds the message first.
    results = {name: bench_control(explorer, name, args.moves) for name in MOVES}
    results["baseline: new explorer per move"] = bench_rebuild(max(args.moves // 10, 5))
    base = results["baseline: new explorer per move"]["median_ms"]
    print(f"{'control':34s} {'n':>5s} {'median ms':>10s} {'p95 ms':>8s} {'vs baseline':>12s}")
    for name, r in results.items():
        print(
            f"{name:34s} {r['n']:5d} {r['median_ms']:10.2f} {r['p95_ms']:8.2f} {base / r['median_ms']:11.1f}x"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
