"""Memory per GPU of hybrid-parallel training: model states by a named convention, and activations.

**Model states** (bytes per parameter; ``d`` the data-parallel degree). Frameworks count them
differently, so the convention is a named option (``memory_convention``) recorded in the
prediction's attrs. For Adam in 16-bit mixed precision:

========================  ======  =========  ==============================  ====  ============
convention                params  gradients  optimizer state                 sum   ZeRO-1 /
                                                                                   distributed
========================  ======  =========  ==============================  ====  ============
``megatron``, bf16        2       4 (fp32)   12: fp32 master, two moments    18    6 + 12/d
``megatron``, fp16        2       2          16: fp32 main gradients,        20    4 + 16/d
                                             master, two moments
``megatron-fp32-grads``   2       4 (fp32)   12                              18    6 + 12/d
``zero``                  2       2          12: fp32 master, two moments    16    4 + 12/d
========================  ======  =========  ==============================  ====  ============

``megatron`` is Megatron-LM's default: with bf16 it accumulates and reduces gradients in fp32
(``arguments.py`` turns ``--accumulate-allreduce-grads-in-fp32`` on for bf16), with fp16 in fp16,
its optimizer keeping fp32 main gradients; ``megatron-fp32-grads`` is fp16 with that option on. The
figures and their distributed-optimizer shares are the table of Megatron Core's *Distributed
Optimizer* guide. ``zero`` is Rajbhandari et al. (2020)'s accounting, ``2 + 2 + K`` with ``K = 12``
(DeepSpeed). SGD with momentum keeps one moment (4 bytes fewer), plain SGD none (8 fewer). Training
in fp32 or tf32 has no master copy: 4 + 4 + 8 for Adam under every convention (Megatron's "fp32
param, fp32 grads", 16 and 8 + 8/d). The gradient bytes are also what data parallelism reduces.

ZeRO stage 1 (Megatron's distributed optimizer) shards the optimizer state over the ``d`` replicas,
stage 2 also the gradients, stage 3 also the parameters. With CPU offload the optimizer state lives
in host memory.

**Activations** of a transformer layer for one micro-batch (``s`` sequence, ``b`` micro-batch,
``h`` hidden, ``a`` heads, ``t`` tensor-parallel degree; bytes at 16 bits), Korthikanti et al.
(2022), Table 2:

=========================  ==========================  =============================
recompute                  without sequence parallel   with sequence parallel
=========================  ==========================  =============================
none                       sbh (10 + 24/t + 5as/(ht))  sbh/t (34 + 5as/h)
selective                  sbh (10 + 24/t)             34 sbh / t
full                       2 sbh                       2 sbh / t
=========================  ==========================  =============================

With flash attention (Dao et al. 2022; ``attention="flash"``) no ``s x s`` matrix is kept: the
kernel recomputes the scores in its backward pass from Q, K, V and the softmax statistics it keeps,
one fp32 value per head and token, ``4 asb`` bytes (``/t``). So the ``5as/h`` term gives way to
``4 asb`` in every row but ``full``, and selective recomputation has nothing left to recompute.

A stage keeps the layers' activations of the micro-batches its schedule has in flight
(:func:`dlexplore.model.pipeline.layers_in_flight`): ``L`` layers' worth on the first stage with
1F1B. Outside the layers (Korthikanti et al., section 4.3): the first stage keeps the embedding's
dropout mask, ``sbh`` per micro-batch in flight; the last stage the output layer's final layer
norm and logits input, ``4 sbh``, and the fp32 logits of the cross-entropy, ``4 sbV/t`` (``V`` the
vocabulary), for each micro-batch it holds; the ``sbh`` terms are divided by ``t`` with sequence
parallelism, which makes the output layer Korthikanti et al.'s ``4 sbh/t (1 + V/h)``. The most
loaded end stage is reported (both ends are one stage when ``p = 1``).

Recomputation needs working memory the table leaves out: while the backward recomputes a layer
(``full``) its whole activations (the ``none`` row) are live, and ``selective`` recomputes one
layer's attention core (the ``5as/h`` term). :func:`recompute_buffer` gives it; it is counted in the
total but not in the activations, so these stay Korthikanti et al.'s figures. fp32 activations take
twice the 16-bit bytes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..errors import DlexploreError
from .compute import normalize_optimizer, normalize_precision

__all__ = [
    "MEMORY_CONVENTIONS",
    "RECOMPUTE_MODES",
    "normalize_convention",
    "normalize_recompute",
    "state_bytes_per_param",
    "model_state_bytes",
    "activation_bytes_per_layer",
    "outside_layer_bytes",
    "recompute_buffer",
    "convention_text",
]

RECOMPUTE_MODES = ("none", "selective", "full")

#: Named model-state conventions: {16-bit precision: (gradient bytes, fp32 main-gradient copy in
#: the optimizer state)}, and a description.
MEMORY_CONVENTIONS: dict[str, tuple[dict[str, tuple[int, int]], str]] = {
    "megatron": (
        {"bf16": (4, 0), "fp16": (2, 4)},
        "Megatron-LM's defaults: 16-bit parameters; gradients reduced in fp32 with bf16, in "
        "fp16 with fp16 (the optimizer then keeps fp32 main gradients); fp32 master weights "
        "and optimizer moments (Megatron Core, Distributed Optimizer guide)",
    ),
    "megatron-fp32-grads": (
        {"bf16": (4, 0), "fp16": (4, 0)},
        "Megatron-LM with --accumulate-allreduce-grads-in-fp32: 16-bit "
        "parameters, fp32 gradients, fp32 master weights and moments",
    ),
    "zero": (
        {"bf16": (2, 0), "fp16": (2, 0)},
        "ZeRO (Rajbhandari et al. 2020, DeepSpeed): 16-bit parameters and gradients, fp32 "
        "master weights and optimizer moments (2 + 2 + K)",
    ),
}
_MOMENTS = {"sgd": 0, "momentum": 4, "adam": 8}


def normalize_convention(convention: str) -> str:
    """Canonical memory convention (:data:`MEMORY_CONVENTIONS`); ``deepspeed`` means ``zero``."""
    key = str(convention).strip().lower().replace("_", "-")
    key = {"deepspeed": "zero", "rajbhandari": "zero", "megatron-lm": "megatron"}.get(key, key)
    if key not in MEMORY_CONVENTIONS:
        raise DlexploreError(
            f"unknown memory_convention {convention!r}; expected one of {', '.join(MEMORY_CONVENTIONS)}"
        )
    return key


def normalize_recompute(mode: str) -> str:
    """Canonical recomputation mode: ``none``, ``selective`` or ``full``."""
    key = str(mode).strip().lower()
    if key not in RECOMPUTE_MODES:
        raise DlexploreError(f"unknown recompute {mode!r}; expected one of {', '.join(RECOMPUTE_MODES)}")
    return key


def state_bytes_per_param(
    precision: str, optimizer: str = "adam", convention: str = "megatron"
) -> dict[str, int]:
    """Bytes per parameter of weights (``params``), gradients (``grads``) and optimizer state
    (``optimizer``) under a convention (module docstring)."""
    precision = normalize_precision(precision)
    moments = _MOMENTS[normalize_optimizer(optimizer)]
    if precision in ("fp32", "tf32"):
        return {"params": 4, "grads": 4, "optimizer": moments}
    grads, main_grads = MEMORY_CONVENTIONS[normalize_convention(convention)][0][precision]
    return {"params": 2, "grads": grads, "optimizer": 4 + moments + main_grads}


def convention_text(convention: str, precision: str, optimizer: str = "adam") -> str:
    """One line for a prediction's attrs: the convention and its bytes per parameter."""
    per = state_bytes_per_param(precision, optimizer, convention)
    total = sum(per.values())
    name = normalize_convention(convention)
    return (
        f"{name}: {per['params']} B parameters + {per['grads']} B gradients + "
        f"{per['optimizer']} B optimizer state = {total} B/param in "
        f"{normalize_precision(precision)} ({MEMORY_CONVENTIONS[name][1]})"
    )


