"""``dlexplore catalog`` and ``dlexplore measured``: the bundled catalogs and published measurements."""

from __future__ import annotations

import argparse

import pandas as pd

from .measured_view import show_measured
from .options import UsageError, add_nccl_tests_choice, add_output
from .output import emit_frame


def run_catalog(args: argparse.Namespace) -> None:
    from .. import catalog

    frames = {
        "gpus": catalog.gpus,
        "networks": catalog.networks,
        "workloads": catalog.workloads,
        "storage": catalog.storages,
    }
    frame = frames[args.kind]()
    if args.format == "table":
        frame = _readable_catalog(frame)
    emit_frame(frame, args, f"catalog: {args.kind}")


def _readable_catalog(frame: pd.DataFrame) -> pd.DataFrame:
    """The catalog for people: byte counts as "16 GiB", latencies in µs or ms, FLOPs in GFLOP
    (csv and json keep SI units)."""
    from ..units import format_bytes

    out = frame.copy()
    for column in list(out.columns):
        if column.endswith("_bytes") or column.endswith("_bytes_per_sample"):
            out[column] = [format_bytes(v) for v in out[column]]
            out = out.rename(columns={column: column.replace("_bytes", "")})
    if "latency_s" in out:
        scale, unit = (1e6, "µs") if out["latency_s"].max() < 1e-4 else (1e3, "ms")
        out["latency_s"] = out["latency_s"] * scale
        out = out.rename(columns={"latency_s": f"latency [{unit}]"})
    if "flops_per_sample" in out:
        out["flops_per_sample"] = out["flops_per_sample"] * 1e-9
        out = out.rename(columns={"flops_per_sample": "forward [GFLOP/sample]"})
    return out


def run_measured(args: argparse.Namespace) -> None:
    from .. import measured

    if args.action == "list":
        if args.name:
            raise UsageError("measured list takes no name")
        emit_frame(measured.describe(), args, "published measurements")
        return
    if not args.name:
        raise UsageError("measured show needs a dataset NAME (see: dlexplore measured list)")
    ds = measured.load(args.name, by=args.by, dtype=args.dtype, redop=args.redop, root=args.root)
    show_measured(ds, args, f"measured: {ds.attrs.get('title', args.name)}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``catalog`` and ``measured`` commands."""
    k = sub.add_parser("catalog", help="list GPUs, networks, workloads or storage tiers")
    k.add_argument("kind", choices=("gpus", "networks", "workloads", "storage"))
    add_output(k, ("table", "csv", "json"))
    k.set_defaults(func=run_catalog)

    m = sub.add_parser("measured", help="list or show published measurements")
    m.add_argument("action", choices=("list", "show"))
    m.add_argument("name", nargs="?", help="dataset name (for show) or a CSV file")
    m.add_argument(
        "--by",
        choices=("bytes", "point"),
        default="bytes",
        help="nccl-tests output: one row per size (repeats averaged) or per result row",
    )
    add_nccl_tests_choice(m)
    add_output(m)
    m.set_defaults(func=run_measured)
