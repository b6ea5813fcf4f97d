"""Plot columns against numbers worked out by hand on a two-layer toy workload."""

import math

import numpy as np
import pytest
import xarray as xr

from dlexplore.catalog import GPU, Layer, Link, StorageTier, Workload
from dlexplore.errors import DlexploreError
from dlexplore.model import predict
from dlexplore.plots import (
    SOURCE_NAMES,
    ExplorerFigures,
    bottleneck,
    bucket_columns,
    headline,
    largest_batch,
    measured_columns,
    memory_columns,
    phase_columns,
    selected_columns,
    step_breakdown_columns,
    throughput_columns,
)

# The toy of tests/test_model.py: 1e6 + 3e6 parameters, 1e9 + 3e9 FLOPs and 1 MB + 2 MB of fp32
# activations per sample; 10 TFLOP/s at 50%, a 10 GB/s network with 5 us latency.
TOY = Workload(
    "toy",
    "custom",
    (Layer("first", "linear", 1_000_000, 1e9, 1e6), Layer("second", "linear", 3_000_000, 3e9, 2e6)),
    input_bytes_per_sample=1e5,
    sample_unit="samples",
    source="test",
)
CARD = GPU("card", "test", 10.0, math.nan, 40.0, math.nan, 16 * 2**30, 1000.0, 300.0, 50.0, "test")
NET = Link("net", "network", 10.0, 5e-6, "test")
FAST = Link("fast", "intra", 100.0, 1e-6, "test")
A, B = 5e-6, 1e-10
T_FWD, T_BWD, T_OPT = 8e-3, 16e-3, 4e6 * 20 / 1e12  # see test_step_by_hand
C1, C2 = 6 * A + 1.5 * 1.2e7 * B, 6 * A + 1.5 * 4e6 * B  # ring allreduce of the two buckets, p = 4


def toy(**kw):
    args = dict(
        workload=TOY,
        gpu=CARD,
        network=NET,
        intra_link=FAST,
        gpus=[1, 4],
        batch_size=10,
        compute_efficiency=0.5,
        bucket_size=0,
        optimizer="momentum",
        buckets=True,
        algorithm="ring",
        kernel_time=0.0,
        memory_efficiency=1.0,
    )  # as test_model.run
    args.update(kw)
    return predict(**args)


def test_throughput_line_ideal_and_fit_flags():
    cols = throughput_columns(toy())
    step4 = T_FWD + T_BWD + T_OPT + C2  # the first bucket hides behind the last quarter of backward
    step1 = T_FWD + T_BWD + T_OPT
    np.testing.assert_allclose(cols["gpus"], [1, 4])
    np.testing.assert_allclose(cols["throughput"], [10 / step1, 40 / step4])
    np.testing.assert_allclose(cols["ideal"], [10 / step1, 40 / step1])
    np.testing.assert_allclose(cols["efficiency"], [1.0, step1 / step4])
    np.testing.assert_allclose(cols["step_time_ms"], [step1 * 1e3, step4 * 1e3])
    assert cols["fits"].tolist() == ["yes", "yes"]
    huge = throughput_columns(toy(batch_size=100_000))
    assert huge["fits"].tolist() == ["NO: out of memory"] * 2
    assert len(set(huge["color"])) == 1 and huge["color"][0] != cols["color"][0]


def test_selected_point():
    cols = selected_columns(toy(), 4)
    assert cols["gpus"].tolist() == [4.0]
    assert cols["step_time_ms"][0] == pytest.approx((T_FWD + T_BWD + T_OPT + C2) * 1e3)
    with pytest.raises(DlexploreError, match="no prediction at 8 GPUs"):
        selected_columns(toy(), 8)


