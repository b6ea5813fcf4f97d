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
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog
from ..catalog import model_default
from ..errors import DlexploreError, UnknownNameError
from ..model._sweep import PREDICTED_SOURCE, VARIABLES, is_sweep
from ..model.comm import (
    ALGORITHMS,
    busbw_factor,
    collective_time,
    normalize_algorithm,
    normalize_collective,
)
from ..model.compute import default_compute_efficiency, normalize_precision
from ..model.gradsync import resolve_transport
from ..model.step import predict

__all__ = ["compare", "predict_points", "as_points", "ERROR_DEFINITION", "PARAMETER_NAMES"]

ERROR_DEFINITION = "(predicted - measured) / measured: > 0 where the model is above the measurement"

#: The model's numeric parameters a point model can take per point (calibration fits these).
PARAMETER_NAMES = (
    "compute_efficiency",
    "bandwidth",
    "latency",
    "intra_bandwidth",
    "intra_latency",
    "overlap",
    "gamma",
    "servers",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)
#: Parameters whose default is the same for every point (data/catalog/defaults.csv).
_GLOBAL_DEFAULTS = (
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)
#: Keywords that fill in a point's own setting only where the point does not give it.
_POINT_KEYWORDS = (
    "workload",
    "gpu",
    "network",
    "precision",
    "algorithm",
    "gpus_per_node",
    "framework",
    "transport",
    "servers_colocated",
    "host_staging",
    "grad_accum",
    "nics_per_node",
    "seq",
)
#: Keywords passed to every point's prediction as they are.
_FIXED_KEYWORDS = (
    "intra_link",
    "optimizer",
    "bucket_size",
    "storage",
    "io_threads",
    "prefetch",
    "workspace",
    "attention",
)
#: Coordinates :func:`compare` does not match: model settings that tables record as free labels.
_SETTINGS = ("framework", "transport", "servers_colocated", "host_staging", "attention")
#: Framework labels the model runs as PyTorch DDP's bucketed allreduce (no Horovod cycle).
_MODEL_FRAMEWORKS = {"horovod": "horovod"}
_FROM_POINTS = ("gpus", "batch_size", "bytes", "collective")
#: What :func:`dlexplore.predict` returns, so that a table none of whose points the model covers
#: still gets every variable (all NaN).
_STEP_VARIABLES = (
    "step_time",
    "throughput",
    "efficiency",
    "time_forward",
    "time_backward",
    "time_optimizer",
    "time_compute",
    "time_comm",
    "time_comm_exposed",
    "time_io",
    "time_io_exposed",
    "comm_bytes",
    "n_buckets",
    "mem_params",
    "mem_grads",
    "mem_optimizer",
    "mem_activations",
    "mem_workspace",
    "mem_total",
    "mem_capacity",
    "fits",
)
_UNSAID = ("", "none", "unknown", "nan")
#: Measured variables in the order a comparison prefers them.
_VARIABLE_ORDER = ("throughput", "efficiency", "time", "busbw", "algbw", "step_time")
#: The model's default intra-node link (dlexplore.predict's intra_link).
DEFAULT_INTRA_LINK = "PCIe3"


# --- sources ---------------------------------------------------------------------------------------


def as_points(source: str | Path | xr.Dataset) -> xr.Dataset:
    """A measured dataset along ``point``: a bundled name, a CSV path, nccl-tests output, or a dataset.

    nccl-tests results (dims ``bytes`` and ``placement``) become one point per size and placement,
    with ``setup`` the placement (``out-of-place``, ``in-place``), ``algorithm``, ``gpu`` and
    ``network`` ``unknown``.
    """
    if isinstance(source, (str, Path)):
        from .. import measured

        source = measured.load(source)
    if not isinstance(source, xr.Dataset):
        raise DlexploreError(
            f"expected a measured dataset, a dataset name or a file path, got {type(source).__name__}"
        )
    if "point" in source.dims:
        return source
    if "bytes" in source.dims and "collective" in source.coords:
        return _nccl_tests_points(source)
    raise DlexploreError(
        f"expected a measured dataset along 'point' (dlexplore.measured.load), got dims {dict(source.sizes)}"
    )


