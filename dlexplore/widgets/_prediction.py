"""The explorer's predictions: the model on every GPU count and batch of the sliders at once.

A mixin of :class:`dlexplore.widgets.Explorer`. One vectorised call (the data-parallel model of
:func:`dlexplore.predict`, or the hybrid one of :mod:`dlexplore.widgets._hybrid` for a transformer
with tensor or pipeline parallelism, ZeRO or recompute) gives a grid over ``gpus`` x
``batch_size``; the GPU and batch sliders then pick from it without calling the model. A
calibration's band (:meth:`dlexplore.fit.Calibration.add_band`) is computed on the whole grid at
once too.
"""

from __future__ import annotations

from typing import Any

import xarray as xr

from .. import catalog
from ..model import predict
from ..plots import GPU_COUNTS
from ._controls import BATCH_SIZES, NONE

__all__ = ["PredictionSide"]


class PredictionSide:
    """The grid of predictions behind the explorer's sliders (module docstring)."""

    def _predict_settings(self, *, calibrated: bool = True) -> dict[str, Any]:
        """:func:`dlexplore.predict`'s arguments for the controls but the GPUs and the batch (the
        model's parameters before calibration with ``calibrated=False``; bandwidth GB/s, latency s)."""
        c = self.controls
        kwargs = self._model_kwargs
        bandwidth, latency = float(c["bandwidth"].value), float(c["latency"].value) * 1e-6
        if not calibrated and self.calibration is not None:
            kwargs = self._kwargs_before_calibration
            net = catalog.network(c["network"].value)
            bandwidth, latency = net.bandwidth_gbs, net.latency_s
        workload = c["workload"].value
        return dict(
            workload=self._custom_workloads.get(workload, workload),
            gpu=c["gpu"].value,
            network=c["network"].value,
            bandwidth=bandwidth,
            latency=latency,
            gpus_per_node=int(c["gpus_per_node"].value),
            intra_link=c["intra_link"].value,
            algorithm=c["algorithm"].value,
            precision=c["precision"].value,
            storage=None if c["storage"].value == NONE else c["storage"].value,
            **{**self._model_extras(), **kwargs},
        )

    def _predict(self, *, calibrated: bool = True, band: bool = True) -> xr.Dataset:
        """The model on every GPU count and every batch of the slider (one vectorised call), with
        the calibration's band when calibrated (``band=False``: later, :meth:`_banded`)."""
        args = self._predict_settings(calibrated=calibrated)
        if self._hybrid_active():
            ds = self._predict_hybrid(args, list(BATCH_SIZES), list(GPU_COUNTS))

            def again(**p: Any) -> xr.Dataset:
                return self._predict_hybrid({**args, **p}, list(BATCH_SIZES), list(GPU_COUNTS))
        else:
            sweep = dict(gpus=list(GPU_COUNTS), batch_size=list(BATCH_SIZES))
            ds = predict(**args, **sweep, buckets=True).transpose("gpus", "batch_size", ...)

            def again(**p: Any) -> xr.Dataset:
                return predict(**{**args, **p}, **sweep, buckets=False).transpose("gpus", "batch_size", ...)

        self._again = (again, args["precision"]) if calibrated else getattr(self, "_again", None)
        return self._banded(ds) if band else ds

    def _wants_band(self) -> bool:
        return self.calibration is not None and self.calibration.kind == "training"

    def _banded(self, ds: xr.Dataset) -> xr.Dataset:
        """``ds`` with the calibration's prediction interval (dlexplore.fit.band), which the band
        drawn includes (``_show_band``); ``ds`` itself when there is no calibration."""
        if not self._wants_band() or "throughput_upper" in ds:
            return ds
        again, precision = self._again
        return self.calibration.add_band(
            ds, again, workload=self.controls["workload"].value, precision=precision
        )
