"""``dlexplore report``: the explorer's plots for one configuration as a standalone HTML page."""

from __future__ import annotations

import argparse
import sys

from .explore import add_explorer_options, explorer_args
from .options import UsageError


def run(args: argparse.Namespace) -> None:
    from .. import measured
    from ..report import write_report

    config = explorer_args(args)
    shown = config.pop("measured", None) or [None]
    if len(shown) > 1:
        raise UsageError("report overlays one measured dataset: give --measured once")
    data = measured.load(shown[0]) if shown[0] is not None else None
    from ..plots import GPU_COUNTS

    if config["gpus"] not in GPU_COUNTS:
        raise UsageError(f"--gpus must be a power of two from 1 to 1024 in the report, got {config['gpus']}")
    write_report(args.output, measured_data=data, title=args.title, **config)
    print(f"dlexplore: wrote {args.output}", file=sys.stderr)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``report`` command."""
    r = sub.add_parser(
        "report",
        help="write the explorer's plots as one standalone HTML page",
        description="Write the explorer's plots for one configuration to a "
        "standalone HTML page (BokehJS inlined: it opens without a network).",
    )
    add_explorer_options(r)
    r.add_argument("--title", help="page title")
    r.add_argument(
        "-o", "--output", required=True, metavar="FILE.html", help="the page to write (atomically)"
    )
    r.set_defaults(func=run)
