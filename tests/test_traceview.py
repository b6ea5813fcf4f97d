"""The trace view: timeline columns (exact and decimated), breakdown bars, collective table, the
TraceView widget's controls, the trace report and measured bars in the explorer.

Numbers are worked out by hand on a two-rank trace built with ``make_events`` (below, times in ms
from the first event): rank 0 is a CPU-only gloo rank (a step span, two nested operators, a gloo
allreduce on gloo's own thread), rank 1 a GPU rank (three kernels, two touching and two
overlapping, then an NCCL allreduce kernel, and the host's step span). Step 2 repeats step 1 10 ms
later. The real-trace tests read the collector's sample traces (tests/data/traces/pytorch,
data/traces) when their reader is installed. The browser side is in
tests/browser/test_traceview_browser.py.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from dlexplore.errors import DlexploreError
from dlexplore.plots.timeline import (
    TRACE_SOURCE_NAMES,
    TimelineIndex,
    TraceFigures,
    collective_columns,
    measured_step_columns,
    rank_breakdown_columns,
    timeline_columns,
    timeline_payload,
)
from dlexplore.report import write_trace_report
from dlexplore.traces import Trace, make_events
from dlexplore.widgets import Explorer, TraceView

MS = 1e-3
T0 = 1000.0  # s: the tools' clocks do not start at zero
REPO = Path(__file__).resolve().parents[1]

#: rank, stream, name, category, start (ms), duration (ms), bytes, collective
STEP = [
    (0, "cpu:10:10", "ProfilerStep#", "step", 0, 10, np.nan, ""),
    (0, "cpu:10:10", "aten::linear", "compute", 1, 4, np.nan, ""),
    (0, "cpu:10:10", "aten::addmm", "compute", 2, 2, np.nan, ""),
    (0, "cpu:10:20", "gloo:all_reduce", "communication", 4, 5, 4e6, "allreduce"),
    (1, "cuda:0:7", "k1", "compute", 0, 3, np.nan, ""),
    (1, "cuda:0:7", "k2", "compute", 3, 2, np.nan, ""),
    (1, "cuda:0:7", "k3", "compute", 4, 2, np.nan, ""),
    (1, "cuda:0:7", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication", 6, 3, 4e6, "allreduce"),
    (1, "cpu:20:20", "ProfilerStep#", "step", 0, 10, np.nan, ""),
]
ROWS = ["0 cpu:10:10", "0 cpu:10:20", "1 cpu:20:20", "1 cuda:0:7"]


def hand_trace(steps=(1, 2), t0: float = T0) -> Trace:
    rows = []
    for k, step in enumerate(steps):
        for rank, stream, name, cat, start, dur, nbytes, coll in STEP:
            rows.append(
                (
                    rank,
                    stream,
                    f"{name}{step}" if name.endswith("#") else name,
                    cat,
                    t0 + (start + 10 * k) * MS,
                    dur * MS,
                    nbytes,
                    coll,
                    step,
                )
            )
    c = list(zip(*rows, strict=True))
    events = make_events(
        {
            "rank": c[0],
            "stream": c[1],
            "name": c[2],
            "category": c[3],
            "start": c[4],
            "duration": c[5],
            "bytes": c[6],
            "collective": c[7],
            "step": c[8],
        }
    )
    return Trace(events, "pytorch", files=("hand/rank0.json", "hand/rank1.json"), world_size=2)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return hand_trace()


@pytest.fixture(scope="module")
def index(trace) -> TimelineIndex:
    return TimelineIndex(trace)


@pytest.fixture(scope="module")
def one_step() -> TimelineIndex:
    """Step 1 on a clock that starts at 0: times in ms are exact after the shift (at T0 = 1000 s,
    1000.001 s is 0.99999999997 ms after 1000 s, and a bin would hold 2e-11 ms of it)."""
    return TimelineIndex(hand_trace(steps=(1,), t0=0.0))


def bars_of(data: dict, rank: int, category: str) -> dict:
    keep = (np.asarray(data["rank"]) == rank) & (np.asarray(data["category"]) == category)
    return {k: np.asarray(v)[keep] for k, v in data.items()}


# ---------------------------------------------------------------------------------------------
# the index


def test_rows_groups_and_busy_time_by_hand(index):
    assert index.rows.tolist() == ROWS  # by rank, then stream name
    assert index.row_rank.tolist() == [0, 0, 1, 1]
    assert index.span == pytest.approx((0.0, 20.0))
    assert index.steps.tolist() == [1, 2]
    busy = {
        (index.rows[r], c): b
        for r, c, b in zip(index.group_row, index.group_cat, index.group_busy, strict=True)
    }
    from dlexplore.traces import CATEGORIES

    named = {(row, CATEGORIES[c]): b for (row, c), b in busy.items()}
    # two steps each: nested operators count once ([1, 5] ms), touching and overlapping kernels too
    assert named == pytest.approx(
        {
            ("0 cpu:10:10", "step"): 20,
            ("0 cpu:10:10", "compute"): 8,
            ("0 cpu:10:20", "communication"): 10,
            ("1 cpu:20:20", "step"): 20,
            ("1 cuda:0:7", "compute"): 12,
            ("1 cuda:0:7", "communication"): 6,
        }
    )
    assert index.step_window(2) == pytest.approx((10.0, 20.0))
    with pytest.raises(DlexploreError, match="no events in step 7"):
        index.step_window(7)


def test_cumulative_busy_is_exact_between_breakpoints(index):
    from dlexplore.traces import CATEGORIES

    g = int(np.flatnonzero((index.group_row == 3) & (index.group_cat == CATEGORIES.index("compute")))[0])
    t = np.array([-1.0, 0.0, 2.5, 5.5, 7.0, 9.5, 12.0, 30.0])
    # kernels cover [0, 6] and [10, 16] ms
    np.testing.assert_allclose(index.cumulative_busy([g], t)[0], [0, 0, 2.5, 5.5, 6, 6, 8, 12], atol=1e-9)
    np.testing.assert_array_equal(index.starts_before([g], t)[0], [0, 0, 1, 3, 3, 3, 4, 6])


def test_clock_offsets_shift_ranks():
    # rank 1's clock runs 0.5 ms ahead: its events move 0.5 ms earlier, and the first event
    # of the trace (time 0) is now rank 1's
    shifted = TimelineIndex(hand_trace(), offsets={1: 0.5 * MS})
    assert shifted.span == pytest.approx((0.0, 20.5))
    data, _ = timeline_columns(shifted, 0.0, 5.0)
    start = dict(zip(data["name"], data["start_ms"], strict=True))
    assert (start["k1"], start["aten::linear"]) == pytest.approx((0.0, 1.5))


# ---------------------------------------------------------------------------------------------
# timeline columns


def test_exact_view_draws_each_event_nested_thinner(index):
    data, view = timeline_columns(index, 0.0, 9.9)
    # events overlapping [0, 9.9]: all of step 1, none of step 2 (from 10 ms)
    assert (view.mode, view.events, view.drawn) == ("events", 9, 9)
    rank0 = bars_of(data, 0, "compute")
    assert rank0["name"].tolist() == ["aten::linear", "aten::addmm"]
    np.testing.assert_allclose(rank0["bottom"] - rank0["top"], [0.8 * 0.72, 0.8 * 0.72**2])
    step0 = bars_of(data, 0, "step")
    np.testing.assert_allclose([step0["top"][0], step0["bottom"][0]], [-0.4, 0.4])
    # parents are drawn before (under) their children
    names = list(data["name"])
    assert names.index("ProfilerStep#1") < names.index("aten::linear") < names.index("aten::addmm")
    comm = bars_of(data, 1, "communication")
    assert comm["size"].tolist() == ["3.8 MiB (4,000,000 bytes)"]
    assert comm["collective"].tolist() == ["allreduce"] and comm["step"].tolist() == ["1"]
    np.testing.assert_allclose([comm["start_ms"][0], comm["duration_ms"][0], comm["row"][0]], [6, 3, 3])
    assert set(data["busy"]) == {1.0} and set(data["count"]) == {1.0}


def test_binned_view_by_hand(one_step):
    data, view = timeline_columns(one_step, 0.0, 10.0, max_events=0, bins=10)
    assert (view.mode, view.bins, view.events) == ("binned", 10, 9)
    step = bars_of(data, 0, "step")
    # the step span fills the lane except where the operators share the bins [1, 5] ms with it
    np.testing.assert_allclose(
        np.c_[step["left"], step["right"], step["duration_ms"]], [[0, 1, 1], [1, 5, 4], [5, 10, 5]]
    )
    np.testing.assert_allclose(step["bottom"] - step["top"], [0.8, 0.4, 0.8])
    compute = bars_of(data, 0, "compute")
    np.testing.assert_allclose(np.c_[compute["left"], compute["right"], compute["duration_ms"]], [[1, 5, 4]])
    # stacked: compute at the lane's bottom (y grows downwards), the step span above it
    assert compute["bottom"][0] == pytest.approx(0.4) and compute["top"][0] == pytest.approx(0.0)
    assert step["bottom"][1] == pytest.approx(0.0) and step["top"][1] == pytest.approx(-0.4)
    kernels = bars_of(data, 1, "compute")
    np.testing.assert_allclose(
        np.c_[kernels["left"], kernels["right"], kernels["duration_ms"], kernels["count"]], [[0, 6, 6, 3]]
    )
    assert kernels["name"].tolist() == ["(merged)"] and kernels["busy"].tolist() == [1.0]


def test_binned_view_clips_to_the_window(index):
    data, _ = timeline_columns(index, 2.25, 7.25, max_events=0, bins=10)
    kernels = bars_of(data, 1, "compute")
    # 0.5 ms bins: [2.25, 5.75] fully busy, [5.75, 6.25] half busy (the kernels end at 6 ms)
    np.testing.assert_allclose(
        np.c_[kernels["left"], kernels["right"], kernels["duration_ms"], kernels["busy"]],
        [[2.25, 5.75, 3.5, 1], [5.75, 6.25, 0.25, 0.5]],
    )
    assert kernels["duration_ms"].sum() == pytest.approx(6 - 2.25)


def _union_in_window(intervals: list[tuple[float, float]], x0: float, x1: float) -> float:
    total, current = 0.0, None
    for start, end in sorted((max(s, x0), min(e, x1)) for s, e in intervals if e > x0 and s < x1):
        if current is None or start > current[1]:
            if current:
                total += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    return total + (current[1] - current[0] if current else 0.0)


def test_decimation_keeps_every_rows_busy_time():
    """Random traces with nesting and overlap: per (rank, stream, category), the busy time in the
    bars equals the union of its events within the window, computed by a plain loop."""
    rng = np.random.default_rng(7)
    for case in range(6):
        n = 300
        rank = rng.integers(0, 3, n)
        stream = rng.choice(["cpu:1:1", "cuda:0:7"], n)
        category = rng.choice(["compute", "communication", "memcpy"], n)
        start = rng.uniform(0, 50, n)
        duration = rng.exponential(1.5, n) * (rng.random(n) > 0.05)  # some zero-length events
        events = make_events(
            {
                "rank": rank,
                "stream": stream,
                "name": [f"e{i}" for i in range(n)],
                "category": category,
                "start": start * MS,
                "duration": duration * MS,
            }
        )
        index = TimelineIndex(events)
        x0, x1 = np.sort(rng.uniform(-5, 60, 2))
        bins = int(rng.integers(8, 400))
        data, view = timeline_columns(index, x0, x1, max_events=0, bins=bins)
        assert view.mode == "binned"
        t = start - start.min()
        for r in range(3):
            for s in ("cpu:1:1", "cuda:0:7"):
                for c in ("compute", "communication", "memcpy"):
                    mask = (rank == r) & (stream == s) & (category == c)
                    expected = _union_in_window(list(zip(t[mask], (t + duration)[mask], strict=True)), x0, x1)
                    got = np.asarray(data["duration_ms"])[
                        (np.asarray(data["rank"]) == r)
                        & (np.asarray(data["stream"]) == s)
                        & (np.asarray(data["category"]) == c)
                    ].sum()
                    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9), (case, r, s, c)
        # every bar stays inside its row's lane and never claims more than its width
        assert np.all(np.asarray(data["top"]) >= np.asarray(data["row"]) - 0.4 - 1e-12)
        assert np.all(np.asarray(data["bottom"]) <= np.asarray(data["row"]) + 0.4 + 1e-12)
        assert np.all(np.asarray(data["busy"]) <= 1 + 1e-12)


def test_ranks_and_categories_filter_the_timeline(index):
    data, view = timeline_columns(index, ranks=[1], categories=["compute"])
    assert view.rows == ["1 cpu:20:20", "1 cuda:0:7"] and view.row_ranks == [1, 1]
    assert set(data["category"]) == {"compute"} and set(data["rank"]) == {1.0}
    assert set(data["row"]) == {1.0}  # the kernels' row is the second of the rows shown
    assert view.events == 6
    with pytest.raises(DlexploreError, match="unknown event categories"):
        timeline_columns(index, categories=["kernels"])
    with pytest.raises(DlexploreError, match="x1 > x0"):
        timeline_columns(index, 5.0, 5.0)


def test_bins_shrink_when_rows_are_many(index):
    _, view = timeline_columns(index, max_events=0, bins=500, max_bars=400)
    assert view.bins == 100  # 400 bars over 4 rows


# ---------------------------------------------------------------------------------------------
# breakdown bars and the collective table


def test_breakdown_bars_per_rank_by_hand(trace):
    data = rank_breakdown_columns(trace.breakdown())
    assert data["label"].tolist() == ["0", "1"]
    # rank 0: compute [1, 5], gloo [4, 9]: 1 ms overlapped, 4 exposed, idle 2 of a 10 ms step;
    # rank 1: kernels [0, 6], NCCL [6, 9]: nothing overlapped, 3 exposed, idle 1
    np.testing.assert_allclose(data["compute_only"], [3, 6])
    np.testing.assert_allclose(data["comm_overlapped"], [1, 0])
    np.testing.assert_allclose(data["comm_exposed"], [4, 3])
    np.testing.assert_allclose(data["idle"], [2, 1])
    np.testing.assert_allclose(data["memcpy"] + data["data"], [0, 0])
    np.testing.assert_allclose(data["step_time"], [10, 10])
    np.testing.assert_allclose(
        data["compute_only"] + data["comm_overlapped"] + data["comm_exposed"] + data["idle"],
        data["step_time"],
    )
    np.testing.assert_allclose(data["steps"], [2, 2])
    np.testing.assert_allclose(data["events"], [4, 5])
    one = rank_breakdown_columns(trace.breakdown(), ranks=[1], step=2)
    assert one["label"].tolist() == ["1"] and one["comm_exposed"].tolist() == pytest.approx([3])
    with pytest.raises(DlexploreError, match="no step 9"):
        rank_breakdown_columns(trace.breakdown(), step=9)


def test_breakdown_means_skip_missing_steps():
    ds = xr.Dataset(
        {
            name: (("rank", "step"), np.array(values, float))
            for name, values in {
                "step_time": [[0.010, 0.030], [0.020, np.nan]],
                "time_compute": [[0.006, 0.006], [0.008, np.nan]],
                "time_comm": [[0.004, 0.004], [0.004, np.nan]],
                "time_comm_exposed": [[0.001, 0.003], [0.004, np.nan]],
                "time_idle": [[0.003, 0.021], [0.008, np.nan]],
                "events": [[5, 7], [4, 0]],
            }.items()
        },
        coords={"rank": [0, 1], "step": [3, 4]},
    )
    data = rank_breakdown_columns(ds)
    # rank 0: overlapped (3 + 1) / 2 = 2 ms; rank 1 has one step only
    np.testing.assert_allclose(data["comm_overlapped"], [2, 0])
    np.testing.assert_allclose(data["compute_only"], [4, 8])
    np.testing.assert_allclose(data["step_time"], [20, 20])
    np.testing.assert_allclose(data["steps"], [2, 1])
    np.testing.assert_allclose(data["slower"], [0, 0])


def test_collective_columns_units(trace):
    data = collective_columns(trace.collectives())
    # one allreduce per step of 4e6 bytes: 5 ms on rank 0, 3 ms on rank 1 -> 4 ms, 1 GB/s;
    # busbw = algbw x 2 (p - 1) / p = 1 GB/s at p = 2; starts 4 and 6 ms apart by 2 ms
    assert data["collective"].tolist() == ["allreduce"]
    np.testing.assert_allclose(
        [
            data["bytes"][0],
            data["ranks"][0],
            data["count"][0],
            data["time_ms"][0],
            data["algbw"][0],
            data["busbw"][0],
            data["skew_ms"][0],
        ],
        [4e6, 2, 2, 4, 1, 1, 2],
    )
    assert data["size"].tolist() == ["3.8 MiB (4,000,000 bytes)"]
    assert all(len(v) == 0 for v in collective_columns(None).values())


# ---------------------------------------------------------------------------------------------
# the figures and the widget


def test_figures_keep_their_sources(index):
    figures = TraceFigures(index, width=900)
    sources = dict(figures.sources)
    assert sorted(sources) == sorted(TRACE_SOURCE_NAMES)
    assert all(s.name == name for name, s in sources.items())
    data, view = timeline_columns(index, ranks=[0])
    figures.show_timeline(data, view)
    assert figures.timeline.yaxis.major_label_overrides == {0: "0 cpu:10:10", 1: "0 cpu:10:20"}
    assert (figures.timeline.y_range.start, figures.timeline.y_range.end) == (1.5, -0.5)
    assert figures.sources == sources


def test_traceview_reacts_to_its_controls(trace):
    view = TraceView(trace, max_events=12)
    figures, sources = view.figures, dict(view.sources)
    assert view.view.mode == "binned" and view.view.events == 18  # the whole trace, 18 > 12 events
    assert "dlx-trace-status" in view.status._dom_classes
    assert "2 of 2 ranks" in view.header.value and "mean step time 10.00 ms" in view.header.value
    assert list(view.sources["trace_breakdown"].data["label"]) == ["0", "1"]
    assert list(view.sources["trace_collectives"].data["count"]) == [2]

    view.controls["step"].value = 2  # zooms to step 2 (2 % either side): 11 events, each drawn
    assert view.window == pytest.approx((9.8, 20.2))
    assert view.view.mode == "events" and view.view.events == 11
    assert view.figures.breakdown.title.text == "Step 2 per rank"
    assert list(view.sources["trace_collectives"].data["count"]) == [1]  # that step's allreduce only

    view.controls["ranks"].value = (1,)
    assert set(view.sources["trace_timeline"].data["rank"]) == {1.0}
    assert list(view.sources["trace_breakdown"].data["label"]) == ["1"]
    assert view.figures.breakdown.x_range.factors == ["1"]

    view.controls["categories"]["step"].value = False
    assert set(view.sources["trace_timeline"].data["category"]) == {"compute", "communication"}

    view.controls["ranks"].value = ()  # nothing selected: empty plots, no error
    assert len(view.sources["trace_timeline"].data["left"]) == 0
    assert len(view.sources["trace_breakdown"].data["label"]) == 0

    view.set(ranks=[0, 1], step=None, categories=["communication"])
    assert view.window == pytest.approx((-0.2, 20.2))
    assert set(view.sources["trace_timeline"].data["category"]) == {"communication"}
    assert view.view.events == 4 and view.view.mode == "events"
    assert view.figures is figures and view.sources == sources  # new data, same figures
    with pytest.raises(DlexploreError, match="no rank"):
        view.set(ranks=[5])
    with pytest.raises(DlexploreError, match="no step 9"):
        view.set(step=9)


def test_zooming_in_the_page_redraws_the_window(trace):
    # throttle=0: every change is drawn at once (with a running event loop, e.g. the one Playwright's
    # sync API keeps in this process during the browser tests, changes would be batched instead)
    view = TraceView(trace, max_events=12, throttle=0)
    x_range = view.figures.timeline.x_range
    before = view.redraws
    # what jupyter_bokeh does when the page's range changes: set the property, run the callbacks
    x_range.start = 2.0
    x_range.end = 7.0
    assert view.redraws == before + 2
    assert view.view.mode == "events" and (view.view.x0, view.view.x1) == (2.0, 7.0)
    assert view.zoom(0, 20).mode == "binned"


def test_range_changes_in_a_burst_are_drawn_once(trace):
    view = TraceView(trace, max_events=12, throttle=0.02)
    x_range = view.figures.timeline.x_range

    async def wheel() -> int:
        before = view.redraws
        for k in range(10):  # a wheel turn: start and end, ten times
            x_range.start = 1.0 + 0.1 * k
            x_range.end = 9.0 - 0.1 * k
        assert view.redraws == before  # not yet: drawn once the burst is over
        await asyncio.sleep(0.1)
        return view.redraws - before

    # A thread of its own: Playwright's sync API may hold a running loop in this one (browser tests).
    drawn: list[int] = []
    worker = threading.Thread(target=lambda: drawn.append(asyncio.run(wheel())))
    worker.start()
    worker.join(timeout=30)
    assert drawn == [1]
    assert (view.view.x0, view.view.x1) == pytest.approx((1.9, 8.1))


def test_traceview_shows_given_analyses_and_notes_missing_ones():
    events = hand_trace().events
    bare = Trace(events[events["category"] != "communication"].reset_index(drop=True), "pytorch")
    view = TraceView(bare, collectives=pd.DataFrame())
    assert len(view.sources["trace_collectives"].data["collective"]) == 0
    assert "none in the trace" in view.figures.collectives_title.text
    with pytest.raises(DlexploreError, match="max_events"):
        TraceView(bare, max_events=-1)


def test_a_million_events_first_view(record_property):
    """Measured, not asserted tightly: the index and first view of 1e6 events (16 ranks, 4 streams)."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    streams = np.array(["cuda:0:7", "cuda:0:13", "cuda:0:21", "cpu:1:1"])
    code = rng.integers(0, 4, n)
    start = np.sort(rng.uniform(0, 10.0, n))
    events = make_events(
        {
            "rank": rng.integers(0, 16, n).astype(np.int32),
            "stream": pd.Categorical.from_codes(code, streams),
            "name": pd.Categorical.from_codes(
                code, ["sgemm", "ncclDevKernel_AllReduce", "memcpyHtoD", "next"]
            ),
            "category": pd.Categorical.from_codes(code, ["compute", "communication", "memcpy", "data"]),
            "start": start,
            "duration": rng.exponential(2e-5, n),
            "step": (start * 2).astype(np.int64),
        }
    )
    t = time.perf_counter()
    index = TimelineIndex(events)
    built = time.perf_counter() - t
    data, view = timeline_columns(index)
    first = time.perf_counter() - t
    figures = TraceFigures(index)
    figures.show_timeline(data, view)
    drawn = time.perf_counter() - t
    t = time.perf_counter()
    _, zoomed = timeline_columns(index, 5000.0, 5001.0)
    zoom = time.perf_counter() - t
    record_property("index_s", built)
    record_property("first_view_s", first)
    print(
        f"\n1e6 events: index {built:.2f} s, first view {first:.2f} s, figures {drawn:.2f} s, "
        f"zoom to 1 ms {zoom * 1e3:.0f} ms ({zoomed.events} events, {zoomed.mode}); "
        f"{len(data['left']):,} bars"
    )
    assert view.mode == "binned" and view.events == n and len(data["left"]) <= 60_000
    assert zoomed.mode == "events"
    assert drawn < 30  # a bound that only catches a per-event Python loop


