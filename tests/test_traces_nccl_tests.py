"""nccl-tests output -> dlexplore.traces.nccl_tests (a measured communication dataset).

The files in tests/data/traces/nccl-tests/ are real nccl-tests outputs copied verbatim from the
public repositories named in that folder's README.txt (a current 8-GPU all-reduce, a two-test
alltoall + sendrecv log of 4 ranks on 2 nodes, and a 2019 DGX-2 log in the old format). The
expected values are read off the files by hand; the bad inputs are those files damaged.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import dlexplore
from dlexplore import measured
from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.model.comm import busbw_factor
from dlexplore.traces import detect_format, load_trace, nccl_tests, read_nccl_tests

DATA = Path(__file__).parent / "data" / "traces" / "nccl-tests"
TOGETHER = DATA / "together-h100-all_reduce_ring.out"
XXRJUN = DATA / "xxrjun-h100-2node-alltoall-sendrecv.log"
WOHLBIER = DATA / "wohlbier-dgx2-all_gather-all_reduce.txt"
DOCKER = DATA / "notes-a100-docker-allreduce-nccl-debug.txt"
LUMI = DATA / "notes-lumi-mi100-rccl-old-header.txt"
ROCM_5571 = DATA / "rocm-issue-5571-r9700-allreduce.txt"
FAILED_124 = DATA / "nccl-tests-issue-124-failed.txt"


@pytest.mark.parametrize(
    "path",
    [TOGETHER, XXRJUN, WOHLBIER, DOCKER, LUMI, ROCM_5571, FAILED_124, DATA / "mscclpp-alltoall-2n8p.txt"],
)
def test_detect_format(path):
    assert detect_format(path) == "nccl-tests"


def test_current_format_values():
    ds = read_nccl_tests(TOGETHER)
    assert ds.sizes == {"bytes": 31, "placement": 2}
    assert list(ds.placement.values) == ["out-of-place", "in-place"]
    assert ds.bytes.values[0] == 8 and ds.bytes.values[-1] == 8589934592
    assert ds.collective.item() == "allreduce" and ds.gpus.item() == 8
    assert ds.dtype.item() == "float" and ds.redop.item() == "sum" and ds.root.item() == -1
    last = ds.sel(bytes=8589934592)
    # 40838.9 µs out of place, 40780.5 µs in place
    assert last.time.values.tolist() == pytest.approx([40838.9e-6, 40780.5e-6])
    assert last.algbw.values.tolist() == [210.34, 210.64]
    assert last.busbw.values.tolist() == [368.09, 368.62]
    assert last["count"].item() == 2147483648
    assert ds.wrong.values.max() == 0
    # the printed bandwidths are nccl-tests' own: algbw = bytes / time, busbw = algbw x 2(n-1)/n
    algbw = 8589934592 / 40838.9e-6 / 1e9
    assert algbw == pytest.approx(210.34, abs=0.005)
    assert algbw * busbw_factor("allreduce", 8) == pytest.approx(368.09, abs=0.01)
    assert ds.time.attrs["units"] == "s" and ds.busbw.attrs["units"] == "GB/s"
    assert ds.bytes.attrs["units"] == "bytes"


def test_current_format_attrs():
    ds = read_nccl_tests(TOGETHER)
    assert ds.attrs["kind"] == "measured"
    assert ds.attrs["source"] == f"measured: nccl-tests output {TOGETHER}"
    assert ds.attrs["nccl_tests_version"].startswith("2.17.9")
    assert ds.attrs["avg_busbw"] == 122.955 and ds.attrs["out_of_bounds"] == "0 OK"
    assert ds.attrs["command"].startswith("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592")
    devices = ds.attrs["devices"].splitlines()
    assert len(devices) == 8 and all(d.endswith("NVIDIA H100 80GB HBM3") for d in devices)
    assert ds.attrs["first_line"] == 3 and ds.attrs["skipped_lines"] == ""


def test_lays_over_the_prediction():
    meas = read_nccl_tests(TOGETHER)
    pred = dlexplore.predict_comm(
        "allreduce", nbytes=meas.bytes.values, gpus=int(meas.gpus), bandwidth=200.0, latency=5e-6
    )
    ratio = meas.busbw.sel(placement="out-of-place") / pred.busbw
    assert ratio.dims == ("bytes",) and ratio.sizes["bytes"] == 31
    # 8 GiB: measured 368.09 GB/s busbw against the ring's 2(p-1)/p n / (time) at 200 GB/s links
    assert float(ratio.sel(bytes=8589934592)) == pytest.approx(
        368.09 / float(pred.busbw.sel(bytes=8589934592))
    )


def test_measured_load_reads_nccl_tests():
    ds = measured.load(TOGETHER)
    assert ds.collective.item() == "allreduce" and ds.attrs["kind"] == "measured"


def test_two_tests_in_one_file():
    with pytest.raises(
        InputFileError,
        match=r"holds 2 nccl-tests results: alltoall \(line 2\), sendrecv "
        r"\(line 29\); pass collective=",
    ):
        read_nccl_tests(XXRJUN)
    alltoall, sendrecv = nccl_tests.read_all(XXRJUN)
    assert alltoall.collective.item() == "alltoall" and sendrecv.collective.item() == "sendrecv"
    assert alltoall.gpus.item() == 4 and alltoall.redop.item() == "none" and alltoall.dtype.item() == "double"
    # in-place "#wrong" is N/A for both
    assert np.isnan(alltoall.wrong.sel(placement="in-place")).all()
    assert (alltoall.wrong.sel(placement="out-of-place") == 0).all()
    picked = nccl_tests.read(XXRJUN, collective="sendrecv")
    last = picked.sel(bytes=17179869184)
    assert last.time.values.tolist() == pytest.approx([599168e-6, 600103e-6])
    assert last.busbw.values.tolist() == [28.67, 28.63]
    assert picked.attrs["avg_busbw"] == 28.3875
    with pytest.raises(InputFileError, match="holds no allreduce test"):
        nccl_tests.read(XXRJUN, collective="all_reduce")


def test_old_format_without_root_and_with_error_column():
    ds = nccl_tests.read(WOHLBIER, collective="allreduce")
    assert "root" not in ds.coords and "wrong" not in ds and "error" in ds
    assert ds.gpus.item() == 12 and ds.redop.item() == "sum"
    row = ds.sel(bytes=8)
    assert row.time.values.tolist() == pytest.approx([61.03e-6, 61.04e-6])
    assert row.error.values.tolist() == [2e-07, 1e-07]
    assert ds.sel(bytes=8589934592).busbw.values.tolist() == [123.56, 123.57]
    assert ds.attrs["title"] == "nccl-tests all_reduce_perf on 12 GPUs"


def test_repeated_sizes_aggregate_or_stay_points():
    ds = nccl_tests.read(WOHLBIER, collective="allgather")
    # size 0 on lines 21-23: out of place 57.30, 57.12, 57.20 us, in place 57.09, 57.62, 57.31 us
    zero = ds.sel(bytes=0)
    assert zero.time.values.tolist() == pytest.approx([171.62e-6 / 3, 172.02e-6 / 3])
    assert int(zero.rows) == 3 and int(ds.rows.sel(bytes=48)) == 1
    assert zero.error.values.tolist() == [0.0, 0.0]
    assert ds.sizes == {"bytes": 29, "placement": 2} and ds.bytes.values[:2].tolist() == [0, 48]
    assert ds.attrs["aggregated_lines"] == "0 B: lines 21, 22, 23"
    ds = nccl_tests.read(WOHLBIER, collective="allgather", by="point")
    assert ds.sizes == {"point": 31, "placement": 2}
    assert ds.bytes.values[:4].tolist() == [0, 0, 0, 48]
    assert "redop" not in ds.coords and ds.dtype.item() == "float"
    assert ds.attrs["out_of_bounds"] == "4 FAILED" and ds.attrs["avg_busbw"] == 30.2993
    assert ds.error.values[-1].tolist() == [1.0, 1.0]


def test_mpirun_prefixes_and_nccl_log_lines(tmp_path):
    lines = TOGETHER.read_text().split("\n")
    lines.insert(20, "gpu-dp-2jvzl-pqq7p:1583223:1583301 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7")
    lines.insert(22, "Launch params (512, 1, 1) are larger than launch bounds (256) for kernel")
    prefixed = tmp_path / "mpirun.log"
    prefixed.write_text("\n".join(f"[1,0]<stdout>:{line}" for line in lines))
    ds = nccl_tests.read(prefixed)
    original = read_nccl_tests(TOGETHER)
    assert (ds.busbw == original.busbw).all() and ds.gpus.item() == 8
    assert ds.attrs["skipped_lines"] == "23"


def test_truncated_row_names_the_line(tmp_path):
    text = TOGETHER.read_text()
    cut = text[: text.index("210.34") + len("210.34")]
    path = tmp_path / "cut.out"
    path.write_text(cut)
    with pytest.raises(InputFileError, match=r"cut\.out, line 48: a result row needs 13 columns .* found 7"):
        read_nccl_tests(path)


def test_bad_number_names_line_and_column(tmp_path):
    path = tmp_path / "bad.out"
    path.write_text(TOGETHER.read_text().replace("35.08", "35.O8"))
    with pytest.raises(InputFileError, match=r"bad\.out, line 19: column 'time': '35\.O8' is not a number"):
        read_nccl_tests(path)


def test_header_without_rows_and_no_table(tmp_path):
    text = TOGETHER.read_text()
    path = tmp_path / "header.out"
    path.write_text(text[: text.index("           8             2")])
    with pytest.raises(
        InputFileError, match=r"header\.out, line 16: the result table has a header but no rows"
    ):
        read_nccl_tests(path)
    other = tmp_path / "notes.txt"
    other.write_text("# nThread 1 nGpus 8 minBytes 8\nnothing measured\n")
    with pytest.raises(InputFileError, match="holds no nccl-tests result table"):
        read_nccl_tests(other)


def test_unknown_collective_and_missing_binary(tmp_path):
    with pytest.raises(DlexploreError, match="unknown nccl-tests collective 'allscatter'"):
        nccl_tests.read(TOGETHER, collective="allscatter")
    lines = [line for line in TOGETHER.read_text().split("\n") if "all_reduce_perf" not in line]
    path = tmp_path / "anonymous.out"
    path.write_text("\n".join(lines))
    with pytest.warns(UserWarning, match="collective is 'unknown'"):
        ds = read_nccl_tests(path)
    assert ds.collective.item() == "unknown"
    assert nccl_tests.read(path, collective="allreduce").collective.item() == "allreduce"


def test_load_trace_points_elsewhere():
    with pytest.raises(DlexploreError, match="read_nccl_tests"):
        load_trace(TOGETHER)


def test_all_values_finite_where_printed():
    ds = read_nccl_tests(TOGETHER)
    assert all(math.isfinite(v) for v in ds.time.values.ravel())


def test_nccl_log_lines_of_a_host_named_by_a_digit_are_not_rows():
    # NCCL_DEBUG=INFO in a Docker container: the host is the container id "3767c65d25c4", and two
    # "Destroy COMPLETE" lines come between the last row and "# Out of bounds values"
    ds = read_nccl_tests(DOCKER)
    assert ds.bytes.values.tolist() == [134217728, 268435456, 536870912]
    assert ds.gpus.item() == 2 and ds.collective.item() == "allreduce"
    assert ds.time.sel(bytes=536870912).values.tolist() == pytest.approx([2789.9e-6, 2793.6e-6])
    assert ds.busbw.sel(bytes=268435456).values.tolist() == [185.74, 186.17]
    assert ds.attrs["avg_busbw"] == 179.465 and ds.attrs["skipped_lines"] == ""


def test_old_rccl_tests_header_with_colons():
    # "# nThread: 1 nGpus: 1 minBytes: 8 ...": rccl-tests of the ROCm 4 era, 2 nodes x 1 MI100
    ds = read_nccl_tests(LUMI)
    assert ds.sizes == {"bytes": 25, "placement": 2}
    assert ds.bytes.values[0] == 8 and ds.bytes.values[-1] == 134217728
    assert ds.gpus.item() == 2 and ds.attrs["nthreads"] == 1
    assert ds.time.sel(bytes=134217728).values.tolist() == pytest.approx([17524e-6, 17502e-6])
    assert ds.busbw.sel(bytes=67108864).values.tolist() == [7.04, 7.14]
    assert "error" in ds and float(ds.error.max()) == 0.0
    assert ds.attrs["avg_busbw"] == 2.31741


def test_rccl_tests_version_line():
    ds = read_nccl_tests(ROCM_5571)  # "rccl-tests: Version develop:33cc4df", after the header
    assert ds.attrs["nccl_tests_version"] == "rccl-tests develop:33cc4df"
    assert ds.sizes == {"bytes": 25, "placement": 2} and ds.gpus.item() == 2
    assert ds.attrs["avg_busbw"] == 3.51213


def test_a_test_that_died_names_what_it_reported(tmp_path):
    said = (
        r"the test reported: \"Test NCCL failure all_reduce\.cu:44 'unhandled cuda error / '\", after "
        r"NCCL warned: \"NCCL WARN Cuda failure 'CUDA driver is a stub library'\""
    )
    with pytest.raises(
        InputFileError,
        match=r"nccl-tests-issue-124-failed\.txt, line 41: the result table has a header but no rows; "
        + said,
    ):
        read_nccl_tests(FAILED_124)
    # the same run in a container named by a digit: its log and failure lines are not rows
    renamed = tmp_path / "container.txt"
    renamed.write_text(FAILED_124.read_text().replace("ArchLinux", "3767c65d25c4"))
    with pytest.raises(InputFileError, match=r"container\.txt, line 41: .*" + said):
        read_nccl_tests(renamed)
    # a harmless warning at start-up is not the cause when a later one is
    text = FAILED_124.read_text()
    early = "ArchLinux:6482:6500 [0] init.cc:1 NCCL WARN NUMA auto balancing enabled\n"
    noted = tmp_path / "numa.txt"
    noted.write_text(
        text.replace(
            "ArchLinux:6482:6500 [0] NCCL INFO comm 0x55a756b3ceb0",
            early + "ArchLinux:6482:6500 [0] NCCL INFO comm 0x55a756b3ceb0",
            1,
        )
    )
    with pytest.raises(InputFileError, match=said):
        read_nccl_tests(noted)


def test_old_output_without_the_hash_and_without_its_header():
    """nccl-tests before 2019 printed the column header and the summary without "#"; this paste
    (nccl-tests issue 37) also lost its "nThread ... nGpus" header, so the GPUs come from the
    echoed command's -g 8, with a warning that one process is assumed."""
    path = DATA / "nccl-tests-issue-37-no-hash.txt"
    assert detect_format(path) == "nccl-tests"
    with pytest.warns(UserWarning) as said:
        ds = read_nccl_tests(path)
    messages = " | ".join(str(w.message) for w in said)
    assert "no 'Using devices' list" in messages and "gpus = nThread x nGpus = 8" in messages
    assert "check of the test on line" in messages and "2 FAILED" in messages
    assert "variable 'error' says at which sizes" in messages  # this old format's check column
    assert ds.collective.item() == "allgather" and ds.gpus.item() == 8
    assert ds.bytes.values.tolist() == [4294967296]
    assert ds.time.values.ravel().tolist() == pytest.approx([29122e-6, 29169e-6])
    assert ds.busbw.values.ravel().tolist() == [129.05, 128.84]
    assert ds.error.values.ravel().tolist() == [1.0, 1.0]
    assert ds.attrs["out_of_bounds"] == "2 FAILED" and ds.attrs["avg_busbw"] == 128.942


