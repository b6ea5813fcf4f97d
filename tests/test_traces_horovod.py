"""The Horovod timeline reader (:mod:`dlexplore.traces.horovod`).

Test data (tests/data/traces/horovod/, README.txt there says exactly how each file was made):

* ``timeline.json``, ``timeline-cycles.json.gz``, ``timeline-midrun.json``, ``timeline-killed.json``:
  written by Horovod 0.28.1 itself (built from the PyPI sdist, Gloo, CPU, torch 2.13.0+cpu), a
  2-process ``horovodrun --gloo`` run of ``train_tiny.py``. The numbers checked below were read off
  the files' own events (``ts`` in µs).
* ``timeline-old-writer.json``: written by ``make_old_writer_timeline.py``, a line-by-line port of
  ``TimelineWriter::DoWriteEvent``/``DoWriteMarker`` in horovod/common/timeline.cc before pull
  request #2215 (v0.20.1): ``[`` then ``{...},`` lines and no closing ``]``. Its numbers are in the
  script and were worked out by hand.

Cut and corrupt variants are made here from these files.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.traces import detect_format, load_trace
from dlexplore.traces.horovod import fused_operations, read

DATA = Path(__file__).parent / "data" / "traces" / "horovod"
REAL = DATA / "timeline.json"
CYCLES = DATA / "timeline-cycles.json.gz"
MIDRUN = DATA / "timeline-midrun.json"
KILLED = DATA / "timeline-killed.json"
OLD = DATA / "timeline-old-writer.json"

T0_US = 678417958000  # first timestamp of the old-writer file, µs
KERNEL = "HorovodAllreduce_gradients_dense_MatMul_grad_MatMul_1_0"
BIAS = "HorovodAllreduce_gradients_dense_BiasAdd_grad_BiasAddGrad_0"
BCAST = "HorovodBroadcast_global_step_0"


def us(seconds):
    """Seconds -> whole µs (the timeline's unit), for exact comparisons."""
    return np.round(np.asarray(seconds, dtype=float) * 1e6).astype(np.int64)


def counts(column):
    """Occurrences of each value present (a categorical's value_counts also lists absent ones)."""
    return column.astype(str).value_counts().to_dict()


def load_quietly(path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        return load_trace(path, **options)


# -- the file that follows the old writer, checked by hand ---------------------------------------------


def test_old_writer_counts_categories_and_world_size():
    trace = load_quietly(OLD)
    events = trace.events
    assert trace.format == "horovod" and trace.world_size == 2
    assert list(trace.ranks) == [0]
    # 7 markers; broadcast: negotiation, 2 ticks, op, MPI_BCAST; step 0 per gradient: negotiation,
    # 2 ticks, op, WAIT_FOR_DATA, 2 memcpy, NCCL; step 1 per gradient: negotiation, op, QUEUE, 2 memcpy,
    # NCCL -> 7 + 5 + 2 * 8 + 2 * 6 rows.
    assert len(events) == 40
    assert counts(events["category"]) == {"annotation": 18, "other": 9, "memcpy": 8, "communication": 5}
    assert trace.meta["files"][0]["terminated"] is False
    assert trace.meta["files"][0]["start_time_since_epoch"] is None  # that writer wrote none


def test_old_writer_durations_bytes_and_collectives():
    events = load_quietly(OLD).events
    comm = events[events["category"] == "communication"]
    assert counts(comm["collective"]) == {"allreduce": 4, "broadcast": 1}
    nccl = comm[comm["name"] == "NCCL_ALLREDUCE"]
    assert list(us(nccl["start"]) - T0_US) == [15180, 15181, 25120, 25121]
    assert list(us(nccl["duration"])) == [500, 500, 400, 400]
    assert list(nccl["bytes"]) == [784 * 10 * 4, 10 * 4] * 2  # float32 [784, 10] and [10]
    assert set(nccl["fusion_bytes"]) == {31400.0}
    bcast = comm[comm["name"] == "MPI_BCAST"].iloc[0]
    assert us(bcast["duration"]) == 200 and bcast["bytes"] == 8  # int64 scalar
    negotiations = events[events["name"] == "NEGOTIATE_ALLREDUCE"]
    assert list(us(negotiations["duration"])) == [800, 780, 4905, 4905]
    assert negotiations["category"].eq("other").all() and negotiations["bytes"].isna().all()
    ops = events[events["name"] == "ALLREDUCE"]
    assert ops["category"].eq("annotation").all()
    assert list(us(ops["duration"])) == [730, 730, 570, 570]
    memcpy = events[events["category"] == "memcpy"]
    assert list(us(memcpy["duration"])) == [40] * 8
    waits = events[events["name"].isin(["WAIT_FOR_DATA", "QUEUE"])]
    assert list(us(waits["duration"])) == [100, 100, 40, 40] and waits["bytes"].isna().all()
    # seconds on the writer's steady clock
    assert events["start"].iloc[0] == pytest.approx(T0_US * 1e-6, abs=1e-7)


def test_old_writer_steps_ticks_and_cycles():
    events = load_quietly(OLD).events
    # the two gradients are reduced twice: step 0 begins at the first one's negotiation (10100 µs),
    # step 1 at 20100 µs; the broadcast and markers before 10100 µs belong to no step.
    by_start = dict(zip(us(events["start"]) - T0_US, events["step"], strict=False))
    assert by_start[5012] is pd.NA and by_start[10100] == 0 and by_start[20000] == 0
    assert by_start[20100] == 1 and by_start[30000] == 1
    ticks = events[events["ready_rank"].notna()]
    assert list(ticks["name"]) == ["0", "1", "1", "1", "0", "0"]
    assert list(ticks["ready_rank"]) == [0, 1, 1, 1, 0, 0]
    assert us(ticks["duration"]).sum() == 0
    nccl = events[events["name"] == "NCCL_ALLREDUCE"]
    assert list(nccl["cycle"]) == [3, 3, 5, 5]  # markers every 5000 µs from 0
    assert (events["name"] == "CYCLE_START").sum() == 7
    assert set(events.loc[events["name"] == "CYCLE_START", "stream"]) == {"cycles"}
    assert set(events["stream"]) == {KERNEL, BIAS, BCAST, "cycles"}
    assert set(events["op"]) == {"allreduce", "broadcast", ""}


def test_fused_operations_one_row_per_message():
    trace = load_quietly(OLD)
    fused = fused_operations(trace.events)
    nccl = fused[fused["name"] == "NCCL_ALLREDUCE"]
    assert list(nccl["tensors"]) == [2, 2]
    assert list(nccl["bytes"]) == [31400.0, 31400.0]
    assert list(us(nccl["duration"])) == [501, 401]  # from the first tensor's B to the last one's E
    assert list(nccl["stream"]) == [KERNEL, KERNEL]
    assert len(fused) == len(trace.events) - 2 * 3  # per step, 3 of 6 duplicate rows go
    assert trace.events is not fused and len(trace.events) == 40  # the input is unchanged


# -- real files written by Horovod 0.28.1 ------------------------------------------------------------


def test_real_run_counts():
    trace = load_quietly(REAL)
    events = trace.events
    assert trace.world_size == 2 and len(events) == 129  # 109 B/E ranges + 20 rank-ready ticks
    assert counts(events["category"]) == {"annotation": 45, "memcpy": 30, "other": 29, "communication": 25}
    comm = events[events["category"] == "communication"]
    assert counts(comm["name"]) == {"GLOO_ALLREDUCE": 20, "GLOO_BCAST": 4, "GLOO_ALLGATHER": 1}
    assert counts(comm["collective"]) == {"allreduce": 20, "broadcast": 4, "allgather": 1}
    assert set(events["stream"]) == {
        "broadcast.0.bias",
        "broadcast.0.weight",
        "broadcast.2.bias",
        "broadcast.2.weight",
        "allreduce.0.bias",
        "allreduce.0.weight",
        "allreduce.2.bias",
        "allreduce.2.weight",
        "allreduce.avg_loss",
        "allgather.ranks",
    }
    meta = trace.meta["files"][0]
    assert meta["terminated"] and meta["tensors"] == 10
    assert meta["start_time_since_epoch"] == pytest.approx(1795297140.323029)


def test_real_run_durations_and_sizes_read_off_the_file():
    events = load_quietly(REAL).events
    first = events[(events["stream"] == "allreduce.2.bias") & (events["name"] == "GLOO_ALLREDUCE")].iloc[0]
    assert us(first["start"]) == 987921 and us(first["duration"]) == 988029 - 987921
    assert first["bytes"] == 40  # float32 [10]
    fused = events[(events["stream"] == "allreduce.2.weight") & (events["name"] == "GLOO_ALLREDUCE")]
    assert us(fused["duration"].iloc[0]) == 989184 - 989049
    assert fused["fusion_bytes"].iloc[0] == (10 * 64 + 64 + 64 * 32) * 4  # three tensors fused in step 0
    assert set(fused["fusion_bytes"].iloc[1:]) == {(10 + 10 * 64 + 64 + 64 * 32) * 4}  # all four after
    late = events[(events["stream"] == "broadcast.0.bias") & (events["name"] == "NEGOTIATE_BROADCAST")]
    assert us(late["duration"].iloc[0]) == 983691 - 857285  # rank 1 asked 126 ms after rank 0
    gather = events[events["name"] == "GLOO_ALLGATHER"].iloc[0]
    assert gather["bytes"] == 2 * 8 and gather["dtype"] == "int64"
    assert events.loc[events["name"] == "GLOO_BCAST", "bytes"].isna().all()  # no args on broadcasts


def test_tensor_indices_beyond_32_bits_keep_their_sizes(tmp_path):
    """Tensor indices (pids) 2**32 apart: the sizes still go to the right tensor (a key of
    pid x 2**32 wraps in 64 bits, and tensor 6 moved to 5 + 2**32 would take tensor 5's sizes)."""

    def moved(match: re.Match) -> str:
        pid = int(match.group(1))
        return f'"pid": {pid if pid % 2 else pid - 1 + 2**32 if pid else 2**33}'

    text = re.sub(r'"pid": (\d+)', moved, REAL.read_text())
    shifted = tmp_path / "timeline.json"
    shifted.write_text(text)
    events = load_quietly(shifted).events
    first = events[(events["stream"] == "allreduce.2.bias") & (events["name"] == "GLOO_ALLREDUCE")].iloc[0]
    assert first["bytes"] == 40  # float32 [10], as in the file with small indices
    gather = events[events["name"] == "GLOO_ALLGATHER"].iloc[0]
    assert gather["bytes"] == 2 * 8 and gather["dtype"] == "int64"
    np.testing.assert_array_equal(events["bytes"].to_numpy(), load_quietly(REAL).events["bytes"].to_numpy())


def test_real_run_pairs_like_chrome():
    """Every B/E pair against a plain per-pid stack over the raw events."""
    raw = json.loads(REAL.read_text())
    names = {e["pid"]: e["args"]["name"] for e in raw if e["ph"] == "M" and "name" in e.get("args", {})}
    stacks: dict[int, list] = {}
    pairs = []
    for e in raw:
        if e["ph"] == "B":
            stacks.setdefault(e["pid"], []).append(e)
        elif e["ph"] == "E":
            b = stacks[e["pid"]].pop()
            pairs.append((names[e["pid"]], b["name"], b["ts"], e["ts"] - b["ts"]))
    events = load_quietly(REAL).events
    ranges = events[events["ready_rank"].isna()]
    got = sorted(
        zip(
            ranges["stream"].astype(str),
            ranges["name"].astype(str),
            us(ranges["start"]),
            us(ranges["duration"]),
            strict=True,
        )
    )
    assert got == sorted(pairs)


def test_real_run_steps():
    events = load_quietly(REAL).events
    grads = events[events["name"] == "ALLREDUCE"]
    assert grads.groupby("step").size().to_dict() == {0: 5, 1: 5, 2: 5, 3: 5}
    assert events.loc[events["op"] == "broadcast", "step"].isna().all()  # before training
    assert events.loc[events["name"] == "GLOO_ALLGATHER", "step"].tolist() == [3]
    assert load_quietly(REAL, steps=None).events["step"].isna().all()


def test_gzip_with_cycle_markers_and_lost_last_records():
    with pytest.warns(UserWarning, match=r"2 range\(s\) still open .*allgather\.ranks"):
        trace = load_trace(CYCLES)
    events = trace.events
    with gzip.open(CYCLES, "rt") as handle:
        markers = handle.read().count('"ph": "i"')
    assert markers == 778 and (events["name"] == "CYCLE_START").sum() == markers
    assert events["cycle"].max() == markers - 1
    assert (events["name"] == "GLOO_ALLGATHER").sum() == 0  # its E never reached the file
    assert trace.meta["files"][0]["open_ranges_dropped"] == 2


@pytest.mark.parametrize("path, rows", [(MIDRUN, 79), (KILLED, 102)])
def test_copies_of_a_running_job(path, rows):
    with pytest.warns(UserWarning, match=r"1 range\(s\) still open .*allreduce\.avg_loss \(ALLREDUCE\)"):
        trace = load_trace(path)
    assert len(trace.events) == rows
    assert trace.meta["files"][0]["terminated"] is True  # v0.20.1+ keeps the JSON closed
    # the open operation's transfer had ended, so it stays; the operation does not
    last = trace.events[trace.events["stream"] == "allreduce.avg_loss"].iloc[-1]
    assert last["name"] == "GLOO_ALLREDUCE" and np.isnan(last["bytes"])


# -- unterminated arrays ----------------------------------------------------------------------------


def columns_of(events):
    return list(
        zip(
            events["stream"].astype(str),
            events["name"].astype(str),
            us(events["start"]),
            us(events["duration"]),
            strict=True,
        )
    )


def test_array_without_closing_bracket(tmp_path):
    data = REAL.read_bytes()
    assert data.endswith(b"}]")
    path = tmp_path / "open.json"
    path.write_bytes(data[:-1])
    trace = load_quietly(path)
    assert columns_of(trace.events) == columns_of(load_quietly(REAL).events)
    assert trace.meta["files"][0]["terminated"] is False


def test_cut_after_a_new_tensors_metadata_lines(tmp_path):
    """On disk right after Horovod registers allreduce.avg_loss: ends with "},\\n", no "]"."""
    data = REAL.read_bytes()
    line = b'{"name": "process_sort_index", "ph": "M", "pid": 9, "args": {"sort_index": 9}},\n'
    path = tmp_path / "cut.json"
    path.write_bytes(data[: data.index(line) + len(line)])
    assert detect_format(path) == "horovod"
    events = load_quietly(path).events
    full = load_quietly(REAL).events
    assert columns_of(events) == columns_of(full[us(full["start"]) < 989996])
    assert "allreduce.avg_loss" not in set(events["stream"])


def test_cut_inside_an_event_drops_it_naming_the_offset(tmp_path):
    data = REAL.read_bytes()
    where = data.index(b'{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 989996')
    path = tmp_path / "cut.json"
    path.write_bytes(data[: where + 30])
    with pytest.warns(UserWarning, match=rf"last event \(#\d+, byte offset {where}\) is cut off"):
        trace = load_trace(path)
    assert trace.meta["files"][0]["partial_event_at"] == where
    full = load_quietly(REAL).events
    assert columns_of(trace.events) == columns_of(full[us(full["start"]) < 989996])


def test_old_writer_cut_inside_an_event(tmp_path):
    data = OLD.read_bytes()
    where = data.index(b'{"ph": "B", "name": "NCCL_ALLREDUCE", "ts": 678417983120')
    path = tmp_path / "old-cut.json"
    path.write_bytes(data[: where + 25])
    with pytest.warns(UserWarning) as caught:
        trace = load_trace(path)
    messages = " | ".join(str(w.message) for w in caught)
    assert f"byte offset {where}" in messages
    assert "2 range(s) still open" in messages  # step 1's two ALLREDUCE operations
    names = trace.events["name"].astype(str)
    assert (names == "NCCL_ALLREDUCE").sum() == 2  # step 0 only


# -- bad input ---------------------------------------------------------------------------------------


def event_index(raw_events, **match):
    return next(i for i, e in enumerate(raw_events) if all(e.get(k) == v for k, v in match.items()))


def test_corrupt_event_in_the_middle(tmp_path):
    data = REAL.read_bytes()
    good = b'{"ph": "E", "ts": 988029, "pid": 5}'
    where = data.index(good)
    index = event_index(json.loads(data), ph="E", ts=988029, pid=5)
    path = tmp_path / "corrupt.json"
    path.write_bytes(data.replace(good, b'{"ph": "E", "ts": 988029 "pid": 5}'))
    with pytest.raises(InputFileError) as err:
        load_trace(path)
    message = str(err.value)
    assert str(path) in message and f"event #{index} at byte offset {where}" in message
    assert "expected a trace event object" in message


def test_tensor_name_with_a_quote(tmp_path):
    """Horovod writes names unescaped; a '"' in one breaks the file at its metadata event."""
    data = REAL.read_bytes().replace(b'"allreduce.avg_loss"', b'"allreduce.avg"loss"')
    path = tmp_path / "quote.json"
    path.write_bytes(data)
    where = data.index(b'{"name": "process_name", "ph": "M", "pid": 9')
    with pytest.raises(InputFileError, match=rf"byte offset {where}.*unescaped"):
        load_trace(path)


def test_missing_timestamp_names_the_event(tmp_path):
    data = REAL.read_bytes()
    good = b'{"ph": "B", "name": "ALLREDUCE", "ts": 987918, "pid": 5}'
    where = data.index(good)
    index = event_index(json.loads(data), ph="B", ts=987918)
    path = tmp_path / "no-ts.json"
    path.write_bytes(data.replace(good, b'{"ph": "B", "name": "ALLREDUCE", "pid": 5}'))
    with pytest.raises(InputFileError, match=rf"event #{index} at byte offset {where}: 'ts' is None"):
        load_trace(path)


@pytest.mark.parametrize(
    "bad, expected",
    [
        (b'{"ph": "B", "name": 7, "ts": 987918, "pid": 5}', r"'name' is 7"),
        (b'{"name": "ALLREDUCE", "ts": 987918, "pid": 5}', r"'ph' is None"),
        (b'{"ph": "X", "name": "1", "ts": 987918, "pid": 5, "dur": -3}', r"'dur' is -3"),
        (b'{"ph": "B", "name": "ALLREDUCE", "ts": 987918, "pid": "5"}', r"'pid' is '5'"),
        (b'{"ph": "B", "name": "ALLREDUCE", "ts": 990000, "pid": 5}', r"before its range began"),
    ],
)
def test_bad_fields(tmp_path, bad, expected):
    data = REAL.read_bytes()
    path = tmp_path / "bad.json"
    path.write_bytes(data.replace(b'{"ph": "B", "name": "ALLREDUCE", "ts": 987918, "pid": 5}', bad))
    with pytest.raises(InputFileError, match=expected):
        load_trace(path)


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", r"is empty"),
        (b"[\n", r"holds no events .*only '\['"),
        (
            b'[\n{"name": "process_name", "ph": "M", "pid": 0, '
            b'"args": {"start_time_since_epoch_in_micros":1}},\n',
            r"only metadata",
        ),
        (b'{"traceEvents": []}', r"expected '\['"),
        (b"[\n\xff\xfe", r"byte offset 2: not UTF-8"),
        (b'[{"ph": "i", "name": "CYCLE_START", "ts": 1, "s": "g"}] trailing', r"after the array's closing"),
        (b'[{"ph": "i", "name": "CYCLE_START", "ts": 1, "s": "g"} {"ph": "i"}]', r"expected ',' or ']'"),
        (b"[1, 2]", r"event #0 .*is int; expected a trace event object"),
    ],
)
def test_not_a_timeline(tmp_path, content, expected):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InputFileError, match=expected) as err:
        load_trace(path, format="horovod")
    assert str(path) in str(err.value)