def test_step_breakdown_adds_up_to_the_step():
    cols = step_breakdown_columns(toy(), selected=4)
    # at 4 GPUs: bucket 1 (c1) runs under the last quarter of backward, bucket 2 (c2) is exposed
    np.testing.assert_allclose(cols["comm_overlapped"], [0.0, C1 * 1e3])
    np.testing.assert_allclose(cols["comm_exposed"], [0.0, C2 * 1e3])
    np.testing.assert_allclose(
        cols["compute_only"], [(T_FWD + T_BWD + T_OPT) * 1e3, (T_FWD + T_BWD + T_OPT - C1) * 1e3]
    )
    np.testing.assert_allclose(cols["io_exposed"], [0.0, 0.0])
    parts = cols["compute_only"] + cols["comm_overlapped"] + cols["comm_exposed"] + cols["io_exposed"]
    np.testing.assert_allclose(parts, cols["step_time"])
    assert cols["label"].tolist() == ["1", "4"]
    assert cols["alpha"].tolist() == [0.45, 1.0] and cols["outline"].tolist() == ["white", "black"]


def test_serialised_communication_is_all_exposed():
    cols = step_breakdown_columns(toy(overlap=0.0), selected=4)
    np.testing.assert_allclose(cols["comm_overlapped"], [0.0, 0.0])
    np.testing.assert_allclose(cols["comm_exposed"], [0.0, (C1 + C2) * 1e3])


def test_memory_in_gib_and_largest_batch():
    ds = toy()
    cols = memory_columns(ds, 4)
    gib = 2**30
    assert cols["params"][0] == pytest.approx(1.6e7 / gib)
    assert cols["grads"][0] == pytest.approx(1.6e7 / gib)
    assert cols["optimizer"][0] == pytest.approx(1.6e7 / gib)
    assert cols["activations"][0] == pytest.approx(10 * 3e6 / gib)
    assert cols["workspace"][0] == pytest.approx(1.0)  # 1 GiB; bucket_size 0 keeps no fusion buffer
    assert cols["capacity"][0] == pytest.approx(16.0)
    # 16 GiB - 1 GiB workspace - 48 MB of weights, gradients and velocity, over 3 MB per sample
    expected = math.floor((16 * gib - gib - 4.8e7) / 3e6)
    assert largest_batch(ds, 4) == expected == 5352
    assert bool(toy(batch_size=expected, gpus=4).fits)
    assert not bool(toy(batch_size=expected + 1, gpus=4).fits)
    assert largest_batch(toy(workspace=17 * gib), 1) == 0


def test_bucket_timeline_and_phases():
    buckets = bucket_columns(toy(), 4)
    np.testing.assert_allclose(buckets["start"], [(T_FWD + 0.75 * T_BWD) * 1e3, (T_FWD + T_BWD) * 1e3])
    np.testing.assert_allclose(buckets["time"], [C1 * 1e3, C2 * 1e3])
    np.testing.assert_allclose(buckets["mib"], [1.2e7 / 2**20, 4e6 / 2**20])
    np.testing.assert_allclose(buckets["busbw"], [1.5 * 1.2e7 / C1 / 1e9, 1.5 * 4e6 / C2 / 1e9])
    phases = phase_columns(toy(), 4)
    assert phases["phase"].tolist() == ["forward", "backward", "optimizer", "input I/O (exposed)"]
    # the optimizer waits for the last allreduce, which ends c2 after backward
    np.testing.assert_allclose(
        phases["start"], np.array([0, T_FWD, T_FWD + T_BWD + C2, T_FWD + T_BWD + C2 + T_OPT]) * 1e3
    )
    assert phases["end"][-2] == pytest.approx((T_FWD + T_BWD + C2 + T_OPT) * 1e3)
    with pytest.raises(DlexploreError, match="buckets=True"):
        bucket_columns(toy(buckets=False), 4)


def test_bottleneck_in_words():
    assert bottleneck(toy(), 4)[0] == "compute"
    slow = toy(bandwidth=0.001, latency=1e-3)
    name, share = bottleneck(slow, 4)
    assert name == "communication" and 0.5 < share < 1
    assert "Bottleneck: communication" in headline(slow, 4)
    disk = StorageTier("disk", "shared", 0.01, 0.01, 1e-3, "test")
    assert bottleneck(toy(storage=disk), 4)[0] == "input I/O"
    text = headline(toy(batch_size=100_000), 4)
    assert "Does NOT fit in memory" in text and "largest batch that fits: 5352" in text


