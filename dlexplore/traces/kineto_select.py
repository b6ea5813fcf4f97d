"""Kineto events of chosen phases only, decoded into columns: what the PyTorch reader asks for.

:func:`~.kineto_decode.decode_kineto` with ``phases=("X", "i", "M")`` keeps the complete events,
the instants (the allocator's ``[memory]``) and the metadata (thread names), and leaves out the
rest: in a GPU trace the flow events (``"ph": "s"``/``"f"``, one pair per kernel launch) are about
a third of all events. Here msgspec decodes each event into a struct chosen by its ``ph`` (a tagged
union): a left-out phase is an empty struct, so its members are skipped without making a Python
object, and the columns are made from the kept events alone (about 40 % less decoding and column
work on a real 54 MB trace, ``benchmarks/bench_trace_load.py``). A chunk with a ``ph`` that is
missing, not a string, or not one of the Trace Event Format's phases goes to the reference as any
chunk msgspec refuses does; :func:`subset_chunk` cuts the reference's columns down the same way.

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

__all__ = ["select_chunk", "subset_chunk", "PHASES", "struct_ids"]

#: The Trace Event Format's phases (a ``ph`` outside them sends its chunk to the reference).
PHASES = tuple("BEXiICbnestfPONDMVvRc()STpF")

_GET = attrgetter
_ARGS_OF_PHASE = {"X": "comm", "i": "memory", "M": "meta"}


@lru_cache(maxsize=8)
def _decoder(phases: frozenset[str]) -> tuple[Any, dict[str, Any], np.ndarray]:
    """The decoder of a selection, the kept phases' default ``args``, and per struct kind (the
    ``kind`` class attribute: the place of its ``ph`` in :data:`PHASES`) whether it is kept."""
    unset = msgspec.UNSET
    common = [
        ("correlation", int, -1),
        ("external_id", int, msgspec.field(name="External id", default=NO_INT)),
        ("external_id_2021", int, msgspec.field(name="external id", default=NO_INT)),
        ("bytes", float, math.nan),
    ]
    extra = {
        "comm": [(f"c{i}", Any, msgspec.field(name=k, default=unset)) for i, k in enumerate(COMM_ARGS)],
        "memory": [
            (f"m{i}", float | None, msgspec.field(name=k, default=None)) for i, k in enumerate(MEMORY_ARGS)
        ],
        "meta": [(f"a{i}", Any, msgspec.field(name=k, default=unset)) for i, k in enumerate(META_ARGS)],
    }
    structs, defaults = [], {}
    for kind, ph in enumerate(PHASES + tuple(sorted(phases - set(PHASES)))):
        if ph not in phases:
            fields = []
        else:
            # each kept phase reads the arguments that its events carry for the readers
            what = _ARGS_OF_PHASE.get(ph)
            args_fields = common + (extra[what] if what else [f for part in extra.values() for f in part])
            args = msgspec.defstruct(f"_Args_{kind}", args_fields, frozen=True, gc=False)
            defaults[ph] = args()
            fields = [
                ("cat", str, ""),
                ("name", str, ""),
                ("pid", int | str | None, None),
                ("tid", int | str | None, None),
                ("ts", float, math.nan),
                ("dur", float, math.nan),
                ("args", args, defaults[ph]),
            ]
        structs.append(
            msgspec.defstruct(
                f"_Phase_{kind}", fields, tag_field="ph", tag=ph, namespace={"kind": kind}, gc=False
            )
        )
    kept = np.asarray([s.__struct_config__.tag in phases for s in structs], dtype=bool)
    return msgspec.json.Decoder(list[Union[tuple(structs)]]), defaults, kept  # noqa: UP007


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
    """Columns of the events of ``phases`` in a JSON array of events (module docstring); raises on
    anything the reference must decide (the caller then reads the chunk the reference way)."""
    decoder, defaults, kept_kind = _decoder(phases)
    events = decoder.decode(view)
    n = len(events)
    kind = np.fromiter(map(_GET("kind"), events), np.int16, n)
    order = np.unique(kind, return_index=True)
    names_of_kind = PHASES + tuple(sorted(phases - set(PHASES)))
    # phases get codes in the order they first appear, kept or not, as the reference gives them
    for k in order[0][np.argsort(order[1])].tolist():
        labels["ph"].code(names_of_kind[k])
    keep = np.flatnonzero(kept_kind[kind])
    events = _take(events, keep)
    m = len(events)
    ph_table = np.asarray([labels["ph"].codes.get(p, -1) for p in names_of_kind], np.int32)
    ph = ph_table[kind[keep]]
    codes = {key: labels[key].encode_strings(list(map(_GET(key), events))) for key in ("cat", "name")}
    ids = {key: struct_ids(list(map(_GET(key), events)), labels[key], lenient) for key in ("pid", "tid")}
    ts = np.fromiter(map(_GET("ts"), events), np.float64, m)
    dur = np.fromiter(map(_GET("dur"), events), np.float64, m)
    args = list(map(_GET("args"), events))
    nbytes = np.fromiter(map(_GET("bytes"), args), np.float64, m)
    if np.isinf(ts).any() or np.isinf(dur).any() or (np.abs(nbytes) >= 2.0**63).any():
        raise ValueError("a number beyond a float or a count")  # the reference decides
    ints = {"correlation": np.fromiter(map(_GET("correlation"), args), np.int64, m)}
    external = np.fromiter(map(_GET("external_id"), args), np.int64, m)
    second = np.fromiter(map(_GET("external_id_2021"), args), np.int64, m)  # 2021's "external id"
    external = np.where(external != NO_INT, external, second)
    ints["external_id"] = np.where(external != NO_INT, external, -1)
    names = codes["name"]
    phase = {p: ph == labels["ph"].codes.get(p, -2) for p in ("X", "i", "M")}
    comm, comm_rows = {}, []
    if "X" in defaults:
        none = defaults["X"]
        get = _GET(*(f"c{i}" for i in range(len(COMM_ARGS))))
        unset = (msgspec.UNSET,) * len(COMM_ARGS)
        for i in np.flatnonzero(comm_table(labels["name"])[names] & phase["X"]).tolist():
            if args[i] is none:
                continue
            if args[i] == none:
                raise ValueError("args without a member read here")  # {} or not: the reference decides
            comm_rows.append(i)
            values = get(args[i])
            if values != unset:
                comm[i] = {k: v for k, v in zip(COMM_ARGS, values, strict=True) if v is not msgspec.UNSET}
    memory_rows = np.flatnonzero((names == labels["name"].codes.get("[memory]", -1)) & phase["i"])
    get = _GET(*(f"m{i}" for i in range(len(MEMORY_ARGS))))
    table = np.array([get(args[i]) for i in memory_rows.tolist()], np.float64)  # None -> NaN
    table = table.reshape(len(memory_rows), len(MEMORY_ARGS))
    if np.isinf(table).any():
        raise ValueError("a number beyond a float")  # the reference decides
    meta_args = {}
    get = _GET(*(f"a{i}" for i in range(len(META_ARGS))))
    for i in np.flatnonzero(phase["M"]).tolist():
        values = get(args[i])
        meta_args[i] = {k: v for k, v in zip(META_ARGS, values, strict=True) if v is not msgspec.UNSET}
    columns = ChunkColumns(
        ph,
        codes["cat"],
        names,
        ids["pid"][0],
        ids["tid"][0],
        ids["pid"][1],
        ids["tid"][1],
        ts,
        dur,
        ints,
        nbytes,
        comm,
        memory_rows.astype(np.int64),
        {k: table[:, j].copy() for j, k in enumerate(MEMORY_ARGS)},
        meta_args,
        np.asarray(comm_rows, dtype=np.int64),
        first + keep.astype(np.int64),
    )
    return columns, n


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