def test_a_datatype_sweep_is_never_averaged_over_types():
    """``all_reduce_perf --datatype all`` on 16 H200s measures each size in 12 data types; by size,
    the 12 rows are 12 measurements (int8 389.40 GB/s, float 484.55 at 10 GiB), not repeats."""
    path = DATA / "h200-datatype-all-2.18.3.txt"
    with pytest.raises(
        InputFileError,
        match=r"h200-datatype-all-2\.18\.3\.txt, line 38: measures a size with several data types "
        r"\(bfloat16, double, f8e4m3, .*\): by='bytes' would average them; choose one \(dtype='bfloat16'; "
        r"--dtype on the command line\), or read every row with by='point'",
    ):
        read_nccl_tests(path)
    # one data type is one measurement per size: readable by size
    half = read_nccl_tests(path, dtype="half")
    assert half.bytes.values.tolist() == [10737418240, 21474836480, 42949672960]
    assert half.busbw.sel(placement="out-of-place").values.tolist() == [482.32, 483.42, 483.49]
    assert (
        half["count"].values.tolist() == [5368709120, 10737418240, 21474836480]
        and half.dtype.item() == "half"
    )
    with pytest.raises(
        InputFileError, match=r"measured no dtype='fp16'; its data types: bfloat16, .*, uint8$"
    ):
        read_nccl_tests(path, dtype="fp16")
    ds = read_nccl_tests(path, by="point")
    assert ds.sizes == {"point": 36, "placement": 2} and ds.gpus.item() == 16
    assert len(set(ds.dtype.values.tolist())) == 12
    float_10g = ((ds.dtype == "float") & (ds.bytes == 10737418240)).values
    assert ds.busbw.sel(placement="out-of-place").values[float_10g].tolist() == [484.55]
    assert ds.time.sel(placement="out-of-place").values[float_10g] == pytest.approx([41549.0e-6])
    int8_10g = ((ds.dtype == "int8") & (ds.bytes == 10737418240)).values
    assert ds.busbw.sel(placement="out-of-place").values[int8_10g].tolist() == [389.40]


