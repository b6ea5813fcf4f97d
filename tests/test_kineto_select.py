"""Decoding only some phases (``decode_kineto(..., phases=...)``, what the PyTorch reader asks for):
a hand-written trace against the values written into it; every real trace against the standard
library's columns of every event, by both paths, and the reader's rows from the kept events against
its rows from every event; odd and bad input read the reference way; and the reader without msgspec."""

from __future__ import annotations

import gzip
import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlexplore.errors import DlexploreError
from dlexplore.traces import load_trace
from dlexplore.traces.kineto_comm import Labels
from dlexplore.traces.kineto_decode import PARSER, decode_kineto, decode_kineto_files
from dlexplore.traces.kineto_rows import PHASES_READ, RankFile

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces-real" / "pytorch"
sys.path.insert(0, str(ROOT / "benchmarks"))

from synth_traces import write_kineto  # noqa: E402

KEPT = ("X", "i", "M")
PARSERS = ["json"] + (["msgspec"] if PARSER == "msgspec" else [])


def strings(c, key: str) -> list:
    """A column as the values it stands for (codes of two decodings may differ)."""
    if key in ("ph", "cat", "name"):
        return list(c.strings(key))
    labels = c.strings(f"{key}_label")
    codes, numbers = c.columns[f"{key}_label"], c.columns[key]
    return [str(t) if code >= 0 else int(n) for t, code, n in zip(labels, codes, numbers, strict=True)]


def kept_like_reference(selected, full) -> None:
    """``selected`` holds exactly the events of KEPT of ``full`` (every event, the reference), with
    the same values, and the arguments each phase keeps."""
    ph = full.strings("ph")
    keep = np.flatnonzero(np.isin(ph, KEPT))
    assert selected.events_read == len(full)
    np.testing.assert_array_equal(selected.index, keep)
    assert len(selected) == len(keep)
    for key in ("ph", "cat", "name", "pid", "tid"):
        every = strings(full, key)
        assert strings(selected, key) == [every[i] for i in keep], key
    for key in ("ts", "dur", "bytes", "correlation", "external_id"):
        np.testing.assert_array_equal(selected.columns[key], full.columns[key][keep], err_msg=key)
    position = {int(e): r for r, e in enumerate(keep)}
    assert selected.comm == {position[i]: v for i, v in full.comm.items() if ph[i] == "X"}
    assert selected.meta_args == {position[i]: v for i, v in full.meta_args.items() if ph[i] == "M"}
    memory = np.asarray([ph[r] == "i" for r in full.memory["row"].tolist()], dtype=bool)
    np.testing.assert_array_equal(selected.index[selected.memory["row"]], full.memory["row"][memory])
    for key in full.memory:
        if key != "row":
            np.testing.assert_array_equal(selected.memory[key], full.memory[key][memory], err_msg=key)
    np.testing.assert_array_equal(
        selected.index[selected.comm_rows], [r for r in full.comm_rows.tolist() if ph[r] == "X"]
    )
    assert selected.meta == full.meta


def rows_of(columns) -> dict:
    """What the PyTorch reader takes from one file's columns (:class:`RankFile`), as plain values."""
    names, cats, streams = Labels(), Labels(), Labels()
    rank = RankFile(columns, names, cats, streams)
    parts = dict(rank.parts)
    for key, labels in (("cat", cats), ("name", names), ("stream", streams)):
        parts[key] = [labels.values[c] for c in parts[key].tolist()]
    return {
        "parts": {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in parts.items()},
        "comm": [{k: repr(getattr(c, k)) for k in type(c).__slots__} for c in rank.comm],
        "memory": {k: v.tobytes() for k, v in rank.memory.items()},  # NaN where absent, compared bitwise
        "threads": rank.threads,
        "events_read": rank.events_read,
    }


def real_files() -> list[Path]:
    if not REAL.is_dir():
        pytest.fail(f"{REAL} is missing: the real traces of shared/traces-real are needed")
    files = sorted(REAL.glob("*.json.gz"))
    assert len(files) >= 13, files
    return files


