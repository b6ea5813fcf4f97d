"""Fixtures for the real-browser tests: one Chromium and one Voila server per session, JupyterLab
per module.

Chromium: Debian's package (or ``$DLX_CHROMIUM``), driven by Playwright through
``executable_path``. When it is missing and we may use apt-get, it is installed (Playwright's own
browser download is not reachable from these machines); when it cannot be installed the browser
tests fail under ``CI=true`` and are skipped elsewhere, with the reason.

Artifacts (screenshots, timings.json, server and apt logs) go to ``$DLX_TEST_ARTIFACTS``, by default
``tests/browser/artifacts/``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

import nbformat
import pytest
from _browser import (
    CHROMIUM_ARGS,
    REPO,
    VENV_BIN,
    Server,
    find_chromium,
    free_port,
    install_chromium,
    jupyter_env,
    private_home_env,
)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# JupyterLab virtualises long notebooks by default: cells below the fold are not in the DOM, and
# neither are their outputs. The news toast would cover the plots in screenshots. The overrides are
# read from an application settings folder given on the command line, so the venv's own
# share/jupyter/lab is never written to.
LAB_OVERRIDES = {
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}

EXPLORER_SOURCE = "from dlexplore.widgets import Explorer\n\nExplorer()"


# ---------------------------------------------------------------------------------------------
# reporting (the timings the tests measure are summarised by tests/conftest.py, which also runs
# in pytest-xdist's controller, where the workers' timings come together)


def _artifacts() -> Path:
    path = Path(os.environ.get("DLX_TEST_ARTIFACTS") or REPO / "tests" / "browser" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, keep what the page showed and add the servers' logs and page errors to the report."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for name, value in getattr(item, "funcargs", {}).items():
        if isinstance(value, Server):
            report.sections.append((f"{name} log ({value.log_path})", value.log_tail()))
        elif isinstance(value, Tab) and report.when == "call":
            try:
                shot = value.shot("failed")
            except Exception as err:  # noqa: BLE001 - a dead page must not hide the real failure
                shot = f"no screenshot: {err}"
            report.sections.append(("browser page", f"screenshot: {shot}\n" + "\n".join(value.errors)))


# ---------------------------------------------------------------------------------------------
# browser


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    path = _artifacts()
    # Only what this suite writes: the folder may be one the caller chose, holding other things.
    stale = [
        *path.glob("test_*.png"),
        path / "voila-server.log",
        path / "lab-server.log",
        path / "timings.json",
    ]
    for old in stale:
        old.unlink(missing_ok=True)
    return path


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture(scope="session")
def chromium(pytestconfig, artifacts_dir) -> str:
    found = find_chromium()
    if found:
        return found
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def say(message: str) -> None:
        # Installing takes a while: tell the person at the terminal why, past pytest's capture.
        if reporter is None or capture is None:
            print(message, file=sys.stderr)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(message)

    found, reason = install_chromium(artifacts_dir / "apt-chromium.log", say)
    if found is None:
        _unavailable(reason)
    return found


@pytest.fixture(scope="session")
def browser(chromium, tmp_path_factory):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        _unavailable(f"playwright is not installed ({err}); it comes with the test extra")
    with sync_playwright() as playwright:
        home = tmp_path_factory.mktemp("chromium-home")
        browser = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, headless=True, env=private_home_env(home)
        )
        yield browser
        browser.close()


# Requests to the internet that are not dlexplore's doing, with the reason each is harmless. They
# are aborted all the same (so that a machine with internet behaves like one without) and their
# failure to load is not counted as a page error; any other request off the machine fails the test.
# (None so far: Voila's own lab template links Font Awesome from jsDelivr, and dlexplore's dashboard
# template, dlexplore/dashboard/jupyter/voila/templates/dlexplore, leaves those links out.)
KNOWN_EXTERNAL: list[re.Pattern] = []


class Tab:
    """A page in a fresh browser context that records what went wrong in it."""

    def __init__(self, page, name: str, artifacts: Path):
        self.page = page
        self.name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        self.artifacts = artifacts
        self.errors: list[str] = []
        self.external: list[str] = []
        page.on("pageerror", lambda err: self.errors.append(f"pageerror: {err}"))
        page.on("console", self._console)
        # Nothing may be fetched from the internet: on a machine without it the page would hang
        # or lose its plots (BokehJS from a CDN draws nothing). Abort such requests and report.
        page.route(re.compile(r"^https?://(?!(127\.0\.0\.1|localhost)[:/])"), self._block)

    def _console(self, message) -> None:
        if message.type != "error":
            return
        url = (message.location or {}).get("url", "")
        if any(known.search(url) for known in KNOWN_EXTERNAL):
            return
        self.errors.append(f"console.error: {message.text} ({url})")

    def _block(self, route) -> None:
        url = route.request.url
        if not any(known.search(url) for known in KNOWN_EXTERNAL):
            self.external.append(url)
        route.abort()

    def shot(self, label: str) -> Path:
        path = self.artifacts / f"{self.name}-{label}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def assert_clean(self) -> None:
        assert not self.external, f"the page tried to reach the internet: {self.external}"
        assert not self.errors, "errors in the page:\n" + "\n".join(self.errors)


@pytest.fixture
def tab(browser, request, artifacts_dir):
    context = browser.new_context(viewport={"width": 1500, "height": 1100})
    context.set_default_timeout(30_000)
    # Voila sends a page's last bytes only after its notebook ran (a kernel loading a real trace),
    # which on a busy 2-core machine passed 30 s; each test's own deadline bounds the first plot.
    context.set_default_navigation_timeout(120_000)
    page = context.new_page()
    yield Tab(page, request.node.name, artifacts_dir)
    context.close()


# ---------------------------------------------------------------------------------------------
# servers


@pytest.fixture(scope="session")
def voila_server(tmp_path_factory, artifacts_dir):
    """``dlexplore explore`` as a user starts it: the Voila dashboard of the explorer (one for the
    session: every page opened gets its own kernel, so the tests that share it cannot meet)."""
    home = tmp_path_factory.mktemp("voila-home")
    port = free_port()
    exe = VENV_BIN / "dlexplore"
    server = Server(
        "dlexplore explore",
        [str(exe), "explore", "--no-browser", "--port", str(port)],
        port=port,
        cwd=home,
        env=jupyter_env(home),
        log_path=artifacts_dir / "voila-server.log",
    )
    try:
        server.wait_ready()
        # The command prints the URL to open (with a token, should it ever use one).
        printed = re.search(rf"http://(?:127\.0\.0\.1|localhost):{port}/\S*", server.log_tail(20000))
        server.page_url = printed.group(0) if printed else server.url + "/"
        yield server
    finally:
        server.stop()


def write_explorer_notebook(path: Path, source: str = EXPLORER_SOURCE) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(source))
    # Without a kernelspec JupyterLab opens a kernel chooser dialog that blocks the page.
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    notebook.metadata["language_info"] = {"name": "python"}
    nbformat.write(notebook, path)
    return path


def _check_lab_overrides(url: str) -> None:
    """Fail early, and say why, if JupyterLab stops reading overrides from app_settings_dir."""
    for plugin, values in LAB_OVERRIDES.items():
        with urllib.request.urlopen(f"{url}/lab/api/settings/{plugin}", timeout=30) as response:
            schema = json.load(response)["schema"]["properties"]
        applied = {key: schema[key].get("default") for key in values}
        assert applied == values, (
            f"JupyterLab ignored --LabApp.app_settings_dir/overrides.json for {plugin}: "
            f"defaults are {applied}, wanted {values}"
        )


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory, artifacts_dir):
    """JupyterLab on a folder that holds explorer.ipynb (an Explorer as its last expression); one
    per module, since a test saves the notebook (with its outputs) and the next module wants it new."""
    home = tmp_path_factory.mktemp("lab-home")
    root = home / "notebooks"
    root.mkdir()
    write_explorer_notebook(root / "explorer.ipynb")
    settings = home / "lab-app-settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(json.dumps(LAB_OVERRIDES), encoding="utf-8")
    port = free_port()
    argv = [
        str(VENV_BIN / "jupyter-lab"),
        "--no-browser",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        "--allow-root",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--LabApp.extension_manager=readonly",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.app_settings_dir={settings}",
    ]
    server = Server(
        "jupyter lab",
        argv,
        port=port,
        cwd=root,
        env=jupyter_env(home),
        log_path=artifacts_dir / "lab-server.log",
    )
    server.root = root
    try:
        server.wait_ready()
        _check_lab_overrides(server.url)
        yield server
    finally:
        server.stop()
