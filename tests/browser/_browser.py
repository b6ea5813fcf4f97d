"""Plumbing for the real-browser tests: Chromium, Jupyter servers as subprocesses, reading plots.

Kept apart from conftest.py so that the tests can import the helpers by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# sys.executable is the venv's own python (not resolved through its symlink), so its folder holds
# the entry points that `pip install -e .` wrote: dlexplore, jupyter-lab, voila.
VENV_BIN = Path(sys.executable).parent

# Playwright's bundled browsers cannot be downloaded here: Debian's chromium is driven instead.
# --no-sandbox because the tests run as root; the rest keeps a headless browser from phoning home.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# ---------------------------------------------------------------------------------------------
# Chromium


def find_chromium() -> str | None:
    for candidate in (os.environ.get("DLX_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _privilege_prefix() -> list[str] | None:
    """How to run apt-get as root: directly, through passwordless sudo, or not at all (None)."""
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n"]
    return None


def install_chromium(log_path: Path, say) -> tuple[str | None, str]:
    """Install Debian's chromium with apt-get; returns (executable or None, why not)."""
    apt = shutil.which("apt-get")
    if apt is None:
        return None, "Chromium is missing and there is no apt-get to install it with"
    prefix = _privilege_prefix()
    if prefix is None:
        return None, "Chromium is missing and installing it needs root or passwordless sudo"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    say(
        f"browser tests: Chromium is missing; installing Debian's chromium with apt-get "
        f"(a minute or two; log in {log_path})"
    )
    steps = [
        [*prefix, apt, "update"],
        [*prefix, apt, "install", "-y", "--no-install-recommends", "chromium"],
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        for step in steps:
            log.write(f"$ {' '.join(step)}\n")
            log.flush()
            try:
                done = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=1200)
            except subprocess.TimeoutExpired:
                return None, f"`{' '.join(step)}` took over 20 minutes (log: {log_path})"
            if done.returncode != 0:
                return None, f"`{' '.join(step)}` failed with status {done.returncode} (log: {log_path})"
    found = find_chromium()
    if found is None:
        return None, f"apt-get installed chromium but no chromium executable was found (log: {log_path})"
    say(f"browser tests: installed {found}")
    return found, ""


# ---------------------------------------------------------------------------------------------
# servers


