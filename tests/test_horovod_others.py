"""Horovod timelines written by other people's runs (tests/data/traces/horovod-others/README.txt):
what the reader infers (steps, world size) and what a comparison counts, against numbers read off
the files by hand."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from dlexplore.traces import load_trace

DATA = Path(__file__).parent / "data" / "traces" / "horovod-others"


def _load(name: str) -> tuple:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = load_trace(DATA / name)
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
    assert any("no step is inferred" in m and "broadcast" in m for m in messages)
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