def model_state_bytes(
    params: npt.ArrayLike,
    dp: npt.ArrayLike = 1,
    zero: npt.ArrayLike = 0,
    *,
    precision: str = "bf16",
    optimizer: str = "adam",
    offload: npt.ArrayLike = False,
    convention: str = "megatron",
) -> dict[str, np.ndarray]:
    """Bytes per GPU of parameters, gradients and optimizer state of ``params`` parameters
    data-parallel over ``dp`` ranks with ZeRO stage ``zero``: ``{"params", "grads", "optimizer",
    "cpu"}``, ``cpu`` being the offloaded optimizer state. Arguments broadcast."""
    per = state_bytes_per_param(precision, optimizer, convention)
    P, d, z = (np.asarray(x, dtype=float) for x in (params, dp, zero))
    if np.any((z < 0) | (z > 3) | (z != np.floor(z))):
        raise DlexploreError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    off = np.asarray(offload, dtype=bool)
    opt = P * per["optimizer"] / np.where(z >= 1, d, 1.0)
    return {
        "params": P * per["params"] / np.where(z >= 3, d, 1.0),
        "grads": P * per["grads"] / np.where(z >= 2, d, 1.0),
        "optimizer": np.where(off, 0.0, opt),
        "cpu": np.where(off, opt, 0.0),
    }


