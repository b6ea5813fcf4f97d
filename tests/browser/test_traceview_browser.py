"""The trace view as people see it, in Chromium: the standalone trace report opened from disk, and
TraceView in a Voila dashboard (a notebook that loads the collector's sample trace, and one with a
million synthetic events).

The mouse wheel zooms the timeline in the page; the tests read ``trace_timeline`` back from BokehJS.
In the report the page redraws by itself (JavaScript), and its bars are checked against
:func:`dlexplore.plots.timeline.timeline_columns` for the window the page shows; in Voila the range
goes to the kernel and the new bars come back.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from _browser import (
    REPO,
    VENV_BIN,
    Server,
    canvas_sizes,
    free_port,
    has_sources,
    jupyter_env,
    read_source,
    source_names,
    timed_change,
    wait_changed,
    wait_for_sources,
    wait_settled,
)

from dlexplore.plots.analyses import ANALYSIS_SOURCE_NAMES

pytestmark = pytest.mark.browser

SAMPLE = REPO / "data" / "traces" / "gloo-mlp-2rank"
# Real traces of other people's runs (../shared/traces-real beside the repository, as CI has it)
REAL = REPO.parent / "shared" / "traces-real" / "pytorch"
REAL_MAIN = REAL / "HolisticTraceAnalysis__df_index_resolver__df_index_resolver.json.gz"
REAL_OTHER = REAL / "HolisticTraceAnalysis__trace_diff__test__test.json.gz"
ANALYSIS_SOURCES = list(ANALYSIS_SOURCE_NAMES)
TRACE_SOURCES = ["trace_timeline", "trace_breakdown", "trace_collectives"]
FIRST_PLOT_MS = 120_000
# Only catches breakage (a stuck comm, a redraw per event); the figures are in timings.json.
LATENCY_BOUND_MS = 5_000
# The page's report and the dashboards draw at most this many events one by one.
MAX_EVENTS = 500

JS_WINDOW = """() => {
    for (const doc of Bokeh.documents) {
        const r = doc.get_model_by_name('trace_timeline_x');
        if (r) return [r.start, r.end];
    }
    return null;
}"""
JS_TITLE = """() => {
    for (const doc of Bokeh.documents) {
        const f = doc.get_model_by_name('trace_timeline_figure');
        if (f) return f.title.text;
    }
    return null;
}"""


def load_sample():
    from dlexplore.traces import load_trace

    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is not in this checkout")
    return load_trace(SAMPLE)


def assert_painted(page) -> None:
    sizes = canvas_sizes(page)
    assert sizes and all(w > 0 and h > 0 for w, h in sizes), f"Bokeh canvases: {sizes}"
    painted = page.locator(".bk-Canvas canvas").evaluate_all(
        """cs => cs.filter(c => {
            const ctx = c.getContext('2d');
            if (!ctx || !c.width || !c.height) return false;
            const px = ctx.getImageData(0, 0, c.width, c.height).data;
            for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
            return false;
        }).length"""
    )
    assert painted >= 2, "the timeline and the breakdown should both be painted"


def wheel_on_timeline(page, clicks: int = 1, delta: float = -120) -> None:
    """Turn the mouse wheel over the middle of the timeline (the first Bokeh canvas)."""
    box = page.locator(".bk-Canvas").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.4)
    for _ in range(clicks):
        page.mouse.wheel(0, delta)


def totals(data: dict) -> dict:
    """Busy time (ms) per (rank, stream, category) in timeline columns."""
    out: dict = collections.defaultdict(float)
    for rank, stream, category, busy in zip(
        data["rank"], data["stream"], data["category"], data["duration_ms"], strict=True
    ):
        out[(int(rank), stream, category)] += busy
    return out


def assert_same_bars(page_data: dict, python: dict) -> None:
    """The page's bars are Python's (order aside): rectangles, names and busy totals."""
    assert len(page_data["left"]) == len(python["left"])

    def key(d):
        return np.lexsort(
            (
                np.asarray(d["category"], str),
                np.round(np.asarray(d["bottom"], float), 5),
                np.round(np.asarray(d["top"], float), 5),
                np.asarray(d["left"], float),
            )
        )

    # positions in the lane travel as float32 from Python; times are float64 on both sides
    for column, tolerance in (
        ("left", 1e-9),
        ("right", 1e-9),
        ("duration_ms", 1e-9),
        ("top", 1e-6),
        ("bottom", 1e-6),
    ):
        np.testing.assert_allclose(
            np.asarray(page_data[column], float)[key(page_data)],
            np.asarray(python[column], float)[key(python)],
            rtol=tolerance,
            atol=tolerance,
            err_msg=column,
        )
    assert collections.Counter(page_data["name"]) == collections.Counter(python["name"])
    ours, theirs = totals(page_data), totals(python)
    assert ours.keys() == theirs.keys()
    for k, v in theirs.items():
        assert ours[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k


# ---------------------------------------------------------------------------------------------
# the standalone report


def test_trace_report_zooms_filters_and_steps_offline(tmp_path, tab, timings):
    from dlexplore.plots.timeline import TimelineIndex, default_bins, timeline_columns
    from dlexplore.report import write_trace_report

    trace = load_sample()
    out = write_trace_report(tmp_path / "trace.html", trace, title="gloo-mlp-2rank", max_events=MAX_EVENTS)
    index = TimelineIndex(trace)
    bins = default_bins(1100)  # the report's timeline is 1100 pixels wide

    page = tab.page
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(out.as_uri())
    wait_for_sources(page, TRACE_SOURCES, 60_000)
    page.locator(".bk-Canvas canvas").first.wait_for(state="attached", timeout=60_000)
    assert_painted(page)
    columns = ["left", "right", "top", "bottom", "rank", "stream", "name", "category", "duration_ms"]

    # the whole trace: more than MAX_EVENTS events, so binned, with exactly Python's totals
    x0, x1 = page.evaluate(JS_WINDOW)
    first = read_source(page, "trace_timeline", columns)
    python, view = timeline_columns(index, x0, x1, max_events=MAX_EVENTS, bins=bins)
    assert view.mode == "binned"
    assert_same_bars(first, python)
    tab.shot("whole")

    # the wheel zooms in; the page redraws by itself, as Python would for that window
    samples = []
    mode = "binned"
    for _ in range(20):
        change = timed_change(page, "trace_timeline", ["left"], lambda: wheel_on_timeline(page))
        assert change["ms"] is not None, "the wheel over the timeline did not change trace_timeline"
        samples.append(change["ms"])
        assert wait_settled(page, ["trace_timeline"], quiet_ms=150)
        x0, x1 = page.evaluate(JS_WINDOW)
        python, view = timeline_columns(index, x0, x1, max_events=MAX_EVENTS, bins=bins)
        assert_same_bars(read_source(page, "trace_timeline", columns), python)
        assert page.evaluate(JS_TITLE) == f"Timeline: {view.text}"
        mode = view.mode
        if mode == "events":
            break
    assert mode == "events", "zooming in never reached a window of single events"
    timings["report_wheel_to_plot"] = {
        "samples_ms": samples,
        "what": f"report ({len(trace):,} events): one wheel click to trace_timeline redrawn in the page",
    }
    page.mouse.move(0, 0)
    tab.shot("zoomed")

    # a category box drops its events from the timeline
    before = read_source(page, "trace_timeline", ["category"])
    assert "compute" in before["category"]
    page.get_by_label("compute", exact=True).uncheck()
    after = wait_changed(page, "trace_timeline", before)
    assert "compute" not in after["category"]

    # a step: its bars and collectives, and the timeline zooms to it
    bars = read_source(page, "trace_breakdown", ["label", "step_time"])
    page.locator("select").select_option(label="step 3")
    changed = wait_changed(page, "trace_breakdown", bars)
    expected = trace.breakdown().sel(step=3)["step_time"].values * 1e3
    np.testing.assert_allclose(changed["step_time"], expected, rtol=1e-9)
    assert read_source(page, "trace_collectives", ["count"])["count"] == [1, 1]
    lo, hi = index.step_window(3)
    pad = 0.02 * (hi - lo)
    assert page.evaluate(JS_WINDOW) == pytest.approx([lo - pad, hi + pad])
    # the table shows the step's own numbers (BokehJS 3.9.2 needs a nudge to redraw it)
    cells = page.locator(".slick-row").first.locator(".slick-cell").all_inner_texts()
    assert cells[3] == "1", cells
    tab.shot("step3")

    off_disk = [u for u in requests if not u.startswith(("file:", "data:", "blob:"))]
    assert not off_disk, f"the report fetched: {off_disk}"
    tab.assert_clean()


# ---------------------------------------------------------------------------------------------
# Voila


def _notebook(path: Path, source: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(source))
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(notebook, path)
    return path


SAMPLE_NOTEBOOK = f"""\
import dlexplore.traces
from dlexplore.widgets import TraceView

