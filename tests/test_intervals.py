"""The one interval-union helper (dlexplore.traces.intervals), on intervals worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dlexplore.traces.intervals import BusyTime, merge_intervals


def test_merge_overlapping_and_touching_intervals():
    # [0, 2] and [1, 3] overlap, [3, 4] touches them: one run [0, 4]; [5, 6] stands alone.
    # Given out of order: the run's first interval is input 1 ([0, 2]), the lone one input 0.
    merged = merge_intervals(np.array([5.0, 0.0, 3.0, 1.0]), np.array([6.0, 2.0, 4.0, 3.0]))
    assert merged.start.tolist() == [0.0, 5.0]
    assert merged.end.tolist() == [4.0, 6.0]
    assert merged.first.tolist() == [1, 0]


def test_groups_never_merge_with_each_other():
    # group 0: [0, 1], [0.5, 2]; group 1: [1, 3] overlaps group 0's times but is its own run
    merged = merge_intervals(np.array([0.0, 1.0, 0.5]), np.array([1.0, 3.0, 2.0]), np.array([0, 1, 0]))
    assert merged.group.tolist() == [0, 1]
    assert merged.start.tolist() == [0.0, 1.0]
    assert merged.end.tolist() == [2.0, 3.0]


def test_an_interval_inside_another_and_no_intervals():
    merged = merge_intervals(np.array([0.0, 1.0]), np.array([10.0, 2.0]))
    assert (merged.start.tolist(), merged.end.tolist()) == ([0.0], [10.0])
    empty = merge_intervals(np.array([]), np.array([]))
    assert empty.start.size == empty.end.size == empty.first.size == 0


def test_busy_time_between_two_instants():
    # rank 0 busy [0, 2] and [1, 3] (union 3 s) and [5, 6]; rank 1 busy [2, 4]
    busy = BusyTime(
        np.array([0, 0, 0, 1]), np.array([0.0, 1.0, 5.0, 2.0]), np.array([2.0, 3.0, 6.0, 4.0]), 0.0, 6.0
    )
    got = busy.covered(
        np.array([0, 0, 0, 1, 1]), np.array([0.0, 2.5, 0.0, 0.0, 3.0]), np.array([6.0, 5.5, 1.0, 6.0, 3.5])
    )
    assert got == pytest.approx([4.0, 1.0, 1.0, 2.0, 0.5])
