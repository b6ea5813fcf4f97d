"""The PyTorch profiler reader (dlexplore.traces.pytorch) on real and Kineto-format traces.

Data (tests/data/traces/pytorch/, see README.txt there):

* gloo-mlp-2rank/: REAL traces written by torch 2.13.0+cpu's profiler, a 2-process DDP run over
  gloo of Linear(16, 32), ReLU, Linear(32, 256) with 16 KiB buckets, steps 2-4 recorded
  (make_gloo_traces.py). The gradient buckets, by hand: 256*32 + 256 = 8,448 floats = 33,792 bytes
  and 32*16 + 32 = 544 floats = 2,176 bytes, one allreduce of each per rank and step.
* nccl-mlp-2rank/: the same model on GPUs with NCCL, written by hand (make_nccl_traces.py) in the
  layout of pytorch/kineto libkineto/src/output_json.cpp (ChromeTraceLogger) and CuptiActivity.cpp,
  since no GPU runs here; the sizes by hand are the same buckets, plus copies of 8*16*4 = 512 and
  8*256*4 = 8,192 bytes and a 32-byte memset per step.

Bad inputs are derived from these files (truncated, edited) in a temporary folder.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlexplore.errors import DlexploreError
from dlexplore.traces import load_trace
from dlexplore.traces.pytorch import rank_from_filename, read

DATA = Path(__file__).parent / "data" / "traces" / "pytorch"
GLOO = DATA / "gloo-mlp-2rank"
NCCL = DATA / "nccl-mlp-2rank"
BUCKET_BYTES = {33_792, 2_176}  # 8,448 and 544 float32 gradients


@pytest.fixture(scope="module")
def gloo():
    return load_trace(GLOO)


@pytest.fixture(scope="module")
def nccl():
    return load_trace(NCCL)


def text_of(path: Path) -> str:
    return gzip.open(path, "rt", encoding="utf-8").read()


def write(path: Path, text: str, compress: bool | None = None) -> Path:
    if compress if compress is not None else path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# -- the real gloo traces ---------------------------------------------------------------------


def test_gloo_ranks_world_size_and_metadata(gloo):
    assert gloo.format == "pytorch"
    assert gloo.world_size == 2
    assert list(gloo.ranks) == [0, 1]
    assert [Path(f).name for f in gloo.files] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert gloo.meta["backend"] == "gloo"
    assert gloo.meta["device"] == "cpu"
    # baseTimeNanoseconds 1790857026000000000 (both files) plus the whole number of 2**30 us before
    # the set's first event (rank 1's, "ts": 4439954776597.228): 4135 * 2**30 = 4439913545728 us
    assert gloo.meta["epoch_ns"] == 1790857026000000000 + 4135 * 2**30 * 1000
    info = gloo.meta["ranks"][1]["distributedInfo"]
    assert info["rank"] == 1 and info["world_size"] == 2
    assert gloo.meta["ranks"][0]["events_read"] == 648
    assert gloo.events.attrs["source"].startswith("measured: pytorch trace rank0.pt.trace.json.gz")


def test_gloo_rows_are_the_complete_events(gloo):
    # 598 "X" events per file, less Kineto's one "Trace" span.
    assert (gloo.events.groupby("rank").size() == 597).all()
    assert "PyTorch Profiler (0)" not in set(gloo.events["name"])


def test_gloo_steps_and_times(gloo):
    ev = gloo.events
    steps = ev[ev.category == "step"].sort_values(["rank", "start"])
    assert steps["name"].tolist() == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"] * 2
    assert steps["step"].tolist() == [2, 3, 4, 2, 3, 4]
    first = steps.iloc[0]  # rank 0: "ts": 4439954778186.109, "dur": 1924.971 (µs) in the file
    assert first["start"] == pytest.approx((4439954778186.109 - 4135 * 2**30) * 1e-6, abs=1e-12)
    assert first["duration"] == pytest.approx(1924.971e-6, abs=1e-12)
    # Every event of these traces happens inside one of the three steps.
    assert ev["step"].notna().all()
    assert sorted(ev["step"].unique().tolist()) == [2, 3, 4]


def test_gloo_categories(gloo):
    ev = gloo.events
    by = ev.groupby(["rank", "category"], observed=True).size().unstack()
    # CPU-only trace: operators are compute; 3 DataLoader fetches, 3 steps per rank.
    assert by.loc[0, "data"] == 3 and by.loc[0, "step"] == 3
    assert by.loc[0, "compute"] == 570
    assert set(ev.loc[ev.name == "aten::addmm", "category"]) == {"compute"}
    assert set(ev.loc[ev.name.str.startswith("enumerate(DataLoader)"), "category"]) == {"data"}
    assert set(ev.loc[ev.name == "Optimizer.step#SGD.step", "category"]) == {"annotation"}
    # c10d::allreduce_ is the enqueue on the training thread: communication, but not the operation.
    c10d = ev[ev.name == "c10d::allreduce_"]
    assert len(c10d) == 12 and set(c10d.category) == {"communication"}
    assert set(c10d.collective) == {""} and c10d["bytes"].isna().all()


def test_gloo_allreduce_sizes_are_the_gradient_buckets(gloo):
    ev = gloo.events
    ops = ev[ev.collective != ""]
    assert set(ops.name) == {"gloo:all_reduce"}
    assert set(ops.collective) == {"allreduce"}
    assert set(ops.category) == {"communication"}
    assert len(ops) == 12  # 2 ranks x 3 steps x 2 buckets
    per_step = ops.groupby(["rank", "step"])["bytes"].apply(sorted)
    assert all(sizes == [2_176.0, 33_792.0] for sizes in per_step)
    assert set(ops.dtype) == {"float"}
    # The work runs on gloo's own threads, not on the training thread.
    threads = gloo.meta["ranks"][0]["threads"]
    assert all("pt_gloo_runloop" in threads[s] for s in ops[ops["rank"] == 0].stream)
    assert set(ops.stream.str.split(":").str[0]) == {"cpu"}


def test_gloo_schema(gloo):
    ev = gloo.events
    assert list(ev.columns[:9]) == [
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
    assert str(ev["rank"].dtype) == "int32" and str(ev["step"].dtype) == "Int64"
    assert (ev["duration"] >= 0).all()


# -- the GPU + NCCL traces in Kineto's format -------------------------------------------------------


def test_nccl_kernels_communication_with_bytes_from_record_param_comms(nccl):
    ev = nccl.events
    assert nccl.meta["device"] == "cuda" and nccl.meta["backend"] == "nccl"
    ops = ev[ev.collective != ""]
    assert set(ops.name.str.split("(").str[0]) == {"ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
    assert set(ops.category) == {"communication"} and set(ops.collective) == {"allreduce"}
    assert len(ops) == 8  # 2 ranks x 2 steps x 2 buckets
    assert set(ops["bytes"]) == BUCKET_BYTES
    assert set(ops.stream) == {"cuda:0:24", "cuda:1:24"}
    assert set(ops.group_size) == {2} and set(ops.process_group) == {"0"} and set(ops.dtype) == {"Float"}
    # Host-side rows are communication without being the operation.
    host = ev[
        ev.name.isin(["c10d::allreduce_", "record_param_comms", "nccl:all_reduce"])
        & ev.stream.str.startswith("cpu:")
    ]
    assert len(host) == 24 and set(host.category) == {"communication"} and set(host.collective) == {""}
    assert set(ev.loc[ev.name == "nccl:all_reduce", "stream"].str[:4]) == {"cpu:", "cuda"}
    gpu_note = ev[(ev.name == "nccl:all_reduce") & ev.stream.str.startswith("cuda")]
    assert set(gpu_note.category) == {"annotation"}


def test_nccl_categories(nccl):
    ev = nccl.events
    by = ev.groupby(["rank", "category"], observed=True).size().unstack()
    # Per step, by hand: 3 forward + 1 loss + 7 backward + 1 optimizer kernels; 15 cudaLaunch/Memcpy/
    # Memset calls plus 2 x (cudaStreamWaitEvent + cuLaunchKernelEx) for the buckets.
    assert by.loc[0, "compute"] == 2 * 12
    assert by.loc[0, "runtime"] == 2 * 19
    assert by.loc[0, "memcpy"] == 4 and by.loc[0, "memset"] == 2
    # In a GPU trace the host operators launch work: cpu, not compute.
    assert set(ev.loc[ev.name == "aten::addmm", "category"]) == {"cpu"}
    assert set(ev.loc[ev.category == "compute", "stream"].str[:5]) == {"cuda:"}


def test_nccl_memcpy_bytes(nccl):
    ev = nccl.events
    copies = ev[ev.category == "memcpy"].groupby(["rank", "step"])["bytes"].apply(sorted)
    assert all(sizes == [512.0, 8_192.0] for sizes in copies)
    assert set(ev.loc[ev.category == "memset", "bytes"]) == {32.0}


def test_nccl_steps_follow_the_launch(nccl):
    ev = nccl.events
    gpu = ev[ev.stream.str.startswith("cuda")]
    assert gpu["step"].notna().all()
    launches = ev[ev.category == "runtime"].set_index(["rank", "correlation"])["step"]
    for row in gpu[gpu.category != "annotation"].itertuples():
        assert row.step == launches.loc[(row.rank, row.correlation)]
    # The second step's kernels run after ProfilerStep#3 began on the host.
    begin3 = ev[(ev.name == "ProfilerStep#3") & (ev["rank"] == 0)]["start"].iloc[0]
    assert (gpu[(gpu["rank"] == 0) & (gpu.step == 3)]["start"] > begin3).all()
    # Per rank and step: 12 kernels, 2 copies, 1 memset, 2 NCCL kernels and their 2 annotations.
    assert (gpu.groupby("rank").step.value_counts() == 19).all()


def _strip_collective_args(text: str, keep_external_id: bool) -> str:
    """The NCCL kernels without Kineto's copy of the record_param_comms arguments."""
    doc = json.loads(text)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel"):
            for key in (
                "Collective name",
                "In msg nelems",
                "Out msg nelems",
                "Group size",
                "dtype",
                "In split size",
                "Out split size",
                "Process Group Name",
                "Process Group Description",
                "Process Group Ranks",
            ):
                del e["args"][key]
            if not keep_external_id:
                del e["args"]["External id"]
    return json.dumps(doc)


