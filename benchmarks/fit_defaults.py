"""Fit the model's default efficiencies and overheads to the bundled published measurements.

Writes ``data/catalog/defaults.csv``, ``data/catalog/defaults_by_architecture.csv`` and
``data/catalog/gemm_fitted.csv``, the defaults every uncalibrated prediction uses, so that they are
the best the shipped data can give rather than round figures:

    python benchmarks/fit_defaults.py            # fit and write the three files
    python benchmarks/fit_defaults.py --check    # exit 1 if a committed file is not what the fit gives

Method (``dlexplore.calibrate`` on every bundled training table at once, ``measured.concat``):

- fitted jointly, by least squares on log(predicted / measured), one value for all points:
  ``memory_efficiency``, ``winograd_speedup`` (compute), ``tcp_efficiency``,
  ``ps_efficiency`` and ``negotiation_time`` (communication; only the Horovod tables inform them);
- ``kernel_time`` one value for each GPU architecture (``data/catalog/defaults_by_architecture.csv``):
  the fixed time per kernel is as much the framework's as the chip's, and the bundled runs of one
  architecture are those of one software generation (TensorFlow 1.x and Caffe2 on Pascal, 2017;
  MXNet on Volta); an architecture whose runs do not determine it takes the prior with the GPUs
  that have no bundled runs (its points are left out of the parameter's groups: ``per`` with a
  blank group) and the data-parallel tables' framework settings that differ are their columns
  (MXNet's fused batch norms, ``fusion``);
- a parameter the points do not determine (not identifiable, or a standard error above half its
  value) keeps its prior, a published figure named below, and the others are fitted again;
- the GEMM plateau (``compute_efficiency``) of each GPU and precision that bundled hybrid (LLM)
  tables measured, fitted to all their rows at once (``data/catalog/gemm_fitted.csv``), with the
  defaults fitted above and starting from the published plateau (``data/catalog/gemm.csv``), so that
  the fit depends on neither committed file; a table's missing setup columns take the hybrid
  calibration's own defaults (micro-batch 1, no sequence parallelism, ...). Other GPUs keep the
  published plateau (the training tables cannot separate it from the memory efficiency and the
  Winograd saving); the training tables are fitted with the published plateaus, and a fitted
  plateau their GPUs would take is refused (the two fits would have to be made together);
- not fitted: the links' efficiencies (NCCL's own per-link figures, ``networks.csv``), Horovod's
  cycle time (its documented default) and the flash-attention efficiency (FlashAttention-2's
  published range): the bundled tables cannot inform them.

Held out: a training table with a GPU of an architecture whose GEMM plateau the hybrid tables fit
(today the A100 tables, ``nvidia-pytorch-bert-large``) is not fitted: its defaults would have to be
fitted together with that plateau, and held out it judges the fitted defaults out of sample.

Nothing is fitted to one point, and nothing to ``../shared/reference/narayanan2021-table1.csv``
(development data the project is judged beyond). The file records, per bundled table, the MAPE the
fitted defaults give on it (in-sample: these are the defaults' own training data).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dlexplore as dlx
from dlexplore._io import atomic_open
from dlexplore.catalog.defaults import ARCHITECTURE_COLUMNS, DEFAULTS_COLUMNS
from dlexplore.catalog.gemm import FITTED_COLUMNS
from dlexplore.fit.hybrid import HYBRID_DEFAULTS  # what a table's row takes where it does not say

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "data" / "catalog" / "defaults.csv"
PLATEAUS = ROOT / "data" / "catalog" / "gemm_fitted.csv"
ARCHITECTURES = ROOT / "data" / "catalog" / "defaults_by_architecture.csv"
UNDETERMINED = 0.5  # a standard error above this share of the value: the data do not determine it


@dataclass(frozen=True)
class Prior:
    value: float
    units: str
    meaning: str
    source: str


#: Every default, with the published figure it keeps when the bundled data cannot determine it.
PRIORS: dict[str, Prior] = {
    "memory_efficiency": Prior(
        0.9,
        "1",
        "fraction of the GPU memory bandwidth that memory-bound kernels reach",
        "Calculon (Isaev et al., SC'23), systems/a100_80g.json: 0.90 of HBM bandwidth for 100 MB transfers",
    ),
    "kernel_time": Prior(
        2e-6,
        "s",
        "fixed time of one GPU kernel (launch, pipeline fill and drain)",
        "the fixed time per kernel that Calculon's A100 GEMM efficiency curve implies (0.6 of "
        "peak at 1 GFLOP, 0.95 at 128: 1e9/(0.6 x 312e12) - 1e9/(0.95 x 312e12) = 2 us)",
    ),
    "winograd_speedup": Prior(
        1.0,
        "1",
        "FLOPs of the direct method over those of Winograd's algorithm for 3x3 "
        "stride-1 convolutions on vector units",
        "no saving assumed (Lavin & Gray 2016 bound it by 2.25 for F(2x2, 3x3))",
    ),
    "flash_efficiency": Prior(
        0.6,
        "1",
        "fraction of peak a fused (flash) attention kernel reaches",
        "Dao (2023), FlashAttention-2: 50-73% of the A100's peak; the middle of that range",
    ),
    "unaligned_efficiency": Prior(
        0.406,
        "1",
        "share of its aligned rate a matrix product reaches on tensor cores with operand rows "
        "aligned to 4 or 8 bytes, not 16 (half that at 2 bytes)",
        "measured on one H200 (cuBLAS, torch 2.11, CUDA 13.0) by benchmarks/gpu_kernels.py, "
        "benchmarks/results/gpu-kernels-h200.json: the median of the 9 products of GPT-2's and "
        "BERT-Large's output layer (logits, input and weight gradient; 8,192 tokens) with rows "
        "aligned to 4 or 8 bytes over the same product with the vocabulary padded, 0.36-0.49 "
        "(the 3 with 2-byte rows: 0.16-0.21, half of it predicts 0.20)",
    ),
    "tcp_efficiency": Prior(
        0.5,
        "1",
        "fraction of a network's bandwidth collectives reach over kernel TCP",
        "no published figure; a round prior",
    ),
    "ps_efficiency": Prior(
        0.5,
        "1",
        "fraction of a link's bandwidth parameter-server transfers reach",
        "no published figure; a round prior",
    ),
    "cycle_time": Prior(
        5e-3,
        "s",
        "Horovod's cycle time (HOROVOD_CYCLE_TIME)",
        "Horovod documentation, environment variables: HOROVOD_CYCLE_TIME defaults to 5 ms",
    ),
    "negotiation_time": Prior(
        0.0, "s", "Horovod's negotiation time per tensor and tree level", "no published figure; none assumed"
    ),
    "host_bandwidth": Prior(
        20.0,
        "GB/s",
        "host memory traffic one CPU core sustains (bytes read and written)",
        "Puget Systems (2014), Memory Performance for Intel Xeon Haswell-EP DDR4: STREAM Triad on "
        "one core of a Xeon E5-2697 v3, 20 GB/s",
    ),
    "server_bandwidth": Prior(
        20.0,
        "GB/s",
        "host memory traffic of a parameter server's CPU receiving, summing and sending gradients",
        "as one core (host_bandwidth's prior): TensorFlow's server copies each tensor out of and "
        "into its gRPC messages on the thread that handles the request",
    ),
}
FITTED = (
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "tcp_efficiency",
    "ps_efficiency",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)


def held_out_tables() -> dict[str, str]:
    """Bundled training tables the defaults are not fitted to, each with the reason: those with a
    GPU whose architecture the hybrid tables' GEMM plateau serves. Their defaults would have to be
    fitted together with that plateau; held out, they judge the fitted defaults out of sample."""
    architecture = {g.name: g.architecture for g in dlx.catalog.GPUS}
    hybrid = {
        architecture[dlx.catalog.gpu(str(g)).name]
        for name in dlx.measured.available_hybrid()
        for g in np.unique(dlx.measured.load(name)["gpu"].values)
    } - {""}  # a GPU without an architecture shares nothing
    held = {}
    for name in dlx.measured.available():
        table = dlx.measured.load(name)
        if table.attrs["table"] != "training":
            continue
        gpus = {dlx.catalog.gpu(str(g)).name for g in np.unique(table["gpu"].values)}
        shared = sorted(g for g in gpus if architecture[g] in hybrid)
        if shared:
            held[name] = (
                f"{', '.join(shared)}: its architecture's GEMM plateau is fitted to the hybrid tables "
                "where they determine it, so its runs judge the defaults out of sample"
            )
    return held


def training_tables() -> list[str]:
    """The bundled training tables the defaults are fitted to (every one not held out)."""
    held = held_out_tables()
    return [
        n
        for n in dlx.measured.available()
        if dlx.measured.load(n).attrs["table"] == "training" and n not in held
    ]


#: Fitted for each GPU architecture apart, where that architecture's runs determine it: the fixed
#: time per kernel is as much the framework's (its dispatch, its unfused kernels) as the chip's, and
#: the bundled runs of one architecture are those of one software generation.
BY_ARCHITECTURE = ("kernel_time",)


@dataclass
class Fit:
    """What :func:`fit` gives: ``values`` ``{name: (value, stderr, how)}``, the in-sample MAPE of
    each table, and the rows of ``defaults_by_architecture.csv``."""

    values: dict[str, tuple[float, float, str]]
    mape: dict[str, float]
    architectures: list[dict]


def _group_column(name: str) -> str:
    return f"{name}_architecture"


def _undetermined(row: pd.Series) -> bool:
    return not bool(row["identifiable"]) or not float(row["stderr"]) <= UNDETERMINED * abs(
        float(row["value"])
    )


def fit(names: list[str]) -> Fit:
    """The defaults fitted to the tables ``names`` (module docstring)."""
    combined = dlx.measured.concat(names, name="bundled training tables")
    architecture = [dlx.catalog.gpu(str(g)).architecture for g in combined["gpu"].values]
    for name in BY_ARCHITECTURE:  # blank: the points of an architecture that keeps the prior
        combined = combined.assign_coords(
            {_group_column(name): ("point", np.array(architecture, dtype=object))}
        )
    priors = {name: prior.value for name, prior in PRIORS.items()}
    free = list(FITTED)
    held: dict[str, str] = {}
    held_groups: dict[str, list[str]] = {name: [] for name in BY_ARCHITECTURE}
    while True:
        per = {n: _group_column(n) for n in BY_ARCHITECTURE if n in free}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the priors are the held parameters' values and the fitted ones' starting points, so
            # the fit does not depend on the defaults files it rewrites
            # level=None: no prediction intervals for the points (one evaluation per parameter
            # each round), which the defaults file does not use
            cal = dlx.calibrate(combined, params=free, per=per, level=None, **priors)
        rows = cal.params
        changed = False
        for name in list(free):
            mine = rows[rows["name"] == name]
            if name in per:
                for _, row in mine[[_undetermined(r) for _, r in mine.iterrows()]].iterrows():
                    group = str(row["group"]).split("=", 1)[1]
                    held_groups[name].append(
                        f"{group} (fitted {float(row['value']):.3g} +- {float(row['stderr']):.2g})"
                    )
                    column = combined[_group_column(name)].values.copy()
                    column[column == group] = ""
                    combined = combined.assign_coords({_group_column(name): ("point", column)})
                    changed = True
                if (combined[_group_column(name)].values != "").any():
                    continue
            elif not _undetermined(mine.iloc[0]):
                continue
            row = mine.iloc[0]
            if name not in per:
                held[name] = (
                    f"not determined by the bundled tables (fitted {float(row['value']):.3g}"
                    f" +- {float(row['stderr']):.2g}): the prior"
                )
            free.remove(name)
            changed = True
        if not changed or not free:
            break
    return Fit(
        *_values(cal, free, held, held_groups, names, combined),
        _architecture_rows(cal, free, names, combined),
    )


def _values(
    cal: Any,
    free: list[str],
    held: dict[str, str],
    held_groups: dict[str, list[str]],
    names: list[str],
    combined: Any,
) -> tuple[dict[str, tuple[float, float, str]], dict[str, float]]:
    """The defaults.csv rows and the in-sample MAPE of each table."""
    rows = cal.params.set_index("name")
    fitted_points = int(cal.points["fitted"].sum())
    values: dict[str, tuple[float, float, str]] = {}
    for name, prior in PRIORS.items():
        if name in free and name not in BY_ARCHITECTURE:
            values[name] = (
                float(rows.loc[name, "value"]),
                float(rows.loc[name, "stderr"]),
                f"fitted by benchmarks/fit_defaults.py to the {len(names)} bundled "
                f"training tables ({fitted_points} points)",
            )
        elif name in BY_ARCHITECTURE:
            groups = held_groups[name]
            how = (
                "the prior, for the GPUs of an architecture without a value of its own in "
                "defaults_by_architecture.csv (fitted there where an architecture's bundled runs determine it"
            )
            how += f"; not determined for {', '.join(groups)})" if groups else ")"
            values[name] = (prior.value, math.nan, f"{how}; {prior.source}")
        else:
            values[name] = (
                prior.value,
                math.nan,
                held.get(name, "not fitted") + "; " + prior.source if name in held else prior.source,
            )
    sources = combined["source"].values
    mape = {}
    for name in names:
        table = dlx.measured.load(name)
        mask = np.isin(sources, np.unique(table["source"].values))
        errors = cal.points["error"].to_numpy(dtype=float)[mask]
        mape[name] = float(np.nanmean(np.abs(errors)))
    return values, mape


def _architecture_rows(cal: Any, free: list[str], names: list[str], combined: Any) -> list[dict]:
    """The rows of defaults_by_architecture.csv: each architecture's fitted value, with the tables
    and the number of points it was fitted to."""
    out = []
    fitted = cal.points["fitted"].to_numpy(dtype=bool)
    for _, row in cal.params[cal.params["name"].isin([n for n in BY_ARCHITECTURE if n in free])].iterrows():
        column, architecture = str(row["group"]).split("=", 1)
        members = combined[column].values.astype(str) == architecture
        sources = combined["source"].values[members]
        tables = [n for n in names if np.isin(sources, _sources(n)).any()]
        gpus = sorted({str(g) for g in combined["gpu"].values[members]})
        out.append(
            {
                "architecture": architecture,
                "parameter": str(row["name"]),
                "value": float(row["value"]),
                "stderr": float(row["stderr"]),
                "points": int((members & fitted).sum()),
                "source": f"fitted by benchmarks/fit_defaults.py with the other defaults to the bundled "
                f"runs on {', '.join(gpus)}: {', '.join(tables)}",
            }
        )
    return out


def _sources(name: str) -> np.ndarray:
    return np.unique(dlx.measured.load(name)["source"].values)


def _hybrid_rows() -> pd.DataFrame:
    """Every bundled hybrid table's rows with ``table`` (its name) and ``peak`` (the GPU's peak at
    the row's precision: fp16 and bf16 rows of one GPU are fitted together)."""
    frames = []
    for name in dlx.measured.available_hybrid():
        frame = dlx.measured.to_frame(dlx.measured.load(name)).assign(table=name)
        frame["peak"] = [
            dlx.catalog.gpu(g).peak_flops(p) for g, p in zip(frame["gpu"], frame["precision"], strict=True)
        ]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _combined_table(part: pd.DataFrame, folder: Path) -> Path:
    """The rows of several hybrid tables as one measurement CSV (what a table does not say filled
    in as the calibration assumes it; their step time, which every table here measures)."""
    columns = [c for c in part.columns if c not in ("table", "peak", "setup", "tflops_per_gpu")]
    missing = [c for c in columns if part[c].isna().any() and c not in ("source",)]
    unknown = [c for c in missing if c not in HYBRID_DEFAULTS]
    if unknown or part["step_time"].isna().any():
        raise SystemExit(
            f"fit_defaults: the hybrid tables {sorted(set(part['table']))} cannot be fitted "
            f"together: no default for {unknown or ['step_time']}"
        )
    filled = part[columns].fillna({c: HYBRID_DEFAULTS[c] for c in missing})
    for c in ("micro_batch", "virtual_stages", "zero"):
        if c in filled:
            filled[c] = filled[c].astype(int)
    path = folder / "bundled-hybrid.csv"
    path.write_text(
        "# name: bundled-hybrid\n# title: the bundled hybrid tables of one GPU together\n"
        "# source: data/measured/hybrid\n" + filled.to_csv(index=False),
        encoding="utf-8",
    )
    return path


