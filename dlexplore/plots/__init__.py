"""Bokeh figure builders: datasets in, figures out. Nothing here knows about ipywidgets.

- :mod:`~dlexplore.plots._columns`: pure functions from a prediction (and a measured dataset) to
  the columns each plot draws, with times in ms and memory in GiB;
- :class:`ExplorerFigures`: the explorer's four figures, built once and fed new columns;
- :mod:`~dlexplore.plots.operators`: the compute breakdown by operator category;
- :mod:`~dlexplore.plots.calibration`: a calibration's points, predicted against measured, with
  their prediction intervals (the throughput plot draws the calibrated interval as a band).
"""

from ._columns import (
    GPU_COUNTS,
    bottleneck,
    bucket_columns,
    headline,
    largest_batch,
    measured_columns,
    memory_columns,
    phase_columns,
    selected_columns,
    step_breakdown_columns,
    throughput_columns,
)
from .calibration import calibration_columns, calibration_figure
from .figures import SOURCE_NAMES, ExplorerFigures
from .operators import operator_columns, operator_figure

__all__ = [
    "GPU_COUNTS",
    "SOURCE_NAMES",
    "ExplorerFigures",
    "bottleneck",
    "bucket_columns",
    "calibration_columns",
    "calibration_figure",
    "headline",
    "largest_batch",
    "measured_columns",
    "memory_columns",
    "operator_columns",
    "operator_figure",
    "phase_columns",
    "selected_columns",
    "step_breakdown_columns",
    "throughput_columns",
]
