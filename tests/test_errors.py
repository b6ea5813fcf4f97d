"""dlexplore's errors survive a trip between processes (Dask, multiprocessing) intact."""

from __future__ import annotations

import pickle

import pytest

from dlexplore import load_trace
from dlexplore.errors import DlexploreError, InputFileError, UnknownNameError


def test_reader_error_pickles(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": "soon"')
    with pytest.raises(DlexploreError) as info:
        load_trace(path)
    restored = pickle.loads(pickle.dumps(info.value))
    assert type(restored) is type(info.value)
    assert str(restored) == str(info.value)
    assert "byte 41" in str(restored)


def test_input_file_error_pickles_with_its_position():
    error = InputFileError("timeline.json", "expected an object", line=12)
    restored = pickle.loads(pickle.dumps(error))
    assert type(restored) is InputFileError
    assert (restored.path, restored.line, restored.row) == ("timeline.json", 12, None)
    assert str(restored) == "timeline.json, line 12: expected an object"


def test_unknown_name_error_pickles_and_stays_a_key_error():
    error = UnknownNameError("workload", "resnet5", ["resnet50", "vgg16"])
    restored = pickle.loads(pickle.dumps(error))
    assert isinstance(restored, KeyError) and isinstance(restored, DlexploreError)
    assert str(restored) == "unknown workload 'resnet5'; did you mean 'resnet50'?"
    assert restored.known == ["resnet50", "vgg16"]


def test_row_and_line_are_in_the_message():
    error = InputFileError("runs.csv", "expected a number of GPUs", row=7)
    assert str(pickle.loads(pickle.dumps(error))) == "runs.csv, row 7: expected a number of GPUs"
