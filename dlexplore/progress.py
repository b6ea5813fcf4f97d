"""Progress bars for long work: tqdm's (a widget in Jupyter, text on a terminal), silent otherwise.

A bar is shown only where a person is watching: in a notebook, or when standard error is a
terminal; never under CI (``CI=true``) or when output goes to a file or pipe. Work shorter than
``delay`` seconds shows nothing at all. With a Dask ``distributed.Client``, use its own
``distributed.progress`` instead (:func:`dlexplore.traces.summarize` does).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

__all__ = ["progress_enabled", "progress_bar", "in_notebook"]


def in_notebook() -> bool:
    """Whether this code runs in a Jupyter kernel (a notebook, JupyterLab, Voila)."""
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return False
    shell = shell_module.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def progress_enabled(enabled: bool | None = None) -> bool:
    """Whether to show progress: ``enabled`` if given, else when interactive and not under CI."""
    if enabled is not None:
        return bool(enabled)
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        return False
    if in_notebook():
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed or replaced stderr
        return False


def progress_bar(
    total: int | None = None,
    *,
    desc: str = "",
    unit: str = "it",
    enabled: bool | None = None,
    delay: float = 1.0,
    **kwargs: Any,
) -> Any:
    """A ``tqdm`` bar (``tqdm.auto``: a widget in notebooks) shown after ``delay`` s, or a silent one.

    Use it as tqdm: ``with progress_bar(total=n, desc="traces") as bar: ... bar.update(1)``.
    """
    # the notebook widget needs ipywidgets (the plots extra); without it tqdm.auto would warn
    if progress_enabled(enabled) and in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        delay=delay,
        disable=not progress_enabled(enabled),
        dynamic_ncols=True,
        **kwargs,
    )
