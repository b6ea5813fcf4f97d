"""The explorer's measured side, without widgets: which points a prediction stands for, the setup
to predict them with, what still differs, and how wide the held-out points ask the calibrated
band to be.

Pure functions of datasets and plain values, so that the rules are tested without a browser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from .. import catalog
from ..errors import DlexploreError
from ..fit.points import UNSAID, fusion_of, layout_of
from ..model.comm import normalize_algorithm

__all__ = [
    "ADOPTED_MODEL_SETTINGS",
    "points_of",
    "adopted_setup",
    "adoption",
    "setup_differences",
    "held_out_factors",
]

#: Model settings the explorer has no control for but adopts from the points it is shown with
#: (their most common value): the sequence length (tokens), the micro-batches per step (gradient
#: accumulation), the network adapters per node, the CNN's memory layout and its batch-norm fusion.
#: Without them the line of a BERT table measured at 128 tokens would be predicted at the
#: workload's 512.
ADOPTED_MODEL_SETTINGS = ("seq", "grad_accum", "nics_per_node", "layout", "fusion")

#: The adopted settings that are names, each as the model names a point's value.
_NAMED = {"layout": layout_of, "fusion": fusion_of}


def _lower(values: Any) -> np.ndarray:
    return np.char.lower(np.asarray(values).astype(str))


def _resolved(kind: str, names: np.ndarray) -> np.ndarray:
    """Catalog names (aliases resolved) of ``names``; an unknown name stays as written."""
    lookup = catalog.gpu if kind == "gpu" else catalog.workload
    out = {}
    for name in set(names.tolist()):
        try:
            out[name] = lookup(name).name.lower()
        except DlexploreError:
            out[name] = name.lower()
    return np.array([out[n] for n in names.tolist()], dtype=object)


def points_of(ds: xr.Dataset, workload: str, gpu: str | None = None) -> xr.Dataset | None:
    """The points of ``ds`` measured with ``workload`` (and ``gpu``), or None if there are none."""
    keep = np.ones(ds.sizes["point"], dtype=bool)
    if "workload" in ds.coords:
        try:
            target = catalog.workload(workload).name.lower()
        except DlexploreError:  # a model of the explorer's own (a traced one): no catalog entry
            target = workload.lower()
        keep &= _resolved("workload", _lower(ds["workload"].values)) == target
    if gpu is not None and "gpu" in ds.coords:
        keep &= _resolved("gpu", _lower(ds["gpu"].values)) == catalog.gpu(gpu).name.lower()
    return ds.isel(point=np.flatnonzero(keep)) if keep.any() else None


def _most_common(values: np.ndarray) -> str:
    names, counts = np.unique(values.astype(str), return_counts=True)
    return str(names[np.argmax(counts)])


def adopted_setup(ds: xr.Dataset, precision: str | None = None) -> dict[str, Any]:
    """The explorer's settings that make its line predict the points of ``ds`` (one workload and
    GPU, see :func:`points_of`): the precision (``precision`` if the points include it, else
    the most common), then that precision's batch per GPU, the most common of
    :data:`ADOPTED_MODEL_SETTINGS` where the points give them, GPUs per node, and the link the
    points used: an intra-node link becomes the explorer's ``intra_link`` (the network between
    nodes stays), a network its ``network``, and an ``intra_link`` column its ``intra_link``; and
    the allreduce algorithm most of the multi-GPU points ran, where they name one (a Horovod ring,
    a parameter server).

    Settings the catalog does not know are left out (the control keeps its value).
    """
    out: dict[str, Any] = {}
    if "precision" in ds.coords:
        have = set(np.asarray(ds["precision"].values).astype(str))
        out["precision"] = precision if precision in have else _most_common(ds["precision"].values)
        ds = ds.isel(point=np.flatnonzero(ds["precision"].values.astype(str) == out["precision"]))
    if "batch_size" in ds.coords:
        out["batch_size"] = int(float(_most_common(ds["batch_size"].values)))
    for name in ADOPTED_MODEL_SETTINGS:
        if name not in ds.coords:
            continue
        if name in _NAMED:
            out[name] = _most_common(_named(name, ds[name].values))
            continue
        values = np.asarray(ds[name].values, dtype=float)
        values = values[np.isfinite(values)]
        if len(values):
            out[name] = int(float(_most_common(values.astype(np.int64))))
    if "gpus_per_node" in ds.coords:
        out["gpus_per_node"] = int(np.nanmax(ds["gpus_per_node"].values.astype(float)))
    if "network" in ds.coords:
        name = _most_common(ds["network"].values)
        try:
            link = catalog.network(name)
        except DlexploreError:
            link = None
        if link is not None:
            out["intra_link" if link.kind == "intra" else "network"] = link.name
    if "intra_link" in ds.coords:  # the node's link, where the table names it beside the network
        named = np.asarray(ds["intra_link"].values).astype(str)
        named = named[~np.isin(np.char.lower(named), UNSAID)]
        try:
            link = catalog.network(_most_common(named)) if len(named) else None
        except DlexploreError:
            link = None
        if link is not None and link.kind == "intra":
            out["intra_link"] = link.name
    if "algorithm" in ds.coords and "gpus" in ds.coords:
        ran = np.asarray(ds["algorithm"].values).astype(str)
        named = (ds["gpus"].values > 1) & ~np.isin(np.char.lower(ran), ("none", "unknown", ""))
        if named.any():
            try:
                out["algorithm"] = normalize_algorithm(_most_common(ran[named]))
            except DlexploreError:
                pass  # an algorithm the model does not know: the control keeps its value
    return out


def adoption(ds: xr.Dataset, workload: str, gpu: str, precision: str | None = None) -> dict[str, Any]:
    """Everything the explorer adopts from ``ds`` to predict its points: the workload and GPU
    where ``ds`` has no point of the current ones (its first workload, its most common GPU for
    that workload), then :func:`adopted_setup` of those points."""
    wanted: dict[str, Any] = {}
    subset = points_of(ds, workload, gpu)
    if subset is None:
        subset = points_of(ds, workload)
        if subset is None and "workload" in ds.coords:
            wanted["workload"] = str(ds["workload"].values.astype(str)[0])
            subset = points_of(ds, wanted["workload"])
        if subset is not None and "gpu" in subset.coords:
            wanted["gpu"] = _most_common(subset["gpu"].values)
    wanted.update(adopted_setup(subset if subset is not None else ds, precision))
    return wanted


def _span(values: list[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _line_seq(settings: Mapping[str, Any]) -> int | None:
    """The sequence length the line is predicted at: its own, else its workload's."""
    if settings.get("seq") is not None:
        return int(settings["seq"])
    try:
        seq = catalog.workload(settings.get("workload", "")).config.get("seq")
    except (DlexploreError, AttributeError):
        return None
    return int(seq) if seq is not None else None