# ---------------------------------------------------------------------------------------------
# the HTML report and the explorer


def test_trace_report_is_standalone(tmp_path, trace):
    target = write_trace_report(tmp_path / "trace.html", trace, title="hand trace")
    page = target.read_text(encoding="utf-8")
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', page)
    assert "Bokeh" in page and len(page) > 500_000
    for name in (*TRACE_SOURCE_NAMES, "trace_step", "trace_categories", "trace_timeline_figure"):
        assert re.search(rf'"name":\s*"{name}"', page), name
    assert "hand trace" in page and "mean step time 10.00 ms" in page
    assert "Every event is in this page" in page


def test_trace_report_keeps_the_old_file_on_failure(tmp_path, trace):
    target = tmp_path / "trace.html"
    target.write_text("old")
    with pytest.raises(DlexploreError):
        write_trace_report(target, tmp_path / "no-such-trace.json")
    with pytest.raises(DlexploreError, match="does not exist"):
        write_trace_report(tmp_path / "no" / "folder.html", trace)
    assert target.read_text() == "old"
    assert not list(tmp_path.glob(".*.tmp"))


def test_report_payload_samples_coverage_when_large(index):
    full = timeline_payload(index)
    assert full["exact"] and full["sampled"] == 0 and len(full["start"]) == 18
    small = timeline_payload(index, embed_events=10, max_breakpoints=10)
    assert not small["exact"] and "start" not in small and small["sampled"] == 64
    # sampled on a grid, the cumulative busy time is still exact at the grid's points
    g = len(index.group_ids) - 1
    np.testing.assert_allclose(
        small["bp_c"][small["bp_lo"][g] : small["bp_hi"][g]],
        index.cumulative_busy([g], np.linspace(0, 20, 64))[0],
    )


