"""Dataset conventions shared by the model functions: units and long names of every variable
(:data:`VARIABLES`), the source of a prediction, and sweeps.

A parameter given as a scalar stays a scalar coordinate; one given as a 1-D sequence becomes a
dimension of that name. xarray then broadcasts by name, so every swept parameter ends up as one
dimension of the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from .._version import __version__
from ..errors import DlexploreError

__all__ = [
    "VARIABLES",
    "as_dataarray",
    "sweep_values",
    "is_sweep",
    "finish_dataset",
    "PREDICTED_SOURCE",
    "OnDims",
]

PREDICTED_SOURCE = f"predicted: dlexplore {__version__} analytical model"

#: units and long names of every coordinate and variable the model writes (DESIGN.md names).
VARIABLES: dict[str, tuple[str, str]] = {
    # coordinates
    "gpus": ("count", "GPUs (total devices)"),
    "batch_size": ("samples", "batch size per GPU"),
    "bandwidth": ("GB/s", "network bandwidth per link and direction"),
    "latency": ("s", "network latency per message"),
    "intra_bandwidth": ("GB/s", "intra-node link bandwidth per direction"),
    "intra_latency": ("s", "intra-node link latency per message"),
    "gpus_per_node": ("count", "GPUs per node"),
    "nics_per_node": ("count", "network adapters per node (0: one per GPU)"),
    "servers": ("count", "parameter servers (0: one per node)"),
    "bytes": ("bytes", "message size"),
    "gamma": ("s/byte", "reduction cost per byte"),
    "bucket_size": ("bytes", "gradient bucket (fusion buffer) size"),
    "compute_efficiency": ("1", "fraction of peak FLOP/s that large GEMMs reach"),
    "overlap": ("1", "fraction of communication allowed to overlap backward compute"),
    "io_threads": ("count", "data-loader reads in flight per GPU"),
    "peak_flops": ("FLOP/s", "peak dense FLOP/s of the GPU at this precision"),
    "grad_accum": ("count", "micro-batches per step (gradient accumulation)"),
    "memory_efficiency": ("1", "fraction of GPU memory bandwidth reached by memory-bound kernels"),
    "kernel_time": ("s", "fixed time of one GPU kernel (launch, pipeline fill and drain)"),
    "winograd_speedup": ("1", "FLOP saving of Winograd's algorithm on 3x3 convolutions"),
    "flash_efficiency": ("1", "fraction of peak FLOP/s a flash-attention kernel reaches"),
    "unaligned_efficiency": (
        "1",
        "share of its aligned rate a GEMM with operand rows aligned to 4-8 bytes reaches",
    ),
    "seq": ("tokens", "sequence length"),
    "tcp_efficiency": ("1", "fraction of a network's bandwidth collectives reach over kernel TCP"),
    "ps_efficiency": ("1", "fraction of a link's bandwidth parameter-server transfers reach"),
    "cycle_time": ("s", "Horovod's cycle time"),
    "servers_colocated": ("1", "whether the parameter servers run on the workers' nodes"),
    "negotiation_time": ("s", "Horovod's negotiation time per tensor and tree level"),
    "host_staging": ("1", "whether gradients are reduced in host memory (Horovod's CPU allreduce)"),
    "host_bandwidth": ("GB/s", "host memory traffic one CPU core sustains (bytes read and written)"),
    "server_bandwidth": ("GB/s", "host memory traffic of a parameter server's CPU (read and written)"),
    "operator": ("1", "operator category of the compute breakdown"),
    "kernel": ("1", "kernel of one training step, in launch order"),
    # communication
    "time": ("s", "collective time"),
    "algbw": ("GB/s", "algorithm bandwidth (bytes / time)"),
    "busbw": ("GB/s", "bus bandwidth (algbw x nccl-tests factor)"),
    # step
    "step_time": ("s", "time per training step"),
    "time_forward": ("s", "forward compute time per step"),
    "time_backward": ("s", "backward compute time per step"),
    "time_optimizer": ("s", "optimizer update time per step"),
    "time_compute": ("s", "compute time per step (forward + backward + update)"),
    "time_operator": ("s", "compute time per step by operator category"),
    "time_kernel": ("s", "time of each kernel per step (all micro-batches)"),
    "time_comm": ("s", "gradient communication time per step"),
    "time_comm_exposed": ("s", "communication time not hidden behind backward compute"),
    "time_io": ("s", "input reading time per step"),
    "time_io_exposed": ("s", "input reading time not hidden by prefetching"),
    "throughput": ("samples/s", "global training throughput"),
    "efficiency": ("1", "scaling efficiency against one GPU"),
    "comm_bytes": ("bytes", "gradient bytes allreduced per GPU per step"),
    "n_buckets": ("count", "gradient buckets (collectives) per step"),
    # gradient buckets (predict(..., buckets=True))
    "bucket": ("1", "gradient bucket, in the order the backward pass fills them"),
    "bucket_bytes": ("bytes", "gradient bytes in the bucket"),
    "bucket_ready": ("s", "time from the step start when the bucket's last gradient is ready"),
    "bucket_start": ("s", "time from the step start when the bucket's allreduce starts"),
    "bucket_end": ("s", "time from the step start when the bucket's allreduce ends"),
    "bucket_time": ("s", "allreduce time of the bucket"),
    "bucket_algbw": ("GB/s", "algorithm bandwidth of the bucket's allreduce"),
    "bucket_busbw": ("GB/s", "bus bandwidth of the bucket's allreduce (x 2(p-1)/p)"),
    # memory
    "mem_params": ("bytes", "parameter memory per GPU"),
    "mem_grads": ("bytes", "gradient memory per GPU"),
    "mem_optimizer": ("bytes", "optimizer state memory per GPU"),
    "mem_activations": ("bytes", "activation memory per GPU"),
    "mem_workspace": ("bytes", "workspace, context and communication buffers per GPU"),
    "mem_total": ("bytes", "total memory per GPU"),
    "mem_capacity": ("bytes", "GPU memory capacity"),
    "fits": ("1", "whether the step fits in GPU memory"),
}


def is_sweep(value: object) -> bool:
    """True for a 1-D sequence of values (a sweep), False for a scalar or a string."""
    if isinstance(value, (str, bytes, np.generic)):
        return False
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, (Sequence, xr.DataArray, range)) or hasattr(value, "__array__")


def as_dataarray(name: str, value: object) -> xr.DataArray:
    """``value`` as a 0-d DataArray (scalar) or a 1-D DataArray along dimension ``name``."""
    if isinstance(value, xr.DataArray) and value.dims:
        sweep_values(name, value)
        return value
    if not is_sweep(value):
        return xr.DataArray(value, coords={name: value})
    values = sweep_values(name, value)
    return xr.DataArray(values, dims=name, coords={name: values})


def sweep_values(name: str, value: object) -> np.ndarray:
    """The values of the sweep ``value`` along ``name`` (what :func:`as_dataarray` holds), checked:
    1-D, not empty, no value twice (a DataArray: along ``name``).

    Without a DataArray, whose index costs 0.5 ms: a calibration evaluates the model thousands of
    times, each with its own sweeps."""
    if isinstance(value, xr.DataArray) and value.dims:
        if value.dims != (name,):
            raise DlexploreError(f"{name}: expected a 1-D sweep along {name!r}, got dims {value.dims}")
        return value.values
    values = np.asarray(value)
    if values.ndim != 1:
        raise DlexploreError(f"{name}: expected a scalar or a 1-D sequence, got shape {values.shape}")
    if values.size == 0:
        raise DlexploreError(f"{name}: the sweep is empty")
    if len(np.unique(values)) != values.size:
        raise DlexploreError(f"{name}: the sweep repeats values {values.tolist()}")
    return values


class OnDims:
    """Arrays laid out over a dataset's dimensions, for arithmetic in numpy.

    Not :class:`~dlexplore.model.step_grid.Grid` (the model's sweep of numeric parameters): this
    lays values out over an existing dataset's dimensions. ``grid(value)`` turns a scalar, or an
    xarray Variable or DataArray whose dimensions are among the grid's, into an array that
    broadcasts against the grid: its axes in the grid's order, of size 1 where the value does not
    vary. A DataArray is matched by label first (reindexed to the dataset's index where its labels
    differ), as xarray's arithmetic would. ``grid.whole(array)`` gives a result the grid's full
    shape. Why: arithmetic between a prediction's DataArrays merges its ~40 scalar coordinates
    again at every operation; a few dozen such operations were most of an explorer slider move,
    where the same sums on arrays take microseconds.
    """

    def __init__(self, like: xr.Variable | xr.DataArray, indexes: Any = None) -> None:
        self.dims: tuple[str, ...] = tuple(like.dims)
        self.shape: tuple[int, ...] = tuple(like.shape)
        self.indexes = indexes if indexes is not None else {}

    def __call__(self, value: Any) -> np.ndarray:
        if isinstance(value, xr.DataArray):
            relabel = {
                d: self.indexes[d]
                for d in value.dims
                if d in self.indexes and d in value.indexes and not value.indexes[d].equals(self.indexes[d])
            }
            value = (value.reindex(relabel) if relabel else value).variable
        if not isinstance(value, xr.Variable):
            return np.asarray(value)
        extra = [d for d in value.dims if d not in self.dims]
        if extra:
            raise DlexploreError(f"a value varies along {extra}, which the prediction's step time does not")
        data = value.transpose(*(d for d in self.dims if d in value.dims)).values
        return data.reshape([n if d in value.dims else 1 for d, n in zip(self.dims, self.shape, strict=True)])

    @property
    def ones(self) -> np.ndarray:
        return np.ones(self.shape)

    def whole(self, array: Any) -> np.ndarray:
        """``array`` broadcast to the grid's shape, as a writable array of its own."""
        return np.array(np.broadcast_to(array, self.shape))


def finish_dataset(ds: xr.Dataset, *, title: str) -> xr.Dataset:
    """Attach units and long names to every known variable and coordinate, and mark the dataset
    as predicted (``attrs["source"]``, ``attrs["kind"]``)."""
    for name, variable in ds.variables.items():  # not ds[name]: each would gather every coordinate
        if name in VARIABLES:
            units, long_name = VARIABLES[name]
            variable.attrs.update(units=units, long_name=long_name)
    missing = [v for v in ds.data_vars if "units" not in ds.variables[v].attrs]
    if missing:  # a programming error: every variable the model writes must be in VARIABLES
        raise AssertionError(f"variables without units: {missing}")
    ds.attrs.update(source=PREDICTED_SOURCE, kind="predicted", title=title)
    return ds
