"""Per-operator compute time: a training step as its matrix products and memory-bound kernels.

Each layer of a workload becomes the kernels a GPU runs for it
(:func:`~dlexplore.model.operator_table.operator_table`), each timed by a roofline with a fixed cost
per kernel (:func:`operator_times`)::

    t = max(F / (e_gemm * peak), bytes / (e_mem * memory bandwidth)) + t_kernel

``F`` the kernel's FLOPs, ``peak`` the GPU's dense peak at the training precision, ``e_gemm`` the
fraction of it that large GEMMs reach (``compute_efficiency``; default fitted to bundled training
runs or from published GEMM measurements, :func:`dlexplore.catalog.gemm_plateau`), ``e_mem`` the
fraction of the memory bandwidth that streaming kernels reach (``memory_efficiency``), ``t_kernel``
the fixed time of one kernel (launch, pipeline fill and drain: ``kernel_time``). The fixed time
makes GEMM efficiency a curve of size: a product of ``F`` FLOPs reaches
``e_gemm F / (F + e_gemm peak t_kernel)`` of peak, so small products are far from peak.
Memory-bound kernels have ``F = 0``.

Matrix products (``2 m n k`` FLOPs, operands ``m x k`` and ``k x n``, output ``m x n``, ``b``
samples in the micro-batch so ``m = rows per sample x b``):

- forward: ``Y = X W``; backward: the input gradient ``dX = dY W^T`` (left out for the first layer,
  whose input needs none) and the weight gradient ``dW = X^T dY``; each moves the same three
  operands, ``(m k + k n + m n)`` values, and costs the forward's FLOPs;
- convolutions as implicit GEMMs: ``m`` = output positions, ``n`` = output channels, ``k`` = input
  channels x kernel area. A 3x3 stride-1 convolution on vector units (fp32, or 16-bit without tensor
  cores) runs Winograd's algorithm, ``winograd_speedup`` times fewer FLOPs (Lavin & Gray 2016:
  F(2x2, 3x3) needs 2.25x fewer multiplications than the direct method);
- attention: ``QK^T`` and ``PV`` as batched products (one per head); with a fused (flash) kernel
  (Dao 2023) they and the softmax are one kernel of ``4 b s^2 h`` FLOPs forward (half with a causal
  mask), 2.5x that backward, reaching ``flash_efficiency`` of peak, reading Q, K, V and writing the
  output (no ``s x s`` matrix in memory).

Memory-bound kernels move ``passes x values x bytes per value`` (2 bytes in 16-bit precision,
4 otherwise; dropout masks 1 byte), forward / backward passes over the tensor:

=====================  =========  ==========  ==================================================
kernel                 forward    backward    why
=====================  =========  ==========  ==================================================
batch norm             3          5           statistics pass + normalise; backward reduces
                                              (x, dy) then writes dx from (x, dy)
ReLU (in place)        2          3           read, write; backward reads y and dy, writes dx
residual add           3          3           two reads, one write; backward sums the two
                                              gradient paths where they meet
pooling                in + out   2(in + out) backward reads x, y and dy, writes dx
dropout                2 + mask   2 + mask    the 1-byte mask written, then read
concatenation          2          2           copies in, gradient slices out
layout transposes      2 (in+out) 4 (in+out)  ``layout="nchw"`` on NVIDIA tensor cores: cuDNN
                                              turns the input to NHWC and the output back for
                                              each product (forward; input and weight gradients;
                                              2 backward for the first layer; ungrouped
                                              convolutions only)
layer norm             2          4           fused kernels: one pass forward; backward reads
                                              x and dy, writes dx, reduces the parameter grads
softmax                2          3           as ReLU
GeLU (bias fused)      2          3           as ReLU
bias + dropout + add   3 + mask   3 + mask    Megatron's fused kernel
embedding              2          2           gather rows; backward scatter-adds into the table
                                              gradient, zeroed every step (fixed bytes)
cross-entropy          3          2           max, exponent-sum and loss passes; gradient pass
optimizer update       traffic    -           bytes per parameter (compute.OPTIMIZER_TRAFFIC_BYTES)
=====================  =========  ==========  ==================================================

Transformers (``kind == "transformer"``) are laid out as Megatron-LM runs them, from their sizes,
so that the sequence length, the micro-batch and the tensor-parallel degree ``t`` change the
shapes: per layer the QKV product (``n = 3h/t``), attention over ``a/t`` heads, the output
projection (``k = h/t``), the two MLP products (``n = f/t``, then ``k = f/t``), layer norms,
fused bias-GeLU and bias-dropout-add; the embedding, final norm, logits (``n = V/t``) and
cross-entropy outside the layers. Element-wise kernels on the ``s x h`` stream run on ``s/t``
tokens with sequence parallelism, else on all ``s``. ``attention`` picks ``"fused"`` (Megatron's
fused scale-mask-softmax kernel between two batched GEMMs, the default), ``"unfused"`` (scale,
mask and softmax as three kernels) or ``"flash"``.

Operand alignment: the fast tensor-core GEMM kernels read each operand's rows 16 bytes at a time,
so cuBLAS runs them only when every row is a multiple of 16 bytes (a dimension a multiple of 8 in
16-bit, of 4 in tf32); otherwise it falls back to kernels with narrower loads. A product whose
``n`` or ``k`` (the weight's dimensions: GPT-2's 50,257-entry vocabulary, BERT's 30,522) leaves
rows aligned to 4 or 8 bytes only reaches ``unaligned_efficiency`` of its aligned rate, one aligned
to 2 bytes (an odd 16-bit dimension) half that (:func:`alignment_factor`). On one H200 (cuBLAS,
CUDA 13, ``benchmarks/gpu_kernels.py``; ``benchmarks/results/gpu-kernels-h200.json``) the three
products of GPT-2's and BERT's output layer ran at 0.36-0.49 of their padded vocabulary's rate
with rows aligned to 4 or 8 bytes, and 0.16-0.21 with 2-byte rows. Matrix units only: vector
units load element by element either way. Convolutions are left out: cuDNN pads a layer's
channels (an image's 3) itself.

What this lacks: tile and wave quantisation of small or odd-shaped GEMMs (the fixed kernel time
stands in for them), convolution algorithms other than Winograd (FFT), kernels that overlap each
other (streams, CUDA graphs), cache reuse between consecutive kernels, and the framework's host-side
time when the GPU waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import DlexploreError

__all__ = [
    "CATEGORIES",
    "ATTENTION_KERNELS",
    "LAYOUTS",
    "normalize_layout",
    "FUSIONS",
    "normalize_fusion",
    "NORMALIZERS",
    "PHASES",
    "Operators",
    "operator_times",
    "phase_sums",
    "category_sums",
    "bytes_per_value",
    "TILE",
    "ALIGNED_BYTES",
    "alignment_factor",
    "operand_alignment",
]

#: Operator categories of the compute breakdown, in the order plots show them.
CATEGORIES = (
    "conv",
    "matmul",
    "attention",
    "norm",
    "activation",
    "elementwise",
    "pool",
    "dropout",
    "softmax",
    "embedding",
    "loss",
    "optimizer",
)
#: Attention implementations a transformer can run with.
ATTENTION_KERNELS = ("fused", "unfused", "flash")
#: Memory layouts of a CNN's activations: ``nhwc`` (channels last: what cuDNN's tensor-core
#: convolutions take; PyTorch's ``channels_last``, TensorFlow's default) and ``nchw`` (PyTorch's
#: default), which cuDNN transposes around every tensor-core convolution.
LAYOUTS = ("nhwc", "nchw")
_LAYOUT_ALIASES = {"channels_last": "nhwc", "channels-last": "nhwc", "channels_first": "nchw"}


#: How a CNN's batch norms run: ``none`` (the norm, the residual add and the ReLU as separate
#: kernels: PyTorch eager, TensorFlow without XLA) or ``bn_add_relu`` (one cuDNN kernel each, the
#: add and ReLU that follow it folded in: ``cudnnBatchNormalizationForwardTrainingEx`` with
#: ``CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION``, as MXNet's ``--fuse-bn-relu``/``--fuse-bn-add-relu``).
FUSIONS = ("none", "bn_add_relu")


def normalize_fusion(fusion: str) -> str:
    """``none`` or ``bn_add_relu`` (``bn-add-relu`` too; blank is none)."""
    key = str(fusion).strip().lower().replace("-", "_") or "none"
    if key not in FUSIONS:
        raise DlexploreError(f"unknown fusion {fusion!r}; expected one of {', '.join(FUSIONS)}")
    return key


def normalize_layout(layout: str) -> str:
    """``nhwc`` or ``nchw`` (``channels_last`` is nhwc, ``channels_first`` nchw)."""
    key = str(layout).strip().lower()
    key = _LAYOUT_ALIASES.get(key, key)
    if key not in LAYOUTS:
        raise DlexploreError(
            f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)} or channels_last"
        )
    return key


#: The named CNN settings and the rule that gives each value as the model writes it.
NORMALIZERS = {"layout": normalize_layout, "fusion": normalize_fusion}


#: Phases of a step: the forward and backward of one micro-batch, and the optimizer update.
PHASES = ("forward", "backward", "optimizer")

#: Backward FLOPs of a flash-attention kernel per forward FLOP (Dao 2023: five products to the
#: forward's two, the scores recomputed).
FLASH_BACKWARD = 2.5
_MASK = 1.0  # bytes per dropout-mask value
_VECTOR, _GEMM, _FLASH = 0, 1, 2  # rate classes


#: Row alignment (bytes) the fast tensor-core GEMM kernels need.
ALIGNED_BYTES = 16


def operand_alignment(value_bytes: float, *dims: float) -> float:
    """The alignment (bytes, at most :data:`ALIGNED_BYTES`) of rows of ``dims`` values of
    ``value_bytes`` each: the largest power of two dividing every row's length in bytes. A
    dimension that is not a whole number (a vocabulary split over tensor-parallel ranks unevenly)
    aligns to one value."""
    alignment = float(ALIGNED_BYTES)
    for dim in dims:
        row = float(dim) * value_bytes
        if float(dim) != int(dim) or row != int(row):
            row = value_bytes
        row = int(row)
        alignment = min(alignment, float(row & -row) if row > 0 else float(value_bytes))
    return alignment


def alignment_factor(alignment: npt.ArrayLike, unaligned_efficiency: npt.ArrayLike) -> np.ndarray:
    """The share of its aligned rate a GEMM reaches with operand rows aligned to ``alignment``
    bytes: 1 at :data:`ALIGNED_BYTES`, ``unaligned_efficiency`` at 4 or 8 bytes, half that at 2
    (module docstring)."""
    alignment = np.asarray(alignment, dtype=float)
    narrow = np.asarray(unaligned_efficiency, dtype=float) * np.minimum(1.0, alignment / 4.0)
    return np.where(alignment >= ALIGNED_BYTES, 1.0, narrow)


def bytes_per_value(precision: str) -> float:
    """Bytes of one activation value: 2 in mixed precision (fp16, bf16), else 4."""
    return 2.0 if precision in ("fp16", "bf16") else 4.0


@dataclass(frozen=True)
class Operators:
    """The kernels of one training step of one micro-batch (forward and backward) plus the
    optimizer update, one row each, as arrays (``float`` unless said).

    ``flops`` (per sample), ``bytes_sample`` (bytes per sample), ``bytes_fixed`` (bytes per kernel
    call that do not grow with the batch: weights, the embedding-table gradient, the optimizer's
    traffic), ``kernels`` (launches the row stands for), ``rate`` (0 memory-bound, 1 GEMM at
    ``compute_efficiency``, 2 flash attention at ``flash_efficiency``), ``tiles`` (the share of the
    computed tiles that is the product's own:
    :func:`~dlexplore.model.operator_table.tile_efficiency`), ``winograd`` (bool: FLOPs divided by
    ``winograd_speedup`` on vector units), ``category`` and ``phase`` (ints into
    :data:`CATEGORIES` and :data:`PHASES`), ``alignment`` (bytes: the operand rows' alignment of a
    product, :func:`operand_alignment`; :data:`ALIGNED_BYTES` for every other kernel),
    ``in_layers`` (bool: inside the repeated transformer layers, which pipeline stages divide),
    ``transpose`` (bool: a layout transpose around a convolution, which runs on tensor cores only),
    ``name`` (``layer:kernel``).
    """

    name: tuple[str, ...]
    category: np.ndarray
    phase: np.ndarray
    flops: np.ndarray
    bytes_sample: np.ndarray
    bytes_fixed: np.ndarray
    kernels: np.ndarray
    rate: np.ndarray
    tiles: np.ndarray
    rows: np.ndarray
    col_tiles: np.ndarray
    per_sample: np.ndarray
    winograd: np.ndarray
    in_layers: np.ndarray
    transpose: np.ndarray
    alignment: np.ndarray

    def __len__(self) -> int:
        return len(self.name)

    def flops_per_sample(self, phase: str | None = None) -> float:
        """FLOPs per sample (direct method, no Winograd saving) of a phase, or of all."""
        mask = np.ones(len(self), bool) if phase is None else self.phase == PHASES.index(phase)
        return float(self.flops[mask].sum())


def operator_times(
    ops: Operators,
    batch: npt.ArrayLike,
    peak_flops: float,
    memory_bandwidth_gbs: float,
    *,
    compute_efficiency: npt.ArrayLike,
    memory_efficiency: npt.ArrayLike,
    kernel_time: npt.ArrayLike,
    winograd_speedup: npt.ArrayLike = 1.0,
    flash_efficiency: npt.ArrayLike = 0.6,
    unaligned_efficiency: npt.ArrayLike | None = None,
    sm_count: int = 0,
) -> np.ndarray:
    """Time (s) of every kernel of ``ops`` for ``batch`` samples, shape ``(*broadcast, len(ops))``.

    ``batch`` and the efficiencies may be arrays; they broadcast together (the model's sweeps) and
    the kernels run along a new last axis. ``peak_flops`` in FLOP/s, ``memory_bandwidth_gbs`` in
    GB/s, ``kernel_time`` in s, ``winograd_speedup`` >= 1 (1 on tensor cores: the caller decides),
    ``unaligned_efficiency`` in (0, 1] or None, no penalty for unaligned operands (vector units: the
    caller decides; :func:`alignment_factor`).
    """
    arrays = [
        np.asarray(x, dtype=float)
        for x in (
            batch,
            compute_efficiency,
            memory_efficiency,
            kernel_time,
            winograd_speedup,
            flash_efficiency,
            1.0 if unaligned_efficiency is None else unaligned_efficiency,
        )
    ]
    B, e_gemm, e_mem, t_kernel, wino, e_flash, e_unaligned = (a[..., np.newaxis] for a in arrays)
    flops = ops.flops * B
    flops = np.where(ops.winograd, flops / wino, flops)
    rate = np.where(ops.rate == _FLASH, e_flash, e_gemm) * peak_flops * ops.tiles
    if unaligned_efficiency is not None and (ops.alignment < ALIGNED_BYTES).any():
        rate = rate * alignment_factor(ops.alignment, e_unaligned)
    if sm_count > 0:
        rate = rate * wave_efficiency(ops, B, sm_count)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(ops.rate == _VECTOR, 0.0, flops / rate)
    memory = (ops.bytes_sample * B + ops.bytes_fixed) / (e_mem * memory_bandwidth_gbs * 1e9)
    # kernels on the last, contiguous axis: sums over them then add in the same order whatever
    # the other axes are (a block of a sweep gives the same numbers as the whole sweep)
    return np.ascontiguousarray(np.maximum(compute, memory) + ops.kernels * t_kernel)


def wave_efficiency(ops: Operators, batch: npt.ArrayLike, sm_count: int) -> np.ndarray:
    """The share of the SMs busy over a product's waves of tiles (wave quantisation): ``T``
    output tiles on ``S`` SMs run in ``ceil(T / S)`` waves, so ``T / (S ceil(T / S))`` of the
    machine works; 1 for kernels that are not tiled products. ``batch`` broadcasts (last axis:
    the kernels)."""
    B = np.asarray(batch, dtype=float)
    row_tiles = np.where(ops.per_sample, np.ceil(ops.rows / TILE) * B, np.ceil(ops.rows * B / TILE))
    tiles = row_tiles * ops.col_tiles
    with np.errstate(divide="ignore", invalid="ignore"):
        share = tiles / (np.ceil(tiles / sm_count) * sm_count)
    return np.where(tiles > 0, share, 1.0)


def _grouped_sums(times: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """Sums of ``times`` (kernels on the last axis) over the kernels of each group, on a new last
    axis of ``count`` groups. Accumulated one kernel after the other in table order
    (``np.bincount``), so a block of a sweep gives bit for bit what the whole sweep gives."""
    n = times.shape[-1]
    flat = np.ascontiguousarray(times).reshape(-1, n)
    rows = flat.shape[0]
    index = (np.arange(rows)[:, np.newaxis] * count + groups[np.newaxis, :]).ravel()
    sums = np.bincount(index, weights=flat.ravel(), minlength=rows * count)
    return sums.reshape(times.shape[:-1] + (count,))


def phase_sums(ops: Operators, times: np.ndarray, weight: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Forward, backward and optimizer time: the sums of ``times`` (kernels on the last axis) over
    each phase's kernels, each kernel's time times ``weight`` (e.g. a pipeline stage's share)."""
    if weight is not None:
        times = times * weight
    sums = _grouped_sums(times, ops.phase, len(PHASES))
    return {phase: sums[..., i] for i, phase in enumerate(PHASES)}


def category_sums(ops: Operators, times: np.ndarray) -> np.ndarray:
    """Time per category of :data:`CATEGORIES` on a new last axis, summed over each one's kernels
    (``times`` has the kernels on its last axis)."""
    return _grouped_sums(times, ops.category, len(CATEGORIES))


#: Widest output tile of a GEMM kernel (cuBLAS and cuDNN tile the output in blocks of 64 to 256
#: elements a side; NVIDIA's Matrix Multiplication Background User's Guide works its tile- and
#: wave-quantisation examples with 128 x 128 and 256 x 128 tiles).
TILE = 128