@pytest.mark.parametrize("keep_external_id", [True, False], ids=["by-external-id", "by-order"])
def test_nccl_kernel_bytes_without_kineto_copy(tmp_path, keep_external_id):
    for rank in (0, 1):
        name = f"rank{rank}.pt.trace.json.gz"
        write(tmp_path / name, _strip_collective_args(text_of(NCCL / name), keep_external_id))
    ops = load_trace(tmp_path).events
    ops = ops[ops.name.str.startswith("ncclDevKernel")]
    assert len(ops) == 8
    assert set(ops["bytes"]) == BUCKET_BYTES
    assert set(ops.collective) == {"allreduce"} and set(ops.group_size) == {2}
    first = ops[ops["rank"] == 0].sort_values("start")["bytes"].tolist()
    assert first == [33_792.0, 2_176.0, 33_792.0, 2_176.0]  # the buckets' order in backward


# -- where the rank comes from --------------------------------------------------------------------


def _without_distributed_info(text: str) -> str:
    cut = re.sub(r'\n\s*"distributedInfo": \{.*?\]\},', "", text, count=1)
    assert "distributedInfo" not in cut
    return cut


def test_rank_from_file_name_with_a_warning(tmp_path):
    for rank in (0, 1):
        write(
            tmp_path / f"worker_rank_{rank}.json",
            _without_distributed_info(text_of(GLOO / f"rank{rank}.pt.trace.json.gz")),
        )
    with pytest.warns(UserWarning) as caught:
        trace = load_trace(tmp_path)
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert re.search(r"worker_rank_1\.json: no distributedInfo.*rank 1 taken from the file name", messages[1])
    assert trace.world_size == 2 and list(trace.ranks) == [0, 1]
    assert trace.meta["backend"] is None


