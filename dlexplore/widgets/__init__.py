"""Interactive views for Jupyter and Voila: ipywidgets controls wired to :mod:`dlexplore.plots`.

- :class:`Explorer`: sliders and drop-downs to predicted vs measured throughput, step-time,
  memory and communication breakdowns, with the matching published measurement, its error and
  calibration.
- :class:`TraceView`: a measured trace: per-rank timeline (zoomable, decimated), breakdown bars per
  rank and the collective table.
"""

from .explorer import BATCH_SIZES, DEFAULTS, GPUS_PER_NODE, Explorer, load_bokehjs
from .traceview import TraceView

__all__ = ["Explorer", "TraceView", "BATCH_SIZES", "DEFAULTS", "GPUS_PER_NODE", "load_bokehjs"]
