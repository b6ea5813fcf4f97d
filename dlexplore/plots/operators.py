"""The compute breakdown as a bokeh bar chart: where one step's compute time goes, by operator
category (convolutions, matrix products, attention, normalisation, activations, ...).

:func:`operator_columns` is the pure part (a prediction in, columns out); :func:`operator_figure`
draws them, and takes new columns in place (``source.data = operator_columns(...)``) as the other
plots do. Source name: ``operator_breakdown``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from ..errors import DlexploreError

__all__ = ["operator_columns", "operator_figure", "CATEGORY_COLOURS"]

#: One colour per kind of operator: compute-bound blues and greens, memory-bound warm colours
#: (Okabe-Ito, colour-blind safe, as the other plots).
CATEGORY_COLOURS = {
    "conv": "#0072B2",
    "matmul": "#56B4E9",
    "attention": "#009E73",
    "norm": "#D55E00",
    "activation": "#E69F00",
    "elementwise": "#CC79A7",
    "pool": "#F0E442",
    "dropout": "#999999",
    "softmax": "#E6A0C4",
    "embedding": "#8C564B",
    "loss": "#7F7F7F",
    "optimizer": "#000000",
}


def operator_columns(ds: xr.Dataset, **where: object) -> dict[str, list]:
    """Columns of the breakdown from a prediction with ``time_operator`` (:func:`dlexplore.predict`
    or :func:`dlexplore.predict_parallel`): one bar per operator category with time, ``time_ms``
    (ms per step), ``share`` (of the compute time, 0-1) and ``colour``; categories that take no
    time are left out. ``where`` picks one value of every other dimension (``batch_size=64``);
    a dimension of length one needs none."""
    if "time_operator" not in ds:
        raise DlexploreError(
            "the compute breakdown needs 'time_operator': a prediction of "
            "dlexplore.predict or predict_parallel"
        )
    da = ds["time_operator"]
    for dim in [d for d in da.dims if d != "operator"]:
        if dim in where:
            da = da.sel({dim: where[dim]})
        elif da.sizes[dim] == 1:
            da = da.isel({dim: 0})
        else:
            raise DlexploreError(
                f"the breakdown varies along {dim!r}: give {dim}= one of {da[dim].values.tolist()}"
            )
    values = np.asarray(da.values, dtype=float)
    total = float(values.sum())
    keep = values > 0
    names = [str(n) for n in da["operator"].values[keep]]
    return {
        "operator": names,
        "time_ms": (values[keep] * 1e3).tolist(),
        "share": (values[keep] / total if total > 0 else values[keep]).tolist(),
        "colour": [CATEGORY_COLOURS.get(n, "#999999") for n in names],
    }


def operator_figure(ds: xr.Dataset, *, title: str | None = None, **where: object) -> figure:
    """A horizontal bar per operator category: compute time per step (ms) and its share."""
    columns = operator_columns(ds, **where)
    # bokeh's stubs declare figure's own options (axis labels and types, tools, tuple ranges) as
    # InitVars of a dataclass base that mypy drops, and the source's data as an invariant dict.
    source = ColumnDataSource(columns, name="operator_breakdown")  # type: ignore[arg-type]
    fig = figure(  # type: ignore[call-arg]
        y_range=list(reversed(columns["operator"])),  # type: ignore[arg-type]
        height=320,
        width=520,
        title=title or "Where the compute time goes (per step)",
        x_axis_label="time per step (ms)",
        toolbar_location=None,
    )
    fig.hbar(y="operator", right="time_ms", height=0.7, color="colour", source=source)
    fig.add_tools(
        HoverTool(
            tooltips=[
                ("operator", "@operator"),
                ("time", "@time_ms{0.00} ms"),
                ("share of compute", "@share{0.0%}"),
            ]
        )
    )
    return fig
