"""The explorer: ipywidgets controls driving the bokeh figures of :mod:`dlexplore.plots`, with the
published measurement of the chosen workload and GPU laid over the prediction from the start.

The slider's path is hot, so the work is split by what a control changes:

- the GPU slider only picks another of the GPU counts already predicted: no model call;
- any other control calls :func:`dlexplore.predict` once, vectorised over all GPU counts (with the
  bucket schedule), a few milliseconds;
- the figures are built once; every change replaces ``ColumnDataSource.data`` (and a few titles),
  which each figure's :class:`~dlexplore.widgets._bokeh.BatchedBokehModel` sends to the browser as
  one document patch. This also works in Voila, where ``push_notebook`` does not.

Measured datasets are loaded once, when the explorer is made (or when one is added), never on a
slider move. The measured side (matching, adopting a setup) is in
:mod:`~dlexplore.widgets._measured_side`, calibrating in :mod:`~dlexplore.widgets._calibration`, the
controls' construction in :mod:`~dlexplore.widgets._controls` and the page's layout (where another
panel goes: :meth:`Explorer.add_panel`) in :mod:`~dlexplore.widgets._layout`.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Mapping
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import xarray as xr

from .. import catalog, validation
from ..errors import DlexploreError
from ..model import predict
from ..model.comm import normalize_algorithm
from ..model.compute import normalize_precision
from ..model.energy import energy
from ..model.time_to_accuracy import time_to_accuracy
from ..plots import GPU_COUNTS, ExplorerFigures, headline
from ..plots.convergence import TimeToAccuracyFigure
from ..plots.figures import MIN_WIDTH
from ..plots.notebook import load_bokehjs
from ._bokeh import BatchedBokehModel
from ._controls import BATCH_SIZES, GPUS_PER_NODE, NONE, control_panel, make_controls, nearest
from ._layout import explorer_box, panel_grid
from ._measured_side import MeasuredSide

__all__ = ["Explorer", "BATCH_SIZES", "GPUS_PER_NODE", "load_bokehjs"]

#: What the explorer starts with where neither the caller nor a matching measurement says.
DEFAULTS = {
    "network": "25GbE",
    "batch_size": 64,
    "gpus_per_node": 1,
    "intra_link": "PCIe3",
    "precision": "fp32",
    # NCCL's own choice of ring or tree, as dlexplore.predict: what DDP and Horovod run on GPUs
    "algorithm": "nccl",
}


class Explorer(MeasuredSide):
    """Interactive predicted-vs-measured explorer of data-parallel training.

    Controls: GPUs (1 to 1024), per-GPU batch size, network bandwidth (GB/s) and latency (µs), GPUs
    per node; workload, GPU, network preset (sets bandwidth and latency), intra-node link,
    allreduce algorithm (parameter server included), precision (those the GPU computes in), and
    the measured dataset to overlay. Plots: throughput vs GPUs (predicted, measured, ideal, and the
    calibrated band), the step-time breakdown per GPU count, memory per GPU against capacity, and
    the gradient-bucket allreduces of one step. A headline says the throughput, the bottleneck and
    what would help; a bar above the plots says what is measured, the prediction's error on it, and
    calibrates to it.

    Parameters
    ----------
    workload, gpu, network:
        Catalog ids (see ``dlexplore catalog``) or, for ``workload``, a ``transformer:L,h,a,s,V`` spec.
    gpus:
        The GPU count selected at start (rounded to a power of two).
    batch_size, gpus_per_node, intra_link, precision:
        Samples per GPU per step, GPUs sharing a node and the link between them, training
        precision. Left out (None), they come from the measurement shown, else :data:`DEFAULTS`.
    algorithm:
        Gradient allreduce algorithm. Left out, the one the measurement shown ran where it names
        one (a Horovod ring), else ``"nccl"``: NCCL's own choice of ring or tree and protocol by
        message size (:func:`dlexplore.predict`'s default too: PyTorch DDP and Horovod on GPUs
        reduce through NCCL).
    measured:
        ``"auto"`` (default): the bundled (or added) measurement of this workload on this GPU is
        shown, its setup adopted for what the caller left out, and another one is matched whenever
        the workload or GPU changes (the bar says when none matches). Or a bundled dataset name
        (``dlexplore measured list``), a CSV path, an ``xarray.Dataset`` from
        :mod:`dlexplore.measured`, or a list of them: the first is shown at start, and matching
        goes on as with ``"auto"``. ``None``: no measurement, and none is matched.
    **model_kwargs:
        Passed to :func:`dlexplore.predict` unchanged (``optimizer``, ``servers``, ``bucket_size``,
        ``overlap``, ``compute_efficiency``, ``storage`` ...).

    Display the explorer by making it the last expression of a cell, or use :attr:`widget`.
    """

    def __init__(
        self,
        workload: str = "resnet50",
        gpu: str = "V100-16GB",
        network: str | None = None,
        *,
        gpus: int = 8,
        batch_size: int | None = None,
        gpus_per_node: int | None = None,
        intra_link: str | None = None,
        algorithm: str | None = None,
        precision: str | None = None,
        measured: str | os.PathLike | xr.Dataset | Iterable[Any] | None = "auto",
        storage: str | None = None,
        pue: float = 1.0,
        **model_kwargs: Any,
    ):
        for name in ("gpus", "batch_size", "gpus_per_node", "bandwidth", "latency", "buckets"):
            if name in model_kwargs:
                raise DlexploreError(f"Explorer: {name!r} is a control; pass it as gpus=, batch_size= ...")
        given = {
            k: v
            for k, v in dict(
                network=network,
                batch_size=batch_size,
                gpus_per_node=gpus_per_node,
                intra_link=intra_link,
                precision=precision,
                algorithm=algorithm,
            ).items()
            if v is not None
        }
        self._check(gpus=gpus, pue=pue, **given)
        self._model_kwargs = dict(model_kwargs)
        self._traces: dict[str, dict[str, np.ndarray]] = {}
        wl, dev = catalog.workload(workload), catalog.gpu(gpu)
        self._custom_workloads = {} if wl.name in catalog.WORKLOADS else {wl.name: wl}
        first = self._init_measured(measured, wl.name, dev.name, given)
        settings = {**DEFAULTS, **first["setup"], **given}
        if "workload" in first["setup"]:
            wl = catalog.workload(first["setup"]["workload"])
        if "gpu" in first["setup"]:
            dev = catalog.gpu(first["setup"]["gpu"])
        settings["precision"] = validation.precision_for(dev, normalize_precision(settings["precision"]))
        net = catalog.network(settings["network"])
        self.controls = make_controls(
            datasets=list(self._datasets),
            workload=wl.name,
            gpu=dev.name,
            network=net.name,
            intra_link=catalog.network(settings["intra_link"]).name,
            algorithm=normalize_algorithm(settings["algorithm"]),
            precision=settings["precision"],
            gpus=gpus,
            batch_size=settings["batch_size"],
            gpus_per_node=settings["gpus_per_node"],
            bandwidth=net.bandwidth_gbs,
            latency=net.latency_s,
            storage=NONE if storage is None else catalog.storage(storage).name,
            pue=float(pue),
            measured=first["name"],
        )
        self.figures = ExplorerFigures(GPU_COUNTS)
        # a fifth panel (add_panel): time to accuracy over the same GPU counts and batch size
        self.time_to_accuracy = TimeToAccuracyFigure(
            width=None, height=self.figures.throughput.height, min_width=MIN_WIDTH
        )
        self.sources = self.figures.sources
        self.headline = w.HTML(layout=w.Layout())
        self.headline.add_class("dlx-headline")
        self.prediction: xr.Dataset | None = None
        self._energy: xr.Dataset | None = None
        self._holding = 0
        self._dirty: set[str] = set()
        self._make_measured_bar(first["note"])
        self._views: list[BatchedBokehModel] = []
        self._tta_view: BatchedBokehModel | None = None
        self._wire()
        self._recompute(measured_changed=True)
        self._build_page()

    # -- public ---------------------------------------------------------------------------------

    @property
    def headline_text(self) -> str:
        """The headline (throughput, efficiency, bottleneck and what would help, energy) as text."""
        text = headline(self.prediction, self.selected_gpus)
        if self._energy is not None:
            point = self._energy.sel(gpus=self.selected_gpus)
            text += (
                f" Energy: {float(point.energy_sample):.3g} J per sample, "
                f"{float(point.power_average) / 1e3:.3g} kW on average "
                f"(PUE {self.controls['pue'].value:.2f})."
            )
        return text

    @property
    def selected_gpus(self) -> int:
        """The GPU count the GPU slider selects."""
        return int(self.controls["gpus"].value)

    @property
    def settings(self) -> dict[str, Any]:
        """The controls' values (``latency`` in s, ``bandwidth`` in GB/s), measured excluded."""
        values = {name: c.value for name, c in self.controls.items() if name != "measured"}
        values["latency"] = float(values["latency"]) * 1e-6
        return values

    def set(self, **values: Any) -> Explorer:
        """Set several controls at once (one model call): ``set(gpus=64, workload="vgg16")``.

        Keys are the names in :attr:`controls`; ``latency`` is in seconds, ``bandwidth`` in GB/s.
        """
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise DlexploreError(
                f"Explorer.set: unknown control(s) {unknown}; expected some of {sorted(self.controls)}"
            )
        with self._hold():
            for name, value in values.items():
                self.controls[name].value = self._control_value(name, value)
        return self

    def add_panel(self, widget: w.Widget, *, first: bool = False) -> None:
        """Put one more panel (any widget, e.g. ``jupyter_bokeh.BokehModel(figure)``) in the grid
        of plots, last (or ``first``); it gets a column of the grid like the figures."""
        children = list(self._grid.children)
        self._grid.children = [widget, *children] if first else [*children, widget]

    def add_trace(self, trace_or_breakdown: Any, label: str | None = None) -> str:
        """Lay a measured step-time breakdown beside the predicted bars; returns its label.

        ``trace_or_breakdown`` is a :class:`dlexplore.traces.Trace` (its
        :meth:`~dlexplore.traces.Trace.breakdown` is taken), a breakdown dataset on (rank, step),
        or what :func:`dlexplore.load_trace` reads. The bar is the mean over ranks and steps, in
        the explorer's stack (compute, communication overlapped by compute, exposed
        communication, data loading) plus memcpy and idle time, hatched, on an axis factor
        ``"<ranks>: <label>"`` right after the predicted bar for that many GPUs. The measured
        setup is not adopted: compare it with a prediction of the same workload and hardware.
        Adding a label again replaces its bar.
        """
        from ..plots.timeline import measured_step_columns
        from ..traces import Trace, load_trace

        data = trace_or_breakdown
        if not isinstance(data, (Trace, xr.Dataset)):
            data = load_trace(data)
        if isinstance(data, Trace):
            default = Path(data.files[0]).parent.name if data.files else data.format
            gpus = data.world_size
            ds = data.breakdown()
        else:
            default = str(data.attrs.get("name") or "measured")
            gpus = None
            ds = data
        name = str(label or default or "trace")
        self._traces[name] = measured_step_columns(ds, label=name, gpus=gpus)
        merged = {
            key: np.concatenate([columns[key] for columns in self._traces.values()])
            for key in next(iter(self._traces.values()))
        }
        with self._batched():
            self.figures.show_measured_steps(merged)
        return name

    def open_advisor(self):
        """Show the hybrid-parallelism strategy advisor under the explorer, with this workload,
        GPU, precision, network, GPU count and global batch (see
        :class:`dlexplore.widgets.advisor.AdvisorWidget`); returns it."""
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
        return advisor

    def _repr_mimebundle_(self, **kwargs: Any):
        load_bokehjs(components=("bokeh",))  # the figures use core models only: 1.3 of 2.1 MB
        return self.widget._repr_mimebundle_(**kwargs)

    # -- controls -------------------------------------------------------------------------------

    @staticmethod
    def _check(**values: Any) -> None:
        """The constructor's values, refused in words before anything is built."""
        for name in ("gpus", "gpus_per_node"):
            if name in values:
                validation.count(name, values[name], maximum=max(GPU_COUNTS))
        if "batch_size" in values:
            validation.count("batch_size", values["batch_size"], maximum=max(BATCH_SIZES), units="samples")
        validation.number("pue", values["pue"], minimum=1.0, maximum=2.0)

    def _control_value(self, name: str, value: Any) -> Any:
        if name == "latency":
            return validation.nonnegative("latency", value, units="s") * 1e6
        if name == "bandwidth":
            return validation.positive("bandwidth", value, units="GB/s")
        if name == "gpus":
            return nearest(GPU_COUNTS, validation.count("gpus", value, maximum=max(GPU_COUNTS)))
        if name == "batch_size":
            return nearest(BATCH_SIZES, validation.count("batch_size", value, maximum=max(BATCH_SIZES)))
        if name == "gpus_per_node":
            return nearest(
                GPUS_PER_NODE, validation.count("gpus_per_node", value, maximum=max(GPUS_PER_NODE))
            )
        if name == "workload":
            wl = catalog.workload(value)
            if wl.name not in self.controls["workload"].options:
                self._custom_workloads[wl.name] = wl
                self.controls["workload"].options = [*self.controls["workload"].options, wl.name]
            return wl.name
        if name == "gpu":
            return catalog.gpu(value).name
        if name in ("network", "intra_link"):
            return catalog.network(value).name
        if name == "algorithm":
            return normalize_algorithm(value)
        if name == "precision":
            return validation.precision_for(
                catalog.gpu(self.controls["gpu"].value), normalize_precision(value)
            )
        if name == "measured":
            return NONE if value is None else self.add_measured(value, show=False)
        if name == "pue":
            return validation.number("pue", value, minimum=1.0, maximum=2.0)
        return value

    def _build_page(self) -> None:
        # After the first data: a view sends its document whole when made, and only changes after.
        shared = w.Layout()  # one layout model for the four, rather than one each
        self._views = [BatchedBokehModel(fig, layout=shared) for fig in self.figures.figures]
        self._grid = panel_grid(self._views)
        self._tta_view = BatchedBokehModel(self.time_to_accuracy.figure, layout=shared)
        self.add_panel(self._tta_view)
        self.advisor_box = w.VBox([])
        self.widget = explorer_box(
            self.headline, self.bar, control_panel(self.controls), self._grid, self.advisor_box
        )
        self._add_advisor_opener()

    def _add_advisor_opener(self) -> None:
        # Models larger than one GPU: the strategy advisor (tensor, pipeline, ZeRO), built on demand
        # because it evaluates hundreds of configurations.
        opener = w.Button(
            description="Open the strategy advisor (dp x tp x pp, ZeRO)", layout=w.Layout(width="auto")
        )
        opener.on_click(lambda _: self.open_advisor())
        self.advisor_box.children = (opener,)

    def _wire(self) -> None:
        self.controls["gpus"].observe(self._on_gpus, names="value")
        self.controls["network"].observe(self._on_network, names="value")
        self.controls["measured"].observe(self._on_measured, names="value")
        for name, control in self.controls.items():
            if name not in ("gpus", "network", "measured"):
                control.observe(lambda change, name=name: self._changed(name), names="value")

    def _offer_precisions(self) -> None:
        """The precision drop-down lists what the GPU computes in; an unsupported choice falls back
        (bf16 to fp16, else fp32), and the bar says so."""
        control = self.controls["precision"]
        supported = validation.supported_precisions(catalog.gpu(self.controls["gpu"].value))
        current = control.value
        if current not in supported:
            fallback = "fp16" if current == "bf16" and "fp16" in supported else "fp32"
            self._note(f"{self.controls['gpu'].value} has no {current}: precision set to {fallback}.")
            control.options = supported
            control.value = fallback
        else:
            control.options = supported
            control.value = current

    # -- reacting -------------------------------------------------------------------------------

    @contextmanager
    def _hold(self):
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._dirty:
                dirty, self._dirty = self._dirty, set()
                if dirty == {"gpus"}:
                    self._select()
                else:
                    self._recompute(measured_changed="measured" in dirty)

    @contextmanager
    def _batched(self):
        """Every figure's changes inside the block reach the browser as one message per figure."""
        with ExitStack() as stack:
            for view in self._views:
                stack.enter_context(view.batch())
            yield

    def _batch(self, figure: Any):
        """The figure's changes inside the block reach the browser as one message (none before the
        widgets exist)."""
        views = dict(zip(self.figures.figures, self._views, strict=False))
        if self._tta_view is not None:
            views[self.time_to_accuracy.figure] = self._tta_view
        return views[figure].batch() if figure in views else nullcontext()

    def _send_selection(self, skip: int = 0) -> None:
        """The selected GPU count in every figure (after the first ``skip``), each figure's message
        sent as soon as it is made: the throughput plot reaches the browser while the others are
        worked out."""
        for figure, update in self.figures.selection_updates(self.prediction, self.selected_gpus)[skip:]:
            with self._batch(figure):
                update()

    def _changed(self, name: str) -> None:
        with self._hold():
            self._dirty.add(name)
            if name == "gpu":
                self._offer_precisions()
            if name in ("workload", "gpu") and not self._adopting:
                self._forget_calibration(f"the {name} changed")
                self._match()
            elif name == "precision" and not self._adopting:
                self._forget_calibration("the precision changed")
                self._readopt()

    def _on_gpus(self, change: Mapping[str, Any]) -> None:
        if self._holding:
            self._dirty.add("gpus")
        else:
            self._select()

    def _apply_network(self) -> None:
        net = catalog.network(self.controls["network"].value)
        self.controls["bandwidth"].value = net.bandwidth_gbs
        self.controls["latency"].value = net.latency_s * 1e6

    def _on_network(self, change: Mapping[str, Any]) -> None:
        with self._hold():
            self._dirty.add("network")
            self._apply_network()

    def _predict(self, **overrides: Any) -> xr.Dataset:
        c = self.controls
        workload = c["workload"].value
        args = dict(
            gpus=list(GPU_COUNTS),
            batch_size=int(c["batch_size"].value),
            bandwidth=float(c["bandwidth"].value),
            latency=float(c["latency"].value) * 1e-6,
            gpus_per_node=int(c["gpus_per_node"].value),
            intra_link=c["intra_link"].value,
            algorithm=c["algorithm"].value,
            precision=c["precision"].value,
            buckets=True,
            storage=None if c["storage"].value == NONE else c["storage"].value,
            **self._model_kwargs,
        )
        args.update(overrides)
        where = (self._custom_workloads.get(workload, workload), c["gpu"].value, c["network"].value)
        ds = predict(*where, **args)
        if not overrides and self.calibration is not None and self.calibration.kind == "training":
            # the calibrated curve carries its prediction interval (dlexplore.fit.band), which the
            # band drawn includes (_show_band)
            ds = self.calibration.add_band(
                ds,
                lambda **p: predict(*where, **{**args, "buckets": False, **p}),
                workload=workload,
                precision=c["precision"].value,
            )
        return ds

    def _recompute(self, measured_changed: bool) -> None:
        try:
            self.prediction = self._predict()
        except DlexploreError as err:
            message = html.escape(str(err))
            self.headline.value = f"<span style='color:#D55E00'>Cannot predict: {message}</span>"
            return
        # The plots first, each figure's patch on its way while the next is worked out; the bar, the
        # energy and the headline after.
        marks = self._marks()
        with self._batch(self.figures.throughput):
            self.figures.show_line(self.prediction)
            self.figures.show_measured(marks)
            self._show_band()
            self.figures.selection_updates(self.prediction, self.selected_gpus)[0][1]()
        self._send_selection(skip=1)
        self._write_status(marks, measured_changed)
        # Only the four phase times: energy() on the whole prediction, bucket schedule included,
        # took most of a batch-slider move.
        phases = self.prediction[["time_compute", "time_comm_exposed", "time_io_exposed", "step_time"]]
        self._energy = energy(phases, pue=float(self.controls["pue"].value))
        self._write_headline()
        with self._batch(self.time_to_accuracy.figure):
            self._show_time_to_accuracy()

    def _show_time_to_accuracy(self) -> None:
        """Time to accuracy against GPUs at this batch size, when the workload has convergence
        parameters (data/catalog/convergence.csv); an empty plot that says why otherwise."""
        try:
            self.time_to_accuracy.show(time_to_accuracy(self.prediction, energy=self._energy))
        except DlexploreError:
            self.time_to_accuracy.show_nothing(
                f"no convergence parameters for {self.controls['workload'].value}"
            )

    def _select(self) -> None:
        if self.prediction is None:
            return
        self._send_selection()
        self._write_headline()

    def _write_headline(self) -> None:
        text = html.escape(self.headline_text)
        text = text.replace("Does NOT fit", "<b style='color:#D55E00'>Does NOT fit") + (
            "</b>" if "Does NOT fit" in text else ""
        )
        self.headline.value = f"<div style='font-size:14px; line-height:1.4'>{text}</div>"
