"""dlexplore.fit.compare: predicted against measured, and the model at every measured point.

The hand-made datasets below are written as measurement CSVs and read with the package's own reader
(``dlexplore.measured.read_csv``), as a user's file would be; their errors are worked out by hand
in the comments. The shipped published datasets are predicted point by point, and a few points are
checked against the alpha-beta formulas worked out by hand (catalog figures: IB-FDR 6.82 GB/s and
0.7 us, NVLink4 450 GB/s).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore.errors import DlexploreError
from dlexplore.fit import ERROR_DEFINITION, as_points, compare, predict_points

NCCL_TESTS = Path(__file__).parent / "data" / "traces" / "nccl-tests" / "together-h100-all_reduce_ring.out"


def _csv(tmp_path: Path, text: str, name: str = "mine.csv") -> xr.Dataset:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return dlx.measured.read_csv(path)


TRAINING = """\
# source: hand-made test points
workload,gpu,network,gpus,batch_size,precision,algorithm,setup,throughput
resnet50,P100,25GbE,1,64,fp32,none,a,80
resnet50,P100,25GbE,2,64,fp32,unknown,a,200
resnet50,P100,25GbE,4,64,fp32,ring,a,400
resnet50,P100,25GbE,4,64,fp32,parameter_server,b,300
resnet50,P100,25GbE,8,64,fp32,ring,a,700
vgg16,P100,25GbE,2,64,fp32,ring,a,100
"""


def _prediction(throughput, gpus=(1, 2, 4), **dims) -> xr.Dataset:
    """A prediction as dlexplore.predict lays one out: sweeps as dims, settings as 0-d coords."""
    coords = {
        "gpus": ("gpus", np.array(gpus), {"units": "count"}),
        **dims,
        "workload": "ResNet50",
        "gpu": "P100",
        "network": "25GbE",
        "algorithm": "ring",
        "batch_size": 64,
        "precision": "fp32",
    }
    shape_dims = ["gpus", *dims]
    ds = xr.Dataset(
        {
            "throughput": (
                shape_dims,
                np.asarray(throughput, dtype=float),
                {"units": "samples/s", "long_name": "global training throughput"},
            )
        },
        coords=coords,
    )
    ds.attrs["source"] = "predicted: by hand"
    return ds


def test_compare_errors_by_hand(tmp_path):
    measured = _csv(tmp_path, TRAINING)
    out = compare(_prediction([100, 190, 360]), measured)
    # point 0: (100 - 80) / 80 = 0.25 (one GPU: any algorithm); point 1: (190 - 200) / 200 = -0.05
    # ("unknown" algorithm); point 2: (360 - 400) / 400 = -0.1; point 3 ran a parameter server, point 4
    # 8 GPUs (not predicted), point 5 another workload: not compared.
    expected = [0.25, -0.05, -0.1, np.nan, np.nan, np.nan]
    np.testing.assert_allclose(out["error"].values, expected, rtol=1e-12)
    np.testing.assert_allclose(out["abs_error"].values, np.abs(expected), rtol=1e-12)
    np.testing.assert_allclose(out["measured"].values, [80, 200, 400, 300, 700, 100])
    np.testing.assert_allclose(out["predicted"].values[:3], [100, 190, 360])
    assert out["mape"].item() == pytest.approx((0.25 + 0.05 + 0.1) / 3)
    assert out.attrs["mape"] == pytest.approx(0.4 / 3)
    assert out["max_error"].item() == pytest.approx(0.25)
    assert out.attrs["max_error"] == pytest.approx(0.25)
    assert out.attrs["compared"] == 3
    assert out.attrs["variable"] == "throughput"
    assert out.attrs["error_definition"] == ERROR_DEFINITION
    for reason in ("gpus: 1 point", "workload: 1 point", "algorithm: 1 point"):
        assert reason in out.attrs["unmatched"]
    # units on everything, both sources named
    for name in out.data_vars:
        assert "units" in out[name].attrs, name
    assert out["measured"].attrs["units"] == "samples/s"
    assert out["error"].attrs["units"] == "1"
    assert "predicted: by hand" in out.attrs["source"] and "hand-made test points" in out.attrs["source"]
    assert out.attrs["kind"] == "comparison"
    # the measured coordinates stay on the points
    assert list(out["setup"].values) == ["a", "a", "a", "b", "a", "a"]


def test_compare_nearest_says_which_value(tmp_path):
    measured = _csv(tmp_path, TRAINING)
    out = compare(_prediction([100, 190, 360]), measured, numeric="nearest")
    # the 8-GPU point takes the 4-GPU prediction: (360 - 700) / 700
    assert out["error"].values[4] == pytest.approx((360 - 700) / 700)
    assert int(out["predicted_gpus"].values[4]) == 4
    assert "nearest" in out.attrs["matching"]
    with pytest.raises(DlexploreError, match="numeric"):
        compare(_prediction([100, 190, 360]), measured, numeric="closest")


def test_compare_keeps_prediction_dims_the_points_lack(tmp_path):
    measured = _csv(tmp_path, TRAINING)
    pred = _prediction([[100, 100], [190, 200], [360, 400]], bandwidth=("bandwidth", np.array([10.0, 20.0])))
    out = compare(pred, measured)
    assert out["error"].dims == ("point", "bandwidth")
    # bandwidth 20: errors 0.25, 0, 0
    np.testing.assert_allclose(out["mape"].values, [0.4 / 3, 0.25 / 3])
    np.testing.assert_allclose(out["max_error"].values, [0.25, 0.25])
    assert "mape" not in out.attrs  # not a single number here


def test_compare_rebases_efficiency_and_prefixes_other_variables(tmp_path):
    measured = _csv(
        tmp_path,
        """\
