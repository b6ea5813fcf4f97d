"""Fidelity benchmark: dlexplore against published measurements, with the peers and an empirical fit.

On the same rows of each measured table, side by side:

- **dlexplore uncalibrated**: the catalog and the defaults of ``data/catalog/defaults.csv``;
- **dlexplore calibrated**: fitted with ``dlexplore.calibrate`` on the smallest configurations that
  exercise each part of the model (data-parallel tables: the points at the smallest
  ``min(3, counts - 1)`` GPU counts, and the smallest configuration of each link and setup those
  leave unused, :func:`fit_mask`; one GPU count: the ring row; the GEMM plateau per workload, GPU
  and precision and the links first, then what each network setup adds, a parameter the points do
  not determine keeping its default, :func:`calibrate_in_stages`; hybrid-parallel tables: the
  smallest ``min(3, rows - 1)`` configurations, ``dlexplore.fit.smallest``, and the GEMM plateau),
  with its 90% prediction interval, whose coverage of the held-out rows is reported;
- **Extra-P** (``dlexplore.fit.extrap.fit_scaling``): an empirical scaling model per series of the
  fitted points, where a series has three GPU counts to fit;
- **llm-analysis 0.2.2** on the hybrid-parallel (LLM) rows: with its documentation's
  ``flops_efficiency`` for Megatron-LM (0.5), and with ``flops_efficiency`` fitted on the same rows
  as dlexplore's calibration (least squares on log step time).

One MAPE table per dataset. The hybrid tables: Narayanan et al. 2021, Table 1
(``../shared/reference/narayanan2021-table1.csv``, read as it is; development data: nothing is fitted
to it but the calibrated rows' own fit; its micro-batch and pipeline schedule are not in the table,
so the model's defaults apply, 1 and 1F1B; the paper's prose mentions the interleaved schedule,
shown as a variant with two chunks per GPU), and the bundled ``data/measured/hybrid`` tables
(Korthikanti et al. 2022, Smith et al. 2022). The memory part compares GPT-3 175B's activation
bytes with Korthikanti et al.'s formulas per recomputation mode and schedule, and the model states'
bytes per parameter with Megatron Core's table, for dlexplore and llm-analysis.

Install the peer and run::

    pip install -e '.[fidelity]'          # llm-analysis==0.2.2 (and transformers; no torch)
    python benchmarks/fidelity.py         # every table and the peers; prints tables
    python benchmarks/fidelity.py --external-only   # only the LLM rows and the peers

Results for rows outside the repository (the Narayanan table) and for the peers are written to
``benchmarks/results/fidelity-external.csv`` and ``fidelity-memory.csv``, which
``docs/make_accuracy.py`` reads, so that ``docs/accuracy.md`` can be regenerated (and checked)
without the peer or ``../shared``.
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
from dlexplore._io import atomic_open
from dlexplore.errors import DlexploreError
from dlexplore.fit.extrap import fit_scaling
from dlexplore.model.parallel import model_state_bytes

ROOT = Path(__file__).resolve().parents[1]
NARAYANAN = ROOT.parent / "shared" / "reference" / "narayanan2021-table1.csv"
EXTERNAL = ROOT / "benchmarks" / "results" / "fidelity-external.csv"
METHODS = (
    "dlexplore uncalibrated",
    "dlexplore calibrated",
    "Extra-P",
    "llm-analysis (0.5)",
    "llm-analysis calibrated",
)
LLM_MICRO_BATCH = 1
#: The nominal coverage of dlexplore's prediction intervals here (dlexplore.fit.band).
BAND_LEVEL = 0.9


# --- the smallest configurations --------------------------------------------------------------------


def fit_mask(frame: pd.DataFrame) -> np.ndarray:
    """The points a calibration fits on: the smallest configurations that exercise each part of the
    model, the rest held out.

    - The points at the smallest ``min(3, counts - 1)`` GPU counts (with one GPU count: the ring
      rows; nccl-tests: fit on NCCL_ALGO=RING, predict NVLink SHARP).
    - A link and setup those points do not exercise (the network, when only the largest GPU
      count spans nodes; each setup of it: a framework, transport or parameter server) is
      exercised by its own smallest configuration: the smallest GPU count that uses it, and there
      the smallest message (bytes for collectives, the model's gradient bytes for training), which
      is fitted too where another configuration with that link and setup is left to predict.
    """
    counts = np.unique(frame["gpus"].to_numpy())
    if len(counts) == 1:
        return (frame["algorithm"].astype(str) == "ring").to_numpy()
    gpus = frame["gpus"].to_numpy()
    fit = np.isin(gpus, counts[: min(3, len(counts) - 1)])
    classes = _exercised(frame)
    size = _size(frame)
    for label in dict.fromkeys(classes[~fit]):
        if not label or label in set(classes[fit]):
            continue
        rows = np.flatnonzero(classes == label)
        configurations = {(gpus[i], size[i]) for i in rows}
        if len(configurations) < 2:
            continue  # nothing would be left to predict
        smallest = rows[gpus[rows] == gpus[rows].min()]
        fit[smallest[size[smallest] == size[smallest].min()]] = True
    return fit


def _exercised(frame: pd.DataFrame) -> np.ndarray:
    """The link and setup each point exercises: '' for one GPU, else 'intra' (one node) or
    'network', with the point's setup label (its algorithm where the table has no setup)."""
    gpus = frame["gpus"].to_numpy()
    per_node = frame["gpus_per_node"].to_numpy() if "gpus_per_node" in frame else np.ones(len(frame))
    setup = (frame["setup"] if "setup" in frame else frame["algorithm"]).astype(str).to_numpy()
    link = np.where(gpus <= 1, "", np.where(gpus <= per_node, "intra", "network"))
    return np.array([f"{a}|{b}" if a else "" for a, b in zip(link, setup, strict=True)], dtype=object)


def _size(frame: pd.DataFrame) -> np.ndarray:
    """Bytes each point communicates per GPU, for ordering configurations: a collective's message,
    or the workload's gradients (2 bytes per parameter in 16-bit precision, else 4; zero where
    neither is known)."""
    if "bytes" in frame:
        return frame["bytes"].to_numpy(dtype=float)
    if "workload" not in frame:
        return np.zeros(len(frame))
    precision = (
        frame["precision"].astype(str) if "precision" in frame else pd.Series("fp32", index=frame.index)
    )
    out = []
    for name, prec in zip(frame["workload"].astype(str), precision, strict=True):
        try:
            params = float(dlx.catalog.workload(name).params)
        except DlexploreError:
            params = 0.0
        out.append(params * (2.0 if prec.strip().lower() in ("fp16", "bf16") else 4.0))
    return np.array(out)


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
        for _, members in group.groupby(extra, sort=False) if extra else [((), group)]:
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


def _calibration_params(frame: pd.DataFrame, fit: np.ndarray, table: str) -> tuple:
    """The parameters the fitted points determine: the GEMM plateau (training tables); the
    bandwidth of each link a collective benchmark's fitted points use, and its latency where they
    hold two message sizes or more; for training runs inside a node the intra-node link likewise;
    across nodes, what each setup adds to the catalog's network: Horovod's negotiation, kernel
    TCP's efficiency, the host CPU of an allreduce in host memory, a parameter server's CPU, and
    the network's bandwidth only for a plain allreduce with none of these."""
    rows = frame[fit]
    gpus = rows["gpus"].to_numpy()
    per_node = rows["gpus_per_node"].to_numpy() if "gpus_per_node" in rows else np.ones(len(rows))
    size = _size(rows)
    params: list[str] = ["compute_efficiency"] if table == "training" else []
    intra = (gpus > 1) & (gpus <= per_node)
    spans = gpus > per_node
    for used, bandwidth, latency in (
        (intra, "intra_bandwidth", "intra_latency"),
        (spans, "bandwidth", "latency"),
    ):
        if not used.any():
            continue
        if table == "communication" or bandwidth == "intra_bandwidth":
            params.append(bandwidth)
            if len(np.unique(size[used])) > 1:
                params.append(latency)
            continue
        far = rows[spans]

        def said(column: str, value: str, far: pd.DataFrame = far) -> np.ndarray:
            if column not in far:
                return np.zeros(len(far), bool)
            return (far[column].astype(str).str.strip().str.lower() == value).to_numpy()

        server = said("algorithm", "parameter_server")
        staged = said("host_staging", "yes") & ~server
        tcp = said("transport", "tcp") & ~server & ~staged
        horovod = said("framework", "horovod")
        if (~server & ~staged & ~tcp & ~horovod).any():
            params.append(bandwidth)
        if horovod.any():
            params.append("negotiation_time")
        if tcp.any():
            params.append("tcp_efficiency")
        if staged.any():
            params.append("host_bandwidth")
        if server.any():
            params.append("server_bandwidth")
    return tuple(params)


#: A fitted parameter whose standard error exceeds this share of its value is not determined by the
#: fitted points (benchmarks/fit_defaults.py's rule for the defaults).
UNDETERMINED = 0.5


def calibrate_determined(ds, fit: np.ndarray, params: tuple, per: dict, **model_kwargs):
    """``dlexplore.calibrate`` on the ``fit`` points, where a parameter the points do not determine
    (standard error above :data:`UNDETERMINED` of its value, or infinite) keeps its default and the
    others are fitted again; the GEMM plateau is always fitted (one GPU's points determine it), and
    a parameter fitted exactly (as many points as parameters: no standard error) is kept. None when
    no parameter is left."""
    while params:
        calibration = dlx.calibrate(ds, fit_on=fit, params=params, per=per, **model_kwargs)
        loose = {
            str(r.name)
            for r in calibration.params.itertuples()
            if r.name != "compute_efficiency"
            and bool(r.identifiable)
            and float(r.stderr) > UNDETERMINED * abs(float(r.value))
        }
        if not loose:
            return calibration
        params = tuple(p for p in params if p not in loose)
        per = {k: v for k, v in per.items() if k in params}
    return None


def _per(params: tuple, frame: pd.DataFrame, table: str) -> dict:
    """The GEMM plateau per workload, GPU and precision; a link's figures per network (a table's
    rows may span several: PCIe inside the node, InfiniBand between nodes)."""
    per = {"compute_efficiency": ("workload", "gpu", "precision")} if table == "training" else {}
    per.update({p: ("network",) for p in ("bandwidth", "latency") if p in params and "network" in frame})
    return {k: v for k, v in per.items() if k in params}


def calibrate_in_stages(ds, frame: pd.DataFrame, fit: np.ndarray, table: str):
    """The calibration of a bundled table on the ``fit`` points (:func:`fit_mask`), each parameter
    from the smallest configurations that exercise it. A training table in two stages: first what
    the smallest GPU counts determine (the GEMM plateau, the links they use), then, holding those,
    what the smallest configurations of the rest add (the network and the overheads of its setups;
    :func:`_calibration_params`), so that the compute fitted on one GPU is not traded against the
    network. A collective benchmark in one (its links are separate parameters on separate points).
    Each stage keeps the default of a parameter its points do not determine
    (:func:`calibrate_determined`)."""
    counts = np.unique(frame["gpus"].to_numpy())
    base = fit & np.isin(frame["gpus"].to_numpy(), counts[: max(1, min(3, len(counts) - 1))])
    # a collective benchmark's links are separate parameters on separate points: one stage
    if table != "training" or len(counts) == 1 or not (fit & ~base).any():
        params = _calibration_params(frame, fit, table)
        only = calibrate_determined(ds, fit, params, _per(params, frame, table))
        return only if only is not None else dlx.calibrate(ds, fit_on=fit, params=params)
    first_params = _calibration_params(frame, base, table)
    first = calibrate_determined(ds, base, first_params, _per(first_params, frame, table))
    if first is None:
        first = dlx.calibrate(ds, fit_on=base, params=first_params)
    held = {}
    if "compute_efficiency" in first_params:
        plateau = [
            first.fitted(workload=w, gpu=g, precision=p).get("compute_efficiency", math.nan)
            for w, g, p in zip(frame["workload"], frame["gpu"], frame["precision"], strict=True)
        ]
        ds = ds.assign_coords(compute_efficiency=("point", np.asarray(plateau, dtype=float)))
    for name in ("intra_bandwidth", "intra_latency"):
        if name in first_params:
            held[name] = first.fitted().get(name)
    held = {k: v for k, v in held.items() if v is not None}
    params = tuple(p for p in _calibration_params(frame, fit & ~base, table) if p not in first_params)
    if not params:
        return first
    second = calibrate_determined(ds, fit, params, _per(params, frame, table), **held)
    return second if second is not None else first


def bundled(name: str) -> pd.DataFrame:
    """Every method's prediction at every point of a bundled table (long format)."""
    ds = dlx.measured.load(name)
    table = ds.attrs["table"]
    frame = dlx.measured.to_frame(ds)
    variable = next(
        v
        for v in (("throughput", "efficiency") if table == "training" else ("time", "busbw", "algbw"))
        if v in frame and frame[v].notna().any()
    )
    y = frame[variable].to_numpy(dtype=float)
    fit = fit_mask(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uncal = dlx.predict_points(ds)[variable].values
        calibration = calibrate_in_stages(ds, frame, fit, table)
        cal = calibration.points["predicted"].to_numpy(float)
        band = (
            calibration.points[["lower", "upper"]].to_numpy(float)
            if "lower" in calibration.points
            else np.full((len(frame), 2), np.nan)
        )
    labels = [
        c
        for c in ("workload", "collective", "gpu", "precision", "batch_size", "bytes", "algorithm", "setup")
        if c in frame
    ]
    out = []
    for method, pred, fitted in (
        (METHODS[0], uncal, np.zeros(len(frame), bool)),
        (METHODS[1], cal, fit),
        (METHODS[2], _extrap(frame, y, fit), fit),
    ):
        part = frame[labels + ["gpus"]].copy()
        part.insert(0, "dataset", name)
        part["row"] = np.arange(len(frame))
        part["variable"] = variable
        part["measured"] = y
        part["method"] = method
        part["predicted"] = pred
        part["fitted"] = fitted
        part["lower"] = band[:, 0] if method == METHODS[1] else np.nan
        part["upper"] = band[:, 1] if method == METHODS[1] else np.nan
        out.append(part)
    return pd.concat(out, ignore_index=True)


# --- hybrid-parallel tables (LLM runs) -------------------------------------------------------------

#: Variants shown beside the methods on one table only (not in the summary's columns).
EXTRA_METHODS = ("dlexplore calibrated, interleaved v=2",)
_HYBRID_LABELS = (
    "model",
    "gpu",
    "precision",
    "tp",
    "pp",
    "dp",
    "micro_batch",
    "global_batch",
    "recompute",
    "sequence_parallel",
)


def hybrid_fit_count(n: int) -> int:
    """How many of a hybrid table's ``n`` rows the calibrations fit: the smallest min(3, n - 1)."""
    return max(1, min(3, n - 1))


def _with_interleaving(ds, virtual: int = 2):
    """``ds`` with the interleaved schedule at ``virtual`` chunks per GPU on every row that can run it
    (pp > 1, the stage's layers divisible by it), 1F1B elsewhere: Narayanan et al.'s prose says the
    interleaved schedule was used but not with how many chunks."""
    frame = dlx.measured.to_frame(ds)
    ok = (frame["pp"] > 1) & ((frame["layers"] // frame["pp"]) % virtual == 0)
    out = ds.assign_coords(
        schedule=("point", np.where(ok, "interleaved", "1f1b").astype(object)),
        virtual_stages=("point", np.where(ok, virtual, 1)),
    )
    return out


def _step_to_variable(
    variable: str, step: np.ndarray, ref_value: np.ndarray, ref_step: np.ndarray
) -> np.ndarray:
    """A step time as the row's measured quantity: the quantity itself for step_time, else a rate
    (samples, tokens or FLOPs over the step), which the reference pair converts."""
    return step if variable == "step_time" else ref_value * ref_step / step


def _llm_analysis_step(row: pd.Series, efficiency: float) -> float:
    """llm-analysis 0.2.2's iteration time (s) of a hybrid table's row."""
    import llm_analysis.analysis as la
    from llm_analysis.config import (
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    la.logger.setLevel(logging.ERROR)
    model = ModelConfig(
        name=str(row.model),
        num_layers=int(row.layers),
        n_head=int(row.heads),
        hidden_dim=int(row.hidden),
        vocab_size=int(row.vocab),
        max_seq_len=int(row.seq),
    )
    sp = str(getattr(row, "sequence_parallel", "no")) == "yes"
    analysis = la.LLMAnalysis(
        model,
        get_gpu_config_by_name("a100-sxm-80gb"),
        get_dtype_config_by_name("w16a16e16"),
        ParallelismConfig(
            tp_size=int(row.tp), pp_size=int(row.pp), dp_size=int(row.dp), sp_size=int(row.tp) if sp else 1
        ),
        flops_efficiency=efficiency,
        hbm_memory_efficiency=1.0,
    )
    recompute = {
        "full": la.ActivationRecomputation.FULL,
        "selective": la.ActivationRecomputation.SELECTIVE,
    }.get(str(row.recompute), la.ActivationRecomputation.NONE)
    micro = int(getattr(row, "micro_batch", LLM_MICRO_BATCH) or LLM_MICRO_BATCH)
    out = analysis.training(
        batch_size_per_gpu=micro,
        global_batch_size=int(row.global_batch),
        seq_len=int(row.seq),
        activation_recomputation=recompute,
        flash_attn=False,
    )
    return float(out["latency_per_iter"])


def _fit_efficiency(step, rows: pd.DataFrame, target_step: np.ndarray) -> float:
    """The efficiency (0, 1] whose step times of ``rows`` have the least squared log error."""
    from scipy.optimize import minimize_scalar

    def cost(e: float) -> float:
        pred = np.array([step(row, e) for _, row in rows.iterrows()])
        return float(np.sum(np.log(pred / target_step) ** 2))

    return float(minimize_scalar(cost, bounds=(0.05, 1.0), method="bounded", options={"xatol": 1e-5}).x)


def hybrid(source, name: str, *, dlexplore: bool = True, peers: bool = False) -> pd.DataFrame:
    """Every method's prediction at every row of a hybrid table (long format, with the band of the
    calibrated dlexplore), fitting the smallest configurations (:func:`hybrid_fit_count`)."""
    ds = dlx.measured.load(source) if not hasattr(source, "attrs") else source
    frame = dlx.measured.to_frame(ds).reset_index(drop=True)
    k = hybrid_fit_count(len(frame))
    fit = dlx.fit.smallest(k)(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = dlx.calibrate(ds, fit_on=dlx.fit.smallest(k))
    variable = cal.points["variable"].to_numpy()
    y = cal.points["measured"].to_numpy(dtype=float)
    methods: dict[str, tuple] = {}
    if dlexplore:
        uncal = dlx.predict_points(ds)
        methods[METHODS[0]] = (
            np.array([float(uncal[v].values[i]) for i, v in enumerate(variable)]),
            np.zeros(len(frame), bool),
            None,
        )
        methods[METHODS[1]] = (
            cal.points["predicted"].to_numpy(float),
            fit,
            cal.points[["lower", "upper"]].to_numpy(float),
        )
        methods[METHODS[2]] = (_extrap(frame.assign(workload=frame.get("model", "")), y, fit), fit, None)
        if name == "narayanan2021-table1":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inter = dlx.calibrate(_with_interleaving(ds), fit_on=dlx.fit.smallest(k))
            methods[EXTRA_METHODS[0]] = (
                inter.points["predicted"].to_numpy(float),
                fit,
                inter.points[["lower", "upper"]].to_numpy(float),
            )
    if peers:
        uncal = dlx.predict_points(ds)
        ref_step = uncal["step_time"].values
        ref_value = np.array([float(uncal[v].values[i]) for i, v in enumerate(variable)])
        measured_step = np.array(
            [_step_to_variable(v, y[i], ref_value[i], ref_step[i]) for i, v in enumerate(variable)]
        )  # a rate is inverted back
        for method, e in (
            (METHODS[3], 0.5),
            (METHODS[4], _fit_efficiency(_llm_analysis_step, frame[fit], measured_step[fit])),
        ):
            steps = np.array([_llm_analysis_step(row, e) for _, row in frame.iterrows()])
            pred = np.array(
                [_step_to_variable(v, steps[i], ref_value[i], ref_step[i]) for i, v in enumerate(variable)]
            )
            methods[method] = (pred, fit if method == METHODS[4] else np.zeros(len(frame), bool), None)
    out = []
    labels = [c for c in _HYBRID_LABELS if c in frame]
    for method, (pred, fitted, band) in methods.items():
        part = frame[labels + ["gpus"]].copy().rename(columns={"model": "workload"})
        part.insert(0, "dataset", name)
        part["row"] = np.arange(len(frame))
        part["variable"] = variable
        part["measured"] = y
        part["method"] = method
        part["predicted"] = pred
        part["fitted"] = fitted
        part["lower"] = band[:, 0] if band is not None else np.nan
        part["upper"] = band[:, 1] if band is not None else np.nan
        out.append(part)
    return pd.concat(out, ignore_index=True)


def compute_hybrid(peers: bool = False, dlexplore: bool = True) -> pd.DataFrame:
    """The bundled hybrid tables (data/measured/hybrid)."""
    return pd.concat(
        [hybrid(name, name, dlexplore=dlexplore, peers=peers) for name in dlx.measured.available_hybrid()],
        ignore_index=True,
    )


# --- memory: Megatron's model states, Korthikanti's activations -------------------------------------

MEMORY = ROOT / "benchmarks" / "results" / "fidelity-memory.csv"
#: Megatron Core's Distributed Optimizer guide: bytes per parameter (non-distributed; distributed as
#: fixed + sharded / d) for (parameter dtype, gradient dtype), and dlexplore's convention for it.
MEGATRON_STATES = (
    ("fp16 parameters, fp16 gradients", "fp16", "megatron", 20, 4, 16),
    ("bf16 parameters, fp32 gradients", "bf16", "megatron", 18, 6, 12),
    ("fp16 parameters, fp32 gradients", "fp16", "megatron-fp32-grads", 18, 6, 12),
    ("fp32 parameters, fp32 gradients", "fp32", "megatron", 16, 8, 8),
)
#: GPT-3 175B as Korthikanti et al.'s Table 3 runs it: t = 8, p = 8, one sequence per micro-batch,
#: 64 micro-batches per step.
GPT3 = dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200, tp=8, pp=8, global_batch=64)


def korthikanti_activations(recompute: str, sp: bool, schedule: str, virtual: int) -> float:
    """Korthikanti et al.'s activation bytes of the first stage, GPT-3 175B: the layers (Table 2 per
    layer; L layers with 1F1B, L (1 + (p-1)/(pv)) interleaved, m L / p with GPipe) and the input
    embedding's dropout mask, sbh per micro-batch held (sbhp/t with 1F1B and sequence parallelism,
    section 4.3)."""
    s, h, a, L, t, p = (GPT3[k] for k in ("seq", "hidden", "heads", "layers", "tp", "pp"))
    sbh = s * h
    if recompute == "full":
        layer = 2 * sbh / (t if sp else 1)
    else:
        scores = 5 * a * s / h if recompute == "none" else 0
        layer = sbh / t * (34 + scores) if sp else sbh * (10 + 24 / t + scores / t)
    m = GPT3["global_batch"]
    layers = {"1f1b": L, "interleaved": L * (1 + (p - 1) / (p * virtual)), "gpipe": m * L / p}
    held = {"1f1b": p, "interleaved": (virtual * p + p - 1) / virtual, "gpipe": m}
    return layer * layers[schedule] + sbh / (t if sp else 1) * held[schedule]


def _llm_analysis_memory(recompute: str, sp: bool) -> dict[str, float]:
    import llm_analysis.analysis as la
    from llm_analysis.config import (
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    la.logger.setLevel(logging.ERROR)
    g = GPT3
    model = ModelConfig(
        name="gpt3-175b",
        num_layers=g["layers"],
        n_head=g["heads"],
        hidden_dim=g["hidden"],
        vocab_size=g["vocab"],
        max_seq_len=g["seq"],
    )
    analysis = la.LLMAnalysis(
        model,
        get_gpu_config_by_name("a100-sxm-80gb"),
        get_dtype_config_by_name("w16a16e16"),
        ParallelismConfig(tp_size=g["tp"], pp_size=g["pp"], dp_size=1, sp_size=g["tp"] if sp else 1),
        flops_efficiency=0.5,
        hbm_memory_efficiency=1.0,
    )
    mode = {
        "full": la.ActivationRecomputation.FULL,
        "selective": la.ActivationRecomputation.SELECTIVE,
        "none": la.ActivationRecomputation.NONE,
    }[recompute]
    out = analysis.training(
        batch_size_per_gpu=1,
        global_batch_size=g["global_batch"],
        seq_len=g["seq"],
        activation_recomputation=mode,
        flash_attn=False,
    )
    params = out["weight_memory_per_gpu"] / 2  # 16-bit weights
    return {
        "activations": out["activation_memory_per_gpu"],
        "states_per_param": out["(weight+op_state+grad)_memory_per_gpu"] / params,
    }


def memory_table(peers: bool) -> pd.DataFrame:
    """Activation bytes of GPT-3 175B's first stage for every recomputation mode, with and without
    sequence parallelism, per schedule: Korthikanti et al.'s formulas, dlexplore (and llm-analysis,
    which has the 1F1B schedule only); and the bytes per parameter of the model states."""
    wl = dlx.catalog.transformer(
        GPT3["layers"],
        GPT3["hidden"],
        GPT3["heads"],
        GPT3["seq"],
        GPT3["vocab"],
        causal=True,
        name="gpt3-175b",
    )
    rows = []
    for schedule, virtual in (("1f1b", 1), ("interleaved", 3), ("gpipe", 1)):
        for recompute in ("none", "selective", "full"):
            for sp in (False, True):
                ds = dlx.predict_parallel(
                    wl,
                    "A100-80GB",
                    gpus=64,
                    tp=8,
                    pp=8,
                    batch_size=GPT3["global_batch"],
                    recompute=recompute,
                    sequence_parallel=sp,
                    schedule=schedule,
                    virtual_stages=virtual,
                    operators=False,
                )
                peer = _llm_analysis_memory(recompute, sp) if peers and schedule == "1f1b" else {}
                rows.append(
                    {
                        "kind": "activations",
                        "schedule": schedule,
                        "virtual_stages": virtual,
                        "recompute": recompute,
                        "sequence_parallel": sp,
                        "reference": korthikanti_activations(recompute, sp, schedule, virtual),
                        "dlexplore": float(ds["mem_activations_first"]),
                        "llm-analysis": peer.get("activations", math.nan),
                    }
                )
    for label, precision, convention, plain, fixed, sharded in MEGATRON_STATES:
        for zero, d in ((0, 1), (1, 8)):
            states = model_state_bytes(1.0, d, zero, precision=precision, convention=convention)
            peer = _llm_analysis_memory("full", False) if peers and precision == "bf16" and not zero else {}
            rows.append(
                {
                    "kind": "states",
                    "schedule": label,
                    "virtual_stages": d,
                    "recompute": convention,
                    "sequence_parallel": bool(zero),
                    "reference": plain if not zero else fixed + sharded / d,
                    "dlexplore": float(states["params"] + states["grads"] + states["optimizer"]),
                    "llm-analysis": peer.get("states_per_param", math.nan),
                }
            )
    return pd.DataFrame(rows)


# --- summaries ---------------------------------------------------------------------------------------


def summary(points: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset and method: MAPE and the largest |error| on the held-out rows (those the
    calibration did not fit; the same rows for every method) and on all rows, and how many
    held-out rows the method's prediction interval covers (``band_coverage``, where it has one:
    dlexplore calibrated, nominal :data:`BAND_LEVEL`)."""
    points = points.assign(error=(points["predicted"] - points["measured"]) / points["measured"])
    held = points.groupby(["dataset", "row"])["fitted"].transform("max") == 0
    rows = []
    for (dataset, method), group in points.groupby(["dataset", "method"], sort=False):
        out = group[held[group.index]]
        err_out = np.abs(out["error"].to_numpy(dtype=float))
        err_all = np.abs(group["error"].to_numpy(dtype=float))
        band = (
            out[["lower", "upper"]].to_numpy(dtype=float)
            if "lower" in out
            else np.full((len(out), 2), np.nan)
        )
        banded = np.isfinite(band).all(axis=1)
        inside = (out["measured"].to_numpy(dtype=float) >= band[:, 0]) & (
            out["measured"].to_numpy(dtype=float) <= band[:, 1]
        )
        rows.append(
            {
                "dataset": dataset,
                "method": method,
                "band_points": int(banded.sum()),
                "band_coverage": float(inside[banded].mean()) if banded.any() else math.nan,
                "held_out": int(np.isfinite(err_out).sum()),
                "of": len(out),
                "mape_held_out": float(np.nanmean(err_out)) if np.isfinite(err_out).any() else math.nan,
                "max_held_out": float(np.nanmax(err_out)) if np.isfinite(err_out).any() else math.nan,
                "all": int(np.isfinite(err_all).sum()),
                "mape_all": float(np.nanmean(err_all)) if np.isfinite(err_all).any() else math.nan,
            }
        )
    return pd.DataFrame(rows)


def compute_bundled() -> pd.DataFrame:
    return pd.concat([bundled(name) for name in dlx.measured.available()], ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--narayanan", type=Path, default=NARAYANAN, help="the LLM table (CSV)")
    parser.add_argument(
        "--external-only", action="store_true", help="only the LLM rows and the peers (written to --external)"
    )
    parser.add_argument(
        "--external", type=Path, default=EXTERNAL, help="where the LLM rows' and peers' results go"
    )
    args = parser.parse_args(argv)
    try:
        import llm_analysis  # noqa: F401

        peers = True
    except ImportError:
        peers = False
        print(
            "llm-analysis is not installed (pip install -e '.[fidelity]'): no peer columns", file=sys.stderr
        )
    parts = [] if args.external_only else [compute_bundled(), compute_hybrid()]
    if args.narayanan.is_file():
        external = hybrid(dlx.measured.load(args.narayanan), "narayanan2021-table1", peers=peers)
        if peers:
            external = pd.concat([external, compute_hybrid(peers=True, dlexplore=False)], ignore_index=True)
        args.external.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(args.external, "w", encoding="utf-8") as handle:
            external.to_csv(handle, index=False, float_format="%.6g")
        parts.append(external)
    else:
        print(f"{args.narayanan}: not found, the LLM rows are left out", file=sys.stderr)
    memory = memory_table(peers)
    if peers:
        with atomic_open(MEMORY, "w", encoding="utf-8") as handle:
            memory.to_csv(handle, index=False, float_format="%.8g")
    table = summary(pd.concat(parts, ignore_index=True))
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        for dataset, group in table.groupby("dataset", sort=False):
            print(f"\n{dataset}")
            print(
                group.drop(columns="dataset").to_string(index=False, float_format=lambda x: f"{100 * x:.1f}%")
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
