"""Bokeh builders for time to accuracy and for logged loss curves: datasets in, figures out.

:class:`TimeToAccuracyFigure` draws :func:`dlexplore.model.time_to_accuracy`'s dataset: time to the
target (hours, log scale) against GPUs, one line per batch size per GPU, the fastest configuration
starred, and on each line the GPU count beyond which adding GPUs stops helping (the line's minimum:
past it the time rises, or the global batch passes the maximum useful batch and the target is not
reached). It is built once; :meth:`TimeToAccuracyFigure.show` replaces the sources' ``data`` in place
(named sources ``tta_lines``, ``tta_points``, ``tta_fastest``, ``tta_knees``).

:func:`loss_curves_figure` overlays a scalar (loss by default) of several runs against the epoch or
the step, as the seed's "loss vs epochs" plot of the Horovod study does.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem
from bokeh.plotting import figure

from ..errors import DlexploreError
from ..model.conventions import OnDims
from .figure_parts import new_figure, subtitle
from .palette import BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILION, YELLOW

__all__ = ["TimeToAccuracyFigure", "time_to_accuracy_columns", "loss_curves_figure"]

_PALETTE = (BLUE, VERMILION, GREEN, ORANGE, PURPLE, SKY, YELLOW, GREY)
_HOUR = 3600.0
_KWH = 3.6e6


def time_to_accuracy_columns(tta: xr.Dataset) -> dict[str, dict[str, list]]:
    """The columns of the four sources, from a time-to-accuracy dataset over ``gpus`` (and
    optionally ``batch_size``). Times in hours, energy in kWh."""
    if "time_to_target" not in tta or "gpus" not in tta["time_to_target"].dims:
        raise DlexploreError("expected dlexplore.model.time_to_accuracy's dataset swept over gpus")
    time = tta["time_to_target"]
    if "batch_size" not in time.dims:
        time = time.expand_dims(batch_size=[int(tta["batch_size"].values)])
    extra = [d for d in time.dims if d not in ("gpus", "batch_size")]
    if extra:
        raise DlexploreError(f"select one value of {extra} first (the plot has gpus x batch_size)")
    time = time.transpose("batch_size", "gpus")
    grid = OnDims(time.variable)  # arrays, not broadcast_like: that re-merged ~40 coordinates each
    variables = {}
    for name in ("steps_to_target", "global_batch", "energy_to_target", "epochs_to_target"):
        if name in tta:
            variables[name] = grid.whole(grid(tta.variables[name]))
    gpus = time["gpus"].values.astype(float)
    lines: dict[str, list] = {"xs": [], "ys": [], "color": [], "label": []}
    points: dict[str, list] = {
        k: []
        for k in ("gpus", "hours", "batch_size", "global_batch", "steps", "epochs", "energy_kwh", "color")
    }
    knees: dict[str, list] = {"gpus": [], "hours": [], "batch_size": []}
    for i, batch in enumerate(time["batch_size"].values):
        hours = time.values[i] / _HOUR
        ok = np.isfinite(hours)
        color = _PALETTE[i % len(_PALETTE)]
        lines["xs"].append(gpus[ok].tolist())
        lines["ys"].append(hours[ok].tolist())
        lines["color"].append(color)
        lines["label"].append(f"{int(batch)} per GPU")
        for j in np.flatnonzero(ok):
            points["gpus"].append(float(gpus[j]))
            points["hours"].append(float(hours[j]))
            points["batch_size"].append(int(batch))
            points["global_batch"].append(
                float(variables["global_batch"][i, j]) if "global_batch" in variables else float("nan")
            )
            points["steps"].append(float(variables.get("steps_to_target", time.values)[i, j]))
            points["epochs"].append(
                float(variables["epochs_to_target"][i, j])
                if "epochs_to_target" in variables
                else float("nan")
            )
            points["energy_kwh"].append(
                float(variables["energy_to_target"][i, j]) / _KWH
                if "energy_to_target" in variables
                else float("nan")
            )
            points["color"].append(color)
        if ok.any():
            j = int(np.nanargmin(hours))
            knees["gpus"].append(float(gpus[j]))
            knees["hours"].append(float(hours[j]))
            knees["batch_size"].append(int(batch))
    fastest: dict[str, list] = {"gpus": [], "hours": [], "batch_size": []}
    if knees["hours"]:
        k = int(np.argmin(knees["hours"]))
        fastest = {key: [values[k]] for key, values in knees.items()}
    return {"tta_lines": lines, "tta_points": points, "tta_fastest": fastest, "tta_knees": knees}


def _points_hover(dots: object) -> HoverTool:
    """The tooltip of a configuration's point: its batch, time, steps, epochs and energy."""
    return HoverTool(
        renderers=[dots],
        tooltips=[
            ("GPUs", "@gpus"),
            ("batch per GPU", "@batch_size"),
            ("global batch", "@global_batch{0,0}"),
            ("time to target", "@hours{0.00} h"),
            ("steps", "@steps{0,0}"),
            ("epochs", "@epochs{0.0}"),
            ("energy", "@energy_kwh{0,0.0} kWh"),
        ],
    )


#: The figure's sources and their columns.
_COLUMNS = {
    "tta_lines": ("xs", "ys", "color", "label"),
    "tta_points": ("gpus", "hours", "batch_size", "global_batch", "steps", "epochs", "energy_kwh", "color"),
    "tta_fastest": ("gpus", "hours", "batch_size"),
    "tta_knees": ("gpus", "hours", "batch_size"),
}


