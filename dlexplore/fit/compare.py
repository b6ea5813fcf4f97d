"""Predicted against measured: the model at every measured point, and the error of each point.

:func:`predict_points` runs the model at each point of a measured dataset (a ``point`` table, as
:mod:`dlexplore.measured` loads them) with that point's own setup; :func:`compare` lays any
prediction over a measured dataset and gives the error of every point, the mean absolute percentage
error (MAPE) and the largest error.

**Error** (a fraction, units ``1``)::

    error     = (predicted - measured) / measured      > 0: the model is too high (optimistic
                                                        for throughput, pessimistic for a time)
    abs_error = |error|
    mape      = mean of abs_error over the points compared        (0.05 = 5 %)
    max_error = largest abs_error over the points compared

**How a measured point's setup becomes the model's arguments** (:func:`predict_points`):

- ``workload``, ``gpu``, ``precision``, ``batch_size``, ``gpus``, ``gpus_per_node`` are the point's
  own. Where the table has no ``gpus_per_node`` column it is the model keyword if given, else
  ``gpus`` when the point's ``network`` is an intra-node link (a single server), else 1.
- ``network`` gives the inter-node bandwidth and latency (catalog figures). A network the catalog
  does not know (``unknown``) leaves them unknown: multi-node points are then not predicted unless
  ``bandwidth=`` and ``latency=`` are given.
- The **intra-node link** (not a column of the tables): the ``intra_link=`` keyword if given; else
  the point's ``network`` when that is an intra-node link (NVLink, PCIe: the table names the node's
  link on single-node rows); else the intra-node link the same table names on the single-node rows
  of the same GPU, when there is exactly one (Goyal et al.'s 256-GPU row thus gets the NVLink1 of
  its 8-GPU row); else the model's default, PCIe3.
- ``algorithm``: ``none`` (one GPU), ``unknown`` and empty cells become the ``algorithm=`` keyword,
  else the collective's default (``ring`` for the gradient allreduce: NCCL's choice for large
  messages); ``nvls`` (NVLink SHARP, reduction inside the NVSwitches) becomes a parameter server
  with one server per GPU (``servers = gpus``): every GPU pushes its buffer to the switch and pulls
  the reduced result, ``2 n / B``; aliases (``rabenseifner``, ``ps``, ...) are understood; any
  other label is not predicted (the point's reason is in ``attrs["not_predicted"]``).
- ``servers`` (parameter server): the keyword, default 1 (the published tables do not say).
- Keywords for a point column (``network``, ``algorithm``, ``gpus_per_node``, ``workload``,
  ``gpu``, ``precision``) only fill in what a point does not say (a missing column, ``unknown``);
  the other keywords (``compute_efficiency``, ``bandwidth``, ``latency``, ``intra_link``,
  ``intra_bandwidth``, ``intra_latency``, ``overlap``, ``gamma``, ``servers``, ``optimizer``,
  ``bucket_size``, ``storage``, ``io_threads``, ``prefetch``, ``workspace``) apply to every point.
- **Efficiency**: relative to the table's ``baseline_gpus`` (Goyal et al.: 8 GPUs): the step time
  at ``baseline_gpus`` over the step time at ``gpus``, same setup otherwise; without that column,
  the model's own efficiency (against 1 GPU).
- **Communication tables** (``collective`` column): time, algbw and busbw of the collective from
  :func:`dlexplore.model.collective_time`, over the intra-node link when ``gpus <= gpus_per_node``,
  else the network (``hierarchical`` uses both), as the step model does. A point without a message
  size (``bytes``) is predicted in the large-message limit: algbw and busbw from the bandwidth term
  alone, time NaN.

Points are evaluated in groups that share every setting except ``gpus``, ``batch_size`` and
``gpus_per_node``: one :func:`dlexplore.predict` call per group, with those three as sweeps.

Kept whole: the rules by which a measured point becomes the model's arguments are written out in
words here (half the module), beside the two functions that apply them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from ..model.conventions import PREDICTED_SOURCE, VARIABLES
from .point_model import PointModel
from .points import PARAMETER_NAMES, SETTINGS, UNSAID, VARIABLE_ORDER, as_points, canonical

__all__ = ["compare", "predict_points", "as_points", "ERROR_DEFINITION", "PARAMETER_NAMES"]

ERROR_DEFINITION = "(predicted - measured) / measured: > 0 where the model is above the measurement"


# --- sources ---------------------------------------------------------------------------------------


# --- canonical names --------------------------------------------------------------------------------


# --- the model at the points ------------------------------------------------------------------------


def predict_points(measured: str | Path | xr.Dataset, **model_kwargs: Any) -> xr.Dataset:
    """The model's prediction at every point of a measured dataset, with that point's own setup.

    Parameters
    ----------
    measured:
        A measured dataset along ``point`` (:func:`dlexplore.measured.load`), a bundled dataset's
        name, a CSV path or nccl-tests output.
    model_kwargs:
        Model keywords (:func:`dlexplore.predict`'s, as scalars): ``compute_efficiency``,
        ``bandwidth`` (GB/s), ``latency`` (s), ``intra_link``, ``intra_bandwidth``,
        ``intra_latency``, ``overlap``, ``gamma`` (s/byte), ``servers``, ``optimizer``,
        ``bucket_size`` (bytes), ...; ``network``, ``algorithm``, ``gpus_per_node`` fill in only
        what the points leave unsaid (module docstring).

    Returns
    -------
    xarray.Dataset
        On the measured ``point`` dimension with all its coordinates, plus ``intra_link`` and
        ``model_algorithm`` (what the model used). Training tables: every variable of
        :func:`dlexplore.predict` (``throughput`` samples/s, ``step_time`` s, ``efficiency``
        relative to the table's ``baseline_gpus`` ...); communication tables: ``time`` (s),
        ``algbw`` and ``busbw`` (GB/s); hybrid-parallel tables (:mod:`dlexplore.fit.hybrid`):
        ``step_time``, ``throughput``, ``tokens_per_s``, ``tflops_per_gpu``, ``mfu``, ``hfu``.
        Points the model cannot predict are NaN, and ``attrs["not_predicted"]`` says why, point by
        point.
    """
    ds = as_points(measured)
    if ds.attrs.get("table") == "hybrid":
        from .hybrid import hybrid_predict_points

        return hybrid_predict_points(ds, **model_kwargs)
    model = PointModel(ds, model_kwargs)
    reasons = model.reason.copy()
    values = model.evaluate(reasons=reasons)
    out = xr.Dataset(coords={name: ds[name] for name in ds.coords if ds[name].dims == ("point",)})
    for name, value in values.items():
        units, long_name = VARIABLES.get(name, ("1", name))
        if name == "efficiency" and "baseline_gpus" in ds.coords:
            long_name = "scaling efficiency against baseline_gpus GPUs"
        out[name] = xr.Variable("point", value, {"units": units, "long_name": long_name})
    out = out.assign_coords(
        intra_link=("point", model.intra_link.astype(object), {"long_name": "intra-node link used"}),
        model_algorithm=(
            "point",
            model.algorithm.astype(object),
            {"long_name": "the model's algorithm for the point"},
        ),
    )
    name = ds.attrs.get("name", "")
    out.attrs.update(
        source=f"{PREDICTED_SOURCE}, at the points of {name or 'a measured dataset'}",
        kind="predicted",
        title=f"predicted at the measured points of {name}".strip(),
        measured_source=ds.attrs.get("source", ""),
        table=model.table,
        model_kwargs=repr(dict(model_kwargs)),
        not_predicted="; ".join(f"point {i}: {r}" for i, r in enumerate(reasons) if r),
    )
    return out


# --- compare ---------------------------------------------------------------------------------------


def _shared_variables(predicted: xr.Dataset, measured: xr.Dataset, variable: str | None) -> list[str]:
    both = [v for v in measured.data_vars if v in predicted.data_vars]
    ordered = [v for v in VARIABLE_ORDER if v in both] + [v for v in both if v not in VARIABLE_ORDER]
    if not ordered:
        raise DlexploreError(
            f"nothing to compare: the measured variables ({', '.join(map(str, measured.data_vars))}) "
            f"and the predicted ones ({', '.join(map(str, predicted.data_vars))}) share none"
        )
    if variable is not None:
        if variable not in ordered:
            raise DlexploreError(
                f"variable {variable!r} is not in both datasets; shared: {', '.join(ordered)}"
            )
        ordered.remove(variable)
        ordered.insert(0, variable)
    return ordered


def _match_dim(
    name: str, wanted: np.ndarray, available: np.ndarray, numeric: str, gpus: np.ndarray | None
) -> np.ndarray:
    """Position of each measured value along a predicted dimension, -1 where none matches."""
    pos = np.full(len(wanted), -1, dtype=np.int64)
    if available.dtype.kind in "iuf" and np.asarray(wanted).dtype.kind in "iuf":
        w = np.asarray(wanted, dtype=float)
        a = np.asarray(available, dtype=float)
        diff = np.abs(w[:, None] - a[None, :])
        best = np.argmin(diff, axis=1)
        if numeric == "nearest":
            return best
        exact = diff[np.arange(len(w)), best] <= 1e-9 * np.maximum(np.abs(w), 1e-300)
        return np.where(exact, best, -1)
    lookup = {canonical(name, str(v)): i for i, v in enumerate(available)}
    for i, value in enumerate(wanted):
        key = canonical(name, str(value))
        if name == "algorithm" and (key in UNSAID or (gpus is not None and gpus[i] == 1)):
            # unsaid: the default mapping (ring); one GPU exchanges nothing, any algorithm will do
            key = "ring" if "ring" in lookup else next(iter(lookup))
        pos[i] = lookup.get(key, -1)
    return pos


def _same_scalar(name: str, wanted: np.ndarray, value: Any, gpus: np.ndarray | None) -> np.ndarray:
    if (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and np.asarray(wanted).dtype.kind in "iuf"
    ):
        w = np.asarray(wanted, dtype=float)
        out = np.abs(w - float(value)) <= 1e-9 * np.maximum(np.abs(w), 1e-300)
    else:
        target = canonical(name, str(value))
        out = np.array([canonical(name, str(v)) == target for v in wanted], dtype=bool)
    if name == "algorithm":
        unsaid = np.array([str(v).strip().lower() in UNSAID for v in wanted], dtype=bool)
        out |= unsaid
    if name in ("algorithm", "gpus_per_node") and gpus is not None:
        out |= gpus == 1  # one GPU exchanges nothing: neither setting changes it
    return out


def _align_grid(
    predicted: xr.Dataset, measured: xr.Dataset, names: list[str], numeric: str
) -> tuple[dict[str, xr.DataArray], np.ndarray, list[str], dict]:
    n = measured.sizes["point"]
    ok = np.ones(n, dtype=bool)
    notes: list[str] = []
    gpus = measured["gpus"].values if "gpus" in measured.coords else None
    indexers: dict[str, xr.DataArray] = {}
    used: dict[str, np.ndarray] = {}
    for name in predicted.coords:
        if name not in measured.coords or measured[name].dims != ("point",) or name == "point":
            continue
        if name in SETTINGS:
            continue  # how the model ran, not which point: a table's free label, not matched
        wanted = measured[name].values
        coord = predicted[name]
        if name in predicted.dims:
            pos = _match_dim(name, wanted, coord.values, numeric, gpus)
            missing = pos < 0
            if missing.any():
                notes.append(f"{name}: {int(missing.sum())} point(s) with a value the prediction lacks")
            ok &= ~missing
            indexers[name] = xr.DataArray(np.where(missing, 0, pos), dims="point")
            used[name] = coord.values[np.where(missing, 0, pos)]
        elif coord.ndim == 0:
            if name == "network" and str(coord.item()) == "custom":
                continue  # bandwidth and latency given by hand: compares with any network
            same = _same_scalar(name, wanted, coord.item(), gpus)
            if (~same).any():
                notes.append(
                    f"{name}: {int((~same).sum())} point(s) differ from the prediction's {coord.item()!r}"
                )
            ok &= same
    picked = predicted.isel(indexers) if indexers else predicted
    out: dict[str, xr.DataArray] = {}
    for var in names:
        da = picked[var]
        if "point" not in da.dims:
            da = da.expand_dims(point=n)
        da = da.drop_vars([c for c in da.coords if c not in da.dims or c == "point"], errors="ignore")
        if var == "efficiency" and "baseline_gpus" in measured.coords:
            da = _rebase_efficiency(predicted, measured, indexers, da, notes)
        out[var] = da.where(xr.DataArray(ok, dims="point"))
    return out, ok, notes, used


def _rebase_efficiency(
    predicted: xr.Dataset, measured: xr.Dataset, indexers: dict, da: xr.DataArray, notes: list[str]
) -> xr.DataArray:
    """Predicted efficiency relative to the measured table's ``baseline_gpus`` (not to 1 GPU)."""
    base = measured["baseline_gpus"].values
    if np.all(base == 1):
        return da
    if "gpus" not in predicted.dims:
        notes.append("efficiency: the prediction has no gpus dimension to find baseline_gpus on")
        return da.where(xr.DataArray(base == 1, dims="point"))
    pos = _match_dim("gpus", base, predicted["gpus"].values, "exact", None)
    found = pos >= 0
    if (~found).any():
        notes.append(f"efficiency: {int((~found).sum())} point(s) whose baseline_gpus the prediction lacks")
    at_base = predicted["efficiency"].isel(
        {**indexers, "gpus": xr.DataArray(np.where(found, pos, 0), dims="point")}
    )
    if "point" not in at_base.dims:
        at_base = at_base.expand_dims(point=len(base))
    at_base = at_base.drop_vars(
        [c for c in at_base.coords if c not in at_base.dims or c == "point"], errors="ignore"
    )
    return (da / at_base).where(xr.DataArray(found, dims="point"))


def _align_points(
    predicted: xr.Dataset, measured: xr.Dataset, names: list[str]
) -> tuple[dict[str, xr.DataArray], np.ndarray, list[str], dict]:
    if predicted.sizes["point"] != measured.sizes["point"]:
        raise DlexploreError(
            f"both datasets are along 'point' but have {predicted.sizes['point']} and "
            f"{measured.sizes['point']} points; expected the same points "
            "(predict_points(measured))"
        )
    for name in ("workload", "gpu", "gpus", "batch_size", "precision", "collective", "bytes", "setup"):
        if name in predicted.coords and name in measured.coords:
            a, b = predicted[name].values, measured[name].values
            if a.shape != b.shape or not all(str(x) == str(y) for x, y in zip(a, b, strict=True)):
                raise DlexploreError(
                    f"the two datasets' points differ in {name}; expected the same points in the same order"
                )
    out = {}
    for var in names:
        da = predicted[var]
        out[var] = da.drop_vars([c for c in da.coords if c not in da.dims or c == "point"], errors="ignore")
    return out, np.ones(measured.sizes["point"], dtype=bool), [], {}


def compare(
    predicted: xr.Dataset,
    measured: str | Path | xr.Dataset,
    *,
    variable: str | None = None,
    numeric: str = "exact",
) -> xr.Dataset:
    """Lay a prediction over a measured dataset: per-point error, MAPE and maximum error.

    Parameters
    ----------
    predicted:
        A prediction: :func:`dlexplore.predict` or :func:`dlexplore.predict_comm` output (sweeps as
        dims, scalar settings as 0-d coordinates), or :func:`predict_points` output (along the
        same ``point`` as ``measured``).
    measured:
        A measured dataset along ``point``, a bundled dataset's name, a CSV path or nccl-tests
        output.
    variable:
        The variable whose columns are named plainly (``measured``, ``predicted``, ``error``,
        ``abs_error``, ``mape``, ``max_error``); default the first shared one of ``throughput``,
        ``efficiency``, ``time``, ``busbw``, ``algbw``, ``step_time``.
    numeric:
        How a point finds its place along a numeric dimension of the prediction (``gpus``,
        ``batch_size``, ``bytes`` ...): ``"exact"`` (equal values; a point with a value the
        prediction lacks is not compared) or ``"nearest"`` (the nearest value; the value used is in
        the coordinate ``predicted_<dim>``).

    Alignment: every coordinate the two datasets share is matched. Text coordinates match exactly,
    on catalog ids and normalised names (``ResNet50`` = ``resnet50``). A scalar coordinate of the
    prediction (``network='25GbE'``, ``gpus_per_node=4``) must equal the point's, else the point is
    not compared (NaN; ``attrs["unmatched"]`` counts them), except a ``network`` of ``custom`` (a
    prediction with ``bandwidth`` and ``latency`` given, which compares with any network) and
    ``algorithm``, and the model settings ``framework``, ``transport``, ``servers_colocated`` and
    ``attention``, which tables record as free labels and which are not matched. For ``algorithm``,
    a point whose
    algorithm is ``none`` or ``unknown`` compares with any, and so does a point on one GPU, whose
    algorithm and GPUs per node change nothing; along an ``algorithm`` dimension such points take
    ``ring``. Dimensions of the prediction the points do
    not have (a ``bandwidth`` sweep) stay: every point gets an error for each of their values, and
    ``mape`` runs along them. Measured efficiency relative to ``baseline_gpus`` is compared with the
    predicted efficiency rebased to the same GPU count.

    Returns
    -------
    xarray.Dataset
        Along ``point`` (the measured coordinates, and any remaining prediction dims): for the main
        variable ``measured``, ``predicted`` (its units), ``error`` and ``abs_error`` (1, see
        :data:`ERROR_DEFINITION`), ``mape`` and ``max_error`` (1, over the points); every other shared
        variable ``v`` gets ``v_measured``, ``v_predicted``, ``v_error``, ``v_abs_error``, ``v_mape``,
        ``v_max_error``. ``attrs``: ``source`` (both sources), ``predicted_source``,
        ``measured_source``, ``variable``, ``error_definition``, ``matching``, ``compared`` (points
        with an error), ``unmatched`` (why others are not), and ``mape``/``max_error`` (and
        ``mape_<v>``/``max_error_<v>``) as numbers when there is no remaining dimension.
    """
    if numeric not in ("exact", "nearest"):
        raise DlexploreError(f"numeric must be 'exact' or 'nearest', got {numeric!r}")
    if not isinstance(predicted, xr.Dataset):
        raise DlexploreError(f"predicted: expected an xarray.Dataset, got {type(predicted).__name__}")
    meas = as_points(measured)
    names = _shared_variables(predicted, meas, variable)
    if "point" in predicted.dims:
        aligned, ok, notes, used = _align_points(predicted, meas, names)
        matching = "by point (the prediction was made at the measured points)"
    else:
        aligned, ok, notes, used = _align_grid(predicted, meas, names, numeric)
        matching = f"text coordinates exactly; numeric ones {numeric}" + (
            "" if numeric == "exact" else " (values used in predicted_<dim>)"
        )
    coords = {name: meas[name] for name in meas.coords if meas[name].dims == ("point",)}
    out = xr.Dataset(coords=coords)
    if numeric == "nearest":
        for dim, values in used.items():
            out.coords[f"predicted_{dim}"] = xr.Variable("point", values, dict(predicted[dim].attrs))
    attrs: dict[str, Any] = {}
    for k, var in enumerate(names):
        prefix = "" if k == 0 else f"{var}_"
        m = meas[var].variable.to_base_variable()
        p = aligned[var].transpose("point", ...)
        units = meas[var].attrs.get("units") or VARIABLES.get(var, ("1", var))[0]
        long_name = meas[var].attrs.get("long_name", var)
        mv = xr.DataArray(m.values, dims="point")
        with np.errstate(divide="ignore", invalid="ignore"):
            error = (p - mv) / mv.where(mv != 0)
        abs_error = abs(error)
        mape = abs_error.mean("point", skipna=True)
        max_error = abs_error.max("point", skipna=True)
        counted = (
            int(np.isfinite(error.values).any(axis=tuple(range(1, error.ndim))).sum())
            if error.ndim > 1
            else int(np.isfinite(error.values).sum())
        )
        out[f"{prefix}measured"] = xr.DataArray(
            m.values, dims="point", attrs={"units": units, "long_name": f"measured {long_name}"}
        )
        out[f"{prefix}predicted"] = p.assign_attrs(units=units, long_name=f"predicted {long_name}")
        out[f"{prefix}error"] = error.assign_attrs(
            units="1", long_name=f"relative error of the predicted {var}", definition=ERROR_DEFINITION
        )
        out[f"{prefix}abs_error"] = abs_error.assign_attrs(units="1", long_name=f"|error| of {var}")
        out[f"{prefix}mape"] = mape.assign_attrs(
            units="1", long_name=f"mean absolute percentage error of {var} (fraction)"
        )
        out[f"{prefix}max_error"] = max_error.assign_attrs(units="1", long_name=f"largest |error| of {var}")
        if mape.ndim == 0:
            suffix = "" if k == 0 else f"_{var}"
            attrs[f"mape{suffix}"] = float(mape)
            attrs[f"max_error{suffix}"] = float(max_error)
        if k == 0:
            attrs["compared"] = counted
    p_src = predicted.attrs.get("source", "unknown")
    m_src = meas.attrs.get("source", "unknown")
    out.attrs.update(
        source=f"comparison: {p_src} | against {m_src}",
        kind="comparison",
        predicted_source=p_src,
        measured_source=m_src,
        variable=names[0],
        variables=", ".join(names),
        error_definition=ERROR_DEFINITION,
        matching=matching,
        points=int(meas.sizes["point"]),
        unmatched="; ".join(notes),
        **attrs,
    )
    return out
