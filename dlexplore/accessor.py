"""``ds.dlx``: dlexplore's methods on the xarray datasets it returns (xarray's accessor pattern).

    pred = dlexplore.predict("resnet50", "P100", "25GbE", gpus=[1, 2, 4, 8, 16], batch_size=64)
    pred.dlx.kind                      # "prediction"
    pred.dlx.source, pred.dlx.units    # attrs["source"]; {variable: units}
    pred.dlx.breakdown()               # the step time split into the parts that add up to it
    pred.dlx.compare("horovod-2017-16gpu-25gbe")   # dlexplore.compare: error per point, MAPE
    pred.dlx.plot()                    # the bokeh figure for this kind of dataset
    pred.dlx.quantify()                # pint quantities (needs pint-xarray)

Registered when dlexplore is imported. This module imports xarray and nothing heavier: the fits,
bokeh and pint load when a method needs them. It sits at the top of the layers beside the widgets
and the CLI, since its methods reach down into fit and plots.
"""

from __future__ import annotations

from typing import Any

import xarray as xr

from .errors import DlexploreError

__all__ = ["DlxAccessor", "KINDS"]

#: What :attr:`DlxAccessor.kind` can say.
KINDS = ("prediction", "measured", "breakdown", "comparison", "dataset")


@xr.register_dataset_accessor("dlx")
class DlxAccessor:
    """dlexplore's view of a dataset: what it is, where it comes from, its units, and what to do
    with it (plot, compare, break down, quantify)."""

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def kind(self) -> str:
        """``comparison`` (:func:`dlexplore.compare`), ``breakdown`` (a trace's times on rank and
        step), ``prediction`` (a model's output), ``measured`` (published or user measurements),
        else ``dataset``."""
        ds, said = self._ds, self._ds.attrs.get("kind")
        if said == "comparison" or {"measured", "predicted"} <= set(ds.data_vars):
            return "comparison"
        if "step_time" in ds and set(ds["step_time"].dims) == {"rank", "step"} and "time_compute" in ds:
            return "breakdown"  # a trace's own, not a what-if over it (more dims) nor a prediction
        if said == "predicted" or str(ds.attrs.get("source", "")).startswith("predicted"):
            return "prediction"
        if said == "measured" or str(ds.attrs.get("source", "")).startswith("measured"):
            return "measured"
        return "dataset"

    @property
    def source(self) -> str:
        """Where the numbers come from (``attrs["source"]``): a model version, a trace, a paper."""
        try:
            return str(self._ds.attrs["source"])
        except KeyError:
            raise DlexploreError(
                "this dataset has no attrs['source']: it did not come from dlexplore"
            ) from None

    @property
    def units(self) -> dict[str, str]:
        """Units of every variable and coordinate that has them (pint spellings,
        :mod:`dlexplore.units`)."""
        return {
            str(name): str(var.attrs["units"])
            for name, var in self._ds.variables.items()
            if "units" in var.attrs
        }

    def quantify(self) -> xr.Dataset:
        """The dataset with pint quantities (pint-xarray's ``quantify`` with
        :func:`dlexplore.units.registry`). Variables whose units vary along a dimension (TAU's
        ``metric_units``) stay plain numbers."""
        from .units import registry

        try:
            import pint_xarray  # noqa: F401 - registers ds.pint
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                "ds.dlx.quantify needs pint-xarray: pip install pint-xarray", name=err.name
            ) from None
        ds = self._ds
        pointers = [n for n, v in ds.variables.items() if v.attrs.get("units") in ds.variables]
        plain = ds.copy()
        for name in pointers:
            plain[name].attrs = {k: v for k, v in plain[name].attrs.items() if k != "units"}
        return plain.pint.quantify(unit_registry=registry())

    def compare(self, other: Any, **options: Any) -> xr.Dataset:
        """:func:`dlexplore.compare` of a prediction and a measured dataset, whichever of the two
        this one is (``other``: a dataset, a bundled dataset's name or a CSV path)."""
        from .fit import compare

        kind = self.kind
        other_kind = other.dlx.kind if isinstance(other, xr.Dataset) else "measured"
        if kind == "prediction" and other_kind != "prediction":
            return compare(self._ds, other, **options)
        if kind == "measured" and isinstance(other, xr.Dataset) and other.dlx.kind == "prediction":
            return compare(other, self._ds, **options)
        raise DlexploreError(
            "compare needs a prediction and a measured dataset; "
            f"this one is a {kind} and the other a {other_kind}"
        )

    def breakdown(self) -> xr.Dataset:
        """Where the step time goes. A prediction: ``compute_only`` (compute with no communication
        under it), ``comm_overlapped`` (communication hidden behind the backward pass),
        ``comm_exposed`` and ``io_exposed`` (what the step waits for), in s, on the prediction's
        dims. A trace's breakdown is one already and comes back as it is."""
        ds, kind = self._ds, self.kind
        if kind == "breakdown":
            return ds
        needed = ("time_compute", "time_comm", "time_comm_exposed", "step_time")
        if kind != "prediction" or any(name not in ds for name in needed):
            raise DlexploreError(
                f"a {kind} dataset with variables {sorted(map(str, ds.data_vars))[:8]} has no step-time "
                "breakdown; predictions (dlexplore.predict) and trace breakdowns have one"
            )
        compute = ds["time_compute"]
        overlapped = (ds["time_comm"] - ds["time_comm_exposed"]).clip(min=0.0)
        overlapped = xr.where(overlapped > compute, compute, overlapped)
        io = ds["time_io_exposed"] if "time_io_exposed" in ds else xr.zeros_like(ds["step_time"])
        parts = {
            "compute_only": (compute - overlapped, "compute with no communication under it"),
            "comm_overlapped": (overlapped, "communication hidden behind compute"),
            "comm_exposed": (ds["time_comm_exposed"], "communication the step waits for"),
            "io_exposed": (io, "input I/O the step waits for"),
        }
        out = xr.Dataset(
            {name: value.assign_attrs(units="s", long_name=text) for name, (value, text) in parts.items()}
        )
        out["step_time"] = ds["step_time"]
        out.attrs = {
            "source": ds.attrs.get("source", ""),
            "kind": "predicted",
            "title": "where the step time goes (predicted)",
        }
        return out

    def plot(self, **options: Any) -> Any:
        """The bokeh figure (or layout) for this dataset's kind
        (:func:`dlexplore.plots.datasets.dataset_figure`; ``width``, ``height`` in pixels)."""
        from .plots.datasets import dataset_figure

        return dataset_figure(self._ds, self.kind, **options)