def test_measured_points_filtered_and_compared_with_the_line():
    pred = toy()
    line = throughput_columns(pred)["throughput"]
    measured = xr.Dataset(
        {"throughput": ("point", [line[0] * 1.1, line[1], 100.0, 5.0])},
        coords={
            "gpus": ("point", [1, 4, 2, 2]),
            "workload": ("point", ["toy", "toy", "toy", "other"]),
            "setup": ("point", ["a", "b", "a", "a"]),
        },
        attrs={"source": "measured: test"},
    )
    cols = measured_columns(measured, pred, workload="toy")
    assert cols["gpus"].tolist() == [1, 4, 2]
    # between 1 and 4 GPUs the line is interpolated in log-log: the geometric mean at 2 GPUs
    mid = math.sqrt(line[0] * line[1])
    np.testing.assert_allclose(cols["predicted"], [line[0], line[1], mid])
    # error = (predicted - measured) / measured, dlexplore.fit's definition
    np.testing.assert_allclose(cols["error"], [1 / 1.1 - 1, 0.0, mid / 100.0 - 1], atol=1e-12)
    assert cols["label"].tolist() == ["a", "b", "a"]
    assert cols["group"].tolist() == ["measured"] * 3 and len(set(cols["color"])) == 1
    assert set(cols["source"]) == {"measured: test"}
    # only points that ran the algorithm shown (or one GPU) are compared with its line
    ran = measured.assign_coords(algorithm=("point", ["none", "ring", "parameter_server", "ring"]))
    compared = measured_columns(ran, pred, workload="toy", algorithm="ring")
    assert np.isfinite(compared["error"]).tolist() == [True, True, False]
    assert compared["group"].tolist() == ["measured", "measured", "measured, not compared"]
    assert compared["color"][2] != compared["color"][0]
    # the line predicts one GPU: points measured on another are not laid over it
    on = measured.assign_coords(gpu=("point", ["card", "card", "other", "card"]))
    assert measured_columns(on, pred, workload="toy", gpu="card")["gpus"].tolist() == [1, 4]
    assert len(measured_columns(measured, pred, workload="nothing")["gpus"]) == 0
    assert len(measured_columns(None, pred)["gpus"]) == 0


def test_plots_refuse_a_prediction_with_other_sweeps():
    with pytest.raises(DlexploreError, match="also varies along"):
        throughput_columns(toy(batch_size=[10, 20]))


def test_figures_keep_their_sources_and_take_new_data():
    figures = ExplorerFigures([1, 4])
    sources = dict(figures.sources)
    assert sorted(sources) == sorted(SOURCE_NAMES)
    assert all(source.name == name for name, source in sources.items())
    figures.show(toy(), 4)
    first = list(figures.sources["throughput_predicted"].data["throughput"])
    # all buckets together: busbw = 2(p-1)/p x all bytes / all time
    assert figures.subtitles["comm"].text == (
        f"2 allreduces, {1.6e7 / 2**20:,.0f} MiB, "
        f"{(C1 + C2) * 1e3:,.3g} ms, busbw {1.5 * 1.6e7 / (C1 + C2) / 1e9:,.3g} GB/s"
    )
    figures.show(toy(batch_size=20), 1)
    assert figures.sources == sources  # the same objects, new data
    assert list(figures.sources["throughput_predicted"].data["throughput"]) != first
    assert list(figures.sources["throughput_selected"].data["gpus"]) == [1.0]
    assert figures.subtitles["comm"].text == "1 GPU: no gradient communication"
    figures.show(toy(batch_size=100_000), 4)
    assert figures.subtitles["memory"].text.startswith("OUT OF MEMORY")
    assert figures.capacity_span.location == pytest.approx(16.0)


