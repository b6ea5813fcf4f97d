"""The column header of an nccl-tests result table, and how a result row splits into its cells.

Every version prints the leading columns (``size count type redop root``, fewer in older ones and
in mscclpp-test), then one group of columns per placement (out-of-place, in-place), each starting
with the time. What a group holds depends on the version and the options:

* ``time algbw busbw #wrong``: nccl-tests 2.x (``error`` in place of ``#wrong`` before 2.0);
* ``cputime`` in place of ``time`` with ``-C 1`` (the host's wall time per iteration, not the
  GPU's events; PCCL's fork prints ``cpu_time``);
* then ``#bitdiff`` with nccl-tests' bitwise repeatability check, and ``i_min i_max i_p99 i_cv%``
  (the per-iteration times' minimum, maximum, 99th percentile in us and coefficient of variation
  in %) with its per-iteration report (``-I 1``, nccl-tests 2.19).

After the groups come columns of the whole row: ``timestamp`` (nccl-tests' ``-S``-style report of
when a row was printed, two tokens ``2025-01-02 12:34:56``) and rccl-tests' ``algo proto
nchannels`` (the algorithm, protocol and channels RCCL chose for the size). Such a column is kept
as text under its own name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputFileError

__all__ = ["Layout", "layout_of", "split_row", "by_position", "fill_blanks", "PLACEMENTS"]

PLACEMENTS = ("out-of-place", "in-place")

LEADING = ("size", "count", "type", "redop", "root")
#: How a group's time column is headed: nccl-tests, nccl-tests -C 1, PCCL.
TIME_HEADERS = ("time", "cputime", "cpu_time")
#: The check column: 2.x's count of wrong elements, older versions' largest error.
CHECKS = ("#wrong", "error")
#: What a group may hold after its check column, in the order nccl-tests prints it.
GROUP_EXTRAS = ("#bitdiff", "i_min", "i_max", "i_p99", "i_cv%")
#: Row columns printed as two tokens ("2025-01-02 12:34:56").
TWO_TOKENS = frozenset({"timestamp"})
_TRAILING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ALIGN_SLACK = 2  # characters a value may end off its header's end (a wider number, a wider header)


@dataclass(frozen=True)
class Layout:
    """A table's columns: ``leading``; ``group`` (one placement's, its first named ``time``
    whatever the header called it: ``time_header`` says) ``n_groups`` times; ``trailing``."""

    leading: tuple[str, ...]
    group: tuple[str, ...]
    n_groups: int
    trailing: tuple[str, ...] = ()
    time_header: str = "time"

    @property
    def columns(self) -> tuple[str, ...]:
        return self.leading + self.group * self.n_groups + self.trailing

    @property
    def check(self) -> str:
        return self.group[3]

    def cell(self, group: int, name: str) -> int:
        """Where a group's column is in a row's cells."""
        return len(self.leading) + group * len(self.group) + self.group.index(name)


def layout_of(path: Path, tokens: list[str], number: int) -> Layout:
    """The layout of a column header line's ``tokens`` (without the leading ``#``)."""
    starts = [i for i, t in enumerate(tokens) if t in TIME_HEADERS]
    if not starts:
        raise InputFileError(
            path,
            f"column header without a time column ('time', or 'cputime' with -C 1): {' '.join(tokens)!r}",
            line=number,
        )
    leading = tuple(tokens[: starts[0]])
    problems = [name for name in leading if name not in LEADING]
    # mscclpp-test (MSCCL++'s nccl-tests) prints no type column
    if problems or (leading[:3] != ("size", "count", "type") and leading != ("size", "count")):
        raise InputFileError(
            path,
            f"unexpected leading columns {leading}; expected size, count, type and optionally "
            "redop, root (or size, count alone, as mscclpp-test prints them)",
            line=number,
        )
    groups = [tokens[a:b] for a, b in zip(starts, [*starts[1:], len(tokens)], strict=True)]
    first = _group(groups[0])
    last = _group(groups[-1])
    trailing = tuple(groups[-1][len(last) :]) if last is not None else ()
    sound = (
        len(groups) in (1, 2)
        and first is not None
        and last == first
        and all(tuple(g) == first for g in groups[:-1])
        and len({g[0] for g in groups}) == 1
        and all(_TRAILING_NAME.match(n) and n not in LEADING + GROUP_EXTRAS for n in trailing)
    )
    if not sound:
        raise InputFileError(
            path,
            f"unexpected measurement columns {' '.join(tokens[starts[0] :])!r}; expected "
            "'time algbw busbw #wrong' (or '... error'), optionally followed by '#bitdiff' and "
            "'i_min i_max i_p99 i_cv%', once or twice, then columns of the row (timestamp, "
            "rccl-tests' algo proto nchannels)",
            line=number,
        )
    group = ("time", *first[1:])
    return Layout(leading, group, len(groups), trailing, time_header=groups[0][0])


def _group(tokens: list[str]) -> tuple[str, ...] | None:
    """The longest start of ``tokens`` that is a placement's group (its extras in nccl-tests'
    order, each once), or None."""
    if len(tokens) < 4 or tuple(tokens[1:3]) != ("algbw", "busbw") or tokens[3] not in CHECKS:
        return None
    group, last = list(tokens[:4]), -1
    for name in tokens[4:]:
        if name not in GROUP_EXTRAS or GROUP_EXTRAS.index(name) <= last:
            break
        last = GROUP_EXTRAS.index(name)
        group.append(name)
    return tuple(group)


def split_row(fields: list[str], layout: Layout) -> list[str]:
    """A row's tokens as one cell per column: a timestamp's date and time joined."""
    columns = layout.columns
    if not TWO_TOKENS & set(layout.trailing) or len(fields) != len(columns) + 1:
        return fields
    at = columns.index(next(c for c in layout.trailing if c in TWO_TOKENS))
    return [*fields[:at], f"{fields[at]} {fields[at + 1]}", *fields[at + 2 :]]


def fill_blanks(fields: list[str], columns: tuple[str, ...]) -> list[str]:
    """A row with ``redop`` (then ``root``) left blank, as all-to-all prints it, with "" there."""
    missing = len(columns) - len(fields)
    blanks = [columns.index(c) for c in ("redop", "root") if c in columns][:missing]
    if missing <= 0 or len(blanks) < missing:
        return fields
    filled = list(fields)
    for position in blanks:
        filled.insert(position, "")
    return filled


def by_position(line: str, edges: list[int], layout: Layout) -> list[str] | None:
    """A row of mscclpp-test, which leaves the placement it did not run blank, read by where each
    value ends: under its column's header (both are right-aligned). None unless every value ends
    under a header of its own and each placement's cells are all there or all blank (a row cut
    short is no such row)."""
    if len(edges) != len(layout.columns):
        return None
    cells = [""] * len(edges)
    for match in re.finditer(r"\S+", line.expandtabs()):
        column = min(range(len(edges)), key=lambda j: abs(edges[j] - match.end()))
        if abs(edges[column] - match.end()) > _ALIGN_SLACK or cells[column]:
            return None
        cells[column] = match.group()
    first, width = len(layout.leading), len(layout.group)
    groups = [cells[first + g * width : first + (g + 1) * width] for g in range(layout.n_groups)]
    whole = [all(g[:3]) for g in groups]  # time, algbw, busbw; mscclpp-test -c 0 leaves #wrong blank
    blank = [not any(g) for g in groups]
    if not all(cells[:first]) or not any(whole) or not all(w or b for w, b in zip(whole, blank, strict=True)):
        return None
    return cells
