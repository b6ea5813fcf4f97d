"""dlexplore: predict and measure the performance of distributed deep-learning training.

The public API::

    import dlexplore as dlx
    ds = dlx.predict("resnet50", "P100", "25GbE", gpus=[1, 2, 4, 8, 16], batch_size=64)
    comm = dlx.predict_comm("allreduce", "ring", nbytes=1e8, gpus=8, bandwidth=10, latency=5e-6)
    published = dlx.measured.load("horovod-2017-16gpu-25gbe")
    trace = dlx.load_trace("run/")        # per-rank PyTorch/Horovod/Nsight/OTF2 traces
    trace.breakdown(), trace.collectives()
    cal = dlx.calibrate("tf-benchmarks-2017-dgx1", fit_on="gpus == 1", per=("workload",))
    cal.params, cal.points, cal.mape_holdout
    dlx.catalog.gpu("V100-16GB"), dlx.catalog.workload("bert-large")
    dlx.Explorer("resnet101", "P100", "25GbE", measured="horovod-2017-16gpu-25gbe")  # in Jupyter

Predictions and measurements are ``xarray.Dataset`` objects with units on every variable and
``attrs["source"]`` saying where the numbers come from.
"""

from . import catalog, fit, lab, measured, model, sim, traces
from ._data import data_dir
from ._version import __version__
from .errors import DlexploreError, InputFileError, UnknownNameError
from .fit import Calibration, calibrate, calibrate_from_trace, compare, predict_points
from .model import predict, predict_comm, predict_parallel
from .traces import Trace, load, load_trace

__all__ = [
    "__version__",
    "data_dir",
    "catalog",
    "lab",
    "measured",
    "model",
    "predict",
    "predict_comm",
    "predict_parallel",
    "advise",
    "traces",
    "sim",
    "fit",
    "compare",
    "predict_points",
    "calibrate",
    "calibrate_from_trace",
    "Calibration",
    "load",
    "load_trace",
    "Trace",
    "DlexploreError",
    "InputFileError",
    "UnknownNameError",
    "Explorer",
    "TraceView",
    "plots",
    "widgets",
    "report",
]

# The interactive parts import bokeh and ipywidgets (about half a second): load them on first use,
# so that `import dlexplore` and the command line stay quick.
_LAZY = {
    "plots": "plots",
    "widgets": "widgets",
    "report": "report",
    "Explorer": "widgets",
    "store": "store",
    "TraceView": "widgets",
    "advise": "advisor",
    "advisor": "advisor",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name) if name in ("Explorer", "TraceView", "advise") else module
    raise AttributeError(f"module 'dlexplore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
