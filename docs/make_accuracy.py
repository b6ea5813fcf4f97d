"""Regenerate docs/accuracy.md: the analytical model and an Extra-P baseline against every shipped
published dataset, fitted on some points and judged on the others.

    python docs/make_accuracy.py            # writes docs/accuracy.md (atomically)
    python docs/make_accuracy.py --check    # exit status 1 if docs/accuracy.md is stale
    python docs/make_accuracy.py -o FILE    # write (or, with --check, compare) another file

Protocols, on every dataset of :func:`dlexplore.measured.available` that has points to hold out:

(a) calibrate the compute efficiency (one per workload, GPU and precision) on the single-GPU
    points and predict every other point;
(b) calibrate on the points up to 8 GPUs, also the parameters of the links those points
    communicate over (bandwidth, latency; the intra-node link when no fitted point leaves a node)
    and the overlap of communication with the backward pass, where the points determine them; and
    predict the points above 8 GPUs;
(c) calibrate as in (b) on every point but the largest GPU count of each series, and predict
    that one (shown where it differs from (a) and (b)).

The Extra-P baseline (:func:`dlexplore.fit.extrap.fit_scaling`, one term, leave-one-out SMAPE)
is fitted to each series' fitted points (throughput, or time, against GPUs) and extrapolated to
the same held-out points, where a series has at least 3 distinct GPU counts to fit.

Nothing here is tuned to the data: the model's constants are its catalog's and defaults, the fitted
parameters are what :func:`dlexplore.fit.calibrate` finds, and the explanations of misses are
written from the numbers the report shows. The comparison that ``--check`` makes ignores the line
with the date of generation.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import difflib
import math
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import dlexplore
from dlexplore import catalog, measured
from dlexplore._io import atomic_open
from dlexplore.errors import DlexploreError
from dlexplore.fit import Calibration, calibrate, predict_points
from dlexplore.fit.extrap import fit_scaling

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "accuracy.md"
DATE_PREFIX = "_Generated on "
TARGET = 0.08  # MAPE the issue asks for on each dataset, a fraction
PER = ("workload", "gpu", "precision")  # compute efficiency is fitted per these columns
SINGLE_NODE_LINK = ("compute_efficiency", "intra_bandwidth", "intra_latency", "overlap")
NETWORK = ("compute_efficiency", "bandwidth", "latency", "overlap")
# Identifying columns shown in the point tables, when they vary within a dataset.
SHOWN = ("workload", "gpu", "precision", "batch_size", "bytes", "algorithm", "setup")


# --- computing ------------------------------------------------------------------------------------


@dataclass
class ExtrapSeries:
    """One series' Extra-P fit: its label, the formula (or why there is none) and its points."""

    label: str
    formula: str | None
    reason: str
    fitted_gpus: list[int]
    held_out: list[int]  # row positions in the dataset


@dataclass
class Protocol:
    """One protocol on one dataset: the calibration, and the Extra-P baseline on the same split."""

    key: str
    title: str
    fit_mask: np.ndarray
    calibration: Calibration | None = None
    same_as: str | None = None
    extrap_pred: np.ndarray | None = None  # per row, NaN where Extra-P does not predict
    series: list[ExtrapSeries] = field(default_factory=list)

    @property
    def held_out(self) -> np.ndarray:
        return ~self.fit_mask


@dataclass
class DatasetResult:
    name: str
    ds: object
    frame: pd.DataFrame
    table: str
    variable: str
    protocols: list[Protocol]
    uncalibrated: pd.DataFrame | None = None


def _variable(ds, table: str) -> str:
    order = ("throughput", "efficiency") if table == "training" else ("time", "busbw", "algbw")
    return next(v for v in order if v in ds.data_vars and np.isfinite(ds[v].values).any())


