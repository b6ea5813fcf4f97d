"""The explorer's measured side: which published (or added) measurement is laid over the
prediction, the setup adopted from it and the bar that says how far the prediction is from it;
calibrating to it is :mod:`~dlexplore.widgets._calibration`.

A mixin of :class:`dlexplore.widgets.Explorer` (it uses the explorer's controls, ``_hold``,
``_predict`` and figures); the rules themselves are in :mod:`~dlexplore.widgets._comparison`.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ipywidgets as w
import numpy as np
import xarray as xr

from .. import catalog, measured
from ..errors import DlexploreError
from ..plots import measured_columns, measured_points
from ._calibration import FIT_ON, CalibrationSide, error_summary
from ._comparison import ADOPTED_MODEL_SETTINGS, adopted_setup, adoption, points_of, setup_differences
from ._controls import NONE

__all__ = ["MeasuredSide"]


def _points(ds: xr.Dataset, workload: str, gpu: str) -> xr.Dataset | None:
    """The points of this workload on this GPU, else of this workload on any GPU, else None."""
    subset = points_of(ds, workload, gpu)
    return subset if subset is not None else points_of(ds, workload)


class MeasuredSide(CalibrationSide):
    """The measured half of the explorer (see the module docstring)."""

    _datasets: dict[str, xr.Dataset]

    # -- loading and choosing -------------------------------------------------------------------

    def _init_measured(
        self, measured_arg: Any, workload: str, gpu: str, given: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Load the datasets; the one to show first, the setup it brings (what ``given`` leaves
        open) and a note on why it was chosen."""
        self._datasets = {}
        self._auto = measured_arg is not None
        self._adopting = False
        self._notes: list[str] = []
        self.calibration = None
        self._band: tuple[float, float] | None = None
        for name in measured.available():
            ds = measured.load(name)
            if "throughput" in ds:
                self._datasets[name] = ds
        first, note = NONE, ""
        if isinstance(measured_arg, str) and measured_arg == "auto":
            items = []
        elif measured_arg is None:
            items = []
        elif isinstance(measured_arg, (str, os.PathLike, xr.Dataset)):
            items = [measured_arg]
        else:
            items = list(measured_arg)
        labels = [self._register(item) for item in items]
        if labels:
            first = labels[0]
        elif self._auto:
            first, note = self._best_match(workload, gpu)
        setup = {}
        if first != NONE:
            preferred = given.get("precision", "fp32")  # the default, where the points have it
            setup = {
                k: v
                for k, v in adoption(self._datasets[first], workload, gpu, preferred).items()
                if k not in given
            }
        return {"name": first, "setup": setup, "note": note}

    def _best_match(self, workload: str, gpu: str) -> tuple[str, str]:
        names = measured.matching(workload, gpu, self._datasets)
        if names:
            return names[0], f"matches {workload} on {gpu}"
        return NONE, self._no_match_text(workload, gpu)

    def _no_match_text(self, workload: str, gpu: str) -> str:
        others = []
        for name, ds in self._datasets.items():
            subset = points_of(ds, workload)
            if subset is not None and "gpu" in subset.coords:
                gpus = sorted(set(subset["gpu"].values.astype(str)))
                others.append(f"{name} ({', '.join(gpus)})")
        text = f"No published measurement of {workload} on {gpu}."
        if others:
            text += f" Of {workload} there are: {'; '.join(others)}; choose one under Measured."
        return text + " Add your own with explorer.add_measured('runs.csv')."

    @property
    def measured_dataset(self) -> xr.Dataset | None:
        """The measured dataset shown, or None."""
        name = self.controls["measured"].value
        return None if name == NONE else self._datasets[name]

    def add_measured(self, data: str | os.PathLike | xr.Dataset, *, show: bool = True) -> str:
        """Offer another measured dataset in the drop-down (loaded now, and matched like the
        bundled ones from then on); returns its label."""
        label = self._register(data)
        options = list(self.controls["measured"].options)
        if label not in options:
            self.controls["measured"].options = [*options, label]
        if show:
            self.controls["measured"].value = label
        return label

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
        # Added datasets come first when matching: the user's own runs beat the published ones.
        self._datasets = {label: ds, **{k: v for k, v in self._datasets.items() if k != label}}
        return label

    def _match(self) -> None:
        """Show the measurement of the new workload and GPU (or none, saying so)."""
        if not self._auto:
            return
        c = self.controls
        name, note = self._best_match(c["workload"].value, c["gpu"].value)
        self._note(note)
        if c["measured"].value == name and name != NONE:
            self._adopt(self._datasets[name])  # the same dataset, other points: their setup
        c["measured"].value = name

    def _readopt(self) -> None:
        """After a precision change: the batch and node size of the points at that precision."""
        ds = self.measured_dataset
        if not self._auto or ds is None:
            return
        c = self.controls
        subset = points_of(ds, c["workload"].value, c["gpu"].value)
        if subset is None or "precision" not in subset.coords:
            return
        if c["precision"].value not in set(subset["precision"].values.astype(str)):
            # no point at this precision: its layout and fusion are not the other precisions'
            # (seq, the accumulation and the adapters are the runs')
            for name in ("layout", "fusion"):
                getattr(self, "_adopted_model", {}).pop(name, None)
            return
        setup = adopted_setup(subset, c["precision"].value)
        self._keep_model_settings(setup)
        self._adopting = True
        try:
            for name in ("batch_size", "gpus_per_node"):
                if name in setup:
                    c[name].value = self._control_value(name, setup[name])
        finally:
            self._adopting = False

    def _on_measured(self, change: Mapping[str, Any]) -> None:
        with self._hold():
            self._dirty.add("measured")
            if not self._adopting:
                self._forget_calibration("the measurement changed")
            if change["new"] != NONE:
                self._adopt(self._datasets[change["new"]])
            else:
                self._keep_model_settings({})

    def _adopt(self, ds: xr.Dataset) -> None:
        """Set the controls to the points' setup, so that they meet their prediction: the
        workload and GPU where the dataset has no point of the current ones, then what
        :func:`~dlexplore.widgets._comparison.adopted_setup` says."""
        c = self.controls
        wanted = adoption(ds, c["workload"].value, c["gpu"].value, c["precision"].value)
        self._adopting = True
        try:
            for name in (
                "workload",
                "gpu",
                "precision",
                "batch_size",
                "gpus_per_node",
                "intra_link",
                "network",
                "algorithm",
            ):
                if name not in wanted:
                    continue
                try:
                    c[name].value = self._control_value(name, wanted[name])
                except (DlexploreError, KeyError, ValueError, w.TraitError):
                    continue  # a setup the catalog does not know stays as it was
            if "network" in wanted:
                self._apply_network()
        finally:
            self._adopting = False
        self._keep_model_settings(wanted)

    def _keep_model_settings(self, setup: Mapping[str, Any]) -> None:
        """Keep the adopted settings that have no control (:data:`ADOPTED_MODEL_SETTINGS`), for
        the workload now selected (none if the points' workload could not be selected)."""
        workload = self.controls["workload"].value
        wanted = self._catalog_workload(str(setup.get("workload", workload)))
        same = wanted is not None and wanted.name == workload or "workload" not in setup
        self._adopted_model = {k: setup[k] for k in ADOPTED_MODEL_SETTINGS if k in setup and same}
        self._adopted_for = workload

    def _model_extras(self) -> dict[str, Any]:
        """The adopted settings the data-parallel line is predicted with: none once the workload
        changed since they were adopted, and no sequence length but a transformer's."""
        if getattr(self, "_adopted_for", None) != self.controls["workload"].value:
            return {}
        extras = dict(getattr(self, "_adopted_model", {}))
        workload = self._custom_workloads.get(self._adopted_for) or self._catalog_workload(self._adopted_for)
        if workload is None or workload.kind != "transformer":
            extras.pop("seq", None)
        return extras

    @staticmethod
    def _catalog_workload(name: str) -> Any:
        try:
            return catalog.workload(name)
        except DlexploreError:
            return None

    # -- the bar: what is compared, and how well ------------------------------------------------

    def _make_measured_bar(self, note: str) -> None:
        self.status = w.HTML(layout=w.Layout(width="auto", flex="1 1 320px", min_width="0"))
        self.status.add_class("dlx-status")
        self.fit_on = w.Dropdown(
            options=list(FIT_ON),
            value="1 GPU",
            description="Fit on",
            style={"description_width": "50px"},
            layout=w.Layout(width="170px"),
        )
        self.calibrate_button = w.Button(
            description="Calibrate to these points",
            button_style="info",
            layout=w.Layout(width="auto"),
            tooltip="fit compute efficiency (and, with multi-GPU points, bandwidth and latency) to the "
            "measured points shown; the error before and after is reported",
        )
        self.reset_button = w.Button(
            description="Reset", tooltip="back to the uncalibrated model", layout=w.Layout(width="auto")
        )
        self.calibrate_button.on_click(lambda _: self.calibrate())
        self.reset_button.on_click(lambda _: self.reset_calibration())
        self.fit_report = w.HTML(layout=w.Layout())
        self.fit_report.add_class("dlx-calibration")
        actions = w.HBox(
            [self.fit_on, self.calibrate_button, self.reset_button],
            layout=w.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.bar = w.VBox(
            [
                w.HBox([self.status, actions], layout=w.Layout(flex_flow="row wrap", align_items="center")),
                self.fit_report,
            ]
        )
        self.bar.add_class("dlx-bar")
        if note:
            self._notes.append(note)

    def _note(self, text: str) -> None:
        """A line for the bar's next update (why a measurement was or was not chosen)."""
        if text and text not in self._notes:
            self._notes.append(text)

    def _marks(self) -> dict[str, np.ndarray]:
        c = self.controls
        ds = self.measured_dataset
        chosen = {"workload": c["workload"].value, "precision": c["precision"].value, "gpu": c["gpu"].value}
        # The points depend on the table and these three controls only: kept while the model's
        # controls (bandwidth, batch ...) move, rather than the table made a DataFrame each move.
        kept = getattr(self, "_kept_points", None)
        if kept is None or kept[0] is not ds or kept[1] != chosen:
            kept = self._kept_points = (ds, chosen, measured_points(ds, **chosen))
        return measured_columns(ds, self.prediction, algorithm=c["algorithm"].value, points=kept[2], **chosen)

    def _write_status(self, marks: Mapping[str, np.ndarray], measured_changed: bool) -> None:
        notes, self._notes = self._notes, []
        extra = "".join(f"<br><small>{html.escape(n)}</small>" for n in notes if n)
        ds = self.measured_dataset
        c = self.controls
        if ds is None:
            text = notes[0] if notes else "No measured dataset shown."
            rest = "".join(f"<br><small>{html.escape(n)}</small>" for n in notes[1:])
            self.status.value = f"<i>{html.escape(text)}</i>{rest}"
            self._enable_calibration(False)
            return
        name = html.escape(c["measured"].value)
        n = len(marks["gpus"])
        if n == 0:
            self.status.value = (
                f"<b>{name}</b> has no points of {html.escape(c['workload'].value)} "
                f"in {html.escape(c['precision'].value)}.{extra}"
            )
            self._enable_calibration(False)
            return
        compared, mean, largest = error_summary(marks)
        algorithm = c["algorithm"].value
        if compared:
            verdict = (
                f"prediction error: mean |error| <b>{mean:.1%}</b>, largest {largest:.1%} "
                f"over {compared} point{'s' if compared != 1 else ''}"
            )
            if compared < n:
                verdict += f" ({n - compared} ran another algorithm than {algorithm}: shown, not compared)"
        else:
            verdict = f"none ran {algorithm}, so none is compared with the line"
        subset = _points(ds, c["workload"].value, c["gpu"].value)
        if subset is not None and "precision" in subset.coords:
            same = subset["precision"].values.astype(str) == c["precision"].value
            subset = subset.isel(point=np.flatnonzero(same)) if same.any() else subset
        own = {k: v for k, v in self._model_kwargs.items() if k in ADOPTED_MODEL_SETTINGS}
        line = {**self.settings, **({} if self._hybrid_active() else {**self._model_extras(), **own})}
        differences = setup_differences(subset, line) if subset is not None else []
        differ = (
            f"<br><small>Measured with {html.escape('; '.join(differences))}: the error mixes the "
            "model's and the setup's.</small>"
            if differences
            else ""
        )
        source = html.escape(str(ds.attrs.get("source", "")).removeprefix("measured: "))
        self.status.value = (
            f"<b>Measured</b> ({name}, {n} point{'s' if n != 1 else ''}): {verdict}."
            f"{differ}{extra}<br><small>{source}</small>"
        )
        self._enable_calibration(compared > 0)

    def _enable_calibration(self, enabled: bool) -> None:
        self.calibrate_button.disabled = not enabled
        self.fit_on.disabled = not enabled
