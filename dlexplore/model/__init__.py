"""Analytical performance models: pure functions, scalars or numpy arrays in, xarray out.

- :mod:`~dlexplore.model.comm`: collectives in the alpha-beta-gamma model, nccl-tests bandwidths;
- :mod:`~dlexplore.model.compute`: forward, backward and optimizer time;
- :mod:`~dlexplore.model.memory`: bytes per GPU;
- :mod:`~dlexplore.model.io`: reading the input from a storage tier;
- :mod:`~dlexplore.model.step`: :func:`predict`, the whole data-parallel step;
- :mod:`~dlexplore.model.parallel`: :func:`predict_parallel`, hybrid data x tensor x pipeline
  parallelism (:mod:`~dlexplore.model.pipeline` schedules, :mod:`~dlexplore.model.states` memory
  conventions and activations, :mod:`~dlexplore.model.hybrid_comm` collectives,
  :mod:`~dlexplore.model.hybrid` the vectorised step);
- :mod:`~dlexplore.model.convergence`: steps to a target accuracy vs global batch (McCandlish et
  al. 2018) and :mod:`~dlexplore.model.time_to_accuracy`: time and energy to accuracy.
"""

from .comm import (
    ALGORITHMS,
    COLLECTIVES,
    algbw,
    busbw,
    busbw_factor,
    collective_time,
    predict_comm,
)
from .compute import DEFAULT_COMPUTE_EFFICIENCY
from .convergence import LR_RULES, ConvergenceParams, predict_convergence
from .dataio import LAYOUTS, DLIOWorkload, io_bound_gpus, io_model
from .energy import energy, pareto_front, time_energy_tradeoff
from .parallel import predict_parallel
from .step import DEFAULT_BUCKET_SIZE, StepArrays, gradient_buckets, predict, predict_arrays
from .stragglers import compare_with_measured, expected_max, straggler_slowdown
from .time_to_accuracy import time_to_accuracy
from .workflow import coupled, steady_state

__all__ = [
    "predict",
    "predict_arrays",
    "StepArrays",
    "predict_comm",
    "collective_time",
    "busbw_factor",
    "algbw",
    "busbw",
    "gradient_buckets",
    "ALGORITHMS",
    "COLLECTIVES",
    "DEFAULT_BUCKET_SIZE",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "predict_parallel",
    "io_model",
    "io_bound_gpus",
    "DLIOWorkload",
    "LAYOUTS",
    "energy",
    "pareto_front",
    "time_energy_tradeoff",
    "expected_max",
    "straggler_slowdown",
    "compare_with_measured",
    "coupled",
    "steady_state",
    "predict_convergence",
    "ConvergenceParams",
    "LR_RULES",
    "time_to_accuracy",
]