def test_a_test_that_died_before_its_table_names_its_failure():
    # nccl-tests 2.17.8 on 8 GH200s, the devices busy: the header and device list, then failures
    with pytest.raises(
        InputFileError,
        match=r"gh200-busy-failure-2\.17\.8\.txt, line 14: the test whose header is on line 3 died before "
        r"its result table; the test reported: \"Test CUDA failure common\.cu:1304 'CUDA-capable "
        r"device\(s\) is/are busy or unavailable'\"",
    ):
        read_nccl_tests(DATA / "gh200-busy-failure-2.17.8.txt")


def test_a_failed_check_is_read_with_a_warning():
    # the same GH200 cluster on 2 nodes: 96 and 32 wrong elements at 1 MiB, "4 FAILED"
    with pytest.warns(
        UserWarning, match=r"check of the test on line 3 failed \('Out of bounds values : 4 FAILED'\)"
    ):
        ds = read_nccl_tests(DATA / "gh200-2node-wrong-2.17.8.txt")
    assert ds.sizes == {"bytes": 25, "placement": 2} and ds.gpus.item() == 2
    assert ds.wrong.sel(bytes=1048576).values.tolist() == [96, 32]
    assert int(ds.wrong.sum()) == 128


def test_a_test_that_died_beside_one_that_ran_is_a_warning(tmp_path):
    # two runs logged to one file: the H100 all-reduce that ran, then the GH200 one that died
    both = tmp_path / "two-runs.log"
    ran = TOGETHER.read_text()
    both.write_text(ran + (DATA / "gh200-busy-failure-2.17.8.txt").read_text())  # as two runs log
    header = len(ran.splitlines()) + 3
    with pytest.warns(
        UserWarning,
        match=rf"two-runs\.log, line {header + 11}: the test whose header is on line {header} died before "
        r"its result table; the test reported: \"Test CUDA failure .*\"; the file's other tests are read",
    ):
        datasets = nccl_tests.read_all(both)
    assert len(datasets) == 1 and datasets[0].gpus.item() == 8
    # asked for by name, the test that died says so rather than "holds no allgather test"
    gathered = tmp_path / "gather-died.log"
    died = (DATA / "gh200-busy-failure-2.17.8.txt").read_text()
    gathered.write_text(ran + died.replace("all_reduce_perf", "all_gather_perf"))
    with (
        pytest.warns(UserWarning),
        pytest.raises(
            InputFileError,
            match=rf"gather-died\.log, line {header + 11}: the test whose header is on line {header} died",
        ),
    ):
        read_nccl_tests(gathered, collective="allgather")


