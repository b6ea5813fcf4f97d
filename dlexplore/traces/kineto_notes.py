"""What the PyTorch reader says about a trace that does not hold what its numbers seem to show.

Each warning here names the file and what in it shows the problem, so that no breakdown of such a
trace is taken at face value: a legacy profiler's export, read with Kineto's categories
(:mod:`.kineto_legacy`); a run that used a GPU but whose trace holds no GPU activity (its host
time would otherwise read as compute); a Chrome trace of another tool, whose events are all
'other' (which the breakdown counts as idle).
"""

from __future__ import annotations

import warnings

import numpy as np

from .kineto_rows import RankFile
from .schema import Trace

__all__ = ["say_what_is_missing"]


def say_what_is_missing(trace: Trace, files: list[RankFile], categories: list[str]) -> None:
    """Every warning of this module that ``trace`` (read from ``files``, whose non-empty
    categories are ``categories``) calls for."""
    _say_legacy(files)
    if trace.meta["device"] == "cpu":
        _say_gpus_without_activity(trace, files)
    _say_unknown_categories(trace, files, categories)


def _say_legacy(files: list[RankFile]) -> None:
    """A legacy profiler's export is read with Kineto's categories (:mod:`.kineto_legacy`): say so,
    and what such a file cannot hold."""
    legacy = [f for f in files if f.legacy is not None]
    if not legacy:
        return
    first, held = legacy[0], legacy[0].legacy
    assert held is not None
    more = f" (and {len(legacy) - 1} more files)" if len(legacy) > 1 else ""
    processes = '"CPU functions" and "CUDA functions"' if held.cuda_functions else '"CPU functions"'
    if held.cuda_functions:
        read_as = f"its {held.cuda_functions} CUDA functions as GPU kernels (compute)"
    elif held.flows:  # the warning after this one says what the flows show
        read_as = "with no CUDA functions (the kernels its flows point to are not in the file)"
    else:
        read_as = "with no CUDA functions, as a CPU-only trace (host work counted as compute)"
    warnings.warn(
        f"{first.path}{more}: the legacy profiler's export (torch.autograd.profiler's "
        f"export_chrome_trace: a JSON array of events on {processes}, without categories), read "
        f"with Kineto's: its {held.cpu_functions} CPU functions as host operators, {read_as}; this export "
        "records no runtime calls, copies or memsets as such",
        stacklevel=5,  # under say_what_is_missing, read
    )


def _say_unknown_categories(trace: Trace, files: list[RankFile], categories: list[str]) -> None:
    """A Chrome trace that another tool wrote (a simulator, a vendor profiler) reads as a PyTorch
    trace whose events are all 'other', which the breakdown counts as idle: say so, whether its
    events carry categories of their own or none at all. (TensorFlow's, whose events carry no
    category, is named by :class:`RankFile`; the legacy profiler's gets categories there.)"""
    events = trace.events
    if not len(events) or (events["category"] != "other").any():
        return
    if not categories:
        if all(f.foreign for f in files):
            return
        warnings.warn(
            f"{files[0].path}{f' (and {len(files) - 1} more files)' if len(files) > 1 else ''}: none "
            f'of its {len(events)} events has a category ("cat"), and it is not the legacy '
            'profiler\'s export (events on "CPU functions" / "CUDA functions"); read as a PyTorch '
            "trace, every event is 'other', which the breakdown counts as idle",
            stacklevel=5,  # under say_what_is_missing, read
        )
        return
    warnings.warn(
        f"{files[0].path}{f' (and {len(files) - 1} more files)' if len(files) > 1 else ''}: none of "
        f"its {len(events)} events has a category "
        f"PyTorch's profiler writes (its categories: {', '.join(sorted(categories)[:6])}"
        f"{' ...' if len(categories) > 6 else ''}); read as a PyTorch trace, every event is 'other', "
        "which the breakdown counts as idle",
        stacklevel=5,  # under say_what_is_missing, read
    )


