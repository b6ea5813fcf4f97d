"""The explorer's hybrid parallelism: tp, pp, micro-batch, ZeRO, recompute, sequence parallelism
and the pipeline schedule on the sliders, for transformer workloads.

A mixin of :class:`dlexplore.widgets.Explorer`. At tp = pp = 1, no ZeRO, no recompute and one
micro-batch per step the data-parallel model draws (its gradient buckets overlapping the backward
are the one-step view); any other choice switches the plots to the hybrid model
(:func:`dlexplore.plots.hybrid.hybrid_grid` over :func:`dlexplore.model.parallel.evaluate_hybrid`):
the step stack gains tensor-parallel, pipeline and bubble parts, the one-step view splits the time
by kind of traffic (data, tensor, pipeline parallel; hidden and exposed; MiB per GPU), the memory
view lists every term against the capacity. A configuration that cannot run is not hidden: its GPU
counts are gaps in the line and the section says why in words. The strategy advisor's best
configurations are one click from the sliders (:meth:`HybridSide.apply_configuration`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import ipywidgets as w
from ipywidgets.widgets.widget_description import DescriptionStyle
from ipywidgets.widgets.widget_int import SliderStyle

from .. import catalog
from ..errors import DlexploreError
from ..plots.hybrid import hybrid_problems, is_hybrid

__all__ = ["HybridSide", "HYBRID_CONTROLS", "HYBRID_DEFAULTS", "hybrid_controls"]

#: The hybrid controls, in the panel's order.
HYBRID_CONTROLS = ("tp", "pp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule")
#: Plain data parallelism: the values that keep the data-parallel model drawing.
HYBRID_DEFAULTS = {
    "tp": 1,
    "pp": 1,
    "micro_batch": 0,
    "zero": 0,
    "recompute": "none",
    "sequence_parallel": False,
    "schedule": "1f1b",
}
_DEGREES = (1, 2, 4, 8, 16, 32, 64)
_MICRO = (0, 1, 2, 4, 8, 16, 32, 64)
#: Model chunks per GPU with the interleaved schedule.
VIRTUAL_STAGES = 2


def hybrid_controls(values: Mapping[str, Any], width: str, description_width: str) -> dict[str, w.Widget]:
    """The hybrid controls set to ``values`` (names of :data:`HYBRID_CONTROLS`)."""
    layout = w.Layout(width=width, max_width="100%")
    slider = dict(
        layout=layout, style=SliderStyle(description_width=description_width), continuous_update=True
    )
    menu = dict(layout=layout, style=DescriptionStyle(description_width=description_width))
    v = {**HYBRID_DEFAULTS, **values}
    return {
        "tp": w.SelectionSlider(
            options=[(str(d), d) for d in _DEGREES], value=v["tp"], description="tp (tensor)", **slider
        ),
        "pp": w.SelectionSlider(
            options=[(str(d), d) for d in _DEGREES], value=v["pp"], description="pp (pipeline)", **slider
        ),
        "micro_batch": w.SelectionSlider(
            options=[("all", 0), *((str(m), m) for m in _MICRO[1:])],
            value=v["micro_batch"],
            description="Micro-batch",
            **slider,
        ),
        "zero": w.Dropdown(
            options=[("0 (none)", 0), ("1 (optimizer)", 1), ("2 (+ gradients)", 2), ("3 (+ parameters)", 3)],
            value=v["zero"],
            description="ZeRO stage",
            **menu,
        ),
        "recompute": w.Dropdown(
            options=["none", "selective", "full"], value=v["recompute"], description="Recompute", **menu
        ),
        "sequence_parallel": w.Checkbox(
            value=bool(v["sequence_parallel"]),
            description="Sequence parallelism",
            indent=False,
            layout=layout,
        ),
        "schedule": w.Dropdown(
            options=[
                ("1F1B", "1f1b"),
                ("GPipe", "gpipe"),
                (f"interleaved (v={VIRTUAL_STAGES})", "interleaved"),
            ],
            value=v["schedule"],
            description="Schedule",
            **menu,
        ),
    }


class HybridSide:
    """The hybrid half of the explorer (module docstring)."""

    def _make_hybrid_note(self) -> w.HTML:
        self.hybrid_note = w.HTML(layout=w.Layout(width="auto"))
        self.hybrid_note.add_class("dlx-hybrid-note")
        self.apply_box = w.VBox([])
        return self.hybrid_note

    @property
    def hybrid_settings(self) -> dict[str, Any]:
        """The hybrid controls' values (``micro_batch`` 0: the whole replica batch at once)."""
        return {name: self.controls[name].value for name in HYBRID_CONTROLS}

    def _transformer(self) -> bool:
        name = self.controls["workload"].value
        return catalog.workload(self._custom_workloads.get(name, name)).kind == "transformer"

    def _hybrid_active(self) -> bool:
        """Whether the hybrid model draws: a transformer, and not plain data parallelism."""
        if not self._transformer():
            return False
        s = self.hybrid_settings
        return any(s[k] != HYBRID_DEFAULTS[k] for k in HYBRID_CONTROLS if k != "schedule") or (
            s["pp"] > 1 and s["schedule"] != "1f1b"
        )

    def _predict_hybrid(self, settings: Mapping[str, Any], batch_sizes: Any, gpus: Any) -> Any:
        """The hybrid model on the slider grid (:func:`dlexplore.plots.hybrid.hybrid_grid`)."""
        from ..model.parallel import CALIBRATED_PARAMETERS
        from ..plots.hybrid import hybrid_grid

        s = self.hybrid_settings
        params = {
            k: v
            for k, v in settings.items()
            if k in CALIBRATED_PARAMETERS and k not in ("bandwidth", "latency")
        }
        return hybrid_grid(
            settings["workload"],
            settings["gpu"],
            settings["network"],
            gpus=gpus,
            batch_sizes=batch_sizes,
            tp=s["tp"],
            pp=s["pp"],
            micro_batch=s["micro_batch"],
            zero=s["zero"],
            recompute=s["recompute"],
            sequence_parallel=s["sequence_parallel"],
            schedule=s["schedule"],
            virtual_stages=VIRTUAL_STAGES,
            precision=settings["precision"],
            gpus_per_node=settings["gpus_per_node"],
            intra_link=settings["intra_link"],
            bandwidth=settings.get("bandwidth"),
            latency=settings.get("latency"),
            params=params,
        )

    def _write_hybrid_note(self) -> None:
        """Which model draws, and the GPU counts that cannot run and why."""
        if not self._transformer():
            name = html.escape(str(self.controls["workload"].value))
            self.hybrid_note.value = (
                f"<small>{name} is not a transformer: tensor and pipeline parallelism split "
                "transformer layers, so the data-parallel model draws (ZeRO and the rest apply to "
                "transformers here).</small>"
            )
            for name_ in HYBRID_CONTROLS:
                self.controls[name_].disabled = True
            return
        for name_ in HYBRID_CONTROLS:
            self.controls[name_].disabled = False
        if not is_hybrid(self.prediction):
            self.hybrid_note.value = (
                "<small>Plain data parallelism: the data-parallel model draws (gradient buckets "
                "overlapping the backward). Any other choice here switches to the hybrid model.</small>"
            )
            return
        problems = hybrid_problems(self.prediction)
        s = self.hybrid_settings
        batch = self.controls["batch_size"].value
        m = s["micro_batch"]
        micro = "the whole replica batch" if not m else f"{m} sample{'s' if m != 1 else ''}"
        text = (
            f"<small>Hybrid model: global batch = GPUs x {batch}; each data-parallel replica "
            f"(GPUs / (tp x pp)) takes its share in micro-batches of {micro}.</small>"
        )
        if problems:
            text += (
                "<br><small><b>Cannot run</b> (gaps in the line): "
                + html.escape("; ".join(problems))
                + "</small>"
            )
        if self.calibration is not None:
            text += f"<br><small>{html.escape(self._models_apart())}</small>"
        self.hybrid_note.value = text

    def _models_apart(self) -> str:
        """How far the hybrid model is from the data-parallel one the calibration was fitted with, at
        tp = pp = 1 and the GPU count and batch selected (their compute is modelled differently)."""
        from ..model import predict

        settings = self._predict_settings()
        g, b = self.selected_gpus, int(self.controls["batch_size"].value)
        key = id(self._sweep)  # once per grid: the GPU count and batch it was first shown at
        if getattr(self, "_apart", (None, ""))[0] == key:  # the same grid and point: said already
            return self._apart[1]
        try:
            plain = float(predict(**settings, gpus=g, batch_size=b)["step_time"])
            same = self._predict_hybrid_plain(settings, g, b)
        except DlexploreError:
            return ""
        self._apart = (key, self._models_apart_text(g, same / plain - 1))
        return self._apart[1]

    @staticmethod
    def _models_apart_text(g: int, apart: float) -> str:
        return (
            f"Calibrated with the data-parallel model: at tp = pp = 1 on {g} GPU{'s' if g != 1 else ''} "
            f"the hybrid model's step differs by {'under 1%' if abs(apart) < 0.005 else f'{apart:+.0%}'} "
            "(its compute is modelled per stage), and its "
            "extrapolations carry that difference too."
        )

    def _predict_hybrid_plain(self, settings: Mapping[str, Any], gpus: int, batch: int) -> float:
        """The hybrid model's step time (s) at tp = pp = 1, one micro-batch, no ZeRO or recompute."""
        from ..model.parallel import CALIBRATED_PARAMETERS
        from ..plots.hybrid import hybrid_grid

        params = {
            k: v
            for k, v in settings.items()
            if k in CALIBRATED_PARAMETERS and k not in ("bandwidth", "latency")
        }
        ds = hybrid_grid(
            settings["workload"],
            settings["gpu"],
            settings["network"],
            gpus=[gpus],
            batch_sizes=[batch],
            precision=settings["precision"],
            gpus_per_node=settings["gpus_per_node"],
            intra_link=settings["intra_link"],
            bandwidth=settings.get("bandwidth"),
            latency=settings.get("latency"),
            params=params,
        )
        return float(ds["step_time"].values.ravel()[0])

    # -- the advisor ------------------------------------------------------------------------------

    def open_advisor(self):
        """Show the hybrid-parallelism strategy advisor under the explorer, with this workload,
        GPU, precision, network, GPU count and global batch (see
        :class:`dlexplore.widgets.advisor.AdvisorWidget`), and its best configurations as buttons that set
        the sliders (:meth:`apply_configuration`); returns it."""
        from .advisor import AdvisorWidget

        c = self.controls
        network = c["network"].value
        if catalog.network(network).kind != "network":
            network = "IB-HDR"  # the advisor's nodes talk over a network; an intra link is no option
        advisor = AdvisorWidget(
            workload=c["workload"].value,
            gpus=self.selected_gpus,
            gpu=c["gpu"].value,
            network=network,
            precision=c["precision"].value,
            batch_size=self.selected_gpus * int(c["batch_size"].value),
            gpus_per_node=int(c["gpus_per_node"].value),
            intra_link=c["intra_link"].value,
        )
        self.advisor = advisor
        self.advisor_box.children = (advisor.box,)
        # after the advisor's own handler (registered first): the new table's best rows
        advisor.button.on_click(lambda _: self._offer_advice(advisor))
        self._offer_advice(advisor)
        return advisor

    def apply_configuration(self, row: Mapping[str, Any]) -> None:
        """Set the sliders to one configuration of :func:`dlexplore.advisor.advise` (a row of its
        frame: ``dp``, ``tp``, ``pp``, ``micro_batch``, ``zero``, ``recompute``,
        ``sequence_parallel``): its GPU count and the hybrid controls, in one model call."""
        missing = [k for k in ("dp", "tp", "pp", "micro_batch", "zero", "recompute") if k not in row]
        if missing:
            raise DlexploreError(f"apply_configuration: the row has no {missing}; expected an advise() row")
        tp, pp, dp = int(row["tp"]), int(row["pp"]), int(row["dp"])
        values = {
            "gpus": dp * tp * pp,
            "tp": tp,
            "pp": pp,
            "micro_batch": int(row["micro_batch"]),
            "zero": int(row["zero"]),
            "recompute": str(row["recompute"]),
            "sequence_parallel": bool(row.get("sequence_parallel", False)),
            "schedule": "1f1b",
        }
        for name in ("tp", "pp", "micro_batch"):
            options = [v for _, v in self.controls[name].options]
            if values[name] not in options:
                raise DlexploreError(
                    f"apply_configuration: {name} = {values[name]} is not on the slider ({options})"
                )
        self.set(**values)

    def _offer_advice(self, advisor: Any) -> None:
        """Under the advisor: a button per best configuration that sets the sliders to it."""
        frame = getattr(advisor, "frame", None)
        if frame is None or not len(frame):
            self.apply_box.children = ()
            return
        buttons = []
        for i, row in enumerate(frame.head(3).to_dict(orient="records")):
            label = (
                f"Apply #{i + 1}: tp {row['tp']} pp {row['pp']} dp {row['dp']}, micro-batch "
                f"{row['micro_batch']}, ZeRO {row['zero']}, {row['recompute']}"
            )
            button = w.Button(
                description=label, layout=w.Layout(width="auto"), tooltip="set the explorer's sliders to it"
            )
            button.on_click(lambda _, row=row: self.apply_configuration(row))
            buttons.append(button)
        self.apply_box.children = (
            w.HTML("<b>The advisor's best, on the sliders in one click:</b>"),
            w.HBox(buttons, layout=w.Layout(flex_flow="row wrap")),
        )
