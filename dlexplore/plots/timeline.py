"""Bokeh builders for measured traces: a decimated per-rank timeline, breakdown bars per rank and
the collective table. Nothing here knows about ipywidgets.

The timeline must stay responsive with a million events, so it never draws them all:

- :class:`TimelineIndex` is built once per trace (vectorised numpy, no loop per event). It sorts
  the events by *group*, one (row, category) pair, a row being one rank's thread or stream, and
  merges each group's overlapping intervals into disjoint ones. Their cumulative busy time is
  kept as breakpoints: ``C_g(t)``, the busy time of group ``g`` before ``t``, is piecewise linear
  between them (slope 1 inside a merged interval, 0 in a gap), so it is exact at every ``t``.
- :func:`timeline_columns` draws a window ``[x0, x1]`` (ms). When the window holds at most
  ``max_events`` events of the selected ranks and categories, each is a rectangle (nested events
  drawn thinner, on top of their parents). Otherwise every row is cut into equal bins and each
  category's busy time in a bin, ``C_g(right) - C_g(left)``, becomes a bar whose height is its
  share of the bin; categories that overlap in time on one row (a CPU operator inside another
  category's) are stacked and scaled to fit the lane. Neighbouring bins of the same height merge
  into one bar. The busy time in the bars of a row and category therefore adds up to the exact
  length of the union of its events within the window (up to float rounding): decimation changes
  what is drawn, never the totals.

Times on the x axis are milliseconds from the first event of the trace, on each rank's own clock
(pass ``offsets`` to align ranks' clocks, e.g. :func:`dlexplore.traces.collectives.clock_offsets`).

Sources (stable names, for ``document.get_model_by_name``): ``trace_timeline``,
``trace_breakdown``, ``trace_collectives``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource,
    CustomJS,
    DataTable,
    Div,
    FactorRange,
    FixedTicker,
    HoverTool,
    Legend,
    LegendItem,
    NumberFormatter,
    Range1d,
    StringFormatter,
    TableColumn,
)
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from ..errors import DlexploreError
from ..traces.intervals import merge_intervals
from ..traces.schema import CATEGORIES
from . import _columns as cols
from .figures import _legend_below
from .js import script

__all__ = [
    "BREAKDOWN_PARTS",
    "CATEGORY_COLORS",
    "TRACE_SOURCE_NAMES",
    "TimelineIndex",
    "TimelineView",
    "TraceFigures",
    "collective_columns",
    "default_bins",
    "measured_step_columns",
    "rank_breakdown_columns",
    "timeline_columns",
]

TRACE_SOURCE_NAMES = ("trace_timeline", "trace_breakdown", "trace_collectives")

LIGHT_GREY = "#DDDDDD"
#: Event category -> colour (Okabe-Ito where there are enough; see ``_columns``).
CATEGORY_COLORS = {
    "compute": cols.BLUE,
    "communication": cols.VERMILION,
    "memcpy": cols.GREEN,
    "memset": cols.YELLOW,
    "data": cols.ORANGE,
    "runtime": cols.PURPLE,
    "cpu": cols.SKY,
    "annotation": cols.GREY,
    "step": LIGHT_GREY,
    "other": "#000000",
}

#: The per-rank breakdown stack: (column, legend label, colour), as the explorer's step stack.
BREAKDOWN_PARTS = (
    ("compute_only", "compute", cols.BLUE),
    ("comm_overlapped", "communication overlapped by compute", cols.SKY),
    ("comm_exposed", "communication (exposed)", cols.VERMILION),
    ("memcpy", "memcpy and memset", cols.GREEN),
    ("data", "data loading", cols.ORANGE),
    ("idle", "idle", LIGHT_GREY),
)

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

# Half the height of a row's lane (rows are 1 apart); nested events shrink by this factor per level.
_HALF_LANE = 0.4
_NEST_SHRINK = 0.72
_MAX_DEPTH_DRAWN = 5
# Bars in the binned view are quantised to 1 % of the lane, so that equal neighbours merge.
_HEIGHT_STEPS = 100

_CATEGORY_INDEX = {name: i for i, name in enumerate(CATEGORIES)}
_NC = len(CATEGORIES)


def _human_bytes(n: float) -> str:
    """``12.0 MiB (12,582,912 bytes)``; "" for NaN."""
    if not np.isfinite(n):
        return ""
    for unit, size in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit} ({n:,.0f} bytes)"
    return f"{n:,.0f} bytes"


def _as_events(trace: Any) -> pd.DataFrame:
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
        events = _as_events(trace)
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

        stream = events["stream"]
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

        category = events["category"]
        cat_names = np.asarray(category.cat.categories.astype(str), dtype=object)
        cat_code = np.array(
            [_CATEGORY_INDEX.get(c, _CATEGORY_INDEX["other"]) for c in cat_names], dtype=np.int64
        )[category.cat.codes.to_numpy(np.int64)]

        # One sort by (group, start): merged intervals and per-bin event counts both come from it.
        group = row.astype(np.int64) * _NC + cat_code
        order = np.lexsort((start, group))
        self.order = order
        g_sorted = group[order]
        s_sorted = start[order]
        self.group_ids, first = np.unique(g_sorted, return_index=True)
        self.group_row = self.group_ids // _NC
        self.group_cat = self.group_ids % _NC
        self._start_key = g_sorted + 1j * s_sorted  # complex: numpy orders it (real, imag), exactly

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

        # The columns the exact view reads, kept in the event table's order.
        self._start, self._end, self._row, self._cat = start, end, row, cat_code
        self._events = events
        self.span = (float(start.min()), float(end.max())) if n else (0.0, 1.0)
        self.ranks = np.unique(rank)
        self.categories = tuple(CATEGORIES[c] for c in np.unique(cat_code))
        step = events["step"]
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
            return np.ones(_NC, dtype=bool)
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


def _empty_timeline() -> dict[str, np.ndarray]:
    return {
        c: np.array(
            [], dtype=object if c in _TEXT_COLUMNS else np.float32 if c in _FLOAT32_COLUMNS else float
        )
        for c in TIMELINE_COLUMNS
    }


def timeline_columns(
    index: TimelineIndex,
    x0: float | None = None,
    x1: float | None = None,
    *,
    ranks: Iterable[int] | None = None,
    categories: Iterable[str] | None = None,
    max_events: int = 10_000,
    bins: int = 500,
    max_bars: int = 60_000,
) -> tuple[dict[str, np.ndarray], TimelineView]:
    """The ``trace_timeline`` columns for the window ``[x0, x1]`` (ms from the first event).

    Parameters
    ----------
    index:
        The trace's :class:`TimelineIndex`.
    x0, x1:
        The visible window, ms; default the whole trace.
    ranks, categories:
        Rows of these ranks and events of these categories only (all when None).
    max_events:
        At most this many events in the window are drawn one by one; more are binned.
    bins:
        Bins per row across the window in the binned view (about one per 2 pixels); fewer when
        ``rows x bins`` would exceed ``max_bars``.

    Returns
    -------
    (columns, view)
        Columns (see :data:`TIMELINE_COLUMNS`): ``left``/``right`` (ms), ``top``/``bottom`` (row
        units, y grows downwards: row ``i`` spans ``i - 0.4`` to ``i + 0.4``), ``row`` (position
        among the rows shown), ``rank``, ``stream``, ``name``, ``category``, ``start_ms``,
        ``duration_ms`` (for a bin: busy time in it), ``busy`` (fraction of the bar's width that
        is busy: 1 for an event), ``count`` (events; for a bin: events starting in it), ``size``
        (bytes, as text), ``collective``, ``step`` (text). ``view`` says what was drawn.
    """
    lo, hi = index.span
    x0 = lo if x0 is None else float(x0)
    x1 = hi if x1 is None else float(x1)
    if not x1 > x0:
        raise DlexploreError(f"the window must have x1 > x0 (ms), got {x0} to {x1}")
    rows_on = index.row_mask(ranks)
    cats_on = index.category_mask(categories)
    positions = np.cumsum(rows_on) - 1  # row -> position among the rows shown
    shown_rows = np.flatnonzero(rows_on)
    labels = index.rows[shown_rows].tolist()
    row_ranks = index.row_rank[shown_rows].tolist()

    selected = rows_on[index._row] & cats_on[index._cat]
    in_window = selected & (index._start < x1) & (index._end > x0)
    count = int(in_window.sum())
    if count <= max_events:
        data = _event_columns(index, np.flatnonzero(in_window), positions)
        return data, TimelineView("events", x0, x1, count, len(data["left"]), 0, labels, row_ranks)

    n_bins = int(max(8, min(bins, max_bars // max(1, len(shown_rows)))))
    # bins cover only the part of the window that holds events: no resolution spent on nothing
    b0, b1 = max(x0, lo), min(x1, hi)
    data = _binned_columns(index, b0, b1, n_bins, rows_on, cats_on, positions)
    return data, TimelineView("binned", x0, x1, count, len(data["left"]), n_bins, labels, row_ranks)


def _event_columns(index: TimelineIndex, idx: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
    """One rectangle per event; nested events thinner and drawn after (on top of) their parents."""
    if not idx.size:
        return _empty_timeline()
    start, end, row = index._start[idx], index._end[idx], index._row[idx]
    # Nesting depth among the events drawn: how many of them on the same row are open at this
    # one's start. Ancestors of a drawn event overlap the window too, so they are all here.
    order = np.lexsort((idx, -(end - start), start, row))
    pos_in_row = np.empty(idx.size, dtype=np.int64)
    row_sorted = row[order]
    row_first = np.searchsorted(row_sorted, row_sorted, side="left")
    pos_in_row[order] = np.arange(idx.size) - row_first
    end_keys = np.sort(row + 1j * end)
    closed = np.searchsorted(end_keys, row + 1j * start, side="right") - np.searchsorted(
        end_keys, row + 0j, side="left"
    )
    depth = np.maximum(pos_in_row - closed, 0)
    draw = np.lexsort((start, depth))
    idx, start, end, row, depth = idx[draw], start[draw], end[draw], row[draw], depth[draw]
    half = _HALF_LANE * _NEST_SHRINK ** np.minimum(depth, _MAX_DEPTH_DRAWN)
    y = positions[row].astype(float)
    events = index._events
    take = lambda name: events[name].to_numpy()[idx]  # noqa: E731
    step = events["step"].to_numpy(dtype=float, na_value=np.nan)[idx]
    nbytes = take("bytes").astype(float)
    return {
        "left": start,
        "right": end,
        "top": (y - half).astype(np.float32),
        "bottom": (y + half).astype(np.float32),
        "row": y.astype(np.float32),
        "rank": take("rank").astype(np.float32),
        "stream": index.row_stream[row],
        "name": take("name").astype(str).astype(object),
        "category": np.asarray(CATEGORIES, dtype=object)[index._cat[idx]],
        "start_ms": start,
        "duration_ms": end - start,
        "busy": np.ones(idx.size, dtype=np.float32),
        "count": np.ones(idx.size, dtype=np.float32),
        "size": np.array([_human_bytes(b) for b in nbytes], dtype=object),
        "collective": take("collective").astype(str).astype(object),
        "step": np.array(["" if not np.isfinite(s) else str(int(s)) for s in step], dtype=object),
    }


def _binned_columns(
    index: TimelineIndex,
    x0: float,
    x1: float,
    n_bins: int,
    rows_on: np.ndarray,
    cats_on: np.ndarray,
    positions: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per row, category and bin: the busy time, as stacked bars (see the module docstring)."""
    groups = np.flatnonzero(rows_on[index.group_row] & cats_on[index.group_cat])
    if not groups.size or not x1 > x0:
        return _empty_timeline()
    edges = np.linspace(x0, x1, n_bins + 1)
    width = edges[1:] - edges[:-1]
    busy = np.diff(index.cumulative_busy(groups, edges), axis=1)  # (G, B), ms
    busy = np.clip(busy, 0.0, width)
    started = np.diff(index.starts_before(groups, edges), axis=1)
    share = busy / width
    # stack the categories of a row: groups are sorted by row, then by category
    g_row = index.group_row[groups]
    row_first = np.searchsorted(g_row, g_row, side="left")
    cum = np.cumsum(share, axis=0)
    base = np.where(row_first[:, None] > 0, cum[np.maximum(row_first - 1, 0)], 0.0)
    below = cum - share - base
    starts = np.flatnonzero(np.r_[True, g_row[1:] != g_row[:-1]])
    row_total = np.add.reduceat(share, starts, axis=0)[np.searchsorted(g_row[starts], g_row)]
    scale = 1.0 / np.maximum(row_total, 1.0)
    height = np.round(share * scale * _HEIGHT_STEPS)
    offset = np.round(below * scale * _HEIGHT_STEPS)
    # a busy bin stays visible even when its share rounds to nothing (the outline draws 1 px)
    on = busy > 0
    g_idx, b_idx = np.nonzero(on)
    if not g_idx.size:
        return _empty_timeline()
    h, o = height[g_idx, b_idx], offset[g_idx, b_idx]
    # merge neighbouring bins of one group with the same drawn height and offset
    new = np.ones(g_idx.size, dtype=bool)
    new[1:] = (
        (g_idx[1:] != g_idx[:-1]) | (b_idx[1:] != b_idx[:-1] + 1) | (h[1:] != h[:-1]) | (o[1:] != o[:-1])
    )
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, g_idx.size - 1]
    busy_run = np.add.reduceat(busy[g_idx, b_idx], first)
    count_run = np.add.reduceat(started[g_idx, b_idx], first).astype(float)
    g_run = groups[g_idx[first]]
    left = edges[b_idx[first]]
    right = edges[b_idx[last] + 1]
    y = positions[index.group_row[g_run]].astype(float)
    lane = 2 * _HALF_LANE / _HEIGHT_STEPS
    bottom = y + _HALF_LANE - o[first] * lane
    top = bottom - h[first] * lane
    category = np.asarray(CATEGORIES, dtype=object)[index.group_cat[g_run]]
    shares = busy_run / (right - left)
    # no per-bar text beyond the category and stream: these columns go to the page at every zoom
    names = np.full(len(first), "(merged)", dtype=object)
    blank = np.full(len(first), "", dtype=object)
    return {
        "left": left,
        "right": right,
        "top": top.astype(np.float32),
        "bottom": bottom.astype(np.float32),
        "row": y.astype(np.float32),
        "rank": index.row_rank[index.group_row[g_run]].astype(np.float32),
        "stream": index.row_stream[index.group_row[g_run]],
        "name": names,
        "category": category,
        "start_ms": left,
        "duration_ms": busy_run,
        "busy": shares.astype(np.float32),
        "count": count_run.astype(np.float32),
        "size": blank,
        "collective": blank.copy(),
        "step": blank.copy(),
    }


