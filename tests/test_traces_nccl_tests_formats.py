"""nccl-tests outputs of the newest versions and of forks (tests/data/traces/nccl-tests/README.txt
says where each file comes from): the per-iteration columns of nccl-tests 2.19 (-I 1), its JSON
results file (-J), rccl-tests' algo/proto/nchannels columns and "# rccl-tests version" line, a
fork's cpu_time column, and the '# Avg bus bandwidth' check of a paste that left rows out. Every
expected value is read off the files by eye."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import dlexplore
from dlexplore.cli import main
from dlexplore.errors import InputFileError
from dlexplore.traces import detect_format, read_nccl_tests

DATA = Path(__file__).parent / "data" / "traces" / "nccl-tests"
PER_ITERATION_LOG = DATA / "gpu-systems-lab-t4-2.19.7-per-iteration.log"
RESULTS_JSON = DATA / "gpu-systems-lab-t4-2.19.7-results.json"
DIED_JSON = DATA / "gpu-systems-lab-t4-attempt-died-results.json"
RCCL_ALGO = DATA / "rccl-tests-mi350x-algo-proto-nchannels.txt"
RCCL_2179 = DATA / "rccl-tests-2.17.9-radeon-alltoall.txt"
PCCL = DATA / "pccl-tests-m890-cpu-time.txt"


def quietly(path: Path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return read_nccl_tests(path, **options)


def test_per_iteration_columns_of_nccl_tests_2_19():
    """Line 80: 134217728 B, out-of-place 23418.7 us 5.73 GB/s, i_min 23194.6, i_max 23677.3,
    i_p99 23677.3 us, i_cv% 0.49; in-place 23475.4 us, i_min 23258.4, i_cv% 0.47. Two T4s of one
    process (nGpus 2), '# Avg bus bandwidth : 5.7243'."""
    ds = quietly(PER_ITERATION_LOG)
    assert (ds.gpus.item(), ds.collective.item(), ds.sizes["bytes"]) == (2, "allreduce", 1)
    out, inplace = (ds.sel(bytes=134217728, placement=p) for p in ("out-of-place", "in-place"))
    assert out.time.item() == pytest.approx(23418.7e-6) and out.algbw.item() == 5.73
    assert out.time_min.item() == pytest.approx(23194.6e-6) and out.time_max.item() == pytest.approx(
        23677.3e-6
    )
    assert out.time_p99.item() == pytest.approx(23677.3e-6) and out.time_cv.item() == 0.49
    assert inplace.time_min.item() == pytest.approx(23258.4e-6) and inplace.time_cv.item() == 0.47
    assert ds.time_min.attrs["units"] == "s" and ds.time_cv.attrs["units"] == "%"
    assert ds.attrs["avg_busbw"] == 5.7243
    assert ds.attrs["nccl_tests_version"] == "2.19.7 nccl-headers=22903 nccl-library=22903"


def test_json_results_file_reads_as_the_printed_table_of_the_same_run():
    """The same run's -J file: the JSON's numbers (23418.69756 us, alg_bw 5.731221, min_us
    23194.591522, cv_pct 0.489947), which the log printed rounded; ranks = 1 device entry (one
    process) x nthreads 1 x ngpus 2; NCCL 22903 = 2.29.3."""
    assert detect_format(RESULTS_JSON) == "nccl-tests"
    ds = quietly(RESULTS_JSON)
    printed = quietly(PER_ITERATION_LOG)
    assert ds.gpus.item() == 2 and ds.collective.item() == "allreduce" and ds.dtype.item() == "half"
    out = ds.sel(bytes=134217728, placement="out-of-place")
    assert out.time.item() == pytest.approx(23418.69756e-6) and out.algbw.item() == 5.731221
    assert out.time_min.item() == pytest.approx(23194.591522e-6) and out.time_cv.item() == 0.489947
    for name, printed_to in (("time", 0.05e-6), ("algbw", 0.005), ("time_min", 0.05e-6), ("time_cv", 0.005)):
        assert np.abs(ds[name].values - printed[name].values).max() <= printed_to, name
    assert ds.attrs["avg_busbw"] == 5.724297 and ds.attrs["out_of_bounds"] == "0 OK"
    assert ds.attrs["nccl_tests_version"] == "JSON results v3, NCCL 2.29.3"
    assert ds.attrs["devices"].startswith("Rank  0 Group  0 Pid   1718 on 22f64f592750 device  0")
    assert main(["trace", "summary", str(RESULTS_JSON), "--format", "csv"]) == 0


def test_json_results_of_a_run_that_died_or_damaged_are_named(tmp_path):
    with pytest.raises(InputFileError, match="holds the run's configuration but no results"):
        dlexplore.load(DIED_JSON)
    text = RESULTS_JSON.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(InputFileError, match=r"cut\.json: is not complete JSON \(it ends early"):
        read_nccl_tests(cut)
    doc = json.loads(text)
    doc["results"][0]["in_place"]["alg_bw"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, separators=(",", ":")))
    with pytest.raises(InputFileError, match=r"results\[0\]\.in_place\.alg_bw is 'fast'; expected a number"):
        read_nccl_tests(bad)
    doc["results"][0]["in_place"] = None  # a placement that did not run: NaN, not an error
    bad.write_text(json.dumps(doc, separators=(",", ":")))
    assert np.isnan(quietly(bad).sel(placement="in-place").time.values).all()


def test_rccl_tests_algo_proto_and_channels_per_size_and_a_trimmed_paste():
    """Three rows kept of a longer sweep: 1 MiB 'Direct SIMPLE 32', 2 MiB and 256 MiB 'RING SIMPLE
    32'. '# Avg bus bandwidth : 249.115' is the whole sweep's; the six busbw here average
    (25.78 + 25.72 + 45.18 + 45.45 + 365.33 + 365.76) / 6 = 145.54: rows were left out."""
    with pytest.warns(
        UserWarning, match=r"\(249\.115 GB/s\) is not the mean busbw of its 6 values \(145\.5 GB/s\)"
    ):
        ds = read_nccl_tests(RCCL_ALGO)
    assert ds.algo.values.tolist() == ["Direct", "RING", "RING"] and set(ds.proto.values) == {"SIMPLE"}
    assert ds.nchannels.values.tolist() == [32, 32, 32] and ds.nchannels.attrs["units"] == "count"
    assert ds.sel(bytes=268435456, placement="in-place").busbw.item() == 365.76
    assert ds.gpus.item() == 16  # busbw / algbw = 2 x 15/16 (the device list shows 2 of the ranks)


def test_rccl_tests_version_line_of_2_17_9():
    ds = quietly(RCCL_2179)
    version = "rccl-tests 2.17.9-develop:2596ca5f71 rccl-headers=22803 rccl-library=22707"
    assert ds.attrs["nccl_tests_version"] == version
    assert (ds.collective.item(), ds.gpus.item(), ds.sel(bytes=0).rows.item()) == ("alltoall", 8, 4)
    assert ds.attrs["avg_busbw"] == 58.3947


def test_a_forks_cpu_time_column_is_the_time_on_the_hosts_clock():
    """pccl-tests' header names the time column cpu_time: 29 rows, 8 B out-of-place 31.55 us, 2 GiB
    in-place 11259.6 us 333.77 GB/s, on 8 ranks (the device list)."""
    ds = quietly(PCCL)
    assert (ds.sizes["bytes"], ds.gpus.item()) == (29, 8)
    assert ds.sel(bytes=8, placement="out-of-place").time.item() == pytest.approx(31.55e-6)
    assert ds.sel(bytes=2147483648, placement="in-place").busbw.item() == 333.77
    assert "host's clock (the 'cpu_time' column)" in ds.time.attrs["long_name"]


def test_columns_out_of_nccl_tests_order_are_refused(tmp_path):
    text = PER_ITERATION_LOG.read_text().replace("i_min    i_max", "i_max    i_min", 1)
    swapped = tmp_path / "swapped.log"
    swapped.write_text(text)
    with pytest.raises(InputFileError, match=r"swapped\.log, line 67: unexpected measurement columns"):
        read_nccl_tests(swapped)
    # (found by the fuzzing harness) a last group that is no group: refused, not a TypeError
    broken = tmp_path / "broken.log"
    lines = PER_ITERATION_LOG.read_text().splitlines(keepends=True)
    lines[66] = lines[66][::-1].replace("wbsub", "sugob", 1)[::-1]  # the in-place group's busbw
    broken.write_text("".join(lines))
    with pytest.raises(InputFileError, match=r"broken\.log, line 67: unexpected measurement columns"):
        read_nccl_tests(broken)
