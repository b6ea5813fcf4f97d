"""Communication in Kineto traces: which collective each NCCL kernel ran, its size, group and peer.

Where PyTorch writes these facts depends on its version, so they are gathered from every event that
may hold them, on the assembled columns of the whole trace (one pass, after parsing):

1. the kernel's own arguments: recent Kineto copies the ``record_param_comms`` arguments onto the
   NCCL kernel it launched (``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``dtype``,
   ``Group size``, ``Process Group Name``, ``Process Group Ranks``, ``Src Rank``/``Dst Rank``);
2. the host operations around the kernel's **launch** (the ``cuda_runtime`` event with the same
   ``correlation``) on the launching thread, innermost first: ``record_param_comms`` with a
   collective name, then ``nccl:<collective>`` annotations, then ``c10d::<op>`` dispatcher ops. So a
   kernel named only ``ncclDevKernel_Generic`` (NCCL >= 2.19), or a ``ncclKernel_SendRecv`` that
   NCCL ran for an all-to-all or a reduce-scatter, takes the collective the program asked for;
3. a ``record_param_comms`` with the kernel's ``External id``, then the remaining
   ``record_param_comms`` of the rank in order (only when the counts agree).

**Message size** (``bytes``), as nccl-tests counts it (the larger of the input and output
buffers): ``max(In msg nelems, Out msg nelems) x dtype size`` when the arguments say; otherwise the
largest tensor among the linked host operations' ``Input Dims`` x ``Input type`` (traces recorded
with ``record_shapes=True``: ``c10d::_allgather_base_`` lists its gathered output,
``nccl:all_reduce`` its buffer). **Peer** (global rank at the other end of a ``send``/``recv``):
``Dst Rank``/``Src Rank``, else ``Rank`` (the peer's rank in the group) mapped through ``Process
Group Ranks``. gloo collectives (``gloo:*`` annotations, which do the work on CPU) take their size
from ``Input Dims`` x ``Input type``, times the group size for allgather and gather.

Kept whole: the three sources above are tried in order for each kernel and each fills the gaps the
one before left; they share the launch index and the per-rank groups, which are built once here.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

from .schema import CATEGORIES, COLLECTIVES, normalize_collective_name

__all__ = ["DTYPE_BYTES", "CommArgs", "Labels", "CommColumns", "resolve_communication", "HOST_COMM_PREFIXES"]

#: Bytes per element for the dtype names in traces: c10 ScalarType names (``record_param_comms``'s
#: ``dtype``) and C++ type names (``Input type`` with ``record_shapes=True``).
DTYPE_BYTES: dict[str, int] = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long": 8,
    "int64_t": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
}

RPC = "record_param_comms"
#: Host-side names of communication calls (their events are category communication, collective "").
HOST_COMM_PREFIXES = ("c10d::", "c10d_functional::", "_c10d_functional::", "nccl:")
_COLL_INDEX = {c: i + 1 for i, c in enumerate(COLLECTIVES)}  # code 0 is ""
_ENCLOSING_LOOKBACK = 32  # host comm ops examined before a launch, latest first


class Labels:
    """Interns strings to int codes (the categorical columns of the event table)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: Any) -> int:
        text = "" if value is None else value if isinstance(value, str) else str(value)
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.values)
            self.values.append(text)
        return code

    def encode(self, values: list[Any]) -> np.ndarray:
        """int32 codes of ``values`` (hashing each distinct value once per call)."""
        array = np.fromiter(values, dtype=object, count=len(values))  # never 2-D, whatever the values
        local, uniques = pd.factorize(array, use_na_sentinel=True)
        table = np.fromiter((self.code(u) for u in uniques), dtype=np.int32, count=len(uniques))
        table = np.append(table, np.int32(self.code("")))  # code -1 (None) -> ""
        return table[local]

    def table(self, test) -> np.ndarray:
        """Boolean per code: ``test(value)``."""
        return np.fromiter((bool(test(v)) for v in self.values), dtype=bool, count=len(self.values))


