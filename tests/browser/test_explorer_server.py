"""`dlexplore explore` as a classroom's server, in Chromium: a page shows its plots in seconds from a
warm server (pre-started kernels), says what it is waiting for meanwhile, and gives its kernel back
when it closes or idles, so that ten pages opened and closed leave the server's memory where it was.

The server here stops idle kernels after a few seconds (``--cull-idle``) so that the test need not
wait the default quarter of an hour. Figures (first paint, kernel memory) go to timings.json.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from pathlib import Path

import pytest
from _browser import VENV_BIN, Server, descendants, free_port, jupyter_env
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from dlexplore.serve import cull_interval

pytestmark = pytest.mark.browser

# A page's kernel is culled this long after its last message, even while the page still draws (the
# browser builds the figures without talking to the kernel). A page draws in 4-5 s here, but CI's
# busier 2 cores took longer than 6 s and the culler stopped the kernel under the drawing page.
CULL_IDLE_S = 20
CULL_INTERVAL_S = cull_interval(CULL_IDLE_S)
POOL_SIZE = 1
# Only catches breakage; issue 15's target is 3 s (median of 5, in timings.json).
FIRST_PAINT_BOUND_S = 30
FILLED = "Kernel pool of explorer.ipynb is filled"
USED = "Using pre-heated kernel"

# Installed before the page's own scripts: every frame, note whether a bare "Loading widget..." was
# visible, whether the progress line was, and when the first figure was drawn.
WATCH_PAGE = """
window.__dlx = {bare: false, progress: false, drawn: null};
const dlxHasCanvas = (root) => {
  for (const el of root.querySelectorAll("*"))
    if (el.tagName === "CANVAS" || (el.shadowRoot && dlxHasCanvas(el.shadowRoot))) return true;
  return false;
};
const dlxWatch = () => {
  if (document.body) {
    for (const el of document.querySelectorAll(".jupyter-widgets")) {
      if (el.children.length === 0 && el.textContent.includes("Loading widget") &&
          getComputedStyle(el).visibility === "visible" && el.getClientRects().length)
        window.__dlx.bare = true;
    }
    if (document.getElementById("dlx-progress")) window.__dlx.progress = true;
    const panels = document.querySelector(".dlx-explorer .dlx-panels");
    if (panels && dlxHasCanvas(panels) && window.__dlx.drawn === null) window.__dlx.drawn = performance.now();
  }
  if (window.__dlx.drawn === null) requestAnimationFrame(dlxWatch);
};
requestAnimationFrame(dlxWatch);
"""


def _rss_mib(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, flags=re.M)
    return int(match.group(1)) / 1024 if match else 0.0


def _kernels(server: Server) -> list[int]:
    out = []
    for pid in descendants(server.proc.pid):
        try:
            if b"ipykernel" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def _memory(server: Server) -> dict:
    kernels = _kernels(server)
    everything = [server.proc.pid, *descendants(server.proc.pid)]
    return {
        "kernels": len(kernels),
        "kernel_mib": round(sum(_rss_mib(p) for p in kernels), 1),
        "server_tree_mib": round(sum(_rss_mib(p) for p in everything), 1),
    }


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def _wait_warm(server: Server, timeout: float = 180) -> None:
    """Until the pool holds a kernel that has run the notebook: Voila logs "filled" once the kernel
    has started, while it still runs the notebook; then the kernels' CPU time stops growing."""
    log = lambda: server.log_tail(500_000)  # noqa: E731
    deadline = time.monotonic() + timeout
    while log().count(FILLED) < log().count(USED) + POOL_SIZE:
        if time.monotonic() > deadline:
            pytest.fail(f"the kernel pool was not filled in {timeout:.0f} s:\n" + server.log_tail())
        time.sleep(0.2)
    busy = _cpu_seconds(_kernels(server))
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _cpu_seconds(_kernels(server))
        if now - busy < 0.05:
            return
        busy = now
    pytest.fail("the pool's kernel never went idle")


@pytest.fixture(scope="module")
def classroom_server(tmp_path_factory, artifacts_dir):
    home = tmp_path_factory.mktemp("classroom-home")
    port = free_port()
    argv = [
        str(VENV_BIN / "dlexplore"),
        "explore",
        "--no-browser",
        "--port",
        str(port),
        "--pool-size",
        str(POOL_SIZE),
        "--cull-idle",
        str(CULL_IDLE_S),
    ]
    server = Server(
        "dlexplore explore (classroom)",
        argv,
        port=port,
        cwd=home,
        env=jupyter_env(home),
        log_path=artifacts_dir / "classroom-server.log",
    )
    try:
        server.wait_ready()
        _wait_warm(server)
        yield server
    finally:
        server.stop()


