"""What a trace says about the run that made it, and the run's measured point.

A user's trace is a measurement of one configuration: so many ranks, a batch, a model, a GPU, a
link. :func:`infer_setup` reads what the trace can tell of that configuration and says, for each
setting, how it was found or why it could not be:

- ``gpus``: the trace's world size;
- ``workload``: the parameter count from the collector's ``manifest.json`` beside the files, else
  from the gradient bytes the allreduces carry (the larger of the per-step sum and the sum of the
  distinct message sizes: both undercount when the trace misses an operation, never overcount),
  divided by the gradients' element size; a catalog workload with that parameter count (within
  0.5%), else a workload made from the trace (:func:`trace_workload`);
- ``batch_size`` (per rank): the trace's metadata or the manifest;
- ``gpu``: the devices the trace names (``deviceProperties``), by catalog name or family and
  memory; a run on the CPU has none;
- ``precision``: the manifest's dtype, else the GPU's matrix kernels (``bf16``, ``h884``/``fp16``,
  ``tf32``, ``sgemm``), else the gradients' dtype;
- ``algorithm``: gloo's allreduce runs a ring; NCCL's is NCCL's own choice;
- ``gpus_per_node``: every rank on one host when the manifest's rendezvous was on ``127.0.0.1``.

The network between nodes is never in a trace: it is always asked. The run's measured point at that
configuration is :mod:`dlexplore.fit.trace_point`'s. Everything is read through the public
:class:`~dlexplore.traces.Trace` API.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import catalog
from ..catalog.workloads import workload_from_dict
from ..errors import DlexploreError
from ..traces import Trace, load_trace

__all__ = [
    "Inferred",
    "TraceSetup",
    "infer_setup",
    "trace_workload",
    "load_traces",
    "SETTINGS",
]

#: The explorer settings a trace may say something of, in the order the explorer reports them.
SETTINGS = ("gpus", "workload", "batch_size", "gpu", "precision", "algorithm", "gpus_per_node", "network")
#: A catalog workload stands for the trace's model when their parameter counts agree this well.
PARAMS_TOLERANCE = 0.005
#: Steps longer than this many times the median step are left out of the measured point.
OUTLIER_STEP = 2.0

_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "torch.float32": 4,
    "c10::float": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "c10::half": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
}
_DTYPE_PRECISION = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
# GPU matrix kernels by the precision in their names (cuBLAS, cuDNN, CUTLASS and rocBLAS spellings).
_KERNEL_PRECISION = (
    ("bf16", re.compile(r"bf16|bfloat16", re.I)),
    ("fp16", re.compile(r"fp16|f16|h884|h1688|h16816|hgemm|__half|<half", re.I)),
    ("tf32", re.compile(r"tf32|s1688gemm|s16816gemm", re.I)),
    ("fp32", re.compile(r"sgemm|<float|f32f32", re.I)),
)
_MATRIX_KERNEL = re.compile(r"gemm|conv|cudnn|cutlass|xmma|wgrad|dgrad|fprop|winograd|mfma", re.I)
_FAMILIES = ("K20X", "K40", "K80", "P100", "V100", "A100", "H100", "H200", "MI250X", "1080")


@dataclass(frozen=True)
class Inferred:
    """One setting of the traced run: its ``value`` (None when the trace does not say) and ``how``
    it was found, or why not and what to do."""

    value: Any
    how: str

    @property
    def known(self) -> bool:
        return self.value is not None


@dataclass
class TraceSetup:
    """The configuration of a traced run as far as the trace tells it (module docstring)."""

    label: str
    settings: dict[str, Inferred]
    parameters: int | None = None
    workload: catalog.Workload | None = None
    source: str = ""

    def value(self, name: str, default: Any = None) -> Any:
        """The setting's value, or ``default`` when the trace does not say."""
        item = self.settings.get(name)
        return default if item is None or item.value is None else item.value

    @property
    def inferred(self) -> dict[str, Any]:
        """The settings the trace gave, by name."""
        return {k: v.value for k, v in self.settings.items() if v.known}

    @property
    def asked(self) -> dict[str, str]:
        """The settings the trace could not give, with why."""
        return {k: v.how for k, v in self.settings.items() if not v.known}

    def describe(self) -> list[str]:
        """One line per setting: ``"batch_size = 32 (from manifest.json)"``."""
        out = []
        for name in SETTINGS:
            item = self.settings.get(name)
            if item is None:
                continue
            shown = getattr(item.value, "name", item.value)
            out.append(
                f"{name} = {shown} ({item.how})" if item.known else f"{name}: not in the trace ({item.how})"
            )
        return out