def activation_bytes_per_layer(
    seq: npt.ArrayLike,
    micro_batch: npt.ArrayLike,
    hidden: float,
    heads: float,
    *,
    tp: npt.ArrayLike = 1,
    recompute: str = "none",
    sequence_parallel: npt.ArrayLike = False,
    attention: str = "fused",
) -> np.ndarray:
    """Korthikanti et al. (2022) activation bytes of one transformer layer for one micro-batch with
    16-bit activations (the module docstring's table; with ``attention="flash"`` the softmax
    statistics in place of the ``5as/h`` term). Arguments broadcast."""
    s, b, t = (np.asarray(x, dtype=float) for x in (seq, micro_batch, tp))
    h, a = float(hidden), float(heads)
    sp = np.asarray(sequence_parallel, dtype=bool)
    sbh = s * b * h
    recompute = normalize_recompute(recompute)
    if recompute == "full":
        return 2 * sbh / np.where(sp, t, 1.0)
    flash = str(attention).strip().lower() == "flash"
    scores = 5 * a * s / h if recompute == "none" and not flash else 0.0
    kept = np.where(sp, sbh / t * (34 + scores), sbh * (10 + 24 / t + scores / t))
    return kept + (4 * a * s * b / t if flash else 0.0)


def outside_layer_bytes(
    seq: npt.ArrayLike,
    micro_batch: npt.ArrayLike,
    hidden: float,
    vocab: float,
    *,
    tp: npt.ArrayLike = 1,
    sequence_parallel: npt.ArrayLike = False,
) -> tuple[np.ndarray, np.ndarray]:
    """16-bit bytes outside the layers for one micro-batch (Korthikanti et al. section 4.3): the
    embedding's dropout mask on the first stage, ``sbh``, and on the last the output layer's final
    layer norm and logits input, ``4 sbh``, and fp32 logits, ``4 sbV/t``; the ``sbh`` terms are
    divided by ``t`` with sequence parallelism (then the last is Korthikanti et al.'s
    ``4 sbh/t (1 + V/h)``)."""
    s, b, t = (np.asarray(x, dtype=float) for x in (seq, micro_batch, tp))
    sbh = s * b * float(hidden)
    split = np.where(np.asarray(sequence_parallel, dtype=bool), t, 1.0)
    return sbh / split, 4 * sbh / split + 4 * s * b * float(vocab) / t


def recompute_buffer(
    seq: npt.ArrayLike,
    micro_batch: npt.ArrayLike,
    hidden: float,
    heads: float,
    *,
    tp: npt.ArrayLike = 1,
    recompute: str = "none",
    sequence_parallel: npt.ArrayLike = False,
    attention: str = "fused",
) -> np.ndarray:
    """16-bit bytes live while the backward recomputes one layer: the layer's activations for
    ``full``, its attention core (``5as/h sbh``, ``/t``) for ``selective`` (none with flash
    attention, which keeps no core to recompute), 0 without."""
    recompute = normalize_recompute(recompute)
    if recompute == "none" or (recompute == "selective" and str(attention).strip().lower() == "flash"):
        return np.zeros(
            np.broadcast_shapes(*(np.shape(x) for x in (seq, micro_batch, tp, sequence_parallel)))
        )
    if recompute == "full":
        return activation_bytes_per_layer(
            seq, micro_batch, hidden, heads, tp=tp, sequence_parallel=sequence_parallel, attention=attention
        )
    s, b, t = (np.asarray(x, dtype=float) for x in (seq, micro_batch, tp))
    return 5 * float(heads) * s * s * b / t
