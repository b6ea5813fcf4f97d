"""NCCL's cost model (dlexplore.model.nccl) against its tuning.cc constants, worked out by hand:
which algorithm and protocol NCCL picks at which message size."""

from __future__ import annotations

import numpy as np
import pytest

from dlexplore.model.comm import collective_time
from dlexplore.model.nccl import NCCL_ALGORITHMS, PROTOCOLS, nccl_allreduce

# 8 H100 in one node: NVLink4 as NCCL sees it, 18 links x 20.6 GB/s = 370.8 GB/s, 0.6 us LL hops
BUS, HOP = 450 * 0.824, 0.6e-6


def h100(nbytes, nvls=True, **kw):
    return nccl_allreduce(
        nbytes, 8, 8, BUS, HOP, 25.0, 0.6e-6, intra_fabric="nvlink", architecture="Hopper", nvls=nvls, **kw
    )


def test_protocol_thresholds_inside_an_h100_node():
    # ring/LL:     6.6 + 14 x 0.6 = 15.0 us, algbw 370.8 / 4 x 8/14 = 52.97 GB/s
    # ring/LL128:  14 + 14 x 1.9  = 40.6 us, algbw 370.8 x 0.92 x 8/14 = 194.93 GB/s
    # ring/Simple: 8.4 + 14 x 3.4 = 56.0 us, algbw 370.8 x 8/14 = 211.89 GB/s
    # NVLS:        23 us,                    algbw 370.8 x 5/6 = 309.0 GB/s
    ll = (15.0e-6, BUS / 4 * 8 / 14 * 1e9)
    ll128 = (40.6e-6, BUS * 0.92 * 8 / 14 * 1e9)
    simple = (56.0e-6, BUS * 8 / 14 * 1e9)
    nvls = (23e-6, BUS * 5 / 6 * 1e9)

    def cross(a, b):  # the size where two candidates take the same time
        return (b[0] - a[0]) / (1 / a[1] - 1 / b[1])

    to_nvls = cross(ll, nvls)
    assert to_nvls == pytest.approx(511_400, rel=1e-3)
    for n, (algorithm, protocol, cost) in (
        (0.9 * to_nvls, ("ring", "LL", ll)),
        (1.1 * to_nvls, ("nvls", "Simple", nvls)),
    ):
        time, a, p = h100(n)
        assert (NCCL_ALGORITHMS[int(a)], PROTOCOLS[int(p)]) == (algorithm, protocol)
        assert float(time) == pytest.approx(cost[0] + n / cost[1])
    # without NVLink SHARP: LL, then LL128 from 1.86 MB, then Simple from
    # 15.4 us / (1/194.93 - 1/211.89 s/GB) = 37.52 MB
    to_ll128, to_simple = cross(ll, ll128), cross(ll128, simple)
    assert to_ll128 == pytest.approx(1.862e6, rel=1e-3)
    assert to_simple == pytest.approx(37.52e6, rel=1e-3)
    sizes = np.array([0.9 * to_ll128, 1.1 * to_ll128, 0.9 * to_simple, 1.1 * to_simple])
    time, a, p = h100(sizes, nvls=False)
    assert [PROTOCOLS[i] for i in p] == ["LL", "LL128", "LL128", "Simple"]
    assert [NCCL_ALGORITHMS[i] for i in a] == ["ring"] * 4
    np.testing.assert_allclose(time[1], ll128[0] + sizes[1] / ll128[1], rtol=1e-12)


def test_ll128_needs_nvlink_and_a_recent_gpu():
    # Pascal over PCIe: NCCL leaves LL128 off
    _, _, p = nccl_allreduce(
        np.geomspace(1e3, 1e9, 13), 8, 8, 12.0, 1e-6, 12.5, 5e-6, intra_fabric="pcie", architecture="Pascal"
    )
    assert "LL128" not in {PROTOCOLS[i] for i in p}


def test_tree_between_nodes_by_hand():
    # 16 GPUs, 2 nodes of 8 (bus bandwidth the slower of 240 GB/s NVLink3 and a 25 GB/s NIC):
    # tree/Simple: 2 ((8 - 1) x 28 us + log2(2) x (28 + 0.6) us), algbw 0.92 x 25 / 2
    n = 1e8
    time, a, p = nccl_allreduce(
        n,
        16,
        8,
        240.0,
        0.6e-6,
        25.0,
        0.6e-6,
        intra_fabric="nvlink",
        architecture="Ampere",
        algorithms=("tree",),
        protocols=("Simple",),
    )
    expected = 2 * (7 * 28e-6 + 28.6e-6) + n / (0.92 * 25e9 / 2)
    assert float(time) == pytest.approx(expected)
    # the ring: 8.4 us + (30 - 4) NVLink hops x 3.4 us + 4 network hops x (14 + 0.6) us
    ring, _, _ = nccl_allreduce(
        n,
        16,
        8,
        240.0,
        0.6e-6,
        25.0,
        0.6e-6,
        intra_fabric="nvlink",
        architecture="Ampere",
        algorithms=("ring",),
        protocols=("Simple",),
    )
    assert float(ring) == pytest.approx(8.4e-6 + 26 * 3.4e-6 + 4 * 14.6e-6 + n / (25e9 * 16 / 30))


def test_one_rank_costs_nothing_and_collective_time_dispatches():
    time, _, _ = h100(1e6)
    assert float(nccl_allreduce(1e6, 1, 8, BUS, HOP, 25.0, 0.6e-6)[0]) == 0.0
    via = collective_time(
        "allreduce",
        "nccl",
        1e6,
        8,
        25.0,
        0.6e-6,
        gpus_per_node=8,
        intra_bandwidth=BUS,
        intra_latency=HOP,
        architecture="Hopper",
        nvls=True,
    )
    assert float(via) == pytest.approx(float(time))
    nvls = collective_time(
        "allreduce",
        "nvls",
        1e9,
        8,
        25.0,
        0.6e-6,
        gpus_per_node=8,
        intra_bandwidth=BUS,
        intra_latency=HOP,
        nvls=True,
    )
    assert float(nvls) == pytest.approx(23e-6 + 1e9 / (BUS * 5 / 6 * 1e9))
