"""A standalone HTML report: the explorer's plots for one configuration, for sharing without a kernel.

The page inlines BokehJS (no network needed to view it) and carries the prediction at every GPU
count, so its GPU selector re-draws the per-GPU-count plots in the browser without Python.

Kept whole: the two standalone pages (the explorer's, a trace's) share their page assembly, offline
resources and atomic write.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from .errors import require_extra

require_extra("dlexplore.report", ("bokeh",))

# ruff: noqa: E402 - after the check above, which says which extra installs bokeh
import xarray as xr
from bokeh.embed import file_html
from bokeh.layouts import column

# bokeh.models builds its __all__ from its submodules' at run time, which mypy cannot follow.
from bokeh.models import CustomJS, Div, Select  # type: ignore[attr-defined]
from bokeh.resources import INLINE

from . import catalog, measured
from ._io import atomic_open
from ._version import __version__
from .errors import DlexploreError
from .model import predict
from .plots import GPU_COUNTS, ExplorerFigures, headline, measured_columns
from .plots.js import script

__all__ = ["explorer_report", "write_report", "trace_report", "write_trace_report"]

# The per-GPU-count parts of the figures: what the GPU selector swaps in the browser.
_PER_GPU_SOURCES = ("throughput_selected", "step_breakdown", "memory", "comm_phases", "comm_buckets")


def explorer_report(
    workload: str = "resnet50",
    gpu: str = "V100-16GB",
    network: str = "25GbE",
    *,
    gpus: int = 8,
    batch_size: int = 64,
    gpus_per_node: int = 1,
    measured_data: str | os.PathLike | xr.Dataset | None = None,
    title: str | None = None,
    **model_kwargs: Any,
) -> str:
    """The report page as an HTML string (see :func:`write_report` for the arguments)."""
    if gpus not in GPU_COUNTS:
        raise DlexploreError(f"gpus must be one of {list(GPU_COUNTS)} in the report, got {gpus}")
    prediction = predict(
        workload,
        gpu,
        network,
        gpus=list(GPU_COUNTS),
        batch_size=batch_size,
        gpus_per_node=gpus_per_node,
        buckets=True,
        **model_kwargs,
    )
    ds = (
        None
        if measured_data is None
        else (measured_data if isinstance(measured_data, xr.Dataset) else measured.load(measured_data))
    )
    if ds is not None and "throughput" not in ds:
        raise DlexploreError(f"measured dataset {ds.attrs.get('name', '')!r} has no throughput to overlay")
    point = prediction.sel(gpus=gpus)
    marks = measured_columns(
        ds, prediction, workload=str(point.workload.values), precision=str(point.precision.values)
    )
    figures = ExplorerFigures(GPU_COUNTS, width=560, height=380)
    titles = figures.subtitles

    # Every GPU count's per-count columns and titles, computed here once and embedded in the page.
    states = _gpu_states(figures, prediction)
    figures.show(prediction, gpus, marks)

    head = Div(text=_header_html(prediction, gpus, ds, title), width=1150, name="report_header")
    line = Div(
        text=f"<p style='font-size:15px'>{html.escape(headline(prediction, gpus))}</p>",
        width=1150,
        name="report_headline",
    )
    selector = Select(
        title="GPUs", value=str(gpus), options=[str(g) for g in GPU_COUNTS], name="report_gpus", width=120
    )
    sources = {name: figures.sources[name] for name in _PER_GPU_SOURCES}
    selector.js_on_change(
        "value",
        CustomJS(
            args=dict(
                states=states,
                sources=sources,
                memory=figures.memory,
                memory_title=titles["memory"],
                comm_title=titles["comm"],
                capacity=figures.capacity_span,
                line=line,
            ),
            code=script("report_gpus"),
        ),
    )
    page = column(head, selector, line, figures.layout, name="report")
    name = title or f"dlexplore report: {point.workload.values} on {point.gpu.values}"
    return file_html(page, resources=INLINE, title=name)


def _gpu_states(figures: ExplorerFigures, prediction: xr.Dataset) -> dict[str, dict]:
    """Each GPU count's columns, titles and headline, as the page's selector swaps them in."""
    titles = figures.subtitles
    states: dict[str, dict] = {}
    for count in GPU_COUNTS:
        figures.select(prediction, count)
        states[str(count)] = {
            "data": {name: dict(figures.sources[name].data) for name in _PER_GPU_SOURCES},
            "memory_title": titles["memory"].text,
            "memory_color": titles["memory"].text_color,
            "memory_style": titles["memory"].text_font_style,
            "memory_background": figures.memory.background_fill_color,
            "memory_end": figures.memory.x_range.end,
            "capacity": figures.capacity_span.location,
            "comm_title": titles["comm"].text,
            "headline": headline(prediction, count),
        }
    return states


def write_report(path: str | os.PathLike, *args: Any, **kwargs: Any) -> Path:
    """Write the explorer's plots for one configuration to ``path`` as one standalone HTML page.

    Arguments are those of :class:`dlexplore.widgets.Explorer` (``workload``, ``gpu``, ``network``,
    ``gpus``, ``batch_size`` per GPU, ``gpus_per_node``, ``algorithm``, ``precision`` ...), with
    ``measured_data`` the measured dataset (bundled name, CSV path or Dataset) to overlay, ``title``
    the page title, and other keywords passed to :func:`dlexplore.predict`. The file is written to
    a temporary file and renamed, so a failure never leaves half a page.
    """
    text = explorer_report(*args, **kwargs)
    target = Path(path)
    with atomic_open(target, "w", encoding="utf-8") as handle:
        handle.write(text)
    return target


def _header_html(prediction: xr.Dataset, gpus: int, ds: xr.Dataset | None, title: str | None) -> str:
    point = prediction.sel(gpus=gpus)
    coord = lambda name: html.escape(str(point[name].values))  # noqa: E731
    bandwidth, latency = float(point.bandwidth), float(point.latency)
    rows = [
        (
            "workload",
            f"{coord('workload')} ({catalog.workload(str(point.workload.values)).params:,} parameters)",
        ),
        (
            "GPU",
            f"{coord('gpu')}, {coord('precision')}, compute efficiency "
            f"{float(point.compute_efficiency):.0%} of peak",
        ),
        (
            "network",
            f"{coord('network')}: {bandwidth:g} GB/s, {latency * 1e6:g} µs; "
            f"{int(point.gpus_per_node)} GPUs per node over {coord('intra_link')}",
        ),
        ("allreduce", f"{coord('algorithm')}, {float(point.bucket_size) / 2**20:g} MiB buckets"),
        ("batch", f"{int(point.batch_size)} samples per GPU, optimizer {coord('optimizer')}"),
        ("measured", html.escape(str(ds.attrs.get("source", ""))) if ds is not None else "none"),
        ("predicted by", html.escape(prediction.attrs.get("source", f"dlexplore {__version__}"))),
    ]
    table = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{k}</th><td>{v}</td></tr>" for k, v in rows
    )
    heading = html.escape(title or "dlexplore: predicted training performance")
    return (
        f"<h2>{heading}</h2><table style='font-size:13px'>{table}</table>"
        "<p style='font-size:12px;color:#555'>The model is analytical and uncalibrated: it lacks "
        "framework scheduling delays, contention between communication and compute, stragglers and "
        "the dependence of compute efficiency on batch size. Hover over the plots for values with "
        "units.</p>"
    )


# ---------------------------------------------------------------------------------------------
# measured traces


def trace_report(
    trace: Any,
    *,
    title: str | None = None,
    breakdown: xr.Dataset | None = None,
    collectives: Any = None,
    max_events: int = 10_000,
    embed_events: int = 50_000,
    width: int = 1100,
    offsets: Any = None,
) -> str:
    """The trace report page as an HTML string (see :func:`write_trace_report` for the arguments)."""
    from bokeh.layouts import row

    from .plots.timeline import (
        TimelineIndex,
        TraceFigures,
        collective_columns,
        default_bins,
        rank_breakdown_columns,
        timeline_columns,
        trace_summary,
    )
    from .traces import Trace, load_trace

    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    notes: list[str] = []

    def attempt(what: str, compute):
        try:
            return compute()
        except DlexploreError as err:
            notes.append(f"No {what}: {err}")
            return None

    index = TimelineIndex(trace, offsets=offsets)
    ds = breakdown if breakdown is not None else attempt("breakdown", trace.breakdown)
    table = collectives if collectives is not None else attempt("collective table", trace.collectives)
    figures = TraceFigures(index, width=width)
    x_range = figures.timeline.x_range
    bins = default_bins(width)
    data, view = timeline_columns(index, x_range.start, x_range.end, max_events=max_events, bins=bins)
    figures.show_timeline(data, view)

    # Every step's bars and table, computed here and embedded: the step selector swaps them in.
    steps = [int(s) for s in (ds["step"].values if ds is not None else index.steps)]
    per_step_tables = collectives is None and table is not None and len(steps) <= 50
    states = _step_states(trace, index, figures, ds, table, steps, per_step_tables, attempt)
    # back to all steps, as the page opens
    if ds is not None:
        figures.show_breakdown(rank_breakdown_columns(ds), steps=len(steps))
    figures.show_collectives(collective_columns(table), note="all steps")
    boxes, selector = _trace_controls(index, figures, states, steps, max_events, bins, embed_events)

    facts = trace_summary(trace, index, ds)
    how = _how_to_read(index, max_events, embed_events)
    analyses = _analyses_layout(trace, index, width, attempt)
    notes_html = "".join(f"<br><small>{html.escape(n)}</small>" for n in notes)
    heading = html.escape(title or "dlexplore: measured trace")
    head = Div(
        text=f"<h2>{heading}</h2><p style='font-size:13px'>{'; '.join(facts)}</p>"
        f"<p style='font-size:12px;color:#555'>{html.escape(how)}{notes_html}</p>",
        width=width,
        name="trace_report_header",
    )
    page = column(head, row(selector, boxes), figures.layout, analyses, name="trace_report")
    name = title or f"dlexplore trace report: {trace.source}"
    return file_html(page, resources=INLINE, title=name)


def _step_states(trace, index, figures, ds, table, steps, per_step_tables, attempt) -> dict[str, dict]:
    """The breakdown bars, collective table, titles and time window of every step (and of all
    steps, ``"all"``), as the step selector swaps them in."""
    from .plots.timeline import collective_columns, rank_breakdown_columns

    x_range = figures.timeline.x_range
    states: dict[str, dict] = {}
    for step in [None, *steps]:
        key = "all" if step is None else str(step)
        if ds is not None:
            figures.show_breakdown(rank_breakdown_columns(ds, step=step), step=step, steps=len(steps))
        step_table = table
        if step is not None and per_step_tables:
            step_table = attempt(
                f"collective table for step {step}",
                lambda step=step: trace.select(steps=[step]).collectives(),
            )
        figures.show_collectives(
            collective_columns(step_table), note="all steps" if step_table is table else f"step {step}"
        )
        if step is None or step not in set(index.steps.tolist()):
            window = [x_range.start, x_range.end]
        else:
            lo, hi = index.step_window(step)
            pad = 0.02 * (hi - lo) if hi > lo else 1.0
            window = [lo - pad, hi + pad]
        states[key] = {
            "breakdown": dict(figures.sources["trace_breakdown"].data),
            "breakdown_title": figures.breakdown.title.text,
            "collectives": dict(figures.sources["trace_collectives"].data),
            "collectives_title": figures.collectives_title.text,
            "window": window,
        }
    return states


def _trace_controls(index, figures, states, steps, max_events, bins, embed_events) -> tuple:
    """The category boxes and the step selector, wired to the page's JavaScript."""
    # bokeh.models builds its __all__ from its submodules' at run time, which mypy cannot follow.
    from bokeh.models import CheckboxGroup  # type: ignore[attr-defined]

    from .plots.timeline import TIMELINE_JS, timeline_payload

    x_range = figures.timeline.x_range
    present = list(index.categories)
    boxes = CheckboxGroup(
        labels=present, active=list(range(len(present))), inline=True, name="trace_categories"
    )
    redraw = CustomJS(
        args=dict(
            src=figures.sources["trace_timeline"],
            fig=figures.timeline,
            payload=timeline_payload(index, max_events=max_events, bins=bins, embed_events=embed_events),
            boxes=boxes,
            present=present,
        ),
        code=TIMELINE_JS,
    )
    x_range.js_on_change("start", redraw)
    x_range.js_on_change("end", redraw)
    boxes.js_on_change("active", redraw)
    selector = Select(
        title="Step",
        value="all",
        name="trace_step",
        width=160,
        options=[("all", "all steps (mean)"), *((str(s), f"step {s}") for s in steps)],
    )
    selector.js_on_change(
        "value",
        CustomJS(
            args=dict(
                states=states,
                breakdown=figures.sources["trace_breakdown"],
                table=figures.sources["trace_collectives"],
                bars=figures.breakdown,
                heading=figures.collectives_title,
                x_range=x_range,
            ),
            code=script("report_trace_step"),
        ),
    )

    return boxes, selector