@pytest.mark.parametrize(
    "name, rank",
    [
        ("rank3.json", 3),
        ("rank_3.pt.trace.json.gz", 3),
        ("RANK-12.json", 12),
        ("job_rank_3.json", 3),
        ("rank-3.Jul_15_10_52_41.1074.pt.trace.json.gz", 3),
        # numbers that are not ranks: process ids, time stamps, hosts (issue 20: a process id
        # 1016005 once became rank 1016005)
        ("trace-5.json", None),
        ("host_7.pt.trace.json.gz", None),
        ("host_1016005.pt.trace.json", None),
        ("host_1234.1700000000123.pt.trace.json", None),
        ("worker0.1623143089861.pt.trace.json.gz", None),
        ("frank.json", None),
        ("ranks.json", None),
    ],
)
def test_rank_from_filename(name, rank):
    assert rank_from_filename(name) == rank


def test_single_file_without_rank_is_rank_zero(tmp_path):
    path = write(
        tmp_path / "profile.json", _without_distributed_info(text_of(GLOO / "rank1.pt.trace.json.gz"))
    )
    with pytest.warns(UserWarning, match="the rank is unknown.*shown as rank 0"):
        trace = load_trace(path)
    assert list(trace.ranks) == [0] and trace.world_size == 1
    assert trace.meta["rank_unknown"] == [0]


