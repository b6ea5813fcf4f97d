"""A Horovod timeline's events -> rows of the event table, one event at a time (the reference).

Split from :mod:`.horovod` (stage 2 of its reading). :class:`Builder` follows the timeline as
Horovod wrote it, event after event: ranges opened and closed per tensor, operations counted,
fused operations grouped, every odd event named. :mod:`.horovod_rows` fills the same state from
columns at C speed when the file is sound; this module stays the reference for every value and
the reader of any file that needs an event named (``tests/test_traces_horovod.py`` compares them).
:meth:`Builder.finish` makes the table from that state in both cases.

Kept whole: the builder's state (open ranges, operation counts, fusion groups, sizes) is read and
written by every method here; the columnar path fills the same attributes, so one class keeps both
honest.
"""

from __future__ import annotations

import math
import warnings
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputFileError
from .events import storable_labels
from .horovod_infer import infer_steps, instant_ticks, markers_out_of_order, world_size
from .horovod_json import locate
from .schema import make_events, normalize_collective_name

__all__ = ["Builder", "OPERATIONS", "tensor_bytes", "category_of"]

#: Response types (horovod/common/message.cc ``Response::ResponseType_Name``): the outer range
#: of an operation.
OPERATIONS = frozenset(
    {"ALLREDUCE", "ALLGATHER", "BROADCAST", "REDUCESCATTER", "JOIN", "ADASUM", "ALLTOALL", "BARRIER", "ERROR"}
)
_TRANSFER_PREFIXES = ("NCCL_", "MPI_", "GLOO_", "CCL_", "DDL_", "SYCL_")
#: horovod/common/message.cc ``DataType_Name`` -> bytes per element.
_ITEMSIZE = {
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "bool": 1,
}
_US = 1e-6  # s per µs
# Row kinds.
MARKER, TICK, OP, NEGOTIATION, ACTIVITY = range(5)
_CATEGORIES = ["annotation", "other", "memcpy", "communication"]
_ANNOTATION, _OTHER, _MEMCPY, _COMMUNICATION = range(4)


def category_of(name: str) -> int:
    """The category code of an activity (module docstring's table)."""
    if name.startswith("MEMCPY_") or name == "COPY_ALLGATHER_OUTPUT":
        return _MEMCPY
    if name.startswith(_TRANSFER_PREFIXES) and normalize_collective_name(name):
        return _COMMUNICATION
    return _OTHER


def tensor_bytes(args: Any) -> tuple[float, str]:
    """Bytes and dtype from an operation's ``E`` args (``{"dtype": ..., "shape": "[a, b]"}``)."""
    if not isinstance(args, dict) or "shape" not in args:
        return np.nan, ""
    dtype = str(args.get("dtype", ""))
    shape = str(args["shape"]).strip()
    inner = shape[1:-1].strip()
    dims = [dim.strip() for dim in inner.split(",")] if inner else []
    if not (shape.startswith("[") and shape.endswith("]")) or not all(d.isdigit() for d in dims):
        raise ValueError(f'shape {shape!r} is not a list of sizes like "[10, 64]"')
    elements = 1
    for dim in dims:
        elements *= int(dim)
    itemsize = _ITEMSIZE.get(dtype)
    if itemsize and elements * itemsize >= 2**1023:  # the caller reports the ValueError with the event
        raise ValueError(f"shape {shape!r} is too large to be a tensor's")
    return (float(elements * itemsize) if itemsize else np.nan), dtype


