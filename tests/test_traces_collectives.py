"""The collective table, clock alignment and the comparison with the alpha-beta model
(``dlexplore.traces.collectives``).

Synthetic event tables are built with ``make_events``; every expected number is worked out by hand
in the comments (binary fractions, so the arithmetic is exact). Bandwidth factors follow nccl-tests
doc/PERFORMANCE.md. The real-trace tests read PyTorch profiler traces that real 2-rank gloo runs
wrote (``tests/data/traces/pytorch/``) and the collector's samples (``data/traces/``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlexplore
from dlexplore.fit.collectives import compare_collectives
from dlexplore.traces import Trace, make_events
from dlexplore.traces.collectives import (
    TABLE_COLUMNS,
    clock_offsets,
    collective_ops,
    collective_table,
)

ROOT = Path(__file__).resolve().parents[1]
EXACT = dict(rel=0, abs=1e-12)

#: Clock offsets of ranks 0..3: rank r's clock reads true time + OFFSETS[r].
OFFSETS = [0.0, 0.5, -0.25, 2.0]

#: (collective, bytes, starts on ranks 0..3 in true time, end on each rank in true time)
OPERATIONS = [
    # allreduce 1e6 B #0: durations 1, 0.75, 0.5, 1 -> mean 0.8125; skew 1.5 - 1 = 0.5; last in 2 - 1.5
    ("allreduce", 1e6, [1.0, 1.25, 1.5, 1.0], [2.0] * 4),
    # allgather 4e6 B #0: durations 0.5, 0.5, 0.25, 0.5 -> 0.4375; skew 0.25; last in 0.25
    ("allgather", 4e6, [6.0, 6.0, 6.25, 6.0], [6.5] * 4),
    # allreduce #1: durations 1, 1, 1, 0.5 -> 0.875; skew 0.5; last in 0.5
    ("allreduce", 1e6, [3.0, 3.0, 3.0, 3.5], [4.0] * 4),
    # allreduce #2: durations 0.75, 0.25, 0.75, 0.75 -> 0.625; skew 0.5; last in 0.25
    ("allreduce", 1e6, [5.0, 5.5, 5.0, 5.0], [5.75] * 4),
    # allgather #1: durations 1 -> 1; skew 0; last in 1
    ("allgather", 4e6, [7.0] * 4, [8.0] * 4),
    # broadcast 1000 B from rank 0, which leaves first (rooted: not used for the offsets):
    # durations 0.25, 0.5, 0.5, 0.5 -> 0.4375; skew 0; last in 9.5 - 9 = 0.5
    ("broadcast", 1e3, [9.0] * 4, [9.25, 9.5, 9.5, 9.5]),
]


def four_rank_trace(operations=OPERATIONS, offsets=OFFSETS, extra_rows=()) -> Trace:
    """OPERATIONS on 4 ranks whose clocks are shifted by OFFSETS, plus ``extra_rows``."""
    rows = []
    for collective, nbytes, starts, ends in operations:
        for rank in range(4):
            rows.append(
                (
                    rank,
                    f"cpu:{rank}:2",
                    f"gloo:{collective}",
                    "communication",
                    starts[rank] + offsets[rank],
                    ends[rank] + offsets[rank],
                    nbytes,
                    collective,
                )
            )
    rows += list(extra_rows)
    rank, stream, name, category, start, end, nbytes, collective = (list(c) for c in zip(*rows, strict=True))
    events = make_events(
        dict(
            rank=rank,
            stream=stream,
            name=name,
            category=category,
            start=start,
            duration=np.subtract(end, start),
            bytes=nbytes,
            collective=collective,
        )
    )
    return Trace(events, "pytorch", tuple(f"rank{r}.json" for r in range(4)))


def test_offsets_recovered_exactly():
    offsets = clock_offsets(four_rank_trace())
    assert offsets.index.tolist() == [0, 1, 2, 3]
    assert offsets.to_numpy() == pytest.approx(OFFSETS, **EXACT)
    assert offsets.attrs["units"] == "s" and offsets.attrs["reference_rank"] == 0


def test_offsets_median_shrugs_off_one_late_end():
    """One allreduce whose end on rank 1 is 0.125 s late: the median of 5 differences ignores it."""
    late = [list(op) for op in OPERATIONS]
    late[2][3] = [4.0, 4.125, 4.0, 4.0]
    offsets = clock_offsets(four_rank_trace(late))
    assert offsets.to_numpy() == pytest.approx(OFFSETS, **EXACT)


def test_collective_table_by_hand():
    table = four_rank_trace().collectives()
    assert list(table.columns) == list(TABLE_COLUMNS)
    assert table["collective"].tolist() == ["allgather", "allreduce", "broadcast"]
    assert table["bytes"].tolist() == [4e6, 1e6, 1e3]
    assert table["ranks"].tolist() == [4, 4, 4]
    assert table["count"].tolist() == [2, 3, 1]
    row = table.set_index("collective")
    # allreduce: (0.8125 + 0.875 + 0.625) / 3; fastest 0.625, slowest 0.875
    assert row.loc["allreduce", "time"] == pytest.approx(2.3125 / 3)
    assert row.loc["allreduce", "time_min"] == pytest.approx(0.625, **EXACT)
    assert row.loc["allreduce", "time_max"] == pytest.approx(0.875, **EXACT)
    assert row.loc["allreduce", "skew"] == pytest.approx(0.5, **EXACT)
    assert row.loc["allreduce", "time_last_in"] == pytest.approx((0.5 + 0.5 + 0.25) / 3)
    # allgather: (0.4375 + 1) / 2 = 0.71875; skew (0.25 + 0) / 2; last in (0.25 + 1) / 2
    assert row.loc["allgather", "time"] == pytest.approx(0.71875, **EXACT)
    assert row.loc["allgather", "skew"] == pytest.approx(0.125, **EXACT)
    assert row.loc["allgather", "time_last_in"] == pytest.approx(0.625, **EXACT)
    assert row.loc["broadcast", "time"] == pytest.approx(0.4375, **EXACT)
    assert row.loc["broadcast", "skew"] == pytest.approx(0.0, **EXACT)
    assert row.loc["broadcast", "time_last_in"] == pytest.approx(0.5, **EXACT)
    # algbw = bytes / time / 1e9 (GB/s)
    assert row.loc["allreduce", "algbw"] == pytest.approx(1e6 / (2.3125 / 3) / 1e9)
    assert row.loc["allgather", "algbw"] == pytest.approx(4e6 / 0.71875 / 1e9)
    # busbw factors at p = 4: allreduce 2(p-1)/p = 1.5, allgather (p-1)/p = 0.75, broadcast 1
    assert row.loc["allreduce", "busbw"] == pytest.approx(1.5 * row.loc["allreduce", "algbw"])
    assert row.loc["allgather", "busbw"] == pytest.approx(0.75 * row.loc["allgather", "algbw"])
    assert row.loc["broadcast", "busbw"] == pytest.approx(row.loc["broadcast", "algbw"])
    assert table.attrs["offsets"] == pytest.approx(dict(enumerate(OFFSETS)))
    assert table.attrs["units"]["busbw"] == "GB/s" and table.attrs["units"]["time"] == "s"
    assert table.attrs["source"] == "measured: pytorch trace rank0.json, rank1.json, rank2.json and 1 more"


def test_without_alignment_the_offsets_show_up_as_skew():
    table = collective_table(four_rank_trace(), align=False).set_index("collective")
    # allreduce #0 on raw clocks starts at 1, 1.75, 1.25, 3 -> spread 2; #1: 3, 3.5, 2.75, 5.5 -> 2.75;
    # #2: 5, 6, 4.75, 7 -> 2.25; mean 7 / 3. Durations do not depend on the clocks.
    assert table.loc["allreduce", "skew"] == pytest.approx(7 / 3)
    assert table.loc["allreduce", "time"] == pytest.approx(2.3125 / 3)
    assert table.attrs["align"] is False and set(table.attrs["offsets"].values()) == {0.0}


def test_two_ranks_busbw_factors():
    """p = 2: allreduce 2(p-1)/p = 1, allgather (p-1)/p = 0.5."""
    rows = []
    for rank in range(2):
        rows += [
            (rank, "cpu:0:2", "gloo:all_reduce", "allreduce", 1.0, 2.0, 8e6),
            (rank, "cpu:0:2", "gloo:all_gather", "allgather", 3.0, 3.5, 8e6),
        ]
    rank, stream, name, collective, start, end, nbytes = (list(c) for c in zip(*rows, strict=True))
    events = make_events(
        dict(
            rank=rank,
            stream=stream,
            name=name,
            category=["communication"] * 4,
            start=start,
            duration=np.subtract(end, start),
            bytes=nbytes,
            collective=collective,
        )
    )
    row = collective_table(Trace(events, "pytorch")).set_index("collective")
    # allreduce: 8e6 B in 1 s = 0.008 GB/s, busbw x 1; allgather: 8e6 B in 0.5 s = 0.016 GB/s, x 0.5
    assert row.loc["allreduce", "algbw"] == pytest.approx(0.008)
    assert row.loc["allreduce", "busbw"] == pytest.approx(0.008)
    assert row.loc["allgather", "algbw"] == pytest.approx(0.016)
    assert row.loc["allgather", "busbw"] == pytest.approx(0.008)
    assert row["ranks"].tolist() == [2, 2]


def test_dispatcher_ops_and_enclosing_events_are_not_counted_twice():
    extra = [
        # PyTorch's c10d::allreduce_ on rank 0's main thread: it enqueues, gloo runs the work
        (0, "cpu:0:1", "c10d::allreduce_", "communication", 0.5, 0.625, 1e6, "allreduce"),
        (0, "cpu:0:1", "c10d::allreduce_", "communication", 2.5, 2.625, 1e6, "allreduce"),
        (0, "cpu:0:1", "c10d::allreduce_", "communication", 4.5, 4.625, 1e6, "allreduce"),
        # a Horovod-style ALLREDUCE around rank 3's first NCCL_ALLREDUCE-like event on its stream
        (3, "cpu:3:2", "ALLREDUCE", "communication", 0.0 + 2.0, 2.25 + 2.0, 1e6, "allreduce"),
        # point-to-point: a row of its own, not matched with the group's operations
        (1, "cpu:1:2", "gloo:send", "communication", 10.0, 11.0, 1e6, "send"),
    ]
    plain = four_rank_trace().collectives()
    table = four_rank_trace(extra_rows=extra).collectives()
    pd.testing.assert_frame_equal(table[table["collective"] != "send"], plain)
    send = table[table["collective"] == "send"].iloc[0]
    # 1e6 bytes in 1 s = 0.001 GB/s; the peer is not in the event: "?"
    assert (send["bytes"], send["count"], send["ranks"], send["time"]) == (1e6, 1, 1, 1.0)
    assert send["algbw"] == pytest.approx(0.001) and send["busbw"] == pytest.approx(0.001)
    assert send["peers"] == "1->?"


def test_op_column_matches_events_across_ranks():
    """With a ``seq`` column, operations are matched by it, and one rank's pieces form one span."""
    events = make_events(
        dict(
            rank=[0, 0, 1, 0, 1],
            stream=["cpu:0:2", "cpu:0:2", "cpu:1:2", "cpu:0:2", "cpu:1:2"],
            name=["NCCL_ALLREDUCE"] * 5,
            category=["communication"] * 5,
            # op 7 on rank 0 in two pieces [0, 1] and [1, 1.5]; on rank 1 [0.25, 1.5];
            # op 8: rank 0 [2, 3], rank 1 [2, 3]
            start=[0.0, 1.0, 0.25, 2.0, 2.0],
            duration=[1.0, 0.5, 1.25, 1.0, 1.0],
            bytes=[1e6, 1e6, 1e6, 2e6, 2e6],
            collective=["allreduce"] * 5,
            seq=[7, 7, 7, 8, 8],
        )
    )
    ops = collective_ops(Trace(events, "horovod"))
    assert ops["ranks"].tolist() == [2, 2]
    # op 7: durations 1.5 (rank 0's span) and 1.25 -> 1.375; skew 0.25
    assert ops["time"].tolist() == pytest.approx([1.375, 1.0])
    assert ops["skew"].tolist() == pytest.approx([0.25, 0.0])


