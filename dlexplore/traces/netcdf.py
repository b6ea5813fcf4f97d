"""Traces to and from netCDF: the event table as an xarray Dataset on an ``event`` dimension.

``dlexplore trace convert`` writes it; :func:`dlexplore.load_trace` reads it back (format
``netcdf``), so a large trace is parsed once and then reloaded quickly, with units and the source
kept. ``step`` is stored as int64 with -1 for "outside any step".

Categorical columns (``stream``, ``name``, ...) are stored as int32 codes on ``event`` (-1 for a
missing value) with their labels in a coordinate of their own, ``<column>_categories``, named in the
codes' ``categories`` attribute: an event costs 4 bytes per such column instead of a fixed-width
string as long as the longest kernel name. Files written before this layout (strings on ``event``)
still read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .._io import atomic_path
from ..errors import DlexploreError, InputFileError
from ..hdf5_probe import probe_hdf5
from .schema import COLUMNS, Trace, make_events

__all__ = ["to_dataset", "from_dataset", "from_variables", "netcdf_encoding", "write_netcdf", "read"]

_NO_STEP = -1
_CATEGORIES_SUFFIX = "_categories"
_CHUNK_EVENTS = 1 << 16
_REQUIRED = ("rank", "stream", "name", "category", "start", "duration")  # the event table's own
_NA_ATTR = "na_value"  # the integer that stands for <NA> in a nullable integer or boolean column


def to_dataset(trace: Trace) -> xr.Dataset:
    """The trace's events as an xarray Dataset on ``event`` (columns -> variables, with units)."""
    events = trace.events
    data = {}
    coords = {}
    for name in events.columns:
        column = events[name]
        attrs: dict[str, Any] = {}
        if name in COLUMNS:
            _, units, long_name = COLUMNS[name]
            attrs = {"long_name": long_name}
            if units:
                attrs["units"] = units
        if name == "step":
            values = column.fillna(_NO_STEP).to_numpy(dtype=np.int64)
            attrs["missing_value_meaning"] = f"{_NO_STEP} = outside any step"
        elif isinstance(column.dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(column.dtype):
            codes, labels = _encode_categorical(column)
            values = codes
            label_dim = f"{name}{_CATEGORIES_SUFFIX}"
            coords[label_dim] = xr.Variable(label_dim, labels, {"long_name": f"labels of {name}"})
            attrs.update({"categories": label_dim, "missing_value_meaning": "-1 = no value"})
        elif isinstance(column.array, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):
            values, na_value = _encode_nullable(column)
            attrs.update({_NA_ATTR: na_value, "missing_value_meaning": f"{na_value} = no value"})
        else:
            values = column.to_numpy()
        # netCDF has no categorical or nullable integer type: the pandas dtype travels alongside.
        attrs["pandas_dtype"] = str(column.dtype)
        data[name] = xr.Variable("event", values, attrs)
    data.update(_memory_variables(trace.memory))
    ds = xr.Dataset(data, coords=coords)
    ds.attrs.update(
        {
            "source": trace.source,
            "kind": "measured",
            "format": trace.format,
            "files": json.dumps(list(trace.files)),
            "world_size": -1 if trace.world_size is None else int(trace.world_size),
            "meta": json.dumps(trace.meta, default=str),
        }
    )
    return ds


_MEMORY_PREFIX = "memory_"
_DEVICES_ATTR = "device_categories"  # on memory_device: the categorical's categories (JSON)


def _memory_variables(memory: pd.DataFrame | None) -> dict[str, xr.Variable]:
    """The allocator's events (:attr:`Trace.memory`) on their own dimension, ``memory_event``."""
    if memory is None:
        return {}
    from .schema import MEMORY_COLUMNS

    out = {}
    for name, (units, long_name) in MEMORY_COLUMNS.items():
        column = memory[name]
        attrs: dict[str, Any] = {"long_name": long_name, "pandas_dtype": str(column.dtype)}
        if units:
            attrs["units"] = units
        if name == "device":
            values = column.astype(str).to_numpy(dtype=str)
            if isinstance(column.dtype, pd.CategoricalDtype):  # unused ones too (an empty table's)
                attrs[_DEVICES_ATTR] = json.dumps([str(c) for c in column.cat.categories])
        elif name == "address":
            values, na_value = _encode_nullable(column)
            attrs[_NA_ATTR] = na_value
        else:
            values = column.to_numpy()
        out[_MEMORY_PREFIX + name] = xr.Variable("memory_event", values, attrs)
    return out


def _memory_table(
    variables: Mapping[str, xr.Variable], names: Sequence[str], copy: bool
) -> pd.DataFrame | None:
    names = [n for n in names if n.startswith(_MEMORY_PREFIX)]
    if not names:
        return None
    table = {}
    for name in names:
        column = name[len(_MEMORY_PREFIX) :]
        variable = variables[name]
        table[column] = (
            _decode_nullable(name, variable, copy) if _NA_ATTR in variable.attrs else variable.values
        )
    from .schema import MEMORY_COLUMNS

    order = [c for c in MEMORY_COLUMNS if c in table] + [c for c in table if c not in MEMORY_COLUMNS]
    frame = pd.DataFrame({c: table[c] for c in order}, copy=copy)  # zarr lists variables sorted
    devices = variables.get(_MEMORY_PREFIX + "device")
    stored = devices.attrs.get(_DEVICES_ATTR) if devices is not None else None
    frame["device"] = frame["device"].astype(str)
    frame["device"] = (
        pd.Categorical(frame["device"], categories=json.loads(stored))
        if stored is not None
        else frame["device"].astype("category")
    )
    return frame


def _encode_categorical(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """int32 codes (-1 = missing) and the string labels of a categorical, string or object column."""
    is_categorical = isinstance(column.dtype, pd.CategoricalDtype)
    categorical = column if is_categorical else column.astype("category")
    labels = np.array([str(label) for label in categorical.cat.categories], dtype=object)
    if len(set(labels)) < len(labels):  # labels that differ only as objects (1 and "1"): as strings
        categorical = column.astype(str).astype("category")
        labels = np.array(list(categorical.cat.categories), dtype=object)
    return categorical.cat.codes.to_numpy(dtype=np.int32), labels


def _encode_nullable(column: pd.Series) -> tuple[np.ndarray, int]:
    """Integers of a nullable integer or boolean column with <NA> as a value the column lacks
    (its type's minimum, else maximum); not float with NaN, which loses integers beyond 2**53."""
    if isinstance(column.array, pd.arrays.BooleanArray):
        column = column.astype("Int8")
    # a masked dtype's numpy twin (Int64 -> int64), which pandas-stubs do not declare
    dtype = column.dtype.numpy_dtype  # type: ignore[union-attr]
    present = column.dropna().to_numpy(dtype=dtype)
    info = np.iinfo(dtype)
    for candidate in (info.min, info.max):
        if not (present == candidate).any():
            return column.to_numpy(dtype=dtype, na_value=candidate), int(candidate)
    raise DlexploreError(
        f"column {column.name!r} holds both {info.min} and {info.max}, so neither can "
        "mark its missing values in netCDF"
    )


def _decode_nullable(name: str, variable: xr.Variable, copy: bool) -> Any:
    values = variable.values
    if values.dtype.kind not in "iu":
        raise ValueError(f"column {name!r} marks missing values with {_NA_ATTR} but holds {values.dtype}")
    return pd.arrays.IntegerArray(values.copy() if copy else values, values == variable.attrs[_NA_ATTR])


def _decode_categorical(name: str, variables: Mapping[str, xr.Variable]) -> Any:
    variable = variables[name]
    label_name = variable.attrs["categories"]
    if label_name not in variables:
        raise ValueError(f"column {name!r} names its labels {label_name!r}, which is not in the file")
    codes = variable.values
    if codes.dtype.kind not in "iu":
        raise ValueError(f"column {name!r} holds {codes.dtype} codes; expected integers")
    labels = [str(label) for label in variables[label_name].values]
    return pd.Categorical.from_codes(codes.astype(np.int64), categories=pd.Index(labels))


#: The pandas dtypes a column may be restored to, by the kind it is stored as: labels become strings
#: or objects; floats with NaN become nullable integers (a fraction is an error, not rounded).
_NULLABLE = {"Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "boolean"}
_RESTORABLE = {
    "category": {"category", "object", "str", "string"},
    "f": _NULLABLE,
    "i": _NULLABLE,
    "u": _NULLABLE,
    "b": {"boolean"},
}


def _restore_dtype(column: pd.Series, dtype: str) -> pd.Series:
    stored = "category" if isinstance(column.dtype, pd.CategoricalDtype) else column.dtype.kind
    if dtype not in _RESTORABLE.get(stored, set()):
        raise ValueError(
            f"column {column.name!r} is stored as {column.dtype} but its pandas_dtype "
            f"attribute says {dtype!r}"
        )
    if dtype == "object":  # missing as None, as a reader building Python objects leaves it
        return column.astype(object).where(column.notna(), None)
    # pandas-stubs type astype's dtype as literals; this one is checked against _RESTORABLE above
    return column.astype(dtype)  # type: ignore[call-overload]


def from_dataset(ds: xr.Dataset, origin: str = "dataset") -> Trace:
    """The :class:`Trace` that :func:`to_dataset` made (``origin`` names it in errors)."""
    missing = [name for name in _REQUIRED if name not in ds]
    if missing or "event" not in ds.dims and ds.sizes:
        raise DlexploreError(f"{origin}: not a dlexplore trace (missing {missing or 'event dim'})")
    variables = {str(name): variable for name, variable in ds.variables.items()}
    return from_variables(variables, [str(name) for name in ds.data_vars], ds.attrs, origin)


def from_variables(
    variables: Mapping[str, xr.Variable],
    data_vars: Sequence[str],
    attrs: Mapping[str, Any],
    origin: str = "dataset",
    *,
    copy: bool = True,
) -> Trace:
    """:func:`from_dataset` of a Dataset's parts: its variables (coordinates included), the names
    of its data variables in order, and its attributes. For a reader that has the variables without
    a Dataset (the trace cache reads its files with h5py): building one costs more than the rest of
    a small reload. ``copy=False``: the trace holds the variables' arrays themselves (the caller's
    own, used nowhere else)."""
    missing = [name for name in _REQUIRED if name not in variables]
    if missing:
        raise DlexploreError(f"{origin}: not a dlexplore trace (missing {missing})")
    columns: dict[str, Any] = {}
    for name in data_vars:
        if name.startswith(_MEMORY_PREFIX):
            continue
        variable = variables[name]
        if "categories" in variable.attrs:
            columns[name] = _decode_categorical(name, variables)
            continue
        if _NA_ATTR in variable.attrs:
            columns[name] = _decode_nullable(name, variable, copy)
            continue
        values: Any = variable.values
        if name == "step":  # straight to Int64 with its mask: a pd.NA per event is 30x slower
            missing_step = values == _NO_STEP
            values = pd.arrays.IntegerArray(np.where(missing_step, 0, values).astype(np.int64), missing_step)
        columns[name] = values
    events = make_events(columns, copy=copy)
    for name in events.columns:
        dtype = variables[name].attrs.get("pandas_dtype")
        if dtype and str(events[name].dtype) != dtype:
            events[name] = _restore_dtype(events[name], str(dtype))
    files = tuple(json.loads(attrs.get("files", "[]")))
    world = int(attrs.get("world_size", -1))
    meta = json.loads(attrs.get("meta", "{}"))
    return Trace(
        events,
        str(attrs.get("format", "netcdf")),
        files,
        None if world < 0 else world,
        meta,
        _memory_table(variables, data_vars, copy),
    )


def netcdf_encoding(ds: xr.Dataset) -> dict[Hashable, dict[str, Any]]:
    """HDF5 storage of an event Dataset: zlib level 1 after byte shuffling, in chunks of 65,536 events.

    Measured on a 1e6-event trace with distinct timestamps (``benchmarks/bench_trace_store.py``,
    2 cores): 9.1 bytes per event against 76 uncompressed, for 0.15 s more to write and 0.12 s
    more to read.
    """
    events = ds.sizes.get("event", 0)
    if not events:
        return {}
    chunk = (min(events, _CHUNK_EVENTS),)
    encoding = {
        name: {"zlib": True, "complevel": 1, "shuffle": True, "chunksizes": chunk}
        for name, variable in ds.data_vars.items()
        if variable.dims == ("event",)
    }
    if ds.sizes.get("memory_event", 0):
        memory_chunk = (min(ds.sizes["memory_event"], _CHUNK_EVENTS),)
        encoding.update(
            {
                name: {"zlib": True, "complevel": 1, "shuffle": True, "chunksizes": memory_chunk}
                for name, variable in ds.data_vars.items()
                if variable.dims == ("memory_event",) and variable.dtype.kind != "U"
            }
        )
    return encoding


def write_netcdf(trace: Trace, path: str | os.PathLike) -> Path:
    """Write ``trace`` to ``path`` (netCDF4 via h5netcdf, compressed), atomically."""
    target = Path(path)
    ds = to_dataset(trace)
    with atomic_path(target) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf", encoding=netcdf_encoding(ds))
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
