"""Shared test set-up: the ``notebook`` marker, a fixture that executes notebooks headless, and how
the tests are shared among pytest-xdist's workers.

Select or skip the notebook executions with ``-m notebook`` / ``-m "not notebook"``.

pyproject.toml runs the suite on two workers (``-n 2 --dist loadgroup``; ``-p no:xdist`` or
``-n 0`` runs it in one process). Tests are handed out one by one, except where sharing matters,
which :func:`pytest_collection_modifyitems` groups onto one worker: every browser test (one
Chromium and one server of each kind for all of them), and each module whose tests share a
module- or class-scoped fixture (an expensive dataset, a server, a fuzzing run), so it is made once.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent / "browser"))
from _browser import REPO, percentile  # noqa: E402 - the browser tests' helpers, for their timings

# Traces the tests load are never kept in the user's trace cache (dlexplore.traces.cache); the
# cache's own tests point it at a temporary folder and ask for it.
os.environ.setdefault("DLEXPLORE_CACHE", "off")

# -- timings the browser tests measure: summarised at the end, after the workers' are gathered --

TIMINGS = pytest.StashKey[dict]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[TIMINGS] = {}


@pytest.fixture(scope="session")
def timings(pytestconfig: pytest.Config) -> dict:
    """name -> {"samples_ms": [...], "what": "..."}, summarised at the end of the session."""
    return pytestconfig.stash[TIMINGS]


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)  # set in an xdist worker only
    if output is not None:
        output["dlx_timings"] = json.dumps(session.config.stash[TIMINGS])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """In xdist's controller: a worker finished; keep the timings its tests measured."""
    sent = getattr(node, "workeroutput", {}).get("dlx_timings")
    if sent:
        node.config.stash[TIMINGS].update(json.loads(sent))


def _summarise(samples: list[float]) -> dict:
    return {
        "n": len(samples),
        "median_ms": round(statistics.median(samples), 1),
        "p95_ms": round(percentile(samples, 95), 1),
        "max_ms": round(max(samples), 1),
        "samples_ms": [round(s, 1) for s in samples],
    }


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if getattr(config, "workeroutput", None) is not None:
        return  # the controller reports
    timings = config.stash.get(TIMINGS, {})
    if not timings:
        return
    out = {}
    terminalreporter.section("browser timings")
    for name, entry in timings.items():
        summary = {**entry, **_summarise(entry["samples_ms"])} if entry.get("samples_ms") else entry
        out[name] = summary
        if "median_ms" in summary:
            terminalreporter.write_line(
                f"{name}: median {summary['median_ms']:.0f} ms, p95 {summary['p95_ms']:.0f} ms, "
                f"n={summary['n']} ({entry.get('what', '')})"
            )
        else:
            terminalreporter.write_line(f"{name}: {json.dumps(entry)}")
    folder = Path(os.environ.get("DLX_TEST_ARTIFACTS") or REPO / "tests" / "browser" / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "timings.json"
    path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    terminalreporter.write_line(f"written to {path}")


# -- sharing the tests among xdist's workers ---------------------------------------------------


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        d.scope in ("module", "class", "package") for defs in info.name2fixturedefs.values() for d in defs
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own hook, on each worker)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests that must share a worker (module docstring) with ``xdist_group`` marks."""
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix() if item.path else ""
        if path.startswith("tests/browser/"):
            item.add_marker(pytest.mark.xdist_group("browser"))
        elif _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(path))


#: Seconds one cell may run before the execution fails.
CELL_TIMEOUT = 120


@pytest.fixture(scope="session")
def run_notebook(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[nbformat.NotebookNode], nbformat.NotebookNode]:
    """Execute a notebook in place with the ``python3`` kernel and return it.

    The kernel runs in a fresh temporary folder, and Jupyter's and IPython's user folders point
    into a temporary home, so that nothing is written to the repository or the real home folder.
    Only the *user* folders move: the venv's ``share/jupyter`` stays on Jupyter's path, so its
    ``python3`` kernelspec is found. A cell error raises ``nbclient.exceptions.CellExecutionError``.
    """
    from nbclient import NotebookClient

    home = tmp_path_factory.mktemp("jupyter-home")
    user_dirs = {
        "JUPYTER_RUNTIME_DIR": home / "runtime",
        "JUPYTER_DATA_DIR": home / "data",
        "JUPYTER_CONFIG_DIR": home / "config",
        "IPYTHONDIR": home / "ipython",
    }

    def run(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        workdir = tmp_path_factory.mktemp("notebook-cwd")
        with pytest.MonkeyPatch.context() as mp:
            for name, folder in user_dirs.items():
                mp.setenv(name, str(folder))
            # A user's extra Jupyter paths would bring their kernels and config into the test.
            for name in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTER_PREFER_ENV_PATH"):
                mp.delenv(name, raising=False)
            client = NotebookClient(
                nb,
                timeout=CELL_TIMEOUT,
                kernel_name="python3",
                resources={"metadata": {"path": str(workdir)}},
            )
            client.execute()
        return nb

    return run