def test_compare_with_the_alpha_beta_model():
    table = four_rank_trace().collectives()
    out = compare_collectives(table, bandwidth=10.0, latency=1e-5)
    row = out.set_index("collective")
    # ring allreduce, p = 4, n = 1e6 B, 10 GB/s, 10 us: 2*3*1e-5 + 2*(3/4)*1e6/1e10 = 2.1e-4 s
    assert row.loc["allreduce", "predicted"] == pytest.approx(2.1e-4)
    # ring allgather: 3*1e-5 + (3/4)*4e6/1e10 = 3.3e-4 s
    assert row.loc["allgather", "predicted"] == pytest.approx(3.3e-4)
    # ring broadcast: (ceil(log2 4) + 3)*1e-5 + 2*(3/4)*1e3/1e10 = 5.015e-5 s
    assert row.loc["broadcast", "predicted"] == pytest.approx(5.015e-5)
    assert row.loc["allreduce", "error"] == pytest.approx((2.3125 / 3 - 2.1e-4) / 2.1e-4)
    assert row["algorithm"].tolist() == ["ring", "ring", "ring"]
    assert out.attrs["units"]["predicted"] == "s" and out.attrs["units"]["error"] == "1"
    # a per-collective algorithm, and the reduction cost: Rabenseifner's halving-doubling allreduce
    # on p = 4 (a power of two, no extra ranks), n = 1e6 B, beta = 1e-10 s/B, gamma = 1e-10 s/B:
    # 2 lg 4 alpha + 2 (3/4) n beta + (3/4) n gamma = 4e-5 + 1.5e-4 + 7.5e-5 = 2.65e-4 s
    out = compare_collectives(
        table, bandwidth=10.0, latency=1e-5, gamma=1e-10, algorithm={"allreduce": "halving_doubling"}
    )
    row = out.set_index("collective")
    assert row.loc["allreduce", "predicted"] == pytest.approx(2.65e-4)
    assert row.loc["allreduce", "algorithm"] == "halving_doubling"
    assert row.loc["broadcast", "algorithm"] == "tree"  # broadcast's default
    # a name that does not apply to a collective falls back to its default
    out = compare_collectives(table, bandwidth=10.0, latency=1e-5, algorithm="tree")
    assert out.set_index("collective").loc["allgather", "algorithm"] == "ring"


