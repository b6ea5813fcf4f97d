"""The explorer's calibration: fit the model to the measured points shown, report the error on
them before and after, shade the calibrated prediction band, and forget it all again.

A mixin of :class:`dlexplore.widgets.Explorer` through
:class:`~dlexplore.widgets._measured_side.MeasuredSide` (it uses the explorer's controls, ``_hold``,
``_predict``, ``_marks`` and figures).
"""

from __future__ import annotations

import html
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from ._comparison import held_out_factors, points_of

__all__ = ["CalibrationSide", "FIT_ON", "error_summary"]

#: The calibrate control's choices: which measured points to fit (the others are held out).
FIT_ON = {"1 GPU": "gpus == 1", "up to 8 GPUs": "gpus <= 8", "all points": None}
_VERMILION = "#D55E00"


def _fmt_value(value: float, units: str) -> str:
    if not np.isfinite(value):
        return "n/a" if np.isnan(value) else "not identifiable"
    if units == "s":
        return f"{value * 1e6:.3g} µs"
    return f"{value:.3g} {units}" if units not in ("1", "") else f"{value:.3g}"


def error_summary(marks: Mapping[str, np.ndarray]) -> tuple[int, float, float]:
    """How many points are compared with the line, their mean and largest |error| (fractions)."""
    error = np.abs(np.asarray(marks["error"], dtype=float))
    error = error[np.isfinite(error)]
    if not error.size:
        return 0, np.nan, np.nan
    return int(error.size), float(error.mean()), float(error.max())