def test_one_rank_of_a_larger_job(tmp_path):
    trace = load_trace(GLOO / "rank1.pt.trace.json.gz")
    assert list(trace.ranks) == [1] and trace.world_size == 2


# -- .json and .json.gz, folders and globs ---------------------------------------------------------


def test_json_and_gzip_give_the_same_events(tmp_path, gloo):
    for rank in (0, 1):
        write(
            tmp_path / f"rank{rank}.pt.trace.json",
            text_of(GLOO / f"rank{rank}.pt.trace.json.gz"),
            compress=False,
        )
    plain = load_trace(tmp_path)
    pd.testing.assert_frame_equal(plain.events, gloo.events)


def test_glob_and_list(nccl):
    globbed = load_trace(str(NCCL / "rank*.pt.trace.json.gz"))
    listed = load_trace([NCCL / "rank1.pt.trace.json.gz", NCCL / "rank0.pt.trace.json.gz"])
    pd.testing.assert_frame_equal(globbed.events, nccl.events)
    pd.testing.assert_frame_equal(listed.events, nccl.events)


def test_small_chunks_give_the_same_events(gloo):
    # Chunks of 2,000 characters cut inside events and args all the time.
    small = read(sorted(GLOO.iterdir()), chunk_chars=2_000)
    pd.testing.assert_frame_equal(small.events, gloo.events)


def test_standard_library_parser_gives_the_same_events(monkeypatch, nccl):
    # Without msgspec (a platform without its wheels) the standard library parses the event chunks.
    import dlexplore.traces.kineto_decode as decode

    monkeypatch.setattr(decode, "PARSER", "json")
    trace = read(sorted(NCCL.iterdir()), chunk_chars=3_000)
    assert trace.meta["parser"] == "json"
    pd.testing.assert_frame_equal(trace.events, nccl.events)


def test_braces_inside_strings_and_a_bare_array(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": 'odd},{"ph": "X"} name',
            "pid": 1,
            "tid": 1,
            "ts": 10.0,
            "dur": 5.0,
            "args": {"note": "}, {", "nested": [{"a": 1}, {"b": 2}]},
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 11.0, "dur": 2.0},
    ]
    path = write(tmp_path / "rank0.json", json.dumps(events * 50))
    with pytest.warns(UserWarning):
        trace = read([path], chunk_chars=300)
    assert len(trace.events) == 100
    assert trace.events["name"].iloc[0] == 'odd},{"ph": "X"} name'
    assert set(trace.events.category) == {"annotation", "compute"}


# -- bad input: every error names the file and the place -------------------------------------------


def test_truncated_gzip(tmp_path):
    data = (GLOO / "rank0.pt.trace.json.gz").read_bytes()
    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        DlexploreError,
        match=r"rank0\.pt\.trace\.json\.gz \(byte \d+ of the decompressed JSON "
        r"text\): the gzip stream is truncated",
    ):
        read([path])