def _say_gpus_without_activity(trace: Trace, files: list[RankFile]) -> None:
    """A trace of a run that used a GPU but that holds no GPU kernel is read as a CPU-only trace
    (its host work counts as compute, though it is the host's time issuing the work, not the GPU's
    compute): say so, what shows the GPU (:func:`_gpu_evidence`), and what the trace shows of why."""
    found = _gpu_evidence(trace, files)
    if found is None:
        return
    file, evidence = found
    events = trace.events
    copies = int(events["category"].isin(("memcpy", "memset")).sum())
    runtime = events.loc[events["category"] == "runtime", "name"].astype(str)
    launches = int(runtime.str.contains(_LAUNCHES, regex=True).sum())
    if copies:
        why = f"the trace holds {copies} GPU copies or memsets but no kernel"
    elif launches:
        why = (
            f"the trace holds {launches} kernel launches or copies by the runtime but nothing that "
            "ran on the GPU (CUPTI delivered no device activity records)"
        )
    elif len(runtime):
        why = "nothing was launched on the GPU while it was profiled (its runtime calls launch no work)"
    elif file.legacy is not None:
        why = (
            "the legacy profiler's export of this torch leaves the kernels out (torch.profiler records them)"
        )
    else:
        why = (
            "the trace holds no GPU activity (profile with activities=[ProfilerActivity.CPU, "
            "ProfilerActivity.CUDA] to see the GPU)"
        )
    warnings.warn(
        f"{file.path}: {evidence}; {why}; read as a CPU-only trace, host work counted as compute "
        "(the time the host spent in operators, not the GPU's compute)",
        stacklevel=5,  # under say_what_is_missing, read
    )


#: Operators that only run on a GPU: aten's calls into cuDNN (CUDA) and MIOpen (ROCm).
_GPU_ONLY_OPS = r"^(?:aten::)?(?:cudnn|miopen)_"
#: c10::DeviceType numbers of GPUs in ``[memory]`` events: CUDA, HIP.
_GPU_MEMORY = {1: "cuda", 6: "hip"}


def _gpu_evidence(trace: Trace, files: list[RankFile]) -> tuple[RankFile, str] | None:
    """The first file that shows a GPU in use, and what shows it: a header listing GPUs, else the
    allocator's memory events on a CUDA/HIP device, operators that only run on a GPU, device runtime
    calls, or a legacy export's flows to kernels it left out. None if nothing does."""
    lister = next(
        (f for f in files if isinstance(f.meta.get("deviceProperties"), list) and f.meta["deviceProperties"]),
        None,
    )
    if lister is not None:
        listed = lister.meta["deviceProperties"]
        gpus = ", ".join(sorted({str(d.get("name", "?")) for d in listed if isinstance(d, dict)}))
        return lister, f"its header lists {len(listed)} GPU(s) ({gpus})"
    events = trace.events
    rank = events["rank"].to_numpy()
    # per distinct name, not per event: a CPU-only trace can hold millions of operators
    names = events["name"].cat
    gpu_only = np.append(names.categories.astype(str).str.contains(_GPU_ONLY_OPS, regex=True), False)
    gpu_op = gpu_only[names.codes.to_numpy()]
    # calls that move work or memory to a device: cudaGetDeviceCount and the like are made by
    # torch.cuda.is_available() and by Kineto itself on a machine without work for its GPU
    working = np.append(names.categories.astype(str).str.contains(_DEVICE_WORK_CALLS, regex=True), False)
    runtime = (events["category"] == "runtime").to_numpy() & working[names.codes.to_numpy()]
    for file in files:
        shown = []
        kinds, ids = file.memory["Device Type"], file.memory["Device Id"]
        on_gpu = np.isin(kinds, list(_GPU_MEMORY))
        if on_gpu.any():
            pairs = zip(kinds[on_gpu].tolist(), ids[on_gpu].tolist(), strict=True)
            devices = sorted({f"{_GPU_MEMORY[int(k)]}:{int(d)}" for k, d in pairs})
            shown.append(
                f"{int(on_gpu.sum())} of its allocator's [memory] events are on {', '.join(devices)}"
            )
        mine = rank == file.rank
        ops = sorted(set(events["name"].to_numpy()[mine & gpu_op].astype(str).tolist()))
        if ops:
            listed = ", ".join(ops[:3]) + (" ..." if len(ops) > 3 else "")
            shown.append(f"it calls {listed}, which {'run' if len(ops) > 1 else 'runs'} only on a GPU")
        if (mine & runtime).any():
            shown.append(
                f"it holds {int((mine & runtime).sum())} device runtime calls that launch work, copy or "
                "allocate device memory"
            )
        if file.legacy is not None and file.legacy.flows:
            shown.append('its operators launched kernels (it has flows, "ph": "s", to them)')
        if shown:
            return file, f"the run used a GPU ({'; '.join(shown)})"
    return None


#: Runtime calls that use a GPU (CUDA and HIP): launches, copies, sets, device allocations (not
#: synchronisations or frees, which a profiler may call itself, nor pinned host allocations).
_DEVICE_WORK_CALLS = r"(?i)launch|memcpy|memset|malloc(?!host)"
#: Runtime calls that put work on a GPU (CUDA and HIP): kernel launches, graph launches, copies.
_LAUNCHES = r"(?i)launch|memcpy|memset"
