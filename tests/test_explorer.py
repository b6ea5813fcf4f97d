"""The Explorer's Python side: controls drive the sources, the hot path avoids the model, the
matching measurement is laid over the prediction from the start (and matched again when the
workload or GPU changes), calibration reports the error before and after and shades a band.
(The browser side is in tests/browser.)"""

import re
from unittest import mock

import numpy as np
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore.errors import DlexploreError, InvalidValueError, UnknownNameError
from dlexplore.plots import GPU_COUNTS
from dlexplore.widgets import Explorer
from dlexplore.widgets import _prediction as prediction_module


@pytest.fixture(scope="module")
def default():
    return Explorer()


def data(explorer, source, column):
    return list(explorer.sources[source].data[column])


def text(widget) -> str:
    return re.sub(r"<[^>]+>", "", widget.value)


def controls(explorer, *names):
    return {name: explorer.controls[name].value for name in names}


# ---------------------------------------------------------------------------------------------
# measured by default


def test_default_view_overlays_the_matching_measurement(default):
    # resnet50 on a V100-16GB: NVIDIA's MXNet ResNet-50 v1.5 table has it (a DGX-1: 8 V100 over
    # NVLink2, batch 96 per GPU in fp32); its setup is adopted, the network between nodes stays.
    assert default.controls["measured"].value == "nvidia-mxnet-resnet50-v1.5"
    assert controls(
        default, "workload", "gpu", "precision", "batch_size", "gpus_per_node", "intra_link", "network"
    ) == {
        "workload": "resnet50",
        "gpu": "V100-16GB",
        "precision": "fp32",
        "batch_size": 96,
        "gpus_per_node": 8,
        "intra_link": "NVLink2",
        "network": "25GbE",
    }
    # the four DGX-1 fp32 points, on this GPU only (the DGX-2 rows are V100-32GB)
    assert data(default, "throughput_measured", "gpus") == [1, 2, 4, 8]
    assert data(default, "throughput_measured", "throughput") == [384.0, 763.0, 1513.0, 3005.0]
    # the error beside it, worked out here with the public API at the same settings
    line = dlx.predict(
        "resnet50",
        "V100-16GB",
        "25GbE",
        gpus=[1, 2, 4, 8],
        batch_size=96,
        gpus_per_node=8,
        intra_link="NVLink2",
    ).throughput.values
    error = (line - np.array([384.0, 763.0, 1513.0, 3005.0])) / np.array([384.0, 763.0, 1513.0, 3005.0])
    assert data(default, "throughput_measured", "error") == pytest.approx(error.tolist())
    status = text(default.status)
    assert f"mean |error| {np.abs(error).mean():.1%}, largest {np.abs(error).max():.1%}" in status
    assert "nvidia-mxnet-resnet50-v1.5" in status and "matches resnet50 on V100-16GB" in status
    assert default.figures.subtitles["throughput"].text == (
        f"measured: mean |error| {np.abs(error).mean():.1%} (4 points)"
    )
    assert default.headline_text.startswith("resnet50 on 8 x V100-16GB")
    assert "dlx-headline" in default.headline._dom_classes


def test_changing_gpu_or_workload_switches_to_the_matching_dataset_or_says_none_matches():
    explorer = Explorer()
    explorer.controls["gpu"].value = "P100"
    assert explorer.controls["measured"].value == "tf-benchmarks-2017-dgx1"
    assert controls(explorer, "batch_size", "gpus_per_node", "intra_link") == {
        "batch_size": 64,
        "gpus_per_node": 8,
        "intra_link": "NVLink1",
    }
    assert data(explorer, "throughput_measured", "throughput") == [219.0, 422.0, 852.0, 1734.0]
    explorer.controls["workload"].value = "resnet101"  # only the Horovod tables have it
    assert explorer.controls["measured"].value == "horovod-2017-16gpu-25gbe"
    assert controls(explorer, "network", "gpus_per_node", "batch_size") == {
        "network": "25GbE",
        "gpus_per_node": 4,
        "batch_size": 64,
    }
    explorer.controls["gpu"].value = "K80"
    assert explorer.measured_dataset is None
    assert data(explorer, "throughput_measured", "gpus") == []
    status = text(explorer.status)
    assert "No published measurement of resnet101 on K80" in status
    assert "horovod-2017-16gpu-25gbe (P100)" in status
    # the same dataset, another GPU: DGX-2's setup (16 V100-32GB, batch 128 in fp32)
    other = Explorer()
    other.controls["gpu"].value = "V100-32GB"
    assert controls(other, "measured", "batch_size", "gpus_per_node") == {
        "measured": "nvidia-mxnet-resnet50-v1.5",
        "batch_size": 128,
        "gpus_per_node": 16,
    }
    assert data(other, "throughput_measured", "gpus") == [1, 2, 4, 8, 16]


