"""ruff keeps the code base clean and formatted; run as part of the suite so CI enforces it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["dlexplore", "dlexplore_jupyter", "tests", "benchmarks", "docs"]


def _ruff() -> str:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed: it comes with the test extra")
    return ruff


def test_ruff_clean():
    result = subprocess.run([_ruff(), "check", *CHECKED], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_formatted():
    # The test extra pins ruff's minor version: its formatter's style changes between them.
    result = subprocess.run(
        [_ruff(), "format", "--check", *CHECKED], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, "run `ruff format`:\n" + result.stdout + result.stderr
