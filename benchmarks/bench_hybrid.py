"""How many hybrid-parallel configurations per second the vectorised model evaluates.

GPT-3 175B (96 layers, hidden 12288) on A100-80GB, selective recomputation, through
``dlexplore.predict_parallel`` with the per-operator compute model (every kernel of a micro-batch
timed by its roofline at the tensor-parallel shapes, with tile and wave quantisation), NCCL's
algorithm and protocol choice for the tensor-, pipeline- and data-parallel collectives, the
schedule's bubble and the memory of every configuration. Three ways:

- **sweep**: an outer product of GPUs x tp x pp x micro-batch x global batch x ZeRO x sequence
  parallelism x overlap x network bandwidth (1,474,560 configurations, a third of them valid:
  the others are NaN), one call;
- **list**: 100,000 random configurations as flat arrays (what the advisor hands the model), one
  ``evaluate_hybrid`` call;
- **baseline**: ``predict_parallel`` called once per configuration with scalars (a Python loop
  over a parameter grid).

The runs alternate (sweep, list, baseline, sweep, ...) and the medians are reported, with the
speed-up of each vectorised way over the baseline measured in the same run. Run on one core::

    OMP_NUM_THREADS=1 python benchmarks/bench_hybrid.py [--repeat 5] [--json out.json]
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
from dlexplore.model.hybrid import evaluate_hybrid, hybrid_setup  # noqa: E402

WORKLOAD = dlx.catalog.transformer(96, 12288, 96, 2048, 51200, causal=True, name="gpt3-175b")
SWEEP = dict(
    gpus=np.arange(64, 4097, 64),  # 64 values
    tp=[1, 2, 4, 8],
    pp=[1, 2, 4, 8, 16, 32],
    micro_batch=[1, 2, 4, 8],
    batch_size=[512, 1024, 1536, 2048],
    zero=[0, 1],
    sequence_parallel=[False, True],
    overlap=[0.0, 0.5, 1.0],
    bandwidth=[12.5, 25.0, 50.0, 100.0, 200.0],
)


def _configurations(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: np.asarray(v)[rng.integers(len(v), size=count)] for k, v in SWEEP.items()}


def run_sweep() -> float:
    start = time.perf_counter()
    ds = dlx.predict_parallel(WORKLOAD, "A100-80GB", recompute="selective", **SWEEP)
    elapsed = time.perf_counter() - start
    assert ds["step_time"].size == int(np.prod([len(v) for v in SWEEP.values()]))
    return elapsed


def run_list(configs: dict[str, np.ndarray]) -> float:
    st = hybrid_setup(WORKLOAD, "A100-80GB")
    start = time.perf_counter()
    out = evaluate_hybrid(st, configs, recompute="selective")
    elapsed = time.perf_counter() - start
    assert out["step_time"].shape == configs["gpus"].shape
    return elapsed


def run_baseline(configs: list[dict]) -> float:
    start = time.perf_counter()
    for config in configs:
        try:
            dlx.predict_parallel(WORKLOAD, "A100-80GB", recompute="selective", **config)
        except dlx.DlexploreError:
            pass  # a configuration that cannot run costs its check
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--list-count", type=int, default=100_000)
    parser.add_argument("--baseline-count", type=int, default=100)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    points = int(np.prod([len(v) for v in SWEEP.values()]))
    flat = _configurations(args.list_count)
    loop = _configurations(args.baseline_count, seed=1)
    scalar = [{k: v[i].item() for k, v in loop.items()} for i in range(args.baseline_count)]
    run_sweep(), run_list(_configurations(1000)), run_baseline(scalar[:3])  # warm the caches
    sweep, listed, baseline = [], [], []
    for _ in range(args.repeat):
        sweep.append(run_sweep())
        listed.append(run_list(flat))
        baseline.append(run_baseline(scalar))
    rates = {
        "sweep": points / statistics.median(sweep),
        "list": args.list_count / statistics.median(listed),
        "baseline": args.baseline_count / statistics.median(baseline),
    }
    result = {
        "sweep_points": points,
        "sweep_median_s": statistics.median(sweep),
        "list_points": args.list_count,
        "list_median_s": statistics.median(listed),
        "baseline_points": args.baseline_count,
        "baseline_median_s": statistics.median(baseline),
        "configs_per_s": rates,
        "speedup_sweep": rates["sweep"] / rates["baseline"],
        "speedup_list": rates["list"] / rates["baseline"],
        "repeat": args.repeat,
    }
    print(
        f"sweep: {points:,} configurations in {result['sweep_median_s'] * 1e3:.0f} ms (median of "
        f"{args.repeat}) -> {rates['sweep']:.3g} configurations/s"
    )
    print(
        f"list: {args.list_count:,} random configurations in {result['list_median_s'] * 1e3:.0f} ms "
        f"-> {rates['list']:.3g} configurations/s"
    )
    print(
        f"baseline, scalar predict_parallel per configuration: {rates['baseline']:.3g} "
        f"configurations/s ({args.baseline_count} calls)"
    )
    print(
        f"speed-up over the baseline, same run: sweep {result['speedup_sweep']:.3g}x, "
        f"list {result['speedup_list']:.3g}x"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
