"""Where the real traces of other people's runs are, for the tests that read them.

``../shared/traces-real/`` beside the repository (CI has it there) holds 27 files written by real
runs of public projects; its ``SOURCES.tsv`` names each one's repository, path and commit. Outside
CI a checkout without it skips these tests with that reason; under CI (``CI=true``) they fail.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

REAL = Path(__file__).parents[1].parent / "shared" / "traces-real"


def real(relative: str) -> Path:
    """The real file ``relative`` (e.g. ``pytorch/...json.gz``); fails under CI when missing."""
    path = REAL / relative
    if path.exists():
        return path
    message = (
        f"{path} is missing: the real traces live in ../shared/traces-real beside the "
        "repository (see SOURCES.tsv there)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def events_of(path: Path) -> list[dict]:
    """The file's trace events, parsed with the standard library (independently of dlexplore)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)["traceEvents"]


def document_of(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)
