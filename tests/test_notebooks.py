"""The notebooks in notebooks/: committed stripped, and each runs headless top to bottom.

Every ``notebooks/*.ipynb`` is picked up, so a new notebook is tested without editing this file.
The executions are marked ``notebook`` (``pytest -m "not notebook"`` skips them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
IDS = [p.stem for p in PATHS]
EXPECTED = {"quickstart", "horovod-scaling", "communication-lab", "memory-lab", "classroom-lab"}
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
# BokehJS embeds this marker when it is inlined (bokeh.resources.INLINE); CDN resources instead
# point a script at cdn.bokeh.org, which draws nothing without internet.
INLINE_MARKER = "BEGIN bokeh.min.js"
CDN = "cdn.bokeh.org"
BOKEH_LOAD = "application/vnd.bokehjs_load.v0+json"
BOKEH_EXEC = "application/vnd.bokehjs_exec.v0+json"


def _code_cells(nb: nbformat.NotebookNode) -> Iterator[tuple[int, nbformat.NotebookNode]]:
    return ((i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code")


def _outputs(nb: nbformat.NotebookNode) -> Iterator[tuple[int, nbformat.NotebookNode]]:
    return ((i, o) for i, c in _code_cells(nb) for o in c.outputs)


@pytest.fixture(scope="module")
def executed(run_notebook: Callable) -> Callable[[Path], nbformat.NotebookNode]:
    """The notebook at a path, executed once per module (several tests read its outputs)."""
    cache: dict[Path, nbformat.NotebookNode] = {}

    def get(path: Path) -> nbformat.NotebookNode:
        if path not in cache:
            nb = nbformat.read(path, as_version=4)
            start = time.perf_counter()
            run_notebook(nb)
            nb.metadata["dlx_test_seconds"] = time.perf_counter() - start
            cache[path] = nb
        return cache[path]

    return get


def test_the_project_notebooks_are_there():
    assert EXPECTED <= set(IDS), f"missing: {sorted(EXPECTED - set(IDS))}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_committed_notebook_is_stripped_with_kernelspec(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert dict(nb.metadata.get("kernelspec", {})) == KERNELSPEC
    assert nb.metadata.get("language_info", {}).get("name") == "python"
    assert "widgets" not in nb.metadata, "saved widget state: clear it before committing"
    for i, cell in _code_cells(nb):
        assert cell.outputs == [], f"cell {i} has outputs"
        assert cell.execution_count is None, f"cell {i} has an execution count"
    # Executed notebooks with inline BokehJS weigh megabytes; a stripped one is small.
    assert path.stat().st_size < 200_000


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_bokeh_is_loaded_inline_before_plotting(path: Path):
    # Static check, so that a CDN default is caught even where the notebooks are not executed.
    # (The Explorer widget loads its own inline BokehJS; the executed check below covers it.)
    nb = nbformat.read(path, as_version=4)
    sources = [c.source for _, c in _code_cells(nb)]
    plots = [i for i, s in enumerate(sources) if "show(" in s]
    if not plots:
        pytest.skip("this notebook shows no bokeh figure itself")
    loads = [i for i, s in enumerate(sources) if "output_notebook(resources=INLINE" in s]
    assert loads, "bokeh output needs output_notebook(resources=INLINE) (the CDN draws nothing offline)"
    assert loads[0] < plots[0], "BokehJS must be loaded before the first plot"


@pytest.mark.notebook
@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_notebook_executes_headless_without_errors(path: Path, executed: Callable):
    nb = executed(path)
    assert all(c.execution_count is not None for _, c in _code_cells(nb)), "a cell did not run"
    errors = [(i, o.ename, o.evalue) for i, o in _outputs(nb) if o.output_type == "error"]
    assert not errors
    stderr = [(i, o.text) for i, o in _outputs(nb) if o.output_type == "stream" and o.name == "stderr"]
    assert not [s for s in stderr if "Traceback" in s[1] or "Error" in s[1]], stderr
    # Every notebook is meant to run in seconds; the cell timeout is the hard limit.
    assert nb.metadata["dlx_test_seconds"] < 120


@pytest.mark.notebook
@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_executed_bokeh_output_is_inline(path: Path, executed: Callable):
    nb = executed(path)
    text = json.dumps(nb)
    assert CDN not in text, "BokehJS from the CDN draws nothing without internet"
    loads = [i for i, o in _outputs(nb) if BOKEH_LOAD in o.get("data", {})]
    plots = [i for i, o in _outputs(nb) if BOKEH_EXEC in o.get("data", {})]
    for i, o in _outputs(nb):
        if BOKEH_LOAD in o.get("data", {}):
            assert INLINE_MARKER in o["data"][BOKEH_LOAD], f"cell {i} loads BokehJS from elsewhere"
    if plots:
        assert loads and loads[0] <= plots[0], "BokehJS must be loaded before the first plot"
