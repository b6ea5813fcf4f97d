"""Interactive views for Jupyter and Voila: ipywidgets controls wired to :mod:`dlexplore.plots`.

- :class:`Explorer`: sliders and drop-downs to predicted vs measured throughput, step-time,
  memory and communication breakdowns.
"""

from .explorer import BATCH_SIZES, GPUS_PER_NODE, Explorer, load_bokehjs

__all__ = ["Explorer", "BATCH_SIZES", "GPUS_PER_NODE", "load_bokehjs"]
