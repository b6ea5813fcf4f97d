"""A calibration as a plot: every measured point against its prediction, with the prediction interval.

:func:`calibration_columns` turns a :class:`dlexplore.Calibration` (any table: data-parallel,
communication, hybrid-parallel) into columns; :func:`calibration_figure` draws them: measured on x,
predicted on y (log-log), the diagonal where the two agree, each point's prediction interval as a
vertical bar, the fitted points apart from the held-out ones. A point whose bar crosses the diagonal
is covered by its interval.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from .palette import BLUE, VERMILION

__all__ = ["calibration_columns", "calibration_figure"]

_LABELS = ("model", "workload", "collective", "gpu", "algorithm", "setup", "recompute", "bytes")


def calibration_columns(cal: Any) -> dict[str, np.ndarray]:
    """Columns of the points of ``cal``: ``measured``, ``predicted``, ``lower``, ``upper`` (in the
    points' units; NaN without an interval), ``error`` (fraction), ``role`` (``fitted`` or ``held
    out``), ``color``, ``label`` (what the point is), ``gpus``, ``units``, ``variable``."""
    p = cal.points
    n = len(p)
    nan = np.full(n, np.nan)
    labels = [c for c in _LABELS if c in p and p[c].astype(str).nunique() > 1]
    label = [" / ".join(str(row[c]) for c in labels) for _, row in p.iterrows()] if labels else [""] * n
    fitted = p["fitted"].to_numpy(dtype=bool)
    return {
        "measured": p["measured"].to_numpy(dtype=float),
        "predicted": p["predicted"].to_numpy(dtype=float),
        "lower": p["lower"].to_numpy(dtype=float) if "lower" in p else nan,
        "upper": p["upper"].to_numpy(dtype=float) if "upper" in p else nan,
        "error": p["error"].to_numpy(dtype=float),
        "role": np.where(fitted, "fitted", "held out"),
        "color": np.where(fitted, BLUE, VERMILION),
        "label": np.asarray(label, dtype=object),
        "gpus": p["gpus"].to_numpy(dtype=float) if "gpus" in p else nan,
        "units": p["units"].astype(str).to_numpy() if "units" in p else np.full(n, "", dtype=object),
        "variable": p["variable"].astype(str).to_numpy() if "variable" in p else np.full(n, "", dtype=object),
    }


def calibration_figure(cal: Any, *, width: int = 560, height: int = 460):
    """Predicted against measured for every point of ``cal``, with prediction intervals."""
    data = calibration_columns(cal)
    source = ColumnDataSource(data, name="calibration_points")
    finite = np.concatenate(
        [data[k][np.isfinite(data[k]) & (data[k] > 0)] for k in ("measured", "predicted", "lower", "upper")]
    )
    lo, hi = (float(finite.min()) / 1.3, float(finite.max()) * 1.3) if finite.size else (0.1, 10.0)
    variable = str(data["variable"][0]) if len(data["variable"]) else "value"
    units = str(data["units"][0]) if len(data["units"]) else ""
    level = getattr(cal, "level", 0.9)
    fig = figure(
        name="calibration_figure",
        width=width,
        height=height,
        x_axis_type="log",
        y_axis_type="log",
        x_range=(lo, hi),
        y_range=(lo, hi),
        tools="pan,wheel_zoom,box_zoom,reset,save",
        title=f"Calibration of {cal.name or 'the measured points'}: {cal.fit_on}",
        x_axis_label=f"measured {variable} ({units})",
        y_axis_label=f"predicted {variable} ({units})",
    )
    fig.line([lo, hi], [lo, hi], color="#888888", line_dash="dashed", legend_label="predicted = measured")
    fig.segment(
        "measured",
        "lower",
        "measured",
        "upper",
        source=source,
        color="color",
        line_width=3,
        alpha=0.45,
        legend_label=f"{level:.0%} prediction interval",
    )
    dots = fig.scatter("measured", "predicted", source=source, color="color", size=9, legend_field="role")
    fig.add_tools(
        HoverTool(
            renderers=[dots],
            tooltips=[
                ("point", "@label"),
                ("GPUs", "@gpus{0}"),
                ("measured", "@measured{0,0.000}"),
                ("predicted", "@predicted{0,0.000}"),
                ("interval", "@lower{0,0.000} to @upper{0,0.000}"),
                ("error", "@error{+0.0%}"),
                ("role", "@role"),
            ],
        )
    )
    fig.legend.location = "top_left"
    fig.legend.label_text_font_size = "8pt"
    return fig
