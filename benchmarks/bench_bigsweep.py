"""A 1e9-point sweep reduced to the best configuration per GPU count, without materialising it.

Sweeps GPUs (16 values, 1 .. 32768) x batch size (100) x network bandwidth (1000, GB/s) x latency
(625, s) = 1e9 configurations of ResNet-50 on V100s (8 GPUs per node, ring allreduce) through
:func:`dlexplore.model.bigsweep.best_per_gpus`, on Dask's threaded scheduler with 2 workers, and
prints the wall time, throughput and the peak resident memory of the process. The full grid as
float64 would be 8 GB per variable; the reduction holds a few blocks of ~1e6 points at a time.

    python benchmarks/bench_bigsweep.py [--workers 2] [--scale 1.0] [--json out.json]

``--scale 0.01`` runs a 1e7-point version in a second or two.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from dlexplore.model.bigsweep import best_per_gpus  # noqa: E402


def _sweep(scale: float) -> dict:
    return dict(
        workload="resnet50",
        gpu="V100-16GB",
        gpus_per_node=8,
        gpus=2 ** np.arange(16),  # 1 .. 32768 GPUs
        batch_size=np.arange(4, 404, 4),  # 100 values, samples per GPU
        bandwidth=np.geomspace(0.5, 500, max(1, round(1000 * scale))),  # GB/s
        latency=np.geomspace(1e-7, 1e-4, 625),  # s
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="Dask threads (cores)")
    parser.add_argument("--scheduler", default="threads", choices=["threads", "processes", "synchronous"])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the bandwidth sweep")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    sweep = _sweep(args.scale)
    points = int(np.prod([len(sweep[d]) for d in ("gpus", "batch_size", "bandwidth", "latency")]))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux: KiB)
    start = time.perf_counter()
    best = best_per_gpus(sweep, "throughput", scheduler=args.scheduler, num_workers=args.workers)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "points": points,
        "workers": args.workers,
        "scheduler": args.scheduler,
        "wall_s": elapsed,
        "points_per_s": points / elapsed,
        "peak_rss_bytes": peak,
        "rss_before_bytes": rss_before,
        "full_grid_bytes_per_variable": points * 8,
    }
    print(best.reset_coords(drop=True).to_dataframe().to_string())
    print(
        f"{points:,} configurations reduced to the best per GPU count in {elapsed:.1f} s on "
        f"{args.workers} {args.scheduler} workers ({points / elapsed:.3g} configurations/s)"
    )
    print(
        f"peak RSS {peak / 2**20:.0f} MiB (before: {rss_before / 2**20:.0f} MiB); one float64 variable "
        f"over the full grid would take {points * 8 / 2**30:.1f} GiB"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
