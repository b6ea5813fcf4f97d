"""The columns a Kineto trace decodes to, and the reference (standard library) way to build them.

:mod:`.kineto_decode` fills :class:`ChunkColumns` from msgspec structs when msgspec is installed;
:func:`python_chunk` here fills them from the standard library's parsed events and is the
reference: it decides every error and every value, and the fast path must give the same columns
(``tests/test_kineto_decode.py`` compares them column by column on real and synthetic traces).

Conventions (one entry per event of ``traceEvents``, in file order):

* strings (``ph``, ``cat``, ``name``, and ``pid``/``tid`` that are not integers) are int32 codes
  into the file's label lists; a missing or ``null`` string is ``""``, a number is its ``str``;
* ``ts``, ``dur``: float64 µs as written, NaN where absent or ``null``;
* ``pid``, ``tid``: int64 where the event has a 64-bit integer, else :data:`NO_INT` and the value's
  label in ``pid_label``/``tid_label`` (codes into the labels ``pid``/``tid``; -1 where it is an
  integer);
* ``correlation``, ``external_id`` (``External id``, or 2021's ``external id``): int64, -1 where
  absent; any other value than a 64-bit integer is an error naming the event;
* ``bytes`` (copies' ``args.bytes``): float64, NaN where absent or not a finite number;
* ``comm``: for events whose name is a communication call (:data:`COMM_NAME`: NCCL/RCCL kernels,
  ``record_param_comms``, ``nccl:*``, ``c10d::*``, ``gloo:*``), their arguments among
  :data:`COMM_ARGS` as parsed (row -> dict);
* ``memory``: for ``[memory]`` instant events, :data:`MEMORY_ARGS` as float64 (NaN where absent;
  addresses below 2**53 are exact); a value that is not a finite number is an error naming the event;
* ``meta_args``: for metadata (``"ph": "M"``) events, their ``name``, ``labels``, ``sort_index`` args.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ChunkColumns",
    "Labels",
    "python_chunk",
    "COMM_NAME",
    "COMM_ARGS",
    "MEMORY_ARGS",
    "META_ARGS",
    "NO_INT",
    "INT_COLUMNS",
]

NO_INT = -(2**63)
#: Names of events whose arguments describe communication (the readers' rule, HTA's for kernels).
COMM_NAME = re.compile(
    r"^(?:nccl.*Kernel|rccl.*Kernel|record_param_comms$|nccl:|c10d::|c10d_functional::|"
    r"_c10d_functional::|gloo:)"
)
COMM_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "Src Rank",
    "Dst Rank",
    "Rank",
    "Input Dims",
    "Input type",
)
MEMORY_ARGS = ("Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr")
META_ARGS = ("name", "labels", "sort_index")
#: int64 columns: (column, args key or None for a top-level key, strict)
INT_COLUMNS = (("correlation", "correlation", True), ("external_id", "External id", True))


class Labels:
    """Strings to int32 codes, for one file."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: str) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code

    def encode_strings(self, values: list[str]) -> np.ndarray:
        """Codes of ``values`` (all str); new strings get codes in order of first appearance."""
        codes = self.codes
        for value in dict.fromkeys(values):
            if value not in codes:
                self.code(value)
        return np.fromiter(map(codes.__getitem__, values), np.int32, len(values))


@dataclass
class ChunkColumns:
    """The columns of a run of events (see the module docstring)."""

    ph: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    pid_label: np.ndarray
    tid_label: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    ints: dict[str, np.ndarray]
    bytes: np.ndarray
    comm: dict[int, dict[str, Any]] = field(default_factory=dict)
    memory_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    meta_args: dict[int, dict[str, Any]] = field(default_factory=dict)
    comm_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Each row's index in ``traceEvents`` when only some phases are kept (:mod:`.kineto_structs`);
    #: None when every event has its row (the row is the index, less the chunk's first).
    index: np.ndarray | None = None


