"""Your own run in the explorer, as a person drives it in Chromium: `dlexplore explore --trace` on the
bundled transformer job traced at 1 and 2 ranks (data/traces/gloo-transformer-*rank, written by
dlexplore's own collector), then calibrate, extrapolate and switch on tensor parallelism; and the
same in JupyterLab from a notebook. The layout checks of test_explorer_layout hold with the trace
loaded and the hybrid controls in use; the slider-to-plot latencies are kept in timings.json.
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

import nbformat
import pytest
from _browser import (
    REPO,
    VENV_BIN,
    Server,
    free_port,
    jupyter_env,
    layout_problems,
    open_side_view,
    read_source,
    timed_change,
    wait_settled,
)
from test_explorer_browser import (
    EXPLORER_SOURCES,
    FIRST_PLOT_MS,
    LATENCY_BOUND_MS,
    _control,
    gpu_slider,
    run_all_cells,
    wait_for_plots,
)

pytestmark = pytest.mark.browser

RUNS = [REPO / "data" / "traces" / f"gloo-transformer-{n}rank" for n in (1, 2)]
SIZES = [(1280, 720), (1920, 1080)]
SOURCES = [*EXPLORER_SOURCES, "throughput_measured"]


@pytest.fixture(scope="module")
def trace_server(tmp_path_factory, artifacts_dir):
    """`dlexplore explore --trace RUN1 --trace RUN2` as a user starts it."""
    home = tmp_path_factory.mktemp("voila-trace-home")
    port = free_port()
    argv = [str(VENV_BIN / "dlexplore"), "explore", "--no-browser", "--port", str(port)]
    for run in RUNS:
        argv += ["--trace", str(run)]
    server = Server(
        "dlexplore explore --trace",
        argv,
        port=port,
        cwd=home,
        env=jupyter_env(home),
        log_path=artifacts_dir / "voila-trace-server.log",
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _open(tab, url: str) -> None:
    tab.page.goto(url)
    wait_for_plots(tab)
    assert wait_settled(tab.page, SOURCES, quiet_ms=400), "the page kept changing"


def _calibrate(page) -> str:
    page.get_by_role("button", name="Calibrate to the trace").click()
    page.wait_for_function(
        "() => document.querySelector('.dlx-trace-report')?.innerText.includes('Calibrated')", timeout=120_000
    )
    page.wait_for_function(
        """() => Bokeh.documents.some((d) => { const m = d.get_model_by_name("throughput_band");
               return m && m.data && (m.data.get ? m.data.get("upper") : m.data.upper)?.length > 0; })""",
        timeout=60_000,
    )
    return page.locator(".dlx-trace-report").inner_text()


def _tensor_parallel(page) -> None:
    """The tp slider one step right: tp = 2, and the hybrid model draws."""
    before = page.locator(".dlx-hybrid-note").inner_text()
    handle = _control(page, "slider", "tp (tensor)").get_by_role("slider")
    assert handle.count() == 1, "expected one slider labelled 'tp (tensor)'"
    handle.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "(old) => document.querySelector('.dlx-hybrid-note').innerText !== old", arg=before, timeout=60_000
    )
    assert wait_settled(page, SOURCES, quiet_ms=400)


def test_your_run_calibrated_and_extrapolated_in_voila(trace_server, tab, timings):
    page = tab.page
    _open(tab, trace_server.page_url)
    panel = page.locator(".dlx-trace-status").inner_text()
    assert "Your run" in panel and "gloo-transformer-1rank" in panel and "gloo-transformer-2rank" in panel
    assert "Not in the trace" in panel and "the run used the CPU" in panel
    # the runs at 1 and 2 GPUs, each with its error against the line
    measured = read_source(page, "throughput_measured", ["gpus", "error", "group"])
    assert measured["gpus"] == [1, 2] and measured["group"] == ["your run", "your run"]
    # the controls the trace set are marked
    assert page.locator(".dlx-inferred").count() >= 6
    tab.shot("loaded")

    report = _calibrate(page)
    assert "compute_efficiency =" in report and "held out" in report
    groups = read_source(page, "throughput_measured", ["group"])["group"]
    assert groups == ["your run (fitted)", "your run (held out)"]
    assert read_source(page, "throughput_uncalibrated", ["throughput"])["throughput"], "no model-before line"
    tab.shot("calibrated")

    # extrapolate: 1 -> 16 GPUs on the calibrated model, then tensor parallelism
    handle = gpu_slider(page)
    for _ in range(4):
        handle.focus()
        change = timed_change(
            page, "throughput_selected", ["gpus"], lambda: page.keyboard.press("ArrowRight")
        )
        assert change["ms"] is not None
        assert wait_settled(page, SOURCES, quiet_ms=200)
    assert read_source(page, "throughput_selected", ["gpus"])["gpus"] == [16]
    _tensor_parallel(page)
    rows = read_source(page, "comm_phases", ["row"])["row"]
    assert "tensor parallel" in rows, rows
    assert "tp 2" in page.locator(".dlx-headline").inner_text()
    tab.shot("tensor-parallel")

    # the sliders' path with the trace loaded, calibrated and the hybrid model drawing
    samples: dict[str, list[float]] = {}
    moves = {
        "GPUs": ("throughput_selected", ["gpus"]),
        "Batch/GPU": ("throughput_predicted", ["throughput"]),
        "tp (tensor)": ("throughput_predicted", ["throughput"]),
    }
    for label, (source, columns) in moves.items():
        handle = _control(page, "slider", label).get_by_role("slider")
        samples[label] = []
        for key in ["ArrowRight", "ArrowLeft"] * 5:
            handle.focus()
            change = timed_change(page, source, columns, lambda key=key: page.keyboard.press(key))
            assert change["ms"] is not None, f"{key} on {label} did not change {source}"
            samples[label].append(change["ms"])
            assert wait_settled(page, SOURCES, quiet_ms=200), "the page kept changing after a move"
    for label, key in (("GPUs", "gpu"), ("Batch/GPU", "batch"), ("tp (tensor)", "tp")):
        timings[f"voila_trace_hybrid_{key}_slider_to_plot"] = {
            "samples_ms": samples[label],
            "what": f"Voila, two traced runs loaded and calibrated, tp = 2: ArrowRight/Left on {label} "
            "to the plot's data changed in BokehJS",
        }
        assert statistics.median(samples[label]) < LATENCY_BOUND_MS, (label, samples[label])
    problems = layout_problems(page)
    assert not problems, "\n".join(problems)
    tab.assert_clean()


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_layout_holds_with_a_trace_and_the_hybrid_model(trace_server, tab, width, height):
    page = tab.page
    page.set_viewport_size({"width": width, "height": height})
    _open(tab, trace_server.page_url)
    _calibrate(page)
    _tensor_parallel(page)
    page.wait_for_timeout(300)
    tab.shot(f"{width}x{height}")
    problems = layout_problems(page)
    assert not problems, "\n".join(problems)
    tab.assert_clean()


def _lab_notebook(lab_server) -> str:
    runs = ", ".join(repr(str(r)) for r in RUNS)
    source = (
        "from dlexplore.widgets import Explorer\n\n"
        f"mine = Explorer(trace=[{runs}], gpu='A100-80GB', network='IB-HDR', gpus=32, tp=2)\n"
        "mine.calibrate_trace()\nmine"
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(source))
    # a kernelspec, or JupyterLab opens a kernel chooser that blocks the page
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    notebook.metadata["language_info"] = {"name": "python"}
    nbformat.write(notebook, Path(lab_server.root) / "your-run.ipynb")
    return "your-run.ipynb"


def test_jupyterlab_your_run_beside_the_file_browser_and_in_a_side_panel(lab_server, tab, timings):
    page = tab.page
    page.set_viewport_size({"width": 1280, "height": 720})
    name = _lab_notebook(lab_server)
    page.goto(f"{lab_server.url}/lab/tree/{name}?reset")
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=FIRST_PLOT_MS)
    browser = page.locator(".jp-FileBrowser")
    if not browser.is_visible():
        page.locator(".jp-SideBar [data-id='filebrowser']").click()
    start = time.monotonic()
    run_all_cells(page)
    wait_for_plots(tab)
    page.locator(".dlx-trace-report").first.wait_for(state="visible", timeout=FIRST_PLOT_MS)
    assert wait_settled(page, SOURCES, quiet_ms=400)
    timings["jupyterlab_trace_first_plot"] = {
        "seconds": round(time.monotonic() - start, 2),
        "what": "Run All of Explorer(trace=two runs, tp=2) plus calibrate_trace() to its plots in BokehJS",
    }
    assert "Calibrated" in page.locator(".dlx-trace-report").first.inner_text()
    assert "tensor parallel" in read_source(page, "comm_phases", ["row"])["row"]
    page.locator(".jp-NotebookPanel .dlx-explorer").first.scroll_into_view_if_needed()
    tab.shot("1280x720-file-browser")
    problems = layout_problems(page, ".jp-NotebookPanel .dlx-explorer")
    assert not problems, "\n".join(problems)
    # a second view of the notebook docked to the right: half the main area
    open_side_view(page, FIRST_PLOT_MS)
    tab.shot("1280x720-side-panel")
    problems = layout_problems(page, "[data-dlx-side] .dlx-explorer")
    assert not problems, "\n".join(problems)
    assert re.search(r"tp 2", page.locator("[data-dlx-side] .dlx-headline").first.inner_text())
    tab.assert_clean()
