"""Per-rank, per-step breakdowns and stragglers (``dlexplore.traces.breakdown``).

The synthetic event tables are built with ``make_events``, with every expected number worked out by
hand in the comments (times are binary fractions, so the sums are exact in floating point). The
real-trace tests read PyTorch profiler traces that real 2-rank gloo runs wrote
(``tests/data/traces/pytorch/``) and the collector's samples (``data/traces/``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dlexplore
from dlexplore.errors import DlexploreError
from dlexplore.traces import Trace, make_events
from dlexplore.traces.breakdown import BREAKDOWN_VARIABLES, breakdown, stragglers

ROOT = Path(__file__).resolve().parents[1]
PYTORCH_DATA = ROOT / "tests" / "data" / "traces" / "pytorch"
SAMPLE_DATA = ROOT / "data" / "traces"

EXACT = dict(rel=0, abs=1e-12)


def events(rows: list[tuple], **extra) -> pd.DataFrame:
    """Events from (rank, stream, name, category, start, end, step) rows; step None is <NA>."""
    rank, stream, name, category, start, end, step = (list(c) for c in zip(*rows, strict=True))
    columns = dict(
        rank=rank,
        stream=stream,
        name=name,
        category=category,
        start=start,
        duration=[e - s for s, e in zip(start, end, strict=True)],
        step=pd.array(step, dtype="Int64"),
        **extra,
    )
    return make_events(columns)


def cpu_two_ranks() -> Trace:
    """A CPU-only (gloo-like) 2-rank trace; main thread cpu:P:1, gloo worker thread cpu:P:2."""
    rows = [
        # rank 0, step 1: window [0, 10] from ProfilerStep#1
        (0, "cpu:1:1", "ProfilerStep#1", "step", 0.0, 10.0, 1),
        (0, "cpu:1:1", "aten::addmm", "compute", 0.0, 4.0, 1),
        (0, "cpu:1:1", "aten::mm", "compute", 1.0, 3.0, 1),  # nested in addmm: counts once
        (0, "cpu:1:1", "aten::relu", "compute", 5.0, 6.0, 1),
        (0, "cpu:1:2", "gloo:all_reduce", "communication", 3.0, 8.0, 1),  # worker thread
        (0, "cpu:1:1", "enumerate(DataLoader)", "data", 8.5, 9.0, 1),
        (0, "cpu:1:1", "aten::copy_", "memcpy", 9.0, 9.25, 1),
        # rank 0, step 2: window [10, 13], no communication
        (0, "cpu:1:1", "ProfilerStep#2", "step", 10.0, 13.0, 2),
        (0, "cpu:1:1", "aten::addmm", "compute", 10.0, 12.0, 2),
        # rank 0, outside any step: left out
        (0, "cpu:1:1", "aten::empty", "compute", -5.0, -1.0, None),
        # rank 1, step 1 (its own clock, 100 s later): window [100, 109]
        (1, "cpu:2:1", "ProfilerStep#1", "step", 100.0, 109.0, 1),
        (1, "cpu:2:1", "aten::addmm", "compute", 100.0, 106.0, 1),
        (1, "cpu:2:2", "gloo:all_reduce", "communication", 106.0, 108.5, 1),
    ]
    return Trace(
        events(rows, collective=["", "", "", "", "allreduce", "", "", "", "", "", "", "", "allreduce"]),
        "pytorch",
        ("rank0.json", "rank1.json"),
    )


def test_cpu_two_ranks_by_hand():
    ds = cpu_two_ranks().breakdown()
    assert list(ds["rank"].values) == [0, 1] and list(ds.step.values) == [1, 2]
    r0 = ds.sel(rank=0, step=1)
    assert float(r0.step_time) == pytest.approx(10.0, **EXACT)
    # compute: [0, 4] U [1, 3] U [5, 6] = [0, 4] U [5, 6] -> 5 s (the nested mm counts once)
    assert float(r0.time_compute) == pytest.approx(5.0, **EXACT)
    assert float(r0.time_comm) == pytest.approx(5.0, **EXACT)
    # exposed: [3, 8] minus [3, 4] and [5, 6] -> [4, 5] U [6, 8] = 3 s; overlap 1 - 3/5 = 0.4
    assert float(r0.time_comm_exposed) == pytest.approx(3.0, **EXACT)
    assert float(r0.overlap_fraction) == pytest.approx(0.4, **EXACT)
    assert float(r0.time_data) == pytest.approx(0.5, **EXACT)
    assert float(r0.time_memcpy) == pytest.approx(0.25, **EXACT)
    assert float(r0.time_memset) == 0.0
    # busy: [0, 8] U [8.5, 9] U [9, 9.25] = 8.75 s of 10 -> idle 1.25 s
    assert float(r0.time_idle) == pytest.approx(1.25, **EXACT)
    assert int(r0.events) == 7

    r0s2 = ds.sel(rank=0, step=2)
    assert float(r0s2.step_time) == pytest.approx(3.0, **EXACT)
    assert float(r0s2.time_comm) == 0.0 and float(r0s2.time_comm_exposed) == 0.0
    assert np.isnan(float(r0s2.overlap_fraction))  # no communication: no overlap fraction
    assert float(r0s2.time_idle) == pytest.approx(1.0, **EXACT)

    r1 = ds.sel(rank=1, step=1)
    # window [100, 109] = 9 s; compute [100, 106] = 6; comm [106, 108.5] = 2.5, all exposed
    assert float(r1.step_time) == pytest.approx(9.0, **EXACT)
    assert float(r1.time_compute) == pytest.approx(6.0, **EXACT)
    assert float(r1.time_comm_exposed) == pytest.approx(2.5, **EXACT)
    assert float(r1.overlap_fraction) == pytest.approx(0.0, **EXACT)
    assert float(r1.time_idle) == pytest.approx(0.5, **EXACT)

    # rank 1 has no step 2: NaN times, 0 events
    assert np.isnan(float(ds.step_time.sel(rank=1, step=2)))
    assert int(ds.events.sel(rank=1, step=2)) == 0
    assert ds.attrs["events_outside_steps"] == 1


def test_dataset_conventions():
    ds = cpu_two_ranks().breakdown()
    assert ds.attrs["source"] == "measured: pytorch trace rank0.json, rank1.json"
    assert ds.attrs["kind"] == "measured" and ds.attrs["format"] == "pytorch"
    assert set(ds.data_vars) == set(BREAKDOWN_VARIABLES)
    for name, var in ds.data_vars.items():
        assert var.dims == ("rank", "step"), name
        assert var.attrs["units"] and var.attrs["long_name"], name
    # the model's names, so a measured breakdown lays over a prediction
    predicted = dlexplore.predict("resnet50", "P100", "25GbE", gpus=2, batch_size=32)
    for name in ("step_time", "time_compute", "time_comm", "time_comm_exposed"):
        assert name in predicted and predicted[name].attrs["units"] == ds[name].attrs["units"]
    assert ds.step_time.dtype == np.float64 and ds.events.dtype == np.int64


def test_gpu_rank_counts_device_streams_only():
    """On a rank with cuda:* streams, compute/communication/memcpy/memset count on device streams."""
    rows = [
        (0, "cpu:7:7", "ProfilerStep#3", "step", 0.0, 5.0, 3),
        (0, "cpu:7:7", "aten::mm", "cpu", 0.5, 1.0, 3),
        (0, "cpu:7:7", "cudaLaunchKernel", "runtime", 0.6, 0.7, 3),
        (0, "cpu:7:7", "nccl:all_reduce", "communication", 1.5, 1.625, 3),  # host side: not counted
        (0, "cpu:7:7", "enumerate(DataLoader)", "data", 0.0, 0.25, 3),  # data: every stream
        (0, "cuda:0:7", "volta_sgemm_128x64_nn", "compute", 1.0, 3.0, 3),
        (0, "cuda:0:13", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication", 2.0, 6.0, 3),
        (0, "cuda:0:7", "Memcpy DtoD (Device -> Device)", "memcpy", 3.0, 3.5, 3),
        (0, "cuda:0:7", "Memset (Device)", "memset", 3.5, 3.75, 3),
    ]
    ds = breakdown(Trace(events(rows), "pytorch", ("gpu.json",)))
    r = ds.sel(rank=0, step=3)
    # window: ProfilerStep starts at 0, the NCCL kernel ends at 6 -> 6 s
    assert float(r.step_time) == pytest.approx(6.0, **EXACT)
    assert float(r.time_compute) == pytest.approx(2.0, **EXACT)
    assert float(r.time_comm) == pytest.approx(4.0, **EXACT)  # [2, 6]; the annotation is out
    # exposed: [2, 6] minus [1, 3] = [3, 6] = 3 s; overlap 1 - 3/4 = 0.25
    assert float(r.time_comm_exposed) == pytest.approx(3.0, **EXACT)
    assert float(r.overlap_fraction) == pytest.approx(0.25, **EXACT)
    assert float(r.time_memcpy) == pytest.approx(0.5, **EXACT)
    assert float(r.time_memset) == pytest.approx(0.25, **EXACT)
    assert float(r.time_data) == pytest.approx(0.25, **EXACT)
    # busy: [0, 0.25] U [1, 6] = 5.25 of 6 -> idle 0.75
    assert float(r.time_idle) == pytest.approx(0.75, **EXACT)


def four_ranks_one_slow(steps: int = 3) -> Trace:
    """4 ranks in lockstep; rank 2 computes 1.5 s a step, the others 1 s, and all wait in the allreduce.

    Step s starts at T = 1.6 s on every rank, back to back; compute [T, T + c]; the allreduce runs
    from the end of compute to T + 1.6 (the slow rank arrives at T + 1.5, then 0.1 s of transfer);
    step windows are [T, T + 1.6] everywhere. Per step: fast ranks expose 0.6 s of communication,
    the slow one 0.1 s, so ``time_work`` = 1.6 - exposed is 1.0 on fast ranks and 1.5 on the slow one.
    """
    rows = []
    for s in range(steps):
        t = 1.6 * s
        for rank in range(4):
            c = 1.5 if rank == 2 else 1.0
            rows += [
                (rank, f"cpu:{rank}:1", f"ProfilerStep#{s}", "step", t, t + 1.6, s),
                (rank, f"cpu:{rank}:1", "aten::addmm", "compute", t, t + c, s),
                (rank, f"cpu:{rank}:2", "gloo:all_reduce", "communication", t + c, t + 1.6, s),
            ]
    return Trace(events(rows), "pytorch", tuple(f"rank{r}.json" for r in range(4)))


def test_stragglers_flags_the_slow_rank():
    trace = four_ranks_one_slow()
    table = trace.stragglers()
    assert list(table["rank"]) == [0, 1, 2, 3]
    assert list(table["straggler"]) == [False, False, True, False]
    assert table["time_work"].to_numpy() == pytest.approx([1.0, 1.0, 1.5, 1.0])
    assert table["step_time"].to_numpy() == pytest.approx([1.6] * 4)
    # reference: median of the other ranks' means; rank 2 -> median(1, 1, 1) = 1, ratio 1.5;
    # rank 0 -> median(1, 1.5, 1) = 1, ratio 1
    assert table["reference"].to_numpy() == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert table["ratio"].to_numpy() == pytest.approx([1.0, 1.0, 1.5, 1.0])
    # modified z-score: median 1, MAD 0 -> mean absolute deviation 0.5/4 = 0.125;
    # rank 2: 0.5 / (1.253314 * 0.125) = 3.19154
    assert table["zscore"].to_numpy() == pytest.approx([0.0, 0.0, 0.5 / (1.253314 * 0.125), 0.0])
    assert table["steps"].tolist() == [3, 3, 3, 3]
    assert "median of the other ranks" in table.attrs["rule"]
    # step times are equal in lockstep training: by step_time nobody stands out
    assert table.attrs["metric"] == "time_work"
    assert not trace.stragglers(metric="step_time")["straggler"].any()
    # compute time shows it too; a threshold above 50 % lets it pass
    assert list(trace.stragglers(metric="time_compute")["straggler"]) == [False, False, True, False]
    assert not trace.stragglers(threshold=0.6)["straggler"].any()


def test_stragglers_two_ranks_and_from_a_breakdown():
    ds = four_ranks_one_slow().breakdown().sel(rank=[1, 2])
    table = stragglers(ds)
    # two ranks: each is compared with the other; 1.5 / 1.0 = 1.5 flagged, 1.0 / 1.5 not
    assert table["ratio"].to_numpy() == pytest.approx([1.0 / 1.5, 1.5])
    assert list(table["straggler"]) == [False, True]
    # MAD of two values is their half-difference: z = 0.6745 * (+-0.25) / 0.25
    assert table["zscore"].to_numpy() == pytest.approx([-0.6745, 0.6745])
    one = stragglers(ds.sel(rank=[1]))
    assert np.isnan(one["reference"][0]) and not one["straggler"][0]
    with pytest.raises(DlexploreError, match="unknown straggler metric"):
        stragglers(ds, metric="time_nope")
    with pytest.raises(DlexploreError, match="threshold"):
        stragglers(ds, threshold=-1)


def test_steps_selection_and_no_step_trace():
    trace = four_ranks_one_slow(steps=4)
    ds = trace.breakdown(steps=[1, 3])
    assert list(ds.step.values) == [1, 3]
    assert float(ds.step_time.sel(rank=0, step=3)) == pytest.approx(1.6)
    assert stragglers(trace, steps=[2])["steps"].tolist() == [1, 1, 1, 1]

    # no step marked anywhere: the whole trace on each rank is one step, numbered 0
    rows = [
        (0, "cpu:1:1", "aten::mm", "compute", 1.0, 2.0, None),
        (0, "cpu:1:2", "gloo:all_reduce", "communication", 1.5, 3.0, None),
    ]
    ds = breakdown(events(rows))
    assert list(ds.step.values) == [0]
    assert float(ds.step_time.sel(rank=0, step=0)) == pytest.approx(2.0)
    # exposed: [1.5, 3] minus [1, 2] = 1 s of 1.5 -> overlap 1/3
    assert float(ds.overlap_fraction.sel(rank=0, step=0)) == pytest.approx(1 / 3)
    assert "no steps" in ds.attrs["steps_note"]


def test_empty_and_no_communication():
    empty = breakdown(
        Trace(
            make_events({c: [] for c in ("rank", "stream", "name", "category", "start", "duration")}),
            "pytorch",
        )
    )
    assert empty.sizes == {"rank": 0, "step": 0} and set(empty.data_vars) == set(BREAKDOWN_VARIABLES)
    table = stragglers(empty)
    assert table.empty and "straggler" in table.columns

    rows = [
        (0, "cpu:1:1", "ProfilerStep#0", "step", 0.0, 1.0, 0),
        (0, "cpu:1:1", "aten::mm", "compute", 0.25, 0.75, 0),
    ]
    ds = breakdown(events(rows))
    assert float(ds.time_comm[0, 0]) == 0.0 and np.isnan(float(ds.overlap_fraction[0, 0]))
    assert float(ds.time_idle[0, 0]) == pytest.approx(0.5)
    with pytest.raises(DlexploreError, match="expected a dlexplore Trace"):
        breakdown([1, 2, 3])


def _union_within(intervals, lo, hi):
    """Length of the union of ``intervals`` clipped to [lo, hi], by a plain merge."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0.0 if cur_e is None else cur_e - cur_s)