def test_compute_breakdown_columns_and_figure():
    from dlexplore.plots import operator_columns, operator_figure

    ds = predict("resnet50", "V100-16GB", gpus=[1, 8], batch_size=[32, 64], precision="fp16")
    cols = operator_columns(ds, batch_size=64)
    total = float(ds.time_compute.sel(batch_size=64)) * 1e3
    assert sum(cols["time_ms"]) == pytest.approx(total)
    assert sum(cols["share"]) == pytest.approx(1.0)
    assert "conv" in cols["operator"] and "norm" in cols["operator"]
    assert "attention" not in cols["operator"]  # no time, no bar
    with pytest.raises(DlexploreError, match="give batch_size="):
        operator_columns(ds)
    fig = operator_figure(ds, batch_size=64)
    source = fig.select_one({"name": "operator_breakdown"})
    assert source.data["time_ms"] == cols["time_ms"]
    with pytest.raises(DlexploreError, match="time_operator"):
        operator_columns(ds.drop_vars("time_operator"))


# --- what the headline advises --------------------------------------------------------------


def _gpu_precisions():
    from dlexplore import catalog, validation

    return [
        (gpu, precision)
        for gpu in ("V100-16GB", "P100", "A100-80GB", "K80", "GTX1080Ti", "MI250X-GCD")
        for precision in validation.supported_precisions(catalog.gpu(gpu))
    ]


@pytest.mark.parametrize(("gpu", "precision"), _gpu_precisions())
@pytest.mark.parametrize(
    ("workload", "batch", "network"),
    [
        ("resnet50", 64, "IB-HDR"),  # compute-bound
        ("vgg16", 16, "10GbE"),  # communication-bound
        ("bert-large", 512, "IB-HDR"),  # does not fit
    ],
)
def test_the_advice_follows_from_the_settings(gpu, precision, workload, batch, network):
    from dlexplore import catalog, validation

    pred = predict(workload, gpu, network, gpus=[1, 64], batch_size=batch, precision=precision, buckets=True)
    text = headline(pred, 64)
    point = pred.sel(gpus=64)
    supported = validation.supported_precisions(catalog.gpu(gpu))
    # never what is set already, never what this GPU cannot do
    if precision in ("fp16", "bf16"):
        assert "mixed precision" not in text, text
    for missing in {"fp16", "bf16", "tf32"} - set(supported):
        assert f"({missing}" not in text and f" {missing} " not in text, text
    if not bool(point.fits):
        assert "Does NOT fit" in text and "larger batch" not in text, text
        assert "lower the batch" in text or "shard the model" in text, text
        return
    name, share = bottleneck(pred, 64)
    assert f"Bottleneck: {name} ({share:.0%} of the step)" in text
    # the bottleneck named is the largest part of the step
    parts = {
        "compute": float(point.time_compute),
        "communication": float(point.time_comm_exposed),
        "input I/O": float(point.time_io_exposed),
    }
    assert name == max(parts, key=parts.get)
    if "larger batch" in text:  # only where a larger batch still fits
        assert largest_batch(pred, 64) > batch


def test_the_advice_names_what_would_help():
    p100 = predict("resnet50", "P100", "IB-HDR", gpus=[1, 8], batch_size=64, buckets=True)
    assert "mixed precision (fp16)" in headline(p100, 8)  # P100: fp16 at twice fp32, no bf16
    fp16 = predict(
        "resnet50", "V100-16GB", "IB-HDR", gpus=[1, 8], precision="fp16", batch_size=64, buckets=True
    )
    assert "fp16 is the fastest this GPU offers" in headline(fp16, 8)
    slow = predict("vgg16", "A100-80GB", "10GbE", gpus=[1, 64], batch_size=16, precision="bf16", buckets=True)
    text = headline(slow, 64)
    assert "Bottleneck: communication" in text and "more network bandwidth (now 1.25 GB/s" in text
    assert "a larger batch per GPU (up to" in text and "mixed precision" not in text
