"""The ``dlexplore`` command run inside the test's own process, or as a real process.

:func:`run_in_process` calls :func:`dlexplore.cli.main`, the function the installed ``dlexplore``
script calls, with the command line's arguments, and returns what :func:`subprocess.run` would:
the exit status, standard output and standard error as text. A fresh interpreter pays about 2 s
of imports (pandas, xarray, bokeh and, where the test extra installs them, dask and pint) before
a command starts; the suite runs about a hundred commands on 2 cores, so those that need no
process of their own run here. What only a process shows (the installed script, a user's catalog
loaded for one run, a server) is run by :func:`run_process`; ``tests/test_readme.py`` and
``tests/test_nothing_lost.py`` run their commands as real processes too.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dlexplore.cli import main

EXE = shutil.which("dlexplore") or str(Path(sys.executable).parent / "dlexplore")


def run_in_process(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``dlexplore ARGS`` through :func:`dlexplore.cli.main` in this process (see the module)."""
    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main([str(a) for a in args])
            except SystemExit as exit:  # argparse: a usage error (2) or --help (0)
                status = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["dlexplore", *args], status, out.getvalue(), err.getvalue())


def run_process(
    *args: str, cwd: str | Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """``dlexplore ARGS`` as a user runs it: the installed script in a process of its own."""
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)
