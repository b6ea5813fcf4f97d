"""The index every view of a trace's timeline is drawn from (:class:`TimelineIndex`: events sorted by
row and category, their merged busy intervals and cumulative busy time), what a drawn window was
(:class:`TimelineView`) and the columns of the ``trace_timeline`` source. Numpy only, no bokeh: see
:mod:`dlexplore.plots.timeline` for how the views use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ..traces.intervals import merge_intervals
from ..traces.schema import CATEGORIES

#: Columns of ``trace_timeline`` (the same in both modes).
TIMELINE_COLUMNS = (
    "left",
    "right",
    "top",
    "bottom",
    "row",
    "rank",
    "stream",
    "name",
    "category",
    "start_ms",
    "duration_ms",
    "busy",
    "count",
    "size",
    "collective",
    "step",
)


CATEGORY_INDEX = {name: i for i, name in enumerate(CATEGORIES)}


N_CATEGORIES = len(CATEGORIES)


def human_bytes(n: float) -> str:
    """``12.0 MiB (12,582,912 bytes)``; "" for NaN."""
    if not np.isfinite(n):
        return ""
    for unit, size in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit} ({n:,.0f} bytes)"
    return f"{n:,.0f} bytes"


def events_table(trace: Any) -> pd.DataFrame:
    events = getattr(trace, "events", trace)
    if not isinstance(events, pd.DataFrame):
        raise DlexploreError(f"expected a dlexplore Trace or its event table, got {type(trace).__name__}")
    return events


class TimelineIndex:
    """The precomputed index of one trace's events that every timeline view is drawn from.

    Parameters
    ----------
    trace:
        A :class:`dlexplore.traces.Trace` or its event table (schema of
        :mod:`dlexplore.traces.schema`).
    offsets:
        Optional clock offset per rank (s), subtracted from that rank's times (a mapping or a
        ``pandas.Series`` indexed by rank, as :func:`dlexplore.traces.collectives.clock_offsets`
        returns).

    Attributes (times in ms from the first event)
    ---------------------------------------------
    rows: row labels ``"<rank> <stream>"``, sorted by rank then stream; ``row_rank`` their ranks;
    ``span``: (first start, last end), ms; ``ranks``, ``steps``, ``categories`` present.
    """

    def __init__(self, trace: Any, *, offsets: Mapping[int, float] | pd.Series | None = None):
        events = events_table(trace)
        n = len(events)
        self.n_events = n
        self.source = str(events.attrs.get("source", getattr(trace, "source", "")))
        rank = events["rank"].to_numpy(np.int64)
        start_s = events["start"].to_numpy(float)
        if offsets is not None:
            shift = pd.Series(offsets, dtype=float)
            start_s = start_s - shift.reindex(rank).fillna(0.0).to_numpy()
        self.t0_s = float(np.nanmin(start_s)) if n else 0.0
        start = (start_s - self.t0_s) * 1e3
        end = start + events["duration"].to_numpy(float) * 1e3
        finite = np.isfinite(start) & np.isfinite(end)
        if not finite.all():
            raise DlexploreError(
                f"the trace has {int((~finite).sum())} events without a finite start or duration "
                f"(first: event {int(np.flatnonzero(~finite)[0])})"
            )

        row = self._index_rows(events["stream"], rank)

        category = events["category"]
        cat_names = np.asarray(category.cat.categories.astype(str), dtype=object)
        cat_code = np.array(
            [CATEGORY_INDEX.get(c, CATEGORY_INDEX["other"]) for c in cat_names], dtype=np.int64
        )[category.cat.codes.to_numpy(np.int64)]

        # One sort by (group, start): merged intervals and per-bin event counts both come from it.
        group = row.astype(np.int64) * N_CATEGORIES + cat_code
        order = np.lexsort((start, group))
        self.order = order
        g_sorted = group[order]
        s_sorted = start[order]
        self.group_ids, first = np.unique(g_sorted, return_index=True)
        self.group_row = self.group_ids // N_CATEGORIES
        self.group_cat = self.group_ids % N_CATEGORIES
        self._start_key = g_sorted + 1j * s_sorted  # complex: numpy orders it (real, imag), exactly

        self._index_busy(start, end, group, order)

        # The columns the exact view reads, kept in the event table's order.
        self._start, self._end, self._row, self._cat = start, end, row, cat_code
        self._events = events
        self.span = (float(start.min()), float(end.max())) if n else (0.0, 1.0)
        self.ranks = np.unique(rank)
        self.categories = tuple(CATEGORIES[c] for c in np.unique(cat_code))
        self._index_steps(events["step"], rank, start, end)

    def _index_rows(self, stream: pd.Series, rank: np.ndarray) -> np.ndarray:
        """The rows (one per rank and stream, sorted by rank then stream name); each event's row."""
        if not isinstance(stream.dtype, pd.CategoricalDtype):
            stream = stream.astype("category")
        stream_names = np.asarray(stream.cat.categories.astype(str), dtype=object)
        # sort rows by stream *name* within a rank, whatever the category codes' order
        name_order = np.argsort(stream_names, kind="stable")
        stream_rank_of_code = np.empty(len(stream_names), dtype=np.int64)
        stream_rank_of_code[name_order] = np.arange(len(stream_names))
        codes = stream.cat.codes.to_numpy(np.int64)
        n_streams = len(stream_names) + 1
        key = rank * n_streams + stream_rank_of_code[codes]
        row_keys, row = np.unique(key, return_inverse=True)
        self.row_rank = (row_keys // n_streams).astype(np.int64)
        self.row_stream = stream_names[name_order][row_keys % n_streams]
        self.rows = np.array(
            [f"{r} {s}" for r, s in zip(self.row_rank, self.row_stream, strict=True)], dtype=object
        )
        return row

    def _index_busy(self, start: np.ndarray, end: np.ndarray, group: np.ndarray, order: np.ndarray) -> None:
        """Each group's merged intervals and the breakpoints of its cumulative busy time ``C_g``."""
        n = len(start)
        # Merge overlapping (and touching) intervals within each group, on the sort just made.
        merged = merge_intervals(start, end, group, order=order)
        m_start, m_end, m_group = merged.start, merged.end, merged.group
        length = m_end - m_start
        total = np.cumsum(length)
        before = total - length
        group_first_run = np.searchsorted(m_group, self.group_ids)
        before -= before[group_first_run][np.searchsorted(self.group_ids, m_group)] if n else 0.0
        # breakpoints of C_g: (start, busy before), (end, busy before + length), per merged interval
        self._bp_t = np.column_stack([m_start, m_end]).ravel()
        self._bp_c = np.column_stack([before, before + length]).ravel()
        bp_g = np.repeat(m_group, 2)
        self._bp_key = bp_g + 1j * self._bp_t
        self._bp_lo = np.searchsorted(bp_g, self.group_ids, side="left")
        self._bp_hi = np.searchsorted(bp_g, self.group_ids, side="right")
        self.merged_intervals = len(m_start)
        #: busy time (ms) of each group over the whole trace: the length of its events' union
        self.group_busy = np.bincount(
            np.searchsorted(self.group_ids, m_group), weights=length, minlength=len(self.group_ids)
        )

    def _index_steps(self, step: pd.Series, rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """The steps present and each (step, rank)'s window (ms)."""
        has_step = step.notna().to_numpy(bool)
        self.steps = np.unique(step[has_step].to_numpy(np.int64)) if has_step.any() else np.array([], int)
        if has_step.any():
            frame = pd.DataFrame(
                {
                    "rank": rank[has_step],
                    "step": step[has_step].to_numpy(np.int64),
                    "start": start[has_step],
                    "end": end[has_step],
                }
            )
            self._step_windows = frame.groupby(["step", "rank"]).agg(
                start=("start", "min"), end=("end", "max")
            )
        else:
            self._step_windows = None

    def __repr__(self) -> str:
        return (
            f"<TimelineIndex events={self.n_events:,} rows={len(self.rows)} "
            f"merged intervals={self.merged_intervals:,} span={self.span[1] - self.span[0]:,.3f} ms>"
        )

    # -- queries ------------------------------------------------------------------------------

    def step_window(self, step: int, ranks: Iterable[int] | None = None) -> tuple[float, float]:
        """(first start, last end) in ms of step ``step``'s events on ``ranks`` (all when None)."""
        if self._step_windows is None or step not in self._step_windows.index.get_level_values(0):
            raise DlexploreError(f"the trace has no events in step {step}; steps: {self.steps.tolist()}")
        windows = self._step_windows.loc[step]
        if ranks is not None:
            windows = windows[windows.index.isin(list(ranks))]
            if windows.empty:
                raise DlexploreError(f"step {step} has no events on ranks {sorted(ranks)}")
        return float(windows["start"].min()), float(windows["end"].max())

    def cumulative_busy(self, groups: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``C_g(t)``: busy time (ms) of each group (index into :attr:`group_ids`) before each ``t``
        (ms); shape (groups, t)."""
        groups = np.asarray(groups, dtype=np.int64)
        t = np.asarray(t, dtype=float)
        if not len(self._bp_t) or not groups.size:
            return np.zeros((groups.size, t.size))
        keys = self.group_ids[groups][:, None] + 1j * t[None, :]
        j = np.searchsorted(self._bp_key, keys, side="right") - 1
        lo = self._bp_lo[groups][:, None]
        hi = self._bp_hi[groups][:, None]
        inside = j >= lo  # else t is before the group's first breakpoint: nothing busy yet
        j = np.clip(j, 0, len(self._bp_t) - 1)
        nxt = np.minimum(j + 1, len(self._bp_t) - 1)
        t_j, c_j = self._bp_t[j], self._bp_c[j]
        dt = self._bp_t[nxt] - t_j
        dc = self._bp_c[nxt] - c_j
        rising = (j + 1 < hi) & (dt > 0)
        slope = np.divide(dc, dt, out=np.zeros_like(dt), where=rising)
        return np.where(inside, c_j + slope * (t[None, :] - t_j), 0.0)

    def starts_before(self, groups: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Events of each group that start before each ``t`` (ms); shape (groups, t)."""
        groups = np.asarray(groups, dtype=np.int64)
        ids = self.group_ids[groups]
        keys = ids[:, None] + 1j * np.asarray(t, dtype=float)[None, :]
        base = np.searchsorted(self._start_key, ids + 0j, side="left")[:, None]
        return np.searchsorted(self._start_key, keys, side="left") - base

    def row_mask(self, ranks: Iterable[int] | None) -> np.ndarray:
        """Which rows belong to ``ranks`` (all rows when None)."""
        if ranks is None:
            return np.ones(len(self.rows), dtype=bool)
        return np.isin(self.row_rank, np.asarray(list(ranks), dtype=np.int64))

    def category_mask(self, categories: Iterable[str] | None) -> np.ndarray:
        """Which of :data:`CATEGORIES` are selected (all when None)."""
        if categories is None:
            return np.ones(N_CATEGORIES, dtype=bool)
        chosen = list(categories)
        unknown = sorted(set(chosen) - set(CATEGORIES))
        if unknown:
            raise DlexploreError(f"unknown event categories {unknown}; expected some of {CATEGORIES}")
        return np.isin(np.asarray(CATEGORIES, dtype=object), chosen)


def default_bins(width: int) -> int:
    """Bins per row for a timeline ``width`` pixels wide: one per 3 pixels, at least 50."""
    return max(50, int(width) // 3)


@dataclass
class TimelineView:
    """What :func:`timeline_columns` drew: ``mode`` ("events" or "binned"), the window (ms), the
    events in it (selected ranks and categories), the bins per row, the rows' labels."""

    mode: str
    x0: float
    x1: float
    events: int
    drawn: int
    bins: int
    rows: list[str]
    row_ranks: list[int]

    @property
    def text(self) -> str:
        """One line for a status bar or a title."""
        if not self.events:
            return "no events in this window"
        if self.mode == "events":
            return f"{self.events:,} events in {self.x1 - self.x0:,.3f} ms, each drawn"
        return (
            f"{self.events:,} events in {self.x1 - self.x0:,.3f} ms, merged into {self.bins} bins per "
            f"row ({self.drawn:,} bars): zoom in for each event"
        )


_TEXT_COLUMNS = {"stream", "name", "category", "size", "collective", "step"}


# Positions in the lane, counts and shares need no more than float32: half the bytes to the page.
_FLOAT32_COLUMNS = {"top", "bottom", "row", "rank", "busy", "count"}


def empty_timeline_columns() -> dict[str, np.ndarray]:
    return {
        c: np.array(
            [], dtype=object if c in _TEXT_COLUMNS else np.float32 if c in _FLOAT32_COLUMNS else float
        )
        for c in TIMELINE_COLUMNS
    }