def test_measured_none_shows_none_and_matches_none():
    explorer = Explorer(measured=None)
    assert explorer.measured_dataset is None
    explorer.controls["gpu"].value = "P100"
    assert explorer.measured_dataset is None
    assert controls(explorer, "batch_size", "gpus_per_node", "network", "precision") == {
        "batch_size": 64,
        "gpus_per_node": 1,
        "network": "25GbE",
        "precision": "fp32",
    }


def test_given_settings_win_over_the_measured_setup():
    explorer = Explorer(batch_size=128, gpus_per_node=4, network="IB-EDR")
    assert controls(explorer, "measured", "batch_size", "gpus_per_node", "network") == {
        "measured": "nvidia-mxnet-resnet50-v1.5",
        "batch_size": 128,
        "gpus_per_node": 4,
        "network": "IB-EDR",
    }
    # the bar says the error mixes the model's and the setup's
    status = text(explorer.status)
    assert "Measured with batch 96 per GPU (the line: 128); 8 GPUs per node (the line: 4)" in status


def test_a_bert_table_is_predicted_at_its_sequence_length_and_accumulation():
    # NVIDIA's PyTorch BERT-large table: 128 tokens per sequence (the workload's own is 512), 2 to
    # 64 micro-batches per step, eight InfiniBand adapters and an NVLink per server; the line takes
    # the points' most common of each, and the bar says where the points' accumulation differs
    explorer = Explorer(measured="nvidia-pytorch-bert-large", precision="tf32")
    assert controls(
        explorer, "workload", "gpu", "precision", "batch_size", "gpus_per_node", "intra_link", "network"
    ) == {
        "workload": "bert-large-nvidia",
        "gpu": "A100-80GB",
        "precision": "tf32",
        "batch_size": 128,
        "gpus_per_node": 8,
        "intra_link": "NVLink3",
        "network": "IB-HDR",
    }
    gpus = [int(g) for g in data(explorer, "throughput_measured", "gpus")]
    measured = np.array(data(explorer, "throughput_measured", "throughput"))
    setup = dict(batch_size=128, gpus_per_node=8, intra_link="NVLink3", precision="tf32", nics_per_node=8)
    counts = sorted(set(gpus))  # the 8-GPU run is in both of the README's tables
    line = dlx.predict(
        "bert-large-nvidia", "A100-80GB", "IB-HDR", gpus=counts, seq=128, grad_accum=64, **setup
    )
    line = line.throughput.sel(gpus=gpus).values
    error = (line - measured) / measured
    assert data(explorer, "throughput_measured", "error") == pytest.approx(error.tolist())
    assert np.abs(error).mean() < 0.1
    # at the workload's own 512 tokens and one micro-batch the line would be far off
    plain = (
        dlx.predict("bert-large-nvidia", "A100-80GB", "IB-HDR", gpus=counts, **setup)
        .throughput.sel(gpus=gpus)
        .values
    )
    assert np.abs((plain - measured) / measured).mean() > 0.5
    status = text(explorer.status)
    assert "Measured with 2-64 micro-batches per step (the line: 64)" in status
    assert "sequence length" not in status
    # another workload: its line has none of BERT's settings (no error from a sequence length)
    explorer.controls["workload"].value = "resnet50"
    assert "Cannot predict" not in explorer.headline.value
    assert "sequence length" not in text(explorer.status)


