"""The notebooks in notebooks/: committed stripped, and each runs headless top to bottom.

Every ``notebooks/*.ipynb`` is picked up, so a new notebook is tested without editing this file.
The executions are marked ``notebook`` (``pytest -m "not notebook"`` skips them).
"""

from __future__ import annotations

import json
import re
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
# point a script at cdn.bokeh.org, which draws nothing without internet. dlexplore's loader fetches
# it from the Jupyter server instead (dlexplore.plots.load_bokehjs), so neither belongs in a notebook.
INLINE_MARKER = "BEGIN bokeh.min.js"
CDN = "cdn.bokeh.org"
SERVER_LOADER = "dlexplore/bokehjs/"
#: What a student's saved notebook may weigh, outputs included (the issue: 8 MB, 16 MB before).
SAVED_LIMIT = 1_000_000
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
def test_bokehjs_is_loaded_before_plotting(path: Path):
    # Static, so that bokeh's own output_notebook (CDN by default, 8 MB inline) is caught even where
    # the notebooks are not executed. (The widgets load BokehJS themselves; see below.)
    nb = nbformat.read(path, as_version=4)
    sources = [c.source for _, c in _code_cells(nb)]
    plots = [i for i, s in enumerate(sources) if "show(" in s]
    if not plots:
        pytest.skip("this notebook shows no bokeh figure itself")
    assert not any("resources=INLINE" in s or "resources=CDN" in s for s in sources), (
        "use dlexplore.plots.output_notebook(): bokeh's writes BokehJS into the saved notebook"
    )
    loads = [
        i
        for i, s in enumerate(sources)
        if "from dlexplore.plots import output_notebook" in s and "output_notebook()" in s
    ]
    assert loads, "bokeh output needs dlexplore.plots.output_notebook() (the CDN draws nothing offline)"
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
def test_executed_notebook_loads_bokehjs_by_url_and_stays_small(path: Path, executed: Callable):
    nb = executed(path)
    text = json.dumps(nb)
    assert CDN not in text, "BokehJS from the CDN draws nothing without internet"
    assert INLINE_MARKER not in text, "BokehJS itself is in the notebook: every save carries 4 MB"
    loads = [i for i, o in _outputs(nb) if BOKEH_LOAD in o.get("data", {})]
    plots = [i for i, o in _outputs(nb) if BOKEH_EXEC in o.get("data", {})]
    for i, o in _outputs(nb):
        if BOKEH_LOAD in o.get("data", {}):
            assert SERVER_LOADER in o["data"][BOKEH_LOAD], f"cell {i} loads BokehJS from elsewhere"
    if plots:
        assert loads and loads[0] <= plots[0], "BokehJS must be loaded before the first plot"
    # What the student saves: the executed notebook as nbformat writes it.
    size = len(nbformat.writes(nb).encode("utf-8"))
    assert size < SAVED_LIMIT, f"{path.name} executed weighs {size:,} bytes"


# --- the labs a teacher hands out ------------------------------------------------------------

LABS = [p for p in PATHS if "answer_" in p.read_text(encoding="utf-8")]
LAB_IDS = [p.stem for p in LABS]


def _answer_numbers(nb: nbformat.NotebookNode) -> list[int]:
    return [
        int(m) for _, c in _code_cells(nb) for m in re.findall(r"^answer_(\d+) = None", c.source, flags=re.M)
    ]


def test_the_labs_are_the_ones_with_exercises():
    assert {"classroom-lab", "parallelism-lab", "energy-lab", "io-lab", "stragglers-lab"} <= set(LAB_IDS)


@pytest.mark.parametrize("path", LABS, ids=LAB_IDS)
def test_every_question_states_its_tolerance_and_every_lab_scores(path: Path):
    from dlexplore import lab

    nb = nbformat.read(path, as_version=4)
    numbers = _answer_numbers(nb)
    assert numbers, "a lab without exercises"
    for index, cell in enumerate(nb.cells):
        match = re.search(r"^answer_(\d+) = None", cell.source, flags=re.M)
        if cell.cell_type != "code" or not match:
            continue
        question = nb.cells[index - 1]
        assert question.cell_type == "markdown", f"answer_{match.group(1)} has no question above it"
        tolerance = lab.EXERCISES[lab.check(int(match.group(1)), None).exercise.id].tolerance_text
        assert tolerance in question.source, f"exercise {match.group(1)}: say '{tolerance}' in the question"
    scores = [c.source for _, c in _code_cells(nb) if c.source.startswith("lab.score(")]
    assert len(scores) == 1, "one score cell per lab"


@pytest.mark.notebook
@pytest.mark.parametrize("path", LABS, ids=LAB_IDS)
def test_run_all_shows_no_solution(path: Path, executed: Callable):
    # Run All as committed (every answer None): no output carries an answer, at 3 or 4 figures.
    from dlexplore import lab

    nb = executed(path)
    # What a person reads: printed text, tables and HTML without its tags (a figure's data is not
    # printed, and its <div id="..."> is a random UUID that holds "106" now and then).
    shown_types = ("text/plain", "text/html", "text/markdown")
    shown = [o.get("text", "") for _, o in _outputs(nb)]
    shown += [o.get("data", {}).get(t, "") for _, o in _outputs(nb) for t in shown_types]
    outputs = json.dumps([re.sub(r"<[^>]*>", " ", "".join(s)) for s in shown])
    for number in _answer_numbers(nb):
        value = lab.solution(number).value
        for part in value if isinstance(value, tuple) else (value,):
            if isinstance(part, str):
                continue
            shown = {f"{part:.4g}", f"{part:.3g}", f"{part:,.0f}"} if abs(part) >= 10 else {f"{part:.4g}"}
            leaked = [s for s in shown if len(s.strip("0.,-")) >= 3 and s in outputs]
            assert not leaked, f"exercise {number}'s answer {leaked} appears in the outputs of {path.name}"
