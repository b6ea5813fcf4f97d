"""The data-parallel step model against numbers derived by hand for a small made-up network.

The toy's layers have no shapes, so each is one product timed at the GEMM rate (forward F, backward
2F); ``kernel_time=0`` and ``memory_efficiency=1`` make the compute the textbook FLOPs / (peak x
efficiency) and the update bytes / bandwidth, and ``algorithm="ring"`` the alpha-beta ring, so the
hand derivations stay short. The per-operator model has its own tests (test_operators.py)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlexplore.catalog import GPU, Layer, Link, StorageTier, Workload
from dlexplore.errors import DlexploreError
from dlexplore.model import gradient_buckets, predict, predict_arrays

# Two layers: 1e6 + 3e6 parameters, 1e9 + 3e9 forward FLOPs, 1 MB + 2 MB of fp32 activations.
TOY = Workload(
    name="toy",
    kind="custom",
    layers=(
        Layer("first", "linear", 1_000_000, 1e9, 1e6),
        Layer("second", "linear", 3_000_000, 3e9, 2e6),
    ),
    input_bytes_per_sample=1e5,
    sample_unit="samples",
    source="test",
)
# 10 TFLOP/s fp32, 40 fp16, 16 GiB, 1000 GB/s memory.
CARD = GPU("card", "test", 10.0, math.nan, 40.0, math.nan, 16 * 2**30, 1000.0, 300.0, 50.0, "test")
NET = Link("net", "network", 10.0, 5e-6, "test")  # beta = 1e-10 s/byte
FAST = Link("fast", "intra", 100.0, 1e-6, "test")
A, B = 5e-6, 1e-10


#: The toy's model settings: plain ring, one bucket per layer, no kernel or memory-bound overheads.
SETTINGS = dict(
    intra_link=FAST,
    compute_efficiency=0.5,
    bucket_size=0,
    optimizer="momentum",
    algorithm="ring",
    kernel_time=0.0,
    memory_efficiency=1.0,
)


def run(**kw):
    args = dict(workload=TOY, gpu=CARD, network=NET, gpus=4, batch_size=10, **SETTINGS)
    args.update(kw)
    return predict(**args)


def test_buckets_in_backward_order():
    buckets = gradient_buckets(TOY, 4, 0)
    np.testing.assert_allclose(buckets.nbytes, [1.2e7, 4e6])  # second layer's gradients first
    np.testing.assert_allclose(buckets.ready_fraction, [0.75, 1.0])
    fused = gradient_buckets(TOY, 4, math.inf)
    np.testing.assert_allclose(fused.nbytes, [1.6e7])
    np.testing.assert_allclose(fused.ready_fraction, [1.0])
    # a bucket closes once it holds at least bucket_size bytes
    np.testing.assert_allclose(gradient_buckets(TOY, 4, 1e7).nbytes, [1.2e7, 4e6])
    np.testing.assert_allclose(gradient_buckets(TOY, 2, 1e7).nbytes, [1.6e7 / 2])


def test_step_by_hand():
    ds = run()
    t_fwd = 4e9 * 10 / (10e12 * 0.5)  # 8 ms
    t_bwd = 2 * t_fwd  # 16 ms
    t_opt = 4e6 * 20 / 1e12  # momentum streams 20 bytes per parameter
    c1 = 6 * A + 1.5 * 1.2e7 * B  # ring allreduce over 4 GPUs of the second layer's gradients
    c2 = 6 * A + 1.5 * 4e6 * B
    end1 = t_fwd + 0.75 * t_bwd + c1
    end2 = max(t_fwd + t_bwd, end1) + c2
    exposed = end2 - (t_fwd + t_bwd)
    step = t_fwd + t_bwd + t_opt + exposed
    assert ds.time_forward.item() == pytest.approx(t_fwd)
    assert ds.time_backward.item() == pytest.approx(t_bwd)
    assert ds.time_optimizer.item() == pytest.approx(t_opt)
    assert ds.time_comm.item() == pytest.approx(c1 + c2)
    assert ds.time_comm_exposed.item() == pytest.approx(exposed)
    assert exposed == pytest.approx(c2)  # the first bucket hides behind the last quarter
    assert ds.step_time.item() == pytest.approx(step)
    assert ds.throughput.item() == pytest.approx(40 / step)
    assert ds.efficiency.item() == pytest.approx((t_fwd + t_bwd + t_opt) / step)
    assert ds.comm_bytes.item() == pytest.approx(1.6e7)
    assert ds.n_buckets.item() == 2


def test_predict_arrays_gives_the_step_by_hand_and_predicts_numbers_on_every_sweep():
    """What calibration evaluates: the same numbers as predict, without the Dataset."""
    kw = SETTINGS
    one = predict_arrays(TOY, CARD, NET, gpus=4, batch_size=10, **kw)
    t_fwd, t_bwd, t_opt = 8e-3, 16e-3, 4e6 * 20 / 1e12
    exposed = 6 * A + 1.5 * 4e6 * B  # the second bucket's allreduce, after the backward pass
    assert one.dims == ()
    assert one.at("step_time", {"gpus": np.zeros(3, int)}) == pytest.approx(
        [t_fwd + t_bwd + t_opt + exposed] * 3
    )
    assert float(one.values["n_buckets"]) == 2
    gpus, batch, nodes = [1, 2, 4, 16], [8, 10], [1, 4]
    grid = predict_arrays(TOY, CARD, NET, gpus=gpus, batch_size=batch, gpus_per_node=nodes, **kw)
    ds = predict(TOY, CARD, NET, gpus=gpus, batch_size=batch, gpus_per_node=nodes, **kw)
    assert grid.dims == ("gpus", "batch_size", "gpus_per_node")
    points = {  # every combination, as points
        d: index.ravel() for d, index in zip(grid.dims, np.indices(grid.shape), strict=True)
    }
    expected = ds.drop_vars(["time_operator", "operator"]).broadcast_like(ds.step_time)
    assert set(grid.values) == set(expected.data_vars)
    for name in grid.values:
        values = expected[name].transpose(*grid.dims).values.ravel()
        np.testing.assert_array_equal(grid.at(name, points), values, err_msg=name)


def test_predict_arrays_refuses_what_it_cannot_evaluate():
    with pytest.raises(DlexploreError, match="precision given as a sequence; use dlexplore.predict"):
        predict_arrays(TOY, CARD, NET, precision=["fp32", "fp16"])
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['bucket'\\]"):
        predict_arrays(TOY, CARD, NET, bucket=0)
    with pytest.raises(DlexploreError, match="workspace"):
        predict_arrays(TOY, CARD, NET, workspace=-1)


def test_bucket_schedule_by_hand():
    ds = run(buckets=True, gpus=[1, 4])
    t_fwd, t_bwd = 8e-3, 16e-3
    c1 = 6 * A + 1.5 * 1.2e7 * B
    c2 = 6 * A + 1.5 * 4e6 * B
    four = ds.sel(gpus=4)
    np.testing.assert_allclose(four.bucket_bytes, [1.2e7, 4e6])
    np.testing.assert_allclose(four.bucket_ready, [t_fwd + 0.75 * t_bwd, t_fwd + t_bwd])
    np.testing.assert_allclose(four.bucket_start, [t_fwd + 0.75 * t_bwd, t_fwd + t_bwd])
    np.testing.assert_allclose(four.bucket_time, [c1, c2])
    np.testing.assert_allclose(four.bucket_end, [t_fwd + 0.75 * t_bwd + c1, t_fwd + t_bwd + c2])
    np.testing.assert_allclose(four.bucket_algbw, [1.2e7 / c1 / 1e9, 4e6 / c2 / 1e9])
    np.testing.assert_allclose(four.bucket_busbw, [1.5 * 1.2e7 / c1 / 1e9, 1.5 * 4e6 / c2 / 1e9])
    # one GPU: nothing is sent, so no bandwidth to speak of
    one = ds.sel(gpus=1)
    np.testing.assert_array_equal(one.bucket_time, [0.0, 0.0])
    assert np.isnan(one.bucket_busbw).all()
    assert ds.bucket_end.attrs["units"] == "s" and ds.bucket_busbw.attrs["units"] == "GB/s"
    assert "bucket_time" not in run()


def test_one_bucket_and_no_overlap():
    fused = run(bucket_size=math.inf)
    assert fused.time_comm_exposed.item() == pytest.approx(6 * A + 1.5 * 1.6e7 * B)
    serial = run(overlap=0.0)
    assert serial.time_comm_exposed.item() == pytest.approx(serial.time_comm.item())
    half = run(overlap=0.5)
    full = run()
    assert half.time_comm_exposed.item() == pytest.approx(
        0.5 * full.time_comm_exposed.item() + 0.5 * full.time_comm.item()
    )


def test_one_gpu_does_not_communicate_and_scales_perfectly():
    ds = run(gpus=1)
    assert ds.time_comm.item() == 0.0
    assert ds.efficiency.item() == pytest.approx(1.0)
    assert ds.mem_workspace.item() == pytest.approx(2**30)  # no fusion buffer


def test_intra_node_link_when_gpus_share_a_node():
    ds = run(gpus_per_node=4, bucket_size=math.inf)
    assert ds.time_comm.item() == pytest.approx(6 * 1e-6 + 1.5 * 1.6e7 / 100e9)
    hier = run(gpus=8, gpus_per_node=4, bucket_size=math.inf, algorithm="hierarchical")
    in_node = 2 * (3 * 1e-6 + 0.75 * 1.6e7 / 100e9)
    between = 2 * A + 2 * 0.5 * (1.6e7 / 4) * B
    assert hier.time_comm.item() == pytest.approx(in_node + between)


def test_gpus_of_a_node_share_its_nics_where_they_all_send_at_once():
    # hierarchical: 8 GPUs, 4 per node, one NIC per node: the between-node ring allreduce of each
    # GPU's quarter (n / 4 over 2 nodes) sees a quarter of the NIC
    n = 1.6e7
    in_node = 2 * (3 * 1e-6 + 0.75 * n / 100e9)
    one_nic = run(gpus=8, gpus_per_node=4, bucket_size=math.inf, algorithm="hierarchical", nics_per_node=1)
    assert one_nic.time_comm.item() == pytest.approx(in_node + 2 * A + 2 * 0.5 * (n / 4) * B * 4)
    # two NICs: half a NIC each; four or more (or 0, the default: one per GPU): a whole one
    two = run(gpus=8, gpus_per_node=4, bucket_size=math.inf, algorithm="hierarchical", nics_per_node=2)
    assert two.time_comm.item() == pytest.approx(in_node + 2 * A + 2 * 0.5 * (n / 4) * B * 2)
    for nics in (0, 4, 8):
        own = run(gpus=8, gpus_per_node=4, bucket_size=math.inf, algorithm="hierarchical", nics_per_node=nics)
        assert own.time_comm.item() == pytest.approx(in_node + 2 * A + 2 * 0.5 * (n / 4) * B)
    # a flat ring crosses each node boundary once each way: one NIC per node is enough
    ring = run(gpus=8, gpus_per_node=4, bucket_size=math.inf, nics_per_node=1)
    assert ring.time_comm.item() == pytest.approx(14 * A + 2 * (7 / 8) * n * B)


def test_parameter_server():
    # 2 servers: the 3e6-parameter layer on one, the 1e6 one on the other (largest first on the
    # least loaded), so the busiest holds f = 3/4 of the 1.6e7 gradient bytes. One GPU per node,
    # servers on the workers' nodes: its link carries n (f (p - g) + g (1 - f)) = 2.5 n each way.
    # Its CPU then moves 7 bytes per byte of the f p n = 3 n it serves (receive 2, sum 3, send 2):
    # 7 x 3 x 1.6e7 bytes at server_bandwidth = 10 GB/s.
    work = 7 * 3 * 1.6e7 / 10e9
    ps = dict(algorithm="parameter_server", bucket_size=math.inf, server_bandwidth=10.0)
    ds = run(servers=2, ps_efficiency=1.0, **ps)
    assert ds.time_comm.item() == pytest.approx(2 * A + 2 * 2.5 * 1.6e7 * B + work)
    # on dedicated nodes it receives f p n = 3 n from the 4 workers
    own = run(servers=2, ps_efficiency=1.0, servers_colocated=False, **ps)
    assert own.time_comm.item() == pytest.approx(2 * A + 2 * 3 * 1.6e7 * B + work)
    # gRPC reaches ps_efficiency of the link: half of it doubles the transfer time
    slow = run(servers=2, ps_efficiency=0.5, **ps)
    assert slow.time_comm.item() == pytest.approx(2 * A + 2 * 2.5 * 1.6e7 * B / 0.5 + work)
    # servers=0 (the default): one per node, here one per GPU: 4 servers hold 3e6, 1e6, 0, 0
    per_node = run(ps_efficiency=1.0, **ps)
    assert per_node.time_comm.item() == pytest.approx(2 * A + 2 * 2.5 * 1.6e7 * B + work)
    # a CPU twice as fast halves the server's own work and nothing else
    fast = run(servers=2, ps_efficiency=1.0, **dict(ps, server_bandwidth=20.0))
    assert fast.time_comm.item() == pytest.approx(2 * A + 2 * 2.5 * 1.6e7 * B + work / 2)


def test_gradient_accumulation_hides_communication_behind_the_last_micro_batch_only():
    # 3 micro-batches of 10 samples: forward and backward three times, one allreduce, one update
    t_fwd, t_bwd = 8e-3, 16e-3
    c1 = 6 * A + 1.5 * 1.2e7 * B
    c2 = 6 * A + 1.5 * 4e6 * B
    ds = run(grad_accum=3)
    assert ds.time_forward.item() == pytest.approx(3 * t_fwd)
    assert ds.time_backward.item() == pytest.approx(3 * t_bwd)
    assert ds.time_optimizer.item() == pytest.approx(4e6 * 20 / 1e12)  # once per step
    # the buckets fill during the last micro-batch's backward, as with one micro-batch
    start = 2 * (t_fwd + t_bwd) + t_fwd
    end1 = start + 0.75 * t_bwd + c1
    end2 = max(start + t_bwd, end1) + c2
    assert ds.time_comm_exposed.item() == pytest.approx(end2 - (start + t_bwd))
    step = 3 * (t_fwd + t_bwd) + 4e6 * 20 / 1e12 + (end2 - (start + t_bwd))
    assert ds.step_time.item() == pytest.approx(step)
    assert ds.throughput.item() == pytest.approx(4 * 10 * 3 / step)
    # the same global batch in one micro-batch exposes the same allreduce but keeps 3x the
    # activations
    one = run(batch_size=30)
    assert one.mem_activations.item() == pytest.approx(3 * ds.mem_activations.item())


def test_horovod_adds_half_a_cycle_and_the_negotiation_to_every_fused_buffer():
    # one buffer of the two layers' tensors, 4 ranks: 2 tree levels
    base = run(bucket_size=math.inf)
    hvd = run(bucket_size=math.inf, framework="horovod", cycle_time=4e-3, negotiation_time=1e-4)
    delay = 4e-3 / 2 + 1e-4 * 2 * 2
    assert hvd.time_comm.item() == pytest.approx(base.time_comm.item() + delay)
    # Horovod's default fusion buffer is 64 MiB: the 16 MB of gradients are one buffer
    assert int(run(framework="horovod", bucket_size=None).n_buckets) == 1


def test_tcp_reaches_tcp_efficiency_of_an_ethernet_network():
    eth = Link("eth", "network", 10.0, 5e-6, "test", fabric="ethernet")
    rdma = run(network=eth, transport="rdma", bucket_size=math.inf)
    assert rdma.time_comm.item() == pytest.approx(6 * A + 1.5 * 1.6e7 * B)
    tcp = run(network=eth, bucket_size=math.inf, tcp_efficiency=0.25)  # auto: TCP on Ethernet
    assert tcp.time_comm.item() == pytest.approx(6 * A + 1.5 * 1.6e7 * B / 0.25)
    assert str(tcp.transport.values) == "tcp"


def test_link_efficiency_scales_the_bandwidth_collectives_see():
    slow = Link("net80", "network", 10.0, 5e-6, "test", efficiency=0.8)
    ds = run(network=slow, bucket_size=math.inf)
    assert ds.time_comm.item() == pytest.approx(6 * A + 1.5 * 1.6e7 * B / 0.8)


def test_memory_by_hand():
    fp32 = run(bucket_size=25 * 2**20)
    assert fp32.mem_params.item() == 1.6e7
    assert fp32.mem_grads.item() == 1.6e7
    assert fp32.mem_optimizer.item() == 1.6e7  # momentum: one fp32 velocity
    assert fp32.mem_activations.item() == pytest.approx(3e6 * 10)
    assert fp32.mem_workspace.item() == pytest.approx(2**30 + 1.6e7)  # + the fusion buffer
    assert fp32.mem_total.item() == pytest.approx(4.8e7 + 3e7 + 2**30 + 1.6e7)
    assert fp32.mem_capacity.item() == 16 * 2**30
    assert bool(fp32.fits)
    # mixed-precision Adam: 2 + 2 + 12 bytes per parameter (Rajbhandari et al., ZeRO)
    mixed = run(precision="fp16", optimizer="adam", compute_efficiency=None)
    assert mixed.mem_params.item() + mixed.mem_grads.item() + mixed.mem_optimizer.item() == 16 * 4e6
    assert mixed.mem_activations.item() == pytest.approx(1.5e6 * 10)
    # The made-up card has no published GEMM figure of its own or of its (unnamed) architecture:
    # its fp16 runs on matrix units (40 > 2 x 10 TFLOP/s), so the default is the median of the
    # published matrix-unit plateaus, one per GPU: V100 83/125, H200 751.4/989.4, MI250X
    # 147/191.5, H100 792.1/989.4, A100 267.9/312, i.e. the MI250X's.
    default = 147.0 / 191.5
    assert float(mixed.compute_efficiency) == pytest.approx(default)
    assert mixed.time_forward.item() == pytest.approx(4e10 / (40e12 * default))
    sgd = run(optimizer="sgd")
    assert sgd.mem_optimizer.item() == 0
    big = run(batch_size=10_000)
    assert not bool(big.fits)


def test_storage_and_prefetch():
    tier = StorageTier("disk", "shared", 100.0, 2.0, 1e-3, "test")
    ds = run(storage=tier, prefetch=False)
    t_io = 10 * 1e5 / 2e9 + 10 * 1e-3 / 4  # client cap 2 GB/s, 4 reads in flight
    assert ds.time_io.item() == pytest.approx(t_io)
    assert ds.time_io_exposed.item() == pytest.approx(t_io)
    hidden = run(storage=tier)
    assert hidden.time_io_exposed.item() == 0.0
    # 1000 readers share 1 GB/s: 1 MB/s each, longer than the step, so reading shows
    slow = StorageTier("slow", "shared", 1.0, 2.0, 1e-3, "test")
    crowded = run(storage=slow, gpus=1000)
    t_io = 10 * 1e5 / 1e6 + 10 * 1e-3 / 4
    assert crowded.time_io.item() == pytest.approx(t_io)
    busy = crowded.time_compute.item() + crowded.time_comm_exposed.item()
    assert crowded.time_io_exposed.item() == pytest.approx(t_io - busy)
    node = StorageTier("nvme", "node", 4.0, 3.0, 1e-4, "test")
    local = run(storage=node, gpus=64, gpus_per_node=8)
    assert local.time_io.item() == pytest.approx(10 * 1e5 / 0.5e9 + 10 * 1e-4 / 4)


def test_sweeps_become_dimensions_with_units():
    ds = run(gpus=[1, 2, 4, 8], batch_size=[8, 16], bandwidth=[1.0, 10.0])
    assert ds.step_time.dims == ("gpus", "batch_size", "bandwidth")
    assert ds.mem_activations.dims == ("batch_size",)
    assert ds.time_comm.dims == ("gpus", "bandwidth")
    assert ds.attrs["source"].startswith("predicted")
    assert ds.attrs["kind"] == "predicted"
    for name, var in ds.variables.items():
        if var.dtype.kind in "fiub":
            assert "units" in var.attrs, name
    one = run(gpus=4, batch_size=16, bandwidth=10.0)
    assert ds.step_time.sel(gpus=4, batch_size=16, bandwidth=10.0).item() == pytest.approx(
        one.step_time.item()
    )


def test_categorical_sweeps():
    ds = predict(
        workload=["resnet50", "vgg16"], gpu=["P100", "V100-16GB"], network="25GbE", gpus=[1, 8], batch_size=32
    )
    assert set(ds.step_time.dims) == {"workload", "gpu", "gpus"}
    assert list(ds.workload.values) == ["resnet50", "vgg16"]
    one = predict("vgg16", "P100", "25GbE", gpus=8, batch_size=32)
    assert ds.step_time.sel(workload="vgg16", gpu="P100", gpus=8).item() == pytest.approx(
        one.step_time.item()
    )
    # which GPU is faster, straight from xarray (pandas 3's string index dtype used to break it)
    assert ds.throughput.sel(gpus=8).idxmax("gpu").values.tolist() == ["V100-16GB", "V100-16GB"]
    nets = predict("resnet50", "P100", ["10GbE", "100GbE"], gpus=16)
    assert list(nets.bandwidth.values) == [1.25, 12.5]  # each network brings its own bandwidth


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(gpus=0), "gpus must be a whole number from 1 to 1,048,576; got 0"),
        (dict(batch_size=[8, 8]), "repeats"),
        (dict(compute_efficiency=1.5), "compute_efficiency"),
        (dict(overlap=2.0), "overlap"),
        (dict(precision="fp8"), "unknown precision"),
        (dict(optimizer="lamb"), "unknown optimizer"),
        (dict(algorithm="gossip"), "unknown algorithm"),
        (dict(network=None), "give a network, or both bandwidth"),
        (dict(gpus=[[1, 2]]), "1-D"),
    ],
)
def test_bad_arguments(kw, message):
    with pytest.raises(DlexploreError, match=message):
        run(**kw)


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.integers(1, 2048),
    batch=st.integers(1, 512),
    bw=st.floats(0.1, 500.0),
    lat=st.floats(0.0, 1e-3),
    alg=st.sampled_from(
        ["ring", "tree", "recursive_doubling", "halving_doubling", "hierarchical", "parameter_server"]
    ),
    bucket=st.sampled_from([0.0, 1e6, 25 * 2**20, math.inf]),
)
def test_efficiency_never_exceeds_one(gpus, batch, bw, lat, alg, bucket):
    ds = run(
        gpus=gpus,
        batch_size=batch,
        bandwidth=bw,
        latency=lat,
        algorithm=alg,
        bucket_size=bucket,
        gpus_per_node=4,
    )
    assert 0 < ds.efficiency.item() <= 1 + 1e-12
    assert ds.time_comm_exposed.item() <= ds.time_comm.item() + 1e-15
    assert ds.throughput.item() == pytest.approx(gpus * batch / ds.step_time.item())


def test_mixed_precision_on_slow_fp16_runs_at_the_fp32_rate():
    # GTX 1080 Ti: fp16 arithmetic at 1/64 of fp32, so libraries compute in fp32; with memory
    # traffic made free, the forward pass takes the fp32 time (16-bit tensors only halve the bytes)
    free = dict(compute_efficiency=0.5, memory_efficiency=1.0, kernel_time=0.0)
    fp32 = predict("resnet50", "GTX1080Ti", "10GbE", batch_size=32, **free)
    mixed = predict("resnet50", "GTX1080Ti", "10GbE", batch_size=32, precision="fp16", **free)
    conv32 = fp32.time_operator.sel(operator="conv").item()
    conv16 = mixed.time_operator.sel(operator="conv").item()
    assert conv16 == pytest.approx(conv32, rel=0.03)  # a few thin convolutions are memory-bound
    assert conv16 <= conv32
    assert mixed.peak_flops.item() == pytest.approx(11.34e12)
    v100 = predict("resnet50", "V100-16GB", "10GbE", batch_size=32, precision="fp16", compute_efficiency=0.5)
    assert v100.peak_flops.item() == pytest.approx(125e12)
