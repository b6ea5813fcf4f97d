"""Data-loading I/O: storage tiers, file layouts, page cache and shared file-system contention.

Each GPU has one reader (its data loader) with ``io_threads`` requests in flight. Per sample, a
reader that misses the page cache pays::

    t_miss = (opens_per_sample x t_open + read_latency_s) / io_threads + sample_bytes / bw_reader
    t_open = max(metadata_latency_s, readers x io_threads / metadata_rate)   (Little's law at the MDS)
    bw_reader = min(client_bandwidth, bandwidth / sharing)

``sharing`` is every reader of the job on a shared tier (``contention=True``) and the readers of one
node on a node-local tier (whose aggregate therefore grows with the nodes). ``opens_per_sample`` is 1
for many small files (one file per sample), ``sample_bytes / file_bytes`` for sharded records (one
open per shard read sequentially) and one open per reader per epoch for LMDB (one memory-mapped
file). A hit in the page cache costs ``sample_bytes / bw_cache + cache latency / io_threads``, with
the ``page-cache`` tier of the catalog. Each node reads its own part of the data set
(``dataset_bytes / nodes``, as DLIO assumes), so the hit ratio from the second epoch on is
``min(1, page_cache_bytes / (dataset_bytes / nodes))``; the first epoch always misses, and the
result is averaged over ``epochs``.

What this lacks: read-ahead and striping details, LMDB's page-fault pattern (Pumma et al., the
LMDBIO study of seed 003: it shows up as ``read_latency_s`` per sample), decode and augmentation on
the CPU, cache eviction by the training process's own memory.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields

import numpy as np
import xarray as xr

from .. import catalog, validation
from ..errors import DlexploreError, InputFileError
from .conventions import PREDICTED_SOURCE, as_dataarray

__all__ = ["io_model", "io_bound_gpus", "DLIOWorkload", "LAYOUTS", "IO_VARIABLES"]

#: File layouts understood by :func:`io_model`.
LAYOUTS = ("small_files", "lmdb", "sharded")

#: Units and long names of the variables and coordinates :func:`io_model` writes.
IO_VARIABLES: dict[str, tuple[str, str]] = {
    "sample_bytes": ("bytes", "bytes per sample"),
    "file_bytes": ("bytes", "bytes per file (shard or LMDB database)"),
    "readers_per_node": ("count", "readers (one per GPU) per node"),
    "nodes": ("count", "nodes"),
    "readers": ("count", "readers in the job"),
    "page_cache_bytes": ("bytes", "node memory available to cache the data set"),
    "dataset_bytes": ("bytes", "data set size"),
    "epochs": ("count", "epochs"),
    "batch_size": ("samples", "batch size per GPU (reader)"),
    "io_threads": ("count", "reads in flight per reader"),
    "metadata_latency_s": ("s", "time of one file open on an idle file system"),
    "open_time": ("s", "time of one file open, with metadata-server queueing"),
    "opens_per_sample": ("1", "file opens per sample read"),
    "hit_ratio": ("1", "fraction of samples served from the page cache, averaged over epochs"),
    "time_sample": ("s", "read time per sample per reader"),
    "time_sample_miss": ("s", "read time per sample from the storage tier"),
    "time_metadata": ("s", "metadata (open) time per sample per reader"),
    "time_io": ("s", "read time per step per reader (one batch)"),
    "bandwidth_reader": ("GB/s", "storage-tier bandwidth available to one reader"),
    "effective_bandwidth_reader": ("GB/s", "effective read bandwidth per reader (bytes / time)"),
    "effective_bandwidth": ("GB/s", "effective aggregate read bandwidth of the job"),
    "time_compute": ("s", "compute time per step"),
    "io_bound_gpus": ("count", "smallest GPU count where I/O per step exceeds compute per step"),
}


def _as(
    name: str, value, *, positive: bool = False, units: str = "", allow_inf: bool = False
) -> xr.DataArray:
    check = validation.positive if positive else validation.nonnegative
    check(
        name,
        value.values if isinstance(value, xr.DataArray) else value,
        units=units,
        **({"allow_inf": True} if allow_inf and not positive else {}),
    )
    da = value if isinstance(value, xr.DataArray) else as_dataarray(name, value)
    return da.astype(float)


def _units(ds: xr.Dataset) -> xr.Dataset:
    for name in list(ds.variables):
        if name in IO_VARIABLES:
            units, long = IO_VARIABLES[name]
            ds[name].attrs.update(units=units, long_name=long)
    return ds


def io_model(
    storage: str | catalog.StorageTier,
    *,
    layout: str = "small_files",
    sample_bytes,
    file_bytes=None,
    readers_per_node=8,
    nodes=1,
    batch_size=1,
    io_threads=1,
    page_cache_bytes=0.0,
    dataset_bytes=None,
    epochs=1,
    metadata_latency_s=None,
    read_latency_s=0.0,
    metadata_rate: float = math.inf,
    contention: bool = True,
) -> xr.Dataset:
    """Predict data-loading time and bandwidth (see the module docstring for the formulas).

    Parameters (scalars, or 1-D sequences that become dimensions of the result)
    ----------
    storage: a storage tier of the catalog (``pfs``, ``burst-buffer``, ``nvme``, ...).
    layout: ``small_files`` (one file per sample), ``lmdb`` (one database file) or ``sharded``.
    sample_bytes: bytes per sample. file_bytes: bytes per shard (``sharded``); unused otherwise.
    readers_per_node, nodes: readers (one per GPU) per node and nodes.
    batch_size: samples per step per reader. io_threads: requests in flight per reader.
    page_cache_bytes: node memory that can cache the data set, bytes.
    dataset_bytes: data set size, bytes (default: never fits the cache, and one LMDB open per epoch
        is negligible). epochs: number of epochs (the first one is always read from storage).
    metadata_latency_s: seconds per file open on an idle file system (default: the tier's
        ``latency_s``). read_latency_s: seconds per sample request inside an open file.
    metadata_rate: opens per second the metadata service sustains for the whole job (default inf).
    contention: share a shared tier's aggregate bandwidth among all readers (False: each reader gets
        its client bandwidth).

    Returns an ``xr.Dataset`` with ``time_sample``, ``time_io`` (per step, s),
    ``effective_bandwidth_reader`` and ``effective_bandwidth`` (GB/s), ``hit_ratio`` and the
    intermediate terms, every variable with units; ``attrs["source"]`` starts with "predicted: ".
    """
    tier = catalog.storage(storage)
    if layout not in LAYOUTS:
        raise DlexploreError(f"layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
    if layout == "sharded" and file_bytes is None:
        raise DlexploreError("layout 'sharded' needs file_bytes (bytes per shard)")
    s = _as("sample_bytes", sample_bytes, positive=True, units="bytes")
    rpn = _as("readers_per_node", readers_per_node, positive=True)
    n = _as("nodes", nodes, positive=True)
    b = _as("batch_size", batch_size, units="samples")
    th = _as("io_threads", io_threads, positive=True)
    cache = _as("page_cache_bytes", page_cache_bytes, units="bytes")
    ep = _as("epochs", epochs)
    validation.number("epochs", ep.values, minimum=1)
    md = _as(
        "metadata_latency_s", tier.latency_s if metadata_latency_s is None else metadata_latency_s, units="s"
    )
    rl = _as("read_latency_s", read_latency_s, units="s")
    if metadata_rate != math.inf:
        validation.positive("metadata_rate", metadata_rate, units="opens/s")
    readers = rpn * n
    sharing = readers if (tier.scope == "shared" and contention) else (rpn if contention else 1.0)
    bw = np.minimum(tier.client_bandwidth_gbs, tier.bandwidth_gbs / sharing)  # GB/s

    if dataset_bytes is None:
        data = xr.DataArray(math.inf)
    else:
        data = _as("dataset_bytes", dataset_bytes, positive=True, units="bytes")
    opens = _opens_per_sample(layout, s, data, readers, file_bytes)
    open_time = np.maximum(md, readers * th / metadata_rate)
    t_meta = opens * open_time / th
    t_miss = t_meta + rl / th + s / (bw * 1e9)

    t_hit, hit = _page_cache(s, rpn, th, data, n, cache, ep)
    t_sample = hit * t_hit + (1 - hit) * t_miss
    eff = s / t_sample / 1e9
    ds = xr.Dataset(
        {
            "readers": readers,
            "bandwidth_reader": bw,
            "opens_per_sample": opens,
            "open_time": open_time,
            "time_metadata": t_meta,
            "time_sample_miss": t_miss,
            "hit_ratio": hit,
            "time_sample": t_sample,
            "time_io": b * t_sample,
            "effective_bandwidth_reader": eff,
            "effective_bandwidth": eff * readers,
        }
    )
    ds = _units(ds)
    ds.attrs.update(
        source=PREDICTED_SOURCE + " (data I/O)",
        kind="predicted",
        storage=tier.name,
        storage_scope=tier.scope,
        layout=layout,
        title=f"data I/O: {layout} on {tier.name}",
    )
    return ds


def _opens_per_sample(
    layout: str, s: xr.DataArray, data: xr.DataArray, readers: xr.DataArray, file_bytes: object
) -> xr.DataArray:
    """Files opened per sample read: one per sample (small files), one per shard, or one per reader
    and epoch (LMDB)."""
    if layout == "small_files":
        return xr.ones_like(s)
    elif layout == "sharded":
        fb = _as("file_bytes", file_bytes, positive=True, units="bytes")
        return np.minimum(1.0, s / fb)
    else:  # lmdb: each reader opens the database once per epoch
        samples_per_reader = data / s / readers
        return xr.where(np.isfinite(samples_per_reader), 1.0 / np.maximum(samples_per_reader, 1.0), 0.0)


def _page_cache(
    s: xr.DataArray,
    rpn: xr.DataArray,
    th: xr.DataArray,
    data: xr.DataArray,
    n: xr.DataArray,
    cache: xr.DataArray,
    ep: xr.DataArray,
) -> tuple[xr.DataArray, xr.DataArray]:
    """A sample's read time from the page cache (s), and the share of reads it serves: the warm
    part of each node's share of the data, after the first epoch."""
    cache_tier = catalog.storage("page-cache")
    bw_cache = np.minimum(cache_tier.client_bandwidth_gbs, cache_tier.bandwidth_gbs / rpn)
    t_hit = s / (bw_cache * 1e9) + cache_tier.latency_s / th
    per_node = data / n
    warm = xr.where(per_node > 0, np.minimum(1.0, cache / per_node), 1.0)
    hit = warm * (ep - 1) / ep
    return t_hit, hit


