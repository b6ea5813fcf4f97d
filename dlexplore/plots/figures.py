"""The explorer's four bokeh figures, built once and then fed new data.

:class:`ExplorerFigures` owns the figures and their named ``ColumnDataSource`` objects. A change of
configuration calls :meth:`ExplorerFigures.show`, which replaces each source's ``data`` and a few
model properties (titles, ranges), never the figures themselves: the browser keeps its canvases and
only receives new columns. The same object renders the static HTML report.

Source names (stable: browser tests and user code can find them with
``document.get_model_by_name``): ``throughput_predicted``, ``throughput_measured``,
``throughput_selected``, ``step_breakdown``, ``memory``, ``comm_buckets``, ``comm_phases``, and
``step_breakdown_measured`` (measured breakdowns from traces beside the predicted bars, see
:meth:`ExplorerFigures.show_measured_steps`).
"""

from __future__ import annotations

from collections.abc import Sequence

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
)
from bokeh.plotting import figure

from . import _columns as cols

__all__ = ["ExplorerFigures", "SOURCE_NAMES"]

SOURCE_NAMES = (
    "throughput_predicted",
    "throughput_measured",
    "throughput_selected",
    "step_breakdown",
    "memory",
    "comm_buckets",
    "comm_phases",
    "step_breakdown_measured",
)

#: The measured step stack beside the predicted one: (column, legend label, colour). Hatched bars.
MEASURED_STEP_PARTS = (
    ("compute_only", "compute", cols.BLUE),
    ("comm_overlapped", "compute + communication (overlapped)", cols.SKY),
    ("comm_exposed", "communication (exposed)", cols.VERMILION),
    ("data", "data loading", cols.ORANGE),
    ("memcpy", "measured: memcpy and memset", cols.GREEN),
    ("idle", "measured: idle", "#DDDDDD"),
)

_WIDTH, _HEIGHT = 560, 380
_OOM_BACKGROUND, _OK_BACKGROUND = "#fde0dc", "#ffffff"


def _legend_below(fig, legend: Legend, *, ncols: int) -> None:
    """Legends go under the plot so they never hide data points."""
    legend.ncols = ncols
    legend.label_text_font_size = "8pt"
    legend.glyph_height = legend.glyph_width = 14
    legend.padding = legend.margin = 4
    legend.border_line_alpha = 0
    if legend in fig.center:
        fig.center.remove(legend)
    fig.add_layout(legend, "below")


