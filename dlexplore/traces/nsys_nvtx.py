"""NVTX ranges of an Nsight Systems export (push/pop and start/end, with their payloads), and what
they give the other events: steps (a step range's number for every event inside it, GPU work by
its launch) and message sizes (an NCCL call's range to the kernels it launched). See
:mod:`dlexplore.traces.nsys`.
"""

from __future__ import annotations

import re
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputFileError
from .nsys_tables import (
    _DYNAMIC,
    _GLOBAL_ID_SHIFT,
    _MPI_SETUP,
    _NCCL_API,
    _STEP,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSH_POP,
    NVTX_START_END,
    _cpu_part,
    _query,
    _tables,
    _times,
)
from .schema import normalize_collective_name


def _nvtx(
    path: Path, db: sqlite3.Connection, have: list[str], payloads: dict[int, dict[str, float]]
) -> tuple[pd.DataFrame, dict[int, tuple[int, int]]]:
    table = "NVTX_EVENTS"
    frame = _nvtx_table(path, db, have)
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
    nbytes, nccl_ranks = _payload_fields(ranges["eventId"].to_numpy(), names, process, payloads)
    frame_out["bytes"] = nbytes
    return frame_out, nccl_ranks


def _nvtx_table(path: Path, db: sqlite3.Connection, have: list[str]) -> pd.DataFrame:
    """The NVTX ranges and domain definitions of the export, their names resolved, times checked."""
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
    return frame


def _payload_fields(
    event_ids: np.ndarray, names: np.ndarray, process: np.ndarray, payloads: dict[int, dict[str, float]]
) -> tuple[np.ndarray, dict[int, tuple[int, int]]]:
    """Each range's message size from its payload (NaN: none), and each process's NCCL rank and
    rank count from its ``ncclCommInitRank`` ranges (the largest communicator)."""
    nbytes = np.full(len(event_ids), np.nan)
    nccl_ranks: dict[int, tuple[int, int]] = {}
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
    return nbytes, nccl_ranks


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
