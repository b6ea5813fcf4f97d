"""Collective operations measured in a trace: matched across ranks, clocks aligned, tabled.

**Which events.** Communication events (category ``communication``) with a collective name. The
point-to-point ones (``send``, ``recv``, ``sendrecv``: they join two ranks, not a group) are tabled
by :func:`point_to_point` and appear in :func:`collective_table` as rows of their own, with the
``peers`` seen. One operation can show up as several events on a rank; only the one that does the
work is kept:

- on a rank with device streams (``cuda:*``), only the events on device streams (the NCCL kernels,
  not the host's ``nccl:*`` annotations or ``record_param_comms``);
- PyTorch's dispatcher ops ``c10d::allreduce_`` ... only enqueue the work (gloo runs it on its own
  threads as ``gloo:all_reduce``): on a rank where a collective has events of another name,
  its ``c10d::`` events are dropped;
- an event that encloses another event of the same collective on the same stream (Horovod's
  ``ALLREDUCE`` around ``NCCL_ALLREDUCE``) is dropped for the inner one.

**Matching.** Collectives are issued in the same order on every rank of a process group, so the
k-th operation of a given collective and message size on one rank is the k-th on every other rank
(within each ``process_group`` when the reader gives that column).
When the reader gives an operation id (:data:`OP_ID_COLUMNS`: ``seq``, Horovod's ``fusion``, or a
numeric ``op``), it is used instead, and the events of one rank with the same id count as one span
(earliest start, latest end); for Horovod's fused operations ``bytes`` is the fused buffer
(``fusion_bytes``), the message that went over the wire.

**Ranks.** The reader's ``group_size`` where it gives one; else, when the trace holds fewer ranks
than its world size (Horovod writes the coordinator's timeline only, or only some ranks' files were
read), the world size; else the number of ranks an operation was matched on.

**Clock alignment.** Ranks' clocks differ by an offset. A collective ends at nearly the same
moment on every rank (no rank can leave before the last one's data has arrived), so rank ``r``'s
offset is estimated as the median over the operations it shares with the reference rank (the
lowest rank present) of ``end on r - end on the reference``; aligned time is ``t - offset[r]``.
Only symmetric collectives (allreduce, allgather, reduce_scatter, alltoall, barrier) are used when
there are any, since rooted ones (broadcast, reduce, gather, scatter) end earlier on some ranks.
Limits: the ends of one operation differ by up to a message latency (a ring's last step, a tree's
depth), and a steady difference of that kind is indistinguishable from a clock offset and lands in
it; one offset per rank, so clock drift over a long trace is not followed; a rank that shares no
operation with the reference rank keeps offset 0 (listed in ``attrs["offset_unknown"]``); ranks of
one host share a clock, so their offsets should come out near 0, which is a check.

**Times** (seconds). For each operation, its ``time`` is the mean over its ranks of the event's
duration, as nccl-tests reports by default (``-a 1``: the per-rank time averaged over ranks). It
includes the time early ranks wait for late ones; ``time_last_in`` (from the last rank entering to
the last leaving, aligned clocks) leaves that wait out. ``skew`` is the spread of start times
across ranks (max - min, aligned clocks). A table row averages these over its operations;
``time_min``/``time_max`` are the fastest and slowest operation.

**Bandwidths** (GB/s = 1e9 bytes/s, nccl-tests doc/PERFORMANCE.md): ``algbw = bytes / time``;
``busbw = algbw x factor`` with :func:`dlexplore.model.comm.busbw_factor` (allreduce 2(p-1)/p;
allgather, reduce_scatter, alltoall (p-1)/p; broadcast, reduce 1; gather, scatter (p-1)/p as
nccl-tests' gather and scatter tests; barrier moves no data: NaN). ``bytes`` is the reader's message
size, in the model's and nccl-tests' convention: the per-rank buffer for allreduce, broadcast and
reduce, the whole gathered buffer for allgather and reduce_scatter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..model.comm import ALGORITHMS, busbw_factor
from .events import events_of
from .p2p import OP_ID_COLUMNS, communication_events, p2p_table_rows, point_to_point

if TYPE_CHECKING:
    from .schema import Trace

__all__ = [
    "OP_ID_COLUMNS",
    "SYMMETRIC_COLLECTIVES",
    "match_operations",
    "offsets_from_ends",
    "operation_events",
    "TABLE_COLUMNS",
    "clock_offsets",
    "collective_ops",
    "collective_table",
    "point_to_point",
]

#: Columns of :func:`collective_table`: units and meaning.
TABLE_COLUMNS: dict[str, tuple[str, str]] = {
    "collective": ("", "collective operation"),
    "bytes": ("bytes", "message size (per-rank buffer; whole buffer for allgather, reduce_scatter)"),
    "ranks": ("count", "ranks taking part (group size)"),
    "count": ("count", "operations"),
    "time": ("s", "mean operation time (per operation, the mean over ranks of the duration)"),
    "time_min": ("s", "fastest operation's time"),
    "time_max": ("s", "slowest operation's time"),
    "time_last_in": ("s", "mean time from the last rank entering to the last leaving (aligned clocks)"),
    "algbw": ("GB/s", "algorithm bandwidth: bytes / time"),
    "busbw": ("GB/s", "bus bandwidth: algbw x nccl-tests factor"),
    "skew": ("s", "mean spread of start times across ranks (aligned clocks); NaN if seen on one rank"),
    "peers": ("", "point-to-point rows: the rank -> peer pairs seen (global ranks; ? unknown)"),
}

#: Collectives that end at nearly the same moment on every rank (no rooted ones): the clocks are
#: aligned on them.
SYMMETRIC_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "barrier")
_ROOTED_SPREAD = ("gather", "scatter")


def operation_events(events: pd.DataFrame) -> pd.DataFrame:
    """The communication events that stand for one collective operation each on their rank
    (the rules of the module docstring's "Which events"); columns of
    :func:`~dlexplore.traces.p2p.communication_events`."""
    table = communication_events(events, point_to_point=False)
    if table.empty:
        return table
    # c10d:: dispatcher ops, where the same rank has the worker's event for that collective
    dispatcher = table["name"].str.startswith("c10d::").to_numpy()
    all_dispatch = pd.Series(dispatcher).groupby([table["rank"], table["collective"]]).transform("min")
    table = table[~(dispatcher & ~all_dispatch.to_numpy(dtype=bool))]
    # enclosing events of the same collective on the same stream: keep the inner one
    table = table.sort_values(
        ["rank", "stream", "collective", "start", "end"],
        ascending=[True, True, True, True, False],
        kind="stable",
    )
    same = (
        (table["rank"].to_numpy()[1:] == table["rank"].to_numpy()[:-1])
        & (table["stream"].to_numpy()[1:] == table["stream"].to_numpy()[:-1])
        & (table["collective"].to_numpy()[1:] == table["collective"].to_numpy()[:-1])
    )
    encloses = np.zeros(len(table), dtype=bool)
    encloses[:-1] = same & (table["end"].to_numpy()[1:] <= table["end"].to_numpy()[:-1])
    return table[~encloses].reset_index(drop=True)


def _op_id_column(table: pd.DataFrame) -> str | None:
    """The reader's operation-id column, if one is usable: numeric and set on every event."""
    for name in OP_ID_COLUMNS:
        if name in table.columns and len(table):
            values = pd.to_numeric(pd.Series(table[name]), errors="coerce")
            if values.notna().all():
                return name
    return None


def match_operations(table: pd.DataFrame) -> pd.DataFrame:
    """Add ``op`` (an operation id shared across ranks) to the events of :func:`operation_events`.

    By the reader's operation id where it gives one (one span per id and rank), else by order: the
    k-th operation of a collective and size on a rank (within its process group) is the k-th on
    every rank. See the module docstring's "Matching"."""
    id_column = _op_id_column(table)
    if id_column == "fusion" and "fusion_bytes" in table.columns:
        # Horovod: the fused buffer is the message that went over the wire
        fused = pd.to_numeric(pd.Series(table["fusion_bytes"]), errors="coerce").to_numpy()
        table = table.assign(bytes=np.where(np.isfinite(fused), fused, table["bytes"].to_numpy()))
    # bytes may be unknown (NaN); a sentinel keeps those events matchable among themselves
    table = table.assign(size_key=table["bytes"].fillna(-1.0))
    if id_column is not None:
        ids = pd.to_numeric(pd.Series(table[id_column]), errors="coerce").to_numpy()
        table = table.assign(op_id=ids)
        spans = (
            table.groupby(["op_id", "rank"], sort=False)
            .agg(
                collective=("collective", "first"),
                start=("start", "min"),
                end=("end", "max"),
                bytes=("bytes", "max"),
                size_key=("size_key", "max"),
                **({"group_size": ("group_size", "max")} if "group_size" in table.columns else {}),
            )
            .reset_index()
        )
        spans["op"] = pd.factorize(spans.pop("op_id"))[0]
        return spans
    # Order holds within one process group: match within each group when the reader names them.
    group = (
        table["process_group"].astype(object).where(table["process_group"].notna(), "").astype(str)
        if "process_group" in table.columns
        else pd.Series("", index=table.index)
    )
    table = table.assign(pg_key=group.to_numpy())
    table = table.sort_values(["rank", "pg_key", "collective", "size_key", "start"], kind="stable")
    k = table.groupby(["rank", "pg_key", "collective", "size_key"], sort=False).cumcount().to_numpy()
    table = table.assign(k=k)
    table["op"] = table.groupby(["pg_key", "collective", "size_key", "k"], sort=False).ngroup().to_numpy()
    return table.drop(columns=["k", "pg_key"]).reset_index(drop=True)


def offsets_from_ends(matched: pd.DataFrame) -> tuple[pd.Series, int | None, list[int]]:
    """Each rank's clock offset (s) from the reference rank, the reference, and ranks left at 0.

    ``matched`` is :func:`match_operations`' table (``op``, ``rank``, ``collective``, ``end``); the
    offset is the median over shared (symmetric, where there are any) operations of the end on the
    rank minus the end on the reference rank (the lowest)."""
    ranks = np.unique(matched["rank"].to_numpy())
    if ranks.size == 0:
        return pd.Series(dtype=float, name="offset"), None, []
    reference = int(ranks[0])
    use = matched
    symmetric = matched["collective"].isin(SYMMETRIC_COLLECTIVES).to_numpy()
    ranks_per_op = matched.groupby("op")["rank"].transform("size").to_numpy()
    if (symmetric & (ranks_per_op > 1)).any():
        use = matched[symmetric]
    ref_end = use.loc[use["rank"] == reference].groupby("op")["end"].first()
    shared = use[use["op"].isin(ref_end.index)]
    difference = shared["end"].to_numpy() - ref_end.reindex(shared["op"]).to_numpy()
    offsets = pd.Series(difference).groupby(shared["rank"].to_numpy()).median()
    offsets = offsets.reindex(ranks)
    unknown = [int(r) for r in offsets.index[offsets.isna()]]
    offsets = offsets.fillna(0.0)
    offsets.index.name = "rank"
    offsets.name = "offset"
    return offsets, reference, unknown


def _prepare(trace: Trace | pd.DataFrame, align: bool) -> tuple[pd.DataFrame, pd.Series, dict[str, Any]]:
    events, source, fmt = events_of(trace)
    matched = match_operations(operation_events(events))
    world_size = None if isinstance(trace, pd.DataFrame) else trace.world_size
    present = int(np.unique(events["rank"].to_numpy()).size) if len(events) else 0
    if world_size and present < world_size:
        # one rank's view of a larger job (Horovod's coordinator timeline, or some ranks' files):
        # where the reader does not say the group, the operations spanned the whole world
        known = pd.to_numeric(matched["group_size"], errors="coerce") if "group_size" in matched else None
        matched = matched.assign(group_size=world_size if known is None else known.fillna(world_size))
    offsets, reference, unknown = offsets_from_ends(matched)
    if not align:
        offsets = offsets * 0.0
    info = {
        "source": source,
        "format": fmt,
        "kind": "measured",
        "align": bool(align),
        "reference_rank": reference,
        "offsets": {int(r): float(v) for r, v in offsets.items()},
        "offset_unknown": unknown if align else [],
        "offset_method": (
            "offset[r] = median over shared symmetric collectives of (end on r - end on the reference "
            "rank); aligned time = t - offset[r]"
            if align
            else "clocks not aligned (align=False)"
        ),
    }
    return matched, offsets, info


def clock_offsets(trace: Trace | pd.DataFrame) -> pd.Series:
    """Each rank's clock offset (s) against the lowest rank, from collective ends (module docstring).

    Subtract it from a rank's times to put them on the reference rank's clock. Ranks with no
    collective shared with the reference get 0 (listed in ``attrs["offset_unknown"]``).
    """
    _, offsets, info = _prepare(trace, True)
    offsets.attrs.update(
        units="s",
        reference_rank=info["reference_rank"],
        offset_unknown=info["offset_unknown"],
        method=info["offset_method"],
    )
    return offsets


def collective_ops(trace: Trace | pd.DataFrame, *, align: bool = True) -> pd.DataFrame:
    """One row per collective operation, spanning its ranks (module docstring for the rules).

    Columns: ``op`` (id), ``collective``, ``bytes`` (bytes), ``ranks`` (count, the group size),
    ``start`` and ``end`` (s, on the reference rank's clock when ``align``: first rank in, last rank
    out), ``time`` (s, mean over ranks of the duration), ``observed`` (count, ranks the operation was
    seen on), ``time_last_in`` (s) and ``skew`` (s), both NaN when it was seen on one rank only.
    ``attrs`` hold the offsets and how they were found.
    """
    matched, offsets, info = _prepare(trace, align)
    if matched.empty:
        ops = pd.DataFrame(
            {
                name: pd.Series(dtype=float)
                for name in (
                    "op",
                    "collective",
                    "bytes",
                    "ranks",
                    "start",
                    "end",
                    "time",
                    "observed",
                    "time_last_in",
                    "skew",
                )
            }
        )
        ops["collective"] = ops["collective"].astype(object)
        ops.attrs.update(info)
        return ops
    shift = offsets.reindex(matched["rank"].to_numpy()).to_numpy()
    frame = matched.assign(
        start_aligned=matched["start"].to_numpy() - shift,
        end_aligned=matched["end"].to_numpy() - shift,
        duration=matched["end"].to_numpy() - matched["start"].to_numpy(),
    )
    agg: dict[str, Any] = {
        "collective": ("collective", "first"),
        "bytes": ("bytes", "first"),
        "ranks": ("rank", "nunique"),
        "start": ("start_aligned", "min"),
        "last_start": ("start_aligned", "max"),
        "end": ("end_aligned", "max"),
        "time": ("duration", "mean"),
    }
    if "group_size" in frame.columns:
        agg["group_size"] = ("group_size", "max")
    ops = frame.groupby("op", sort=True).agg(**agg).reset_index()
    ops["observed"] = ops["ranks"].astype(np.int64)
    if "group_size" in ops.columns:
        size = pd.to_numeric(ops.pop("group_size"), errors="coerce")
        ops["ranks"] = np.where(size.notna(), size, ops["ranks"]).astype(np.int64)
    # Seen on one rank only (Horovod's coordinator timeline): no spread across ranks to measure.
    seen_once = ops["observed"].to_numpy() < 2
    ops["time_last_in"] = np.where(seen_once, np.nan, ops["end"] - ops["last_start"])
    ops["skew"] = np.where(seen_once, np.nan, ops.pop("last_start") - ops["start"])
    ops = ops.sort_values("start", kind="stable").reset_index(drop=True)
    ops.attrs.update(info)
    return ops


def _factor(collective: str, ranks: np.ndarray) -> np.ndarray:
    ranks = np.asarray(ranks, dtype=float)
    if collective in ALGORITHMS:
        return np.asarray(busbw_factor(collective, np.maximum(ranks, 1)), dtype=float) * np.ones_like(ranks)
    if collective in _ROOTED_SPREAD:
        return (ranks - 1) / np.maximum(ranks, 1)
    return np.full(ranks.shape, np.nan)


def collective_table(trace: Trace | pd.DataFrame, *, align: bool = True) -> pd.DataFrame:
    """One row per collective kind and message size, each operation spanning all its ranks.

    Parameters
    ----------
    trace:
        A :class:`~dlexplore.traces.schema.Trace` (or its event table).
    align:
        Align rank clocks on collective ends before measuring ``skew`` and ``time_last_in``
        (module docstring); ``False`` takes every rank's clock as it is.

    Returns
    -------
    pandas.DataFrame
        Columns (:data:`TABLE_COLUMNS`): ``collective``, ``bytes`` (bytes), ``ranks``, ``count``,
        ``time``, ``time_min``, ``time_max``, ``time_last_in`` (s), ``algbw``, ``busbw`` (GB/s),
        ``skew`` (s); sorted by collective and bytes. ``attrs``: ``source``, ``kind``
        ("measured"), ``units``, ``long_names``, ``offsets`` ({rank: s}), ``reference_rank``,
        ``offset_method``, ``offset_unknown``, ``align``.
    """
    ops = collective_ops(trace, align=align)
    info = dict(ops.attrs)
    if ops.empty:
        table = pd.DataFrame({name: pd.Series(dtype=float) for name in TABLE_COLUMNS})
        table["collective"] = table["collective"].astype(object)
        table["ranks"] = table["ranks"].astype(np.int64)
        table["count"] = table["count"].astype(np.int64)
    else:
        ops = ops.assign(size_key=ops["bytes"].fillna(-1.0))
        table = (
            ops.groupby(["collective", "size_key"], sort=True)
            .agg(
                bytes=("bytes", "first"),
                ranks=("ranks", "max"),
                count=("op", "size"),
                time=("time", "mean"),
                time_min=("time", "min"),
                time_max=("time", "max"),
                time_last_in=("time_last_in", "mean"),
                skew=("skew", "mean"),
            )
            .reset_index()
            .drop(columns="size_key")
        )
        table["ranks"] = table["ranks"].astype(np.int64)
        table["count"] = table["count"].astype(np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = np.where(table["time"] > 0, table["bytes"] / table["time"] / 1e9, np.nan)
        factor = np.full(len(table), np.nan)
        for name, rows in table.groupby("collective").groups.items():
            where = table.index.get_indexer(rows)
            factor[where] = _factor(str(name), table["ranks"].to_numpy()[where])
        table["algbw"] = algbw
        table["busbw"] = algbw * factor
        table["peers"] = ""
        table = table[list(TABLE_COLUMNS)]
    table["peers"] = table["peers"].astype(object).fillna("") if len(table) else ""
    p2p = point_to_point(trace)
    if len(p2p):
        table = pd.concat([table, p2p_table_rows(p2p)[list(TABLE_COLUMNS)]], ignore_index=True)
    info.update(
        units={name: units for name, (units, _) in TABLE_COLUMNS.items()},
        long_names={name: long for name, (_, long) in TABLE_COLUMNS.items()},
        title="measured collectives and point-to-point operations",
    )
    table.attrs.update(info)
    return table