def test_a_cnn_table_is_predicted_in_its_layout_per_precision():
    # NVIDIA's PyTorch ResNet-50 on a DGX A100: TF32 in NCHW, mixed precision in NHWC
    explorer = Explorer(measured="nvidia-pytorch-resnet50-v1.5", gpu="A100-80GB", precision="tf32")
    measured = np.array(data(explorer, "throughput_measured", "throughput"))
    setup = dict(gpus=[1, 8], batch_size=256, gpus_per_node=8, intra_link="NVLink3")
    for precision, layout in (("tf32", "nchw"), ("fp16", "nhwc")):
        if precision == "fp16":
            explorer.controls["precision"].value = "fp16"
            measured = np.array(data(explorer, "throughput_measured", "throughput"))
        line = dlx.predict(
            "resnet50",
            "A100-80GB",
            explorer.controls["network"].value,
            precision=precision,
            layout=layout,
            **setup,
        ).throughput.values
        error = (line - measured) / measured
        assert data(explorer, "throughput_measured", "error") == pytest.approx(error.tolist())
        assert "layout" not in text(explorer.status)
    # a layout of the user's wins, and the bar says it is not the points'
    mine = Explorer(measured="nvidia-pytorch-resnet50-v1.5", gpu="A100-80GB", precision="tf32", layout="nhwc")
    assert "Measured with layout nchw (the line: nhwc)" in text(mine.status)


def test_a_cnn_table_is_predicted_with_its_batch_norm_fusion_per_precision(tmp_path):
    # a user's table in MXNet's way: mixed precision with fused batch norms, FP32 without
    path = tmp_path / "fused.csv"
    path.write_text(
        "workload,gpu,network,gpus,gpus_per_node,batch_size,precision,fusion,throughput\n"
        "resnet50,V100-16GB,NVLink2,1,1,96,fp32,,384\n"
        "resnet50,V100-16GB,NVLink2,8,8,96,fp32,,3005\n"
        "resnet50,V100-16GB,NVLink2,1,1,192,fp16,bn_add_relu,1376\n"
        "resnet50,V100-16GB,NVLink2,8,8,192,fp16,bn_add_relu,10720\n",
        encoding="utf-8",
    )
    explorer = Explorer(measured=path, gpu="V100-16GB", precision="fp16")
    for precision, fusion, batch in (("fp16", "bn_add_relu", 192), ("fp32", "none", 96)):
        if precision == "fp32":
            explorer.controls["precision"].value = "fp32"
        measured = np.array(data(explorer, "throughput_measured", "throughput"))
        line = dlx.predict(
            "resnet50",
            "V100-16GB",
            explorer.controls["network"].value,
            gpus=[1, 8],
            batch_size=batch,
            gpus_per_node=8,
            intra_link="NVLink2",
            precision=precision,
            fusion=fusion,
        ).throughput.values
        error = (line - measured) / measured
        assert data(explorer, "throughput_measured", "error") == pytest.approx(error.tolist())
        assert "fusion" not in text(explorer.status)
    mine = Explorer(measured=path, gpu="V100-16GB", precision="fp16", fusion="none")
    assert "Measured with fusion bn_add_relu (the line: none)" in text(mine.status)


# ---------------------------------------------------------------------------------------------
# controls and the hot path


def test_gpu_and_batch_sliders_move_without_calling_the_model():
    explorer = Explorer()
    figures, sources = explorer.figures, dict(explorer.sources)
    with mock.patch.object(prediction_module, "predict", wraps=prediction_module.predict) as spy:
        explorer.controls["gpus"].value = 64
        assert spy.call_count == 0
        # the batch slider picks from the grid predicted for every batch at once
        explorer.controls["batch_size"].value = 128
        assert spy.call_count == 0
        c = explorer.settings
        expected = dlx.predict(
            c["workload"],
            c["gpu"],
            c["network"],
            gpus=list(GPU_COUNTS),
            batch_size=128,
            gpus_per_node=c["gpus_per_node"],
            intra_link=c["intra_link"],
            algorithm=c["algorithm"],
            precision=c["precision"],
        )
        assert data(explorer, "throughput_predicted", "throughput") == pytest.approx(
            expected.throughput.values
        )
        explorer.set(gpus=16, batch_size=32, bandwidth=12.5)  # one call for several controls
        assert spy.call_count == 1
    assert data(explorer, "throughput_selected", "gpus") == [16.0]
    assert explorer.figures is figures and explorer.sources == sources


def test_a_move_reaches_each_figure_in_one_message():
    explorer = Explorer()
    sent = []
    for view in explorer._views:
        view.send = lambda content, buffers=None, sent=sent: sent.append((content, buffers))
    explorer.controls["gpus"].value = 64
    # one PATCH-DOC (header, metadata, content) per figure, no binary buffers
    assert len(sent) == 3 * len(explorer._views)
    assert all(not buffers for _, buffers in sent)


