"""Horovod timelines decoded straight into columns: the events :mod:`.horovod` reads, at C speed.

    columns = decode_horovod("timeline.json")      # HorovodColumns: ph, name, pid, ts, dur, args

The file is split as :mod:`.horovod` splits it (256 KiB of events at a time, between ``}`` and
``,{"``; Horovod writes no ``]`` while it runs, or leaves a trailing comma or a cut-off last
event). With msgspec each piece is decoded into structs of the five fields the reader uses plus
the ``args`` of the events that have them (an operation's ``E``: dtype and shape; metadata:
tensor names and the start time); the standard library's reading of the same piece is the
reference (:func:`python_events`), used for every piece msgspec refuses; a piece that does not
parse at all goes to the reader's own event-by-event scan (:mod:`dlexplore.traces.horovod_json`'s), which
drops a cut-off last event with a warning and names a corrupt one.

Columns, one entry per event in file order: ``ph`` and ``name`` (codes into ``labels``, int32;
``ph`` int8 where there are fewer than 128 phases; "" where absent), ``pid`` (int64,
:data:`~dlexplore.traces.kineto_columns.NO_INT` where absent), ``ts`` (float64 µs, NaN where
absent); ``dur`` (float64 µs, NaN where absent) has one entry per ``X`` event only, in file order
(the only phase whose ``dur`` the reader uses: a full column would be 8 bytes an event for a few
ticks); ``args``: row -> the event's ``args`` as parsed.
A ``ph`` or ``name`` that is not a string, a ``pid`` that is not a 64-bit integer, a ``ts`` or
``dur`` that is not a finite number are errors naming the file, the event, its byte offset and line.

Measured (``benchmarks/bench_trace_load.py --sizes 10 100 --real 0 --repeat 3 --formats horovod``,
2 shared cores; CPU s of ``load_trace(path).breakdown()`` in a fresh process, against msgspec's
untyped parse of the same file): before pieces were framed in place and args kept once, 0.30 s
(bare 0.10) at 10 MB and 2.89 s (bare 1.28) at 100 MB, peak RSS growth 6.5x and 4.5x the JSON
(load average 1.7); after, 0.30 s (bare 0.11) and 2.33 s (bare 1.35), growth 5.2x and 4.0x (load
average 4.0, so the two runs are not strictly comparable). In a warm process at 10 MB (CPU ms,
best of 5): decode 104 -> 97, rows 59 -> 48, finish 24 -> 23. Later, with args as a frozen struct
(deduplicated by its hash, not its JSON), one struct per phase, ``dur`` for ticks only, 256 KiB
pieces, and the rows and table made with gathers and dense lookups where sorts and searches were:
100 MB 1.64 -> 1.44-1.59 s (bare 1.20-1.30: 0.7x -> 0.8x), 10 MB 0.17 -> 0.15-0.16 s (bare
0.10-0.11); peak RSS growth 2.23 -> 1.83x and 2.86 -> 1.91x the JSON. What is left is mostly
reading the fields out of the structs, one ``np.fromiter`` pass each (about 30 ns an event and
field: more than msgspec's decoding of the structs themselves), so a load stays about 1.2x the bare
parse (load average 1.2-5, shared machine).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from operator import attrgetter, or_
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputFileError
from .horovod_json import BOUNDARY, CHUNK, _decode, _scan, array_bounds, locate, piece_end, read_data
from .kineto_columns import NO_INT, Labels

try:
    import msgspec
except ImportError:  # pragma: no cover - exercised where msgspec has no wheel
    msgspec = None

__all__ = ["HorovodColumns", "decode_horovod", "python_events"]


@dataclass
class HorovodColumns:
    """One Horovod timeline's events as columns (module docstring)."""

    path: str
    labels: dict[str, list[str]]
    columns: dict[str, np.ndarray]
    #: the events with args (sorted), and a code into ``arg_values`` each: an operation's args come
    #: back every step, and one dict per event would hold as much memory as the JSON
    arg_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    arg_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    arg_values: list[Any] = field(default_factory=list)
    terminated: bool = False
    partial_event_at: int | None = None
    parser: str = "json"

    def __len__(self) -> int:
        return len(self.columns["ts"])

    @property
    def args(self) -> dict[int, Any]:
        """Event -> its ``args`` (non-empty ones)."""
        values = self.arg_values
        return {
            row: values[code]
            for row, code in zip(self.arg_rows.tolist(), self.arg_codes.tolist(), strict=True)
        }

    def args_of(self, rows: np.ndarray) -> np.ndarray:
        """The codes into ``arg_values`` of the args of ``rows`` (-1 where an event has none)."""
        at = np.minimum(np.searchsorted(self.arg_rows, rows), max(len(self.arg_rows) - 1, 0))
        found = (self.arg_rows[at] == rows) if len(self.arg_rows) else np.zeros(len(rows), bool)
        return np.where(found, self.arg_codes[at] if len(self.arg_rows) else -1, -1)

    def strings(self, column: str) -> np.ndarray:
        return np.asarray(self.labels[column], dtype=object)[self.columns[column]]