def _empty(columns: Sequence[str]) -> dict[str, list]:
    return {name: [] for name in columns}


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

    def __init__(self, gpu_counts: Sequence[int] = cols.GPU_COUNTS, *, width: int = _WIDTH,
                 height: int = _HEIGHT):
        self.gpu_counts = [int(g) for g in gpu_counts]
        self.sources = {name: ColumnDataSource(name=name) for name in SOURCE_NAMES}
        self.throughput = self._throughput_figure(width, height)
        self.step_breakdown = self._step_figure(width, height)
        self.memory = self._memory_figure(width, height)
        self.comm = self._comm_figure(width, height)
        self.layout = gridplot(
            [[self.throughput, self.step_breakdown], [self.memory, self.comm]],
            toolbar_location="right", merge_tools=False,
        )
        self.layout.name = "dlexplore_explorer"

    # -- building (once) ------------------------------------------------------------------------

    def _throughput_figure(self, width: int, height: int):
        predicted = self.sources["throughput_predicted"]
        predicted.data = _empty(["gpus", "throughput", "lower", "upper", "ideal", "efficiency",
                                 "step_time_ms", "fits", "color"])
        lo, hi = min(self.gpu_counts), max(self.gpu_counts)
        fig = figure(
            name="throughput_figure", title="Throughput vs GPUs", width=width, height=height,
            x_axis_type="log", y_axis_type="log", x_axis_label="GPUs",
            y_axis_label="throughput (samples/s)", x_range=Range1d(lo / 1.4, hi * 1.4),
            tools="pan,wheel_zoom,box_zoom,reset,save",
        )
        fig.xaxis.ticker = FixedTicker(ticks=self.gpu_counts)
        fig.xaxis.formatter = NumeralTickFormatter(format="0")
        fig.yaxis.formatter = NumeralTickFormatter(format="0,0")
        # the calibrated prediction interval, drawn under the line; hidden while there is none
        self.band = fig.varea("gpus", "lower", "upper", source=predicted, fill_color=cols.BLUE,
                              fill_alpha=0.15, legend_label="prediction interval", name="band",
                              visible=False)
        ideal = fig.line("gpus", "ideal", source=predicted, line_dash="dashed", color=cols.GREY,
                         line_width=1.5, legend_label="ideal (linear)")
        line = fig.line("gpus", "throughput", source=predicted, color=cols.BLUE, line_width=2.5,
                        legend_label="predicted")
        dots = fig.scatter("gpus", "throughput", source=predicted, color="color", size=7,
                           legend_label="predicted")
        measured = self.sources["throughput_measured"]
        measured.data = _empty(["gpus", "throughput", "label", "color", "source", "gpu", "network",
                                "batch_size", "algorithm", "predicted", "error"])
        marks = fig.scatter("gpus", "throughput", source=measured, marker="diamond", size=13,
                            fill_color="color", line_color="black", fill_alpha=0.85,
                            legend_field="label")
        selected = self.sources["throughput_selected"]
        selected.data = _empty(["gpus", "throughput", "efficiency", "step_time_ms"])
        ring = fig.scatter("gpus", "throughput", source=selected, size=22, fill_alpha=0,
                           line_color="black", line_width=2.5)
        fig.add_tools(
            HoverTool(renderers=[dots], tooltips=[
                ("GPUs", "@gpus{0}"), ("predicted", "@throughput{0,0} samples/s"),
                ("interval", "@lower{0,0} to @upper{0,0} samples/s"),
                ("ideal", "@ideal{0,0} samples/s"), ("efficiency", "@efficiency{0.0%}"),
                ("step time", "@step_time_ms{0,0.0} ms"), ("fits in memory", "@fits"),
            ]),
            HoverTool(renderers=[marks], tooltips=[
                ("measured", "@throughput{0,0.0} samples/s"), ("GPUs", "@gpus{0}"),
                ("setup", "@label"), ("GPU / network", "@gpu / @network"),
                ("batch per GPU", "@batch_size{0}"), ("algorithm", "@algorithm"),
                ("predicted (line)", "@predicted{0,0} samples/s"), ("error vs line", "@error{+0.0%}"),
                ("source", "@source"),
            ]),
            HoverTool(renderers=[ring], tooltips=[("selected", "@gpus{0} GPUs"),
                                                 ("throughput", "@throughput{0,0} samples/s")]),
        )
        del ideal, line
        self.band_item = next(item for item in fig.legend[0].items if self.band in item.renderers)
        self.band_item.visible = False
        _legend_below(fig, fig.legend[0], ncols=2)
        fig.legend.click_policy = "hide"
        return fig

    def _step_figure(self, width: int, height: int):
        source = self.sources["step_breakdown"]
        source.data = _empty(["label", "gpus", *(c for c, _, _ in cols.STEP_PARTS), "step_time",
                              "comm_total", "alpha", "outline"])
        fig = figure(
            name="step_breakdown_figure", title="Where the step time goes", width=width,
            height=height, x_range=FactorRange(*[str(g) for g in self.gpu_counts]),
            x_axis_label="GPUs", y_axis_label="time per step (ms)", tools="save,reset",
        )
        stack = [c for c, _, _ in cols.STEP_PARTS]
        bars = fig.vbar_stack(
            stack, x="label", source=source, width=0.8, color=[c for _, _, c in cols.STEP_PARTS],
            fill_alpha="alpha", line_color="outline", line_width=1.5,
        )
        self._step_legend = Legend(items=[(label, [bar]) for (_, label, _), bar in
                                          zip(cols.STEP_PARTS, bars, strict=True)])
        _legend_below(fig, self._step_legend, ncols=2)
        for bar, (column, label, _) in zip(bars, cols.STEP_PARTS, strict=True):
            fig.add_tools(HoverTool(renderers=[bar], tooltips=[
                ("GPUs", "@label"), (label, f"@{column}{{0,0.00}} ms"),
                ("step time", "@step_time{0,0.00} ms"), ("all communication", "@comm_total{0,0.00} ms"),
            ]))
        self._add_measured_steps(fig)
        fig.y_range.start = 0
        fig.xgrid.grid_line_color = None
        return fig

    def _add_measured_steps(self, fig) -> None:
        """Hatched bars for measured breakdowns, on factors of their own next to their GPU count;
        empty (and without legend entries) until :meth:`show_measured_steps`."""
        source = self.sources["step_breakdown_measured"]
        source.data = _empty(["label", "trace", "gpus", *(c for c, _, _ in MEASURED_STEP_PARTS),
                              "step_time", "comm_total", "ranks", "steps", "source"])
        bars = fig.vbar_stack(
            [c for c, _, _ in MEASURED_STEP_PARTS], x="label", source=source, width=0.8,
            color=[c for _, _, c in MEASURED_STEP_PARTS], line_color="black", line_width=1,
            hatch_pattern="/", hatch_color="white", hatch_alpha=0.6,
        )
        self._measured_bars = bars
        for bar, (column, label, _) in zip(bars, MEASURED_STEP_PARTS, strict=True):
            fig.add_tools(HoverTool(renderers=[bar], tooltips=[
                ("measured", "@trace (@ranks{0} ranks, @steps{0} rank-steps)"),
                (label.removeprefix("measured: "), f"@{column}{{0,0.00}} ms"),
                ("step time (mean)", "@step_time{0,0.00} ms"),
                ("all communication", "@comm_total{0,0.00} ms"),
                ("source", "@source"),
            ]))

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
        source.data = {k: np.asarray(v) for k, v in data.items()}
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
            legend.items = [*legend.items, *(
                LegendItem(label=label, renderers=[bar]) for (_, label, _), bar in
                zip(MEASURED_STEP_PARTS, self._measured_bars, strict=True) if label.startswith("measured")
            )]

    def _memory_figure(self, width: int, height: int):
        source = self.sources["memory"]
        source.data = _empty(["label", *(c for c, _, _, _ in cols.MEMORY_PARTS), "total", "capacity"])
        fig = figure(
            name="memory_figure", title="Memory per GPU", width=width, height=height,
            y_range=FactorRange("per GPU"), x_range=Range1d(0, 1), x_axis_label="GiB",
            tools="save",
        )
        bars = fig.hbar_stack(
            [c for c, _, _, _ in cols.MEMORY_PARTS], y="label", source=source, height=0.5,
            color=[c for _, _, _, c in cols.MEMORY_PARTS],
        )
        _legend_below(fig, Legend(items=[(label, [bar]) for (_, _, label, _), bar in
                                         zip(cols.MEMORY_PARTS, bars, strict=True)]), ncols=3)
        for bar, (column, _, label, _) in zip(bars, cols.MEMORY_PARTS, strict=True):
            fig.add_tools(HoverTool(renderers=[bar], tooltips=[
                (label, f"@{column}{{0,0.00}} GiB"), ("total", "@total{0,0.00} GiB"),
                ("capacity", "@capacity{0,0.00} GiB"),
            ]))
        self.capacity_span = Span(location=0, dimension="height", line_color="black", line_width=3,
                              line_dash="dashed", name="memory_capacity")
        fig.add_layout(self.capacity_span)
        fig.ygrid.grid_line_color = None
        return fig

    def _comm_figure(self, width: int, height: int):
        phases = self.sources["comm_phases"]
        phases.data = _empty(["phase", "row", "start", "end", "time", "color"])
        buckets = self.sources["comm_buckets"]
        buckets.data = _empty(["bucket", "row", "start", "end", "ready", "time", "mib", "algbw",
                               "busbw"])
        fig = figure(
            name="comm_figure", title="One step: compute and gradient allreduces", width=width,
            height=height, y_range=FactorRange("allreduce", "compute"),
            x_axis_label="time from the start of the step (ms)",
            tools="xpan,xwheel_zoom,reset,save",
        )
        compute = fig.hbar(y="row", left="start", right="end", height=0.6, source=phases,
                           fill_color="color", line_color="white", legend_field="phase")
        comm = fig.hbar(y="row", left="start", right="end", height=0.6, source=buckets,
                        fill_color=cols.VERMILION, line_color="white", legend_label="allreduce")
        fig.add_tools(
            HoverTool(renderers=[compute], tooltips=[("phase", "@phase"), ("time", "@time{0,0.00} ms"),
                                                     ("from", "@start{0,0.00} ms")]),
            HoverTool(renderers=[comm], tooltips=[
                ("bucket", "@bucket{0}"), ("size", "@mib{0,0.0} MiB"), ("time", "@time{0,0.000} ms"),
                ("ready at", "@ready{0,0.00} ms"), ("runs", "@start{0,0.00} to @end{0,0.00} ms"),
                ("algbw", "@algbw{0,0.00} GB/s"), ("busbw", "@busbw{0,0.00} GB/s"),
            ]),
        )
        _legend_below(fig, fig.legend[0], ncols=5)
        fig.ygrid.grid_line_color = None
        return fig

    # -- updating (every change) ----------------------------------------------------------------

    def show(self, prediction: xr.Dataset, gpus: int, measured: dict | None = None) -> None:
        """Draw ``prediction`` (over ``gpus`` counts, with ``buckets=True``) with ``gpus`` selected.

        ``measured`` is the column dict of :func:`dlexplore.plots.measured_columns` (or None to keep
        the current markers).
        """
        columns = cols.throughput_columns(prediction)
        self.sources["throughput_predicted"].data = columns
        banded = bool(np.isfinite(columns["lower"]).any())
        self.band.visible = self.band_item.visible = banded
        if banded and "band_level" in prediction.attrs:
            self.band_item.label = {"value": f"{float(prediction.attrs['band_level']):.0%} prediction "
                                             "interval (calibrated)"}
        if measured is not None:
            self.sources["throughput_measured"].data = measured
        self.select(prediction, gpus)

    def select(self, prediction: xr.Dataset, gpus: int) -> None:
        """Highlight ``gpus`` GPUs: the parts of the plots that depend on the GPU count alone."""
        self.sources["throughput_selected"].data = cols.selected_columns(prediction, gpus)
        self.sources["step_breakdown"].data = cols.step_breakdown_columns(prediction, gpus)
        memory = cols.memory_columns(prediction, gpus)
        self.sources["memory"].data = memory
        total, capacity = float(memory["total"][0]), float(memory["capacity"][0])
        self.capacity_span.location = capacity
        self.memory.x_range.end = max(total, capacity) * 1.08
        if total > capacity:
            self.memory.title.text = (
                f"OUT OF MEMORY: needs {total:.1f} of {capacity:.1f} GiB "
                f"(batch <= {cols.largest_batch(prediction, gpus)} fits)"
            )
            self.memory.title.text_color = cols.VERMILION
            self.memory.background_fill_color = _OOM_BACKGROUND
        else:
            self.memory.title.text = (
                f"Memory per GPU: {total:.1f} of {capacity:.1f} GiB "
                f"(batch <= {cols.largest_batch(prediction, gpus)} fits)"
            )
            self.memory.title.text_color = "black"
            self.memory.background_fill_color = _OK_BACKGROUND
        self.sources["comm_phases"].data = cols.phase_columns(prediction, gpus)
        buckets = cols.bucket_columns(prediction, gpus)
        self.sources["comm_buckets"].data = buckets
        if gpus == 1:
            self.comm.title.text = "One step on 1 GPU: no gradient communication"
        else:
            total_ms = buckets["time"].sum()
            mib = buckets["mib"].sum()
            # busbw of all buckets together: the nccl-tests factor times bytes over time
            busbw = float(np.nansum(buckets["busbw"] * buckets["time"]) / total_ms) if total_ms else 0.0
            self.comm.title.text = (
                f"{gpus} GPUs: {len(buckets['bucket'])} allreduces, {mib:,.0f} MiB in "
                f"{total_ms:,.1f} ms, busbw {busbw:,.2f} GB/s"
            )