def test_controls_change_the_plotted_prediction():
    explorer = Explorer(measured=None)
    before = data(explorer, "throughput_predicted", "throughput")
    explorer.controls["bandwidth"].value = 100.0
    faster = data(explorer, "throughput_predicted", "throughput")
    assert faster[0] == pytest.approx(before[0])  # one GPU does not communicate
    assert all(f >= b for f, b in zip(faster, before, strict=True)) and faster[-1] > before[-1]
    expected = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=1024, batch_size=64, bandwidth=100.0)
    assert faster[-1] == pytest.approx(float(expected.throughput))
    explorer.controls["workload"].value = "vgg16"
    assert data(explorer, "throughput_predicted", "throughput") != faster


def test_network_preset_sets_bandwidth_and_latency():
    explorer = Explorer(measured=None)
    explorer.controls["network"].value = "IB-EDR"
    assert explorer.controls["bandwidth"].value == pytest.approx(12.5)
    assert explorer.controls["latency"].value == pytest.approx(0.6)  # µs
    ib = dlx.predict("resnet50", "V100-16GB", "IB-EDR", gpus=1024, batch_size=64)
    assert data(explorer, "throughput_predicted", "throughput")[-1] == pytest.approx(float(ib.throughput))


def test_precision_offers_what_the_gpu_computes_in():
    explorer = Explorer("gpt2", "A100-80GB", measured=None, precision="bf16")
    assert explorer.controls["precision"].options == ("fp32", "tf32", "fp16", "bf16")
    explorer.controls["gpu"].value = "P100"  # no bf16 on Pascal: fp16 instead, and said so
    assert explorer.controls["precision"].options == ("fp32", "fp16")
    assert explorer.controls["precision"].value == "fp16"
    assert "P100 has no bf16: precision set to fp16" in text(explorer.status)
    with pytest.raises(InvalidValueError, match="V100-16GB has no tf32"):
        Explorer(precision="tf32")
    with pytest.raises(InvalidValueError, match="P100 has no tf32"):
        explorer.set(precision="tf32")


def test_measured_dataset_adopts_its_setup_and_shows_its_points():
    explorer = Explorer(measured="horovod-2017-16gpu-25gbe", workload="resnet101")
    c = explorer.controls
    assert (c["gpu"].value, c["network"].value, c["gpus_per_node"].value, c["batch_size"].value) == (
        "P100",
        "25GbE",
        4,
        64,
    )
    # the Horovod table has 6 ResNet-101 rows: 1 GPU, two parameter-server and three Horovod runs
    assert data(explorer, "throughput_measured", "gpus") == [1, 16, 16, 16, 16, 16]
    assert 119.4 in data(explorer, "throughput_measured", "throughput")
    status = text(explorer.status)
    assert "6 points" in status and "over 4 points" in status
    assert "(2 ran another algorithm than ring: shown, not compared)" in status
    errors = data(explorer, "throughput_measured", "error")
    assert sum(np.isfinite(errors)) == 4  # the two parameter-server rows are not compared
    groups = data(explorer, "throughput_measured", "group")
    assert groups.count("measured, not compared") == 2
    c["measured"].value = "(none)"
    assert explorer.measured_dataset is None


def test_mixed_precision_points_follow_the_precision_control():
    explorer = Explorer(measured="nvidia-mxnet-resnet50-v1.5")
    assert explorer.controls["batch_size"].value == 96
    explorer.controls["precision"].value = "fp16"
    # fp16 points on this GPU, at their batch (192): the explorer adopts it with the precision
    assert explorer.controls["batch_size"].value == 192
    assert data(explorer, "throughput_measured", "throughput") == [1376.0, 2768.0, 5357.0, 10723.0]