# ---------------------------------------------------------------------------------------------
# breakdown bars and the collective table


def _mean_or_step(ds: xr.Dataset, name: str, step: int | None) -> np.ndarray:
    if name not in ds:
        return np.zeros(ds.sizes["rank"])
    da = ds[name]
    if step is not None:
        da = da.sel(step=step)
    elif "step" in da.dims:
        da = da.mean("step", skipna=True)
    return np.nan_to_num(da.values.astype(float), nan=0.0)


def _stack_parts(ds: xr.Dataset, step: int | None) -> dict[str, np.ndarray]:
    """The :data:`BREAKDOWN_PARTS` in ms from a breakdown dataset (mean per step, or one step)."""
    compute = _mean_or_step(ds, "time_compute", step)
    comm = _mean_or_step(ds, "time_comm", step)
    exposed = _mean_or_step(ds, "time_comm_exposed", step)
    overlapped = np.clip(comm - exposed, 0.0, compute)
    return {
        "compute_only": (compute - overlapped) * 1e3,
        "comm_overlapped": overlapped * 1e3,
        "comm_exposed": exposed * 1e3,
        "memcpy": (_mean_or_step(ds, "time_memcpy", step) + _mean_or_step(ds, "time_memset", step)) * 1e3,
        "data": _mean_or_step(ds, "time_data", step) * 1e3,
        "idle": _mean_or_step(ds, "time_idle", step) * 1e3,
        "step_time": _mean_or_step(ds, "step_time", step) * 1e3,
        "comm_total": comm * 1e3,
    }


