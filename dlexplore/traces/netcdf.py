"""Traces to and from netCDF: the event table as an xarray Dataset on an ``event`` dimension.

``dlexplore trace convert`` writes it; :func:`dlexplore.load_trace` reads it back (format
``netcdf``), so a large trace is parsed once and then reloaded quickly, with units and the source
kept. Categorical columns are stored as strings, ``step`` as int64 with -1 for "outside any step".
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .._hdf5 import probe_hdf5
from .._io import atomic_path
from ..errors import DlexploreError, InputFileError
from .schema import COLUMNS, Trace, make_events

__all__ = ["to_dataset", "from_dataset", "write_netcdf", "read"]

_NO_STEP = -1


def to_dataset(trace: Trace) -> xr.Dataset:
    """The trace's events as an xarray Dataset on ``event`` (columns -> variables, with units)."""
    events = trace.events
    data = {}
    for name in events.columns:
        column = events[name]
        if name == "step":
            values = column.fillna(_NO_STEP).to_numpy(dtype=np.int64)
        elif isinstance(column.dtype, pd.CategoricalDtype) or column.dtype == object:
            values = column.astype(str).to_numpy(dtype=str)
        else:
            values = column.to_numpy()
        attrs = {}
        if name in COLUMNS:
            _, units, long_name = COLUMNS[name]
            attrs = {"long_name": long_name}
            if units:
                attrs["units"] = units
            if name == "step":
                attrs["missing_value_meaning"] = f"{_NO_STEP} = outside any step"
        data[name] = xr.Variable("event", values, attrs)
    ds = xr.Dataset(data)
    ds.attrs.update({
        "source": trace.source,
        "kind": "measured",
        "format": trace.format,
        "files": json.dumps(list(trace.files)),
        "world_size": -1 if trace.world_size is None else int(trace.world_size),
        "meta": json.dumps(trace.meta, default=str),
    })
    return ds


def from_dataset(ds: xr.Dataset, origin: str = "dataset") -> Trace:
    """The :class:`Trace` that :func:`to_dataset` made (``origin`` names it in errors)."""
    missing = [name for name in ("rank", "stream", "name", "category", "start", "duration")
               if name not in ds]
    if missing or "event" not in ds.dims and ds.sizes:
        raise DlexploreError(f"{origin}: not a dlexplore trace (missing {missing or 'event dim'})")
    columns: dict[str, Any] = {}
    for name in ds.data_vars:
        values = ds[name].values
        if name == "step":
            values = pd.array(np.where(values == _NO_STEP, pd.NA, values), dtype="Int64")
        columns[name] = values
    events = make_events(columns)
    files = tuple(json.loads(ds.attrs.get("files", "[]")))
    world = int(ds.attrs.get("world_size", -1))
    meta = json.loads(ds.attrs.get("meta", "{}"))
    return Trace(events, str(ds.attrs.get("format", "netcdf")), files, None if world < 0 else world, meta)


def write_netcdf(trace: Trace, path: str | os.PathLike) -> Path:
    """Write ``trace`` to ``path`` (netCDF4 via h5netcdf), atomically."""
    target = Path(path)
    with atomic_path(target) as tmp:
        to_dataset(trace).to_netcdf(tmp, engine="h5netcdf")
    return target


def read(paths: Sequence[Path], **options: Any) -> Trace:
    """Read one netCDF file written by :func:`write_netcdf` (the ``netcdf`` format of load_trace)."""
    if options:
        raise DlexploreError(f"netcdf traces take no options, got {sorted(options)}")
    if len(paths) != 1:
        raise DlexploreError(f"a converted trace is one netCDF file; got {len(paths)} files")
    (path,) = paths
    probe_hdf5(path)  # a damaged file can hang HDF5 in C; find out in a child process first
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds.load()
    except Exception as err:  # noqa: BLE001 - h5py reports corrupt files as KeyError, RuntimeError ...
        raise InputFileError(path, f"cannot be read as netCDF ({type(err).__name__}: {err})") from None
    try:
        return from_dataset(ds, str(path))
    except InputFileError:
        raise
    except (ValueError, TypeError, KeyError) as err:  # DlexploreError included: name the file
        raise InputFileError(path, f"not a trace written by write_netcdf ({err})") from None
