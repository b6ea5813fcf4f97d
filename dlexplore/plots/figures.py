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
    FactorRange,
    FixedTicker,
    HoverTool,
    Legend,
    LegendItem,
    NumeralTickFormatter,
    Range1d,
    Span,
    Title,
)
from bokeh.plotting import figure

from . import _columns as cols
from . import hybrid

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

#: The measured step stack beside the predicted one: (column, legend label, colour). Hatched bars.
MEASURED_STEP_PARTS = (
    ("compute_only", "compute", cols.BLUE),
    ("comm_overlapped", "compute (allreduce hidden)", cols.SKY),
    ("comm_exposed", "allreduce (exposed)", cols.VERMILION),
    ("data", "data loading", cols.ORANGE),
    ("memcpy", "measured: memcpy", cols.GREEN),
    ("idle", "measured: idle", "#DDDDDD"),
)

_HEIGHT = 340
#: The narrowest a figure gets: its legend, titles and toolbar fit in this many pixels.
MIN_WIDTH = 340
_OOM_BACKGROUND, _OK_BACKGROUND = "#fde0dc", "#ffffff"


def _legend_below(fig, legend: Legend, *, ncols: int) -> None:
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


def _empty(columns: Sequence[str]) -> dict[str, list]:
    return {name: [] for name in columns}


def _plain(columns: dict) -> dict:
    """Columns as lists: BokehJS gets them inside the patch's JSON instead of one binary buffer
    (two more comm messages) per array; the explorer's columns hold at most a few hundred values."""
    return {
        name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in columns.items()
    }


