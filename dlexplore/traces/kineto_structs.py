"""Kineto events decoded by msgspec into typed structs, then into columns: every event, or the events
of chosen phases only (what the PyTorch reader asks for).

:mod:`.kineto_decode` calls :func:`all_chunk` or :func:`select_chunk` for each chunk of JSON when
msgspec is installed; whatever either refuses (msgspec's own refusal, or a value that needs checking:
a ``null`` id, a number beyond a float or 64 bits, an ``args`` with no member read here) raises, and
the chunk is read the reference way (:func:`~.kineto_columns.python_chunk`), so both give the same
columns and the same errors.

Chosen phases (``decode_kineto(..., phases=("X", "i", "M"))``) keep the complete events, the
instants (the allocator's ``[memory]``) and the metadata (thread names), and leave out the rest: in
a GPU trace the flow events (``"ph": "s"``/``"f"``, one pair per kernel launch) are about a third
of all events. Each event is decoded into a struct chosen by its ``ph`` (a tagged union): a left-out
phase is an empty struct, so its members are skipped without making a Python object, and the
columns are made from the kept events alone. A chunk with a ``ph`` that is missing, not a string,
given twice with two values, or not one of the Trace Event Format's phases goes to the reference
as any chunk msgspec refuses does; :func:`subset_chunk` cuts the reference's columns down the same
way.

What it saves, measured (CPU s, medians of 5-7, a shared 2-core machine at load 4-5): on the real
54 MB trace of ``../shared/traces-real`` (df_index_resolver: 216k events, 65k of them flows), decoding
0.34 -> 0.28 and ``load_trace`` 0.47-0.49 -> 0.43-0.44; on the 33-35 MB ones ``load_trace`` 7-15 %
less. ``benchmarks/bench_trace_load.py`` shows no change beyond its noise there (HTA/dlexplore
5.4-6.5x either way): gunzip (0.10), msgspec's decoding of the kept events and the reader's later
stages remain.

What the columns of a selection hold, beyond :mod:`.kineto_columns`: ``index``, each kept event's
index in ``traceEvents``; communication arguments (``comm``, ``comm_rows``) of complete events only,
memory arguments of instant events only, metadata arguments of ``M`` events only (the readers use
no others); the label lists hold the kept events' strings (a code means the same string whichever
path made the chunk, but codes of two decodings of a file may differ).
"""

from __future__ import annotations

import math
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any, Union

import numpy as np

from .kineto_columns import (
    COMM_ARGS,
    MEMORY_ARGS,
    META_ARGS,
    NO_INT,
    ChunkColumns,
    Labels,
    comm_table,
)

try:
    import msgspec
except ImportError:  # pragma: no cover - exercised where msgspec has no wheel
    msgspec = None

__all__ = ["all_chunk", "select_chunk", "subset_chunk", "struct_ids", "PHASES"]

#: The Trace Event Format's phases (a ``ph`` outside them sends its chunk to the reference).
PHASES = tuple("BEXiICbnestfPONDMVvRc()STpF")

_GET = attrgetter
_decode = msgspec.json.decode if msgspec is not None else None
#: The arguments a kept phase's events carry for the readers (other kept phases read them all).
_ARGS_OF_PHASE = {"X": "comm", "i": "memory", "M": "meta"}
_COMM_GET = _GET(*(f"c{i}" for i in range(len(COMM_ARGS))))
_MEMORY_GET = _GET(*(f"m{i}" for i in range(len(MEMORY_ARGS))))
_META_GET = _GET(*(f"a{i}" for i in range(len(META_ARGS))))