def _open(browser, server: Server, artifacts: Path | None = None, label: str = ""):
    """A page in a fresh context (nothing cached): its context, page and seconds to the first figure."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    page.add_init_script(WATCH_PAGE)
    start = time.monotonic()
    page.goto(server.url + "/", wait_until="commit")
    try:
        page.wait_for_function("() => window.__dlx && window.__dlx.drawn !== null", timeout=120_000)
    except PlaywrightTimeoutError:
        culled = [line for line in server.log_tail(20_000).splitlines() if "Culling" in line]
        pytest.fail(f"no figure drawn in 120 s; the server's last culls: {culled[-3:]}")
    seconds = time.monotonic() - start
    if artifacts is not None:
        page.screenshot(path=str(artifacts / f"test_explorer_server-{label}.png"))
    return context, page, seconds


def test_first_paint_on_a_warm_server(classroom_server, browser, artifacts_dir, timings):
    server = classroom_server
    samples = []
    for i in range(5):
        _wait_warm(server)  # warm: a kernel has run the notebook before the request
        context, page, seconds = _open(browser, server, artifacts_dir if i == 0 else None, "first-paint")
        seen = page.evaluate("() => window.__dlx")
        assert not seen["bare"], "the page showed a bare 'Loading widget...'"
        assert seen["progress"], "the page showed no progress line before the plots"
        assert page.locator("#dlx-progress").count() == 0, "the progress line stayed after the plots"
        samples.append(seconds)
        page.close(run_before_unload=True)
        context.close()
    timings["voila_first_paint"] = {
        "samples_ms": [s * 1e3 for s in samples],
        "what": "warm `dlexplore explore` (pool of 1): page request to the first figure drawn, "
        "fresh browser context each time",
    }
    assert statistics.median(samples) < FIRST_PAINT_BOUND_S, samples


def test_ten_pages_opened_and_closed_give_their_kernels_back(classroom_server, browser, timings):
    server = classroom_server
    _wait_warm(server)
    before = _memory(server)
    assert before["kernels"] == POOL_SIZE, before
    peak = dict(before)
    for i in range(10):
        context, page, _ = _open(browser, server)
        now = _memory(server)
        peak = {k: max(peak[k], now[k]) for k in peak}
        if i % 2 == 0:
            page.close(run_before_unload=True)  # a person closing the tab: Voila is told
        context.close()  # else the tab just goes (a crash, a laptop shut): the culler finds it
    deadline = time.monotonic() + CULL_IDLE_S * 2 + CULL_INTERVAL_S + 30
    after = _memory(server)
    while after["kernels"] > POOL_SIZE and time.monotonic() < deadline:
        time.sleep(1)
        after = _memory(server)
    _wait_warm(server)  # the pool's new kernel has run the notebook, as the one before had
    after = _memory(server)
    timings["classroom_kernel_memory"] = {
        "before": before,
        "peak": peak,
        "after": after,
        "pages": 10,
        "what": "dlexplore explore --pool-size 1: RSS of the kernels and of the whole server "
        "before, at most during and after 10 pages opened and closed (MiB)",
    }
    assert "'_xsrf' argument missing" not in server.log_tail(200_000), "Voila refused a page's shutdown"
    assert after["kernels"] == POOL_SIZE, (before, peak, after)
    one = before["kernel_mib"] / POOL_SIZE
    assert after["kernel_mib"] < before["kernel_mib"] + 0.5 * one, (before, after)
    assert after["server_tree_mib"] < before["server_tree_mib"] + 0.5 * one + 50, (before, after)


def test_a_page_gets_a_live_kernel_after_the_pool_idled(classroom_server, browser):
    """The pool's kernel idles past the cull time (an empty classroom); the next page must still
    draw: the kernel handed to it has no connection until the page's websocket opens, and a cull
    check in between used to stop it (Voila spares kernels only while they are in the pool)."""
    server = classroom_server
    _wait_warm(server)
    time.sleep(CULL_IDLE_S + 2 * CULL_INTERVAL_S)
    used = server.log_tail(500_000).count(USED)
    context, page, seconds = _open(browser, server)
    try:
        log = server.log_tail(500_000)
        kernel = re.findall(USED + r": (\S+)", log)[used]
        assert f"({kernel}) with 0 connections" not in log, "the culler stopped the page's new kernel"
        assert page.locator("#dlx-notice").count() == 0
    finally:
        context.close()


def test_an_idle_page_says_its_kernel_was_stopped(classroom_server, browser):
    context, page, _ = _open(browser, classroom_server)
    try:
        notice = page.locator("#dlx-notice")
        notice.wait_for(state="visible", timeout=(CULL_IDLE_S * 2 + CULL_INTERVAL_S + 30) * 1000)
        assert "Reload the page" in notice.inner_text()
    finally:
        context.close()