@pytest.mark.parametrize(
    "name, collective, gpus, placement, time_us, algbw, busbw",
    [
        ("mscclpp-alltoall-1n8p.txt", "alltoall", 8, "out-of-place", 7186.2, 149.42, 130.74),
        ("mscclpp-alltoall-2n8p.txt", "alltoall", 16, "out-of-place", 23275, 46.13, 43.25),
        ("mscclpp-allgather-1n8p.txt", "allgather", 8, "in-place", 73.02, 0.01, 0.01),
    ],
)
def test_mscclpp_test_tables_with_a_placement_left_blank(
    name, collective, gpus, placement, time_us, algbw, busbw
):
    """mscclpp-test prints nccl-tests' table without the type column, in-place first, and leaves
    blank the placement it did not run: each value is read under the header it ends under."""
    ds = read_nccl_tests(DATA / name, collective=collective, gpus=gpus)
    assert ds.placement.values.tolist() == ["in-place", "out-of-place"] and "dtype" not in ds.coords
    ran = ds.sel(placement=placement)
    assert ran.time.values.tolist() == pytest.approx([time_us * 1e-6])
    assert (ran.algbw.values.tolist(), ran.busbw.values.tolist()) == ([algbw], [busbw])
    other = ds.sel(placement="in-place" if placement == "out-of-place" else "out-of-place")
    assert np.isnan(other.time.values).all() and np.isnan(other.busbw.values).all()