def test_a_hand_written_trace(tmp_path):
    """Each kept event's values as written; flows, counters and an async pair left out."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7", "x": 1}},
        {"ph": "s", "id": 9, "pid": 0, "tid": 1, "ts": 11, "cat": "ac2g", "name": "ac2g"},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 0,
            "tid": 1,
            "ts": 11,
            "dur": 1.5,
            "args": {"correlation": 9, "External id": 5},
        },  # fmt: skip
        {"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 12, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "C", "name": "[memory]", "pid": 0, "ts": 12, "args": {"Bytes": 1}},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
            "pid": 0,
            "tid": 7,
            "ts": 12.25,
            "dur": 5,
            "args": {
                "correlation": 9,
                "Collective name": "allreduce",
                "In msg nelems": 1024,
                "dtype": "Float",
            },
        },  # fmt: skip
        {"ph": "b", "name": "async", "id": "0x1", "pid": 0, "tid": 1, "ts": 13},
        {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": 0,
            "tid": 1,
            "ts": 14,
            "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512, "Addr": 12345},
        },  # fmt: skip
        {"ph": "e", "name": "async", "id": "0x1", "pid": 0, "tid": 1, "ts": 15},
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoD",
            "pid": 0,
            "tid": "stream 8",
            "ts": 16,
            "dur": 2,
            "args": {"bytes": 4096, "external id": 6},
        },  # fmt: skip
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    for parser in PARSERS:
        c = decode_kineto(path, parser=parser, lenient=True, phases=KEPT)
        assert c.events_read == 10
        assert c.index.tolist() == [0, 2, 5, 7, 9]
        assert list(c.strings("ph")) == ["M", "X", "X", "i", "X"]
        assert list(c.strings("name")) == [
            "thread_name",
            "cudaLaunchKernel",
            "ncclKernel_AllReduce_RING_LL_Sum_float",
            "[memory]",
            "Memcpy DtoD",
        ]
        assert strings(c, "tid") == [7, 1, 7, 1, "stream 8"]
        np.testing.assert_array_equal(c.columns["ts"], [np.nan, 11, 12.25, 14, 16])
        np.testing.assert_array_equal(c.columns["dur"], [np.nan, 1.5, 5, np.nan, 2])
        assert c.columns["correlation"].tolist() == [-1, 9, 9, -1, -1]
        assert c.columns["external_id"].tolist() == [-1, 5, -1, -1, 6]
        np.testing.assert_array_equal(c.columns["bytes"], [np.nan, np.nan, np.nan, np.nan, 4096])
        assert c.comm == {2: {"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float"}}
        assert c.comm_rows.tolist() == [2]
        assert c.meta_args == {0: {"name": "stream 7"}}
        assert c.memory["row"].tolist() == [3]  # the counter named [memory] is left out
        assert c.memory["Bytes"].tolist() == [-512] and c.memory["Addr"].tolist() == [12345]
        assert np.isnan(c.memory["Total Allocated"]).all()
        assert c.meta == {"schemaVersion": 1}


@pytest.mark.parametrize("path", real_files(), ids=lambda p: p.name.split("__")[1])
def test_kept_phases_of_every_real_trace(path):
    full = decode_kineto(path, parser="json", lenient=True)
    for parser in PARSERS:
        kept_like_reference(decode_kineto(path, parser=parser, lenient=True, phases=KEPT), full)


@pytest.mark.skipif(PARSER != "msgspec", reason="msgspec is not installed")
@pytest.mark.parametrize("path", real_files(), ids=lambda p: p.name.split("__")[1])
def test_the_reader_takes_the_same_rows_from_the_kept_phases(path):
    """The PyTorch reader's rows, arguments, memory events and thread names of each real trace are
    the same whether every event was decoded or only the phases it reads."""
    whole, kept = decode_kineto(path, lenient=True), decode_kineto(path, lenient=True, phases=PHASES_READ)
    every = rows_of(whole)
    assert rows_of(kept) == every
    assert every["parts"]["ts"], "a real trace with no complete event"
    # msgspec read every chunk: a refusal gives the same rows (the reference reads the chunk), so
    # only this count shows a fast path that fails on real files (as a name clash once made it)
    assert (whole.refused_chunks, kept.refused_chunks) == (0, 0)


@pytest.mark.parametrize("chunk_bytes", [64, 4096, 1 << 23])
@pytest.mark.parametrize("parser", PARSERS)
def test_kept_phases_at_any_chunk_size(tmp_path, parser, chunk_bytes):
    path = tmp_path / "rank-0.json.gz"
    write_kineto(path, 0.3, rank=0, world_size=2, seed=3, layers=4)
    full = decode_kineto(path, parser="json", lenient=True, chunk_bytes=1 << 30)
    selected = decode_kineto(path, parser=parser, lenient=True, phases=KEPT, chunk_bytes=chunk_bytes)
    kept_like_reference(selected, full)
    assert {"s", "f"} <= set(full.strings("ph")) and not {"s", "f"} & set(selected.strings("ph"))


ODD = [
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2},
    {"ph": "Z", "name": "odd", "ts": 2},
    {"name": "no phase", "ts": 3},
    {"ph": 5, "name": "number phase", "ts": 4},
    {"ph": None, "name": "null phase", "ts": 4},
    {"ph": "X", "name": 'a"},{"b', "ts": None, "dur": 1, "pid": True, "tid": 1.5},
    {"ph": "i", "name": "[memory]", "ts": 5, "args": {"Bytes": 4, "Device Type": 1}},
    {"ph": "s", "id": 1, "ts": "later", "cat": "ac2g", "name": "ac2g", "pid": None, "args": [1]},
    {"ph": "C", "name": "c", "ts": 1, "args": {"correlation": "x", "External id": 2**70, "bytes": "many"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "main"}},
    {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "ts": 6, "dur": 1, "args": {"Ev Idx": 3}},
]


@pytest.mark.parametrize("parser", PARSERS)
def test_odd_phases_and_values_go_to_the_reference(tmp_path, parser):
    """A phase outside the Trace Event Format's, a ph that is missing, null or not a string, odd
    values in kept and left-out events, and names that mislead the chunk cut: the chunk is read
    the reference way and still gives the kept events only, with the same problems noted."""
    path = tmp_path / "odd.json.gz"
    with gzip.open(path, "wt") as out:
        json.dump({"traceEvents": ODD * 40}, out)
    full = decode_kineto(path, parser="json", lenient=True, chunk_bytes=256)
    for chunk_bytes in (256, 1 << 20):
        selected = decode_kineto(path, parser=parser, lenient=True, phases=KEPT, chunk_bytes=chunk_bytes)
        kept_like_reference(selected, full)
        kept = set(selected.index.tolist())
        # problems of kept events are noted alike; those of left-out events may not be read at all
        assert sorted(p for p in selected.problems if p[0] in kept) == sorted(
            p for p in full.problems if p[0] in kept
        )


@pytest.mark.parametrize("parser", PARSERS)
def test_a_phase_given_twice(tmp_path, parser):
    """JSON allows a member twice and the standard library keeps the last: so does the selection."""
    text = (
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},'
        ' {"ph": "s", "ph": "X", "name": "b", "ts": 2, "dur": 1},'
        ' {"ph": "X", "ph": "f", "name": "c", "ts": 3},'
        ' {"ph": "X", "ph": "X", "name": "d", "ts": 4, "dur": 1}]}'
    )
    path = tmp_path / "twice.json"
    path.write_text(text)
    selected = decode_kineto(path, parser=parser, lenient=True, phases=KEPT)
    assert selected.index.tolist() == [0, 1, 3]
    assert list(selected.strings("name")) == ["a", "b", "d"]


def test_bad_input_is_named_as_before(tmp_path):
    """Errors of the reader, which decodes the phases it reads only: an element that is not an
    object among left-out events, a kept event's bad value, cut-off JSON after the kept events."""
    flow = {"ph": "f", "id": 1, "ts": 2, "cat": "ac2g", "name": "ac2g"}
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}
    cases = [
        ([kernel, flow, 7, flow], r"bad\.json \(event 2\): is int '7'; expected a trace event"),
        (
            [kernel, flow, dict(kernel, name="late", ts="soon")],
            r"bad\.json \(event 2\): complete event 'late' has ts = 'soon' \(str\)",
        ),
        ([kernel, flow, dict(kernel, dur=-1)], r"bad\.json \(event 2\): event 'k' has a negative dur"),
    ]
    path = tmp_path / "bad.json"
    for events, message in cases:
        path.write_text(json.dumps({"traceEvents": events}))
        with pytest.raises(DlexploreError, match=message):
            load_trace(path)
    path.write_text(json.dumps({"traceEvents": [kernel] * 3 + [flow] * 3})[:-30])
    with pytest.raises(
        DlexploreError, match=r"bad\.json \(event 5, byte \d+ of the file\): invalid or truncated"
    ):
        load_trace(path)


