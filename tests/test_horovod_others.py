"""Horovod timelines written by other people's runs (tests/data/traces/horovod-others/README.txt):
what the reader infers (steps, world size) and what a comparison counts, against numbers read off
the files by hand."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlexplore.traces import load_trace

DATA = Path(__file__).parent / "data" / "traces" / "horovod-others"


def _load(name: str | Path) -> tuple:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = load_trace(DATA / name, cache=False)
    return trace, [str(w.message) for w in caught]


def test_a_fused_transfer_counts_once_in_a_comparison():
    # The 32k prefix's MPI_ALLREDUCE B/E pairs, by hand: tensors 14-19 in step 0 (15 and 16 fused,
    # 693888 -> 773546 and -> 773555 µs past 1412530000000), tensors 14-16 in step 1 (15 and 16
    # fused again): 7 transfers, 30704 + 79667 + 458647 + 33778 + 99781 + 26994 + 239462 =
    # 969033 µs over 2 steps (the rows repeat a fused transfer per tensor: 9 rows).
    trace, _ = _load("andrewor14-old-writer-prefix32k.json")
    rows = trace.events[trace.events["name"] == "MPI_ALLREDUCE"]
    assert len(rows) == 9
    diff = trace.diff(trace).set_index("name")
    assert diff.loc["MPI_ALLREDUCE", "count_control"] == 3.5
    assert diff.loc["MPI_ALLREDUCE", "time_control"] == pytest.approx(969033e-6 / 2, abs=1e-9)
    # the 13 MPI_BCAST of the initial broadcast come before step 0: not spread over the steps
    assert "MPI_BCAST" not in diff.index
    assert diff.attrs["outside_steps"]["control"] == 13


def test_steps_start_after_the_initial_broadcast():
    # Step 0 begins with the first negotiation of a reduced tensor; the broadcasts before it are
    # the initial broadcast of the parameters: no step.
    trace, _ = _load("andrewor14-old-writer-prefix32k.json")
    events = trace.events
    allreduce = events[events["name"] == "MPI_ALLREDUCE"]
    assert allreduce["step"].tolist() == [0] * 6 + [1] * 3
    assert events.loc[events["name"] == "MPI_BCAST", "step"].isna().all()
    assert trace.world_size == 12  # ticks "0" .. "11" in closed negotiations


@pytest.mark.parametrize("name", ["andrewor14-old-writer-prefix16k.json", "alcf-cpu-n1.json"])
def test_a_timeline_of_broadcasts_only_has_no_step(name):
    # Every operation is a BROADCAST done once (the 16k prefix ends before any allreduce; the
    # ALCF run broadcasts 25 tensors on one rank and stops): nothing marks a training step.
    trace, messages = _load(name)
    assert trace.events["step"].isna().all()
    assert any("no step is inferred" in m and "broadcast more than once" in m for m in messages)
    assert set(trace.events["op"].astype(str)) <= {"broadcast", ""}


def test_world_size_from_ticks_of_closed_negotiations():
    trace, _ = _load("andrewor14-old-writer-prefix16k.json")
    assert trace.world_size == 12  # ticks "0" .. "11", closed negotiations
    trace, _ = _load("alcf-cpu-n1.json")
    assert trace.world_size == 1  # ticks "0" only


def test_world_size_unknown_when_only_an_open_negotiation_has_ticks():
    # The cycles prefix ends inside the first NEGOTIATE_BROADCAST, which only rank 1 had reached:
    # the job had 12 ranks (the other version of the file); "2" would be a guess stated as a fact.
    trace, messages = _load("andrewor14-cycles-prefix16k.json")
    assert any("world size is unknown" in m and "at least 2" in m for m in messages)
    files = trace.meta["files"]
    assert files[0]["world_size"] is None
    assert files[0]["world_size_at_least"] == 2
    assert np.unique(trace.events["rank"]).tolist() == [0]
    assert trace.world_size == 2  # the ranks seen, as Trace.world_size is where the file is silent


def _timeline(path: Path, ops: list[tuple[int, str, str, int]]) -> Path:
    """A timeline as Horovod writes one (horovod/common/timeline.cc): per operation of a tensor
    (pid, name, "broadcast" or "allreduce", start in µs), its negotiation with two ranks' ready
    ticks, then the operation with its MPI transfer; the operation's E carries dtype and shape."""
    events = [{"name": "process_name", "ph": "M", "pid": p, "args": {"name": n}} for p, n, _, _ in ops]
    for pid, _, kind, t in ops:
        transfer = {"allreduce": "MPI_ALLREDUCE", "broadcast": "MPI_BCAST", "barrier": "MPI_BARRIER"}[kind]
        events += [
            {"name": "NEGOTIATE_" + kind.upper(), "ph": "B", "ts": t, "pid": pid},
            {"name": "0", "ph": "X", "ts": t, "pid": pid, "dur": 0},
            {"name": "1", "ph": "X", "ts": t + 1, "pid": pid, "dur": 0},
            {"ph": "E", "ts": t + 10, "pid": pid},
            {"name": kind.upper(), "ph": "B", "ts": t + 10, "pid": pid},
            {"name": transfer, "ph": "B", "ts": t + 20, "pid": pid},
            {"ph": "E", "ts": t + 40, "pid": pid},
            {"ph": "E", "ts": t + 50, "pid": pid, "args": {"dtype": "float32", "shape": "[10]"}},
        ]
    events.sort(key=lambda e: e.get("ts", -1))
    path.write_text(json.dumps(events))
    return path


