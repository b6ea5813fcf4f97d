"""The strategy advisor's widget: ipywidgets controls over :func:`dlexplore.model.strategy.advise`, the
ranked table and the size of the time-energy Pareto front. The explorer opens it under itself
(:meth:`dlexplore.widgets.Explorer.open_advisor`).
"""

from __future__ import annotations

import pandas as pd

from .. import catalog, validation
from ..errors import DlexploreError
from ..model.strategy import advise, pareto_configurations

__all__ = ["AdvisorWidget"]


def _table_html(frame: pd.DataFrame, top: int) -> str:
    shown = frame.head(top).copy()
    shown["mem_total"] = shown["mem_total"] / 2**30
    shown = shown[
        [
            "dp",
            "tp",
            "pp",
            "micro_batch",
            "recompute",
            "zero",
            "step_time",
            "throughput",
            "mem_total",
            "energy_per_step",
        ]
    ]
    shown.columns = [
        "dp",
        "tp",
        "pp",
        "micro-batch",
        "recompute",
        "ZeRO",
        "step (s)",
        "samples/s",
        "memory (GiB)",
        "energy/step (J)",
    ]
    return shown.to_html(index=False, float_format=lambda v: f"{v:.4g}")


class AdvisorWidget:
    """ipywidgets controls (workload, GPUs, GPU, precision, network, GPUs per node, global batch,
    rows) over :func:`advise` (``intra_link``: the link inside a node): the ranked table and the
    size of the Pareto front. Display ``.box`` (or the widget itself in Jupyter); :meth:`update`
    recomputes, as the "advise" button does.

    The precision drop-down offers what the GPU computes in; ``precision=None`` starts with the
    fastest 16-bit one it has (bf16, else fp16, else fp32), so that a P100 starts in fp16.
    """

    def __init__(
        self,
        workload: str = "gpt2-xl",
        gpus: int = 16,
        gpu: str = "A100-80GB",
        network: str = "IB-HDR",
        batch_size: int = 64,
        precision: str | None = None,
        top: int = 10,
        gpus_per_node: int = 8,
        intra_link: str = "NVLink3",
    ):
        import ipywidgets as w

        from ..model.compute import normalize_precision

        dev = catalog.gpu(gpu)
        supported = validation.supported_precisions(dev)
        if precision is None:
            precision = next(p for p in ("bf16", "fp16", "fp32") if p in supported)
        precision = validation.precision_for(dev, normalize_precision(precision))
        # CNNs are listed too: the advisor then varies micro-batch and ZeRO stage only.
        names = list(catalog.workloads()["name"])
        if workload not in names:
            names.append(workload)
        self.workload = w.Dropdown(options=names, value=workload, description="workload")
        self.gpus = w.BoundedIntText(
            value=validation.gpu_count("gpus", gpus), min=1, max=validation.MAX_GPUS, description="GPUs"
        )
        self.gpu = w.Dropdown(options=list(catalog.gpus()["name"]), value=dev.name, description="GPU")
        nets = catalog.networks()
        networks = list(nets.loc[nets["kind"] == "network", "name"])
        self.network = w.Dropdown(
            options=networks, value=catalog.network(network).name, description="network"
        )
        self.gpus_per_node = w.BoundedIntText(
            value=validation.gpu_count("gpus_per_node", gpus_per_node), min=1, max=64, description="GPUs/node"
        )
        self.batch_size = w.BoundedIntText(
            value=validation.batch_size("batch_size", batch_size),
            min=1,
            max=1 << 20,
            description="global batch",
        )
        self.precision = w.Dropdown(options=supported, value=precision, description="precision")
        self.top = w.IntSlider(value=top, min=1, max=50, description="rows")
        self.button = w.Button(description="advise", button_style="primary")
        self.summary = w.HTML()
        self.table = w.HTML()
        self.button.on_click(lambda _: self.update())
        self.gpu.observe(lambda _: self._offer_precisions(), names="value")
        controls = w.HBox(
            [
                w.VBox([self.workload, self.gpus, self.gpu, self.precision]),
                w.VBox([self.network, self.gpus_per_node, self.batch_size, self.top, self.button]),
            ],
            layout=w.Layout(flex_flow="row wrap"),
        )
        self.box = w.VBox([controls, self.summary, self.table])
        #: The link inside a node (not a control: the explorer passes its own).
        self.intra_link = catalog.network(intra_link).name
        self.frame: pd.DataFrame | None = None
        self.update()

    def _offer_precisions(self) -> None:
        supported = validation.supported_precisions(catalog.gpu(self.gpu.value))
        current = self.precision.value
        self.precision.options = supported
        self.precision.value = (
            current if current in supported else next(p for p in ("bf16", "fp16", "fp32") if p in supported)
        )

    def update(self) -> None:
        """Rerun :func:`advise` with the controls' values and refresh the summary and table."""
        import html

        try:
            self.frame = advise(
                self.workload.value,
                self.gpus.value,
                self.gpu.value,
                self.network.value,
                batch_size=self.batch_size.value,
                precision=self.precision.value,
                gpus_per_node=self.gpus_per_node.value,
                intra_link=self.intra_link,
            )
        except DlexploreError as err:
            self.frame = None
            self.summary.value = f"<b>No configuration:</b> {html.escape(str(err))}"
            self.table.value = ""
            return
        a = self.frame.attrs
        front = pareto_configurations(self.frame)
        self.summary.value = (
            f"{a['evaluated']} configurations evaluated, {a['dropped']} dropped (do not fit in "
            f"memory); {len(front)} on the time-energy Pareto front. Energy: "
            f"{html.escape(str(self.frame['energy_model'].iloc[0]))}."
        )
        self.table.value = _table_html(self.frame, self.top.value)

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)
