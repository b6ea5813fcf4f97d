"""Layers the explorer lays over its figures for a traced run and a calibration.

:class:`Overlays` adds, once, to an :class:`~dlexplore.plots.ExplorerFigures`:

- ``throughput_uncalibrated``: the model before calibration, a faint dashed line beside the
  calibrated one (hidden until :meth:`Overlays.show_uncalibrated`);
- ``memory_measured``: a traced run's peak memory per GPU (the allocator's), a hatched bar in a row
  of its own under the predicted stack;
- ``comm_measured``: a traced run's collectives of one step, on a row above the predicted ones in
  the one-step view, shown when the GPU count selected is the run's.

Like the figures, each is fed new columns; nothing is rebuilt. Times in ms, memory in GiB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, LegendItem

from .figure_parts import empty_columns as _empty
from .figure_parts import plain_columns as _plain
from .figures import ExplorerFigures
from .palette import GREY, VERMILION

__all__ = ["Overlays", "OVERLAY_SOURCES", "MEASURED_COMM_ROW", "MEASURED_MEMORY_ROW"]

OVERLAY_SOURCES = ("throughput_uncalibrated", "memory_measured", "comm_measured")
#: The one-step view's row for a traced run's collectives.
MEASURED_COMM_ROW = "measured"
#: The memory view's row for a traced run's peak.
MEASURED_MEMORY_ROW = "measured peak"


class Overlays:
    """The trace and calibration layers of ``figures`` (module docstring)."""

    def __init__(self, figures: ExplorerFigures):
        self.figures = figures
        self.sources = {name: ColumnDataSource(name=name) for name in OVERLAY_SOURCES}
        figures.sources.update(self.sources)
        self._uncalibrated(figures.throughput)
        self._memory(figures.memory)
        self._comm(figures.comm)

    # -- building ------------------------------------------------------------------------------

    def _uncalibrated(self, fig) -> None:
        source = self.sources["throughput_uncalibrated"]
        source.data = _empty(["gpus", "throughput"])
        self.uncalibrated = fig.line(
            "gpus",
            "throughput",
            source=source,
            color=GREY,
            line_dash="dotdash",
            line_width=2,
            line_alpha=0.55,
            name="uncalibrated",
            visible=False,
        )
        self.uncalibrated_item = LegendItem(
            label="uncalibrated", renderers=[self.uncalibrated], visible=False
        )
        fig.legend[0].items.append(self.uncalibrated_item)

    def _memory(self, fig) -> None:
        source = self.sources["memory_measured"]
        source.data = _empty(["label", "peak", "run", "note"])
        bar = fig.hbar(
            y="label",
            right="peak",
            left=0,
            height=0.5,
            source=source,
            fill_color=VERMILION,
            fill_alpha=0.35,
            line_color="black",
            hatch_pattern="/",
            hatch_color="white",
        )
        fig.add_tools(
            HoverTool(
                renderers=[bar],
                tooltips=[("measured peak", "@peak{0,0.00} GiB"), ("run", "@run"), ("", "@note")],
            )
        )

    def _comm(self, fig) -> None:
        source = self.sources["comm_measured"]
        source.data = _empty(["row", "start", "end", "time", "mib", "name"])
        bars = fig.hbar(
            y="row",
            left="start",
            right="end",
            height=0.6,
            source=source,
            fill_color=VERMILION,
            fill_alpha=0.55,
            line_color="black",
            hatch_pattern="/",
            hatch_color="white",
        )
        fig.add_tools(
            HoverTool(
                renderers=[bars],
                tooltips=[
                    ("measured", "@name"),
                    ("size", "@mib{0,0.00} MiB"),
                    ("time", "@time{0,0.000} ms"),
                    ("runs", "@start{0,0.00} to @end{0,0.00} ms"),
                ],
            )
        )

    # -- updating ------------------------------------------------------------------------------

    def show_uncalibrated(
        self, gpus: Sequence[float] | None, throughput: Sequence[float] | None = None
    ) -> None:
        """The uncalibrated throughput (samples/s) at ``gpus``; None hides it."""
        source = self.sources["throughput_uncalibrated"]
        if gpus is None:
            if source.data["gpus"]:
                source.data = _empty(["gpus", "throughput"])
            self.uncalibrated.visible = self.uncalibrated_item.visible = False
            return
        source.data = _plain({"gpus": np.asarray(gpus, float), "throughput": np.asarray(throughput, float)})
        self.uncalibrated.visible = self.uncalibrated_item.visible = True

    def show_memory_peak(self, peak_gib: float | None, run: str = "", note: str = "") -> None:
        """A traced run's peak memory per GPU (GiB) in its own row; None removes the row."""
        fig = self.figures.memory
        source = self.sources["memory_measured"]
        if peak_gib is None or not np.isfinite(peak_gib):
            source.data = _empty(["label", "peak", "run", "note"])
            if MEASURED_MEMORY_ROW in fig.y_range.factors:
                fig.y_range.factors = ["per GPU"]
            return
        source.data = {
            "label": [MEASURED_MEMORY_ROW],
            "peak": [float(peak_gib)],
            "run": [run],
            "note": [note],
        }
        if MEASURED_MEMORY_ROW not in fig.y_range.factors:
            fig.y_range.factors = [MEASURED_MEMORY_ROW, "per GPU"]
        fig.x_range.end = max(float(fig.x_range.end or 0.0), float(peak_gib) * 1.08)

    def show_collectives(self, columns: Mapping[str, Sequence] | None) -> None:
        """A traced run's collectives of one step (columns ``start``, ``end``, ``time`` ms, ``mib``,
        ``name``); None or empty leaves the row out."""
        source = self.sources["comm_measured"]
        figures = self.figures
        if not columns or not len(columns["start"]):
            source.data = _empty(["row", "start", "end", "time", "mib", "name"])
            figures.comm_extra_rows = []
        else:
            n = len(columns["start"])
            source.data = _plain(
                {
                    "row": np.array([MEASURED_COMM_ROW] * n, dtype=object),
                    **{k: np.asarray(columns[k]) for k in ("start", "end", "time", "mib", "name")},
                }
            )
            figures.comm_extra_rows = [MEASURED_COMM_ROW]
        factors = list(figures.comm.y_range.factors)
        wanted = [*(f for f in factors if f != MEASURED_COMM_ROW), *figures.comm_extra_rows]
        if factors != wanted:
            figures.comm.y_range.factors = wanted