def _how_to_read(index, max_events: int, embed_events: int) -> str:
    """The page's note on how to read the timeline and the bars."""
    return (
        "The timeline shows each rank's threads and streams (rows) against time from the first event "
        f"(ms, each rank's own clock). Scroll to zoom, drag to pan. A window with at most {max_events:,} "
        "events shows each; a wider one shows each category's busy time per bin (bar height = the "
        "busy share of the bin), exact in total. "
        + (
            "Every event is in this page."
            if index.n_events <= embed_events
            else f"This page holds binned busy time only (the trace has {index.n_events:,} events, more than "
            f"{embed_events:,}): open it in TraceView to see each event."
        )
        + " Bars: the mean per step of each rank; pick a step to see it alone. Hover for values with units."
    )


def _analyses_layout(trace: Any, index: Any, width: int, attempt) -> Any:
    """The analyses' tabs (:class:`dlexplore.plots.analyses.AnalysisFigures`) of the lowest rank: the
    critical path of its middle step, kernel launches, device time per kernel kind, stream queues,
    memory."""
    from .plots.analyses import (
        AnalysisFigures,
        critical_path_columns,
        kernel_columns,
        launch_columns,
        memory_columns,
        queue_columns,
    )
    from .traces.critical_path import critical_path, critical_path_summary
    from .traces.launches import queue_length

    figures = AnalysisFigures(width=width)
    rank = int(index.ranks[0]) if len(index.ranks) else None
    summary = attempt("critical path", lambda: critical_path_summary(critical_path(trace, rank=rank)))
    if summary is not None:
        figures.show_path(
            critical_path_columns(summary),
            title=(
                f"Critical path of step {summary.attrs['step']} on rank {summary.attrs['rank']} (the middle "
                f"step): {float(summary.step_time) * 1e3:,.3f} ms"
            ),
        )
    launches = attempt("kernel launches", trace.launch_stats) if "correlation" in trace.events else None
    if launches is not None:
        figures.show_launches(launch_columns(launches))
        figures.show_queue(
            queue_columns(queue_length(launches), rank=rank, origin=index.t0_s),
            title=f"Operations queued per stream on rank {rank} (launched, not finished)",
        )
    kinds = attempt("kernel breakdown", trace.kernel_breakdown)
    if kinds is not None and (kinds["rank"] == rank).any():
        columns = kernel_columns(kinds, rank=rank)
        total = f"{columns['time_ms'].sum():,.3f} ms over the trace"
        figures.show_kernels(columns, title=f"Device time per kernel kind on rank {rank}: {total}")
    if trace.memory is not None:
        memory = attempt("memory timeline", trace.memory_timeline)
        figures.show_memory(
            memory_columns(memory, rank=rank, origin=index.t0_s),
            title=f"Memory allocated per device on rank {rank}",
        )
    return figures.layout


def write_trace_report(path: str | os.PathLike, trace: Any, **kwargs: Any) -> Path:
    """Write a measured trace's timeline, breakdown per rank, collective table and analyses (critical
    path, kernel launches, kernel kinds, stream queues, memory) to ``path`` as one standalone HTML
    page (BokehJS inlined: it opens offline).

    ``trace`` is a :class:`dlexplore.traces.Trace` or what :func:`dlexplore.load_trace` reads.
    Keywords: ``title``; ``breakdown`` and ``collectives`` to show instead of the trace's own;
    ``max_events`` (events drawn one by one at most, else binned busy time); ``embed_events``
    (the page carries every event up to this many, else the binned view only); ``width``
    (pixels); ``offsets`` (clock offset per rank, s). Zooming, the category boxes and the step
    selector work in the page without Python. The file is written to a temporary file and renamed,
    so a failure never leaves half a page.
    """
    text = trace_report(trace, **kwargs)
    target = Path(path)
    with atomic_open(target, "w", encoding="utf-8") as handle:
        handle.write(text)
    return target
