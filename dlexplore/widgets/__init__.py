"""Interactive views for Jupyter and Voila: ipywidgets controls wired to :mod:`dlexplore.plots`.

- :class:`Explorer`: sliders and drop-downs to predicted vs measured throughput, step-time,
  memory and communication breakdowns, with the matching published measurement, its error and
  calibration.
- :class:`TraceView`: a measured trace: per-rank timeline (zoomable, decimated), breakdown bars per
  rank and the collective table.
"""

# ruff: noqa: E402 - the check below comes before the imports it guards
from ..errors import require_extra

require_extra("dlexplore.widgets", ("bokeh", "ipywidgets", "jupyter_bokeh"))

from .explorer import BATCH_SIZES, DEFAULTS, GPUS_PER_NODE, Explorer, load_bokehjs
from .traceview import TraceView

__all__ = ["Explorer", "TraceView", "BATCH_SIZES", "DEFAULTS", "GPUS_PER_NODE", "load_bokehjs"]