def test_explorer_lays_a_measured_breakdown_beside_the_prediction(trace):
    explorer = Explorer()
    label = explorer.add_trace(trace, label="hand")
    data = explorer.sources["step_breakdown_measured"].data
    assert label == "hand" and list(data["label"]) == ["2: hand"]
    # mean over ranks and steps of the bars above
    np.testing.assert_allclose(
        [
            data["compute_only"][0],
            data["comm_overlapped"][0],
            data["comm_exposed"][0],
            data["idle"][0],
            data["step_time"][0],
        ],
        [4.5, 0.5, 3.5, 1.5, 10],
    )
    factors = list(explorer.figures.step_breakdown.x_range.factors)
    assert factors[:4] == ["1", "2", "2: hand", "4"]
    ds = trace.breakdown()
    ds.attrs["name"] = "as dataset"
    explorer.add_trace(ds)
    assert list(explorer.sources["step_breakdown_measured"].data["label"]) == ["2: hand", "2: as dataset"]
    # a model change keeps the measured bars
    explorer.controls["batch_size"].value = 128
    assert len(explorer.sources["step_breakdown_measured"].data["label"]) == 2
    single = measured_step_columns(ds, label="x", gpus=16)
    assert single["label"].tolist() == ["16: x"]


# ---------------------------------------------------------------------------------------------
# real traces


