"""Measured points as the model sees them: :func:`as_points` reads any measured source into a
dataset along ``point``, and the names a point's cells may take are made canonical (:func:`canonical`,
:func:`catalog_link`), so that points and keywords match however a table spells them. The rules by
which a point becomes the model's arguments are in :mod:`dlexplore.fit.compare`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from .. import catalog
from ..errors import DlexploreError
from ..model.comm import normalize_algorithm, normalize_collective
from ..model.compute import normalize_precision
from ..model.operators import normalize_fusion, normalize_layout
from ..model.step_grid import COMM_PARAMETERS

#: The model's numeric parameters a point model can take per point (calibration fits these).
PARAMETER_NAMES = (
    "compute_efficiency",
    "bandwidth",
    "latency",
    "intra_bandwidth",
    "intra_latency",
    "overlap",
    "gamma",
    "servers",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "unaligned_efficiency",
    *COMM_PARAMETERS,
)


#: Parameters whose default is the same for every point (data/catalog/defaults.csv).
GLOBAL_DEFAULTS = PARAMETER_NAMES[PARAMETER_NAMES.index("memory_efficiency") :]


#: Keywords that fill in a point's own setting only where the point does not give it.
POINT_KEYWORDS = (
    "workload",
    "gpu",
    "network",
    "precision",
    "algorithm",
    "gpus_per_node",
    "framework",
    "transport",
    "servers_colocated",
    "host_staging",
    "grad_accum",
    "nics_per_node",
    "seq",
    "layout",
    "fusion",
)


#: Keywords passed to every point's prediction as they are.
FIXED_KEYWORDS = (
    "intra_link",
    "optimizer",
    "bucket_size",
    "storage",
    "io_threads",
    "prefetch",
    "workspace",
    "attention",
)


#: Coordinates :func:`compare` does not match: model settings that tables record as free labels.
SETTINGS = ("framework", "transport", "servers_colocated", "host_staging", "attention")


#: Framework labels the model runs as PyTorch DDP's bucketed allreduce (no Horovod cycle).
MODEL_FRAMEWORKS = {"horovod": "horovod"}


FROM_POINTS = ("gpus", "batch_size", "bytes", "collective")


#: What :func:`dlexplore.predict` returns, so that a table none of whose points the model covers
#: still gets every variable (all NaN).
STEP_VARIABLES = (
    "step_time",
    "throughput",
    "efficiency",
    "time_forward",
    "time_backward",
    "time_optimizer",
    "time_compute",
    "time_comm",
    "time_comm_exposed",
    "time_io",
    "time_io_exposed",
    "comm_bytes",
    "n_buckets",
    "mem_params",
    "mem_grads",
    "mem_optimizer",
    "mem_activations",
    "mem_workspace",
    "mem_total",
    "mem_capacity",
    "fits",
)


UNSAID = ("", "none", "unknown", "nan")


#: Measured variables in the order a comparison prefers them.
VARIABLE_ORDER = ("throughput", "efficiency", "time", "busbw", "algbw", "step_time")


#: The model's default intra-node link (dlexplore.predict's intra_link).
DEFAULT_INTRA_LINK = "PCIe3"


def as_points(source: str | Path | xr.Dataset) -> xr.Dataset:
    """A measured dataset along ``point``: a bundled name, a CSV path, nccl-tests output, or a dataset.

    nccl-tests results (dims ``bytes`` and ``placement``) become one point per size and placement,
    with ``setup`` the placement (``out-of-place``, ``in-place``), ``algorithm``, ``gpu`` and
    ``network`` ``unknown``.
    """
    if isinstance(source, (str, Path)):
        from .. import measured

        source = measured.load(source)
    if not isinstance(source, xr.Dataset):
        raise DlexploreError(
            f"expected a measured dataset, a dataset name or a file path, got {type(source).__name__}"
        )
    if "point" in source.dims:
        return source
    if "bytes" in source.dims and "collective" in source.coords:
        return _nccl_tests_points(source)
    raise DlexploreError(
        f"expected a measured dataset along 'point' (dlexplore.measured.load), got dims {dict(source.sizes)}"
    )


def _nccl_tests_points(ds: xr.Dataset) -> xr.Dataset:
    keep = [v for v in ("time", "algbw", "busbw") if v in ds.data_vars]
    flat = ds[keep]
    if "placement" not in flat.dims:
        flat = flat.expand_dims(placement=["out-of-place"])
    stacked = flat.stack(point=("bytes", "placement")).reset_index("point")
    n = stacked.sizes["point"]
    coords = {
        "collective": ("point", np.full(n, str(ds["collective"].values), dtype=object)),
        "gpu": ("point", np.full(n, "unknown", dtype=object)),
        "network": ("point", np.full(n, "unknown", dtype=object)),
        "gpus": ("point", np.full(n, int(ds["gpus"].values), dtype=np.int64)),
        "algorithm": ("point", np.full(n, "unknown", dtype=object)),
        "bytes": ("point", stacked["bytes"].values.astype(np.int64)),
        "setup": ("point", stacked["placement"].values.astype(str).astype(object)),
    }
    out = xr.Dataset({v: ("point", stacked[v].values, dict(ds[v].attrs)) for v in keep}, coords=coords)
    out["gpus"].attrs.update(units="count", long_name="GPUs (total devices)")
    out["bytes"].attrs.update(units="bytes", long_name="message size")
    out.attrs = {**ds.attrs, "table": "communication", "name": ds.attrs.get("name", "nccl-tests")}
    return out


def table_kind(ds: xr.Dataset) -> str:
    return "communication" if "collective" in ds.coords else "training"


def points_frame(ds: xr.Dataset) -> pd.DataFrame:
    """The point coordinates as a DataFrame (object strings, numbers as they are)."""
    columns = {}
    for name in ds.coords:
        if name == "point" or ds[name].dims != ("point",):
            continue
        values = ds[name].values
        columns[name] = values.astype(object) if values.dtype.kind in "OUS" else values
    return pd.DataFrame(columns)


# Not cached: a catalog file the user loads later must be seen (and lookups take microseconds).
def catalog_link(name: str) -> catalog.Link | None:
    if str(name).strip().lower() in UNSAID:
        return None
    try:
        return catalog.network(name)
    except DlexploreError:
        return None


def intra_link_of(name: str) -> catalog.Link:
    """The link a point's ``intra_link`` names, which must be one inside a node."""
    link = catalog.network(name)
    if link.kind != "intra":
        raise DlexploreError(
            f"intra_link {name!r} is a network between nodes; expected a link inside a node "
            "such as NVLink3 or PCIe4 (the network column names the one between nodes)"
        )
    return link