def _nccl_tests_points(ds: xr.Dataset) -> xr.Dataset:
    keep = [v for v in ("time", "algbw", "busbw") if v in ds.data_vars]
    flat = ds[keep]
    if "placement" not in flat.dims:
        flat = flat.expand_dims(placement=["out-of-place"])
    stacked = flat.stack(point=("bytes", "placement")).reset_index("point")
    n = stacked.sizes["point"]
    coords = {
        "collective": ("point", np.full(n, str(ds["collective"].values), dtype=object)),
        "gpu": ("point", np.full(n, "unknown", dtype=object)),
        "network": ("point", np.full(n, "unknown", dtype=object)),
        "gpus": ("point", np.full(n, int(ds["gpus"].values), dtype=np.int64)),
        "algorithm": ("point", np.full(n, "unknown", dtype=object)),
        "bytes": ("point", stacked["bytes"].values.astype(np.int64)),
        "setup": ("point", stacked["placement"].values.astype(str).astype(object)),
    }
    out = xr.Dataset({v: ("point", stacked[v].values, dict(ds[v].attrs)) for v in keep}, coords=coords)
    out["gpus"].attrs.update(units="count", long_name="GPUs (total devices)")
    out["bytes"].attrs.update(units="bytes", long_name="message size")
    out.attrs = {**ds.attrs, "table": "communication", "name": ds.attrs.get("name", "nccl-tests")}
    return out


def _table(ds: xr.Dataset) -> str:
    return "communication" if "collective" in ds.coords else "training"


def _frame(ds: xr.Dataset) -> pd.DataFrame:
    """The point coordinates as a DataFrame (object strings, numbers as they are)."""
    columns = {}
    for name in ds.coords:
        if name == "point" or ds[name].dims != ("point",):
            continue
        values = ds[name].values
        columns[name] = values.astype(object) if values.dtype.kind in "OUS" else values
    return pd.DataFrame(columns)


# --- canonical names --------------------------------------------------------------------------------


# Not cached: a catalog file the user loads later must be seen (and lookups take microseconds).
def _link(name: str) -> catalog.Link | None:
    if str(name).strip().lower() in _UNSAID:
        return None
    try:
        return catalog.network(name)
    except DlexploreError:
        return None


def _canonical(kind: str, value: str) -> str:
    """A name as the model writes it (catalog ids, normalised labels), else the lowered text."""
    text = str(value).strip()
    try:
        if kind == "workload":
            return catalog.workload(text).name
        if kind == "gpu":
            return catalog.gpu(text).name
        if kind in ("network", "intra_link"):
            return catalog.network(text).name
        if kind == "precision":
            return normalize_precision(text)
        if kind == "collective":
            return normalize_collective(text)
        if kind == "algorithm":
            return normalize_algorithm(text, "allreduce")
    except DlexploreError:
        pass
    return text.lower()


# --- the model at the points ------------------------------------------------------------------------