def fit_plateaus(values: dict[str, tuple[float, float, str]]) -> list[dict]:
    """The GEMM plateau of each GPU and 16-bit peak that bundled hybrid tables measured (module
    docstring): rows of ``gemm_fitted.csv`` with the in-sample MAPE of each table."""
    rows = _hybrid_rows()
    if rows.empty:
        return []
    # (the hybrid model has no convolutions: the Winograd saving does not enter)
    compute = {n: values[n][0] for n in ("memory_efficiency", "kernel_time", "flash_efficiency")}
    out = []
    for (gpu, _), part in rows.groupby(["gpu", "peak"], sort=True):
        precision = str(part["precision"].iloc[0])
        start = dlx.catalog.gemm_efficiency(gpu, precision).value  # the published plateau
        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = dlx.measured.read_csv(_combined_table(part, Path(folder)))
            cal = dlx.calibrate(
                table, params=["compute_efficiency"], level=None, compute_efficiency=start, **compute
            )
        fitted = cal.params.set_index("name").loc["compute_efficiency"]
        value, stderr = float(fitted["value"]), float(fitted["stderr"])
        if not bool(fitted["identifiable"]) or not stderr <= UNDETERMINED * value:
            continue  # the published plateau stands
        errors = np.abs(cal.points["error"].to_numpy(dtype=float))
        tables = part["table"].to_numpy()
        counts = ", ".join(f"{t} ({int((tables == t).sum())})" for t in dict.fromkeys(tables))
        out.append(
            {
                "gpu": gpu,
                "precision": precision,
                "efficiency": value,
                "stderr": stderr,
                "points": len(part),
                "source": f"fitted by benchmarks/fit_defaults.py to the bundled hybrid tables {counts}; "
                f"the published plateau {start:.3g}",
                "mape": {t: float(np.mean(errors[tables == t])) for t in dict.fromkeys(tables)},
            }
        )
    return out