def test_bad_options():
    with pytest.raises(DlexploreError, match="steps="):
        read([REAL], steps="cycles")
    with pytest.raises(DlexploreError, match="2 rank"):
        read([REAL], rank=[0, 1])


# -- detection, several files --------------------------------------------------------------------------


@pytest.mark.parametrize("path", [REAL, CYCLES, MIDRUN, KILLED, OLD])
def test_detected_as_horovod(path):
    assert detect_format(path) == "horovod"


def test_several_files_are_ranks(tmp_path):
    shutil.copy(REAL, tmp_path / "timeline-3.json")
    shutil.copy(OLD, tmp_path / "timeline-5.json")
    with pytest.warns(UserWarning, match=r"timeline-3\.json -> 3, timeline-5\.json -> 5"):
        trace = load_trace(tmp_path)
    assert list(trace.ranks) == [3, 5] and len(trace.events) == 129 + 40
    assert trace.world_size == 2
    fusions = trace.events.groupby("rank")["fusion"].agg(["min", "max"])
    assert fusions.loc[5, "min"] > fusions.loc[3, "max"]  # fusion ids stay distinct across files
    trace = load_quietly([tmp_path / "timeline-3.json", tmp_path / "timeline-5.json"], rank=[0, 1])
    assert list(trace.ranks) == [0, 1]


