"""Compute time of one micro-batch on one pipeline stage of a tensor-parallel group, from the
per-operator model (:mod:`dlexplore.model.operators`): what :mod:`dlexplore.model.parallel` builds
its hybrid step from.

The kernels of the workload at the micro-batch, sequence length and tensor-parallel degree (the
GEMM shapes shrink with ``t``: QKV and the first MLP product have ``n/t`` columns, the attention
output and second MLP product ``k/t``, attention ``a/t`` heads) are timed once; the transformer
layers' kernels are divided over the ``pp`` stages, and the stage that also runs the embedding or
the logits and loss (the first or the last) sets the pipeline's pace::

    t_stage = t_layers / pp + max(t_embedding, t_logits + t_loss + t_final_norm)   (pp > 1)
    t_stage = everything                                                            (pp = 1)

Recomputation reruns forward kernels during the backward pass: ``full`` every layer kernel's
forward, ``selective`` only the attention core (``QK^T``, softmax, dropout, ``PV``; Korthikanti et
al. 2022) and nothing with flash attention, whose kernel recomputes its scores already.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .. import catalog
from .compute import kernel_times
from .operators import CATEGORIES, PHASES, Operators, operator_table

__all__ = ["StageCompute", "stage_compute", "ATTENTION_CORE"]

#: Kernels selective recomputation reruns (by name): the attention core.
ATTENTION_CORE = (".attn.scores", ".attn.scale", ".attn.mask", ".attn.softmax", ".attn.dropout",
                  ".attn.context")
_OUTSIDE_FIRST = ("embed", "embed.dropout", "embed.ln")


@dataclass(frozen=True)
class StageCompute:
    """Seconds for one micro-batch on the slowest stage: ``forward``, ``backward`` (without
    recomputation), ``recompute``; ``by_category`` the same split by operator category (forward +
    backward + recompute, :data:`dlexplore.model.operators.CATEGORIES`); ``ops`` the table."""

    forward: float
    backward: float
    recompute: float
    by_category: np.ndarray
    ops: Operators

    @property
    def total(self) -> float:
        """Forward, backward and recomputation of the micro-batch, s."""
        return self.forward + self.backward + self.recompute


def stage_compute(workload: catalog.Workload, gpu: catalog.GPU, precision: str, *,
                  micro_batch: int, tp: int, pp: int, sequence_parallel: bool, recompute: str,
                  attention: str, params: Mapping[str, float],
                  optimizer_traffic: float = 28.0) -> StageCompute:
    """One micro-batch on the slowest of ``pp`` stages (module docstring); ``params`` holds the
    compute parameters (:data:`dlexplore.model.compute.COMPUTE_PARAMETERS`)."""
    ops = operator_table(workload, precision, tp=tp, sequence_parallel=sequence_parallel,
                         attention=attention, optimizer_traffic=optimizer_traffic)
    times = np.asarray(kernel_times(ops, float(micro_batch), gpu, precision, params), dtype=float)
    step = ops.phase != PHASES.index("optimizer")
    layers = ops.in_layers & step
    outside = ~ops.in_layers & step
    first = np.array([name.split(":")[0] in _OUTSIDE_FIRST for name in ops.name]) & outside
    last = outside & ~first
    weight = np.where(layers, 1.0 / pp, 0.0)
    if pp > 1:
        # the slowest end stage carries its extra kernels; the other end's are idle time for it
        heavier = last if times[last].sum() >= times[first].sum() else first
        weight = weight + np.where(heavier, 1.0, 0.0)
    else:
        weight = weight + np.where(outside, 1.0, 0.0)
    forward = ops.phase == PHASES.index("forward")
    backward = ops.phase == PHASES.index("backward")
    recomputed = np.zeros(len(ops), dtype=bool)
    if recompute == "full":
        recomputed = forward & layers
    elif recompute == "selective" and attention != "flash":
        recomputed = forward & layers & np.array([any(k in name for k in ATTENTION_CORE)
                                                  for name in ops.name])
    w = times * weight
    by_category = np.zeros(len(CATEGORIES))
    np.add.at(by_category, ops.category, w * step + w * recomputed)
    return StageCompute(forward=float(w[forward].sum()), backward=float(w[backward].sum()),
                        recompute=float(w[recomputed].sum()), by_category=by_category, ops=ops)