class CalibrationSide:
    """Calibrating the explorer to the measured points it shows (see the module docstring)."""

    calibration: Any = None

    # -- calibrating ----------------------------------------------------------------------------

    def _comparable_points(self, ds: xr.Dataset) -> xr.Dataset | None:
        """The measured points the curve shown stands for: this workload and precision, and this
        algorithm or one GPU (the same rule as the error column of the overlay)."""
        c = self.controls
        subset = points_of(ds, c["workload"].value, c["gpu"].value)
        if subset is None:
            return None
        keep = np.ones(subset.sizes["point"], dtype=bool)
        if "precision" in subset.coords and len(np.unique(subset["precision"].values)) > 1:
            keep &= subset["precision"].values.astype(str) == c["precision"].value
        if "algorithm" in subset.coords:
            ran = subset["algorithm"].values.astype(str)
            keep &= (
                (ran == c["algorithm"].value)
                | np.isin(ran, ("none", "unknown"))
                | (subset["gpus"].values == 1)
            )
        return subset.isel(point=np.flatnonzero(keep)) if keep.any() else None

    def _fit_params(self, points: xr.Dataset, chosen: np.ndarray) -> list[str]:
        """Compute efficiency always; the link's bandwidth and latency when the chosen points span
        several GPU counts: the intra-node link's if they all fit in a node, else the network's."""
        gpus = points["gpus"].values
        params = ["compute_efficiency"]
        if len(np.unique(gpus[chosen])) > 1:
            per_node = self.controls["gpus_per_node"].value
            params += (
                ["bandwidth", "latency"]
                if np.any(gpus[chosen] > per_node)
                else ["intra_bandwidth", "intra_latency"]
            )
        return params

    def calibrate(self, fit_on: str | None = None):
        """Fit the model to the measured points shown (this workload and precision; this algorithm,
        or one GPU) and use the fitted parameters from now on; the bar reports the error on those
        points before and after, and the throughput plot shades the calibrated band.

        ``fit_on`` is a selection as in :func:`dlexplore.calibrate` (default: the "Fit on" control).
        Compute efficiency is always fitted; bandwidth and latency too when the fitted points span
        several GPU counts and can determine them. Returns the :class:`dlexplore.fit.Calibration`
        (also in :attr:`calibration`).
        """
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
        selection = FIT_ON[self.fit_on.value] if fit_on is None else fit_on
        gpus = points["gpus"].values
        chosen = (
            gpus == 1
            if selection == "gpus == 1"
            else gpus <= 8
            if selection == "gpus <= 8"
            else np.ones_like(gpus, dtype=bool)
        )
        before = error_summary(self._marks())
        c = self.controls
        settings = {k: v for k, v in self._model_kwargs.items() if k != "compute_efficiency"}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CalibrationWarning)
            try:
                cal = fit(
                    points,
                    fit_on=selection,
                    params=self._fit_params(points, chosen),
                    intra_link=c["intra_link"].value,
                    **settings,
                )
            except DlexploreError as err:
                self.fit_report.value = f"<span style='color:{_VERMILION}'>{html.escape(str(err))}</span>"
                return None
        values = cal.fitted()
        if self.calibration is None:
            self._kwargs_before_calibration = dict(self._model_kwargs)
        self.calibration = cal
        self._band = held_out_factors(cal)
        with self._hold():
            self._dirty.add("calibration")
            if "compute_efficiency" in values:
                self._model_kwargs["compute_efficiency"] = values["compute_efficiency"]
            for name in ("intra_bandwidth", "intra_latency"):
                if name in values:
                    self._model_kwargs[name] = values[name]
            if "bandwidth" in values:
                c["bandwidth"].value = values["bandwidth"]
            if "latency" in values:
                c["latency"].value = values["latency"] * 1e6
        after = error_summary(self._marks())
        notes = [str(w_.message) for w_ in caught if issubclass(w_.category, CalibrationWarning)]
        self.fit_report.value = self._fit_report(cal, selection, before, after, notes)
        return cal

    def _fit_report(
        self, cal: Any, selection: str | None, before: tuple, after: tuple, notes: Iterable[str]
    ) -> str:
        held = (
            f"held-out points: mean |error| {cal.mape_holdout:.1%}, largest {cal.max_error_holdout:.1%}"
            if np.isfinite(cal.mape_holdout)
            else "no point held out"
        )
        change = (
            f"mean |error| on the {after[0]} points compared: <b>{before[1]:.1%} before, "
            f"{after[1]:.1%} after</b> (largest {before[2]:.1%} before, {after[2]:.1%} after)"
            if before[0] and after[0]
            else ""
        )
        p = self.prediction
        interval = (
            p is not None
            and "throughput_lower" in p
            and bool(np.isfinite(p["throughput_lower"].values).any())
        )
        level = f"{cal.level:.0%} " if getattr(cal, "level", None) else ""
        parts = (
            [
                f"the calibration's {level}prediction interval (from the residuals and the fitted "
                "parameters' covariance)"
            ]
            if interval
            else []
        )
        parts += ["the largest error on held-out points"] if self._band is not None else []
        band = (
            "the shaded band holds " + " and ".join(parts)
            if parts
            else "no band: as many parameters as points fitted leaves no error to estimate, and "
            "no point was held out"
        )
        rows = "".join(
            f"<tr><td>{html.escape(str(r.name))}</td><td>{_fmt_value(r.value, r.units)}</td>"
            f"<td>± {_fmt_value(r.stderr, r.units)}</td></tr>"
            for r in cal.params.itertuples()
        )
        warned = "".join(f"<br><small>{html.escape(n)}</small>" for n in notes)
        return (
            f"<b>Calibrated</b> on {html.escape(str(selection or 'all points'))}: {change}; "
            f"{held}.<br><small>{band}.</small><table style='font-size:12px'>{rows}</table>{warned}"
        )

    def _show_band(self) -> None:
        """Shade the calibration's prediction interval, which :meth:`_predict` adds to the
        prediction (``throughput_lower``/``_upper``, :mod:`dlexplore.fit.band`), widened where
        needed to hold the largest error on held-out points (:func:`held_out_factors`): neither
        the fit's statistics nor the points it did not see fall outside."""
        p = self.prediction
        if self.calibration is None or p is None:
            self.figures.show_band(None)
            return
        lows, highs = [], []
        if self._band is not None:
            line = p["throughput"].values
            lows.append(line * self._band[0])
            highs.append(line * self._band[1])
        if "throughput_lower" in p and np.isfinite(p["throughput_lower"].values).any():
            lows.append(p["throughput_lower"].values)
            highs.append(p["throughput_upper"].values)
        if not lows:
            self.figures.show_band(None)
            return
        # fmin/fmax: where one band is undefined (NaN), the other stands
        self.figures.show_band(np.fmin.reduce(lows), np.fmax.reduce(highs))

    def reset_calibration(self) -> None:
        """Forget the calibration: back to the model's defaults and the network preset."""
        self._forget_calibration("")
        with self._hold():
            self._dirty.add("calibration")
            self._apply_network()

    def _forget_calibration(self, reason: str) -> None:
        if self.calibration is None:
            return
        self.calibration = None
        self._band = None
        self._model_kwargs = dict(self._kwargs_before_calibration)
        self.fit_report.value = f"<i>Calibration cleared: {html.escape(reason)}.</i>" if reason else ""
        self._dirty.add("calibration")
