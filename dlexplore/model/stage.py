"""Compute time of one micro-batch on one pipeline stage of a tensor-parallel group, from the
per-operator model (:mod:`dlexplore.model.operators`): what :mod:`dlexplore.model.parallel` builds
its hybrid step from.

The kernels of the workload at the micro-batch, sequence length and tensor-parallel degree (the
GEMM shapes shrink with ``t``: QKV and the first MLP product have ``n/t`` columns, the attention
output and second MLP product ``k/t``, attention ``a/t`` heads) are timed once per micro-batch size
(:func:`stage_sums`, vectorised over micro-batch sizes); the transformer layers' kernels are divided
over the ``pp`` stages, and the stage that also runs the embedding or the logits and loss (the
first or the last) sets the pipeline's pace (:func:`stage_times`)::

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
import numpy.typing as npt

from .. import catalog
from .compute import kernel_times
from .operator_table import operator_table
from .operators import CATEGORIES, PHASES, Operators

__all__ = ["StageSums", "stage_sums", "stage_times", "ATTENTION_CORE", "GROUPS"]

#: Kernels selective recomputation reruns (by name): the attention core.
ATTENTION_CORE = (
    ".attn.scores",
    ".attn.scale",
    ".attn.mask",
    ".attn.softmax",
    ".attn.dropout",
    ".attn.context",
)
_OUTSIDE_FIRST = ("embed", "embed.dropout", "embed.ln")
#: The kernel groups :func:`stage_sums` adds up: the layers' forward and backward, the attention
#: core's forward (what selective recomputation reruns), the layers' matrix products (forward and
#: backward, what tensor-parallel communication can hide behind), and the kernels outside the
#: layers on the first stage (embedding) and on the last (final norm, logits, loss).
GROUPS = (
    "layers_forward",
    "layers_backward",
    "attention_core",
    "layers_gemm",
    "first_forward",
    "first_backward",
    "last_forward",
    "last_backward",
)


@dataclass(frozen=True)
class StageSums:
    """Seconds per micro-batch of each :data:`GROUPS` entry (``sums[..., g]``; the leading axes are
    the micro-batch sizes'), and the same per operator category for the breakdown
    (``by_category[..., g, c]`` for the groups ``layers_forward``, ``layers_backward``,
    ``attention_core``, ``first``, ``last``)."""

    sums: np.ndarray
    by_category: np.ndarray
    ops: Operators

    def __getitem__(self, group: str) -> np.ndarray:
        return self.sums[..., GROUPS.index(group)]


def _masks(ops: Operators, attention: str) -> tuple[np.ndarray, np.ndarray]:
    step = ops.phase != PHASES.index("optimizer")
    forward = ops.phase == PHASES.index("forward")
    backward = ops.phase == PHASES.index("backward")
    layers = ops.in_layers & step
    outside = ~ops.in_layers & step
    first = np.array([name.split(":")[0] in _OUTSIDE_FIRST for name in ops.name]) & outside
    last = outside & ~first
    core = np.array([any(k in name for k in ATTENTION_CORE) for name in ops.name])
    core = core & forward & layers & (attention != "flash")
    gemm = layers & (ops.rate != 0)  # matrix products (and flash attention): not memory-bound
    groups = np.stack(
        [
            layers & forward,
            layers & backward,
            core,
            gemm,
            first & forward,
            first & backward,
            last & forward,
            last & backward,
        ],
        axis=1,
    ).astype(float)
    category = np.zeros((len(ops), len(CATEGORIES)))
    category[np.arange(len(ops)), ops.category] = 1.0
    return groups, category


#: (id of the workload, settings) -> (the workload, its kernels, their group and category masks):
#: the operator table's own cache hashes the whole workload (thousands of layers) at every call,
#: which a calibration, calling the model hundreds of times, would pay each time.
_TABLES: dict[tuple, tuple] = {}


def _table(
    workload: catalog.Workload,
    precision: str,
    tp: int,
    sequence_parallel: bool,
    attention: str,
    optimizer_traffic: float,
) -> tuple[Operators, np.ndarray, np.ndarray]:
    key = (id(workload), precision, tp, sequence_parallel, attention, optimizer_traffic)
    hit = _TABLES.get(key)
    if hit is not None and hit[0] is workload:
        return hit[1], hit[2], hit[3]
    ops = operator_table(
        workload,
        precision,
        tp=tp,
        sequence_parallel=sequence_parallel,
        attention=attention,
        optimizer_traffic=optimizer_traffic,
    )
    groups, category = _masks(ops, attention)
    if len(_TABLES) >= 512:
        _TABLES.clear()
    _TABLES[key] = (workload, ops, groups, category)
    return ops, groups, category


def stage_sums(
    workload: catalog.Workload,
    gpu: catalog.GPU,
    precision: str,
    *,
    micro_batch: npt.ArrayLike,
    tp: int,
    sequence_parallel: bool,
    attention: str,
    params: Mapping[str, npt.ArrayLike],
    optimizer_traffic: float = 28.0,
) -> StageSums:
    """Every kernel of one micro-batch timed (:func:`dlexplore.model.compute.kernel_times`) and
    added up per :data:`GROUPS` entry; ``micro_batch`` (samples) and the compute ``params`` may be
    arrays, which broadcast."""
    ops, groups, category = _table(workload, precision, tp, sequence_parallel, attention, optimizer_traffic)
    times = np.asarray(
        kernel_times(ops, np.asarray(micro_batch, dtype=float), gpu, precision, params), dtype=float
    )
    sums = times @ groups
    # the breakdown's groups: layers forward, layers backward, attention core, first, last stage
    pick = np.stack(
        [groups[:, 0], groups[:, 1], groups[:, 2], groups[:, 4] + groups[:, 5], groups[:, 6] + groups[:, 7]],
        axis=1,
    )
    by_category = np.einsum("...k,kg,kc->...gc", times, pick, category)
    return StageSums(sums=sums, by_category=by_category, ops=ops)


def stage_times(sums: np.ndarray, pp: npt.ArrayLike, recompute: str) -> dict[str, np.ndarray]:
    """``forward``, ``backward`` and ``recompute`` seconds of one micro-batch on the slowest of
    ``pp`` stages (module docstring), and ``gemm`` (the layers' matrix products on it), from the
    :data:`GROUPS` sums (last axis of ``sums``, e.g. :attr:`StageSums.sums`); ``pp`` broadcasts
    against the other axes."""

    def group(name: str) -> np.ndarray:
        return sums[..., GROUPS.index(name)]

    p = np.asarray(pp, dtype=float)
    first = group("first_forward") + group("first_backward")
    last = group("last_forward") + group("last_backward")
    heavier_last = last >= first
    multi = p > 1
    ends = {}
    for phase in ("forward", "backward"):
        f, la = group(f"first_{phase}"), group(f"last_{phase}")
        ends[phase] = np.where(multi, np.where(heavier_last, la, f), f + la)
    rerun = {"none": 0.0, "full": group("layers_forward"), "selective": group("attention_core")}
    return {
        "forward": group("layers_forward") / p + ends["forward"],
        "backward": group("layers_backward") / p + ends["backward"],
        "recompute": rerun[recompute] / p + 0 * p,
        "gemm": group("layers_gemm") / p,
    }