if msgspec is not None:

    class _Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
        """The args Horovod writes: an operation's output tensor (``E``), a tensor's name or the
        start time (``process_name``), ``process_sort_index``'s index. Any other key or type sends
        the piece to the reference: a struct, not a dict per event, is a third of the decoding."""

        dtype: str | msgspec.UnsetType = msgspec.UNSET
        shape: str | msgspec.UnsetType = msgspec.UNSET
        name: str | msgspec.UnsetType = msgspec.UNSET
        start_time_since_epoch_in_micros: int | float | msgspec.UnsetType = msgspec.UNSET
        sort_index: int | msgspec.UnsetType = msgspec.UNSET

    # One struct per phase Horovod writes, told apart by ``"ph"`` (a tagged union): the phase is the
    # struct's type, read without a string per event; a piece with another phase, or none, goes to
    # the reference. Fields in the order Horovod writes the keys.
    _KINDS = {
        phase: msgspec.defstruct(
            f"_Horovod{phase}{'_' if phase.islower() else ''}",
            [
                ("name", str, ""),
                ("ts", float, math.nan),
                ("pid", int, NO_INT),
                ("dur", float, math.nan),
                ("args", _Args | None, None),
            ],
            tag_field="ph",
            tag=phase,
            gc=False,
        )
        for phase in ("B", "E", "X", "i", "I", "M")
    }
    _PHASE_OF = {kind: phase for phase, kind in _KINDS.items()}
    _DECODER = msgspec.json.Decoder(list[functools.reduce(or_, _KINDS.values())])  # type: ignore[misc]
    _ENCODE = msgspec.json.encode
    _UNSET: Any = msgspec.UNSET
else:  # pragma: no cover - exercised where msgspec has no wheel
    _UNSET = object()

    def _ENCODE(value: Any) -> bytes:
        return json.dumps(value).encode()


def _fast(piece: memoryview, labels: dict[str, Labels]) -> tuple[dict[str, np.ndarray], dict[int, Any]]:
    events = _DECODER.decode(piece)
    n = len(events)
    get = attrgetter
    columns = {"ph": _phase_codes(labels["ph"], events), "name": _codes(labels["name"], events, "name")}
    columns["pid"] = np.fromiter(map(get("pid"), events), np.int64, n)
    columns["ts"] = np.fromiter(map(get("ts"), events), np.float64, n)
    # ``dur`` is read where it is used (ticks), ``args`` where there are any (operation ends and
    # metadata): most events have neither, and a pass in Python over all of them costs a column.
    ticks = np.flatnonzero(columns["ph"] == labels["ph"].codes.get("X", -1)).tolist()
    dur = columns["dur"] = np.array([events[i].dur for i in ticks], np.float64).reshape(-1)
    if np.isinf(columns["ts"]).any() or np.isinf(dur).any():
        raise ValueError("a time beyond a float")  # the reference decides
    given = np.fromiter(map(get("args"), events), object, n)
    carriers = given.nonzero()[0]  # the events with args (``{}`` among them: see _ArgTable)
    return columns, dict(zip(carriers.tolist(), given[carriers].tolist(), strict=True))


def _codes(labels: Labels, events: list, key: str) -> np.ndarray:
    """The codes of the events' ``key`` strings: one pass over them where none is new."""
    try:
        return np.fromiter(map(labels.codes.__getitem__, map(attrgetter(key), events)), np.int32, len(events))
    except KeyError:
        return labels.encode_strings(list(map(attrgetter(key), events)))


def _phase_codes(labels: Labels, events: list) -> np.ndarray:
    """The codes of the events' phases (their struct types), in a byte each while they fit."""
    codes = {kind: labels.codes[phase] for kind, phase in _PHASE_OF.items() if phase in labels.codes}
    dtype = np.int8 if len(labels.values) < 128 - len(_PHASE_OF) else np.int32
    try:
        return np.fromiter(map(codes.__getitem__, map(type, events)), dtype, len(events))
    except KeyError:
        return labels.encode_strings(list(map(_PHASE_OF.__getitem__, map(type, events)))).astype(dtype)


