"""Progress bars: tqdm's where a person watches (a terminal, a notebook), nothing under CI or into
a pipe. Checked in child processes on a real pseudo-terminal."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from dlexplore.progress import progress_enabled

pty = pytest.importorskip("pty", reason="pseudo-terminals are POSIX")
fcntl = pytest.importorskip("fcntl")
termios = pytest.importorskip("termios")

BAR = """
from dlexplore.progress import progress_bar
with progress_bar(total=3, desc="traces", unit="file", delay=0) as bar:
    bar.update(3)
"""

DASK = """
import dask
from dlexplore.traces.scale import _progress_bar
with _progress_bar(True, minimum=0):
    dask.compute(*[dask.delayed(sum)([i, 1]) for i in range(4)], scheduler="sync")
"""


def run_on_terminal(code: str, **env: str) -> str:
    """Run ``code`` with stderr on a pseudo-terminal; what it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size
    environment = {k: v for k, v in os.environ.items() if k != "CI"} | env
    child = subprocess.Popen(
        [sys.executable, "-c", code], stderr=follower, stdout=subprocess.DEVNULL, env=environment
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the terminal closes when the child exits
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert child.wait(timeout=120) == 0
    return b"".join(chunks).decode(errors="replace")


def test_a_bar_on_a_terminal_and_none_under_ci():
    shown = run_on_terminal(BAR)
    assert "traces: 100%" in shown and "3/3" in shown
    assert "traces" not in run_on_terminal(BAR, CI="true")


def test_no_bar_into_a_pipe():
    done = subprocess.run(
        [sys.executable, "-c", BAR],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "CI"},
    )
    assert done.returncode == 0 and done.stderr == ""


def test_dask_work_shows_tqdm_progress_on_a_terminal():
    shown = run_on_terminal(DASK)
    assert "traces: 100%" in shown and "task" in shown


@pytest.mark.parametrize(
    ("ci", "explicit", "expected"),
    [("true", None, False), ("", True, True), ("true", True, True), ("", False, False)],
)
def test_the_switch(monkeypatch, ci, explicit, expected):
    monkeypatch.setenv("CI", ci)
    assert progress_enabled(explicit) is expected