def _mib(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _subtitle(fig, name: str) -> Title:
    """A second title line under the figure's title, for the details that change with the data."""
    title = Title(text="", text_font_size="11px", text_font_style="normal", name=name)
    fig.add_layout(title, "above")
    return title


def _figure(**kwargs):
    fig = figure(**kwargs)
    fig.toolbar.logo = None
    fig.title.text_font_size = "13px"
    return fig


class ExplorerFigures:
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

    # -- building (once) ------------------------------------------------------------------------

    def _throughput_figure(self, size: dict):
        predicted = self.sources["throughput_predicted"]
        predicted.data = _empty(
            ["gpus", "throughput", "lower", "upper", "ideal", "efficiency", "step_time_ms", "fits", "color"]
        )
        lo, hi = min(self.gpu_counts), max(self.gpu_counts)
        fig = _figure(
            name="throughput_figure",
            title="Throughput vs GPUs",
            **size,
            x_axis_type="log",
            y_axis_type="log",
            x_axis_label="GPUs",
            y_axis_label="throughput (samples/s)",
            x_range=Range1d(lo / 1.4, hi * 1.4),
            tools="pan,wheel_zoom,box_zoom,reset,save",
        )
        self.subtitles["throughput"] = _subtitle(fig, "throughput_subtitle")
        fig.xaxis.ticker = FixedTicker(ticks=self.gpu_counts)
        fig.xaxis.formatter = NumeralTickFormatter(format="0")
        fig.yaxis.formatter = NumeralTickFormatter(format="0,0")
        # the calibrated prediction's band, under the line; hidden while there is none (show_band)
        band = self.sources["throughput_band"]
        band.data = _empty(["gpus", "lower", "upper"])
        self.band = fig.varea(
            "gpus",
            "lower",
            "upper",
            source=band,
            fill_color=cols.BLUE,
            fill_alpha=0.18,
            legend_label="calibrated band",
            name="band",
            visible=False,
        )
        fig.line(
            "gpus",
            "ideal",
            source=predicted,
            line_dash="dashed",
            color=cols.GREY,
            line_width=1.5,
            legend_label="ideal (linear)",
        )
        fig.line(
            "gpus", "throughput", source=predicted, color=cols.BLUE, line_width=2.5, legend_label="predicted"
        )
        dots = fig.scatter(
            "gpus", "throughput", source=predicted, color="color", size=7, legend_label="predicted"
        )
        measured = self.sources["throughput_measured"]
        measured.data = _empty(
            [
                "gpus",
                "throughput",
                "label",
                "group",
                "color",
                "source",
                "gpu",
                "network",
                "batch_size",
                "algorithm",
                "predicted",
                "error",
            ]
        )
        marks = fig.scatter(
            "gpus",
            "throughput",
            source=measured,
            marker="diamond",
            size=13,
            fill_color="color",
            line_color="black",
            fill_alpha=0.85,
            legend_field="group",
        )
        selected = self.sources["throughput_selected"]
        selected.data = _empty(["gpus", "throughput", "efficiency", "step_time_ms"])
        ring = fig.scatter(
            "gpus", "throughput", source=selected, size=22, fill_alpha=0, line_color="black", line_width=2.5
        )
        fig.add_tools(
            HoverTool(
                renderers=[dots],
                tooltips=[
                    ("GPUs", "@gpus{0}"),
                    ("predicted", "@throughput{0,0} samples/s"),
                    ("interval", "@lower{0,0} to @upper{0,0} samples/s"),
                    ("ideal", "@ideal{0,0} samples/s"),
                    ("efficiency", "@efficiency{0.0%}"),
                    ("step time", "@step_time_ms{0,0.0} ms"),
                    ("fits in memory", "@fits"),
                ],
            ),
            HoverTool(
                renderers=[marks],
                tooltips=[
                    ("measured", "@throughput{0,0.0} samples/s"),
                    ("GPUs", "@gpus{0}"),
                    ("setup", "@label"),
                    ("GPU / network", "@gpu / @network"),
                    ("batch per GPU", "@batch_size{0}"),
                    ("algorithm", "@algorithm"),
                    ("predicted (line)", "@predicted{0,0} samples/s"),
                    ("error vs line", "@error{+0.0%}"),
                    ("source", "@source"),
                ],
            ),
            HoverTool(
                renderers=[ring],
                tooltips=[("selected", "@gpus{0} GPUs"), ("throughput", "@throughput{0,0} samples/s")],
            ),
        )
        _legend_below(fig, fig.legend[0], ncols=3)
        fig.legend.click_policy = "hide"
        self.band_item = next(item for item in fig.legend[0].items if self.band in item.renderers)
        self.band_item.visible = False  # shown with a band (show_band)
        return fig

    def _step_figure(self, size: dict):
        source = self.sources["step_breakdown"]
        parts = (*cols.STEP_PARTS, *hybrid.HYBRID_STEP_PARTS)
        source.data = _empty(
            [
                "label",
                "gpus",
                *(c for c, _, _ in parts),
                "step_time",
                "comm_total",
                "alpha",
                "outline",
            ]
        )
        fig = _figure(
            name="step_breakdown_figure",
            title="Where the step time goes",
            **size,
            x_range=FactorRange(*[str(g) for g in self.gpu_counts]),
            x_axis_label="GPUs",
            y_axis_label="time per step (ms)",
            tools="save,reset",
        )
        stack = [c for c, _, _ in parts]
        bars = fig.vbar_stack(
            stack,
            x="label",
            source=source,
            width=0.8,
            color=[c for _, _, c in parts],
            fill_alpha="alpha",
            line_color="outline",
            line_width=1.5,
        )
        self._step_legend = Legend(
            items=[
                LegendItem(label=label, renderers=[bar])
                for (_, label, _), bar in zip(parts, bars, strict=True)
            ]
        )
        # the hybrid model's parts are in the legend only while it draws (show_hybrid)
        self._hybrid_items = self._step_legend.items[len(cols.STEP_PARTS) :]
        for item in self._hybrid_items:
            item.visible = False
        _legend_below(fig, self._step_legend, ncols=2)
        for bar, (column, label, _) in zip(bars, parts, strict=True):
            fig.add_tools(
                HoverTool(
                    renderers=[bar],
                    tooltips=[
                        ("GPUs", "@label"),
                        (label, f"@{column}{{0,0.00}} ms"),
                        ("step time", "@step_time{0,0.00} ms"),
                        ("all communication", "@comm_total{0,0.00} ms"),
                    ],
                )
            )
        self._add_measured_steps(fig)
        fig.y_range.start = 0
        fig.xgrid.grid_line_color = None
        return fig

    def _add_measured_steps(self, fig) -> None:
        """Hatched bars for measured breakdowns, on factors of their own next to their GPU count;
        empty (and without legend entries) until :meth:`show_measured_steps`."""
        source = self.sources["step_breakdown_measured"]
        source.data = _empty(
            [
                "label",
                "trace",
                "gpus",
                *(c for c, _, _ in MEASURED_STEP_PARTS),
                "step_time",
                "comm_total",
                "ranks",
                "steps",
                "source",
            ]
        )
        bars = fig.vbar_stack(
            [c for c, _, _ in MEASURED_STEP_PARTS],
            x="label",
            source=source,
            width=0.8,
            color=[c for _, _, c in MEASURED_STEP_PARTS],
            line_color="black",
            line_width=1,
            hatch_pattern="/",
            hatch_color="white",
            hatch_alpha=0.6,
        )
        self._measured_bars = bars
        for bar, (column, label, _) in zip(bars, MEASURED_STEP_PARTS, strict=True):
            fig.add_tools(
                HoverTool(
                    renderers=[bar],
                    tooltips=[
                        ("measured", "@trace (@ranks{0} ranks, @steps{0} rank-steps)"),
                        (label.removeprefix("measured: "), f"@{column}{{0,0.00}} ms"),
                        ("step time (mean)", "@step_time{0,0.00} ms"),
                        ("all communication", "@comm_total{0,0.00} ms"),
                        ("source", "@source"),
                    ],
                )
            )

    def show_measured_steps(self, data: dict | None) -> None:
        """Show measured breakdowns (columns of :func:`dlexplore.plots.timeline.measured_step_columns`,
        concatenated; None or empty clears them): each bar goes on a factor of its own, right after
        the predicted bar of the largest GPU count not above its own."""
        source = self.sources["step_breakdown_measured"]
        fig = self.step_breakdown
        if not data or not len(data["label"]):
            source.data = _empty(list(source.data))
            fig.x_range.factors = [str(g) for g in self.gpu_counts]
            fig.xaxis.major_label_orientation = "horizontal"
            return
        source.data = _plain({k: np.asarray(v) for k, v in data.items()})
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

    def _memory_figure(self, size: dict):
        source = self.sources["memory"]
        source.data = _empty(["label", *(c for c, _, _, _ in cols.MEMORY_PARTS), "total", "capacity"])
        fig = _figure(
            name="memory_figure",
            title="Memory per GPU",
            **size,
            y_range=FactorRange("per GPU"),
            x_range=Range1d(0, 1),
            x_axis_label="GiB",
            tools="save",
        )
        self.subtitles["memory"] = _subtitle(fig, "memory_subtitle")
        bars = fig.hbar_stack(
            [c for c, _, _, _ in cols.MEMORY_PARTS],
            y="label",
            source=source,
            height=0.5,
            color=[c for _, _, _, c in cols.MEMORY_PARTS],
        )
        _legend_below(
            fig,
            Legend(
                items=[(label, [bar]) for (_, _, label, _), bar in zip(cols.MEMORY_PARTS, bars, strict=True)]
            ),
            ncols=3,
        )
        for bar, (column, _, label, _) in zip(bars, cols.MEMORY_PARTS, strict=True):
            fig.add_tools(
                HoverTool(
                    renderers=[bar],
                    tooltips=[
                        (label, f"@{column}{{0,0.00}} GiB"),
                        ("total", "@total{0,0.00} GiB"),
                        ("capacity", "@capacity{0,0.00} GiB"),
                    ],
                )
            )
        self.capacity_span = Span(
            location=0,
            dimension="height",
            line_color="black",
            line_width=3,
            line_dash="dashed",
            name="memory_capacity",
        )
        fig.add_layout(self.capacity_span)
        fig.ygrid.grid_line_color = None
        return fig

    def _comm_figure(self, size: dict):
        phases = self.sources["comm_phases"]
        phases.data = _empty(["phase", "row", "start", "end", "time", "color"])
        buckets = self.sources["comm_buckets"]
        buckets.data = _empty(["bucket", "row", "start", "end", "ready", "time", "mib", "algbw", "busbw"])
        fig = _figure(
            name="comm_figure",
            title="One step: compute and allreduces",
            **size,
            y_range=FactorRange("allreduce", "compute"),
            x_axis_label="time from the start of the step (ms)",
            tools="xpan,xwheel_zoom,reset,save",
        )
        compute = fig.hbar(
            y="row",
            left="start",
            right="end",
            height=0.6,
            source=phases,
            fill_color="color",
            line_color="white",
            legend_field="phase",
        )
        comm = fig.hbar(
            y="row",
            left="start",
            right="end",
            height=0.6,
            source=buckets,
            fill_color=cols.VERMILION,
            line_color="white",
            legend_label="allreduce",
        )
        fig.add_tools(
            HoverTool(
                renderers=[compute],
                tooltips=[("phase", "@phase"), ("time", "@time{0,0.00} ms"), ("from", "@start{0,0.00} ms")],
            ),
            HoverTool(
                renderers=[comm],
                tooltips=[
                    ("bucket", "@bucket{0}"),
                    ("size", "@mib{0,0.0} MiB"),
                    ("time", "@time{0,0.000} ms"),
                    ("ready at", "@ready{0,0.00} ms"),
                    ("runs", "@start{0,0.00} to @end{0,0.00} ms"),
                    ("algbw", "@algbw{0,0.00} GB/s"),
                    ("busbw", "@busbw{0,0.00} GB/s"),
                ],
            ),
        )
        self.subtitles["comm"] = _subtitle(fig, "comm_subtitle")
        self._bucket_item = next(item for item in fig.legend[0].items if comm in item.renderers)
        _legend_below(fig, fig.legend[0], ncols=3)
        fig.ygrid.grid_line_color = None
        return fig

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
        self.sources["throughput_predicted"].data = _plain(columns)
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
        self.sources["throughput_measured"].data = _plain(measured)
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
                self.sources["throughput_band"].data = _empty(["gpus", "lower", "upper"])
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
        self.sources["throughput_selected"].data = _plain(cols.selected_columns(prediction, gpus))

    def _select_step(self, prediction: xr.Dataset, gpus: int) -> None:
        mixed = hybrid.is_hybrid(prediction)
        columns = (hybrid.hybrid_step_columns if mixed else cols.step_breakdown_columns)(prediction, gpus)
        self.sources["step_breakdown"].data = _plain(columns)
        for item in self._hybrid_items:
            if item.visible != mixed:
                item.visible = mixed

    def _select_memory(self, prediction: xr.Dataset, gpus: int) -> None:
        if hybrid.is_hybrid(prediction):
            self._select_hybrid_memory(prediction, gpus)
            return
        memory = cols.memory_columns(prediction, gpus)
        self.sources["memory"].data = _plain(memory)
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
        self.sources["memory"].data = _plain(
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
        if hybrid.is_hybrid(prediction):
            columns = hybrid.hybrid_comm_columns(prediction, gpus)
            self.sources["comm_phases"].data = _plain({k: v for k, v in columns.items() if k != "mib"})
            self.sources["comm_buckets"].data = _empty(list(self.sources["comm_buckets"].data))
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
        self.sources["comm_phases"].data = _plain(cols.phase_columns(prediction, gpus))
        buckets = cols.bucket_columns(prediction, gpus)
        self.sources["comm_buckets"].data = _plain(buckets)
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