def _separate(names: list[str], plateaus: list[dict]) -> None:
    """The training tables are fitted with the published plateaus: refuse to write a fitted plateau
    that their GPUs would take (the two fits would then have to be made together)."""
    architecture = {g.name: g.architecture for g in dlx.catalog.GPUS}
    trained = {str(g) for name in names for g in np.unique(dlx.measured.load(name)["gpu"].values)}
    for p in plateaus:
        shared = sorted(g for g in trained if architecture.get(g) == architecture.get(p["gpu"]))
        if shared:
            raise SystemExit(
                f"fit_defaults: the plateau fitted for {p['gpu']} would serve the training tables' "
                f"{', '.join(shared)}, whose defaults were fitted with the published one; fit them together"
            )


def render_plateaus(plateaus: list[dict]) -> str:
    lines = [
        "# GEMM plateaus fitted to bundled training runs, by benchmarks/fit_defaults.py: do not edit.",
        "# dlexplore.calibrate of the hybrid model's compute_efficiency (the fraction of peak that",
        "# large GEMMs reach) on every bundled hybrid (LLM) table of the GPU at that precision (or one",
        "# with the same peak), jointly (least squares on log(predicted/measured));",
        "# dlexplore.catalog.gemm_plateau uses them before the published figures of gemm.csv.",
        "# MAPE of the uncalibrated model with the fitted plateau, per table (in-sample):",
        *(
            f"#   {p['gpu']} {p['precision']}, {t}: {100 * m:.1f}%"
            for p in plateaus
            for t, m in p["mape"].items()
        ),
        ",".join(FITTED_COLUMNS),
    ]
    lines += [_fitted_row(p["gpu"], p["precision"], p["efficiency"], p) for p in plateaus]
    return "\n".join(lines) + "\n"