def rank_breakdown_columns(
    ds: xr.Dataset | None,
    *,
    ranks: Iterable[int] | None = None,
    step: int | None = None,
) -> dict[str, np.ndarray]:
    """Breakdown bars per rank (ms): the mean per step over all steps, or step ``step``.

    ``ds`` is a breakdown on (rank, step) (:meth:`dlexplore.traces.Trace.breakdown`). The stack is
    the explorer's: ``compute_only`` = compute with no communication under it,
    ``comm_overlapped`` = communication hidden behind compute (time_comm - time_comm_exposed),
    ``comm_exposed``; then ``memcpy`` (with memset), ``data`` and ``idle``. Compute, overlapped
    and exposed communication and idle add up to the step time when memcpy and data loading run
    alone; when they run beside compute the stack is taller than ``step_time`` (in the hover).
    ``slower`` is the rank's step time over the median of the ranks shown, minus 1.
    """
    names = [
        "label",
        "rank",
        *(c for c, _, _ in BREAKDOWN_PARTS),
        "step_time",
        "comm_total",
        "slower",
        "steps",
        "events",
    ]
    if ds is None or "rank" not in ds.dims:
        return {n: np.array([], dtype=object if n == "label" else float) for n in names}
    if ranks is not None:
        ds = ds.sel(rank=[r for r in ds["rank"].values if r in set(int(x) for x in ranks)])
        if not ds.sizes["rank"]:
            return rank_breakdown_columns(None)
    if step is not None and step not in ds["step"].values:
        raise DlexploreError(f"the breakdown has no step {step}; steps: {ds['step'].values.tolist()}")
    parts = _stack_parts(ds, step)
    step_time = parts["step_time"]
    median = np.median(step_time) if step_time.size else np.nan
    counted = ds["step_time"].sel(step=step) if step is not None else ds["step_time"]
    steps = (
        np.isfinite(counted.values).astype(float)
        if step is not None
        else counted.count("step").values.astype(float)
    )
    events = ds["events"].sel(step=step) if step is not None else ds["events"].mean("step")
    with np.errstate(divide="ignore", invalid="ignore"):
        slower = step_time / median - 1.0 if median > 0 else np.zeros_like(step_time)
    return {
        "label": np.array([str(int(r)) for r in ds["rank"].values], dtype=object),
        "rank": ds["rank"].values.astype(float),
        **parts,
        "slower": slower,
        "steps": steps,
        "events": np.asarray(events.values, dtype=float),
    }


