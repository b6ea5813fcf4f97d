"""The parameters of :func:`dlexplore.predict` and the grid they are evaluated on: numeric parameters
become numpy axes whose arithmetic is their outer product (:class:`Grid`), each checked by
:mod:`dlexplore.validation`; categorical ones are evaluated one value at a time (:mod:`dlexplore.model.step`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from .. import validation
from ..errors import DlexploreError
from .conventions import is_sweep, sweep_values

#: Parameters evaluated as vectorised sweeps (each becomes a dimension when given as a sequence),
#: in the order their dimensions appear in the result.
NUMERIC_PARAMETERS = (
    "gpus",
    "batch_size",
    "bandwidth",
    "latency",
    "gpus_per_node",
    "nics_per_node",
    "intra_bandwidth",
    "intra_latency",
    "servers",
    "compute_efficiency",
    "overlap",
    "gamma",
    "io_threads",
    "grad_accum",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "unaligned_efficiency",
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)


#: Parameters that select catalog entries or change the bucket structure: a sequence of them is
#: evaluated one value at a time and concatenated along a dimension of that name.
CATEGORICAL_PARAMETERS = (
    "workload",
    "gpu",
    "network",
    "intra_link",
    "algorithm",
    "precision",
    "optimizer",
    "storage",
    "bucket_size",
    "seq",
    "attention",
    "layout",
    "fusion",
    "framework",
    "transport",
    "servers_colocated",
    "host_staging",
)


INTEGER_PARAMETERS = {
    "gpus",
    "batch_size",
    "gpus_per_node",
    "nics_per_node",
    "servers",
    "io_threads",
    "grad_accum",
}


#: Fractions in (0, 1].
_FRACTIONS = (
    "compute_efficiency",
    "memory_efficiency",
    "flash_efficiency",
    "unaligned_efficiency",
    "tcp_efficiency",
    "ps_efficiency",
)


#: Communication overheads and their defaults' names in data/catalog/defaults.csv.
COMM_PARAMETERS = (
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
)


class Grid:
    """Numeric sweeps laid out on separate numpy axes so that arithmetic forms their outer product."""

    def __init__(self, values: dict[str, object]):
        self.dims = [name for name in NUMERIC_PARAMETERS if is_sweep(values[name])]
        self.coords = {name: sweep_values(name, values[name]) for name in self.dims}
        self.shape = tuple(len(self.coords[d]) for d in self.dims)
        self.arrays: dict[str, np.ndarray] = {}
        for name in NUMERIC_PARAMETERS:
            value = values[name]
            arr = np.asarray(self.coords[name] if name in self.dims else value, dtype=float)
            validate_parameter(name, arr)
            if name in self.dims:
                shape = [1] * len(self.dims)
                shape[self.dims.index(name)] = arr.size
                arr = arr.reshape(shape)
            self.arrays[name] = arr

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def wrap(self, value: np.ndarray | float) -> xr.DataArray:
        """A DataArray over the dimensions ``value`` varies along (size-1 axes are dropped)."""
        dims, squeezed = self.raw(value)
        return xr.DataArray(squeezed, dims=dims, coords={d: self.coords[d] for d in dims})

    def raw(self, value: np.ndarray | float) -> tuple[tuple[str, ...], np.ndarray]:
        """(dimensions, values) of :meth:`wrap`'s DataArray, for a Dataset built at once (with
        :attr:`coords`): 21 DataArrays each with its coordinates cost a third of a prediction to align."""
        arr = np.asarray(value)
        if arr.ndim == 0:
            return (), arr
        arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, (1,) * len(self.dims)))
        keep = [i for i, n in enumerate(arr.shape) if n > 1 or self.shape[i] == 1]
        return tuple(self.dims[i] for i in keep), arr.reshape([arr.shape[i] for i in keep])


def validate_parameter(name: str, arr: np.ndarray) -> None:
    rule = _RULES.get(name, validation.nonnegative)
    rule(name, arr, **({"units": _UNITS[name]} if name in _UNITS else {}))


def _fraction(name: str, value: object, **_: object) -> object:
    return validation.fraction(name, value, allow_zero=False)


# How each numeric parameter of predict is checked (dlexplore.validation); the rest (times, gamma)
# are >= 0.
_RULES = {
    "gpus": lambda name, value, **_: validation.gpu_count(name, value),
    "gpus_per_node": lambda name, value, **_: validation.gpu_count(name, value),
    # 0 is the default: one NIC per GPU
    "nics_per_node": lambda name, value, **_: validation.count(
        name, value, minimum=0, maximum=validation.MAX_GPUS
    ),
    # 0 is the default: one server per node
    "servers": lambda name, value, **_: validation.count(name, value, minimum=0, maximum=validation.MAX_GPUS),
    "io_threads": validation.count,
    "grad_accum": lambda name, value, **_: validation.count(name, value, maximum=validation.MAX_BATCH),
    "batch_size": lambda name, value, **_: validation.batch_size(name, value),
    "bandwidth": validation.positive,
    "intra_bandwidth": validation.positive,
    "host_bandwidth": validation.positive,
    "server_bandwidth": validation.positive,
    **{name: _fraction for name in _FRACTIONS},
    "winograd_speedup": lambda name, value, **_: validation.number(name, value, minimum=1),
    "overlap": lambda name, value, **_: validation.fraction(name, value),
}


_UNITS = {
    "bandwidth": "GB/s",
    "intra_bandwidth": "GB/s",
    "host_bandwidth": "GB/s",
    "server_bandwidth": "GB/s",
    "latency": "s",
    "intra_latency": "s",
    "gamma": "s/byte",
    "kernel_time": "s",
    "cycle_time": "s",
    "negotiation_time": "s",
}


def choose(name: str, value: object, allowed: tuple[str, ...]) -> str:
    key = str(value).strip().lower()
    if key not in allowed:
        raise DlexploreError(f"unknown {name} {value!r}; expected one of {', '.join(allowed)}")
    return key


def along(grid: Grid, value: np.ndarray, dim: str, labels: object) -> xr.DataArray:
    """``value`` (last axis along ``dim``, the others the grid's) as a DataArray with ``dim``
    last, over the grid dimensions it varies along."""
    dims, squeezed = along_raw(grid, value, dim)
    coords = {d: grid.coords[d] for d in dims[:-1]}
    coords[dim] = labels
    return xr.DataArray(squeezed, dims=dims, coords=coords)


def along_raw(grid: Grid, value: np.ndarray, dim: str) -> tuple[tuple[str, ...], np.ndarray]:
    """(dimensions, values) of :func:`along`'s DataArray, for a Dataset built at once."""
    arr = np.asarray(value, dtype=float)
    arr = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, (1,) * len(grid.dims) + arr.shape[-1:]))
    keep = [i for i, n in enumerate(arr.shape[:-1]) if n > 1 or grid.shape[i] == 1]
    squeezed = arr.reshape([arr.shape[i] for i in keep] + [arr.shape[-1]])
    return (*(grid.dims[i] for i in keep), dim), squeezed
