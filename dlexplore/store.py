"""Prediction and trace datasets to and from netCDF and zarr, keeping units, long names and attrs.

A prediction is an :class:`xarray.Dataset` (``attrs["kind"] == "predicted"``); a trace is a
:class:`~dlexplore.traces.schema.Trace`, stored as the event Dataset of
:func:`dlexplore.traces.netcdf.to_dataset` (``attrs["kind"] == "measured"``) and rebuilt with
:func:`~dlexplore.traces.netcdf.from_dataset`. Writes are atomic: netCDF goes to a temporary file
renamed over the target; a zarr store (a folder) is written to a temporary folder beside it and
renamed into place, so a reader sees the old store or the new one, never half of one. A Dask-backed
dataset (:func:`dlexplore.model.bigsweep.predict_lazy`) is written chunk by chunk.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import xarray as xr

from ._io import atomic_path, replace_folder
from .errors import DlexploreError, InputFileError
from .hdf5_probe import probe_hdf5
from .traces.netcdf import from_dataset, netcdf_encoding, to_dataset
from .traces.schema import Trace

__all__ = ["to_netcdf", "to_zarr", "open_netcdf", "open_zarr"]


#: attrs key holding the trace's columns and their pandas dtypes, in order: the event Dataset alone
#: loses the order (zarr lists variables sorted) and nullable integers (stored as float with NaN).
_COLUMNS_ATTR = "dlexplore_columns"


def _as_dataset(obj: xr.Dataset | Trace) -> xr.Dataset:
    if isinstance(obj, Trace):
        ds = to_dataset(obj)
        ds.attrs[_COLUMNS_ATTR] = json.dumps([[c, str(t)] for c, t in obj.events.dtypes.items()])
        return ds
    if isinstance(obj, xr.Dataset):
        return obj
    raise DlexploreError(f"expected an xarray Dataset or a Trace, got {type(obj).__name__}")


def _is_trace(ds: xr.Dataset) -> bool:
    return ds.attrs.get("kind") == "measured" and "event" in ds.dims


def _check_folder(target: Path) -> None:
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise DlexploreError(f"{target}: the folder {folder} does not exist")


def to_netcdf(obj: xr.Dataset | Trace, path: str | os.PathLike) -> Path:
    """Write a prediction Dataset or a Trace to ``path`` (netCDF4 via h5netcdf), atomically."""
    target = Path(path)
    ds = _as_dataset(obj)
    encoding = netcdf_encoding(ds) if _is_trace(ds) else None
    with atomic_path(target) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf", encoding=encoding)
    return target


def to_zarr(obj: xr.Dataset | Trace, path: str | os.PathLike) -> Path:
    """Write a prediction Dataset or a Trace to the zarr store (folder) ``path``, atomically.

    An existing store at ``path`` is replaced only once the new one is complete; a failed write
    leaves it as it was and removes the temporary folder.
    """
    target = Path(path)
    _check_folder(target)
    if target.exists() and not target.is_dir():
        raise DlexploreError(f"{target}: exists and is not a folder (a zarr store is a folder)")
    ds = _as_dataset(obj)
    folder = target.parent if str(target.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder))
    try:
        store = tmp / "store"
        # Zarr format 2: every reader of xarray/zarr 2 and 3 opens it, and its strings are in spec.
        ds.to_zarr(store, mode="w", zarr_format=2, consolidated=True)
        replace_folder(store, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _result(ds: xr.Dataset, path: Path) -> xr.Dataset | Trace:
    if not _is_trace(ds):
        return ds
    try:
        return _trace(ds, path)
    except InputFileError:
        raise
    except (ValueError, TypeError, KeyError) as err:  # DlexploreError included: name the file
        raise InputFileError(path, f"not a trace written by dlexplore ({err})") from None


def _trace(ds: xr.Dataset, path: Path) -> Trace:
    columns = json.loads(ds.attrs.get(_COLUMNS_ATTR, "[]"))
    trace = from_dataset(ds, str(path))
    events = trace.events
    if columns and sorted(c for c, _ in columns) == sorted(events.columns):
        events = events[[c for c, _ in columns]]
        for name, dtype in columns:
            if str(events[name].dtype) != dtype:
                events[name] = events[name].astype(dtype)
        events.attrs = dict(trace.events.attrs)
        trace = Trace(events, trace.format, trace.files, trace.world_size, trace.meta, trace.memory)
    return trace


def open_netcdf(path: str | os.PathLike) -> xr.Dataset | Trace:
    """Read what :func:`to_netcdf` wrote: a Trace for a trace, else the Dataset (loaded in memory,
    the file closed)."""
    source = Path(path)
    probe_hdf5(source)  # a damaged file can hang HDF5 in C; find out in a child process first
    try:
        with xr.open_dataset(source, engine="h5netcdf") as ds:
            ds.load()
    except FileNotFoundError:
        raise InputFileError(source, "no such file (not found); expected a netCDF file") from None
    except (OSError, ValueError) as err:
        raise InputFileError(source, f"cannot be read as netCDF ({err})") from None
    return _result(ds, source)


def open_zarr(path: str | os.PathLike, *, lazy: bool = True) -> xr.Dataset | Trace:
    """Read what :func:`to_zarr` wrote: a Trace for a trace, else the Dataset, Dask-backed (chunked
    as written) when ``lazy`` and Dask is installed, loaded in memory otherwise."""
    source = Path(path)
    if not source.is_dir():
        raise InputFileError(source, "no such zarr store (expected a folder)")
    try:
        ds = xr.open_zarr(source, chunks={} if lazy else None)
        if not lazy or _is_trace(ds):
            ds = ds.load()
    except ImportError:
        ds = xr.open_zarr(source, chunks=None).load()
    except (OSError, ValueError, KeyError) as err:
        raise InputFileError(source, f"cannot be read as a zarr store ({err})") from None
    return _result(ds, source)