def _sample(path: Path) -> Trace:
    # Every shipped format has its reader: a missing one (or a dependency of it) fails here.
    from dlexplore import traces

    return traces.load_trace(path)


@pytest.mark.parametrize("folder", ["tests/data/traces/pytorch/gloo-mlp-2rank", "data/traces/gloo-cnn-2rank"])
def test_traceview_on_a_real_trace(folder, tmp_path):
    path = REPO / folder
    assert path.is_dir(), f"{folder}: the sample trace is part of the repository"
    trace = _sample(path)
    view = TraceView(trace)
    data = view.sources["trace_timeline"].data
    assert len(data["left"]) > 0 and view.view.events > 0
    assert set(view.sources["trace_breakdown"].data["label"]) == {str(r) for r in trace.ranks}
    assert "allreduce" in list(view.sources["trace_collectives"].data["collective"])
    # zoom into the first step: each event drawn, every one inside the window
    step = int(view.index.steps[0])
    view.set(step=step)
    x0, x1 = view.window
    shown = view.sources["trace_timeline"].data
    assert view.view.mode == "events" or view.view.events > view.max_events
    assert np.all(np.asarray(shown["right"]) > x0) and np.all(np.asarray(shown["left"]) < x1)
    target = write_trace_report(tmp_path / "real.html", trace)
    assert target.stat().st_size > 500_000