def _small_legend(legend: Legend, knees: object, star: object) -> None:
    """The lines' legend with the knee and fastest markers, small, in the empty lower left."""
    legend.items.extend(
        [
            LegendItem(label="more GPUs stop helping", renderers=[knees]),
            LegendItem(label="fastest", renderers=[star]),
        ]
    )
    legend.location = "bottom_left"
    legend.label_text_font_size = "8pt"
    legend.background_fill_alpha = 0.7
    legend.spacing = 0
    legend.padding = 4


class TimeToAccuracyFigure:
    """Time to the target accuracy against GPUs, built once, fed new datasets by :meth:`show`.

    ``width`` None stretches the figure to its container (the explorer's grid of panels), never
    narrower than ``min_width`` pixels.
    """

    def __init__(
        self,
        tta: xr.Dataset | None = None,
        *,
        width: int | None = 560,
        height: int = 380,
        min_width: int = 340,
    ):
        # Every column from the start: a figure first shown empty (show_nothing) still has the
        # legend's 'label' field, which BokehJS otherwise reports as a bad column name.
        self.sources = {
            name: ColumnDataSource(name=name, data={c: [] for c in names}) for name, names in _COLUMNS.items()
        }
        size = (
            dict(width=width, height=height)
            if width is not None
            else dict(height=height, sizing_mode="stretch_width", min_width=min_width)
        )
        fig = new_figure(
            **size,
            x_axis_type="log",
            y_axis_type="log",
            title="Time to accuracy",
            x_axis_label="GPUs",
            y_axis_label="time to target (hours)",
            toolbar_location="above",
            tools="pan,wheel_zoom,box_zoom,reset,save",
            name="time_to_accuracy",
        )
        lines = fig.multi_line(
            "xs", "ys", color="color", line_width=2, source=self.sources["tta_lines"], legend_field="label"
        )
        dots = fig.scatter("gpus", "hours", color="color", size=6, source=self.sources["tta_points"])
        knees = fig.scatter(
            "gpus",
            "hours",
            marker="circle",
            size=14,
            fill_alpha=0,
            line_width=2,
            line_color="black",
            source=self.sources["tta_knees"],
        )
        star = fig.scatter(
            "gpus",
            "hours",
            marker="star",
            size=22,
            color=YELLOW,
            line_color="black",
            source=self.sources["tta_fastest"],
        )
        fig.add_tools(_points_hover(dots))
        _small_legend(fig.legend[0], knees, star)
        # The workload, rule and useful batch change with the controls: a second, smaller line keeps
        # the title within the narrowest panel the explorer gives this figure.
        self.subtitle = subtitle(fig, "time_to_accuracy_subtitle")
        del lines
        self.figure = fig
        if tta is not None:
            self.show(tta)

    def show(self, tta: xr.Dataset) -> None:
        """Replace every source's data with ``tta``'s (the figure itself is kept)."""
        for name, data in time_to_accuracy_columns(tta).items():
            self.sources[name].data = data
        rule = tta.attrs.get("convergence_rule", "")
        useful = tta.attrs.get("max_useful_batch", float("nan"))
        self.subtitle.text = (
            f"{tta.attrs.get('convergence_workload', '')}, {rule}, global batch <= {useful:,.0f}"
        )

    def show_nothing(self, why: str) -> None:
        """Empty every source and say ``why`` under the title (the figure itself is kept)."""
        for source in self.sources.values():
            source.data = {name: [] for name in source.data}
        self.subtitle.text = why


def loss_curves_figure(
    runs: xr.Dataset, *, tag: str = "loss", x: str = "epoch", width: int = 560, height: int = 380
):
    """A scalar of several runs (``run`` x ``step``, from :func:`dlexplore.traces.read_tensorboard`)
    against ``x``: ``epoch`` (needs an ``epoch`` variable or coordinate), ``step`` or
    ``wall_time`` (seconds since each run's first event)."""
    if tag not in runs:
        raise DlexploreError(f"no scalar {tag!r}; the runs have {sorted(runs.data_vars)}")
    fig = figure(
        width=width,
        height=height,
        title=f"{tag} vs {x}",
        x_axis_label=x,
        y_axis_label=f"{tag} ({runs[tag].attrs.get('units', '')})".replace(" ()", ""),
        tools="pan,wheel_zoom,box_zoom,reset,save",
        name="loss_curves",
    )
    items = []
    for i, run in enumerate(runs["run"].values):
        one = runs.sel(run=run)
        y = one[tag].values
        if x == "step":
            xs = one["step"].values.astype(float)
        elif x in one:
            xs = one[x].values.astype(float)
            if x == "wall_time":
                xs = xs - np.nanmin(xs)
        else:
            raise DlexploreError(f"no {x!r} in the runs: log it as a scalar, or use x='step'")
        ok = np.isfinite(xs) & np.isfinite(y)
        source = ColumnDataSource({"x": xs[ok], "y": y[ok]}, name=f"loss_{run}")
        line = fig.line("x", "y", source=source, line_width=2, color=_PALETTE[i % len(_PALETTE)])
        items.append(LegendItem(label=str(run), renderers=[line]))
    fig.add_layout(Legend(items=items, location="top_right"))
    fig.add_tools(HoverTool(tooltips=[(x, "@x{0.00}"), (tag, "@y{0.0000}")]))
    return fig
