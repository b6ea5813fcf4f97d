"""The PyTorch reader on traces that are not today's Kineto output: the legacy profiler's export
(tests/data/traces/kineto-legacy/README.txt) and runs that used a GPU without profiling it
(tests/data/traces/kineto-gpus-without-activity/README.txt). Every number below is derived by
hand from the files' own ts and dur (µs), as the README there says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlexplore.errors import DlexploreError
from dlexplore.traces import load_trace

DATA = Path(__file__).parent / "data" / "traces"
LEGACY = DATA / "kineto-legacy"


def test_an_invalid_legacy_array_names_both_shapes_of_a_trace():
    """The legacy export of pytorch/pytorch#33961 lost a quote before "tid": the error names the
    event and byte, and says that a bare array of events is a trace too (the file is one)."""
    with pytest.raises(
        DlexploreError,
        match=r"legacy-autograd-cuda-33961\.json \(event 2, byte 306 of the file\): invalid or truncated "
        r"JSON .*expected a complete Chrome trace \(a JSON object with a traceEvents array, or a "
        r"bare JSON array of events\)",
    ):
        load_trace(LEGACY / "legacy-autograd-cuda-33961.json", cache=False)
