"""TraceView: a measured trace in Jupyter or Voila, its timeline, breakdown per rank and collectives.

    from dlexplore.widgets import TraceView
    TraceView(dlexplore.load_trace("runs/step-traces/"))    # or TraceView("runs/step-traces/")

The figures (:class:`dlexplore.plots.timeline.TraceFigures`) are built once; every change replaces
``ColumnDataSource.data``, which ``jupyter_bokeh.BokehModel`` sends to the page as a document patch
(this works in Voila, where ``push_notebook`` does not).

Zooming or panning the timeline in the page changes its x range; the range reaches the kernel, and
the window is redrawn from the trace's :class:`~dlexplore.plots.timeline.TimelineIndex`: each event
when the window holds at most ``max_events`` of them, per-bin busy time otherwise. Range changes that
come in a burst (a wheel turn sends many, each in two parts: start and end) are drawn at most once per
``throttle`` seconds, with the range as it is then, so the kernel never falls behind the wheel.

Kept whole: one widget: its controls, the views they drive and the hot path of a zoom, which share
the figures' sources.
"""

from __future__ import annotations

import asyncio
import html
import os
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from typing import Any

import ipywidgets as w
import pandas as pd
import xarray as xr
from jupyter_bokeh import BokehModel

from ..errors import DlexploreError
from ..plots.analyses import (
    AnalysisFigures,
    critical_path_columns,
    diff_columns,
    kernel_columns,
    launch_columns,
    memory_columns,
    queue_columns,
)
from ..plots.timeline import (
    CATEGORY_COLORS,
    TimelineIndex,
    TimelineView,
    TraceFigures,
    collective_columns,
    default_bins,
    rank_breakdown_columns,
    timeline_columns,
    trace_summary,
)
from ..traces import Trace, load_trace
from ..traces.launches import queue_length
from .explorer import load_bokehjs

__all__ = ["TraceView"]

_ALL = "all"


