"""Gradient reduction in host memory (dlexplore.model.hoststaging) against hand-derived numbers."""

import math

import numpy as np
import pytest

import dlexplore as dlx
from dlexplore.model.hoststaging import (
    PS_SERVER_TRAFFIC,
    host_allreduce_time,
    host_link,
    server_work_time,
)


def test_host_allreduce_across_nodes_by_hand():
    # 64 MB on 16 ranks, 4 per node; the network at 1.25 GB/s and 20 us, PCIe at 12 GB/s, one core
    # streaming 8 GB/s of memory traffic
    n, p = 64e6, 16
    copies = 2 * n / 12e9  # to the host and back: 10.67 ms
    fusion = 2 * 2 * n / 8e9  # into and out of the fusion buffer, each read + write: 32 ms
    ring = 2 * 15 * 20e-6 + 2 * (15 / 16) * n / 1.25e9  # 0.6 ms + 96 ms
    sums = 3 * (15 / 16) * n / 8e9  # two operands read, one written: 22.5 ms
    expected = copies + fusion + ring + sums
    assert expected == pytest.approx(0.161767, rel=1e-5)
    got = host_allreduce_time(n, p, 4, 1.25, 20e-6, 12.0, 8.0)
    assert float(got) == pytest.approx(expected)


def test_host_allreduce_inside_one_node_goes_through_shared_memory():
    # 4 ranks on one node: the ring's steps are copies through shared memory (a copy in, a copy out,
    # each read + write: 4 bytes of traffic per byte), and no network latency
    n = 64e6
    expected = 2 * n / 12e9 + 4 * n / 8e9 + 2 * 0.75 * n / (8e9 / 4) + 3 * 0.75 * n / 8e9
    assert float(host_allreduce_time(n, 4, 4, 1.25, 20e-6, 12.0, 8.0)) == pytest.approx(expected)
    assert expected == pytest.approx(0.108667, rel=1e-5)
    # one rank reduces nothing
    assert float(host_allreduce_time(n, 1, 1, 1.25, 20e-6, 12.0, 8.0)) == 0.0


def test_parameter_server_work_by_hand():
    # the busiest of 4 servers holds a quarter of 100 MB; 16 workers push and pull it: its CPU
    # moves 7 bytes per byte (receive 2, sum 3, send 2) of 16 x 25 MB at 8 GB/s
    assert PS_SERVER_TRAFFIC == 7
    assert float(server_work_time(1e8, 16, 0.25, 8.0)) == pytest.approx(7 * 16 * 0.25 * 1e8 / 8e9)
    np.testing.assert_allclose(server_work_time(1e8, [1, 2], 1.0, 10.0), [0.07, 0.14])


def test_host_link_follows_the_data_sheets():
    assert host_link("P100").name == "PCIe3"
    assert host_link("V100-16GB").name == "PCIe3"
    assert host_link("A100-80GB").name == "PCIe4"
    assert host_link("H100-SXM").name == "PCIe5"


def test_predict_with_host_staging_times_one_fused_buffer_by_hand():
    # VGG-16's 138.4M fp32 gradients in one buffer, 16 P100s, 4 per node, 25 GbE over RDMA
    # (no TCP efficiency), no overlap: time_comm is the staged allreduce of the whole model
    vgg = dlx.catalog.workload("vgg16")
    n = 4.0 * vgg.params
    ds = dlx.predict(
        "vgg16",
        "P100",
        "25GbE",
        gpus=16,
        gpus_per_node=4,
        batch_size=64,
        algorithm="ring",
        transport="rdma",
        bucket_size=math.inf,
        overlap=0.0,
        host_staging=True,
        host_bandwidth=8.0,
    )
    pcie = 15.75 * 0.762  # PCIe Gen3 x16 after NCCL's efficiency: 12.0 GB/s
    expected = (
        2 * n / (pcie * 1e9)
        + 4 * n / 8e9
        + 2 * 15 * 20e-6
        + 2 * (15 / 16) * n / 3.125e9
        + 3 * (15 / 16) * n / 8e9
    )
    assert ds.time_comm.item() == pytest.approx(expected)
    assert bool(ds.host_staging)
    # the GPUs' own allreduce (NCCL-style ring on device buffers) moves the same bytes faster
    plain = dlx.predict(
        "vgg16",
        "P100",
        "25GbE",
        gpus=16,
        gpus_per_node=4,
        batch_size=64,
        algorithm="ring",
        transport="rdma",
        bucket_size=math.inf,
        overlap=0.0,
    )
    assert plain.time_comm.item() == pytest.approx(2 * 15 * 20e-6 + 2 * (15 / 16) * n / 3.125e9)
    assert ds.time_comm.item() > plain.time_comm.item()


def test_host_bandwidth_must_be_positive():
    with pytest.raises(dlx.errors.DlexploreError, match="host_bandwidth"):
        dlx.predict("resnet50", gpus=2, host_bandwidth=0.0)


def test_a_point_carries_its_own_gemm_plateau():
    # a measured point with a compute_efficiency coordinate is predicted with that plateau (the
    # fidelity benchmark's second calibration stage holds the first stage's fit this way)
    ds = dlx.measured.load("tf-benchmarks-2017-dgx1")
    own = ds.assign_coords(compute_efficiency=("point", np.full(ds.sizes["point"], 0.5)))
    got = dlx.predict_points(own)["throughput"].values
    frame = dlx.measured.to_frame(ds)
    row = frame.iloc[5]
    want = dlx.predict(
        row.workload,
        row.gpu,
        None,
        bandwidth=1.0,
        latency=0.0,
        gpus=int(row.gpus),
        gpus_per_node=int(row.gpus_per_node),
        batch_size=int(row.batch_size),
        intra_link="NVLink1",
        compute_efficiency=0.5,
    )
    assert got[5] == pytest.approx(float(want.throughput))
    assert not np.allclose(got, dlx.predict_points(ds)["throughput"].values)


def test_tables_without_a_nics_column_combine_with_one_that_has_it():
    both = dlx.measured.concat(["goyal-2017-resnet50", "tf-benchmarks-2017-dgx1"], name="both")
    nics = dlx.measured.to_frame(both)["nics_per_node"].to_numpy()
    # Goyal's servers have one NIC; the DGX-1 table says nothing: 0, the model's default
    assert nics.tolist() == [1, 1] + [0] * 16