workload,gpu,network,gpus,gpus_per_node,batch_size,precision,baseline_gpus,efficiency,throughput
resnet50,P100,50GbE,8,8,32,fp32,8,1.0,1000
resnet50,P100,50GbE,32,8,32,fp32,8,0.9,3600
""",
    )
    pred = xr.Dataset(
        {
            "efficiency": ("gpus", [1.0, 0.95, 0.76], {"units": "1"}),
            "throughput": ("gpus", [130.0, 988.0, 3161.6], {"units": "samples/s"}),
        },
        coords={"gpus": [1, 8, 32], "workload": "resnet50", "gpus_per_node": 8, "batch_size": 32},
    )
    out = compare(pred, measured)
    assert out.attrs["variable"] == "throughput"
    # throughput: (988 - 1000) / 1000 and (3161.6 - 3600) / 3600
    np.testing.assert_allclose(out["error"].values, [-0.012, (3161.6 - 3600) / 3600])
    # efficiency relative to 8 GPUs: 0.95 / 0.95 = 1 -> 0; 0.76 / 0.95 = 0.8 -> (0.8 - 0.9) / 0.9
    np.testing.assert_allclose(out["efficiency_predicted"].values, [1.0, 0.8])
    np.testing.assert_allclose(out["efficiency_error"].values, [0.0, -0.1 / 0.9])
    assert out.attrs["mape_efficiency"] == pytest.approx(0.1 / 0.9 / 2)
    assert out["efficiency_measured"].attrs["units"] == "1"
    chosen = compare(pred, measured, variable="efficiency")
    np.testing.assert_allclose(chosen["error"].values, [0.0, -0.1 / 0.9])


def test_compare_communication_by_hand(tmp_path):
    measured = _csv(
        tmp_path,
        """\