# --- loading --------------------------------------------------------------------------------------


def load_traces(spec: Any) -> list[Trace]:
    """Traces from ``spec``: a :class:`~dlexplore.traces.Trace`, a path (file, folder of rank
    files, glob) or a list of them. A list of paths whose items are folders, or holds Traces, is
    several runs (one trace each); any other list is the rank files of one run."""
    if isinstance(spec, Trace):
        return [spec]
    if isinstance(spec, (str, Path)):
        return [load_trace(spec)]
    items = list(spec)
    if not items:
        raise DlexploreError("no trace given: expected a trace file, a folder of rank files or a glob")
    if all(isinstance(i, Trace) or Path(i).is_dir() or any(c in str(i) for c in "*?[") for i in items):
        return [i if isinstance(i, Trace) else load_trace(i) for i in items]
    return [load_trace(items)]


# --- what the trace says -----------------------------------------------------------------------


def _manifest(trace: Trace) -> dict[str, Any]:
    """The collector's manifest.json beside the trace's files, or {}."""
    if not trace.files:
        return {}
    path = Path(trace.files[0]).parent / "manifest.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DlexploreError(f"{path}: not a readable manifest ({err})") from None
    if not isinstance(data, dict):
        raise DlexploreError(f"{path}: expected a JSON object (dlexplore collect's manifest)")
    return data


def _label(trace: Trace) -> str:
    """The run's name: its folder's for a set of rank files, the file's own for one file."""
    if not trace.files:
        return trace.format
    first = Path(trace.files[0])
    stem = first.name.split(".")[0]
    # rank files (rank0.json.gz, rank-3.pt.trace.json) are named by their run's folder
    if len(trace.files) > 1 or re.fullmatch(r"(rank|worker)[-_]?\d+", stem, re.I):
        return first.parent.name or first.name
    return stem or first.name


def _devices(trace: Trace) -> list[dict]:
    out = []
    for rank in (trace.meta.get("ranks") or {}).values():
        if isinstance(rank, dict):
            out.extend(d for d in (rank.get("deviceProperties") or []) if isinstance(d, dict))
    return out


def _gpu(trace: Trace) -> Inferred:
    devices = _devices(trace)
    if not devices:
        if str(trace.meta.get("device", "")).lower() == "cpu":
            return Inferred(
                None, "the run used the CPU: choose the GPU to predict (calibrating carries its compute over)"
            )
        return Inferred(None, "the trace names no device: choose the GPU")
    name = str(devices[0].get("name", ""))
    memory = float(devices[0].get("totalGlobalMem") or math.nan)
    for candidate in (name, re.sub(r"^(NVIDIA|Tesla|AMD)\s+", "", name), name.replace(" ", "-")):
        try:
            return Inferred(catalog.gpu(candidate).name, f"the trace's device '{name}'")
        except DlexploreError:
            continue
    family = next((f for f in _FAMILIES if f.lower() in name.lower()), None)
    if family is not None:
        same = [g for g in catalog.GPUS.names() if family.lower() in g.lower()]
        if same:
            if np.isfinite(memory):
                best = min(same, key=lambda g: abs(catalog.gpu(g).memory_bytes - memory))
                gib = memory / 2**30
                how = f"the trace's device '{name}' ({gib:.0f} GiB): the catalog's {family} of that memory"
            else:
                best, how = same[0], f"the trace's device '{name}': the catalog's first {family}"
            return Inferred(catalog.gpu(best).name, how)
    return Inferred(
        None,
        f"the trace's device '{name}' is not in the catalog: choose the nearest, or add it (catalog file)",
    )


