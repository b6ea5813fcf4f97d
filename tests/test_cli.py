"""The dlexplore command: through :func:`dlexplore.cli.main` in this process (``tests/_cli.py`` says
why), and as a real process of the installed script where only a process shows it (the script
itself, its exit status, a user's catalog file loaded for one run)."""

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr
from _cli import run_in_process, run_process


def cli(*args, cwd=None):
    return run_in_process(*args, cwd=cwd)


PREDICT = [
    "predict",
    "--workload",
    "resnet50",
    "--gpu",
    "P100",
    "--network",
    "25GbE",
    "--gpus",
    "1,2,4,8,16",
    "--batch-size",
    "64",
]


def test_predict_csv_columns_and_rows():
    out = run_process(
        *PREDICT, "--gpus-per-node", "4", "--algorithm", "ring", "--precision", "fp32", "--format", "csv"
    )
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(io.StringIO(out.stdout))
    assert len(frame) == 5
    swept = ["workload", "gpu", "network", "gpus", "batch_size", "gpus_per_node", "algorithm", "precision"]
    assert set(frame.columns[: len(swept)]) == set(swept)
    for name in (
        "throughput",
        "step_time",
        "time_compute",
        "time_comm",
        "time_comm_exposed",
        "mem_total",
        "efficiency",
        "fits",
    ):
        assert name in frame.columns
    assert list(frame.gpus) == [1, 2, 4, 8, 16]
    assert (frame.throughput == frame.gpus * frame.batch_size / frame.step_time).all() or (
        (frame.throughput - frame.gpus * 64 / frame.step_time).abs() / frame.throughput < 1e-5
    ).all()
    assert frame.efficiency.iloc[0] == pytest.approx(1.0)


def test_predict_matches_the_python_api():
    import dlexplore

    out = cli(*PREDICT, "--format", "json")
    payload = json.loads(out.stdout)
    assert payload["kind"] == "predicted"
    assert payload["units"]["throughput"] == "samples/s"
    ds = dlexplore.predict("resnet50", "P100", "25GbE", gpus=[1, 2, 4, 8, 16], batch_size=64)
    got = [row["throughput"] for row in payload["rows"]]
    assert got == pytest.approx(list(ds.throughput.values), rel=1e-12)


def test_predict_takes_the_alignment_penalty():
    # GPT-2's output layer (50,257 entries, 2-byte rows in bf16) swept over unaligned_efficiency:
    # the same numbers as the Python API, and slower the lower it is
    import dlexplore

    args = ["predict", "--workload", "gpt2", "--gpu", "H200", "--gpus", "1", "--batch-size", "8"]
    out = cli(*args, "--precision", "bf16", "--unaligned-efficiency", "0.2,0.406,1", "--format", "json")
    got = [row["step_time"] for row in json.loads(out.stdout)["rows"]]
    ds = dlexplore.predict(
        "gpt2", "H200", gpus=1, batch_size=8, precision="bf16", unaligned_efficiency=[0.2, 0.406, 1]
    )
    assert got == pytest.approx(list(ds.step_time.values), rel=1e-12)
    assert got[0] > got[1] > got[2]


def test_predict_netcdf_round_trip(tmp_path):
    target = tmp_path / "p.nc"
    out = cli(*PREDICT, "--format", "netcdf", "-o", str(target))
    assert out.returncode == 0, out.stderr
    ds = xr.open_dataset(target, engine="h5netcdf")
    assert ds.attrs["kind"] == "predicted"
    assert ds.step_time.attrs["units"] == "s"
    assert ds.sizes["gpus"] == 5
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary left behind