def _args_struct(name: str, parts: tuple[str, ...]) -> Any:
    """The struct of an event's ``args``: the ids and ``bytes`` every event may carry, plus the
    arguments of ``parts`` (``comm``, ``memory``, ``meta``)."""
    unset = msgspec.UNSET
    extra = {
        # Raw: kept as the JSON text and decoded for communication events only. Typed Any, every
        # operator's "Input Dims" and "Input type" (record_shapes=True) were built as nested lists
        # only to be dropped: four fifths of the decoding time of such a trace.
        "comm": [
            (f"c{i}", msgspec.Raw, msgspec.field(name=k, default=unset)) for i, k in enumerate(COMM_ARGS)
        ],
        "memory": [
            (f"m{i}", float | None, msgspec.field(name=k, default=None)) for i, k in enumerate(MEMORY_ARGS)
        ],
        "meta": [(f"a{i}", Any, msgspec.field(name=k, default=unset)) for i, k in enumerate(META_ARGS)],
    }
    fields = [
        ("correlation", int, -1),
        ("external_id", int, msgspec.field(name="External id", default=NO_INT)),
        ("external_id_2021", int, msgspec.field(name="external id", default=NO_INT)),
        ("bytes", float, math.nan),
    ]
    for part in parts:
        fields += extra[part]
    return msgspec.defstruct(name, fields, frozen=True, gc=False)


def _event_fields(args: Any, no_args: Any) -> list[tuple[str, Any, Any]]:
    return [
        ("cat", str, ""),
        ("name", str, ""),
        ("pid", int | str | None, None),
        ("tid", int | str | None, None),
        ("ts", float, math.nan),
        ("dur", float, math.nan),
        ("args", args, no_args),
    ]


@lru_cache(maxsize=1)
def _all_decoder() -> tuple[Any, Any]:
    """The decoder of every event (``ph`` read as a string), and the ``args`` of an event without."""
    args = _args_struct("_Args", ("comm", "memory", "meta"))
    no_args = args()
    event = msgspec.defstruct("_Event", [("ph", str, ""), *_event_fields(args, no_args)], gc=False)
    return msgspec.json.Decoder(list[event]), no_args


@lru_cache(maxsize=8)
def _select_decoder(phases: frozenset[str]) -> tuple[Any, dict[str, Any], np.ndarray, tuple[str, ...]]:
    """The decoder of a selection; the kept phases' ``args`` of an event without; per struct kind
    (the ``kind`` class attribute, an index into the last item, the phases) whether it is kept."""
    names = PHASES + tuple(sorted(phases - set(PHASES)))
    structs, no_args = [], {}
    for kind, ph in enumerate(names):
        fields = []
        if ph in phases:
            part = _ARGS_OF_PHASE.get(ph)
            args = _args_struct(f"_Args_{kind}", (part,) if part else ("comm", "memory", "meta"))
            no_args[ph] = args()
            fields = _event_fields(args, no_args[ph])
        structs.append(
            msgspec.defstruct(
                f"_Phase_{kind}", fields, tag_field="ph", tag=ph, namespace={"kind": kind}, gc=False
            )
        )
    kept = np.asarray([ph in phases for ph in names], dtype=bool)
    return msgspec.json.Decoder(list[Union[tuple(structs)]]), no_args, kept, names  # noqa: UP007


def _common(events: Any, labels: dict[str, Labels], lenient: bool) -> dict[str, Any]:
    """The columns every event has (all but ``ph``), and its ``args`` structs."""
    n = len(events)
    found: dict[str, Any] = {
        key: labels[key].encode_strings(list(map(_GET(key), events))) for key in ("cat", "name")
    }
    for key in ("pid", "tid"):
        found[key], found[f"{key}_label"] = struct_ids(list(map(_GET(key), events)), labels[key], lenient)
    found["ts"] = np.fromiter(map(_GET("ts"), events), np.float64, n)
    found["dur"] = np.fromiter(map(_GET("dur"), events), np.float64, n)
    args = found["args"] = list(map(_GET("args"), events))
    found["bytes"] = np.fromiter(map(_GET("bytes"), args), np.float64, n)
    if (
        np.isinf(found["ts"]).any()
        or np.isinf(found["dur"]).any()
        or (np.abs(found["bytes"]) >= 2.0**63).any()
    ):
        raise ValueError("a number beyond a float or a count")  # the reference decides
    external = np.fromiter(map(_GET("external_id"), args), np.int64, n)
    second = np.fromiter(map(_GET("external_id_2021"), args), np.int64, n)  # 2021's "external id"
    external = np.where(external != NO_INT, external, second)
    found["ints"] = {
        "correlation": np.fromiter(map(_GET("correlation"), args), np.int64, n),
        "external_id": np.where(external != NO_INT, external, -1),
    }
    return found