def _finite_number(value: object) -> bool:
    """A JSON number that is a finite float (not a bool, a string, nan or an int beyond 2**1024)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


class Builder:
    """Rows of the schema from one file's events, in compact arrays (µs until :meth:`finish`)."""

    def __init__(self, path: Path, fusion_offset: int):
        self.path = path
        self.pid = array("q")  # -1 for markers
        self.label = array("q")  # code into self.labels
        self.kind = array("b")
        self.start = array("d")  # µs
        self.end = array("d")  # µs; NaN while open
        self.occurrence = array("q")  # which operation of its tensor the row belongs to
        self.op = array("q")  # code into self.ops
        self.fusion = array("q")  # -1 for none
        self.labels: list[str] = []
        self.label_codes: dict[str, int] = {}
        self.ops: list[str] = [""]
        self.op_codes: dict[str, int] = {"": 0}
        self.tensor_names: dict[int, str] = {}
        self.open_ranges: dict[int, list[int]] = {}
        self.count: dict[int, int] = {}  # operations started per pid
        self.current_op: dict[int, int] = {}
        self.current_fusion: dict[int, int] = {}
        self.sizes: dict[tuple[int, int], tuple[float, str]] = {}
        #: the same as arrays (pids, occurrences, bytes, dtype codes, dtype names), where the
        #: columnar path (:mod:`.horovod_rows`) made them
        self.size_arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]] | None = None
        self.occurrence_start: dict[int, list[float]] = {}
        self.markers: Any = []  # µs: a list here, a float64 array where horovod_rows fills it
        self.start_epoch: float | None = None
        self.seen = 0
        self.unmatched_end = 0
        self.skipped: dict[str, int] = {}
        self.group_name: str | None = None
        self.group_pids: set[int] = set()
        self.fusion_offset = fusion_offset
        self.fusion_id = fusion_offset - 1

    def fail(self, index: int, message: str) -> InputFileError:
        where, line = locate(self.path, index)
        return InputFileError(self.path, f"event #{index} at {where}: {message}", line=line)

    def code(self, label: str) -> int:
        code = self.label_codes.get(label)
        if code is None:
            code = self.label_codes[label] = len(self.labels)
            self.labels.append(label)
        return code

    def op_code(self, op: str) -> int:
        code = self.op_codes.get(op)
        if code is None:
            code = self.op_codes[op] = len(self.ops)
            self.ops.append(op)
        return code

    def row(
        self, pid: int, label: str, kind: int, ts: float, end: float, occurrence: int, op: int, fusion: int
    ) -> int:
        self.pid.append(pid)
        self.label.append(self.code(label))
        self.kind.append(kind)
        self.start.append(ts)
        self.end.append(end)
        self.occurrence.append(occurrence)
        self.op.append(op)
        self.fusion.append(fusion)
        return len(self.start) - 1

    def add(self, events: list[Any]) -> None:
        """Turn a chunk of events into rows (the file's events in order, chunk after chunk)."""
        # Kept whole: the body runs once per event (about 2 µs each); a call per check would add
        # about a third, and each check names the event from the same local state.
        count, open_ranges, current_op = self.count, self.open_ranges, self.current_op
        nan = float("nan")
        for index, event in enumerate(events, start=self.seen):
            if type(event) is not dict:
                raise self.fail(index, f"is {type(event).__name__}; expected a trace event object")
            ph = event.get("ph")
            if ph == "M":
                self.metadata(event, index)
                continue
            if type(ph) is not str:
                raise self.fail(
                    index, f"'ph' is {ph!r}; expected the event's phase ('B', 'E', 'X', 'i' or 'M')"
                )
            ts = event.get("ts")
            if type(ts) is not int and type(ts) is not float:
                raise self.fail(index, f"'ts' is {ts!r}; expected the time in µs (a number)")
            if type(ts) is int and not -(2**63) <= ts < 2**63:
                raise self.fail(index, f"'ts' is {ts}; expected the time in µs (within 64 bits)")
            if ph == "E":
                self.group_name = None
                pid = self.pid_of(event, index)
                stack = open_ranges.get(pid)
                if not stack:
                    self.unmatched_end += 1
                    continue
                row = stack.pop()
                if ts < self.start[row]:
                    raise self.fail(
                        index,
                        f"ends at {ts} µs, before its range began at "
                        f"{self.start[row]:.0f} µs; expected 'ts' not to go back in time",
                    )
                self.end[row] = ts
                if self.kind[row] == OP:
                    try:
                        self.sizes[(pid, self.occurrence[row])] = tensor_bytes(event.get("args"))
                    except ValueError as err:
                        raise self.fail(
                            index, f'{err}; expected args {{"dtype": ..., "shape": "[...]"}}'
                        ) from None
                continue
            if ph == "i" or ph == "I":
                self.group_name = None
                self.markers.append(ts)
                self.row(-1, str(event.get("name", "")), MARKER, ts, ts, -1, 0, -1)
                continue
            if ph != "B" and ph != "X":
                self.skipped[str(ph)] = self.skipped.get(str(ph), 0) + 1
                continue
            pid = self.pid_of(event, index)
            label = event.get("name")
            if type(label) is not str:
                raise self.fail(index, f"'name' is {label!r}; expected the activity's name (a string)")
            if ph == "X":
                self.group_name = None
                dur = event.get("dur", 0)
                if (type(dur) is not int and type(dur) is not float) or not 0 <= dur < 2**63:
                    raise self.fail(index, f"'dur' is {dur!r}; expected a duration in µs >= 0")
                self.row(pid, label, TICK, ts, ts + dur, count.get(pid, 0), current_op.get(pid, 0), -1)
                continue
            k = count.get(pid, 0)
            if label in OPERATIONS:
                op = current_op[pid] = self.op_code(label.lower())
                count[pid] = k + 1
                # Horovod's PerformOperation starts every tensor of one response back to back: a run
                # of operation B events with one name is one (fused) operation.
                if self.group_name != label or pid in self.group_pids:
                    self.fusion_id += 1
                    self.group_pids = set()
                self.group_name = label
                self.group_pids.add(pid)
                self.current_fusion[pid] = self.fusion_id
                row = self.row(pid, label, OP, ts, nan, k, op, self.fusion_id)
                self.first_start(pid, k, ts)
            elif label.startswith("NEGOTIATE_"):
                self.group_name = None
                op = current_op[pid] = self.op_code(label[len("NEGOTIATE_") :].lower())
                row = self.row(pid, label, NEGOTIATION, ts, nan, k, op, -1)
                self.first_start(pid, k, ts)
            else:
                self.group_name = None
                row = self.row(
                    pid,
                    label,
                    ACTIVITY,
                    ts,
                    nan,
                    k - 1 if k else 0,
                    current_op.get(pid, 0),
                    self.current_fusion.get(pid, -1),
                )
            stack = open_ranges.get(pid)
            if stack is None:
                stack = open_ranges[pid] = []
            stack.append(row)
        self.seen += len(events)

    def metadata(self, event: dict, index: int) -> None:
        args = event.get("args")
        if event.get("name") != "process_name" or not isinstance(args, dict):
            return
        if "name" in args:
            self.tensor_names[self.pid_of(event, index)] = str(args["name"])
        elif "start_time_since_epoch_in_micros" in args:
            value = args["start_time_since_epoch_in_micros"]
            if not _finite_number(value):
                raise self.fail(
                    index,
                    f"'start_time_since_epoch_in_micros' is {str(value)[:40]!r}; "
                    "expected a number of µs since the epoch",
                )
            self.start_epoch = float(value) * _US

    def pid_of(self, event: dict, index: int) -> int:
        pid = event.get("pid")
        if type(pid) is not int or not -(2**63) <= pid < 2**63:
            raise self.fail(index, f"'pid' is {pid!r}; expected the tensor's index (a 64-bit integer)")
        return pid

    def first_start(self, pid: int, k: int, ts: float) -> None:
        """Remember where operation ``k`` of ``pid`` began (its negotiation, if there was one)."""
        firsts = self.occurrence_start.get(pid)
        if firsts is None:
            firsts = self.occurrence_start[pid] = []
        if len(firsts) <= k:
            firsts.append(ts)

    def finish(self, rank: int, steps: str | None) -> tuple[pd.DataFrame, dict[str, Any]]:
        """The event table of this file, and what the file says about itself; the last call (the
        builder's rows are let go while the table is built)."""
        start = np.frombuffer(self.start, dtype=np.float64) * _US
        end = np.frombuffer(self.end, dtype=np.float64) * _US
        keep = ~np.isnan(end)
        if not keep.any():
            raise InputFileError(
                self.path,
                "holds no trace events, only metadata or ranges never "
                "closed; expected the ranges of at least one negotiation or operation",
            )
        self.warn_about_leftovers(keep)
        pid = np.frombuffer(self.pid, dtype=np.int64)
        label = np.frombuffer(self.label, dtype=np.int64)
        kind = np.frombuffer(self.kind, dtype=np.int8)
        occurrence = np.frombuffer(self.occurrence, dtype=np.int64)
        fusion = np.frombuffer(self.fusion, dtype=np.int64)
        n = len(start)

        # codes in the narrowest integers: each full-length int64 array is 8 bytes a row at the peak
        label_category = np.array([category_of(lab) for lab in self.labels], dtype=np.int8)
        category = np.where(kind == NEGOTIATION, np.int8(_OTHER), np.int8(_ANNOTATION))
        category = np.where(kind == ACTIVITY, label_category[label], category)
        # The operation, its transfers and its copies move the tensor; waits and negotiations do not.
        carries = (kind == OP) | (category == _MEMCPY) | (category == _COMMUNICATION)
        size, dtype_codes, dtypes = self._sizes(pid, occurrence, carries)
        fusion_bytes = self._fusion_bytes((kind == OP) & keep, fusion, size)
        op = np.frombuffer(self.op, dtype=np.int64)
        step = (
            infer_steps(self.path, start, self.occurrence_start, self.ops, pid, kind == OP, op, occurrence)
            if steps == "auto"
            else np.full(n, -1)
        )
        markers_out_of_order(self.path, np.flatnonzero(kind == MARKER), start, step)
        cycle = np.full(n, -1)
        if len(self.markers):
            cycle = np.searchsorted(np.sort(np.array(self.markers) * _US), start, side="right") - 1
        ready = np.array(
            [int(lab) if lab.isascii() and lab.isdigit() and len(lab) < 19 else -1 for lab in self.labels],
            dtype=np.int64,
        )
        ready_rank = np.where(kind == TICK, ready[label], -1)

        pids, stream_codes = _ranks(pid)
        streams = [self.tensor_names.get(int(p), f"pid {p}") if p >= 0 else "cycles" for p in pids]
        collective, collective_names = self._collectives(label, label_category, category)

        details = {
            "open_ranges_dropped": int((~keep).sum()),
            "tensors": len(self.tensor_names),
            "start_time_since_epoch": self.start_epoch,
            # the highest rank seen ready + 1: the job's size where a closed negotiation has ticks
            "world_size_at_least": int(ready_rank.max()) + 1 if (ready_rank >= 0).any() else None,
            "world_size": world_size(self.path, ready_rank, pid, (kind == NEGOTIATION) & keep, occurrence),
            "fusions": self.fusion_id + 1 - self.fusion_offset,
        }
        instant_ticks(self.path, kind == TICK, start, end)
        end -= start  # the duration, in place
        full = {
            "stream": (stream_codes, streams),
            "name": (label, self.labels),
            "category": (category, _CATEGORIES),
            "start": start,
            "duration": end,
            "bytes": size,
            "collective": (collective, collective_names),
            "step": step,
            "op": (np.frombuffer(self.op, dtype=np.int64), self.ops),
            "fusion": fusion,
            "fusion_bytes": fusion_bytes,
            "ready_rank": ready_rank,
            "cycle": cycle,
            "dtype": (dtype_codes, dtypes),
        }
        # only ``full`` holds the full-length arrays now, and the builder's rows go (it is spent:
        # finish is its last call): each array is let go as soon as its column is made
        del start, end, size, category, collective, step, cycle, ready_rank, fusion_bytes, stream_codes
        del pid, label, kind, occurrence, fusion, dtype_codes
        for name in ("pid", "label", "kind", "start", "end", "occurrence", "op", "fusion"):
            setattr(self, name, array({"kind": "b", "start": "d", "end": "d"}.get(name, "q")))
        return _table(rank, keep, full), details

    def _collectives(
        self, label: np.ndarray, label_category: np.ndarray, category: np.ndarray
    ) -> tuple[np.ndarray, list[str]]:
        """Each row's collective code (0 for none) into the returned names: transfers only."""
        collectives_of = [
            normalize_collective_name(lab) if c == _COMMUNICATION else ""
            for lab, c in zip(self.labels, label_category, strict=True)
        ]
        collective_names = list(dict.fromkeys(["", *collectives_of]))
        collective_code = np.array([collective_names.index(c) for c in collectives_of], dtype=np.int32)
        return np.where(category == _COMMUNICATION, collective_code[label], 0), collective_names

    def _sizes(
        self, pid: np.ndarray, occurrence: np.ndarray, carries: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Bytes (NaN where unknown) and dtype code of each row that moves its tensor, from the
        sizes the file gave per tensor and occurrence, and the dtype names."""
        n = len(pid)
        size = np.full(n, np.nan)
        dtype_codes = np.zeros(n, dtype=np.int32)
        pids, occurrences, values, dcodes, dtypes = self.size_arrays or self._size_arrays()
        mine = (occurrences >= 0) & (occurrences < 1 << 32)
        if not mine.any():
            return size, dtype_codes, dtypes
        pids, occurrences, values, dcodes = pids[mine], occurrences[mine], values[mine], dcodes[mine]
        # one int64 key per (tensor, occurrence): the tensor as its rank among the pids that have
        # sizes (a pid times 2**32 would wrap for pids from 2**31 on, which the file may hold)
        tensors = np.unique(pids)
        keys = np.searchsorted(tensors, pids) * (1 << 32) + occurrences
        # the last size given for a (tensor, occurrence) wins, as the dict of sizes did
        keys, last = np.unique(keys[::-1], return_index=True)
        values, dcodes = values[::-1][last], dcodes[::-1][last]
        rows = np.flatnonzero(carries & (pid >= 0) & (occurrence >= 0) & (occurrence < 1 << 32))
        tensor = np.minimum(np.searchsorted(tensors, pid[rows]), len(tensors) - 1)
        rows, tensor = rows[tensors[tensor] == pid[rows]], tensor[tensors[tensor] == pid[rows]]
        wanted = tensor * (1 << 32) + occurrence[rows]
        width = int(occurrences.max()) + 1
        if len(tensors) * width <= 2 * n + 4096:
            # a dense table of (tensor, occurrence) -> place in ``keys``: a gather, not a search
            table = np.full(len(tensors) * width, -1, np.int64)
            table[(keys >> 32) * width + (keys & 0xFFFFFFFF)] = np.arange(len(keys))
            inside = occurrence[rows] < width
            rows, wanted = rows[inside], wanted[inside]
            at = table[(wanted >> 32) * width + (wanted & 0xFFFFFFFF)]
            hit = at >= 0
        else:
            at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
            hit = keys[at] == wanted
        rows, at = rows[hit], at[hit]
        size[rows] = values[at]
        dtype_codes[rows] = dcodes[at]
        return size, dtype_codes, dtypes

    def _size_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """:attr:`sizes` as arrays: pids, occurrences, bytes, dtype codes, and the dtype names."""
        dtype_of = {d: i for i, d in enumerate(dict.fromkeys(["", *(d for _, d in self.sizes.values())]))}
        return (
            np.array([p for p, _ in self.sizes], dtype=np.int64),
            np.array([o for _, o in self.sizes], dtype=np.int64),
            np.array([b for b, _ in self.sizes.values()], dtype=np.float64),
            np.array([dtype_of[d] for _, d in self.sizes.values()], dtype=np.int64),
            list(dtype_of),
        )

    def _fusion_bytes(self, is_op: np.ndarray, fusion: np.ndarray, size: np.ndarray) -> np.ndarray:
        """The bytes of each fused operation: its tensors' sizes added up (NaN if any is unknown)."""
        fusion_bytes = np.full(len(fusion), np.nan)
        if is_op.any():
            local = fusion - self.fusion_offset
            width = int(local.max()) + 1
            totals = np.bincount(local[is_op], weights=size[is_op], minlength=width)
            present = np.bincount(local[is_op], minlength=width) > 0
            totals[~present] = np.nan
            has = fusion >= 0
            fusion_bytes[has] = totals[local[has]]
        return fusion_bytes

    def warn_about_leftovers(self, keep: np.ndarray) -> None:
        still_open = np.flatnonzero(~keep)
        if len(still_open):
            shown = sorted(
                {
                    f"{self.tensor_names.get(self.pid[r], self.pid[r])} ({self.labels[self.label[r]]})"
                    for r in still_open
                }
            )
            warnings.warn(
                f"{self.path}: {len(still_open)} range(s) still open at the end of the "
                "timeline, as Horovod leaves it while running or when killed; dropped: "
                + ", ".join(shown[:5])
                + (" ..." if len(shown) > 5 else ""),
                stacklevel=5,
            )
        if self.unmatched_end:
            warnings.warn(
                f"{self.path}: {self.unmatched_end} 'E' event(s) without an open range on "
                "their pid (a timeline started mid-operation); ignored",
                stacklevel=5,
            )
        if self.skipped:
            warnings.warn(
                f"{self.path}: events with phases Horovod does not write were ignored: "
                + ", ".join(f"{k!r} x{v}" for k, v in sorted(self.skipped.items())),
                stacklevel=5,
            )


def _table(rank: int, keep: np.ndarray, full: dict[str, Any]) -> pd.DataFrame:
    """The event table of the rows ``keep`` marks, in time order, from ``full`` (column -> the
    full-length array, or codes and their categories), emptied as the columns are made."""
    kept = np.flatnonzero(keep)
    start = full["start"]
    rows: Any = kept
    if np.any(np.diff(start[kept]) < 0):  # writer threads can interleave slightly
        rows = kept[np.argsort(start[kept], kind="stable")]
    elif len(kept) == len(start):
        rows = slice(None)  # every row, in order: views of the full-length arrays, not copies
    del start, kept
    columns: dict[str, Any] = {"rank": np.full(len(keep[rows]), rank, dtype=np.int32)}
    for name in list(full):
        value = full.pop(name)
        if isinstance(value, tuple):
            columns[name] = _categorical(value[0][rows], value[1])
        elif name in ("step", "fusion", "ready_rank", "cycle"):
            columns[name] = _nullable(value[rows])
        else:
            columns[name] = value[rows]
        del value
    return make_events(columns, copy=False)  # the columns are this table's alone


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values (sorted) and each value's place among them: by counting where the values
    are few small integers (tensor indices, -1 for markers), else by sorting."""
    if len(values) and values.min() >= -1 and values.max() < 2 * len(values):
        present = np.zeros(int(values.max()) + 2, bool)
        present[values + 1] = True
        place = np.cumsum(present) - 1
        return np.flatnonzero(present) - 1, place.astype(np.int32)[values + 1]
    distinct = np.unique(values)
    return distinct, np.searchsorted(distinct, values)


def _categorical(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    """A categorical from codes; categories that repeat (two pids, one name) are merged."""
    categories = storable_labels(categories)
    if len(set(categories)) == len(categories):
        return pd.Categorical.from_codes(codes, categories=categories)
    return pd.Categorical(np.asarray(categories, dtype=object)[codes])


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    """Int64 with <NA> where ``values`` is negative (the builder's "none")."""
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, values < 0)