def test_output_file_replaced_only_on_success(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    bad = cli(*PREDICT[:-1], "-1", "--format", "csv", "-o", str(target))
    assert bad.returncode == 2
    assert target.read_text() == "old\n"
    good = cli(*PREDICT, "--format", "csv", "-o", str(target))
    assert good.returncode == 0
    assert target.read_text().startswith("workload,")


def test_comm_csv_issue_example():
    out = cli(
        "comm",
        "--collective",
        "allreduce",
        "--algorithm",
        "ring",
        "--bytes",
        "1e8",
        "--gpus",
        "8",
        "--bandwidth",
        "10",
        "--latency",
        "5e-6",
        "--format",
        "csv",
    )
    assert out.returncode == 0, out.stderr
    row = pd.read_csv(io.StringIO(out.stdout)).iloc[0]
    # 2(p-1) alpha + 2(p-1)/p n beta = 14 * 5e-6 + 1.75 * 1e8 / 1e10
    assert row.time == pytest.approx(0.01757, rel=1e-5)
    assert row.algbw == pytest.approx(1e8 / 0.01757 / 1e9, rel=1e-5)
    assert row.busbw == pytest.approx(1e8 / 0.01757 / 1e9 * 1.75, rel=1e-5)


def test_comm_sweep_and_gamma():
    out = cli(
        "comm",
        "--bytes",
        "1MB,1GB",
        "--gpus",
        "2,4",
        "--bandwidth",
        "10",
        "--latency",
        "0",
        "--gamma",
        "1e-10",
        "--format",
        "csv",
    )
    frame = pd.read_csv(io.StringIO(out.stdout))
    assert len(frame) == 4
    row = frame[(frame.bytes == 1e9) & (frame.gpus == 4)].iloc[0]
    assert row.time == pytest.approx(1.5 * 1e9 * 1e-10 + 0.75 * 1e9 * 1e-10, rel=1e-6)


@pytest.mark.parametrize("kind", ["gpus", "networks", "workloads", "storage"])
def test_catalog_csv(kind):
    out = cli("catalog", kind, "--format", "csv")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(io.StringIO(out.stdout))
    assert "name" in frame.columns and "source" in frame.columns
    if kind == "workloads":
        assert "params" in frame.columns
        assert frame.set_index("name").loc["resnet50", "params"] == 25_557_032


def test_measured_list_and_show():
    out = cli("measured", "list", "--format", "csv")
    assert out.returncode == 0, out.stderr
    names = pd.read_csv(io.StringIO(out.stdout))["name"].tolist()
    assert "horovod-2017-16gpu-25gbe" in names
    shown = cli("measured", "show", "horovod-2017-16gpu-25gbe", "--format", "csv")
    assert shown.returncode == 0, shown.stderr
    frame = pd.read_csv(io.StringIO(shown.stdout))
    assert 1787.4 in frame.throughput.round(1).tolist()


def test_measured_show_one_data_type_of_a_datatype_sweep():
    # nccl-tests --datatype all on 16 H200s: each size in 12 types, one of them chosen
    sweep = Path(__file__).parent / "data" / "traces" / "nccl-tests" / "h200-datatype-all-2.18.3.txt"
    refused = cli("measured", "show", str(sweep))
    assert refused.returncode != 0 and "--dtype on the command line" in refused.stderr
    shown = cli("measured", "show", str(sweep), "--dtype", "bfloat16", "--format", "csv")
    assert shown.returncode == 0, shown.stderr
    frame = pd.read_csv(io.StringIO(shown.stdout))
    out_of_place = frame[frame.placement == "out-of-place"]
    assert out_of_place.busbw.tolist() == [481.75, 483.37, 484.17] and set(frame.dtype) == {"bfloat16"}


@pytest.mark.parametrize(
    "args, expected",
    [
        (["predict", "--workload", "resnet05"], "did you mean 'resnet50'"),
        (["predict", "--gpu", "V100"], "V100-16GB"),
        (["predict", "--gpus", "1,two"], "argument --gpus: expected a number, got 'two'"),
        (["predict", "--gpus", "0"], "gpus must be a whole number from 1 to 1,048,576; got 0"),
        (["predict", "--gpus", "1e9"], "gpus must be a whole number from 1 to 1,048,576; got 1,000,000,000"),
        (["predict", "--gpus", "1e30"], "got 1e+30"),
        (
            ["predict", "--gpu", "V100-16GB", "--precision", "tf32"],
            "precision must be one of fp32, fp16; got 'tf32' (V100-16GB has no tf32 arithmetic)",
        ),
        (["predict", "--bandwidth", "-1"], "bandwidth must be a number of GB/s > 0; got -1"),
        (["predict", "--bucket-size", "lots"], "--bucket-size"),
        (["predict", "--format", "netcdf"], "give -o FILE.nc"),
        (["comm", "--bytes", "1e8", "--gpus", "8", "--bandwidth", "10"], "--latency"),
        (
            [
                "comm",
                "--collective",
                "gossip",
                "--bytes",
                "1",
                "--gpus",
                "2",
                "--bandwidth",
                "1",
                "--latency",
                "0",
            ],
            "unknown collective",
        ),
        (["catalog", "tpus"], "invalid choice"),
        (["measured", "show", "nope"], "unknown measured dataset"),
        (["--catalog", "/nonexistent/gpus.csv", "catalog", "gpus"], "/nonexistent/gpus.csv"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_errors_are_one_line_and_exit_nonzero(args, expected):
    _one_line_error(args, expected)


def test_the_installed_script_exits_with_the_status_main_returns():
    bad = run_process("frobnicate")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [run_in_process("frobnicate").stderr.strip()]


def test_an_empty_trace_folder_is_named(tmp_path):
    _one_line_error(["trace", "summary", str(tmp_path)], f"{tmp_path}: the folder holds no trace file")


def _one_line_error(args, expected):
    out = cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("dlexplore")
    assert expected in lines[0]


def test_user_catalog_file_on_the_command_line(tmp_path):
    user = tmp_path / "my-gpus.csv"
    user.write_text(
        "name,vendor,fp32_tflops,tf32_tflops,fp16_tflops,bf16_tflops,memory_gib,"
        "memory_bandwidth_gbs,tdp_w,idle_w,source\n"
        "lab-gpu,acme,20,,80,80,48,1000,350,40,our data sheet\n"
    )
    out = run_process("--catalog", str(user), *PREDICT[:4], "lab-gpu", *PREDICT[5:], "--format", "csv")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(io.StringIO(out.stdout))
    assert set(frame.gpu) == {"lab-gpu"}
    assert frame.mem_capacity.iloc[0] == 48 * 2**30


def test_transformer_spec_keeps_its_commas():
    out = cli("predict", "--workload", "transformer:2,64,4,32,1000,resnet50", "--format", "csv")
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(io.StringIO(out.stdout))
    assert frame.workload.tolist() == ["transformer:2,64,4,32,1000", "resnet50"]


def test_predict_energy_columns_by_hand():
    done = cli(
        *PREDICT[:-4],
        "--gpus",
        "1",
        "--batch-size",
        "64",
        "--energy",
        "--pue",
        "1.2",
        "--node-power",
        "300",
        "--samples-per-epoch",
        "1000",
        "--format",
        "csv",
    )
    assert done.returncode == 0, done.stderr
    row = pd.read_csv(io.StringIO(done.stdout)).iloc[0]
    # one P100 computing the whole step at TDP (300 W) in a node drawing 300 W more, PUE 1.2
    assert row["energy_step"] == pytest.approx((300 + 300) * row["step_time"] * 1.2, rel=1e-6)
    assert row["energy_sample"] == pytest.approx(row["energy_step"] / 64, rel=1e-6)
    assert row["energy_epoch_kwh"] == pytest.approx(row["energy_sample"] * 1000 / 3.6e6, rel=1e-6)


def test_predict_hybrid_parallel_options_match_the_python_api():
    import dlexplore

    done = cli(
        "predict",
        "--workload",
        "gpt2-xl",
        "--gpu",
        "A100-80GB",
        "--network",
        "IB-HDR",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--batch-size",
        "64",
        "--pp",
        "2",
        "--zero",
        "1",
        "--precision",
        "bf16",
        "--optimizer",
        "adam",
        "--format",
        "csv",
    )
    assert done.returncode == 0, done.stderr
    row = pd.read_csv(io.StringIO(done.stdout)).iloc[0]
    ds = dlexplore.predict_parallel(
        "gpt2-xl",
        "A100-80GB",
        "IB-HDR",
        gpus=16,
        gpus_per_node=8,
        batch_size=64,
        pp=2,
        zero=1,
        precision="bf16",
        optimizer="adam",
    )
    assert row["step_time"] == pytest.approx(float(ds.step_time))
    assert row["mem_total"] == pytest.approx(float(ds.mem_total))
    bad = cli("predict", "--workload", "gpt2-xl", "--gpu", "A100-80GB", "--gpus", "8,16", "--tp", "1")
    assert bad.returncode == 2 and "one value per option" in bad.stderr


def test_predict_hybrid_csv_leads_with_its_inputs_and_prices_energy_by_hand():
    done = cli(
        "predict",
        "--workload",
        "gpt2-xl",
        "--gpu",
        "A100-80GB",
        "--network",
        "IB-HDR",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--batch-size",
        "64",
        "--pp",
        "2",
        "--energy",
        "--pue",
        "1.5",
        "--format",
        "csv",
    )
    assert done.returncode == 0, done.stderr
    row = pd.read_csv(io.StringIO(done.stdout)).iloc[0]
    inputs = ["workload", "gpu", "network", "gpus", "gpus_per_node", "dp", "tp", "pp"]
    assert list(row.index[: len(inputs)]) == inputs
    assert (row["workload"], row["gpus"], row["dp"], row["pp"], row["batch_size"]) == (
        "gpt2-xl",
        16,
        8,
        2,
        64,
    )
    # A100-80GB: TDP 400 W, idle 55 W (the catalog row). Compute (update included) at TDP,
    # tensor/pipeline/exposed data-parallel communication halfway, the bubble at idle; x gpus x PUE.
    tdp, idle = 400.0, 55.0
    compute = row["time_compute"] + row["time_optimizer"] + row["time_offload"]
    comm = row["time_tp_comm"] + row["time_pp_comm"] + row["time_dp_comm_exposed"]
    expected = 1.5 * 16 * (compute * tdp + comm * (idle + tdp) / 2 + row["time_bubble"] * idle)
    assert row["energy_step"] == pytest.approx(expected, rel=1e-9)
    assert row["energy_sample"] == pytest.approx(expected / 64, rel=1e-9)
    assert compute + comm + row["time_bubble"] == pytest.approx(row["step_time"], rel=1e-12)


def test_tables_are_for_people():
    gpus = cli("catalog", "gpus")
    v100 = next(line for line in gpus.stdout.splitlines() if line.split()[0] == "V100-16GB")
    assert " 16 GiB " in v100 and "e+" not in v100
    networks = cli("catalog", "networks").stdout
    assert "latency [µs]" in networks and "e-0" not in networks
    workloads = cli("catalog", "workloads").stdout
    assert "forward [GFLOP/sample]" in workloads and "e+" not in workloads
    import dlexplore

    assert len(repr(dlexplore.catalog.workload("gpt2-xl")).splitlines()) == 1


def test_advise_ranks_configurations_that_fit():
    done = cli(
        "advise",
        "--workload",
        "gpt2-xl",
        "--gpus",
        "16",
        "--gpu",
        "A100-80GB",
        "--top",
        "5",
        "--format",
        "csv",
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout), comment="#")
    assert len(frame) == 5
    assert (frame["dp"] * frame["tp"] * frame["pp"] == 16).all()
    assert frame["throughput"].is_monotonic_decreasing


def test_predict_gradient_accumulation_and_sequence_length():
    out = cli(
        "predict",
        "--workload",
        "bert-large",
        "--gpu",
        "A100-80GB",
        "--network",
        "IB-HDR",
        "--gpus",
        "64",
        "--gpus-per-node",
        "8",
        "--batch-size",
        "32",
        "--seq",
        "128",
        "--grad-accum",
        "1,8",
        "--precision",
        "bf16",
        "--optimizer",
        "adam",
        "--format",
        "csv",
    )
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(io.StringIO(out.stdout), comment="#")
    assert frame["grad_accum"].tolist() == [1, 8]
    # eight micro-batches per allreduce: more samples per step, the exchange better hidden
    assert frame["throughput"].iloc[1] > frame["throughput"].iloc[0]
    import dlexplore as dlx

    direct = dlx.predict(
        "bert-large",
        "A100-80GB",
        "IB-HDR",
        gpus=64,
        gpus_per_node=8,
        batch_size=32,
        seq=128,
        grad_accum=8,
        precision="bf16",
        optimizer="adam",
    )
    assert frame["throughput"].iloc[1] == pytest.approx(float(direct.throughput), rel=1e-3)
    bad = cli("predict", "--workload", "resnet50", "--grad-accum", "0")
    assert bad.returncode == 2 and "grad_accum" in bad.stderr
