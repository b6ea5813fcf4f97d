"""Bokeh figure builders: datasets in, figures out. Nothing here knows about ipywidgets.

- :mod:`~dlexplore.plots._columns`: pure functions from a prediction (and a measured dataset) to
  the columns each plot draws, with times in ms and memory in GiB;
- :mod:`~dlexplore.plots._advice`: the headline's bottleneck and what would help;
- :class:`ExplorerFigures`: the explorer's four figures, built once and fed new columns;
- :mod:`~dlexplore.plots.operators`: the compute breakdown by operator category;
- :mod:`~dlexplore.plots.calibration`: a calibration's points, predicted against measured, with
  their prediction intervals (the throughput plot draws the calibrated interval as a band);
- :func:`output_notebook` / :func:`load_bokehjs`: BokehJS in a notebook page without saving it
  into the notebook (:mod:`~dlexplore.plots.notebook`).
"""

# ruff: noqa: E402 - the check below comes before the imports it guards
from ..errors import require_extra

require_extra("dlexplore.plots", ("bokeh",))

from ._advice import advice, bottleneck, headline
from ._columns import (
    GPU_COUNTS,
    bucket_columns,
    largest_batch,
    measured_columns,
    measured_points,
    memory_columns,
    phase_columns,
    selected_columns,
    step_breakdown_columns,
    throughput_columns,
)
from .calibration import calibration_columns, calibration_figure
from .figures import SOURCE_NAMES, ExplorerFigures
from .notebook import load_bokehjs, output_notebook
from .operators import operator_columns, operator_figure

__all__ = [
    "GPU_COUNTS",
    "advice",
    "SOURCE_NAMES",
    "ExplorerFigures",
    "bottleneck",
    "bucket_columns",
    "calibration_columns",
    "calibration_figure",
    "headline",
    "largest_batch",
    "load_bokehjs",
    "output_notebook",
    "measured_columns",
    "measured_points",
    "memory_columns",
    "operator_columns",
    "operator_figure",
    "phase_columns",
    "selected_columns",
    "step_breakdown_columns",
    "throughput_columns",
]
