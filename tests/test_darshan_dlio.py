"""Darshan and DLIO readers on files written by the real tools or to their sources' letter.

- darshan/pq_app_readAB_writeC.darshan: a real Darshan 3.2.1 log (4 MPI ranks, ranks 0,2 read B and
  1,3 read A, 10 reads of 5000 bytes each), copied from PyDarshan 3.5.0's
  ``darshan/examples/darshan-graph/pq_app_readAB_writeC_id71326_7-31-5658-2037904274838284930_55623.darshan``.
- darshan/pq_app_readAB.darshan-parser.txt: the POSIX read records of that log written in the text
  format that darshan-util's ``darshan-parser`` prints (darshan-hpc/darshan,
  darshan-util/darshan-parser.c: header ``# key: value`` lines, then tab-separated
  ``<module> <rank> <record id> <counter> <value> <file name> <mount pt> <fs type>``), values from
  the binary log rounded to 6 decimals as darshan-parser's ``%f`` does.
- dlio/summary.json: keys as written by argonne-lcf/dlio_benchmark
  ``dlio_benchmark/utils/statscounter.py`` (StatsCounter.end_run/save_data); numbers chosen by hand:
  per-epoch throughput 100 and 120 samples/s, record_length 146600628 bytes (unet3d), so
  train_io_mean_MB_per_second = 110 x 146600628 / 2**20.
- dlio-checkpointing/summary.json: a real MLPerf Storage v3.0 checkpointing run (Llama 3 1T, 1024
  accelerators on 16 hosts), closed/NVIDIA/results/aistore-12n-oci-bm-denseio-e5-128-16client/
  checkpointing/llama3-1t/20260718_030234/summary.json of mlcommons/storage_results_v3.0, commit
  068d91f6d7bc57a6e6309f59d73980fe9e6e0336, copied from the code-search index's stored text (5,376
  characters, the size the index records).
"""

import json
from pathlib import Path

import pytest
from _real_traces import real

from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.traces.darshan import read_darshan, read_darshan_parser_text
from dlexplore.traces.dlio import read_dlio_summary

DATA = Path(__file__).parent / "data" / "traces"
READ_TIMES = [1.701829969533719e-04, 1.4365985407494009e-05, 2.9745016945526004e-05, 2.91660035145469e-05]


def test_read_darshan_binary():
    log = read_darshan(DATA / "darshan" / "pq_app_readAB_writeC.darshan")
    assert log.meta["nprocs"] == 4
    readers = log.records[log.records.bytes_read > 0]
    assert sorted(readers["rank"]) == [0, 1, 2, 3]
    assert set(readers["bytes_read"]) == {5000} and set(readers["reads"]) == {10}
    assert readers["file"].str.endswith(("/A", "/B")).all()
    s = log.summary
    assert float(s.bytes_read) == 20000 and s.bytes_read.attrs["units"] == "bytes"
    assert float(s.read_time) == pytest.approx(sum(READ_TIMES))
    assert float(s.read_bandwidth_reader) == pytest.approx(20000 / sum(READ_TIMES) / 1e9)
    assert s.read_bandwidth_reader.attrs["units"] == "GB/s"
    assert float(s.read_bandwidth_job) == pytest.approx(20000 / 1.0 / 1e9)  # run time 1 s


def test_read_darshan_bad_file(tmp_path):
    bad = tmp_path / "x.darshan"
    bad.write_bytes(b"not a darshan log")
    with pytest.raises(InputFileError, match="x.darshan"):
        read_darshan(bad)


def test_read_darshan_parser_text():
    log = read_darshan_parser_text(DATA / "darshan" / "pq_app_readAB.darshan-parser.txt")
    assert log.meta == {"jobid": 71326, "nprocs": 4, "run_time": 1.0}
    assert len(log.records) == 4
    assert float(log.summary.bytes_read) == 20000
    assert float(log.summary.read_time) == pytest.approx(sum(round(t, 6) for t in READ_TIMES))
    assert int(log.summary.files) == 2


def test_read_darshan_parser_text_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("# nprocs: 4\nPOSIX\t0\t12\tPOSIX_READS\tten\t/a\t/\text4\n")
    with pytest.raises(InputFileError, match=r"bad.txt, line 2"):
        read_darshan_parser_text(bad)
    short = tmp_path / "short.txt"
    short.write_text("# nprocs: 4\nPOSIX 0 12\n")
    with pytest.raises(InputFileError, match=r"line 2.*tab-separated"):
        read_darshan_parser_text(short)
    with pytest.raises(InputFileError, match="no POSIX"):
        (tmp_path / "empty.txt").write_text("# nprocs: 1\n")
        read_darshan_parser_text(tmp_path / "empty.txt")


