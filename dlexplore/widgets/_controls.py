"""The explorer's controls: the widgets, the values they offer, and the panel that groups them.

Only construction lives here; what a change does is :class:`~dlexplore.widgets.Explorer`'s. One
layout and one style per kind of control are shared: every widget model is created in the browser
before the page shows anything, so fewer models is a faster first paint.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import ipywidgets as w
import numpy as np
from ipywidgets.widgets.widget_description import DescriptionStyle
from ipywidgets.widgets.widget_int import SliderStyle
from ipywidgets.widgets.widget_string import HTMLStyle

from .. import catalog, validation
from ..model.comm import ALGORITHMS, normalize_algorithm
from ..model.compute import normalize_precision
from ..plots import GPU_COUNTS
from ._layout import CONTROL_WIDTH

__all__ = [
    "BATCH_SIZES",
    "GPUS_PER_NODE",
    "NONE",
    "make_controls",
    "control_panel",
    "nearest",
    "check_arguments",
    "control_value",
    "workload_label",
    "workload_options",
]

#: The menus' "nothing chosen" entry (no measured dataset, no storage tier).
NONE = "(none)"
#: Per-GPU batch sizes offered by the batch slider.
BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: GPUs per node offered by the slider.
GPUS_PER_NODE = (1, 2, 4, 8, 16)
_ALGORITHM_LABELS = {
    "ring": "ring allreduce",
    "tree": "tree allreduce",
    "recursive_doubling": "recursive doubling",
    "halving_doubling": "halving-doubling (Rabenseifner)",
    "hierarchical": "hierarchical (ring in node, ring across)",
    "parameter_server": "parameter server",
    "nccl": "NCCL's choice (ring/tree)",
}
_CONTROL_LAYOUT = f"{CONTROL_WIDTH - 10}px"
DESCRIPTION_WIDTH = "125px"

#: The panel's headings and the controls under each, top to bottom.
SECTIONS = (
    ("Scale", ("gpus", "batch_size", "gpus_per_node")),
    ("Hardware and model", ("workload", "gpu", "precision")),
    ("Network", ("network", "bandwidth", "latency", "intra_link", "algorithm")),
    ("Input and energy", ("storage", "pue")),
    ("Measurements", ("measured",)),
)


#: Longer names than this get a short label in the workload drop-down (its full name in the tooltip).
SHORT_NAME = 22


def workload_label(name: str) -> str:
    """The workload drop-down's label for ``name``: itself, or for a long ad-hoc spec its builder and
    size (``"transformer 536k"``), which fits the control."""
    if len(name) <= SHORT_NAME:
        return name
    try:
        wl = catalog.workload(name)
    except Exception:  # noqa: BLE001 - a label never fails: the name cut short instead
        return name[: SHORT_NAME - 1] + "…"
    size = f"{wl.params / 1e6:.3g}M" if wl.params >= 1e6 else f"{wl.params / 1e3:.0f}k"
    return f"{wl.kind} {size} params"


def workload_options(names: Iterable[str]) -> list[tuple[str, str]]:
    """(label, name) pairs of the workload drop-down."""
    return [(workload_label(n), n) for n in names]


def check_arguments(**values: Any) -> None:
    """The explorer's constructor values, refused in words before anything is built."""
    if "workload" in values:
        catalog.workload(values["workload"])
    if "gpu" in values:
        catalog.gpu(values["gpu"])
    for name in ("gpus", "gpus_per_node"):
        if name in values:
            validation.count(name, values[name], maximum=max(GPU_COUNTS))
    if "batch_size" in values:
        validation.count("batch_size", values["batch_size"], maximum=max(BATCH_SIZES), units="samples")
    validation.number("pue", values["pue"], minimum=1.0, maximum=2.0)
    for name in ("tp", "pp"):
        if name in values:
            validation.count(name, values[name], maximum=64)
    if "micro_batch" in values:
        validation.count("micro_batch", values["micro_batch"], minimum=0, maximum=64, units="samples")
    if "zero" in values:
        validation.count("zero", values["zero"], minimum=0, maximum=3)
    if "recompute" in values:
        from ..model.states import normalize_recompute

        normalize_recompute(values["recompute"])
    if "schedule" in values:
        from ..model.pipeline import normalize_schedule

        normalize_schedule(values["schedule"])


def nearest(options: Iterable[int], value: float) -> int:
    """The option closest to ``value`` on a log scale (the sliders' options are powers and
    half-powers of two)."""
    options = list(options)
    return options[int(np.argmin([abs(np.log(o) - np.log(value)) for o in options]))]


