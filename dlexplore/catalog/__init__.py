"""Catalogs of GPUs, links and networks, storage tiers and workloads.

Every entry carries its ``source``. Names are case-insensitive ids with aliases; an unknown name
raises :class:`~dlexplore.errors.UnknownNameError` suggesting the nearest ids. Users extend the
catalogs from their own files with :func:`load_file` (or the ``DLEXPLORE_CATALOG`` environment
variable, a list of files separated by ``os.pathsep``) without editing the package.
"""

from ._types import GPU, PRECISIONS, Layer, Link, StorageTier, Workload
from .defaults import ModelDefault, architecture_defaults, model_default, model_defaults
from .gemm import (
    GemmEfficiency,
    fitted_plateaus,
    gemm_efficiency,
    gemm_measurements,
    gemm_plateau,
    published_plateaus,
)
from .hardware import GPUS, NETWORKS, STORAGE, gpu, gpus, network, networks, storage, storages
from .user import load_file
from .workloads import WORKLOADS, transformer, with_sequence, workload, workloads

__all__ = [
    "GPU",
    "Link",
    "StorageTier",
    "Layer",
    "Workload",
    "PRECISIONS",
    "GPUS",
    "NETWORKS",
    "STORAGE",
    "WORKLOADS",
    "gpu",
    "gpus",
    "network",
    "networks",
    "storage",
    "storages",
    "workload",
    "workloads",
    "transformer",
    "load_file",
    "gemm_efficiency",
    "gemm_measurements",
    "gemm_plateau",
    "fitted_plateaus",
    "published_plateaus",
    "GemmEfficiency",
    "model_defaults",
    "architecture_defaults",
    "model_default",
    "ModelDefault",
    "with_sequence",
]
