"""Every reader holds against mutated real files: a DlexploreError naming the file, or a result.

The harness is ``benchmarks/fuzz_readers.py`` (seeds: the real test data under ``tests/data/traces``
and ``data/``; see its docstring); here it runs at CI size (seeded, 300 cases per reader on 2 worker
processes, each case under a 5 s alarm and a 2 GiB ``RLIMIT_AS``). Below are regression cases for
each kind of finding the full run (10k cases per reader) turned up and fixed, written by editing the
real files by hand, plus the gzip bomb and 100k-deep nesting.

The same mutations also run under hypothesis (``test_reader_survives_hypothesis``): ``st.randoms()``
drives :func:`mutate_seed`, so hypothesis picks every seed, mutation, position and byte, stacks up
to three mutations, and shrinks a failing file to the smallest mutation that still fails.
"""

from __future__ import annotations

import gzip
import importlib.util
import re
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from _hdf5_loop import HDF5_LOOP, hdf5_hangs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlexplore.errors import DlexploreError

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
DEEP = 100_000  # nesting levels
CASES = 300  # fuzz cases per reader: the whole file stays under 30 s on 2 cores
EXAMPLES = 100  # hypothesis examples per reader, each in a fresh process (0.02-0.3 s each)


def _load_harness():
    spec = importlib.util.spec_from_file_location("fuzz_readers", ROOT / "benchmarks" / "fuzz_readers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_readers"] = module
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


@pytest.fixture(scope="module")
def fuzz_result():
    return harness.fuzz(
        list(harness.READERS), CASES, workers=2, seed=7, timeout_s=5.0, progress=False, kill_after_s=8.0
    )


@pytest.mark.parametrize("reader", sorted(harness.READERS))
def test_reader_survives_fuzzing(fuzz_result, reader):
    counts = fuzz_result["counts"][reader]
    assert counts["cases"] == CASES
    assert counts["ok"] + counts["error"] + counts["finding"] == CASES
    assert counts["error"] > 0  # the mutations do break files
    found = [f for f in fuzz_result["findings"] if f[0] == reader]
    assert not found, found[:5]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return harness.seed_files(tmp_path_factory.mktemp("seeds"))


@pytest.mark.parametrize("reader", sorted(harness.READERS))
def test_reader_survives_hypothesis(reader, seeds, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"hypothesis-{reader}")
    count = iter(range(1 << 30))
    harness.warm_up(reader, seeds[reader][0])  # imported here once, not in every forked example

    # Derandomized, so CI runs the same examples every time; no example database is kept.
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(rng=st.randoms(use_true_random=False), stack=st.integers(1, 3))
    def survives(rng, stack):
        kinds, suffix, data = harness.mutate_seed(reader, seeds[reader], rng, stack=stack, bombs=False)
        path = folder / f"example{next(count)}{suffix}"
        path.write_bytes(data)
        outcome, detail = harness.run_isolated(reader, path, timeout_s=5.0, kill_after_s=20.0)
        assert outcome != "finding", f"{kinds}: {detail}"

    survives()


