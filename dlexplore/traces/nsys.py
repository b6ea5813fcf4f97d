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
from .nsys_nvtx import _assign_steps, _launch_times, _nvtx, _payloads, _sizes_to_kernels
from .nsys_tables import (
    _GLOBAL_ID_SHIFT,
    _MPI_THREAD,
    _RANK_IN_NAME,
    _REQUIRED,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSH_POP,
    NVTX_START_END,
    _connect,
    _empty_part,
    _file_meta,
    _kernels,
    _memcpy,
    _memset,
    _query,
    _runtime,
    _string_table,
)
from .schema import Trace, make_events

__all__ = ["read", "NVTX_PUSH_POP", "NVTX_START_END", "NVTX_DOMAIN_CREATE"]


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


def _read_file(path: Path, *, kernel_names: str, runtime: bool, nvtx: bool) -> _File:
    with closing(_connect(path)) as db:
        columns = _checked_columns(path, db)
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
        mpi = _mpi_ranks(path, db, columns)
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


def _checked_columns(path: Path, db: sqlite3.Connection) -> dict[str, list[str]]:
    """Every table's columns; the export must hold one of the tables read here, with the columns
    the schema reference gives them, and StringIds where names are ids into it."""
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
    needs_strings = any(t in columns for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"))
    if needs_strings and "StringIds" not in columns:
        raise InputFileError(
            path,
            "table StringIds is missing, so kernel and CUDA call names (ids into "
            "it) cannot be read; expected a complete nsys export",
        )
    return columns


def _mpi_ranks(path: Path, db: sqlite3.Connection, columns: dict[str, list[str]]) -> dict[int, int]:
    """Each process's MPI rank, from MPI_RANKS or from threads named "MPI Rank <n>"."""
    mpi: dict[int, int] = {}
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
    return mpi


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
