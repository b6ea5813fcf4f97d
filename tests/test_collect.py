"""dlexplore.traces.collect: real 2-rank gloo training on the CPU, profiled, and the bundled samples.

The sample traces in ``data/traces/`` were written by the collector itself (see each folder's
README.txt) with torch 2.13.0+cpu: PyTorch's own profiler wrote every event checked here. The
expected numbers are worked out by hand from the models' layer shapes, not read from the manifests:

- mlp: Linear(256, 512) + Linear(512, 512) + Linear(512, 10) =
  (256*512 + 512) + (512*512 + 512) + (512*10 + 10) = 131,584 + 262,656 + 5,130 = 399,370 parameters;
  DDP puts them in two gradient buckets, 267,786 + 131,584 elements.
- cnn: Conv2d(3, 16, 3) + Conv2d(16, 32, 3) + Linear(32*8*8, 10) =
  (3*16*9 + 16) + (16*32*9 + 32) + (2048*10 + 10) = 448 + 4,640 + 20,490 = 25,578 parameters.

Every step DDP allreduces every gradient exactly once, so the elements of the allreduces that start
inside one ``ProfilerStep#N`` add up to the parameter count, on every rank.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

from dlexplore._data import data_dir
from dlexplore.errors import DlexploreError, UnknownNameError
from dlexplore.traces.collect import MANIFEST_NAME, MODELS, collect

PARAMETERS = {
    "mlp": 131_584 + 262_656 + 5_130,
    "cnn": 448 + 4_640 + 20_490,
    # V h + s h + 2h + L (12 h^2 + 13 h) with V = 1024, h = 128, s = 64, L = 2 (tied output)
    "transformer": 1024 * 128 + 64 * 128 + 2 * 128 + 2 * (12 * 128**2 + 13 * 128),
}
#: The transformer job at 1 and 2 ranks (batch 8 per rank, 4 profiled steps): folder -> ranks.
TRANSFORMER_SAMPLES = {"gloo-transformer-1rank": 1, "gloo-transformer-2rank": 2}
SAMPLES = {  # folder -> (model, profiled steps)
    "gloo-mlp-2rank": ("mlp", [2, 3, 4, 5]),
    "gloo-cnn-2rank": ("cnn", [2, 3, 4]),
}
MAX_SAMPLE_FILE_BYTES = 300_000

# torch comes with the test extra (pinned, CPU build): without it these tests fail rather than skip,
# so that a broken environment cannot pass for a working collector.


def test_hand_counts_match_the_layer_shapes():
    assert PARAMETERS == {"mlp": 399_370, "cnn": 25_578, "transformer": 536_064}
    assert 267_786 + 131_584 == PARAMETERS["mlp"]


def test_the_transformer_has_the_catalogs_parameter_count():
    from dlexplore import catalog
    from dlexplore.traces.collect import build_model

    net = build_model("transformer")
    assert sum(p.numel() for p in net.parameters()) == PARAMETERS["transformer"]
    spec = "transformer:layers=2,hidden=128,heads=4,seq=64,vocab=1024"
    assert catalog.workload(spec).params == PARAMETERS["transformer"]


# --- checks shared by the samples and a fresh run --------------------------------------------------


def check_manifest(folder: Path, model: str, world_size: int, profiled_steps: list[int]) -> dict:
    """The manifest says what the folder holds: every file with its true size and SHA-256."""
    manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert manifest["manifest_version"] == 1
    listed = {entry["path"] for entry in manifest["files"]}
    present = {p.name for p in folder.iterdir()} - {MANIFEST_NAME, "README.txt"}
    assert listed == present == {f"rank{r}.json.gz" for r in range(world_size)}
    for entry in manifest["files"]:
        data = (folder / entry["path"]).read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["path"] == f"rank{entry['rank']}.json.gz"
    assert manifest["distributed"]["backend"] == "gloo"
    assert manifest["distributed"]["world_size"] == world_size
    assert manifest["model"]["name"] == model
    assert manifest["model"]["parameters"] == PARAMETERS[model]
    assert manifest["model"]["gradient_bytes"] == 4 * PARAMETERS[model]  # float32
    assert manifest["profiler"]["profiled_steps"] == profiled_steps
    assert manifest["global_batch_size"] == world_size * manifest["batch_size_per_rank"]
    created = dt.datetime.fromisoformat(manifest["created_utc"])
    assert created.utcoffset() == dt.timedelta(0)
    assert set(manifest["versions"]) == {"dlexplore", "torch", "python"}
    assert manifest["host"]["cpu_count"] >= 1
    assert manifest["wall_time_s"] > 0
    trained = manifest["steps_trained"]
    assert trained == profiled_steps[-1] + 1
    assert [r["rank"] for r in manifest["ranks"]] == list(range(world_size))
    # Random labels: the loss stays near ln(classes), 2.303 for 10 classes, 6.93 for 1024 tokens.
    low, high = (1.5, 3.5) if model in ("mlp", "cnn") else (6.43, 7.43)
    for rank in manifest["ranks"]:
        assert len(rank["step_times_s"]) == len(rank["losses"]) == trained
        assert all(t > 0 for t in rank["step_times_s"])
        assert all(low < loss < high for loss in rank["losses"])
    return manifest


def load_chrome_trace(path: Path) -> dict:
    data = path.read_bytes()
    assert data[:2] == b"\x1f\x8b", f"{path} is not gzip"
    return json.loads(gzip.decompress(data))


def check_trace(path: Path, rank: int, world_size: int, parameters: int, profiled_steps: list[int]) -> None:
    """One rank's Chrome trace, as the profiler wrote it, holds the run's ranks, steps and allreduces."""
    trace = load_chrome_trace(path)
    info = trace["distributedInfo"]
    assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, world_size)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = {int(e["name"].split("#")[1]): e for e in events if e["name"].startswith("ProfilerStep#")}
    assert sorted(steps) == profiled_steps
    gloo = [e for e in events if e["name"] == "gloo:all_reduce"]
    c10d = [e for e in events if e["name"] == "c10d::allreduce_"]
    loads = [e for e in events if e["name"].startswith("enumerate(DataLoader)#")]
    assert gloo and c10d and all(e["cat"] == "user_annotation" for e in gloo)
    assert all(e["cat"] == "cpu_op" for e in c10d)
    for number, step in steps.items():
        begin, end = step["ts"], step["ts"] + step["dur"]  # microseconds

        def inside(found: list[dict], begin: float = begin, end: float = end) -> list[dict]:
            return [e for e in found if begin <= e["ts"] < end]

        # gloo:all_reduce runs on gloo's own threads with one flat tensor (a bucket); c10d::allreduce_
        # on the main thread with a list of one tensor. Their end may pass the step's end (the main
        # thread goes on once the work completes), so assign them by start.
        assert sum(e["args"]["Input Dims"][0][0] for e in inside(gloo)) == parameters, number
        assert sum(e["args"]["Input Dims"][0][0][0] for e in inside(c10d)) == parameters, number
        assert len(inside(loads)) == 1, number
    assert len(gloo) == len(c10d)


# --- the bundled samples -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_manifest_matches_its_files(name):
    folder = data_dir() / "traces" / name
    model, profiled = SAMPLES[name]
    manifest = check_manifest(folder, model, 2, profiled)
    assert manifest["arguments"]["steps"] == len(profiled)
    readme = (folder / "README.txt").read_text(encoding="utf-8")
    assert f'collect("data/traces/{name}", nproc=2, steps={len(profiled)}, model="{model}")' in readme
    for entry in manifest["files"]:
        assert entry["bytes"] < MAX_SAMPLE_FILE_BYTES


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("rank", [0, 1])
def test_sample_trace_is_a_real_gloo_profile(name, rank):
    model, profiled = SAMPLES[name]
    check_trace(data_dir() / "traces" / name / f"rank{rank}.json.gz", rank, 2, PARAMETERS[model], profiled)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_step_times_agree_with_the_profiler(name):
    # Two clocks: the worker's time.perf_counter around each step (manifest) and the profiler's
    # ProfilerStep#N ranges; they differ by the profiler's own bookkeeping in prof.step(), ~20 us.
    folder = data_dir() / "traces" / name
    manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    for rank in manifest["ranks"]:
        trace = load_chrome_trace(folder / f"rank{rank['rank']}.json.gz")
        profiled = {
            int(e["name"].split("#")[1]): e["dur"] * 1e-6
            for e in trace["traceEvents"]
            if e.get("name", "").startswith("ProfilerStep#")
        }
        for step, seconds in profiled.items():
            assert rank["step_times_s"][step] == pytest.approx(seconds, abs=1e-4)


def test_mlp_sample_has_two_buckets_per_step():
    trace = load_chrome_trace(data_dir() / "traces" / "gloo-mlp-2rank" / "rank0.json.gz")
    sizes = sorted(
        e["args"]["Input Dims"][0][0] for e in trace["traceEvents"] if e.get("name") == "gloo:all_reduce"
    )
    assert sizes == [131_584] * 4 + [267_786] * 4


def check_loaded(trace, model: str, profiled: list[int], world_size: int = 2) -> None:
    assert trace.format == "pytorch"
    assert trace.world_size == world_size
    events = trace.events
    assert sorted(events["rank"].unique()) == list(range(world_size))
    assert sorted(events["step"].dropna().unique()) == profiled
    comm = events[(events["category"] == "communication") & (events["name"] == "gloo:all_reduce")]
    assert set(comm["collective"]) == {"allreduce"}
    sums = comm.groupby(["rank", "step"], observed=True)["bytes"].sum()
    assert len(sums) == world_size * len(profiled)
    assert (sums == 4 * PARAMETERS[model]).all()  # every float32 gradient once per step and rank
    loads = events[events["category"] == "data"]
    assert len(loads) == world_size * len(profiled)  # one DataLoader __next__ per step and rank


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_load_trace_reads_the_sample_files(name):
    from dlexplore.traces import load_trace

    model, profiled = SAMPLES[name]
    check_loaded(load_trace(str(data_dir() / "traces" / name / "rank*.json.gz")), model, profiled)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_load_trace_reads_the_sample_folder(name):
    from dlexplore.traces import load_trace

    model, profiled = SAMPLES[name]
    check_loaded(load_trace(data_dir() / "traces" / name), model, profiled)


@pytest.mark.parametrize("name", sorted(TRANSFORMER_SAMPLES))
def test_transformer_samples_are_one_job_at_1_and_2_ranks(name):
    folder = data_dir() / "traces" / name
    ranks = TRANSFORMER_SAMPLES[name]
    profiled = [2, 3, 4, 5]
    manifest = check_manifest(folder, "transformer", ranks, profiled)
    assert manifest["batch_size_per_rank"] == 8 and manifest["arguments"]["seed"] == 0
    assert manifest["model"]["workload"] == "transformer:layers=2,hidden=128,heads=4,seq=64,vocab=1024"
    readme = (folder / "README.txt").read_text(encoding="utf-8")
    call = f'collect("data/traces/{name}", nproc={ranks}, steps=4, model="transformer", batch_size=8)'
    assert call in readme
    for rank in range(ranks):
        path = folder / f"rank{rank}.json.gz"
        assert path.stat().st_size < MAX_SAMPLE_FILE_BYTES
        check_trace(path, rank, ranks, PARAMETERS["transformer"], profiled)
    from dlexplore.traces import load_trace

    check_loaded(load_trace(folder), "transformer", profiled, world_size=ranks)


# --- a real run ------------------------------------------------------------------------------------


def _pids(messages: list[str]) -> list[int]:
    for message in messages:
        found = re.search(r"pids ([\d, ]+)\)", message)
        if found:
            return [int(p) for p in found.group(1).split(", ")]
    raise AssertionError(f"no worker pids in {messages}")


def _assert_gone(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_collect_runs_refuses_and_cleans_up(tmp_path):
    out = tmp_path / "run"
    messages: list[str] = []
    manifest_path = collect(out, nproc=2, steps=2, model="mlp", batch_size=8, progress=messages.append)
    assert manifest_path == out / MANIFEST_NAME
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary folder left
    manifest = check_manifest(out, "mlp", 2, [2, 3])
    assert manifest["batch_size_per_rank"] == 8
    for rank in (0, 1):
        check_trace(out / f"rank{rank}.json.gz", rank, 2, PARAMETERS["mlp"], [2, 3])
    assert any(m.startswith("rank 0: ") for m in messages)
    assert any(m.startswith("rank 1: ") for m in messages)
    _assert_gone(_pids(messages))
    from dlexplore.traces import load_trace

    check_loaded(load_trace(str(out / "rank*.json.gz")), "mlp", [2, 3])
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    with pytest.raises(DlexploreError, match="exists and is not empty"):
        collect(out, nproc=2, steps=2, progress=None)

    # A rank that fails: its own error comes back, every worker is stopped, the old run stays.
    messages.clear()
    with pytest.raises(DlexploreError, match=r"rank 1 of 2 failed .*forced failure of rank 1"):
        collect(out, nproc=2, steps=2, overwrite=True, _fail_rank=1, progress=messages.append)
    _assert_gone(_pids(messages))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

    # The time limit stops everything and leaves nothing.
    messages.clear()
    with pytest.raises(DlexploreError, match="time limit of 0.5 s"):
        collect(tmp_path / "slow", nproc=2, steps=2, timeout=0.5, progress=messages.append)
    _assert_gone(_pids(messages))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

    # overwrite=True replaces the old run once the new one has succeeded.
    collect(out, nproc=2, steps=1, warmup=0, model="cnn", batch_size=4, overwrite=True, progress=None)
    check_manifest(out, "cnn", 2, [1])
    check_trace(out / "rank1.json.gz", 1, 2, PARAMETERS["cnn"], [1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# --- errors before anything starts ---------------------------------------------------------------


def test_unknown_model_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(UnknownNameError, match=r"unknown model 'mpl'; did you mean 'mlp'"):
        collect(tmp_path / "run", model="mpl", progress=None)
    assert list(tmp_path.iterdir()) == []
    assert sorted(MODELS) == ["cnn", "mlp", "transformer"]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(nproc=0), "nproc must be an integer >= 1"),
        (dict(steps=0), "steps must be an integer >= 1"),
        (dict(steps=2.5), "steps must be an integer >= 1"),
        (dict(batch_size=0), "batch_size must be an integer >= 1"),
        (dict(warmup=-1), "warmup must be an integer >= 0"),
        (dict(port=70000), "port must be an integer in 1..65535"),
        (dict(timeout=0), "timeout must be > 0 seconds"),
        (dict(_fail_rank=2), r"_fail_rank must be a rank in 0..1"),
    ],
)
def test_bad_arguments(tmp_path, options, message):
    with pytest.raises(DlexploreError, match=message):
        collect(tmp_path / "run", progress=None, **options)
    assert list(tmp_path.iterdir()) == []


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "run"
    target.write_text("not a folder")
    with pytest.raises(DlexploreError, match="exists and is not a folder"):
        collect(target, progress=None)
    assert target.read_text() == "not a folder"


def test_missing_torch_says_what_to_install(tmp_path, monkeypatch):
    # A None entry in sys.modules is how Python marks a module as not importable.
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(DlexploreError, match=r"pip install 'dlexplore\[torch\]'"):
        collect(tmp_path / "run", progress=None)
    assert list(tmp_path.iterdir()) == []
