"""`dlexplore trace summary` on measured datasets from other people's runs (Darshan, DLIO / MLPerf
Storage, TAU: tests/data/traces/darshan/README.txt, tests/data/traces/dlio/README.txt,
tests/data/tau/README.md): the run's facts with units, units on every column, and tables on different
dimensions never crossed. Numbers are hand-derived from the files (the READMEs and docstrings say how)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from _real_traces import real

from dlexplore.cli import main

DATA = Path(__file__).parent / "data"
NAMD = DATA / "traces" / "darshan" / "namd2-darshan-parser.txt"
MICRON = DATA / "traces" / "dlio" / "v10-Micron-unet3d-a100-3acc"
VOLUMEZ = DATA / "traces" / "dlio" / "v10-Volumez-unet3d-137hosts"
FACTORING = DATA / "tau" / "amintos-mpi-factoring"
APEX = DATA / "tau" / "apex-cuda"


def summary(capsys, path, fmt: str) -> tuple[str, str]:
    assert main(["trace", "summary", str(path), "--format", fmt]) == 0
    done = capsys.readouterr()
    return done.out, done.err


def test_darshan_run_facts_in_every_format(capsys):
    """The darshan-parser header: nprocs 32, run time 1572 s, jobid 2135028 (once "config": {})."""
    out, _ = summary(capsys, NAMD, "json")
    payload = json.loads(out)
    assert payload["config"] == {"nprocs": 32, "run_time": 1572.0, "jobid": 2135028}
    assert payload["units"]["run_time"] == "s" and payload["units"]["nprocs"] == "count"
    assert payload["rows"][0]["bytes_read"] == 3_217 + 212_633_752
    out, _ = summary(capsys, NAMD, "table")
    assert "# run: nprocs = 32, run_time = 1572 s, jobid = 2135028" in out
    assert out.count("Darshan log") == 1  # the source once, not again as "# source: ..."
    assert any(line.split() == ["bytes_read", "212636969", "bytes"] for line in out.splitlines())
    out, _ = summary(capsys, NAMD, "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert frame.loc[0, "nprocs"] == 32 and frame.loc[0, "run_time"] == 1572
    assert frame.loc[0, "read_bandwidth_job"] == pytest.approx(212_636_969 / 1572 / 1e9)


def test_dlio_run_facts_and_units(capsys):
    """Volumez: 411 accelerators on 137 hosts, 5 epochs, from 15:03:47 to 15:20:08 (summary.json)."""
    payload = json.loads(summary(capsys, VOLUMEZ, "json")[0])
    config = payload["config"]
    assert (config["num_accelerators"], config["num_hosts"], config["epochs"]) == (411, 137, 5)
    assert config["start"] == "2024-08-13T15:03:47.337692" and config["end"] == "2024-08-13T15:20:08.733187"
    assert config["train_au_meet_expectation"] == "success"
    assert payload["units"]["train_io_mean_MB_per_second"] == "MiB/s"
    assert payload["units"]["data_size_per_host_GB"] == "GiB"
    assert len(payload["rows"]) == 5


def test_dlio_table_prints_units_and_the_source_once(capsys):
    """Micron: 31.970902 samples/s of 146,600,628-byte unet3d samples is 4469.83 MiB/s (DLIO's "MB")
    and 4.68695 GB/s; the table says which is which."""
    out, _ = summary(capsys, MICRON, "table")
    assert out.count("DLIO benchmark summary") == 1
    assert "# train_io_mean_MB_per_second = 4469.83 MiB/s" in out
    assert "# train_io_mean_GB_per_second = 4.68695 GB/s" in out
    assert 31.970902 * 146_600_628 / 2**20 == pytest.approx(4469.83, abs=0.005)
    assert "train_au_percentage [%]" in out and "train_throughput_samples_per_second [samples/s]" in out
    assert "num_hosts = 1" in out and "epochs = 5" in out


def test_dlio_eval_epochs_are_not_crossed_with_train_epochs(capsys, tmp_path):
    """The real Micron summary with two evaluations added (no real run with eval was found; keys as
    DLIO's statscounter.py writes them): 5 train epochs stay 5 rows, not 5 x 2."""
    doc = json.loads((MICRON / "summary.json").read_text())
    doc["metric"].update(eval_au_percentage=[95.0, 97.0], eval_throughput_samples_per_second=[2.0, 3.0])
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    out, err = summary(capsys, tmp_path, "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert len(frame) == 5 and "eval_au_percentage" not in frame
    assert "eval_epoch" in err
    payload = json.loads(summary(capsys, tmp_path, "json")[0])
    assert [r["eval_throughput_samples_per_second"] for r in payload["tables"]["eval_epoch"]] == [2.0, 3.0]


def test_tau_functions_are_not_crossed_with_user_events(capsys):
    """amintos: 28 functions, 4 user events; the exclusive column sums to the root's inclusive
    335.849084 s (once 4 x that, 112 rows). MPI: Sendrecv 99.911603 + Init 0.120952 + Comm_rank
    0.000001 + Comm_size 0 = 100.032556 s, the rest of the 335.849084 s is 235.816528 s."""
    out, err = summary(capsys, FACTORING, "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert len(frame) == 28 and frame["exclusive"].sum() == pytest.approx(335.849084)
    assert int(frame["throttled"].sum()) == 5
    assert "user_event" in err and "throttled" in err
    # the per-rank breakdown is a table of its own: beside 28 function rows its columns would sum
    # to 28 times the run's
    assert "time_comm" not in frame.columns
    payload = json.loads(summary(capsys, FACTORING, "json")[0])
    (parts,) = payload["tables"]["rank, thread"]
    assert parts["time_comm"] == pytest.approx(100.032556)
    assert parts["time_compute"] == pytest.approx(335.849084 - 100.032556)
    assert payload["units"]["time_comm"] == "s" and payload["units"]["exclusive"] == "s"  # one metric, TIME
    assert len(payload["tables"]["rank, thread, user_event"]) == 4
    out, _ = summary(capsys, FACTORING, "table")
    assert "# by rank, thread\n" in out and "time_comm [s]" in out and "exclusive [s]" in out


def test_nccl_tests_csv_keeps_its_rows_column(capsys):
    """superbenchmark's all_reduce log (shared/traces-real) lists size 0 twice: ``rows`` (on bytes,
    one of the table's dimensions) is 2 there, beside each placement's row."""
    path = real("nccl-tests/superbenchmark__nccl_allreduce.log").parent
    out, _ = summary(capsys, path / "superbenchmark__nccl_allreduce.log", "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert "rows" in frame.columns
    assert frame.loc[frame["bytes"] == 0, "rows"].tolist() == [2, 2]


def test_apex_profile_one_row_per_timer(capsys):
    """APEX's CUDA profile: 9 timers (once 9 x 32 user events = 288 rows); their exclusive times add
    up to 354026.613 us, APEX MAIN's inclusive 354026 us."""
    out, _ = summary(capsys, APEX, "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert len(frame) == 9 and frame["exclusive"].sum() == pytest.approx(0.354026613)


def test_nccl_tests_times_in_the_table_keep_their_printed_digits(capsys):
    """nccl-tests print times in microseconds (superbenchmark's 4-byte all-reduce: 34.73 and 35.30
    us; issue 78's 32 MiB one on 256 GPUs: 1464.2 us). As seconds with six decimals the first were
    0.000035: the table shows each column of seconds in the unit of its median (us, ms) and six
    significant digits; csv keeps seconds."""
    path = real("nccl-tests/superbenchmark__nccl_allreduce.log")
    rows = [line.split() for line in summary(capsys, path, "table")[0].splitlines()]
    header = next(r for r in rows if r[:2] == ["bytes", "[bytes]"])
    assert header[3:5] == ["time", "[µs]"]
    four = [r for r in rows if r[0] == "4"]
    assert [(r[1], r[2]) for r in four] == [("out-of-place", "34.73"), ("in-place", "35.3")]
    issue_78 = DATA / "traces" / "nccl-tests" / "nccl-tests-issue-78-mpirun-256-no-devices.txt"
    out, err = summary(capsys, issue_78, "table")
    assert "without nccl-tests' closing lines" in err  # the paste ends at its last row
    rows = [line.split() for line in out.splitlines()]
    assert next(r for r in rows if r[:2] == ["bytes", "[bytes]"])[3:5] == ["time", "[ms]"]
    assert [r[2] for r in rows if r[:2] == ["33554432", "out-of-place"]] == ["1.4642"]
    frame = pd.read_csv(io.StringIO(summary(capsys, issue_78, "csv")[0]))
    assert frame.loc[frame["bytes"] == 33554432, "time"].tolist()[0] == pytest.approx(1464.2e-6)