def test_a_row_cut_inside_a_placement_is_still_refused(tmp_path):
    # blank cells are read only as whole placements: a value missing inside one is a cut row
    text = (DATA / "mscclpp-alltoall-1n8p.txt").read_text().replace("  149.42  130.74      0", "")
    cut = tmp_path / "cut.txt"
    cut.write_text(text)
    with pytest.raises(InputFileError, match=r"cut\.txt, line 8: a result row needs 10 columns"):
        read_nccl_tests(cut, collective="alltoall", gpus=8)


def test_mscclpp_test_header_devices_and_runs(tmp_path):
    """mscclpp-test's own header (``# minBytes ...``, as test/mscclpp-test/common.cc prints it) and
    device list before the real 1-node all-gather table; two runs in one log, neither with the
    "# Avg bus bandwidth" line nccl-tests ends a table with; a -c 0 row without its #wrong cell."""
    header = (
        "# minBytes 1024 maxBytes 1024 step: 2(factor) warmup iters: 10 iters: 100 validation: 1\n"
        "#\n# Using devices\n"
        + "".join(
            f"#  Rank  {r} Pid  1234{r} on   node-001 device  {r} [0x1{r}] NVIDIA A100\n" for r in range(4)
        )
    )
    table = (DATA / "mscclpp-allgather-1n8p.txt").read_text()
    log = tmp_path / "two-runs.log"
    log.write_text(
        header + table + header + table.replace("73.02    0.01    0.01      0", "73.02    0.01    0.01")
    )
    first, second = nccl_tests.read_all(log)
    assert first.gpus.item() == second.gpus.item() == 4  # the device list, not 1 assumed
    assert first.time.sel(placement="in-place").values.tolist() == pytest.approx([73.02e-6])
    assert second.time.sel(placement="in-place").values.tolist() == pytest.approx([73.02e-6])
    assert np.isnan(second.wrong.sel(placement="in-place").values).all()  # -c 0: not checked


