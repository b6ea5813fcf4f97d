"""``dlexplore comm``: one collective's time, algbw and busbw in the alpha-beta-gamma model."""

from __future__ import annotations

import argparse

from .options import add_output, numbers, sizes
from .output import dataset_to_frame, emit


def run(args: argparse.Namespace) -> None:
    from ..model import predict_comm

    kwargs = dict(
        nbytes=args.bytes,
        gpus=args.gpus,
        bandwidth=args.bandwidth,
        latency=args.latency,
        gamma=args.gamma,
        servers=args.servers,
        gpus_per_node=args.gpus_per_node,
    )
    if args.intra_bandwidth is not None:
        kwargs["intra_bandwidth"] = args.intra_bandwidth
    if args.intra_latency is not None:
        kwargs["intra_latency"] = args.intra_latency
    ds = predict_comm(args.collective, args.algorithm, **kwargs)
    frame = dataset_to_frame(ds, ("time", "algbw", "busbw"))
    title = f"predicted {ds.collective.item()} ({ds.algorithm.item()}), alpha-beta model"
    emit(ds, frame, args, title)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``comm`` command."""
    c = sub.add_parser(
        "comm",
        help="predict one collective's time, algbw and busbw",
        description="Alpha-beta-gamma cost of a collective; bandwidth in GB/s "
        "(1e9 bytes/s); algbw and busbw as nccl-tests defines them.",
    )
    c.add_argument(
        "--collective",
        default="allreduce",
        help="allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall",
    )
    c.add_argument("--algorithm", default=None, help="algorithm (default: the collective's first)")
    c.add_argument("--bytes", type=sizes, required=True, help="message size(s), bytes")
    c.add_argument("--gpus", type=numbers(integer=True), required=True, help="ranks")
    c.add_argument("--bandwidth", type=numbers(), required=True, help="GB/s")
    c.add_argument("--latency", type=numbers(), required=True, help="s")
    c.add_argument("--gamma", type=numbers(), default=0.0, help="s/byte (default 0)")
    c.add_argument("--servers", type=numbers(integer=True), default=1, help="parameter servers")
    c.add_argument(
        "--gpus-per-node", type=numbers(integer=True), default=8, help="GPUs per node (hierarchical)"
    )
    c.add_argument("--intra-bandwidth", type=numbers(), help="GB/s")
    c.add_argument("--intra-latency", type=numbers(), help="s")
    add_output(c)
    c.set_defaults(func=run)