def _standard(piece: memoryview, labels: dict[str, Labels]) -> Any:
    return json.loads(piece.tobytes())


def _framed(data: bytearray, start: int, end: int, labels: dict[str, Labels], decode: Any) -> Any:
    """``decode`` of the events in ``data[start:end]`` framed as an array: the byte before them (the
    array's ``[`` or the ``,`` between events) and the one after them are made ``[`` and ``]`` while
    it runs, so that no piece of the file is copied (the JSON is most of the memory a load holds)."""
    before = data[start - 1]
    after = data[end] if end < len(data) else None
    if after is None:
        data.append(0x5D)
    data[start - 1], data[end] = 0x5B, 0x5D
    try:
        with memoryview(data) as view, view[start - 1 : end + 1] as piece:
            return decode(piece, labels)
    finally:
        data[start - 1] = before
        if after is None:
            del data[end:]
        else:
            data[end] = after


class _Bad(Exception):
    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index, self.message = index, message


def python_events(
    events: list[Any], labels: dict[str, Labels]
) -> tuple[dict[str, np.ndarray], dict[int, Any]]:
    """The columns of events parsed by the standard library: the reference for every value.

    Raises ``_Bad(index in the list, message)`` for an event that cannot be read."""
    strings: dict[str, list[str]] = {"ph": [], "name": []}
    pid = np.full(len(events), NO_INT, np.int64)
    ts = np.full(len(events), np.nan)
    dur: list[float] = []  # X events' only (module docstring)
    args = {}
    for i, event in enumerate(events):
        if type(event) is not dict:
            raise _Bad(i, f"is {type(event).__name__}; expected a trace event object")
        for key in ("ph", "name"):
            value = event.get(key)
            if value is not None and type(value) is not str:
                raise _Bad(i, f"{key!r} is {value!r}; expected a string")
            strings[key].append(value or "")
        value = event.get("pid")
        if value is not None:
            if type(value) is not int or not -(2**63) <= value < 2**63:
                raise _Bad(i, f"'pid' is {value!r}; expected the tensor's index (a 64-bit integer)")
            pid[i] = value
        for key in ("ts", "dur"):
            value = event.get(key)
            if key == "dur" and event.get("ph") == "X" and value is None:
                dur.append(math.nan)
            if value is None or (key == "dur" and event.get("ph") != "X"):
                continue
            if type(value) is int:
                finite = -(2**1023) < value < 2**1023
            else:
                finite = type(value) is float and math.isfinite(value)
            if not finite:
                raise _Bad(i, f"{key!r} is {str(value)[:40]!r}; expected a time in µs (a finite number)")
            if key == "ts":
                ts[i] = float(value)
            else:
                dur.append(float(value))
        if event.get("args"):  # as the fast path: empty args are no args
            args[i] = event["args"]
    columns = {key: labels[key].encode_strings(values) for key, values in strings.items()}
    columns.update(pid=pid, ts=ts, dur=np.array(dur, np.float64).reshape(-1))
    return columns, args


def decode_horovod(
    path: str | os.PathLike, *, parser: str | None = None, chunk: int = CHUNK
) -> HorovodColumns:
    """Decode one Horovod timeline (``.json`` or ``.json.gz``, finished or still being written).

    ``parser``: ``"msgspec"`` (default when installed) or ``"json"`` (the standard library);
    ``chunk``: about how many bytes of JSON are decoded at a time. Raises
    :class:`~dlexplore.errors.InputFileError` naming the file, the event, byte offset and line.
    """
    use = parser or ("msgspec" if msgspec is not None else "json")
    if use not in ("msgspec", "json") or (use == "msgspec" and msgspec is None):
        raise ValueError(f"parser={parser!r}: expected 'json'" + (" or 'msgspec'" if msgspec else ""))
    path = Path(path)
    data = read_data(path)
    labels = {"ph": Labels(), "name": Labels()}
    info: dict[str, Any] = {"terminated": False, "partial_event_at": None}
    parts: list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]] = []
    table = _ArgTable()
    seen = 0

    def reference(events: list[Any]) -> None:
        try:
            columns, args = python_events(events, labels)
            parts.append((columns, *table.compact(args)))
        except _Bad as bad:
            where, line = locate(path, seen + bad.index)
            raise InputFileError(
                path, f"event #{seen + bad.index} at {where}: {bad.message}", line=line
            ) from None

    pos, stop, terminated = array_bounds(data)
    while pos < stop:
        found = BOUNDARY.search(data, pos + chunk, stop) if stop - pos > chunk else None
        cut = found.start() if found else stop
        end = piece_end(data, pos, cut) if cut == stop else cut
        decoded = None
        if use == "msgspec":
            try:
                decoded = _framed(data, pos, end, labels, _fast)
            except Exception:  # noqa: BLE001 - anything msgspec refuses: the reference decides
                decoded = None
        if decoded is not None:
            parts.append((decoded[0], *table.compact(decoded[1])))
            seen += len(decoded[0]["ts"])
            pos = cut + 1
            continue
        try:
            events = _framed(data, pos, end, labels, _standard)
        except (ValueError, RecursionError):
            events = None
        if not isinstance(events, list):  # cut off or corrupt: the reader's exact scan from here
            text = _decode(data, path)
            for batch in _scan(text, len(data[:pos].decode("utf-8")), path, seen, info):
                reference(batch)
                seen += len(batch)
            break
        reference(events)
        seen += len(events)
        pos = cut + 1
    else:
        info["terminated"] = terminated
    if not seen:
        raise InputFileError(
            path,
            "holds no events (Horovod had written only '['); expected trace "
            "events: did any operation run after the timeline was opened?",
        )
    return _join(path, labels, parts, info, use, table)