def test_choices_are_for_nccl_tests_output_and_roots_are_numbers():
    with pytest.raises(DlexploreError, match=r"dtype='float' chooses rows of nccl-tests output only"):
        dlexplore.measured.load("deepbench-allreduce-p100", dtype="float")
    h200 = DATA / "h200-datatype-all-2.18.3.txt"
    assert read_nccl_tests(h200, dtype="float", root=-1.0).sizes == {"bytes": 3, "placement": 2}
    with pytest.raises(InputFileError, match=r"measured no root=0; its roots: -1"):
        read_nccl_tests(h200, dtype="float", root=0)


def test_a_count_of_wrong_elements_printed_in_exponent_form():
    # nccl-tests prints #wrong with %g: a million wrong elements is "1.04858e+06" (SHARP on 3090s)
    with pytest.warns(UserWarning, match=r"108 FAILED"):
        ds = read_nccl_tests(DATA / "sharp-3090-2node-wrong-exponent.txt")
    assert ds.wrong.sel(bytes=2097152).values.tolist() == [1.04858e06, 1.04858e06]
    assert ds.wrong.sel(bytes=131072).values.tolist() == [65536, 65536]
    assert ds.busbw.sel(bytes=16777216).values.tolist() == [6.96, 6.98]


@pytest.mark.parametrize(
    "name, gpus, named, collective",
    [
        # 16 device lines and no nThread header; the paste names no binary (busbw/algbw: 2 x 15/16)
        ("nccl-tests-issue-290-devices-without-header.txt", 16, False, "allreduce"),
        ("coreweave-pr-43-gb200-last-device-line.txt", 72, False, "allreduce"),  # "Rank 71" alone
        # "Rank 127" alone; the binary named only by "# Collective test concluded: all_reduce_perf"
        ("oci-hpc-oke-gb200-concluded-line.txt", 128, True, "allreduce"),
        # Ray's and mpirun's prefixes on every line; no binary named (busbw/algbw: 15/16)
        ("skypilot-h200-ray-mpirun-prefixes.txt", 16, False, "allgather"),
    ],
)
def test_the_ranks_of_a_pasted_device_list(name, gpus, named, collective):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = read_nccl_tests(DATA / name, **({} if named else {"collective": collective}))
    assert not [w for w in said if "Using devices" in str(w.message)]
    assert ds.gpus.item() == gpus and ds.collective.item() == collective
    factor = busbw_factor(ds.collective.item(), gpus)
    big = ds.sel(bytes=ds.bytes.values.max(), placement="out-of-place")
    assert float(big.busbw) == pytest.approx(float(big.algbw) * factor, abs=0.01 * factor)