def test_several_files_without_numbers_take_their_order(tmp_path):
    shutil.copy(REAL, tmp_path / "a.json")
    shutil.copy(OLD, tmp_path / "b.json")
    with pytest.warns(UserWarning, match=r"order of the files: a\.json -> 0, b\.json -> 1"):
        trace = load_trace(tmp_path)
    assert list(trace.ranks) == [0, 1]


def test_schema_and_source():
    trace = load_quietly(REAL)
    events = trace.events
    assert list(events.columns[:9]) == [
        "rank",
        "stream",
        "name",
        "category",
        "start",
        "duration",
        "bytes",
        "collective",
        "step",
    ]
    assert str(events["step"].dtype) == "Int64" and str(events["fusion"].dtype) == "Int64"
    assert (events["duration"] >= 0).all()
    assert events["start"].is_monotonic_increasing
    assert re.match(r"measured: horovod trace timeline\.json", events.attrs["source"])


# -- large files are parsed a chunk at a time -----------------------------------------------------------


def test_chunks_give_the_same_table(monkeypatch):
    from dlexplore.traces import horovod

    whole = load_quietly(REAL).events
    monkeypatch.setattr(horovod, "_CHUNK", 300)  # characters: about 5 events a chunk
    chunked = load_quietly(REAL).events
    assert columns_of(chunked) == columns_of(whole)
    assert chunked["fusion"].tolist() == whole["fusion"].tolist()
    assert chunked["step"].tolist() == whole["step"].tolist()