TraceView(dlexplore.traces.load_trace({str(SAMPLE)!r}), max_events={MAX_EVENTS})
"""

MILLION_NOTEBOOK = """\
import numpy as np
import pandas as pd
from dlexplore.traces import Trace, make_events
from dlexplore.widgets import TraceView

# 1e6 events: 16 ranks x 4 streams over 10 s, kernels of about 20 us
rng = np.random.default_rng(0)
n = 1_000_000
code = rng.integers(0, 4, n)
start = np.sort(rng.uniform(0, 10.0, n))
events = make_events({
    "rank": rng.integers(0, 16, n).astype(np.int32),
    "stream": pd.Categorical.from_codes(code, ["cuda:0:7", "cuda:0:13", "cuda:0:21", "cpu:1:1"]),
    "name": pd.Categorical.from_codes(code, ["sgemm", "ncclDevKernel_AllReduce", "memcpyHtoD", "next"]),
    "category": pd.Categorical.from_codes(code, ["compute", "communication", "memcpy", "data"]),
    "start": start, "duration": rng.exponential(2e-5, n), "step": (start * 2).astype(np.int64),
    "bytes": np.where(code == 1, 4e6, np.nan),
    "collective": pd.Categorical.from_codes((code == 1).astype(int), ["", "allreduce"]),
})
TraceView(Trace(events, "synthetic", files=("million",)))
"""


REAL_NOTEBOOK = f"""\
import warnings
import dlexplore.traces
from dlexplore.widgets import TraceView