def test_the_ranks_from_busbw_over_algbw_and_each_tests_summary_lines():
    """rccl-tests all_gather and all_reduce pasted without their device lists: busbw / algbw says
    32 ranks (31/32 and 2 x 31/32 on the largest rows), with a warning; each test keeps its own
    "# Avg bus bandwidth" line (37.9868 and 43.7269 GB/s) as a coordinate on test."""
    path = DATA / "rccl-issue-1490-mi250x-no-device-list.txt"
    with pytest.warns(UserWarning, match=r"no 'Using devices' list .*; gpus = 32, as its busbw / algbw says"):
        ds = dlexplore.load(path)
    assert ds.collective.values.tolist() == ["allgather", "allreduce"] and ds.gpus.item() == 32  # both
    assert ds.avg_busbw.values.tolist() == [37.9868, 43.7269] and ds.avg_busbw.attrs["units"] == "GB/s"
    assert ds.out_of_bounds.values.tolist() == ["0 OK", "0 OK"]


def test_the_ranks_an_echoed_mpirun_launched(tmp_path):
    """nccl-tests issue 78: "mpirun -n 256 ... all_reduce_perf ... -g 1" with neither "# nThread"
    header nor device list. No row's two decimals fix busbw / algbw to one count: by hand, with each
    printed value within 0.005 GB/s, 67108864's in-place 22.26 / 44.35 admits 240.7 to 287.2 ranks
    and 536870912's out-of-place 33.29 / 66.31 233.7 to 261.1; all rows together 241 to 261. The
    command's 256 processes x 1 GPU lies there: 256, not the one process nThread x nGpus assumes."""
    path = DATA / "nccl-tests-issue-78-mpirun-256-no-devices.txt"
    with pytest.warns(
        UserWarning, match=r"gpus = 256: the echoed command launches 256 process.*admits 241 to 261"
    ):
        ds = dlexplore.load(path)
    assert ds.gpus.item() == 256 and ds.collective.item() == "allreduce"
    assert ds.sel(bytes=1073741824, placement="out-of-place").busbw.item() == 71.55
    # the same paste with the command but not its launcher: the rows' counts rule one process out
    lines = path.read_text().splitlines()
    pasted = tmp_path / "no-launcher.txt"
    pasted.write_text("\n".join([lines[0][lines[0].index("./mpi-project") :], *lines[1:]]) + "\n")
    with pytest.warns(
        UserWarning, match=r"admits 241 to 261 ranks .* not nThread x nGpus = 1 .* gpus = 251, an estimate"
    ):
        assert dlexplore.load(pasted).gpus.item() == 251  # the middle of 241 and 261


