"""Bokeh figures of a trace's analyses: critical path, kernel launches, device time per kernel kind,
memory, stream queues, and the diff of two runs. Datasets and tables in (:mod:`dlexplore.traces`),
columns and figures out.

:class:`AnalysisFigures` builds the figures once, each on a named ``ColumnDataSource``
(:data:`ANALYSIS_SOURCE_NAMES`), in one ``Tabs`` layout; the ``show_*`` methods replace the
sources' data (times in ms, sizes in MiB), so a view can follow a rank or step selection without
rebuilding anything. The ``*_columns`` functions are pure: a table in, the columns a figure draws
out.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr
from bokeh.models import ColumnDataSource, Div, FactorRange, HoverTool, TabPanel, Tabs
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

__all__ = [
    "ANALYSIS_SOURCE_NAMES",
    "PATH_COLORS",
    "AnalysisFigures",
    "critical_path_columns",
    "diff_columns",
    "kernel_columns",
    "launch_columns",
    "memory_columns",
    "queue_columns",
]

ANALYSIS_SOURCE_NAMES = (
    "trace_critical_path",
    "trace_launches",
    "trace_kernels",
    "trace_memory",
    "trace_queue",
    "trace_diff",
)
#: Kernel kinds (dlexplore.traces.kernels), top to bottom in their bar chart, with their colours.
KERNEL_KIND_COLORS = {
    "gemm": "#1f77b4",
    "conv": "#aec7e8",
    "attention": "#17becf",
    "norm": "#ff7f0e",
    "softmax": "#ffbb78",
    "elementwise": "#bcbd22",
    "optimizer": "#2ca02c",
    "communication": "#d62728",
    "memcpy": "#9467bd",
    "memset": "#c5b0d5",
    "other": "#c7c7c7",
}
#: Colours of the critical path's parts (dlexplore.traces.critical_path.PATH_PARTS).
PATH_COLORS = {
    "compute": "#1f77b4",
    "communication": "#d62728",
    "memcpy": "#9467bd",
    "memset": "#c5b0d5",
    "cpu": "#ff7f0e",
    "runtime": "#bcbd22",
    "sync": "#8c564b",
    "data": "#2ca02c",
    "idle": "#c7c7c7",
}
_MIB = 2.0**20


def critical_path_columns(summary: xr.Dataset | None) -> dict[str, np.ndarray]:
    """:func:`dlexplore.traces.critical_path.critical_path_summary` as bars: part, ms, fraction."""
    if summary is None:
        return {
            "part": np.array([], dtype=object),
            "time_ms": np.array([]),
            "fraction": np.array([]),
            "color": np.array([], dtype=object),
        }
    parts = [str(p) for p in summary.part.values]
    return {
        "part": np.array(parts, dtype=object),
        "time_ms": summary.time.values * 1e3,
        "fraction": summary.fraction.values,
        "color": np.array([PATH_COLORS.get(p, "#7f7f7f") for p in parts], dtype=object),
    }


def launch_columns(
    stats: pd.DataFrame | None, *, ranks=None, max_points: int = 20_000
) -> dict[str, np.ndarray]:
    """:func:`dlexplore.traces.launches.launch_stats` as points: device time against launch delay
    (µs), short kernels marked; at most ``max_points`` (the longest-delayed kept first)."""
    names = ("name", "launch", "duration_us", "delay_us", "launch_us", "short", "color", "rank")
    if stats is None or not len(stats):
        return {n: np.array([], dtype=object if n in ("name", "launch", "color") else float) for n in names}
    table = stats if ranks is None else stats[stats["rank"].isin(list(ranks))]
    if len(table) > max_points:
        table = table.iloc[np.argsort(-table["launch_delay"].to_numpy(), kind="stable")[:max_points]]
    short = table["short"].to_numpy(dtype=bool)
    return {
        "name": table["name"].astype(str).to_numpy(object),
        "launch": table["launch"].astype(str).to_numpy(object),
        "duration_us": table["duration"].to_numpy() * 1e6,
        "delay_us": table["launch_delay"].to_numpy() * 1e6,
        "launch_us": table["launch_duration"].to_numpy() * 1e6,
        "short": short.astype(float),
        "color": np.where(short, "#d62728", "#1f77b4").astype(object),
        "rank": table["rank"].to_numpy(dtype=float),
    }


def kernel_columns(kinds: pd.DataFrame | None, *, rank: int | None = None) -> dict[str, np.ndarray]:
    """:func:`dlexplore.traces.kernels.kernel_breakdown` of one rank as bars: kind, ms, share of the
    rank's device time, kernels run, distinct kernels."""
    names = ("kind", "time_ms", "share", "count", "kernels", "color")
    mine = None if kinds is None or rank is None else kinds[kinds["rank"] == rank]
    if mine is None or not len(mine):
        return {n: np.array([], dtype=object if n in ("kind", "color") else float) for n in names}
    kind = mine["kind"].astype(str).to_numpy(object)
    return {
        "kind": kind,
        "time_ms": mine["time"].to_numpy() * 1e3,
        "share": mine["share"].to_numpy(),
        "count": mine["count"].to_numpy(dtype=float),
        "kernels": mine["kernels"].to_numpy(dtype=float),
        "color": np.array([KERNEL_KIND_COLORS.get(k, "#7f7f7f") for k in kind], dtype=object),
    }


