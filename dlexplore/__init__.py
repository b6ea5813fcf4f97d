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

import importlib
import os

from . import accessor  # noqa: F401 - registers ``ds.dlx`` on xarray datasets (imports xarray, nothing heavier)
from ._data import data_dir
from ._version import __version__
from .errors import DlexploreError, InputFileError, UnknownNameError

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

# Every name below is imported on first use (PEP 562), so that `import dlexplore` pays for xarray
# and nothing else: the model, readers and fits cost about 0.2 s more, scipy 0.2-0.4 s, bokeh and
# ipywidgets 0.5 s (benchmarks/bench_import.py). name -> (module, attribute; None for the module).
_LAZY = {
    "catalog": ("catalog", None),
    "fit": ("fit", None),
    "lab": ("lab", None),
    "measured": ("measured", None),
    "model": ("model", None),
    "sim": ("sim", None),
    "traces": ("traces", None),
    "plots": ("plots", None),
    "widgets": ("widgets", None),
    "report": ("report", None),
    "store": ("store", None),
    "advisor": ("advisor", None),
    "predict": ("model", "predict"),
    "predict_comm": ("model", "predict_comm"),
    "predict_parallel": ("model", "predict_parallel"),
    "Calibration": ("fit", "Calibration"),
    "calibrate": ("fit", "calibrate"),
    "calibrate_from_trace": ("fit", "calibrate_from_trace"),
    "compare": ("fit", "compare"),
    "predict_points": ("fit", "predict_points"),
    "Trace": ("traces", "Trace"),
    "load": ("traces", "load"),
    "load_trace": ("traces", "load_trace"),
    "Explorer": ("widgets", "Explorer"),
    "TraceView": ("widgets", "TraceView"),
    "advise": ("advisor", "advise"),
}


def __getattr__(name: str):
    if name in _LAZY:
        module_name, attribute = _LAZY[name]
        module = importlib.import_module(f".{module_name}", __name__)
        value = module if attribute is None else getattr(module, attribute)
        globals()[name] = value  # once: later look-ups do not come here
        return value
    if not name.startswith("_"):
        try:  # any other submodule, as `import dlexplore` used to import most of them
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'dlexplore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# A user's catalog files (DLEXPLORE_CATALOG) are checked when dlexplore is imported, as before the
# catalog loaded lazily: a typo in them fails at once, not at the first prediction.
if os.environ.get("DLEXPLORE_CATALOG", "").strip():
    from . import catalog  # noqa: E402, F401
