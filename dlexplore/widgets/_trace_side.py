"""The explorer's traced runs: your own trace as the measured point, calibrating to it, and the
calibration saved and loaded.

A mixin of :class:`dlexplore.widgets.Explorer` (it uses the explorer's controls, ``_hold``,
``_predict_settings``, figures and overlays). What a trace says of its run and the measured point
are :mod:`dlexplore.fit.trace_setup`'s and :mod:`dlexplore.fit.trace_point`'s; the fit is
:func:`dlexplore.fit.trace_fit.calibrate_traces`.

- :meth:`TraceSide._init_traces` loads the traces once (never on a slider move), infers the setup
  and returns it for the controls to start at; the controls the trace set are marked (class
  ``dlx-inferred``, a green edge, and a tooltip saying where the value came from);
- the "Your run" panel tells, at the run's GPU count, the measured and predicted throughput, step
  time and its parts, collectives and memory, with the error; the runs are diamonds on the
  throughput plot, hatched bars beside the predicted step bars, their peak memory under the
  predicted stack and their collectives of one step above the predicted ones;
- "Calibrate to the trace" fits the model to the runs chosen (the others are held out), and the
  fit is shown in words, saved to JSON and loaded again.

Kept whole: the panel, the overlays it draws and the calibration it applies share the loaded runs
and the fit's state (which runs are fitted, the calibration in use); split, each part would reach
into the others' attributes.
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

from ..errors import DlexploreError
from ..fit.calibration_file import load_calibration, save_calibration
from ..fit.trace_fit import TraceCalibration, calibrate_traces
from ..fit.trace_point import TracePoint, step_collectives, trace_point
from ..fit.trace_setup import Inferred, infer_setup, load_traces
from ..plots.palette import GIB, GREEN, VERMILION
from ._comparison import held_out_factors
from ._controls import workload_label

__all__ = ["TraceSide"]

#: Controls a trace can set, as the explorer names them.
_CONTROLS = ("gpus", "workload", "batch_size", "gpu", "precision", "algorithm", "gpus_per_node")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3g} ms" if np.isfinite(seconds) else "n/a"


def _rate(samples_per_s: float) -> str:
    return f"{samples_per_s:,.4g}/s" if np.isfinite(samples_per_s) else "n/a"


def _err(predicted: float, measured: float) -> str:
    if not (np.isfinite(predicted) and np.isfinite(measured) and measured):
        return ""
    return f"{(predicted - measured) / measured:+.0%}"


class TraceSide:
    """The traced half of the explorer (see the module docstring)."""

    _trace_points: list[TracePoint]

    # -- loading ----------------------------------------------------------------------------------

    def _init_traces(self, trace: Any, batch_size: int | None) -> dict[str, Any]:
        """Load the traces; the settings they give (explorer control names and values)."""
        self._trace_points = []
        self._inferred = {}
        self._trace_bars: dict[str, dict[str, np.ndarray]] = {}
        self._step_collectives: dict[str, dict[str, np.ndarray]] = {}
        if trace is None:
            return {}
        traces = load_traces(trace)
        points = []
        for t in traces:
            setup = infer_setup(t)
            points.append(trace_point(t, setup, batch_size=batch_size))
        self._trace_points = sorted(points, key=lambda p: p.gpus)
        first = self._trace_points[0].setup
        given: dict[str, Any] = {}
        for name in _CONTROLS:
            item = first.settings.get(name)
            if item is not None and item.known:
                given[name] = item.value
                self._inferred[name] = item
        if first.workload is not None:
            given["workload"] = first.workload  # the record: a traced model is in no catalog
        per_node = [p.setup.value("gpus_per_node") for p in self._trace_points]
        if len(per_node) > 1 and all(v is not None for v in per_node):
            given["gpus_per_node"] = max(per_node)
            self._inferred["gpus_per_node"] = Inferred(
                max(per_node), "each run's ranks on one host: the largest run's"
            )
        given["gpus"] = (
            self._trace_points[-1].gpus if len(self._trace_points) == 1 else self._trace_points[0].gpus
        )
        return given

    def _mark_inferred(self) -> None:
        """The controls the trace set: a green edge, and where the value came from in the tooltip."""
        for name, item in self._inferred.items():
            control = self.controls.get(name)
            if control is None:
                continue
            control.add_class("dlx-inferred")
            control.tooltip = f"from the trace: {item.how}"

    # -- the panel --------------------------------------------------------------------------------

    def _make_trace_panel(self) -> w.VBox | None:
        # No trace, no panel: every widget made is a model the browser builds before the first paint.
        self.trace_box = None
        if not self._trace_points:
            self.trace_report = self.fit_report  # where a loaded fit is reported
            return None
        layout = w.Layout(width="auto")
        self.trace_status = w.HTML(layout=layout)
        self.trace_status.add_class("dlx-trace-status")
        self.trace_report = w.HTML(layout=layout)
        self.trace_report.add_class("dlx-trace-report")
        counts = sorted({p.gpus for p in self._trace_points})
        options = [("all runs", "all")]
        options += [(f"runs on <= {g} GPUs; hold out the rest", str(g)) for g in counts[:-1]]
        # several runs: calibrate on the smallest and see the error on the others by default
        self.trace_fit_on = w.Dropdown(
            options=options,
            value=str(counts[0]) if len(counts) > 1 else "all",
            description="Fit on",
            style={"description_width": "50px"},
            layout=w.Layout(width="360px", max_width="100%"),
        )
        self.trace_calibrate_button = w.Button(
            description="Calibrate to the trace",
            button_style="info",
            layout=w.Layout(width="auto"),
            tooltip="fit compute per sample, each link's bandwidth and latency, and the overlap to the "
            "traced runs chosen; the others are held out and their error shown",
        )
        self.trace_reset_button = w.Button(description="Reset", layout=w.Layout(width="auto"))
        self.calibration_path = w.Text(
            value=f"calibration-{self._trace_points[0].label}.json",
            layout=w.Layout(width="auto", flex="1 1 160px", min_width="0"),
        )
        save = w.Button(description="Save fit", layout=w.Layout(width="auto"), tooltip="write it as JSON")
        load = w.Button(description="Load fit", layout=w.Layout(width="auto"), tooltip="read a saved fit")
        self.trace_calibrate_button.on_click(lambda _: self.calibrate_trace())
        self.trace_reset_button.on_click(lambda _: self.reset_calibration())
        save.on_click(lambda _: self._save_clicked())
        load.on_click(lambda _: self._load_clicked())
        choice = [self.trace_fit_on] if len(counts) > 1 else []
        row = w.HBox(
            [
                *choice,
                self.trace_calibrate_button,
                self.trace_reset_button,
                self.calibration_path,
                save,
                load,
            ],
            layout=w.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.trace_box = w.VBox([self.trace_status, row, self.trace_report])
        self.trace_box.add_class("dlx-bar")
        self.trace_box.add_class("dlx-trace")
        return self.trace_box

    def _setup_text(self) -> str:
        p = self._trace_points[0]
        told = []
        for name, item in self._inferred.items():
            value = getattr(item.value, "name", item.value)
            if name == "workload":
                value = workload_label(str(value))
            if name == "gpus" and len(self._trace_points) > 1:
                value = ", ".join(str(q.gpus) for q in self._trace_points)
            told.append(f"{name} {html.escape(str(value))}")
        asked = [
            f"<b>{html.escape(name)}</b>: {html.escape(how)}"
            for name, how in p.setup.asked.items()
            if name not in self._inferred
        ]
        text = f"From the trace (marked green): {'; '.join(told)}."
        if asked:
            text += "<br><small>Not in the trace: " + "; ".join(asked) + "</small>"
        return text

    def _write_trace_status(self) -> None:
        """The runs at their GPU counts against the line: measured, predicted, error."""
        if not self._trace_points or self.prediction is None:
            return
        pred = self.prediction
        rows = []
        for p in self._trace_points:
            if p.gpus not in pred["gpus"].values:
                rows.append(
                    f"<tr><td>{html.escape(p.label)}</td><td colspan=4>{p.gpus} GPUs: off the axis</td></tr>"
                )
                continue
            at = pred.sel(gpus=p.gpus)
            cells = [
                ("throughput", p.throughput, float(at["throughput"]), _rate),
                ("step", p.step_time, float(at["step_time"]), lambda v: _ms(v)),
                ("compute", p.time_compute, float(at["time_compute"]), lambda v: _ms(v)),
                ("comm (exposed)", p.time_comm_exposed, float(at["time_comm_exposed"]), lambda v: _ms(v)),
            ]
            if p.memory_peak is not None:
                cells.append(
                    (
                        "memory peak",
                        p.memory_peak / GIB,
                        float(at["mem_total"]) / GIB,
                        lambda v: f"{v:.3g} GiB",
                    )
                )
            red = f"<span style='color:{VERMILION}'>"
            shown = "".join(
                f"<td>{name}: <b>{fmt(m)}</b> vs {fmt(q) if np.isfinite(q) else 'cannot run'} "
                f"{red}{_err(q, m)}</span></td>"
                for name, m, q, fmt in cells
            )
            many = "s" if p.gpus != 1 else ""
            rows.append(f"<tr><td><b>{html.escape(p.label)}</b> ({p.gpus} GPU{many})</td>{shown}</tr>")
        legend = (
            "measured <b>bold</b> vs the line at the run's GPU count (the settings shown: the run's "
            "until you change them), error "
            "(predicted - measured) / measured"
        )
        notes = "".join(f"; {html.escape(n)}" for p in self._trace_points for n in p.notes)
        table = f"<table style='font-size:12px'>{''.join(rows)}</table>"
        self.trace_status.value = (
            f"<b>Your run</b>: {self._setup_text()}{table}<small>{legend}{notes}</small>"
        )

    def _show_bars(self) -> None:
        """The published measurement's bar unless your run is all that is measured, and your run's."""
        if not self._trace_points:  # the published measurement's bar is the whole of it
            return
        bars = [self.bar] if self.measured_dataset is not None or not self._trace_points else []
        if self._trace_points:
            bars.append(self.trace_box)
        if list(self._bars.children) != bars:
            self._bars.children = bars

    # -- the plots --------------------------------------------------------------------------------

    def _trace_marks(self, published: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The published marks and the traced runs' throughput, each with its error against the
        line (interpolated in log-log as for the published points)."""
        points = [p for p in self._trace_points if np.isfinite(p.throughput)]
        if not points:
            return dict(published)
        line = self.prediction
        gpus = np.array([p.gpus for p in points], dtype=float)
        measured = np.array([p.throughput for p in points])
        g, thr = line["gpus"].values.astype(float), line["throughput"].values.astype(float)
        ok = np.isfinite(thr)
        predicted = (
            np.exp(np.interp(np.log(gpus), np.log(g[ok]), np.log(thr[ok]), left=np.nan, right=np.nan))
            if ok.sum() > 1
            else np.full(gpus.size, np.nan)
        )
        fitted = self._fitted_runs()
        group = [
            "your run"
            if fitted is None
            else ("your run (fitted)" if p.label in fitted else "your run (held out)")
            for p in points
        ]
        color = [GREEN if g_ == "your run (held out)" else VERMILION for g_ in group]
        c = self.controls
        trace_cols = {
            "gpus": gpus,
            "throughput": measured,
            "label": np.array([p.label for p in points], dtype=object),
            "group": np.array(group, dtype=object),
            "color": np.array(color, dtype=object),
            "source": np.array([p.setup.source for p in points], dtype=object),
            "gpu": np.array([p.setup.value("gpu", "not in the trace") for p in points], dtype=object),
            "network": np.array([c["network"].value] * len(points), dtype=object),
            "batch_size": np.array([p.batch_size for p in points], dtype=float),
            "algorithm": np.array([p.setup.value("algorithm", "") for p in points], dtype=object),
            "predicted": predicted,
            "error": (predicted - measured) / measured,
        }
        return {k: np.concatenate([np.asarray(published[k]), trace_cols[k]]) for k in trace_cols}

    def _fitted_runs(self) -> set[str] | None:
        cal = getattr(self, "calibration", None)
        if not isinstance(cal, TraceCalibration) or "label" not in cal.points:
            return None
        return set(cal.points.loc[cal.points["fitted"].astype(bool), "label"].astype(str))

    def _show_trace_layers(self) -> None:
        """The runs' step bars and peak memory (once per recompute)."""
        if not self._trace_points:
            return
        from ..plots.timeline import measured_step_columns

        if not self._trace_bars:
            for p in self._trace_points:
                self._trace_bars[p.label] = measured_step_columns(p.breakdown(), label=p.label, gpus=p.gpus)
            self._show_step_bars()
        peaks = [p for p in self._trace_points if p.memory_peak is not None]
        if peaks:
            p = max(peaks, key=lambda q: q.memory_peak)
            note = (
                "counted from the profiler's start (the trace gives no totals)" if p.memory_relative else ""
            )
            self.overlays.show_memory_peak(p.memory_peak / GIB, f"{p.label} ({p.gpus} GPUs)", note)

    def _show_step_bars(self) -> None:
        bars = {**self._trace_bars, **self._traces}
        merged = {
            key: np.concatenate([columns[key] for columns in bars.values()])
            for key in next(iter(bars.values()))
        }
        self.figures.show_measured_steps(merged)

    def add_trace(self, trace_or_breakdown: Any, label: str | None = None) -> str:
        """Lay a measured step-time breakdown beside the predicted bars; returns its label.

        ``trace_or_breakdown`` is a :class:`dlexplore.traces.Trace` (its
        :meth:`~dlexplore.traces.Trace.breakdown` is taken), a breakdown dataset on (rank, step),
        or what :func:`dlexplore.load_trace` reads. The bar is the mean over ranks and steps, in
        the explorer's stack (compute, communication overlapped by compute, exposed
        communication, data loading) plus memcpy and idle time, hatched, on an axis factor
        ``"<ranks>: <label>"`` right after the predicted bar for that many GPUs. The measured
        setup is not adopted: compare it with a prediction of the same workload and hardware
        (``Explorer(trace=...)`` does adopt it). Adding a label again replaces its bar.
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
        with self._batched():
            self._show_step_bars()
        return name

    def _show_trace_collectives(self) -> None:
        """The collectives of the run traced at the GPU count selected, above the predicted ones."""
        if not self._trace_points:
            return
        here = [p for p in self._trace_points if p.gpus == self.selected_gpus]
        if here and here[0].label not in self._step_collectives:
            self._step_collectives[here[0].label] = step_collectives(here[0])
        self.overlays.show_collectives(self._step_collectives[here[0].label] if here else None)

    # -- calibrating ------------------------------------------------------------------------------

    def _fit_mask(self) -> np.ndarray:
        choice = self.trace_fit_on.value
        gpus = np.array([p.gpus for p in self._trace_points])
        return np.ones(gpus.size, dtype=bool) if choice == "all" else gpus <= int(choice)

    def calibrate_trace(self, fit: Any = None) -> TraceCalibration | None:
        """Fit the model to the traced runs (``fit``: a mask over the runs in GPU order, default
        the "Fit on" choice) and predict with the fit from then on; returns the calibration."""
        if not self._trace_points:
            raise DlexploreError("no trace: Explorer(trace=PATH) or add one first")
        mask = self._fit_mask() if fit is None else np.asarray(fit, dtype=bool)
        settings = self._predict_settings(calibrated=False)
        try:
            cal = calibrate_traces(self._trace_points, settings, fit=mask)
        except DlexploreError as err:
            self.trace_report.value = f"<span style='color:{VERMILION}'>{html.escape(str(err))}</span>"
            return None
        self._use_calibration(cal)
        return cal

    def _use_calibration(self, cal: Any) -> None:
        """Predict with ``cal``'s parameters from now on; the report says what they are."""
        if self.calibration is None:
            self._kwargs_before_calibration = dict(self._model_kwargs)
        c = self.controls
        values = cal.fitted()
        with self._hold():
            self._dirty.add("calibration")
            self.calibration = cal
            self._band = held_out_factors(cal) if "fitted" in cal.points else None
            for name in ("compute_efficiency", "overlap", "intra_bandwidth", "intra_latency"):
                if name in values:
                    self._model_kwargs[name] = values[name]
            if "bandwidth" in values:
                c["bandwidth"].value = values["bandwidth"]
            if "latency" in values:
                c["latency"].value = values["latency"] * 1e6
        lines = cal.report() if hasattr(cal, "report") else [repr(cal)]
        self.trace_report.value = (
            f"<b>Calibrated</b> ({html.escape(cal.fit_on)}); the line is the calibrated model with its "
            f"{(cal.level or 0.9):.0%} band, the faint dotted one the model before.<ul style='margin:2px'>"
            + "".join(f"<li>{html.escape(line)}</li>" for line in lines)
            + "</ul>"
        )

    def _forget_calibration(self, reason: str) -> None:
        had = self.calibration is not None
        super()._forget_calibration(reason)
        if had and self.trace_box is not None:  # said where the fit was reported
            self.trace_report.value = self.fit_report.value

    def _save_clicked(self) -> None:
        if self.calibration is None:
            self.trace_report.value = "<i>Calibrate first: there is no fit to save.</i>"
            return
        path = self.calibration_path.value.strip()
        try:
            save_calibration(self.calibration, path)
        except (OSError, DlexploreError) as err:
            self.trace_report.value = f"<span style='color:{VERMILION}'>{html.escape(str(err))}</span>"
            return
        self.trace_report.value += f"<small>Saved to {html.escape(os.path.abspath(path))}.</small>"

    def _load_clicked(self) -> None:
        try:
            self.load_calibration(self.calibration_path.value.strip())
        except DlexploreError as err:
            self.trace_report.value = f"<span style='color:{VERMILION}'>{html.escape(str(err))}</span>"

    def save_calibration(self, path: str | os.PathLike) -> None:
        """Write the calibration in use to ``path`` as JSON
        (:func:`dlexplore.fit.save_calibration`)."""
        if self.calibration is None:
            raise DlexploreError("no calibration to save: calibrate first")
        save_calibration(self.calibration, path)

    def load_calibration(self, path: str | os.PathLike):
        """Predict with a calibration saved earlier (:meth:`save_calibration`); returns it."""
        cal = load_calibration(path)
        self._use_calibration(cal)
        return cal