def test_read_darshan_parser_text_counter_beyond_64_bits(tmp_path):
    # 2**64 + 5 bytes read: once parsed as a float and cast, it wrapped to a negative count.
    real = (DATA / "darshan" / "pq_app_readAB.darshan-parser.txt").read_text().splitlines()
    number = next(i for i, line in enumerate(real) if "\tPOSIX_BYTES_READ\t" in line)
    cells = real[number].split("\t")
    for value in (str(2**64 + 5), "1e19", "nan", "2.5"):
        cells[4] = value
        lines = real[:number] + ["\t".join(cells)] + real[number + 1 :]
        path = tmp_path / "big.txt"
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(InputFileError, match=rf"big.txt, line {number + 1}: counter POSIX_BYTES_READ"):
            read_darshan_parser_text(path)
    cells[4] = str(2**63 - 1)  # the largest that fits is kept exactly
    path.write_text("\n".join(real[:number] + ["\t".join(cells)] + real[number + 1 :]) + "\n")
    log = read_darshan_parser_text(path)
    assert int(log.records.bytes_read.max()) == 2**63 - 1


NAMD = DATA / "darshan" / "namd2-darshan-parser.txt"


def test_darshan_text_job_totals_count_stdio():
    """NAMD (32 processes, run time 1572 s) reads its inputs with fread: STDIO_BYTES_READ 199,275
    (par_all27_prot_na.inp) + 85,330,313 (stmv.pdb) + 127,104,164 (stmv.psf) = 212,633,752 bytes, beside
    POSIX's 3,217 (summed from the file with awk). Once the totals held POSIX only: 3,217 bytes and
    2.0e-9 GB/s."""
    log = read_darshan_parser_text(NAMD)
    s = log.summary
    assert log.meta == {"jobid": 2135028, "nprocs": 32, "run_time": 1572.0}
    assert s.attrs["modules"] == "POSIX, STDIO"
    assert (log.records["module"] == "POSIX").sum() == 13 and (log.records["module"] == "STDIO").sum() == 4
    assert float(s.stdio_bytes_read) == 199_275 + 85_330_313 + 127_104_164 == 212_633_752
    assert float(s.posix_bytes_read) == 3_217
    assert float(s.bytes_read) == 3_217 + 212_633_752
    assert float(s.bytes_written) == 6_451_002_544 + 203_059  # POSIX output files + STDIO's <STDOUT>
    assert float(s.read_bandwidth_job) == pytest.approx(212_636_969 / 1572 / 1e9)  # 1.35e-4 GB/s
    assert s.read_bandwidth_job.attrs["units"] == "GB/s"
    assert "POSIX + STDIO" in s.bytes_read.attrs["long_name"]
    # 13 POSIX and 4 STDIO records name 15 files: stmv.pdb and stmv.psf are in both modules
    assert int(s.files) == 15


def test_darshan_meta_fraction_is_a_share_of_all_io_time():
    """Metadata time over read + write + metadata time. POSIX alone: 0.475938 / (0.068034 + 4.261469
    + 0.475938) = 0.099 (it was 0.875 when write time was left out); the job with STDIO's 6.958372 s
    read, 0.114194 s write and 0.000568 s metadata: 0.476506 / 11.878575 = 0.0401."""
    s = read_darshan_parser_text(NAMD).summary
    posix = float(s.posix_meta_time) / float(s.posix_read_time + s.posix_write_time + s.posix_meta_time)
    assert posix == pytest.approx(0.475938 / (0.068034 + 4.261469 + 0.475938)) and round(posix, 3) == 0.099
    assert float(s.meta_fraction) == pytest.approx(0.476506 / (7.026406 + 4.375663 + 0.476506))
    assert "read + write + metadata" in s.meta_fraction.attrs["long_name"]


