"""dlexplore: predict and measure the performance of distributed deep-learning training.

The public API::

    import dlexplore as dlx
    ds = dlx.predict("resnet50", "P100", "25GbE", gpus=[1, 2, 4, 8, 16], batch_size=64)
    comm = dlx.predict_comm("allreduce", "ring", nbytes=1e8, gpus=8, bandwidth=10, latency=5e-6)
    published = dlx.measured.load("horovod-2017-16gpu-25gbe")
    dlx.catalog.gpu("V100-16GB"), dlx.catalog.workload("bert-large")

Predictions and measurements are ``xarray.Dataset`` objects with units on every variable and
``attrs["source"]`` saying where the numbers come from.
"""

from . import catalog, measured, model
from ._version import __version__
from .errors import DlexploreError, InputFileError, UnknownNameError
from .model import predict, predict_comm

__all__ = [
    "__version__",
    "catalog",
    "measured",
    "model",
    "predict",
    "predict_comm",
    "DlexploreError",
    "InputFileError",
    "UnknownNameError",
]
