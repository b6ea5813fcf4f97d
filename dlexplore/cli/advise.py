"""``dlexplore advise``: the hybrid-parallel configurations that fit, ranked by throughput."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ..model.strategy import advise, pareto_configurations


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``advise`` command."""
    a = sub.add_parser(
        "advise",
        help="rank dp x tp x pp, micro-batch, recompute and ZeRO "
        "configurations that fit, by predicted throughput",
        description="Enumerate hybrid-parallel configurations of a workload on N GPUs, "
        "drop those that do not fit in memory, rank the rest by predicted throughput, "
        "with energy per step and the time-energy Pareto front.",
    )
    add_arguments(a)
    a.set_defaults(func=run_cli)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``dlexplore advise`` options to ``parser``."""
    parser.add_argument("--workload", required=True, help="workload id, e.g. gpt2-xl")
    parser.add_argument("--gpus", type=int, required=True, help="total GPUs")
    parser.add_argument("--gpu", required=True, help="GPU id, e.g. A100-80GB")
    parser.add_argument("--network", default="IB-HDR", help="network between nodes (default IB-HDR)")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="global batch per step, samples (default 8 per GPU)"
    )
    parser.add_argument("--seq", type=int, default=None, help="sequence length, tokens")
    parser.add_argument("--precision", default="bf16", help="fp32, tf32, fp16 or bf16 (default)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--intra-link", default="NVLink3", help="link inside a node (default NVLink3)")
    parser.add_argument("--top", type=int, default=10, help="rows to show (default 10; 0 = all)")
    parser.add_argument("--pareto", action="store_true", help="show only the step-time / energy Pareto front")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")


def run_cli(args: argparse.Namespace, out: TextIO | None = None) -> None:
    """Run ``dlexplore advise`` with parsed ``args`` (see :func:`add_arguments`), writing to
    ``out`` (default stdout)."""
    out = sys.stdout if out is None else out
    batch = args.batch_size if args.batch_size is not None else 8 * args.gpus
    frame = advise(
        args.workload,
        args.gpus,
        args.gpu,
        args.network,
        batch_size=batch,
        seq=args.seq,
        precision=args.precision,
        gpus_per_node=args.gpus_per_node,
        intra_link=args.intra_link,
    )
    shown = pareto_configurations(frame) if args.pareto else frame
    if args.top:
        shown = shown.head(args.top)
    if args.format == "csv":
        out.write(shown.to_csv(index=False))
    elif args.format == "json":
        json.dump(
            {
                "attrs": {k: v for k, v in frame.attrs.items()},
                "rows": json.loads(shown.to_json(orient="records")),
            },
            out,
            indent=1,
        )
        out.write("\n")
    else:
        a = frame.attrs
        out.write(
            f"# {a['workload']} on {a['gpus']} x {a['gpu']}, global batch {a['batch_size']}: "
            f"{a['evaluated']} configurations evaluated, {a['dropped']} dropped (do not fit "
            f"in memory); {a['source']}\n"
        )
        table = shown.copy()
        table["mem_total"] = table["mem_total"] / 2**30
        table = table.rename(
            columns={
                "mem_total": "mem_total [GiB]",
                "step_time": "step_time [s]",
                "throughput": "throughput [samples/s]",
                "energy_per_step": "energy_per_step [J]",
            }
        )
        table = table.drop(
            columns=[
                "mem_capacity",
                "tokens_per_s",
                "time_compute",
                "time_tp_comm",
                "time_pp_comm",
                "time_dp_comm_exposed",
            ]
        )
        out.write(table.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n")
