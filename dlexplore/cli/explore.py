"""``dlexplore explore``: the interactive explorer served by Voila, and the explorer options the
``report`` command shares."""

from __future__ import annotations

import argparse
import os

from ..errors import DlexploreError
from .options import UsageError


def add_explorer_options(parser: argparse.ArgumentParser, *, trace: bool = False) -> None:
    if trace:
        parser.add_argument(
            "--trace",
            action="append",
            default=[],
            metavar="PATH",
            help="your own run as the measured point: a trace file, a folder of per-rank files or a "
            "glob; repeat for runs of one job at other GPU counts. The controls start at what the "
            "trace says (GPUs, workload, batch, GPU, precision); options given win",
        )
    by_trace = " or the trace's" if trace else ""
    parser.add_argument("--workload", help=f"workload id (default{by_trace} resnet50)")
    parser.add_argument("--gpu", help=f"GPU id (default{by_trace} V100-16GB)")
    parser.add_argument("--gpus", type=int, help=f"GPUs selected at start (default{by_trace} 8)")
    parser.add_argument("--algorithm", help=f"allreduce algorithm (default{by_trace} ring)")
    unset = "; default: the matching measurement's setup, else {}"
    parser.add_argument("--network", help="network id" + unset.format("25GbE"))
    parser.add_argument("--batch-size", type=int, help="batch per GPU" + unset.format(64))
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node" + unset.format(1))
    parser.add_argument("--intra-link", help="intra-node link" + unset.format("PCIe3"))
    parser.add_argument(
        "--precision", help="fp32, tf32, fp16, bf16 (those the GPU has)" + unset.format("fp32")
    )
    parser.add_argument(
        "--measured",
        action="append",
        default=[],
        metavar="NAME_OR_CSV",
        help="measured dataset to overlay (bundled name or CSV file); repeatable; "
        "default: the bundled one of this workload and GPU",
    )
    parser.add_argument("--no-measured", action="store_true", help="overlay no measurement")


def explorer_args(args: argparse.Namespace) -> dict[str, object]:
    """The Explorer's starting configuration from the options given (the explorer fills the rest
    from the matching measurement), checked here with the explorer's own rules so that a typo is
    one line on the terminal rather than an error page in the browser."""
    from .. import catalog, measured, validation
    from ..model.comm import normalize_algorithm
    from ..model.compute import normalize_precision

    traces = [os.path.abspath(t) for t in getattr(args, "trace", None) or []]
    if not traces:  # a trace says what it can of these; without one, the explorer's defaults
        args.workload = args.workload or "resnet50"
        args.gpu = args.gpu or "V100-16GB"
        args.algorithm = args.algorithm or "ring"
        args.gpus = 8 if args.gpus is None else args.gpus
    config: dict[str, object] = {"trace": traces} if traces else {}
    if args.workload is not None:
        config["workload"] = (
            catalog.workload(args.workload).name if ":" not in args.workload else args.workload
        )
    if args.gpu is not None:
        config["gpu"] = catalog.gpu(args.gpu).name
    if args.algorithm is not None:
        config["algorithm"] = normalize_algorithm(args.algorithm)
    if args.gpus is not None:
        config["gpus"] = validation.count("--gpus", args.gpus, maximum=1024)
    if traces:
        from ..fit.trace_setup import load_traces

        load_traces(traces if len(traces) > 1 else traces[0])  # a bad trace: one line here, not a page
    if args.workload is not None and ":" in args.workload:
        catalog.workload(args.workload)
    if args.network is not None:
        config["network"] = catalog.network(args.network).name
    if args.intra_link is not None:
        config["intra_link"] = catalog.network(args.intra_link).name
    if args.precision is not None:
        config["precision"] = validation.precision_for(
            catalog.gpu(args.gpu or "V100-16GB"), normalize_precision(args.precision)
        )
    if args.batch_size is not None:
        config["batch_size"] = validation.count("--batch-size", args.batch_size, maximum=1024)
    if args.gpus_per_node is not None:
        config["gpus_per_node"] = validation.count("--gpus-per-node", args.gpus_per_node, maximum=16)
    names = []
    for item in args.measured:
        path = os.path.abspath(item)
        ds = measured.load(path if os.path.exists(path) else item)
        if "throughput" not in ds:
            raise UsageError(
                f"--measured {item}: the dataset has no throughput to overlay "
                f"(it has {', '.join(sorted(ds.data_vars))})"
            )
        names.append(path if os.path.exists(path) else item)
    if names and args.no_measured:
        raise UsageError("give --measured or --no-measured, not both")
    if names:
        config["measured"] = names
    elif args.no_measured:
        config["measured"] = None
    return config


def run(args: argparse.Namespace) -> None:
    from ..serve import serve_explorer

    status = serve_explorer(
        explorer_args(args),
        port=args.port,
        open_browser=not args.no_browser,
        catalogs=args.catalog,
        pool_size=args.pool_size,
        cull_idle=args.cull_idle,
    )
    if status not in (0, -2, 130):
        raise DlexploreError(f"the Voila server stopped with status {status} (see its messages above)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``explore`` command."""
    e = sub.add_parser(
        "explore",
        help="serve the interactive explorer (Voila) on 127.0.0.1",
        description="Serve the explorer as a Voila dashboard on 127.0.0.1 with the "
        "bundled data; options set its starting configuration. Needs the 'explore' "
        "extra. The same explorer runs in JupyterLab: "
        "from dlexplore.widgets import Explorer; Explorer().",
    )
    e.add_argument("--port", type=int, default=8866, help="port (default 8866)")
    e.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    e.add_argument(
        "--pool-size",
        type=int,
        default=1,
        metavar="N",
        help="explorer kernels kept started and run ahead, so a page opens in about a "
        "second (default 1; about 200 MB each; 0 starts one per page)",
    )
    e.add_argument(
        "--cull-idle",
        type=int,
        default=900,
        metavar="SECONDS",
        help="stop a page's kernel after this long without activity (default 900); a "
        "closed page's kernel stops at once. A page draws its plots without talking to its "
        "kernel, so keep this well above the seconds a page takes to draw on a busy server",
    )
    add_explorer_options(e, trace=True)
    e.set_defaults(func=run)
