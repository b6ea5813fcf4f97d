"""Your own run in the explorer: a trace as the measured point, calibrating to it, runs held out,
saving the fit, and hybrid parallelism on the sliders. (What a trace says and the fit itself are
tests/test_fit_traces.py's; tests/browser/test_your_run_browser.py drives all of it in Chromium.)

Expected values come from the public model functions called here with the same settings
(``dlexplore.predict``, ``dlexplore.predict_parallel``, ``calibrate_traces``) or from the events.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import dlexplore as dlx
from dlexplore._data import data_dir
from dlexplore.cli import build_parser
from dlexplore.errors import DlexploreError
from dlexplore.fit.trace_fit import calibrate_traces
from dlexplore.fit.trace_point import trace_point
from dlexplore.fit.trace_setup import load_traces
from dlexplore.plots import GPU_COUNTS
from dlexplore.widgets import Explorer

TRACES = data_dir() / "traces"
RUNS = [str(TRACES / "gloo-transformer-1rank"), str(TRACES / "gloo-transformer-2rank")]


def data(explorer, source, column):
    return list(explorer.sources[source].data[column])


def text(widget) -> str:
    return re.sub(r"<[^>]+>", " ", widget.value)


@pytest.fixture(scope="module")
def mlp():
    return Explorer(trace=TRACES / "gloo-mlp-2rank")


def test_the_controls_start_where_the_run_was_and_say_so(mlp):
    c = mlp.controls
    assert (c["gpus"].value, c["batch_size"].value, c["precision"].value) == (2, 32, "fp32")
    assert (c["algorithm"].value, c["gpus_per_node"].value) == ("ring", 2)
    assert c["workload"].value == "traced-gloo-mlp-2rank"
    for name in ("gpus", "batch_size", "precision", "algorithm", "gpus_per_node", "workload"):
        assert "dlx-inferred" in c[name]._dom_classes, name
        assert c[name].tooltip.startswith("from the trace"), name
    assert "dlx-inferred" not in c["gpu"]._dom_classes  # the run used the CPU: asked
    status = text(mlp.trace_status)
    assert "Not in the trace" in status and "the run used the CPU" in status
    assert mlp.bar not in mlp._bars.children  # no published dataset: your run is the measurement


def test_the_run_is_a_point_on_the_gpu_axis_with_its_error(mlp):
    point = mlp._trace_points[0]
    assert data(mlp, "throughput_measured", "gpus") == [2.0]
    assert data(mlp, "throughput_measured", "throughput") == [pytest.approx(point.throughput)]
    line = dict(
        zip(
            data(mlp, "throughput_predicted", "gpus"),
            data(mlp, "throughput_predicted", "throughput"),
            strict=False,
        )
    )
    error = (line[2.0] - point.throughput) / point.throughput
    assert data(mlp, "throughput_measured", "error") == [pytest.approx(error)]
    assert f"{error:+.0%}" in text(mlp.trace_status)
    # its step breakdown beside the predicted bars, its collectives over the predicted one-step view
    assert "gloo-mlp-2rank" in data(mlp, "step_breakdown_measured", "trace")
    assert set(data(mlp, "comm_measured", "row")) == {"measured"}
    mlp.controls["gpus"].value = 4  # no run at 4 GPUs: no measured collectives there
    assert data(mlp, "comm_measured", "row") == []
    mlp.controls["gpus"].value = 2


def test_calibrating_to_the_run_draws_the_calibrated_line_band_and_the_model_before():
    explorer = Explorer(trace=TRACES / "gloo-mlp-2rank")
    before = data(explorer, "throughput_predicted", "throughput")
    cal = explorer.calibrate_trace()
    point = explorer._trace_points[0]
    settings = explorer._predict_settings(calibrated=False)
    again = calibrate_traces([point], settings)
    assert cal.fitted() == pytest.approx(again.fitted())
    line = dlx.predict(**{**settings, **cal.fitted()}, gpus=list(GPU_COUNTS), batch_size=32)
    assert data(explorer, "throughput_predicted", "throughput") == pytest.approx(line["throughput"].values)
    assert explorer.figures.band.visible
    lower, upper = data(explorer, "throughput_band", "lower"), data(explorer, "throughput_band", "upper")
    assert all(lo < t < hi for lo, t, hi in zip(lower, line["throughput"].values, upper, strict=True))
    # the uncalibrated model, faint, for contrast
    assert explorer.overlays.uncalibrated.visible
    assert data(explorer, "throughput_uncalibrated", "throughput") == pytest.approx(before)
    report = text(explorer.trace_report)
    assert "compute_efficiency =" in report and "intra_bandwidth =" in report and "±" in report
    # a batch move after calibrating: still the calibrated model, at that batch
    explorer.controls["batch_size"].value = 64
    line64 = dlx.predict(**{**settings, **cal.fitted()}, gpus=list(GPU_COUNTS), batch_size=64)
    assert data(explorer, "throughput_predicted", "throughput") == pytest.approx(line64["throughput"].values)
    explorer.reset_calibration()
    assert not explorer.overlays.uncalibrated.visible and not explorer.figures.band.visible
    explorer.calibrate_trace()
    explorer.set(gpu="A100-80GB")  # another device: the fit no longer stands, and the panel says so
    assert (
        explorer.calibration is None and "Calibration cleared: the gpu changed" in explorer.trace_report.value
    )


def test_a_saved_fit_is_loaded_by_another_explorer(tmp_path):
    first = Explorer(trace=TRACES / "gloo-mlp-2rank")
    first.calibrate_trace()
    path = tmp_path / "fit.json"
    first.calibration_path.value = str(path)
    first._save_clicked()
    assert path.is_file() and "Saved to" in first.trace_report.value
    second = Explorer(trace=TRACES / "gloo-mlp-2rank")
    second.calibration_path.value = str(path)
    second._load_clicked()
    assert second.calibration.fitted() == pytest.approx(first.calibration.fitted())
    assert data(second, "throughput_predicted", "throughput") == pytest.approx(
        data(first, "throughput_predicted", "throughput")
    )
    assert data(second, "throughput_band", "upper") == pytest.approx(data(first, "throughput_band", "upper"))
    second.calibration_path.value = str(tmp_path / "nothing.json")
    second._load_clicked()
    assert "nothing.json: cannot read" in second.trace_report.value


def test_runs_at_several_gpu_counts_are_fitted_on_some_and_tested_on_the_others():
    explorer = Explorer(trace=RUNS)
    assert data(explorer, "throughput_measured", "gpus") == [1.0, 2.0]
    assert explorer.trace_fit_on.value == "1"  # the smallest by default: the others held out
    cal = explorer.calibrate_trace()
    assert data(explorer, "throughput_measured", "group") == ["your run (fitted)", "your run (held out)"]
    held = cal.points.iloc[1]
    points = [trace_point(t) for t in load_traces(RUNS)]
    expected = calibrate_traces(points, explorer._predict_settings(calibrated=False), fit=[True, False])
    assert held["error"] == pytest.approx(expected.points.iloc[1]["error"])
    assert data(explorer, "throughput_measured", "error")[1] == pytest.approx(held["error"], rel=1e-6)
    assert "held out" in text(explorer.trace_report)
    explorer.trace_fit_on.value = "all"
    both = explorer.calibrate_trace()
    assert bool(both.points["fitted"].all())


def test_hybrid_controls_switch_a_transformer_to_the_hybrid_model():
    explorer = Explorer(trace=str(TRACES / "gloo-transformer-2rank"), gpu="A100-80GB", network="IB-HDR")
    assert not explorer.controls["tp"].disabled
    assert "Plain data parallelism" in text(explorer.hybrid_note)
    explorer.set(tp=2, gpus=4)
    s = explorer.settings
    wl = explorer._custom_workloads.get(s["workload"], s["workload"])
    expected = dlx.predict_parallel(
        wl,
        "A100-80GB",
        "IB-HDR",
        gpus=4,
        tp=2,
        batch_size=4 * 8,  # the global batch: GPUs x the batch per GPU
        micro_batch=4 * 8 // 2,  # the whole replica batch (micro-batch "all")
        precision=s["precision"],
        gpus_per_node=s["gpus_per_node"],
        intra_link=s["intra_link"],
        bandwidth=s["bandwidth"],
        latency=s["latency"],  # settings holds seconds
    )
    line = dict(
        zip(
            data(explorer, "throughput_predicted", "gpus"),
            data(explorer, "throughput_predicted", "throughput"),
            strict=False,
        )
    )
    assert line[4.0] == pytest.approx(float(expected["throughput"]), rel=1e-9)
    # one GPU cannot hold tp = 2: a gap in the line, and said in words
    assert np.isnan(line[1.0])
    assert "1 GPU: tp x pp = 2 x 1 = 2 does not divide gpus" in text(explorer.hybrid_note)
    # the one-step view splits the traffic by kind, the step stack shows tensor-parallel time
    assert explorer.figures.comm.y_range.factors[:4] == [
        "data parallel",
        "pipeline",
        "tensor parallel",
        "compute",
    ]
    assert data(explorer, "step_breakdown", "tp_exposed")[2] > 0
    assert explorer.figures.memory.y_range.factors[-1] == "per GPU"
    # every term is a bar of the stack against the capacity; the subtitle names the largest
    at4 = explorer.prediction.sel(gpus=4)
    terms = {k: float(at4[f"mem_{k}"]) for k in ("params", "grads", "optimizer", "activations", "workspace")}
    assert data(explorer, "memory", "activations") == [pytest.approx(terms["activations"] / 2**30)]
    assert sum(terms.values()) == pytest.approx(float(at4["mem_total"]))
    largest = max(terms, key=terms.get).replace("workspace", "other")
    assert f"largest: {largest}" in explorer.figures.subtitles["memory"].text
    explorer.set(gpus=1)
    assert "cannot run: tp x pp = 2 x 1 = 2 does not divide gpus = 1" in explorer.headline_text
    explorer.set(tp=1, gpus=2)  # back to plain data parallelism: the data-parallel model
    assert explorer.figures.comm.y_range.factors[:2] == ["allreduce", "compute"]


def test_hybrid_controls_are_explained_not_hidden_for_a_cnn():
    explorer = Explorer(measured=None)
    assert explorer.controls["tp"].disabled
    assert "resnet50 is not a transformer" in text(explorer.hybrid_note)


def test_the_advisors_best_goes_to_the_sliders_in_one_click():
    explorer = Explorer("gpt2", "A100-80GB", "IB-HDR", gpus=16, batch_size=8, precision="bf16", measured=None)
    advisor = explorer.open_advisor()
    best = advisor.frame.iloc[0]
    buttons = explorer.apply_box.children[1].children
    assert len(buttons) == 3 and buttons[0].description.startswith(
        f"Apply #1: tp {best['tp']} pp {best['pp']}"
    )
    buttons[0].click()
    c = explorer.controls
    assert (c["tp"].value, c["pp"].value, c["zero"].value, c["recompute"].value) == (
        best["tp"],
        best["pp"],
        best["zero"],
        best["recompute"],
    )
    assert c["gpus"].value == best["dp"] * best["tp"] * best["pp"] == 16
    # the explorer now draws what the advisor ranked: the same step time at 16 GPUs
    step = dict(
        zip(
            data(explorer, "throughput_predicted", "gpus"),
            data(explorer, "throughput_predicted", "step_time_ms"),
            strict=False,
        )
    )
    assert step[16.0] / 1e3 == pytest.approx(float(best["step_time"]), rel=1e-6)
    with pytest.raises(DlexploreError, match="expected an advise"):
        explorer.apply_configuration({"tp": 2})


def test_explore_passes_the_trace_and_leaves_the_rest_to_it(tmp_path):
    from dlexplore.cli import _explorer_args

    args = build_parser().parse_args(["explore", "--trace", str(TRACES / "gloo-mlp-2rank")])
    config = _explorer_args(args)
    assert config == {"trace": [str(TRACES / "gloo-mlp-2rank")]}
    args = build_parser().parse_args(
        ["explore", "--trace", str(TRACES / "gloo-mlp-2rank"), "--gpu", "A100-80GB"]
    )
    assert _explorer_args(args)["gpu"] == "A100-80GB"
    plain = _explorer_args(build_parser().parse_args(["explore"]))
    assert (plain["workload"], plain["gpu"], plain["gpus"]) == ("resnet50", "V100-16GB", 8)
    with pytest.raises(DlexploreError, match="missing-run"):
        _explorer_args(build_parser().parse_args(["explore", "--trace", str(tmp_path / "missing-run")]))


def test_a_trace_with_allocator_events_shows_its_peak_beside_the_predicted_memory():
    from _real_traces import real

    path = real(
        "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
    )
    # the sample trains ResNet-50 on one V100 (its device); what it does not say is given here
    explorer = Explorer(trace=path, workload="resnet50", batch_size=32)
    assert explorer.controls["gpu"].value == "V100-32GB"
    assert "dlx-inferred" in explorer.controls["gpu"]._dom_classes
    peak = explorer._trace_points[0].memory_peak
    assert data(explorer, "memory_measured", "peak") == [pytest.approx(peak / 2**30)]
    assert explorer.figures.memory.y_range.factors == ["measured peak", "per GPU"]
    assert "memory peak" in text(explorer.trace_status)


def test_bad_hybrid_settings_and_traces_are_refused_in_words(tmp_path):
    from dlexplore.errors import InvalidValueError

    with pytest.raises(InvalidValueError, match="zero must be a whole number from 0 to 3; got 5"):
        Explorer(measured=None, zero=5)
    with pytest.raises(DlexploreError, match="unknown schedule 'zigzag'"):
        Explorer(measured=None, schedule="zigzag")
    with pytest.raises(DlexploreError, match="missing-run"):
        Explorer(trace=tmp_path / "missing-run")
    explorer = Explorer("gpt2", "A100-80GB", measured=None)
    with pytest.raises(InvalidValueError, match="tp must be a whole number >= 1; got 0"):
        explorer.set(tp=0)
    explorer.set(tp=3)  # snaps to the slider's nearest degree, as gpus does
    assert explorer.controls["tp"].value in (2, 4)
    with pytest.raises(DlexploreError, match="no trace"):
        explorer.calibrate_trace()
