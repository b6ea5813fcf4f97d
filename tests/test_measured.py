"""dlexplore.measured: the bundled published tables and the reader of users' measurement CSVs.

The reference numbers below are typed in from shared/reference/published-measurements.md (not read
from the data files), so a wrong digit in a data file fails here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlexplore as dlx
from dlexplore import catalog, measured
from dlexplore._data import data_dir
from dlexplore.errors import DlexploreError, InputFileError, UnknownNameError
from dlexplore.model.comm import busbw_factor

NAMES = [
    "deepbench-allreduce-p100",
    "goyal-2017-resnet50",
    "horovod-2017-16gpu-25gbe",
    "horovod-2017-64gpu-40gbit",
    "nccl-tests-h100-allreduce",
    "nvidia-mxnet-resnet50-v1.5",
    "nvidia-pytorch-bert-large",
    "nvidia-pytorch-resnet50-v1.5",
    "tf-benchmarks-2017-dgx1",
]
POINTS = {
    "deepbench-allreduce-p100": 12,
    "goyal-2017-resnet50": 2,
    "horovod-2017-16gpu-25gbe": 18,
    "horovod-2017-64gpu-40gbit": 15,
    "nccl-tests-h100-allreduce": 2,
    "nvidia-mxnet-resnet50-v1.5": 18,
    "nvidia-pytorch-bert-large": 16,
    "nvidia-pytorch-resnet50-v1.5": 12,
    "tf-benchmarks-2017-dgx1": 16,
}
NUMERIC = ("i", "u", "f")

# --- the reference tables, typed in ---------------------------------------------------------------

HOROVOD_WORKLOADS = ("inception_v3", "resnet101", "vgg16")
HOROVOD_16 = {  # setup label -> (Inception V3, ResNet-101, VGG-16), images/s
    "1 GPU": (134.4, 119.4, 130.9),
    "distributed TensorFlow (parameter server)": (1345.8, 959.6, 74.7),
    "distributed TensorFlow, variables on CPU": (1576.4, 1168.8, 79.5),
    "Horovod TCP, CPU allreduce": (2073.3, 1338.3, 616.8),
    "Horovod TCP, NCCL": (1990.7, 1685.1, 1308.7),
    "Horovod RDMA, NCCL": (2022.6, 1746.2, 1787.4),
}
HOROVOD_64 = {
    "1 GPU": (148.8, 136.0, 149.6),
    "distributed TensorFlow (parameter server)": (4225.3, 2996.0, 97.0),
    "distributed TensorFlow, variables on CPU": (5297.4, 4269.2, 100.8),
    "Horovod TCP, CPU allreduce": (6549.6, 3761.6, 1462.6),
    "Horovod TCP, NCCL": (7932.1, 7741.6, 6084.2),
}
HOROVOD_ALGORITHM = {
    "1 GPU": "none",
    "distributed TensorFlow (parameter server)": "parameter_server",
    "distributed TensorFlow, variables on CPU": "parameter_server",
    "Horovod TCP, CPU allreduce": "ring",
    "Horovod TCP, NCCL": "ring",
    "Horovod RDMA, NCCL": "ring",
}
TF_WORKLOADS = ("inception_v3", "resnet50", "resnet152", "vgg16")
TF_DGX1 = {
    1: (142, 219, 91.8, 154),
    2: (284, 422, 181, 295),
    4: (569, 852, 356, 584),
    8: (1131, 1734, 716, 1081),
}
MXNET = {  # gpus -> ((DGX-1 fp32, fp16), (DGX-2 fp32, fp16)); None = not published
    1: ((384, 1376), (417, 1492)),
    2: ((763, 2768), (821, 2935)),
    4: ((1513, 5357), (1623, 5726)),
    8: ((3005, 10723), (3223, 11368)),
    16: (None, (6338, 21484)),
}
MXNET_SYSTEMS = {  # setup -> gpu, batch fp32, batch fp16
    "DGX-1": ("V100-16GB", 96, 192),
    "DGX-2": ("V100-32GB", 128, 256),
}
DEEPBENCH = {  # floats -> ms on 2, 4, 8, 16 GPUs
    4_194_304: (2.76, 4.38, 4.99, 12.66),
    16_777_216: (13.73, 21.69, 25.13, 62.26),
    64_500_000: (43.85, 67.21, 76.63, 152.47),
}


def _one(ds: xr.Dataset, **criteria) -> xr.Dataset:
    sel = measured.select(ds, **criteria)
    assert sel.sizes["point"] == 1, (criteria, sel.sizes["point"])
    return sel.isel(point=0)


# --- every bundled dataset -----------------------------------------------------------------------


def test_available_lists_every_bundled_dataset():
    assert measured.available() == NAMES
    assert sorted(p.stem for p in (data_dir() / "measured").glob("*.csv")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_bundled_dataset_loads_with_units_and_source(name):
    ds = measured.load(name)
    assert ds.sizes == {"point": POINTS[name]}
    assert ds.attrs["kind"] == "measured"
    assert ds.attrs["name"] == name
    assert ds.attrs["source"].startswith("measured: ")
    assert len(ds.attrs["source"]) > len("measured: ") + 10
    for key in ("title", "url", "setup", "notes"):
        assert ds.attrs[key].strip(), key
    assert ds.data_vars, "a measured dataset without measured values"
    for var in ds.data_vars.values():
        assert var.dims == ("point",)
        assert var.attrs["units"] and var.attrs["long_name"], var.name
        assert np.isfinite(var.values).all(), var.name
    for coord in ds.coords.values():
        assert coord.dims == ("point",)
        assert coord.attrs["long_name"], coord.name
        if coord.dtype.kind in NUMERIC:
            assert coord.attrs["units"], coord.name


@pytest.mark.parametrize("name", NAMES)
def test_bundled_files_carry_their_metadata(name):
    text = (data_dir() / "measured" / f"{name}.csv").read_text(encoding="utf-8")
    keys = {
        line[1:].split(":", 1)[0].strip()
        for line in text.splitlines()
        if line.startswith("# ") and not line.startswith("#  ")
    }
    assert {"name", "title", "source", "url", "setup", "units", "notes"} <= keys
    assert f"# name: {name}\n" in text


@pytest.mark.parametrize("name", NAMES)
def test_read_csv_of_a_bundled_file_equals_load(name):
    path = data_dir() / "measured" / f"{name}.csv"
    before = path.read_bytes()
    xr.testing.assert_identical(measured.read_csv(path), measured.load(name))
    xr.testing.assert_identical(measured.load(str(path)), measured.load(name))
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", NAMES)
def test_netcdf_round_trip_keeps_values_attrs_and_units(name, tmp_path):
    ds = measured.load(name)
    target = tmp_path / f"{name}.nc"
    ds.to_netcdf(target, engine="h5netcdf")
    with xr.open_dataset(target, engine="h5netcdf") as back:
        back = back.load()
    assert back.attrs == ds.attrs
    for key in (*ds.coords, *ds.data_vars):
        assert back[key].attrs == ds[key].attrs, key
        assert back[key].values.tolist() == ds[key].values.tolist(), key


@pytest.mark.parametrize("name", NAMES)
def test_catalog_ids_in_bundled_files_resolve_to_themselves(name):
    ds = measured.load(name)
    lookups = {"workload": catalog.workload, "gpu": catalog.gpu, "network": catalog.network}
    missing = []
    for coord, lookup in lookups.items():
        if coord not in ds.coords:
            continue
        for value in sorted(set(ds[coord].values.tolist())):
            try:
                entry = lookup(value)
            except UnknownNameError:
                missing.append(f"{coord} {value!r}")
                continue
            # The files use the catalog's canonical names, not aliases.
            assert entry.name == value, (coord, value, entry.name)
    assert not missing, f"{name}: not in the catalog: {', '.join(missing)}"


def test_units_agree_with_the_models_for_shared_names():
    # One name, one unit across predicted and measured datasets (DESIGN.md). model.conventions.VARIABLES is
    # the model's table of units; if it moves, this test should move with it.
    from dlexplore.model.conventions import VARIABLES

    for name, column in measured.COLUMNS.items():
        if name in VARIABLES and column.units is not None:
            assert column.units == VARIABLES[name][0], name


def test_describe_summarises_every_dataset():
    table = measured.describe()
    assert list(table.columns) == ["name", "title", "table", "points", "variables", "source"]
    assert table["name"].tolist() == NAMES
    assert dict(zip(table["name"], table["points"], strict=True)) == POINTS
    row = table.set_index("name").loc["deepbench-allreduce-p100"]
    assert row["table"] == "communication"
    assert row["variables"] == "time, algbw, busbw"
    assert not row["source"].startswith("measured:")
    assert "DeepBench" in row["source"]


def test_load_unknown_name_suggests_the_nearest():
    with pytest.raises(UnknownNameError) as info:
        measured.load("horovod-2017-16gpu")
    message = str(info.value)
    assert "measured dataset" in message and "horovod-2017-16gpu-25gbe" in message
    assert isinstance(info.value, KeyError) and isinstance(info.value, DlexploreError)


def test_load_accepts_any_case_and_reads_missing_paths_as_files(tmp_path):
    assert measured.load("GOYAL-2017-ResNet50").attrs["name"] == "goyal-2017-resnet50"
    with pytest.raises(InputFileError, match="no such file"):
        measured.load(tmp_path / "nope.csv")


class _PathLike:
    """An os.PathLike that is not a pathlib.Path: its str() is not its path."""

    def __init__(self, path: Path):
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


def test_load_reads_any_path_like():
    # report.report(measured_data=) passes os.PathLike through; load once took str() of it
    path = data_dir() / "measured" / "goyal-2017-resnet50.csv"
    got = measured.load(_PathLike(path))
    xr.testing.assert_identical(got, measured.load(path))


# --- the published numbers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "table", "gpus", "network"),
    [
        ("horovod-2017-16gpu-25gbe", HOROVOD_16, 16, "25GbE"),
        ("horovod-2017-64gpu-40gbit", HOROVOD_64, 64, "40GbE"),
    ],
)
def test_horovod_tables_match_the_readme(name, table, gpus, network):
    ds = measured.load(name)
    assert ds.sizes["point"] == 3 * len(table)
    assert set(ds.gpu.values) == {"P100"} and set(ds.network.values) == {network}
    assert set(ds.batch_size.values) == {64} and set(ds.precision.values) == {"fp32"}
    assert ds.throughput.attrs["units"] == "samples/s"
    for setup, values in table.items():
        for workload, value in zip(HOROVOD_WORKLOADS, values, strict=True):
            point = _one(ds, setup=setup, workload=workload)
            assert float(point.throughput) == value, (setup, workload)
            assert point.algorithm.item() == HOROVOD_ALGORITHM[setup]
            n = 1 if setup == "1 GPU" else gpus
            assert int(point.gpus) == n
            assert int(point.gpus_per_node) == min(n, 4)


def test_horovod_rdma_vgg16_spot_value():
    ds = measured.load("horovod-2017-16gpu-25gbe")
    point = _one(ds, workload="vgg16", setup="Horovod RDMA, NCCL")
    assert float(point.throughput) == 1787.4
    assert int(point.gpus) == 16 and int(point.gpus_per_node) == 4


def test_tensorflow_dgx1_table():
    ds = measured.load("tf-benchmarks-2017-dgx1")
    for gpus, values in TF_DGX1.items():
        for workload, value in zip(TF_WORKLOADS, values, strict=True):
            point = _one(ds, gpus=gpus, workload=workload)
            assert float(point.throughput) == value
            assert point.network.item() == "NVLink1" and point.gpu.item() == "P100"
            assert int(point.batch_size) == 64
            assert point.algorithm.item() == ("none" if gpus == 1 else "unknown")


def test_mxnet_resnet50_table_both_systems_and_precisions():
    ds = measured.load("nvidia-mxnet-resnet50-v1.5")
    count = 0
    for gpus, systems in MXNET.items():
        for setup, pair in zip(MXNET_SYSTEMS, systems, strict=True):
            if pair is None:
                assert measured.select(ds, gpus=gpus, setup=setup).sizes["point"] == 0
                continue
            gpu, batch32, batch16 = MXNET_SYSTEMS[setup]
            for precision, value, batch in zip(("fp32", "fp16"), pair, (batch32, batch16), strict=True):
                point = _one(ds, gpus=gpus, setup=setup, precision=precision)
                assert float(point.throughput) == value
                assert point.gpu.item() == gpu and int(point.batch_size) == batch
                assert int(point.gpus_per_node) == gpus
                count += 1
    assert count == ds.sizes["point"] == 18
    assert float(_one(ds, gpus=16, setup="DGX-2", precision="fp16").throughput) == 21484


# NVIDIA DeepLearningExamples, PyTorch BERT README, DGX A100 (8x A100 80GB), pre-training at
# sequence length 128: servers -> (TF32, mixed precision) sequences/s of the multi-node table, and
# GPUs -> (TF32, mixed precision) of the single-server table
BERT_MULTINODE = {
    1: (2486, 4553),
    2: (4979, 9191),
    4: (9859, 18119),
    8: (19815, 35774),
    16: (38866, 70555),
    32: (75706, 138294),
}
BERT_SINGLE = {1: (317, 580), 8: (2505, 4591)}
# PyTorch ResNet-50 v1.5 README (the README's tables) with configs.yml's batch per GPU:
# setup -> (GPU, link, (precision, batch, 1-GPU images/s, 8-GPU images/s) for each precision)
RN50_PYTORCH = {
    "DGX A100": ("A100-80GB", "NVLink3", (("tf32", 256, 938, 7248), ("fp16", 256, 2470, 16621))),
    "DGX-1 16GB": ("V100-16GB", "NVLink2", (("fp32", 112, 367, 2855), ("fp16", 256, 1200, 8322))),
    "DGX-1 32GB": ("V100-32GB", "NVLink2", (("fp32", 112, 356, 2766), ("fp16", 256, 1156, 8056))),
}


def test_bert_large_table_rows_and_gradient_accumulation():
    ds = measured.load("nvidia-pytorch-bert-large")
    assert ds.grad_accum.attrs["units"] == "count" and ds.seq.attrs["units"] == "tokens"
    for servers, pair in BERT_MULTINODE.items():
        for precision, value, batch in zip(("tf32", "fp16"), pair, (128, 256), strict=True):
            point = _one(ds, gpus=8 * servers, setup="multi-node table", precision=precision)
            assert float(point.throughput) == value and int(point.batch_size) == batch
            # strong scaling at the README's global batch: 8192 sequences per GPU on one server
            assert int(point.grad_accum) * batch * 8 * servers == 8192 * 8
            assert int(point.gpus_per_node) == 8 and int(point.seq) == 128
            assert point.network.item() == "IB-HDR" and int(point.nics_per_node) == 8
    for gpus, pair in BERT_SINGLE.items():
        for precision, value, accum in zip(("tf32", "fp16"), pair, (64, 32), strict=True):
            point = _one(ds, gpus=gpus, setup="single server", precision=precision)
            assert float(point.throughput) == value and int(point.grad_accum) == accum
            # the README's accumulated batch per GPU, 8192 sequences of 128 tokens
            assert int(point.batch_size) * accum == 8192 and int(point.seq) == 128
            assert point.algorithm.item() == ("none" if gpus == 1 else "unknown")
    assert ds.sizes["point"] == 2 * len(BERT_MULTINODE) + 2 * len(BERT_SINGLE)


def test_pytorch_resnet50_table_systems_precisions_batches():
    ds = measured.load("nvidia-pytorch-resnet50-v1.5")
    count = 0
    for setup, (gpu, link, runs) in RN50_PYTORCH.items():
        for precision, batch, one, eight in runs:
            for gpus, value in ((1, one), (8, eight)):
                point = _one(ds, gpus=gpus, setup=setup, precision=precision)
                assert float(point.throughput) == value and int(point.batch_size) == batch
                assert point.gpu.item() == gpu and point.network.item() == link
                assert int(point.gpus_per_node) == gpus
                # configs.yml's memory_format: channels last for AMP only
                assert point.layout.item() == ("nhwc" if precision == "fp16" else "nchw")
                count += 1
    assert count == ds.sizes["point"] == 12


def test_deepbench_allreduce_times_bytes_and_bandwidths():
    ds = measured.load("deepbench-allreduce-p100")
    assert ds.time.attrs["units"] == "s" and ds.bytes.attrs["units"] == "bytes"
    for floats, times in DEEPBENCH.items():
        for gpus, ms in zip((2, 4, 8, 16), times, strict=True):
            point = _one(ds, bytes=floats * 4, gpus=gpus)
            assert float(point.time) == pytest.approx(ms / 1000, rel=1e-15)
            assert point.collective.item() == "allreduce"
            assert point.network.item() == ("IB-FDR" if gpus == 16 else "PCIe3")
            assert int(point.gpus_per_node) == min(gpus, 8)
    # 64,500,000 floats on 16 GPUs (2 nodes over IB FDR): 152.47 ms, by hand.
    point = _one(ds, bytes=258_000_000, gpus=16)
    assert int(point.bytes) == 258_000_000
    assert float(point.time) == pytest.approx(0.15247, rel=1e-15)
    algbw = 258_000_000 / 0.15247 / 1e9  # 1.6921 GB/s
    busbw = algbw * 2 * 15 / 16  # 3.1727 GB/s
    assert float(point.algbw) == pytest.approx(algbw, rel=1e-12)
    assert float(point.busbw) == pytest.approx(busbw, rel=1e-12)
    assert float(point.busbw) == pytest.approx(3.1727, abs=1e-4)
    assert "bytes / time" in ds.algbw.attrs["comment"]
    assert ds.busbw.attrs["units"] == "GB/s"


def test_goyal_efficiency_relative_to_eight_gpus():
    ds = measured.load("goyal-2017-resnet50")
    assert list(ds.data_vars) == ["efficiency"]
    assert ds.efficiency.attrs["units"] == "1"
    assert float(_one(ds, gpus=256).efficiency) == 0.9
    assert float(_one(ds, gpus=8).efficiency) == 1.0
    assert set(ds.baseline_gpus.values) == {8}
    assert set(ds.batch_size.values) == {32} and set(ds.gpus_per_node.values) == {8}
    assert "baseline" in ds.attrs["notes"]


def test_nccl_h100_busbw_and_derived_algbw():
    ds = measured.load("nccl-tests-h100-allreduce")
    ring = _one(ds, algorithm="ring")
    nvls = _one(ds, algorithm="nvls")
    assert float(ring.busbw) == 370 and float(nvls.busbw) == 480
    assert float(nvls.algbw) == pytest.approx(480 / (2 * 7 / 8))  # the answer says ~275 GB/s
    assert float(nvls.algbw) == pytest.approx(275, rel=0.01)
    assert "time" not in ds and "bytes" not in ds.coords
    assert "nvls" in ds.attrs["notes"].lower() and "450" in ds.attrs["notes"]


# --- users' files ----------------------------------------------------------------------------------

HEADER = "workload,gpu,network,gpus,batch_size,precision,throughput"


def _write(tmp_path: Path, text: str | bytes, name: str = "mine.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path) -> str:
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(InputFileError) as info:
        measured.read_csv(path)
    # The reader never changes the file it reads.
    assert (path.read_bytes() if path.is_file() else None) == before
    message = str(info.value)
    assert str(path) in message
    assert "Traceback" not in message
    return message


def test_minimal_user_file_gets_documented_defaults(tmp_path):
    path = _write(
        tmp_path,
        f"{HEADER}\nresnet50,V100-16GB,25GbE,1,64,fp32,380\nresnet50,V100-16GB,25GbE,8,64,fp32,2900.5\n",
    )
    ds = measured.read_csv(path)
    assert ds.sizes["point"] == 2
    assert ds.algorithm.values.tolist() == ["none", "unknown"]
    assert ds.setup.values.tolist() == ["", ""]
    assert ds.source.values.tolist() == [str(path)] * 2
    assert ds.attrs["source"] == f"measured: file {path}"
    assert ds.attrs["name"] == "mine" and ds.attrs["kind"] == "measured"
    assert ds.attrs["table"] == "training"
    assert "gpus_per_node" not in ds.coords  # numbers are never made up
    assert ds.gpus.dtype == np.int64 and ds.gpus.attrs["units"] == "count"
    assert ds.batch_size.attrs["units"] == "samples"
    assert ds.throughput.values.tolist() == [380.0, 2900.5]


def test_user_file_metadata_units_comments_bom_and_crlf(tmp_path):
    text = (
        "\ufeff# name: my-cluster\r\n"
        "# title: My cluster\r\n"
        "# source: lab notebook, 2026-11-02\r\n"
        "# notes: first line\r\n"
        "#   second line\r\n"
        "# units: throughput=images/s, efficiency=%\r\n"
        "\r\n"
        f"{HEADER},efficiency,algorithm,gpus_per_node,setup\r\n"
        "# a comment between rows is skipped\r\n"
        'ResNet50,A100-40GB,IB-HDR,8,256,FP16,20000,95,ring,8,"NCCL, 1 node"\r\n'
        "\r\n"
        "resnet50,A100-40GB,IB-HDR,16,256,bf16,38000,,ring,8,,\r\n"
    )
    ds = measured.read_csv(_write(tmp_path, text.encode("utf-8")))
    assert ds.attrs["name"] == "my-cluster"
    assert ds.attrs["notes"] == "first line second line"
    assert ds.attrs["source"] == "measured: lab notebook, 2026-11-02"
    assert ds.attrs["file_units"] == "throughput=images/s, efficiency=%"
    assert ds.source.values.tolist() == ["lab notebook, 2026-11-02"] * 2
    assert ds.precision.values.tolist() == ["fp16", "bf16"]  # case-insensitive
    assert ds.workload.values.tolist() == ["ResNet50", "resnet50"]  # names are kept as written
    assert ds.setup.values.tolist() == ["NCCL, 1 node", ""]
    assert ds.efficiency.values[0] == pytest.approx(0.95)
    assert math.isnan(ds.efficiency.values[1])  # an empty cell: not measured
    assert ds.baseline_gpus.values.tolist() == [1, 1]
    assert ds.throughput.attrs["units"] == "samples/s"


def test_to_frame_round_trips_through_a_user_file(tmp_path):
    for name in NAMES:
        ds = measured.load(name)
        frame = measured.to_frame(ds)
        assert len(frame) == ds.sizes["point"]
        path = tmp_path / f"{name}.csv"
        frame.to_csv(path, index=False)
        back = measured.read_csv(path)
        for key in (*ds.coords, *ds.data_vars):
            if key == "source":
                continue
            np.testing.assert_array_equal(back[key].values, ds[key].values, err_msg=key)


def test_select_matches_values_and_lists():
    ds = measured.load("horovod-2017-16gpu-25gbe")
    assert measured.select(ds, workload="vgg16").sizes["point"] == 6
    assert measured.select(ds, workload=["vgg16", "resnet101"], gpus=1).sizes["point"] == 2
    with pytest.raises(UnknownNameError, match="coordinate"):
        measured.select(ds, bytes=4)


def test_communication_user_file_derives_bandwidths(tmp_path):
    text = (
        "collective,gpus,bytes,time\n"
        "all_gather,4,1000000000,0.1\n"
        "broadcast,4,1000000000,0.1\n"
        "all-reduce,8,1000000000,0.5\n"
    )
    ds = measured.read_csv(_write(tmp_path, text))
    assert ds.attrs["table"] == "communication"
    assert ds.collective.values.tolist() == ["allgather", "broadcast", "allreduce"]
    assert ds.gpu.values.tolist() == ["unknown"] * 3
    assert ds.algbw.values.tolist() == pytest.approx([10.0, 10.0, 2.0])
    assert ds.busbw.values.tolist() == pytest.approx([10.0 * 3 / 4, 10.0, 2.0 * 2 * 7 / 8])
    for collective, gpus, algbw, busbw in zip(
        ds.collective.values, ds.gpus.values, ds.algbw.values, ds.busbw.values, strict=True
    ):
        assert busbw == pytest.approx(algbw * busbw_factor(collective, int(gpus)))


def test_communication_labels_left_empty_get_the_same_defaults_as_absent_ones(tmp_path):
    text = "collective,gpu,network,gpus,time\nallreduce,,,1,0.001\nallreduce,H100-SXM,,2,0.002\n"
    ds = measured.read_csv(_write(tmp_path, text))
    assert ds.gpu.values.tolist() == ["unknown", "H100-SXM"]
    assert ds.network.values.tolist() == ["unknown", "unknown"]
    assert ds.algorithm.values.tolist() == ["none", "unknown"]
    assert "algbw" not in ds  # no bytes: nothing to derive a bandwidth from


def test_communication_user_file_with_only_busbw_and_bytes(tmp_path):
    text = "# units: busbw=MB/s\ncollective,gpus,bytes,busbw\nallreduce,2,2000000000,4000\n"
    ds = measured.read_csv(_write(tmp_path, text))
    assert float(ds.busbw[0]) == pytest.approx(4.0)
    assert float(ds.algbw[0]) == pytest.approx(4.0)  # factor 1 on 2 ranks
    assert float(ds.time[0]) == pytest.approx(0.5)
    assert "derived" in ds.time.attrs["comment"]


def test_netcdf_round_trip_of_a_user_file_with_empty_labels(tmp_path):
    path = _write(tmp_path, f"{HEADER}\nresnet50,P100,25GbE,4,32,fp32,500\n")
    ds = measured.read_csv(path)
    ds.to_netcdf(tmp_path / "mine.nc", engine="h5netcdf")
    with xr.open_dataset(tmp_path / "mine.nc", engine="h5netcdf") as back:
        assert back.setup.values.tolist() == [""]
        assert back.attrs == ds.attrs
        assert back.throughput.attrs == ds.throughput.attrs


# --- users' files: every error names the file, the line and the expectation -----------------------


def test_missing_file(tmp_path):
    message = _error(tmp_path / "absent.csv")
    assert "no such file" in message


def test_folder_instead_of_file(tmp_path):
    assert "folder" in _error(tmp_path)


@pytest.mark.parametrize("content", [b"", b"\n\n   \n"])
def test_empty_file(tmp_path, content):
    message = _error(_write(tmp_path, content))
    assert "empty" in message and "header" in message


def test_only_comments(tmp_path):
    message = _error(_write(tmp_path, "# name: x\n# notes: nothing yet\n"))
    assert "no header line" in message


def test_no_data_rows(tmp_path):
    message = _error(_write(tmp_path, f"# name: x\n\n{HEADER}\n# nothing measured yet\n"))
    assert ", line 3:" in message and "no data rows" in message and "one row per" in message


def test_missing_columns_are_listed(tmp_path):
    message = _error(
        _write(tmp_path, "# name: x\nworkload,gpu,network,gpus,precision\nresnet50,P100,25GbE,4,fp32\n")
    )
    assert ", line 2:" in message
    assert "missing column(s): batch_size, throughput" in message


def test_unknown_column_suggests(tmp_path):
    header = HEADER.replace("throughput", "througput")
    message = _error(_write(tmp_path, f"{header}\nresnet50,P100,25GbE,4,32,fp32,500\n"))
    assert ", line 1:" in message and "'througput'" in message
    assert "did you mean 'throughput'" in message


def test_semicolon_separated_file(tmp_path):
    message = _error(_write(tmp_path, HEADER.replace(",", ";") + "\n"))
    assert ", line 1:" in message and "comma-separated" in message


def test_column_of_the_other_table_kind(tmp_path):
    message = _error(_write(tmp_path, f"{HEADER},bytes\nresnet50,P100,25GbE,4,32,fp32,500,8\n"))
    assert ", line 1:" in message and "'bytes'" in message and "communication" in message


@pytest.mark.parametrize(
    ("row", "column", "expect"),
    [
        ("resnet50,P100,25GbE,4.5,32,fp32,500", "gpus", "a positive integer"),
        ("resnet50,P100,25GbE,0,32,fp32,500", "gpus", "a positive integer"),
        ("resnet50,P100,25GbE,-8,32,fp32,500", "gpus", "a positive integer"),
        ("resnet50,P100,25GbE,four,32,fp32,500", "gpus", "a positive integer"),
        ("resnet50,P100,25GbE,4,,fp32,500", "batch_size", "a positive integer"),
        ("resnet50,P100,25GbE,4,32.5,fp32,500", "batch_size", "a positive integer"),
        ("resnet50,P100,25GbE,4,32,fp32,fast", "throughput", "a number >= 0"),
        ("resnet50,P100,25GbE,4,32,fp32,-1.5", "throughput", "a number >= 0"),
        ("resnet50,P100,25GbE,4,32,fp32,inf", "throughput", "a number >= 0"),
        ("resnet50,P100,25GbE,4,32,fp8,500", "precision", "one of fp32, tf32, fp16, bf16"),
        ("resnet50,P100,25GbE,4,32,,500", "precision", "one of fp32, tf32, fp16, bf16"),
        (",P100,25GbE,4,32,fp32,500", "workload", "a workload id"),
        ("resnet50,,25GbE,4,32,fp32,500", "gpu", "a GPU id"),
    ],
)
def test_bad_values_name_line_column_and_expectation(tmp_path, row, column, expect):
    text = f"# name: x\n# title: y\n{HEADER}\nresnet50,P100,25GbE,1,32,fp32,100\n{row}\n"
    message = _error(_write(tmp_path, text))
    assert ", line 5:" in message, message
    assert f"column {column!r}" in message, message
    assert f"expected {expect}" in message, message


def test_bad_layout_or_fusion_names_file_line_and_the_choices(tmp_path):
    header = f"{HEADER},layout,fusion"
    text = (
        f"{header}\nresnet50,P100,25GbE,1,32,fp32,100,channels_last,\n"
        "resnet50,P100,25GbE,4,32,fp32,350,nhwc,xla\n"
    )
    message = _error(_write(tmp_path, text))
    assert ", line 3:" in message and "column 'fusion'" in message, message
    assert "expected one of none, bn_add_relu" in message, message
    text = f"{header}\nresnet50,P100,25GbE,1,32,fp32,100,nwhc,none\n"
    message = _error(_write(tmp_path, text))
    assert ", line 2:" in message and "column 'layout'" in message and "nhwc, nchw" in message, message
    # aliases, blanks and "unknown" pass, kept as written (the model reads them)
    ok = measured.read_csv(
        _write(
            tmp_path,
            f"{header}\nresnet50,P100,25GbE,1,32,fp32,100,channels_last,bn-add-relu\n"
            f"resnet50,P100,25GbE,4,32,fp32,350,unknown,\n",
        )
    )
    assert ok.layout.values.tolist() == ["channels_last", "unknown"]
    assert ok.fusion.values.tolist() == ["bn-add-relu", ""]


def test_row_without_any_measured_value(tmp_path):
    message = _error(_write(tmp_path, f"{HEADER}\nresnet50,P100,25GbE,4,32,fp32,\n"))
    assert ", line 2:" in message and "expected a number in throughput" in message


def test_unterminated_quote(tmp_path):
    text = f'{HEADER},setup\nresnet50,P100,25GbE,4,32,fp32,500,"NCCL, ring\n'
    message = _error(_write(tmp_path, text))
    assert ", line 2:" in message and "comma-separated fields" in message


def test_wrong_number_of_fields(tmp_path):
    message = _error(_write(tmp_path, f"{HEADER}\nresnet50,P100,25GbE,4,32,fp32\n"))
    assert ", line 2:" in message and "found 6 fields; expected 7" in message


def test_gpus_per_node_larger_than_gpus(tmp_path):
    message = _error(_write(tmp_path, f"{HEADER},gpus_per_node\nresnet50,P100,25GbE,4,32,fp32,500,8\n"))
    assert ", line 2:" in message and "'gpus_per_node'" in message
    assert "no larger than gpus (4)" in message


def test_duplicate_points(tmp_path):
    text = (
        f"# name: x\n{HEADER}\nresnet50,P100,25GbE,4,32,fp32,500\n"
        "resnet50,P100,25GbE,8,32,fp32,900\n\nresnet50,P100,25GbE,4,32,fp32,510\n"
    )
    message = _error(_write(tmp_path, text))
    assert ", line 6:" in message and "repeats the point on line 3" in message
    assert "expected each point once" in message


def test_same_configuration_with_different_setup_labels_is_not_a_duplicate(tmp_path):
    text = (
        f"{HEADER},setup\nresnet50,P100,25GbE,4,32,fp32,500,run 1\nresnet50,P100,25GbE,4,32,fp32,510,run 2\n"
    )
    assert measured.read_csv(_write(tmp_path, text)).sizes["point"] == 2


def test_undecodable_bytes(tmp_path):
    text = f"# name: x\n{HEADER}\n".encode() + "résnet50,P100,25GbE,4,32,fp32,500\n".encode("latin-1")
    message = _error(_write(tmp_path, text))
    assert ", line 3:" in message and "0xe9" in message and "expected UTF-8" in message


def test_bad_units_line(tmp_path):
    text = f"# name: x\n# units: throughput=furlongs/fortnight\n{HEADER}\n"
    message = _error(_write(tmp_path, text))
    assert ", line 2:" in message and "expected throughput in one of" in message
    assert "images/s" in message


def test_unknown_collective(tmp_path):
    text = "collective,gpus,bytes,time\nallreduce,4,100,0.1\nallsum,4,100,0.1\n"
    message = _error(_write(tmp_path, text))
    assert ", line 3:" in message and "'collective'" in message and "allreduce" in message


def test_zero_time_is_rejected(tmp_path):
    message = _error(_write(tmp_path, "collective,gpus,bytes,time\nallreduce,4,100,0\n"))
    assert ", line 2:" in message and "column 'time': expected a number > 0" in message


def test_errors_are_dlexplore_errors(tmp_path):
    with pytest.raises(DlexploreError):
        measured.read_csv(tmp_path / "absent.csv")
    with pytest.raises(ValueError):  # DlexploreError is a ValueError too
        measured.read_csv(tmp_path / "absent.csv")


# --- property: any valid table survives CSV -> dataset -> frame --------------------------------

_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
_row = st.tuples(
    st.sampled_from(["resnet50", "vgg16", "bert-large"]),
    st.sampled_from(["P100", "V100-16GB", "H100-SXM"]),
    st.sampled_from(["25GbE", "IB-EDR", "NVLink2"]),
    st.integers(1, 4096),
    st.integers(1, 2048),
    st.sampled_from(["fp32", "tf32", "fp16", "bf16"]),
    st.floats(0, 1e7, allow_nan=False, allow_infinity=False),
    _label,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, min_size=1, max_size=20, unique_by=lambda r: r[:6] + (r[7],)))
def test_any_valid_table_round_trips(tmp_path, rows):
    frame = pd.DataFrame(rows, columns=[*HEADER.split(","), "setup"])
    path = tmp_path / "prop.csv"
    frame.to_csv(path, index=False)
    ds = measured.read_csv(path)
    back = measured.to_frame(ds)
    assert back["throughput"].tolist() == frame["throughput"].tolist()  # repr round-trips
    for name in ("workload", "gpu", "network", "gpus", "batch_size", "precision", "setup"):
        assert back[name].tolist() == frame[name].tolist(), name


def test_columns_of_the_model_settings(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(
        "workload,gpu,network,gpus,gpus_per_node,batch_size,precision,algorithm,grad_accum,seq,"
        "framework,transport,servers,servers_colocated,throughput\n"
        "bert-large,A100-80GB,IB-HDR,64,8,32,bf16,,8,128,ddp,rdma,0,,3000\n"
        "resnet50,P100,25GbE,16,4,64,fp32,parameter_server,1,1,tensorflow,tcp,4,no,900\n",
        encoding="utf-8",
    )
    ds = measured.read_csv(path)
    assert ds.grad_accum.values.tolist() == [8, 1]
    assert ds.seq.values.tolist() == [128, 1]
    assert ds.servers.values.tolist() == [0, 4]  # 0: one per node, the model's default
    assert ds.grad_accum.attrs["units"] == "count" and ds.seq.attrs["units"] == "tokens"
    assert ds.transport.values.tolist() == ["rdma", "tcp"]
    # the model reads them: 8 micro-batches of 32 at seq 128, and a dedicated pair of servers
    pred = dlx.predict_points(ds)
    one = dlx.predict(
        "bert-large",
        "A100-80GB",
        "IB-HDR",
        gpus=64,
        gpus_per_node=8,
        batch_size=32,
        precision="bf16",
        grad_accum=8,
        seq=128,
        intra_link="PCIe3",
    )
    assert float(pred.throughput[0]) == pytest.approx(float(one.throughput), rel=1e-12)
    four = dlx.predict(
        "resnet50",
        "P100",
        "25GbE",
        gpus=16,
        gpus_per_node=4,
        batch_size=64,
        algorithm="parameter_server",
        servers=4,
        servers_colocated=False,
        transport="tcp",
        intra_link="PCIe3",
    )
    assert float(pred.throughput[1]) == pytest.approx(float(four.throughput), rel=1e-12)
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "workload,gpu,network,gpus,batch_size,precision,grad_accum,throughput\n"
        "resnet50,P100,25GbE,1,64,fp32,0,100\n",
        encoding="utf-8",
    )
    with pytest.raises(InputFileError, match="grad_accum"):
        measured.read_csv(bad)


def test_concat_tables_of_one_kind():
    both = measured.concat(["goyal-2017-resnet50", "tf-benchmarks-2017-dgx1"])
    assert both.sizes["point"] == 2 + 16
    # Goyal's efficiency and the DGX-1's throughput: each NaN where the other table measured
    assert int(np.isfinite(both.efficiency.values).sum()) == 2
    assert int(np.isfinite(both.throughput.values).sum()) == 16
    assert both.baseline_gpus.values.tolist() == [8, 8] + [1] * 16
    assert both.attrs["source"].startswith(measured.MEASURED_PREFIX)
    assert both.attrs["table"] == "training"
    # a calibration reads it like one table
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = dlx.calibrate(both, fit_on="gpus == 1", params=["compute_efficiency"])
    assert int(cal.points["fitted"].sum()) == 4
    with pytest.raises(dlx.DlexploreError, match="mix kinds"):
        measured.concat(["goyal-2017-resnet50", "deepbench-allreduce-p100"])
