"""One Kineto trace file's decoded columns -> the rows the PyTorch reader keeps, checked.

The PyTorch reader (:mod:`.pytorch`) works in three stages, one module each, so that none grows
past a screenful of concerns: the file is decoded into columns (:mod:`.kineto_decode`), its rows
are chosen and checked here (complete events, the allocator's ``[memory]`` instants, thread names,
the arguments of copies and communication calls), and the ranks' rows become one event table in
:mod:`.kineto_assemble`.

The decoder reads leniently: a value it cannot read (a string where a number belongs ...) is noted
with its event index instead of stopping it, and only the problems of the events the reader keeps
are errors here, each named as before with the file and the event (the event itself is read again,
by the standard library, for the message).

Kept whole: choosing the rows and checking them are one pass over one file's columns, and each
error is named from the same event index.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from .jsonchunks import EventChunks
from .kineto_columns import MEMORY_ARGS
from .kineto_comm import HOST_COMM_PREFIXES, RPC, CommArgs, Labels
from .kineto_decode import KinetoColumns
from .kineto_legacy import LegacyExport, adopt_legacy

__all__ = [
    "RankFile",
    "PHASES_READ",
    "canonical_category",
    "CAT_ALIASES",
    "DEVICE_KINDS",
    "KERNEL_CATS",
    "RUNTIME_CATS",
]

#: Kineto's categories as PyTorch 1.8-1.9 (2021) wrote them -> the names used since.
CAT_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Python": "python_function",
}
#: Categories of events that run on a device -> the prefix of their rows (``cuda:<pid>:<tid>``).
#: ROCm and XPU builds of Kineto write ``kernel``/``gpu_memcpy`` too; MTIA writes
#: ``mtia_ccp_events``, Gaudi ``hpu_op``.
DEVICE_CATS = {
    "kernel": "cuda",
    "gpu_memcpy": "cuda",
    "gpu_memset": "cuda",
    "gpu_user_annotation": "cuda",
    "cuda_sync": "cuda",
    "gpu_memory": "cuda",
    "mtia_ccp_events": "mtia",
    "hpu_op": "hpu",
}
DEVICE_KINDS = ("cpu", "cuda", "mtia", "hpu")  # code 0 .. 3 of a row's prefix
#: Device categories whose events are work the device does (kernels, and what other devices call them).
KERNEL_CATS = frozenset({"kernel", "mtia_ccp_events", "hpu_op"})
RUNTIME_CATS = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "xpu_runtime",
        "xpu_driver",
        "mtia_runtime",
        "privateuse1_runtime",
        "privateuse1_driver",
        "hip_runtime",
    }
)
COPY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
SKIPPED_CATS = frozenset({"Trace"})  # Kineto's whole-window spans (pid "Spans")
NCCL_KERNEL = re.compile(r"^nccl.*Kernel|^rccl.*Kernel")  # HTA's rule; NCCL names change by version
_INT_FIELDS = ("correlation", "External id")
#: The phases whose events the reader uses: complete events, instants (``[memory]``), metadata.
PHASES_READ = ("X", "i", "M")
_MEMORY_MESSAGE = (
    "expected a ts and args with numbers Device Type, Device Id, Bytes (Total Allocated, Total "
    "Reserved, Addr)"
)


def canonical_category(cat: str) -> str:
    """Kineto's category name as written since 2022 (``Operator`` -> ``cpu_op`` ...)."""
    return CAT_ALIASES.get(cat, cat)


def _table(values: list[str], test) -> np.ndarray:
    return np.fromiter((bool(test(v)) for v in values), dtype=bool, count=len(values))


