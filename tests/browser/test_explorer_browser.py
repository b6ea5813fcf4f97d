"""The explorer as people see it: in Chromium, served by Voila and JupyterLab, and as an HTML report.

Setting widget values from Python proves little about a dashboard: BokehJS from an unreachable CDN,
a widget extension that did not load or a comm that never reaches the page all pass such tests and
draw nothing. These tests press keys in a real browser and read the plotted data back from BokehJS.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from _browser import (
    VENV_BIN,
    becomes_true,
    canvas_sizes,
    has_sources,
    read_source,
    source_names,
    timed_change,
    wait_changed,
    wait_for_sources,
    wait_settled,
)

pytestmark = pytest.mark.browser

# A person waits for the first page longer than for a move; a 2-core CI machine starts a kernel,
# imports the stack and builds the figures in well under this.
FIRST_PLOT_MS = 120_000
# Issue 15's target for slider-to-plot is 50 ms median (timings.json has the figures); this bound
# only catches breakage (a stuck comm, a full re-render per move) without making the suite flaky on
# a loaded machine.
LATENCY_BOUND_MS = 2_000
EXPLORER_SOURCES = ["throughput_predicted", "throughput_selected", "step_breakdown", "comm_buckets"]


def _control(page, kind: str, label: str):
    """The ipywidgets control of the given kind (slider, dropdown) whose description is ``label``.

    ipywidgets does not tie its label to the control for assistive technology, so the slider handle
    has role slider but no accessible name: find the widget box by its label's text instead.
    """
    label_re = re.compile(rf"^\s*{re.escape(label)}\s*$")
    return page.locator(f".widget-{kind}", has=page.locator(".widget-label", has_text=label_re))


def gpu_slider(page):
    return _control(page, "slider", "GPUs").get_by_role("slider")


def wait_for_plots(tab, timeout: float = FIRST_PLOT_MS) -> float:
    """Wait until BokehJS holds the explorer's sources and has drawn; returns the wait in seconds.

    A traceback in the page or an error in its JavaScript ends the wait at once, with the message,
    rather than after the full timeout.
    """
    page = tab.page
    start = time.monotonic()
    deadline = start + timeout / 1000
    traceback = page.locator(
        "[data-mime-type='application/vnd.jupyter.error'], [data-mime-type='application/vnd.jupyter.stderr']"
    )
    # ipywidgets puts this box where a widget's view failed to render; a click reveals the error.
    broken_widget = page.locator(".jupyter-widgets-error-widget")
    while not has_sources(page, EXPLORER_SOURCES, 1000):
        if traceback.count():
            pytest.fail("the notebook wrote an error:\n" + "\n".join(traceback.all_inner_texts()))
        if broken_widget.count():
            broken_widget.first.click()
            pytest.fail("a widget failed to render:\n" + "\n".join(broken_widget.all_inner_texts()))
        if any(e.startswith("pageerror") for e in tab.errors):
            pytest.fail("JavaScript error in the page:\n" + "\n".join(tab.errors))
        if time.monotonic() > deadline:
            pytest.fail(
                f"no explorer plots after {timeout / 1000:.0f} s; Bokeh sources in the page: "
                f"{source_names(page)}"
            )
    page.locator(".bk-Canvas canvas").first.wait_for(state="attached", timeout=timeout)
    return time.monotonic() - start


def assert_drawn(page) -> None:
    sizes = canvas_sizes(page)
    assert len(sizes) >= 1, "no Bokeh canvas in the page"
    assert all(w > 0 and h > 0 for w, h in sizes), f"a Bokeh canvas has no area: {sizes}"
    # Something must be painted: all-transparent canvases are what figures look like when BokehJS
    # loaded but failed to render them.
    painted = page.locator(".bk-Canvas canvas").evaluate_all(
        """cs => cs.filter(c => {
            const ctx = c.getContext('2d');
            if (!ctx || !c.width || !c.height) return false;
            const px = ctx.getImageData(0, 0, c.width, c.height).data;
            for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
            return false;
        }).length"""
    )
    assert painted >= 1, "every Bokeh canvas is blank"


def move_slider(page, handle, key: str, source: str = "throughput_selected") -> dict:
    """Press ``key`` on a focused slider handle; the change it makes to ``source``, timed."""
    handle.focus()
    return timed_change(page, source, ["gpus", "throughput"], lambda: page.keyboard.press(key))


# ---------------------------------------------------------------------------------------------
# Voila: `dlexplore explore`


def test_voila_dashboard_plots_and_follows_the_gpu_slider(voila_server, tab, timings):
    page = tab.page
    start = time.monotonic()
    page.goto(voila_server.page_url)
    waited = wait_for_plots(tab)
    timings["voila_first_plot"] = {
        "seconds": round(time.monotonic() - start, 2),
        "what": "page load to all explorer sources in BokehJS",
    }
    assert_drawn(page)
    headline = page.locator(".dlx-headline")
    headline.first.wait_for(state="visible")
    assert headline.first.inner_text().strip(), "the headline is empty"
    assert set(EXPLORER_SOURCES) <= set(source_names(page))
    tab.shot("before")

    handle = gpu_slider(page)
    assert handle.count() == 1, "expected one slider labelled GPUs"
    # step_breakdown and comm_buckets depend on the GPU count as well: see them follow the first move.
    others = {name: read_source(page, name) for name in ("step_breakdown", "comm_buckets")}
    headline_before = headline.first.inner_text()

    samples = []
    # Right to 256 GPUs and back: every press doubles or halves the count on the plot.
    for key in ["ArrowRight"] * 5 + ["ArrowLeft"] * 5:
        change = move_slider(page, handle, key)
        assert change["ms"] is not None, f"{key} on the GPU slider did not change throughput_selected"
        factor = 2 if key == "ArrowRight" else 0.5
        assert change["after"]["gpus"] == [g * factor for g in change["before"]["gpus"]], (key, change)
        samples.append(change["ms"])
        if len(samples) == 1:
            for name, before in others.items():
                wait_changed(page, name, before)
            page.wait_for_function(
                "([sel, old]) => document.querySelector(sel).innerText !== old",
                arg=[".dlx-headline", headline_before],
            )
        # Each move starts from a settled page, as a person's next move does; a queue of presses
        # would time the backlog, not the response.
        assert wait_settled(page, EXPLORER_SOURCES), "the page kept changing after a slider move"

    timings["voila_gpu_slider_to_plot"] = {
        "samples_ms": samples,
        "first_plot_wait_s": round(waited, 2),
        "what": "Voila: ArrowRight/Left on the GPUs slider to throughput_selected changed in BokehJS",
    }
    print(
        f"\nVoila GPU slider -> plot data: median {statistics.median(samples):.0f} ms, "
        f"max {max(samples):.0f} ms, n={len(samples)}"
    )
    assert statistics.median(samples) < LATENCY_BOUND_MS, samples

    # The batch slider calls the model (one vectorised predict over every GPU count).
    batch = _control(page, "slider", "Batch/GPU").get_by_role("slider")
    assert batch.count() == 1, "expected one slider labelled Batch/GPU"
    batch_samples = []
    for key in ["ArrowRight", "ArrowLeft"] * 5:
        batch.focus()
        change = timed_change(
            page, "throughput_predicted", ["throughput"], lambda key=key: page.keyboard.press(key)
        )
        assert change["ms"] is not None, f"{key} on the batch slider did not change the prediction"
        batch_samples.append(change["ms"])
        assert wait_settled(page, EXPLORER_SOURCES), "the page kept changing after a slider move"
    timings["voila_batch_slider_to_plot"] = {
        "samples_ms": batch_samples,
        "what": "Voila: ArrowRight/Left on the Batch/GPU slider (a model call) to throughput_predicted "
        "changed in BokehJS",
    }
    assert statistics.median(batch_samples) < LATENCY_BOUND_MS, batch_samples
    tab.shot("after")
    tab.assert_clean()


def test_voila_workload_dropdown_changes_the_prediction(voila_server, tab):
    page = tab.page
    page.goto(voila_server.page_url)
    wait_for_plots(tab)
    before = read_source(page, "throughput_predicted", ["gpus", "throughput"])
    select = _control(page, "dropdown", "Workload").locator("select")
    assert select.count() == 1, "expected one drop-down labelled Workload"
    assert "vgg16" in select.locator("option").all_inner_texts()
    select.select_option("vgg16")
    after = wait_changed(page, "throughput_predicted", before)
    assert after["throughput"] != before["throughput"]
    assert len(after["throughput"]) == len(after["gpus"]) > 0
    tab.shot("vgg16")
    tab.assert_clean()


# ---------------------------------------------------------------------------------------------
# JupyterLab


def run_all_cells(page) -> None:
    """Run > Run All Cells, until the first cell's prompt shows that it was queued or has run."""
    first_prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
    for _ in range(3):
        # On a loaded machine JupyterLab may open the notebook before it has listed the kernel
        # specs and ask which kernel to start: its preselected choice is the notebook's own. The
        # accept button's label differs between JupyterLab releases ("Select", "Select Kernel"),
        # its class does not.
        dialog = page.locator(".jp-Dialog")
        if dialog.count() and "Select Kernel" in dialog.first.inner_text():
            dialog.first.locator("button.jp-mod-accept").first.click()
        # Run All acts on the current notebook, which the one just opened is not always yet when
        # its kernel first reports idle: a click on a cell makes it current.
        first_prompt.click()
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.locator("[data-command='runmenu:run-all']").click()
        if becomes_true(
            page, r"(el) => !/^\[\s*\]:?$/.test(el.innerText.trim())", first_prompt.element_handle(), 10_000
        ):
            return
    pytest.fail(f"Run All Cells did not start the notebook; first prompt: {first_prompt.inner_text()!r}")


