"""Datasets the public functions return, one of each kind, made from bundled data and the test files:
what tests/test_units_pint.py parses the units of and tests/test_accessor.py plots."""

from __future__ import annotations

import warnings
from pathlib import Path

import dlexplore as dlx

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "traces"
SAMPLE = ROOT / "data" / "traces" / "gloo-cnn-2rank"


def quiet(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make()


def _prediction():
    return dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=[1, 8, 64], batch_size=64, buckets=True)


def _trace():
    return quiet(lambda: dlx.load_trace(SAMPLE))


def _calibration():
    return dlx.calibrate("tf-benchmarks-2017-dgx1", fit_on="gpus == 1", per=("workload",))


DATASETS = {
    "predict": _prediction,
    "predict bf16 transformer": lambda: dlx.predict("bert-large", "A100-80GB", gpus=[8], batch_size=8),
    "predict_comm": lambda: dlx.predict_comm(
        "allreduce", "ring", nbytes=1e8, gpus=8, bandwidth=10, latency=5e-6
    ),
    "predict_parallel": lambda: dlx.predict_parallel("gpt2", "A100-80GB", "IB-HDR", gpus=8, tp=2),
    "io_model": lambda: dlx.model.io_model("pfs", sample_bytes=110e3, batch_size=64),
    "energy": lambda: dlx.model.energy(_prediction()),
    "time_energy_tradeoff": lambda: dlx.model.time_energy_tradeoff(
        "resnet50", "V100-16GB", "25GbE", gpus=[1, 8]
    ),
    "straggler_slowdown": lambda: dlx.model.straggler_slowdown([0.10, 0.11, 0.13], ranks=[2, 8]),
    "predict_convergence": lambda: dlx.model.predict_convergence([256, 8192], "resnet50-goyal2017"),
    "time_to_accuracy": lambda: dlx.model.time_to_accuracy(_prediction(), "resnet50-goyal2017"),
    "coupled": lambda: dlx.model.coupled(4, 100.0, 300.0, 16, 2.0),
    "trace.breakdown": lambda: _trace().breakdown(),
    "trace.temporal_breakdown": lambda: _trace().temporal_breakdown(),
    "compare_with_measured": lambda: dlx.model.compare_with_measured(_trace()),
    "nccl-tests": lambda: dlx.load(TRACES / "nccl-tests" / "together-h100-all_reduce_ring.out"),
    "dlio": lambda: dlx.load(TRACES / "dlio" / "summary.json"),
    "tau": lambda: dlx.load(ROOT / "tests" / "data" / "tau" / "jeevan0920-mpi"),
    "compare": lambda: dlx.compare(
        dlx.predict("resnet101", "P100", "25GbE", gpus=[1, 4, 8, 16], batch_size=64),
        "horovod-2017-16gpu-25gbe",
    ),
    "predict_points": lambda: dlx.predict_points("horovod-2017-16gpu-25gbe"),
    "calibration.predict": lambda: _calibration().predict(
        workload="resnet50", gpu="V100-16GB", network="25GbE", gpus=[8], batch_size=64
    ),
    "whatif": lambda: quiet(lambda: dlx.sim.whatif(_trace(), bandwidth=[1.0, 2.0])),
}
for _name in (
    dlx.measured.available() + dlx.measured.available_convergence() + dlx.measured.available_hybrid()
):
    DATASETS[f"measured {_name}"] = lambda name=_name: dlx.measured.load(name)
