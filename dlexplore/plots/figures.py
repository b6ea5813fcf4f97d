"""The explorer's four bokeh figures, built once and then fed new data.

:class:`ExplorerFigures` owns the figures and their named ``ColumnDataSource`` objects. A change of
configuration calls :meth:`ExplorerFigures.show`, which replaces each source's ``data`` and a few
model properties (titles, ranges), never the figures themselves: the browser keeps its canvases and
only receives new columns. The same object renders the static HTML report.

Source names (stable: browser tests and user code can find them with
``document.get_model_by_name``): ``throughput_predicted``, ``throughput_measured``,
``throughput_selected``, ``throughput_band`` (the calibrated prediction band, empty until a
calibration gives one, see :meth:`ExplorerFigures.show_band`), ``step_breakdown``, ``memory``,
``comm_buckets``, ``comm_phases``, and ``step_breakdown_measured`` (measured breakdowns from
traces beside the predicted bars, see :meth:`ExplorerFigures.show_measured_steps`).

Layout: each figure stands alone (:attr:`ExplorerFigures.figures`), stretching to the width it is
given down to ``min_width``, with its legend below the data, no Bokeh logo, and titles short
enough for that width (the changing details go in a second, smaller title line:
:attr:`~ExplorerFigures.subtitles`); :attr:`ExplorerFigures.layout` puts the four in a grid for a
standalone page. New data goes in as plain lists, which BokehJS takes without binary buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr
from bokeh.layouts import gridplot
from bokeh.models import (
    ColumnDataSource,
    LegendItem,
    Title,
)

from . import _columns as cols
from . import hybrid
from .explorer_panels import MEASURED_STEP_PARTS, Panels
from .figure_parts import empty_columns, plain_columns

__all__ = ["ExplorerFigures", "SOURCE_NAMES"]

SOURCE_NAMES = (
    "throughput_predicted",
    "throughput_measured",
    "throughput_selected",
    "throughput_band",
    "step_breakdown",
    "memory",
    "comm_buckets",
    "comm_phases",
    "step_breakdown_measured",
)


_HEIGHT = 340
#: The narrowest a figure gets: its legend, titles and toolbar fit in this many pixels.
MIN_WIDTH = 340
_OOM_BACKGROUND, _OK_BACKGROUND = "#fde0dc", "#ffffff"


def _mib(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


class ExplorerFigures(Panels):
    """Throughput vs GPUs, step-time breakdown, memory against capacity, and the gradient-bucket
    timeline of one step, for one configuration swept over GPU counts.

    Parameters
    ----------
    gpu_counts:
        The GPU counts on the x axes (the ``gpus`` coordinate of the predictions to come).
    width, height:
        Size of each figure, pixels.
    """

    def __init__(
        self,
        gpu_counts: Sequence[int] = cols.GPU_COUNTS,
        *,
        width: int | None = None,
        height: int = _HEIGHT,
        min_width: int = MIN_WIDTH,
    ):
        self.gpu_counts = [int(g) for g in gpu_counts]
        self.sources = {name: ColumnDataSource(name=name) for name in SOURCE_NAMES}
        # width None: stretch to the container (the explorer's grid), never below min_width.
        size = (
            dict(width=width, height=height)
            if width is not None
            else dict(height=height, sizing_mode="stretch_width", min_width=min_width)
        )
        self.subtitles: dict[str, Title] = {}
        self.throughput = self._throughput_figure(size)
        self.step_breakdown = self._step_figure(size)
        self.memory = self._memory_figure(size)
        self.comm = self._comm_figure(size)
        #: rows above the predicted ones in the one-step view (a traced run's, dlexplore.plots.overlays)
        self.comm_extra_rows: list[str] = []
        self._layout = None

    @property
    def figures(self) -> tuple:
        """The four figures, in reading order: throughput, step time, memory, one step."""
        return (self.throughput, self.step_breakdown, self.memory, self.comm)

    @property
    def layout(self):
        """The four figures in a 2 x 2 grid (for a standalone page; the explorer lays them out
        itself). Made on first use: a figure belongs to one layout."""
        if self._layout is None:
            self._layout = gridplot(
                [[self.throughput, self.step_breakdown], [self.memory, self.comm]],
                toolbar_location="right",
                merge_tools=False,
            )
            self._layout.name = "dlexplore_explorer"
        return self._layout

    def show_measured_steps(self, data: dict | None) -> None:
        """Show measured breakdowns (columns of :func:`dlexplore.plots.timeline.measured_step_columns`,
        concatenated; None or empty clears them): each bar goes on a factor of its own, right after
        the predicted bar of the largest GPU count not above its own."""
        source = self.sources["step_breakdown_measured"]
        fig = self.step_breakdown
        if not data or not len(data["label"]):
            source.data = empty_columns(list(source.data))
            fig.x_range.factors = [str(g) for g in self.gpu_counts]
            fig.xaxis.major_label_orientation = "horizontal"
            return
        source.data = plain_columns({k: np.asarray(v) for k, v in data.items()})
        factors: list[str] = []
        placed = set()
        for g in self.gpu_counts:
            factors.append(str(g))
            for label, n in zip(data["label"], data["gpus"], strict=True):
                if label not in placed and n >= g and not any(g < h <= n for h in self.gpu_counts):
                    factors.append(str(label))
                    placed.add(label)
        factors += [str(label) for label in data["label"] if label not in placed]
        fig.x_range.factors = factors
        fig.xaxis.major_label_orientation = 0.9
        legend = self._step_legend
        if not any(item.renderers[0] in self._measured_bars for item in legend.items):
            legend.items = [
                *legend.items,
                *(
                    LegendItem(label=label, renderers=[bar])
                    for (_, label, _), bar in zip(MEASURED_STEP_PARTS, self._measured_bars, strict=True)
                    if label.startswith("measured")
                ),
            ]

    # -- updating (every change) ----------------------------------------------------------------

    def show(self, prediction: xr.Dataset, gpus: int, measured: dict | None = None) -> None:
        """Draw ``prediction`` (over ``gpus`` counts, with ``buckets=True``) with ``gpus`` selected.

        ``measured`` is the column dict of :func:`dlexplore.plots.measured_columns` (or None to keep
        the current markers).
        """
        self.show_line(prediction)
        if measured is not None:
            self.show_measured(measured)
        self.select(prediction, gpus)

    def show_line(self, prediction: xr.Dataset, *, band: bool = True) -> None:
        """The predicted (and ideal) throughput over every GPU count, and the prediction interval
        a calibrated prediction carries (``throughput_lower``/``_upper``) as the band (``band=False``
        leaves the band as it is, for a caller that sends the line before the band is worked out)."""
        columns = cols.throughput_columns(prediction)
        self.sources["throughput_predicted"].data = plain_columns(columns)
        if not band:
            return
        if np.isfinite(columns["lower"]).any():
            level = prediction.attrs.get("band_level")
            label = (
                f"{float(level):.0%} prediction interval (calibrated)"
                if level is not None
                else "prediction interval (calibrated)"
            )
            self.show_band(columns["lower"], columns["upper"], label=label)
        else:
            self.show_band(None)

    def show_measured(self, measured: dict) -> None:
        """Lay measured points (:func:`dlexplore.plots.measured_columns`) over the line, and say
        how far the line is from the points it stands for (its error) under the title."""
        self.sources["throughput_measured"].data = plain_columns(measured)
        error = np.abs(np.asarray(measured["error"], dtype=float))
        error = error[np.isfinite(error)]
        self.subtitles["throughput"].text = (
            f"measured: mean |error| {error.mean():.1%} ({error.size} point{'s' if error.size != 1 else ''})"
            if error.size
            else ("measured: none comparable with this line" if len(measured["gpus"]) else "")
        )

    def show_band(
        self,
        lower: Sequence[float] | None,
        upper: Sequence[float] | None = None,
        *,
        label: str = "calibrated band",
    ) -> None:
        """Shade the calibrated prediction's band (samples/s at each GPU count) under ``label`` in
        the legend; None clears and hides it."""
        if lower is None:
            if self.band.visible or self.sources["throughput_band"].data["gpus"]:
                self.sources["throughput_band"].data = empty_columns(["gpus", "lower", "upper"])
            self.band.visible = self.band_item.visible = False
            return
        self.sources["throughput_band"].data = {
            "gpus": [float(g) for g in self.gpu_counts],
            "lower": [float(v) for v in lower],
            "upper": [float(v) for v in upper],
        }
        self.band_item.label = {"value": label}
        self.band.visible = self.band_item.visible = True

    def select(self, prediction: xr.Dataset, gpus: int) -> None:
        """Highlight ``gpus`` GPUs: the parts of the plots that depend on the GPU count alone."""
        for _, update in self.selection_updates(prediction, gpus):
            update()

    def selection_updates(self, prediction: xr.Dataset, gpus: int) -> list[tuple[object, Callable]]:
        """:meth:`select` as one update per figure, in reading order: ``(figure, update)``. A caller
        that sends each figure's changes as they are made (the explorer) lets the first figure reach
        the browser while the next ones are worked out."""
        return [
            (self.throughput, lambda: self._select_throughput(prediction, gpus)),
            (self.step_breakdown, lambda: self._select_step(prediction, gpus)),
            (self.memory, lambda: self._select_memory(prediction, gpus)),
            (self.comm, lambda: self._select_comm(prediction, gpus)),
        ]

    def _select_throughput(self, prediction: xr.Dataset, gpus: int) -> None:
        self.sources["throughput_selected"].data = plain_columns(cols.selected_columns(prediction, gpus))

    def _select_step(self, prediction: xr.Dataset, gpus: int) -> None:
        mixed = hybrid.is_hybrid(prediction)
        columns = (hybrid.hybrid_step_columns if mixed else cols.step_breakdown_columns)(prediction, gpus)
        self.sources["step_breakdown"].data = plain_columns(columns)
        for item in self._hybrid_items:
            if item.visible != mixed:
                item.visible = mixed

    def _select_memory(self, prediction: xr.Dataset, gpus: int) -> None:
        if hybrid.is_hybrid(prediction):
            self._select_hybrid_memory(prediction, gpus)
            return
        memory = cols.memory_columns(prediction, gpus)
        self.sources["memory"].data = plain_columns(memory)
        total, capacity = float(memory["total"][0]), float(memory["capacity"][0])
        self.capacity_span.location = capacity
        self.memory.x_range.end = max(total, capacity) * 1.08
        largest = cols.largest_batch(prediction, gpus)
        fits = "no activation memory known" if largest == cols.ANY_BATCH else f"batch <= {largest} fits"
        subtitle = self.subtitles["memory"]
        if total > capacity:
            subtitle.text = f"OUT OF MEMORY: {total:.3g} of {capacity:.3g} GiB; {fits}"
            subtitle.text_color = cols.VERMILION
            subtitle.text_font_style = "bold"
            self.memory.background_fill_color = _OOM_BACKGROUND
        else:
            subtitle.text = f"{total:.1f} of {capacity:.1f} GiB used; {fits}"
            subtitle.text_color = "black"
            subtitle.text_font_style = "normal"
            self.memory.background_fill_color = _OK_BACKGROUND

    def _select_hybrid_memory(self, prediction: xr.Dataset, gpus: int) -> None:
        """Each memory term of the hybrid model against the capacity (NaN: cannot run)."""
        memory = cols.memory_columns(prediction, gpus)
        self.sources["memory"].data = plain_columns(
            {k: np.nan_to_num(v) if k != "label" else v for k, v in memory.items()}
        )
        total, capacity = float(np.nan_to_num(memory["total"][0])), float(memory["capacity"][0])
        self.capacity_span.location = capacity
        self.memory.x_range.end = max(total, capacity) * 1.08
        subtitle = self.subtitles["memory"]
        over = total > capacity
        text = hybrid.hybrid_memory_text(prediction, gpus, short=True)
        subtitle.text = ("OUT OF MEMORY: " if over else "") + text
        subtitle.text_color = cols.VERMILION if over else "black"
        subtitle.text_font_style = "bold" if over else "normal"
        self.memory.background_fill_color = _OOM_BACKGROUND if over else _OK_BACKGROUND

    def _select_comm(self, prediction: xr.Dataset, gpus: int) -> None:
        mixed = hybrid.is_hybrid(prediction)
        rows = (*(hybrid.COMM_ROWS if mixed else ("allreduce", "compute")), *self.comm_extra_rows)
        if tuple(self.comm.y_range.factors) != rows:
            self.comm.y_range.factors = list(rows)
        title = "One step: time by kind" if mixed else "One step: compute and allreduces"
        if self.comm.title.text != title:
            self.comm.title.text = title
            self._bucket_item.visible = not mixed  # no gradient buckets in the hybrid model's view
        if mixed:
            columns = hybrid.hybrid_comm_columns(prediction, gpus)
            self.sources["comm_phases"].data = plain_columns({k: v for k, v in columns.items() if k != "mib"})
            self.sources["comm_buckets"].data = empty_columns(list(self.sources["comm_buckets"].data))
            mib = {phase: m for phase, m in zip(columns["phase"], columns["mib"], strict=True)}
            self.subtitles["comm"].text = (
                "cannot run at this GPU count"
                if not len(columns["phase"])
                else "MiB per GPU and step: "
                + ", ".join(
                    f"{k} {_mib(mib[f'{k} {w}'])}"
                    for k, w in (("tp", "exposed"), ("pp", "send/recv"), ("dp", "exposed"))
                )
            )
            return
        self.sources["comm_phases"].data = plain_columns(cols.phase_columns(prediction, gpus))
        buckets = cols.bucket_columns(prediction, gpus)
        self.sources["comm_buckets"].data = plain_columns(buckets)
        if gpus == 1:
            self.subtitles["comm"].text = "1 GPU: no gradient communication"
        else:
            total_ms = buckets["time"].sum()
            mib = buckets["mib"].sum()
            # busbw of all buckets together: the nccl-tests factor times bytes over time
            busbw = float(np.nansum(buckets["busbw"] * buckets["time"]) / total_ms) if total_ms else 0.0
            self.subtitles["comm"].text = (
                f"{len(buckets['bucket'])} allreduces, {mib:,.0f} MiB, {total_ms:,.3g} ms, "
                f"busbw {busbw:,.3g} GB/s"
            )
