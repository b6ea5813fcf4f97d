"""The model at measured points: :class:`PointModel` resolves each point's setup (workload, GPU,
links, algorithm, ...: the rules of :mod:`dlexplore.fit.compare`) once, and evaluates the step or
collective model at every point, in groups that share everything but ``gpus``, ``batch_size`` and
``gpus_per_node`` (one model call per group, those three as sweeps), with any parameters overridden.
:func:`dlexplore.fit.predict_points` and every calibration run on it.

Kept whole: one class: resolving a point's setup and evaluating the model at it use the same
per-point arrays and cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog
from ..catalog import model_default
from ..errors import DlexploreError, UnknownNameError
from ..model.comm import ALGORITHMS, busbw_factor, collective_time, normalize_algorithm
from ..model.compute import default_compute_efficiency, normalize_precision
from ..model.conventions import is_sweep
from ..model.gradsync import resolve_transport
from ..model.step import StepArrays, predict_arrays
from .points import (
    DEFAULT_INTRA_LINK,
    FIXED_KEYWORDS,
    FROM_POINTS,
    GLOBAL_DEFAULTS,
    MODEL_FRAMEWORKS,
    PARAMETER_NAMES,
    POINT_KEYWORDS,
    STEP_VARIABLES,
    UNSAID,
    canonical,
    catalog_link,
    fusions,
    intra_link_of,
    layouts,
    points_frame,
    table_kind,
)


class PointModel:
    """The model evaluated at a measured table's points, each with its own setup (module docstring).

    ``defaults[name]`` holds, for every point, the value of each numeric parameter the model would
    use (:data:`PARAMETER_NAMES`; NaN where unknown, e.g. the bandwidth of an ``unknown`` network).
    :meth:`evaluate` takes per-point overrides of them, which is what calibration varies.
    """

    def __init__(self, ds: xr.Dataset, model_kwargs: Mapping[str, Any] | None = None):
        kwargs = dict(model_kwargs or {})
        allowed = (*POINT_KEYWORDS, *FIXED_KEYWORDS, *PARAMETER_NAMES)
        for name, value in kwargs.items():
            if name in FROM_POINTS:
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
        self.table = table_kind(ds)
        self.frame = points_frame(ds)
        self.n = len(self.frame)
        self.kwargs = kwargs
        self.fixed = {k: kwargs[k] for k in FIXED_KEYWORDS if k in kwargs and k != "intra_link"}
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
            unsaid = np.array([str(v).strip().lower() in UNSAID for v in values])
            values = np.where(unsaid, self.kwargs[name], values)
        return values

    def _resolve(self) -> None:
        n = self.n
        f = self.frame
        gpus = f["gpus"].to_numpy(dtype=np.int64) if "gpus" in f else np.ones(n, dtype=np.int64)
        self.gpus = gpus
        networks = [catalog_link(str(v)) for v in self._said("network")]
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
            np.array([canonical("collective", c) for c in self._column("collective", "")], dtype=object)
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
        for name in GLOBAL_DEFAULTS:  # per point: a GPU architecture may have its own fitted default
            by_gpu = {str(g): kw[name] if name in kw else model_default(name, str(g)) for g in set(gpu_names)}
            defaults[name] = np.array([float(by_gpu[str(g)]) for g in gpu_names], dtype=float)
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
        # a point's own intra_link first, then the keyword, then the node's link as the table
        # names it on single-node rows (per GPU)
        own = [str(v).strip() for v in self._column("intra_link")]
        if "intra_link" in self.kwargs:
            link = catalog.network(self.kwargs["intra_link"])
            return [intra_link_of(name) if name.lower() not in UNSAID else link for name in own]
        seen: dict[str, set[str]] = {}
        for link, gpu, g, node in zip(networks, gpu_names, gpus, per_node, strict=True):
            if link is not None and link.kind == "intra" and g <= node:
                seen.setdefault(canonical("gpu", str(gpu)), set()).add(link.name)
        default = catalog.network(DEFAULT_INTRA_LINK)
        out = []
        for link, gpu, name in zip(networks, gpu_names, own, strict=True):
            if name.lower() not in UNSAID:
                out.append(intra_link_of(name))
                continue
            if link is not None and link.kind == "intra":
                out.append(link)
                continue
            names = seen.get(canonical("gpu", str(gpu)), set())
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
            [MODEL_FRAMEWORKS.get(str(f).strip().lower(), "ddp") for f in self._said("framework")],
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
            if text in UNSAID:
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
        self.layout = layouts(self._said("layout"))
        self.fusion = fusions(self._said("fusion"))
        self._group_points()

    def _group_points(self) -> None:
        """The groups of points that share everything but ``gpus``, ``batch_size`` and
        ``gpus_per_node`` (one model call each), and those three axes of each group."""
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
                self.layout,
                self.fusion,
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
            return {v: np.full(self.n, np.nan) for v in (variables or STEP_VARIABLES)}
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
            names = variables or tuple(ds.values)
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
                    value = ds.at("step_time", base) / ds.at("step_time", pos)
                else:
                    value = ds.at(name, pos)
                if name not in out:
                    out[name] = np.full(self.n, np.nan)
                out[name][idx] = np.where(no_network, np.nan, value)
        for name in variables or STEP_VARIABLES:
            out.setdefault(name, np.full(self.n, np.nan))
        return out

    def _group_prediction(
        self, group: int, params: dict[str, float], idx: np.ndarray
    ) -> tuple[StepArrays | None, str]:
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
            layout,
            fusion,
        ) = self.group_settings[group]
        gpus_ax, batch_ax, node_ax = self.group_axes[group]
        bandwidth, latency = params["bandwidth"], params["latency"]
        result: tuple[StepArrays | None, str]
        if not (np.isfinite(bandwidth) and np.isfinite(latency)):
            # Stand-ins: points inside one node never use the network; the others are set to NaN
            # by the caller.
            bandwidth, latency = 1.0, 0.0
        if not np.isfinite(params["compute_efficiency"]):
            result = (None, "no compute efficiency")
            self._remember(key, result)
            return result
        try:
            ds = predict_arrays(
                workload,
                gpu,
                network if catalog_link(network) is not None else None,
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
                layout=layout,
                fusion=fusion,
                **{
                    name: params[name]
                    for name in ("compute_efficiency", "overlap", "gamma", *GLOBAL_DEFAULTS)
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
    if text in UNSAID:
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