def _fitted_row(key: str, name: str, value: float, row: dict) -> str:
    """One CSV line of a fitted value: its key, name, value, standard error, points and source."""
    cells = [key, name, f"{value:.6g}", f"{row['stderr']:.3g}", str(row["points"]), row["source"]]
    return ",".join(f'"{c}"' if "," in c else c for c in cells)


def render_architectures(rows: list[dict]) -> str:
    lines = [
        "# dlexplore model defaults fitted for one GPU architecture, by benchmarks/fit_defaults.py:",
        "# do not edit. Fitted together with defaults.csv (least squares on log(predicted/measured))",
        "# where the bundled runs of the architecture determine the parameter (standard error at most",
        f"# {UNDETERMINED:.0%} of the value); dlexplore.catalog.model_default gives a GPU of that",
        "# architecture this value instead of defaults.csv's. It describes the runs it was fitted to:",
        "# their software (framework, libraries) as much as the chip.",
        ",".join(ARCHITECTURE_COLUMNS),
    ]
    lines += [_fitted_row(r["architecture"], r["parameter"], r["value"], r) for r in rows]
    return "\n".join(lines) + "\n"


def render(
    values: dict[str, tuple[float, float, str]], mape: dict[str, float], held: dict[str, str] | None = None
) -> str:
    lines = [
        "# dlexplore model defaults, written by benchmarks/fit_defaults.py: do not edit by hand.",
        "# Fitted jointly to the bundled training tables (least squares on log(predicted/measured));",
        "# a parameter the tables do not determine keeps its published prior (see source).",
        "# MAPE of the uncalibrated model with these defaults, per table (in-sample):",
        *(f"#   {name}: {100 * value:.1f}%" for name, value in mape.items()),
        *(
            ["# Held out, not fitted (docs/accuracy.md gives their out-of-sample error):"]
            + [f"#   {name} ({reason})" for name, reason in (held or {}).items()]
            if held
            else []
        ),
        ",".join(DEFAULTS_COLUMNS),
    ]
    for name, (value, stderr, how) in values.items():
        prior = PRIORS[name]
        cells = [
            name,
            f"{value:.6g}",
            "" if not np.isfinite(stderr) else f"{stderr:.3g}",
            prior.units,
            prior.meaning,
            how,
        ]
        lines.append(",".join(f'"{c}"' if "," in c else c for c in cells))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the committed file instead of writing it"
    )
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    parser.add_argument("--plateaus", type=Path, default=PLATEAUS, help="where the fitted GEMM plateaus go")
    parser.add_argument(
        "--architectures",
        type=Path,
        default=ARCHITECTURES,
        help="where the defaults fitted for one GPU architecture go",
    )
    args = parser.parse_args(argv)
    names = training_tables()
    with dlx.catalog.published_plateaus():  # neither fit may depend on the plateaus it rewrites
        result = fit(names)
        plateaus = fit_plateaus(result.values)
    _separate(names, plateaus)
    outputs = {
        args.output: render(result.values, result.mape, held_out_tables()),
        args.plateaus: render_plateaus(plateaus),
        args.architectures: render_architectures(result.architectures),
    }
    if args.check:
        stale = [
            path
            for path, text in outputs.items()
            if (path.read_text(encoding="utf-8") if path.is_file() else "") != text
        ]
        for path in stale:
            print(f"{path} is not what the fit gives: run python benchmarks/fit_defaults.py", file=sys.stderr)
        if not stale:
            print(f"{', '.join(map(str, outputs))} are up to date")
        return 1 if stale else 0
    for path, text in outputs.items():
        with atomic_open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