def test_analyses_tabs_say_what_the_trace_cannot_give(tmp_path):
    """A trace without correlation ids or memory events (this module's hand-made one): the launch
    and queue figures stay empty, the memory figure says how to record memory, the critical path of
    the middle step adds up to its window; compare= adds the diff tab with the largest changes."""
    from dlexplore.plots.analyses import ANALYSIS_SOURCE_NAMES
    from dlexplore.traces.diff import trace_diff

    trace = hand_trace()
    view = TraceView(trace, compare=trace.select(ranks=[0]))
    assert set(ANALYSIS_SOURCE_NAMES) <= set(view.sources)
    assert view.launches is None and view.memory is None
    assert len(view.sources["trace_launches"].data["delay_us"]) == 0
    assert "no memory events" in view.analysis_figures.memory.title.text
    path = view.sources["trace_critical_path"].data
    middle = view.breakdown.step.values[(len(view.breakdown.step) - 1) // 2]  # the middle but the last
    window = float(view.breakdown.step_time.sel(rank=0, step=middle))
    assert sum(path["time_ms"]) == pytest.approx(window * 1e3)
    expected = trace_diff(trace, trace.select(ranks=[0]))["time_delta"].to_numpy()[:20][::-1] * 1e3
    assert view.sources["trace_diff"].data["delta_ms"].tolist() == pytest.approx(expected.tolist())


def test_kernels_tab_follows_the_rank():
    """The Kernels tab draws kernel_breakdown of the rank shown: on the real H200 GPT-2 trace
    (tests/data/traces/pytorch-gpu/README.txt) 112.586 ms of device time, element-wise kernels first;
    the hand-made trace's CPU-only rank 0 says it ran nothing on a device."""
    from dlexplore.traces import load_trace

    gpt2 = load_trace(Path(__file__).parent / "data" / "traces" / "pytorch-gpu" / "h200-gpt2-b8", cache=False)
    view = TraceView(gpt2)
    shown = view.sources["trace_kernels"].data
    kinds = gpt2.kernel_breakdown()
    assert list(shown["kind"]) == kinds["kind"].tolist() and shown["kind"][0] == "elementwise"
    assert shown["time_ms"].tolist() == pytest.approx((kinds["time"] * 1e3).tolist())
    assert (
        sum(shown["time_ms"]) == pytest.approx(112.58587)
        and "112.586 ms" in view.analysis_figures.kernels.title.text
    )
    hand = TraceView(hand_trace())
    hand.set(ranks=[0])
    assert len(hand.sources["trace_kernels"].data["kind"]) == 0
    assert "rank 0 ran nothing on a device" in hand.analysis_figures.kernels.title.text
    hand.set(ranks=[1])
    assert len(hand.sources["trace_kernels"].data["kind"]) > 0