def measured_step_columns(ds: xr.Dataset, *, label: str, gpus: int | None = None) -> dict[str, np.ndarray]:
    """A measured breakdown as one bar for the explorer's step-time plot (ms, mean over ranks and
    steps). ``gpus`` defaults to the breakdown's number of ranks; the bar's x factor is
    ``"<gpus>: <label>"``."""
    if "rank" not in ds.dims or "step" not in ds.dims:
        raise DlexploreError("a measured breakdown needs dims (rank, step): use trace.breakdown()")
    gpus = int(gpus if gpus is not None else ds.attrs.get("world_size", ds.sizes["rank"]))
    parts = _flat_mean(ds)
    return {
        "label": np.array([f"{gpus}: {label}"], dtype=object),
        "trace": np.array([label], dtype=object),
        "gpus": np.array([float(gpus)]),
        **{k: np.array([v]) for k, v in parts.items()},
        "ranks": np.array([float(ds.sizes["rank"])]),
        "steps": np.array([float(ds["step_time"].count())]),
        "source": np.array([str(ds.attrs.get("source", ""))], dtype=object),
    }


def _flat_mean(ds: xr.Dataset) -> dict[str, float]:
    """Mean over ranks and steps (NaN-aware) of the stack parts, ms."""
    means = ds.mean(("rank", "step"), skipna=True)
    parts = _stack_parts(means.expand_dims(rank=[0]), None)
    return {k: float(v[0]) for k, v in parts.items()}


