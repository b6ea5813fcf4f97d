"""The steps ``benchmarks/gpu_steps.py`` timed on a GPU, against dlexplore's uncalibrated prediction
of the same configuration (one GPU, no input pipeline: the data was already on the GPU).

    python benchmarks/gpu_steps_compare.py [benchmarks/results/gpu-steps-h200.json]

prints, per run: the measured step time (median) and samples/s, the predicted step time and the
error (predicted - measured) / measured, and the measured peak of allocated memory against the
predicted total. The optimizer is the one the script trained with: SGD with momentum for ResNet-50,
AdamW (``adam``) for the transformers.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import dlexplore as dlx

RESULTS = Path(__file__).resolve().parent / "results" / "gpu-steps-h200.json"
OPTIMIZER = {"resnet50": "momentum"}  # the transformers: adam


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS)
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    print(f"# {results['gpu']}, torch {results['torch']} (CUDA {results['cuda']}), {results['date']}")
    print(
        f"{'workload':<11}{'batch':>6}{'prec':>6}{'measured ms':>13}{'predicted ms':>14}{'error':>8}"
        f"{'peak GiB':>10}{'predicted GiB':>15}{'error':>8}"
    )
    for run in results["runs"]:
        if "error" in run:
            print(f"{run['workload']:<11}{run['batch']:>6}  failed: {run['error']}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = dlx.predict(
                workload=run["workload"],
                gpu=results["gpu"],
                gpus=1,
                batch_size=run["batch"],
                precision=run["precision"],
                optimizer=OPTIMIZER.get(run["workload"], "adam"),
            )
        predicted, memory = float(ds.step_time), float(ds.mem_total) / 2**30
        peak = run["peak_memory_gib"]
        print(
            f"{run['workload']:<11}{run['batch']:>6}{run['precision']:>6}{run['step_time'] * 1e3:>13.2f}"
            f"{predicted * 1e3:>14.2f}{predicted / run['step_time'] - 1:>8.0%}"
            f"{peak:>10.2f}{memory:>15.2f}{memory / peak - 1:>8.0%}"
        )


if __name__ == "__main__":
    main()
