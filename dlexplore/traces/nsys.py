"""Nsight Systems SQLite exports (``nsys export --type sqlite report.nsys-rep``) -> :class:`Trace`.

Read with the standard library's :mod:`sqlite3`, read-only. The tables and columns are those of the
Nsight Systems "SQLite Schema Reference" (2026.4 release, export schema version 3.28.1). Only
columns that older exports share are required (``shortName``, ``demangledName`` and ``nameId`` are
ids into ``StringIds`` there too; kernel names stored as text, as in the oldest exports, are read
as they are); the optional ones (``globalPid``, ``correlationId``, ``domainId``) are used when
present:

====================================  =========================================================
table                                 events
====================================  =========================================================
``CUPTI_ACTIVITY_KIND_KERNEL``        GPU kernels on ``cuda:<deviceId>:<streamId>``; name from
                                      ``StringIds`` via ``shortName`` (``kernel_names="short"``)
                                      or ``demangledName``. NCCL kernels (``ncclKernel_*``,
                                      ``ncclDevKernel_*``, older ``nccl<Op>...Kernel_*``) are
                                      ``communication`` with their collective, others
                                      ``compute``.
``CUPTI_ACTIVITY_KIND_MEMCPY``        ``memcpy``, named as nsys names them: ``[CUDA memcpy
                                      <ENUM_CUDA_MEMCPY_OPER label>]``, ``bytes`` copied.
``CUPTI_ACTIVITY_KIND_MEMSET``        ``memset`` (``[CUDA memset]``), ``bytes`` set.
``CUPTI_ACTIVITY_KIND_RUNTIME``       CUDA runtime/driver calls (``runtime``) on
                                      ``cpu:<pid>:<tid>``, name from ``StringIds`` (``nameId``).
``NVTX_EVENTS``                       push/pop (``eventType`` 59) and start/end (60) ranges on
                                      ``cpu:<pid>:<tid>``, text from ``text`` or ``textId``.
                                      ``ProfilerStep#N``, ``step N``, ``iteration N`` ranges are
                                      ``step`` events (they set ``step``); others
                                      ``annotation``. Ranges in NCCL's own domain (``NCCL``,
                                      named by an ``NvtxDomainCreate`` event, 75) such as
                                      ``ncclAllReduce`` carry their ``collective``.
====================================  =========================================================

Times are the export's nanoseconds (on the report's session clock) in seconds. Extra columns:
``correlation`` (CUPTI correlation id; GPU work and the runtime call that launched it share it),
``domain`` (NVTX domain name), ``pid``.

Steps: every event of a rank gets the number of the step range that contains it; GPU work is
placed by the start of the runtime call that launched it (found through ``correlationId``), so
that a kernel that runs after its step's range has closed still counts for that step.

NCCL message sizes and ranks come from NCCL's NVTX payloads (NCCL 2.19 and later attach a binary
payload with a schema, e.g. ``Message size [bytes]`` on ``ncclAllReduce`` and ``Rank``, ``No. of
ranks`` on ``ncclCommInitRank``). nsys exports their fields only with ``nsys export
--dynamic-tables=all``, as tables ``DYNAMIC_NVTXPAYLOAD_DATATYPE_<globalPid>_<domainId>_<schemaId>``
joined to ``NVTX_EVENTS`` on ``eventId`` (field names through ``NVTX_EXPORT_TRANSLATION``); the
reader uses them when present: the range gets ``bytes``, and so do the NCCL kernels launched
inside it. Without them NCCL kernels have ``bytes`` NaN.

The rank of each process with GPU activity, first found of:

1. the ``ranks=`` option (one rank per file, in the order given);
2. the ``MPI_RANKS`` table (``nsys profile --trace=mpi``);
3. the ``Rank`` field of NCCL's ``ncclCommInitRank`` payload (dynamic tables, above), from the
   communicator with the most ranks;
4. the file name (``...rank3...``), with a warning;
5. the order of the files (and of the process ids within a file), with a warning.

nsys records no process environment in the export, so ``RANK``/``OMPI_COMM_WORLD_RANK`` cannot be
read; name the files by rank (``nsys profile -o report.rank%q{RANK}``) or pass ``ranks=``. Events
of processes without GPU activity (data-loader workers) belong to the file's rank when the file
holds one GPU process, and are dropped with a warning when it holds several.

MPI calls that nsys records (``--trace=mpi``: ranges in the ``MPI`` domain, e.g. ``MPI_Send``,
``MPI_Allreduce``) are ``communication`` with their collective (``send``, ``recv``, ``allreduce`` ...;
``MPI_Wait`` and the like with none), except set-up and queries (``MPI_Init``, ``MPI_Comm_rank``
...), which are ``annotation``. The rank of an MPI process is also read from the thread name nsys
gives it, ``MPI Rank <n>`` (table ``ThreadNames``).

Every problem is an :class:`~dlexplore.errors.InputFileError` naming the file and the table (and
column or row): not an SQLite file, a damaged one, a missing table or column, a kernel name id
missing from ``StringIds``.
"""

from __future__ import annotations

import re
import sqlite3
import warnings
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, InputFileError
from .schema import Trace, make_events, normalize_collective_name