collective,gpus,bytes,time
allreduce,8,1000000,0.0002
allreduce,8,100000000,0.02
""",
    )
    pred = dlx.predict_comm("allreduce", "ring", nbytes=[1e6, 1e8], gpus=8, bandwidth=10, latency=5e-6)
    out = compare(pred, measured)
    # ring: 2 (p-1) a + 2 (p-1)/p n / B = 14 x 5e-6 + 1.75 n / 1e10
    t1, t2 = 7e-5 + 1.75e6 / 1e10, 7e-5 + 1.75e8 / 1e10
    np.testing.assert_allclose(out["predicted"].values, [t1, t2], rtol=1e-12)
    np.testing.assert_allclose(out["error"].values, [(t1 - 2e-4) / 2e-4, (t2 - 0.02) / 0.02], rtol=1e-12)
    assert out.attrs["variable"] == "time"
    # busbw: both sides derive it the nccl-tests way, so its error equals -error/(1+error) of the time
    e = out["error"].values
    np.testing.assert_allclose(out["busbw_error"].values, -e / (1 + e), rtol=1e-9)


def test_compare_refuses_what_cannot_be_compared(tmp_path):
    measured = _csv(tmp_path, TRAINING)
    only_memory = xr.Dataset({"mem_total": ("gpus", [1.0, 2.0])}, coords={"gpus": [1, 2]})
    with pytest.raises(DlexploreError, match="share none"):
        compare(only_memory, measured)
    with pytest.raises(DlexploreError, match="not in both"):
        compare(_prediction([100, 190, 360]), measured, variable="busbw")
    other = predict_points("tf-benchmarks-2017-dgx1")
    with pytest.raises(DlexploreError, match="16 and 6 points"):
        compare(other, measured)


# --- predict_points --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", dlx.measured.available())
def test_predict_points_on_every_shipped_dataset(name):
    measured = dlx.measured.load(name)
    pred = predict_points(measured)
    n = measured.sizes["point"]
    assert dict(pred.sizes) == {"point": n}
    variables = (
        ("time", "algbw", "busbw")
        if "collective" in measured.coords
        else ("throughput", "step_time", "efficiency", "time_compute", "time_comm_exposed")
    )
    for var in variables:
        assert var in pred, var
        assert pred[var].attrs["units"], var
        # the model covers every shipped point: nothing is NaN (a time needs a message size)
        if var == "time" and "bytes" not in measured.coords:
            assert np.all(np.isnan(pred[var].values))
            continue
        assert np.all(np.isfinite(pred[var].values)), (var, pred.attrs["not_predicted"])
    assert pred.attrs["not_predicted"] == ""
    assert pred.attrs["source"].startswith("predicted: ")
    for coord in ("gpus", "setup", "intra_link", "model_algorithm"):
        assert coord in pred.coords
    comparison = compare(pred, measured)
    assert comparison.attrs["compared"] == n
    assert math.isfinite(comparison.attrs["mape"])


def test_predict_points_matches_the_model_called_by_hand():
    pred = predict_points("tf-benchmarks-2017-dgx1")
    ds = dlx.measured.load("tf-benchmarks-2017-dgx1")
    i = int(np.flatnonzero((ds.workload.values == "resnet50") & (ds.gpus.values == 8))[0])
    # a DGX-1 row: 8 GPUs in one server over NVLink1, the table's "unknown" algorithm as NCCL's
    # own choice
    direct = dlx.predict(
        "resnet50",
        "P100",
        "NVLink1",
        gpus=8,
        batch_size=64,
        gpus_per_node=8,
        intra_link="NVLink1",
        algorithm="nccl",
    )
    assert pred.throughput.values[i] == pytest.approx(float(direct.throughput), rel=1e-12)
    assert pred.intra_link.values[i] == "NVLink1"

    # Goyal et al.: efficiency relative to 8 GPUs; the 256-GPU row gets the NVLink1 of the 8-GPU row
    # and the table's one NIC per server
    goyal = predict_points("goyal-2017-resnet50")
    assert list(goyal.intra_link.values) == ["NVLink1", "NVLink1"]
    both = dlx.predict(
        "resnet50",
        "P100",
        "50GbE",
        gpus=[8, 256],
        batch_size=32,
        gpus_per_node=8,
        intra_link="NVLink1",
        algorithm="hierarchical",
        nics_per_node=1,
    )
    step = both.step_time.values
    assert goyal.efficiency.values[1] == pytest.approx(step[0] / step[1], rel=1e-12)
    assert goyal.efficiency.values[0] == pytest.approx(1.0)


def test_predict_points_takes_a_rows_own_intra_link_sequence_and_accumulation(tmp_path):
    # NVIDIA's BERT-large table names the node's NVLink beside the InfiniBand between nodes, the
    # sequence length (128: the workload's own is 512) and the micro-batches per step
    pred = predict_points("nvidia-pytorch-bert-large", intra_link="PCIe3")  # the row's own link wins
    ds = dlx.measured.load("nvidia-pytorch-bert-large")
    i = int(np.flatnonzero((ds.gpus.values == 256) & (ds.precision.values == "fp16"))[0])
    direct = dlx.predict(
        "bert-large-nvidia",
        "A100-80GB",
        "IB-HDR",
        gpus=256,
        batch_size=256,
        gpus_per_node=8,
        nics_per_node=8,
        intra_link="NVLink3",
        precision="fp16",
        seq=128,
        grad_accum=1,
        algorithm="nccl",
    )
    assert pred.intra_link.values[i] == "NVLink3"
    assert pred.throughput.values[i] == pytest.approx(float(direct.throughput), rel=1e-12)
    # a network between nodes is not a node's link
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "workload,gpu,network,intra_link,gpus,gpus_per_node,batch_size,precision,throughput\n"
        "resnet50,A100-80GB,IB-HDR,IB-HDR,16,8,256,fp16,30000\n",
        encoding="utf-8",
    )
    with pytest.raises(DlexploreError, match="intra_link 'IB-HDR' is a network between nodes"):
        predict_points(bad)


def test_predict_points_takes_a_rows_own_layout():
    # NVIDIA's PyTorch ResNet-50 ran TF32 in NCHW (transposed around each tensor-core convolution)
    # and mixed precision in NHWC
    pred = predict_points("nvidia-pytorch-resnet50-v1.5")
    ds = dlx.measured.load("nvidia-pytorch-resnet50-v1.5")
    for precision, layout in (("tf32", "nchw"), ("fp16", "nhwc")):
        i = int(np.flatnonzero((ds.gpus.values == 1) & (ds.precision.values == precision))[0])
        direct = dlx.predict(
            "resnet50", "A100-80GB", "NVLink3", gpus=1, batch_size=256, precision=precision, layout=layout
        )
        assert pred.throughput.values[i] == pytest.approx(float(direct.throughput), rel=1e-12)
    i = int(np.flatnonzero((ds.gpus.values == 1) & (ds.precision.values == "tf32"))[0])
    nhwc = dlx.predict("resnet50", "A100-80GB", "NVLink3", gpus=1, batch_size=256, precision="tf32")
    assert pred.throughput.values[i] < 0.8 * float(nhwc.throughput)


def _fused_runs(folder: Path) -> Path:
    """A user's table: NVIDIA's MXNet ResNet-50 DGX-1 rows with the fusion its runner used
    (--fuse-bn-relu 1 --fuse-bn-add-relu 1 for float16 only)."""
    rows = [
        ("fp32", 96, 1, 384, ""),
        ("fp32", 96, 8, 3005, ""),
        ("fp16", 192, 1, 1376, "bn_add_relu"),
        ("fp16", 192, 8, 10720, "bn-add-relu"),
    ]
    path = folder / "fused.csv"
    path.write_text(
        "workload,gpu,network,gpus,gpus_per_node,batch_size,precision,fusion,throughput\n"
        + "".join(f"resnet50,V100-16GB,NVLink2,{g},{g},{b},{p},{f},{t}\n" for p, b, g, t, f in rows),
        encoding="utf-8",
    )
    return path


def test_predict_points_takes_a_rows_own_fusion(tmp_path):
    path = _fused_runs(tmp_path)
    pred = predict_points(path)
    # the single-GPU rows (no communication): each at its own fusion
    for i, (precision, batch, fusion) in ((0, ("fp32", 96, "none")), (2, ("fp16", 192, "bn_add_relu"))):
        direct = dlx.predict(
            "resnet50", "V100-16GB", "NVLink2", gpus=1, batch_size=batch, precision=precision, fusion=fusion
        )
        assert pred.throughput.values[i] == pytest.approx(float(direct.throughput), rel=1e-12)
    unfused = dlx.predict("resnet50", "V100-16GB", "NVLink2", gpus=1, batch_size=192, precision="fp16")
    assert pred.throughput.values[2] > 1.1 * float(unfused.throughput)
    # spelled bn-add-relu on the 8-GPU row: fused as well
    plain = tmp_path / "plain.csv"
    plain.write_text(path.read_text(encoding="utf-8").replace("bn-add-relu", "none"), encoding="utf-8")
    assert pred.throughput.values[3] > 1.1 * float(predict_points(plain).throughput.values[3])
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text(encoding="utf-8").replace("bn_add_relu", "xla"), encoding="utf-8")
    with pytest.raises(DlexploreError, match="unknown fusion 'xla'"):
        predict_points(bad)


def test_predict_points_communication_by_hand():
    deep = predict_points("deepbench-allreduce-p100")
    ds = dlx.measured.load("deepbench-allreduce-p100")
    # The algorithm is "unknown": NCCL's own choice (tuning.cc). 16 GPUs = 2 nodes over IB-FDR
    # (6.82 GB/s) with PCIe3 inside the nodes (NCCL's 12.0 of 15.75 GB/s): bus bandwidth 6.82. On
    # PCIe there is no LL128. Ring/Simple: 8.4 us + 26 intra hops x 5.7 us + 4 network hops x
    # (14 us + the network's 0.7 us), algbw 6.82 x 16/30; ring/LL a quarter of that bandwidth,
    # tree/Simple 0.92 x 6.82 / 2 after 2 (7 x 28 + 1 x 28.7) us: for 16 MiB ring/Simple wins.
    i = int(np.flatnonzero((ds.gpus.values == 16) & (ds.bytes.values == 16777216))[0])
    n = 16777216
    ring = 8.4e-6 + 26 * 5.7e-6 + 4 * 14.7e-6 + n / (6.82e9 * 16 / 30)
    tree = 2 * (7 * 28e-6 + 28.7e-6) + n / (0.92 * 6.82e9 / 2)
    ring_ll = 6.6e-6 + 26 * 1e-6 + 4 * 3.4e-6 + n / (0.25 * 6.82e9 * 16 / 30)
    assert ring < min(tree, ring_ll)
    assert deep.time.values[i] == pytest.approx(ring, rel=1e-12)
    assert deep.model_algorithm.values[i] == "nccl"
    # 4 GPUs inside one node over PCIe3: ring/Simple, 8.4 + 6 x 5.7 us, algbw 15.75 x 0.762 x 4/6
    j = int(np.flatnonzero((ds.gpus.values == 4) & (ds.bytes.values == 67108864))[0])
    expected = 8.4e-6 + 6 * 5.7e-6 + 67108864 / (15.75e9 * 0.762 * 4 / 6)
    assert deep.time.values[j] == pytest.approx(expected, rel=1e-12)

    h100 = predict_points("nccl-tests-h100-allreduce")
    # no message size: the large-message limit. Ring (the alpha-beta ring on NVLink4 as NCCL sees
    # it, 20.6 of 25 GB/s per link): busbw = 450 x 0.824 = 370.8 GB/s. NVLS: NCCL's algbw is 5/6 of
    # the bus bandwidth, 309 GB/s, so busbw = 309 x 2 x 7/8 = 540.75.
    assert list(h100.model_algorithm.values) == ["ring", "nvls"]
    np.testing.assert_allclose(h100.busbw.values, [370.8, 540.75], rtol=1e-9)
    np.testing.assert_allclose(h100.algbw.values, [370.8 / 1.75, 309.0], rtol=1e-9)
    assert np.all(np.isnan(h100.time.values))


def test_predict_points_reads_real_nccl_tests_output():
    points = as_points(dlx.traces.read_nccl_tests(NCCL_TESTS))
    assert points.sizes["point"] == 62  # 31 sizes, out-of-place and in-place
    assert set(points.setup.values) == {"out-of-place", "in-place"}
    pred = predict_points(NCCL_TESTS)
    # gpu and network "unknown": one rank per node by default, so the network is needed
    assert np.all(np.isnan(pred.time.values))
    assert "bandwidth" in pred.attrs["not_predicted"]
    pred = predict_points(NCCL_TESTS, gpus_per_node=8, network="NVLink4")
    n = points.bytes.values.astype(float)
    # NCCL's choice on 8 GPUs of one NVLink4 node (bus 450 x 0.824 = 370.8 GB/s; the GPU is
    # unknown, so no LL128): ring/LL 6.6 + 14 x 0.6 us at 370.8/4 x 8/14, ring/Simple 8.4 + 14 x
    # 3.4 us at 370.8 x 8/14, NVLS 23 us at 370.8 x 5/6
    bus = 450 * 0.824
    options = [
        15.0e-6 + n / (bus / 4 * 8 / 14 * 1e9),
        56.0e-6 + n / (bus * 8 / 14 * 1e9),
        23e-6 + n / (bus * 5 / 6 * 1e9),
    ]
    np.testing.assert_allclose(pred.time.values, np.min(options, axis=0), rtol=1e-9)
    assert pred.time.values[0] == pytest.approx(options[0][0])  # the smallest size: LL
    assert pred.time.values[-1] == pytest.approx(options[2][-1])  # the largest: NVLS


def test_predict_points_keywords():
    hv = dlx.measured.load("horovod-2017-16gpu-25gbe")
    ps = hv.algorithm.values == "parameter_server"
    one = predict_points(hv, servers=1)
    four = predict_points(hv)  # the default: one server per node, 4 nodes
    assert np.all(four.throughput.values[ps] > one.throughput.values[ps])
    np.testing.assert_allclose(four.throughput.values[~ps], one.throughput.values[~ps])
    with pytest.raises(DlexploreError, match="comes from the measured points"):
        predict_points(hv, gpus=8)
    with pytest.raises(DlexploreError, match="unknown model keyword"):
        predict_points(hv, bandwith=10)
    with pytest.raises(DlexploreError, match="give one value"):
        predict_points(hv, bandwidth=[1, 2])


def test_predict_points_says_why_a_point_is_not_predicted(tmp_path):
    measured = _csv(
        tmp_path,
        """\