@pytest.mark.parametrize("markers", [False, True], ids=["steps-from-labels", "steps-from-markers"])
def test_union_matches_a_slow_reference_on_random_intervals(markers):
    """The vectorised sweep against a plain per-window merge, on random nested and disjoint intervals
    whose step labels overlap in time (as GPU work of one step overlaps the next on the host)."""
    rng = np.random.default_rng(4)
    n = 3000
    start = np.round(rng.uniform(0, 50, n), 3)
    end = start + np.round(rng.exponential(1.0, n), 3)
    rank = rng.integers(0, 3, n)
    step = rng.integers(0, 4, n)
    category = rng.choice(["compute", "communication", "memcpy", "data", "cpu"], n).astype(object)
    if markers:  # one marker per (rank, step), at a random place, nested or overlapping others
        mr, ms = np.repeat(np.arange(3), 4), np.tile(np.arange(4), 3)
        m_start = np.round(rng.uniform(0, 40, 12), 3)
        m_end = m_start + np.round(rng.uniform(0, 20, 12), 3)
        rank, step = np.append(rank, mr), np.append(step, ms)
        start, end = np.append(start, m_start), np.append(end, m_end)
        category = np.append(category, ["step"] * 12)
    frame = make_events(
        dict(
            rank=rank,
            stream=[f"cpu:{r}:1" for r in rank],
            name=["e"] * len(rank),
            category=category,
            start=start,
            duration=end - start,
            step=pd.array(step, dtype="Int64"),
        )
    )
    ds = breakdown(frame)

    for r in range(3):
        mine = rank == r
        # the windows by hand: each step begins at its marker (else its first event), ends where the
        # next begins; the last ends at its last event or marker end
        begins = {}
        for s in range(4):
            sel = mine & (step == s) & ((category == "step") if markers else True)
            begins[s] = start[sel].min()
        order = sorted(begins, key=lambda s: (begins[s], s))
        ends = {s: begins[order[i + 1]] for i, s in enumerate(order[:-1])}
        ends[order[-1]] = end[mine & (step == order[-1])].max()
        for s in range(4):
            lo, hi = begins[s], ends[s]

            def pick(*cats, mine=mine):
                return [
                    (a, b)
                    for a, b, c in zip(start[mine], end[mine], category[mine], strict=True)
                    if c in cats
                ]

            compute = _union_within(pick("compute"), lo, hi)
            comm = _union_within(pick("communication"), lo, hi)
            both = _union_within(pick("compute", "communication"), lo, hi)
            busy = _union_within(pick("compute", "communication", "memcpy", "data"), lo, hi)
            cell = ds.sel(rank=r, step=s)
            assert float(cell.step_time) == pytest.approx(hi - lo, abs=1e-9)
            assert float(cell.time_compute) == pytest.approx(compute, abs=1e-9)
            assert float(cell.time_comm) == pytest.approx(comm, abs=1e-9)
            assert float(cell.time_comm_exposed) == pytest.approx(both - compute, abs=1e-9)
            assert float(cell.time_idle) == pytest.approx(hi - lo - busy, abs=1e-9)
            assert int(cell.events) == (mine & (step == s)).sum()
        # the windows tile the rank's timeline: their sum is its span from the first step on
        assert float(ds.step_time.sel(rank=r).sum()) == pytest.approx(ends[order[-1]] - begins[order[0]])


