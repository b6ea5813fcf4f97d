"""The column decoder of Kineto traces: the msgspec path against the standard library's, values
against hand counts, and every kind of bad input named with the file and the event."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dlexplore.errors import DlexploreError
from dlexplore.traces import load_trace
from dlexplore.traces.kineto_decode import PARSER, decode_kineto, decode_kineto_files

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces-real" / "pytorch"
GLOO = ROOT / "tests" / "data" / "traces" / "pytorch" / "gloo-mlp-2rank"
sys.path.insert(0, str(ROOT / "benchmarks"))

from synth_traces import write_kineto  # noqa: E402

needs_msgspec = pytest.mark.skipif(PARSER != "msgspec", reason="msgspec is not installed")


def same(a, b) -> None:
    """Every column, label, sparse table and top-level member equal."""
    assert len(a) == len(b)
    assert a.labels == b.labels
    assert a.columns.keys() == b.columns.keys()
    for key in a.columns:
        assert a.columns[key].dtype == b.columns[key].dtype, key
        np.testing.assert_array_equal(a.columns[key], b.columns[key], err_msg=key)
    assert a.comm == b.comm
    assert a.meta_args == b.meta_args
    assert a.memory.keys() == b.memory.keys()
    for key in a.memory:
        np.testing.assert_array_equal(a.memory[key], b.memory[key], err_msg=key)
    assert a.meta == b.meta


def real_files() -> list[Path]:
    if not REAL.is_dir():
        pytest.fail(f"{REAL} is missing: the real traces of shared/traces-real are needed")
    return sorted(REAL.glob("*.json.gz"))


@needs_msgspec
def test_both_paths_give_the_same_columns_on_every_real_trace():
    files = real_files()
    assert len(files) >= 13
    for path in files:
        fast = decode_kineto(path)
        reference = decode_kineto(path, parser="json")
        assert fast.parser == "msgspec" and reference.parser == "json"
        same(fast, reference)


@needs_msgspec
@pytest.mark.parametrize("chunk_bytes", [64, 4096, 1 << 23])
def test_any_chunk_size_gives_the_same_columns(tmp_path, chunk_bytes):
    path = tmp_path / "rank-0.json.gz"
    write_kineto(path, 0.3, rank=0, world_size=2, seed=3, layers=4)
    whole = decode_kineto(path, parser="json", chunk_bytes=1 << 30)
    same(decode_kineto(path, chunk_bytes=chunk_bytes), whole)
    same(decode_kineto(path, parser="json", chunk_bytes=chunk_bytes), whole)


def test_columns_of_a_hand_written_trace(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 7,
            "tid": 8,
            "ts": 10.5,
            "dur": 2,
            "args": {
                "External id": 41,
                "Collective name": "allreduce",
                "In msg nelems": 256,
                "dtype": "Float",
                "Process Group Ranks": "[0, 1]",
                "Ev Idx": 3,
            },
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
            "pid": 0,
            "tid": "stream 7",
            "ts": 12,
            "dur": 30.25,
            "args": {"external id": 41, "correlation": 99},
        },
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 7,
            "ts": 50,
            "dur": 1,
            "args": {"bytes": 4096, "correlation": 100, "External id": 42},
        },
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": 7,
            "tid": 8,
            "ts": 60,
            "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512, "Total Allocated": 1024, "Addr": 77},
        },
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "python3", "other": 1}},
        {"ph": "s", "id": 99, "pid": 7, "tid": 8, "ts": 11, "cat": "ac2g", "name": "ac2g"},
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 1,
            "dur": 100,
            "args": {"Op count": 0},
        },
    ]
    doc = {
        "schemaVersion": 1,
        "traceEvents": events,
        "distributedInfo": {"rank": 1, "world_size": 2},
        "baseTimeNanoseconds": 1711964646000000000,
        "displayTimeUnit": "ms",
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, indent=1))
    for parser in ("json", PARSER):
        c = decode_kineto(path, parser=parser)
        assert list(c.strings("ph")) == ["X", "X", "X", "i", "M", "s", "X"]
        assert list(c.strings("name"))[1] == "ncclKernel_AllReduce_RING_LL_Sum_float"
        np.testing.assert_array_equal(c.columns["ts"], [10.5, 12, 50, 60, np.nan, 11, 1])
        np.testing.assert_array_equal(c.columns["dur"], [2, 30.25, 1, np.nan, np.nan, np.nan, 100])
        np.testing.assert_array_equal(c.columns["external_id"], [41, 41, 42, -1, -1, -1, -1])
        np.testing.assert_array_equal(c.columns["correlation"], [-1, 99, 100, -1, -1, -1, -1])
        np.testing.assert_array_equal(
            c.columns["bytes"], [np.nan, np.nan, 4096, np.nan, np.nan, np.nan, np.nan]
        )
        np.testing.assert_array_equal(c.columns["pid"][:6], [7, 0, 0, 7, 7, 7])
        assert c.strings("pid_label")[6] == "Spans" and c.strings("tid_label")[1] == "stream 7"
        assert c.columns["tid_label"][2] == -1 and c.columns["tid"][2] == 7
        assert c.comm == {
            0: {
                "Collective name": "allreduce",
                "In msg nelems": 256,
                "dtype": "Float",
                "Process Group Ranks": "[0, 1]",
            }
        }
        np.testing.assert_array_equal(c.memory["row"], [3])
        assert c.memory["Bytes"][0] == -512 and c.memory["Addr"][0] == 77
        assert np.isnan(c.memory["Total Reserved"][0])  # absent
        assert c.meta_args == {4: {"name": "python3"}}
        assert c.meta["distributedInfo"] == {"rank": 1, "world_size": 2}
        assert c.meta["baseTimeNanoseconds"] == 1711964646000000000
        assert c.to_frame()["pid"].tolist()[6] == "Spans"


def test_the_same_events_and_times_as_the_reader():
    path = GLOO / "rank0.pt.trace.json.gz"
    c = decode_kineto(path)
    trace = load_trace(path)
    complete = (c.strings("ph") == "X") & (c.strings("cat") != "Trace")
    assert complete.sum() == len(trace.events)
    # the reader counts from the file's first event and converts µs to s
    assert np.isclose(c.columns["dur"][complete].sum() * 1e-6, trace.events["duration"].sum(), rtol=1e-12)
    assert sorted(c.strings("name")[complete]) == sorted(trace.events["name"].astype(str))


def test_several_files_in_worker_processes_come_back_in_order(tmp_path):
    paths = []
    for rank in range(3):
        path = tmp_path / f"rank-{rank}.json"
        write_kineto(path, 0.2, rank=rank, world_size=3, layers=4)
        paths.append(path)
    parallel = decode_kineto_files(paths, workers=2, progress=False)
    for path, got in zip(paths, parallel, strict=True):
        assert got.path == str(path)
        same(got, decode_kineto(path))
        assert got.meta["distributedInfo"]["rank"] == int(path.stem.split("-")[1])


BAD = {
    "truncated": (
        b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}, {"ph": "X", "na',
        "invalid or truncated JSON in traceEvents",
    ),
    "trailing comma": (
        b'{"traceEvents": [{"ph": "X", "ts": 1},]}',
        "trailing comma at the end of traceEvents",
    ),
    "not an event": (
        b'{"traceEvents": [{"ph": "X", "ts": 1}, 5]}',
        "event 1): is int 5; expected a trace event",
    ),
    "ts a string": (
        b'{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "name": "k", "ts": "5"}]}',
        "event 1): event 'k' has ts = '5' (str); expected a number of",
    ),
    "huge correlation": (
        b'{"traceEvents": [{"ph": "X", "ts": 1, "args": {"correlation": 99999999999999999999}}]}',
        "has args 'correlation' = 99999999999999999999; expected an integer id",
    ),
    "args a list": (
        b'{"traceEvents": [{"ph": "X", "ts": 1, "args": [1]}]}',
        "has args of type list; expected a JSON object",
    ),
    "memory bytes a string": (
        b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": "x"}}]}',
        "has args 'Bytes' = 'x'; expected a number",
    ),
    "bad utf-8 where nothing looks": (
        b'{"traceEvents": [{"ph": "X", "ts": 1, "args": {"Call stack": "\xff"}}]}',
        "byte 62 of the file): is not UTF-8 text",
    ),
    "deep": (
        b'{"traceEvents": [{"ph": "X", "ts": 1, "args": {"x": ' + b"[" * 100000 + b"]" * 100000 + b"}}]}",
        "nested too deeply",
    ),
    "extra data": (b'{"traceEvents": []} {}', "extra data after the end of the trace"),
    "no events": (b'{"schemaVersion": 1}', "without a traceEvents array (members: schemaVersion)"),
    "empty": (b"  ", "is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("parser", ["json", "msgspec"])
def test_bad_input_is_named_alike_by_both_paths(tmp_path, case, parser):
    if parser == "msgspec" and PARSER != "msgspec":
        pytest.skip("msgspec is not installed")
    data, expected = BAD[case]
    path = tmp_path / "bad.json"
    path.write_bytes(data)
    with pytest.raises(DlexploreError) as error:
        decode_kineto(path, parser=parser)
    assert str(error.value).startswith(str(path))
    assert expected in str(error.value)


def test_a_truncated_gzip_file_is_named(tmp_path):
    path = tmp_path / "rank-0.json.gz"
    write_kineto(path, 0.3, layers=4)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DlexploreError, match="the gzip stream is truncated"):
        decode_kineto(path)


GZIP_FAULTS = {
    # what is done to a sound .json.gz, and what the standard library's gzip says of it
    "truncated": (lambda data: data[: len(data) // 2], "the gzip stream is truncated"),
    # ISA-L reads bytes after the last member as a truncation; the standard library names them
    "trailing bytes": (lambda data: data + b"xx", r"corrupt gzip data \(Not a gzipped file \(b'xx'\)\)"),
    "bad checksum": (lambda data: data[:-8] + bytes(4) + data[-4:], r"corrupt gzip data \(CRC check failed"),
}


@pytest.mark.parametrize("fault", sorted(GZIP_FAULTS))
@pytest.mark.parametrize("decompressor", ["isal", "zlib"])
def test_gzip_faults_are_named_as_the_standard_library_names_them(tmp_path, monkeypatch, fault, decompressor):
    """Whichever decompressor inflates the file, a fault is named, with its byte offset, in the
    standard library's words."""
    from dlexplore.traces import jsonchunks

    if decompressor == "zlib":
        monkeypatch.setattr(jsonchunks, "igzip", None)
    else:
        assert jsonchunks.igzip is not None, "isal is a core dependency: README's install has it"
    path = tmp_path / "rank-0.json.gz"
    write_kineto(path, 0.3, layers=4)
    change, message = GZIP_FAULTS[fault]
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(DlexploreError, match=message) as error:
        decode_kineto(path)
    assert str(error.value).startswith(f"{path} (byte ")


