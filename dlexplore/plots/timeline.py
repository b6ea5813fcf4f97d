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

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import DlexploreError
from ..traces.schema import CATEGORIES
from .js import script
from .timeline_index import (
    N_CATEGORIES,
    TimelineIndex,
    TimelineView,
    default_bins,
    empty_timeline_columns,
    human_bytes,
)

# The trace views' one import: the figures and their columns are re-exported from here.
from .trace_figures import (
    BREAKDOWN_PARTS,
    CATEGORY_COLORS,
    TRACE_SOURCE_NAMES,
    TraceFigures,
    collective_columns,
    measured_step_columns,
    rank_breakdown_columns,
    trace_summary,
)

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
    "timeline_payload",
    "trace_summary",
    "TIMELINE_JS",
]


# Half the height of a row's lane (rows are 1 apart); nested events shrink by this factor per level.
_HALF_LANE = 0.4
_NEST_SHRINK = 0.72
_MAX_DEPTH_DRAWN = 5
# Bars in the binned view are quantised to 1 % of the lane, so that equal neighbours merge.
_HEIGHT_STEPS = 100


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
        return empty_timeline_columns()
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
        "size": np.array([human_bytes(b) for b in nbytes], dtype=object),
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
        return empty_timeline_columns()
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
        return empty_timeline_columns()
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


# ---------------------------------------------------------------------------------------------
# the figures


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
        g_group = np.searchsorted(index.group_ids, (index._row * N_CATEGORIES + index._cat)[index.order])
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
