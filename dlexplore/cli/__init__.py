"""The ``dlexplore`` command line: a thin layer over the public API, one module per command group.

Each module (:mod:`~dlexplore.cli.predict`, :mod:`~dlexplore.cli.trace`, ...) has ``add_parser(sub)``,
which adds its command(s) and sets ``func`` to the function that runs it; :func:`build_parser` asks
them in the order ``dlexplore --help`` lists them. A new command is a new module and one line in
:data:`COMMANDS`.

Errors a user can cause print one line and exit with status 2; nothing prints a traceback unless
``DLEXPLORE_DEBUG=1`` is set.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence

from .._version import __version__
from ..errors import DlexploreError
from . import advise, calibrate, collect, comm, explore, listings, predict, report, trace, whatif
from .options import Parser

__all__ = ["main", "build_parser", "COMMANDS"]

#: The command modules, in the order of ``dlexplore --help``.
COMMANDS = (predict, comm, listings, advise, explore, report, calibrate, whatif, trace, collect)


def build_parser() -> Parser:
    """The argument parser of the ``dlexplore`` command."""
    parser = Parser(
        prog="dlexplore",
        description="Predict and measure the performance of distributed deep-learning training.",
    )
    parser.add_argument("--version", action="version", version=f"dlexplore {__version__}")
    parser.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="FILE",
        help="load extra catalog entries from FILE (CSV or JSON); repeatable",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 2 bad input, 1 internal error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        if args.catalog:
            from ..catalog import load_file

            for path in args.catalog:
                load_file(path)
        with warnings.catch_warnings():
            # a reader's warning (a rank taken from a file name, files skipped) is one line too
            warnings.showwarning = lambda message, *_, **__: print(
                f"dlexplore: warning: {message}", file=sys.stderr
            )
            args.func(args)
        return 0
    except DlexploreError as err:
        print(f"dlexplore: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; say nothing more.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI promises one line, never a traceback
        if os.environ.get("DLEXPLORE_DEBUG"):
            raise
        print(
            f"dlexplore: internal error: {type(err).__name__}: {err} "
            "(set DLEXPLORE_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
