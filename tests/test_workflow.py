"""Coupled simulation + training (producer/consumer) and task-event files, against hand-worked cases.

Toy case A: 1 producer at 4 samples/s, training at 1 sample/s, buffer 2, 10 s. By hand: deposits
D_k = 0.25, 0.5, 0.75, then D_k = S_{k-2} = k - 1.75; training starts S_k = k + 0.25; the producer is
blocked 0.25 s before sample 3, 0.75 s before each of samples 4..11 and 0.5 s (clipped at 10 s)
before sample 12: 6.75 s; training waits only for the first sample (0.25 s); the buffer stays full (2).
Toy case B: 2 producers at 1 sample/s, training at 4 samples/s, buffer 4, 10 s: two samples arrive at
each whole second, training works 0.5 s of each second after the first: it waits 1 + 9 x 0.5 = 5.5 s;
the buffer holds 1 sample for 0.25 s per second (mean 0.25).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.model.workflow import coupled, coupled_tasks, steady_state
from dlexplore.plots.tasks import task_timeline_columns, task_timeline_figure
from dlexplore.traces.tasks import read_task_events


def test_steady_state_formulas():
    assert steady_state(4, 20.0, 100.0) == pytest.approx(
        {"throughput": 80.0, "consumer_wait_fraction": 0.2, "producer_wait_fraction": 0.0}
    )
    assert steady_state(1, 4.0, 1.0) == pytest.approx(
        {"throughput": 1.0, "consumer_wait_fraction": 0.0, "producer_wait_fraction": 0.75}
    )


def test_training_bound_case_by_hand():
    ds = coupled(1, 4.0, 1.0, 2, 10.0)
    assert ds.attrs["source"].startswith("predicted: ") and ds.attrs["bottleneck"] == "training (consumer)"
    assert float(ds.throughput_simulated) == pytest.approx(1.0)
    assert float(ds.consumer_wait) == pytest.approx(0.25)
    assert float(ds.producer_wait) == pytest.approx(6.75)
    assert float(ds.mean_occupancy) == pytest.approx(2.0)
    assert int(ds.occupancy.max()) == 2
    assert ds.occupancy.attrs["units"] == "samples" and ds.time.attrs["units"] == "s"


def test_simulation_bound_case_by_hand():
    ds = coupled(2, 1.0, 4.0, 4, 10.0)
    assert float(ds.throughput) == 2.0 and float(ds.consumer_wait_fraction) == 0.5
    assert float(ds.throughput_simulated) == pytest.approx(2.0)
    assert float(ds.consumer_wait) == pytest.approx(5.5)
    assert float(ds.producer_wait) == 0.0
    assert float(ds.mean_occupancy) == pytest.approx(0.25)
    # produced at t = 10 s: 2 per second from 1 s to 10 s
    assert int(ds.produced[-1]) == 20


def test_coupled_tasks_and_figure():
    frame = coupled_tasks(1, 4.0, 1.0, 2, 3.0)
    blocked = frame[frame.kind == "blocked"]
    np.testing.assert_allclose(blocked.duration, [0.25, 0.75, 0.5])
    assert set(frame.worker) == {"sim 0", "train"}
    cols = task_timeline_columns(frame)
    assert cols["left"].min() == 0.0 and len(cols["color"]) == len(frame)
    fig = task_timeline_figure(frame)
    assert list(fig.y_range.factors) == ["train", "sim 0"]


def test_bad_arguments():
    with pytest.raises(DlexploreError, match="buffer"):
        coupled(1, 1.0, 1.0, 0, 10.0)
    with pytest.raises(DlexploreError, match="producers"):
        coupled(1.5, 1.0, 1.0, 1, 10.0)


def test_read_csv_and_json(tmp_path):
    csv_file = tmp_path / "tasks.csv"
    csv_file.write_text(
        "task,worker,start,end,kind,note\nsim-1,node0,0,1.5,simulate,a\ntrain-1,gpu0,1.5,2.0,train,b\n"
    )
    frame = read_task_events(csv_file)
    assert list(frame.columns[:6]) == ["task", "worker", "kind", "start", "end", "duration"]
    np.testing.assert_allclose(frame.duration, [1.5, 0.5])
    assert frame.note.tolist() == ["a", "b"]
    json_file = tmp_path / "tasks.json"
    json_file.write_text(
        json.dumps({"events": [{"task": "t", "worker": "w", "start": 1, "end": 2, "kind": "k"}]})
    )
    assert read_task_events(json_file).duration.tolist() == [1.0]


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("task,worker,start,kind\nt,w,0,k\n", r"tasks.csv, line 1: .*lacks column\(s\) end"),
        ("task,worker,start,end,kind\nt,w,0,1,k\nt,w,zero,1,k\n", r"line 3: start is 'zero'"),
        ("task,worker,start,end,kind\nt,w,2,1,k\n", r"line 2: end 1 s is before start 2 s"),
        ("task,worker,start,end,kind\nt,w,0,1,k,extra\n", r"line 2: 6 fields"),
        ("task,worker,start,end,kind\n", "no task events"),
        ("", "line 1: empty file"),
    ],
)
def test_csv_errors(tmp_path, text, pattern):
    path = tmp_path / "tasks.csv"
    path.write_text(text)
    with pytest.raises(InputFileError, match=pattern):
        read_task_events(path)


@pytest.mark.parametrize(
    "text, pattern",
    [
        (
            '[{"task": "t", "worker": "w", "start": 0, "end": 1, "kind": "k"},\n {"task": }]',
            r"tasks.json, line 2: not valid JSON",
        ),
        ('[{"task": "t", "worker": "w", "start": 0, "kind": "k"}]', r"row 0: task 0 lacks key\(s\) end"),
        ('[{"task": "t", "worker": "w", "start": 0, "end": 1, "kind": "k"}, 3]', r"row 1: task 1 is a int"),
        ('{"other": 1}', "expected a JSON list"),
    ],
)
def test_json_errors(tmp_path, text, pattern):
    path = tmp_path / "tasks.json"
    path.write_text(text)
    with pytest.raises(InputFileError, match=pattern):
        read_task_events(path)
