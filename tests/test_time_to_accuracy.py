"""Time and energy to accuracy over GPUs x batch size, its CLI column and its plot."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import dlexplore as dlx
from dlexplore.cli import main
from dlexplore.errors import DlexploreError
from dlexplore.model import energy, time_to_accuracy
from dlexplore.plots.convergence import TimeToAccuracyFigure, time_to_accuracy_columns

GPUS = [1, 2, 8, 32, 128, 512]
LAW = {"s_min": 2000.0, "b_noise": 4096.0, "samples_per_epoch": 1281167.0, "max_batch": 1e7}


@pytest.fixture(scope="module")
def prediction():
    return dlx.predict("resnet50", "V100-16GB", "100GbE", gpus=GPUS, batch_size=[32, 64])


def test_time_is_steps_times_step_time(prediction):
    tta = time_to_accuracy(prediction, LAW)
    b = np.outer(GPUS, [32, 64])
    steps = 2000.0 * (1 + 4096.0 / b)  # McCandlish et al.: S = S_min (1 + B_noise / B)
    np.testing.assert_allclose(tta["steps_to_target"].values, steps)
    np.testing.assert_allclose(
        tta["time_to_target"].values, steps * prediction["step_time"].transpose("gpus", "batch_size").values
    )
    np.testing.assert_allclose(tta["epochs_to_target"].values, steps * b / 1281167.0)
    assert tta["time_to_target"].attrs["units"] == "s"
    assert tta.attrs["source"].startswith("predicted:")
    # The fastest configuration is the least time to target.
    t = tta["time_to_target"].values
    assert tta["fastest"].values.sum() == 1
    assert t[tta["fastest"].values][0] == np.nanmin(t)


def test_speedup_per_doubling_and_energy(prediction):
    tta = time_to_accuracy(prediction, LAW, energy=energy(prediction))
    t = tta["time_to_target"].sel(batch_size=32).values
    # 2 -> 8 GPUs is two doublings: the per-doubling speed-up is the square root of the ratio.
    assert tta["speedup_per_doubling"].sel(batch_size=32, gpus=8) == pytest.approx(math.sqrt(t[1] / t[2]))
    assert tta["speedup_per_doubling"].sel(batch_size=32, gpus=2) == pytest.approx(t[0] / t[1])
    # Far past B_noise = 4096 (512 x 64 = 32768) doubling the GPUs buys little: from 128 to 512
    # GPUs (two doublings) the steps fall by (1 + 4096/8192) / (1 + 4096/32768) = 1.333, so the
    # per-doubling speed-up is sqrt(1.333 x t_step(128) / t_step(512)), whatever the step times.
    step = prediction["step_time"].sel(batch_size=64)
    ratio = float(step.sel(gpus=128) / step.sel(gpus=512))
    expected = math.sqrt((1 + 4096 / 8192) / (1 + 4096 / 32768) * ratio)
    assert tta["speedup_per_doubling"].sel(batch_size=64, gpus=512) == pytest.approx(expected)
    assert expected < 1.2  # against sqrt(4) = 2 for perfect scaling of time to target
    e = energy(prediction)["energy_step"].transpose("gpus", "batch_size").values
    np.testing.assert_allclose(tta["energy_to_target"].values, tta["steps_to_target"].values * e)


def test_beyond_the_useful_batch_is_unreachable(prediction):
    tta = time_to_accuracy(prediction, "resnet50-goyal2017")  # Goyal et al.: linear rule, 8192 at most
    reachable = tta["reachable"].transpose("gpus", "batch_size").values
    assert reachable.tolist() == (np.outer(GPUS, [32, 64]) <= 8192).tolist()
    assert np.isnan(tta["time_to_target"].sel(gpus=512, batch_size=32))
    # 90 epochs at every reachable batch: the budget regime.
    assert float(tta["epochs_to_target"].sel(gpus=8, batch_size=32)) == pytest.approx(90)


def test_needs_a_sweep_prediction():
    with pytest.raises(DlexploreError, match="step_time"):
        time_to_accuracy(dlx.predict(gpus=[1, 2]).drop_vars("step_time"), LAW)
    with pytest.raises(DlexploreError, match="convergence parameters"):
        time_to_accuracy(dlx.predict("vgg16", gpus=[1, 2]))


def test_plot_columns_mark_fastest_and_knees(prediction):
    tta = time_to_accuracy(prediction, LAW)
    cols = time_to_accuracy_columns(tta)
    hours = tta["time_to_target"].values / 3600
    assert cols["tta_fastest"]["hours"] == [pytest.approx(np.nanmin(hours))]
    for batch, knee in zip(cols["tta_knees"]["batch_size"], cols["tta_knees"]["hours"], strict=True):
        assert knee == pytest.approx(np.nanmin(tta["time_to_target"].sel(batch_size=batch).values) / 3600)
    fig = TimeToAccuracyFigure(tta)
    sources = fig.sources
    before = sources["tta_points"]
    goyal = time_to_accuracy(prediction, "resnet50-goyal2017")
    fig.show(goyal)  # new data into the same sources (the slider path)
    assert fig.sources["tta_points"] is before
    assert len(before.data["gpus"]) == int(goyal["reachable"].sum())
    assert "linear, global batch <= 8,192" in fig.subtitle.text


def test_cli_target_adds_columns(capsys):
    rc = main(
        [
            "predict",
            "--workload",
            "resnet50",
            "--gpu",
            "V100-16GB",
            "--gpus",
            "8,256,512",
            "--batch-size",
            "32",
            "--target",
            "resnet50-goyal2017",
            "--energy",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["steps_to_target"] for r in rows[:2]] == [
        pytest.approx(90 * 1281167 / 256),
        pytest.approx(90 * 1281167 / 8192),
    ]
    assert [r["fastest"] for r in rows] == [False, True, False]
    assert rows[2]["reachable"] is False and rows[2]["time_to_target"] is None
    assert rows[0]["energy_to_target"] > 0
    rc = main(
        [
            "predict",
            "--workload",
            "resnet50",
            "--gpus",
            "8",
            "--batch-size",
            "32",
            "--target",
            "s_min=2000,b_noise=4096",
            "--format",
            "csv",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "steps_to_target" in out and str(2000 * (1 + 4096 / 256)).rstrip("0").rstrip(".") in out
    assert main(["predict", "--workload", "vgg16", "--gpus", "8", "--target"]) == 2
    assert "vgg16" in capsys.readouterr().err


def test_catalog_law_bends_the_steps(prediction):
    # resnet50's catalog row: S_min = 944.2 steps, B_noise = 47,070 images (fitted to MLPerf's
    # reference convergence points). Doubling a batch of 32 nearly halves the steps:
    # (1 + 47070/32) / (1 + 47070/64) = 1471.94 / 736.47 = 1.9986; from 16,384 to 32,768 images it
    # cuts them by only (1 + 47070/16384) / (1 + 47070/32768) = 3.8729 / 2.4365 = 1.5896.
    tta = time_to_accuracy(prediction)
    steps = tta["steps_to_target"].sel(batch_size=32)
    assert float(steps.sel(gpus=1)) == pytest.approx(944.2 * (1 + 47070 / 32))
    assert float(steps.sel(gpus=1) / steps.sel(gpus=2)) == pytest.approx(1.9986, abs=1e-4)
    assert float(steps.sel(gpus=512) / tta["steps_to_target"].sel(batch_size=64, gpus=512)) == pytest.approx(
        1.5896, abs=1e-4
    )
    assert bool(tta["reachable"].all())  # 512 x 64 = 32,768 <= 67,840, the largest batch measured
    # The CLI's default target is now the law.
    assert (
        main(
            [
                "predict",
                "--workload",
                "resnet50",
                "--gpus",
                "8",
                "--batch-size",
                "32",
                "--target",
                "--format",
                "json",
            ]
        )
        == 0
    )


def test_explorer_time_to_accuracy_panel_shows_the_bend():
    from dlexplore.widgets import Explorer

    explorer = Explorer(measured=None)  # resnet50, 64 images per GPU, 1 to 1024 GPUs
    points = explorer.time_to_accuracy.sources["tta_points"].data
    batch = np.asarray(points["global_batch"])
    steps = np.asarray(points["steps"])
    assert batch.tolist() == [64.0 * 2**k for k in range(11)]
    np.testing.assert_allclose(steps, 944.2 * (1 + 47070 / batch))
    ratio = steps[:-1] / steps[1:]  # steps saved per doubling of the batch
    # Perfect scaling at 64 -> 128 images (736.47 / 368.73 = 1.9973), diminishing returns at
    # 32,768 -> 65,536 (2.4365 / 1.7182 = 1.4180): the McCandlish bend, not a straight line.
    assert ratio[0] == pytest.approx(1.9973, abs=1e-4) and ratio[-1] == pytest.approx(1.4180, abs=1e-4)
    assert np.all(np.diff(ratio) < 0)
    assert "resnet50, lars, global batch <= 67,840" in explorer.time_to_accuracy.subtitle.text