def collective_columns(table: pd.DataFrame | None) -> dict[str, np.ndarray]:
    """The collective table's columns for ``trace_collectives``: times in ms, bandwidths in GB/s.

    ``table`` is :meth:`dlexplore.traces.Trace.collectives` (times in s, algbw and busbw in GB/s).
    """
    names = (
        "collective",
        "bytes",
        "size",
        "ranks",
        "count",
        "time_ms",
        "time_min_ms",
        "time_max_ms",
        "algbw",
        "busbw",
        "skew_ms",
    )
    if table is None or not len(table):
        return {n: np.array([], dtype=object if n in ("collective", "size") else float) for n in names}

    def get(name):
        return table[name].to_numpy(float) if name in table else np.full(len(table), np.nan)

    nbytes = get("bytes")
    return {
        "collective": table["collective"].astype(str).to_numpy(object),
        "bytes": nbytes,
        "size": np.array([_human_bytes(b) for b in nbytes], dtype=object),
        "ranks": get("ranks"),
        "count": get("count"),
        "time_ms": get("time") * 1e3,
        "time_min_ms": get("time_min") * 1e3,
        "time_max_ms": get("time_max") * 1e3,
        "algbw": get("algbw"),
        "busbw": get("busbw"),
        "skew_ms": get("skew") * 1e3,
    }


# ---------------------------------------------------------------------------------------------
# the figures


def _truncate(label: str, n: int = 34) -> str:
    return label if len(label) <= n else label[: n - 1] + "…"


