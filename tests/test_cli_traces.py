"""`dlexplore trace ...` on the bundled real traces (made by `dlexplore collect`)."""

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from _cli import run_in_process

from dlexplore._data import data_dir

SAMPLE = data_dir() / "traces" / "gloo-mlp-2rank"


def cli(*args):
    return run_in_process(*args)  # tests/_cli.py: main() in this process, as the script calls it


def test_summary_csv_has_rank_step_and_the_breakdown():
    done = cli("trace", "summary", str(SAMPLE), "--format", "csv")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    assert list(frame.columns[:2]) == ["rank", "step"]
    for column in ("step_time", "time_compute", "time_comm", "time_comm_exposed", "time_idle"):
        assert column in frame
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    assert sorted(frame["rank"].unique()) == list(range(manifest["distributed"]["world_size"]))
    # the parts never exceed the step they belong to
    assert (frame["time_comm_exposed"] <= frame["time_comm"] + 1e-12).all()
    assert (frame["time_compute"] <= frame["step_time"] + 1e-12).all()


def test_summary_json_names_its_source_and_units():
    done = cli("trace", "summary", str(SAMPLE / "rank*.json.gz"), "--format", "json")
    payload = json.loads(done.stdout)
    assert payload["source"].startswith("measured: pytorch trace")
    assert payload["units"]["step_time"] == "s"


def test_collectives_csv_columns():
    done = cli("trace", "collectives", str(SAMPLE), "--format", "csv")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    for column in ("collective", "bytes", "count", "time", "algbw", "busbw", "skew"):
        assert column in frame
    assert set(frame["collective"]) == {"allreduce"}
    # nccl-tests: busbw = algbw x 2(p-1)/p, which is 1 for two ranks
    assert (frame["busbw"] - frame["algbw"]).abs().max() < 1e-12


def test_collectives_of_a_trace_without_communication_say_so():
    # A real RTX 4080 trace with CPU activity only (kineto-gpus-without-activity/README.txt)
    path = (
        Path(__file__).parent
        / "data"
        / "traces"
        / "kineto-gpus-without-activity"
        / "cudaguide_rtx4080_cpuonly.json"
    )
    done = cli("trace", "collectives", str(path))
    assert done.returncode == 0, done.stderr
    assert "no collectives: the trace holds no communication event" in done.stdout
    assert "Empty DataFrame" not in done.stdout


def test_collectives_of_nccl_tests_output_name_the_commands_that_read_it():
    # nccl-tests issue 37's all_gather_perf: a measured table, which `trace summary` shows
    path = Path(__file__).parent / "data" / "traces" / "nccl-tests" / "nccl-tests-issue-37-no-hash.txt"
    done = cli("trace", "collectives", str(path))
    assert done.returncode != 0 and "a measured table rather than a trace" in done.stderr
    assert "'dlexplore trace summary PATH' or 'dlexplore measured show PATH'" in done.stderr
    shown = cli("trace", "summary", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "all_gather_perf on 8 GPUs" in shown.stdout


@pytest.mark.parametrize("action", ["summary", "collectives"])
def test_an_nccl_log_summarised_per_collective(action):
    # ROCm/rccl#429 (tests/data/nccl-log/README.md): allgather 59205120 int8 x 4 ranks =
    # 236,820,480 bytes; allreduce 9984512 float32 = 39,938,048 bytes; one line each
    path = Path(__file__).parent / "data" / "nccl-log" / "rccl-issue-429.log"
    done = cli("trace", action, str(path), "--format", "csv")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout)).set_index("bytes")
    assert frame.loc[236820480.0, "collective"] == "allgather"
    assert frame.loc[39938048.0, "collective"] == "allreduce"
    assert frame["calls"].tolist() == [1, 1, 1, 1]


