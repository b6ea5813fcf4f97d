"""Per-operator compute time: a training step as its matrix products and memory-bound kernels.

Each layer of a workload becomes the kernels a GPU runs for it (:func:`operator_table`), each
timed by a roofline with a fixed cost per kernel (:func:`operator_times`)::

    t = max(F / (e_gemm * peak), bytes / (e_mem * memory bandwidth)) + t_kernel

``F`` the kernel's FLOPs, ``peak`` the GPU's dense peak at the training precision, ``e_gemm`` the
fraction of it that large GEMMs reach (``compute_efficiency``; default from published GEMM
measurements, :func:`dlexplore.catalog.gemm_efficiency`), ``e_mem`` the fraction of the memory
bandwidth that streaming kernels reach (``memory_efficiency``), ``t_kernel`` the fixed time of one
kernel (launch, pipeline fill and drain: ``kernel_time``). The fixed time makes GEMM efficiency a
curve of size: a product of ``F`` FLOPs reaches ``e_gemm F / (F + e_gemm peak t_kernel)`` of peak,
so small products are far from peak. Memory-bound kernels have ``F = 0``.

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

What this lacks: tile and wave quantisation of small or odd-shaped GEMMs (the fixed kernel time
stands in for them), convolution algorithms other than Winograd (FFT), kernels that overlap each
other (streams, CUDA graphs), cache reuse between consecutive kernels, and the framework's host-side
time when the GPU waits for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from .. import catalog
from ..errors import DlexploreError

__all__ = [
    "CATEGORIES",
    "ATTENTION_KERNELS",
    "PHASES",
    "Operators",
    "operator_table",
    "operator_times",
    "phase_sums",
    "category_sums",
    "bytes_per_value",
    "tile_efficiency",
    "TILE",
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
#: Phases of a step: the forward and backward of one micro-batch, and the optimizer update.
PHASES = ("forward", "backward", "optimizer")

#: Backward FLOPs of a flash-attention kernel per forward FLOP (Dao 2023: five products to the
#: forward's two, the scores recomputed).
FLASH_BACKWARD = 2.5
_MASK = 1.0  # bytes per dropout-mask value
_VECTOR, _GEMM, _FLASH = 0, 1, 2  # rate classes


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
    computed tiles that is the product's own: :func:`tile_efficiency`), ``winograd`` (bool: FLOPs
    divided by ``winograd_speedup`` on vector units), ``category`` and ``phase`` (ints into
    :data:`CATEGORIES` and :data:`PHASES`), ``in_layers`` (bool: inside the repeated transformer
    layers, which pipeline stages divide), ``name`` (``layer:kernel``).
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

    def __len__(self) -> int:
        return len(self.name)

    def flops_per_sample(self, phase: str | None = None) -> float:
        """FLOPs per sample (direct method, no Winograd saving) of a phase, or of all."""
        mask = np.ones(len(self), bool) if phase is None else self.phase == PHASES.index(phase)
        return float(self.flops[mask].sum())


class _Builder:
    """Collects kernels as rows."""

    def __init__(self, d: float):
        self.d = d
        self.rows: list[tuple] = []

    def add(
        self,
        name: str,
        category: str,
        phase: str,
        *,
        flops: float = 0.0,
        bytes_sample: float = 0.0,
        bytes_fixed: float = 0.0,
        kernels: float = 1.0,
        rate: int = _VECTOR,
        tiles: float = 1.0,
        rows: float = 0.0,
        col_tiles: float = 0.0,
        per_sample: bool = False,
        winograd: bool = False,
        in_layers: bool = False,
    ) -> None:
        self.rows.append(
            (
                name,
                CATEGORIES.index(category),
                PHASES.index(phase),
                flops,
                bytes_sample,
                bytes_fixed,
                kernels,
                rate,
                tiles,
                rows,
                col_tiles,
                per_sample,
                winograd,
                in_layers,
            )
        )

    def gemm(
        self,
        name: str,
        category: str,
        m: float,
        n: float,
        k: float,
        groups: float = 1.0,
        *,
        dgrad: bool = True,
        winograd: bool = False,
        in_layers: bool = False,
        weights: bool = True,
        calls: float = 1.0,
        flops: float | None = None,
    ) -> None:
        """A matrix product of ``m`` rows per sample: forward, input gradient, weight gradient.

        ``weights`` False: both operands are activations (attention), so every operand grows with
        the batch and both backward products are input gradients. ``calls``: identical products.
        ``flops`` (per sample, per call) overrides ``2 m n k groups``: a layer's own count.
        """
        d = self.d
        flops = (2.0 * m * n * k * groups if flops is None else flops) * calls
        if weights:
            per_sample, fixed = d * groups * (m * k + m * n) * calls, d * groups * k * n * calls
        else:
            per_sample, fixed = d * groups * (m * k + k * n + m * n) * calls, 0.0
        common = dict(
            bytes_sample=per_sample,
            bytes_fixed=fixed,
            rate=_GEMM,
            winograd=winograd,
            in_layers=in_layers,
            kernels=calls,
        )
        # each product's output is tiled: forward m x n, input gradient m x k, weight gradient k x n
        # (m is rows per sample: the batch makes it large, so only n and k are quantised); the
        # tiles of the forward and input gradient run in waves over the SMs (the weight gradient,
        # a long reduction over m, is split along it: no wave loss)
        waves = dict(rows=m, per_sample=not weights)
        self.add(
            f"{name}:fwd",
            category,
            "forward",
            flops=flops,
            tiles=tile_efficiency(n),
            col_tiles=_tiles(n) * groups,
            **waves,
            **common,
        )
        if dgrad:
            self.add(
                f"{name}:dgrad",
                category,
                "backward",
                flops=flops,
                tiles=tile_efficiency(k),
                col_tiles=_tiles(k) * groups,
                **waves,
                **common,
            )
        if weights:
            self.add(
                f"{name}:wgrad",
                category,
                "backward",
                flops=flops,
                tiles=tile_efficiency(k) * tile_efficiency(n),
                **common,
            )
        else:
            self.add(
                f"{name}:dgrad2",
                category,
                "backward",
                flops=flops,
                tiles=tile_efficiency(k),
                col_tiles=_tiles(k) * groups,
                **waves,
                **common,
            )

    def vector(
        self,
        name: str,
        category: str,
        values: float,
        forward: float,
        backward: float,
        *,
        mask: bool = False,
        in_layers: bool = False,
        fixed_backward: float = 0.0,
        calls: float = 1.0,
    ) -> None:
        """A memory-bound kernel over ``values`` per sample: ``forward``/``backward`` passes."""
        extra = _MASK * values if mask else 0.0
        self.add(
            f"{name}:fwd",
            category,
            "forward",
            bytes_sample=(forward * self.d * values + extra) * calls,
            in_layers=in_layers,
            kernels=calls,
        )
        if backward:
            self.add(
                f"{name}:bwd",
                category,
                "backward",
                bytes_sample=(backward * self.d * values + extra) * calls,
                bytes_fixed=fixed_backward * calls,
                in_layers=in_layers,
                kernels=calls,
            )

    def table(self) -> Operators:
        cols = list(zip(*self.rows, strict=True))
        return Operators(
            name=tuple(cols[0]),
            category=np.array(cols[1], dtype=np.int64),
            phase=np.array(cols[2], dtype=np.int64),
            flops=np.array(cols[3], dtype=float),
            bytes_sample=np.array(cols[4], dtype=float),
            bytes_fixed=np.array(cols[5], dtype=float),
            kernels=np.array(cols[6], dtype=float),
            rate=np.array(cols[7], dtype=np.int64),
            tiles=np.array(cols[8], dtype=float),
            rows=np.array(cols[9], dtype=float),
            col_tiles=np.array(cols[10], dtype=float),
            per_sample=np.array(cols[11], dtype=bool),
            winograd=np.array(cols[12], dtype=bool),
            in_layers=np.array(cols[13], dtype=bool),
        )


#: Widest output tile of a GEMM kernel (cuBLAS and cuDNN tile the output in blocks of 64 to 256
#: elements a side; NVIDIA's Matrix Multiplication Background User's Guide works its tile- and
#: wave-quantisation examples with 128 x 128 and 256 x 128 tiles).
TILE = 128


def tile_efficiency(size: float) -> float:
    """The share of the tiles along a dimension of ``size`` elements that is the product's own
    (tile quantisation): tiles :data:`TILE` wide, or the power of two at or above ``size`` when it
    is smaller, so 96 output channels fill 96 of 128 (0.75) and 1000 fill 1000 of 1024."""
    size = float(size)
    if size <= 0:
        return 1.0
    width = TILE if size >= TILE else 2.0 ** math.ceil(math.log2(size))
    return size / (math.ceil(size / width) * width)


def _tiles(size: float) -> float:
    """Output tiles along a dimension of ``size`` elements (see :func:`tile_efficiency`)."""
    size = float(size)
    width = TILE if size >= TILE else 2.0 ** math.ceil(math.log2(max(size, 1.0)))
    return float(math.ceil(size / width))


# Memory-bound layer kinds of the CNN catalog: (category, forward passes, backward passes, mask).
_CNN_VECTOR = {
    "bn": ("norm", 3.0, 5.0, False),
    "dropout": ("dropout", 2.0, 2.0, True),
    "concat": ("elementwise", 2.0, 2.0, False),
}
_TAIL = {"relu": ("activation", 2.0, 3.0), "add": ("elementwise", 3.0, 3.0)}


def _layered(b: _Builder, wl: catalog.Workload) -> None:
    """Kernels of a workload given as layers (CNNs, and the user's layer lists)."""
    first = True
    for layer in wl.layers:
        if layer.gemm is not None:
            m, n, k, groups = layer.gemm
            category = "conv" if layer.kind == "conv" else "matmul"
            b.gemm(
                layer.name,
                category,
                m,
                n,
                k,
                groups,
                dgrad=not first,
                winograd=layer.winograd,
                flops=layer.flops,
            )
            first = False
        elif layer.kind in ("maxpool", "avgpool"):
            io = layer.values_in + layer.values_out
            b.vector(layer.name, "pool", io, 1.0, 2.0)
        elif layer.kind in _CNN_VECTOR:
            category, fwd, bwd, mask = _CNN_VECTOR[layer.kind]
            b.vector(layer.name, category, layer.values_out, fwd, bwd, mask=mask)
        elif layer.flops > 0:
            # no shape known (a layer of the user's): one product of its FLOPs, timed at the GEMM
            # rate, twice over backward
            b.add(f"{layer.name}:fwd", "matmul", "forward", flops=layer.flops, rate=_GEMM)
            b.add(f"{layer.name}:bwd", "matmul", "backward", flops=2 * layer.flops, rate=_GEMM, kernels=2.0)
            first = False
        for op in layer.tail:
            category, fwd, bwd = _TAIL[op]
            b.vector(f"{layer.name}.{op}", category, layer.values_out, fwd, bwd)


def _transformer(b: _Builder, c: dict, seq: int, tp: int, sp: bool, attention: str) -> None:
    """Megatron-LM's kernels of a transformer (module docstring), per sequence."""
    L, h, a, V, f = c["layers"], c["hidden"], c["heads"], c["vocab"], c["ffn_hidden"]
    s, t = float(seq), float(tp)
    sh = s * h
    stream = sh / t if sp else sh  # element-wise kernels on the s x h stream
    causal = bool(c.get("causal"))
    # embedding: gather word and position rows (and token types); the gradient tables are zeroed
    # and scatter-added every step
    tables = (V / t + c["max_positions"] + c.get("type_vocab", 0)) * h
    b.vector("embed", "embedding", stream, 2.0, 2.0, fixed_backward=4.0 * tables)
    b.vector("embed.dropout", "dropout", stream, 2.0, 2.0, mask=True)
    if not c["prenorm"]:
        b.vector("embed.ln", "norm", stream, 2.0, 4.0)
    _layers(b, L, h, s, t, f, stream, a / t, h / a, causal, attention)
    if c["prenorm"]:
        b.vector("final_ln", "norm", stream, 2.0, 4.0)
    if c.get("pooler"):
        b.gemm("pooler", "matmul", 1.0, h, h)
    b.gemm("logits", "matmul", s, V / t, h)
    b.vector("cross_entropy", "loss", s * V / t, 3.0, 2.0)


def _layers(
    b: _Builder,
    L: int,
    h: float,
    s: float,
    t: float,
    f: float,
    stream: float,
    heads: float,
    d_head: float,
    causal: bool,
    attention: str,
) -> None:
    """The kernels of the ``L`` transformer layers (one row each, ``calls = L``)."""
    name = "layers"
    kw = dict(in_layers=True, calls=float(L))
    b.vector(f"{name}.ln1", "norm", stream, 2.0, 4.0, **kw)
    b.gemm(f"{name}.attn.qkv", "matmul", s, 3 * h / t, h, **kw)
    scores = heads * s * s  # attention-matrix values per sequence
    if attention == "flash":
        fwd = 4.0 * s * s * h / t * (0.5 if causal else 1.0)
        d = b.d
        b.add(
            f"{name}.attn.flash:fwd",
            "attention",
            "forward",
            flops=fwd * L,
            bytes_sample=4 * d * s * h / t * L,
            rate=_FLASH,
            in_layers=True,
            kernels=L,
        )
        b.add(
            f"{name}.attn.flash:bwd",
            "attention",
            "backward",
            flops=FLASH_BACKWARD * fwd * L,
            bytes_sample=8 * d * s * h / t * L,
            rate=_FLASH,
            in_layers=True,
            kernels=L,
        )
    else:
        b.gemm(f"{name}.attn.scores", "attention", s, s, d_head, heads, weights=False, **kw)
        if attention == "unfused":
            b.vector(f"{name}.attn.scale", "softmax", scores, 2.0, 2.0, **kw)
            b.vector(f"{name}.attn.mask", "softmax", scores, 2.0, 2.0, **kw)
        b.vector(f"{name}.attn.softmax", "softmax", scores, 2.0, 3.0, **kw)
        b.vector(f"{name}.attn.dropout", "dropout", scores, 2.0, 2.0, mask=True, **kw)
        b.gemm(f"{name}.attn.context", "attention", s, d_head, s, heads, weights=False, **kw)
    b.gemm(f"{name}.attn.out", "matmul", s, h, h / t, **kw)
    b.vector(f"{name}.attn.bias_dropout_add", "elementwise", stream, 3.0, 3.0, mask=True, **kw)
    b.vector(f"{name}.ln2", "norm", stream, 2.0, 4.0, **kw)
    b.gemm(f"{name}.mlp.fc1", "matmul", s, f / t, h, **kw)
    b.vector(f"{name}.mlp.bias_gelu", "activation", s * f / t, 2.0, 3.0, **kw)
    b.gemm(f"{name}.mlp.fc2", "matmul", s, h, f / t, **kw)
    b.vector(f"{name}.mlp.bias_dropout_add", "elementwise", stream, 3.0, 3.0, mask=True, **kw)


@lru_cache(maxsize=256)
def _cached(
    key: tuple,
    wl: catalog.Workload,
    precision: str,
    seq: int | None,
    tp: int,
    sp: bool,
    attention: str,
    optimizer_traffic: float,
) -> Operators:
    b = _Builder(bytes_per_value(precision))
    if wl.kind == "transformer":
        _transformer(b, wl.config, seq or wl.config["seq"], tp, sp, attention)
    else:
        _layered(b, wl)
    # the update of this rank's parameters: one kernel per parameter tensor
    tensors = float(max(1, len(wl.gradient_params_backward)))
    b.add(
        "optimizer:update",
        "optimizer",
        "optimizer",
        bytes_fixed=wl.params / tp * optimizer_traffic,
        kernels=tensors,
    )
    return b.table()


def operator_table(
    workload: catalog.Workload | str,
    precision: str = "fp32",
    *,
    seq: int | None = None,
    tp: int = 1,
    sequence_parallel: bool = False,
    attention: str = "fused",
    optimizer_traffic: float = 20.0,
) -> Operators:
    """The kernels of one training step of ``workload`` (module docstring), per sample.

    ``seq`` (tokens), ``tp`` (tensor-parallel degree), ``sequence_parallel`` and ``attention``
    (:data:`ATTENTION_KERNELS`) apply to transformers; ``optimizer_traffic`` is the optimizer's
    bytes per parameter (see :data:`dlexplore.model.compute.OPTIMIZER_TRAFFIC_BYTES`). Cached.
    """
    wl = catalog.workload(workload)
    attention = str(attention).strip().lower()
    if attention not in ATTENTION_KERNELS:
        raise DlexploreError(
            f"unknown attention {attention!r}; expected one of {', '.join(ATTENTION_KERNELS)}"
        )
    if wl.kind == "transformer":
        if wl.config["heads"] % tp:
            raise DlexploreError(
                f"tp = {tp} must divide the {wl.config['heads']} attention heads of {wl.name!r}"
            )
    elif tp != 1:
        raise DlexploreError(f"{wl.name!r} is a {wl.kind}: tensor parallelism applies to transformers")
    key = (wl.name, wl.kind, wl.params, wl.flops_per_sample, wl.activation_bytes_per_sample, len(wl.layers))
    return _cached(
        key,
        wl,
        precision,
        None if seq is None else int(seq),
        int(tp),
        bool(sequence_parallel) and tp > 1,
        attention,
        float(optimizer_traffic),
    )


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
    sm_count: int = 0,
) -> np.ndarray:
    """Time (s) of every kernel of ``ops`` for ``batch`` samples, shape ``(*broadcast, len(ops))``.

    ``batch`` and the efficiencies may be arrays; they broadcast together (the model's sweeps) and
    the kernels run along a new last axis. ``peak_flops`` in FLOP/s, ``memory_bandwidth_gbs`` in
    GB/s, ``kernel_time`` in s, ``winograd_speedup`` >= 1 (1 on tensor cores: the caller decides).
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
        )
    ]
    B, e_gemm, e_mem, t_kernel, wino, e_flash = (a[..., np.newaxis] for a in arrays)
    flops = ops.flops * B
    flops = np.where(ops.winograd, flops / wino, flops)
    rate = np.where(ops.rate == _FLASH, e_flash, e_gemm) * peak_flops * ops.tiles
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