def test_chunks_name_the_corrupt_event_by_its_place_in_the_file(monkeypatch, tmp_path):
    from dlexplore.traces import horovod

    data = REAL.read_bytes()
    good = b'{"ph": "E", "ts": 1000673, "pid": 8, "args": {"dtype": "float32", "shape": "[64, 32]"}}'
    where = data.index(good)
    index = event_index(json.loads(data), ph="E", ts=1000673, pid=8)
    path = tmp_path / "late.json"
    path.write_bytes(data.replace(good, good.replace(b"[64, 32]", b"[64, 3x]")))
    monkeypatch.setattr(horovod, "_CHUNK", 300)
    with pytest.raises(InputFileError, match=rf"event #{index} at byte offset {where}: shape '\[64, 3x\]'"):
        load_trace(path)
    path.write_bytes(data[:-1].replace(good, good[:-1]))  # and a JSON error, unterminated array
    with pytest.raises(InputFileError, match=rf"event #{index} at byte offset {where}: not valid JSON"):
        load_trace(path)


def test_byte_order_mark_and_gzip(tmp_path):
    path = tmp_path / "bom.json.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + OLD.read_bytes()))
    assert detect_format(path) == "horovod"
    assert len(load_quietly(path).events) == 40


def test_a_timeline_rewritten_with_lasting_ready_ticks():
    """SageMaker Debugger's rewrite of a Horovod timeline (README.txt) gives each rank-ready tick a
    duration of about 812,355 s where Horovod writes 0: read as instants, with a warning, the step
    spans the file's events (8,440,608 to 9,296,331 us) instead of nine days."""
    with pytest.warns(
        UserWarning, match=r"19 rank-ready tick\(s\) have a duration \(the longest 8\.12e\+05 s\)"
    ):
        trace = load_trace(DATA / "smdebug-rewritten-timeline.json")
    ticks = trace.events[trace.events["ready_rank"] >= 0]
    assert len(ticks) == 19 and (ticks["duration"] == 0).all()
    step_time = float(trace.breakdown().step_time.max())
    assert step_time == pytest.approx((9_296_331 - 8_440_608) * 1e-6, abs=5e-6)


def test_a_cycle_marker_stamped_out_of_order_stays_out_of_the_step():
    """SageMaker Debugger's test timeline (README.txt): one CYCLE_START written between markers
    0.76 s apart carries a time 36.5 s later; left out of the steps, with a warning, the step spans
    the run's events, 77,575,718,041 to 77,576,573,892 us, instead of 37 s."""
    with pytest.warns(UserWarning, match=r"1 CYCLE_START marker\(s\) stamped later .* 77613\.073301 s"):
        trace = load_trace(DATA / "smdebug-timeline-small.json")
    markers = trace.events[trace.events["name"] == "CYCLE_START"]
    assert len(markers) == 11 and markers["step"].isna().sum() == 2  # the first, before any step, too
    step_time = float(trace.breakdown().step_time.max())
    assert step_time == pytest.approx((77_576_573_892 - 77_575_718_041) * 1e-6, abs=2e-6)
