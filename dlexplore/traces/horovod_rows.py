"""A Horovod timeline's decoded columns -> the rows :class:`~.horovod_builder.Builder` would make.

Split from :mod:`.horovod` (stage 2 of its reading, in columns). The builder follows the file
event by event in Python (about 2 µs an event); here the same state comes from whole columns:
ranges are paired with their ends per tensor by depth (a clamped running sum of ``B`` +1 / ``E``
-1), operations are counted and their kinds carried forward per tensor (pandas group-wise
cumulative sums and forward fills), fused operations are the runs of same-named operation starts
that the builder groups. Anything the builder would name as an error, or that the columns cannot
tell apart (a ``null`` where a string belongs, a missing ``pid``, a range that ends before it
began, an unreadable ``shape``), returns None: the builder then reads the file and names it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .horovod_builder import ACTIVITY, MARKER, NEGOTIATION, OP, OPERATIONS, TICK, Builder, tensor_bytes
from .horovod_builder import _finite_number as finite_number
from .horovod_decode import HorovodColumns
from .kineto_columns import NO_INT

__all__ = ["rows_from_columns"]

# Phase classes.
_M, _B, _E, _X, _I, _SKIP, _UNSURE = range(7)
_CLASS = {"M": _M, "B": _B, "E": _E, "X": _X, "i": _I, "I": _I, "": _UNSURE}  # others: _SKIP
_NEGOTIATE = "NEGOTIATE_"


def rows_from_columns(columns: HorovodColumns, path: Path, fusion_offset: int) -> Builder | None:
    """A :class:`Builder` holding the rows of ``columns`` (ready for :meth:`Builder.finish`), or
    None where the builder must read the file itself (module docstring)."""
    col = columns.columns
    ph_labels, names = columns.labels["ph"], columns.labels["name"]
    classes = np.asarray([_CLASS.get(p, _SKIP) for p in ph_labels] or [_SKIP], np.int8)
    cls = classes[col["ph"]]
    pid, ts, dur, name = col["pid"], col["ts"], col["dur"], col["name"]
    row = np.isin(classes, (_B, _X, _I))[col["ph"]]  # a gather by phase code, not a test per class
    if _UNSURE in classes or not _columns_can_tell(classes, col["ph"], row, pid, ts, dur, name, names):
        return None
    builder = Builder(path, fusion_offset)
    if not _metadata(builder, columns, cls):
        return None
    is_op_name = np.fromiter((n in OPERATIONS for n in names), bool, len(names))
    is_negotiation = np.fromiter((n.startswith(_NEGOTIATE) for n in names), bool, len(names))
    if not len(names):
        is_op_name = is_negotiation = np.zeros(1, bool)

    rows = np.flatnonzero(row)
    del row
    if len(cls) < 2**31:
        rows = rows.astype(np.int32)  # half the bytes of every gather and search by row
    rcls, rname, rpid = cls[rows], name[rows], pid[rows]
    kind = _kinds(rcls, rname, is_op_name, is_negotiation)
    is_op = kind == OP
    ops, op_of_row = _operations(names, rname, kind)
    fusion = _fusions(cls, name, pid, is_op_name, rows, is_op, fusion_offset)
    k, current_op, current_fusion = _per_tensor(kind, rpid, op_of_row, fusion)
    # where each operation (its negotiation, if there was one) began, per tensor
    began = is_op | (kind == NEGOTIATION)
    firsts = pd.DataFrame({"pid": rpid[began], "k": k[began], "ts": ts[rows[began]]})
    del began
    occurrence = k  # in place: k is not needed again
    occurrence[kind == ACTIVITY] -= 1
    np.maximum(occurrence, 0, out=occurrence)
    occurrence[kind == MARKER] = -1
    start = ts[rows]
    end = np.full(len(rows), np.nan)
    ticks = rcls == _X
    end[ticks] = start[ticks] + np.nan_to_num(dur)  # dur: the X events', in order
    del ticks
    end[rcls == _I] = start[rcls == _I]
    del rcls
    if not _pair_ranges(builder, columns, cls, rows, kind, occurrence, start, end):
        return None

    # the rows' names in order of first use (as the builder codes them), from the names' codes
    label, used = pd.factorize(rname) if len(rows) else (np.zeros(0, np.int64), [])
    del rname, rows
    builder.pid = np.where(kind == MARKER, -1, rpid).astype(np.int64, copy=False)
    builder.label = np.asarray(label, dtype=np.int64)
    del label
    builder.labels = [names[c] for c in used]
    builder.label_codes = {v: i for i, v in enumerate(builder.labels)}
    builder.kind = kind
    builder.start, builder.end = start, end
    builder.occurrence = occurrence
    op = current_op  # in place, as k above
    named = is_op | (kind == NEGOTIATION)
    op[named] = op_of_row[named]
    op[kind == MARKER] = 0
    builder.op = op
    del op_of_row, named
    active = current_fusion  # in place
    active[kind != ACTIVITY] = -1
    active[is_op] = fusion[is_op]
    builder.fusion = active
    builder.ops = ops
    builder.op_codes = {v: i for i, v in enumerate(ops)}
    op_pids = rpid[is_op]
    del rpid
    counted = pd.Series(op_pids).value_counts(sort=False) if len(op_pids) else pd.Series(dtype=np.int64)
    builder.count = {int(p): int(c) for p, c in counted.items()}
    firsts = firsts.drop_duplicates(["pid", "k"]).sort_values(["pid", "k"], kind="stable")
    builder.occurrence_start = {int(p): part["ts"].tolist() for p, part in firsts.groupby("pid", sort=False)}
    builder.markers = ts[cls == _I]
    builder.fusion_id = fusion_offset - 1 + (len(np.unique(fusion[is_op])) if is_op.any() else 0)
    skipped = [ph_labels[c] for c in col["ph"][cls == _SKIP].tolist()]
    builder.skipped = {p: skipped.count(p) for p in dict.fromkeys(skipped)}
    builder.seen = len(cls)
    return builder


def _kinds(
    rcls: np.ndarray, rname: np.ndarray, is_op_name: np.ndarray, is_negotiation: np.ndarray
) -> np.ndarray:
    """Each row's kind, by precedence: markers, ticks, operations, negotiations, other activities."""
    kind = np.full(len(rcls), ACTIVITY, np.int8)
    kind[is_negotiation[rname]] = NEGOTIATION
    kind[is_op_name[rname]] = OP
    kind[rcls == _X] = TICK
    kind[rcls == _I] = MARKER
    return kind


