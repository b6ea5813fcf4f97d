"""Memory per GPU of data-parallel training: parameters, gradients, optimizer state, activations,
workspace.

Bytes per parameter (Micikevicius et al. 2018 for mixed precision; Rajbhandari et al. 2020, ZeRO,
for the mixed-precision Adam figure of 2 + 2 + 12 = 16 bytes):

==========  ======  =========  ======================================================
precision   params  gradients  optimizer state (sgd / momentum / adam)
==========  ======  =========  ======================================================
fp32, tf32  4       4          0 / 4 / 8   (velocity; first and second moments)
fp16, bf16  2       2          4 / 8 / 12  (fp32 master weights + fp32 states)
==========  ======  =========  ======================================================

Activations are the workload's fp32 activation bytes per sample x batch, halved for 16-bit
activations. With flash attention a transformer keeps no attention matrices: per layer and sequence
the ``5 a s^2`` bytes (16-bit) of Korthikanti et al.'s softmax output, dropout mask and dropout
output give way to the kernel's softmax statistics, ``4 a s`` (:func:`flash_activation_saving`).
The workspace is a fixed allowance for the CUDA context and cuDNN/cuBLAS workspaces plus, with
more than one GPU, the gradient fusion buffer.

What this lacks: allocator fragmentation and caching (PyTorch typically reserves 5-20% more than it
allocates), temporary buffers of individual kernels, and the peak inside the backward pass when
activations are freed while gradients are created (we add both in full, an upper bound).
"""

from __future__ import annotations

from .compute import normalize_optimizer, normalize_precision
from .states import activation_bytes_per_layer

__all__ = [
    "PARAM_BYTES",
    "GRAD_BYTES",
    "OPTIMIZER_STATE_BYTES",
    "ACTIVATION_SCALE",
    "DEFAULT_WORKSPACE",
    "bytes_per_param",
    "flash_activation_saving",
]

PARAM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
GRAD_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
OPTIMIZER_STATE_BYTES = {
    ("sgd", False): 0,
    ("momentum", False): 4,
    ("adam", False): 8,
    ("sgd", True): 4,
    ("momentum", True): 8,
    ("adam", True): 12,
}
ACTIVATION_SCALE = {"fp32": 1.0, "tf32": 1.0, "fp16": 0.5, "bf16": 0.5}

#: CUDA context (about 0.3-0.8 GB depending on driver and lazy loading) plus library workspaces.
#: Measure yours with ``torch.cuda.mem_get_info`` before and after the first step.
DEFAULT_WORKSPACE = 1 * 2**30


def flash_activation_saving(layers: int, hidden: int, heads: int, seq: int) -> float:
    """Activation bytes per sequence (at fp32, the catalog's convention: twice the 16-bit figure)
    that flash attention does not keep, ``2 L (5 a s^2 - 4 a s)``: the difference of the two
    attentions' layers in :func:`dlexplore.model.states.activation_bytes_per_layer`."""
    fused, flash = (
        float(activation_bytes_per_layer(seq, 1, hidden, heads, attention=kind))
        for kind in ("fused", "flash")
    )
    return 2.0 * layers * (fused - flash)


def bytes_per_param(precision: str, optimizer: str) -> dict[str, int]:
    """Bytes per parameter of weights (``params``), gradients (``grads``) and optimizer state."""
    precision = normalize_precision(precision)
    mixed = precision in ("fp16", "bf16")
    return {
        "params": PARAM_BYTES[precision],
        "grads": GRAD_BYTES[precision],
        "optimizer": OPTIMIZER_STATE_BYTES[(normalize_optimizer(optimizer), mixed)],
    }