class CommArgs:
    """The arguments of one event that may describe communication or a copy."""

    __slots__ = (
        "row",
        "bytes",
        "collective",
        "in_nelems",
        "out_nelems",
        "dtype",
        "group_size",
        "group",
        "group_ranks",
        "dims",
        "types",
        "src",
        "dst",
        "peer_rank",
        "blank",
    )

    def __init__(self, row: int, args: dict[str, Any]):
        self.row = row
        self.blank = not args  # says nothing but where it is: its name may still name a collective
        if not args:  # a call without these arguments (its presence still counts)
            self.bytes = self.collective = self.in_nelems = self.out_nelems = self.dtype = None
            self.group_size = self.group = self.group_ranks = self.dims = self.types = None
            self.src = self.dst = self.peer_rank = None
            return
        get = args.get
        self.bytes = get("bytes")
        self.collective = get("Collective name")
        self.in_nelems = get("In msg nelems")
        self.out_nelems = get("Out msg nelems")
        self.dtype = get("dtype")
        self.group_size = get("Group size")
        self.group = get("Process Group Name")
        self.group_ranks = get("Process Group Ranks")
        self.dims = get("Input Dims")
        self.types = get("Input type")
        self.src = get("Src Rank")
        self.dst = get("Dst Rank")
        self.peer_rank = get("Rank")

    #: Arguments read as counts: an integer beyond 64 bits would overflow the int64 and float64
    #: columns (silently, or deep inside numpy), so it is refused where the event is known.
    _COUNTS = {
        "bytes": "bytes",
        "in_nelems": "In msg nelems",
        "out_nelems": "Out msg nelems",
        "group_size": "Group size",
        "src": "Src Rank",
        "dst": "Dst Rank",
        "peer_rank": "Rank",
    }

    def oversized(self) -> str | None:
        """The name of the first count argument that does not fit 64 bits, or None."""
        for attribute, key in self._COUNTS.items():
            value = getattr(self, attribute)
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                return key
        return None

    def collective_name(self) -> str:
        return normalize_collective_name(str(self.collective)) if self.collective is not None else ""


_NO_ARGS = CommArgs(-1, {})  # a host op without arguments (its name may still say the collective)


@dataclass
class CommColumns:
    """The columns :func:`resolve_communication` fills in, one entry per event."""

    nbytes: np.ndarray
    group_size: np.ndarray  # int64, -1 unknown
    peer: np.ndarray  # int64, -1 unknown
    dtype: np.ndarray  # int32 codes into dtypes
    group: np.ndarray  # int32 codes into groups
    dtypes: Labels = field(default_factory=Labels)
    groups: Labels = field(default_factory=Labels)

    @classmethod
    def empty(cls, n: int) -> CommColumns:
        columns = cls(
            np.full(n, np.nan),
            np.full(n, -1, np.int64),
            np.full(n, -1, np.int64),
            np.zeros(n, np.int32),
            np.zeros(n, np.int32),
        )
        columns.dtypes.code("")
        columns.groups.code("")
        return columns

    def describe(self, row: int, info: CommArgs, collective: str) -> None:
        """Group size, dtype, group name and peer of ``row`` from ``info`` (where it says)."""
        size = _integer(info.group_size)
        if size is not None:
            self.group_size[row] = size
        if info.dtype is not None:
            self.dtype[row] = self.dtypes.code(info.dtype)
        if info.group is not None:
            self.group[row] = self.groups.code(info.group)
        peer = _peer(info, collective)
        if peer is not None:
            self.peer[row] = peer


