"""The operator table: the kernels a GPU runs for each layer of a workload in one training step
(:func:`operator_table`; the rules per layer kind are in :mod:`dlexplore.model.operators`), one row
each, with the tile quantisation of their products (:func:`tile_efficiency`). Cached per workload.

Kept whole: the kernels of every layer kind, one function per kind (CNN layers, transformer layers,
the head), adding rows to one table by the same rules.
"""

from __future__ import annotations

from .operators import TILE

__all__ = ["operator_table", "tile_efficiency"]

import math
from functools import lru_cache

import numpy as np

from .. import catalog
from ..errors import DlexploreError
from .operators import (
    _FLASH,
    _GEMM,
    _MASK,
    _VECTOR,
    ALIGNED_BYTES,
    ATTENTION_KERNELS,
    CATEGORIES,
    FLASH_BACKWARD,
    PHASES,
    Operators,
    bytes_per_value,
    normalize_fusion,
    normalize_layout,
    operand_alignment,
)


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
        transpose: bool = False,
        alignment: float = ALIGNED_BYTES,
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
                transpose,
                alignment,
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
            # cuDNN pads a convolution's channels itself; a linear layer's weight is as given
            alignment=ALIGNED_BYTES if category == "conv" else operand_alignment(d, n, k),
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
        transpose: bool = False,
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
            transpose=transpose,
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
                transpose=transpose,
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
            transpose=np.array(cols[14], dtype=bool),
            alignment=np.array(cols[15], dtype=float),
        )


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


#: The ops after a batch norm that cuDNN's fused batch norm takes in (BN + ReLU, BN + add + ReLU).
_FUSED_TAILS = (("relu",), ("add", "relu"))


def _layered(b: _Builder, wl: catalog.Workload, layout: str = "nhwc", fusion: str = "none") -> None:
    """Kernels of a workload given as layers (CNNs, and the user's layer lists); with ``layout``
    nchw, the transposes cuDNN runs around each convolution on tensor cores (marked ``transpose``:
    the caller drops them on vector units, where cuDNN convolves NCHW as it is); with ``fusion``
    bn_add_relu, each batch norm as one kernel with the add and ReLU that follow it."""
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
            if layout == "nchw" and layer.kind == "conv" and groups == 1:
                # input to NHWC and output back, around the forward product and around each
                # gradient's (the first layer has no input gradient); grouped and depthwise
                # convolutions run NCHW kernels of their own
                io = layer.values_in + layer.values_out
                b.vector(
                    f"{layer.name}.transpose", "elementwise", io, 2.0, 2.0 if first else 4.0, transpose=True
                )
            first = False
        elif layer.kind in ("maxpool", "avgpool"):
            io = layer.values_in + layer.values_out
            b.vector(layer.name, "pool", io, 1.0, 2.0)
        elif layer.kind == "bn" and fusion == "bn_add_relu" and tuple(layer.tail) in _FUSED_TAILS:
            # one pass more than the norm's own for the residual: read forward, its gradient
            # written backward
            added = 1.0 if "add" in layer.tail else 0.0
            category, fwd, bwd, mask = _CNN_VECTOR["bn"]
            b.vector(layer.name, category, layer.values_out, fwd + added, bwd + added, mask=mask)
            continue
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
    layout: str = "nhwc",
    fusion: str = "none",
) -> Operators:
    b = _Builder(bytes_per_value(precision))
    if wl.kind == "transformer":
        _transformer(b, wl.config, seq or wl.config["seq"], tp, sp, attention)
    else:
        _layered(b, wl, layout, fusion)
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
    layout: str = "nhwc",
    fusion: str = "none",
) -> Operators:
    """The kernels of one training step of ``workload`` (module docstring), per sample.

    ``seq`` (tokens), ``tp`` (tensor-parallel degree), ``sequence_parallel`` and ``attention``
    (:data:`ATTENTION_KERNELS`) apply to transformers, ``layout`` (:data:`LAYOUTS`) and ``fusion``
    (:data:`FUSIONS`) to convolutions; ``optimizer_traffic`` is the optimizer's bytes per parameter (see
    :data:`dlexplore.model.compute.OPTIMIZER_TRAFFIC_BYTES`). Cached.
    """
    wl = catalog.workload(workload)
    layout = normalize_layout(layout)
    fusion = normalize_fusion(fusion)
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
        layout,
        fusion,
    )


_TAIL = {"relu": ("activation", 2.0, 3.0), "add": ("elementwise", 3.0, 3.0)}