def test_jupyterlab_notebook_runs_the_explorer(lab_server, tab, timings):
    page = tab.page
    page.goto(f"{lab_server.url}/lab/tree/explorer.ipynb?reset")
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=FIRST_PLOT_MS)
    run_all_cells(page)
    start = time.monotonic()
    wait_for_plots(tab)
    timings["jupyterlab_first_plot"] = {
        "seconds": round(time.monotonic() - start, 2),
        "what": "Run All to all explorer sources in BokehJS",
    }
    assert_drawn(page)
    handle = gpu_slider(page)
    assert handle.count() == 1, "expected one slider labelled GPUs"
    change = move_slider(page, handle, "ArrowRight")
    assert change["ms"] is not None, "ArrowRight on the GPU slider did not change throughput_selected"
    assert change["after"]["gpus"] == [g * 2 for g in change["before"]["gpus"]], change
    timings["jupyterlab_gpu_slider_to_plot"] = {
        "ms": round(change["ms"], 1),
        "what": "JupyterLab: one ArrowRight on the GPUs slider to throughput_selected changed in BokehJS",
    }
    page.locator(".bk-Canvas").first.scroll_into_view_if_needed()
    tab.shot("after")
    # Saved as a student saves it: BokehJS came from the server (dlexplore's extension), so the
    # notebook holds a loader of a few hundred bytes, not 4 MB of BokehJS per output.
    saved = lab_server.root / "explorer.ipynb"
    before = saved.stat().st_mtime_ns
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while saved.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert saved.stat().st_mtime_ns != before, "Ctrl+S did not save the notebook"
    text = saved.read_text(encoding="utf-8")
    assert "dlexplore/bokehjs/" in text and "BEGIN bokeh.min.js" not in text
    timings["jupyterlab_saved_notebook"] = {
        "bytes": len(text.encode()),
        "what": "explorer notebook saved after Run All",
    }
    assert len(text.encode()) < 1_000_000, f"the saved notebook weighs {len(text.encode()):,} bytes"
    tab.assert_clean()