def _integer(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _peer(info: CommArgs, collective: str) -> int | None:
    """The global rank at the other end of a send (its destination) or recv (its source)."""
    if collective not in ("send", "recv"):
        return None
    direct = _integer(info.dst if collective == "send" else info.src)
    if direct is not None and direct >= 0:
        return direct
    local = _integer(info.peer_rank)
    ranks = info.group_ranks
    if isinstance(ranks, str):
        try:
            ranks = json.loads(ranks)
        except ValueError:
            ranks = None
    if local is not None and isinstance(ranks, list) and 0 <= local < len(ranks):
        return _integer(ranks[local])
    return None


def number(value: Any) -> float:
    """A JSON value as a float (NaN when it is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(value)
        except (TypeError, ValueError):
            return math.nan
    return float(value)


def message_bytes(info: CommArgs) -> float:
    """nccl-tests' message size: the larger buffer, elements x dtype size (NaN if unknown)."""
    if info.dtype is None:
        return math.nan
    size = DTYPE_BYTES.get(str(info.dtype))
    counts = [c for c in (number(info.in_nelems), number(info.out_nelems)) if not math.isnan(c)]
    if size is None or not counts:
        return math.nan
    return max(counts) * size


def _elements(dims: Any) -> float:
    """Elements of one ``Input Dims`` entry: a shape, or a list of shapes (a TensorList)."""
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims):
        return sum(_elements(d) for d in dims)
    if isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return float(np.prod(dims)) if dims else 1.0
    return math.nan


def _tensor_bytes(info: CommArgs) -> list[float]:
    """Bytes of each tensor in ``Input Dims`` x ``Input type`` (scalars and unknown types left out)."""
    if not isinstance(info.dims, list) or not isinstance(info.types, list):
        return []
    sizes = []
    for dims, dtype in zip(info.dims, info.types, strict=False):
        size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        if size is None or not isinstance(dims, list) or not dims:
            continue
        elements = _elements(dims)
        if not math.isnan(elements):
            sizes.append(elements * size)
    return sizes


def gloo_bytes(info: CommArgs, collective: str, group_size: int) -> float:
    """Bytes of a gloo collective from its ``Input Dims`` x ``Input type`` (NaN without shapes)."""
    if not isinstance(info.dims, list) or not isinstance(info.types, list):
        return math.nan
    total, counted = 0.0, False
    for dims, dtype in zip(info.dims, info.types, strict=False):
        size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        elements = _elements(dims)
        if size is None or math.isnan(elements):
            continue
        total += elements * size
        counted = True
    if not counted:
        return math.nan
    return total * group_size if collective in ("allgather", "gather") else total


@dataclass
class EventColumns:
    """The assembled columns :func:`resolve_communication` reads (one entry per event)."""

    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    category: np.ndarray  # int codes into CATEGORIES
    collective: np.ndarray  # int codes into ("",) + COLLECTIVES; updated in place
    name: np.ndarray
    names: Labels
    cat: np.ndarray
    cats: Labels
    stream: np.ndarray
    on_device: np.ndarray  # bool
    corr: np.ndarray
    ext: np.ndarray


def resolve_communication(
    columns: EventColumns,
    infos: Iterable[CommArgs],
    *,
    kernel_cats: frozenset,
    runtime_cats: frozenset,
    copy_cats: frozenset,
    world_size: int,
    copies: tuple[np.ndarray, np.ndarray] | None = None,
) -> CommColumns:
    """Sizes of copies and the collective, size, group and peer of communication events (module
    docstring). ``infos`` are the arguments kept while reading, ``row`` in the assembled order;
    ``copies``: rows and bytes of the copies whose size is all their arguments say."""
    n = len(columns.rank)
    out = CommColumns.empty(n)
    if copies is not None:
        out.nbytes[copies[0]] = copies[1]
    comm = columns.category == CATEGORIES.index("communication")
    kernels = comm & columns.cats.table(lambda c: c in kernel_cats)[columns.cat] if n else comm
    by_row: dict[int, CommArgs] = {}
    infos = list(infos)
    rows = np.fromiter((info.row for info in infos), np.int64, len(infos))
    # what each info's row is, as Python scalars (numpy's scalar indexing is the loop's main cost)
    is_copy = columns.cats.table(lambda c: c in copy_cats)[columns.cat[rows]].tolist()
    name_kind = [1 if v.startswith("gloo:") else 2 if v == RPC else 0 for v in columns.names.values]
    facts = zip(
        infos,
        rows.tolist(),
        is_copy,
        columns.name[rows].tolist(),
        comm[rows].tolist(),
        columns.collective[rows].tolist(),
        strict=True,
    )
    for info, row, copy, name, communication, collective_code in facts:
        if copy:
            out.nbytes[row] = number(info.bytes)
            continue
        by_row[row] = info
        kind = name_kind[name]
        if communication and kind == 1 and collective_code > 0:
            collective = COLLECTIVES[collective_code - 1]
            out.nbytes[row] = gloo_bytes(info, collective, world_size)
            dtype = info.types[0] if isinstance(info.types, list) and info.types else None
            if isinstance(dtype, str):
                out.dtype[row] = out.dtypes.code(dtype)
        elif kind == 2:
            out.describe(row, info, info.collective_name())
    done = np.zeros(n, dtype=bool)
    for row in np.flatnonzero(kernels).tolist():
        info = by_row.get(row)
        if info is not None and info.collective_name():
            _apply(out, columns, row, [(row, info)])
            done[row] = True
    _link_by_launch(out, columns, kernels & ~done, by_row, runtime_cats, done)
    _link_by_order(out, columns, kernels & ~done, by_row)
    return out


