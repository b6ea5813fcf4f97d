"""The explorer: ipywidgets controls driving the bokeh figures of :mod:`dlexplore.plots`.

The slider's path is hot, so the work is split by what a control changes:

- the GPU slider only picks another of the GPU counts already predicted: no model call;
- any other control calls :func:`dlexplore.predict` once, vectorised over all GPU counts (with the
  bucket schedule), a few milliseconds;
- the figures are built once; every change replaces ``ColumnDataSource.data`` (and a few titles),
  which ``jupyter_bokeh.BokehModel`` sends to the browser as a document patch. This also works in
  Voila, where ``push_notebook`` does not.

Measured datasets are loaded once, when the explorer is made (or when one is added), never on a
slider move.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import xarray as xr
from jupyter_bokeh import BokehModel

from .. import catalog, measured
from ..errors import DlexploreError
from ..model import predict
from ..model.comm import ALGORITHMS, normalize_algorithm
from ..model.compute import normalize_precision
from ..model.energy import energy
from ..model.time_to_accuracy import time_to_accuracy
from ..plots import GPU_COUNTS, ExplorerFigures, headline, measured_columns
from ..plots.convergence import TimeToAccuracyFigure

__all__ = ["Explorer", "BATCH_SIZES", "GPUS_PER_NODE", "load_bokehjs"]

#: Per-GPU batch sizes offered by the batch slider.
BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: GPUs per node offered by the slider.
GPUS_PER_NODE = (1, 2, 4, 8, 16)
_NONE = "(none)"
_ALGORITHM_LABELS = {
    "ring": "ring allreduce",
    "tree": "tree allreduce",
    "recursive_doubling": "recursive doubling",
    "halving_doubling": "halving-doubling (Rabenseifner)",
    "hierarchical": "hierarchical (ring in node, ring across)",
    "parameter_server": "parameter server",
}
_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
#: The calibrate control's choices: which measured points to fit (the others are held out).
_FIT_ON = {"1 GPU": "gpus == 1", "up to 8 GPUs": "gpus <= 8", "all points": None}
_CONTROL_WIDTH = "330px"


_bokehjs_loaded = False


def load_bokehjs(force: bool = False) -> None:
    """Load BokehJS into the notebook page from the installed package (no network needed).

    Bokeh figures inside widgets need BokehJS in the page; the default would fetch it from a CDN,
    which draws nothing offline. Displaying an :class:`Explorer` calls this once per kernel; call it
    yourself (``force=True``) before displaying ``explorer.widget`` in a fresh page.
    """
    global _bokehjs_loaded
    if _bokehjs_loaded and not force:
        return
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(resources=INLINE, hide_banner=True)
    _bokehjs_loaded = True


def _fmt_value(value: float, units: str) -> str:
    if not np.isfinite(value):
        return "n/a" if np.isnan(value) else "not identifiable"
    if units == "s":
        return f"{value * 1e6:.3g} µs"
    return f"{value:.3g} {units}" if units not in ("1", "") else f"{value:.3g}"


def _nearest(options: Iterable[int], value: float) -> int:
    options = list(options)
    return options[int(np.argmin([abs(np.log(o) - np.log(value)) for o in options]))]


class Explorer:
    """Interactive predicted-vs-measured explorer of data-parallel training.

    Controls: GPUs (1 to 1024), per-GPU batch size, network bandwidth (GB/s) and latency (µs), GPUs
    per node; workload, GPU, network preset (sets bandwidth and latency), intra-node link,
    allreduce algorithm (parameter server included), precision, and the measured dataset to overlay.
    Plots: throughput vs GPUs (predicted, measured, ideal), the step-time breakdown per GPU count,
    memory per GPU against capacity, and the gradient-bucket allreduces of one step.

    Parameters
    ----------
    workload, gpu, network:
        Catalog ids (see ``dlexplore catalog``) or, for ``workload``, a ``transformer:L,h,a,s,V`` spec.
    gpus:
        The GPU count selected at start (rounded to a power of two).
    batch_size:
        Samples per GPU per step.
    gpus_per_node, intra_link:
        GPUs sharing a node and the link between them.
    algorithm, precision:
        Gradient allreduce algorithm and training precision.
    measured:
        Measured throughput to overlay: a bundled dataset name (``dlexplore measured list``), a CSV
        path, an ``xarray.Dataset`` from :mod:`dlexplore.measured`, or a list of them. The first is
        shown at start; every bundled training dataset is offered in the drop-down as well.
    **model_kwargs:
        Passed to :func:`dlexplore.predict` unchanged (``optimizer``, ``servers``, ``bucket_size``,
        ``overlap``, ``compute_efficiency``, ``storage`` ...).

    Display the explorer by making it the last expression of a cell, or use :attr:`widget`.
    """

    def __init__(
        self,
        workload: str = "resnet50",
        gpu: str = "V100-16GB",
        network: str = "25GbE",
        *,
        gpus: int = 8,
        batch_size: int = 64,
        gpus_per_node: int = 1,
        intra_link: str = "PCIe3",
        algorithm: str = "ring",
        precision: str = "fp32",
        measured: str | os.PathLike | xr.Dataset | Iterable[Any] | None = None,
        storage: str | None = None,
        pue: float = 1.0,
        **model_kwargs: Any,
    ):
        for name in ("gpus", "batch_size", "gpus_per_node", "bandwidth", "latency", "buckets"):
            if name in model_kwargs:
                raise DlexploreError(f"Explorer: {name!r} is a control; pass it as gpus=, batch_size= ...")
        self._model_kwargs = dict(model_kwargs)
        self._datasets: dict[str, xr.Dataset] = {}
        self._traces: dict[str, dict[str, np.ndarray]] = {}
        first_measured = self._load_measured(measured)
        net = catalog.network(network)
        wl = catalog.workload(workload)
        self._custom_workloads = {} if wl.name in catalog.WORKLOADS else {wl.name: wl}
        self.controls = self._make_controls(
            workload=wl.name, gpu=catalog.gpu(gpu).name, network=net.name,
            intra_link=catalog.network(intra_link).name, algorithm=normalize_algorithm(algorithm),
            precision=normalize_precision(precision), gpus=gpus, batch_size=batch_size,
            gpus_per_node=gpus_per_node, bandwidth=net.bandwidth_gbs, latency=net.latency_s,
            storage=_NONE if storage is None else catalog.storage(storage).name, pue=float(pue),
        )
        self.figures = ExplorerFigures(GPU_COUNTS, width=440, height=330)
        self.time_to_accuracy = TimeToAccuracyFigure(width=440, height=330)
        self.sources = self.figures.sources
        self.headline = w.HTML(layout=w.Layout(width="100%"))
        self.headline.add_class("dlx-headline")
        self.status = w.HTML(layout=w.Layout(width="100%"))
        self.status.add_class("dlx-status")
        self.prediction: xr.Dataset | None = None
        self._energy: xr.Dataset | None = None
        #: The last fit of the model to the measured points (:meth:`calibrate`), or None.
        self.calibration = None
        self.fit_on = w.Dropdown(options=list(_FIT_ON), value="1 GPU", description="Fit on",
                                 style={"description_width": "115px"}, layout=w.Layout(width=_CONTROL_WIDTH))
        self.calibrate_button = w.Button(description="Calibrate to measured", button_style="info",
                                         tooltip="fit compute efficiency (and, with multi-GPU points, "
                                                 "bandwidth and latency) to the measured points shown")
        self.reset_button = w.Button(description="Reset", tooltip="back to the uncalibrated model")
        self.calibrate_button.on_click(lambda _: self.calibrate())
        self.reset_button.on_click(lambda _: self.reset_calibration())
        self.fit_report = w.HTML(layout=w.Layout(width="100%"))
        self.fit_report.add_class("dlx-calibration")
        self._holding = 0
        self._dirty: set[str] = set()
        self._wire()
        if first_measured is not None:
            self.controls["measured"].value = first_measured
        self._recompute(measured_changed=True)
        self.widget = self._layout()

    # -- public ---------------------------------------------------------------------------------

    @property
    def headline_text(self) -> str:
        """The headline (throughput, efficiency, bottleneck, energy) as plain text."""
        text = headline(self.prediction, self.selected_gpus)
        if self._energy is not None:
            point = self._energy.sel(gpus=self.selected_gpus)
            text += (f" Energy: {float(point.energy_sample):.3g} J per sample, "
                     f"{float(point.power_average) / 1e3:.3g} kW on average "
                     f"(PUE {self.controls['pue'].value:.2f}).")
        return text

    @property
    def selected_gpus(self) -> int:
        """The GPU count the GPU slider selects."""
        return int(self.controls["gpus"].value)

    @property
    def measured_dataset(self) -> xr.Dataset | None:
        """The measured dataset shown, or None."""
        name = self.controls["measured"].value
        return None if name == _NONE else self._datasets[name]

    def set(self, **values: Any) -> Explorer:
        """Set several controls at once (one model call): ``set(gpus=64, workload="vgg16")``.

        Keys are the names in :attr:`controls`; ``latency`` is in seconds, ``bandwidth`` in GB/s.
        """
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise DlexploreError(f"Explorer.set: unknown control(s) {unknown}; "
                                 f"expected some of {sorted(self.controls)}")
        with self._hold():
            for name, value in values.items():
                self.controls[name].value = self._control_value(name, value)
        return self

    def add_measured(self, data: str | os.PathLike | xr.Dataset, *, show: bool = True) -> str:
        """Offer another measured dataset in the drop-down (loaded now); returns its label."""
        label = self._register(data)
        options = list(self.controls["measured"].options)
        if label not in options:
            self.controls["measured"].options = [*options, label]
        if show:
            self.controls["measured"].value = label
        return label

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
        merged = {key: np.concatenate([columns[key] for columns in self._traces.values()])
                  for key in next(iter(self._traces.values()))}
        self.figures.show_measured_steps(merged)
        return name

    def calibrate(self, fit_on: str | None = None):
        """Fit the model to the measured points shown (this workload and precision; this algorithm,
        or one GPU) and use the fitted parameters from now on.

        ``fit_on`` is a selection as in :func:`dlexplore.calibrate` (default: the "Fit on" control).
        Compute efficiency is always fitted; bandwidth and latency too when the fitted points span
        several GPU counts and can determine them. Returns the :class:`dlexplore.fit.Calibration`
        (also in :attr:`calibration`); the fitted parameters and the error on the held-out points
        are shown under the control.
        """
        import warnings

        from ..fit import CalibrationWarning
        from ..fit import calibrate as fit

        ds = self.measured_dataset
        if ds is None:
            self.fit_report.value = "<i>Choose a measured dataset first.</i>"
            return None
        points = self._comparable_points(ds)
        if points is None:
            self.fit_report.value = "<i>No measured point of this workload to fit.</i>"
            return None
        selection = _FIT_ON[self.fit_on.value] if fit_on is None else fit_on
        gpus = points["gpus"].values
        chosen = gpus == 1 if selection == "gpus == 1" else gpus <= 8 if selection == "gpus <= 8" \
            else np.ones_like(gpus, dtype=bool)
        params = ["compute_efficiency"]
        if len(np.unique(gpus[chosen])) > 1 and np.any(gpus[chosen] > self.controls["gpus_per_node"].value):
            params += ["bandwidth", "latency"]
        c = self.controls
        settings = {**self._model_kwargs}
        settings.pop("compute_efficiency", None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CalibrationWarning)
            try:
                cal = fit(points, fit_on=selection, params=params, intra_link=c["intra_link"].value,
                          **settings)
            except DlexploreError as err:
                self.fit_report.value = f"<span style='color:#D55E00'>{html.escape(str(err))}</span>"
                return None
        values = cal.fitted()
        self.calibration = cal
        with self._hold():
            self._dirty.add("calibration")
            if "compute_efficiency" in values:
                self._model_kwargs["compute_efficiency"] = values["compute_efficiency"]
            if "bandwidth" in values:
                c["bandwidth"].value = values["bandwidth"]
            if "latency" in values:
                c["latency"].value = values["latency"] * 1e6
        notes = "".join(f"<br><small>{html.escape(str(w_.message))}</small>" for w_ in caught
                        if issubclass(w_.category, CalibrationWarning))
        held = (f"held-out MAPE {cal.mape_holdout:.1%} (largest {cal.max_error_holdout:.1%})"
                if np.isfinite(cal.mape_holdout) else "no point held out")
        rows = "".join(
            f"<tr><td>{html.escape(str(r.name))}</td><td>{_fmt_value(r.value, r.units)}</td>"
            f"<td>± {_fmt_value(r.stderr, r.units)}</td></tr>" for r in cal.params.itertuples())
        self.fit_report.value = (
            f"<b>Calibrated</b> on {html.escape(str(selection or 'all points'))}: fit MAPE "
            f"{cal.mape_fit:.1%}, {held}.<table style='font-size:12px'>{rows}</table>{notes}"
        )
        return cal

    def reset_calibration(self) -> None:
        """Forget the calibration: back to the model's defaults and the network preset."""
        self.calibration = None
        self._model_kwargs.pop("compute_efficiency", None)
        self.fit_report.value = ""
        with self._hold():
            self._dirty.add("calibration")
            self._apply_network()

    def _comparable_points(self, ds: xr.Dataset) -> xr.Dataset | None:
        """The measured points the curve shown stands for: this workload and precision, and this
        algorithm or one GPU (the same rule as the error column of the overlay)."""
        keep = np.ones(ds.sizes["point"], dtype=bool)
        c = self.controls
        if "workload" in ds.coords:
            keep &= np.char.lower(ds["workload"].values.astype(str)) == c["workload"].value.lower()
        if "precision" in ds.coords and len(np.unique(ds["precision"].values)) > 1:
            keep &= ds["precision"].values.astype(str) == c["precision"].value
        if "algorithm" in ds.coords:
            ran = ds["algorithm"].values.astype(str)
            keep &= (ran == c["algorithm"].value) | np.isin(ran, ("none", "unknown")) | (
                ds["gpus"].values == 1)
        return ds.isel(point=np.flatnonzero(keep)) if keep.any() else None

    def _repr_mimebundle_(self, **kwargs: Any):
        load_bokehjs()
        return self.widget._repr_mimebundle_(**kwargs)

    # -- measured datasets ----------------------------------------------------------------------

    def _load_measured(self, measured_arg: Any) -> str | None:
        for name in measured.available():
            ds = measured.load(name)
            if "throughput" in ds:
                self._datasets[name] = ds
        if measured_arg is None:
            return None
        items = [measured_arg] if isinstance(measured_arg, (str, os.PathLike, xr.Dataset)) else list(
            measured_arg)
        labels = [self._register(item) for item in items]
        return labels[0] if labels else None

    def _register(self, data: str | os.PathLike | xr.Dataset) -> str:
        if isinstance(data, xr.Dataset):
            ds = data
            label = str(ds.attrs.get("name") or f"user dataset {len(self._datasets) + 1}")
        elif isinstance(data, str) and data in self._datasets:
            return data
        else:
            ds = measured.load(data)
            label = str(ds.attrs.get("name") or Path(data).stem)
        if "throughput" not in ds:
            raise DlexploreError(
                f"measured dataset {label!r} has no 'throughput' variable (it has "
                f"{sorted(ds.data_vars)}): the explorer overlays training throughput"
            )
        if "gpus" not in ds.coords:
            raise DlexploreError(f"measured dataset {label!r} has no 'gpus' coordinate")
        self._datasets[label] = ds
        return label

    def _adopt(self, ds: xr.Dataset) -> None:
        """Match the controls to a measured dataset's setup, so its points meet their prediction."""

        def common(name: str) -> Any:
            if name not in ds.coords:
                return None
            values, counts = np.unique(ds[name].values.astype(str), return_counts=True)
            return values[np.argmax(counts)]

        wanted: dict[str, Any] = {}
        workloads = set(np.atleast_1d(ds["workload"].values).astype(str)) if "workload" in ds.coords \
            else set()
        if workloads and self.controls["workload"].value not in workloads:
            wanted["workload"] = sorted(workloads)[0]
        for name in ("gpu", "network", "precision"):
            value = common(name)
            if value is not None:
                wanted[name] = value
        if "batch_size" in ds.coords:
            wanted["batch_size"] = int(float(common("batch_size")))
        if "gpus_per_node" in ds.coords:
            wanted["gpus_per_node"] = int(np.nanmax(ds["gpus_per_node"].values))
        if "network" in wanted and catalog.network(wanted["network"]).kind == "intra":
            wanted["intra_link"] = wanted["network"]
        for name, value in wanted.items():
            try:
                self.controls[name].value = self._control_value(name, value)
            except (DlexploreError, KeyError, ValueError, w.TraitError):
                continue  # a setup the catalog does not know stays as it was
        if "network" in wanted:
            self._apply_network()

    # -- controls -------------------------------------------------------------------------------

    def _control_value(self, name: str, value: Any) -> Any:
        if name == "latency":
            return float(value) * 1e6
        if name == "gpus":
            return _nearest(GPU_COUNTS, float(value))
        if name == "batch_size":
            return _nearest(BATCH_SIZES, float(value))
        if name == "gpus_per_node":
            return _nearest(GPUS_PER_NODE, float(value))
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
            return normalize_precision(value)
        if name == "measured":
            return _NONE if value is None else self.add_measured(value, show=False)
        return value

    def _make_controls(self, **v: Any) -> dict[str, w.Widget]:
        style = {"description_width": "115px"}
        layout = w.Layout(width=_CONTROL_WIDTH)
        links = catalog.NETWORKS.names()
        intra = [n for n in links if catalog.network(n).kind == "intra"]
        workloads = catalog.WORKLOADS.names()
        if v["workload"] not in workloads:
            workloads.append(v["workload"])
        c: dict[str, w.Widget] = {
            "workload": w.Dropdown(options=workloads, value=v["workload"], description="Workload"),
            "gpu": w.Dropdown(options=catalog.GPUS.names(), value=v["gpu"], description="GPU"),
            "network": w.Dropdown(options=links, value=v["network"], description="Network"),
            "intra_link": w.Dropdown(options=intra, value=v["intra_link"], description="Intra-node link"),
            "algorithm": w.Dropdown(
                options=[(_ALGORITHM_LABELS.get(a, a), a) for a in ALGORITHMS["allreduce"]],
                value=v["algorithm"], description="Algorithm"),
            "precision": w.Dropdown(options=_PRECISIONS, value=v["precision"], description="Precision"),
            "measured": w.Dropdown(options=[_NONE, *self._datasets], value=_NONE, description="Measured"),
            "gpus": w.SelectionSlider(options=[(str(g), g) for g in GPU_COUNTS],
                                      value=_nearest(GPU_COUNTS, v["gpus"]), description="GPUs"),
            "batch_size": w.SelectionSlider(options=[(str(b), b) for b in BATCH_SIZES],
                                            value=_nearest(BATCH_SIZES, v["batch_size"]),
                                            description="Batch/GPU"),
            # step=None: no snapping, so a preset's exact figure (25GbE's 3.125 GB/s) survives
            # the browser's first sync instead of becoming the nearest step (3.09).
            "bandwidth": w.FloatLogSlider(value=v["bandwidth"], base=10, min=-2, max=3, step=None,
                                          readout_format=".4g", description="Bandwidth (GB/s)"),
            "latency": w.FloatLogSlider(value=v["latency"] * 1e6, base=10, min=-1, max=4, step=None,
                                        readout_format=".4g", description="Latency (µs)"),
            "gpus_per_node": w.SelectionSlider(options=[(str(g), g) for g in GPUS_PER_NODE],
                                               value=_nearest(GPUS_PER_NODE, v["gpus_per_node"]),
                                               description="GPUs/node"),
            "storage": w.Dropdown(options=[_NONE, *catalog.STORAGE.names()], value=v["storage"],
                                  description="Input from"),
            "pue": w.FloatSlider(value=v["pue"], min=1.0, max=2.0, step=0.05, readout_format=".2f",
                                 description="PUE"),
        }
        for control in c.values():
            control.style = style
            control.layout = layout
            if isinstance(control, (w.SelectionSlider, w.FloatLogSlider)):
                control.continuous_update = True
        return c

    def _wire(self) -> None:
        self.controls["gpus"].observe(self._on_gpus, names="value")
        self.controls["network"].observe(self._on_network, names="value")
        self.controls["measured"].observe(self._on_measured, names="value")
        for name, control in self.controls.items():
            if name not in ("gpus", "network", "measured"):
                control.observe(lambda change, name=name: self._changed(name), names="value")

    def _layout(self) -> w.Widget:
        c = self.controls
        heading = lambda text: w.HTML(f"<b>{text}</b>")  # noqa: E731
        panel = w.VBox([
            heading("Scale"), c["gpus"], c["batch_size"], c["gpus_per_node"],
            heading("Hardware and model"), c["workload"], c["gpu"], c["precision"],
            heading("Network"), c["network"], c["bandwidth"], c["latency"], c["intra_link"],
            c["algorithm"],
            heading("Input and energy"), c["storage"], c["pue"],
            heading("Measurements"), c["measured"], self.status,
            self.fit_on, w.HBox([self.calibrate_button, self.reset_button]), self.fit_report,
        ], layout=w.Layout(width="350px", flex="0 0 350px"))
        plots = w.VBox([self.headline, BokehModel(self.figures.layout),
                        BokehModel(self.time_to_accuracy.figure)],
                       layout=w.Layout(flex="1 1 900px", min_width="900px"))
        # Wrap: on a narrow page (JupyterLab with its side bar open) the plots go under the
        # controls instead of being cut off at the right.
        box = w.HBox([panel, plots], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))
        box.add_class("dlx-explorer")
        # Models larger than one GPU: the strategy advisor (tensor, pipeline, ZeRO), built on demand
        # because it evaluates hundreds of configurations.
        self.advisor_box = w.VBox([])
        opener = w.Button(description="Open the strategy advisor (dp x tp x pp, ZeRO)",
                          layout=w.Layout(width="auto"))
        opener.on_click(lambda _: self.open_advisor())
        self.advisor_box.children = (opener,)
        return w.VBox([box, self.advisor_box])

    def open_advisor(self):
        """Show the hybrid-parallelism strategy advisor under the explorer, for this workload, GPU
        and GPU count (see :class:`dlexplore.advisor.AdvisorWidget`); returns it."""
        from ..advisor import AdvisorWidget

        c = self.controls
        advisor = AdvisorWidget(workload=c["workload"].value, gpus=self.selected_gpus, gpu=c["gpu"].value,
                                batch_size=self.selected_gpus * int(c["batch_size"].value))
        self.advisor = advisor
        self.advisor_box.children = (advisor.box,)
        return advisor

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

    def _changed(self, name: str) -> None:
        if self._holding:
            self._dirty.add(name)
        else:
            self._recompute(measured_changed=False)

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

    def _on_measured(self, change: Mapping[str, Any]) -> None:
        with self._hold():
            self._dirty.add("measured")
            if change["new"] != _NONE:
                self._adopt(self._datasets[change["new"]])

    def _predict(self) -> xr.Dataset:
        c = self.controls
        workload = c["workload"].value
        args = dict(
            workload=self._custom_workloads.get(workload, workload), gpu=c["gpu"].value,
            network=c["network"].value,
            gpus=list(GPU_COUNTS), batch_size=int(c["batch_size"].value),
            bandwidth=float(c["bandwidth"].value), latency=float(c["latency"].value) * 1e-6,
            gpus_per_node=int(c["gpus_per_node"].value), intra_link=c["intra_link"].value,
            algorithm=c["algorithm"].value, precision=c["precision"].value, buckets=True,
            storage=None if c["storage"].value == _NONE else c["storage"].value,
            **self._model_kwargs,
        )
        ds = predict(**args)
        if self.calibration is not None and self.calibration.kind == "training":
            # the calibrated curve carries its prediction interval, which the plot draws as a band
            ds = self.calibration.add_band(ds, lambda **p: predict(**{**args, "buckets": False, **p}),
                                           workload=workload, precision=c["precision"].value)
        return ds

    def _recompute(self, measured_changed: bool) -> None:
        try:
            self.prediction = self._predict()
            self._energy = energy(self.prediction, pue=float(self.controls["pue"].value))
        except DlexploreError as err:
            message = html.escape(str(err))
            self.headline.value = f"<span style='color:#D55E00'>Cannot predict: {message}</span>"
            return
        marks = measured_columns(self.measured_dataset, self.prediction,
                                 workload=self.controls["workload"].value,
                                 precision=self.controls["precision"].value,
                                 algorithm=self.controls["algorithm"].value)
        self.figures.show(self.prediction, self.selected_gpus, marks)
        self._show_time_to_accuracy()
        self._write_status(marks, measured_changed)
        self._write_headline()

    def _show_time_to_accuracy(self) -> None:
        """Time to accuracy against GPUs at this batch size, when the workload has convergence
        parameters (data/catalog/convergence.csv); an empty plot that says why otherwise."""
        try:
            self.time_to_accuracy.show(time_to_accuracy(self.prediction, energy=self._energy))
        except DlexploreError:
            for source in self.time_to_accuracy.sources.values():
                source.data = {name: [] for name in source.data}
            self.time_to_accuracy.figure.title.text = (
                f"Time to accuracy: no convergence parameters for {self.controls['workload'].value}")

    def _select(self) -> None:
        if self.prediction is None:
            return
        self.figures.select(self.prediction, self.selected_gpus)
        self._write_headline()

    def _write_headline(self) -> None:
        text = html.escape(self.headline_text)
        text = text.replace("Does NOT fit", "<b style='color:#D55E00'>Does NOT fit") + (
            "</b>" if "Does NOT fit" in text else "")
        self.headline.value = f"<div style='font-size:14px; line-height:1.4'>{text}</div>"

    def _write_status(self, marks: dict, measured_changed: bool) -> None:
        ds = self.measured_dataset
        if ds is None:
            self.status.value = "<i>No measured dataset shown.</i>"
            return
        n = len(marks["gpus"])
        if n == 0:
            workloads = sorted(set(np.atleast_1d(ds["workload"].values).astype(str))) \
                if "workload" in ds.coords else []
            self.status.value = (f"<i>{html.escape(self.controls['measured'].value)}</i> has no points "
                                 f"for this workload; it has {html.escape(', '.join(workloads))}.")
            return
        error = np.abs(marks["error"][np.isfinite(marks["error"])])
        algorithm = _ALGORITHM_LABELS.get(self.controls["algorithm"].value, "")
        fit = (f"; {error.size} with this algorithm ({algorithm}) or on one GPU, "
               f"mean |error| vs the line {error.mean():.0%}") if error.size else (
               f"; none ran {algorithm}, so none is compared with the line")
        self.status.value = (
            f"{n} measured points{fit}.<br><small>{html.escape(str(ds.attrs.get('source', '')))}"
            "</small>"
        )
