"""The explorer: ipywidgets controls driving the bokeh figures of :mod:`dlexplore.plots`, with the
published measurement of the chosen workload and GPU laid over the prediction from the start.

The slider's path is hot, so the work is split by what a control changes:

- the GPU slider only picks another of the GPU counts already predicted: no model call;
- any other control calls :func:`dlexplore.predict` once, vectorised over all GPU counts (with the
  bucket schedule), a few milliseconds;
- the figures are built once; every change replaces ``ColumnDataSource.data`` (and a few titles),
  which each figure's :class:`~dlexplore.widgets._bokeh.BatchedBokehModel` sends to the browser as
  one document patch. This also works in Voila, where ``push_notebook`` does not.

The batch slider picks a column of a grid predicted once for every batch size of the slider (the
vectorised model costs the same for one batch as for all), so it calls no model either.

Measured datasets and traces are loaded once, when the explorer is made (or when one is added),
never on a slider move. The measured side (matching, adopting a setup) is in
:mod:`~dlexplore.widgets._measured_side`, calibrating in :mod:`~dlexplore.widgets._calibration`,
your own traced runs in :mod:`~dlexplore.widgets._trace_side`, hybrid parallelism in
:mod:`~dlexplore.widgets._hybrid`, the controls' construction in
:mod:`~dlexplore.widgets._controls` and the page's layout (where another panel goes:
:meth:`Explorer.add_panel`) in :mod:`~dlexplore.widgets._layout`.

Kept whole: what is left here is the slider's path itself (holding changes, batching patches, which
work each control's change needs, in what order the figures are sent); split, one change would be
followed across modules.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Mapping
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import ipywidgets as w
import numpy as np
import xarray as xr

from .. import catalog, validation
from ..errors import DlexploreError
from ..model.comm import normalize_algorithm
from ..model.compute import normalize_precision
from ..model.energy import energy
from ..model.time_to_accuracy import time_to_accuracy
from ..plots import GPU_COUNTS, ExplorerFigures, headline
from ..plots.convergence import TimeToAccuracyFigure
from ..plots.figures import MIN_WIDTH
from ..plots.hybrid import hybrid_headline, is_hybrid
from ..plots.notebook import load_bokehjs
from ..plots.overlays import Overlays
from ._bokeh import BatchedBokehModel
from ._controls import (
    BATCH_SIZES,
    DESCRIPTION_WIDTH,
    GPUS_PER_NODE,
    NONE,
    SECTIONS,
    check_arguments,
    control_panel,
    control_value,
    make_controls,
    workload_label,
    workload_options,
)
from ._hybrid import HYBRID_CONTROLS, HybridSide, hybrid_controls
from ._layout import CONTROL_WIDTH, explorer_box, panel_grid
from ._measured_side import MeasuredSide
from ._prediction import PredictionSide
from ._trace_side import TraceSide

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


class Explorer(PredictionSide, TraceSide, HybridSide, MeasuredSide):
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
    trace:
        Your own run: a trace file, a folder of per-rank files, a glob, a
        :class:`~dlexplore.traces.Trace`, or a list of runs (folders or Traces) of one job at
        several GPU counts. What the trace says of its run (GPUs, workload, batch, GPU, precision,
        algorithm, GPUs per node: :func:`dlexplore.fit.trace_setup.infer_setup`) starts the
        controls, marked as from the trace; what it cannot say is asked in the "Your run" panel,
        which also compares the runs with the prediction at their configuration and calibrates
        the model to them (:meth:`calibrate_trace`). Arguments given here win over the trace's.
    tp, pp, micro_batch, zero, recompute, sequence_parallel, schedule:
        Hybrid parallelism for transformer workloads (see :mod:`dlexplore.widgets._hybrid`);
        ``micro_batch`` 0 is the whole replica batch at once.
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
        workload: str | None = None,
        gpu: str | None = None,
        network: str | None = None,
        *,
        gpus: int | None = None,
        batch_size: int | None = None,
        gpus_per_node: int | None = None,
        intra_link: str | None = None,
        algorithm: str | None = None,
        precision: str | None = None,
        measured: str | os.PathLike | xr.Dataset | Iterable[Any] | None = "auto",
        storage: str | None = None,
        pue: float = 1.0,
        trace: Any = None,
        tp: int = 1,
        pp: int = 1,
        micro_batch: int = 0,
        zero: int = 0,
        recompute: str = "none",
        sequence_parallel: bool = False,
        schedule: str = "1f1b",
        **model_kwargs: Any,
    ):
        for name in ("gpus", "batch_size", "gpus_per_node", "bandwidth", "latency", "buckets"):
            if name in model_kwargs:
                raise DlexploreError(f"Explorer: {name!r} is a control; pass it as gpus=, batch_size= ...")
        given: dict[str, Any] = dict(network=network, batch_size=batch_size, gpus_per_node=gpus_per_node)
        given.update(intra_link=intra_link, precision=precision, algorithm=algorithm)
        given.update(workload=workload, gpu=gpu, gpus=gpus)
        given = {k: v for k, v in given.items() if v is not None}
        hybrid = dict(tp=tp, pp=pp, micro_batch=micro_batch, zero=zero, recompute=recompute)
        hybrid.update(sequence_parallel=sequence_parallel, schedule=schedule)
        check_arguments(pue=pue, **{k: v for k, v in hybrid.items() if k != "sequence_parallel"}, **given)
        self._model_kwargs = dict(model_kwargs)
        self._traces: dict[str, dict[str, np.ndarray]] = {}
        self._custom_workloads: dict[str, catalog.Workload] = {}
        given = {**self._init_traces(trace, batch_size), **given}
        if trace is not None and isinstance(measured, str) and measured == "auto":
            measured = None  # the trace is the measurement; a published one is a choice away
        wl, dev = (
            catalog.workload(given.get("workload", "resnet50")),
            catalog.gpu(given.get("gpu", "V100-16GB")),
        )
        self._custom_workloads = {
            **self._custom_workloads,
            **({} if wl.name in catalog.WORKLOADS else {wl.name: wl}),
        }
        given = {k: v for k, v in given.items() if k not in ("workload", "gpu")}
        selected = given.pop("gpus", 8)
        first = self._init_measured(measured, wl.name, dev.name, given)
        settings = {**DEFAULTS, **first["setup"], **given}
        if "workload" in first["setup"]:
            wl = catalog.workload(first["setup"]["workload"])
        if "gpu" in first["setup"]:
            dev = catalog.gpu(first["setup"]["gpu"])
        settings["precision"] = validation.precision_for(dev, normalize_precision(settings["precision"]))
        self._make_controls(wl, dev, selected, settings, storage, pue, first["name"], hybrid)
        self._keep_model_settings(first["setup"])
        self._mark_inferred()
        self._make_views()
        self._make_measured_bar(first["note"])
        self._make_trace_panel()
        self._make_hybrid_note()
        self._wire()
        self._recompute(measured_changed=True)
        self._build_page()

    def _make_controls(
        self,
        wl: Any,
        dev: Any,
        gpus: int,
        settings: Mapping[str, Any],
        storage: str | None,
        pue: float,
        measured_name: str,
        hybrid: Mapping[str, Any],
    ) -> None:
        """The sliders and dropdowns at their starting values, the hybrid ones with them."""
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
            measured=measured_name,
        )
        self.controls.update(hybrid_controls(dict(hybrid), f"{CONTROL_WIDTH - 10}px", DESCRIPTION_WIDTH))

    def _make_views(self) -> None:
        """The figures (built once; every change replaces their sources' data) and the state the
        slider's path keeps between moves."""
        self.figures = ExplorerFigures(GPU_COUNTS)
        self.overlays = Overlays(self.figures)
        # a fifth panel (add_panel): time to accuracy over the same GPU counts and batch size
        self.time_to_accuracy = TimeToAccuracyFigure(
            width=None, height=self.figures.throughput.height, min_width=MIN_WIDTH
        )
        self.sources = self.figures.sources
        self.headline = w.HTML(layout=w.Layout())
        self.headline.add_class("dlx-headline")
        self.prediction: xr.Dataset | None = None
        self._sweep: xr.Dataset | None = None
        self._sweep_before: xr.Dataset | None = None
        self._sweep_energy: xr.Dataset | None = None
        self._energy: xr.Dataset | None = None
        self._holding = 0
        self._dirty: set[str] = set()
        self._views: list[BatchedBokehModel] = []
        self._tta_view: BatchedBokehModel | None = None

    # -- public ---------------------------------------------------------------------------------

    @property
    def headline_text(self) -> str:
        """The headline (throughput, efficiency, bottleneck and what would help, energy) as text."""
        prediction = self._shown()
        mixed = is_hybrid(prediction)
        text = (hybrid_headline if mixed else headline)(prediction, self.selected_gpus)
        if mixed and not bool(prediction.sel(gpus=self.selected_gpus)["valid"]):
            return text
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
        values = {
            name: c.value for name, c in self.controls.items() if name not in ("measured", *HYBRID_CONTROLS)
        }
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

    def _repr_mimebundle_(self, **kwargs: Any):
        load_bokehjs(components=("bokeh",))  # the figures use core models only: 1.3 of 2.1 MB
        return self.widget._repr_mimebundle_(**kwargs)

    # -- controls -------------------------------------------------------------------------------

    def _control_value(self, name: str, value: Any) -> Any:
        if name == "workload":
            wl = catalog.workload(
                self._custom_workloads.get(value, value) if isinstance(value, str) else value
            )
            names = [n for _, n in self.controls["workload"].options]
            if wl.name not in names:
                self._custom_workloads[wl.name] = wl
                self.controls["workload"].options = workload_options([*names, wl.name])
            return wl.name
        if name == "measured":
            return NONE if value is None else self.add_measured(value, show=False)
        return control_value(self.controls, name, value)

    def _build_page(self) -> None:
        # After the first data: a view sends its document whole when made, and only changes after.
        shared = w.Layout()  # one layout model for the four, rather than one each
        self._views = [BatchedBokehModel(fig, layout=shared) for fig in self.figures.figures]
        self._grid = panel_grid(self._views)
        self._tta_view = BatchedBokehModel(self.time_to_accuracy.figure, layout=shared)
        self.add_panel(self._tta_view)
        self.advisor_box = w.VBox([])
        sections = [
            *SECTIONS[:-1],
            ("Parallelism (transformers)", HYBRID_CONTROLS),
            SECTIONS[-1],
        ]
        panel = control_panel(self.controls, sections)
        index = next(
            i
            for i, c in enumerate(panel.children)
            if getattr(c, "value", "") == "<b>Parallelism (transformers)</b>"
        )
        panel.children = (*panel.children[: index + 1], self.hybrid_note, *panel.children[index + 1 :])
        self._bars = w.VBox([]) if self._trace_points else self.bar
        self._show_bars()
        below = w.VBox([self.advisor_box, self.apply_box])  # the advisor, then its best as buttons
        self.widget = explorer_box(self.headline, self._bars, panel, self._grid, below)
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
                elif dirty <= {"gpus", "batch_size"} and self._sweep is not None:
                    self._show_batch()
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

    def _shown(self) -> xr.Dataset:
        """The prediction on show: there is one from the first model call on."""
        if self.prediction is None:
            raise DlexploreError("Explorer: no prediction yet (the model failed on the first settings)")
        return self.prediction

    def _model_grid(self) -> xr.Dataset:
        """The last model call's grid over GPU counts and batch sizes."""
        if self._sweep is None:
            raise DlexploreError("Explorer: no prediction yet (the model failed on the first settings)")
        return self._sweep

    def _send_selection(self, skip: int = 0) -> None:
        """The selected GPU count in every figure (after the first ``skip``), each figure's message
        sent as soon as it is made: the throughput plot reaches the browser while the others are
        worked out."""
        for figure, update in self.figures.selection_updates(self._shown(), self.selected_gpus)[skip:]:
            with self._batch(figure):
                update()
                if figure is self.figures.comm:
                    self._show_trace_collectives()

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
            elif name == "intra_link" and self.calibration is not None:
                # a what-if of another link: its catalog figures, not the fitted ones
                for key in ("intra_bandwidth", "intra_latency"):
                    self._model_kwargs.pop(key, None)

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

    def _recompute(self, measured_changed: bool) -> None:
        """A model call: the grid over GPU counts and batches for the controls, then the view. The
        calibration's band, the model before calibration and the energy follow the first plots."""
        try:
            self._sweep = self._predict(band=False)
        except DlexploreError as err:
            message = html.escape(str(err))
            self.headline.value = f"<span style='color:#D55E00'>Cannot predict: {message}</span>"
            return
        self._sweep_before = self._sweep_energy = None
        self._show_batch(measured_changed)

    def _show_batch(self, measured_changed: bool = False) -> None:
        """The batch selected from the grid, drawn (no model call once the grid is whole): the
        throughput plot first, each figure's patch on its way while the next is worked out; then the
        band and the model before calibration, the bars, the headline and the time to accuracy."""
        b = int(self.controls["batch_size"].value)
        sweep = self._model_grid()
        self.prediction = sweep.sel(batch_size=b)
        published = self._marks()
        banded = not self._wants_band() or "throughput_upper" in sweep
        with self._batch(self.figures.throughput):
            self.figures.show_line(self.prediction, band=banded)
            self.figures.show_measured(self._trace_marks(published))
            if banded:
                self._show_band()
            self.figures.selection_updates(self.prediction, self.selected_gpus)[0][1]()
        self._send_selection(skip=1)
        if self.calibration is not None:
            if not banded:
                self._sweep = sweep = self._banded(sweep)
                self.prediction = sweep.sel(batch_size=b)
            if self._sweep_before is None:
                self._sweep_before = self._predict(calibrated=False, band=False)
        with self._batch(self.figures.throughput):
            if not banded:
                self.figures.show_line(self.prediction)
                self._show_band()
            before = self._sweep_before if self.calibration is not None else None
            line = (
                (before["gpus"].values, before["throughput"].sel(batch_size=b).values)
                if before is not None
                else None
            )
            self.overlays.show_uncalibrated(*(line or (None,)))
        with self._batched():
            self._show_trace_layers()
        self._write_status(published, measured_changed)
        if hasattr(self, "_bars"):
            self._show_bars()
        self._write_trace_status()
        self._write_hybrid_note()
        if self._sweep_energy is None:
            # Only the four phase times: energy() on the whole prediction, bucket schedule included,
            # took most of a batch-slider move.
            phases = sweep[["time_compute", "time_comm_exposed", "time_io_exposed", "step_time"]]
            pue = float(self.controls["pue"].value)
            self._sweep_energy = energy(phases, gpu=self.controls["gpu"].value, pue=pue)
        self._energy = self._sweep_energy.sel(batch_size=b)
        self._write_headline()
        with self._batch(self.time_to_accuracy.figure):
            self._show_time_to_accuracy()

    def _show_time_to_accuracy(self) -> None:
        """Time to accuracy against GPUs at this batch size, when the workload has convergence
        parameters (data/catalog/convergence.csv); an empty plot that says why otherwise."""
        if is_hybrid(self.prediction):
            self.time_to_accuracy.show_nothing("time to accuracy: data-parallel model only")
            return
        try:
            self.time_to_accuracy.show(time_to_accuracy(self._shown(), energy=self._energy))
        except DlexploreError:
            self.time_to_accuracy.show_nothing(
                f"no convergence parameters for {workload_label(self.controls['workload'].value)}"
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
