"""Point-to-point operations measured in a trace (send, recv, sendrecv), and the communication
events every communication table starts from.

Point-to-point operations join two ranks, not a group, so they are not matched across ranks as
collectives are (:mod:`dlexplore.traces.collectives`): :func:`point_to_point` tables them per rank,
kind, peer and size. The peer is the global rank at the other end when the trace says (PyTorch's
``Dst Rank``/``Src Rank``, OTF2 messages); NCCL's ``SendRecv`` kernels and MPI ranges without a
payload leave it unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .events import POINT_TO_POINT, device_streams, events_of

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["OP_ID_COLUMNS", "P2P_COLUMNS", "communication_events", "p2p_table_rows", "point_to_point"]

#: Reader columns that identify one operation across ranks, in order of preference: ``seq`` (a
#: process group's collective sequence number), ``fusion`` (Horovod's fused response), ``op``.
#: Used only when numeric and set on every collective event (Horovod's ``op`` is a kind, not an id).
OP_ID_COLUMNS = ("seq", "fusion", "op")

#: Columns of :func:`point_to_point`: units and meaning.
P2P_COLUMNS: dict[str, tuple[str, str]] = {
    "rank": ("1", "rank the operation ran on"),
    "peer": ("1", "global rank at the other end (<NA>: the trace does not say)"),
    "collective": ("", "send, recv or sendrecv (both at once)"),
    "bytes": ("bytes", "message size"),
    "count": ("count", "operations"),
    "time": ("s", "mean duration"),
    "time_min": ("s", "shortest duration"),
    "time_max": ("s", "longest duration"),
    "time_total": ("s", "sum of the durations"),
    "algbw": ("GB/s", "bytes / time"),
}


def communication_events(events: pd.DataFrame, *, point_to_point: bool) -> pd.DataFrame:
    """Communication events with a collective name, group ones or point-to-point ones, that ran on a
    device stream (on ranks that have them) or anywhere (CPU-only ranks)."""
    if not len(events):
        return pd.DataFrame(
            {"rank": [], "stream": [], "name": [], "collective": [], "start": [], "end": [], "bytes": []}
        )
    category = events["category"].astype(str).to_numpy()
    collective = events["collective"].astype(str).to_numpy()
    start = events["start"].to_numpy(dtype=float)
    end = start + events["duration"].to_numpy(dtype=float)
    group = ~np.isin(collective, (*POINT_TO_POINT, ""))
    kind = np.isin(collective, POINT_TO_POINT) if point_to_point else group
    keep = (category == "communication") & kind & np.isfinite(start) & np.isfinite(end)
    rank = events["rank"].to_numpy(dtype=np.int64)
    on_device = device_streams(events)
    gpu_ranks = np.unique(rank[on_device & keep])
    keep &= on_device | ~np.isin(rank, gpu_ranks)
    table = pd.DataFrame(
        {
            "rank": rank[keep],
            "stream": events["stream"].astype(str).to_numpy()[keep],
            "name": events["name"].astype(str).to_numpy()[keep],
            "collective": collective[keep],
            "start": start[keep],
            "end": end[keep],
            "bytes": events["bytes"].to_numpy(dtype=float)[keep],
        }
    )
    for extra in (*OP_ID_COLUMNS, "fusion_bytes", "group_size", "process_group", "peer"):
        if extra in events.columns:
            table[extra] = events[extra].to_numpy()[keep]
    return table


def point_to_point(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """Point-to-point operations (send, recv, sendrecv): one row per rank, kind, peer and size.

    Columns (:data:`P2P_COLUMNS`): ``rank``, ``peer`` (the global rank at the other end, <NA>
    when the trace does not say: NCCL's ``SendRecv`` kernels, MPI ranges without payloads),
    ``collective``, ``bytes`` (NaN when unknown), ``count``, ``time``, ``time_min``, ``time_max``,
    ``time_total`` (s) and ``algbw`` (GB/s, bytes / time). Events count where they do the work, as
    for collectives (device streams on GPU ranks).
    """
    events, source, fmt = events_of(trace)
    table = communication_events(events, point_to_point=True)
    names = list(P2P_COLUMNS)
    if table.empty:
        out = pd.DataFrame({name: pd.Series(dtype=float) for name in names})
        out["collective"] = out["collective"].astype(object)
    else:
        peer = (
            pd.array(table["peer"], dtype="Int64")
            if "peer" in table
            else pd.array([pd.NA] * len(table), dtype="Int64")
        )
        table = table.assign(
            peer=peer,
            peer_key=peer.fillna(-1),
            size_key=table["bytes"].fillna(-1.0),
            duration=table["end"] - table["start"],
        )
        out = (
            table.groupby(["rank", "collective", "peer_key", "size_key"], sort=True)
            .agg(
                peer=("peer", "first"),
                bytes=("bytes", "first"),
                count=("duration", "size"),
                time=("duration", "mean"),
                time_min=("duration", "min"),
                time_max=("duration", "max"),
                time_total=("duration", "sum"),
            )
            .reset_index()
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            out["algbw"] = np.where(out["time"] > 0, out["bytes"] / out["time"] / 1e9, np.nan)
        out["count"] = out["count"].astype(np.int64)
        out = out[names]
    out.attrs.update(
        source=source,
        format=fmt,
        kind="measured",
        title="measured point-to-point operations",
        units={n: u for n, (u, _) in P2P_COLUMNS.items()},
        long_names={n: long for n, (_, long) in P2P_COLUMNS.items()},
    )
    return out


def p2p_table_rows(p2p: pd.DataFrame) -> pd.DataFrame:
    """:func:`point_to_point` as collective-table rows: one per kind and size, the pairs in ``peers``."""
    frame = p2p.assign(
        size_key=p2p["bytes"].fillna(-1.0),
        weighted=p2p["time"] * p2p["count"],
        pair=[f"{r}->{'?' if p is pd.NA else p}" for r, p in zip(p2p["rank"], p2p["peer"], strict=True)],
    )
    rows = (
        frame.groupby(["collective", "size_key"], sort=True)
        .agg(
            bytes=("bytes", "first"),
            ranks=("rank", "nunique"),
            count=("count", "sum"),
            weighted=("weighted", "sum"),
            time_min=("time_min", "min"),
            time_max=("time_max", "max"),
            peers=("pair", lambda pairs: _listing(sorted(set(pairs)))),
        )
        .reset_index()
    )
    rows["time"] = rows.pop("weighted") / rows["count"]
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["algbw"] = np.where(rows["time"] > 0, rows["bytes"] / rows["time"] / 1e9, np.nan)
    rows["busbw"] = rows["algbw"]  # nccl-tests' sendrecv: bus bandwidth = algorithm bandwidth
    rows["time_last_in"] = np.nan
    rows["skew"] = np.nan
    rows["ranks"] = rows["ranks"].astype(np.int64)
    rows["count"] = rows["count"].astype(np.int64)
    return rows


def _listing(items: list[str], shown: int = 6) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")