def _collective_of(columns: EventColumns, row: int, info: CommArgs) -> str:
    """The collective an event names: its ``Collective name`` argument, else a host op's name."""
    if info.collective is not None:
        return info.collective_name()
    name = columns.names.values[columns.name[row]]
    if name.startswith(HOST_COMM_PREFIXES):
        return normalize_collective_name(name.split(":")[-1])
    return ""


def _apply(out: CommColumns, columns: EventColumns, row: int, sources: list[tuple[int, CommArgs]]) -> None:
    """Fill ``row`` from its linked sources (``(row, args)``), the most specific first."""
    named = [(info, _collective_of(columns, r, info)) for r, info in sources]
    collective = next((c for _, c in named if c), "")
    if not collective:
        collective = COLLECTIVES[columns.collective[row] - 1] if columns.collective[row] else ""
    if collective:
        columns.collective[row] = _COLL_INDEX[collective]
    agreeing = [info for info, c in named if c in (collective, "") and not info.blank]
    nbytes = next((b for s in agreeing if not math.isnan(b := message_bytes(s))), math.nan)
    if math.isnan(nbytes):
        tensors = [b for s in agreeing for b in _tensor_bytes(s)]
        if tensors:
            nbytes = max(tensors)
    out.nbytes[row] = nbytes
    for source in reversed(agreeing):  # the most specific source's facts last, so they win
        out.describe(row, source, collective)


@dataclass
class _HostOps:
    """The host communication ops of one thread, sorted by start (Python lists: read one at a time)."""

    rows: list[int]
    starts: list[float]
    ends: list[float]
    priorities: list[int]
    rpc: frozenset[int]  # the rows of record_param_comms (priority 0)


def _host_sources(columns: EventColumns, by_row: dict[int, CommArgs]) -> dict[tuple[int, int], _HostOps]:
    """Host communication ops per (rank, stream)."""
    names = columns.names.values
    priority_of_name = np.array([_priority(v) for v in names] or [-1], dtype=np.int8)
    priority = priority_of_name[columns.name] if len(columns.name) else np.zeros(0, np.int8)
    rows = np.flatnonzero((priority >= 0) & ~columns.on_device)
    groups: dict[tuple[int, int], _HostOps] = {}
    if not len(rows):
        return groups
    frame = pd.DataFrame(
        {
            "row": rows,
            "rank": columns.rank[rows],
            "stream": columns.stream[rows],
            "start": columns.start[rows],
        }
    ).sort_values("start", kind="stable")
    for (rank, stream), part in frame.groupby(["rank", "stream"], sort=False):
        r = part["row"].to_numpy()
        rows_list, priorities = r.tolist(), priority[r].tolist()
        rpc = frozenset(row for row, p in zip(rows_list, priorities, strict=True) if p == 0)
        groups[(int(rank), int(stream))] = _HostOps(
            rows_list, columns.start[r].tolist(), columns.end[r].tolist(), priorities, rpc
        )
    return groups


def _priority(name: str) -> int:
    """Which host op describes a collective best: record_param_comms 0, nccl:* 1, c10d 2; -1 none."""
    if name == RPC:
        return 0
    if name.startswith("nccl:"):
        return 1
    if name.startswith(HOST_COMM_PREFIXES):
        return 2
    return -1


