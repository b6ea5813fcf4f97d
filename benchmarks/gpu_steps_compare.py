"""The steps ``benchmarks/gpu_steps.py`` timed on a GPU, against dlexplore's uncalibrated prediction
of the same configuration (one GPU, no input pipeline: the data was already on the GPU).

    python benchmarks/gpu_steps_compare.py [RESULTS.json ...]

prints, per run: the measured step time (median) and samples/s, the predicted step time and the
error (predicted - measured) / measured, and the measured peak of allocated memory against the
predicted total. The optimizer is the one the script trained with: SGD with momentum for ResNet-50,
AdamW (``adam``) for the transformers, whose attention is PyTorch's fused SDPA kernel (``flash``). A
run with its own vocabulary (``gpu_steps.py --set vocab``) is predicted for the catalog workload
with that vocabulary; ``(c)`` marks a run through torch.compile (``--set compiled``). Default: the
three result files of ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import dlexplore as dlx

RESULTS = [
    Path(__file__).resolve().parent / "results" / name
    for name in ("gpu-steps-h200.json", "gpu-steps-vocab-h200.json", "gpu-steps-compiled-h200.json")
]
OPTIMIZER = {"resnet50": "momentum"}  # the transformers: adam
#: The transformers ran Hugging Face's models with PyTorch's scaled_dot_product_attention: a fused
#: (flash) kernel that keeps no attention matrix.
ATTENTION = {"gpt2": "flash", "bert-large": "flash"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path, default=RESULTS)
    args = parser.parse_args()
    for path in args.results:
        _compare(json.loads(path.read_text()))


def _workload(run: dict):
    """The catalog workload of ``run``, with the run's vocabulary where it names one."""
    workload = dlx.catalog.workload(run["workload"])
    vocab = run.get("vocab")
    if not vocab or vocab == workload.config.get("vocab"):
        return workload
    return dlx.catalog.transformer(**dict(workload.config, vocab=vocab), name=f"{workload.name}-v{vocab}")


def _compare(results: dict) -> None:
    print(f"# {results['gpu']}, torch {results['torch']} (CUDA {results['cuda']}), {results['date']}")
    print(
        f"{'workload':<15}{'vocab':>7}{'batch':>6}{'prec':>6}{'measured ms':>13}{'predicted ms':>14}"
        f"{'error':>8}{'peak GiB':>10}{'predicted GiB':>15}{'error':>8}"
    )
    for run in results["runs"]:
        if "error" in run:
            print(f"{run['workload']:<11}{run['batch']:>6}  failed: {run['error']}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = dlx.predict(
                workload=_workload(run),
                gpu=results["gpu"],
                gpus=1,
                batch_size=run["batch"],
                precision=run["precision"],
                optimizer=OPTIMIZER.get(run["workload"], "adam"),
                attention=ATTENTION.get(run["workload"], "fused"),
            )
        predicted, memory = float(ds.step_time), float(ds.mem_total) / 2**30
        label = run["workload"] + (" (c)" if run.get("compiled") else "")
        peak = run["peak_memory_gib"]
        print(
            f"{label:<15}{run.get('vocab') or '':>7}{run['batch']:>6}{run['precision']:>6}"
            f"{run['step_time'] * 1e3:>13.2f}"
            f"{predicted * 1e3:>14.2f}{predicted / run['step_time'] - 1:>8.0%}"
            f"{peak:>10.2f}{memory:>15.2f}{memory / peak - 1:>8.0%}"
        )


if __name__ == "__main__":
    main()
