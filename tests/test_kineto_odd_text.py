"""Text a trace's JSON can hold that pandas' string storage cannot, and a reader that warns before
it fails: what a user gets is the trace, or the reader's own error with its warnings, never a
bare UnicodeEncodeError or a MemoryError."""

from __future__ import annotations

import gzip
import json
import warnings

import pytest
from _real_traces import real

from dlexplore.errors import DlexploreError
from dlexplore.traces import Reader, load_trace, register_reader, unregister_reader

NCCL = "pytorch/HolisticTraceAnalysis__nccl_parser_config__nccl_data.json.gz"


def test_a_lone_surrogate_in_a_name_and_a_process_group_is_shown_escaped(tmp_path):
    """JSON allows "\\ud800" alone; Python keeps it, UTF-8 (pyarrow) cannot encode it. Derived from
    HTA's real NCCL trace: one operator renamed, one Process Group Name changed."""
    doc = json.loads(gzip.decompress(real(NCCL).read_bytes()))
    events = doc["traceEvents"]
    op = next(e for e in events if e.get("cat") == "cpu_op")
    op["name"] = "\ud800odd"
    comm = next(e for e in events if "Process Group Name" in e.get("args", {}))
    comm["args"]["Process Group Name"] = "\ud800group"
    path = tmp_path / "surrogates.json"
    path.write_text(json.dumps(doc))  # ensure_ascii: written as the \ud800 escape
    assert "\\ud800odd" in path.read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = load_trace(path, cache=False)
    assert "\\ud800odd" in set(trace.events["name"].astype(str))
    assert "\\ud800group" in set(trace.events["process_group"].astype(str))


class _WarnsThenFails(Reader):
    """A plug-in reader (the public registry) that warns, then finds the file bad."""

    description = "a reader that warns before it fails"
    patterns = ("*.warnfail",)

    def read(self, paths, **options):
        warnings.warn("first, a warning", UserWarning, stacklevel=2)
        raise DlexploreError("then the file is bad")


def test_a_load_that_warns_then_fails_raises_its_error_with_its_warnings(tmp_path):
    # The cache re-said the recorded warnings while still recording: each was recorded again into
    # the list being read, which grew until the process ran out of memory.
    path = tmp_path / "x.warnfail"
    path.write_text("anything\n")
    register_reader(_WarnsThenFails, name="warnfail")
    try:
        with pytest.warns(UserWarning, match="first, a warning") as caught:
            with pytest.raises(DlexploreError, match="then the file is bad"):
                load_trace(path, format="warnfail")
        assert sum("first, a warning" in str(w.message) for w in caught) == 1
    finally:
        unregister_reader("warnfail")