def test_barrier_and_unknown_sizes_have_no_bandwidth_or_prediction():
    rows = [(r, "cpu:0:2", "gloo:barrier", "communication", 1.0, 1.5, np.nan, "barrier") for r in range(2)]
    rank, stream, name, category, start, end, nbytes, collective = (list(c) for c in zip(*rows, strict=True))
    events = make_events(
        dict(
            rank=rank,
            stream=stream,
            name=name,
            category=category,
            start=start,
            duration=np.subtract(end, start),
            bytes=nbytes,
            collective=collective,
        )
    )
    table = collective_table(events)
    assert table["count"].tolist() == [1] and np.isnan(table["bytes"][0])
    assert table["time"][0] == pytest.approx(0.5)
    assert np.isnan(table["algbw"][0]) and np.isnan(table["busbw"][0])
    out = compare_collectives(table, bandwidth=10.0, latency=1e-5)
    assert np.isnan(out["predicted"][0]) and np.isnan(out["error"][0])


def test_empty_and_no_communication():
    events = make_events(
        dict(
            rank=[0, 1],
            stream=["cpu:0:1", "cpu:1:1"],
            name=["aten::mm"] * 2,
            category=["compute"] * 2,
            start=[0.0, 0.0],
            duration=[1.0, 1.0],
        )
    )
    for trace in (Trace(events, "pytorch"), Trace(events.iloc[:0], "pytorch")):
        table = trace.collectives()
        assert table.empty and list(table.columns) == list(TABLE_COLUMNS)
        assert compare_collectives(table, bandwidth=1.0, latency=1e-6).empty
        assert clock_offsets(trace).empty


