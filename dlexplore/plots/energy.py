"""The time-energy trade-off as a bokeh scatter: one point per configuration, the Pareto front
drawn as a line through the points where finishing sooner costs more energy.

:func:`tradeoff_columns` is the pure part (dataset in, columns out); :func:`tradeoff_figure` draws
them. Source names: ``tradeoff_points`` and ``tradeoff_front``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from ..errors import DlexploreError
from ..model.energy import J_PER_KWH, pareto_front

__all__ = ["tradeoff_columns", "tradeoff_figure"]

# Okabe-Ito colours, one per GPU type (colour-blind safe, as the other plots).
_PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
#: Without samples_per_epoch, both objectives are shown per this many samples.
PER_SAMPLES = 1e6


def tradeoff_columns(ds: xr.Dataset) -> tuple[dict[str, list], str, str]:
    """Columns of the trade-off plot from :func:`dlexplore.model.energy.time_energy_tradeoff` (or
    any :func:`dlexplore.model.energy.energy` dataset with a ``gpus`` coordinate).

    Returns ``(columns, x_label, y_label)``: ``time_h`` (hours) and ``energy_kwh`` (kWh) per epoch
    when the dataset has ``time_epoch``, else per million samples; ``gpus``, ``gpu`` (name),
    ``step_ms`` (ms), ``power_kw`` (average power, kW), ``pareto`` and ``colour``.
    """
    for name in ("time_sample", "energy_sample"):
        if name not in ds:
            raise DlexploreError(f"the trade-off plot needs {name!r}: pass a dataset from energy()")
    if "time_epoch" in ds:
        t, e = ds["time_epoch"], ds["energy_epoch"]
        what = "per epoch"
    else:
        t, e = ds["time_sample"] * PER_SAMPLES, ds["energy_sample"] * PER_SAMPLES
        what = f"per {PER_SAMPLES:,.0f} samples"
    t, e, step, power = xr.broadcast(t, e, ds["step_time"], ds["power_average"])
    dims = t.dims
    frame = xr.Dataset({"t": t, "e": e, "step": step.transpose(*dims), "power": power.transpose(*dims)})
    if "pareto" in ds:
        frame["pareto"] = ds["pareto"].broadcast_like(t).transpose(*dims)
    else:
        frame["pareto"] = (dims, pareto_front(t.values, e.transpose(*dims).values))
    df = frame.to_dataframe().reset_index()
    if "gpu" in df:
        df["gpu"] = df["gpu"].astype(str)
    else:
        df["gpu"] = str(ds["gpu"].item()) if "gpu" in ds.coords else "GPU"
    kinds = list(dict.fromkeys(df["gpu"]))
    colours = {k: _PALETTE[i % len(_PALETTE)] for i, k in enumerate(kinds)}
    columns = {
        "time_h": (df["t"] / 3600.0).tolist(),
        "energy_kwh": (df["e"] / J_PER_KWH).tolist(),
        "gpus": df["gpus"].astype(int).tolist(),
        "gpu": df["gpu"].tolist(),
        "step_ms": (df["step"] * 1e3).tolist(),
        "power_kw": (df["power"] / 1e3).tolist(),
        "pareto": df["pareto"].astype(bool).tolist(),
        "colour": [colours[g] for g in df["gpu"]],
    }
    return columns, f"time {what} (h)", f"energy {what} (kWh)"


def tradeoff_figure(
    ds: xr.Dataset, *, title: str = "Time-energy trade-off", width: int = 620, height: int = 420
) -> figure:
    """A bokeh figure of time against energy for every configuration in ``ds`` (see
    :func:`tradeoff_columns`), coloured by GPU type, with the Pareto front as a line and larger
    markers; hover shows GPU, GPU count, time (h), energy (kWh), step time (ms) and power (kW)."""
    columns, x_label, y_label = tradeoff_columns(ds)
    fig = figure(
        title=title,
        width=width,
        height=height,
        x_axis_label=x_label,
        y_axis_label=y_label,
        x_axis_type="log",
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    points = ColumnDataSource(columns, name="tradeoff_points")
    order = np.argsort(columns["time_h"])
    front_idx = [int(i) for i in order if columns["pareto"][i]]
    front = ColumnDataSource(
        {key: [columns[key][i] for i in front_idx] for key in columns}, name="tradeoff_front"
    )
    fig.line(
        "time_h",
        "energy_kwh",
        source=front,
        color="#444444",
        line_width=2,
        line_dash="dashed",
        legend_label="Pareto front",
    )
    fig.scatter(
        "time_h", "energy_kwh", source=front, size=14, fill_alpha=0.0, line_color="#000000", line_width=2
    )
    renderer = fig.scatter("time_h", "energy_kwh", source=points, size=8, color="colour", legend_field="gpu")
    fig.add_tools(
        HoverTool(
            renderers=[renderer],
            tooltips=[
                ("GPU", "@gpu x @gpus"),
                ("time", "@time_h{0.000} h"),
                ("energy", "@energy_kwh{0.0000} kWh"),
                ("step", "@step_ms{0.0} ms"),
                ("average power", "@power_kw{0.00} kW"),
                ("Pareto", "@pareto"),
            ],
        )
    )
    fig.legend.location = "top_right"
    fig.legend.click_policy = "hide"
    return fig
