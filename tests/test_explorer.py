"""The Explorer's Python side: controls drive the sources, the hot path avoids the model, measured
datasets adopt their setup. (The browser side is in tests/browser.)"""

from unittest import mock

import numpy as np
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore.errors import DlexploreError, UnknownNameError
from dlexplore.widgets import Explorer
from dlexplore.widgets import explorer as explorer_module


@pytest.fixture(scope="module")
def default():
    return Explorer()


def data(explorer, source, column):
    return list(explorer.sources[source].data[column])


def test_defaults_predict_every_gpu_count(default):
    assert default.selected_gpus == 8
    assert data(default, "throughput_predicted", "gpus") == [2.0**k for k in range(11)]
    # the explorer's algorithm control starts at ring (predict's own default is NCCL's choice)
    expected = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=8, batch_size=64, algorithm="ring")
    assert data(default, "throughput_selected", "throughput")[0] == pytest.approx(
        float(expected.throughput))
    assert default.headline_text.startswith("resnet50 on 8 x V100-16GB")
    assert "dlx-headline" in default.headline._dom_classes


def test_gpu_slider_moves_without_calling_the_model():
    explorer = Explorer()
    figures, sources = explorer.figures, dict(explorer.sources)
    with mock.patch.object(explorer_module, "predict", wraps=explorer_module.predict) as spy:
        explorer.controls["gpus"].value = 64
        assert spy.call_count == 0
        explorer.controls["batch_size"].value = 128
        assert spy.call_count == 1
        explorer.set(gpus=16, batch_size=32, bandwidth=12.5)  # one call for several controls
        assert spy.call_count == 2
    assert data(explorer, "throughput_selected", "gpus") == [16.0]
    assert explorer.figures is figures and explorer.sources == sources


def test_controls_change_the_plotted_prediction():
    explorer = Explorer()
    before = data(explorer, "throughput_predicted", "throughput")
    explorer.controls["bandwidth"].value = 100.0
    faster = data(explorer, "throughput_predicted", "throughput")
    assert faster[0] == pytest.approx(before[0])  # one GPU does not communicate
    assert all(f >= b for f, b in zip(faster, before, strict=True)) and faster[-1] > before[-1]
    expected = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=1024, batch_size=64, bandwidth=100.0,
                           algorithm="ring")
    assert faster[-1] == pytest.approx(float(expected.throughput))
    explorer.controls["workload"].value = "vgg16"
    assert data(explorer, "throughput_predicted", "throughput") != faster


def test_network_preset_sets_bandwidth_and_latency():
    explorer = Explorer()
    explorer.controls["network"].value = "IB-EDR"
    assert explorer.controls["bandwidth"].value == pytest.approx(12.5)
    assert explorer.controls["latency"].value == pytest.approx(0.6)  # µs
    ib = dlx.predict("resnet50", "V100-16GB", "IB-EDR", gpus=1024, batch_size=64, algorithm="ring")
    assert data(explorer, "throughput_predicted", "throughput")[-1] == pytest.approx(
        float(ib.throughput))


def test_measured_dataset_adopts_its_setup_and_shows_its_points():
    explorer = Explorer(measured="horovod-2017-16gpu-25gbe", workload="resnet101")
    c = explorer.controls
    assert (c["gpu"].value, c["network"].value, c["gpus_per_node"].value, c["batch_size"].value) == (
        "P100", "25GbE", 4, 64)
    # the Horovod table has 6 ResNet-101 rows: 1 GPU, two parameter-server and three Horovod runs
    assert data(explorer, "throughput_measured", "gpus") == [1, 16, 16, 16, 16, 16]
    assert 119.4 in data(explorer, "throughput_measured", "throughput")
    assert "6 measured points; 4 with this algorithm (ring allreduce)" in explorer.status.value
    errors = data(explorer, "throughput_measured", "error")
    assert sum(np.isfinite(errors)) == 4  # the two parameter-server rows are not compared
    c["workload"].value = "alexnet"
    assert data(explorer, "throughput_measured", "gpus") == []
    assert "no points for this workload" in explorer.status.value
    c["measured"].value = "(none)"
    assert explorer.measured_dataset is None