def test_damaged_counts_beside_the_launcher_do_not_overflow(tmp_path):
    # found by the fuzzing harness: a busbw beyond any count of ranks, a process count beyond any
    # launcher; the first leaves the command's 256, the second the rows' estimate (241 to 261)
    text = (DATA / "nccl-tests-issue-78-mpirun-256-no-devices.txt").read_text()
    huge_busbw = tmp_path / "huge-busbw.txt"
    huge_busbw.write_text(text.replace("71.55", "7155000000000000000000000"))
    with pytest.warns(UserWarning, match="gpus = 256: the echoed command"):
        assert dlexplore.load(huge_busbw).gpus.item() == 256
    huge_launch = tmp_path / "huge-launch.txt"
    huge_launch.write_text(text.replace("mpirun -n 256", "mpirun -n 25600000000000000000000"))
    with pytest.warns(UserWarning, match="gpus = 251, an estimate"):
        assert dlexplore.load(huge_launch).gpus.item() == 251


def test_a_device_list_printed_twice_or_cut_short(tmp_path):
    """The 8-H100 all-reduce with its device list printed twice (older MPI runs print the header
    once per process) is 8 ranks; with its last 4 lines cut from the paste, busbw / algbw (2 x 7/8,
    which nccl-tests computes from the communicator's size) says 8, with a warning."""
    text = TOGETHER.read_text()
    lines = text.splitlines(keepends=True)
    devices = [line for line in lines if re.match(r"#\s+Rank\s+\d", line)]
    assert len(devices) == 8
    twice = tmp_path / "twice.out"
    twice.write_text(text.replace("".join(devices), "".join(devices) * 2))
    assert read_nccl_tests(twice).gpus.item() == 8
    cut = tmp_path / "cut.out"
    cut.write_text(text.replace("".join(devices[4:]), ""))
    with pytest.warns(
        UserWarning, match=r"device list of the test on line \d+ shows 4 ranks but its busbw / algbw says 8"
    ):
        assert read_nccl_tests(cut).gpus.item() == 8


def test_a_paste_cut_before_the_summary_lines_is_read_with_a_warning(tmp_path):
    """together.ai's 8-H100 all-reduce (31 rows on lines 18-48, then "# Out of bounds values" and
    "# Avg bus bandwidth : 122.955") cut after line 40: its first 23 rows are read, avg_busbw is NaN and a
    warning names line 40; whole, or cut after the first summary line, nothing is said."""
    lines = TOGETHER.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.out"
    cut.write_text("".join(lines[:40]))
    said = r"cut\.out, line 40: .* ends after 23 rows without nccl-tests. closing"
    with pytest.warns(UserWarning, match=said):
        ds = read_nccl_tests(cut)
    assert ds.sizes["bytes"] == 23 and math.isnan(ds.attrs["avg_busbw"])
    assert ds.sel(bytes=8, placement="out-of-place").time.item() == pytest.approx(34.98e-6)
    for shown, kept in ((TOGETHER, 50), (tmp_path / "to-bounds.out", 49)):
        if shown != TOGETHER:
            shown.write_text("".join(lines[:kept]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert read_nccl_tests(shown).sizes["bytes"] == 31
    # mscclpp-test ends its tables with "# Out of bounds values" alone
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_nccl_tests(DATA / "mscclpp-allgather-1n8p.txt", collective="allgather", gpus=8)
