"""``dlexplore calibrate``: model parameters fitted to measured points, every point predicted."""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from .options import add_output, parse_bytes, split_list
from .output import write_text


def run(args: argparse.Namespace) -> None:
    import warnings

    from ..fit import CalibrationWarning, calibrate

    options: dict[str, object] = {}
    for name in ("intra_link", "network", "gpus_per_node", "servers", "bucket_size", "batch_size"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    source = args.source if not os.path.exists(args.source) else os.path.abspath(args.source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CalibrationWarning)
        cal = calibrate(
            source,
            fit_on=args.fit_on,
            params=split_list(args.params) if args.params else None,
            per=tuple(split_list(args.per)) if args.per else None,
            **options,
        )
    for warning in caught:
        if issubclass(warning.category, CalibrationWarning):
            print(f"dlexplore: warning: {warning.message}", file=sys.stderr)
    if args.format == "json":
        text = cal.to_json() + "\n"
    elif args.format == "csv":
        lines = [
            f"# param: {row.name}"
            + (f" [{row.group}]" if isinstance(row.group, str) and row.group else "")
            + f" = {row.value:.6g} +- {row.stderr:.3g} {row.units}"
            for row in cal.params.itertuples()
        ]
        text = "\n".join(lines) + "\n" + cal.points.to_csv(index=False, lineterminator="\n")
    else:
        with pd.option_context("display.max_columns", None, "display.width", 250):
            body = cal.points.to_string(index=False, float_format=lambda v: f"{v:.4g}")
            text = f"{cal!r}\n\n{body}\n"
    write_text(text, args.output)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``calibrate`` command."""
    k = sub.add_parser(
        "calibrate",
        help="fit model parameters to measured points, predict the rest",
        description="Fit model parameters (compute efficiency, bandwidth, latency, ...) "
        "to the points --fit-on selects, with standard errors, and print one row per "
        "measured point: measured, predicted, error ((predicted - measured) / measured). "
        "SOURCE is a bundled dataset name, a measurement CSV, nccl-tests output, or a "
        "trace file or folder.",
    )
    k.add_argument("source", metavar="FILE_OR_NAME")
    k.add_argument(
        "--fit-on",
        help="which points to fit, e.g. 'gpus<=8' or 'gpus == 1 and precision == fp32' (default: all)",
    )
    k.add_argument("--params", help="parameters to fit, e.g. compute_efficiency,bandwidth,latency")
    k.add_argument("--per", help="one value per group, e.g. workload,precision")
    k.add_argument("--network", help="network id for points that do not name one")
    k.add_argument("--intra-link", help="intra-node link id")
    k.add_argument("--gpus-per-node", type=int, help="GPUs per node where the points do not say")
    k.add_argument("--servers", type=int, help="parameter servers")
    k.add_argument("--bucket-size", type=parse_bytes, help="gradient bucket size, e.g. 25MiB")
    k.add_argument("--batch-size", type=int, help="samples per rank per step (traces)")
    add_output(k, ("table", "csv", "json"))
    k.set_defaults(func=run)
