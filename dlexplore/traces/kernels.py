"""Device time by kernel: which kernels, and which kinds of kernel, a step spends its GPU time in.

:func:`kernel_table` gives one row per rank and kernel name (every kernel, copy and set that ran on
a device stream): how many ran, their time (s) and its share of the rank's device time, the
kernel's ``kind`` and, where its name states it, ``alignment``: the operand alignment in bytes that a
CUTLASS kernel was built for (``..._align1`` x the element size its name gives). cuBLAS takes such
a kernel when a GEMM dimension is not a multiple of 16 bytes (8 bf16 or fp16 elements): on an H200,
GPT-2's language-model head (vocabulary 50,257) runs three ``cutlass_75_..._align1`` kernels a
step at about a sixth of the rate of the aligned GEMMs (``tests/data/traces/pytorch-gpu/README.txt``).
:func:`kernel_breakdown` sums the table by kind.

``kind`` comes from the trace's category (``communication``, ``memcpy``, ``memset``) and else from
the kernel's name, by the first of :data:`KINDS` that matches (case-insensitive), as the kernel
libraries name them: ``attention`` (``flash``, ``fmha``, ``attention``, ``sdpa``: cuDNN's SDPA
kernels are also ``fprop``), ``conv`` (cuDNN's ``fprop``/``dgrad``/``wgrad``, ``convolve``,
``winograd``, its Volta/Ampere ``..._scudnn_...`` kernels, MIOpen's convolutions), ``gemm``
(``gemm``, ``xmma``, ``nvjet``, ``wgmma``, ``cutlass``, cuBLASLt's epilogues, rocBLAS/hipBLASLt's
Tensile ``Cijk_`` kernels, Inductor's ``triton_tem`` templates), ``norm`` (and layer norm's
``GammaBeta`` backward, cuDNN's ``bn_fw``/``bn_bw``), ``softmax`` (softmax, cross entropy, NLL
loss), ``optimizer`` (PyTorch's ``multi_tensor_apply``, Adam, SGD), ``elementwise`` (element-wise,
reduction, copy, fill, index, embedding, concatenation, dropout, pooling and layout-transposing
kernels, Inductor's ``triton_poi``/``triton_red``/``triton_per``), else ``other`` (sorts, scans ...).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .events import category_mask, device_streams, events_of

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["KINDS", "kernel_table", "kernel_breakdown", "kind_of"]

#: A kernel's kind from its name: (kind, pattern), the first that matches wins.
KINDS = (
    ("attention", r"flash|fmha|attention|sdpa"),
    ("conv", r"fprop|dgrad|wgrad|convolve|convolution|winograd|conv[123]d|miopen\w*conv|[a-z0-9]cudnn_"),
    ("gemm", r"gemm|xmma|nvjet|wgmma|cutlass|cublas|^Cijk_|triton_tem"),
    ("norm", r"norm|GammaBeta|\bbn_(fw|bw)"),
    ("softmax", r"softmax|cross_entropy|nll_loss"),
    ("optimizer", r"multi_tensor_apply|adam|sgd"),
    (
        "elementwise",
        r"elementwise|reduce|copy|fill|index|embedding|cat_|gather|scatter|dropout|pool|nchwToNhwc|nhwcToNchw"
        r"|triton_(poi|red|per)_",
    ),
)
_KIND_PATTERNS = [(kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in KINDS]
_BY_CATEGORY = ("communication", "memcpy", "memset")
_ALIGN = re.compile(r"_align(\d+)")
#: Element bytes by the type a kernel's name gives (CUTLASS: ``bf16``, ``f16``, ``tf32``, ``f32``).
_ELEMENT = (("bf16", 2), ("f16", 2), ("half", 2), ("tf32", 4), ("f32", 4), ("s8", 1), ("i8", 1))


def kind_of(name: str) -> str:
    """A device kernel's kind from its name (module docstring), ``"other"`` if none matches."""
    return next((kind for kind, pattern in _KIND_PATTERNS if pattern.search(name)), "other")


def _alignment(name: str) -> float:
    """Bytes of operand alignment a CUTLASS kernel's name states; NaN where it states none."""
    match = _ALIGN.search(name)
    size = next((b for key, b in _ELEMENT if key in name.lower()), None)
    return float(int(match.group(1)) * size) if match and size else np.nan


def kernel_table(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """One row per rank and device kernel name: ``kind``, ``count``, ``time`` (s), ``mean`` (s),
    ``share`` (of the rank's device time, 0-1) and ``alignment`` (bytes, NaN where the name does not
    say), the most time first within each rank."""
    events, source, _ = events_of(trace)
    on_device = device_streams(events) & category_mask(
        events["category"], ("compute", "communication", "memcpy", "memset")
    )
    rows = events.loc[on_device, ["rank", "name", "category", "duration"]]
    names = rows["name"].astype(str)
    grouped = (
        pd.DataFrame(
            {"rank": rows["rank"].to_numpy(), "name": names.to_numpy(), "duration": rows["duration"]}
        )
        .assign(category=rows["category"].astype(str).to_numpy())
        .groupby(["rank", "name"], sort=False)
        .agg(category=("category", "first"), count=("duration", "size"), time=("duration", "sum"))
        .reset_index()
    )
    kinds = {name: kind_of(name) for name in grouped["name"].unique()}
    grouped["kind"] = [
        category if category in _BY_CATEGORY else kinds[name]
        for name, category in zip(grouped["name"], grouped["category"], strict=True)
    ]
    grouped["mean"] = grouped["time"] / grouped["count"]
    grouped["share"] = grouped["time"] / grouped.groupby("rank")["time"].transform("sum")
    grouped["alignment"] = [_alignment(name) for name in grouped["name"]]
    table = grouped.sort_values(["rank", "time"], ascending=[True, False], kind="stable")
    table = table[["rank", "name", "kind", "count", "time", "mean", "share", "alignment"]].reset_index(
        drop=True
    )
    table.attrs.update(
        source=source,
        units={"time": "s", "mean": "s", "share": "1", "count": "count", "alignment": "bytes"},
    )
    return table


def kernel_breakdown(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """Device time per rank and kernel kind: ``count``, ``time`` (s), ``share`` (0-1) and
    ``kernels`` (distinct names), the most time first within each rank."""
    table = kernel_table(trace)
    summed = (
        table.groupby(["rank", "kind"], sort=False)
        .agg(count=("count", "sum"), time=("time", "sum"), share=("share", "sum"), kernels=("name", "size"))
        .reset_index()
        .sort_values(["rank", "time"], ascending=[True, False], kind="stable")
        .reset_index(drop=True)
    )
    summed.attrs.update(
        source=table.attrs["source"], units={"time": "s", "share": "1", "count": "count", "kernels": "count"}
    )
    return summed
