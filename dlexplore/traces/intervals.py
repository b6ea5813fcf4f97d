"""The union of intervals, the one helper every layer uses to count busy time without double counting
overlaps: :func:`merge_intervals` merges overlapping (and touching) intervals, per group, into
disjoint runs; :class:`BusyTime` answers "how long was the group busy between t0 and t1" for many
groups and instants at once, by binary search over those runs.

Used by the breakdown and the temporal breakdown (:mod:`dlexplore.traces.breakdown`,
:mod:`dlexplore.traces.temporal`), the replay's lanes (:mod:`dlexplore.sim.graph`) and the timeline's
level-of-detail index (:mod:`dlexplore.plots.timeline`). No Python loop per interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["MergedIntervals", "merge_intervals", "BusyTime"]


@dataclass(frozen=True)
class MergedIntervals:
    """Disjoint runs of intervals, sorted by (group, start).

    Attributes
    ----------
    start, end:
        Each run's start and end (the inputs' units).
    group:
        Each run's group.
    first:
        Each run's earliest interval, as an index into the inputs.
    """

    start: np.ndarray
    end: np.ndarray
    group: np.ndarray
    first: np.ndarray


def merge_intervals(
    start: np.ndarray,
    end: np.ndarray,
    group: np.ndarray | None = None,
    *,
    order: np.ndarray | None = None,
) -> MergedIntervals:
    """The disjoint union of the intervals ``[start, end]`` of each group (one group when None).

    A run starts where an interval starts after every earlier end of its group; intervals that
    touch are merged. ``order``, when the caller has it, is the permutation that sorts the inputs by
    (group, start) (``np.lexsort((start, group))``), saving the sort.
    """
    start = np.asarray(start, dtype=float)
    end = np.asarray(end, dtype=float)
    group = np.zeros(start.size, dtype=np.int64) if group is None else np.asarray(group)
    if start.size == 0:
        return MergedIntervals(start, end, group, np.zeros(0, dtype=np.int64))
    if order is None:
        order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    boundary = np.ones(s.size, dtype=bool)
    boundary[1:] = g[1:] != g[:-1]
    if boundary[1:].any():
        running = pd.Series(e).groupby(np.cumsum(boundary), sort=False).cummax().to_numpy()
    else:
        running = np.maximum.accumulate(e)
    previous = np.empty(s.size)
    previous[0] = -np.inf
    previous[1:] = running[:-1]
    previous[boundary] = -np.inf
    runs = np.flatnonzero(s > previous)
    return MergedIntervals(s[runs], np.maximum.reduceat(e, runs), g[runs], order[runs])


class BusyTime:
    """Time covered by intervals, per group, between any two instants: ``covered(groups, t0, t1)``.

    The intervals of each group (a rank) are merged once into disjoint segments; the busy time up
    to ``t`` is then the cumulative length of the segments before ``t`` plus the part of the one
    that holds ``t``, found by binary search. All groups share one sorted array: a group's times are
    shifted by ``group x (span + 1)`` so they never interleave with another group's. Every interval
    union of the breakdowns is a difference of two such lookups: no Python loop per event or step.
    """

    def __init__(self, group: np.ndarray, start: np.ndarray, end: np.ndarray, origin: float, span: float):
        self.stride = float(span) + 1.0
        self.origin = float(origin)
        # one group in key space: the stride keeps every group's times apart
        merged = merge_intervals(self._key(group, start), self._key(group, end))
        self.seg_start, self.seg_end = merged.start, merged.end
        lengths = self.seg_end - self.seg_start
        self.before = np.concatenate([[0.0], np.cumsum(lengths)])

    def _key(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        return group.astype(np.float64) * self.stride + (np.asarray(t, dtype=np.float64) - self.origin)

    def upto(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Busy time of ``group`` before each ``t`` (plus every earlier group's, which cancels)."""
        key = self._key(group, t)
        if not len(self.seg_start):
            return np.zeros(len(key))
        i = np.searchsorted(self.seg_start, key, side="right")
        j = np.maximum(i - 1, 0)
        inside = np.clip(key - self.seg_start[j], 0.0, self.seg_end[j] - self.seg_start[j])
        return np.where(i > 0, self.before[j] + inside, 0.0)

    def covered(self, group: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
        """Busy time of ``group`` within ``[t0, t1]`` (s)."""
        return self.upto(group, t1) - self.upto(group, t0)
