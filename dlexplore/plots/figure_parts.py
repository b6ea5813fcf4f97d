"""Small pieces every bokeh figure of dlexplore shares: a figure without the logo and with the
house title size, a second title line, the legend below the data, and columns as plain lists.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from bokeh.models import Legend, Title
from bokeh.plotting import figure


def legend_below(fig, legend: Legend, *, ncols: int) -> None:
    """Legends go under the data, never over it, in columns that fit :data:`MIN_WIDTH`."""
    legend.ncols = ncols
    legend.label_text_font_size = "8pt"
    legend.glyph_height = legend.glyph_width = 12
    legend.padding = legend.margin = 3
    legend.spacing = 2
    legend.border_line_alpha = 0
    if legend in fig.center:
        fig.center.remove(legend)
    fig.add_layout(legend, "below")


def empty_columns(columns: Sequence[str]) -> dict[str, list]:
    return {name: [] for name in columns}


def plain_columns(columns: dict) -> dict:
    """Columns as lists: BokehJS gets them inside the patch's JSON instead of one binary buffer
    (two more comm messages) per array; the explorer's columns hold at most a few hundred values."""
    return {
        name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in columns.items()
    }


def subtitle(fig, name: str) -> Title:
    """A second title line under the figure's title, for the details that change with the data."""
    title = Title(text="", text_font_size="11px", text_font_style="normal", name=name)
    fig.add_layout(title, "above")
    return title


def new_figure(**kwargs):
    fig = figure(**kwargs)
    fig.toolbar.logo = None
    fig.title.text_font_size = "13px"
    return fig