def test_truncated_json(tmp_path):
    text = text_of(GLOO / "rank0.pt.trace.json.gz")
    path = write(tmp_path / "rank0.pt.trace.json", text[: len(text) // 2], compress=False)
    with pytest.raises(
        DlexploreError,
        match=r"rank0\.pt\.trace\.json \(event \d+, byte \d+ of the file\): "
        r"invalid or truncated JSON",
    ):
        load_trace(path)


def test_truncated_after_the_events(tmp_path):
    text = text_of(GLOO / "rank0.pt.trace.json.gz")
    path = write(tmp_path / "rank0.json", text[: text.rindex('"traceName"')], compress=False)
    with pytest.raises(
        DlexploreError,
        match=r"rank0\.json \(byte \d+ of the file\): the JSON text ends after "
        r"the top-level object; expected a member name",
    ):
        read([path])


def test_not_a_trace(tmp_path):
    path = write(tmp_path / "config.json", json.dumps({"model": "mlp", "steps": 3}), compress=False)
    with pytest.raises(
        DlexploreError, match=r"config\.json.*without a traceEvents array \(members: model, steps\)"
    ):
        read([path])
    with pytest.raises(DlexploreError, match=r"config\.json"):
        load_trace(path)
    with pytest.raises(DlexploreError, match=r"config\.json"):
        load_trace(path, format="pytorch")
    odd = write(tmp_path / "list.json", json.dumps({"traceEvents": [1, 2]}), compress=False)
    with pytest.raises(DlexploreError, match=r"list\.json \(event 0\): is int '1'; expected a trace event"):
        read([odd])


def test_complete_event_without_dur(tmp_path):
    doc = json.loads(text_of(GLOO / "rank0.pt.trace.json.gz"))
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("name") == "aten::addmm")
    del doc["traceEvents"][index]["dur"]
    path = write(tmp_path / "rank0.json", json.dumps(doc), compress=False)
    with pytest.raises(
        DlexploreError,
        match=rf"rank0\.json \(event {index}\): complete event 'aten::addmm' has "
        r"no dur; expected a number",
    ):
        read([path])


def test_wrong_types(tmp_path):
    doc = json.loads(text_of(GLOO / "rank0.pt.trace.json.gz"))
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("name") == "aten::relu")
    doc["traceEvents"][index]["ts"] = "soon"
    path = write(tmp_path / "rank0.json", json.dumps(doc), compress=False)
    with pytest.raises(
        DlexploreError, match=rf"\(event {index}\): complete event 'aten::relu' has ts = 'soon'"
    ):
        read([path])
    doc["traceEvents"][index]["ts"] = 1.0
    doc["distributedInfo"]["rank"] = "first"
    write(path, json.dumps(doc), compress=False)
    with pytest.raises(DlexploreError, match=r"rank0\.json: distributedInfo\.rank is 'first'"):
        read([path])


def _with_info(source: Path, rank: int, world_size: int) -> str:
    doc = json.loads(text_of(source))
    doc["distributedInfo"].update(rank=rank, world_size=world_size)
    return json.dumps(doc)


def test_mixed_world_sizes(tmp_path):
    a = write(tmp_path / "a.json", _with_info(GLOO / "rank0.pt.trace.json.gz", 0, 2), compress=False)
    b = write(tmp_path / "b.json", _with_info(GLOO / "rank1.pt.trace.json.gz", 1, 4), compress=False)
    with pytest.raises(DlexploreError, match=r"different world sizes \(a\.json: 2; b\.json: 4\)"):
        read([a, b])


def test_duplicate_ranks(tmp_path):
    for name in ("a.json", "b.json"):
        write(tmp_path / name, text_of(GLOO / "rank0.pt.trace.json.gz"), compress=False)
    with pytest.raises(DlexploreError, match=r"a\.json and .*b\.json both hold rank 0"):
        load_trace(tmp_path)


def test_missing_ranks(tmp_path):
    a = write(tmp_path / "a.json", _with_info(GLOO / "rank0.pt.trace.json.gz", 0, 3), compress=False)
    b = write(tmp_path / "b.json", _with_info(GLOO / "rank1.pt.trace.json.gz", 2, 3), compress=False)
    with pytest.raises(
        DlexploreError, match=r"rank\(s\) 1 of 3 missing.*a\.json \(rank 0\), b\.json \(rank 2\)"
    ):
        read([a, b])
    trace = read([a, b], allow_missing_ranks=True)
    assert list(trace.ranks) == [0, 2] and trace.world_size == 3


def test_unknown_option():
    with pytest.raises(DlexploreError, match="unknown option"):
        load_trace(GLOO, rank=[0])


def test_ranks_option_sets_and_checks_ranks(tmp_path):
    for rank in (0, 1):
        text = text_of(GLOO / f"rank{rank}.pt.trace.json.gz")
        write(tmp_path / f"worker{rank}.json", _without_distributed_info(text))
    with pytest.raises(DlexploreError, match=r"worker0\.json: the rank is unknown.*pass ranks="):
        load_trace(tmp_path)
    trace = load_trace(sorted(tmp_path.iterdir()), ranks=[1, 0])
    first = trace.events[trace.events["rank"] == 1]
    assert len(first) == len(load_trace(GLOO / "rank0.pt.trace.json.gz").events)
    with pytest.raises(DlexploreError, match=r"ranks= must give one rank .* per file.*\(2\); got \[0\]"):
        load_trace(tmp_path, ranks=[0])