_NA = pd.NA
STEP_CASES = {
    # w is broadcast at 0 µs, then reduced with g at 1000 and 2000 µs: two steps, the broadcast
    # before them (w's three operations once made three steps, the first the broadcast)
    "broadcast then reduced": (
        [
            (1, "w", "broadcast", 0),
            (3, "b", "broadcast", 100),
            (1, "w", "allreduce", 1000),
            (2, "g", "allreduce", 1100),
            (1, "w", "allreduce", 2000),
            (2, "g", "allreduce", 2100),
        ],
        [_NA, _NA, 0, 0, 1, 1],
    ),
    # every parameter broadcast twice (a re-broadcast after restoring a checkpoint), then one
    # step of two gradients: one step, at the allreduces
    "second broadcast": (
        [
            (1, "w", "broadcast", 0),
            (3, "b", "broadcast", 100),
            (1, "w", "broadcast", 500),
            (3, "b", "broadcast", 600),
            (2, "g", "allreduce", 1000),
            (4, "g2", "allreduce", 1100),
        ],
        [_NA] * 4 + [0, 0],
    ),
    # no tensor is reduced, one is broadcast three times: three steps
    "broadcast every step": (
        [(1, "w", "broadcast", 0), (1, "w", "broadcast", 1000), (1, "w", "broadcast", 2000)],
        [0, 1, 2],
    ),
    # a barrier twice a step beside one gradient's allreduce: the allreduces mark the two steps
    "barriers": (
        [
            (2, "g", "allreduce", 1000),
            (5, "bar", "barrier", 1500),
            (5, "bar", "barrier", 1700),
            (2, "g", "allreduce", 2000),
            (5, "bar", "barrier", 2500),
            (5, "bar", "barrier", 2700),
        ],
        [0, 0, 0, 1, 1, 1],
    ),
}


@pytest.mark.parametrize("case", list(STEP_CASES))
def test_steps_are_marked_by_reductions(tmp_path, case):
    ops, steps = STEP_CASES[case]
    trace, _ = _load(_timeline(tmp_path / "timeline.json", ops))
    comm = trace.events[trace.events["category"] == "communication"]
    assert comm["step"].tolist() == steps
    assert trace.world_size == 2  # ticks "0" and "1" in every negotiation