class _Fail(Exception):
    """An event that cannot be read: its index in the chunk and the message."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index, self.message = index, message


def _show(value: Any) -> str:
    """A value as the message shows it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Check:
    """What to do with a value that cannot be read: raise (strict, ``found`` None), or note
    ``(event index, field, value)`` in ``found`` and go on with a neutral value (lenient: the
    readers decide which problems are errors for the events they keep)."""

    def __init__(self, first: int, found: list[tuple[int, str, Any]] | None):
        self.first, self.found = first, found

    def __call__(self, index: int, field: str, value: Any, message: str) -> None:
        if self.found is None:
            raise _Fail(index, message)
        self.found.append((self.first + index, field, value))

    def note(self, index: int, field: str, value: Any) -> None:
        """A value that is no error here but that a reader may want (lenient only)."""
        if self.found is not None:
            self.found.append((self.first + index, field, value))


def _label(value: Any, index: int, what: str, check: _Check) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        check(index, what, value, f"has {what} = {_show(value)}; expected a string")
    return str(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _time(value: Any, index: int, what: str, check: _Check) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        check(
            index,
            what,
            value,
            f"has {what} = {_show(value)} ({type(value).__name__}); expected a number of µs",
        )
        return math.nan
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        check(index, what, value, f"has {what} = {_show(value)}; expected a finite number of µs")
        return math.nan
    return number


def _ids(values: list[Any], label: Labels, key: str, check: _Check) -> tuple[np.ndarray, np.ndarray]:
    numbers = np.full(len(values), NO_INT, np.int64)
    labels = np.full(len(values), -1, np.int32)
    for i, value in enumerate(values):
        if _is_int(value):
            numbers[i] = value
        else:
            if value is None:
                check.note(i, key, None)  # "" as a label, but the readers may name it otherwise
            labels[i] = label.code(_label(value, i, key, check))
    return numbers, labels


def _number(value: Any) -> float:
    """A JSON number as a float; NaN for anything else (or beyond a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        number = float(value)
    except OverflowError:
        return math.nan
    return number if math.isfinite(number) else math.nan


def python_chunk(
    events: list[Any], first: int, labels: dict[str, Labels], error, problems: list | None = None
) -> ChunkColumns:
    """Columns of ``events`` (parsed by the standard library); ``first`` is the index of the first;
    ``error(message, event=index)`` makes the error to raise. The reference for every value.

    ``problems``: None to raise at the first value that cannot be read; else a list that gets
    ``(event index, field, value)`` for each such value (``field``: ``event`` for an element that
    is not an object, ``ph``, ``cat``, ``name``, ``pid``, ``tid``, ``ts``, ``dur``, ``args``, an
    integer or memory argument's key), and also for ``null`` pids, tids and integer ids and for
    ``bytes`` that are not finite numbers (no errors, but read differently by the readers); the
    column then holds the neutral value ("" / ``str(value)`` for labels, NaN, -1)."""
    try:
        return _python_chunk(events, labels, _Check(first, problems))
    except _Fail as fail:
        event = events[fail.index] if isinstance(events[fail.index], dict) else {}
        name = event.get("name")
        what = f"event {name!r} " if isinstance(name, str) else ""
        raise error(f"{what}{fail.message}", event=first + fail.index) from None


def _python_chunk(events: list[Any], labels: dict[str, Labels], check: _Check) -> ChunkColumns:
    # Kept whole: the reference's one pass over the events, field by field in the order the fast
    # path fills its columns, so that the two can be read side by side; a call per field and event
    # would slow the reference that every file without msgspec is read with.
    n = len(events)
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            check(
                i,
                "event",
                event,
                f"is {type(event).__name__} {_show(event)}; expected a trace event "
                "(a JSON object with ph, name, ts ...)",
            )
    events = [e if isinstance(e, dict) else {} for e in events]
    strings = {
        key: [_label(e.get(key), i, key, check) for i, e in enumerate(events)]
        for key in ("ph", "cat", "name")
    }
    codes = {key: labels[key].encode_strings(values) for key, values in strings.items()}
    pid, pid_label = _ids([e.get("pid") for e in events], labels["pid"], "pid", check)
    tid, tid_label = _ids([e.get("tid") for e in events], labels["tid"], "tid", check)
    ts = np.fromiter((_time(e.get("ts"), i, "ts", check) for i, e in enumerate(events)), np.float64, n)
    dur = np.fromiter((_time(e.get("dur"), i, "dur", check) for i, e in enumerate(events)), np.float64, n)
    args = []
    for i, e in enumerate(events):
        a = e.get("args")
        if a is not None and not isinstance(a, dict):
            check(i, "args", a, f"has args of type {type(a).__name__}; expected a JSON object")
            a = None
        args.append(a)
    ints = {}
    for column, key, strict in INT_COLUMNS:
        values = np.full(n, -1, np.int64)
        for i, a in enumerate(args):
            if not a:
                continue
            value = a.get(key)
            if key == "External id" and value is None:
                value = a.get("external id")
            if value is None:
                if key in a or (key == "External id" and "external id" in a):
                    check.note(i, key, None)
                continue
            if _is_int(value):
                values[i] = value
            elif strict:
                check(i, key, value, f"has args {key!r} = {_show(value)}; expected an integer id")
        ints[column] = values
    nbytes = np.full(n, np.nan)
    for i, a in enumerate(args):
        if a and "bytes" in a:
            nbytes[i] = number = _number(a["bytes"])
            if math.isnan(number) or (type(a["bytes"]) is int and not _is_int(a["bytes"])):
                check.note(i, "bytes", a["bytes"])
    comm = {}
    names = codes["name"]
    comm_rows = []
    for i in np.flatnonzero(comm_table(labels["name"])[names]).tolist():
        if args[i]:
            comm_rows.append(i)
            found = {k: args[i][k] for k in COMM_ARGS if k in args[i]}
            if found:
                comm[i] = found
    memory_rows = np.flatnonzero(names == labels["name"].codes.get("[memory]", -1))
    memory = {k: np.full(len(memory_rows), np.nan) for k in MEMORY_ARGS}
    for j, i in enumerate(memory_rows.tolist()):
        for k in MEMORY_ARGS:
            value = args[i].get(k) if args[i] else None
            if value is None:
                continue
            number = _number(value)
            if math.isnan(number):
                check(i, k, value, f"has args {k!r} = {_show(value)}; expected a number")
                continue
            memory[k][j] = number
    is_meta = codes["ph"] == labels["ph"].codes.get("M", -1)
    meta_args = {}
    for i in np.flatnonzero(is_meta).tolist():
        meta_args[i] = {k: args[i][k] for k in META_ARGS if k in args[i]} if args[i] else {}
    return ChunkColumns(
        codes["ph"],
        codes["cat"],
        names,
        pid,
        tid,
        pid_label,
        tid_label,
        ts,
        dur,
        ints,
        nbytes,
        comm,
        memory_rows.astype(np.int64),
        memory,
        meta_args,
        np.asarray(comm_rows, dtype=np.int64),
    )


def comm_table(names: Labels) -> np.ndarray:
    """Per name code: is it a communication call whose arguments are kept (:data:`COMM_NAME`)?"""
    cache = getattr(names, "_comm", None)
    if cache is None or len(cache) < len(names.values):
        cache = np.fromiter((COMM_NAME.match(v) is not None for v in names.values), bool, len(names.values))
        names._comm = cache  # type: ignore[attr-defined]
    return cache


def new_labels() -> dict[str, Labels]:
    """The label lists of one file: phases, categories, names, and pids/tids that are not integers."""
    return {key: Labels() for key in ("ph", "cat", "name", "pid", "tid")}
