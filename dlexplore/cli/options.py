"""What every command shares on its command line: the one-line usage error, value parsers that
turn an option into a list (a sweep), and the output and trace options."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence

from ..errors import DlexploreError

FORMATS = ("table", "csv", "json", "netcdf")


_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


class UsageError(DlexploreError):
    """A malformed command line."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def split_list(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if not items or any(not t for t in items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def numbers(integer: bool = False) -> Callable[[str], list]:
    # argparse prefixes ArgumentTypeError messages with "argument --option: "
    def parse(text: str) -> list:
        out = []
        for item in split_list(text):
            try:
                value = float(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got {item!r}") from None
            if integer:
                if not value.is_integer():
                    raise argparse.ArgumentTypeError(f"expected a whole number, got {item!r}")
                value = int(value)
            out.append(value)
        return out

    return parse


def split_workloads(text: str) -> list[str]:
    """Like :func:`split_list`, but a spec such as ``transformer:24,1024,16,512,50257`` keeps its
    comma-separated arguments: a number or ``key=value`` after a spec belongs to that spec."""
    out: list[str] = []
    for item in split_list(text):
        spec_argument = re.fullmatch(r"[0-9.eE+-]+|\w+=.*", item) is not None
        if out and ":" in out[-1] and spec_argument:
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def parse_bytes(text: str) -> float:
    """``"25MiB"`` -> 26214400.0; ``"1e8"`` -> 1e8; ``"inf"`` -> inf (bytes)."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+|inf)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    problem = f"expected a size in bytes such as 1e8, 64MB or 25MiB, got {text!r}"
    if not match or unit not in _BYTE_UNITS:
        raise argparse.ArgumentTypeError(problem)
    try:
        return float(match.group(1)) * _BYTE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(problem) from None


def sizes(text: str) -> list:
    return [parse_bytes(item) for item in split_list(text)]


def add_output(parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    parser.add_argument("--format", choices=formats, default="table", help="output format")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of standard output"
    )


def add_nccl_tests_choice(parser: argparse.ArgumentParser) -> None:
    """nccl-tests output run with --datatype all or --op all: which rows to read."""
    parser.add_argument("--dtype", help="nccl-tests output: the rows of this data type (float, bfloat16 ...)")
    parser.add_argument("--redop", help="nccl-tests output: the rows of this reduction operation (sum ...)")
    parser.add_argument("--root", type=int, help="nccl-tests output: the rows of this root rank")


def add_trace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-missing-ranks",
        action="store_true",
        help="read per-rank files that leave ranks of the world out (the output lists them)",
    )