def test_extra_data_and_trailing_comma(tmp_path):
    text = text_of(GLOO / "rank0.pt.trace.json.gz")
    path = write(tmp_path / "rank0.json", text + "\n{}", compress=False)
    with pytest.raises(
        DlexploreError, match=r"rank0\.json \(byte \d+ of the file\): extra data after the end"
    ):
        read([path])
    events = json.loads(text)["traceEvents"][:5]
    path = write(tmp_path / "rank0.json", json.dumps({"traceEvents": events})[:-2] + ",]}", compress=False)
    with pytest.raises(DlexploreError, match=r"trailing comma"):
        read([path])


def test_byte_offset_points_at_the_problem(tmp_path):
    text = text_of(GLOO / "rank0.pt.trace.json.gz")
    where = text.index('"name": "aten::mm"')
    broken = text[:where] + '"name" "aten::mm"' + text[where + len('"name": "aten::mm"') :]
    path = write(tmp_path / "rank0.json", broken, compress=False)
    with pytest.raises(DlexploreError) as caught:
        read([path], chunk_chars=50_000)
    offset = int(re.search(r"byte (\d+)", str(caught.value)).group(1))
    assert abs(offset - (where + len('"name"'))) < 4
    assert np.isfinite(offset)


def test_name_of_the_wrong_type(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": ["aten", "mm"], "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}]
    path = write(tmp_path / "rank0.json", json.dumps({"traceEvents": events}), compress=False)
    with pytest.raises(DlexploreError, match=r"rank0\.json \(event 0\): has name = .*expected a string"):
        read([path])