warnings.simplefilter("ignore")
TraceView(dlexplore.traces.load_trace({str(REAL_MAIN)!r}), max_events={MAX_EVENTS},
          compare={str(REAL_OTHER)!r})
"""


@pytest.fixture(scope="module")
def traceview_voila(tmp_path_factory, artifacts_dir):
    """Voila (dlexplore's offline template) on a folder with two TraceView notebooks."""
    from dlexplore.serve import TEMPLATES

    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is not in this checkout")
    home = tmp_path_factory.mktemp("traceview-voila")
    root = home / "notebooks"
    root.mkdir()
    _notebook(root / "sample.ipynb", SAMPLE_NOTEBOOK)
    _notebook(root / "million.ipynb", MILLION_NOTEBOOK)
    _notebook(root / "real.ipynb", REAL_NOTEBOOK)
    env = jupyter_env(home)
    # Voila's own lab template links CDN stylesheets; dlexplore's leaves them out
    env["JUPYTER_PATH"] = str(TEMPLATES)
    port = free_port()
    argv = [
        str(VENV_BIN / "voila"),
        str(root),
        "--no-browser",
        f"--port={port}",
        "--Voila.ip=127.0.0.1",
        "--Voila.port_retries=0",
        "--VoilaConfiguration.show_tracebacks=True",
        "--VoilaConfiguration.template=dlexplore",
    ]
    server = Server(
        "voila (TraceView)",
        argv,
        port=port,
        cwd=root,
        env=env,
        log_path=artifacts_dir / "voila-traceview-server.log",
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def open_dashboard(tab, url: str) -> float:
    page = tab.page
    start = time.monotonic()
    page.goto(url)
    deadline = start + FIRST_PLOT_MS / 1000
    traceback = page.locator(
        "[data-mime-type='application/vnd.jupyter.error'], [data-mime-type='application/vnd.jupyter.stderr']"
    )
    while not has_sources(page, TRACE_SOURCES, 1000):
        if traceback.count():
            pytest.fail("the notebook wrote an error:\n" + "\n".join(traceback.all_inner_texts()))
        if any(e.startswith("pageerror") for e in tab.errors):
            pytest.fail("JavaScript error in the page:\n" + "\n".join(tab.errors))
        if time.monotonic() > deadline:
            pytest.fail(f"no trace plots after {FIRST_PLOT_MS / 1000:.0f} s; sources: {source_names(page)}")
    page.locator(".bk-Canvas canvas").first.wait_for(state="attached")
    page.locator(".dlx-trace-status").first.wait_for(state="visible")
    return time.monotonic() - start


def status(page) -> str:
    return page.locator(".dlx-trace-status").first.inner_text()


def test_voila_traceview_zooms_and_follows_its_controls(traceview_voila, tab, timings):
    page = tab.page
    waited = open_dashboard(tab, f"{traceview_voila.url}/voila/render/sample.ipynb")
    assert_painted(page)
    trace = load_sample()
    assert f"{len(trace):,} events" in page.locator(".dlx-trace-header").first.inner_text()
    assert "merged into" in status(page)  # more than MAX_EVENTS events: binned
    tab.shot("before")

    samples = []
    for _ in range(20):
        change = timed_change(page, "trace_timeline", ["left"], lambda: wheel_on_timeline(page))
        assert change["ms"] is not None, "the wheel over the timeline did not change trace_timeline"
        samples.append(change["ms"])
        assert wait_settled(page, ["trace_timeline"], quiet_ms=300)
        if "each drawn" in status(page):
            break
    assert "each drawn" in status(page), f"zooming in never drew single events: {status(page)}"
    timings["voila_traceview_wheel_to_plot"] = {
        "samples_ms": samples,
        "first_plot_wait_s": round(waited, 2),
        "what": f"Voila, sample trace ({len(trace):,} events): one wheel click to trace_timeline "
        "redrawn by the kernel and changed in BokehJS",
    }
    page.mouse.move(0, 0)
    tab.shot("zoomed")

    # the step drop-down: the kernel zooms to the step and draws that step's bars
    bars = read_source(page, "trace_breakdown", ["label", "step_time"])
    timeline = read_source(page, "trace_timeline", ["left"])
    collectives = read_source(page, "trace_collectives", ["count"])
    page.locator(".widget-dropdown select").select_option(label="step 3")
    changed = wait_changed(page, "trace_breakdown", bars)
    np.testing.assert_allclose(
        changed["step_time"], trace.breakdown().sel(step=3)["step_time"].values * 1e3, rtol=1e-9
    )
    wait_changed(page, "trace_timeline", timeline)
    # the three sources reach the page one after another: on a loaded machine the table comes last
    assert wait_changed(page, "trace_collectives", collectives)["count"] == [1, 1]
    cells = page.locator(".slick-row").first.locator(".slick-cell").all_inner_texts()
    assert cells[3] == "1", cells

    # a category box
    before = read_source(page, "trace_timeline", ["category"])
    assert "compute" in before["category"]
    page.locator(".dlx-category-compute input").uncheck()
    assert "compute" not in wait_changed(page, "trace_timeline", before)["category"]

    # ranks: only rank 1's rows and bar
    before = read_source(page, "trace_timeline", ["rank"])
    page.locator(".widget-select-multiple select").select_option(label="rank 1")
    after = wait_changed(page, "trace_timeline", before)
    assert set(after["rank"]) == {1}
    assert wait_changed(page, "trace_breakdown", changed)["label"] == ["1"]
    tab.shot("after")
    tab.assert_clean()


def test_voila_a_million_events_stay_responsive(traceview_voila, tab, timings):
    page = tab.page
    waited = open_dashboard(tab, f"{traceview_voila.url}/voila/render/million.ipynb")
    assert_painted(page)
    assert "1,000,000 events" in status(page) and "merged into" in status(page)
    samples = []
    for _ in range(30):
        change = timed_change(page, "trace_timeline", ["left"], lambda: wheel_on_timeline(page, delta=-300))
        assert change["ms"] is not None, "the wheel over the timeline did not change trace_timeline"
        samples.append(change["ms"])
        assert wait_settled(page, ["trace_timeline"], quiet_ms=300)
        if "each drawn" in status(page):
            break
    assert "each drawn" in status(page), status(page)
    timings["voila_million_events"] = {
        "samples_ms": samples,
        "first_plot_s": round(waited, 2),
        "what": "Voila, 1e6 synthetic events: page load to plots (first_plot_s, kernel start and "
        "trace generation included) and one wheel click to trace_timeline redrawn",
    }
    print("\n1e6 events in Voila: " + json.dumps(timings["voila_million_events"]))
    assert float(np.median(samples)) < LATENCY_BOUND_MS, samples
    page.mouse.move(0, 0)  # no hover tooltip in the picture
    tab.shot("million")
    tab.assert_clean()


def test_voila_traceview_analyses_of_a_real_trace(traceview_voila, tab):
    """The analyses' tabs on a real trace (HTA's df_index_resolver: 2 GPUs' NCCL run with memory
    events), diffed against another real run; the step drop-down moves the critical path; the
    kernels tab shows the rank's device time per kernel kind."""
    import os
    import warnings

    if not REAL_MAIN.is_file():
        message = f"{REAL_MAIN} is missing (../shared/traces-real beside the repository)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from dlexplore.traces import load_trace
    from dlexplore.traces.critical_path import critical_path, critical_path_summary
    from dlexplore.traces.diff import trace_diff

    page = tab.page
    open_dashboard(tab, f"{traceview_voila.url}/voila/render/real.ipynb")
    wait_for_sources(page, ANALYSIS_SOURCES, FIRST_PLOT_MS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = load_trace(REAL_MAIN)
        other = load_trace(REAL_OTHER)
    steps = trace.breakdown().step_time.sel(rank=1)
    # all steps shown: the middle step's critical path, its parts adding up to that step
    path = read_source(page, "trace_critical_path", ["part", "time_ms"])
    middle = int(steps.step.values[(len(steps) - 1) // 2])  # the middle step but the last
    assert sum(path["time_ms"]) == pytest.approx(float(steps.sel(step=middle)) * 1e3, rel=1e-6)
    expected = critical_path_summary(critical_path(trace, rank=1, step=middle))
    assert path["time_ms"] == pytest.approx((expected.time.values * 1e3).tolist(), rel=1e-9)
    # the diff tab: the 20 largest changes, as trace_diff orders them
    diff = read_source(page, "trace_diff", ["delta_ms"])
    python = trace_diff(trace, other)["time_delta"].to_numpy()[:20][::-1] * 1e3
    assert diff["delta_ms"] == pytest.approx(python.tolist(), rel=1e-9)
    # memory: one line per device of rank 1 (the CPU and cuda:1)
    assert read_source(page, "trace_memory", ["label"])["label"] == ["cpu", "cuda:1"]
    assert len(read_source(page, "trace_launches", ["delay_us"])["delay_us"]) > 1000
    # kernels: rank 1's device time per kernel kind, as kernel_breakdown sums it
    kinds = trace.kernel_breakdown()
    kinds = kinds[kinds["rank"] == 1]
    shown = read_source(page, "trace_kernels", ["kind", "time_ms"])
    assert shown["kind"] == kinds["kind"].tolist() and "communication" in shown["kind"]
    assert shown["time_ms"] == pytest.approx((kinds["time"] * 1e3).tolist(), rel=1e-9)
    # the step drop-down: the critical path of that step
    page.locator(".widget-dropdown select").select_option(label="step 3")
    changed = wait_changed(page, "trace_critical_path", path)
    assert sum(changed["time_ms"]) == pytest.approx(float(steps.sel(step=3)) * 1e3, rel=1e-6)
    # the tabs switch in the page, and the memory figure is drawn
    page.get_by_text("Kernels", exact=True).click()
    page.wait_for_timeout(500)
    assert_painted(page)
    tab.shot("analyses-kernels")
    page.get_by_text("Memory", exact=True).click()
    page.wait_for_timeout(500)
    assert_painted(page)
    tab.shot("analyses-memory")
    page.get_by_text("Diff", exact=True).click()
    page.wait_for_timeout(500)
    tab.shot("analyses-diff")
    tab.assert_clean()