def test_user_measurements(tmp_path):
    path = tmp_path / "ours.csv"
    path.write_text(
        "workload,gpu,network,gpus,batch_size,precision,throughput\n"
        "resnet50,A100-40GB,IB-HDR,1,128,fp32,800\n"
        "resnet50,A100-40GB,IB-HDR,16,128,fp32,11000\n"
    )
    explorer = Explorer(measured=str(path))
    assert explorer.controls["measured"].value == "ours"
    assert controls(explorer, "gpu", "network", "batch_size") == {
        "gpu": "A100-40GB",
        "network": "IB-HDR",
        "batch_size": 128,
    }
    assert data(explorer, "throughput_measured", "throughput") == [800.0, 11000.0]
    label = explorer.add_measured(dlx.measured.read_csv(path).assign_attrs(name="again"))
    assert label == "again" and explorer.controls["measured"].value == "again"
    # an added dataset is matched like the bundled ones, before them
    explorer.controls["gpu"].value = "V100-16GB"
    explorer.controls["gpu"].value = "A100-40GB"
    assert explorer.controls["measured"].value == "again"


def test_bad_input_is_refused_clearly(tmp_path):
    with pytest.raises(UnknownNameError, match="did you mean"):
        Explorer(workload="resnet5")
    with pytest.raises(DlexploreError, match="no 'throughput'"):
        Explorer(measured="deepbench-allreduce-p100")
    with pytest.raises(DlexploreError, match="is a control"):
        Explorer(bandwidth=3)
    with pytest.raises(InvalidValueError, match="gpus must be a whole number from 1 to 1024; got 0"):
        Explorer(gpus=0)
    with pytest.raises(InvalidValueError, match="pue must be a number from 1 to 2; got 0.5"):
        Explorer(pue=0.5)
    explorer = Explorer(measured=None)
    with pytest.raises(DlexploreError, match="unknown control"):
        explorer.set(gpu_count=3)
    with pytest.raises(UnknownNameError):
        explorer.set(gpu="V100")
    with pytest.raises(InvalidValueError, match="bandwidth must be a number of GB/s > 0; got -1"):
        explorer.set(bandwidth=-1)
    missing = tmp_path / "missing.csv"
    with pytest.raises(DlexploreError, match="missing.csv"):
        Explorer(measured=str(missing))


def test_out_of_memory_is_obvious_and_never_suggests_a_larger_batch():
    explorer = Explorer("bert-large", batch_size=256)
    assert "Does NOT fit" in explorer.headline_text and "Does NOT fit" in explorer.headline.value
    assert "lower the batch to 6 per GPU or fewer" in explorer.headline_text
    assert "larger batch" not in explorer.headline_text
    assert explorer.figures.subtitles["memory"].text.startswith("OUT OF MEMORY")
    assert set(data(explorer, "throughput_predicted", "fits")) == {"NO: out of memory"}


def test_values_snap_to_the_sliders_and_custom_workloads():
    explorer = Explorer(gpus=5, batch_size=70, workload="transformer:2,256,4,128,1000")
    assert explorer.selected_gpus == 4 and explorer.controls["batch_size"].value == 64
    assert explorer.controls["workload"].value.startswith("transformer")
    explorer.set(latency=2e-6)
    assert explorer.controls["latency"].value == pytest.approx(2.0)


def test_widget_renders_as_a_widget(default):
    bundle = default._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert np.isfinite(data(default, "throughput_predicted", "throughput")).all()


def test_measured_dataset_without_gpus_is_refused():
    ds = xr.Dataset({"throughput": ("point", [1.0])}, attrs={"name": "bad"})
    with pytest.raises(DlexploreError, match="no 'gpus' coordinate"):
        Explorer(measured=ds)


def test_one_more_panel_joins_the_grid():
    import ipywidgets as w

    explorer = Explorer(measured=None)
    extra = w.HTML("time to accuracy")
    before = len(explorer._grid.children)  # the four figures and time to accuracy
    explorer.add_panel(extra)
    assert explorer._grid.children[-1] is extra and len(explorer._grid.children) == before + 1


# ---------------------------------------------------------------------------------------------
# calibrating