def test_darshan_negative_counters_are_left_out_of_the_totals(tmp_path):
    """Darshan 3.10's sample log (shared/traces-real) holds STDIO_F_WRITE_TIME = -2662.746634 s for
    <STDERR> (PyDarshan reads the same): added in, the job's write time was less than POSIX's alone.
    The text path: NAMD's <STDOUT> write time 0.114194 s made -1 (Darshan's 'not counted')."""
    sample = real("darshan/darshan__tests__input__sample.darshan").parent
    with pytest.warns(
        UserWarning, match=r"1 negative counter\(s\) .* STDIO write_time of <STDERR> \(rank 0\): -2662\.7"
    ):
        log = read_darshan(sample / "darshan__tests__input__sample.darshan")
    s = log.summary
    assert 0 <= float(s.stdio_write_time) < 1e-3
    assert float(s.write_time) == pytest.approx(float(s.posix_write_time + s.stdio_write_time))
    text = NAMD.read_text().replace(
        "STDIO_F_WRITE_TIME\t0.114194\t<STDOUT>", "STDIO_F_WRITE_TIME\t-1\t<STDOUT>"
    )
    path = tmp_path / "namd-negative.txt"
    path.write_text(text)
    with pytest.warns(UserWarning, match=r"STDIO write_time of <STDOUT> \(rank -1\): -1"):
        s = read_darshan_parser_text(path).summary
    assert float(s.stdio_write_time) == 0.0
    assert float(s.write_time) == pytest.approx(4.261469)  # POSIX's alone
    # a read time not recorded: its bytes leave the per-reader bandwidth too (stmv.psf's STDIO read:
    # 127,104,164 bytes in 6.694936 s of the 7.026406 s)
    text = NAMD.read_text().replace(
        "STDIO_F_READ_TIME\t6.694936\t/home1/06333/aroraish/stmv_io/stmv.psf",
        "STDIO_F_READ_TIME\t-1\t/home1/06333/aroraish/stmv_io/stmv.psf",
    )
    path.write_text(text)
    with pytest.warns(UserWarning, match="stmv.psf"):
        s = read_darshan_parser_text(path).summary
    assert float(s.read_bandwidth_reader) == pytest.approx(
        (212_636_969 - 127_104_164) / (7.026406 - 6.694936) / 1e9
    )


def test_darshan_binary_counts_stdio():
    """The pq_app log's STDIO module wrote 1,064 bytes (PyDarshan: STDIO_BYTES_WRITTEN), POSIX 40."""
    s = read_darshan(DATA / "darshan" / "pq_app_readAB_writeC.darshan").summary
    assert float(s.stdio_bytes_written) == 1064 and float(s.posix_bytes_written) == 40
    assert float(s.bytes_written) == 1104 and s.attrs["modules"] == "POSIX, STDIO"


def test_darshan_text_warns_of_a_module_left_out(tmp_path):
    # the real text, plus an MPI-IO record (layered over POSIX: no warning) and a DFS one (warned)
    text = (DATA / "darshan" / "pq_app_readAB.darshan-parser.txt").read_text()
    extra = (
        "MPI-IO\t0\t12\tMPIIO_BYTES_READ\t8000\t/a\t/\text4\nDFS\t0\t13\tDFS_BYTES_READ\t4096\t/b\t/\tdfs\n"
    )
    path = tmp_path / "more.txt"
    path.write_text(text + extra)
    with pytest.warns(UserWarning, match=r"more.txt: Darshan module DFS moved 4096 bytes") as caught:
        log = read_darshan_parser_text(path)
    assert not any("MPI-IO" in str(w.message) for w in caught)
    assert float(log.summary.bytes_read) == 20000


def test_read_dlio_summary():
    ds = read_dlio_summary(DATA / "dlio")  # the folder holding summary.json
    assert list(ds.train_throughput_samples_per_second.values) == [100.0, 120.0]
    assert ds.train_au_percentage.attrs["units"] == "%"
    assert float(ds.train_io_mean_GB_per_second) == pytest.approx(110 * 146600628 / 1e9)
    assert float(ds.record_length) == pytest.approx(146600628)
    assert ds.attrs["num_accelerators"] == 8 and ds.attrs["source"].startswith("measured: ")