def _link_by_launch(
    out: CommColumns,
    columns: EventColumns,
    pending: np.ndarray,
    by_row: dict[int, CommArgs],
    runtime_cats: frozenset,
    done: np.ndarray,
) -> None:
    """Kernels described by the host ops that enclose their launch (module docstring, 2)."""
    rows = np.flatnonzero(pending)
    if not len(rows):
        return
    runtime = columns.cats.table(lambda c: c in runtime_cats)[columns.cat] & (columns.corr >= 0)
    launches = np.flatnonzero(runtime)
    index = pd.MultiIndex.from_arrays([columns.rank[launches], columns.corr[launches]])
    key = pd.Series(launches, index=index)
    key = key[~key.index.duplicated()]
    found = key.reindex(pd.MultiIndex.from_arrays([columns.rank[rows], columns.corr[rows]])).to_numpy()
    sources = _host_sources(columns, by_row)
    linked = found == found  # NaN: no launch event
    rows, launch = rows[linked].tolist(), found[linked].astype(np.int64)
    # per kernel, Python scalars: numpy's scalar indexing costs more than the searches themselves
    places = zip(
        rows,
        columns.rank[launch].tolist(),
        columns.stream[launch].tolist(),
        columns.start[launch].tolist(),
        columns.end[launch].tolist(),
        strict=True,
    )
    for row, rank, stream, start, end in places:
        group = sources.get((rank, stream))
        if group is None:
            continue
        enclosing = _enclosing(group, start, end)
        if not enclosing:
            continue
        chosen = [
            (r, by_row.get(r, _NO_ARGS)) for _, r in sorted(enclosing, key=_PRIORITY)
        ]  # by priority, innermost first within
        chosen = [(r, info) for r, info in chosen if r not in group.rpc or info.collective_name()]
        # (a record_param_comms without a collective: "wait", "barrier")
        if own := by_row.get(row):
            chosen.insert(0, (row, own))
        if chosen:
            _apply(out, columns, row, chosen)
            done[row] = True


_PRIORITY = itemgetter(0)


def _enclosing(group: _HostOps, start: float, end: float) -> list[tuple[int, int]]:
    """(priority, row) of the host comm ops that enclose [start, end], innermost first."""
    last = bisect_right(group.starts, start)
    ends, rows, priorities = group.ends, group.rows, group.priorities
    return [
        (priorities[i], rows[i])
        for i in range(last - 1, max(last - 1 - _ENCLOSING_LOOKBACK, -1), -1)
        if ends[i] >= end
    ]


def _link_by_order(
    out: CommColumns, columns: EventColumns, pending: np.ndarray, by_row: dict[int, CommArgs]
) -> None:
    """The rest: the record_param_comms with the kernel's External id, else the same position."""
    rows = np.flatnonzero(pending)
    rpc = {r: i for r, i in by_row.items() if columns.names.values[columns.name[r]] == RPC}
    if not len(rows) or not rpc:
        return
    by_ext = {(int(columns.rank[r]), int(columns.ext[r])): r for r in rpc if columns.ext[r] >= 0}
    used: set[int] = set()
    left = []
    for row in rows.tolist():
        ext = int(columns.ext[row])
        source = by_ext.get((int(columns.rank[row]), ext)) if ext >= 0 else None
        if source is None:
            left.append(row)
            continue
        _apply(out, columns, row, [(source, rpc[source])])
        used.add(source)
    for r in np.unique(columns.rank[left]).tolist() if left else []:
        kernels = sorted((row for row in left if columns.rank[row] == r), key=lambda row: columns.start[row])
        sources = sorted(
            (
                s
                for s, info in rpc.items()
                if columns.rank[s] == r and s not in used and info.collective_name()
            ),
            key=lambda s: columns.start[s],
        )
        if len(kernels) != len(sources):
            continue  # no safe pairing
        for row, source in zip(kernels, sources, strict=True):
            name = rpc[source].collective_name()
            if columns.collective[row] and columns.collective[row] != _COLL_INDEX.get(name):
                continue
            _apply(out, columns, row, [(source, rpc[source])])