workload,gpu,network,gpus,gpus_per_node,batch_size,precision,algorithm,throughput
resnet50,P100,our-fabric,16,4,64,fp32,ring,1000
resnet50,P100,our-fabric,16,4,64,fp32,butterfly,1000
resnet50,P100,our-fabric,1,1,64,fp32,none,100
""",
    )
    pred = predict_points(measured)
    assert np.isnan(pred.throughput.values[0]) and np.isnan(pred.throughput.values[1])
    assert np.isfinite(pred.throughput.values[2])  # one GPU never uses the network
    assert "point 0: network 'our-fabric' is not in the catalog" in pred.attrs["not_predicted"]
    assert "point 1: unknown algorithm 'butterfly'" in pred.attrs["not_predicted"]
    given = predict_points(measured, bandwidth=12.5, latency=2e-5)
    reference = predict_points(measured, network="100GbE")  # fills in nothing: the points name one
    assert np.isfinite(given.throughput.values[0])
    assert np.isnan(reference.throughput.values[0])


def test_compare_a_model_sweep_with_a_published_table():
    pred = dlx.predict(
        "resnet101", "P100", "25GbE", gpus=[1, 2, 4, 8, 16], batch_size=64, gpus_per_node=4, algorithm="ring"
    )
    out = compare(pred, "horovod-2017-16gpu-25gbe")
    # ResNet-101 on one GPU (gpus_per_node 1 there: on one GPU it changes nothing) and the three
    # ring-allreduce rows at 16 GPUs; the parameter-server rows and other workloads are left out
    compared = np.flatnonzero(np.isfinite(out["error"].values))
    assert out.attrs["compared"] == 4 == len(compared)
    assert set(out["setup"].values[compared]) == {
        "1 GPU",
        "Horovod TCP, CPU allreduce",
        "Horovod TCP, NCCL",
        "Horovod RDMA, NCCL",
    }
    one = compared[out["gpus"].values[compared] == 1][0]
    at_one = float(pred.throughput.sel(gpus=1))
    assert out["error"].values[one] == pytest.approx((at_one - 119.4) / 119.4)
    assert "algorithm: 6 point(s) differ" in out.attrs["unmatched"]
    # a prediction made with bandwidth and latency by hand ("custom" network) compares with any
    custom = dlx.predict(
        "resnet101",
        "P100",
        None,
        bandwidth=3.125,
        latency=2e-5,
        gpus=[1, 16],
        batch_size=64,
        gpus_per_node=4,
        algorithm="ring",
    )
    assert compare(custom, "horovod-2017-16gpu-25gbe").attrs["compared"] == 4