def _chunk(ph: np.ndarray, found: dict[str, Any], no_args: Any, rows: dict[str, np.ndarray]) -> ChunkColumns:
    """The chunk's columns from :func:`_common`'s and the rows whose arguments are read: ``comm``
    (communication calls), ``memory`` (``[memory]`` events), ``meta`` (metadata events)."""
    args = found["args"]
    comm, comm_rows = {}, []
    unset = (msgspec.UNSET,) * len(COMM_ARGS)
    for i in rows["comm"].tolist():
        if args[i] is no_args:
            continue
        if args[i] == no_args:
            raise ValueError("args without a member read here")  # {} or not: the reference decides
        comm_rows.append(i)
        values = _COMM_GET(args[i])
        if values != unset:
            comm[i] = {
                k: _decode(v) for k, v in zip(COMM_ARGS, values, strict=True) if v is not msgspec.UNSET
            }
    memory = rows["memory"]
    table = np.array([_MEMORY_GET(args[i]) for i in memory.tolist()], np.float64)  # None -> NaN
    table = table.reshape(len(memory), len(MEMORY_ARGS))
    if np.isinf(table).any():
        raise ValueError("a number beyond a float")  # the reference decides
    meta_args = {}
    for i in rows["meta"].tolist():
        meta_args[i] = {
            k: v for k, v in zip(META_ARGS, _META_GET(args[i]), strict=True) if v is not msgspec.UNSET
        }
    return ChunkColumns(
        ph,
        found["cat"],
        found["name"],
        found["pid"],
        found["tid"],
        found["pid_label"],
        found["tid_label"],
        found["ts"],
        found["dur"],
        found["ints"],
        found["bytes"],
        comm,
        memory.astype(np.int64),
        {k: table[:, j].copy() for j, k in enumerate(MEMORY_ARGS)},
        meta_args,
        np.asarray(comm_rows, dtype=np.int64),
    )


def all_chunk(view: memoryview, labels: dict[str, Labels], lenient: bool = False) -> tuple[ChunkColumns, int]:
    """Columns of every event of a JSON array of events; raises on anything the reference must
    decide (the caller then reads the chunk the reference way)."""
    decoder, no_args = _all_decoder()
    events = decoder.decode(view)
    ph = labels["ph"].encode_strings(list(map(_GET("ph"), events)))
    found = _common(events, labels, lenient)
    names = found["name"]
    rows = {
        "comm": np.flatnonzero(comm_table(labels["name"])[names]),
        "memory": np.flatnonzero(names == labels["name"].codes.get("[memory]", -1)),
        "meta": np.flatnonzero(ph == labels["ph"].codes.get("M", -1)),
    }
    return _chunk(ph, found, no_args, rows), len(events)


def _take(items: Any, rows: np.ndarray) -> Any:
    """``items[rows]`` for a list (a tuple; C speed)."""
    if len(rows) == len(items):
        return items
    if len(rows) == 0:
        return ()
    if len(rows) == 1:
        return (items[int(rows[0])],)
    return itemgetter(*rows.tolist())(items)


