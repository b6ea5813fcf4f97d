"""Traces from the wild (issue 20): the real files in ../shared/traces-real, read right.

Every expected number is a hand count of the file made with the standard library's json or sqlite3
(the counting code is in each test or quoted in its comment), or the producer's own tool (PyDarshan
for Darshan logs), never a number dlexplore printed. Files are used as their producers wrote them;
where a case needs an edit (a kernel renamed as a newer NCCL names it), the test says so and
derives the file in a temporary folder.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import warnings

import numpy as np
import pandas as pd
import pytest
from _real_traces import document_of, events_of, real

import dlexplore
from dlexplore.cli import main
from dlexplore.errors import DlexploreError
from dlexplore.traces import load, load_trace, nccl_tests

TB0 = "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
NS = "pytorch/HolisticTraceAnalysis__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NEGQ = "pytorch/HolisticTraceAnalysis__negative_queue_length_values_check__rank0.json.gz"
NCCL = "pytorch/HolisticTraceAnalysis__nccl_parser_config__nccl_data.json.gz"
CONTROL = "pytorch/HolisticTraceAnalysis__trace_diff__control__control.json.gz"
SAMPLED = [
    "pytorch/HolisticTraceAnalysis__trace_filter__sampled_rank-0.json.gz",
    "pytorch/HolisticTraceAnalysis__trace_filter__sampled_rank-1.json.gz",
]
AMD = "pytorch/HolisticTraceAnalysis__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
NSYS = "nsys/pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
CPU_ONLY = "pytorch/HolisticTraceAnalysis__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
SUPERBENCH = "nccl-tests/superbenchmark__nccl_{}.log"


def quiet_load(path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_trace(path, **options)


# -- 1. 2021 Kineto traces --------------------------------------------------------------------------


def test_2021_kineto_categories_steps_copies_and_data_loading():
    path = real(TB0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one GPU, no communication: rank 0 of 1, nothing to say
        trace = load_trace(path)
    events = trace.events
    assert trace.meta["rank_unknown"] == [] and trace.world_size == 1
    # hand count (json): 6 "ProfilerStep#N" (cat Operator) N = 5..10; 12 "Memcpy" events copying
    # 115,607,040 bytes in 11,492 us; 312 "Memset"; 6 "enumerate(DataLoader)#..." in 415,791 us
    assert sorted(events.loc[events["category"] == "step", "step"].tolist()) == [5, 6, 7, 8, 9, 10]
    copies = events[events["category"] == "memcpy"]
    assert len(copies) == 12 and copies["bytes"].sum() == 115_607_040
    assert copies["duration"].sum() == pytest.approx(11_492e-6)
    assert (events["category"] == "memset").sum() == 312
    data = events[events["category"] == "data"]
    assert len(data) == 6 and data["duration"].sum() == pytest.approx(415_791e-6)
    # device rows "stream 7" of pid 0 are a CUDA stream
    assert set(copies["stream"].astype(str)) == {"cuda:0:7"}
    ds = trace.breakdown()
    assert ds.sizes["step"] == 6
    # each step runs from its ProfilerStep to the next one: ts differences 176,146 174,061
    # 176,987 181,327 176,535 us
    assert ds.step_time.sel(rank=0).values[:5] * 1e6 == pytest.approx(
        [176146, 174061, 176987, 181327, 176535], abs=0.5
    )
    assert float(ds.time_memcpy.sum()) == pytest.approx(11_492e-6, rel=1e-6)
    assert float(ds.time_data.sum()) == pytest.approx(415_791e-6, rel=1e-6)
    # 12,838 "[memory]" instants: 8,220 on CUDA (Device Type 1), 4,618 on the CPU
    assert trace.memory["device"].astype(str).value_counts().to_dict() == {"cuda:0": 8220, "cpu": 4618}


# -- 2. ranks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, rank",
    [("host_1016005.pt.trace.json", None), ("job_rank_3.json", 3), ("rank-12.1016005.pt.trace.json", 12)],
)
def test_rank_only_from_distributed_info_or_an_explicit_rank_pattern(tmp_path, name, rank):
    # the 2021 trace has no distributedInfo; only its file name can say a rank
    (tmp_path / name).write_bytes(gzip.open(real(TB0)).read())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = load_trace(tmp_path / name)
    assert trace.ranks.tolist() == [0 if rank is None else rank]
    assert trace.meta["rank_unknown"] == []  # a name without a rank: a single-process run (no communication)
    said = " ".join(str(w.message) for w in caught)
    assert ("rank" not in said) if rank is None else (f"rank {rank} taken from the file name" in said)


def test_distributed_info_wins_over_the_name():
    path = real(CPU_ONLY)
    trace, info = load_trace(path), document_of(path)
    assert trace.ranks.tolist() == [info["distributedInfo"]["rank"]] == [34]
    assert trace.world_size == 300


# -- 3. NCCL kernels and the calls that launched them ------------------------------------------------


def test_sendrecv_kernels_take_the_collective_of_the_call_that_launched_them():
    trace = quiet_load(real(NEGQ))
    kernels = trace.events[trace.events["name"].astype(str).str.startswith("ncclKernel")]
    # hand count (json): kernel -> cuda_runtime with its correlation -> innermost nccl:* user
    # annotation around that launch on the same thread: nccl:all_to_all 45, nccl:all_reduce 10,
    # nccl:_all_gather_base 10, nccl:_reduce_scatter_base 10; 5 kernels have no launch in the trace
    counts = kernels["collective"].astype(str).value_counts().to_dict()
    assert counts == {"alltoall": 45, "allreduce": 10, "allgather": 10, "reduce_scatter": 10, "sendrecv": 5}
    # sizes from the calls' Input Dims x Input type: nccl:all_to_all [[3145728]] float = 12,582,912 B;
    # c10d::_allgather_base_ lists its gathered output [65536, 64] float = 16,777,216 B
    sizes = set(kernels.loc[kernels["collective"] == "alltoall", "bytes"])
    assert 3145728 * 4 in sizes
    assert 65536 * 64 * 4 in set(kernels.loc[kernels["collective"] == "allgather", "bytes"])
    table = trace.collectives()
    assert set(table["collective"]) >= {"alltoall", "allreduce", "allgather", "reduce_scatter"}
    assert (table.loc[table["collective"] != "sendrecv", "ranks"] == 16).all()  # world_size 16


def test_kernel_arguments_give_collective_bytes_and_group():
    trace = quiet_load(real(NCCL))
    kernels = trace.events[trace.events["name"].astype(str).str.startswith("ncclKernel")]
    # hand count (json): the 21 NCCL kernels carry Collective name, In msg nelems, dtype and
    # Process Group Name "0": allreduce of 6,637,568 / 2,431,040 / 2,049,000 / 7,875,584 /
    # 6,563,840 Float (4 B), broadcast of 53,120 Float and of 53 Long (8 B), 3 of each
    got = sorted(
        zip(
            kernels["collective"].astype(str),
            kernels["bytes"],
            kernels["process_group"].astype(str),
            strict=True,
        )
    )
    expected = sorted(
        [
            (c, b, "0")
            for c, b in [
                ("allreduce", 26550272),
                ("allreduce", 9724160),
                ("allreduce", 8196000),
                ("allreduce", 31502336),
                ("allreduce", 26255360),
                ("broadcast", 212480),
                ("broadcast", 424),
            ]
            for _ in range(3)
        ]
    )
    assert got == expected


def test_ncclDevKernel_Generic_takes_everything_from_record_param_comms(tmp_path):
    """NCCL >= 2.19 names its kernels ncclDevKernel_Generic; newer Kineto may not copy the call's
    arguments onto them. Derived from the real nccl_data trace: kernels renamed, their copies of
    the record_param_comms arguments removed."""
    document = document_of(real(NCCL))
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel" and event.get("name", "").startswith("ncclKernel"):
            event["name"] = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
            for key in (
                "Collective name",
                "In msg nelems",
                "Out msg nelems",
                "Group size",
                "dtype",
                "Process Group Name",
                "Process Group Ranks",
                "Process Group Description",
            ):
                event["args"].pop(key, None)
    path = tmp_path / "generic.json"
    path.write_text(json.dumps(document))
    original = quiet_load(real(NCCL)).events
    renamed = quiet_load(path).events
    before = original[original["name"].astype(str).str.startswith("ncclKernel")]
    after = renamed[renamed["name"].astype(str).str.startswith("ncclDevKernel_Generic")]
    assert len(after) == 21
    for column in ("collective", "bytes", "process_group", "group_size", "dtype"):
        assert after[column].astype(str).tolist() == before[column].astype(str).tolist(), column


def test_point_to_point_peers_from_the_call(tmp_path):
    """Recent PyTorch gives sends and receives "Dst Rank"/"Src Rank"; derived from the real
    nccl_data trace: its broadcast kernels' arguments say send to rank 1 instead."""
    document = document_of(real(NCCL))
    for event in document["traceEvents"]:
        args = event.get("args") or {}
        if event.get("cat") == "kernel" and args.get("Collective name") == "broadcast":
            args.update({"Collective name": "send", "Dst Rank": 1})
    path = tmp_path / "send.json"
    path.write_text(json.dumps(document))
    p2p = quiet_load(path).point_to_point()
    # 6 broadcast kernels: 3 of 53,120 Float (212,480 B) and 3 of 53 Long (424 B), now sends from
    # rank 0 to rank 1
    assert p2p[["rank", "peer", "collective", "bytes", "count"]].values.tolist() == [
        [0, 1, "send", 424.0, 3],
        [0, 1, "send", 212480.0, 3],
    ]
    table = quiet_load(path).collectives()
    assert set(table.loc[table["collective"] == "send", "peers"]) == {"0->1"}


