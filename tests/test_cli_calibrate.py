"""`dlexplore calibrate` on the shipped published measurements and a shipped trace."""

import io
import json

import pandas as pd
from _cli import run_in_process

from dlexplore._data import data_dir


def cli(*args):
    return run_in_process(*args)  # tests/_cli.py: main() in this process, as the script calls it


def _csv(text: str) -> tuple[list[str], pd.DataFrame]:
    params = [line for line in text.splitlines() if line.startswith("# param:")]
    rows = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return params, pd.read_csv(io.StringIO(rows))


def test_calibrate_on_single_gpu_points_predicts_the_rest():
    done = cli(
        "calibrate", "tf-benchmarks-2017-dgx1", "--fit-on", "gpus==1", "--per", "workload", "--format", "csv"
    )
    assert done.returncode == 0, done.stderr
    params, points = _csv(done.stdout)
    assert len(params) == 4 and all("compute_efficiency" in p for p in params)
    for column in (
        "workload",
        "gpu",
        "network",
        "precision",
        "algorithm",
        "gpus",
        "measured",
        "predicted",
        "error",
    ):
        assert column in points, column
    assert len(points) == 16
    fitted = points[points["gpus"] == 1]
    assert fitted["fitted"].all() and not points[points["gpus"] > 1]["fitted"].any()
    # the error column is (predicted - measured) / measured, as the header says
    recomputed = (points["predicted"] - points["measured"]) / points["measured"]
    assert (recomputed - points["error"]).abs().max() < 1e-9
    # ResNet-50 fitted on its 1-GPU point: the fitted point is reproduced exactly
    one = fitted[fitted["workload"] == "resnet50"].iloc[0]
    assert abs(one["predicted"] - one["measured"]) < 1e-6 * one["measured"]


def test_calibrate_json_and_table():
    done = cli(
        "calibrate",
        "nvidia-mxnet-resnet50-v1.5",
        "--fit-on",
        "gpus <= 8",
        "--per",
        "precision",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload  # a dict with the parameters and points
    table = cli("calibrate", "nvidia-mxnet-resnet50-v1.5", "--fit-on", "gpus <= 8", "--per", "precision")
    assert table.returncode == 0 and "MAPE" in table.stdout


def test_calibrate_a_trace_folder():
    done = cli("calibrate", str(data_dir() / "traces" / "gloo-mlp-2rank"), "--format", "csv")
    assert done.returncode == 0, done.stderr
    params, _ = _csv(done.stdout)
    names = " ".join(params)
    assert "latency" in names and "bandwidth" in names


def test_bad_selection_is_refused_and_evaluates_nothing(tmp_path):
    marker = tmp_path / "hacked"
    done = cli(
        "calibrate", "tf-benchmarks-2017-dgx1", "--fit-on", f"__import__('os').system('touch {marker}')"
    )
    # one error line, then the expression with a caret under the position
    assert done.returncode == 2 and done.stderr.startswith("dlexplore: error: fit_on")
    assert "position 11" in done.stderr and "^" in done.stderr.splitlines()[-1]
    assert not marker.exists()
    done = cli("calibrate", "tf-benchmarks-2017-dgx1", "--fit-on", "gpu <= 8")
    assert done.returncode == 2 and "gpu" in done.stderr