def test_isal_and_zlib_give_the_same_columns_on_every_real_trace(monkeypatch):
    from dlexplore.traces import jsonchunks

    assert jsonchunks.igzip is not None, "isal is a core dependency: README's install has it"
    fast = {path: decode_kineto(path) for path in real_files()}
    monkeypatch.setattr(jsonchunks, "igzip", None)
    for path, columns in fast.items():
        same(columns, decode_kineto(path))


def test_odd_values_read_as_the_reference_reads_them(tmp_path):
    """What msgspec refuses (null times, bool or float ids, names as numbers, a '},{' inside a name
    that misleads the chunk cut) goes to the reference, so both paths agree."""
    events = [
        {"ph": "X", "name": 'a"},{"b', "ts": None, "dur": 1, "pid": True, "tid": 1.5},
        {"ph": "X", "name": 5, "cat": None, "ts": 2, "dur": 1, "pid": 2**64, "tid": 3},
        {"ph": "X", "name": "x}]", "ts": 3, "dur": 1, "args": {"bytes": "12", "correlation": None}},
    ]
    path = tmp_path / "odd.json.gz"
    with gzip.open(path, "wt") as out:
        json.dump({"traceEvents": events * 50}, out)
    reference = decode_kineto(path, parser="json", chunk_bytes=128)
    assert list(reference.strings("name")[:3]) == ['a"},{"b', "5", "x}]"]
    assert list(reference.strings("pid_label")[:2]) == ["True", str(2**64)]
    assert np.isnan(reference.columns["ts"][0]) and np.isnan(reference.columns["bytes"][2])
    if PARSER == "msgspec":
        for chunk_bytes in (128, 1 << 20):
            same(decode_kineto(path, chunk_bytes=chunk_bytes), reference)


