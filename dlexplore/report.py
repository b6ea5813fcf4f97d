"""A standalone HTML report: the explorer's plots for one configuration, for sharing without a kernel.

The page inlines BokehJS (no network needed to view it) and carries the prediction at every GPU
count, so its GPU selector re-draws the per-GPU-count plots in the browser without Python.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

import xarray as xr
from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models import CustomJS, Div, Select
from bokeh.resources import INLINE

from . import catalog, measured
from ._io import atomic_open
from ._version import __version__
from .errors import DlexploreError
from .model import predict
from .plots import GPU_COUNTS, ExplorerFigures, headline, measured_columns

__all__ = ["explorer_report", "write_report"]

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
    prediction = predict(workload, gpu, network, gpus=list(GPU_COUNTS), batch_size=batch_size,
                         gpus_per_node=gpus_per_node, buckets=True, **model_kwargs)
    ds = None if measured_data is None else (
        measured_data if isinstance(measured_data, xr.Dataset) else measured.load(measured_data))
    if ds is not None and "throughput" not in ds:
        raise DlexploreError(f"measured dataset {ds.attrs.get('name', '')!r} has no throughput to overlay")
    point = prediction.sel(gpus=gpus)
    marks = measured_columns(ds, prediction, workload=str(point.workload.values),
                             precision=str(point.precision.values))
    figures = ExplorerFigures(GPU_COUNTS)

    # Every GPU count's per-count columns and titles, computed here once and embedded in the page.
    states: dict[str, dict] = {}
    for count in GPU_COUNTS:
        figures.select(prediction, count)
        states[str(count)] = {
            "data": {name: dict(figures.sources[name].data) for name in _PER_GPU_SOURCES},
            "memory_title": figures.memory.title.text,
            "memory_color": figures.memory.title.text_color,
            "memory_background": figures.memory.background_fill_color,
            "memory_end": figures.memory.x_range.end,
            "capacity": figures.capacity_span.location,
            "comm_title": figures.comm.title.text,
            "headline": headline(prediction, count),
        }
    figures.show(prediction, gpus, marks)

    head = Div(text=_header_html(prediction, gpus, ds, title), width=1150, name="report_header")
    line = Div(text=f"<p style='font-size:15px'>{html.escape(headline(prediction, gpus))}</p>",
               width=1150, name="report_headline")
    selector = Select(title="GPUs", value=str(gpus), options=[str(g) for g in GPU_COUNTS],
                      name="report_gpus", width=120)
    sources = {name: figures.sources[name] for name in _PER_GPU_SOURCES}
    selector.js_on_change("value", CustomJS(
        args=dict(states=states, sources=sources, memory=figures.memory, comm=figures.comm,
                  capacity=figures.capacity_span, line=line),
        code="""
        const s = states[cb_obj.value];
        for (const name in sources) { sources[name].data = s.data[name]; }
        memory.title.text = s.memory_title;
        memory.title.text_color = s.memory_color;
        memory.background_fill_color = s.memory_background;
        memory.x_range.end = s.memory_end;
        capacity.location = s.capacity;
        comm.title.text = s.comm_title;
        const p = document.createElement('p');
        p.textContent = s.headline;
        line.text = "<p style='font-size:15px'>" + p.innerHTML + "</p>";
        """,
    ))
    page = column(head, selector, line, figures.layout, name="report")
    name = title or f"dlexplore report: {point.workload.values} on {point.gpu.values}"
    return file_html(page, resources=INLINE, title=name)


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
        ("workload", f"{coord('workload')} ({catalog.workload(str(point.workload.values)).params:,} "
                     "parameters)"),
        ("GPU", f"{coord('gpu')}, {coord('precision')}, compute efficiency "
                f"{float(point.compute_efficiency):.0%} of peak"),
        ("network", f"{coord('network')}: {bandwidth:g} GB/s, {latency * 1e6:g} µs; "
                    f"{int(point.gpus_per_node)} GPUs per node over {coord('intra_link')}"),
        ("allreduce", f"{coord('algorithm')}, {float(point.bucket_size) / 2**20:g} MiB buckets"),
        ("batch", f"{int(point.batch_size)} samples per GPU, optimizer {coord('optimizer')}"),
        ("measured", html.escape(str(ds.attrs.get("source", ""))) if ds is not None else "none"),
        ("predicted by", html.escape(prediction.attrs.get("source", f"dlexplore {__version__}"))),
    ]
    table = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{k}</th><td>{v}</td></tr>"
                    for k, v in rows)
    heading = html.escape(title or "dlexplore: predicted training performance")
    return (
        f"<h2>{heading}</h2><table style='font-size:13px'>{table}</table>"
        "<p style='font-size:12px;color:#555'>The model is analytical and uncalibrated: it lacks "
        "framework scheduling delays, contention between communication and compute, stragglers and "
        "the dependence of compute efficiency on batch size. Hover over the plots for values with "
        "units.</p>"
    )