def test_calibrate_fits_the_points_shown_reports_before_and_after_and_resets():
    explorer = Explorer(measured="tf-benchmarks-2017-dgx1", workload="resnet50")
    assert explorer.controls["gpu"].value == "P100"  # the table is of P100s
    uncalibrated = data(explorer, "throughput_predicted", "throughput")
    before = np.abs(np.array(data(explorer, "throughput_measured", "error"))).mean()
    explorer.calibrate_button.click()
    cal = explorer.calibration
    assert cal is not None and list(cal.params["name"]) == ["compute_efficiency"]
    # fitted on the 1-GPU point: the curve now passes through the measured 219 images/s
    assert data(explorer, "throughput_predicted", "throughput")[0] == pytest.approx(219.0, rel=1e-6)
    # the same fit as the public API on the same points
    ds = dlx.measured.load("tf-benchmarks-2017-dgx1")
    same = dlx.calibrate(
        ds.isel(point=np.flatnonzero(ds.workload.values == "resnet50")),
        fit_on="gpus == 1",
        params=["compute_efficiency"],
        intra_link="NVLink1",
    )
    assert cal.fitted()["compute_efficiency"] == pytest.approx(same.fitted()["compute_efficiency"])
    after = np.abs(np.array(data(explorer, "throughput_measured", "error"))).mean()
    report = text(explorer.fit_report)
    assert f"{before:.1%} before, {after:.1%} after" in report
    assert f"held-out points: mean |error| {same.mape_holdout:.1%}" in report
    # the band: at least as wide as the largest held-out error, so those points lie inside it
    band = explorer.sources["throughput_band"].data
    assert band["gpus"] == [2.0**k for k in range(11)]
    line = np.array(data(explorer, "throughput_predicted", "throughput"))
    lower, upper = np.array(band["lower"]), np.array(band["upper"])
    assert np.all(lower < line) and np.all(upper > line)
    for gpus, measured in zip(
        data(explorer, "throughput_measured", "gpus"),
        data(explorer, "throughput_measured", "throughput"),
        strict=True,
    ):
        i = int(np.log2(gpus))
        assert lower[i] <= measured * (1 + 1e-9) and measured <= upper[i] * (1 + 1e-9), gpus
    explorer.reset_button.click()
    assert explorer.calibration is None and explorer.fit_report.value == ""
    assert explorer.sources["throughput_band"].data["gpus"] == []
    assert data(explorer, "throughput_predicted", "throughput") == pytest.approx(uncalibrated)


def test_calibration_is_forgotten_when_the_points_change():
    explorer = Explorer()
    explorer.calibrate()
    assert explorer.calibration is not None
    explorer.controls["gpu"].value = "P100"
    assert explorer.calibration is None and "Calibration cleared: the gpu changed" in text(
        explorer.fit_report
    )
    assert explorer.sources["throughput_band"].data["gpus"] == []


def test_calibrate_without_measurements_says_so():
    explorer = Explorer(measured=None)
    assert explorer.calibrate() is None
    assert "measured dataset first" in explorer.fit_report.value
    assert explorer.calibrate_button.disabled


# ---------------------------------------------------------------------------------------------
# energy, storage and the advisor


def test_storage_pue_and_the_advisor():
    explorer = Explorer(batch_size=256, storage="pfs", pue=1.25, measured=None)
    expected = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=1024, batch_size=256, storage="pfs")
    assert data(explorer, "step_breakdown", "io_exposed")[-1] == pytest.approx(
        float(expected.time_io_exposed) * 1e3
    )
    energy = dlx.model.energy(
        dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=8, batch_size=256, storage="pfs"), pue=1.25
    )
    assert f"{float(energy.energy_sample):.3g} J per sample" in explorer.headline_text
    explorer.controls["pue"].value = 1.5
    assert "(PUE 1.50)" in explorer.headline_text
    # the control changes the number, not only its label: energy scales with the PUE
    more = dlx.model.energy(
        dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=8, batch_size=256, storage="pfs"), pue=1.5
    )
    assert float(more.energy_sample) == pytest.approx(float(energy.energy_sample) * 1.5 / 1.25)
    assert f"{float(more.energy_sample):.3g} J per sample" in explorer.headline_text


def test_the_advisor_opens_with_the_explorers_settings():
    explorer = Explorer(
        "gpt2", "P100", "IB-EDR", precision="fp16", gpus=16, batch_size=8, gpus_per_node=4, measured=None
    )
    advisor = explorer.open_advisor()
    assert (
        advisor.workload.value,
        advisor.gpu.value,
        advisor.precision.value,
        advisor.network.value,
        advisor.gpus.value,
        advisor.gpus_per_node.value,
        advisor.batch_size.value,
    ) == ("gpt2", "P100", "fp16", "IB-EDR", 16, 4, 16 * 8)
    assert advisor.precision.options == ("fp32", "fp16")  # P100: no bf16 to start in
    assert advisor.frame is not None and "No configuration" not in advisor.summary.value
    assert explorer.advisor_box.children == (advisor.box,)
