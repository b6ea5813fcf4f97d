"""Fidelity benchmark: dlexplore against published measurements, with the peers and an empirical fit.

On the same rows of each measured table, side by side:

- **dlexplore uncalibrated**: the catalog and the defaults of ``data/catalog/defaults.csv``;
- **dlexplore calibrated**: fitted with ``dlexplore.calibrate`` on the smallest configurations
  (the points at the smallest ``min(3, counts - 1)`` GPU counts of the table; one GPU count: the
  ring row), predicting the others: the GEMM plateau per workload, GPU and precision, and the
  parameters of the links the fitted points use, where they determine them;
- **Extra-P** (``dlexplore.fit.extrap.fit_scaling``): an empirical scaling model per series of the
  fitted points, where a series has three GPU counts to fit;
- **llm-analysis 0.2.2** on LLM rows (the peer that applies): with its documentation's
  ``flops_efficiency`` for Megatron-LM (0.5), and with ``flops_efficiency`` fitted on the same rows
  as dlexplore's calibration. The hybrid-parallel rows are calibrated the same way for dlexplore:
  its GEMM plateau, by least squares on log(predicted / measured).

One MAPE table per dataset. The LLM rows are Narayanan et al. 2021, Table 1
(``../shared/reference/narayanan2021-table1.csv``; development data: nothing is fitted to it but
the calibrated rows' own fit). Micro-batch size is not given there: 1 (Megatron-LM's GPT-3 175B
script), every row with the same value.

Install the peer and run::

    pip install -e '.[fidelity]'          # llm-analysis==0.2.2 (and transformers; no torch)
    python benchmarks/fidelity.py         # bundled tables, Narayanan rows and peers; prints tables
    python benchmarks/fidelity.py --external-only   # only the LLM rows and the peers

Results for rows outside the repository (the LLM table) and for the peers are written to
``benchmarks/results/fidelity-external.csv``, which ``docs/make_accuracy.py`` reads, so that
``docs/accuracy.md`` can be regenerated (and checked) without the peer or ``../shared``.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import dlexplore as dlx
from dlexplore.errors import DlexploreError
from dlexplore.fit.extrap import fit_scaling

ROOT = Path(__file__).resolve().parents[1]
NARAYANAN = ROOT.parent / "shared" / "reference" / "narayanan2021-table1.csv"
EXTERNAL = ROOT / "benchmarks" / "results" / "fidelity-external.csv"
METHODS = ("dlexplore uncalibrated", "dlexplore calibrated", "Extra-P", "llm-analysis (0.5)",
           "llm-analysis calibrated")
LLM_MICRO_BATCH = 1


# --- the smallest configurations --------------------------------------------------------------------

def fit_mask(frame: pd.DataFrame) -> np.ndarray:
    """The points a calibration fits on: the smallest ``min(3, counts - 1)`` GPU counts; with one
    GPU count, the ring rows (nccl-tests: fit on NCCL_ALGO=RING, predict NVLink SHARP)."""
    counts = np.unique(frame["gpus"].to_numpy())
    if len(counts) == 1:
        return (frame["algorithm"].astype(str) == "ring").to_numpy()
    keep = counts[: min(3, len(counts) - 1)]
    return np.isin(frame["gpus"].to_numpy(), keep)


def _series(frame: pd.DataFrame) -> list[np.ndarray]:
    """Rows that differ only in GPU count (each with the table's smallest-count rows of its group)."""
    base = [c for c in ("workload", "collective", "gpu", "precision", "batch_size", "bytes") if c in frame]
    extra = [c for c in ("setup", "algorithm") if c in frame]
    out = []
    positions = np.arange(len(frame))
    for _, group in frame.groupby(base, sort=False):
        rows = positions[frame.index.get_indexer(group.index)]
        gpus = frame["gpus"].to_numpy()[rows]
        smallest = rows[gpus == gpus.min()]
        for _, members in (group.groupby(extra, sort=False) if extra else [((), group)]):
            member_rows = positions[frame.index.get_indexer(members.index)]
            if np.all(frame["gpus"].to_numpy()[member_rows] == gpus.min()):
                continue
            out.append(np.union1d(smallest, member_rows))
    return out


def _extrap(frame: pd.DataFrame, y: np.ndarray, fit: np.ndarray) -> np.ndarray:
    pred = np.full(len(frame), np.nan)
    gpus = frame["gpus"].to_numpy(dtype=float)
    for rows in _series(frame):
        fitted, held = rows[fit[rows]], rows[~fit[rows]]
        if held.size == 0 or len(np.unique(gpus[fitted])) < 3:
            continue
        try:
            model = fit_scaling(gpus[fitted], y[fitted])
        except DlexploreError:
            continue
        pred[held] = model.predict(gpus[held])
    return pred


# --- bundled tables ----------------------------------------------------------------------------------

def _calibration_params(frame: pd.DataFrame, fit: np.ndarray, table: str) -> tuple | None:
    if table == "communication":
        return None  # calibrate's choice: the links the fitted points use
    rows = frame[fit]
    multi = rows["gpus"] > 1
    if not multi.any():
        return ("compute_efficiency",)
    per_node = rows["gpus_per_node"] if "gpus_per_node" in rows else pd.Series(1, index=rows.index)
    if (rows.loc[multi, "gpus"] <= per_node[multi]).all():
        return ("compute_efficiency", "intra_bandwidth", "intra_latency")
    return ("compute_efficiency", "bandwidth", "latency")


def bundled(name: str) -> pd.DataFrame:
    """Every method's prediction at every point of a bundled table (long format)."""
    ds = dlx.measured.load(name)
    table = ds.attrs["table"]
    frame = dlx.measured.to_frame(ds)
    variable = next(v for v in (("throughput", "efficiency") if table == "training"
                                else ("time", "busbw", "algbw")) if v in frame and frame[v].notna().any())
    y = frame[variable].to_numpy(dtype=float)
    fit = fit_mask(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uncal = dlx.predict_points(ds)[variable].values
        params = _calibration_params(frame, fit, table)
        per = {"compute_efficiency": ("workload", "gpu", "precision")} if table == "training" else None
        cal = dlx.calibrate(ds, fit_on=fit, params=params, per=per).points["predicted"].to_numpy(float)
    labels = [c for c in ("workload", "collective", "gpu", "precision", "batch_size", "bytes",
                          "algorithm", "setup") if c in frame]
    out = []
    for method, pred, fitted in ((METHODS[0], uncal, np.zeros(len(frame), bool)), (METHODS[1], cal, fit),
                                 (METHODS[2], _extrap(frame, y, fit), fit)):
        part = frame[labels + ["gpus"]].copy()
        part.insert(0, "dataset", name)
        part["row"] = np.arange(len(frame))
        part["variable"] = variable
        part["measured"] = y
        part["method"] = method
        part["predicted"] = pred
        part["fitted"] = fitted
        out.append(part)
    return pd.concat(out, ignore_index=True)


# --- the LLM table (hybrid parallelism) ---------------------------------------------------------------

def _megatron_tflops(row: pd.Series, step_time: np.ndarray | float) -> np.ndarray:
    """Narayanan et al.'s eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs per iteration, per GPU."""
    B, s, L, h, V = row.global_batch, row.seq, row.layers, row.hidden, row.vocab
    flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    return flops / np.asarray(step_time) / row.gpus / 1e12


def _dlexplore_llm(row: pd.Series, efficiency: float | None) -> float:
    wl = dlx.catalog.transformer(int(row.layers), int(row.hidden), int(row.heads), int(row.seq),
                                 int(row.vocab), causal=True, name=str(row.model))
    ds = dlx.predict_parallel(wl, "A100-80GB", "IB-HDR", gpus=int(row.gpus), tp=int(row.tp),
                              pp=int(row.pp), micro_batch=LLM_MICRO_BATCH,
                              batch_size=int(row.global_batch), recompute=str(row.recompute),
                              precision=str(row.precision), gpus_per_node=int(row.gpus_per_node),
                              intra_link="NVLink3", compute_efficiency=efficiency)
    return float(_megatron_tflops(row, float(ds.step_time)))


def _llm_analysis(row: pd.Series, efficiency: float) -> float:
    import llm_analysis.analysis as la
    from llm_analysis.config import (
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    la.logger.setLevel(logging.ERROR)
    model = ModelConfig(name=str(row.model), num_layers=int(row.layers), n_head=int(row.heads),
                        hidden_dim=int(row.hidden), vocab_size=int(row.vocab), max_seq_len=int(row.seq))
    analysis = la.LLMAnalysis(model, get_gpu_config_by_name("a100-sxm-80gb"),
                              get_dtype_config_by_name("w16a16e16"),
                              ParallelismConfig(tp_size=int(row.tp), pp_size=int(row.pp),
                                                dp_size=int(row.dp)),
                              flops_efficiency=efficiency, hbm_memory_efficiency=1.0)
    recompute = {"full": la.ActivationRecomputation.FULL,
                 "selective": la.ActivationRecomputation.SELECTIVE}.get(str(row.recompute),
                                                                         la.ActivationRecomputation.NONE)
    out = analysis.training(batch_size_per_gpu=LLM_MICRO_BATCH, global_batch_size=int(row.global_batch),
                            seq_len=int(row.seq), activation_recomputation=recompute, flash_attn=False)
    return float(_megatron_tflops(row, out["latency_per_iter"]))


def _fit_efficiency(predict, rows: pd.DataFrame, measured: np.ndarray) -> float:
    """The efficiency (0, 1] whose predictions of ``rows`` have the least squared log error."""
    from scipy.optimize import minimize_scalar

    def cost(e: float) -> float:
        pred = np.array([predict(row, e) for _, row in rows.iterrows()])
        return float(np.sum(np.log(pred / measured) ** 2))

    return float(minimize_scalar(cost, bounds=(0.05, 1.0), method="bounded",
                                 options={"xatol": 1e-5}).x)


def llm_table(path: Path, peers: bool) -> pd.DataFrame:
    """dlexplore (and llm-analysis where installed) on the LLM table: TFLOP/s per GPU."""
    table = pd.read_csv(path, comment="#")
    y = table["tflops_per_gpu"].to_numpy(dtype=float)
    frame = table.rename(columns={"model": "workload"})
    fit = fit_mask(frame.assign(algorithm=""))
    methods = {METHODS[0]: (np.array([_dlexplore_llm(r, None) for _, r in table.iterrows()]),
                            np.zeros(len(table), bool))}
    e = _fit_efficiency(_dlexplore_llm, table[fit], y[fit])
    methods[METHODS[1]] = (np.array([_dlexplore_llm(r, e) for _, r in table.iterrows()]), fit)
    methods[METHODS[2]] = (_extrap(frame, y, fit), fit)
    if peers:
        methods[METHODS[3]] = (np.array([_llm_analysis(r, 0.5) for _, r in table.iterrows()]),
                               np.zeros(len(table), bool))
        e_peer = _fit_efficiency(_llm_analysis, table[fit], y[fit])
        methods[METHODS[4]] = (np.array([_llm_analysis(r, e_peer) for _, r in table.iterrows()]), fit)
    out = []
    for method, (pred, fitted) in methods.items():
        part = frame[["workload", "gpu", "precision", "tp", "pp", "dp", "global_batch", "gpus"]].copy()
        part.insert(0, "dataset", "narayanan2021-table1")
        part["row"] = np.arange(len(table))
        part["variable"] = "tflops_per_gpu"
        part["measured"] = y
        part["method"] = method
        part["predicted"] = pred
        part["fitted"] = fitted
        out.append(part)
    return pd.concat(out, ignore_index=True)


# --- summaries ---------------------------------------------------------------------------------------

def summary(points: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset and method: MAPE and the largest |error| on the held-out rows (those the
    calibration did not fit; the same rows for every method) and on all rows."""
    points = points.assign(error=(points["predicted"] - points["measured"]) / points["measured"])
    held = points.groupby(["dataset", "row"])["fitted"].transform("max") == 0
    rows = []
    for (dataset, method), group in points.groupby(["dataset", "method"], sort=False):
        out = group[held[group.index]]
        err_out = np.abs(out["error"].to_numpy(dtype=float))
        err_all = np.abs(group["error"].to_numpy(dtype=float))
        rows.append({"dataset": dataset, "method": method,
                     "held_out": int(np.isfinite(err_out).sum()), "of": len(out),
                     "mape_held_out": float(np.nanmean(err_out)) if np.isfinite(err_out).any() else math.nan,
                     "max_held_out": float(np.nanmax(err_out)) if np.isfinite(err_out).any() else math.nan,
                     "all": int(np.isfinite(err_all).sum()),
                     "mape_all": float(np.nanmean(err_all)) if np.isfinite(err_all).any() else math.nan})
    return pd.DataFrame(rows)


def compute_bundled() -> pd.DataFrame:
    return pd.concat([bundled(name) for name in dlx.measured.available()], ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--narayanan", type=Path, default=NARAYANAN, help="the LLM table (CSV)")
    parser.add_argument("--external-only", action="store_true",
                        help="only the LLM rows and the peers (written to --external)")
    parser.add_argument("--external", type=Path, default=EXTERNAL,
                        help="where the LLM rows' and peers' results go")
    args = parser.parse_args(argv)
    try:
        import llm_analysis  # noqa: F401

        peers = True
    except ImportError:
        peers = False
        print("llm-analysis is not installed (pip install -e '.[fidelity]'): no peer columns",
              file=sys.stderr)
    parts = [] if args.external_only else [compute_bundled()]
    if args.narayanan.is_file():
        external = llm_table(args.narayanan, peers)
        args.external.parent.mkdir(parents=True, exist_ok=True)
        from dlexplore._io import atomic_open

        with atomic_open(args.external, "w", encoding="utf-8") as handle:
            external.to_csv(handle, index=False, float_format="%.6g")
        parts.append(external)
    else:
        print(f"{args.narayanan}: not found, the LLM rows are left out", file=sys.stderr)
    table = summary(pd.concat(parts, ignore_index=True))
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        for dataset, group in table.groupby("dataset", sort=False):
            print(f"\n{dataset}")
            print(group.drop(columns="dataset").to_string(
                index=False, float_format=lambda x: f"{100 * x:.1f}%"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