def _series(frame: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    """Rows of each scaling series (label, row positions): the points that differ only in GPUs.

    Points of one workload, GPU, precision and batch size (or one collective and message size)
    with the same setup and algorithm form a series. The points at the smallest GPU count of
    such a group are the base of every series of the group: the Horovod tables' 1-GPU row
    ("1 GPU", no algorithm) is the base of each multi-GPU setup, and Goyal et al.'s 8-GPU
    baseline of the 256-GPU point.
    """
    base = [c for c in ("workload", "collective", "gpu", "precision", "batch_size", "bytes")
            if c in frame]
    # Not the network: the DeepBench series leaves the node (PCIe3 -> IB-FDR) at 16 GPUs.
    extra = [c for c in ("setup", "algorithm") if c in frame]
    positions = np.arange(len(frame))
    out = []
    for key, group in frame.groupby(base, sort=False):
        rows = positions[frame.index.get_indexer(group.index)]
        gpus = frame["gpus"].to_numpy()[rows]
        at_base = gpus == gpus.min()
        sub = frame.iloc[rows]
        for sub_key, members in sub.groupby(extra, sort=False) if extra else [((), sub)]:
            member_rows = positions[frame.index.get_indexer(members.index)]
            if np.all(frame["gpus"].to_numpy()[member_rows] == gpus.min()):
                continue  # only base points: they join the other series
            series_rows = np.union1d(rows[at_base], member_rows)
            sub_key = sub_key if isinstance(sub_key, tuple) else (sub_key,)
            key = key if isinstance(key, tuple) else (key,)
            label = ", ".join(str(v) for v in (*key, *sub_key) if str(v) not in ("", "unknown"))
            out.append((label, series_rows))
    return out


def _extrap(frame: pd.DataFrame, variable: str, fit_mask: np.ndarray) -> tuple[np.ndarray, list]:
    """Extra-P predictions at the held-out rows of each series, from that series' fitted rows."""
    pred = np.full(len(frame), np.nan)
    gpus = frame["gpus"].to_numpy(dtype=float)
    y = frame[variable].to_numpy(dtype=float)
    series = []
    for label, rows in _series(frame):
        fit_rows = rows[fit_mask[rows]]
        held = rows[~fit_mask[rows]]
        if held.size == 0:
            continue
        fitted_gpus = sorted({int(g) for g in gpus[fit_rows]})
        try:
            model = fit_scaling(gpus[fit_rows], y[fit_rows])
        except DlexploreError:
            reason = (f"{len(fitted_gpus)} fitted GPU count{'s' if len(fitted_gpus) != 1 else ''} "
                      f"({', '.join(map(str, fitted_gpus))}); Extra-P needs 3")
            series.append(ExtrapSeries(label, None, reason, fitted_gpus, held.tolist()))
            continue
        pred[held] = model.predict(gpus[held])
        names = ["c", *(f"a{k + 1}" if len(model.terms) > 1 else "a" for k in range(len(model.terms)))]
        values = [(model.constant, model.constant_stderr)]
        values += [(t.coefficient, t.stderr) for t in model.terms]
        coefficients = ", ".join(f"{n} = {_with_error(v, e) if e > 0 else _sig(v, 4)}"
                                 for n, (v, e) in zip(names, values, strict=True))
        series.append(ExtrapSeries(label, model.formula,
                                   f"{coefficients}; SMAPE {model.smape:.2f}% (leave-one-out)",
                                   fitted_gpus, held.tolist()))
    return pred, series


def _link_params(frame: pd.DataFrame, fit_mask: np.ndarray) -> tuple[str, ...]:
    """Network parameters for the links the fitted points use (training tables)."""
    rows = frame[fit_mask]
    per_node = rows["gpus_per_node"] if "gpus_per_node" in rows else pd.Series(1, index=rows.index)
    multi = rows["gpus"] > 1
    if not multi.any():
        return ("compute_efficiency",)
    if (rows.loc[multi, "gpus"] <= per_node[multi]).all():
        return SINGLE_NODE_LINK
    return NETWORK


def _calibrate(name: str, fit_mask: np.ndarray, params: tuple[str, ...] | None,
               per: dict | None) -> Calibration:
    with warnings.catch_warnings():
        # What the points cannot determine is in the params table (identifiable, note).
        warnings.simplefilter("ignore")
        return calibrate(name, fit_on=fit_mask, params=params, per=per)


def _largest_out(frame: pd.DataFrame) -> np.ndarray:
    """Fit mask of protocol (c): every point but the largest GPU count of its series."""
    fit = np.ones(len(frame), dtype=bool)
    gpus = frame["gpus"].to_numpy()
    for _, rows in _series(frame):
        top = gpus[rows].max()
        fit[rows[gpus[rows] == top]] = False
    return fit


def _plan(name: str) -> DatasetResult:
    """A dataset's protocols, their fit masks and what each calibrates (nothing run yet)."""
    ds = measured.load(name)
    table = ds.attrs["table"]
    frame = measured.to_frame(ds)
    gpus = frame["gpus"].to_numpy()
    masks = []
    single = gpus == 1
    if table == "training" and single.any() and (~single).any():
        masks.append(("a", "(a) fitted on the single-GPU points", single))
    small = gpus <= 8
    if small.any() and (~small).any():
        masks.append(("b", "(b) fitted on the points up to 8 GPUs", small))
    largest = _largest_out(frame)
    if largest.any() and (~largest).any():
        masks.append(("c", "(c) fitted on all but the largest GPU count of each series", largest))
    protocols: list[Protocol] = []
    for key, title, mask in masks:
        same = next((p for p in protocols if np.array_equal(p.fit_mask, mask)), None)
        if same is not None and key == "c":
            continue  # (c) is shown only where it differs from (a) and (b)
        protocol = Protocol(key, title, mask, same_as=same.key if same else None)
        protocols.append(protocol)
    return DatasetResult(name, ds, frame, table, _variable(ds, table), protocols)


def _job(result: DatasetResult, protocol: Protocol) -> tuple:
    """The arguments of the protocol's calibration."""
    if result.table == "communication":
        return (result.name, protocol.fit_mask, None, None)
    params = ("compute_efficiency",) if protocol.key == "a" else _link_params(result.frame,
                                                                              protocol.fit_mask)
    return (result.name, protocol.fit_mask, params, {"compute_efficiency": PER})


def compute(workers: int = 1) -> list[DatasetResult]:
    """Run every protocol on every bundled dataset; ``workers`` processes run the calibrations."""
    results = [_plan(name) for name in measured.available()]
    jobs = [(r, p) for r in results for p in r.protocols if p.same_as is None]
    args = [_job(r, p) for r, p in jobs]
    if workers > 1 and len(args) > 1:
        import concurrent.futures
        import multiprocessing

        # The fits with several parameters take seconds each: start them first.
        order = sorted(range(len(args)), key=lambda i: -len(args[i][2] or ()))
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = {i: pool.submit(_calibrate, *args[i]) for i in order}
            calibrations = [futures[i].result() for i in range(len(args))]
    else:
        calibrations = [_calibrate(*a) for a in args]
    for (_, protocol), calibration in zip(jobs, calibrations, strict=True):
        protocol.calibration = calibration
    for result in results:
        for protocol in result.protocols:
            if protocol.same_as is not None:
                protocol.calibration = next(p.calibration for p in result.protocols
                                            if p.key == protocol.same_as)
            protocol.extrap_pred, protocol.series = _extrap(result.frame, result.variable,
                                                            protocol.fit_mask)
        if not result.protocols:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pred = predict_points(result.ds)
            out = result.frame.copy()
            out["predicted"] = pred[result.variable].values
            out["error"] = (out["predicted"] - out[result.variable]) / out[result.variable]
            out["model_algorithm"] = pred["model_algorithm"].values
            result.uncalibrated = out
    return results


# --- formatting -----------------------------------------------------------------------------------


def _pct(x: float, sign: bool = False) -> str:
    if x is None or not np.isfinite(x):
        return "—"
    return f"{100 * x:+.1f}%" if sign else f"{100 * x:.1f}%"


def _sig(x: float, digits: int = 3) -> str:
    if not np.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if -3 <= magnitude < 6:
        decimals = max(digits - 1 - magnitude, 0)
        return f"{x:.{decimals}f}"
    return f"{x:.{digits - 1}e}"


def _value(x: float, units: str) -> str:
    """A measured or predicted value in readable units (ms for times)."""
    if units == "s":
        return f"{1e3 * x:.2f} ms"
    if units == "samples/s":
        return f"{x:.1f}"
    if units == "1":
        return f"{x:.3f}"
    return f"{_sig(x, 4)} {units}"


def _scaled(value: float, units: str) -> tuple[float, str]:
    """Latencies in microseconds: 1.66e-04 s reads better as 166 us."""
    if units == "s":
        return value * 1e6, " µs"
    return value, "" if units in ("1", "count") else f" {units}"


def _with_error(value: float, stderr: float) -> str:
    """``value ± stderr``: the error to 2 significant digits, the value to the same decimal place."""
    decimals = 1 - math.floor(math.log10(stderr))
    if decimals <= 0:
        return f"{round(value, decimals):.0f} ± {round(stderr, decimals):.0f}"
    return f"{value:.{decimals}f} ± {stderr:.{decimals}f}"


def _param_value(row: pd.Series) -> str:
    value, units = _scaled(float(row["value"]), str(row["units"]))
    stderr = _scaled(float(row["stderr"]), str(row["units"]))[0]
    if not bool(row["identifiable"]):
        return f"not identifiable: kept {_sig(value)}{units}" if np.isfinite(value) else \
            "not identifiable"
    if not np.isfinite(stderr):
        text = f"{_sig(value)}{units} (one point per parameter: no standard error)"
    elif stderr > abs(value):
        # A value whose standard error exceeds it is not determined; its digits would be noise.
        text = "undetermined (its standard error exceeds it)"
    else:
        text = f"{_with_error(value, stderr)}{units}"
    if "bound" in str(row.get("note", "")):
        text += ", **at its bound**"
    return text


def _mape(errors: np.ndarray) -> tuple[float, float, int]:
    errors = np.asarray(errors, dtype=float)
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        return math.nan, math.nan, 0
    return float(np.mean(np.abs(errors))), float(np.max(np.abs(errors))), int(errors.size)


def _shown_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in SHOWN if c in frame and frame[c].astype(str).nunique() > 1]


