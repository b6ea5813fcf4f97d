"""The legacy profiler's Chrome trace, read with Kineto's categories.

``torch.autograd.profiler.profile(...).export_chrome_trace`` (the profiler before Kineto; torch
2.0's ``tensorboard_trace_handler`` still wrote its format, pytorch/kineto#728) writes a bare JSON
array of complete events without a ``cat``: host operators on ``"pid": "CPU functions"`` (the C++
writer of torch 1.x: ``"CPU Functions"``), and, up to torch 1.7, each op's time on the GPU on
``"pid": "CUDA functions"`` (``tid``: the device index), linked by a flow (``"ph": "s"`` and
``"f"``, ``"cat": "cpu_to_cuda"``). Later releases write the ``"s"`` flows of an op's kernels but
not the kernels. Without categories every event would read as 'other', which the breakdown counts
as idle; so the complete events of such a file get the categories Kineto gives the same things:
``cpu_op`` for CPU functions, ``kernel`` for CUDA functions (rows ``cuda:CUDA functions:<device>``).

What this export cannot say: it records no runtime calls, copies or memsets as such (a copy's GPU
time is an op's CUDA function, so it counts as compute), and a CUDA function is the span between
two CUDA events around the op on its stream, so nested ops' spans nest like the host ops'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kineto_decode import KinetoColumns

__all__ = ["LegacyExport", "adopt_legacy", "LEGACY_PROCESSES"]

#: The legacy export's processes (lower case: the C++ writer capitalises "Functions") -> category.
LEGACY_PROCESSES = {"cpu functions": "cpu_op", "cuda functions": "kernel"}


@dataclass(frozen=True)
class LegacyExport:
    """What a legacy export holds: its complete events on CPU functions (``cpu_functions``) and on
    CUDA functions (``cuda_functions``), and whether it has flows from ops to their kernels
    (``"ph": "s"``)."""

    cpu_functions: int
    cuda_functions: int
    flows: bool


def adopt_legacy(columns: KinetoColumns) -> LegacyExport | None:
    """If ``columns`` are a legacy export (no complete event has a ``cat``, all are on the processes
    of :data:`LEGACY_PROCESSES`, one at least on CPU functions), give its complete events Kineto's
    categories, in place, and say what it holds; else None (the columns untouched)."""
    col, labels = columns.columns, columns.labels
    if "X" not in labels["ph"]:
        return None
    complete = np.flatnonzero(col["ph"] == labels["ph"].index("X"))
    if not len(complete):
        return None
    cats = labels["cat"]
    if any(code >= 0 and cats[code] for code in np.unique(col["cat"][complete]).tolist()):
        return None
    pid_codes = col["pid_label"][complete]
    if (pid_codes < 0).any():  # a numeric pid: some other tool's trace
        return None
    process = np.asarray([LEGACY_PROCESSES.get(p.lower(), "") for p in labels["pid"]] + [""], dtype=object)
    kind = process[pid_codes]
    if not (kind != "").all() or not (kind == "cpu_op").any():
        return None
    # the columns are this file's own and go once its rows are chosen: recoding them here lets
    # every later stage read the file as the Kineto trace it stands for
    for category in ("cpu_op", "kernel"):
        rows = complete[kind == category]
        if len(rows):
            if category not in cats:
                cats.append(category)
            col["cat"][rows] = cats.index(category)
    return LegacyExport(
        cpu_functions=int((kind == "cpu_op").sum()),
        cuda_functions=int((kind == "kernel").sum()),
        flows="s" in labels["ph"],
    )
