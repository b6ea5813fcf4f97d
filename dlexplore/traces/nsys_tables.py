"""The tables of an Nsight Systems SQLite export, read into event-table parts: kernels, memory copies
and sets, CUDA runtime calls, each with the columns :mod:`dlexplore.traces.nsys` documents. Every
query is read-only; a missing table or column is an :class:`~dlexplore.errors.InputFileError`
naming the file and what was expected.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputFileError
from .schema import normalize_collective_name

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


def _tables(db: sqlite3.Connection) -> set[str]:
    return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


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