__all__ = ["read", "NVTX_PUSH_POP", "NVTX_START_END", "NVTX_DOMAIN_CREATE"]

#: ``ENUM_NSYS_EVENT_TYPE`` ids used here (the same in every schema version published).
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75

_SQLITE_MAGIC = b"SQLite format 3\x00"
_GLOBAL_ID_SHIFT = 0x1000000  # globalTid = ... | pid << 24 | tid (nsys "Serialized GlobalId")
_NS = 1e-9  # s per ns

# CUPTI's CUpti_ActivityMemcpyKind, labelled as nsys labels them; used when the export lacks
# ENUM_CUDA_MEMCPY_OPER.
_MEMCPY_LABELS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
}
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_|^nccl[A-Z][A-Za-z]*Kernel")
_NCCL_API = re.compile(r"^nccl[A-Z]")
_STEP = re.compile(
    r"^(?:ProfilerStep#|step[\s_#:=-]*|iteration[\s_#:=-]*|iter[\s_#:=-]*)(\d+)$", re.IGNORECASE
)
_RANK_IN_NAME = re.compile(r"rank[\s_.\-]?(\d+)", re.IGNORECASE)
_MPI_THREAD = re.compile(r"^MPI Rank (\d+)$")
# MPI calls that set up or query rather than communicate (their time is not communication).
_MPI_SETUP = re.compile(
    r"^MPI_(?:Init|Init_thread|Initialized|Finalize|Finalized|Abort|Query_thread|Pcontrol|Wtime|Wtick|"
    r"Get_\w+|Comm_\w+|Group_\w+|Type_\w+|Op_\w+|Info_\w+|Errhandler_\w+|Error_\w+|Attr_\w+|"
    r"Keyval_\w+|Cart_\w+|Graph_\w+|Dims_create|Alloc_mem|Free_mem|Win_(?:create|allocate|free)\w*)$"
)
_DYNAMIC = re.compile(r"^DYNAMIC_NVTXPAYLOAD_DATATYPE_(\d+)_(\d+)_(\d+)$")

_REQUIRED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "bytes", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "bytes"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "nameId"),
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid"),
}


@dataclass
class _File:
    """What one export holds, before ranks are known."""

    path: Path
    events: pd.DataFrame  # schema columns except rank, plus "process" (globalPid >> 24)
    gpu_processes: list[int]
    mpi_ranks: dict[int, int] = field(default_factory=dict)
    nccl_ranks: dict[int, tuple[int, int]] = field(default_factory=dict)  # process -> (rank, nranks)
    meta: dict[str, Any] = field(default_factory=dict)


def read(
    paths: Sequence[Path],
    *,
    ranks: Sequence[int] | None = None,
    kernel_names: str = "short",
    runtime: bool = True,
    nvtx: bool = True,
) -> Trace:
    """Read Nsight Systems SQLite exports, one per rank or one holding several processes.

    ``ranks`` gives each file's rank (same order as ``paths``); ``kernel_names`` is ``"short"``
    (base names, ``shortName``) or ``"demangled"`` (with templates and arguments); ``runtime`` and
    ``nvtx`` keep CUDA runtime calls and NVTX ranges (steps and NCCL sizes need NVTX). Times in
    seconds; see the module docstring for the tables, ranks and steps.
    """
    if kernel_names not in ("short", "demangled"):
        raise DlexploreError(f"kernel_names must be 'short' or 'demangled', got {kernel_names!r}")
    paths = [Path(p) for p in paths]
    if ranks is not None and len(ranks) != len(paths):
        raise DlexploreError(f"ranks= gives {len(ranks)} ranks for {len(paths)} files; give one per file")
    files = [_read_file(p, kernel_names=kernel_names, runtime=runtime, nvtx=nvtx) for p in paths]
    rank_of = _assign_ranks(files, ranks)
    frames = []
    world = 0
    for f in files:
        events = f.events
        if not rank_of[f.path]:
            continue  # an export without events
        keep = events["process"].isin(list(rank_of[f.path]))
        lone = len(rank_of[f.path]) == 1
        if lone:
            only = next(iter(rank_of[f.path].values()))
            rank = np.full(len(events), only, dtype=np.int32)
        else:
            dropped = events.loc[~keep, "pid"].unique()
            if len(dropped):
                warnings.warn(
                    f"{f.path}: {int((~keep).sum())} events of processes without GPU activity "
                    f"(pid {', '.join(str(p) for p in sorted(dropped))}) dropped: the file holds "
                    "several GPU processes, so their rank is unknown",
                    stacklevel=3,
                )
            events = events[keep]
            rank = events["process"].map(rank_of[f.path]).to_numpy(dtype=np.int32)
        events = events.assign(rank=rank)
        frames.append(_assign_steps(events))
        world = max([world] + [n for _, n in f.nccl_ranks.values()])
    table = (
        pd.concat(frames, ignore_index=True)
        if frames
        else _assign_steps(_empty_part().assign(rank=np.zeros(0, dtype=np.int32), reference=np.zeros(0)))
    )
    table = table.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    columns = {
        name: table[name].to_numpy() if name != "step" else table[name].array
        for name in ("rank", "stream", "name", "category", "start", "duration", "bytes", "collective", "step")
    }
    for extra in ("correlation", "domain", "pid"):
        columns[extra] = table[extra].to_numpy() if extra == "domain" else table[extra].array
    events = make_events(columns)
    world_size = world or (int(events["rank"].max()) + 1 if len(events) else None)
    meta = {
        "files": {str(f.path): f.meta for f in files},
        "ranks": {str(f.path): {int(k): int(v) for k, v in rank_of[f.path].items()} for f in files},
    }
    return Trace(events, "nsys", tuple(str(p) for p in paths), world_size, meta)


