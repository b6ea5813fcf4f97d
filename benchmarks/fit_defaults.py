"""Fit the model's default efficiencies and overheads to the bundled published measurements.

Writes ``data/catalog/defaults.csv``, the defaults every uncalibrated prediction uses, so that they
are the best the shipped data can give rather than round figures:

    python benchmarks/fit_defaults.py            # fit and write data/catalog/defaults.csv
    python benchmarks/fit_defaults.py --check    # exit 1 if the committed file is not what the fit gives

Method (``dlexplore.calibrate`` on every bundled training table at once, ``measured.concat``):

- fitted jointly, one value for all points, by least squares on log(predicted / measured):
  ``memory_efficiency``, ``kernel_time``, ``winograd_speedup`` (compute), ``tcp_efficiency``,
  ``ps_efficiency`` and ``negotiation_time`` (communication; only the Horovod tables inform them);
- a parameter the points do not determine (not identifiable, or a standard error above half its
  value) keeps its prior, a published figure named below, and the others are fitted again;
- not fitted: the GEMM plateau of each GPU (``compute_efficiency``: published GEMM measurements,
  ``data/catalog/gemm.csv``), the links' efficiencies (NCCL's own per-link figures,
  ``networks.csv``), Horovod's cycle time (its documented default) and the flash-attention
  efficiency (FlashAttention-2's published range): the bundled tables cannot inform them.

Nothing is fitted to one point, and nothing to ``../shared/reference/narayanan2021-table1.csv``
(development data the project is judged beyond). The file records, per bundled table, the MAPE the
fitted defaults give on it (in-sample: these are the defaults' own training data).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import dlexplore as dlx
from dlexplore._io import atomic_open
from dlexplore.catalog.defaults import DEFAULTS_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "data" / "catalog" / "defaults.csv"
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


def training_tables() -> list[str]:
    return [n for n in dlx.measured.available() if dlx.measured.load(n).attrs["table"] == "training"]


def fit(names: list[str]) -> tuple[dict[str, tuple[float, float, str]], dict[str, float]]:
    """Fitted values ``{name: (value, stderr, how)}`` and the in-sample MAPE of each table."""
    combined = dlx.measured.concat(names, name="bundled training tables")
    priors = {name: prior.value for name, prior in PRIORS.items()}
    free = list(FITTED)
    held: dict[str, str] = {}
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the priors are the held parameters' values and the fitted ones' starting points, so
            # the fit does not depend on the defaults file it rewrites
            # level=None: no prediction intervals for the points (one evaluation per parameter
            # each round), which the defaults file does not use
            cal = dlx.calibrate(combined, params=free, level=None, **priors)
        rows = cal.params.set_index("name")
        undetermined = [
            n
            for n in free
            if not bool(rows.loc[n, "identifiable"])
            or not float(rows.loc[n, "stderr"]) <= UNDETERMINED * abs(float(rows.loc[n, "value"]))
        ]
        if not undetermined:
            break
        for name in undetermined:
            stderr = float(rows.loc[name, "stderr"])
            held[name] = (
                f"not determined by the bundled tables (fitted {float(rows.loc[name, 'value']):.3g}"
                f" +- {stderr:.2g}): the prior"
            )
            free.remove(name)
        if not free:
            break
    values: dict[str, tuple[float, float, str]] = {}
    for name, prior in PRIORS.items():
        if name in free:
            values[name] = (
                float(rows.loc[name, "value"]),
                float(rows.loc[name, "stderr"]),
                f"fitted by benchmarks/fit_defaults.py to the {len(names)} bundled "
                f"training tables ({int(cal.points['fitted'].sum())} points)",
            )
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


def render(values: dict[str, tuple[float, float, str]], mape: dict[str, float]) -> str:
    lines = [
        "# dlexplore model defaults, written by benchmarks/fit_defaults.py: do not edit by hand.",
        "# Fitted jointly to every bundled training table (least squares on log(predicted/measured));",
        "# a parameter the tables do not determine keeps its published prior (see source).",
        "# MAPE of the uncalibrated model with these defaults, per table (in-sample):",
        *(f"#   {name}: {100 * value:.1f}%" for name, value in mape.items()),
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
    args = parser.parse_args(argv)
    values, mape = fit(training_tables())
    text = render(values, mape)
    if args.check:
        old = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if old != text:
            print(
                f"{args.output} is not what the fit gives: run python benchmarks/fit_defaults.py",
                file=sys.stderr,
            )
            return 1
        print(f"{args.output} is up to date")
        return 0
    with atomic_open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
