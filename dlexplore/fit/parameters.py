"""The parameters a calibration fits (:data:`PARAMETERS`: units, bounds, starting values), and what
the calibration modules share about measured tables: which columns identify a point, which measured
variable is fitted, and which settings a calibrated prediction passes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd


class CalibrationWarning(UserWarning):
    """A parameter that the chosen points cannot determine, or points that cannot be used."""


@dataclass(frozen=True)
class ParameterSpec:
    units: str
    lower: float
    upper: float
    typical: float  # starting value and scale when there is no default
    long_name: str
    integer: bool = False


#: The parameters :func:`calibrate` fits: units, bounds, and meaning.
PARAMETERS: dict[str, ParameterSpec] = {
    "compute_efficiency": ParameterSpec("1", 1e-4, 1.0, 0.5, "fraction of peak FLOP/s achieved by compute"),
    "bandwidth": ParameterSpec("GB/s", 1e-6, 1e6, 10.0, "network bandwidth per link and direction"),
    "latency": ParameterSpec("s", 0.0, math.inf, 5e-6, "network latency per message"),
    "intra_bandwidth": ParameterSpec("GB/s", 1e-6, 1e6, 50.0, "intra-node link bandwidth per direction"),
    "intra_latency": ParameterSpec("s", 0.0, math.inf, 1e-6, "intra-node link latency per message"),
    "overlap": ParameterSpec("1", 0.0, 1.0, 1.0, "fraction of communication allowed to overlap backward"),
    "gamma": ParameterSpec("s/byte", 0.0, math.inf, 1e-11, "reduction cost per byte"),
    "servers": ParameterSpec("count", 1.0, math.inf, 1.0, "parameter servers", integer=True),
    "memory_efficiency": ParameterSpec(
        "1", 1e-3, 1.0, 0.8, "fraction of GPU memory bandwidth reached by memory-bound kernels"
    ),
    "kernel_time": ParameterSpec("s", 0.0, 1e-3, 5e-6, "fixed time of one GPU kernel"),
    "winograd_speedup": ParameterSpec(
        "1", 1.0, 4.0, 1.5, "FLOP saving of Winograd's algorithm on 3x3 convolutions (vector units)"
    ),
    "flash_efficiency": ParameterSpec(
        "1", 1e-3, 1.0, 0.6, "fraction of peak a flash-attention kernel reaches"
    ),
    "unaligned_efficiency": ParameterSpec(
        "1", 1e-3, 1.0, 0.4, "share of its aligned rate a GEMM with operand rows aligned to 4-8 bytes reaches"
    ),
    "tcp_efficiency": ParameterSpec(
        "1", 1e-3, 1.0, 0.5, "fraction of a network's bandwidth collectives reach over kernel TCP"
    ),
    "ps_efficiency": ParameterSpec(
        "1", 1e-3, 1.0, 0.5, "fraction of a link's bandwidth parameter-server transfers reach"
    ),
    "cycle_time": ParameterSpec("s", 0.0, 1.0, 5e-3, "Horovod's cycle time"),
    "negotiation_time": ParameterSpec(
        "s", 0.0, 1e-2, 1e-5, "Horovod's negotiation time per tensor and tree level"
    ),
    "host_bandwidth": ParameterSpec("GB/s", 0.05, 500.0, 20.0, "host memory traffic one CPU core sustains"),
    "server_bandwidth": ParameterSpec(
        "GB/s", 0.05, 500.0, 20.0, "host memory traffic of a parameter server's CPU"
    ),
    "tp_overlap": ParameterSpec(
        "1", 0.0, 1.0, 0.5, "fraction of tensor-parallel communication allowed to hide behind GEMMs"
    ),
}


TRAINING_ONLY = (
    "compute_efficiency",
    "overlap",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "unaligned_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_bandwidth",
    "server_bandwidth",
    "tp_overlap",
)


#: dlexplore.predict's arguments: the settings Calibration.predict passes on.
PREDICT_ARGUMENTS = (
    "workload",
    "gpu",
    "network",
    "gpus",
    "batch_size",
    "bandwidth",
    "latency",
    "gpus_per_node",
    "nics_per_node",
    "intra_link",
    "intra_bandwidth",
    "intra_latency",
    "algorithm",
    "servers",
    "precision",
    "optimizer",
    "compute_efficiency",
    "bucket_size",
    "overlap",
    "gamma",
    "storage",
    "io_threads",
    "prefetch",
    "workspace",
    "buckets",
    "grad_accum",
    "seq",
    "attention",
    "layout",
    "fusion",
    "memory_efficiency",
    "kernel_time",
    "winograd_speedup",
    "flash_efficiency",
    "unaligned_efficiency",
    "framework",
    "transport",
    "servers_colocated",
    "tcp_efficiency",
    "ps_efficiency",
    "cycle_time",
    "negotiation_time",
    "host_staging",
    "host_bandwidth",
    "server_bandwidth",
    "operators",
)


#: dlexplore.predict_parallel's settings a hybrid calibration's points can share.
HYBRID_ARGUMENTS = (
    "gpu",
    "network",
    "gpus_per_node",
    "intra_link",
    "precision",
    "optimizer",
    "micro_batch",
    "recompute",
    "schedule",
    "virtual_stages",
    "attention",
    "memory_convention",
    "sequence_parallel",
    "zero",
    "tp",
    "pp",
    "seq",
)


IDENTIFYING = {
    "training": (
        "workload",
        "gpu",
        "network",
        "precision",
        "algorithm",
        "gpus",
        "gpus_per_node",
        "batch_size",
        "grad_accum",
        "seq",
        "baseline_gpus",
        "setup",
    ),
    "communication": ("collective", "algorithm", "gpu", "network", "gpus", "gpus_per_node", "bytes", "setup"),
}


MEASURED_ORDER = {"training": ("throughput", "efficiency"), "communication": ("time", "busbw", "algbw")}


MEASURED_UNITS = {"throughput": "samples/s", "efficiency": "1", "time": "s", "busbw": "GB/s", "algbw": "GB/s"}


_PROBE = 0.05  # relative move of a parameter in the identifiability check


_ZERO = 1e-9  # smaller changes of log(prediction) count as none


_DEPENDENT = 1e-6  # relative size of what a column adds to the span of the ones before it


def shared_settings(rows: pd.DataFrame, table: str) -> dict[str, Any]:
    """The settings a group of points shares, as defaults for :meth:`Calibration.predict`: every
    setting all its points share; the algorithm and GPUs per node of its multi-GPU points (a table
    of one server's GPUs gets the server's GPU count); its GPU counts and message sizes."""
    out: dict[str, Any] = {}
    gpus = rows["gpus"].to_numpy(dtype=np.int64)
    multi = gpus > 1
    for name in rows.columns:
        if name in ("gpus", "bytes"):
            continue
        values = rows[name].to_numpy(dtype=object)
        if name in ("algorithm", "gpus_per_node") and multi.any():
            values = values[multi]
        unique = pd.unique(pd.Series(values, dtype=object))
        if len(unique) == 1 and unique[0] != "":
            value = unique[0]
            out[name] = value.item() if hasattr(value, "item") else value
    per_node = rows["gpus_per_node"].to_numpy(dtype=np.int64)
    if "gpus_per_node" not in out and np.all(gpus <= per_node):
        out["gpus_per_node"] = int(per_node.max())  # every point inside one server
    out["gpus"] = sorted(set(int(g) for g in gpus))
    if "bytes" in rows:
        out["bytes"] = sorted(set(int(b) for b in rows["bytes"]))
    return out