# -- 4. steps partition the timeline ------------------------------------------------------------------


def test_steps_partition_the_timeline():
    trace = quiet_load(real(NS))
    ds = trace.breakdown()
    # hand count (json): ProfilerStep#101..105 (user_annotation) start at
    # ...5502094.5, 5537248.25, 5609361.75, 5705090.25, 5800675.0 us: differences 35,153.75,
    # 72,113.5, 95,728.5, 95,584.75 us
    assert ds.step_time.sel(rank=0).values[:4] * 1e6 == pytest.approx(
        [35153.75, 72113.5, 95728.5, 95584.75], abs=0.01
    )
    # the windows tile the rank's timeline: their sum is the span from the first step's start to
    # the end of the last window, less than the device's whole span plus the host's lead
    starts = trace.events.loc[trace.events["category"] == "step", "start"]
    span = float(ds.step_time.sum())
    last_end = starts.min() + span
    assert last_end <= (trace.events["start"] + trace.events["duration"]).max() + 1e-9
    assert float((ds.time_idle + ds.time_compute).sum()) <= span + 1e-9


# -- 5. a partial multi-rank set -------------------------------------------------------------------


def test_partial_rank_set_needs_allow_missing_ranks(capsys):
    paths = [real(p) for p in SAMPLED]
    with pytest.raises(DlexploreError, match=r"rank\(s\) 2, 3, .* of 128 missing.*--allow-missing-ranks"):
        load_trace(paths)
    trace = load_trace(paths, allow_missing_ranks=True)
    assert trace.meta["missing_ranks"] == list(range(2, 128))
    assert main(["trace", "summary", *map(str, paths)]) == 2
    assert main(["trace", "summary", "--allow-missing-ranks", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "# 126 of 128 ranks missing: 2, 3, 4" in out


# -- 6. nccl-tests logs -----------------------------------------------------------------------------


def test_nccl_tests_repeated_zero_rows_and_blank_redop():
    path = real(SUPERBENCH.format("alltoall"))
    with pytest.warns(UserWarning, match="'alltoall' is taken from the file name"):
        ds = nccl_tests.read(path)
    # lines 16-20: size 0 five times, out of place 1.63 1.35 1.35 1.37 1.34 us (mean 1.408 us),
    # in place 1.38 1.34 1.77 1.39 1.33 us; the redop column is blank on every row
    zero = ds.sel(bytes=0)
    assert zero.time.values.tolist() == pytest.approx([1.408e-6, 1.442e-6])
    assert int(zero.rows) == 5 and ds.redop.item() == ""
    assert ds.sizes == {"bytes": 30, "placement": 2} and ds.gpus.item() == 8
    # the last row: 8,589,934,592 B in 33,508 us out of place, busbw 224.31 GB/s
    assert ds.busbw.sel(bytes=8589934592).values.tolist() == [224.31, 226.16]
    with pytest.warns(UserWarning):
        points = nccl_tests.read(path, by="point")
    assert points.sizes == {"point": 34, "placement": 2}


@pytest.mark.parametrize(
    "name", ["allgather", "allreduce", "alltoall", "broadcast", "reduce", "reducescatter"]
)
def test_every_superbenchmark_log_reads(name):
    with pytest.warns(UserWarning, match="taken from the file name"):
        ds = load(real(SUPERBENCH.format(name)))
    assert ds.collective.item() == {"reducescatter": "reduce_scatter"}.get(name, name)
    assert ds.attrs["avg_busbw"] > 0


def test_launcher_prefixes_and_several_tests(tmp_path):
    text = real(SUPERBENCH.format("allreduce")).read_text()
    # srun -l labels every line with the task: "0: "
    labelled = tmp_path / "srun.log"
    labelled.write_text("".join(f"0: {line}\n" for line in text.splitlines()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, prefixed = (
            nccl_tests.read(real(SUPERBENCH.format("allreduce"))),
            nccl_tests.read(labelled, collective="allreduce"),
        )
    assert (plain.busbw == prefixed.busbw).all()
    both = tmp_path / "two.log"
    both.write_text(
        "# all_reduce_perf\n"
        + text
        + "\n# all_gather_perf\n"
        + real(SUPERBENCH.format("allgather")).read_text()
    )
    ds = nccl_tests.read_tests(both)
    assert ds.collective.values.tolist() == ["allreduce", "allgather"] and ds.sizes["test"] == 2


def test_measured_show_keeps_bytes_and_placement(capsys):
    path = real(SUPERBENCH.format("reduce"))
    assert main(["measured", "show", str(path), "--format", "csv"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert header[:2] == ["bytes", "placement"] and "busbw" in header
    assert main(["trace", "summary", str(path), "--by", "point", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("point,placement") and len(lines) == 1 + 34 * 2


# -- 7. MPI ranges in Nsight Systems, devices other than CUDA ---------------------------------------


def test_nsys_mpi_ranges_are_communication():
    path = real(NSYS)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        ranges = db.execute(
            "SELECT s.value, e.end - e.start FROM NVTX_EVENTS AS e JOIN StringIds AS s "
            "ON s.id = e.textId WHERE s.value IN ('MPI_Send', 'MPI_Recv')"
        ).fetchall()
    sends = [d for n, d in ranges if n == "MPI_Send"]
    recvs = [d for n, d in ranges if n == "MPI_Recv"]
    assert (len(sends), len(recvs)) == (10, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rank comes from the "MPI Rank 0" thread name: no guess
        trace = load_trace(path)
    assert trace.ranks.tolist() == [0]
    comm = trace.events[trace.events["category"] == "communication"]
    assert comm["collective"].astype(str).value_counts().to_dict() == {"send": 10, "recv": 5}
    # one thread, one call at a time: the union is the sum (ns)
    assert float(trace.breakdown().time_comm.sum()) == pytest.approx((sum(sends) + sum(recvs)) * 1e-9)
    p2p = trace.point_to_point().set_index("collective")
    assert p2p.loc["send", "count"] == 10 and p2p.loc["recv", "count"] == 5
    assert p2p["peer"].isna().all()  # nsys records no peer for MPI ranges
    table = trace.collectives()
    assert sorted(table["collective"]) == ["recv", "send"]


def _merged(events):
    """Length (us) of the union of events' [ts, ts + dur], counted from the first ts (so that
    float64 keeps the file's nanoseconds)."""
    base = min(e["ts"] for e in events)
    intervals = [(e["ts"] - base, e["ts"] - base + e["dur"]) for e in events]
    total, end = 0.0, -np.inf
    for s, e in sorted(intervals):
        total += max(0.0, e - max(s, end))
        end = max(end, e)
    return total


def test_rocm_kernels_count_as_compute():
    path = real(AMD)
    kernels = [e for e in events_of(path) if e.get("cat") == "kernel"]
    trace = quiet_load(path)
    assert trace.temporal_breakdown().time_compute.item() == pytest.approx(_merged(kernels) * 1e-6, rel=1e-9)


def test_mtia_device_events_count_as_compute(tmp_path):
    """MTIA's Kineto writes device work as "mtia_ccp_events" and copies named "dma*". Derived from
    the real ROCm trace: its kernels' category renamed, one copy renamed dma."""
    document = document_of(real(AMD))
    kernels, copies = [], []
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel":
            event["cat"] = "mtia_ccp_events"
            kernels.append(event)
        elif event.get("cat") == "gpu_memcpy":
            event["cat"], event["name"] = "mtia_ccp_events", "dma_copy_h2d"
            copies.append(event)
    path = tmp_path / "mtia.json"
    path.write_text(json.dumps(document))
    trace = quiet_load(path)
    ds = trace.temporal_breakdown()
    assert ds.time_compute.item() == pytest.approx(_merged(kernels) * 1e-6, rel=1e-9)
    assert ds.time_memcpy.item() == pytest.approx(_merged(copies) * 1e-6, rel=1e-9)
    compute = trace.events.loc[trace.events["category"] == "compute", "stream"].astype(str)
    assert {s.split(":")[0] for s in compute} == {"mtia"}


# -- 9. one load, one CLI entry, stray files ----------------------------------------------------------


def test_one_load_for_every_format():
    import darshan

    path = real("darshan/darshan__examples__example_logs__dxt.darshan")
    log = load(path)
    report = darshan.DarshanReport(str(path), read_all=True)
    counters = report.records["POSIX"].to_df()["counters"]
    # PyDarshan's own records: POSIX 264 opens, 22,517,726 bytes read, 13,021,781 written; STDIO 1 open
    # and 1,876 bytes read (fread), which the job totals add (POSIX and STDIO are disjoint in Darshan)
    stdio = report.records["STDIO"].to_df()["counters"]
    assert log.summary.posix_bytes_read.item() == counters["POSIX_BYTES_READ"].sum() == 22_517_726
    assert log.summary.stdio_bytes_read.item() == stdio["STDIO_BYTES_READ"].sum() == 1_876
    assert log.summary.opens.item() == 264 + 1
    assert log.summary.bytes_read.item() == 22_517_726 + 1_876
    assert log.summary.bytes_written.item() == 13_021_781
    summary = load(real("dlio/dlio_benchmark__summary.json"))
    raw = document_of(real("dlio/dlio_benchmark__summary.json"))
    assert summary.train_au_percentage.values.tolist() == raw["metric"]["train_au_percentage"]
    assert isinstance(load(real(NS)), dlexplore.Trace)


@pytest.mark.parametrize(
    "relative",
    [
        "darshan/darshan__tests__input__sample.darshan",
        "dlio/storage_results_v1.0__HPE__Cray_C500_4xHDR200_1host__resnet50_h100__run-1__summary.json",
        "nccl-tests/superbenchmark__nccl_broadcast.log",
        NSYS,
    ],
)
def test_trace_summary_reads_every_format(relative, capsys):
    assert main(["trace", "summary", str(real(relative)), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) >= 2


def test_stray_files_in_a_rank_folder_are_skipped(tmp_path, capsys):
    for relative in SAMPLED:
        (tmp_path / real(relative).name).symlink_to(real(relative))
    (tmp_path / "config.json").write_text('{"lr": 0.1, "batch_size": 32}')
    (tmp_path / "metadata.json").write_text("[1, 2, 3]")
    skipped = r"skipped 2 file\(s\) that are not traces.*config\.json.*metadata\.json"
    with pytest.warns(UserWarning, match=skipped):
        trace = load_trace(tmp_path, allow_missing_ranks=True)
    assert trace.ranks.tolist() == [0, 1] and len(trace.meta["skipped_files"]) == 2
    assert main(["trace", "summary", "--allow-missing-ranks", str(tmp_path)]) == 0
    assert "config.json" in capsys.readouterr().err
    # a file named directly is never skipped
    with pytest.raises(DlexploreError, match=r"config\.json: is a JSON object without \"traceEvents\""):
        load_trace([real(SAMPLED[0]), tmp_path / "config.json"])


def test_damaged_real_trace_names_the_file(tmp_path):
    raw = real(CONTROL).read_bytes()
    cut = tmp_path / "control.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DlexploreError, match=r"control\.json\.gz.*gzip stream is truncated"):
        load_trace(cut)


def test_converted_trace_keeps_memory_events(tmp_path):
    from dlexplore.traces import write_netcdf

    trace = quiet_load(real(AMD))
    trace.memory = quiet_load(real(TB0)).memory  # the AMD trace has none: borrow a real table
    back = load_trace(write_netcdf(trace, tmp_path / "run.nc"))
    pd.testing.assert_frame_equal(back.memory, trace.memory)
    pd.testing.assert_frame_equal(back.events, trace.events)


def test_an_implausible_world_size_is_an_error_naming_the_file(tmp_path):
    document = document_of(real(CPU_ONLY))
    document["distributedInfo"]["world_size"] = 18446744073709551615
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(document))
    with pytest.raises(DlexploreError, match=r"huge\.json: .*expected fewer than 4,194,304 ranks"):
        load_trace(path)