class TraceView:
    """Interactive view of a measured trace: per-rank timeline, breakdown bars, collective table.

    Parameters
    ----------
    trace:
        A :class:`dlexplore.traces.Trace`, or what :func:`dlexplore.load_trace` reads (a file, a
        folder of per-rank files, a glob, a list).
    breakdown:
        The per-rank, per-step breakdown to show (default ``trace.breakdown()``).
    collectives:
        The collective table to show (default ``trace.collectives()``, and per step on step
        selection).
    max_events:
        Events drawn one by one at most; a window with more is drawn as binned busy time.
    width:
        Width of the timeline in pixels (the breakdown and the table share it below).
    offsets:
        Clock offset per rank (s) to subtract before drawing (e.g.
        :func:`dlexplore.traces.collectives.clock_offsets`); default none: each rank's own clock.
    throttle:
        Seconds between redraws while the timeline is being zoomed or panned in the page.
    compare:
        A second run (a :class:`~dlexplore.traces.Trace` or what :func:`dlexplore.load_trace`
        reads) to diff this one against (this trace is the control): a "Diff" tab shows the
        operators and kernels whose time changed most (:func:`dlexplore.traces.diff.trace_diff`).

    Below the timeline, tabs show the analyses (:mod:`dlexplore.plots.analyses`): the critical path of
    the step shown (the middle step but the last when all are), kernel launches (launch delay against device
    time, short kernels in red), device time per kernel kind (GEMM, convolution, element-wise ...:
    :func:`dlexplore.traces.kernels.kernel_breakdown`), operations queued per stream, memory
    allocated per device (traces recorded with ``profile_memory=True``), each for the first rank
    selected; an analysis the trace cannot give says why in the status line.

    Controls: ranks shown (a multiple selection), step (all steps, or one: the timeline zooms to
    it and the bars and table show it alone), categories shown on the timeline. Display the view
    by making it a cell's last expression, or use :attr:`widget`.
    """

    def __init__(
        self,
        trace: Trace | str | os.PathLike | Iterable[str | os.PathLike],
        *,
        breakdown: xr.Dataset | None = None,
        collectives: pd.DataFrame | None = None,
        max_events: int = 10_000,
        width: int = 1000,
        offsets: Mapping[int, float] | pd.Series | None = None,
        throttle: float = 0.05,
        compare: Trace | str | os.PathLike | None = None,
    ):
        if not isinstance(trace, Trace):
            trace = load_trace(trace)
        if max_events < 0:
            raise DlexploreError(f"max_events must be >= 0, got {max_events}")
        self.trace = trace
        self.max_events = int(max_events)
        self.throttle = float(throttle)
        self.notes: list[str] = []
        self.index = TimelineIndex(trace, offsets=offsets)
        self.breakdown = breakdown if breakdown is not None else self._try("breakdown", trace.breakdown)
        self._given_collectives = collectives is not None
        self.collectives = (
            collectives if collectives is not None else self._try("collective table", trace.collectives)
        )
        self._collectives_by_step: dict[int | None, pd.DataFrame | None] = {None: self.collectives}
        self.figures = TraceFigures(self.index, width=width)
        self._analyses_init(compare, width)
        self.sources = {**self.figures.sources, **self.analysis_figures.sources}
        self.view: TimelineView | None = None
        self.header = w.HTML(self._header_html(), layout=w.Layout(width="100%"))
        self.header.add_class("dlx-trace-header")
        self.status = w.HTML(layout=w.Layout(width="100%"))
        self.status.add_class("dlx-trace-status")
        self.controls = self._make_controls()
        self._holding = 0
        self._dirty = self._dirty_step = False
        self._quiet = False
        self._pending: asyncio.TimerHandle | None = None
        self.redraws = 0
        self._wire()
        self._redraw(step_changed=True)
        self.widget = self._layout()

    # -- public ---------------------------------------------------------------------------------

    @property
    def ranks(self) -> list[int]:
        """The ranks shown."""
        return list(self.controls["ranks"].value)

    @property
    def step(self) -> int | None:
        """The step shown, or None for all steps."""
        value = self.controls["step"].value
        return None if value == _ALL else int(value)

    @property
    def categories(self) -> list[str]:
        """The event categories shown on the timeline."""
        return [name for name, box in self.controls["categories"].items() if box.value]

    @property
    def window(self) -> tuple[float, float]:
        """The timeline's visible window, ms from the first event."""
        x_range = self.figures.timeline.x_range
        return float(x_range.start), float(x_range.end)

    def set(
        self,
        *,
        ranks: Iterable[int] | None = None,
        step: int | None | str = "keep",
        categories: Iterable[str] | None = None,
    ) -> TraceView:
        """Set several controls at once (one redraw): ``set(ranks=[0, 1], step=3)``.

        ``step=None`` shows all steps; leaving it out keeps the current one.
        """
        with self._hold():
            if ranks is not None:
                wanted = [int(r) for r in ranks]
                missing = sorted(set(wanted) - set(self.index.ranks.tolist()))
                if missing:
                    raise DlexploreError(
                        f"TraceView.set: no rank(s) {missing} in the trace; "
                        f"ranks: {self.index.ranks.tolist()}"
                    )
                self.controls["ranks"].value = tuple(wanted)
            if step != "keep":
                options = [value for _, value in self.controls["step"].options]
                value = _ALL if step is None else int(step)
                if value not in options:
                    raise DlexploreError(
                        f"TraceView.set: no step {step} in the trace; steps: "
                        f"{[v for v in options if v != _ALL]}"
                    )
                self.controls["step"].value = value
            if categories is not None:
                chosen = set(categories)
                unknown = sorted(chosen - set(self.controls["categories"]))
                if unknown:
                    raise DlexploreError(
                        f"TraceView.set: no {unknown} events in the trace; "
                        f"categories: {sorted(self.controls['categories'])}"
                    )
                for name, box in self.controls["categories"].items():
                    box.value = name in chosen
        return self

    def zoom(self, x0: float | None = None, x1: float | None = None) -> TimelineView:
        """Show the window ``[x0, x1]`` (ms from the first event; None: the trace's ends) and
        return what is drawn."""
        lo, hi = self.index.span
        self._set_window(lo if x0 is None else float(x0), hi if x1 is None else float(x1))
        self._draw_timeline()
        assert self.view is not None
        return self.view

    def _repr_mimebundle_(self, **kwargs: Any):
        load_bokehjs()
        return self.widget._repr_mimebundle_(**kwargs)

    # -- building -------------------------------------------------------------------------------

    def _try(self, what: str, compute):
        """An analysis of the trace, or None with a note when the trace cannot give it."""
        try:
            return compute()
        except DlexploreError as err:
            self.notes.append(f"No {what}: {err}")
            return None

    def _header_html(self) -> str:
        parts = self._try("summary", lambda: trace_summary(self.trace, self.index, self.breakdown))
        return "<div style='font-size:13px; line-height:1.4'>" + "; ".join(parts or []) + "</div>"

    def _make_controls(self) -> dict[str, Any]:
        index = self.index
        ranks = [int(r) for r in index.ranks]
        steps = sorted(
            set(index.steps.tolist())
            | (set(int(s) for s in self.breakdown["step"].values) if self.breakdown is not None else set())
        )
        rank_select = w.SelectMultiple(
            options=[(f"rank {r}", r) for r in ranks],
            value=tuple(ranks),
            rows=min(6, max(2, len(ranks))),
            description="Ranks",
            layout=w.Layout(width="200px"),
        )
        step_select = w.Dropdown(
            options=[("all steps (mean)", _ALL), *((f"step {s}", s) for s in steps)],
            value=_ALL,
            description="Step",
            layout=w.Layout(width="220px"),
        )
        boxes = {}
        for name in index.categories:
            box = w.Checkbox(value=True, description=name, indent=False, layout=w.Layout(width="130px"))
            box.add_class(f"dlx-category-{name}")
            boxes[name] = box
        for control in (rank_select, step_select):
            control.style = {"description_width": "45px"}
        return {"ranks": rank_select, "step": step_select, "categories": boxes}

    def _layout(self) -> w.Widget:
        swatches = [
            w.HBox(
                [
                    w.HTML(
                        f"<span style='display:inline-block;width:12px;height:12px;margin-top:6px;"
                        f"background:{CATEGORY_COLORS[name]}'></span>"
                    ),
                    box,
                ],
                layout=w.Layout(width="auto"),
            )
            for name, box in self.controls["categories"].items()
        ]
        categories = w.VBox(
            [
                w.HTML("<b>Timeline shows</b>"),
                w.HBox(swatches, layout=w.Layout(flex_flow="row wrap", width="520px")),
            ]
        )
        panel = w.HBox(
            [self.controls["ranks"], self.controls["step"], categories],
            layout=w.Layout(flex_flow="row wrap", align_items="flex-start"),
        )
        box = w.VBox(
            [
                self.header,
                panel,
                self.status,
                BokehModel(self.figures.layout),
                BokehModel(self.analysis_figures.layout),
            ]
        )
        box.add_class("dlx-traceview")
        return box

    def _wire(self) -> None:
        self.controls["ranks"].observe(lambda change: self._changed(), names="value")
        self.controls["step"].observe(lambda change: self._changed(step=True), names="value")
        for box in self.controls["categories"].values():
            box.observe(lambda change: self._changed(timeline_only=True), names="value")
        x_range = self.figures.timeline.x_range
        x_range.on_change("start", self._on_range)
        x_range.on_change("end", self._on_range)

    # -- reacting -------------------------------------------------------------------------------

    @contextmanager
    def _hold(self):
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._dirty:
                step_changed = self._dirty_step
                self._dirty = self._dirty_step = False
                self._redraw(step_changed=step_changed)

    def _changed(self, *, step: bool = False, timeline_only: bool = False) -> None:
        if self._holding:
            self._dirty = True
            self._dirty_step |= step
            return
        if timeline_only:
            self._draw_timeline()
        else:
            self._redraw(step_changed=step)

    def _on_range(self, attr: str, old: Any, new: Any) -> None:
        if self._quiet:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self.throttle <= 0:
            self._draw_timeline()
        elif self._pending is None:
            self._pending = loop.call_later(self.throttle, self._flush)

    def _flush(self) -> None:
        self._pending = None
        self._draw_timeline()

    def _set_window(self, x0: float, x1: float) -> None:
        if not x1 > x0:
            raise DlexploreError(f"the window must have x1 > x0 (ms), got {x0} to {x1}")
        x_range = self.figures.timeline.x_range
        lo, hi = x_range.bounds if x_range.bounds else (x0, x1)
        self._quiet = True
        try:
            x_range.start, x_range.end = max(x0, lo), min(x1, hi)
        finally:
            self._quiet = False

    def _redraw(self, *, step_changed: bool) -> None:
        ranks, step = self.ranks, self.step
        if step_changed:
            if step is None:
                lo, hi = self.index.span
                pad = 0.01 * (hi - lo) if hi > lo else 1.0
                self._set_window(lo - pad, hi + pad)
            elif step in set(self.index.steps.tolist()):
                lo, hi = self.index.step_window(step, ranks or None)
                pad = 0.02 * (hi - lo) if hi > lo else 1.0
                self._set_window(lo - pad, hi + pad)
        self._draw_timeline()
        if self.breakdown is not None:
            shown = step if step is not None and step in self.breakdown["step"].values else None
            data = rank_breakdown_columns(self.breakdown, ranks=ranks, step=shown)
            self.figures.show_breakdown(data, step=shown, steps=self.breakdown.sizes.get("step"))
        if step_changed:
            table = self._collectives_at(step)
            note = "all steps" if step is None or table is self.collectives else f"step {step}"
            self.figures.show_collectives(collective_columns(table), note=note)
        self._draw_analyses(ranks, step)

    def _collectives_at(self, step: int | None) -> pd.DataFrame | None:
        if self._given_collectives or step is None:
            return self.collectives
        if step not in self._collectives_by_step:
            self._collectives_by_step[step] = self._try(
                f"collective table for step {step}", lambda: self.trace.select(steps=[step]).collectives()
            )
        return self._collectives_by_step[step]

    def _draw_timeline(self) -> None:
        x0, x1 = self.window
        data, view = timeline_columns(
            self.index,
            x0,
            x1,
            ranks=self.ranks,
            categories=self.categories,
            max_events=self.max_events,
            bins=default_bins(self.figures.timeline.width),
        )
        self.view = view
        self.figures.show_timeline(data, view)
        self.redraws += 1
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in self.notes)
        self.status.value = f"<span style='font-size:13px'>{html.escape(view.text)}</span>{notes}"

    # -- analyses -------------------------------------------------------------------------------

    def _analyses_init(self, compare: Any, width: int) -> None:
        """Compute what does not depend on the controls once: launches, queues, memory, the diff."""
        trace = self.trace
        self.launches = (
            self._try("kernel launch statistics", trace.launch_stats)
            if "correlation" in trace.events.columns
            else None
        )
        self.queues = None
        if self.launches is not None:
            self.queues = self._try("stream queues", lambda: queue_length(self.launches))
        self.kernels = self._try("kernel breakdown", trace.kernel_breakdown)
        self.memory = None
        if trace.memory is not None:
            self.memory = self._try("memory timeline", trace.memory_timeline)
        self.diff = None
        if compare is not None:
            other = compare if isinstance(compare, Trace) else load_trace(compare)
            self.diff = self._try("trace diff", lambda: trace.diff(other))
        self.analysis_figures = AnalysisFigures(width=width, diff=compare is not None)
        if self.diff is not None:
            title = f"Largest changes, test against control ({self.diff.attrs['per']})"
            self.analysis_figures.show_diff(diff_columns(self.diff), title=title)
        self._paths: dict[tuple[int | None, int | None], Any] = {}

    def _draw_analyses(self, ranks: list[int], step: int | None) -> None:
        rank = ranks[0] if ranks else (int(self.index.ranks[0]) if len(self.index.ranks) else None)
        origin = self.index.t0_s
        figures = self.analysis_figures
        key = (rank, step)
        if key not in self._paths:
            self._paths[key] = self._try(
                f"critical path of rank {rank}", lambda: self._path_summary(rank, step)
            )
        summary = self._paths[key]
        if summary is not None:
            figures.show_path(
                critical_path_columns(summary),
                title=(
                    f"Critical path of step {summary.attrs['step']} on rank {summary.attrs['rank']}: "
                    f"{float(summary.step_time) * 1e3:,.3f} ms, {summary.attrs['events_on_path']:,} events"
                ),
            )
        figures.show_launches(launch_columns(self.launches, ranks=ranks or None))
        kinds = kernel_columns(self.kernels, rank=rank)
        total = f"{kinds['time_ms'].sum():,.3f} ms over the trace"
        figures.show_kernels(
            kinds,
            title=f"Device time per kernel kind on rank {rank}: {total}"
            if len(kinds["kind"])
            else f"Kernels: rank {rank} ran nothing on a device",
        )
        figures.show_queue(
            queue_columns(self.queues, rank=rank, origin=origin),
            title=f"Operations queued per stream on rank {rank} (launched, not finished)",
        )
        figures.show_memory(
            memory_columns(self.memory, rank=rank, origin=origin),
            title=f"Memory allocated per device on rank {rank}"
            if self.memory is not None
            else "Memory: the trace has no memory events (profile_memory=True records them)",
        )

    def _path_summary(self, rank: int | None, step: int | None):
        from ..traces.critical_path import critical_path, critical_path_summary

        steps = set(self.breakdown["step"].values.tolist()) if self.breakdown is not None else set()
        path = critical_path(self.trace, rank=rank, step=step if step in steps else None)
        return critical_path_summary(path)