def select_chunk(
    view: memoryview, first: int, labels: dict[str, Labels], phases: frozenset[str], lenient: bool
) -> tuple[ChunkColumns, int]:
    """Columns of the events of ``phases`` in a JSON array of events (module docstring); ``first``:
    the index of its first event. Raises on anything the reference must decide."""
    decoder, no_args, kept_kind, names_of_kind = _select_decoder(phases)
    events = decoder.decode(view)
    kind = np.fromiter(map(_GET("kind"), events), np.int16, len(events))
    # phases get codes in the order they first appear, kept or not, as the reference gives them
    # (a few kinds: a pass over the chunk for each is cheaper than np.unique's sort of it)
    seen = np.flatnonzero(np.bincount(kind, minlength=len(names_of_kind)))
    appears = [int(np.argmax(kind == k)) for k in seen.tolist()]
    for k in seen[np.argsort(appears, kind="stable")].tolist():
        labels["ph"].code(names_of_kind[k])
    keep = np.flatnonzero(kept_kind[kind])
    ph_table = np.asarray([labels["ph"].codes.get(p, -1) for p in names_of_kind], np.int32)
    ph = ph_table[kind[keep]]
    found = _common(_take(events, keep), labels, lenient)
    names = found["name"]
    is_phase = {p: ph == labels["ph"].codes.get(p, -2) for p in ("X", "i", "M")}
    rows = {
        "comm": np.flatnonzero(comm_table(labels["name"])[names] & is_phase["X"]),
        "memory": np.flatnonzero((names == labels["name"].codes.get("[memory]", -1)) & is_phase["i"]),
        "meta": np.flatnonzero(is_phase["M"]),
    }
    columns = _chunk(ph, found, no_args.get("X"), rows)
    columns.index = first + keep.astype(np.int64)
    return columns, len(events)


def subset_chunk(chunk: ChunkColumns, first: int, ph_labels: Labels, phases: frozenset[str]) -> ChunkColumns:
    """The reference's columns of a chunk cut down to the events of ``phases``, with the arguments
    :func:`select_chunk` keeps (module docstring)."""
    codes = {p: ph_labels.codes.get(p, -2) for p in ("X", "i", "M")}
    wanted = np.asarray([ph_labels.codes[p] for p in phases if p in ph_labels.codes], np.int32)
    keep = np.flatnonzero(np.isin(chunk.ph, wanted))
    position = np.full(len(chunk.ph), -1, np.int64)
    position[keep] = np.arange(len(keep))

    def rows(old: np.ndarray, phase: str) -> np.ndarray:
        return old[(position[old] >= 0) & (chunk.ph[old] == codes[phase])] if len(old) else old

    memory_kept = rows(chunk.memory_rows, "i")
    memory_mask = np.isin(chunk.memory_rows, memory_kept)
    comm_kept = rows(np.asarray(sorted(chunk.comm), np.int64), "X").tolist()
    meta_kept = rows(np.asarray(sorted(chunk.meta_args), np.int64), "M").tolist()
    return ChunkColumns(
        chunk.ph[keep],
        chunk.cat[keep],
        chunk.name[keep],
        chunk.pid[keep],
        chunk.tid[keep],
        chunk.pid_label[keep],
        chunk.tid_label[keep],
        chunk.ts[keep],
        chunk.dur[keep],
        {k: v[keep] for k, v in chunk.ints.items()},
        chunk.bytes[keep],
        {int(position[i]): chunk.comm[i] for i in comm_kept},
        position[memory_kept],
        {k: v[memory_mask] for k, v in chunk.memory.items()},
        {int(position[i]): chunk.meta_args[i] for i in meta_kept},
        position[rows(chunk.comm_rows, "X")],
        first + keep.astype(np.int64),
    )


def struct_ids(values: list[Any], labels: Labels, lenient: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """pid or tid: int64 numbers (:data:`NO_INT` for others) and label codes (-1 for numbers)."""
    if set(map(type, values)) <= {int}:  # the usual case (fromiter alone would take "5", 1.5)
        try:
            return np.fromiter(values, np.int64, len(values)), np.full(len(values), -1, np.int32)
        except OverflowError:
            pass  # beyond 64 bits: named below
    table = {}
    for value in dict.fromkeys(values):  # a few distinct ids: decide each once, in order
        if value is None and lenient:
            raise ValueError("a null id")  # the reference notes where
        if type(value) is int:
            if not -(2**63) <= value < 2**63:
                raise OverflowError("an id beyond 64 bits")  # the reference decides
            table[value] = (value, -1)
        else:
            table[value] = (NO_INT, labels.code("" if value is None else value))
    pairs = np.array([table[v] for v in table], dtype=np.int64).reshape(-1, 2)
    index = {v: i for i, v in enumerate(table)}
    rows = np.fromiter(map(index.__getitem__, values), np.int64, len(values))
    return pairs[rows, 0], pairs[rows, 1].astype(np.int32)