def test_an_nccl_log_refuses_options_of_other_formats():
    path = Path(__file__).parent / "data" / "nccl-log" / "rccl-issue-429.log"
    done = cli("trace", "summary", str(path), "--dtype", "float32")
    assert done.returncode != 0
    assert "--dtype: not for NCCL debug logs" in done.stderr and "internal error" not in done.stderr
    done = cli("trace", "summary", str(path), "--dask", "threads")
    assert done.returncode != 0 and "drop them for NCCL debug logs" in done.stderr


def test_an_nccl_log_of_tuning_lines_only_shows_them():
    # NVIDIA/nccl#1453 (tests/data/nccl-log/README.md): 8589934592 bytes, ring, simple, 86069.97 us
    path = Path(__file__).parent / "data" / "nccl-log" / "nccl-issue-1453-tuning.log"
    done = cli("trace", "summary", str(path), "--format", "csv")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    assert frame[["bytes", "algorithm", "protocol"]].values.tolist() == [[8589934592.0, "ring", "simple"]]
    assert frame["predicted_time"].tolist() == pytest.approx([0.08606996875])


def test_collectives_beside_the_alpha_beta_prediction():
    done = cli(
        "trace", "collectives", str(SAMPLE), "--format", "csv", "--bandwidth", "1", "--latency", "1e-5"
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    # ring allreduce on 2 ranks: 2(p-1) alpha + 2(p-1)/p n / B = 2e-5 s + n / 1e9 s
    expected = 2e-5 + frame["bytes"] / 1e9
    assert ((frame["predicted"] - expected).abs() < 1e-12).all()
    assert ((frame["error"] - (frame["time"] - expected) / expected).abs() < 1e-9).all()
    half = cli("trace", "collectives", str(SAMPLE), "--bandwidth", "1")
    assert half.returncode == 2 and "--latency" in half.stderr


def test_trace_report_is_a_standalone_page(tmp_path):
    target = tmp_path / "trace.html"
    done = cli("trace", "report", str(SAMPLE), "-o", str(target), "--title", "two ranks")
    assert done.returncode == 0, done.stderr
    page = target.read_text(encoding="utf-8")
    assert "two ranks" in page and "trace_timeline" in page
    # nothing is fetched: no script or stylesheet tag points off the machine (BokehJS is inlined)
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', page)


def test_convert_round_trip(tmp_path):
    target = tmp_path / "run.nc"
    done = cli("trace", "convert", str(SAMPLE), "-o", str(target))
    assert done.returncode == 0, done.stderr
    direct = cli("trace", "summary", str(SAMPLE), "--format", "csv").stdout
    again = cli("trace", "summary", str(target), "--format", "csv").stdout
    assert direct == again


@pytest.mark.parametrize(
    "args, message",
    [
        (["trace", "summary", "missing-folder/"], "no such file"),
        (["trace", "convert", str(SAMPLE)], "required"),
        (["trace", "summary", str(SAMPLE), "--trace-format", "nope"], "unknown trace format"),
    ],
)
def test_trace_errors_are_one_line(args, message):
    done = cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_collect_refuses_bad_arguments_before_starting():
    done = cli("collect", "--nproc", "0", "--out", "never-made")
    assert done.returncode == 2 and "nproc" in done.stderr
    assert not Path("never-made").exists()


def test_whatif_replays_the_measured_step_and_sweeps():
    done = cli("whatif", str(SAMPLE), "--bandwidth", "x1,x2", "--compute", "x1.5", "--format", "csv")
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout), comment="#")
    first = frame.iloc[0]
    assert first["step_time"] == pytest.approx(first["step_time_measured"], rel=0.05)
    assert set(frame["bandwidth_factor"]) == {1, 2} and set(frame["compute_factor"]) == {1, 1.5}
    faster = frame[(frame["bandwidth_factor"] == 2) & (frame["compute_factor"] == 1.5)]
    assert (faster["step_time"] <= first["step_time"] * (1 + 1e-9)).all()
    bad = cli("whatif", str(SAMPLE), "--bandwidth", "fast")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
