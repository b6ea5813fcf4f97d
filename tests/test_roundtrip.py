"""Prediction and trace datasets through netCDF and zarr (:mod:`dlexplore.store`): values, units,
long names and attrs (source, kind) come back identical; writes are atomic (a temporary file or
folder beside the target, renamed); a lazy sweep is written chunk by chunk. The trace is the real
two-rank gloo profile in tests/data/traces/pytorch/gloo-mlp-2rank (written by torch.profiler, see
its README). Needs zarr and Dask (the ``scale`` extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.store import open_netcdf, open_zarr, to_netcdf, to_zarr
from dlexplore.traces import Trace, load_trace

DATA = Path(__file__).parent / "data" / "traces" / "pytorch" / "gloo-mlp-2rank"
REAL = Path(__file__).resolve().parents[2] / "shared" / "traces-real" / "pytorch"
SWEEP = dict(gpus=[1, 2, 8], batch_size=[32, 64], latency=[1e-6, 1e-5], gpus_per_node=4)


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".")]


def test_prediction_netcdf_round_trip_keeps_attrs(tmp_path):
    ds = dlx.predict(**SWEEP)
    path = to_netcdf(ds, tmp_path / "pred.nc")
    back = open_netcdf(path)
    xr.testing.assert_identical(back, ds)
    assert back.attrs["kind"] == "predicted" and back.attrs["source"].startswith("predicted:")
    assert back.throughput.attrs == {"units": "samples/s", "long_name": "global training throughput"}
    assert back.fits.dtype == bool
    assert not _leftovers(tmp_path)


def test_prediction_zarr_round_trip_and_replace(tmp_path):
    target = tmp_path / "pred.zarr"
    to_zarr(dlx.predict(gpus=[1, 2]), target)
    ds = dlx.predict(**SWEEP)
    to_zarr(ds, target)  # replaces the first store whole
    xr.testing.assert_identical(open_zarr(target, lazy=False), ds)
    lazy = open_zarr(target)
    assert hasattr(lazy.step_time.data, "dask")
    xr.testing.assert_identical(lazy.compute(), ds)
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_trace_round_trip_equal(tmp_path, fmt):
    trace = load_trace(DATA)
    write, read = (to_zarr, open_zarr) if fmt == "zarr" else (to_netcdf, open_netcdf)
    back = read(write(trace, tmp_path / f"trace.{fmt}"))
    assert isinstance(back, Trace)
    pd.testing.assert_frame_equal(back.events, trace.events)
    assert (back.format, back.files, back.world_size) == (trace.format, trace.files, trace.world_size)
    # meta goes through JSON (traces/netcdf.py): the reader's int rank keys come back as strings.
    assert back.meta == json.loads(json.dumps(trace.meta, default=str))
    assert back.source == trace.source
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_trace_extra_columns_keep_dtype_and_missing_values(tmp_path, fmt):
    trace = load_trace(DATA)
    n = len(trace.events)
    events = trace.events.assign(
        note=pd.Series(["a", None] * (n // 2) + ["a"] * (n % 2), dtype=object),
        id=pd.array([2**62 + 1, pd.NA] * (n // 2) + [1] * (n % 2), dtype="Int64"),
        flag=pd.array([pd.NA, False] * (n // 2) + [True] * (n % 2), dtype="boolean"),
    )
    trace = Trace(events, trace.format, trace.files, trace.world_size, trace.meta)
    write, read = (to_zarr, open_zarr) if fmt == "zarr" else (to_netcdf, open_netcdf)
    back = read(write(trace, tmp_path / f"trace.{fmt}"))
    pd.testing.assert_frame_equal(back.events, trace.events)
    assert back.events["id"].iloc[0] == 2**62 + 1


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
@pytest.mark.parametrize("keep", ["none", "cpu"])
def test_the_allocator_table_keeps_its_devices_even_without_events(tmp_path, fmt, keep):
    """The allocator's events of a real GPU trace (``profile_memory=True``), cut down to none or to
    one device's: the device column's categories (cpu, cuda:0) come back, not only those with
    events left, and the columns in their order (zarr lists its variables sorted)."""
    import dataclasses

    path = REAL / "kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
    if not path.exists():
        pytest.fail(f"{path} is missing: the real traces of shared/traces-real are needed")
    trace = load_trace(path, cache=False)  # one GPU, no communication: rank 0, said by nothing
    memory = trace.memory
    cut = (memory.iloc[:0] if keep == "none" else memory[memory["device"] == keep]).reset_index(drop=True)
    assert list(cut["device"].cat.categories) == ["cpu", "cuda:0"] and len(set(cut["device"])) < 2
    trace = dataclasses.replace(trace, memory=cut)
    write, read = (to_zarr, open_zarr) if fmt == "zarr" else (to_netcdf, open_netcdf)
    back = read(write(trace, tmp_path / f"trace.{fmt}"))
    pd.testing.assert_frame_equal(back.memory, cut)


def test_lazy_sweep_to_zarr_chunk_by_chunk(tmp_path):
    from dlexplore.model.bigsweep import predict_lazy

    lazy = predict_lazy(**SWEEP, chunks={"gpus": 1})
    path = to_zarr(lazy, tmp_path / "lazy.zarr")
    back = open_zarr(path)
    assert back.step_time.chunks[0] == (1, 1, 1)  # one zarr chunk per Dask block
    xr.testing.assert_identical(back.compute(), dlx.predict(**SWEEP))


def test_failed_zarr_write_keeps_the_old_store(tmp_path):
    target = tmp_path / "pred.zarr"
    old = dlx.predict(gpus=[1, 2])
    to_zarr(old, target)
    bad = dlx.predict(gpus=[1, 2]).assign(broken=("gpus", [object(), object()]))
    with pytest.raises(Exception):  # noqa: B017 - whatever zarr raises for an unencodable variable
        to_zarr(bad, target)
    xr.testing.assert_identical(open_zarr(target, lazy=False), old)
    assert not _leftovers(tmp_path)


def test_bad_paths_are_dlexplore_errors(tmp_path):
    with pytest.raises(InputFileError, match="missing.nc"):
        open_netcdf(tmp_path / "missing.nc")
    (tmp_path / "junk.nc").write_bytes(b"not netcdf")
    with pytest.raises(InputFileError, match="junk.nc"):
        open_netcdf(tmp_path / "junk.nc")
    with pytest.raises(InputFileError, match="missing.zarr"):
        open_zarr(tmp_path / "missing.zarr")
    with pytest.raises(DlexploreError, match="does not exist"):
        to_zarr(dlx.predict(), tmp_path / "no" / "such.zarr")
    with pytest.raises(DlexploreError, match="Dataset or a Trace"):
        to_netcdf([1, 2], tmp_path / "x.nc")