# ---------------------------------------------------------------------------------------------
# the static HTML report

# The explorer's GPU axis, as its GPUs slider offers it: powers of two from 1 to 1024.
GPU_AXIS = [2**k for k in range(11)]


def test_static_report_draws_offline(tmp_path, tab):
    out = tmp_path / "report.html"
    argv = [
        str(VENV_BIN / "dlexplore"),
        "report",
        "--workload",
        "resnet50",
        "--gpu",
        "V100-16GB",
        "--network",
        "25GbE",
        "--gpus",
        "8",
        "--batch-size",
        "64",
        "-o",
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}"
    assert out.is_file()

    page = tab.page
    requests: list[str] = []
    # A report is opened from disk, often with no network: everything it needs must be inside it.
    page.on("request", lambda request: requests.append(request.url))
    page.goto(Path(out).as_uri())
    page.locator(".bk-Canvas canvas").first.wait_for(state="attached", timeout=60_000)
    wait_for_sources(page, ["throughput_predicted", "throughput_selected"], 60_000)
    assert_drawn(page)
    predicted = read_source(page, "throughput_predicted", ["gpus", "throughput"])
    assert predicted["gpus"] == GPU_AXIS
    assert len(predicted["throughput"]) == len(GPU_AXIS)
    assert all(t > 0 for t in predicted["throughput"])
    assert read_source(page, "throughput_selected", ["gpus"])["gpus"] == [8]
    tab.shot("report")
    # The page's one control, the GPU count, re-draws the per-count plots in the browser alone.
    page.locator("select").select_option("16")
    assert wait_changed(page, "throughput_selected", {"gpus": [8]})["gpus"] == [16]
    off_disk = [u for u in requests if not u.startswith(("file:", "data:", "blob:"))]
    assert not off_disk, f"the report fetched: {off_disk}"
    tab.assert_clean()