def _dtype_bytes(trace: Trace, manifest: dict) -> tuple[int, str]:
    model = manifest.get("model") or {}
    dtype = str(model.get("dtype", "")).lower()
    if dtype in _DTYPE_BYTES:
        return _DTYPE_BYTES[dtype], f"{dtype} gradients (manifest.json)"
    comm = trace.events[trace.events["category"].astype(str) == "communication"]
    names = comm["dtype"].astype(str).str.lower()
    names = names[names.isin(list(_DTYPE_BYTES))]
    if len(names):
        common = names.value_counts().index[0]
        return _DTYPE_BYTES[common], f"{common} gradients (the collectives' dtype)"
    return 4, "gradient element size assumed 4 bytes (fp32): the trace gives no dtype"


def _gradient_bytes(trace: Trace) -> float:
    """Bytes the allreduces of one step carry (module docstring: the larger of two lower bounds)."""
    ev = trace.events
    mask = (
        (ev["category"].astype(str) == "communication")
        & (ev["collective"].astype(str) == "allreduce")
        & np.isfinite(ev["bytes"].to_numpy(dtype=float, na_value=np.nan))
    )
    ops = ev[mask]
    if ops.empty:
        return math.nan
    per_step = ops.groupby(["rank", "step"], observed=True)["bytes"].sum()
    distinct = float(np.unique(ops["bytes"].to_numpy(float)).sum())
    return max(float(per_step.max()) if len(per_step) else 0.0, distinct)


def trace_workload(
    label: str, parameters: int, *, input_bytes: float = 0.0, spec: str | None = None
) -> tuple[catalog.Workload, str]:
    """The workload a traced model stands for, and how it was chosen: ``spec`` (a catalog id or
    builder spec the manifest gives) when its parameter count agrees; else a catalog workload
    with ``parameters`` within :data:`PARAMS_TOLERANCE`; else one made from the trace: one layer of
    ``parameters`` parameters and 2 forward FLOPs per parameter per sample (exact for fully
    connected layers, low for convolutions, whose weights are reused across the image: the
    calibration's compute efficiency absorbs the difference, as it is fitted to the measured time
    per sample), no activation memory (the trace does not say)."""
    if spec:
        wl = catalog.workload(spec)
        if abs(wl.params - parameters) <= PARAMS_TOLERANCE * parameters:
            return wl, f"the manifest's model {spec}"
    close = [
        name
        for name in catalog.WORKLOADS.names()
        if abs(catalog.workload(name).params - parameters) <= PARAMS_TOLERANCE * parameters
    ]
    if close:
        best = min(close, key=lambda n: abs(catalog.workload(n).params - parameters))
        return catalog.workload(best), f"{parameters:,} parameters: the catalog's {best}"
    wl = workload_from_dict(
        {
            "name": f"traced-{label}",
            "params": int(parameters),
            "flops_per_sample": 2.0 * parameters,
            "activation_bytes_per_sample": 0.0,
            "input_bytes_per_sample": float(input_bytes),
            "description": f"the traced model: {parameters:,} parameters (2 FLOPs per parameter per sample)",
            "source": f"inferred from the trace {label}",
        },
        origin=f"trace {label}",
    )
    return wl, (
        f"{parameters:,} parameters, no catalog workload of that size: a model of 2 FLOPs per "
        "parameter per sample (calibrate to fit its time per sample)"
    )