def test_mixed_precision_points_follow_the_precision_control():
    explorer = Explorer(measured="nvidia-mxnet-resnet50-v1.5")
    first = explorer.controls["precision"].value
    shown = explorer.measured_dataset
    n = int(((shown.precision == first) & (shown.workload == "resnet50")).sum())
    assert len(data(explorer, "throughput_measured", "gpus")) == n > 0


def test_user_measurements(tmp_path):
    path = tmp_path / "ours.csv"
    path.write_text("workload,gpu,network,gpus,batch_size,precision,throughput\n"
                    "resnet50,A100-40GB,IB-HDR,1,128,fp32,800\n"
                    "resnet50,A100-40GB,IB-HDR,16,128,fp32,11000\n")
    explorer = Explorer(measured=str(path))
    assert explorer.controls["measured"].value == "ours"
    assert explorer.controls["gpu"].value == "A100-40GB"
    assert data(explorer, "throughput_measured", "throughput") == [800.0, 11000.0]
    label = explorer.add_measured(dlx.measured.read_csv(path).assign_attrs(name="again"))
    assert label == "again" and explorer.controls["measured"].value == "again"


def test_bad_input_is_refused_clearly(tmp_path):
    with pytest.raises(UnknownNameError, match="did you mean"):
        Explorer(workload="resnet5")
    with pytest.raises(DlexploreError, match="no 'throughput'"):
        Explorer(measured="deepbench-allreduce-p100")
    with pytest.raises(DlexploreError, match="is a control"):
        Explorer(bandwidth=3)
    explorer = Explorer()
    with pytest.raises(DlexploreError, match="unknown control"):
        explorer.set(gpu_count=3)
    with pytest.raises(UnknownNameError):
        explorer.set(gpu="V100")
    missing = tmp_path / "missing.csv"
    with pytest.raises(DlexploreError, match="missing.csv"):
        Explorer(measured=str(missing))


def test_out_of_memory_is_obvious():
    explorer = Explorer("bert-large", batch_size=256)
    assert "Does NOT fit" in explorer.headline_text
    assert "Does NOT fit" in explorer.headline.value
    assert explorer.figures.memory.title.text.startswith("OUT OF MEMORY")
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


def test_calibrate_control_fits_the_points_shown_and_resets():
    explorer = Explorer(measured="tf-benchmarks-2017-dgx1", workload="resnet50")
    uncalibrated = data(explorer, "throughput_predicted", "throughput")
    explorer.calibrate_button.click()
    cal = explorer.calibration
    assert cal is not None and list(cal.params["name"]) == ["compute_efficiency"]
    # fitted on the 1-GPU point: the curve now passes through the measured 219 images/s
    assert data(explorer, "throughput_predicted", "throughput")[0] == pytest.approx(219.0, rel=1e-6)
    # the same fit as the public API on the same points
    ds = dlx.measured.load("tf-benchmarks-2017-dgx1")
    same = dlx.calibrate(ds.isel(point=np.flatnonzero(ds.workload.values == "resnet50")),
                         fit_on="gpus == 1", params=["compute_efficiency"])
    assert cal.fitted()["compute_efficiency"] == pytest.approx(same.fitted()["compute_efficiency"])
    assert f"held-out MAPE {same.mape_holdout:.1%}" in explorer.fit_report.value
    explorer.reset_button.click()
    assert explorer.calibration is None and explorer.fit_report.value == ""
    assert data(explorer, "throughput_predicted", "throughput") == pytest.approx(uncalibrated)


def test_calibrate_without_measurements_says_so():
    explorer = Explorer()
    assert explorer.calibrate() is None
    assert "measured dataset first" in explorer.fit_report.value


def test_storage_pue_and_the_advisor():
    explorer = Explorer(batch_size=256, storage="pfs", pue=1.25)
    expected = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=1024, batch_size=256, storage="pfs")
    assert data(explorer, "step_breakdown", "io_exposed")[-1] == pytest.approx(
        float(expected.time_io_exposed) * 1e3)
    energy = dlx.model.energy(dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=8, batch_size=256,
                                          storage="pfs"), pue=1.25)
    assert f"{float(energy.energy_sample):.3g} J per sample" in explorer.headline_text
    explorer.controls["pue"].value = 1.5
    assert "(PUE 1.50)" in explorer.headline_text
    advisor = explorer.open_advisor()
    assert advisor.workload.value == "resnet50" and advisor.gpus.value == 8
    assert explorer.advisor_box.children == (advisor.box,)
