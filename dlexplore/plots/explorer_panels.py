"""How the explorer's four figures are built (once): throughput against GPUs, where the step time
goes (with measured breakdowns beside the predicted bars), memory against capacity, and one step's
gradient buckets. :class:`Panels` is the building half of :class:`dlexplore.plots.ExplorerFigures`;
the other half feeds the figures new data.
"""

from __future__ import annotations

from bokeh.models import (
    FactorRange,
    FixedTicker,
    HoverTool,
    Legend,
    LegendItem,
    NumeralTickFormatter,
    Range1d,
    Span,
)

from . import _columns as cols
from . import hybrid
from .figure_parts import empty_columns, legend_below, new_figure, subtitle

MEASURED_STEP_PARTS = (
    ("compute_only", "compute", cols.BLUE),
    ("comm_overlapped", "compute (allreduce hidden)", cols.SKY),
    ("comm_exposed", "allreduce (exposed)", cols.VERMILION),
    ("data", "data loading", cols.ORANGE),
    ("memcpy", "measured: memcpy", cols.GREEN),
    ("idle", "measured: idle", "#DDDDDD"),
)


def _throughput_hovers(dots: object, marks: object, ring: object) -> list[HoverTool]:
    """The throughput figure's tooltips: the predicted points, the measured ones, the selection."""
    return [
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
    ]


class Panels:
    """The figure builders of :class:`~dlexplore.plots.figures.ExplorerFigures` (which sets
    ``gpu_counts``, ``sources`` and ``subtitles`` before calling them)."""

    def _throughput_figure(self, size: dict):
        predicted = self.sources["throughput_predicted"]
        predicted.data = empty_columns(
            ["gpus", "throughput", "lower", "upper", "ideal", "efficiency", "step_time_ms", "fits", "color"]
        )
        lo, hi = min(self.gpu_counts), max(self.gpu_counts)
        fig = new_figure(
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
        self.subtitles["throughput"] = subtitle(fig, "throughput_subtitle")
        fig.xaxis.ticker = FixedTicker(ticks=self.gpu_counts)
        fig.xaxis.formatter = NumeralTickFormatter(format="0")
        fig.yaxis.formatter = NumeralTickFormatter(format="0,0")
        # the calibrated prediction's band, under the line; hidden while there is none (show_band)
        band = self.sources["throughput_band"]
        band.data = empty_columns(["gpus", "lower", "upper"])
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
        measured.data = empty_columns(cols.MEASURED_COLUMNS)
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
        selected.data = empty_columns(["gpus", "throughput", "efficiency", "step_time_ms"])
        ring = fig.scatter(
            "gpus", "throughput", source=selected, size=22, fill_alpha=0, line_color="black", line_width=2.5
        )
        fig.add_tools(*_throughput_hovers(dots, marks, ring))
        legend_below(fig, fig.legend[0], ncols=3)
        fig.legend.click_policy = "hide"
        self.band_item = next(item for item in fig.legend[0].items if self.band in item.renderers)
        self.band_item.visible = False  # shown with a band (show_band)
        return fig

    def _step_figure(self, size: dict):
        source = self.sources["step_breakdown"]
        parts = (*cols.STEP_PARTS, *hybrid.HYBRID_STEP_PARTS)
        source.data = empty_columns(
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
        fig = new_figure(
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
        legend_below(fig, self._step_legend, ncols=2)
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
        source.data = empty_columns(
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

    def _memory_figure(self, size: dict):
        source = self.sources["memory"]
        source.data = empty_columns(["label", *(c for c, _, _, _ in cols.MEMORY_PARTS), "total", "capacity"])
        fig = new_figure(
            name="memory_figure",
            title="Memory per GPU",
            **size,
            y_range=FactorRange("per GPU"),
            x_range=Range1d(0, 1),
            x_axis_label="GiB",
            tools="save",
        )
        self.subtitles["memory"] = subtitle(fig, "memory_subtitle")
        bars = fig.hbar_stack(
            [c for c, _, _, _ in cols.MEMORY_PARTS],
            y="label",
            source=source,
            height=0.5,
            color=[c for _, _, _, c in cols.MEMORY_PARTS],
        )
        legend_below(
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
        phases.data = empty_columns(["phase", "row", "start", "end", "time", "color"])
        buckets = self.sources["comm_buckets"]
        buckets.data = empty_columns(
            ["bucket", "row", "start", "end", "ready", "time", "mib", "algbw", "busbw"]
        )
        fig = new_figure(
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
        self.subtitles["comm"] = subtitle(fig, "comm_subtitle")
        self._bucket_item = next(item for item in fig.legend[0].items if comm in item.renderers)
        legend_below(fig, fig.legend[0], ncols=3)
        fig.ygrid.grid_line_color = None
        return fig


#: The measured step stack beside the predicted one: (column, legend label, colour). Hatched bars.