def _per_tensor(
    kind: np.ndarray, rpid: np.ndarray, op_of_row: np.ndarray, fusion: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tensor, at each row: the operations started before it (k), and the latest operation's
    code and fusion (0 and -1 before the first)."""
    tensor = kind != MARKER
    is_op = kind == OP
    k = np.zeros(len(kind), np.int64)
    current_op = np.zeros(len(kind), np.int64)
    current_fusion = np.full(len(kind), -1, np.int64)
    if tensor.any():
        groups = _Groups(rpid[tensor])
        started = is_op[tensor].astype(np.int64)
        k[tensor] = groups.cumsum(started) - started
        del started
        named = is_op | (kind == NEGOTIATION)
        current_op[tensor] = groups.ffill(np.where(named, op_of_row, -1)[tensor], 0)
        current_fusion[tensor] = groups.ffill(np.where(is_op, fusion, -1)[tensor], -1)
    return k, current_op, current_fusion


def _columns_can_tell(
    classes: np.ndarray,
    ph: np.ndarray,
    row: np.ndarray,
    pid: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    name: np.ndarray,
    names: list[str],
) -> bool:
    """False where the builder must read the file (module docstring): a time that is missing or out
    of range, a range without its ``pid``, a row without a name, a bad tick (``classes``: the class
    of each phase code ``ph`` holds)."""
    bad = ~(np.abs(ts) < 2.0**63)  # NaN too; metadata need no time
    if bad.any() and (bad & (classes != _M)[ph]).any():
        return False
    missing = pid == NO_INT  # a marker needs no pid
    if missing.any() and (missing & np.isin(classes, (_B, _E, _X))[ph]).any():
        return False
    if "" in names and ((name == names.index("")) & row).any():
        return False
    ticks = dur  # the X events' only
    return not (np.isnan(ticks).any() or (ticks < 0).any() or (ticks >= 2.0**63).any())


def _metadata(builder: Builder, columns: HorovodColumns, cls: np.ndarray) -> bool:
    """Tensor names and the start time from ``process_name`` metadata; False if one is odd."""
    names = columns.labels["name"]
    if "process_name" not in names:
        return True
    pid = columns.columns["pid"]
    rows = np.flatnonzero((cls == _M) & (columns.columns["name"] == names.index("process_name")))
    for i, code in zip(rows.tolist(), columns.args_of(rows).tolist(), strict=True):
        args = columns.arg_values[code] if code >= 0 else None
        if not isinstance(args, dict):
            continue
        if "name" in args:
            if pid[i] == NO_INT:
                return False
            builder.tensor_names[int(pid[i])] = str(args["name"])
        elif "start_time_since_epoch_in_micros" in args:
            value = args["start_time_since_epoch_in_micros"]
            if not finite_number(value):
                return False
            builder.start_epoch = float(value) * 1e-6
    return True


def _operations(names: list[str], rname: np.ndarray, kind: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The operation names (lower case, "" first, in order of first use) and each row's code."""
    named = np.flatnonzero((kind == OP) | (kind == NEGOTIATION))
    # each (name, kind) once: a name's code times 2 plus whether the row is a negotiation
    pair = rname[named].astype(np.int64) * 2 + (kind[named] == NEGOTIATION)
    pairs, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    text = [
        names[c >> 1][len(_NEGOTIATE) :].lower() if c & 1 else names[c >> 1].lower() for c in pairs.tolist()
    ]
    ops = list(dict.fromkeys(["", *(text[j] for j in np.argsort(first).tolist())]))  # in order of use
    index = {v: i for i, v in enumerate(ops)}
    codes = np.zeros(len(rname), np.int64)
    codes[named] = np.array([index[t] for t in text], np.int64).reshape(-1)[inverse.reshape(-1)]
    return ops, codes


def _fusions(cls, name, pid, is_op_name, rows, is_op, fusion_offset) -> np.ndarray:
    """Fusion id of every operation row (-1 elsewhere): a run of operation starts of one name with
    nothing else between them (metadata and ignored phases aside) is one fused operation, until a
    tensor repeats (as :meth:`Builder.add` groups them)."""
    out = np.full(len(rows), -1, np.int64)
    if not is_op.any():
        return out
    rel = np.flatnonzero((cls != _M) & (cls != _SKIP))
    rel_op = (cls[rel] == _B) & is_op_name[name[rel]]
    same = np.zeros(len(rel), bool)
    same[1:] = rel_op[1:] & rel_op[:-1] & (name[rel][1:] == name[rel][:-1])
    events = rel[rel_op]
    new = ~same[rel_op]
    run = np.cumsum(new) - 1
    tensors = pid[events]
    order = np.lexsort((tensors, run))
    repeat = (run[order][1:] == run[order][:-1]) & (tensors[order][1:] == tensors[order][:-1])
    for r in np.unique(run[order][1:][repeat]).tolist():  # rare: a tensor twice in a run
        members = np.flatnonzero(run == r)
        seen: set[int] = set()
        for j in members.tolist():
            if tensors[j] in seen:
                new[j] = True
                seen = set()
            seen.add(int(tensors[j]))
    out[is_op] = fusion_offset + np.cumsum(new) - 1
    return out


def _pair_ranges(builder, columns, cls, rows, kind, occurrence, start, end) -> bool:
    """Each range's end from its ``E`` (per tensor, the innermost open range), the sizes from the
    operations' ``E`` args, and the ``E`` events with no range open; False if one is odd.

    Worked in the order of a stable sort by tensor (file order within each), with the narrowest
    integers that hold the values: at 100 MB of JSON this is 1.5 million events, and each int64
    array of them costs 12 MB."""
    col = columns.columns
    events = np.flatnonzero((cls == _B) | (cls == _E))
    if not len(events):
        return True
    wide = np.int32 if len(cls) < 2**31 else np.int64  # event indices, depths and running sums
    pids = _narrow(col["pid"][events])
    order = np.argsort(pids, kind="stable")  # a radix sort where the pids fit in 16 bits
    events = events.astype(wide)[order]  # by tensor, then place in the file
    pids = pids[order]
    del order
    first = np.ones(len(events), bool)
    first[1:] = pids[1:] != pids[:-1]
    del pids
    step = np.where(cls[events] == _B, np.int8(1), np.int8(-1))
    depth = _group_depth(step, first, wide)  # open ranges after each event, per tensor
    before = np.empty_like(depth)  # ... and before it (an E with none open changes nothing)
    before[0] = 0
    before[1:] = depth[:-1]
    before[first] = 0
    unmatched = (step < 0) & (before == 0)
    builder.unmatched_end = int(unmatched.sum())
    level = np.where(step > 0, depth, before)
    del depth, before
    group = np.cumsum(first, dtype=wide) - 1
    del first
    # by tensor, then level, then place in the file: a range's B, then its E
    width, groups = int(level.max()) + 1, int(group[-1]) + 1
    if groups * width >= 2**63:  # pragma: no cover - needs 2**31 events; the key would wrap
        return False
    key = group.astype(np.int64) * width + level
    del group, level
    keep = ~unmatched
    events, step, key = events[keep], step[keep], key[keep]
    del keep, unmatched
    order = _stable_order(key)
    events, step, key = events[order], step[order], key[order]
    del order
    pair = (step[:-1] > 0) & (step[1:] < 0) & (key[:-1] == key[1:])
    del key, step
    begins, ends = events[:-1][pair], events[1:][pair]
    del events, pair
    row_of = np.empty(len(cls), rows.dtype)  # event -> its row, a gather where a search was
    row_of[rows] = np.arange(len(rows), dtype=rows.dtype)
    row_of = row_of[begins]
    ts = col["ts"]
    if (ts[ends] < start[row_of]).any():
        return False
    end[row_of] = ts[ends]
    op = kind[row_of] == OP
    op_ends, op_rows = ends[op], row_of[op]
    order = np.argsort(op_ends, kind="stable")  # sizes in the order of their E events
    op_ends, op_rows = op_ends[order], op_rows[order]
    sized = _sizes(columns.arg_values, columns.args_of(op_ends))
    if sized is None:
        return False
    builder.size_arrays = (col["pid"][op_ends], occurrence[op_rows], *sized)
    return True


def _group_depth(step: np.ndarray, first: np.ndarray, dtype: type) -> np.ndarray:
    """The running sum of ``step`` (+1/-1) within each group (runs that ``first`` starts), clamped
    at 0 (a step below 0 is ignored), as ``dtype``."""
    total = np.cumsum(step, dtype=dtype)
    starts = np.flatnonzero(first)
    base = np.zeros(len(starts), dtype)
    base[1:] = total[starts[1:] - 1]
    total -= np.repeat(base, np.diff(np.append(starts, len(step))))
    del base
    if total.min() >= 0:  # no group's sum goes below 0: nothing to clamp (the usual file)
        return total
    # minus the group's running minimum of min(sum, 0); each later group pushed far below the
    # earlier ones (in int64: groups x spread < 2**63 for fewer than 2**31 events), so that no
    # minimum crosses over
    spread = 2 * (len(step) + 1)
    offset = (np.cumsum(first, dtype=np.int64) - 1) * spread
    low = np.minimum(total, 0).astype(np.int64) - offset
    np.minimum.accumulate(low, out=low)
    low += offset
    del offset
    return (total - low).astype(dtype)


def _sizes(values: list, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """Bytes, dtype codes and dtype names ("" first, then in order of first use) of operations'
    ``E`` args (codes into ``values``, -1 for none), each distinct args read once by
    :func:`tensor_bytes`; None where one cannot be read (the builder names it)."""
    used, first = np.unique(codes, return_index=True)
    used = used[np.argsort(first)]  # in order of first use, as the builder meets them
    try:
        read = [tensor_bytes(values[c] if c >= 0 else None) for c in used.tolist()]
    except (ValueError, TypeError):
        return None
    dtypes = list(dict.fromkeys(["", *(dtype for _, dtype in read)]))
    at = np.zeros(len(values) + 1, np.int64)  # code -> place in ``used`` (-1 at the end)
    at[used] = np.arange(len(used))
    place = at[codes]
    size = np.array([b for b, _ in read], np.float64).reshape(-1)
    dtype_codes = np.array([dtypes.index(d) for _, d in read], np.int64).reshape(-1)
    return size[place], dtype_codes[place], dtypes


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``, as a radix sort where the keys fit in 16 bits (tensor
    indices and nesting levels do): O(n), where a merge sort of int64 is O(n log n)."""
    return np.argsort(_narrow(keys), kind="stable")


def _narrow(keys: np.ndarray) -> np.ndarray:
    """``keys`` as uint16 where they fit (equal where equal, in the same order), else as they are."""
    if len(keys) and keys.min() >= 0 and keys.max() < 1 << 16:
        return keys.astype(np.uint16)
    return keys


class _Groups:
    """Group-wise running sums and forward fills over values in file order, grouped by tensor (as
    pandas' groupby does, with one stable sort shared by all of them)."""

    def __init__(self, keys: np.ndarray):
        keys = _narrow(keys)
        self.order = np.argsort(keys, kind="stable")
        ordered = keys[self.order]
        self.first = np.ones(len(ordered), bool)
        self.first[1:] = ordered[1:] != ordered[:-1]
        self.start = np.maximum.accumulate(np.where(self.first, np.arange(len(ordered)), 0))

    def _back(self, values: np.ndarray) -> np.ndarray:
        out = np.empty_like(values)
        out[self.order] = values
        return out

    def cumsum(self, values: np.ndarray) -> np.ndarray:
        total = np.cumsum(values[self.order])
        base = np.where(self.start > 0, total[self.start - 1], 0)
        return self._back(total - base)

    def ffill(self, values: np.ndarray, fill: int) -> np.ndarray:
        """The latest value >= 0 at or before each place in its group, else ``fill``."""
        v = values[self.order]
        latest = np.maximum.accumulate(np.where(v >= 0, np.arange(len(v)), -1))
        found = latest >= self.start
        return self._back(np.where(found, v[np.maximum(latest, 0)], fill))
