"""summarize(): the breakdown of per-rank traces one file at a time on Dask equals the in-memory one.

Inputs are the real 2-rank gloo traces of data/traces/ (written by torch 2.13.0's profiler through
dlexplore's collector, see their README.txt) and rank sets replicated from them by
:func:`dlexplore.traces.scale.replicate_traces`, which edits only ``distributedInfo`` and the
``ts``/``dur`` numbers of the profiler's own text. Needs dask and distributed (the ``scale`` extra).
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from _cli import run_in_process

from dlexplore.errors import DlexploreError
from dlexplore.traces import load_trace
from dlexplore.traces.scale import load_events_lazily, replicate_traces, summarize

DATA = Path(__file__).resolve().parent.parent / "data" / "traces"
SAMPLES = ["gloo-cnn-2rank", "gloo-mlp-2rank"]
SOURCES = [DATA / "gloo-cnn-2rank" / "rank0.json.gz", DATA / "gloo-cnn-2rank" / "rank1.json.gz"]


@pytest.fixture(scope="module")
def sixteen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sixteen")
    replicate_traces(SOURCES, folder, 16, jitter=0.02, seed=1)
    return folder


@pytest.mark.parametrize("sample", SAMPLES)
def test_samples_equal_in_memory_breakdown(sample: str) -> None:
    expected = load_trace(DATA / sample).breakdown()
    got = summarize(DATA / sample, scheduler="threads", n_workers=2, progress=False)
    xr.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert got["events"].dtype == np.int64
    assert got.attrs["source"] == expected.attrs["source"]
    assert got["step_time"].attrs["units"] == "s"


def test_sixteen_ranks_sync_and_processes(sixteen: Path) -> None:
    expected = load_trace(sixteen).breakdown()
    assert list(expected["rank"].values) == list(range(16))
    for scheduler in ("sync", "processes"):
        got = summarize(sixteen, scheduler=scheduler, n_workers=2, progress=False)
        xr.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert got.attrs["source"] == (
        "measured: pytorch trace rank0.json.gz, rank1.json.gz, rank2.json.gz and 13 more"
    )


def test_replicas_without_jitter_repeat_their_source(tmp_path: Path) -> None:
    # With no stretch only the clock moves, and a breakdown does not depend on the clock's origin:
    # rank r must equal source rank r % 2 (to the 1 ns the rewritten microseconds keep).
    replicate_traces(SOURCES, tmp_path, 4, jitter=0.0, shift=3e-3, seed=2)
    source = load_trace(DATA / "gloo-cnn-2rank").breakdown()
    got = summarize(tmp_path, scheduler="sync", progress=False)
    for rank in range(4):
        np.testing.assert_allclose(
            got["step_time"].sel(rank=rank), source["step_time"].sel(rank=rank % 2), atol=5e-9
        )
        np.testing.assert_array_equal(got["events"].sel(rank=rank), source["events"].sel(rank=rank % 2))


def test_steps_and_distributed_client(sixteen: Path) -> None:
    import distributed

    expected = load_trace(sixteen).breakdown(steps=[3, 4])
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,  # no sockets
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        got = summarize(sixteen, client=client, steps=[3, 4], progress=False)
    xr.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert list(got["step"].values) == [3, 4]


def test_bad_file_is_named(sixteen: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    for rank in (4, 5):
        shutil.copy(sixteen / f"rank{rank}.json.gz", folder)
    data = (folder / "rank5.json.gz").read_bytes()
    (folder / "rank5.json.gz").write_bytes(data[: len(data) // 2])  # a copy cut off mid-way
    with pytest.raises(DlexploreError, match=r"rank5\.json\.gz"):
        summarize(folder, scheduler="threads", n_workers=2, progress=False, allow_missing_ranks=True)
    with gzip.open(folder / "rank5.json.gz", "wt") as handle:
        handle.write('{"traceEvents": [{"ph": "X", "ts": "soon"')
    with pytest.raises(DlexploreError, match=r"rank5\.json\.gz"):
        summarize(folder, scheduler="processes", n_workers=2, progress=False, allow_missing_ranks=True)


def test_rank_set_checks(sixteen: Path, tmp_path: Path) -> None:
    folder = tmp_path / "holes"
    folder.mkdir()
    for name in ("rank0.json.gz", "rank1.json.gz", "rank3.json.gz"):
        shutil.copy(sixteen / name, folder / name)
    with pytest.raises(DlexploreError, match="rank.s. 2, 4, 5, 6, 7, 8, 9, 10, 11, 12 ... of 16 missing"):
        summarize(folder, scheduler="sync", progress=False)
    got = summarize(folder, scheduler="sync", progress=False, allow_missing_ranks=True)
    assert list(got["rank"].values) == [0, 1, 3]
    shutil.copy(sixteen / "rank3.json.gz", folder / "copy-of-rank3.json.gz")
    with pytest.raises(DlexploreError, match="both hold rank 3"):
        summarize(folder, scheduler="sync", progress=False, allow_missing_ranks=True)
    with pytest.raises(DlexploreError, match="unknown scheduler"):
        summarize(folder, scheduler="gpu")


def test_lazy_events_match_the_event_table(sixteen: Path) -> None:
    lazy = load_events_lazily(sixteen)
    assert lazy.npartitions == 16
    events = load_trace(sixteen).events
    got = lazy.groupby(["rank", "category"], observed=True)["duration"].sum().compute(scheduler="sync")
    expected = events.groupby(["rank", "category"], observed=True)["duration"].sum()
    got.index = got.index.set_levels(got.index.levels[1].astype(str), level=1)
    expected.index = expected.index.set_levels(expected.index.levels[1].astype(str), level=1)
    pd.testing.assert_series_equal(got.sort_index(), expected.sort_index(), check_exact=False, rtol=1e-12)
    assert len(lazy) == len(events) == 16 * 1350


def _cli(*args: str) -> subprocess.CompletedProcess:
    """A real process: its dask client, workers and logging are its own, as a user's are."""
    exe = shutil.which("dlexplore") or str(Path(sys.executable).parent / "dlexplore")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)


def test_cli_summary_on_dask_prints_what_the_in_memory_summary_prints(sixteen: Path) -> None:
    direct = run_in_process("trace", "summary", str(sixteen), "--format", "csv")
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout.count("\n") == 16 * 3 + 1  # 16 ranks x 3 profiled steps and the header
    for scheduler in ("threads", "processes"):
        done = _cli(
            "trace",
            "summary",
            str(sixteen),
            "--format",
            "csv",
            "--dask",
            scheduler,
            "--workers",
            "2",
            "--quiet",
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == direct.stdout
        assert done.stderr == ""


def test_cli_summary_on_a_running_cluster(sixteen: Path) -> None:
    import distributed

    direct = run_in_process("trace", "summary", str(sixteen), "--format", "csv")
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        done = _cli(
            "trace",
            "summary",
            str(sixteen),
            "--format",
            "csv",
            "--quiet",
            "--scheduler-address",
            cluster.scheduler_address,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == direct.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "2"], "--workers goes with --dask"),
        (["--dask", "threads", "--workers", "0"], "--workers must be >= 1"),
        (["--dask", "threads", "--scheduler-address", "tcp://127.0.0.1:1"], "not both"),
        (["--dask", "fibres"], "invalid choice"),
    ],
)
def test_cli_summary_dask_options_are_checked(args: list[str], message: str) -> None:
    done = run_in_process("trace", "summary", str(DATA / "gloo-mlp-2rank"), *args)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