class PointModel:
    """The model evaluated at a measured table's points, each with its own setup (module docstring).

    ``defaults[name]`` holds, for every point, the value of each numeric parameter the model would
    use (:data:`PARAMETER_NAMES`; NaN where unknown, e.g. the bandwidth of an ``unknown`` network).
    :meth:`evaluate` takes per-point overrides of them, which is what calibration varies.
    """

    def __init__(self, ds: xr.Dataset, model_kwargs: Mapping[str, Any] | None = None):
        kwargs = dict(model_kwargs or {})
        allowed = (*_POINT_KEYWORDS, *_FIXED_KEYWORDS, *PARAMETER_NAMES)
        for name, value in kwargs.items():
            if name in _FROM_POINTS:
                raise DlexploreError(
                    f"{name} comes from the measured points; it cannot be given as a model keyword"
                )
            if name not in allowed:
                raise UnknownNameError("model keyword", name, allowed)
            if is_sweep(value):
                raise DlexploreError(
                    f"{name}: give one value (the measured points set the sweep), got {value!r}"
                )
        self.ds = ds
        self.table = _table(ds)
        self.frame = _frame(ds)
        self.n = len(self.frame)
        self.kwargs = kwargs
        self.fixed = {k: kwargs[k] for k in _FIXED_KEYWORDS if k in kwargs and k != "intra_link"}
        self.reason = np.full(self.n, "", dtype=object)
        self._cache: dict[tuple, Any] = {}
        self._resolve()

    # -- settings ------------------------------------------------------------------------------

    def _column(self, name: str, default: Any = "") -> np.ndarray:
        if name in self.frame:
            return self.frame[name].to_numpy()
        return np.full(self.n, default, dtype=object)

    def _said(self, name: str) -> np.ndarray:
        """The point's value, with the keyword filling in what the point leaves unsaid."""
        values = self._column(name).astype(object)
        if name in self.kwargs:
            unsaid = np.array([str(v).strip().lower() in _UNSAID for v in values])
            values = np.where(unsaid, self.kwargs[name], values)
        return values

    def _resolve(self) -> None:
        n = self.n
        f = self.frame
        gpus = f["gpus"].to_numpy(dtype=np.int64) if "gpus" in f else np.ones(n, dtype=np.int64)
        self.gpus = gpus
        networks = [_link(str(v)) for v in self._said("network")]
        if "gpus_per_node" in f:
            per_node = f["gpus_per_node"].to_numpy(dtype=np.int64)
        elif "gpus_per_node" in self.kwargs:
            per_node = np.full(n, int(self.kwargs["gpus_per_node"]), dtype=np.int64)
        else:
            per_node = np.array(
                [
                    g if (link is not None and link.kind == "intra") else 1
                    for g, link in zip(gpus, networks, strict=True)
                ],
                dtype=np.int64,
            )
        self.gpus_per_node = per_node
        gpu_names = self._said("gpu")
        intra = self._intra_links(networks, gpu_names, gpus, per_node)
        self.intra_link = np.array([link.name for link in intra], dtype=object)
        self.network = np.array(
            [
                link.name if link is not None else str(v)
                for link, v in zip(networks, self._said("network"), strict=True)
            ],
            dtype=object,
        )
        collective = (
            np.array([_canonical("collective", c) for c in self._column("collective", "")], dtype=object)
            if self.table == "communication"
            else None
        )
        self.collective = collective
        algorithm, servers = self._algorithms(collective)
        self.algorithm = algorithm
        kw = self.kwargs
        defaults = {
            "bandwidth": np.array(
                [kw.get("bandwidth", link.bandwidth_gbs if link else np.nan) for link in networks],
                dtype=float,
            ),
            "latency": np.array(
                [kw.get("latency", link.latency_s if link else np.nan) for link in networks], dtype=float
            ),
            "intra_bandwidth": np.array(
                [kw.get("intra_bandwidth", link.bandwidth_gbs) for link in intra], dtype=float
            ),
            "intra_latency": np.array(
                [kw.get("intra_latency", link.latency_s) for link in intra], dtype=float
            ),
            "overlap": np.full(n, float(kw.get("overlap", 1.0))),
            "gamma": np.full(n, float(kw.get("gamma", 0.0))),
            "servers": servers,
        }
        for name in _GLOBAL_DEFAULTS:
            defaults[name] = np.full(n, float(kw[name]) if name in kw else model_default(name))
        self._resolve_links(networks, intra, gpu_names)
        if self.table == "training":
            self._resolve_training(defaults)
        else:
            defaults["compute_efficiency"] = np.full(n, np.nan)
            nbytes = f["bytes"].to_numpy(dtype=float) if "bytes" in f else np.full(n, np.nan)
            self.nbytes = nbytes
        self.defaults = defaults

    def _intra_links(
        self, networks: list, gpu_names: np.ndarray, gpus: np.ndarray, per_node: np.ndarray
    ) -> list[catalog.Link]:
        if "intra_link" in self.kwargs:
            link = catalog.network(self.kwargs["intra_link"])
            return [link] * self.n
        # The node's link as the table names it on single-node rows, per GPU.
        seen: dict[str, set[str]] = {}
        for link, gpu, g, node in zip(networks, gpu_names, gpus, per_node, strict=True):
            if link is not None and link.kind == "intra" and g <= node:
                seen.setdefault(_canonical("gpu", str(gpu)), set()).add(link.name)
        default = catalog.network(DEFAULT_INTRA_LINK)
        out = []
        for link, gpu in zip(networks, gpu_names, strict=True):
            if link is not None and link.kind == "intra":
                out.append(link)
                continue
            names = seen.get(_canonical("gpu", str(gpu)), set())
            out.append(catalog.network(next(iter(names))) if len(names) == 1 else default)
        return out

    def _resolve_links(self, networks: list, intra: list, gpu_names: np.ndarray) -> None:
        """Per point: the links' efficiencies and fabrics, the transport, the GPU architecture,
        and the framework, as the model runs them."""
        self.net_efficiency = np.array([link.efficiency if link else 1.0 for link in networks])
        self.intra_efficiency = np.array([link.efficiency for link in intra])
        self.intra_fabric = np.array([link.fabric or "pcie" for link in intra], dtype=object)
        self.nvls = np.array([link.reduction == "nvls" for link in intra])
        self.architecture = np.array([_architecture(str(g)) for g in gpu_names], dtype=object)
        transports = self._said("transport")
        self.transport = np.array(
            [resolve_transport(_transport(t), link) for t, link in zip(transports, networks, strict=True)],
            dtype=object,
        )
        self.framework = np.array(
            [_MODEL_FRAMEWORKS.get(str(f).strip().lower(), "ddp") for f in self._said("framework")],
            dtype=object,
        )
        self.colocated = np.array([_yes(v) for v in self._said("servers_colocated")], dtype=bool)
        self.host_staging = np.array([_staged(v) for v in self._said("host_staging")], dtype=bool)

    def _algorithms(self, collective: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        labels = self._column("algorithm", "unknown").astype(object)
        servers = np.full(self.n, float(self.kwargs.get("servers", 0)))
        if "servers" in self.frame:
            servers = self.frame["servers"].to_numpy(dtype=float)
        out = np.full(self.n, "", dtype=object)
        for i, label in enumerate(labels):
            kind = "allreduce" if collective is None else collective[i]
            if kind not in ALGORITHMS:
                self.reason[i] = f"collective {kind!r} is not modelled"
                continue
            text = str(label).strip().lower()
            if text in _UNSAID:
                # NCCL's own choice for the allreduce: what NVIDIA GPUs run when a table is silent
                text = str(
                    self.kwargs.get("algorithm", "nccl" if kind == "allreduce" else ALGORITHMS[kind][0])
                )
            try:
                out[i] = normalize_algorithm(text, kind)
            except DlexploreError as exc:
                self.reason[i] = str(exc)
        return out, servers

    def _resolve_training(self, defaults: dict[str, np.ndarray]) -> None:
        n = self.n
        f = self.frame
        self.workload = np.full(n, "", dtype=object)
        self.gpu = np.full(n, "", dtype=object)
        self.precision = np.full(n, "", dtype=object)
        for name, lookup in (
            ("workload", catalog.workload),
            ("gpu", catalog.gpu),
            ("precision", normalize_precision),
        ):
            values = self._said(name)
            target = getattr(self, name)
            for i, value in enumerate(values):
                try:
                    found = lookup(str(value))
                    target[i] = found if isinstance(found, str) else found.name
                except DlexploreError as exc:
                    self.reason[i] = self.reason[i] or str(exc)
        efficiency = self.kwargs.get("compute_efficiency")
        # a point's own GEMM plateau where the points carry one (a calibration's earlier stage)
        own = (
            pd.to_numeric(f["compute_efficiency"], errors="coerce").to_numpy(dtype=float)
            if "compute_efficiency" in f
            else np.full(n, np.nan)
        )
        defaults["compute_efficiency"] = np.array(
            [
                mine
                if np.isfinite(mine)
                else efficiency
                if efficiency is not None
                else (default_compute_efficiency(p, g) if p and g else np.nan)
                for mine, p, g in zip(own, self.precision, self.gpu, strict=True)
            ],
            dtype=float,
        )
        self.batch_size = (
            f["batch_size"].to_numpy(dtype=np.int64)
            if "batch_size" in f
            else np.full(n, int(self.kwargs.get("batch_size", 32)))
        )
        if "baseline_gpus" in f and "efficiency" in self.ds.data_vars:
            self.baseline = f["baseline_gpus"].to_numpy(dtype=np.int64)
        else:
            self.baseline = np.ones(n, dtype=np.int64)
        self.grad_accum = np.array([_positive_int(v, 1) for v in self._said("grad_accum")])
        self.nics_per_node = np.array([_positive_int(v, 0) for v in self._said("nics_per_node")])
        self.seq = np.array([_positive_int(v, 0) for v in self._said("seq")])
        keys = list(
            zip(
                self.workload,
                self.gpu,
                self.precision,
                self.algorithm,
                self.network,
                self.intra_link,
                self.framework,
                self.transport,
                self.colocated,
                self.host_staging,
                self.grad_accum,
                self.nics_per_node,
                self.seq,
                strict=True,
            )
        )
        self.group, uniques = pd.factorize(pd.Series(keys, dtype=object))
        self.group_settings = list(uniques)
        self.group_axes = []
        for g in range(len(uniques)):
            members = self.group == g
            self.group_axes.append(
                (
                    np.unique(np.concatenate([self.gpus[members], self.baseline[members]])),
                    np.unique(self.batch_size[members]),
                    np.unique(self.gpus_per_node[members]),
                )
            )

    # -- evaluation ----------------------------------------------------------------------------

    def predictable(self) -> np.ndarray:
        """Points whose setup the model covers (their numeric parameters may still be unknown)."""
        return self.reason == ""

    def evaluate(
        self,
        overrides: Mapping[str, np.ndarray] | None = None,
        *,
        where: np.ndarray | None = None,
        variables: tuple[str, ...] | None = None,
        reasons: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Predicted variables at the points (NaN where not predicted).

        ``overrides`` maps parameter names to per-point values (arrays of length ``n``);
        ``where`` limits the evaluation to some points; ``variables`` to some variables (training:
        any of :func:`dlexplore.predict`'s, ``efficiency`` relative to ``baseline_gpus``;
        communication: ``time``, ``algbw``, ``busbw``). ``reasons``, an object array, receives why
        a point was not predicted.
        """
        values = {
            name: np.asarray(overrides[name], dtype=float)
            if overrides and name in overrides
            else self.defaults[name]
            for name in PARAMETER_NAMES
        }
        mask = self.predictable() if where is None else (where & self.predictable())
        if self.table == "communication":
            return self._evaluate_comm(values, mask, variables or ("time", "algbw", "busbw"), reasons)
        return self._evaluate_training(values, mask, variables, reasons)

    def _evaluate_training(
        self,
        values: dict[str, np.ndarray],
        mask: np.ndarray,
        variables: tuple[str, ...] | None,
        reasons: np.ndarray | None,
    ) -> dict:
        out: dict[str, np.ndarray] = {}
        idx_all = np.flatnonzero(mask)
        if not idx_all.size:
            return {v: np.full(self.n, np.nan) for v in (variables or _STEP_VARIABLES)}
        matrix = np.column_stack(
            [
                self.group[idx_all].astype(float),
                *(np.nan_to_num(values[name][idx_all], nan=-1.0) for name in PARAMETER_NAMES),
            ]
        )
        keys, inverse = np.unique(matrix, axis=0, return_inverse=True)
        for k, key in enumerate(keys):
            idx = idx_all[inverse.ravel() == k]
            params = {name: float(values[name][idx[0]]) for name in PARAMETER_NAMES}
            ds, why = self._group_prediction(int(key[0]), params, idx)
            if ds is None:
                if reasons is not None:
                    reasons[idx] = why
                continue
            names = variables or tuple(
                v for v in ds.data_vars if set(ds[v].dims) <= {"gpus", "batch_size", "gpus_per_node"}
            )
            gpus_ax, batch_ax, node_ax = self.group_axes[int(key[0])]
            pos = {
                "gpus": np.searchsorted(gpus_ax, self.gpus[idx]),
                "batch_size": np.searchsorted(batch_ax, self.batch_size[idx]),
                "gpus_per_node": np.searchsorted(node_ax, self.gpus_per_node[idx]),
            }
            base = dict(pos, gpus=np.searchsorted(gpus_ax, self.baseline[idx]))
            no_network = ~(np.isfinite(values["bandwidth"][idx]) & np.isfinite(values["latency"][idx])) & (
                np.maximum(self.gpus[idx], self.baseline[idx]) > self.gpus_per_node[idx]
            )
            if no_network.any() and reasons is not None:
                reasons[idx[no_network]] = (
                    f"network {self.network[idx[0]]!r} is not in the catalog: "
                    "give bandwidth (GB/s) and latency (s)"
                )
            for name in names:
                if name == "efficiency":
                    value = _take(ds["step_time"], base) / _take(ds["step_time"], pos)
                else:
                    value = _take(ds[name], pos)
                if name not in out:
                    out[name] = np.full(self.n, np.nan)
                out[name][idx] = np.where(no_network, np.nan, value)
        for name in variables or _STEP_VARIABLES:
            out.setdefault(name, np.full(self.n, np.nan))
        return out

    def _group_prediction(
        self, group: int, params: dict[str, float], idx: np.ndarray
    ) -> tuple[xr.Dataset | None, str]:
        key = (group, *params.values())
        if key in self._cache:
            return self._cache[key]
        (
            workload,
            gpu,
            precision,
            algorithm,
            network,
            intra,
            framework,
            transport,
            colocated,
            staged,
            grad_accum,
            nics,
            seq,
        ) = self.group_settings[group]
        gpus_ax, batch_ax, node_ax = self.group_axes[group]
        bandwidth, latency = params["bandwidth"], params["latency"]
        result: tuple[xr.Dataset | None, str]
        if not (np.isfinite(bandwidth) and np.isfinite(latency)):
            # Stand-ins: points inside one node never use the network; the others are set to NaN
            # by the caller.
            bandwidth, latency = 1.0, 0.0
        if not np.isfinite(params["compute_efficiency"]):
            result = (None, "no compute efficiency")
            self._remember(key, result)
            return result
        try:
            ds = predict(
                workload,
                gpu,
                network if _link(network) is not None else None,
                gpus=list(gpus_ax),
                batch_size=list(batch_ax),
                gpus_per_node=list(node_ax),
                bandwidth=bandwidth,
                latency=latency,
                intra_link=intra,
                intra_bandwidth=params["intra_bandwidth"],
                intra_latency=params["intra_latency"],
                algorithm=algorithm,
                servers=int(round(params["servers"])),
                precision=precision,
                framework=framework,
                transport=transport,
                servers_colocated=bool(colocated),
                host_staging=bool(staged),
                grad_accum=int(grad_accum),
                nics_per_node=int(nics),
                # a table's seq column holds some value on every row: CNN rows ignore it
                seq=int(seq) if seq and catalog.workload(workload).kind == "transformer" else None,
                **{
                    name: params[name]
                    for name in ("compute_efficiency", "overlap", "gamma", *_GLOBAL_DEFAULTS)
                },
                **self.fixed,
            )
            result = (ds, "")
        except DlexploreError as exc:
            result = (None, str(exc))
        self._remember(key, result)
        return result

    def _remember(self, key: tuple, result: tuple) -> None:
        if len(self._cache) > 4096:  # a long fit: keep memory bounded
            self._cache.clear()
        self._cache[key] = result

    def _evaluate_comm(
        self,
        values: dict[str, np.ndarray],
        mask: np.ndarray,
        variables: tuple[str, ...],
        reasons: np.ndarray | None,
    ) -> dict:
        out = {name: np.full(self.n, np.nan) for name in variables}
        p = self.gpus.astype(float)
        node = self.gpus_per_node.astype(float)
        one_node = p <= node
        hierarchical = self.algorithm == "hierarchical"
        uses_network = hierarchical | ~one_node
        net_ok = np.isfinite(values["bandwidth"]) & np.isfinite(values["latency"])
        missing = mask & uses_network & ~net_ok
        if reasons is not None and missing.any():
            reasons[missing] = "network not in the catalog: give bandwidth (GB/s) and latency (s)"
        mask = mask & ~missing
        # what collectives see of the links: their efficiency, and kernel TCP's between nodes
        tcp = np.where(self.transport == "tcp", values["tcp_efficiency"], 1.0)
        net_bw = values["bandwidth"] * self.net_efficiency * tcp
        intra_bw = values["intra_bandwidth"] * self.intra_efficiency
        flat = ~np.isin(self.algorithm, ["hierarchical", "nccl", "nvls"])
        bw = np.where(flat & one_node, intra_bw, net_bw)
        lat = np.where(flat & one_node, values["intra_latency"], values["latency"])
        groups = pd.DataFrame(
            {
                "c": self.collective,
                "a": self.algorithm,
                "f": self.intra_fabric,
                "r": self.architecture,
                "v": self.nvls,
            }
        )[mask]
        for (collective, algorithm, fabric, arch, nvls), rows in groups.groupby(
            ["c", "a", "f", "r", "v"]
        ).groups.items():
            i = np.asarray(rows, dtype=np.int64)
            n = self.nbytes[i]
            sized = np.isfinite(n)
            node_kw = (
                dict(intra_fabric=fabric, architecture=arch, nvls=bool(nvls))
                if algorithm in ("nccl", "nvls")
                else {}
            )

            def run(
                nbytes: np.ndarray,
                i: np.ndarray = i,
                collective: str = collective,
                algorithm: str = algorithm,
                node_kw: dict = node_kw,
            ) -> np.ndarray:
                return collective_time(
                    collective,
                    algorithm,
                    nbytes,
                    p[i],
                    np.where(np.isfinite(bw[i]), bw[i], 1.0),
                    np.nan_to_num(lat[i]),
                    values["gamma"][i],
                    servers=values["servers"][i],
                    gpus_per_node=node[i],
                    intra_bandwidth=intra_bw[i],
                    intra_latency=values["intra_latency"][i],
                    **node_kw,
                )

            time = np.where(sized, run(np.where(sized, n, 1.0)), np.nan)
            with np.errstate(divide="ignore", invalid="ignore"):
                # no message size: the large-message limit, the slope of time against bytes (every
                # candidate is latency + bytes / bandwidth, so a terabyte more isolates the latter)
                huge = np.full(len(i), 1e12)
                slope = (run(2 * huge) - run(huge)) / 1e12
                algbw = np.where(sized, n / time / 1e9, 1.0 / slope / 1e9)
            factor = np.asarray(busbw_factor(collective, p[i]), dtype=float)
            result = {"time": time, "algbw": algbw, "busbw": algbw * factor}
            for name in variables:
                out[name][i] = result[name]
        return out


def _positive_int(value: object, unsaid: int) -> int:
    """A whole number from a table cell or keyword; ``unsaid`` where it says nothing."""
    text = str(value).strip().lower()
    if text in _UNSAID:
        return unsaid
    try:
        number = float(text)
    except ValueError:
        raise DlexploreError(f"expected a whole number, got {value!r}") from None
    if number != int(number) or number < 0:
        raise DlexploreError(f"expected a whole number, got {value!r}")
    return int(number)


def _yes(value: object) -> bool:
    """``servers_colocated``: yes (the default, one server on each worker node) unless it says no."""
    return str(value).strip().lower() not in ("no", "false", "0", "dedicated")


def _staged(value: object) -> bool:
    """``host_staging``: no (gradients reduced on the GPUs) unless it says yes."""
    return str(value).strip().lower() in ("yes", "true", "1", "host", "cpu")


def _transport(value: object) -> str:
    text = str(value).strip().lower()
    return text if text in ("tcp", "rdma") else "auto"


def _architecture(name: str) -> str:
    try:
        return catalog.gpu(name).architecture
    except DlexploreError:
        return ""


def _take(da: xr.DataArray, positions: dict[str, np.ndarray]) -> np.ndarray:
    """Values of ``da`` at per-point positions along its dims (a 0-d variable is broadcast)."""
    values = da.values
    if not da.dims:
        n = len(next(iter(positions.values())))
        return np.full(n, values.item(), dtype=values.dtype)
    return values[tuple(positions[d] for d in da.dims)]


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
    ordered = [v for v in _VARIABLE_ORDER if v in both] + [v for v in both if v not in _VARIABLE_ORDER]
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
    lookup = {_canonical(name, str(v)): i for i, v in enumerate(available)}
    for i, value in enumerate(wanted):
        key = _canonical(name, str(value))
        if name == "algorithm" and (key in _UNSAID or (gpus is not None and gpus[i] == 1)):
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
        target = _canonical(name, str(value))
        out = np.array([_canonical(name, str(v)) == target for v in wanted], dtype=bool)
    if name == "algorithm":
        unsaid = np.array([str(v).strip().lower() in _UNSAID for v in wanted], dtype=bool)
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
        if name in _SETTINGS:
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