def io_bound_gpus(
    time_compute,
    storage: str | catalog.StorageTier,
    *,
    gpus=None,
    gpus_per_node: int = 8,
    **io_options,
) -> xr.DataArray:
    """Smallest GPU count at which the read time per step exceeds ``time_compute`` (s per step):
    from there on prefetching can no longer hide I/O and it dominates the step (seed 003's question).

    ``time_compute`` is a number, a DataArray (e.g. ``predict(...)["time_compute"]``) or a dataset
    from :func:`dlexplore.predict` (its ``time_compute`` is used). ``gpus`` are the candidate
    counts (default powers of two, 1 to 2**20); one reader per GPU, ``gpus_per_node`` per node.
    Other keywords go to :func:`io_model` (``sample_bytes``, ``batch_size``, ``layout``, ...; sweeps
    broadcast). NaN where I/O never dominates.
    """
    if isinstance(time_compute, xr.Dataset):
        time_compute = time_compute["time_compute"]
    tc = (
        time_compute
        if isinstance(time_compute, xr.DataArray)
        else xr.DataArray(validation.nonnegative("time_compute", time_compute, units="s"))
    )
    validation.nonnegative("time_compute", tc.values, units="s")
    validation.gpu_count("gpus_per_node", gpus_per_node)
    cand = np.asarray(gpus if gpus is not None else 2 ** np.arange(21), dtype=float)
    if cand.ndim != 1:
        raise DlexploreError("gpus must be a 1-D sequence of GPU counts")
    validation.gpu_count("gpus", cand)
    cand = np.sort(cand)
    rpn = np.minimum(cand, float(gpus_per_node))
    # fractional nodes keep readers = gpus exactly when the last node is partly filled
    nodes = cand / rpn
    dim = "gpus"
    ds = io_model(
        storage,
        readers_per_node=xr.DataArray(rpn, dims=dim, coords={dim: cand}),
        nodes=xr.DataArray(nodes, dims=dim, coords={dim: cand}),
        **io_options,
    )
    tc = tc.drop_vars([c for c in tc.coords if c == dim]) if dim in tc.coords and dim not in tc.dims else tc
    exceeds = ds["time_io"] > tc
    found = exceeds.any(dim)
    first = exceeds.argmax(dim)
    out = xr.where(found, xr.DataArray(cand, dims="_i")[first], np.nan)
    out = out.drop_vars([c for c in out.coords if c == dim], errors="ignore")
    units, long = IO_VARIABLES["io_bound_gpus"]
    out.attrs.update(units=units, long_name=long, source=ds.attrs["source"])
    return out.rename("io_bound_gpus")


