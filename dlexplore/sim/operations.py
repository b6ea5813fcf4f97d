"""The collectives of a replay graph and the clocks they set: each operation matched across ranks
(:mod:`dlexplore.traces.collectives`), its transfer (the network's part, the same on every rank)
and each rank's lateness, on clocks made causal (:func:`causal_offsets`). See
:mod:`dlexplore.sim.graph`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..traces.collectives import SYMMETRIC_COLLECTIVES, match_operations, offsets_from_ends, operation_events


def causal_offsets(ops: pd.DataFrame, ranks: np.ndarray) -> pd.Series:
    """Clock offsets (s) per rank that make every symmetric collective causal.

    ``ops`` has one row per (op, rank) with ``op``, ``rank``, ``collective``, ``start`` and ``end``
    (s, each rank's clock). For every pair of ranks ``q``, ``r`` of an operation, the end on ``r``
    cannot come before the start on ``q``: ``offset[r] - offset[q] <= end[r] - start[q]``.

    When all-zero offsets meet every bound, the ranks' clocks agree as far as the trace can tell
    (ranks of one host share a clock; the PyTorch reader puts every file on one time axis) and
    they stay 0: the median of end differences would read the spread of a ring's last steps as an
    offset. Otherwise the clocks differ: the median estimate of
    :func:`dlexplore.traces.collectives.clock_offsets` is the start, and each violated bound is
    met by moving both offsets half way, until none is (or 50 sweeps: a trace that cannot be
    made causal, e.g. with drifting clocks, keeps the best found). The lowest rank is the reference
    (offset 0); aligned time = time - offset.
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    offsets = pd.Series(0.0, index=pd.Index(ranks, name="rank"), name="offset")
    if len(ops) == 0 or ranks.size < 2:
        return offsets
    use = ops[ops["collective"].isin(SYMMETRIC_COLLECTIVES).to_numpy()]
    if use.empty:
        return offsets
    position = {int(r): i for i, r in enumerate(ranks)}
    n = ranks.size
    bound = np.full((n, n), np.inf)  # bound[q, r] >= offset[r] - offset[q]
    starts = use.pivot_table(index="op", columns="rank", values="start", aggfunc="min")
    ends = use.pivot_table(index="op", columns="rank", values="end", aggfunc="max")
    for q in starts.columns:
        for r in ends.columns:
            if q == r:
                continue
            diff = (ends[r] - starts[q]).to_numpy()
            diff = diff[np.isfinite(diff)]
            if diff.size:
                bound[position[int(q)], position[int(r)]] = diff.min()
    o = np.zeros(n)
    if (o[None, :] - o[:, None] - bound).max() > 1e-12:
        median, _, _ = offsets_from_ends(use)
        o = median.reindex(ranks).fillna(0.0).to_numpy(dtype=float, copy=True)
        for _ in range(50):
            excess = o[None, :] - o[:, None] - bound
            if excess.max() <= 1e-12:
                break
            for q, r in zip(*np.nonzero(excess > 1e-12), strict=True):
                amount = o[r] - o[q] - bound[q, r]
                if amount > 0:
                    o[r] -= amount / 2
                    o[q] += amount / 2
    offsets[:] = o - o[0]
    return offsets


def _operations(events: pd.DataFrame, world_size: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Matched operations, one row per (op, rank), and each collective event row's op (-1: none).

    Returns the ops table (columns: op, rank, collective, bytes, group_size, start, end, stream,
    id_matched), ``row_op`` (op of each event row or -1) and ``row_span`` (the ops-table row).
    """
    n = len(events)
    row_op = np.full(n, -1, dtype=np.int64)
    row_span = np.full(n, -1, dtype=np.int64)
    table = operation_events(events)
    empty = pd.DataFrame(
        {
            "op": [],
            "rank": [],
            "collective": [],
            "bytes": [],
            "group_size": [],
            "start": [],
            "end": [],
            "stream": [],
            "id_matched": [],
        }
    )
    if table.empty:
        return empty, row_op, row_span
    keys = pd.DataFrame(
        {
            "rank": events["rank"].to_numpy(dtype=np.int64),
            "stream": events["stream"].astype(str).to_numpy(),
            "name": events["name"].astype(str).to_numpy(),
            "start": events["start"].to_numpy(dtype=float),
            "end": events["start"].to_numpy(dtype=float) + events["duration"].to_numpy(dtype=float),
            "row": np.arange(n, dtype=np.int64),
        }
    ).drop_duplicates(["rank", "stream", "name", "start", "end"])
    table = table.assign(rank=table["rank"].astype(np.int64)).merge(
        keys, on=["rank", "stream", "name", "start", "end"], how="left"
    )
    matched = match_operations(table)
    if "row" in matched.columns:  # matched by order: one event per (op, rank)
        spans = matched.reset_index(drop=True)
        spans["id_matched"] = False
        rows = spans["row"].to_numpy(dtype=np.int64)
        row_op[rows] = spans["op"].to_numpy(dtype=np.int64)
        row_span[rows] = np.arange(len(spans))
    else:  # matched by the reader's operation id: spans over several events per rank
        spans = matched.reset_index(drop=True)
        spans["id_matched"] = True
        spans["stream"] = [f"ops:{r}" for r in spans["rank"]]
        # an event belongs to the span of its rank and collective that contains it
        for i, span in enumerate(spans.itertuples(index=False)):
            inside = (
                (table["rank"].to_numpy() == span.rank)
                & (table["collective"].to_numpy() == span.collective)
                & (table["start"].to_numpy() >= span.start)
                & (table["end"].to_numpy() <= span.end)
            )
            rows = table["row"].to_numpy()[inside]
            rows = rows[np.isfinite(rows)].astype(np.int64)
            row_op[rows] = int(span.op)
            row_span[rows] = i
    if "group_size" in spans.columns:
        size = pd.to_numeric(spans["group_size"], errors="coerce").to_numpy(dtype=float)
    else:
        size = np.full(len(spans), np.nan)
    spans["group_size"] = np.where(np.isfinite(size) & (size > 0), size, world_size).astype(np.int64)
    cols = ["op", "rank", "collective", "bytes", "group_size", "start", "end", "stream", "id_matched"]
    return spans[cols].astype({"op": np.int64, "rank": np.int64}), row_op, row_span


def _aligned_operations(
    events: pd.DataFrame,
    ranks: np.ndarray,
    world_size: int,
    start_raw: np.ndarray,
    end_raw: np.ndarray,
    notes: list[str],
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, pd.Series, np.ndarray, np.ndarray]:
    """The matched operations with their transfer, lateness and step, on causal clocks; also each
    event's operation and span, the clock offsets and every event's aligned start and end (s)."""
    rank = events["rank"].to_numpy(dtype=np.int64)
    ops, row_op, row_span = _operations(events, world_size)
    offsets = causal_offsets(ops, ranks)
    shift = offsets.reindex(rank).to_numpy(dtype=float)
    start = start_raw - shift
    end = end_raw - shift
    if len(ops):
        op_shift = offsets.reindex(ops["rank"].to_numpy()).to_numpy(dtype=float)
        ops["start"] = ops["start"].to_numpy(dtype=float) - op_shift
        ops["end"] = ops["end"].to_numpy(dtype=float) - op_shift
        last_in = ops.groupby("op")["start"].transform("max").to_numpy()
        transfer = ops["end"].to_numpy() - last_in
        if (transfer < -1e-9).any():
            notes.append(
                f"{int((transfer < -1e-9).sum())} operation end(s) came before the last rank's "
                "start even after clock alignment; their transfer is taken as 0"
            )
        transfer = np.maximum(transfer, 0.0)
        # The network's part is the operation's, the same on every rank: the fastest rank's transfer.
        # What a rank took beyond it (woken late, descheduled, a ring's last steps) is its own lateness.
        common = pd.Series(transfer).groupby(ops["op"].to_numpy()).transform("min").to_numpy()
        ops["transfer"] = common
        ops["late"] = transfer - common
    else:
        ops["transfer"] = []
        ops["late"] = []
    step_all = events["step"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    if len(ops):
        # an op's step: the step of its (first) event on the rank
        first_row = pd.Series(np.flatnonzero(row_span >= 0)).groupby(row_span[row_span >= 0]).min()
        ops["step"] = step_all[first_row.reindex(np.arange(len(ops))).to_numpy(dtype=np.int64)]
    else:
        ops["step"] = []

    return ops, row_op, row_span, offsets, start, end