class RankFile:
    """The rows one file (one rank) contributes: complete events, memory events, thread names.

    ``parts``: the kept rows' columns (``ts``/``dur`` in µs as written, ``cat``/``name``/``stream``
    codes into the set's labels, ``corr``/``ext`` ids, -1 for none); ``comm``: the arguments of
    copies and communication calls (:class:`~.kineto_comm.CommArgs`, ``row`` counted in this file's
    kept rows); ``memory``: the ``[memory]`` columns (``ts`` and :data:`MEMORY_ARGS`).
    """

    def __init__(self, columns: KinetoColumns, names: Labels, cats: Labels, streams: Labels):
        self.path = Path(columns.path)
        self.meta = columns.meta
        self.events_read = columns.events_read or len(columns)
        self.parser = columns.parser  # "msgspec", or "json" (the standard library)
        self.rank: int | None = None
        self.rank_known = True
        self.world_size: int | None = None
        self.backend: str | None = None
        self.ts_origin = 0.0  # µs subtracted from ts (files without baseTimeNanoseconds)
        self.legacy: LegacyExport | None = None  # the legacy profiler's export (:mod:`.kineto_legacy`)
        self.foreign: str | None = None  # the tool that wrote it, where not PyTorch ("TensorFlow")
        self._columns = columns
        self._problems: dict[str, dict[int, Any]] = {}
        for index, key, value in columns.problems or ():
            self._problems.setdefault(key, {}).setdefault(index, value)
        # rows -> event indices (problems and messages name events by their place in the file)
        self._event = (lambda rows: columns.index[rows]) if columns.index is not None else (lambda rows: rows)
        self._select(names, cats, streams)
        del self._columns  # the decoded columns go as soon as the rows are taken

    def error(self, message: str, *, event: int | None = None) -> DlexploreError:
        """A :class:`DlexploreError` naming this file (and the event)."""
        return EventChunks(self.path).error(message, event=event)

    def _raw(self, index: int) -> Any:
        """Event ``index`` as the standard library reads it (for an error message)."""
        found: list[Any] = []

        def keep(events: list[Any], first: int) -> int:
            if first <= index < first + len(events):
                found.append(events[index - first])
            return len(events)

        for _ in EventChunks(self.path).decode(None, keep):
            if found:
                break
        return found[0] if found else None

    def _name(self, index: int) -> str:
        event = self._raw(index)
        return repr(event.get("name") if isinstance(event, dict) else None)

    def _first(self, field: str, rows: np.ndarray) -> tuple[int, Any] | None:
        """The first event of ``rows`` with a problem in ``field`` (its index), and its value."""
        found = self._problems.get(field)
        if not found:
            return None
        hits = np.intersect1d(self._event(rows), np.fromiter(found, np.int64, len(found)))
        return (int(hits[0]), found[int(hits[0])]) if len(hits) else None

    # -- choosing and checking ---------------------------------------------------------------

    def _select(self, names: Labels, cats: Labels, streams: Labels) -> None:
        c = self._columns
        self.legacy = adopt_legacy(c)  # before anything reads the categories: it sets them
        col = c.columns
        ph_labels, cat_labels = c.labels["ph"], c.labels["cat"]
        bad = self._problems.get("event")
        if bad:
            index = min(bad)
            value = bad[index]
            raise self.error(
                f"is {type(value).__name__} {str(value)[:40]!r}; "
                "expected a trace event (a JSON object with ph, name, ts ...)",
                event=index,
            )
        self._memory(ph_labels)
        x_code = ph_labels.index("X") if "X" in ph_labels else -1
        skipped = np.flatnonzero(_table(cat_labels, lambda v: v in SKIPPED_CATS))
        keep = (col["ph"] == x_code) & ~np.isin(col["cat"], skipped)
        rows = np.flatnonzero(keep)
        ts, dur = col["ts"][rows], col["dur"][rows]
        for field, values in (("ts", ts), ("dur", dur)):
            missing = np.flatnonzero(np.isnan(values))
            if len(missing):
                index = int(self._event(rows[missing[0]]))
                value = self._problems.get(field, {}).get(index)
                what = (
                    "has no" if value is None else f"has {field} = {value!r} ({type(value).__name__}), not a"
                )
                raise self.error(
                    f"complete event {self._name(index)} {what} {field}; "
                    f'expected a number of µs ("ph": "X" events need ts and dur)',
                    event=index,
                )
        negative = np.flatnonzero(dur < 0)
        if len(negative):
            index = int(self._event(rows[negative[0]]))
            raise self.error(
                f"event {self._name(index)} has a negative dur ({dur[negative[0]]}); "
                "expected a duration >= 0 µs",
                event=index,
            )
        self._strings_readable("cat", rows)
        canonical = [canonical_category(v) for v in cat_labels]
        device = np.fromiter(
            (DEVICE_KINDS.index(DEVICE_CATS[v]) if v in DEVICE_CATS else 0 for v in canonical),
            np.int64,
            len(canonical),
        )[col["cat"][rows]]
        runtime = _table(canonical, lambda v: v in RUNTIME_CATS)[col["cat"][rows]]
        if device.any() or runtime.any():  # links between host and device exist only in GPU traces
            self._args_readable(rows)
            for field in _INT_FIELDS:
                found = self._first(field, rows)
                if found:
                    raise self.error(
                        f"event {self._name(found[0])} has args {field!r} = {found[1]!r}; "
                        "expected an integer id",
                        event=found[0],
                    )
            corr, ext = col["correlation"][rows], col["external_id"][rows]
        else:
            corr = ext = np.full(len(rows), -1, dtype=np.int64)
        self._strings_readable("name", rows)
        self.rows = len(rows)
        self.parts = {
            "ts": ts,
            "dur": dur,
            "cat": _recode(col["cat"][rows], cat_labels, cats),
            "name": _recode(col["name"][rows], c.labels["name"], names),
            "stream": self._streams(rows, device, streams),
            "corr": corr,
            "ext": ext,
        }
        self._sizes(rows, canonical)
        self._threads(ph_labels)

    def _strings_readable(self, field: str, rows: np.ndarray) -> None:
        found = self._first(field, rows)
        if found:
            raise self.error(f"has {field} = {str(found[1])[:40]!r}; expected a string", event=found[0])

    def _args_readable(self, rows: np.ndarray) -> None:
        found = self._first("args", rows)
        if found:
            raise self.error(
                f"event {self._name(found[0])} has args of type {type(found[1]).__name__}; "
                "expected a JSON object",
                event=found[0],
            )

    def _streams(self, rows: np.ndarray, kind: np.ndarray, streams: Labels) -> np.ndarray:
        """Codes of ``cpu:<pid>:<tid>`` / ``cuda:<device>:<stream>`` (Kineto puts the device in pid;
        other devices' rows are ``mtia:``, ``hpu:``)."""
        col = self._columns.columns
        if not len(rows):
            return np.zeros(0, np.int32)
        p, t = col["pid"][rows], col["tid"][rows]
        if (col["pid_label"][rows] < 0).all() and (col["tid_label"][rows] < 0).all():
            key = (p << 34) + ((t & 0xFFFFFFFF) << 2) + kind
            local, uniques = pd.factorize(key)
            labels = [f"{DEVICE_KINDS[u & 3]}:{u >> 34}:{(u >> 2) & 0xFFFFFFFF}" for u in uniques.tolist()]
        else:
            # 2021 releases write string ids: tid "stream 7" on devices, "25738" on host threads
            pids, tids = self._ids("pid", rows), self._ids("tid", rows)
            keys = [
                f"{DEVICE_KINDS[k]}:{a}:{_thread_id(b)}"
                for k, a, b in zip(kind.tolist(), pids, tids, strict=True)
            ]
            local, uniques = pd.factorize(np.asarray(keys, dtype=object))
            labels = list(uniques)
        table = np.fromiter((streams.code(s) for s in labels), dtype=np.int32, count=len(labels))
        return table[local]

    def _ids(self, key: str, rows: np.ndarray) -> list[Any]:
        """pid or tid of ``rows`` as written (numbers as ints, others as their text)."""
        col = self._columns.columns
        texts = np.asarray(self._columns.labels[key] + [""], dtype=object)
        values = np.where(col[f"{key}_label"][rows] >= 0, texts[col[f"{key}_label"][rows]], col[key][rows])
        nulls = self._problems.get(key)
        if nulls:  # a missing or null id reads "None", as Python writes it
            events = self._event(rows)
            for i in np.flatnonzero(np.isin(events, np.fromiter(nulls, np.int64, len(nulls)))).tolist():
                if nulls[int(events[i])] is None:
                    values[i] = None
        return values.tolist()

    def _sizes(self, rows: np.ndarray, canonical: list[str]) -> None:
        """The arguments of copies and communication calls (only they carry sizes)."""
        c = self._columns
        names = c.labels["name"]
        wanted = _table(
            names,
            lambda v: (
                NCCL_KERNEL.match(v) is not None or v == RPC or v.startswith(("gloo:", *HOST_COMM_PREFIXES))
            ),
        )
        copy = _table(canonical, lambda v: v in COPY_CATS)[c.columns["cat"][rows]]
        sized = wanted[c.columns["name"][rows]] | copy
        self._args_readable(rows[sized])
        notes = self._problems.get("bytes", {})
        with_args = set(c.comm_rows.tolist())
        # a copy whose only argument is a readable "bytes" (most of a GPU trace's sized events):
        # its size straight from the column, without an argument object each
        plain = copy & ~np.isin(rows, np.fromiter(c.comm, np.int64, len(c.comm)))
        if notes:
            plain &= ~np.isin(self._event(rows), np.fromiter(notes, np.int64, len(notes)))
        self.copy_rows = np.flatnonzero(plain)
        self.copy_bytes = c.columns["bytes"][rows[plain]]
        self.comm: list[CommArgs] = []
        picked = np.flatnonzero(sized & ~plain)
        chosen = rows[picked]
        # Python scalars for the loop: numpy's scalar indexing per event costs more than the rest
        each = zip(
            picked.tolist(),
            chosen.tolist(),
            self._event(chosen).tolist(),
            c.columns["bytes"][chosen].tolist(),
            strict=True,
        )
        for i, row, index, size in each:
            args = dict(c.comm.get(row, ()))
            if index in notes:
                args["bytes"] = notes[index]
            elif size == size:  # not NaN
                args["bytes"] = size
            if not args and row not in with_args:
                continue
            info = CommArgs(i, args)
            field = info.oversized() if row in c.comm or index in notes else None
            if field:
                raise self.error(
                    f"event {self._name(index)} has args {field!r} = {str(args[field])[:20]}... "
                    f"({len(str(args[field]))} digits); expected a count that fits 64 bits",
                    event=index,
                )
            self.comm.append(info)

    def _memory(self, ph_labels: list[str]) -> None:
        """The allocator's ``[memory]`` instant events (``profile_memory=True``), checked."""
        c = self._columns
        memory = c.memory
        rows = memory["row"]
        instant = c.columns["ph"][rows] == (ph_labels.index("i") if "i" in ph_labels else -1)
        rows = rows[instant]
        ts = c.columns["ts"][rows]
        values = {k: memory[k][instant] for k in MEMORY_ARGS}
        bad = np.isnan(ts) | np.isnan(values["Device Type"]) | np.isnan(values["Bytes"])
        for field in ("ts", "args", *MEMORY_ARGS):
            found = self._problems.get(field)
            if found:
                bad |= np.isin(self._event(rows), np.fromiter(found, np.int64, len(found)))
        if bad.any():
            index = int(self._event(rows[np.flatnonzero(bad)[0]]))
            raise self.error(f"memory event {str(self._raw(index))[:80]!r}: {_MEMORY_MESSAGE}", event=index)
        self.memory = {"ts": ts, **values}

    def _threads(self, ph_labels: list[str]) -> None:
        """Thread names (``thread_name`` metadata) by ``pid:tid``."""
        c = self._columns
        self.threads: dict[str, str] = {}
        names = c.labels["name"]
        if "M" not in ph_labels or "thread_name" not in names:
            return
        rows = np.flatnonzero(
            (c.columns["ph"] == ph_labels.index("M")) & (c.columns["name"] == names.index("thread_name"))
        )
        pids, tids = self._ids("pid", rows), self._ids("tid", rows)
        for row, pid, tid in zip(rows.tolist(), pids, tids, strict=True):
            name = c.meta_args.get(row, {}).get("name")
            if name is not None:
                self.threads[f"{pid}:{tid}"] = str(name)
        self._tensorflow(ph_labels)

    def _tensorflow(self, ph_labels: list[str]) -> None:
        """TensorFlow's profiler writes Chrome traces too: processes named "/host:CPU" and
        "/device:GPU:0", events without a category. Read as PyTorch's they are all 'other', which
        the breakdown counts as idle: say so."""
        c = self._columns
        names = c.labels["name"]
        categories = c.labels["cat"]
        if "process_name" not in names or any(categories[k] for k in np.unique(c.columns["cat"]).tolist()):
            return
        rows = np.flatnonzero(
            (c.columns["ph"] == ph_labels.index("M")) & (c.columns["name"] == names.index("process_name"))
        )
        processes = [str(c.meta_args.get(r, {}).get("name", "")) for r in rows.tolist()]
        tensorflow = [p for p in processes if re.match(r"^/(?:host|device|job):", p)]
        if tensorflow:
            self.foreign = "TensorFlow"
            warnings.warn(
                f"{self.path}: a TensorFlow profiler trace (processes {', '.join(tensorflow[:3])}"
                f"{' ...' if len(tensorflow) > 3 else ''}), read as PyTorch's: its events carry no "
                "PyTorch category, so they count as 'other' and the breakdown shows their time as idle",
                stacklevel=6,
            )

    # -- rank --------------------------------------------------------------------------------

    def identify(self) -> None:
        """Rank, world size and backend from distributedInfo (else rank from the name, later)."""
        info = self.meta.get("distributedInfo")
        if isinstance(info, dict):
            self.rank = _opt_int(info.get("rank"), self, "distributedInfo.rank")
            self.world_size = _opt_int(info.get("world_size"), self, "distributedInfo.world_size")
            backend = info.get("backend")
            self.backend = str(backend) if backend is not None else None
        elif info is not None:
            raise self.error(
                f"distributedInfo is {type(info).__name__}; expected a JSON object with rank and world_size"
            )


def carries_sizes(name: str) -> bool:
    """Does an event of this name carry sizes (an NCCL kernel, a host communication call, gloo)?"""
    return (
        NCCL_KERNEL.match(name) is not None or name == RPC or name.startswith(("gloo:", *HOST_COMM_PREFIXES))
    )


def _recode(codes: np.ndarray, values: list[str], labels: Labels) -> np.ndarray:
    """A file's string codes as codes into the set's ``labels`` (only the strings used get one)."""
    table = np.full(len(values) + 1, -1, dtype=np.int32)
    for code in np.unique(codes).tolist():
        table[code] = labels.code(values[code])
    return table[codes]


def _thread_id(tid: Any) -> Any:
    """A row id as Kineto writes it today: "stream 7" -> 7 (2021 releases wrote the label)."""
    if isinstance(tid, str):
        text = tid.removeprefix("stream ").strip()
        return int(text) if text.lstrip("-").isdigit() else tid
    return tid


def _opt_int(value: Any, file: RankFile, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise file.error(f"{field} is {value!r}; expected a non-negative integer")
    return value