def control_value(controls: dict[str, w.Widget], name: str, value: Any) -> Any:
    """``value`` checked and made the value control ``name`` takes (latency s -> µs, a count -> the
    nearest option, a name -> the catalog's); workloads and measured datasets are the explorer's."""
    if name == "latency":
        return validation.nonnegative("latency", value, units="s") * 1e6
    if name == "bandwidth":
        return validation.positive("bandwidth", value, units="GB/s")
    counts = {"gpus": GPU_COUNTS, "batch_size": BATCH_SIZES, "gpus_per_node": GPUS_PER_NODE}
    if name in counts:
        return nearest(counts[name], validation.count(name, value, maximum=max(counts[name])))
    if name == "gpu":
        return catalog.gpu(value).name
    if name in ("network", "intra_link"):
        return catalog.network(value).name
    if name == "algorithm":
        return normalize_algorithm(value)
    if name == "precision":
        return validation.precision_for(catalog.gpu(controls["gpu"].value), normalize_precision(value))
    if name == "pue":
        return validation.number("pue", value, minimum=1.0, maximum=2.0)
    if name in ("tp", "pp", "micro_batch"):
        # micro-batch 0: the whole replica batch at once; tp and pp are at least 1
        value = validation.count(name, value, minimum=0 if name == "micro_batch" else 1)
        return nearest([v for _, v in controls[name].options if v], value) if value else 0
    if name in ("zero", "recompute", "schedule"):
        check_arguments(pue=1.0, **{name: value})
    return value


def make_controls(*, datasets: Sequence[str], **v: Any) -> dict[str, w.Widget]:
    """The explorer's controls, by name, set to the values ``v`` (latency in seconds, the rest as
    the controls hold them); ``datasets`` are the measured datasets the explorer has loaded."""
    layout = w.Layout(width=_CONTROL_LAYOUT, max_width="100%")
    menu = dict(layout=layout, style=DescriptionStyle(description_width=DESCRIPTION_WIDTH))
    slider = dict(
        layout=layout, style=SliderStyle(description_width=DESCRIPTION_WIDTH), continuous_update=True
    )
    controls = _menus(v, menu)
    # Dataset names are long: the drop-down gets the column's whole width under its heading.
    controls["measured"] = w.Dropdown(
        options=[NONE, *datasets],
        value=v["measured"],
        layout=layout,
        style=DescriptionStyle(description_width="0px"),
    )
    controls.update(_sliders(v, slider))
    return controls


def _menus(v: dict[str, Any], menu: dict[str, Any]) -> dict[str, w.Widget]:
    links = catalog.NETWORKS.names()
    intra = [n for n in links if catalog.network(n).kind == "intra"]
    workloads = catalog.WORKLOADS.names()
    if v["workload"] not in workloads:
        workloads.append(v["workload"])
    return {
        "workload": w.Dropdown(
            options=workload_options(workloads), value=v["workload"], description="Workload", **menu
        ),
        "gpu": w.Dropdown(options=catalog.GPUS.names(), value=v["gpu"], description="GPU", **menu),
        "network": w.Dropdown(options=links, value=v["network"], description="Network", **menu),
        "intra_link": w.Dropdown(options=intra, value=v["intra_link"], description="Intra-node link", **menu),
        "algorithm": w.Dropdown(
            # NCCL's choice first: the default, and what data-parallel GPU training runs
            options=[
                (_ALGORITHM_LABELS.get(a, a), a)
                for a in sorted(ALGORITHMS["allreduce"], key=lambda a: a != "nccl")
            ],
            value=v["algorithm"],
            description="Algorithm",
            **menu,
        ),
        "precision": w.Dropdown(
            options=validation.supported_precisions(catalog.gpu(v["gpu"])),
            value=v["precision"],
            description="Precision",
            **menu,
        ),
        "storage": w.Dropdown(
            options=[NONE, *catalog.STORAGE.names()],
            value=v["storage"],
            description="Input from",
            **menu,
        ),
    }


def _sliders(v: dict[str, Any], slider: dict[str, Any]) -> dict[str, w.Widget]:
    def choices(name: str, options: Sequence[int], description: str) -> w.SelectionSlider:
        return w.SelectionSlider(
            options=[(str(o), o) for o in options],
            value=nearest(options, v[name]),
            description=description,
            **slider,
        )

    def log_slider(value: float, low: int, high: int, description: str) -> w.FloatLogSlider:
        # step=None: no snapping, so a preset's exact figure (25GbE's 3.125 GB/s) survives the
        # browser's first sync instead of becoming the nearest step (3.09).
        return w.FloatLogSlider(
            value=value, base=10, min=low, max=high, step=None, readout_format=".4g",
            description=description, **slider,
        )  # fmt: skip

    return {
        "gpus": choices("gpus", GPU_COUNTS, "GPUs"),
        "batch_size": choices("batch_size", BATCH_SIZES, "Batch/GPU"),
        "bandwidth": log_slider(v["bandwidth"], -2, 3, "Bandwidth (GB/s)"),
        "latency": log_slider(v["latency"] * 1e6, -1, 4, "Latency (µs)"),
        "gpus_per_node": choices("gpus_per_node", GPUS_PER_NODE, "GPUs/node"),
        "pue": w.FloatSlider(
            value=v["pue"],
            min=1.0,
            max=2.0,
            step=0.05,
            readout_format=".2f",
            description="PUE",
            **{**slider, "continuous_update": False},
        ),
    }


def control_panel(controls: dict[str, w.Widget], sections: Sequence[tuple] = SECTIONS) -> w.VBox:
    """The controls in a column under their headings (:data:`SECTIONS`)."""
    layout, style = w.Layout(), HTMLStyle()  # shared by the headings
    children: list[w.Widget] = []
    for heading, names in sections:
        children.append(w.HTML(f"<b>{heading}</b>", layout=layout, style=style))
        children.extend(controls[n] for n in names)
    return w.VBox(children, layout=w.Layout(width=f"{CONTROL_WIDTH}px", max_width="100%"))
