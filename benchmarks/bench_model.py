"""How many configurations per second the vectorised model evaluates.

Sweeps GPUs x batch size x bandwidth x latency (>= 1e6 points) through ``dlexplore.predict`` for
ResNet-50 on V100s with the defaults: per-operator compute (every kernel of the step timed by its
roofline, 402 kernels), NCCL's algorithm and protocol choice for each 25 MiB bucket's allreduce;
and compares with the named baseline: the same model called once per configuration with scalars
(what a Python loop over a parameter grid would do).

Run on one core::

    OMP_NUM_THREADS=1 python benchmarks/bench_model.py [--repeat 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

import dlexplore as dlx  # noqa: E402


def _sweep():
    return dict(
        gpus=2 ** np.arange(0, 16),  # 1 .. 32768
        batch_size=np.arange(8, 264, 8),  # 32 values
        bandwidth=np.geomspace(0.5, 500, 50),  # GB/s
        latency=np.geomspace(1e-7, 1e-4, 50),  # s
    )


def bench_vectorised(repeat: int) -> dict:
    sweep = _sweep()
    points = int(np.prod([len(v) for v in sweep.values()]))
    dlx.predict("resnet50", "V100-16GB", gpus=2, batch_size=8)  # warm caches (catalog, buckets)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        ds = dlx.predict("resnet50", "V100-16GB", gpus_per_node=8, **sweep)
        times.append(time.perf_counter() - start)
    assert ds.step_time.size == points
    median = statistics.median(times)
    return {
        "points": points,
        "median_s": median,
        "p95_s": float(np.percentile(times, 95)),
        "configs_per_s": points / median,
    }


def bench_scalar_loop(count: int) -> dict:
    rng = np.random.default_rng(0)
    sweep = _sweep()
    configs = [{k: v[rng.integers(len(v))].item() for k, v in sweep.items()} for _ in range(count)]
    start = time.perf_counter()
    for config in configs:
        dlx.predict("resnet50", "V100-16GB", gpus_per_node=8, **config)
    elapsed = time.perf_counter() - start
    return {"points": count, "total_s": elapsed, "configs_per_s": count / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--scalar-count", type=int, default=200)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    vec = bench_vectorised(args.repeat)
    loop = bench_scalar_loop(args.scalar_count)
    result = {
        "vectorised": vec,
        "scalar_loop_baseline": loop,
        "speedup": vec["configs_per_s"] / loop["configs_per_s"],
    }
    print(
        f"vectorised sweep: {vec['points']:,} configurations, median {vec['median_s'] * 1e3:.1f} ms "
        f"(p95 {vec['p95_s'] * 1e3:.1f} ms) over {args.repeat} runs "
        f"-> {vec['configs_per_s']:.3g} configurations/s"
    )
    print(
        f"baseline, scalar predict() per configuration: {loop['configs_per_s']:.3g} "
        f"configurations/s ({loop['points']} calls)"
    )
    print(f"speed-up of the vectorised sweep over the baseline: {result['speedup']:.3g}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