def test_without_msgspec_the_standard_library_gives_the_same_columns(tmp_path):
    """A platform without msgspec's wheels: the import falls back and the columns do not change."""
    import pickle
    import subprocess

    source = REAL / "HolisticTraceAnalysis__nccl_parser_config__nccl_data.json.gz"
    if not source.exists():
        pytest.fail(f"{source} is missing: the real traces of shared/traces-real are needed")
    out = tmp_path / "columns.pickle"
    code = (
        "import pickle, sys\n"
        "sys.modules['msgspec'] = None  # as if it could not be installed\n"
        "from dlexplore.traces import horovod_decode, kineto_decode\n"
        "assert kineto_decode.PARSER == 'json' and horovod_decode.msgspec is None\n"
        f"columns = kineto_decode.decode_kineto({str(source)!r})\n"
        f"pickle.dump(columns, open({str(out)!r}, 'wb'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    without = pickle.loads(out.read_bytes())
    assert without.parser == "json"
    same(without, decode_kineto(source))


@pytest.mark.parametrize("inside", [b'"name": "' + b"a" * (3 << 20), b'"ts": 1' + b"1" * (3 << 20)])
def test_a_gzip_bomb_stops_at_the_value_bound(tmp_path, monkeypatch, inside):
    """A value longer than the bound (a string or a number inflating to megabytes) is refused
    before it is held whole; the bound is lowered to 1 MiB here to keep the test small."""
    from dlexplore.traces import jsonchunks

    monkeypatch.setattr(jsonchunks, "MAX_VALUE_BYTES", 1 << 20)
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb") as out:
        out.write(b'{"traceEvents": [{"ph": "X", ' + inside + b'", "dur": 1}]}')
    assert path.stat().st_size < 100_000
    for parser in ["json"] + (["msgspec"] if PARSER == "msgspec" else []):
        with pytest.raises(
            DlexploreError, match="longer than 1048576 bytes|number in traceEvents that cannot"
        ):
            decode_kineto(path, parser=parser, chunk_bytes=1 << 16)