@dataclass(frozen=True)
class DLIOWorkload:
    """DLIO benchmark workload parameters (the ``dataset``, ``reader`` and ``train`` sections of a
    DLIO workload YAML; names as in DLIO's ``ConfigArguments``).

    record_length: bytes per sample; num_files_train: files; num_samples_per_file: samples per
    file; batch_size: samples per step per rank; read_threads: loader workers per rank;
    computation_time: emulated compute per step, s; epochs: epochs.
    """

    record_length: float
    num_files_train: int
    num_samples_per_file: int = 1
    batch_size: int = 1
    read_threads: int = 1
    computation_time: float = 0.0
    epochs: int = 1
    format: str = "npz"

    @classmethod
    def from_yaml_dict(cls, config: dict | str | os.PathLike) -> DLIOWorkload:
        """Build from a DLIO workload config: a dict (nested ``dataset``/``reader``/``train``
        sections, or flat), or a path to the YAML file when PyYAML is installed."""
        path = None
        if isinstance(config, (str, os.PathLike)):
            path = config
            try:
                import yaml
            except ImportError as err:
                raise DlexploreError(
                    "reading a DLIO YAML file needs PyYAML (pip install pyyaml); or pass the config as a dict"
                ) from err
            try:
                with open(path, encoding="utf-8") as fh:
                    config = yaml.safe_load(fh)
            except OSError as err:
                raise InputFileError(path, f"cannot read: {err.strerror}") from err
            except yaml.YAMLError as err:
                line = getattr(getattr(err, "problem_mark", None), "line", None)
                raise InputFileError(
                    path, f"not valid YAML: {err}", line=None if line is None else line + 1
                ) from err
        if not isinstance(config, dict):
            raise InputFileError(path or "<dict>", "expected a mapping with dataset/reader/train sections")
        flat: dict = {}
        for section in ("dataset", "reader", "train"):
            part = config.get(section, {})
            if isinstance(part, dict):
                flat.update(part)
        flat.update({k: v for k, v in config.items() if not isinstance(v, dict)})
        known = {f.name for f in fields(cls)}
        kwargs = {k: flat[k] for k in known if k in flat}
        where = path or "DLIO config"
        for req in ("record_length", "num_files_train"):
            if req not in kwargs:
                raise InputFileError(where, f"missing {req!r} (in the 'dataset' section)")
        for k, v in kwargs.items():
            if k == "format":
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise InputFileError(where, f"{k} must be a number >= 0, got {v!r}")
        return cls(**kwargs)

    @property
    def dataset_bytes(self) -> float:
        """Training data set size, bytes."""
        return float(self.record_length) * self.num_files_train * self.num_samples_per_file

    @property
    def layout(self) -> str:
        """``small_files`` with one sample per file, else ``sharded``."""
        return "small_files" if self.num_samples_per_file == 1 else "sharded"

    def io_model(self, storage: str | catalog.StorageTier, **options) -> xr.Dataset:
        """:func:`io_model` for this workload, plus ``time_compute`` and the predicted accelerator
        utilisation ``au`` (%: ``computation_time / max(computation_time, time_io)``, prefetching
        hiding I/O up to the compute time, as DLIO's AU metric measures)."""
        kw = dict(
            layout=self.layout,
            sample_bytes=float(self.record_length),
            file_bytes=float(self.record_length) * self.num_samples_per_file,
            batch_size=self.batch_size,
            io_threads=max(1, self.read_threads),
            dataset_bytes=self.dataset_bytes,
            epochs=self.epochs,
        )
        kw.update(options)
        ds = io_model(storage, **kw)
        tc = float(self.computation_time)
        ds["time_compute"] = xr.DataArray(
            tc, attrs=dict(zip(("units", "long_name"), IO_VARIABLES["time_compute"], strict=True))
        )
        step = np.maximum(tc, ds["time_io"])
        ds["au"] = xr.where(step > 0, 100.0 * tc / step, 100.0)
        ds["au"].attrs.update(units="%", long_name="predicted accelerator utilisation (DLIO AU)")
        return ds
