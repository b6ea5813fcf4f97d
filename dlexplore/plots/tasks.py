"""Bokeh task timeline: one row per worker, one bar per task coloured by its kind, with hover.

Input is a task-event table (:func:`dlexplore.traces.tasks.read_task_events` or
:func:`~dlexplore.model.workflow.coupled_tasks`): columns ``task``, ``worker``, ``start``, ``end`` (s),
``kind``. Times are drawn in seconds from the earliest start. Source name: ``task_timeline``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Legend, LegendItem
from bokeh.plotting import figure

from ..errors import DlexploreError
from . import _columns as cols
from .figure_parts import legend_below

__all__ = ["TASK_COLORS", "task_timeline_columns", "task_timeline_figure"]

#: Colours of the kinds :func:`~dlexplore.model.workflow.coupled_tasks` writes; other kinds get the
#: remaining Okabe-Ito colours in order of appearance.
TASK_COLORS = {"simulate": cols.BLUE, "train": cols.GREEN, "blocked": cols.VERMILION, "wait": cols.GREY}
_OTHERS = (cols.ORANGE, cols.PURPLE, cols.SKY, cols.YELLOW, "#000000")


def _colours(kinds: list[str]) -> dict[str, str]:
    spare = [c for c in _OTHERS]
    spare += [c for c in TASK_COLORS.values()]
    out = {}
    for i, kind in enumerate(kinds):
        out[kind] = TASK_COLORS.get(kind) or spare[i % len(spare)]
    return out


def task_timeline_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Plot columns of a task table: ``worker``, ``kind``, ``task``, ``left``/``right`` (s from the
    earliest start), ``duration_ms`` (ms), ``color``."""
    missing = [c for c in ("task", "worker", "start", "end", "kind") if c not in frame.columns]
    if missing:
        raise DlexploreError(f"task table lacks column(s) {', '.join(missing)}")
    start = frame["start"].to_numpy(dtype=float)
    end = frame["end"].to_numpy(dtype=float)
    origin = float(start.min()) if start.size else 0.0
    kinds = list(dict.fromkeys(frame["kind"].astype(str)))
    colours = _colours(kinds)
    kind = frame["kind"].astype(str).to_numpy()
    return {
        "worker": frame["worker"].astype(str).to_numpy(),
        "kind": kind,
        "task": frame["task"].astype(str).to_numpy(),
        "left": start - origin,
        "right": end - origin,
        "duration_ms": (end - start) * 1e3,
        "color": np.array([colours[k] for k in kind], dtype=object),
    }


def task_timeline_figure(
    frame: pd.DataFrame, *, title: str = "Task timeline", width: int = 900, height: int | None = None
):
    """A bokeh figure of the task table: workers as rows (in order of first appearance), bars from
    start to end coloured by kind, a legend of kinds below, and hover (task, kind, worker, times)."""
    data = task_timeline_columns(frame)
    workers = list(dict.fromkeys(data["worker"]))
    height = height or int(np.clip(120 + 28 * len(workers), 220, 700))
    source = ColumnDataSource(data, name="task_timeline")
    right = float(data["right"].max()) if data["right"].size else 1.0
    fig = figure(
        name="task_timeline_figure",
        title=title,
        width=width,
        height=height,
        y_range=FactorRange(*reversed(workers or ["-"])),
        x_range=(0, right * 1.01 or 1.0),
        x_axis_label="time from the first task start (s)",
        y_axis_label="worker",
        tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
        active_drag="xpan",
        active_scroll="xwheel_zoom",
    )
    bars = fig.hbar(
        y="worker",
        left="left",
        right="right",
        height=0.7,
        source=source,
        fill_color="color",
        line_color="color",
        fill_alpha=0.9,
    )
    items = []
    for kind, colour in _colours(list(dict.fromkeys(data["kind"]))).items():
        swatch = fig.hbar(
            y=[workers[0]] if workers else ["-"],
            left=[np.nan],
            right=[np.nan],
            height=0.7,
            fill_color=colour,
            line_color=colour,
        )
        items.append(LegendItem(label=kind, renderers=[swatch]))
    if items:
        legend_below(fig, Legend(items=items), ncols=min(len(items), 8))
    fig.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[
                ("task", "@task"),
                ("kind", "@kind"),
                ("worker", "@worker"),
                ("from", "@left{0,0.000} s to @right{0,0.000} s"),
                ("duration", "@duration_ms{0,0.000} ms"),
            ],
        )
    )
    fig.ygrid.grid_line_color = None
    return fig