def test_without_msgspec_the_reader_gives_the_same_trace(tmp_path, nccl):
    """A platform without msgspec's wheels (the import blocked in a child process): the reader
    falls back to the standard library and returns the same events, memory table and meta."""
    import pickle
    import subprocess
    import sys

    out = tmp_path / "trace.pickle"
    code = (
        "import pickle, sys\n"
        "sys.modules['msgspec'] = None  # as if it could not be installed\n"
        "from dlexplore.traces import pytorch\n"
        f"trace = pytorch.read(sorted(__import__('pathlib').Path({str(NCCL)!r}).iterdir()))\n"
        f"pickle.dump(trace, open({str(out)!r}, 'wb'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    without = pickle.loads(out.read_bytes())
    assert without.meta.pop("parser") == "json" and nccl.meta["parser"] == "msgspec"
    pd.testing.assert_frame_equal(without.events, nccl.events)
    assert (without.memory is None) == (nccl.memory is None)
    if nccl.memory is not None:
        pd.testing.assert_frame_equal(without.memory, nccl.memory)
    assert without.meta == {k: v for k, v in nccl.meta.items() if k != "parser"}


def test_a_2021_kineto_trace_with_the_old_category_names():
    """pytorch/kineto's tb_plugin test trace (PyTorch 1.8/1.9 on a V100, 2021; its README.txt): the
    categories 'Operator', 'Runtime', 'Kernel' and 'Memcpy' of that time, and the GPU's thread
    named 'stream 7'. Hand counts from the file: 30 kernels of 48 us in all, 2 copies of 640 and
    128 bytes, 42 runtime calls, one step (ProfilerStep#2, 13,410 us)."""
    trace = load_trace(DATA.parent / "kineto-2021-v100" / "gpu_metrics_input.json")
    events = trace.events
    counts = events["category"].value_counts()
    assert (counts["compute"], counts["runtime"], counts["memcpy"]) == (30, 42, 2)
    kernels = events[events["category"] == "compute"]
    assert set(kernels["stream"]) == {"cuda:0:7"}
    assert kernels["duration"].sum() == pytest.approx(48e-6)
    assert sorted(events.loc[events["category"] == "memcpy", "bytes"]) == [128, 640]
    steps = trace.breakdown()
    assert steps.step.values.tolist() == [2]
    assert float(steps.step_time.squeeze()) == pytest.approx(13410e-6)
    assert float(steps.time_compute.squeeze()) == pytest.approx(48e-6)


def test_a_tensorflow_profiler_trace_is_named_as_such():
    """TensorFlow's profiler writes Chrome traces too (tests/data/traces/tensorflow/README.txt):
    read as PyTorch's, its uncategorised host events are 'other' and the breakdown counts their time
    as idle, so the reader says what the file is."""
    path = Path(__file__).parent / "data" / "traces" / "tensorflow" / "sagemaker-debugger-tf2-trace.json"
    with pytest.warns(
        UserWarning, match=r"a TensorFlow profiler trace \(processes /device:GPU:0, .*\), read as"
    ):
        trace = load_trace(path)
    assert set(trace.events["category"]) == {"other"} and len(trace.events) == 256
    assert float(trace.breakdown().step_time.squeeze()) == pytest.approx(63_929.222e-6)


GPUS_WITHOUT_ACTIVITY = Path(__file__).parent / "data" / "traces" / "kineto-gpus-without-activity"


def test_a_trace_listing_gpus_without_gpu_activity_says_so(tmp_path):
    """Two real traces whose headers list GPUs but that hold no kernel or copy
    (tests/data/traces/kineto-gpus-without-activity/README.txt) are read as CPU-only traces, which
    counts host work as compute: the reader says so, and what the file suggests happened."""
    runtime_only = GPUS_WITHOUT_ACTIVITY / "flowmatch_3090_runtime_only.json"
    with pytest.warns(
        UserWarning,
        match=r"lists 2 GPU\(s\) \(NVIDIA GeForce RTX 3090\); nothing was launched on the GPU while it "
        r"was profiled \(its runtime calls launch no work\); read as a CPU-only trace",
    ):
        trace = load_trace(runtime_only, cache=False)
    assert trace.meta["device"] == "cpu"
    assert (trace.events["category"] == "runtime").sum() == 5  # cudaGetDeviceCount x2, ... Synchronize
    # its header says profile_memory, but memory events come with the CPU activity it did not record
    with pytest.raises(
        DlexploreError, match=r"profile_memory=True, but PyTorch records memory events with the CPU"
    ):
        trace.memory_timeline()
    # its runtime calls (cudaGetDeviceCount, cudaGetDeviceProperties_v2, cudaDeviceSynchronize)
    # launch nothing; with a launch and its kernel record lost, CUPTI is the suspect
    events = json.loads(runtime_only.read_text())
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
    events["traceEvents"].append({**launch, "ts": 2545290572870.0, "dur": 4.0, "args": {"correlation": 9}})
    lost = tmp_path / "launch_without_kernel.json"
    lost.write_text(json.dumps(events))
    with pytest.warns(
        UserWarning, match=r"holds 1 kernel launches or copies by the runtime but nothing that ran"
    ):
        load_trace(lost, cache=False)
    host_only = GPUS_WITHOUT_ACTIVITY / "cudaguide_rtx4080_cpuonly.json"
    with pytest.warns(
        UserWarning,
        match=r"lists 1 GPU\(s\) \(NVIDIA GeForce RTX 4080 SUPER\); the trace holds no GPU activity "
        r"\(profile with activities=\[ProfilerActivity\.CPU, ProfilerActivity\.CUDA\]",
    ):
        trace = load_trace(host_only, cache=False)
    assert (trace.events["category"] == "compute").sum() == 110  # its 110 cpu_op events
    with pytest.raises(DlexploreError, match=r"no memory events; record them with .*profile_memory=True"):
        trace.memory_timeline()


def test_a_chrome_trace_of_another_tool_says_its_categories_are_unknown():
    """An NPU simulator's Chrome trace (tests/data/traces/not-kineto/README.txt) has the shape of a
    PyTorch trace; its 8 events, category "AIV", all read as 'other', which the breakdown counts as
    idle: the reader says so."""
    path = Path(__file__).parent / "data" / "traces" / "not-kineto" / "npu-simulator-last-events.json"
    with pytest.warns(
        UserWarning,
        match=r"npu-simulator-last-events\.json: none of its 8 events has a category PyTorch's profiler "
        r"writes \(its categories: AIV\); read as a PyTorch trace, every event is 'other'",
    ):
        trace = load_trace(path, cache=False)
    assert set(trace.events["category"]) == {"other"}
    # the span is the events' own: 332.541 us to 430.523 + 1.045 us
    assert float(trace.breakdown().step_time.squeeze()) == pytest.approx((431.568 - 332.541) * 1e-6)