def setup_differences(ds: xr.Dataset, settings: Mapping[str, Any]) -> list[str]:
    """How the measured points' setup differs from the line's ``settings`` (batch_size,
    gpus_per_node, precision, seq, grad_accum, layout, fusion), in words: ``["batch 96 per GPU (the
    line: 128)"]``. A line without ``seq`` is at its workload's sequence length, without
    ``grad_accum`` at one micro-batch per step, without ``layout`` in nhwc, without ``fusion``
    unfused."""
    notes = []
    if "precision" in ds.coords and settings.get("precision") is not None:
        measured = set(np.asarray(ds["precision"].values).astype(str))
        if settings["precision"] not in measured:
            notes.append(f"precision {', '.join(sorted(measured))} (the line: {settings['precision']})")
    if "batch_size" in ds.coords and settings.get("batch_size") is not None:
        batches = sorted({int(float(b)) for b in np.asarray(ds["batch_size"].values)})
        if settings["batch_size"] not in batches:
            shown = ", ".join(str(b) for b in batches)
            notes.append(f"batch {shown} per GPU (the line: {settings['batch_size']})")
    if "gpus_per_node" in ds.coords and settings.get("gpus_per_node") is not None:
        per_node = int(np.nanmax(ds["gpus_per_node"].values.astype(float)))
        if per_node != settings["gpus_per_node"]:
            notes.append(f"{per_node} GPUs per node (the line: {settings['gpus_per_node']})")
    for name, line, words in (
        ("seq", _line_seq(settings), "sequence length {} (the line: {})"),
        ("grad_accum", int(settings.get("grad_accum") or 1), "{} micro-batches per step (the line: {})"),
    ):
        if name not in ds.coords or line is None:
            continue
        values = np.asarray(ds[name].values, dtype=float)
        have = sorted({int(v) for v in values[np.isfinite(values)]})
        if have and have != [line]:
            notes.append(words.format(_span(have), line))
    for name in _NAMED:
        if name in ds.coords:
            have = sorted(set(_named(name, ds[name].values).tolist()))
            line = str(_named(name, [settings.get(name) or ""])[0])
            if have != [line]:
                notes.append(f"{name} {', '.join(have)} (the line: {line})")
    return notes


def _named(name: str, values: Any) -> np.ndarray:
    """Layouts or fusions as the model names them: its default where a point does not say, an
    unknown one as written."""
    out = []
    for value in np.asarray(values).astype(str):
        try:
            out.append(_NAMED[name](value))
        except DlexploreError:
            out.append(value.strip().lower())
    return np.array(out, dtype=object)


def held_out_factors(cal: Any) -> tuple[float, float] | None:
    """The band the points a calibration was not fitted to ask for, as factors of its line:
    ``(lower, upper)`` such that a point off by the largest held-out error ``e`` lies inside
    (error = (predicted - measured) / measured: such a point sits at ``line / (1 + e)``), or None
    when no point was held out."""
    held = cal.points.loc[~cal.points["fitted"].astype(bool), "error"].astype(float)
    held = held[np.isfinite(held)]
    spread = float(np.abs(held).max()) if len(held) else 0.0
    if not spread:
        return None
    return 1.0 / (1.0 + spread), (1.0 / (1.0 - spread) if spread < 1 else np.inf)
