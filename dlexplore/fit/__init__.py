"""Predicted against measured: comparison, calibration and empirical scaling baselines.

- :func:`compare`: lay a prediction over a measured dataset; per-point error, MAPE, maximum error;
- :func:`predict_points`: the model at every measured point, with that point's own setup;
- :func:`calibrate`: fit model parameters to chosen measured points (``fit_on="gpus<=8"``,
  ``fit_on=smallest(3)``), with standard errors and prediction intervals, and predict the others,
  data-parallel, communication and hybrid-parallel (LLM) tables alike; :func:`leave_one_out`: every
  point predicted by a fit on the others; :func:`calibrate_from_trace`: latency, bandwidth and
  compute time per sample from a measured trace; all return a :class:`Calibration`;
- :func:`fit_network` (:mod:`~dlexplore.fit.alpha_beta`): the alpha-beta model of a trace's
  collectives (through :func:`calibrate_from_trace`, else :func:`fit_alpha_beta`'s linear fit);
- :func:`noise_scale_from_gradients`, :func:`fit_noise_scale`, :func:`noise_scale_from_runs`
  (:mod:`~dlexplore.fit.noise_scale`): the gradient noise scale of a run, with its standard error;
  :func:`fit_published_convergence`: ``S_min`` and ``B_noise`` from published steps to a target;
  :func:`compare_convergence`: the convergence model against published large-batch points;
- :func:`fit_scaling` (:mod:`~dlexplore.fit.extrap`): Extra-P-style empirical scaling models, the
  baseline an analytical model must beat;
- your own runs (:mod:`~dlexplore.fit.trace_setup`, :mod:`~dlexplore.fit.trace_fit`):
  :func:`infer_setup` (what a trace says of its run), :func:`trace_point` (its measured point),
  :func:`calibrate_traces` (the model fitted to some runs, the others predicted), and
  :func:`save_calibration` / :func:`load_calibration` (JSON).

Errors are fractions, ``(predicted - measured) / measured`` (:data:`ERROR_DEFINITION`).
"""

from .alpha_beta import AlphaBeta, fit_alpha_beta, fit_network
from .calibrate import (
    PARAMETERS,
    Calibration,
    CalibrationWarning,
    calibrate,
    calibrate_from_trace,
    leave_one_out,
)
from .calibration_file import load_calibration, save_calibration
from .compare import ERROR_DEFINITION, as_points, compare, predict_points
from .extrap import ScalingModel, fit_scaling
from .hybrid import smallest
from .noise_scale import (
    NoiseScale,
    compare_convergence,
    fit_noise_scale,
    fit_published_convergence,
    noise_scale_from_gradients,
    noise_scale_from_runs,
    steps_to_threshold,
)
from .trace_fit import TraceCalibration, calibrate_traces
from .trace_point import TracePoint, trace_point
from .trace_setup import TraceSetup, infer_setup

__all__ = [
    "compare",
    "predict_points",
    "as_points",
    "calibrate",
    "calibrate_from_trace",
    "AlphaBeta",
    "fit_alpha_beta",
    "fit_network",
    "smallest",
    "leave_one_out",
    "Calibration",
    "CalibrationWarning",
    "PARAMETERS",
    "ERROR_DEFINITION",
    "fit_scaling",
    "ScalingModel",
    "NoiseScale",
    "noise_scale_from_gradients",
    "fit_noise_scale",
    "noise_scale_from_runs",
    "steps_to_threshold",
    "fit_published_convergence",
    "compare_convergence",
    "infer_setup",
    "trace_point",
    "calibrate_traces",
    "save_calibration",
    "load_calibration",
    "TraceCalibration",
    "TraceSetup",
    "TracePoint",
]
