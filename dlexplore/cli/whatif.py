"""``dlexplore whatif``: a measured trace replayed with other bandwidth, latency, compute or GPUs."""

from __future__ import annotations

import argparse

from .options import add_output, add_trace_options
from .output import write_text
from .trace import load_trace_from_args


def run(args: argparse.Namespace) -> None:
    from ..sim import whatif_report

    trace = load_trace_from_args(args)
    write_text(
        whatif_report(
            trace,
            bandwidth=args.bandwidth,
            latency=args.latency,
            compute=args.compute,
            gpus=args.gpus,
            batch_size=args.batch_size,
            fmt=args.format,
            per_step=args.per_step,
        ),
        args.output,
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``whatif`` command."""
    w = sub.add_parser(
        "whatif",
        help="replay a measured trace with other bandwidth, latency, compute speed or GPUs",
        description="Replay the dependency graph of a measured trace with changed "
        "parameters. Factors: x2 = twice, x0.5 = half; comma lists sweep, every "
        "combination is a scenario; the first row replays the trace as measured.",
    )
    w.add_argument("paths", nargs="+", metavar="TRACE", help="trace file, folder or glob")
    w.add_argument("--trace-format", help="skip format detection: pytorch, horovod, nsys, otf2")
    add_trace_options(w)
    w.add_argument("--bandwidth", default="x1", help="network bandwidth factor(s): x2, or x1,x2,x4")
    w.add_argument("--latency", default="x1", help="network latency factor(s): x0.5")
    w.add_argument("--compute", default="x1", help="compute speed factor(s): x1.5")
    w.add_argument(
        "--gpus", help="ranks: 64, or 8,16,64 (default: as measured; extra ranks copy measured ones)"
    )
    w.add_argument(
        "--batch-size",
        type=int,
        help="samples per rank per step, for throughput (default: from the collector's manifest.json)",
    )
    w.add_argument("--per-step", action="store_true", help="one row per scenario and step")
    add_output(w, ("table", "csv", "json"))
    w.set_defaults(func=run)
