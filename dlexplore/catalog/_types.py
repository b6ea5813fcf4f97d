"""The records the catalogs hold. Units are in the field names or docstrings; all SI unless named."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np

from ..errors import DlexploreError

__all__ = ["GPU", "Link", "StorageTier", "Layer", "Workload", "PRECISIONS"]

#: Training precisions the model knows. ``fp16`` and ``bf16`` mean mixed precision (16-bit compute,
#: activations and gradients, fp32 master weights), as in Micikevicius et al. (2018).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class GPU:
    """An accelerator.

    Peak rates are dense (no sparsity) TFLOP/s = 1e12 FLOP/s. ``tf32_tflops`` is NaN where the device
    has no TF32 mode; ``bf16_tflops`` is NaN where it has no bf16 arithmetic.
    """

    name: str
    vendor: str
    fp32_tflops: float
    tf32_tflops: float
    fp16_tflops: float
    bf16_tflops: float
    memory_bytes: float
    memory_bandwidth_gbs: float  # GB/s (1e9 bytes/s)
    tdp_w: float
    idle_w: float
    source: str
    aliases: tuple[str, ...] = ()
    #: Microarchitecture (``Pascal``, ``Volta``, ``Ampere``, ...): a GPU without published GEMM
    #: measurements of its own takes the efficiency measured on a sibling of the same architecture.
    architecture: str = ""
    #: Streaming multiprocessors (compute units on AMD): a matrix product's tiles run in waves over
    #: them. 0 where unknown (no wave quantisation).
    sm_count: int = 0

    def peak_flops(self, precision: str) -> float:
        """Peak dense FLOP/s for ``precision`` (fp32, tf32, fp16, bf16).

        TF32 on a device without it runs as fp32 (as PyTorch's ``allow_tf32`` does); bf16 on a
        device without bf16 is an error, because frameworks refuse it or emulate it far below peak.
        """
        if precision not in PRECISIONS:
            raise DlexploreError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        value = getattr(self, f"{precision}_tflops")
        if precision == "tf32" and math.isnan(value):
            value = self.fp32_tflops
        if math.isnan(value):
            raise DlexploreError(f"GPU {self.name!r} has no {precision} arithmetic")
        return value * 1e12


@dataclass(frozen=True)
class Link:
    """A link or network: ``bandwidth_gbs`` is per direction per GPU (or per NIC), in GB/s.

    ``kind`` is ``"intra"`` for links inside a node (PCIe, NVLink) and ``"network"`` between nodes.
    ``latency_s`` is the one-way small-message latency (the alpha of the alpha-beta model), seconds.
    ``fabric`` is the link technology as NCCL's cost model distinguishes it (``nvlink``, ``pcie``,
    ``infiniband``, ``ethernet``; empty: inferred from ``kind``). ``efficiency`` is the fraction of
    ``bandwidth_gbs`` that collectives reach on the link (NCCL's own per-link figure over the line
    rate; 1 where none is published). ``reduction`` names in-network reduction the hardware offers
    to allreduce: ``nvls`` (NVLink SHARP in third-generation NVSwitches) or ``sharp`` (InfiniBand
    SHARP in the switches), empty for none.
    """

    name: str
    kind: str
    bandwidth_gbs: float
    latency_s: float
    source: str
    aliases: tuple[str, ...] = ()
    fabric: str = ""
    efficiency: float = 1.0
    reduction: str = ""


@dataclass(frozen=True)
class StorageTier:
    """Where training data is read from.

    ``scope`` is ``"shared"`` (one system serves every node: ``bandwidth_gbs`` is its aggregate) or
    ``"node"`` (one device per node: ``bandwidth_gbs`` is per node, shared by that node's GPUs).
    ``client_bandwidth_gbs`` caps what one reader (one GPU's loader) gets; ``latency_s`` is the time
    of one small read (open + first byte), seconds.
    """

    name: str
    scope: str
    bandwidth_gbs: float
    client_bandwidth_gbs: float
    latency_s: float
    source: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layer:
    """One layer: ``params`` (count), forward ``flops`` per sample (a multiply-add is 2 FLOPs),
    ``activation_bytes`` per sample kept for the backward pass at fp32 (4-byte values).

    The shapes the compute model times it by (:mod:`dlexplore.model.operators`), per sample:

    - ``gemm``: ``(m, n, k, groups)`` of the matrix product the layer computes, ``2 m n k groups =
      flops``: ``m`` rows per sample (a convolution's output positions, 1 for a linear layer on a
      vector), ``n`` outputs (channels, features), ``k`` the reduction (input channels x kernel
      area), ``groups`` independent products (grouped convolutions). None for a layer without one.
    - ``values_in`` and ``values_out``: the values the layer reads and writes per sample (what a
      memory-bound layer's time depends on).
    - ``tail``: memory-bound operations applied to the output before the next layer (``relu``,
      ``add`` for a residual connection), each a kernel of its own unless the framework fuses it.
    - ``winograd``: a 3x3, stride-1, ungrouped convolution, which cuDNN can run with Winograd's
      algorithm (fewer multiplications than the direct method counts).
    """

    name: str
    kind: str
    params: int
    flops: float
    activation_bytes: float
    gemm: tuple[float, float, float, float] | None = None
    values_in: float = 0.0
    values_out: float = 0.0
    tail: tuple[str, ...] = ()
    winograd: bool = False


@dataclass(frozen=True)
class Workload:
    """A network to train, as its layers in forward order.

    Totals are derived from ``layers``; ``input_bytes_per_sample`` is what the loader reads from
    storage for one sample (e.g. one JPEG), bytes.
    """

    name: str
    kind: str
    layers: tuple[Layer, ...]
    input_bytes_per_sample: float
    sample_unit: str
    source: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    config: dict = field(default_factory=dict, compare=False, hash=False)

    def __repr__(self) -> str:
        # The layers are hundreds of records: summarise them (``.layers`` holds them all).
        gflop = self.flops_per_sample / 1e9
        shown = f"{gflop:,.0f}" if gflop >= 1000 else f"{gflop:.3g}"
        return (
            f"Workload({self.name!r}, {self.kind}, {self.params:,} parameters, {shown} GFLOP per "
            f"{self.sample_unit.rstrip('s')} forward, {len(self.layers)} layers)"
        )

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        # A workload keys the operator-table and resizing caches on every prediction: hashing its
        # hundreds of layers each time was a tenth of a calibration's time.
        return hash(tuple(getattr(self, f.name) for f in fields(self) if f.hash is not False and f.compare))

    @cached_property
    def params(self) -> int:
        """Trainable parameters (count)."""
        return int(sum(layer.params for layer in self.layers))

    @cached_property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample; a training step costs about three times this."""
        return float(sum(layer.flops for layer in self.layers))

    @cached_property
    def activation_bytes_per_sample(self) -> float:
        """Activation bytes per sample kept for backward, at fp32 (halve for 16-bit activations)."""
        return float(sum(layer.activation_bytes for layer in self.layers))

    @cached_property
    def gradient_params_backward(self) -> np.ndarray:
        """Parameter count of each layer that has parameters, in the order backward produces
        their gradients (last layer first); multiply by bytes per gradient for message sizes."""
        return np.array([layer.params for layer in reversed(self.layers) if layer.params > 0], dtype=np.int64)

    @cached_property
    def gradient_ready_fraction(self) -> np.ndarray:
        """For each entry of :attr:`gradient_params_backward`, the fraction (0..1] of the backward
        pass done when that gradient is ready, taking backward cost proportional to forward FLOPs."""
        flops = np.array([layer.flops for layer in reversed(self.layers)], dtype=float)
        total = flops.sum()
        done = np.cumsum(flops) / total if total > 0 else np.linspace(0, 1, len(flops) + 1)[1:]
        has_params = np.array([layer.params > 0 for layer in reversed(self.layers)])
        return done[has_params]
