"""The explorer's layout as people see it, measured from element bounds in Chromium: at 1280x720 and
1920x1080 in the Voila dashboard, in JupyterLab at 1280x720 with the file browser open, and in a
JupyterLab side panel (a second view of the notebook docked to its right: half the main area).

Held everywhere: nothing wider than its panel, no scrollbar inside the explorer, buttons and
drop-downs that show their whole text, and in every figure no Bokeh logo, a legend inside the
canvas and titles that fit (see ``_browser.JS_LAYOUT_PROBLEMS``). A screenshot per size is kept in
the artifacts folder.
"""

from __future__ import annotations

import pytest
from _browser import layout_problems, open_side_view, wait_settled
from test_explorer_browser import EXPLORER_SOURCES, FIRST_PLOT_MS, run_all_cells, wait_for_plots

pytestmark = pytest.mark.browser

SIZES = [(1280, 720), (1920, 1080)]


def _settle(tab) -> None:
    wait_for_plots(tab)
    # the figures settle their size once the grid has laid them out
    assert wait_settled(tab.page, EXPLORER_SOURCES, quiet_ms=400), "the page kept changing"
    tab.page.wait_for_timeout(300)


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_voila_layout_holds(voila_server, tab, width, height):
    page = tab.page
    page.set_viewport_size({"width": width, "height": height})
    page.goto(voila_server.page_url)
    _settle(tab)
    # the measured side is there from the first view: the bar, and points on the plot
    assert "prediction error: mean |error|" in page.locator(".dlx-status").first.inner_text()
    assert page.locator("#dlx-progress").count() == 0, "the progress line stayed after the plots came"
    tab.shot(f"{width}x{height}")
    problems = layout_problems(page)
    assert not problems, "\n".join(problems)
    tab.assert_clean()


def _open_explorer_in_lab(lab_server, tab) -> None:
    page = tab.page
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{lab_server.url}/lab/tree/explorer.ipynb?reset")
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=FIRST_PLOT_MS)
    browser = page.locator(".jp-FileBrowser")
    if not browser.is_visible():
        page.locator(".jp-SideBar [data-id='filebrowser']").click()
    browser.wait_for(state="visible")
    run_all_cells(page)
    _settle(tab)


def test_jupyterlab_layout_holds_beside_the_file_browser(lab_server, tab):
    _open_explorer_in_lab(lab_server, tab)
    page = tab.page
    assert page.locator(".jp-FileBrowser").is_visible()
    page.locator(".jp-NotebookPanel .dlx-explorer").first.scroll_into_view_if_needed()
    tab.shot("1280x720-file-browser")
    problems = layout_problems(page, ".jp-NotebookPanel .dlx-explorer")
    assert not problems, "\n".join(problems)
    tab.assert_clean()


def test_jupyterlab_layout_holds_in_a_side_panel(lab_server, tab):
    _open_explorer_in_lab(lab_server, tab)
    page = tab.page
    # File > New View for Notebook docks a second view of the notebook to the right: two panels of
    # half the main area's width, beside the file browser.
    open_side_view(page, FIRST_PLOT_MS)
    tab.shot("1280x720-side-panel")
    problems = layout_problems(page, "[data-dlx-side] .dlx-explorer")
    assert not problems, "\n".join(problems)
    tab.assert_clean()
