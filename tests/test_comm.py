"""Collective costs against hand-derived alpha-beta-gamma numbers (Thakur et al. 2005) and
nccl-tests bus-bandwidth definitions."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlexplore.errors import DlexploreError
from dlexplore.model import comm
from dlexplore.model.comm import ALGORITHMS, busbw, busbw_factor, collective_time

A = 5e-6  # alpha, s
BW = 10.0  # GB/s
B = 1e-10  # beta = 1 / (10e9 bytes/s)
G = 2e-11  # gamma, s/byte
N = 1e8  # bytes


def t(collective, algorithm, p, n=N, gamma=G, **kw):
    return float(collective_time(collective, algorithm, n, p, BW, A, gamma, **kw))


@pytest.mark.parametrize(
    "collective, algorithm, p, expected",
    [
        # allreduce, ring: 2(p-1)a + 2(p-1)/p n b + (p-1)/p n g
        ("allreduce", "ring", 2, 2 * A + N * B + 0.5 * N * G),
        ("allreduce", "ring", 8, 14 * A + 1.75 * N * B + 0.875 * N * G),
        ("allreduce", "ring", 6, 10 * A + (10 / 6) * N * B + (5 / 6) * N * G),
        # tree: binomial reduce + broadcast, ceil(lg p) rounds each
        ("allreduce", "tree", 2, 2 * A + 2 * N * B + N * G),
        ("allreduce", "tree", 5, 3 * (2 * A + 2 * N * B + N * G)),
        ("allreduce", "tree", 8, 3 * (2 * A + 2 * N * B + N * G)),
        # recursive doubling: lg p (a + n b + n g); p=6 folds 2 extra ranks into a core of 4
        ("allreduce", "recursive_doubling", 8, 3 * (A + N * B + N * G)),
        ("allreduce", "recursive_doubling", 6, 2 * (A + N * B + N * G) + 2 * A + 2 * N * B + N * G),
        # Rabenseifner: 2 lg p a + 2 (p-1)/p n b + (p-1)/p n g
        ("allreduce", "halving_doubling", 8, 6 * A + 1.75 * N * B + 0.875 * N * G),
        (
            "allreduce",
            "halving_doubling",
            12,
            6 * A + 1.75 * N * B + 0.875 * N * G + 2 * A + 2 * N * B + N * G,
        ),
        ("allreduce", "halving_doubling", 2, 2 * A + N * B + 0.5 * N * G),
        # broadcast
        ("broadcast", "tree", 8, 3 * (A + N * B)),
        ("broadcast", "tree", 3, 2 * (A + N * B)),
        ("broadcast", "ring", 8, (3 + 7) * A + 1.75 * N * B),
        # reduce
        ("reduce", "tree", 4, 2 * (A + N * B + N * G)),
        ("reduce", "ring", 4, (3 + 2) * A + 1.5 * N * B + 0.75 * N * G),
        # allgather, n = total gathered bytes
        ("allgather", "ring", 4, 3 * A + 0.75 * N * B),
        ("allgather", "recursive_doubling", 8, 3 * A + 0.875 * N * B),
        ("allgather", "recursive_doubling", 5, 3 * A + 0.8 * N * B),
        # reduce-scatter
        ("reduce_scatter", "ring", 4, 3 * A + 0.75 * N * (B + G)),
        ("reduce_scatter", "halving_doubling", 4, 2 * A + 0.75 * N * (B + G)),
        ("alltoall", "pairwise", 4, 3 * A + 0.75 * N * B),
    ],
)
def test_formulas_by_hand(collective, algorithm, p, expected):
    assert t(collective, algorithm, p) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "collective", ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"]
)
def test_one_rank_costs_nothing(collective):
    for algorithm in ALGORITHMS[collective]:
        if algorithm in ("parameter_server", "hierarchical", "nccl", "nvls"):
            continue  # they need the node's figures (test_nccl.py checks NCCL's one rank)
        assert t(collective, algorithm, 1) == 0.0


def test_parameter_server_load_on_the_servers_links():
    # k=2 servers, 8 workers: each server link carries 2 n p / k = 8n bytes, i.e. 4n each way
    assert t("allreduce", "parameter_server", 8, servers=2) == pytest.approx(
        2 * A + 2 * 4 * N * B + 4 * N * G
    )
    # more servers than workers: the worker's own link (n each way) is the limit
    assert t("allreduce", "parameter_server", 8, servers=16) == pytest.approx(2 * A + 2 * N * B + 0.5 * N * G)
    # one worker still pushes and pulls
    assert t("allreduce", "parameter_server", 1, servers=1) == pytest.approx(2 * A + 2 * N * B + N * G)


def test_hierarchical_by_hand():
    # 16 GPUs = 4 nodes x 4; intra 100 GB/s, 1 us; inter 10 GB/s, 5 us; gamma 0
    ai, bi = 1e-6, 1e-11
    in_node = 2 * (3 * ai + 0.75 * N * bi)  # ring reduce-scatter + ring allgather over 4 GPUs
    between = 6 * A + 2 * 0.75 * (N / 4) * B  # ring allreduce of n/4 over 4 nodes
    got = collective_time(
        "allreduce",
        "hierarchical",
        N,
        16,
        BW,
        A,
        0.0,
        gpus_per_node=4,
        intra_bandwidth=100.0,
        intra_latency=ai,
    )
    assert float(got) == pytest.approx(in_node + between, rel=1e-12)
    # within one node it is a ring allreduce over the intra-node link
    one_node = collective_time(
        "allreduce",
        "hierarchical",
        N,
        4,
        BW,
        A,
        0.0,
        gpus_per_node=8,
        intra_bandwidth=100.0,
        intra_latency=ai,
    )
    ring = collective_time("allreduce", "ring", N, 4, 100.0, ai, 0.0)
    assert float(one_node) == pytest.approx(float(ring), rel=1e-12)


def test_nccl_tests_bus_bandwidth_factors():
    # nccl-tests PERFORMANCE.md: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n;
    # broadcast and reduce 1
    assert busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert busbw_factor("alltoall", 2) == pytest.approx(0.5)
    assert busbw_factor("broadcast", 8) == 1.0
    assert busbw_factor("reduce", 16) == 1.0
    np.testing.assert_allclose(busbw_factor("allreduce", np.array([1, 2, 4])), [0.0, 1.0, 1.5])


def test_ring_allreduce_busbw_approaches_link_bandwidth():
    # with no latency the ring's busbw equals the link bandwidth exactly
    time = collective_time("allreduce", "ring", N, 8, BW, 0.0)
    assert float(busbw("allreduce", N, 8, time)) == pytest.approx(BW)
    # the example: 1e8 bytes, 8 GPUs, 10 GB/s, 5 us
    time = t("allreduce", "ring", 8, gamma=0.0)
    assert time == pytest.approx(0.01757)
    assert float(comm.algbw(N, time)) == pytest.approx(1e8 / 0.01757 / 1e9)
    assert float(busbw("allreduce", N, 8, time)) == pytest.approx(1e8 / 0.01757 / 1e9 * 1.75)


def test_names_and_aliases():
    assert comm.normalize_algorithm("Rabenseifner") == "halving_doubling"
    assert comm.normalize_algorithm("recursive-doubling") == "recursive_doubling"
    assert comm.normalize_algorithm("ps") == "parameter_server"
    assert comm.normalize_collective("all-reduce") == "allreduce"
    with pytest.raises(DlexploreError, match="unknown algorithm 'rign'.*did you mean 'ring'"):
        comm.normalize_algorithm("rign")
    with pytest.raises(DlexploreError, match="for broadcast"):
        comm.normalize_algorithm("recursive_doubling", "broadcast")
    with pytest.raises(DlexploreError, match="unknown collective"):
        comm.normalize_collective("gossip")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(ranks=0), "ranks must be a whole number from 1 to 1,048,576; got 0"),
        (dict(ranks=2.5), "ranks must be a whole number .*; got 2.5"),
        (dict(bandwidth=0), "bandwidth must be a number of GB/s > 0; got 0"),
        (dict(nbytes=-1), "message size must be a number of bytes >= 0; got -1"),
        (dict(latency=-1e-6), "latency must be a number of s >= 0; got -1e-06"),
    ],
)
def test_bad_arguments(kwargs, message):
    args = dict(nbytes=N, ranks=4, bandwidth=BW, latency=A)
    args.update(kwargs)
    with pytest.raises(DlexploreError, match=message):
        collective_time("allreduce", "ring", **args)


def test_predict_comm_sweeps_become_dimensions():
    ds = comm.predict_comm("allreduce", "ring", nbytes=[1e6, 1e8], gpus=[2, 8], bandwidth=10, latency=5e-6)
    assert ds["time"].dims == ("bytes", "gpus")
    assert ds["time"].sel(bytes=1e8, gpus=8).item() == pytest.approx(0.01757)
    assert ds["busbw"].attrs["units"] == "GB/s"
    assert ds.attrs["source"].startswith("predicted")
    assert ds["busbw"].sel(bytes=1e6, gpus=2).item() == pytest.approx(1e6 / (2 * A + 1e6 * B) / 1e9)


_ALL = [(c, a) for c, algs in ALGORITHMS.items() for a in algs]


@settings(max_examples=300, deadline=None)
@given(
    case=st.sampled_from(_ALL),
    n=st.floats(1.0, 1e10),
    extra=st.floats(1.0, 1e9),
    p=st.integers(1, 4096),
    bw=st.floats(0.01, 1000.0),
    intra=st.floats(0.01, 1000.0),
    alpha=st.floats(0.0, 1e-3),
    k=st.integers(1, 64),
    g=st.integers(1, 16),
)
def test_properties(case, n, extra, p, bw, intra, alpha, k, g):
    collective, algorithm = case
    kw = dict(servers=k, gpus_per_node=g, intra_bandwidth=intra, intra_latency=alpha)
    if algorithm in ("nccl", "nvls"):
        kw.update(nvls=True, architecture="Hopper", intra_fabric="nvlink")
        if algorithm == "nvls" and p > g:
            with pytest.raises(DlexploreError, match="inside one node"):
                collective_time(collective, algorithm, n, p, bw, alpha, **kw)
            return
    small = float(collective_time(collective, algorithm, n, p, bw, alpha, **kw))
    large = float(collective_time(collective, algorithm, n + extra, p, bw, alpha, **kw))
    # time grows with bytes
    assert large > small or (p == 1 and large == small == 0.0)
    # busbw never exceeds the fastest link the algorithm may use
    if large > 0:
        link = max(bw, intra) if algorithm == "hierarchical" else bw
        if algorithm in ("nccl", "nvls"):
            # NVLink SHARP reduces in the switches: algbw 5/6 of the link, busbw up to 5/3 of it
            link = max(bw, intra * 5 / 3)
        assert float(busbw(collective, n + extra, p, large)) <= link * (1 + 1e-9)
    assert math.isfinite(large)


def test_algorithm_for_a_collective():
    # one name for all, a mapping per collective, aliases; what does not apply falls to the default
    assert comm.algorithm_for("allreduce") == "ring"
    assert comm.algorithm_for("allreduce", "rabenseifner") == "halving_doubling"
    assert comm.algorithm_for("alltoall", "ring") == "pairwise"
    assert comm.algorithm_for("broadcast", {"allreduce": "tree"}) == "tree"  # broadcast's default
    assert comm.algorithm_for("allgather", {"allgather": "bruck"}) == "recursive_doubling"
    assert comm.algorithm_for("reduce_scatter", "no-such-thing") == "ring"