def test_read_dlio_summary_errors(tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text('{\n  "metric": {\n    "train_au_percentage": [1,\n}')
    with pytest.raises(InputFileError, match=r"summary.json, line 4"):
        read_dlio_summary(bad)
    bad.write_text('{"metric": {"train_au_percentage": [90]}}')
    with pytest.raises(DlexploreError, match="train_throughput_samples_per_second"):
        read_dlio_summary(bad)
    with pytest.raises(InputFileError, match="cannot read"):
        read_dlio_summary(tmp_path / "missing.json")


def test_read_dlio_checkpointing_summary():
    """A checkpointing run has scalars only, in DLIO's binary GB: 15,426.6 GiB written at 133.27
    GiB/s is 115.8 s a checkpoint, the mean duration it records (116.4 s) within 1%."""
    ds = read_dlio_summary(DATA / "dlio-checkpointing")
    assert ds.attrs["workload"] == "checkpointing" and ds.attrs["num_accelerators"] == 1024
    assert ds["save_checkpoint_io_mean_GB_per_second"].attrs["units"] == "GiB/s"
    size, rate = float(ds["checkpoint_size_GB"]), float(ds["save_checkpoint_io_mean_GB_per_second"])
    assert size / rate == pytest.approx(float(ds["save_checkpoint_duration_mean_seconds"]), rel=0.01)
    assert float(ds["checkpoint_bytes"]) == 15426.589264154434 * 2**30
    assert "train_au_percentage" not in ds and "load_checkpoint_io_mean_GB_per_second" not in ds
    assert read_dlio_summary(DATA / "dlio").attrs["workload"] == "training"


def test_dlio_keeps_mlperf_verdict_and_model():
    """MLPerf Storage v0.5 (ANL, BERT, 8 accelerators): model "bert", verdict "success" (mean AU
    99.53% against BERT's 90%); both were dropped once."""
    ds = read_dlio_summary(DATA / "dlio" / "v05-ANL-bert-8acc")
    assert ds.attrs["model"] == "bert" and ds.attrs["train_au_meet_expectation"] == "success"
    assert ds.attrs["num_accelerators"] == 8 and ds.attrs["epochs"] == 1
    units = json.loads(ds.attrs["attr_units"])
    assert units["num_accelerators"] == "count" and units["train_au_meet_expectation"] == ""


def test_dlio_facts_and_units_of_a_v1_run():
    """Volumez (MLPerf Storage v1.0, unet3d on 137 hosts, 411 accelerators): DLIO's
    data_size_per_host_GB is GiB, 1,438,500 files x 146,600,628 bytes / 137 hosts / 2**30 = 1433.59;
    its MB/s are MiB/s: 7692.0077 samples/s x 146,600,628 bytes / 2**20 = 1,075,413.85."""
    ds = read_dlio_summary(DATA / "dlio" / "v10-Volumez-unet3d-137hosts")
    assert ds.attrs["num_hosts"] == 137 and ds.attrs["num_accelerators"] == 411
    assert ds.attrs["data_size_per_host_GB"] == pytest.approx(1_438_500 * 146_600_628 / 137 / 2**30)
    assert json.loads(ds.attrs["attr_units"])["data_size_per_host_GB"] == "GiB"
    assert float(ds.train_io_mean_MB_per_second) == pytest.approx(7692.007679978933 * 146_600_628 / 2**20)
    assert ds.train_io_mean_MB_per_second.attrs["units"] == "MiB/s"
    assert float(ds.train_io_mean_GB_per_second) == pytest.approx(7692.007679978933 * 146_600_628 / 1e9)


def test_dlio_eval_numbers(tmp_path):
    """No real summary.json with evaluation was found (MLPerf Storage runs train only), so this is
    the real v0.5 ANL unet3d summary with the eval keys DLIO's statscounter.py writes when do_eval is
    set (argonne-lcf/dlio_benchmark dlio_benchmark/utils/statscounter.py @03b5ed32, end_run) added,
    numbers chosen by hand: two evaluations at 2.0 and 3.0 samples/s of 146,600,628-byte samples."""
    doc = json.loads((DATA / "dlio" / "v05-ANL-unet3d-1acc" / "summary.json").read_text())
    mib = 2.5 * 146_600_628 / 2**20
    doc["metric"].update(
        eval_au_percentage=[95.0, 97.0],
        eval_au_mean_percentage=96.0,
        eval_au_meet_expectation="success",
        eval_au_stdev_percentage=1.0,
        eval_throughput_samples_per_second=[2.0, 3.0],
        eval_throughput_mean_samples_per_second=2.5,
        eval_throughput_stdev_samples_per_second=0.5,
        eval_io_mean_MB_per_second=mib,
        eval_io_stdev_MB_per_second=0.5 * 146_600_628 / 2**20,
    )
    (tmp_path / "summary.json").write_text(json.dumps(doc, indent=4))
    ds = read_dlio_summary(tmp_path)
    assert list(ds.eval_throughput_samples_per_second.values) == [2.0, 3.0]
    assert float(ds.eval_au_mean_percentage) == 96.0 and ds.eval_au_mean_percentage.attrs["units"] == "%"
    assert float(ds.eval_throughput_mean_samples_per_second) == 2.5
    assert ds.eval_io_mean_MB_per_second.attrs["units"] == "MiB/s"
    assert float(ds.eval_io_mean_GB_per_second) == pytest.approx(2.5 * 146_600_628 / 1e9)
    assert float(ds.eval_io_stdev_MB_per_second) == pytest.approx(69.9, abs=0.01)
    assert ds.attrs["eval_au_meet_expectation"] == "success" and ds.attrs["model"] == "unet3d"
    # the real file's own numbers: 2.916286 samples/s of unet3d's 146,600,628 bytes is 407.72 MiB/s
    assert float(ds.record_length) == pytest.approx(146_600_628, rel=1e-9)
