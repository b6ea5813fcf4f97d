"""One bokeh figure for any dataset dlexplore returns, chosen by what the dataset is (``ds.dlx.plot()``).

- a prediction over GPU counts: the explorer's four figures (throughput, step time, memory, one
  step) with the largest count selected;
- any other prediction, or a measured table: its main variable against its first numeric
  coordinate, one line (predicted) or markers (measured) per value of the other coordinates;
- a trace's breakdown on (rank, step): the per-rank stacked bars of the trace view;
- a comparison (:func:`dlexplore.compare`): measured against predicted, with the line of equality.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from ..errors import DlexploreError
from .figures import ExplorerFigures
from .timeline import BREAKDOWN_PARTS, rank_breakdown_columns

__all__ = ["dataset_figure", "MAIN_VARIABLES"]

#: The variable a plot shows, first one present.
MAIN_VARIABLES = ("throughput", "step_time", "time", "busbw", "algbw", "efficiency", "energy_per_sample")


def _label(ds: xr.Dataset, name: str) -> str:
    units = ds[name].attrs.get("units", "")
    return f"{name} ({units})" if units and units != "1" else name


def dataset_figure(ds: xr.Dataset, kind: str, *, width: int = 560, height: int = 380):
    """The figure for ``ds`` of ``kind`` (``prediction``, ``measured``, ``breakdown``,
    ``comparison``: what :attr:`dlexplore.accessor.DlxAccessor.kind` says)."""
    if kind == "breakdown":
        return _breakdown_figure(ds, width, height)
    if kind == "comparison":
        return _comparison_figure(ds, width, height)
    if kind == "prediction" and _over_gpus_only(ds):
        figures = ExplorerFigures(ds["gpus"].values, width=width, height=height)
        figures.show(ds, int(ds["gpus"].values.max()))
        return figures.layout
    return _line_figure(ds, kind, width, height)


def _over_gpus_only(ds: xr.Dataset) -> bool:
    sweeps = [d for d in ds["step_time"].dims] if "step_time" in ds else []
    return sweeps == ["gpus"] and "n_buckets" in ds and "bucket" in ds.dims


def _main(ds: xr.Dataset) -> str:
    for name in MAIN_VARIABLES:
        if name in ds.data_vars:
            return name
    numeric = [n for n, v in ds.data_vars.items() if np.issubdtype(v.dtype, np.number) and v.ndim]
    if not numeric:
        raise DlexploreError(f"{ds.attrs.get('title', 'the dataset')}: no numeric variable to plot")
    return numeric[0]


def _line_figure(ds: xr.Dataset, kind: str, width: int, height: int):
    name = _main(ds)
    var = ds[name]
    if var.size == 0:
        note = f" ({ds.attrs['note']})" if ds.attrs.get("note") else ""
        raise DlexploreError(f"{name} is empty{note}: there is nothing to plot")
    if "point" in var.dims:  # a measured table: x is its first numeric coordinate along point
        xs = [c for c in ("gpus", "bytes", "batch_size", "global_batch") if c in ds.coords]
        if not xs:
            raise DlexploreError(
                f"{ds.attrs.get('name', 'the dataset')}: no gpus, bytes or batch size to plot against"
            )
        x = xs[0]
        frame = ds[[name]].reset_coords()[[x, name]].to_dataframe()
        groups = {"": frame}
    else:
        if not var.dims:
            raise DlexploreError(f"{name} is one number ({float(var):.4g}); there is no sweep to plot")
        x = var.dims[0]
        other = [d for d in var.dims if d != x]
        flat = var.stack(line=other) if other else var.expand_dims(line=[""])
        groups = {
            str(flat["line"].values[i]): flat.isel(line=i).to_dataframe(name=name).reset_index()[[x, name]]
            for i in range(flat.sizes["line"])
        }
    numeric_x = np.issubdtype(np.asarray(ds[x].values).dtype, np.number)
    log = numeric_x and x in ("gpus", "bytes") and float(np.nanmin(ds[x].values)) > 0
    fig = figure(
        title=ds.attrs.get("title", name),
        width=width,
        height=height,
        x_axis_type="log" if log else "linear",
        x_axis_label=_label(ds, x) if x in ds.variables else x,
        y_axis_label=_label(ds, name),
        tools="pan,wheel_zoom,box_zoom,reset,save",
        name="dataset_figure",
    )
    for i, (line, frame) in enumerate(groups.items()):
        source = ColumnDataSource({"x": frame[x].to_numpy(), "y": frame[name].to_numpy()})
        color = Category10_10[i % 10]
        legend = {"legend_label": line} if line else {}
        if kind == "measured":
            fig.scatter("x", "y", source=source, size=8, color=color, **legend)
        else:
            fig.line("x", "y", source=source, line_width=2, color=color, **legend)
    fig.add_tools(HoverTool(tooltips=[(x, "@x"), (_label(ds, name), "@y{0,0.000}")]))
    return fig


def _breakdown_figure(ds: xr.Dataset, width: int, height: int):
    columns = rank_breakdown_columns(ds)
    parts = [c for c, _, _ in BREAKDOWN_PARTS]
    fig = figure(
        title=ds.attrs.get("title", "time per rank"),
        x_range=list(columns["label"]),
        width=width,
        height=height,
        x_axis_label="rank",
        y_axis_label="mean time per step (ms)",
        tools="pan,wheel_zoom,box_zoom,reset,save",
        name="dataset_figure",
    )
    source = ColumnDataSource({k: columns[k] for k in ("label", *parts, "step_time")})
    colors = [color for _, _, color in BREAKDOWN_PARTS]
    labels = [label for _, label, _ in BREAKDOWN_PARTS]
    fig.vbar_stack(parts, x="label", width=0.7, source=source, color=colors, legend_label=labels)
    fig.add_tools(HoverTool(tooltips=[("rank", "@label"), ("step time", "@step_time{0.000} ms")]))
    return fig


def _comparison_figure(ds: xr.Dataset, width: int, height: int):
    measured = np.asarray(ds["measured"].values, dtype=float).ravel()
    predicted = np.asarray(ds["predicted"].values, dtype=float).ravel()
    units = ds["measured"].attrs.get("units", "")
    fig = figure(
        title=ds.attrs.get("title", "predicted against measured"),
        width=width,
        height=height,
        x_axis_label=f"measured ({units})",
        y_axis_label=f"predicted ({units})",
        tools="pan,wheel_zoom,box_zoom,reset,save",
        name="dataset_figure",
    )
    both = np.concatenate([measured, predicted])
    both = both[np.isfinite(both)]
    if both.size:
        fig.line([both.min(), both.max()], [both.min(), both.max()], color="gray", line_dash="dashed")
    error = (
        np.asarray(ds["error"].values, dtype=float).ravel()
        if "error" in ds
        else np.full(measured.size, np.nan)
    )
    source = ColumnDataSource({"x": measured, "y": predicted, "error": error})
    fig.scatter("x", "y", source=source, size=8, color=Category10_10[0])
    fig.add_tools(HoverTool(tooltips=[("measured", "@x"), ("predicted", "@y"), ("error", "@error{+0.0%}")]))
    return fig
