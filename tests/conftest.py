"""Shared test set-up: the ``notebook`` marker and a fixture that executes notebooks headless.

Select or skip the notebook executions with ``-m notebook`` / ``-m "not notebook"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import nbformat
import pytest

# Traces the tests load are never kept in the user's trace cache (dlexplore.traces.cache); the
# cache's own tests point it at a temporary folder and ask for it.
os.environ.setdefault("DLEXPLORE_CACHE", "off")

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