def _real_trace(folder: Path) -> Trace:
    files = sorted(
        p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")) and p.name != "manifest.json"
    )
    return dlexplore.traces.load_trace(files)


def _real_folders() -> list[Path]:
    found = []
    for base in (PYTORCH_DATA, SAMPLE_DATA):
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
    trace = _real_trace(folder)
    ds = trace.breakdown()
    # data parallel on two or more ranks, unless the collector's manifest says the run had one
    manifest = folder / "manifest.json"
    ranks = json.loads(manifest.read_text())["distributed"]["world_size"] if manifest.is_file() else None
    assert isinstance(ds, xr.Dataset) and ds.sizes["rank"] == trace.world_size
    assert trace.world_size >= 2 or ranks == trace.world_size == 1
    assert ds.sizes["step"] >= 1
    busy = ds.step_time - ds.time_idle
    # every part fits in the step, and the parts' relations hold on real data
    for name in ("time_compute", "time_comm", "time_data", "time_memcpy"):
        assert bool((ds[name] <= busy + 1e-9).all()), name
    assert bool((ds.time_comm_exposed <= ds.time_comm + 1e-12).all())
    hidden = ds.overlap_fraction
    assert bool(((hidden >= 0) & (hidden <= 1) | hidden.isnull()).all())
    assert bool((ds.step_time > 0).all()) and bool((ds.time_compute > 0).all())
    # data parallel: every rank communicates in every step
    assert bool((ds.time_comm > 0).all())
    table = trace.stragglers()
    assert len(table) == trace.world_size