def test_gpu_ranks_use_device_kernels():
    """The host's nccl:all_reduce range (cpu stream) is not the operation; the kernel is."""
    rows = []
    for rank, kernel in ((0, (1.0, 3.0)), (1, (2.0, 3.0))):
        rows += [
            (rank, f"cpu:{rank}:1", "nccl:all_reduce", 0.5, 0.75),
            (rank, f"cuda:{rank}:13", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", *kernel),
        ]
    rank, stream, name, start, end = (list(c) for c in zip(*rows, strict=True))
    events = make_events(
        dict(
            rank=rank,
            stream=stream,
            name=name,
            category=["communication"] * 4,
            start=start,
            duration=np.subtract(end, start),
            bytes=[4e6] * 4,
            collective=["allreduce"] * 4,
        )
    )
    table = collective_table(events)
    assert table["count"].tolist() == [1]
    # kernel durations 2 and 1 -> 1.5 s; starts 1 and 2 -> skew 1
    assert table["time"][0] == pytest.approx(1.5)
    assert table["skew"][0] == pytest.approx(1.0)


def _real_folders() -> list[Path]:
    found = []
    for base in (ROOT / "tests" / "data" / "traces" / "pytorch", ROOT / "data" / "traces"):
        if base.is_dir():
            # hidden folders are the collector's work in progress
            found += sorted(
                p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".") and any(p.iterdir())
            )
    return found