class TraceFigures:
    """The trace's timeline, breakdown bars per rank and collective table, built once.

    :meth:`show_timeline`, :meth:`show_breakdown` and :meth:`show_collectives` replace the sources'
    data and a few model properties (titles, axis ticks, ranges); the figures stay.

    Parameters
    ----------
    index:
        The trace's :class:`TimelineIndex` (rows, categories and the time span).
    width:
        Width of the timeline, pixels; the breakdown and the table share it below.
    """

    def __init__(self, index: TimelineIndex, *, width: int = 1100, timeline_height: int | None = None):
        self.index = index
        self.sources = {name: ColumnDataSource(name=name) for name in TRACE_SOURCE_NAMES}
        self.width = width
        self.timeline = self._timeline_figure(width, timeline_height)
        # the table needs about 640 pixels for its ten columns; the bars take the rest
        table_width = min(660, width // 2 + 100)
        self.breakdown = self._breakdown_figure(width - table_width - 20, 380)
        self.collectives = self._collective_table(table_width, 330)
        self.collectives_title = Div(
            text="<b>Collectives</b>", name="trace_collectives_title", width=table_width
        )
        self.layout = column(
            self.timeline,
            row(self.breakdown, column(self.collectives_title, self.collectives)),
            name="dlexplore_trace",
        )

    # -- building --------------------------------------------------------------------------------

    def _timeline_figure(self, width: int, height: int | None):
        index = self.index
        lo, hi = index.span
        pad = 0.01 * (hi - lo) if hi > lo else 1.0
        n_rows = max(1, len(index.rows))
        height = height or int(np.clip(110 + 22 * n_rows, 280, 720))
        source = self.sources["trace_timeline"]
        source.data = _empty_timeline()
        fig = figure(
            name="trace_timeline_figure",
            title="Timeline",
            width=width,
            height=height,
            x_range=Range1d(
                lo - pad, hi + pad, bounds=(lo - pad, hi + pad), min_interval=1e-5, name="trace_timeline_x"
            ),
            y_range=Range1d(n_rows - 0.5, -0.5, name="trace_timeline_y"),
            x_axis_label="time from the first event (ms)",
            tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
            active_drag="xpan",
            active_scroll="xwheel_zoom",
            # The bars are decimated already; BokehJS's own level of detail would draw every tenth
            # of them in grey for half a second after each wheel turn.
            lod_threshold=None,
        )
        present = list(index.categories) or ["other"]
        cmap = factor_cmap(
            "category", palette=[CATEGORY_COLORS[c] for c in CATEGORIES], factors=list(CATEGORIES)
        )
        bars = fig.quad(
            left="left",
            right="right",
            top="top",
            bottom="bottom",
            source=source,
            fill_color=cmap,
            line_color=cmap,
            line_width=1,
            fill_alpha=0.9,
            name="trace_timeline_bars",
        )
        # A fixed legend, one swatch per category in the trace, from glyphs with no data.
        items = []
        for name in present:
            # one datum at NaN: drawn nowhere, but the legend has a value to paint its swatch with
            swatch = fig.quad(
                left=[np.nan],
                right=[np.nan],
                top=[np.nan],
                bottom=[np.nan],
                fill_color=CATEGORY_COLORS[name],
                line_color=CATEGORY_COLORS[name],
            )
            items.append(LegendItem(label=name, renderers=[swatch]))
        _legend_below(fig, Legend(items=items), ncols=min(len(items), 10))
        # One set of tooltips for both views: an event is a bar busy all along with one event.
        fig.add_tools(
            HoverTool(
                renderers=[bars],
                tooltips=[
                    ("name", "@name"),
                    ("category", "@category"),
                    ("rank / stream", "@rank{0} / @stream"),
                    ("from", "@start_ms{0,0.000} ms to @right{0,0.000} ms"),
                    ("duration", "@duration_ms{0,0.000} ms busy (@busy{0%} of the bar)"),
                    ("events", "@count{0,0} (starting in the bar)"),
                    ("bytes", "@size"),
                    ("collective", "@collective"),
                    ("step", "@step"),
                ],
            )
        )
        fig.yaxis.major_label_text_font_size = "8pt"
        fig.ygrid.grid_line_color = None
        self._set_rows(fig, index.rows.tolist())
        return fig

    def _set_rows(self, fig, labels: Sequence[str]) -> None:
        n = max(1, len(labels))
        fig.yaxis.ticker = FixedTicker(ticks=list(range(len(labels))))
        fig.yaxis.major_label_overrides = {i: _truncate(label) for i, label in enumerate(labels)}
        fig.y_range.start = n - 0.5
        fig.y_range.end = -0.5

    def _breakdown_figure(self, width: int, height: int):
        source = self.sources["trace_breakdown"]
        source.data = rank_breakdown_columns(None)
        ranks = [str(int(r)) for r in self.index.ranks] or ["0"]
        fig = figure(
            name="trace_breakdown_figure",
            title="Where each rank's step time goes",
            width=width,
            height=height,
            x_range=FactorRange(*ranks),
            x_axis_label="rank",
            y_axis_label="time per step (ms)",
            tools="save,reset",
        )
        stack = [c for c, _, _ in BREAKDOWN_PARTS]
        bars = fig.vbar_stack(
            stack,
            x="label",
            source=source,
            width=0.8,
            color=[c for _, _, c in BREAKDOWN_PARTS],
            line_color="white",
        )
        marks = fig.scatter(
            "label", "step_time", source=source, marker="dash", size=26, line_width=3, color="black"
        )
        items = [(label, [bar]) for (_, label, _), bar in zip(BREAKDOWN_PARTS, bars, strict=True)]
        items.append(("step time", [marks]))
        _legend_below(fig, Legend(items=items), ncols=2)
        for bar, (col, label, _) in zip(bars, BREAKDOWN_PARTS, strict=True):
            fig.add_tools(
                HoverTool(
                    renderers=[bar],
                    tooltips=[
                        ("rank", "@label"),
                        (label, f"@{col}{{0,0.000}} ms"),
                        ("step time", "@step_time{0,0.000} ms"),
                        ("vs median rank", "@slower{+0.0%}"),
                        ("all communication", "@comm_total{0,0.000} ms"),
                        ("steps", "@steps{0}"),
                        ("events per step", "@events{0,0}"),
                    ],
                )
            )
        fig.y_range.start = 0
        fig.xgrid.grid_line_color = None
        return fig

    def _collective_table(self, width: int, height: int) -> DataTable:
        source = self.sources["trace_collectives"]
        source.data = collective_columns(None)
        number = lambda fmt: NumberFormatter(format=fmt, text_align="right", nan_format="")  # noqa: E731
        columns = [
            TableColumn(field="collective", title="collective", formatter=StringFormatter(), width=85),
            TableColumn(field="bytes", title="bytes", formatter=number("0,0"), width=90),
            TableColumn(field="ranks", title="ranks", formatter=number("0"), width=40),
            TableColumn(field="count", title="ops", formatter=number("0,0"), width=45),
            TableColumn(field="time_ms", title="time ms", formatter=number("0,0.000"), width=62),
            TableColumn(field="time_min_ms", title="min ms", formatter=number("0,0.000"), width=58),
            TableColumn(field="time_max_ms", title="max ms", formatter=number("0,0.000"), width=58),
            TableColumn(field="algbw", title="algbw GB/s", formatter=number("0,0.000"), width=72),
            TableColumn(field="busbw", title="busbw GB/s", formatter=number("0,0.000"), width=72),
            TableColumn(field="skew_ms", title="skew ms", formatter=number("0,0.000"), width=60),
        ]
        table = DataTable(
            source=source,
            columns=columns,
            width=width,
            height=height,
            index_position=None,
            name="trace_collectives_table",
            sortable=True,
            reorderable=False,
        )
        # BokehJS 3.9.1 and 3.9.2 redraw a DataTable only when its view's indices change, so new
        # data with as many rows as before would not show (bokeh/bokeh#15328): tell the table.
        source.js_on_change("data", CustomJS(args=dict(table=table), code="table.view.change.emit()"))
        return table

    # -- updating --------------------------------------------------------------------------------

    def show_timeline(self, data: Mapping[str, np.ndarray], view: TimelineView) -> None:
        """Draw :func:`timeline_columns` output; rows and the title follow the view."""
        self.sources["trace_timeline"].data = dict(data)
        if list(self.timeline.yaxis.major_label_overrides.values()) != [_truncate(r) for r in view.rows]:
            self._set_rows(self.timeline, view.rows)
        self.timeline.title.text = f"Timeline: {view.text}"

    def show_breakdown(
        self, data: Mapping[str, np.ndarray], *, step: int | None = None, steps: int | None = None
    ) -> None:
        """Draw :func:`rank_breakdown_columns` output (``step``: the one step shown, else the mean)."""
        self.sources["trace_breakdown"].data = dict(data)
        labels = [str(x) for x in data["label"]]
        if labels and list(self.breakdown.x_range.factors) != labels:
            self.breakdown.x_range.factors = labels
        self.breakdown.title.text = (
            f"Step {step} per rank"
            if step is not None
            else f"Mean per step per rank ({steps} steps)"
            if steps
            else "Where each rank's step time goes"
        )

    def show_collectives(self, data: Mapping[str, np.ndarray], *, note: str = "") -> None:
        """Fill the collective table with :func:`collective_columns` output."""
        self.sources["trace_collectives"].data = dict(data)
        n = len(data["collective"])
        heading = f"<b>Collectives</b>: {n} kinds and sizes" if n else "<b>Collectives</b>: none in the trace"
        self.collectives_title.text = (
            heading
            + (f" ({html.escape(note)})" if note else "")
            + "<br><small>time: mean per operation of its duration over the ranks (min, max: fastest and "
            "slowest operation); skew: spread of its start times across ranks, clocks aligned on "
            "collective ends; algbw = bytes / time; busbw = algbw x the nccl-tests factor.</small>"
        )


# ---------------------------------------------------------------------------------------------
# the timeline in a page without a kernel (the HTML report)


def timeline_payload(
    index: TimelineIndex,
    *,
    max_events: int = 10_000,
    bins: int = 500,
    max_bars: int = 60_000,
    embed_events: int = 50_000,
    max_breakpoints: int = 200_000,
) -> dict[str, Any]:
    """What :data:`TIMELINE_JS` needs to redraw the timeline in the browser, as flat arrays.

    The coverage breakpoints of every (row, category) are embedded, so the binned view is computed
    in the page exactly as :func:`timeline_columns` does. With more than ``max_breakpoints`` of
    them, ``C_g`` is sampled on a grid instead (exact at the grid's points, linear between them:
    the busy time of a bar is then exact to within one grid cell at each of its ends). Events are
    embedded one by one only when the trace has at most ``embed_events``; otherwise the page shows
    binned busy time at every zoom and says so.
    """
    exact = index.n_events <= embed_events
    groups = np.arange(len(index.group_ids))
    if len(index._bp_t) <= max_breakpoints:
        bp_t, bp_c, bp_lo, bp_hi = index._bp_t, index._bp_c, index._bp_lo, index._bp_hi
        sampled = 0
    else:
        points = int(max(64, max_breakpoints // max(1, len(groups))))
        lo, hi = index.span
        grid = np.linspace(lo, hi, points)
        bp_c = index.cumulative_busy(groups, grid).ravel()
        bp_t = np.tile(grid, len(groups))
        bp_lo = groups * points
        bp_hi = bp_lo + points
        sampled = points
    payload: dict[str, Any] = {
        "categories": list(CATEGORIES),
        "n_rows": len(index.rows),
        "row_rank": index.row_rank.astype(float),
        "row_stream": [str(s) for s in index.row_stream],
        "group_row": index.group_row.astype(np.int32),
        "group_cat": index.group_cat.astype(np.int32),
        "bp_t": np.asarray(bp_t, float),
        "bp_c": np.asarray(bp_c, float),
        "bp_lo": np.asarray(bp_lo, np.int32),
        "bp_hi": np.asarray(bp_hi, np.int32),
        "sampled": sampled,
        "span": [float(index.span[0]), float(index.span[1])],
        "max_events": int(max_events),
        "bins": int(bins),
        "max_bars": int(max_bars),
        "exact": bool(exact),
        "n_events": int(index.n_events),
    }
    if exact:
        events = index._events
        names = events["name"]
        collective = events["collective"]
        g_start = index._start[index.order]
        g_group = np.searchsorted(index.group_ids, (index._row * _NC + index._cat)[index.order])
        payload.update(
            {
                "start": index._start,
                "end": index._end,
                "row": index._row.astype(np.int32),
                "cat": index._cat.astype(np.int32),
                "name_code": names.cat.codes.to_numpy(np.int32),
                "names": [str(x) for x in names.cat.categories],
                "coll_code": collective.cat.codes.to_numpy(np.int32),
                "collectives": [str(x) for x in collective.cat.categories],
                "bytes": events["bytes"].to_numpy(float),
                "step": events["step"].to_numpy(dtype=float, na_value=np.nan),
                "rank": events["rank"].to_numpy(float),
                "g_start": g_start,
                "g_lo": np.searchsorted(g_group, groups, side="left").astype(np.int32),
                "g_hi": np.searchsorted(g_group, groups, side="right").astype(np.int32),
            }
        )
    return payload


#: BokehJS code that redraws ``trace_timeline`` from :func:`timeline_payload` when the x range or
#: the category boxes change: the same algorithm as :func:`timeline_columns` (all rows shown).
#: Arguments: ``src`` (the source), ``fig`` (the timeline figure), ``payload``, ``boxes`` (a
#: CheckboxGroup of categories, or null), ``present`` (its labels).
TIMELINE_JS = script("timeline")


def trace_summary(trace: Any, index: TimelineIndex, breakdown: xr.Dataset | None) -> list[str]:
    """Facts about a trace as short HTML phrases: source, ranks, events, steps, span, mean step
    time and straggler ranks (from ``breakdown``)."""
    lo, hi = index.span
    world = getattr(trace, "world_size", None) or len(index.ranks)
    source = getattr(trace, "source", index.source)
    parts = [
        f"<b>{html.escape(str(source))}</b>",
        f"{html.escape(str(getattr(trace, 'format', '')))} trace, {len(index.ranks)} of {world} ranks, "
        f"{index.n_events:,} events on {len(index.rows)} threads and streams, {len(index.steps)} steps, "
        f"{hi - lo:,.1f} ms",
    ]
    if breakdown is not None and "step_time" in breakdown and breakdown["step_time"].count() > 0:
        parts.append(f"mean step time {float(breakdown['step_time'].mean(skipna=True)) * 1e3:,.2f} ms")
        if breakdown.sizes.get("rank", 0) > 1:
            from ..traces.breakdown import stragglers

            table = stragglers(breakdown)
            slow = table[table["straggler"]]
            if not slow.empty:
                ranks = ", ".join(
                    f"rank {int(r)} ({x - 1:+.0%})" for r, x in zip(slow["rank"], slow["ratio"], strict=True)
                )
                parts.append(
                    f"<span style='color:{cols.VERMILION}'>straggler: {ranks} in "
                    f"{html.escape(str(table.attrs.get('metric', '')))} against the other "
                    "ranks' median</span>"
                )
    return parts
