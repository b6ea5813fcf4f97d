"""The bokeh figures of a measured trace (:class:`TraceFigures`: the timeline, breakdown bars per rank
and the collective table, built once, their sources refilled), and the columns that fill the bars
and the table. The timeline's own columns come from :mod:`dlexplore.plots.timeline`.

Kept whole: one class, the trace's three figures built once, and the columns that fill them.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource,
    CustomJS,
    DataTable,
    Div,
    FactorRange,
    FixedTicker,
    HoverTool,
    Legend,
    LegendItem,
    NumberFormatter,
    Range1d,
    StringFormatter,
    TableColumn,
)
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from ..errors import DlexploreError
from ..traces.schema import CATEGORIES
from . import _columns as cols
from .figure_parts import legend_below
from .timeline_index import TimelineIndex, TimelineView, empty_timeline_columns, human_bytes

TRACE_SOURCE_NAMES = ("trace_timeline", "trace_breakdown", "trace_collectives")


LIGHT_GREY = "#DDDDDD"


#: Event category -> colour (Okabe-Ito where there are enough; see ``_columns``).
CATEGORY_COLORS = {
    "compute": cols.BLUE,
    "communication": cols.VERMILION,
    "memcpy": cols.GREEN,
    "memset": cols.YELLOW,
    "data": cols.ORANGE,
    "runtime": cols.PURPLE,
    "cpu": cols.SKY,
    "annotation": cols.GREY,
    "step": LIGHT_GREY,
    "other": "#000000",
}


#: The per-rank breakdown stack: (column, legend label, colour), as the explorer's step stack.
BREAKDOWN_PARTS = (
    ("compute_only", "compute", cols.BLUE),
    ("comm_overlapped", "communication overlapped by compute", cols.SKY),
    ("comm_exposed", "communication (exposed)", cols.VERMILION),
    ("memcpy", "memcpy and memset", cols.GREEN),
    ("data", "data loading", cols.ORANGE),
    ("idle", "idle", LIGHT_GREY),
)


def _mean_or_step(ds: xr.Dataset, name: str, step: int | None) -> np.ndarray:
    if name not in ds:
        return np.zeros(ds.sizes["rank"])
    da = ds[name]
    if step is not None:
        da = da.sel(step=step)
    elif "step" in da.dims:
        da = da.mean("step", skipna=True)
    return np.nan_to_num(da.values.astype(float), nan=0.0)


def _stack_parts(ds: xr.Dataset, step: int | None) -> dict[str, np.ndarray]:
    """The :data:`BREAKDOWN_PARTS` in ms from a breakdown dataset (mean per step, or one step)."""
    compute = _mean_or_step(ds, "time_compute", step)
    comm = _mean_or_step(ds, "time_comm", step)
    exposed = _mean_or_step(ds, "time_comm_exposed", step)
    overlapped = np.clip(comm - exposed, 0.0, compute)
    return {
        "compute_only": (compute - overlapped) * 1e3,
        "comm_overlapped": overlapped * 1e3,
        "comm_exposed": exposed * 1e3,
        "memcpy": (_mean_or_step(ds, "time_memcpy", step) + _mean_or_step(ds, "time_memset", step)) * 1e3,
        "data": _mean_or_step(ds, "time_data", step) * 1e3,
        "idle": _mean_or_step(ds, "time_idle", step) * 1e3,
        "step_time": _mean_or_step(ds, "step_time", step) * 1e3,
        "comm_total": comm * 1e3,
    }


def rank_breakdown_columns(
    ds: xr.Dataset | None,
    *,
    ranks: Iterable[int] | None = None,
    step: int | None = None,
) -> dict[str, np.ndarray]:
    """Breakdown bars per rank (ms): the mean per step over all steps, or step ``step``.

    ``ds`` is a breakdown on (rank, step) (:meth:`dlexplore.traces.Trace.breakdown`). The stack is
    the explorer's: ``compute_only`` = compute with no communication under it,
    ``comm_overlapped`` = communication hidden behind compute (time_comm - time_comm_exposed),
    ``comm_exposed``; then ``memcpy`` (with memset), ``data`` and ``idle``. Compute, overlapped
    and exposed communication and idle add up to the step time when memcpy and data loading run
    alone; when they run beside compute the stack is taller than ``step_time`` (in the hover).
    ``slower`` is the rank's step time over the median of the ranks shown, minus 1.
    """
    names = [
        "label",
        "rank",
        *(c for c, _, _ in BREAKDOWN_PARTS),
        "step_time",
        "comm_total",
        "slower",
        "steps",
        "events",
    ]
    if ds is None or "rank" not in ds.dims:
        return {n: np.array([], dtype=object if n == "label" else float) for n in names}
    if ranks is not None:
        ds = ds.sel(rank=[r for r in ds["rank"].values if r in set(int(x) for x in ranks)])
        if not ds.sizes["rank"]:
            return rank_breakdown_columns(None)
    if step is not None and step not in ds["step"].values:
        raise DlexploreError(f"the breakdown has no step {step}; steps: {ds['step'].values.tolist()}")
    parts = _stack_parts(ds, step)
    step_time = parts["step_time"]
    median = np.median(step_time) if step_time.size else np.nan
    counted = ds["step_time"].sel(step=step) if step is not None else ds["step_time"]
    steps = (
        np.isfinite(counted.values).astype(float)
        if step is not None
        else counted.count("step").values.astype(float)
    )
    events = ds["events"].sel(step=step) if step is not None else ds["events"].mean("step")
    with np.errstate(divide="ignore", invalid="ignore"):
        slower = step_time / median - 1.0 if median > 0 else np.zeros_like(step_time)
    return {
        "label": np.array([str(int(r)) for r in ds["rank"].values], dtype=object),
        "rank": ds["rank"].values.astype(float),
        **parts,
        "slower": slower,
        "steps": steps,
        "events": np.asarray(events.values, dtype=float),
    }


def measured_step_columns(ds: xr.Dataset, *, label: str, gpus: int | None = None) -> dict[str, np.ndarray]:
    """A measured breakdown as one bar for the explorer's step-time plot (ms, mean over ranks and
    steps). ``gpus`` defaults to the breakdown's number of ranks; the bar's x factor is
    ``"<gpus>: <label>"``."""
    if "rank" not in ds.dims or "step" not in ds.dims:
        raise DlexploreError("a measured breakdown needs dims (rank, step): use trace.breakdown()")
    gpus = int(gpus if gpus is not None else ds.attrs.get("world_size", ds.sizes["rank"]))
    parts = _flat_mean(ds)
    return {
        "label": np.array([f"{gpus}: {label}"], dtype=object),
        "trace": np.array([label], dtype=object),
        "gpus": np.array([float(gpus)]),
        **{k: np.array([v]) for k, v in parts.items()},
        "ranks": np.array([float(ds.sizes["rank"])]),
        "steps": np.array([float(ds["step_time"].count())]),
        "source": np.array([str(ds.attrs.get("source", ""))], dtype=object),
    }


def _flat_mean(ds: xr.Dataset) -> dict[str, float]:
    """Mean over ranks and steps (NaN-aware) of the stack parts, ms."""
    means = ds.mean(("rank", "step"), skipna=True)
    parts = _stack_parts(means.expand_dims(rank=[0]), None)
    return {k: float(v[0]) for k, v in parts.items()}


def collective_columns(table: pd.DataFrame | None) -> dict[str, np.ndarray]:
    """The collective table's columns for ``trace_collectives``: times in ms, bandwidths in GB/s.

    ``table`` is :meth:`dlexplore.traces.Trace.collectives` (times in s, algbw and busbw in GB/s).
    """
    names = (
        "collective",
        "bytes",
        "size",
        "ranks",
        "count",
        "time_ms",
        "time_min_ms",
        "time_max_ms",
        "algbw",
        "busbw",
        "skew_ms",
    )
    if table is None or not len(table):
        return {n: np.array([], dtype=object if n in ("collective", "size") else float) for n in names}

    def get(name):
        return table[name].to_numpy(float) if name in table else np.full(len(table), np.nan)

    nbytes = get("bytes")
    return {
        "collective": table["collective"].astype(str).to_numpy(object),
        "bytes": nbytes,
        "size": np.array([human_bytes(b) for b in nbytes], dtype=object),
        "ranks": get("ranks"),
        "count": get("count"),
        "time_ms": get("time") * 1e3,
        "time_min_ms": get("time_min") * 1e3,
        "time_max_ms": get("time_max") * 1e3,
        "algbw": get("algbw"),
        "busbw": get("busbw"),
        "skew_ms": get("skew") * 1e3,
    }


def _truncate(label: str, n: int = 34) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


class TraceFigures:
    """The trace's timeline, breakdown bars per rank and collective table, built once.

    :meth:`show_timeline`, :meth:`show_breakdown` and :meth:`show_collectives` replace the sources'
    data and a few model properties (titles, axis ticks, ranges); the figures stay.

    Parameters
    ----------
    index:
        The trace's :class:`TimelineIndex` (rows, categories and the time span).
    width:
        Width of the timeline, pixels; the breakdown and the table share it below.
    """

    def __init__(self, index: TimelineIndex, *, width: int = 1100, timeline_height: int | None = None):
        self.index = index
        self.sources = {name: ColumnDataSource(name=name) for name in TRACE_SOURCE_NAMES}
        self.width = width
        self.timeline = self._timeline_figure(width, timeline_height)
        # the table needs about 640 pixels for its ten columns; the bars take the rest
        table_width = min(660, width // 2 + 100)
        self.breakdown = self._breakdown_figure(width - table_width - 20, 380)
        self.collectives = self._collective_table(table_width, 330)
        self.collectives_title = Div(
            text="<b>Collectives</b>", name="trace_collectives_title", width=table_width
        )
        self.layout = column(
            self.timeline,
            row(self.breakdown, column(self.collectives_title, self.collectives)),
            name="dlexplore_trace",
        )

    # -- building --------------------------------------------------------------------------------

    def _timeline_figure(self, width: int, height: int | None):
        index = self.index
        lo, hi = index.span
        pad = 0.01 * (hi - lo) if hi > lo else 1.0
        n_rows = max(1, len(index.rows))
        height = height or int(np.clip(110 + 22 * n_rows, 280, 720))
        source = self.sources["trace_timeline"]
        source.data = empty_timeline_columns()
        fig = figure(
            name="trace_timeline_figure",
            title="Timeline",
            width=width,
            height=height,
            x_range=Range1d(
                lo - pad, hi + pad, bounds=(lo - pad, hi + pad), min_interval=1e-5, name="trace_timeline_x"
            ),
            y_range=Range1d(n_rows - 0.5, -0.5, name="trace_timeline_y"),
            x_axis_label="time from the first event (ms)",
            tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
            active_drag="xpan",
            active_scroll="xwheel_zoom",
            # The bars are decimated already; BokehJS's own level of detail would draw every tenth
            # of them in grey for half a second after each wheel turn.
            lod_threshold=None,
        )
        present = list(index.categories) or ["other"]
        cmap = factor_cmap(
            "category", palette=[CATEGORY_COLORS[c] for c in CATEGORIES], factors=list(CATEGORIES)
        )
        bars = fig.quad(
            left="left",
            right="right",
            top="top",
            bottom="bottom",
            source=source,
            fill_color=cmap,
            line_color=cmap,
            line_width=1,
            fill_alpha=0.9,
            name="trace_timeline_bars",
        )
        # A fixed legend, one swatch per category in the trace, from glyphs with no data.
        items = []
        for name in present:
            # one datum at NaN: drawn nowhere, but the legend has a value to paint its swatch with
            swatch = fig.quad(
                left=[np.nan],
                right=[np.nan],
                top=[np.nan],
                bottom=[np.nan],
                fill_color=CATEGORY_COLORS[name],
                line_color=CATEGORY_COLORS[name],
            )
            items.append(LegendItem(label=name, renderers=[swatch]))
        legend_below(fig, Legend(items=items), ncols=min(len(items), 10))
        # One set of tooltips for both views: an event is a bar busy all along with one event.
        fig.add_tools(
            HoverTool(
                renderers=[bars],
                tooltips=[
                    ("name", "@name"),
                    ("category", "@category"),
                    ("rank / stream", "@rank{0} / @stream"),
                    ("from", "@start_ms{0,0.000} ms to @right{0,0.000} ms"),
                    ("duration", "@duration_ms{0,0.000} ms busy (@busy{0%} of the bar)"),
                    ("events", "@count{0,0} (starting in the bar)"),
                    ("bytes", "@size"),
                    ("collective", "@collective"),
                    ("step", "@step"),
                ],
            )
        )
        fig.yaxis.major_label_text_font_size = "8pt"
        fig.ygrid.grid_line_color = None
        self._set_rows(fig, index.rows.tolist())
        return fig

    def _set_rows(self, fig, labels: Sequence[str]) -> None:
        n = max(1, len(labels))
        fig.yaxis.ticker = FixedTicker(ticks=list(range(len(labels))))
        fig.yaxis.major_label_overrides = {i: _truncate(label) for i, label in enumerate(labels)}
        fig.y_range.start = n - 0.5
        fig.y_range.end = -0.5

    def _breakdown_figure(self, width: int, height: int):
        source = self.sources["trace_breakdown"]
        source.data = rank_breakdown_columns(None)
        ranks = [str(int(r)) for r in self.index.ranks] or ["0"]
        fig = figure(
            name="trace_breakdown_figure",
            title="Where each rank's step time goes",
            width=width,
            height=height,
            x_range=FactorRange(*ranks),
            x_axis_label="rank",
            y_axis_label="time per step (ms)",
            tools="save,reset",
        )
        stack = [c for c, _, _ in BREAKDOWN_PARTS]
        bars = fig.vbar_stack(
            stack,
            x="label",
            source=source,
            width=0.8,
            color=[c for _, _, c in BREAKDOWN_PARTS],
            line_color="white",
        )
        marks = fig.scatter(
            "label", "step_time", source=source, marker="dash", size=26, line_width=3, color="black"
        )
        items = [(label, [bar]) for (_, label, _), bar in zip(BREAKDOWN_PARTS, bars, strict=True)]
        items.append(("step time", [marks]))
        legend_below(fig, Legend(items=items), ncols=2)
        for bar, (col, label, _) in zip(bars, BREAKDOWN_PARTS, strict=True):
            fig.add_tools(
                HoverTool(
                    renderers=[bar],
                    tooltips=[
                        ("rank", "@label"),
                        (label, f"@{col}{{0,0.000}} ms"),
                        ("step time", "@step_time{0,0.000} ms"),
                        ("vs median rank", "@slower{+0.0%}"),
                        ("all communication", "@comm_total{0,0.000} ms"),
                        ("steps", "@steps{0}"),
                        ("events per step", "@events{0,0}"),
                    ],
                )
            )
        fig.y_range.start = 0
        fig.xgrid.grid_line_color = None
        return fig

    def _collective_table(self, width: int, height: int) -> DataTable:
        source = self.sources["trace_collectives"]
        source.data = collective_columns(None)
        number = lambda fmt: NumberFormatter(format=fmt, text_align="right", nan_format="")  # noqa: E731
        columns = [
            TableColumn(field="collective", title="collective", formatter=StringFormatter(), width=85),
            TableColumn(field="bytes", title="bytes", formatter=number("0,0"), width=90),
            TableColumn(field="ranks", title="ranks", formatter=number("0"), width=40),
            TableColumn(field="count", title="ops", formatter=number("0,0"), width=45),
            TableColumn(field="time_ms", title="time ms", formatter=number("0,0.000"), width=62),
            TableColumn(field="time_min_ms", title="min ms", formatter=number("0,0.000"), width=58),
            TableColumn(field="time_max_ms", title="max ms", formatter=number("0,0.000"), width=58),
            TableColumn(field="algbw", title="algbw GB/s", formatter=number("0,0.000"), width=72),
            TableColumn(field="busbw", title="busbw GB/s", formatter=number("0,0.000"), width=72),
            TableColumn(field="skew_ms", title="skew ms", formatter=number("0,0.000"), width=60),
        ]
        table = DataTable(
            source=source,
            columns=columns,
            width=width,
            height=height,
            index_position=None,
            name="trace_collectives_table",
            sortable=True,
            reorderable=False,
        )
        # BokehJS 3.9.1 and 3.9.2 redraw a DataTable only when its view's indices change, so new
        # data with as many rows as before would not show (bokeh/bokeh#15328): tell the table.
        source.js_on_change("data", CustomJS(args=dict(table=table), code="table.view.change.emit()"))
        return table

    # -- updating --------------------------------------------------------------------------------

    def show_timeline(self, data: Mapping[str, np.ndarray], view: TimelineView) -> None:
        """Draw :func:`timeline_columns` output; rows and the title follow the view."""
        self.sources["trace_timeline"].data = dict(data)
        if list(self.timeline.yaxis.major_label_overrides.values()) != [_truncate(r) for r in view.rows]:
            self._set_rows(self.timeline, view.rows)
        self.timeline.title.text = f"Timeline: {view.text}"

    def show_breakdown(
        self, data: Mapping[str, np.ndarray], *, step: int | None = None, steps: int | None = None
    ) -> None:
        """Draw :func:`rank_breakdown_columns` output (``step``: the one step shown, else the mean)."""
        self.sources["trace_breakdown"].data = dict(data)
        labels = [str(x) for x in data["label"]]
        if labels and list(self.breakdown.x_range.factors) != labels:
            self.breakdown.x_range.factors = labels
        self.breakdown.title.text = (
            f"Step {step} per rank"
            if step is not None
            else f"Mean per step per rank ({steps} steps)"
            if steps
            else "Where each rank's step time goes"
        )

    def show_collectives(self, data: Mapping[str, np.ndarray], *, note: str = "") -> None:
        """Fill the collective table with :func:`collective_columns` output."""
        self.sources["trace_collectives"].data = dict(data)
        n = len(data["collective"])
        heading = f"<b>Collectives</b>: {n} kinds and sizes" if n else "<b>Collectives</b>: none in the trace"
        self.collectives_title.text = (
            heading
            + (f" ({html.escape(note)})" if note else "")
            + "<br><small>time: mean per operation of its duration over the ranks (min, max: fastest and "
            "slowest operation); skew: spread of its start times across ranks, clocks aligned on "
            "collective ends; algbw = bytes / time; busbw = algbw x the nccl-tests factor.</small>"
        )


def trace_summary(trace: Any, index: TimelineIndex, breakdown: xr.Dataset | None) -> list[str]:
    """Facts about a trace as short HTML phrases: source, ranks, events, steps, span, mean step
    time and straggler ranks (from ``breakdown``)."""
    lo, hi = index.span
    world = getattr(trace, "world_size", None) or len(index.ranks)
    source = getattr(trace, "source", index.source)
    parts = [
        f"<b>{html.escape(str(source))}</b>",
        f"{html.escape(str(getattr(trace, 'format', '')))} trace, {len(index.ranks)} of {world} ranks, "
        f"{index.n_events:,} events on {len(index.rows)} threads and streams, {len(index.steps)} steps, "
        f"{hi - lo:,.1f} ms",
    ]
    if breakdown is not None and "step_time" in breakdown and breakdown["step_time"].count() > 0:
        parts.append(f"mean step time {float(breakdown['step_time'].mean(skipna=True)) * 1e3:,.2f} ms")
        if breakdown.sizes.get("rank", 0) > 1:
            from ..traces.breakdown import stragglers

            table = stragglers(breakdown)
            slow = table[table["straggler"]]
            if not slow.empty:
                ranks = ", ".join(
                    f"rank {int(r)} ({x - 1:+.0%})" for r, x in zip(slow["rank"], slow["ratio"], strict=True)
                )
                parts.append(
                    f"<span style='color:{cols.VERMILION}'>straggler: {ranks} in "
                    f"{html.escape(str(table.attrs.get('metric', '')))} against the other "
                    "ranks' median</span>"
                )
    return parts
