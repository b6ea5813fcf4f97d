"""The JavaScript that runs in the browser (BokehJS callbacks), as ``.js`` files shipped in the package
beside this module, so that it is read, linted and diffed as JavaScript rather than as a Python
string. :func:`script` returns one file's text for a ``CustomJS(code=...)``.

- ``timeline.js``: the trace timeline's redraw on zoom, pan and category choice
  (:data:`dlexplore.plots.timeline.TIMELINE_JS`);
- ``report_gpus.js``, ``report_trace_step.js``: the selectors of the standalone reports
  (:mod:`dlexplore.report`).
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["script"]


@functools.cache
def script(name: str) -> str:
    """The text of ``<name>.js`` from this folder."""
    return resources.files(__name__).joinpath(f"{name}.js").read_text(encoding="utf-8")
