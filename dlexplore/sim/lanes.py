"""The lanes of a replay graph: every stream of a rank with busy events, its busy and compute runs,
and each rank's consumer lane (the one with the most compute). See :mod:`dlexplore.sim.graph`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..traces.intervals import merge_intervals

#: Categories that make a lane busy (a lane with none of them is not a lane).
BUSY_CATEGORIES = ("compute", "cpu", "communication", "data", "runtime", "memcpy", "memset")


#: Host runtime calls that block until the device is done (substrings of the event name).
SYNC_NAMES = ("Synchronize",)


_BLOCKING_COPIES = ("cudaMemcpy", "cudaMemcpy2D", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "hipMemcpy")


_DEVICE_PREFIX = "cuda:"


@dataclass
class Lane:
    """One stream of one rank, replayed as segments between nodes (times in s, aligned clocks)."""

    rank: int
    stream: str
    device: bool
    busy_start: np.ndarray
    busy_end: np.ndarray
    busy_first: np.ndarray  # event row of the first event of each busy period
    compute_start: np.ndarray
    compute_end: np.ndarray
    compute_before: np.ndarray  # compute time before each compute interval
    typical_gap: float  # median gap between busy periods, waits for other lanes left out (s)
    nodes: list[int] = field(default_factory=list)

    def compute_until(self, t: np.ndarray) -> np.ndarray:
        """Compute time (s) on the lane from its start up to each time in ``t`` (s)."""
        t = np.asarray(t, dtype=float)
        if self.compute_start.size == 0:
            return np.zeros(t.shape)
        i = np.searchsorted(self.compute_start, t, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(t - self.compute_start[j], 0.0, self.compute_end[j] - self.compute_start[j])
        return np.where(i >= 0, self.compute_before[j] + inside, 0.0)

    @property
    def compute_total(self) -> float:
        """Compute time (s) on the whole lane."""
        if self.compute_start.size == 0:
            return 0.0
        return float(self.compute_before[-1] + self.compute_end[-1] - self.compute_start[-1])


def _consumer_lanes(lanes: list[Lane]) -> dict[int, int]:
    """Each rank's consumer lane: the one with the most compute."""
    consumer: dict[int, int] = {}
    for lane_id, lane in enumerate(lanes):
        best = consumer.get(lane.rank)
        if lane.compute_total > 0 and (best is None or lane.compute_total > lanes[best].compute_total):
            consumer[lane.rank] = lane_id
    return consumer


def _lanes(
    rank: np.ndarray,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    busy: np.ndarray,
    compute: np.ndarray,
) -> tuple[list[Lane], list[np.ndarray], np.ndarray, dict[tuple[int, str], int]]:
    """The lanes (one per rank and stream with busy events, their busy and compute runs), the event
    rows of each, every event's lane (-1: none) and the lane of each (rank, stream)."""
    # rows grouped by lane with one sort
    lane_codes, lane_uniques = pd.factorize(pd.MultiIndex.from_arrays([rank, stream]))
    lanes: list[Lane] = []
    lane_rows: list[np.ndarray] = []
    lane_of_code = np.full(len(lane_uniques), -1, dtype=np.int64)
    busy_rows = np.flatnonzero(busy)
    busy_rows = busy_rows[np.argsort(lane_codes[busy_rows], kind="stable")]
    cuts = np.flatnonzero(np.diff(lane_codes[busy_rows])) + 1
    for rows in np.split(busy_rows, cuts) if busy_rows.size else []:
        code = lane_codes[rows[0]]
        r, st = lane_uniques[code]
        busy_runs = merge_intervals(start[rows], end[rows])
        bs, be, bfirst = busy_runs.start, busy_runs.end, busy_runs.first
        crow = rows[compute[rows]]
        compute_runs = merge_intervals(start[crow], end[crow])
        cs, ce = compute_runs.start, compute_runs.end
        before = np.concatenate([[0.0], np.cumsum(ce - cs)[:-1]]) if cs.size else cs
        lane_of_code[code] = len(lanes)
        lane_rows.append(rows)
        lanes.append(
            Lane(
                rank=int(r),
                stream=str(st),
                device=str(st).startswith(_DEVICE_PREFIX),
                busy_start=bs,
                busy_end=be,
                busy_first=rows[bfirst],
                compute_start=cs,
                compute_end=ce,
                compute_before=before,
                typical_gap=0.0,
            )
        )
    event_lane = np.where(lane_codes >= 0, lane_of_code[lane_codes], -1)
    lane_id_of = {(lane.rank, lane.stream): i for i, lane in enumerate(lanes)}

    return lanes, lane_rows, event_lane, lane_id_of