# --- one file ----------------------------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    try:
        with open(path, "rb") as handle:
            magic = handle.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        raise InputFileError(path, "no such file; expected an Nsight Systems SQLite export") from None
    except OSError as err:
        raise InputFileError(
            path, f"cannot be read ({err}); expected an Nsight Systems SQLite export"
        ) from None
    if magic != _SQLITE_MAGIC:
        raise InputFileError(
            path,
            "is not an SQLite database (no 'SQLite format 3' header); expected the "
            "output of 'nsys export --type sqlite'",
        )
    # immutable=1: never write a journal next to the user's file, and read a read-only copy.
    uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True)


def _query(path: Path, db: sqlite3.Connection, sql: str, table: str) -> list[tuple]:
    try:
        return db.execute(sql).fetchall()
    except (sqlite3.DatabaseError, ValueError, OverflowError) as err:  # ValueError: text not UTF-8
        raise InputFileError(path, f"table {table}: {err} (a damaged or truncated export?)") from None


def _read_file(path: Path, *, kernel_names: str, runtime: bool, nvtx: bool) -> _File:
    with closing(_connect(path)) as db:
        listing = _query(path, db, "SELECT name FROM sqlite_master WHERE type = 'table'", "sqlite_master")
        columns = {}
        for (name,) in listing:
            info = _query(path, db, f'PRAGMA table_info("{name}")', name)
            columns[name] = [row[1] for row in info]
        known = [t for t in _REQUIRED if t in columns]
        if not known:
            raise InputFileError(
                path,
                "holds none of the tables CUPTI_ACTIVITY_KIND_KERNEL, "
                "CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_MEMCPY, "
                f"CUPTI_ACTIVITY_KIND_MEMSET, NVTX_EVENTS (it has {sorted(columns)[:8]}); "
                "expected an 'nsys export --type sqlite' file of a CUDA or NVTX trace",
            )
        for table in known:
            missing = [c for c in _REQUIRED[table] if c not in columns[table]]
            if missing:
                raise InputFileError(
                    path,
                    f"table {table} lacks the column(s) {missing}; expected the Nsight "
                    "Systems export schema (nsys 2021.5 or later)",
                )
        needs_strings = any(
            t in columns for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")
        )
        if needs_strings and "StringIds" not in columns:
            raise InputFileError(
                path,
                "table StringIds is missing, so kernel and CUDA call names (ids into "
                "it) cannot be read; expected a complete nsys export",
            )
        strings = _string_table(path, db) if "StringIds" in columns else {}
        parts = []
        if "CUPTI_ACTIVITY_KIND_KERNEL" in columns:
            parts.append(_kernels(path, db, columns["CUPTI_ACTIVITY_KIND_KERNEL"], kernel_names, strings))
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in columns:
            parts.append(_memcpy(path, db, columns))
        if "CUPTI_ACTIVITY_KIND_MEMSET" in columns:
            parts.append(_memset(path, db, columns["CUPTI_ACTIVITY_KIND_MEMSET"]))
        launches = None
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in columns:
            calls = _runtime(path, db, columns["CUPTI_ACTIVITY_KIND_RUNTIME"], strings)
            launches = calls[["process", "correlation", "start", "thread"]]
            if runtime:
                parts.append(calls)
        payloads = _payloads(path, db, columns)
        nccl_ranks: dict[int, tuple[int, int]] = {}
        if "NVTX_EVENTS" in columns and (nvtx or payloads):
            ranges, nccl_ranks = _nvtx(path, db, columns["NVTX_EVENTS"], payloads)
            if launches is not None:
                _sizes_to_kernels(parts, ranges, launches)
            if nvtx:
                parts.append(ranges)
        mpi = {}
        if "MPI_RANKS" in columns:
            rows = _query(path, db, "SELECT globalTid, rank FROM MPI_RANKS", "MPI_RANKS")
            mpi = {int(g) // _GLOBAL_ID_SHIFT: int(r) for g, r in rows if g is not None and r is not None}
        elif "ThreadNames" in columns and "StringIds" in columns:
            # nsys --trace=mpi names each process's main thread "MPI Rank <n>"
            rows = _query(
                path,
                db,
                "SELECT t.globalTid, s.value FROM ThreadNames AS t JOIN StringIds AS s "
                "ON s.id = t.nameId WHERE s.value LIKE 'MPI Rank %'",
                "ThreadNames",
            )
            mpi = {
                int(g) // _GLOBAL_ID_SHIFT: int(m.group(1))
                for g, v in rows
                if g is not None and (m := _MPI_THREAD.match(str(v)))
            }
        meta = _file_meta(path, db, columns)
    events = (
        pd.concat([p for p in parts if len(p)], ignore_index=True)
        if any(len(p) for p in parts)
        else _empty_part()
    )
    if events["process"].isna().any():
        # Exports without globalPid on GPU rows: one known process owns them, else a placeholder.
        known = events["process"].dropna().unique()
        events["process"] = events["process"].fillna(int(known[0]) if len(known) == 1 else -1)
        events["pid"] = events["process"] % _GLOBAL_ID_SHIFT
    if launches is not None and len(events):
        events = _launch_times(events, launches)
    else:
        events["reference"] = events["start"]
    gpu = events["on_gpu"].to_numpy(dtype=bool)
    gpu_processes = sorted(int(p) for p in events.loc[gpu, "process"].dropna().unique())
    if not gpu_processes:
        gpu_processes = sorted(int(p) for p in events["process"].dropna().unique())
    return _File(path, events, gpu_processes, mpi, nccl_ranks, meta)


def _empty_part() -> pd.DataFrame:
    return pd.DataFrame(
        {
            c: pd.Series(dtype=t)
            for c, t in (
                ("process", "Int64"),
                ("pid", "Int64"),
                ("thread", "Int64"),
                ("on_gpu", "bool"),
                ("stream", "object"),
                ("name", "object"),
                ("category", "object"),
                ("start", "float64"),
                ("duration", "float64"),
                ("bytes", "float64"),
                ("collective", "object"),
                ("correlation", "Int64"),
                ("domain", "object"),
                ("event_id", "Int64"),
            )
        }
    )


def _times(path: Path, table: str, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds from the export's nanoseconds: (start, duration)."""
    bad = np.flatnonzero(end < start)
    if len(bad):
        raise InputFileError(
            path,
            f"table {table}, row {int(bad[0]) + 1}: end {int(end[bad[0]])} ns is "
            f"before start {int(start[bad[0]])} ns",
        )
    return start * _NS, (end - start) * _NS


_NULL = -(2**63)  # stands for SQL NULL in integer arrays


def _ints(
    path: Path, db: sqlite3.Connection, table: str, columns: Sequence[str], nullable: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """Integer columns of ``table`` in row order, as int64 arrays (``_NULL`` where nullable and empty).

    Building int64 arrays straight from the rows keeps a million-kernel export to one pass and no
    Python objects per value; a value that is not an integer is an error naming row and column.
    """
    select = ", ".join(f'IFNULL("{c}", {_NULL})' for c in columns)
    rows = _query(path, db, f'SELECT {select} FROM "{table}" ORDER BY rowid', table)
    try:
        data = np.array(rows, dtype=np.int64).reshape(len(rows), len(columns))
    except (TypeError, ValueError, OverflowError):
        for number, row in enumerate(rows, start=1):
            for column, value in zip(columns, row, strict=True):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise InputFileError(
                        path, f"table {table}, row {number}: {column} is {value!r}; expected an integer"
                    ) from None
        raise
    out = {c: data[:, i] for i, c in enumerate(columns)}
    for column in columns:
        if column not in nullable:
            empty = np.flatnonzero(out[column] == _NULL)
            if len(empty):
                raise InputFileError(
                    path, f"table {table}, row {int(empty[0]) + 1}: {column} is empty; expected a value"
                )
    return out


def _strings(
    path: Path, db: sqlite3.Connection, table: str, column: str, ids: np.ndarray, strings: dict[int, str]
) -> np.ndarray:
    """Names for ids into StringIds (one lookup per distinct id); an unknown id is an error."""
    unique, inverse = np.unique(ids, return_inverse=True)
    values = np.empty(len(unique), dtype=object)
    for i, key in enumerate(unique):
        value = strings.get(int(key))
        if value is None:
            row = int(np.flatnonzero(ids == key)[0]) + 1
            raise InputFileError(
                path,
                f"table {table}, row {row}: {column} {int(key)} is not an id in StringIds; "
                "expected every name id to resolve",
            )
        values[i] = value
    return values[inverse]


def _optional(data: dict[str, np.ndarray], column: str, n: int) -> pd.arrays.IntegerArray:
    if column not in data:
        return pd.array([pd.NA] * n, dtype="Int64")
    values = data[column]
    return pd.arrays.IntegerArray(values, values == _NULL)


def _gpu_part(
    path: Path,
    table: str,
    data: dict[str, np.ndarray],
    names: np.ndarray,
    category: np.ndarray,
    collective: np.ndarray,
    nbytes: np.ndarray,
) -> pd.DataFrame:
    start, duration = _times(path, table, data["start"], data["end"])
    n = len(start)
    global_pid = _optional(data, "globalPid", n)
    process = global_pid // _GLOBAL_ID_SHIFT
    pairs = data["deviceId"] * (1 << 32) + data["streamId"]
    unique, inverse = np.unique(pairs, return_inverse=True)
    labels = np.array([f"cuda:{u >> 32}:{u & 0xFFFFFFFF}" for u in unique], dtype=object)
    return pd.DataFrame(
        {
            "process": process,
            "pid": process % _GLOBAL_ID_SHIFT,
            "thread": pd.array([pd.NA] * n, dtype="Int64"),
            "on_gpu": np.ones(n, dtype=bool),
            "stream": labels[inverse],
            "name": names,
            "category": category,
            "start": start,
            "duration": duration,
            "bytes": nbytes,
            "collective": collective,
            "correlation": _optional(data, "correlationId", n),
            "domain": np.full(n, "", dtype=object),
            "event_id": pd.array([pd.NA] * n, dtype="Int64"),
        }
    )


def _string_table(path: Path, db: sqlite3.Connection) -> dict[int, str]:
    rows = _query(path, db, "SELECT id, value FROM StringIds", "StringIds")
    return {int(i): str(v) for i, v in rows if isinstance(i, int)}  # a damaged row has no id


def _kernels(
    path: Path, db: sqlite3.Connection, have: list[str], kernel_names: str, strings: dict[int, str]
) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    order = ("shortName", "demangledName") if kernel_names == "short" else ("demangledName", "shortName")
    name_column = next((c for c in order if c in have), None)
    if name_column is None:
        raise InputFileError(
            path,
            f"table {table} has neither shortName nor demangledName; expected kernel "
            "names as ids into StringIds",
        )
    optional = [c for c in ("globalPid", "correlationId") if c in have]
    as_text = _query(
        path, db, f"SELECT COUNT(*) FROM {table} WHERE typeof(\"{name_column}\") = 'text'", table
    )
    if as_text[0][0]:  # exports before names moved to StringIds: the text itself
        data = _ints(path, db, table, ("start", "end", "deviceId", "streamId", *optional), optional)
        rows = _query(path, db, f'SELECT "{name_column}" FROM {table} ORDER BY rowid', table)
        names = np.empty(len(rows), dtype=object)
        for i, (value,) in enumerate(rows):
            names[i] = value if isinstance(value, str) else strings.get(value)
            if names[i] is None:
                raise InputFileError(
                    path, f"table {table}, row {i + 1}: {name_column} {value!r} is not an id in StringIds"
                )
    else:
        data = _ints(
            path, db, table, ("start", "end", "deviceId", "streamId", *optional, name_column), optional
        )
        names = _strings(path, db, table, name_column, data[name_column], strings)
    codes, unique = pd.factorize(names)
    unique = np.asarray(unique, dtype=object)
    # Classify each distinct name once: a million kernels have a few hundred names.
    nccl = np.array([bool(_NCCL_KERNEL.match(n)) for n in unique], dtype=bool)
    collective = np.array(
        [normalize_collective_name(n) if k else "" for n, k in zip(unique, nccl, strict=True)], dtype=object
    )
    category = np.where(nccl, "communication", "compute").astype(object)
    return _gpu_part(
        path, table, data, unique[codes], category[codes], collective[codes], np.full(len(codes), np.nan)
    )


def _memcpy(path: Path, db: sqlite3.Connection, columns: dict[str, list[str]]) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    optional = [c for c in ("globalPid", "correlationId") if c in columns[table]]
    data = _ints(
        path, db, table, ("start", "end", "deviceId", "streamId", *optional, "bytes", "copyKind"), optional
    )
    labels = dict(_MEMCPY_LABELS)
    if "ENUM_CUDA_MEMCPY_OPER" in columns and "label" in columns["ENUM_CUDA_MEMCPY_OPER"]:
        labels.update(
            {
                int(i): str(label)
                for i, label in _query(
                    path, db, "SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEMCPY_OPER"
                )
                if label and isinstance(i, int)  # a damaged row has no id
            }
        )
    kinds, inverse = np.unique(data["copyKind"], return_inverse=True)
    names = np.array([f"[CUDA memcpy {labels.get(int(k), f'kind {int(k)}')}]" for k in kinds], dtype=object)
    n = len(inverse)
    return _gpu_part(
        path,
        table,
        data,
        names[inverse],
        np.full(n, "memcpy", dtype=object),
        np.full(n, "", dtype=object),
        data["bytes"].astype(float),
    )


def _memset(path: Path, db: sqlite3.Connection, have: list[str]) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    optional = [c for c in ("globalPid", "correlationId") if c in have]
    data = _ints(path, db, table, ("start", "end", "deviceId", "streamId", *optional, "bytes"), optional)
    n = len(data["start"])
    return _gpu_part(
        path,
        table,
        data,
        np.full(n, "[CUDA memset]", dtype=object),
        np.full(n, "memset", dtype=object),
        np.full(n, "", dtype=object),
        data["bytes"].astype(float),
    )


def _cpu_part(
    data: dict[str, Any], names: np.ndarray, category: np.ndarray, start: np.ndarray, duration: np.ndarray
) -> pd.DataFrame:
    gtid = np.asarray(data["globalTid"], dtype=np.int64)
    unique, inverse = np.unique(gtid, return_inverse=True)
    labels = np.array(
        [f"cpu:{(g // _GLOBAL_ID_SHIFT) % _GLOBAL_ID_SHIFT}:{g % _GLOBAL_ID_SHIFT}" for g in unique],
        dtype=object,
    )
    n = len(gtid)
    return pd.DataFrame(
        {
            "process": pd.array(gtid // _GLOBAL_ID_SHIFT, dtype="Int64"),
            "pid": pd.array((gtid // _GLOBAL_ID_SHIFT) % _GLOBAL_ID_SHIFT, dtype="Int64"),
            "thread": pd.array(gtid, dtype="Int64"),
            "on_gpu": np.zeros(n, dtype=bool),
            "stream": labels[inverse],
            "name": names,
            "category": category,
            "start": start,
            "duration": duration,
            "bytes": np.full(n, np.nan),
            "collective": np.full(n, "", dtype=object),
            "correlation": _optional(data, "correlationId", n),
            "domain": np.full(n, "", dtype=object),
            "event_id": _optional(data, "eventId", n),
        }
    )


def _runtime(path: Path, db: sqlite3.Connection, have: list[str], strings: dict[int, str]) -> pd.DataFrame:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    optional = ["correlationId"] if "correlationId" in have else []
    data = _ints(path, db, table, ("start", "end", "globalTid", *optional, "nameId"), optional)
    names = _strings(path, db, table, "nameId", data["nameId"], strings)
    start, duration = _times(path, table, data["start"], data["end"])
    return _cpu_part(data, names, np.full(len(names), "runtime", dtype=object), start, duration)


def _nvtx(
    path: Path, db: sqlite3.Connection, have: list[str], payloads: dict[int, dict[str, float]]
) -> tuple[pd.DataFrame, dict[int, tuple[int, int]]]:
    table = "NVTX_EVENTS"
    if "text" not in have and "textId" not in have:
        raise InputFileError(path, f"table {table} has neither text nor textId; expected range names")
    text = "e.text" if "text" in have else "NULL"
    if "textId" in have:
        join, name = "LEFT JOIN StringIds AS s ON s.id = e.textId", f"COALESCE({text}, s.value)"
        if "StringIds" not in _tables(db):
            raise InputFileError(path, f"table {table} names ranges by textId but table StringIds is missing")
    else:
        join, name = "", text
    domain = "e.domainId" if "domainId" in have else "NULL"
    event_id = "e.eventId" if "eventId" in have else "e.rowid"
    rows = _query(
        path,
        db,
        f"SELECT e.start, e.end, e.eventType, e.globalTid, {domain}, {event_id}, {name} "
        f"FROM {table} AS e {join} WHERE e.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, "
        f"{NVTX_DOMAIN_CREATE}) ORDER BY e.rowid",
        table,
    )
    for row in rows:
        for column, value in zip(("start", "end", "eventType", "globalTid"), row[:4], strict=True):
            if not isinstance(value, int) and (value is not None or column in ("start", "eventType")):
                raise InputFileError(
                    path, f"table {table}, eventId {row[5]}: {column} is {value!r}; expected an integer"
                )
    frame = pd.DataFrame.from_records(
        rows, columns=["start", "end", "eventType", "globalTid", "domainId", "eventId", "name"]
    )
    created = frame["eventType"] == NVTX_DOMAIN_CREATE
    domains = {}
    for _, row in frame[created].iterrows():
        key = (
            None if pd.isna(row["globalTid"]) else int(row["globalTid"]) // _GLOBAL_ID_SHIFT,
            None if pd.isna(row["domainId"]) else int(row["domainId"]),
        )
        domains[key] = str(row["name"])
    ranges = frame[~created & frame["end"].notna() & frame["globalTid"].notna()].reset_index(drop=True)
    open_ranges = int((~created & frame["end"].isna()).sum())
    if open_ranges:
        warnings.warn(
            f"{path}: {open_ranges} NVTX ranges were never closed (no end) and are left out", stacklevel=4
        )
    if ranges["name"].isna().any():
        row = int(np.flatnonzero(ranges["name"].isna().to_numpy())[0])
        raise InputFileError(
            path,
            f"table {table}, eventId {ranges['eventId'].iloc[row]}: a range without a name "
            "(text empty and textId not in StringIds)",
        )
    start, duration = _times(
        path, table, ranges["start"].to_numpy(dtype=np.int64), ranges["end"].to_numpy(dtype=np.int64)
    )
    names = ranges["name"].astype(str).to_numpy(dtype=object)
    process = (ranges["globalTid"].astype("int64") // _GLOBAL_ID_SHIFT).to_numpy()
    domain_ids = ranges["domainId"].to_numpy()
    domain_names = np.array(
        [
            domains.get((int(p), None if pd.isna(d) else int(d)), "")
            for p, d in zip(process, domain_ids, strict=True)
        ],
        dtype=object,
    )
    nccl = (domain_names == "NCCL") | np.array([bool(_NCCL_API.match(n)) and not domains for n in names])
    # MPI calls that nsys's MPI interposition records (domain "MPI"): communication, except set-up
    mpi = (
        (domain_names == "MPI") | np.array([n.startswith("MPI_") and not domains for n in names], dtype=bool)
    ) & np.array([n.startswith("MPI_") for n in names], dtype=bool)
    mpi_comm = mpi & ~np.array([bool(_MPI_SETUP.match(n)) for n in names], dtype=bool)
    steps = [_STEP.match(n) for n in names]
    category = np.array(
        [
            "step" if s else "communication" if c else "annotation"
            for s, c in zip(steps, mpi_comm, strict=True)
        ],
        dtype=object,
    )
    collective = np.array(
        [
            normalize_collective_name(n) if k or c else ""
            for n, k, c in zip(names, nccl, mpi_comm, strict=True)
        ],
        dtype=object,
    )
    frame_out = _cpu_part(
        {
            "globalTid": ranges["globalTid"].to_numpy(dtype=np.int64),
            "eventId": ranges["eventId"].to_numpy(dtype=np.int64),
        },
        names,
        category,
        start,
        duration,
    )
    frame_out["domain"] = np.where(nccl & (domain_names == ""), "NCCL", domain_names)
    frame_out["collective"] = collective
    frame_out["step_number"] = [int(s.group(1)) if s else -1 for s in steps]
    nbytes = np.full(len(ranges), np.nan)
    nccl_ranks: dict[int, tuple[int, int]] = {}
    event_ids = ranges["eventId"].to_numpy()
    for i, event in enumerate(event_ids):
        fields = payloads.get(int(event)) if event is not None and not pd.isna(event) else None
        if not fields:
            continue
        if "message size [bytes]" in fields:
            nbytes[i] = fields["message size [bytes]"]
        if "rank" in fields and names[i].startswith("ncclCommInitRank"):
            nranks = int(fields.get("no. of ranks", 0))
            best = nccl_ranks.get(int(process[i]))
            if best is None or nranks > best[1]:
                nccl_ranks[int(process[i])] = (int(fields["rank"]), nranks)
    frame_out["bytes"] = nbytes
    return frame_out, nccl_ranks


def _tables(db: sqlite3.Connection) -> set[str]:
    return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _payloads(
    path: Path, db: sqlite3.Connection, columns: dict[str, list[str]]
) -> dict[int, dict[str, float]]:
    """eventId -> {lowered NVTX payload field name: value} from the dynamic payload tables."""
    translation: dict[str, str] = {}
    if "NVTX_EXPORT_TRANSLATION" in columns:
        for original, sanitized in _query(
            path,
            db,
            "SELECT originalName, sanitizedName FROM NVTX_EXPORT_TRANSLATION",
            "NVTX_EXPORT_TRANSLATION",
        ):
            translation[str(sanitized)] = str(original)
    wanted = {"message size [bytes]", "rank", "no. of ranks"}
    squeezed = {re.sub(r"[^a-z0-9]", "", w): w for w in wanted}
    found: dict[int, dict[str, float]] = {}
    for table, names in columns.items():
        if not _DYNAMIC.match(table) or "eventId" not in names:
            continue
        picks = {}
        for column in names:
            original = translation.get(column, column).lower()
            key = original if original in wanted else squeezed.get(re.sub(r"[^a-z0-9]", "", original))
            if key:
                picks[column] = key
        if not picks:
            continue
        select = ", ".join(f'"{c}"' for c in picks)
        for row in _query(path, db, f'SELECT "eventId", {select} FROM "{table}"', table):
            if not isinstance(row[0], int):  # a damaged row cannot be joined to its event
                continue
            fields = found.setdefault(int(row[0]), {})
            for key, value in zip(picks.values(), row[1:], strict=True):
                if value is not None:
                    fields[key] = float(value)
    return found


def _sizes_to_kernels(parts: list[pd.DataFrame], ranges: pd.DataFrame, launches: pd.DataFrame) -> None:
    """NCCL kernels get the message size of the NCCL range (same thread) around their launch call."""
    sized = ranges[(ranges["domain"] == "NCCL") & ranges["bytes"].notna() & (ranges["collective"] != "")]
    if sized.empty or not parts or parts[0].empty:
        return
    calls = launches.dropna(subset=["correlation"]).sort_values("start")
    spans = sized[["thread", "start", "duration", "bytes"]].sort_values("start")
    spans = spans.assign(thread=spans["thread"].astype("int64"), end=spans["start"] + spans["duration"])
    calls = calls.assign(thread=calls["thread"].astype("int64"))
    matched = pd.merge_asof(
        calls,
        spans[["thread", "start", "end", "bytes"]].rename(columns={"start": "from"}),
        left_on="start",
        right_on="from",
        by="thread",
        direction="backward",
    )
    matched = matched[matched["bytes"].notna() & (matched["start"] <= matched["end"])]
    size_of = matched.drop_duplicates(["process", "correlation"]).set_index(["process", "correlation"])[
        "bytes"
    ]
    kernels = parts[0]
    nccl = (
        (kernels["category"] == "communication")
        & kernels["correlation"].notna()
        & kernels["process"].notna()
        & kernels["bytes"].isna()
    ).to_numpy()
    if nccl.any():
        index = pd.MultiIndex.from_arrays(
            [kernels.loc[nccl, "process"].astype("int64"), kernels.loc[nccl, "correlation"].astype("int64")]
        )
        found = size_of.reindex(index).to_numpy(dtype=float)
        column = kernels["bytes"].to_numpy(copy=True)
        column[np.flatnonzero(nccl)] = found
        kernels["bytes"] = column


def _launch_times(events: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """Column ``reference`` (s): the launching call's start for GPU work, the event's start otherwise."""
    calls = launches.dropna(subset=["correlation"]).drop_duplicates(["process", "correlation"])
    key = calls.set_index(["process", "correlation"])["start"]
    gpu = events["on_gpu"] & events["correlation"].notna() & events["process"].notna()
    reference = events["start"].to_numpy(copy=True)
    if gpu.any():
        index = pd.MultiIndex.from_arrays(
            [events.loc[gpu, "process"].astype("int64"), events.loc[gpu, "correlation"].astype("int64")]
        )
        found = key.reindex(index).to_numpy()
        rows = np.flatnonzero(gpu.to_numpy())
        ok = ~np.isnan(found)
        reference[rows[ok]] = found[ok]
    return events.assign(reference=reference)


def _assign_steps(events: pd.DataFrame) -> pd.DataFrame:
    """Column ``step``: the number of the step range (same rank) around each event's reference time."""
    step = pd.array([pd.NA] * len(events), dtype="Int64")
    if "step_number" in events:
        marks = events[(events["category"] == "step") & (events["step_number"] >= 0)]
    else:
        marks = events.iloc[:0]
    if len(marks):
        marks = marks.sort_values("start")
        starts = marks["start"].to_numpy()
        ends = starts + marks["duration"].to_numpy()
        numbers = marks["step_number"].to_numpy()
        ref = events["reference"].to_numpy()
        where = np.searchsorted(starts, ref, side="right") - 1
        inside = (where >= 0) & (ref < ends[np.clip(where, 0, None)])  # steps are [start, end)
        values = np.where(inside, numbers[np.clip(where, 0, None)], -1)
        step = pd.array(np.where(values >= 0, values, 0), dtype="Int64")
        step[values < 0] = pd.NA
    return events.assign(step=step)


def _file_meta(path: Path, db: sqlite3.Connection, columns: dict[str, list[str]]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if "META_DATA_EXPORT" in columns:
        rows = _query(path, db, "SELECT name, value FROM META_DATA_EXPORT", "META_DATA_EXPORT")
        meta["export"] = {str(k): v for k, v in rows}
    if (
        "TARGET_INFO_SESSION_START_TIME" in columns
        and "utcEpochNs" in columns["TARGET_INFO_SESSION_START_TIME"]
    ):
        rows = _query(
            path,
            db,
            "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
            "TARGET_INFO_SESSION_START_TIME",
        )
        if rows and rows[0][0] is not None:
            meta["session_start_utc_ns"] = int(rows[0][0])  # ns since the Unix epoch
    if "TARGET_INFO_GPU" in columns and {"id", "name"} <= set(columns["TARGET_INFO_GPU"]):
        meta["gpus"] = {
            int(i): str(n)
            for i, n in _query(path, db, "SELECT id, name FROM TARGET_INFO_GPU", "TARGET_INFO_GPU")
        }
    meta["tables"] = sorted(columns)
    return meta


# --- ranks -------------------------------------------------------------------------------------


def _assign_ranks(files: list[_File], ranks: Sequence[int] | None) -> dict[Path, dict[int, int]]:
    rank_of: dict[Path, dict[int, int]] = {}
    guessed: list[str] = []
    next_rank = 0
    for i, f in enumerate(files):
        procs = f.gpu_processes
        if not procs:
            rank_of[f.path] = {}
            continue
        if ranks is not None:
            if len(procs) > 1:
                raise InputFileError(
                    f.path,
                    f"holds {len(procs)} GPU processes (pid "
                    f"{', '.join(str(p % _GLOBAL_ID_SHIFT) for p in procs)}), but ranks= gives "
                    "one rank per file",
                )
            rank_of[f.path] = {procs[0]: int(ranks[i])}
            continue
        if all(p in f.mpi_ranks for p in procs):
            rank_of[f.path] = {p: f.mpi_ranks[p] for p in procs}
            continue
        if all(p in f.nccl_ranks for p in procs):
            rank_of[f.path] = {p: f.nccl_ranks[p][0] for p in procs}
            continue
        match = _RANK_IN_NAME.findall(f.path.name)
        if match and len(procs) == 1:
            rank_of[f.path] = {procs[0]: int(match[-1])}
            guessed.append(f"{f.path.name} -> rank {int(match[-1])} (file name)")
            continue
        rank_of[f.path] = {p: next_rank + j for j, p in enumerate(procs)}
        guessed.append(f"{f.path.name} -> rank(s) {next_rank}..{next_rank + len(procs) - 1} (file order)")
        next_rank += len(procs)
    if guessed:
        warnings.warn(
            "Nsight Systems exports do not record ranks (no MPI_RANKS table, no NCCL payload "
            "tables); ranks were guessed: " + "; ".join(guessed) + ". Pass ranks=[...] to set them.",
            stacklevel=3,
        )
    seen: dict[int, Path] = {}
    for f in files:
        for rank in rank_of[f.path].values():
            if rank in seen:
                raise InputFileError(
                    f.path,
                    f"rank {rank} is also the rank of a process in {seen[rank]}; "
                    "expected one process per rank (pass ranks=[...] to set them)",
                )
            seen[rank] = f.path
    return rank_of
