"""``dlexplore collect``: real data-parallel training on CPU, every rank traced."""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> None:
    from ..traces.collect import collect

    manifest = collect(
        args.out,
        nproc=args.nproc,
        steps=args.steps,
        model=args.model,
        batch_size=args.batch_size,
        warmup=args.warmup,
        seed=args.seed,
        port=args.port,
        overwrite=args.overwrite,
        timeout=args.timeout,
        **({"progress": None} if args.quiet else {}),
    )
    print(f"dlexplore: wrote {manifest}", file=sys.stderr)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``collect`` command."""
    g = sub.add_parser(
        "collect",
        help="run real data-parallel training on CPU and trace every rank",
        description="Run data-parallel training with torch.distributed (gloo, "
        "127.0.0.1) on CPU, profile every rank, write per-rank traces and a manifest. "
        "Needs the 'torch' extra.",
    )
    g.add_argument("--nproc", type=int, default=2, help="processes (ranks), default 2")
    g.add_argument("--steps", type=int, default=4, help="profiled training steps, default 4")
    g.add_argument("--model", default="mlp", choices=("mlp", "cnn"), help="model, default mlp")
    g.add_argument("--out", required=True, metavar="DIR", help="folder to create")
    g.add_argument("--batch-size", type=int, default=32, help="samples per rank per step, default 32")
    g.add_argument("--warmup", type=int, default=1, help="profiler warm-up steps, default 1")
    g.add_argument("--seed", type=int, default=0, help="random seed, default 0")
    g.add_argument("--port", type=int, help="rendezvous port on 127.0.0.1 (default: a free one)")
    g.add_argument("--overwrite", action="store_true", help="replace DIR once the new run succeeded")
    g.add_argument("--timeout", type=float, default=300.0, help="seconds before giving up, default 300")
    g.add_argument("--quiet", action="store_true", help="no progress lines")
    g.set_defaults(func=run)