def _lines(frame: pd.DataFrame, key: str, value: str, scale: float, origin: float) -> dict[str, list]:
    """One step line per ``key`` (device, stream): xs in ms from ``origin``, ys scaled."""
    xs, ys, labels = [], [], []
    for label, part in frame.groupby(key, observed=True, sort=True):
        t = (part["time"].to_numpy() - origin) * 1e3
        v = part[value].to_numpy(dtype=float) * scale
        xs.append(np.repeat(t, 2)[1:].tolist())
        ys.append(np.repeat(v, 2)[:-1].tolist())
        labels.append(str(label))
    colors = [Category10_10[i % 10] for i in range(len(labels))]
    return {"xs": xs, "ys": ys, "label": labels, "color": colors}


def memory_columns(timeline: pd.DataFrame | None, *, rank: int | None = None, origin: float = 0.0) -> dict:
    """:func:`dlexplore.traces.memory.memory_timeline` of one rank as step lines per device (MiB
    allocated against ms from ``origin``)."""
    if timeline is None or not len(timeline):
        return {"xs": [], "ys": [], "label": [], "color": []}
    mine = timeline if rank is None else timeline[timeline["rank"] == rank]
    return _lines(mine, "device", "allocated", 1 / _MIB, origin)


def queue_columns(queue: pd.DataFrame | None, *, rank: int | None = None, origin: float = 0.0) -> dict:
    """:func:`dlexplore.traces.launches.queue_length` of one rank as step lines per stream."""
    if queue is None or not len(queue):
        return {"xs": [], "ys": [], "label": [], "color": []}
    mine = queue if rank is None else queue[queue["rank"] == rank]
    return _lines(mine, "stream", "queue_length", 1.0, origin)


def diff_columns(diff: pd.DataFrame | None, *, top: int = 20) -> dict[str, np.ndarray]:
    """:func:`dlexplore.traces.diff.trace_diff`'s ``top`` largest time changes as bars (ms per rank
    and step; red slower, green faster)."""
    names = ("label", "delta_ms", "control_ms", "test_ms", "count_control", "count_test", "status", "color")
    if diff is None or not len(diff):
        return {n: np.array([], dtype=object if n in ("label", "status", "color") else float) for n in names}
    head = diff.head(top).iloc[::-1]
    labels = [f"{k}: {n[:48]}" for k, n in zip(head["kind"], head["name"], strict=True)]
    # identical names in the two kinds stay distinct factors
    delta = head["time_delta"].to_numpy() * 1e3
    return {
        "label": np.array(labels, dtype=object),
        "delta_ms": delta,
        "control_ms": head["time_control"].to_numpy() * 1e3,
        "test_ms": head["time_test"].to_numpy() * 1e3,
        "count_control": head["count_control"].to_numpy(),
        "count_test": head["count_test"].to_numpy(),
        "status": head["status"].astype(str).to_numpy(object),
        "color": np.where(delta > 0, "#d62728", "#2ca02c").astype(object),
    }