def _workload(
    trace: Trace, manifest: dict, label: str
) -> tuple[Inferred, int | None, catalog.Workload | None]:
    model = manifest.get("model") or {}
    data = manifest.get("data") or {}
    count, how = None, ""
    if isinstance(model.get("parameters"), int) and model["parameters"] > 0:
        count, how = int(model["parameters"]), "manifest.json"
    else:
        nbytes = _gradient_bytes(trace)
        if np.isfinite(nbytes) and nbytes > 0:
            size, dtype_how = _dtype_bytes(trace, manifest)
            count = int(round(nbytes / size))
            how = f"{nbytes:,.0f} bytes of allreduce per step, {dtype_how}"
    if count is None:
        return (
            Inferred(None, "no allreduce with a message size and no manifest: choose the workload"),
            None,
            None,
        )
    shape = data.get("sample_shape")
    size, _ = _dtype_bytes(trace, manifest)
    input_bytes = float(np.prod(shape)) * size if isinstance(shape, list) and shape else 0.0
    spec = model.get("workload") if isinstance(model.get("workload"), str) else None
    wl, chosen = trace_workload(label, count, input_bytes=input_bytes, spec=spec)
    return Inferred(wl.name, f"{chosen} ({how})"), count, wl


def _batch(trace: Trace, manifest: dict) -> Inferred:
    for key in ("batch_size_per_rank", "batch_size"):
        value = trace.meta.get(key)
        if isinstance(value, (int, np.integer)) and value > 0:
            return Inferred(int(value), "the trace's metadata")
    for value in (manifest.get("batch_size_per_rank"), (manifest.get("arguments") or {}).get("batch_size")):
        if isinstance(value, int) and value > 0:
            return Inferred(value, "manifest.json")
    return Inferred(None, "the trace does not record its batch: set the batch per GPU")


def _precision(trace: Trace, manifest: dict) -> Inferred:
    dtype = str((manifest.get("model") or {}).get("dtype", "")).lower()
    if dtype in _DTYPE_PRECISION:
        return Inferred(_DTYPE_PRECISION[dtype], f"{dtype} model (manifest.json)")
    ev = trace.events
    names = ev.loc[ev["category"].astype(str) == "compute", "name"].astype(str)
    names = names[names.str.contains(_MATRIX_KERNEL)]
    if len(names):
        counts = {p: int(names.str.contains(rx).sum()) for p, rx in _KERNEL_PRECISION}
        best = max(counts, key=lambda p: counts[p])
        if counts[best]:
            return Inferred(best, f"{counts[best]} of {len(names)} matrix kernels are {best}")
    comm = ev.loc[ev["category"].astype(str) == "communication", "dtype"].astype(str).str.lower()
    comm = comm[comm.isin(list(_DTYPE_PRECISION))]
    if len(comm):
        common = comm.value_counts().index[0]
        return Inferred(
            _DTYPE_PRECISION[common], f"the gradients' dtype {common} (mixed precision would reduce fp32 too)"
        )
    return Inferred(None, "no dtype in the trace: choose the precision")


def _algorithm(trace: Trace) -> Inferred:
    backend = str(trace.meta.get("backend") or "").lower()
    if backend == "gloo":
        return Inferred("ring", "gloo reduces CPU tensors with a ring")
    if backend == "nccl" or trace.format == "horovod":
        return Inferred("nccl", f"{backend or 'Horovod'}: NCCL's own choice of ring or tree")
    return Inferred(None, "the trace names no backend: choose the algorithm")


def _per_node(trace: Trace, manifest: dict, gpus: int) -> Inferred:
    master = str((manifest.get("distributed") or {}).get("master", ""))
    if master.startswith(("127.", "localhost")):
        return Inferred(gpus, f"every rank on one host (rendezvous {master})")
    return Inferred(None, "the trace does not say which ranks shared a node")


def infer_setup(trace: Trace) -> TraceSetup:
    """What ``trace`` says of its configuration (module docstring)."""
    manifest = _manifest(trace)
    label = _label(trace)
    gpus = int(trace.world_size or len(trace.ranks) or 1)
    workload, parameters, wl = _workload(trace, manifest, label)
    settings = {
        "gpus": Inferred(gpus, "the trace's world size"),
        "workload": workload,
        "batch_size": _batch(trace, manifest),
        "gpu": _gpu(trace),
        "precision": _precision(trace, manifest),
        "algorithm": _algorithm(trace),
        "gpus_per_node": _per_node(trace, manifest, gpus),
        "network": Inferred(None, "no trace names the network between nodes: choose it"),
    }
    return TraceSetup(label, settings, parameters, wl, trace.source)
