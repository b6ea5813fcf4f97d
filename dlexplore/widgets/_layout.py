"""How the explorer is laid out on a page of any width, from a JupyterLab side panel to 1920 pixels.

Top to bottom: the headline; the measured-vs-predicted bar (what is compared, the error, the
calibrate button); the controls beside a grid of panels (wrapping under the controls when the page
is narrow); the strategy advisor. The panels grid puts as many columns as fit, each panel at least
:data:`PANEL_MIN_WIDTH` wide, and stretches the figures to the column: nothing is ever wider than
the page, so nothing is cut off and no scrollbar appears. A new panel is one more child of the
grid (:meth:`dlexplore.widgets.Explorer.add_panel`).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as w

from ..plots.figures import MIN_WIDTH

__all__ = ["PANEL_MIN_WIDTH", "CONTROL_WIDTH", "panel_grid", "explorer_box", "STYLE"]

#: The narrowest a panel (a figure and its legend) gets, pixels.
PANEL_MIN_WIDTH = MIN_WIDTH
#: The controls column, pixels.
CONTROL_WIDTH = 360

# Widgets boxes default to overflow: auto, which gives each box its own scrollbar when a child is a
# pixel too wide; the grid guarantees nothing is, so the boxes never need one. Buttons size to
# their label ("Calibrate to mea..." otherwise); HTML text wraps at any width.
STYLE = f"""<style>
.dlx-explorer, .dlx-explorer .widget-box {{ box-sizing: border-box; max-width: 100%; overflow: visible; }}
.dlx-explorer .dlx-panels {{ min-width: 0; }}
.dlx-explorer .dlx-panels > .jupyter-widgets {{ min-width: 0; overflow: hidden; }}
.dlx-explorer .widget-button {{ width: auto; min-width: max-content; }}
.dlx-explorer .widget-html-content {{ overflow-wrap: anywhere; white-space: normal; }}
.dlx-explorer .dlx-controls {{ flex: 0 0 {CONTROL_WIDTH}px; }}
.dlx-explorer .dlx-bar {{ background: #f4f7fb; border-left: 4px solid #0072B2; padding: 4px 8px; }}
</style>"""


def panel_grid(children: Sequence[w.Widget]) -> w.GridBox:
    """The panels in two columns, or one where two would be narrower than :data:`PANEL_MIN_WIDTH`."""
    # At most two columns (a balanced 2 x 2 of the figures on a wide page), one when narrow.
    grid = w.GridBox(
        list(children),
        layout=w.Layout(
            grid_template_columns=f"repeat(auto-fill, minmax(max({PANEL_MIN_WIDTH}px, 40%), 1fr))",
            grid_gap="6px 10px",
            flex="1 1 420px",
            min_width="0",
        ),
    )
    grid.add_class("dlx-panels")
    return grid


def explorer_box(
    headline: w.Widget, bar: w.Widget, controls: w.Widget, grid: w.Widget, below: w.Widget
) -> w.VBox:
    """The explorer's whole widget (see the module docstring)."""
    controls.add_class("dlx-controls")
    # Widths stay "auto" everywhere: a width of 100% plus the widgets' 2 px margin sticks out.
    middle = w.HBox(
        [controls, grid], layout=w.Layout(flex_flow="row wrap", align_items="flex-start", grid_gap="10px")
    )
    box = w.VBox([w.HTML(STYLE), headline, bar, middle, below])
    box.add_class("dlx-explorer")
    return box