class _ArgTable:
    """Distinct args, each kept once: equal dicts of strings (what Horovod writes) share a code."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}
        self.values: list[Any] = []

    def compact(self, args: dict[int, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The rows and codes of one piece's args (row -> args: dicts as parsed, or the fast
        path's structs, each kept as the dict of its keys given; none given is no args)."""
        values_given = list(args.values())
        rows = np.fromiter(args, np.int64, len(args))
        if values_given and msgspec is not None and isinstance(values_given[0], _Args):
            # frozen structs, hashed and compared by their fields: each distinct one looked up once
            distinct = dict.fromkeys(values_given)
            for value in distinct:
                distinct[value] = self._code(value, value)
            out = np.fromiter(map(distinct.__getitem__, values_given), np.int64, len(values_given))
        else:
            # Keyed by their JSON: exact where equality is not (1 == 1.0 == True, 0.0 == -0.0); a
            # value the encoder refuses (an int beyond 64 bits) or writes as null (inf) is kept apart.
            try:
                keys: list[Any] = list(map(_ENCODE, values_given))
            except Exception:  # noqa: BLE001
                keys = [b"null"] * len(values_given)
            out = np.empty(len(args), np.int64)
            for j, key in enumerate(keys):
                out[j] = self._code(id(values_given[j]) if b"null" in key else key, values_given[j])
        kept = out >= 0
        return (rows, out) if kept.all() else (rows[kept], out[kept])

    def _code(self, key: Any, value: Any) -> int:
        """The code of ``value`` (known by ``key``); -1 for a struct with no key given (``{}``)."""
        code = self.codes.get(key)
        if code is None:
            if type(key) is not bytes and type(key) is not int:  # a struct: the dict of its keys given
                value = {f: v for f in value.__struct_fields__ if (v := getattr(value, f)) is not _UNSET}
            code = self.codes[key] = len(self.values) if value else -1
            if value:
                self.values.append(value)
        return code


def _join(
    path: Path, labels: dict[str, Labels], parts: list, info: dict[str, Any], parser: str, table: _ArgTable
) -> HorovodColumns:
    columns = {}
    offsets = np.cumsum([0] + [len(p[0]["ts"]) for p in parts])
    none = [np.zeros(0, np.int64)]
    arg_rows = np.concatenate([rows + at for (_, rows, _), at in zip(parts, offsets, strict=False)] or none)
    arg_codes = np.concatenate([codes for _, _, codes in parts] or none)
    for key, dtype in (
        # a phase code in one byte where the phases are few (always with msgspec: six literals)
        ("ph", np.int8 if len(labels["ph"].values) < 128 else np.int32),
        ("name", np.int32),
        ("pid", np.int64),
        ("ts", np.float64),
        ("dur", np.float64),
    ):
        arrays = [p[0].pop(key) for p in parts]  # each piece's array goes once joined
        columns[key] = np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
        del arrays
    return HorovodColumns(
        str(path),
        {k: v.values for k, v in labels.items()},
        columns,
        arg_rows.astype(np.int64, copy=False),
        arg_codes.astype(np.int64, copy=False),
        table.values,
        bool(info["terminated"]),
        info["partial_event_at"],
        parser,
    )