@pytest.mark.parametrize(
    "folder", _real_folders() or [None], ids=lambda p: f"{p.parent.name}/{p.name}" if p else "none"
)
def test_real_gloo_traces(folder):
    if folder is None:
        pytest.skip("no real traces yet in tests/data/traces/pytorch/ or data/traces/")
    files = sorted(
        p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "manifest.json"
    )
    trace = (
        dlexplore.load_trace(files)
        if hasattr(dlexplore, "load_trace")
        else dlexplore.traces.load_trace(files)
    )
    table = trace.collectives()
    assert not table.empty
    allreduce = table[table["collective"] == "allreduce"]
    assert len(allreduce) >= 1 and (allreduce["ranks"] == trace.world_size).all()
    assert (table["time"] > 0).all() and (table["count"] >= 1).all()
    assert (table["time_min"] <= table["time"] + 1e-12).all()
    assert (table["time"] <= table["time_max"] + 1e-12).all()
    # ranks of one host share a clock: the estimated offsets are small against a step
    offsets = np.array(list(table.attrs["offsets"].values()))
    assert np.all(np.abs(offsets) < 0.05), table.attrs["offsets"]
    known = allreduce[allreduce["bytes"].notna()]
    factor = 2 * (trace.world_size - 1) / trace.world_size
    assert known["busbw"].to_numpy() == pytest.approx(known["algbw"].to_numpy() * factor)


def test_horovod_fusion_ids_and_the_coordinator_view():
    """Horovod's timeline (rank 0's view of 4 ranks): tensors fused in one response repeat the same
    transfer on their own rows; ``fusion`` makes them one operation of ``fusion_bytes``; ``op`` is
    the kind (a string), not an id, so it is not used for matching."""
    events = make_events(
        dict(
            rank=[0, 0, 0],
            stream=["grad_a", "grad_b", "grad_a"],
            name=["NCCL_ALLREDUCE"] * 3,
            category=["communication"] * 3,
            start=[1.0, 1.0, 3.0],
            duration=[0.5, 0.5, 0.25],
            bytes=[1e6, 3e6, 1e6],
            collective=["allreduce"] * 3,
            op=["allreduce"] * 3,
            fusion=[0, 0, 1],
            fusion_bytes=[4e6, 4e6, 1e6],
        )
    )
    table = collective_table(Trace(events, "horovod", ("timeline.json",), world_size=4))
    assert table["bytes"].tolist() == [1e6, 4e6]
    assert table["count"].tolist() == [1, 1]
    assert table["time"].tolist() == pytest.approx([0.25, 0.5])
    assert table["ranks"].tolist() == [4, 4]  # the world, not the one rank in the file
    # 4e6 B in 0.5 s = 0.008 GB/s; x 2(4-1)/4 = 1.5
    assert table["busbw"][1] == pytest.approx(0.012)
    # one rank's view: no spread across ranks to measure
    assert table["skew"].isna().all() and table["time_last_in"].isna().all()


def test_horovod_timeline_through_its_reader():
    """A Horovod timeline (tests/data/traces/horovod/, see its README) read by the Horovod reader:
    only the coordinator's view, so every operation spans the world and has no measurable skew."""
    path = ROOT / "tests" / "data" / "traces" / "horovod" / "timeline.json"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    trace = dlexplore.traces.load_trace(path, format="horovod")
    table = trace.collectives()
    assert set(table["collective"]) >= {"allreduce"}
    assert (table["ranks"] == trace.world_size).all() and trace.world_size >= 2
    assert (table["time"] > 0).all() and table["skew"].isna().all()
    ds = trace.breakdown()
    assert bool((ds.time_comm > 0).all()) and bool((ds.time_comm_exposed <= ds.time_comm).all())


def test_process_groups_are_matched_apart():
    """Two process groups issue same-size allreduces; rank 1 runs group b's before group a's.
    Rank 0: a [0, 1], b [2, 4]; rank 1: b [3, 4], a [5, 6] (one clock, align=False). Matched by
    ``process_group``: a -> durations 1, 1, time 1, skew 5; b -> durations 2, 1, time 1.5, skew 1.
    Matched by order alone, a and b would mix (skews 3 and 3)."""
    events = make_events(
        dict(
            rank=[0, 0, 1, 1],
            stream=["cpu:0:2", "cpu:0:3", "cpu:1:3", "cpu:1:2"],
            name=["gloo:all_reduce"] * 4,
            category=["communication"] * 4,
            start=[0.0, 2.0, 3.0, 5.0],
            duration=[1.0, 2.0, 1.0, 1.0],
            bytes=[8.0] * 4,
            collective=["allreduce"] * 4,
            process_group=["a", "b", "b", "a"],
        )
    )
    ops = collective_ops(events, align=False)
    assert ops["time"].tolist() == pytest.approx([1.0, 1.5])
    assert ops["skew"].tolist() == pytest.approx([5.0, 1.0])
    mixed = collective_ops(events.drop(columns="process_group"), align=False)
    assert mixed["skew"].tolist() == pytest.approx([3.0, 3.0])
