"""Hybrid-parallel tables (LLM runs with tensor, pipeline and data parallelism): the model at every
row, and calibration of the model's physical parameters on chosen rows.

**A row's setup** (:class:`HybridPoints`): the transformer from ``workload`` or the row's sizes
(``layers``, ``hidden``, ``heads``, ``seq``, ``vocab``, ``ffn_hidden``; a GPT-style decoder),
``gpu``, ``gpus``, ``tp``, ``pp``, ``dp``, ``global_batch`` and ``precision``, and where the table
has them ``network``, ``gpus_per_node``, ``micro_batch``, ``recompute``, ``sequence_parallel``,
``schedule``, ``virtual_stages``, ``zero``. What a table leaves out comes from the keywords of
:func:`calibrate_hybrid` (the same names), else the model's defaults, and the calibration's notes
say which: IB-HDR between nodes, 8 GPUs per node, micro-batch 1, no recomputation, the 1F1B
schedule, ZeRO 0. The link inside a node is the SXM part's NVLink (Volta NVLink2, Ampere NVLink3,
Hopper NVLink4), else PCIe4, unless ``intra_link=`` says otherwise.

**Measured quantity** of a row, the first it has of ``step_time``, ``throughput``,
``tokens_per_s``, ``tflops_per_gpu`` (the model's ``hardware_flops_per_gpu``, recomputation counted
as Narayanan et al.'s eq. 3 counts it, or ``model_flops_per_gpu`` when the table's metadata says
``# flops: model``), ``mfu`` and ``hfu``. All are a number of FLOPs or samples over the step time,
so the relative error of any of them is that of the step time.

**Calibration** fits the model's physical parameters (default ``compute_efficiency``, the GEMM
plateau; any of :data:`dlexplore.model.parallel.CALIBRATED_PARAMETERS`: memory efficiency, kernel
time, flash efficiency, the network's and the NVLink's bandwidth and latency, the data- and
tensor-parallel overlaps), never a factor per row, by the least squares of
:func:`dlexplore.calibrate` (log relative error, standard errors, identifiability, prediction
intervals). :func:`smallest` chooses the smallest configurations to fit on; :func:`leave_one_out`
predicts every row from a fit on the others.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog
from ..errors import DlexploreError, UnknownNameError
from ..model.compute import compute_defaults
from ..model.hybrid import evaluate_hybrid, hybrid_setup
from ..model.parallel import CALIBRATED_PARAMETERS
from ..model.pipeline import normalize_schedule
from ..model.states import normalize_recompute

__all__ = ["HybridPoints", "HYBRID_MEASURED", "HYBRID_DEFAULTS", "smallest", "hybrid_predict_points"]

#: Measured variables of a hybrid table, in the order a row's quantity is chosen, with their units.
HYBRID_MEASURED = {
    "step_time": "s",
    "throughput": "samples/s",
    "tokens_per_s": "tokens/s",
    "tflops_per_gpu": "TFLOP/s",
    "mfu": "1",
    "hfu": "1",
}
_NVLINK = {"Volta": "NVLink2", "Ampere": "NVLink3", "Hopper": "NVLink4"}
#: What a hybrid table's row takes where the table has no such column (the calibration's notes say
#: which were taken).
HYBRID_DEFAULTS = {
    "network": "IB-HDR",
    "gpus_per_node": 8,
    "micro_batch": 1,
    "recompute": "none",
    "schedule": "1f1b",
    "virtual_stages": 1,
    "zero": 0,
    "sequence_parallel": "no",
}
_KEYWORDS = (*HYBRID_DEFAULTS, "intra_link", "attention", "memory_convention", "optimizer")
#: Group rows that the model evaluates in one call: everything categorical.
_GROUP = ("workload", "gpu", "network", "intra_link", "precision", "recompute", "schedule")


def smallest(k: int, by: str | Sequence[str] = "gpus") -> Callable[[pd.DataFrame], np.ndarray]:
    """A ``fit_on`` selection: the ``k`` points with the smallest ``by`` (GPUs by default; ties
    keep the table's order), e.g. ``calibrate(table, fit_on=smallest(3))``."""
    if int(k) < 1:
        raise DlexploreError(f"smallest: k must be >= 1, got {k!r}")
    columns = [by] if isinstance(by, str) else list(by)

    def select(frame: pd.DataFrame) -> np.ndarray:
        missing = [c for c in columns if c not in frame]
        if missing:
            raise DlexploreError(f"smallest: the points have no column {missing[0]!r}")
        order = np.lexsort([frame[c].to_numpy() for c in reversed(columns)])
        mask = np.zeros(len(frame), dtype=bool)
        mask[order[: int(k)]] = True
        return mask

    select.__name__ = f"smallest({int(k)}, by={'/'.join(columns)})"
    return select


def _workload(row: Mapping[str, Any]) -> catalog.Workload:
    spec = str(row.get("workload", "") or "")
    if spec:
        return catalog.workload(spec)
    layers, hidden, heads, seq, vocab = (int(row[k]) for k in ("layers", "hidden", "heads", "seq", "vocab"))
    ffn = row.get("ffn_hidden")
    label = str(row.get("model", "") or "") or None
    return catalog.transformer(
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq=seq,
        vocab=vocab,
        ffn_hidden=int(ffn) if ffn and not pd.isna(ffn) else None,
        causal=True,
        name=label,
    )


class HybridPoints:
    """The rows of a hybrid table with the setup the model runs for each (module docstring).

    ``frame`` (the rows, with the settings used filled in), ``variable`` and ``y`` (the measured
    quantity of each row), ``defaults`` (each calibratable parameter's default per row), ``notes``
    (the settings the table left to defaults) and :meth:`evaluate`.
    """

    def __init__(self, ds: xr.Dataset, model_kwargs: Mapping[str, Any] | None = None):
        from .. import measured

        kwargs = dict(model_kwargs or {})
        unknown = set(kwargs) - set(_KEYWORDS) - set(CALIBRATED_PARAMETERS)
        if unknown:
            raise UnknownNameError("hybrid setting", sorted(unknown)[0], [*_KEYWORDS, *CALIBRATED_PARAMETERS])
        self.kwargs = kwargs
        self.flops = str(ds.attrs.get("flops", "hardware")).strip().lower()
        frame = measured.to_frame(ds).reset_index(drop=True)
        self.notes: list[str] = []
        for name, default in HYBRID_DEFAULTS.items():
            if name in frame and not (frame[name].astype(str) == "").any():
                continue
            value = kwargs.get(name, default)
            if name not in kwargs:
                self.notes.append(f"no {name} column: {value} (the model's default; give {name}=)")
            frame[name] = frame[name].where(frame[name].astype(str) != "", value) if name in frame else value
        self.workloads = [_workload(row) for row in frame.to_dict("records")]
        frame["workload"] = [w.name for w in self.workloads]
        if "dp" not in frame:
            frame["dp"] = frame["gpus"] // (frame["tp"] * frame["pp"])
        gpus = [catalog.gpu(g) for g in frame["gpu"]]
        frame["intra_link"] = kwargs.get("intra_link") or [_NVLINK.get(g.architecture, "PCIe4") for g in gpus]
        if "intra_link" not in kwargs:
            self.notes.append("intra-node link: the GPU's NVLink (give intra_link=)")
        self.frame = frame
        self.n = len(frame)
        self.y, self.variable = self._measured(ds)
        self.defaults = self._defaults(gpus)

    def _measured(self, ds: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
        y = np.full(self.n, np.nan)
        variable = np.full(self.n, "", dtype=object)
        for name in reversed(HYBRID_MEASURED):
            if name in ds.data_vars:
                values = ds[name].values.astype(float)
                ok = np.isfinite(values)
                y = np.where(ok, values, y)
                variable = np.where(ok, name, variable)
        return y, variable

    def _defaults(self, gpus: list[catalog.GPU]) -> dict[str, np.ndarray]:
        out = {name: np.full(self.n, np.nan) for name in CALIBRATED_PARAMETERS}
        for i, (dev, precision) in enumerate(zip(gpus, self.frame["precision"], strict=True)):
            for name, value in compute_defaults(dev, precision).items():
                if name in out:
                    out[name][i] = value
            net = catalog.network(self.frame["network"].iloc[i])
            intra = catalog.network(self.frame["intra_link"].iloc[i])
            out["bandwidth"][i], out["latency"][i] = net.bandwidth_gbs, net.latency_s
            out["intra_bandwidth"][i], out["intra_latency"][i] = intra.bandwidth_gbs, intra.latency_s
        out["overlap"][:] = 0.0
        out["tp_overlap"][:] = 0.0
        for name in CALIBRATED_PARAMETERS:
            if name in self.kwargs:
                out[name][:] = float(self.kwargs[name])
        return out

    def evaluate(
        self, overrides: Mapping[str, np.ndarray] | None = None, where: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Every row's predicted ``measured`` (the quantity the row measured) and the model's
        ``step_time``, ``throughput``, ``tokens_per_s``, ``tflops_per_gpu``, ``mfu``, ``hfu``;
        ``overrides`` replaces parameters per row; rows outside ``where`` are NaN."""
        values = {**self.defaults, **dict(overrides or {})}
        rows = np.ones(self.n, dtype=bool) if where is None else np.asarray(where, dtype=bool)
        out = {name: np.full(self.n, np.nan) for name in (*HYBRID_MEASURED, "measured", "valid")}
        f = self.frame
        for _, group in f[rows].groupby(list(_GROUP), sort=False):
            i = group.index.to_numpy()
            first = group.iloc[0]
            st = hybrid_setup(
                self.workloads[i[0]],
                first["gpu"],
                first["network"],
                first["intra_link"],
                precision=first["precision"],
                optimizer=self.kwargs.get("optimizer", "adam"),
                memory_convention=self.kwargs.get("memory_convention", "megatron"),
            )
            settings = {
                k: group[k].to_numpy(dtype=float)
                for k in ("gpus", "tp", "pp", "dp", "micro_batch", "zero", "virtual_stages", "gpus_per_node")
            }
            settings["batch_size"] = group["global_batch"].to_numpy(dtype=float)
            settings["sequence_parallel"] = (
                group["sequence_parallel"].astype(str).str.lower() == "yes"
            ).to_numpy(dtype=float)
            for name in CALIBRATED_PARAMETERS:
                settings[name] = values[name][i]
            r = evaluate_hybrid(
                st,
                settings,
                recompute=normalize_recompute(first["recompute"]),
                schedule=normalize_schedule(first["schedule"]),
                attention=self.kwargs.get("attention", "fused"),
                check=False,  # the table's rows were read and checked; the fit varies parameters
            )
            flops = r["model_flops_per_gpu" if self.flops == "model" else "hardware_flops_per_gpu"]
            predicted = {
                "step_time": r["step_time"],
                "throughput": r["throughput"],
                "tokens_per_s": r["tokens_per_s"],
                "tflops_per_gpu": flops / 1e12,
                "mfu": r["mfu"],
                "hfu": r["hardware_flops_per_gpu"] / r["peak_flops"],
                "valid": r["valid"],
            }
            for name, value in predicted.items():
                out[name][i] = value
        for name in HYBRID_MEASURED:
            hit = self.variable == name
            out["measured"][hit] = out[name][hit]
        return out

    def setups(self) -> pd.DataFrame:
        """Each row's settings, for choosing among the points and for the shared defaults."""
        columns = [
            "workload",
            "gpu",
            "network",
            "intra_link",
            "precision",
            "gpus",
            "gpus_per_node",
            "tp",
            "pp",
            "dp",
            "micro_batch",
            "recompute",
            "schedule",
            "virtual_stages",
            "zero",
            "sequence_parallel",
        ]
        out = self.frame[[c for c in columns if c in self.frame]].copy()
        out["sequence_parallel"] = out["sequence_parallel"].astype(str).str.lower() == "yes"
        return out


def hybrid_predict_points(ds: xr.Dataset, **model_kwargs: Any) -> xr.Dataset:
    """The model at every row of a hybrid table: ``step_time``, ``throughput``, ``tokens_per_s``,
    ``tflops_per_gpu``, ``mfu``, ``hfu`` along ``point``, with the table's coordinates."""
    points = HybridPoints(ds, model_kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = points.evaluate()
    units = {**HYBRID_MEASURED}
    data = {
        name: xr.DataArray(
            out[name], dims="point", attrs={"units": units[name], "long_name": f"predicted {name}"}
        )
        for name in HYBRID_MEASURED
    }
    result = xr.Dataset(data, coords={k: v for k, v in ds.coords.items() if v.dims == ("point",)})
    result.attrs.update(
        source="predicted: dlexplore hybrid-parallel model at the points of "
        + ds.attrs.get("name", "a measured table"),
        kind="predicted",
        notes="; ".join(points.notes),
    )
    if not np.all(np.isfinite(out["measured"])):
        bad = np.flatnonzero(~np.isfinite(out["measured"]))
        result.attrs["not_predicted"] = f"{bad.size} point(s) the model cannot run: {bad.tolist()}"
    return result