def _expect_error(reader: str, path: Path, *words: str) -> str:
    with pytest.raises(DlexploreError) as info:
        harness.READERS[reader](path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message
    return message


# -- deep nesting (was RecursionError) ----------------------------------------------------------------


def test_deep_nesting_pytorch_metadata(tmp_path):
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(b'{"deviceProperties": ' + b"[" * DEEP + b"]" * DEEP + b', "traceEvents": []}')
    _expect_error("pytorch", path, "nested too deeply", "byte 21")


def test_deep_nesting_horovod_event(tmp_path):
    text = (TRACES / "horovod" / "timeline.json").read_bytes()
    at = text.index(b"\n{", 10) + 1
    path = tmp_path / "timeline.json"
    path.write_bytes(text[:at] + b"[" * DEEP + b"]" * DEEP + b",\n" + text[at:])
    _expect_error("horovod", path, "nested too deeply", f"byte offset {at}")


@pytest.mark.parametrize("reader,name", [("dlio", "summary.json"), ("workflow", "tasks.json")])
def test_deep_nesting_whole_json_documents(tmp_path, reader, name):
    path = tmp_path / name
    path.write_bytes(b'{"a":' * DEEP + b"1" + b"}" * DEEP)
    _expect_error(reader, path, "nested too deeply")


# -- huge numbers (were OverflowError) -------------------------------------------------------------------


def test_darshan_record_id_beyond_64_bits(tmp_path):
    text = (TRACES / "darshan" / "pq_app_readAB.darshan-parser.txt").read_text()
    path = tmp_path / "log.darshan-parser.txt"
    path.write_text(text.replace("\t4590908166289704079\t", "\t18446744073709551616\t"))
    _expect_error("darshan", path, "64-bit")


def test_measured_integer_beyond_64_bits(tmp_path):
    text = (ROOT / "data" / "measured" / "goyal-2017-resnet50.csv").read_text()
    path = tmp_path / "goyal.csv"
    path.write_text(
        text.replace("resnet50,P100,NVLink1,8,8,32", "resnet50,P100,NVLink1,8,8,18446744073709551616", 1)
    )
    _expect_error("measured", path)


def test_nccl_tests_count_beyond_64_bits(tmp_path):
    text = (TRACES / "nccl-tests" / "together-h100-all_reduce_ring.out").read_text()
    path = tmp_path / "allreduce.out"
    path.write_text(re.sub(r"(?m)^( +)8( +)2( +float)", r"\g<1>8\g<2>18446744073709551616\3", text, count=1))
    _expect_error("nccl_tests", path, "line 18", "whole number")


def test_nccl_tests_average_that_is_not_a_number(tmp_path):
    text = (TRACES / "nccl-tests" / "together-h100-all_reduce_ring.out").read_text()
    path = tmp_path / "allreduce.out"
    path.write_text(text.replace("# Avg bus bandwidth    : 122.955", "# Avg bus bandwidth    : 5e", 1))
    _expect_error("nccl_tests", path, "line 50", "'5e'", "GB/s")


def test_nccl_tests_json_results_nested_deeply_or_beyond_a_float(tmp_path):
    # the JSON results file (nccl-tests -J): a RecursionError and OverflowErrors the fuzzer found
    text = (TRACES / "nccl-tests" / "gpu-systems-lab-t4-2.19.7-results.json").read_text()
    path = tmp_path / "results.json"
    path.write_text(text.replace('"args":[', '"args":[' + "[" * DEEP, 1))
    _expect_error("nccl_tests", path, "nested too deeply")
    path.write_text(text.replace('"out_of_bounds":{"count":0', '"out_of_bounds":{"count":1e999', 1))
    _expect_error("nccl_tests", path, "out_of_bounds.count", "whole number")
    path.write_text(text.replace('"alg_bw":5.731221', '"alg_bw":' + "9" * 400, 1))
    _expect_error("nccl_tests", path, "results[0].out_of_place.alg_bw", "a number")


def test_dlio_integer_too_large_for_a_float(tmp_path):
    text = (TRACES / "dlio" / "summary.json").read_text()
    path = tmp_path / "summary.json"
    huge = '"train_au_mean_percentage": 1' + "0" * 400
    path.write_text(text.replace('"train_au_mean_percentage": 93.0', huge))
    _expect_error("dlio", path, "train_au_mean_percentage")


def test_horovod_timestamp_beyond_64_bits(tmp_path):
    text = (TRACES / "horovod" / "timeline.json").read_text()
    path = tmp_path / "timeline.json"
    path.write_text(re.sub(r'"ts": \d+', '"ts": 1' + "0" * 400, text, count=1))
    _expect_error("horovod", path, "within 64 bits")


# -- damaged containers -------------------------------------------------------------------------------------


def test_netcdf_with_a_flipped_byte(tmp_path):
    from dlexplore.traces import horovod, netcdf

    path = netcdf.write_netcdf(horovod.read([TRACES / "horovod" / "timeline.json"]), tmp_path / "t.nc")
    data = bytearray(path.read_bytes())
    for offset in range(600, len(data), 997):  # damage the HDF5 metadata and data throughout
        data[offset] ^= 0x55
    path.write_bytes(bytes(data))
    _expect_error("netcdf", path, "netCDF")


def _nsys_export(tmp_path: Path) -> Path:
    """A real-schema Nsight Systems export, made by tests/test_traces_nsys.py's make_export."""
    spec = importlib.util.spec_from_file_location("_nsys_tests", ROOT / "tests" / "test_traces_nsys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_export(tmp_path / "rank0.sqlite", pid=4242, payload_rank=0)


def test_nsys_string_that_is_not_utf8(tmp_path):
    path = _nsys_export(tmp_path)
    db = sqlite3.connect(path)
    db.execute(
        "UPDATE StringIds SET value = CAST(X'ff81' AS TEXT) WHERE id = (SELECT MIN(id) FROM StringIds)"
    )
    db.commit()
    db.close()
    _expect_error("nsys", path, "StringIds")


def test_workflow_csv_field_over_the_csv_limit(tmp_path):
    path = tmp_path / "tasks.csv"
    path.write_text("task,worker,start,end,kind\n" + '"' + "x" * 200_000 + '",w,0,1,k\n')
    _expect_error("workflow", path, "CSV")


def test_horovod_corrupt_gzip(tmp_path):
    data = bytearray((TRACES / "horovod" / "timeline-cycles.json.gz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "timeline.json.gz"
    path.write_bytes(bytes(data))
    _expect_error("horovod", path, "gzip")


# -- gzip bombs: refused or streamed, never held ----------------------------------------------------------


def test_gzip_bomb_horovod_is_refused_within_the_memory_bound(tmp_path):
    path = tmp_path / "timeline.json.gz"
    path.write_bytes(harness.gzip_bomb(b'[\n{"name": "x", "ph": "B", "ts": 1, "pid": 0},\n'))
    assert path.stat().st_size < 4 << 20  # a small file that inflates to 2 GiB
    outcome, detail = harness.run_isolated("horovod", path, timeout_s=60.0)
    assert outcome == "error", detail
    assert str(path) in detail and "more than 100 times its" in detail and "a gzip bomb?" in detail


@pytest.mark.parametrize(
    "prefix, inflated",
    [
        # whitespace inside the events array: the stream reads it block by block, so the worker's
        # peak stays far below what holding it (and its decoded copy) would take
        (b'{"traceEvents": [', 128 << 20),
        # the same inside a string that never closes
        (b'{"traceEvents": [{"name": "', 192 << 20),
    ],
    ids=["in-array", "unclosed-string"],
)
def test_gzip_bomb_pytorch_is_bounded(tmp_path, prefix, inflated):
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(harness.gzip_bomb(prefix, inflated=inflated))
    outcome, detail = harness.run_isolated("pytorch", path, timeout_s=60.0)
    assert outcome == "error", detail
    assert str(path) in detail


# -- second round of findings: wrong types and huge numbers inside events --------------------------------


def _pytorch_events(tmp_path: Path, events: str) -> Path:
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [' + events + "]}")
    return path


def test_pytorch_category_that_is_an_object(tmp_path):
    path = _pytorch_events(
        tmp_path,
        '{"ph": "X", "cat": {"a": 1}, "name": "Trace", "pid": 1, "tid": 1, '
        '"ts": 1, "dur": 2}, {"ph": "X", "cat": "Trace", "name": "x", "pid": 1, '
        '"tid": 1, "ts": 1, "dur": 2}',
    )
    _expect_error("pytorch", path, "expected a string")


def test_pytorch_timestamp_too_large_for_a_float(tmp_path):
    path = _pytorch_events(
        tmp_path,
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, '
        '"ts": 1' + "0" * 400 + ', "dur": 2}',
    )
    _expect_error("pytorch", path, "expected a number of µs")


@pytest.mark.parametrize("key", ['"Group size": 2', '"In msg nelems": 544'])
def test_pytorch_nccl_count_beyond_64_bits(tmp_path, key):
    # Real NCCL trace (torch 2.13 on a GPU): a 400-digit count once overflowed inside numpy or float().
    text = gzip.decompress((TRACES / "pytorch" / "nccl-mlp-2rank" / "rank0.pt.trace.json.gz").read_bytes())
    assert key.encode() in text
    path = tmp_path / "rank0.pt.trace.json.gz"
    huge = key.split(":")[0] + ": " + "9" * 400
    path.write_bytes(gzip.compress(text.replace(key.encode(), huge.encode(), 1)))
    name = key.split(":")[0].replace('"', "'")
    message = _expect_error("pytorch", path, name, "400 digits", "fits 64 bits")
    assert re.search(r"\(event \d+\)", message)


@pytest.mark.parametrize("value", ['"x"', "null", "1" + "0" * 400, "[1]", "true"])
def test_horovod_start_time_that_is_not_a_number(tmp_path, value):
    # Found by the hypothesis engine (shrunk to this one edit of the real timeline); the numbered
    # 10,000 cases had missed it.
    text = (TRACES / "horovod" / "timeline.json").read_text()
    path = tmp_path / "timeline.json"
    path.write_text(
        text.replace(
            '"start_time_since_epoch_in_micros":1795297140323029',
            f'"start_time_since_epoch_in_micros":{value}',
            1,
        )
    )
    _expect_error("horovod", path, "start_time_since_epoch_in_micros", "expected a number of µs")


def test_horovod_pid_beyond_64_bits(tmp_path):
    text = (TRACES / "horovod" / "timeline.json").read_text()
    path = tmp_path / "timeline.json"
    path.write_text(text.replace('"ts": 857285, "pid": 1}', '"ts": 857285, "pid": 18446744073709551616}', 1))
    _expect_error("horovod", path, "64-bit")


def test_horovod_lone_surrogate_in_a_name(tmp_path):
    text = (TRACES / "horovod" / "timeline.json").read_text()
    path = tmp_path / "timeline.json"
    path.write_text(text.replace('"name": "broadcast.0.bias"', '"name": "broadcast.\\ud800.bias"', 1))
    trace = harness.READERS["horovod"](path)
    original = harness.READERS["horovod"](TRACES / "horovod" / "timeline.json")
    # Nothing lost: every event read, the same ones; the tensor's row keeps the escape as it was
    # written (a lone surrogate is no character that UTF-8 can hold) and no other row changes.
    assert len(trace.events) == len(original.events) == 129
    assert (trace.events["category"].astype(str) == original.events["category"].astype(str)).all()
    assert (trace.events["duration"] == original.events["duration"]).all()
    streams = set(trace.events["stream"].astype(str))
    before = set(original.events["stream"].astype(str))
    assert streams - before == {"broadcast.\\ud800.bias"}
    assert before - streams == {"broadcast.0.bias"}


def test_workflow_time_too_large_for_a_float(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text('[{"task": "a", "worker": "w", "start": 0, "end": 1' + "0" * 400 + ', "kind": "k"}]')
    _expect_error("workflow", path, "expected a number of seconds")


def test_nsys_payload_row_without_event_id(tmp_path):
    path = _nsys_export(tmp_path)
    db = sqlite3.connect(path)
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE name LIKE 'DYNAMIC_NVTX%'")]
    for table in tables:  # a damaged export: the join key is gone
        db.execute(f'UPDATE "{table}" SET "eventId" = \'x\'')
    db.commit()
    db.close()
    harness.READERS["nsys"](path)  # the payload is skipped; the events still load


def test_netcdf_hdf5_hang_is_refused_in_bounded_time(tmp_path):
    # The alarm cannot interrupt a loop inside HDF5, so the file is read first in a child process
    # under a time limit. Whether this HDF5 loops on the file is checked here, not assumed: a later
    # HDF5 may read it and fail cleanly, and then the refusal must say so instead.
    path = tmp_path / "case166.nc"
    shutil.copyfile(HDF5_LOOP, path)
    hangs = hdf5_hangs()
    started = time.perf_counter()
    outcome, detail = harness.run_isolated("netcdf", path, timeout_s=6.0, kill_after_s=20.0)
    assert outcome == "error", detail
    assert str(path) in detail
    if hangs:
        assert "did not finish reading it in 3 s" in detail
    else:
        assert "cannot be read as netCDF (" in detail
    assert time.perf_counter() - started < 15


def test_netcdf_probe_time_limit_refuses_and_names_the_file(tmp_path, monkeypatch, seeds):
    # A limit no new child can meet (starting Python alone takes longer) exercises the timeout path
    # on any HDF5: the probe is killed and the file refused, naming it and the limit.
    from dlexplore import hdf5_probe, store

    hdf5_probe.forget_passed()  # these bytes may have passed in an earlier test
    hdf5_probe.close_worker()  # a child kept from an earlier probe might read this small file in time
    path = tmp_path / "sound.nc"
    shutil.copyfile(seeds["netcdf"][0], path)
    monkeypatch.setenv("DLEXPLORE_HDF5_PROBE_SECONDS", "0.001")
    limit = 0.001 + path.stat().st_size / 10e6
    expected = re.escape(f"did not finish reading it in {limit:.2g} s")
    with pytest.raises(DlexploreError, match=expected) as info:
        store.open_netcdf(path)
    assert str(path) in str(info.value)
    monkeypatch.setenv("DLEXPLORE_HDF5_PROBE_SECONDS", "x")
    with pytest.raises(DlexploreError, match="DLEXPLORE_HDF5_PROBE_SECONDS='x' is not a number"):
        store.open_netcdf(path)


def test_netcdf_probe_is_not_repeated_for_the_same_bytes(tmp_path, monkeypatch, seeds):
    from dlexplore import hdf5_probe, store

    hdf5_probe.forget_passed()
    path = tmp_path / "sound.nc"
    shutil.copyfile(seeds["netcdf"][0], path)
    store.open_netcdf(path)  # probed once, and passed
    monkeypatch.setenv("DLEXPLORE_HDF5_PROBE_SECONDS", "0.001")  # no probe could finish now
    assert len(store.open_netcdf(path).events) > 0  # the same bytes are not probed again
    copy = tmp_path / "renamed.nc"
    shutil.copyfile(path, copy)
    assert len(store.open_netcdf(copy).events) > 0  # nor under another name
    # Other bytes under the same name (the file HDF5 loops on) are probed again, and refused.
    shutil.copyfile(HDF5_LOOP, path)
    with pytest.raises(DlexploreError, match="did not finish reading it in"):
        store.open_netcdf(path)


def test_netcdf_store_refuses_the_same_file(tmp_path, monkeypatch, seeds):
    from dlexplore import store

    path = tmp_path / "case166.nc"
    shutil.copyfile(HDF5_LOOP, path)
    hangs = hdf5_hangs()
    monkeypatch.setenv("DLEXPLORE_HDF5_PROBE_SECONDS", "2")
    expected = "did not finish reading it in 2 s" if hangs else "cannot be read as netCDF \\("
    with pytest.raises(DlexploreError, match=expected):
        store.open_netcdf(path)
    # A sound file still reads, within the default limit (2 s is too short for the probe's child
    # process to start and import h5py on a loaded 2-core machine), and the input is not touched.
    monkeypatch.delenv("DLEXPLORE_HDF5_PROBE_SECONDS")
    sound = seeds["netcdf"][0]
    before = sound.read_bytes()
    assert len(store.open_netcdf(sound).events) > 0
    assert sound.read_bytes() == before


def test_netcdf_probe_reports_why_a_truncated_file_fails(tmp_path):
    seeds = harness.seed_files(tmp_path)
    path = tmp_path / "half.nc"
    path.write_bytes(seeds["netcdf"][0].read_bytes()[:20_000])
    message = _expect_error("netcdf", path, "cannot be read as netCDF")
    assert "OSError" in message or "Unable" in message or "truncated" in message


def test_horovod_tensor_shape_too_large_for_a_float(tmp_path):
    text = (TRACES / "horovod" / "timeline.json").read_text()
    path = tmp_path / "timeline.json"
    path.write_text(text.replace('"shape": "[10, 64]"', '"shape": "[1' + "0" * 400 + ', 64]"', 1))
    _expect_error("horovod", path, "too large")