class AnalysisFigures:
    """The analyses' figures in one ``Tabs`` layout (:attr:`layout`), fed new columns by ``show_*``."""

    def __init__(self, *, width: int = 1000, height: int = 340, diff: bool = False):
        self.sources = {name: ColumnDataSource(name=name) for name in ANALYSIS_SOURCE_NAMES}
        self.width, self.height = width, height
        self.notes = Div(text="", name="trace_analyses_notes", width=width)
        self.path = self._path_figure()
        self.launches = self._launch_figure()
        self.kernels = self._kernel_figure()
        self.memory = self._line_figure(
            "trace_memory",
            "Memory allocated per device",
            "MiB allocated",
            "@label: @y{0,0.0} MiB at @x{0,0.000} ms",
        )
        self.queue = self._line_figure(
            "trace_queue",
            "Operations queued per stream (launched, not finished)",
            "operations",
            "@label: @y{0} queued at @x{0,0.000} ms",
        )
        panels = [
            TabPanel(child=self.path, title="Critical path"),
            TabPanel(child=self.launches, title="Kernel launches"),
            TabPanel(child=self.kernels, title="Kernels"),
            TabPanel(child=self.queue, title="Stream queues"),
            TabPanel(child=self.memory, title="Memory"),
        ]
        self.diff = self._diff_figure() if diff else None
        if self.diff is not None:
            panels.append(TabPanel(child=self.diff, title="Diff"))
        self.tabs = Tabs(tabs=panels, name="trace_analyses_tabs")
        self.layout = self.tabs

    def _bars(self, name: str, title: str, factors: list[str], category: str, x_label: str, tooltips):
        """A figure of horizontal bars (``time_ms`` per ``category``, coloured) on source ``name``,
        its categories fixed top to bottom in the order of ``factors``."""
        fig = figure(
            name=f"{name}_figure",
            title=title,
            width=self.width,
            height=self.height,
            y_range=FactorRange(*reversed(factors)),
            x_axis_label=x_label,
            tools="save,reset",
        )
        bars = fig.hbar(y=category, right="time_ms", height=0.7, color="color", source=self.sources[name])
        fig.add_tools(HoverTool(renderers=[bars], tooltips=tooltips))
        fig.x_range.start = 0
        return fig

    def _path_figure(self):
        self.sources["trace_critical_path"].data = critical_path_columns(None)
        return self._bars(
            "trace_critical_path",
            "Critical path",
            list(PATH_COLORS),
            "part",
            "time on the critical path (ms)",
            [("part", "@part"), ("time", "@time_ms{0,0.000} ms"), ("of the step", "@fraction{0.0%}")],
        )

    def _launch_figure(self):
        source = self.sources["trace_launches"]
        source.data = launch_columns(None)
        fig = figure(
            name="trace_launches_figure",
            title="Kernel launches: red = shorter than its launch call",
            width=self.width,
            height=self.height,
            x_axis_type="log",
            y_axis_type="log",
            x_axis_label="launch delay: launch call start to device start (µs)",
            y_axis_label="device time (µs)",
            tools="pan,wheel_zoom,box_zoom,reset,save",
        )
        dots = fig.scatter("delay_us", "duration_us", source=source, color="color", size=4, alpha=0.5)
        fig.add_tools(
            HoverTool(
                renderers=[dots],
                tooltips=[
                    ("kernel", "@name"),
                    ("launched by", "@launch (@launch_us{0,0.0} µs)"),
                    ("launch delay", "@delay_us{0,0.0} µs"),
                    ("device time", "@duration_us{0,0.0} µs"),
                    ("rank", "@rank{0}"),
                ],
            )
        )
        return fig

    def _kernel_figure(self):
        self.sources["trace_kernels"].data = kernel_columns(None)
        return self._bars(
            "trace_kernels",
            "Device time per kernel kind",
            list(KERNEL_KIND_COLORS),
            "kind",
            "device time over the trace (ms)",
            [
                ("kind", "@kind"),
                ("time", "@time_ms{0,0.000} ms (@share{0.0%} of the device time)"),
                ("kernels run", "@count{0,0} (@kernels{0} distinct)"),
            ],
        )

    def _line_figure(self, name: str, title: str, y_label: str, tooltip: str):
        source = self.sources[name]
        source.data = {"xs": [], "ys": [], "label": [], "color": []}
        fig = figure(
            name=f"{name}_figure",
            title=title,
            width=self.width,
            height=self.height,
            x_axis_label="time from the first event (ms)",
            y_axis_label=y_label,
            tools="xpan,xwheel_zoom,box_zoom,reset,save",
        )
        lines = fig.multi_line("xs", "ys", source=source, color="color", line_width=1.5, legend_field="label")
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "8pt"
        fig.add_tools(HoverTool(renderers=[lines], tooltips=tooltip.replace("@y", "$y").replace("@x", "$x")))
        return fig

    def _diff_figure(self):
        source = self.sources["trace_diff"]
        source.data = diff_columns(None)
        fig = figure(
            name="trace_diff_figure",
            title="Largest changes, test against control (per rank and step)",
            width=self.width,
            height=max(self.height, 420),
            y_range=FactorRange(),
            x_axis_label="time change per rank and step (ms)",
            tools="save,reset",
        )
        bars = fig.hbar(y="label", right="delta_ms", height=0.7, color="color", source=source)
        fig.add_tools(
            HoverTool(
                renderers=[bars],
                tooltips=[
                    ("", "@label"),
                    ("change", "@delta_ms{+0,0.000} ms (@status)"),
                    ("control", "@control_ms{0,0.000} ms, @count_control{0,0.0} events"),
                    ("test", "@test_ms{0,0.000} ms, @count_test{0,0.0} events"),
                ],
            )
        )
        fig.yaxis.major_label_text_font_size = "8pt"
        return fig

    # -- updating --------------------------------------------------------------------------------

    def show_path(self, data: Mapping, *, title: str = "") -> None:
        self.sources["trace_critical_path"].data = dict(data)
        if title:
            self.path.title.text = title

    def show_launches(self, data: Mapping, *, title: str = "") -> None:
        self.sources["trace_launches"].data = dict(data)
        if title:
            self.launches.title.text = title

    def show_kernels(self, data: Mapping, *, title: str = "") -> None:
        self.sources["trace_kernels"].data = dict(data)
        if title:
            self.kernels.title.text = title

    def show_memory(self, data: Mapping, *, title: str = "") -> None:
        self.sources["trace_memory"].data = dict(data)
        if title:
            self.memory.title.text = title

    def show_queue(self, data: Mapping, *, title: str = "") -> None:
        self.sources["trace_queue"].data = dict(data)
        if title:
            self.queue.title.text = title

    def show_diff(self, data: Mapping, *, title: str = "") -> None:
        if self.diff is None:
            return
        self.sources["trace_diff"].data = dict(data)
        self.diff.y_range.factors = [str(x) for x in data["label"]]
        if title:
            self.diff.title.text = title