def layout_of(value: object) -> str:
    """A point's CNN memory layout (:data:`dlexplore.model.operators.LAYOUTS`), nhwc (the model's
    default) where the point does not say."""
    text = str(value).strip()
    return "nhwc" if text.lower() in UNSAID else normalize_layout(text)


def fusion_of(value: object) -> str:
    """A point's CNN batch-norm fusion (:data:`dlexplore.model.operators.FUSIONS`), none (the
    model's default) where the point does not say."""
    text = str(value).strip()
    return "none" if text.lower() in UNSAID else normalize_fusion(text)


def layouts(values: np.ndarray) -> np.ndarray:
    """:func:`layout_of` of each point."""
    return np.array([layout_of(v) for v in values], dtype=object)


def fusions(values: np.ndarray) -> np.ndarray:
    """:func:`fusion_of` of each point."""
    return np.array([fusion_of(v) for v in values], dtype=object)


def canonical(kind: str, value: str) -> str:
    """A name as the model writes it (catalog ids, normalised labels), else the lowered text."""
    text = str(value).strip()
    try:
        if kind == "workload":
            return catalog.workload(text).name
        if kind == "gpu":
            return catalog.gpu(text).name
        if kind in ("network", "intra_link"):
            return catalog.network(text).name
        if kind == "precision":
            return normalize_precision(text)
        if kind == "collective":
            return normalize_collective(text)
        if kind == "algorithm":
            return normalize_algorithm(text, "allreduce")
        if kind == "layout":
            return layout_of(text)
        if kind == "fusion":
            return fusion_of(text)
    except DlexploreError:
        pass
    return text.lower()


def is_blank(value: Any) -> bool:
    """A cell that names no group: None, NaN, pandas' NA, or a string of blanks ("none" and "nan"
    written out are values: a table's ``fusion`` or ``algorithm`` says ``none``)."""
    if isinstance(value, str):
        return not value.strip()
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # an array or another object: a value
        return False