def _row_label(frame: pd.DataFrame, i: int, columns: list[str]) -> list[str]:
    out = []
    for c in columns:
        v = frame[c].iloc[i]
        out.append(f"{int(v):,}" if c == "bytes" else str(v))
    return out


def _table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" * len(header)
    marks = {"l": "---", "r": "---:"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _summary_rows(results: list[DatasetResult]) -> list[list[str]]:
    rows = []
    for r in results:
        for p in r.protocols:
            cal = p.calibration
            errors = cal.points["error"].to_numpy(dtype=float)[p.held_out]
            mape, worst, n = _mape(errors)
            meas = r.frame[r.variable].to_numpy(dtype=float)[p.held_out]
            xerr = (p.extrap_pred[p.held_out] - meas) / meas
            xmape, xworst, xn = _mape(xerr)
            verdict = "yes" if mape <= TARGET else "**no**"
            counts = sorted({len(x.fitted_gpus) for x in p.series})
            extrap = (f"{_pct(xmape)} / {_pct(xworst)} ({xn} of {n})" if xn else
                      f"n/a ({' or '.join(map(str, counts))} fitted GPU count"
                      f"{'s' if counts != [1] else ''} per series; 3 needed)")
            rows.append([f"`{r.name}`", p.key + (f" (= {p.same_as})" if p.same_as else ""),
                         str(int(p.fit_mask.sum())), str(n), _pct(mape), _pct(worst), extrap,
                         verdict])
        if r.uncalibrated is not None:
            mape, worst, n = _mape(r.uncalibrated["error"].to_numpy(dtype=float))
            rows.append([f"`{r.name}`", "uncalibrated", "0", str(n), _pct(mape), _pct(worst),
                         "n/a (one GPU count)", "yes" if mape <= TARGET else "**no**"])
    return rows


def _params_lines(cal: Calibration) -> list[str]:
    rows = []
    for _, row in cal.params.iterrows():
        default, units = _scaled(float(row["default"]), str(row["units"]))
        rows.append([f"`{row['name']}`", str(row["group"]).replace("workload=", "")
                     .replace(", gpu=", ", ").replace(", precision=", ", "),
                     _param_value(row), f"{_sig(default)}{units}" if np.isfinite(default) else "—",
                     str(int(row["points"]))])
    return _table(["parameter", "group", "fitted", "default", "fitted points"], rows, "lllrr")


def _points_lines(r: DatasetResult, p: Protocol) -> list[str]:
    cal = p.calibration
    columns = _shown_columns(r.frame)
    units = str(cal.points["units"].iloc[0])
    header = [*columns, "GPUs", f"measured ({'ms' if units == 's' else units})", "model",
              "error", "Extra-P", "error"]
    rows = []
    meas = r.frame[r.variable].to_numpy(dtype=float)
    for i in np.flatnonzero(p.held_out):
        predicted = float(cal.points["predicted"].iloc[i])
        error = float(cal.points["error"].iloc[i])
        xp = p.extrap_pred[i]
        xerr = (xp - meas[i]) / meas[i] if np.isfinite(xp) else math.nan
        rows.append([*_row_label(r.frame, i, columns), str(int(r.frame["gpus"].iloc[i])),
                     _value(meas[i], units).removesuffix(" ms"),
                     _value(predicted, units).removesuffix(" ms"), _pct(error, True),
                     _value(xp, units).removesuffix(" ms") if np.isfinite(xp) else "—",
                     _pct(xerr, True)])
    return _table(header, rows, "l" * len(columns) + "rrrrrr")


def _setup_lines(r: DatasetResult, p: Protocol) -> list[str]:
    """Held-out MAPE per setup, where a dataset has several."""
    if "setup" not in r.frame or r.frame["setup"][p.held_out].nunique() < 2:
        return []
    errors = p.calibration.points["error"].to_numpy(dtype=float)
    rows = []
    for setup in pd.unique(r.frame["setup"][p.held_out]):
        mask = p.held_out & (r.frame["setup"].to_numpy() == setup)
        mape, worst, n = _mape(errors[mask])
        rows.append([str(setup), str(n), _pct(mape), _pct(worst),
                     "yes" if mape <= TARGET else "no"])
    return ["By setup:", "", *_table(["setup", "points", "MAPE", "max", "<= 8%"], rows, "lrrrl"), ""]


def _extrap_lines(r: DatasetResult, p: Protocol) -> list[str]:
    if not p.series:
        return []
    fitted = [s for s in p.series if s.formula]
    lines = []
    if not fitted:
        counts = sorted({len(s.fitted_gpus) for s in p.series})
        return [f"Extra-P: no series can be fitted — each has {' or '.join(map(str, counts))} "
                f"fitted GPU count{'s' if counts != [1] else ''} and a model with a constant and "
                "one term needs 3 (two to fit, one to cross-validate).", ""]
    units = str(r.ds[r.variable].attrs.get("units", ""))
    lines.append(f"Extra-P models of {r.variable} ({units}) against p = GPUs:")
    lines.append("")
    for s in p.series:
        if s.formula:
            lines.append(f"- {s.label}: `{s.formula}` from GPUs {', '.join(map(str, s.fitted_gpus))}"
                         f"; {s.reason}")
        else:
            lines.append(f"- {s.label}: not fitted ({s.reason})")
    lines.append("")
    return lines


# --- what the model lacks, from the numbers ---------------------------------------------------


def _err(r: DatasetResult, p: Protocol, **where) -> np.ndarray:
    mask = p.held_out.copy()
    for column, value in where.items():
        mask &= r.frame[column].to_numpy() == value
    return p.calibration.points["error"].to_numpy(dtype=float)[mask]


def _range(errors: np.ndarray) -> str:
    errors = np.sort(np.asarray(errors, dtype=float))
    if errors.size == 1:
        return _pct(errors[0], True)
    return f"{_pct(errors[0], True)} to {_pct(errors[-1], True)}"


def _vgg_needed(r: DatasetResult, p: Protocol) -> str:
    """How far above peak VGG-16 would need to run, from its single-GPU point."""
    rows = np.flatnonzero((r.frame["workload"] == "vgg16").to_numpy() & (r.frame["gpus"] == 1).to_numpy())
    if rows.size == 0:
        return ""
    i = rows[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        at_peak = predict_points(r.ds.isel(point=[i]), compute_efficiency=1.0)["throughput"].item()
    need = float(r.frame["throughput"].iloc[i]) / at_peak
    return (f"VGG-16's single-GPU point needs {need:.2f}x the P100's FP32 peak under the model's "
            f"direct-convolution FLOP count ({r.frame['throughput'].iloc[i]:.1f} images/s measured, "
            f"{at_peak:.1f} at 100% of peak), so its compute efficiency stops at the bound 1.0 and "
            "the model's VGG-16 compute time is that much too long at every GPU count: cuDNN runs "
            "VGG-16's 3x3 convolutions with Winograd (and FFT) algorithms that do fewer "
            "multiplications than the direct convolution the model counts")


def _step_growth(r: DatasetResult) -> list[str]:
    """Extra time per step over the single-GPU step, per series: what scaling costs, measured."""
    rows = []
    for label, idx in _series(r.frame):
        sub = r.frame.iloc[idx].sort_values("gpus")
        one = sub[sub["gpus"] == 1]
        if one.empty:
            continue
        step1 = float(one["batch_size"].iloc[0] / one["throughput"].iloc[0])
        parts = []
        for _, row in sub[sub["gpus"] > 1].iterrows():
            step = row["gpus"] * row["batch_size"] / row["throughput"]
            parts.append(f"{int(row['gpus'])}: {1e3 * (step - step1):+.1f}")
        rows.append([label, f"{1e3 * step1:.1f}", ", ".join(parts)])
    return _table(["series", "1-GPU step (ms)", "step time added (ms) at GPUs"], rows, "lrl")


def _why(r: DatasetResult) -> list[str]:
    """The reasons the model misses, written from this dataset's numbers."""
    builder = WHY.get(r.name)
    return builder(r) if builder else []


def _why_horovod(r: DatasetResult) -> list[str]:
    a = r.protocols[0]
    lines = [_vgg_needed(r, a) + "."]
    ps = [s for s in pd.unique(r.frame["setup"]) if "parameter server" in s or "variables" in s]
    if ps:
        errs = np.concatenate([_err(r, a, setup=s) for s in ps])
        vgg = np.concatenate([_err(r, a, setup=s, workload="vgg16") for s in ps])
        others = np.concatenate([_err(r, a, setup=s)[r.frame[a.held_out & (r.frame["setup"] == s)
                                 .to_numpy()]["workload"].to_numpy() != "vgg16"] for s in ps])
        share = catalog.workload("vgg16").gradient_params_backward.max() / catalog.workload("vgg16").params
        lines.append(
            f"Distributed TensorFlow (parameter servers), {_range(errs)}: the source does not say how "
            "many parameter servers ran or where, so the model uses one server that receives every "
            "worker's gradients and sends the parameters back at the link's line rate. For "
            f"Inception V3 and ResNet-101 the measured throughput is higher than that ({_range(others)}): "
            "TensorFlow spreads the variables over several servers. For VGG-16 it is far lower "
            f"({_range(vgg)} too high): TensorFlow places each variable whole on one server, and "
            f"VGG-16's first fully-connected layer alone holds {100 * share:.0f}% of its parameters, "
            "so one server carries most of the traffic, over gRPC on TCP, well below line rate. "
            "The model knows neither the number of servers, nor the placement of variables, nor the "
            "transport's efficiency.")
    cpu = [s for s in pd.unique(r.frame["setup"]) if "CPU allreduce" in s]
    if cpu:
        e = {w: _err(r, a, setup=cpu[0], workload=w) for w in ("inception_v3", "resnet101", "vgg16")}
        sizes = {w: catalog.workload(w).params * 4 / 1e6 for w in e}
        lines.append(
            "Horovod with the CPU allreduce (MPI_Allreduce on host memory): "
            + ", ".join(f"{w} {_range(e[w])} ({sizes[w]:.0f} MB of gradients)" for w in e)
            + ". The error grows with the gradient bytes: each allreduce copies the gradients from "
            "the GPU to the host and back and sums them on the CPU over TCP, a per-byte cost the "
            "model (an NCCL-like ring at line rate, hidden behind the backward pass) leaves out.")
    tcp = [s for s in pd.unique(r.frame["setup"]) if s == "Horovod TCP, NCCL"]
    rdma = [s for s in pd.unique(r.frame["setup"]) if s == "Horovod RDMA, NCCL"]
    if tcp:
        lines.append(
            f"Horovod with NCCL over TCP: {_range(_err(r, a, setup=tcp[0]))}"
            + (f", against {_range(_err(r, a, setup=rdma[0]))} over RDMA on the same network"
               if rdma else "")
            + ": the model has one figure per link (its line rate), not the efficiency of the "
            "transport (kernel TCP copies and congestion control cost most on the largest, VGG-16's, "
            "gradients).")
    return lines


def _why_tf(r: DatasetResult) -> list[str]:
    a = r.protocols[0]
    rest = a.held_out & (r.frame["workload"] != "vgg16").to_numpy()
    mape, _, n = _mape(a.calibration.points["error"].to_numpy(dtype=float)[rest])
    return [_vgg_needed(r, a) + f"; VGG-16's held-out points are {_range(_err(r, a, workload='vgg16'))}. "
            f"Without VGG-16 the MAPE of (a) is {_pct(mape)} over {n} points."]


def _why_mxnet(r: DatasetResult) -> list[str]:
    a = r.protocols[0]
    errors = a.calibration.points["error"].to_numpy(dtype=float)
    worst = int(np.nanargmax(np.abs(np.where(a.held_out, errors, np.nan))))
    row = r.frame.iloc[worst]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        comm = float(predict_points(r.ds.isel(point=[worst]))["time_comm"].item())
    lines = [
        f"The largest miss of (a) is {_pct(errors[worst], True)} ({row['gpu']}, {row['precision']}, "
        f"{int(row['gpus'])} GPUs). The measured step grows with the GPU count by about as many "
        "milliseconds in FP32 as in mixed precision, although the mixed-precision step is about "
        "half as long:",
        "\n".join(_step_growth(r)),
        f"So the loss is not compute, and not bandwidth either: the model's allreduce of that point "
        f"takes {1e3 * comm:.1f} ms on NVLink2, hidden behind the backward pass. It is a cost per "
        "step that grows with the GPU count (synchronisation, kernel launches, the framework's "
        "scheduling), which the model does not have.",
    ]
    b = next((q for q in r.protocols if q.key == "b"), None)
    if b is not None:
        params = b.calibration.params.set_index("name")
        if "intra_latency" in params.index and bool(params.loc["intra_latency", "identifiable"]):
            lat = float(params.loc["intra_latency", "value"])
            default = float(params.loc["intra_latency", "default"])
            mape, worst, _ = _mape(b.calibration.points["error"].to_numpy(dtype=float)[b.held_out])
            lines.append(
                f"(b), free to fit the intra-node link's latency, puts the cost there: "
                f"{1e6 * lat:.0f} µs per message against NVLink's {1e6 * default:.1f} µs, a latency "
                f"no link has; so fitted, it extrapolates to 16 GPUs with a MAPE of {_pct(mape)} "
                f"(max {_pct(worst)}).")
    return lines


def _why_goyal(r: DatasetResult) -> list[str]:
    p = r.protocols[0]
    cal = p.calibration
    held = int(np.flatnonzero(p.held_out)[0])
    base = int(np.flatnonzero(p.fit_mask)[0])
    err = float(cal.points["error"].iloc[held])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = predict_points(r.ds)
    comm = float(pred["time_comm"].values[held])
    exposed = float(pred["time_comm_exposed"].values[held])
    step8 = float(pred["step_time"].values[base])
    measured_eff = float(r.frame["efficiency"].iloc[held])
    lost = step8 / measured_eff - step8
    return [
        f"One held-out point: the model predicts an efficiency of "
        f"{float(cal.points['predicted'].iloc[held]):.3f} where the paper says about "
        f"{measured_eff:.1f} ({_pct(err, True)}). The 8-GPU baseline has efficiency 1 by "
        "definition, so nothing can be fitted to it and the model runs with its defaults. Its "
        f"hierarchical allreduce takes {1e3 * comm:.1f} ms per step at 256 GPUs, "
        f"{1e3 * exposed:.1f} ms of it exposed after the backward pass, against a "
        f"{1e3 * step8:.0f} ms step on one server; the paper's ~{100 * (1 - measured_eff):.0f}% loss "
        f"means about {1e3 * lost:.0f} ms more per step. The model has the 50 GbE line rate and "
        "perfect overlap; it lacks the efficiency of Gloo's TCP transport and Caffe2's "
        "per-iteration synchronisation, and the source gives one rounded figure.",
    ]


def _why_deepbench(r: DatasetResult) -> list[str]:
    p = next(q for q in r.protocols if q.key == "b")
    frame = r.frame
    inter = (frame["gpus"] > frame["gpus_per_node"]).to_numpy()
    busbw16 = frame["busbw"].to_numpy(dtype=float)[inter]
    busbw8 = frame["busbw"].to_numpy(dtype=float)[(frame["gpus"] == 8).to_numpy()]
    fitted = p.calibration.params.set_index("name")
    bw = float(fitted.loc["intra_bandwidth", "value"])
    pcie = catalog.network("PCIe3").bandwidth_gbs
    link = catalog.network("IB-FDR").bandwidth_gbs
    fit_err = p.calibration.points["error"].to_numpy(dtype=float)[p.fit_mask]
    return [
        f"Inside the node the fit itself misses by {_range(fit_err)}: the fitted PCIe bandwidth "
        f"({_sig(bw)} GB/s, against {pcie} GB/s for PCIe 3 x16) is one figure for every GPU count, "
        "while the ring leaves its PLX switch at 4 GPUs and crosses the QPI link between the "
        f"sockets at 8 (the measured busbw at 8 GPUs is {_sig(busbw8.min())} to {_sig(busbw8.max())} "
        "GB/s). The model has one link per node, not the PCIe tree.",
        f"The 16-GPU points cross InfiniBand FDR, which no fitted point uses, so the model takes "
        f"the catalog's {link} GB/s line rate; the measured busbw is {_sig(busbw16.min())} to "
        f"{_sig(busbw16.max())} GB/s, {100 * busbw16.min() / link:.0f}-{100 * busbw16.max() / link:.0f}% "
        "of it. Between nodes the data also move between GPU and adapter (through host memory "
        "unless GPUDirect RDMA is used; the source does not say), and the fastest library may "
        "differ per point (NCCL, OSU MPI or Baidu's ring): neither is in the model.",
    ]


def _why_nccl(r: DatasetResult) -> list[str]:
    out = r.uncalibrated
    ring = out[out["algorithm"] == "ring"]
    nvls = out[out["algorithm"] == "nvls"]
    lines = []
    if len(ring):
        lines.append(
            f"Ring: the model's busbw is the NVLink4 line rate, {_pct(ring['error'].iloc[0], True)} "
            "above the measurement; the maintainer's answer puts NCCL's protocol overhead at about "
            "20%, which the model does not have (a calibrated `intra_bandwidth` would absorb it).")
    if len(nvls):
        lines.append(
            "NVLS: NVLink SHARP does the reduction in the NVSwitches; the model has no in-network "
            f"reduction, and `{nvls['model_algorithm'].iloc[0]}` stands in for it "
            f"({_pct(nvls['error'].iloc[0], True)}).")
    return lines


WHY: dict[str, Callable[[DatasetResult], list[str]]] = {
    "horovod-2017-16gpu-25gbe": _why_horovod,
    "horovod-2017-64gpu-40gbit": _why_horovod,
    "tf-benchmarks-2017-dgx1": _why_tf,
    "nvidia-mxnet-resnet50-v1.5": _why_mxnet,
    "goyal-2017-resnet50": _why_goyal,
    "deepbench-allreduce-p100": _why_deepbench,
    "nccl-tests-h100-allreduce": _why_nccl,
}


def _uncalibrated_lines(r: DatasetResult) -> list[str]:
    out = r.uncalibrated
    units = str(r.ds[r.variable].attrs.get("units", ""))
    columns = _shown_columns(out)
    rows = []
    for i in range(len(out)):
        rows.append([*_row_label(out, i, columns), str(int(out["gpus"].iloc[i])),
                     str(out["model_algorithm"].iloc[i]), _value(out[r.variable].iloc[i], units),
                     _value(out["predicted"].iloc[i], units), _pct(out["error"].iloc[i], True)])
    lines = ["Every point has the same GPU count, so there is nothing to hold out: the model runs "
             "uncalibrated, with the catalog's link figures.", ""]
    lines += _table([*columns, "GPUs", "model's algorithm", f"measured {r.variable}", "model",
                     "error"], rows, "l" * len(columns) + "rlrrr")
    return lines


def render(results: list[DatasetResult], date: str) -> str:
    """The report as Markdown."""
    lines = [
        "# Accuracy of the model against published measurements",
        "",
        f"_Regenerated by `python docs/make_accuracy.py` (`--check` says whether this file is stale)"
        f" with dlexplore {dlexplore.__version__}; do not edit by hand._",
        f"{DATE_PREFIX}{date}._",
        "",
        "Each shipped dataset is split into points to fit and points to predict. The model's "
        "parameters are fitted with `dlexplore.calibrate` (least squares on log(predicted / "
        "measured), standard errors from the Jacobian) and every held-out point is predicted with "
        "them; `error = (predicted - measured) / measured`, MAPE is the mean of |error| over the "
        "held-out points and max the largest |error|. The target is a MAPE of at most 8% on each "
        "dataset. Where the model misses it, the section says what the model lacks; no constant "
        "was tuned to these data.",
        "",
        "- **(a)** fit the compute efficiency (one per workload, GPU and precision) on the "
        "single-GPU points, predict every other point;",
        "- **(b)** fit on the points up to 8 GPUs, with the parameters of the links those points "
        "use (bandwidth, latency; the intra-node link when they stay inside a node) and the overlap "
        "of communication with the backward pass, where the points determine them; predict the "
        "points above 8 GPUs;",
        "- **(c)** as (b), on every point but the largest GPU count of each series; predict that "
        "one (shown where it differs from (a) and (b)).",
        "",
        "The baseline is an Extra-P model (`dlexplore.fit.extrap.fit_scaling`: `c + a * p^i * "
        "log2(p)^j` with Extra-P's exponents, chosen by leave-one-out SMAPE) fitted to each series' "
        "fitted points and extrapolated to the same held-out points. It needs three distinct GPU "
        "counts to fit, so it cannot take part where a series has fewer.",
        "",
        "## Summary",
        "",
    ]
    lines += _table(["dataset", "protocol", "fitted", "held out", "model MAPE", "model max",
                     "Extra-P MAPE / max (points)", "MAPE <= 8%"], _summary_rows(results),
                    "llrrrrll")
    for r in results:
        attrs = r.ds.attrs
        lines += ["", f"## `{r.name}`", "", f"{attrs.get('title', '')}.", "",
                  f"Source: {attrs['source'].removeprefix(measured.MEASURED_PREFIX)}"
                  + (f" <{attrs['url']}>" if attrs.get("url") else "") + ".",
                  f"{r.table.capitalize()} table, {len(r.frame)} points, measured `{r.variable}`.", ""]
        if r.uncalibrated is not None:
            lines += _uncalibrated_lines(r) + [""]
        for key in ("a", "b", "c") if r.uncalibrated is None else ():
            p = next((q for q in r.protocols if q.key == key), None)
            if p is None:
                if key == "a":
                    lines += ["(a) does not apply: " + (
                        "a collective on one GPU moves nothing." if r.table == "communication"
                        else "there is no single-GPU point."), ""]
                elif key == "b":
                    lines += ["(b) does not apply: there is no point above 8 GPUs.", ""]
                continue
            cal = p.calibration
            errors = cal.points["error"].to_numpy(dtype=float)[p.held_out]
            mape, worst, n = _mape(errors)
            lines += [f"### {p.title}", ""]
            if p.same_as:
                lines += [f"The same points as ({p.same_as}) are fitted: see there.", ""]
                continue
            fit_mape, _, _ = _mape(cal.points["error"].to_numpy(dtype=float)[p.fit_mask])
            fitted = int(p.fit_mask.sum())
            lines += [f"Fitted on {fitted} point{'s' if fitted != 1 else ''} (MAPE {_pct(fit_mape)} "
                      f"on {'them' if fitted != 1 else 'it'}); {n} held out: MAPE **{_pct(mape)}**, "
                      f"max {_pct(worst)}.", ""]
            lines += _params_lines(cal) + [""]
            lines += _points_lines(r, p) + [""]
            lines += _setup_lines(r, p)
            lines += _extrap_lines(r, p)
        why = _why(r)
        if why:
            lines += ["### What the model lacks here", ""]
            for block in why:  # a paragraph, or a table as one multi-line block
                lines += [block, ""]
    return "\n".join(lines).rstrip() + "\n"


# --- command line ---------------------------------------------------------------------------------


def _today() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc).date().isoformat()
    return _dt.date.today().isoformat()


def _without_date(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(DATE_PREFIX)]


def check(path: Path, text: str) -> list[str]:
    """The differences between the report at ``path`` and ``text``, the date lines aside, as a
    unified diff (empty when the file is up to date)."""
    old = _without_date(path.read_text(encoding="utf-8"))
    new = _without_date(text)
    return list(difflib.unified_diff(old, new, str(path), "regenerated", lineterm="", n=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the file instead of writing it; exit 1 if it is stale")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT, help="the report (Markdown)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes for the calibrations (default: 2, or 1 on one core)")
    args = parser.parse_args(argv)
    if args.check and not args.output.is_file():
        print(f"{args.output}: missing; run python docs/make_accuracy.py", file=sys.stderr)
        return 1
    text = render(compute(workers=args.workers), _today())
    if args.check:
        diff = check(args.output, text)
        if diff:
            print("\n".join(diff[:60]), file=sys.stderr)
            print(f"{args.output} is stale: run python docs/make_accuracy.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    with atomic_open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