def test_phases_need_lenient_reading(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]}))
    with pytest.raises(ValueError, match="lenient"):
        decode_kineto(path, phases=KEPT)


def test_several_files_with_phases_in_order(tmp_path):
    paths = []
    for rank in range(3):
        path = tmp_path / f"rank-{rank}.json"
        write_kineto(path, 0.1, rank=rank, world_size=3, layers=4)
        paths.append(path)
    decoded = decode_kineto_files(paths, workers=1, lenient=True, phases=KEPT)
    for path, got in zip(paths, decoded, strict=True):
        assert got.path == str(path)
        kept_like_reference(got, decode_kineto(path, parser="json", lenient=True))


@pytest.mark.skipif(PARSER != "msgspec", reason="compares with msgspec's reading")
def test_the_reader_without_msgspec_gives_the_same_trace(tmp_path):
    """A platform without msgspec's wheels: the reader's events and breakdown of a real trace do
    not change (the standard library reads every event, and the kept ones are cut out)."""
    source = REAL / "HolisticTraceAnalysis__nccl_parser_config__nccl_data.json.gz"
    if not source.exists():
        pytest.fail(f"{source} is missing: the real traces of shared/traces-real are needed")
    out = tmp_path / "trace.pickle"
    code = (
        "import pickle, sys\n"
        "sys.modules['msgspec'] = None  # as if it could not be installed\n"
        "from dlexplore.traces import kineto_decode, load_trace\n"
        "assert kineto_decode.PARSER == 'json'\n"
        f"trace = load_trace({str(source)!r}, cache=False)\n"
        f"pickle.dump((trace.events, trace.breakdown(), trace.meta), open({str(out)!r}, 'wb'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    events, breakdown, meta = pickle.loads(out.read_bytes())
    trace = load_trace(source, cache=False)
    pd.testing.assert_frame_equal(events, trace.events, check_exact=True)
    assert breakdown.identical(trace.breakdown())
    assert meta["parser"] == "json" and trace.meta["parser"] == "msgspec"
    assert {k: v for k, v in meta.items() if k != "parser"} == {
        k: v for k, v in trace.meta.items() if k != "parser"
    }
