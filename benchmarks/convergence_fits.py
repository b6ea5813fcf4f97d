"""The catalog's McCandlish parameters, fitted to published steps to a target.

For each workload whose steps to a target are published at several global batch sizes (MLPerf's
reference convergence points, ``data/measured/convergence/mlperf-rcp-*.csv``), fit
``S(B) = S_min (1 + B_noise / B)`` with :func:`dlexplore.fit.fit_published_convergence` (least
squares on log steps, one point per batch: the mean of its runs), print the fit with its standard
errors and the model's error at every batch, and the ``data/catalog/convergence.csv`` row it
gives. ``--write`` puts those rows into the catalog (a temporary file, then a rename); ``--check``
exits 1 when the catalog's rows differ from the fit (what the tests check too).

    python benchmarks/convergence_fits.py            # the fits and the rows
    python benchmarks/convergence_fits.py --write    # update data/catalog/convergence.csv
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import dlexplore as dlx
from dlexplore.fit import fit_published_convergence

CATALOG = Path(__file__).resolve().parents[1] / "data" / "catalog" / "convergence.csv"


@dataclass(frozen=True)
class Published:
    workload: str
    dataset: str
    target: str
    samples_per_epoch: str
    rule: str
    source: str
    notes: str


FITS = (
    Published(
        "resnet50",
        "mlperf-rcp-resnet50",
        "75.90% ImageNet top-1 validation accuracy (the MLPerf Training v1.0 quality target)",
        "1281167",
        "lars",
        "S_min and B_noise fitted by benchmarks/convergence_fits.py "
        "(dlexplore.fit.fit_published_convergence) to the mean epochs to 75.90% at each of the "
        "{batches} batch sizes ({low:,}-{high:,}) of MLPerf's reference convergence points ({runs} runs, "
        "mlcommons/logging rcp_checker/training_4.0.0/rcps_resnet.json; "
        "data/measured/convergence/mlperf-rcp-resnet50.csv); 1,281,167 ILSVRC2012 training images "
        "(Russakovsky et al. 2015)",
        "Model vs the published mean steps: {err_low:+.1%} to {err_high:+.1%} over the batch sizes "
        "(the teams tuned each batch on its own, which the law does not know). Standard errors from the "
        "fit's residuals. max_batch is the largest batch measured; LARS (You et al. 2017). Goyal et al. "
        "2017's 90-epoch recipe with the linear rule (no loss up to 8192) is the row resnet50-goyal2017. "
        "McCandlish et al. 2018 (Table 1) give B_crit ~15,000 images averaged over an ImageNet run "
        "to a training-loss goal: another goal and optimizer, same order of magnitude.",
    ),
    Published(
        "bert-large",
        "mlperf-rcp-bert",
        "0.720 masked-LM accuracy from the MLPerf checkpoint (the MLPerf Training v1.0 quality target)",
        "",
        "lamb",
        "S_min and B_noise fitted by benchmarks/convergence_fits.py "
        "(dlexplore.fit.fit_published_convergence) to the mean training samples to 0.720 at each of "
        "the {batches} batch sizes ({low:,}-{high:,}) of MLPerf's reference convergence points ({runs} "
        "runs, mlcommons/logging rcp_checker/training_5.0.0/rcps_bert.json; "
        "data/measured/convergence/mlperf-rcp-bert.csv)",
        "Model vs the published mean steps: {err_low:+.1%} to {err_high:+.1%} over the batch sizes "
        "(each batch tuned on its own). Steps count from MLPerf's fixed checkpoint (bs64k_32k_ckpt) on "
        "512-token sequences, not from scratch: the budget of full pre-training is the row "
        "bert-large-lamb2019. Standard errors from the fit's residuals; max_batch is the largest batch "
        "measured (LAMB, You et al. 2019).",
    ),
)

FIELDS = (
    "name",
    "target",
    "samples_per_epoch",
    "s_min",
    "b_noise",
    "s_min_stderr",
    "b_noise_stderr",
    "epochs_budget",
    "samples_budget",
    "max_batch",
    "rule",
    "source",
    "notes",
)


def _g(value: float) -> str:
    """Four significant figures, without an exponent (47070, not 4.707e+04)."""
    text = f"{float(f'{value:.4g}'):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def fit_row(spec: Published) -> tuple[dict[str, str], object]:
    """The catalog row of ``spec`` and the per-batch table of its fit."""
    published = dlx.measured.load(spec.dataset)
    fit, table = fit_published_convergence(published, workload=spec.workload)
    batches = table["global_batch"]
    words = {
        "batches": len(table),
        "low": int(batches.min()),
        "high": int(batches.max()),
        "runs": int(table["runs"].sum()),
        "err_low": float(table["error"].min()),
        "err_high": float(table["error"].max()),
    }
    row = {
        "name": spec.workload,
        "target": spec.target,
        "samples_per_epoch": spec.samples_per_epoch,
        "s_min": _g(fit.s_min),
        "b_noise": _g(fit.b_noise),
        "s_min_stderr": _g(fit.s_min_stderr),
        "b_noise_stderr": _g(fit.b_noise_stderr),
        "epochs_budget": "",
        "samples_budget": "",
        "max_batch": str(int(batches.max())),
        "rule": spec.rule,
        "source": spec.source.format(**words),
        "notes": spec.notes.format(**words),
    }
    return row, table


def _line(row: dict[str, str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([row[f] for f in FIELDS])
    return out.getvalue()


def _replace_rows(text: str, rows: dict[str, str]) -> str:
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        name = line.split(",", 1)[0]
        if not line.startswith("#") and name in rows:
            lines[i] = rows[name]
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the rows into the catalog")
    parser.add_argument("--check", action="store_true", help="exit 1 if the catalog differs from the fits")
    args = parser.parse_args(argv)
    rows = {}
    for spec in FITS:
        row, table = fit_row(spec)
        rows[spec.workload] = _line(row)
        print(
            f"{spec.workload}: S_min = {row['s_min']} +- {row['s_min_stderr']} steps, "
            f"B_noise = {row['b_noise']} +- {row['b_noise_stderr']} samples ({spec.dataset})"
        )
        print(table.to_string(index=False, float_format=lambda v: f"{v:,.4g}"))
        print(rows[spec.workload])
    text = CATALOG.read_text(encoding="utf-8")
    updated = _replace_rows(text, rows)
    if args.check and updated != text:
        print(f"{CATALOG} differs from the fits: run with --write", file=sys.stderr)
        return 1
    if args.write and updated != text:
        fd, tmp = tempfile.mkstemp(dir=CATALOG.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(updated)
        os.replace(tmp, CATALOG)
        print(f"wrote {CATALOG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