def private_home_env(home: Path) -> dict[str, str]:
    """The environment with HOME and the XDG folders in ``home`` (Chromium keeps crash reports and
    a dconf cache there)."""
    env = {**os.environ, "HOME": str(home)}
    for name, sub in (
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_RUNTIME_DIR", "run"),
    ):
        (home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        env[name] = str(home / sub)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jupyter_env(home: Path) -> dict[str, str]:
    """Environment for a Jupyter server that writes nothing outside ``home``.

    JUPYTER_DATA_DIR and JUPYTER_CONFIG_DIR only replace the *user* folders: the venv's
    share/jupyter (kernel spec, lab extensions, voila templates) and etc/jupyter stay on the search
    paths because jupyter_core always adds sys.prefix's folders.
    """
    # HOME too: tools the servers run write there (JupyterLab's language-server probe runs npm,
    # which logs to ~/.npm).
    dirs = {
        name: home / name.lower()
        for name in ("JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR", "HOME")
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **{k: str(v) for k, v in dirs.items()}}
    # the venv first, so that a server started from a bare shell still finds its own python
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    # A user's JUPYTER_PATH/JUPYTER_CONFIG_PATH would add their extensions and config to the test.
    for name in (
        "JUPYTER_PATH",
        "JUPYTER_CONFIG_PATH",
        "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR",
        "JUPYTER_PREFER_ENV_PATH",
    ):
        env.pop(name, None)
    return env


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; elsewhere none are known)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        out.extend(children)
        todo.extend(children)
    return out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class Server:
    """A Jupyter server (Voila or JupyterLab) running as a subprocess in its own session."""

    def __init__(
        self, name: str, argv: list[str], *, port: int, cwd: Path, env: dict[str, str], log_path: Path
    ):
        self.name = name
        self.argv = argv
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.page_url = self.url + "/"
        self.log_path = log_path
        self._log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in stop()
        # Its own session: stopping its process group cannot touch pytest, and a kernel the
        # server starts gets a session of its own too (jupyter_client does that), see stop().
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def log_tail(self, chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def wait_ready(self, timeout: float = 120.0, path: str = "/api/status") -> None:
        """Wait until the server answers HTTP; any status counts: it means the server is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {self.proc.returncode} before "
                    f"answering:\n$ {' '.join(self.argv)}\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + path, timeout=5):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(
            f"{self.name} did not answer on {self.url} within {timeout:.0f} s:\n"
            f"$ {' '.join(self.argv)}\n{self.log_tail()}"
        )

    def stop(self) -> None:
        # Kernels live in sessions of their own (jupyter_client starts them so): note them before
        # the server goes, to end any that it leaves behind.
        kernels = descendants(self.proc.pid) if self.proc.poll() is None else []
        group = self.proc.pid
        if self.proc.poll() is None:
            # SIGTERM first: the server then shuts its kernels down itself.
            os.killpg(group, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(group, signal.SIGKILL)
                self.proc.wait(timeout=15)
        # A launcher (dlexplore explore runs Voila as its child) may exit before what it launched.
        deadline = time.monotonic() + 10
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _group_alive(group):
            os.killpg(group, signal.SIGKILL)
        for pid in kernels:
            try:
                # only if that pid is still a kernel, not a process that has since reused it
                if b"kernel" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._log.close()


# ---------------------------------------------------------------------------------------------
# reading the plots in the page

# Each jupyter_bokeh BokehModel may render into a Bokeh document of its own, so every document is
# searched. ColumnDataSource.data is a plain object when BokehJS builds the document from its JSON
# and may be a Map after a patch from the kernel; columns may be typed arrays. JSON out, always.
_JS_PRELUDE = """
const dlxFind = (name) => {
    for (const doc of (window.Bokeh && Bokeh.documents) || []) {
        const model = doc.get_model_by_name(name);
        if (model) return model;
    }
    return null;
};
const dlxKeys = (m) => (m.data instanceof Map ? Array.from(m.data.keys()) : Object.keys(m.data));
const dlxColumn = (m, c) => {
    const v = m.data instanceof Map ? m.data.get(c) : m.data[c];
    return v == null ? null : Array.from(v);
};
const dlxRead = (name, columns) => {
    const m = dlxFind(name);
    if (!m) return null;
    const out = {};
    for (const c of columns || dlxKeys(m)) out[c] = dlxColumn(m, c);
    return out;
};
"""


def _js(body: str) -> str:
    """A page function of one argument ``arg`` that can use the helpers above."""
    return f"(arg) => {{ {_JS_PRELUDE}\n{body} }}"


JS_READ_SOURCE = _js("return dlxRead(arg[0], arg[1]);")

JS_SOURCE_NAMES = _js("""
    const names = [];
    for (const doc of (window.Bokeh && Bokeh.documents) || [])
        for (const m of doc.all_models) if (m.name && m.data !== undefined) names.push(m.name);
    return names;
""")

JS_HAS_SOURCES = _js("return arg.every((name) => dlxFind(name) !== null);")

JS_CHANGED = _js("return JSON.stringify(dlxRead(arg[0], arg[1])) !== JSON.stringify(arg[2]);")

# Starts waiting for one source's data to change and returns at once; the promise (kept on window)
# resolves to the milliseconds from its start to the first animation frame that sees the change, so
# the figure counts the time the browser needs to draw as well as the round trip to the kernel.
JS_ARM_CHANGE_TIMER = _js("""
    const [name, columns, timeout] = arg;
    const read = () => JSON.stringify(dlxRead(name, columns));
    const before = read();
    const t0 = performance.now();
    window.__dlxChange = new Promise((resolve) => {
        const poll = () => {
            const now = performance.now();
            const current = read();
            if (current !== before) resolve({ms: now - t0, before: before, after: current});
            else if (now - t0 > timeout) resolve({ms: null, before: before, after: current});
            else requestAnimationFrame(poll);
        };
        requestAnimationFrame(poll);
    });
    return before;
""")

JS_AWAIT_CHANGE = "() => window.__dlxChange"

# Resolves once none of the named sources (nor the page's text) has changed for ``quiet`` ms.
JS_SETTLED = _js("""
    const [names, quiet, timeout] = arg;
    const read = () => JSON.stringify(names.map((n) => dlxRead(n, null))) + document.body.innerText;
    return new Promise((resolve) => {
        const t0 = performance.now();
        let last = read(), since = t0;
        const poll = () => {
            const now = performance.now(), current = read();
            if (current !== last) { last = current; since = now; }
            if (now - since >= quiet || now - t0 > timeout) resolve(now - since >= quiet);
            else requestAnimationFrame(poll);
        };
        requestAnimationFrame(poll);
    });
""")


def read_source(page, name: str, columns: list[str] | None = None) -> dict | None:
    """{column: list} of the named ColumnDataSource (all columns when ``columns`` is None)."""
    return page.evaluate(JS_READ_SOURCE, [name, columns])


def source_names(page) -> list[str]:
    return page.evaluate(JS_SOURCE_NAMES)


def wait_for_sources(page, names: list[str], timeout: float) -> None:
    page.wait_for_function(JS_HAS_SOURCES, arg=names, timeout=timeout)


def becomes_true(page, expression: str, arg=None, wait_ms: float = 1000) -> bool:
    """Whether the page function ``expression`` returns something truthy within ``wait_ms``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    try:
        page.wait_for_function(expression, arg=arg, timeout=wait_ms)
    except PlaywrightTimeoutError:
        return False
    return True


def has_sources(page, names: list[str], wait_ms: float) -> bool:
    """Whether the page holds all the named sources within ``wait_ms``."""
    return becomes_true(page, JS_HAS_SOURCES, names, wait_ms)


def wait_changed(page, name: str, before: dict, timeout: float = 15_000) -> dict:
    """Wait until the named source's columns differ from ``before``; returns them."""
    columns = list(before)
    page.wait_for_function(JS_CHANGED, arg=[name, columns, before], timeout=timeout)
    return read_source(page, name, columns)


def wait_settled(page, names: list[str], quiet_ms: float = 200, timeout_ms: float = 15_000) -> bool:
    """Wait until the named sources and the page's text stay the same for ``quiet_ms``."""
    return page.evaluate(JS_SETTLED, [names, quiet_ms, timeout_ms])


def canvas_sizes(page) -> list[list[int]]:
    """Sizes of the canvases Bokeh drew into (a CSS selector reaches into its shadow roots)."""
    return page.locator(".bk-Canvas canvas").evaluate_all("cs => cs.map(c => [c.width, c.height])")


def timed_change(page, name: str, columns: list[str], act, timeout_ms: float = 15000) -> dict:
    """Run ``act()`` (a key press, a selection) and time until source ``name`` changes in the page.

    Returns {"ms": latency or None on timeout, "before": {...}, "after": {...}}.
    """
    page.evaluate(JS_ARM_CHANGE_TIMER, [name, columns, timeout_ms])
    act()
    result = page.evaluate(JS_AWAIT_CHANGE)
    for key in ("before", "after"):
        result[key] = json.loads(result[key]) if result[key] is not None else None
    return result


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: with ten samples p95 is the largest, as it should be."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


# ---------------------------------------------------------------------------------------------
# layout: what a person would see cut off, measured from element bounds rather than eyeballed

# Returns a list of problems (empty when the layout holds) for the explorer under ``root``:
# anything wider than the panel that shows it, a scrollbar inside it, a button or drop-down whose
# text is cut, and, for each Bokeh figure in it, a logo, a legend outside the canvas or a title
# whose text runs past it (measured with the title's own font on a canvas).
JS_LAYOUT_PROBLEMS = """(rootSelector) => {
  // Every drawn figure's view: each widget view has a Bokeh document of its own (two views of one
  // notebook hold the same model ids, so Bokeh.index cannot list them all).
  const figure_views = () => (window.Bokeh ? Bokeh.documents : [])
      .flatMap((doc) => [...doc.views_manager])
      .filter((v) => v.model.type === "Figure" && v.el.isConnected);
  const problems = [];
  const root = document.querySelector(rootSelector);
  if (!root) return ["nothing matches " + rootSelector];
  const name = (el) => el.tagName.toLowerCase() + (el.className && typeof el.className === "string"
      ? "." + el.className.trim().split(/\\s+/).slice(0, 3).join(".") : "");
  const panel = root.closest(".jp-NotebookPanel") || document.body;
  const clip = panel.getBoundingClientRect();
  const right = Math.min(clip.right, document.documentElement.clientWidth);
  const doc = document.scrollingElement || document.documentElement;
  if (doc.scrollWidth > doc.clientWidth + 1)
    problems.push(`the page scrolls sideways (${doc.scrollWidth} > ${doc.clientWidth} px)`);
  for (const el of [root, ...root.querySelectorAll("*")]) {
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0) continue;
    if (rect.right > right + 1 || rect.left < clip.left - 1)
      problems.push(`${name(el)} reaches ${Math.round(rect.left)}..${Math.round(rect.right)} px, ` +
                    `outside its panel ${Math.round(clip.left)}..${Math.round(right)} px`);
    const style = getComputedStyle(el);
    if (["auto", "scroll"].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1)
      problems.push(`${name(el)} has a horizontal scrollbar (${el.scrollWidth} > ${el.clientWidth})`);
    if (["auto", "scroll"].includes(style.overflowY) && el.scrollHeight > el.clientHeight + 1)
      problems.push(`${name(el)} has a vertical scrollbar (${el.scrollHeight} > ${el.clientHeight})`);
  }
  // Scroll containers around the explorer (the output area, the cell) scroll when it is too wide.
  for (let el = root.parentElement; el && el !== panel.parentElement; el = el.parentElement) {
    const scrolls = ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
    if (scrolls && el.scrollWidth > el.clientWidth + 1)
      problems.push(`${name(el)} around the explorer scrolls sideways ` +
                    `(${el.scrollWidth} > ${el.clientWidth})`);
  }
  const ctx = document.createElement("canvas").getContext("2d");
  const textWidth = (text, font) => { ctx.font = font; return ctx.measureText(text).width; };
  for (const label of root.querySelectorAll(".widget-label, .widget-readout")) {
    if (label.scrollWidth > label.clientWidth + 1)
      problems.push(`label "${label.textContent.trim()}" is cut ` +
                    `(${label.scrollWidth} > ${label.clientWidth})`);
  }
  for (const button of root.querySelectorAll("button")) {
    if (button.scrollWidth > button.clientWidth + 1)
      problems.push(`button "${button.textContent.trim()}" is cut ` +
                    `(${button.scrollWidth} > ${button.clientWidth})`);
  }
  for (const select of root.querySelectorAll("select")) {
    const option = select.options[select.selectedIndex];
    if (!option) continue;
    const s = getComputedStyle(select);
    const font = `${s.fontStyle} ${s.fontWeight} ${s.fontSize} ${s.fontFamily}`;
    const need = textWidth(option.textContent, font);
    const room = select.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight) - 16;
    if (need > room + 1)
      problems.push(`drop-down "${option.textContent}" is cut ` +
                    `(${Math.round(need)} > ${Math.round(room)} px)`);
  }
  const figures = figure_views().filter((v) => root.contains(v.el));
  if (!figures.length) problems.push("no Bokeh figure drawn under " + rootSelector);
  for (const v of figures) {
    const fig = v.model.name;
    const w = v.bbox.width, h = v.bbox.height;
    if (v.model.toolbar.logo !== null) problems.push(`${fig} shows the Bokeh logo`);
    for (const rv of v.renderer_views.values()) {
      const m = rv.model, b = rv.bbox;
      const outside = b && (b.x < -1 || b.y < -1 || b.x + b.width > w + 1 || b.y + b.height > h + 1);
      if (m.type === "Legend" && outside)
        problems.push(`${fig}: its legend (${Math.round(b.x)}..${Math.round(b.x + b.width)} px) ` +
                      `is cut by the figure (0..${w} px)`);
      if (m.type === "Title" && m.text && b) {
        const font = `${m.text_font_style} ${m.text_font_size} ${m.text_font}`;
        const end = b.x + m.offset + textWidth(m.text, font);
        if (end > w + 1)
          problems.push(`${fig}: the title "${m.text}" runs to ${Math.round(end)} px, past ${w}`);
      }
    }
  }
  return problems;
}"""


def layout_problems(page, root_selector: str = ".dlx-explorer") -> list[str]:
    """What is cut off, scrolls or sticks out in the explorer under ``root_selector`` (see
    :data:`JS_LAYOUT_PROBLEMS`); an empty list when the layout holds."""
    return page.evaluate(JS_LAYOUT_PROBLEMS, root_selector)


def open_side_view(page, timeout_ms: int) -> None:
    """File > New View for Notebook: a second view of the open notebook docked to the right (half
    the main area), marked ``data-dlx-side``, checked to be narrow, with a Bokeh figure drawn in it
    and scrolled to its explorer."""
    page.get_by_role("menuitem", name="File", exact=True).click()
    page.get_by_role("menuitem", name="New View for Notebook").click()
    page.wait_for_function("() => document.querySelectorAll('.jp-NotebookPanel').length === 2")
    width = page.evaluate("""() => {
        const panels = [...document.querySelectorAll('.jp-NotebookPanel')];
        const left = (el) => el.getBoundingClientRect().left;
        const side = panels.reduce((a, b) => (left(b) > left(a) ? b : a));
        side.dataset.dlxSide = "1";
        return side.getBoundingClientRect().width;
    }""")
    assert width < 700, f"the side panel is {width:.0f} px wide: not a side panel"
    page.wait_for_function(
        """() => Bokeh.documents.flatMap((doc) => [...doc.views_manager]).some((v) =>
               v.model.type === "Figure" && document.querySelector("[data-dlx-side]").contains(v.el))""",
        timeout=timeout_ms,
    )
    page.wait_for_timeout(800)
    page.locator("[data-dlx-side] .dlx-explorer").first.scroll_into_view_if_needed()
