"""Memory per GPU of a hybrid-parallel step, vectorised over configurations: the model states under
the setup's convention and the activations the schedule keeps in flight on the most loaded end
stage (formulas and sources: :mod:`dlexplore.model.states`, :mod:`dlexplore.model.pipeline`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from .memory import ACTIVATION_SCALE
from .pipeline import layers_in_flight, micro_batches_in_flight
from .states import (
    activation_bytes_per_layer,
    model_state_bytes,
    outside_layer_bytes,
    recompute_buffer,
)

if TYPE_CHECKING:
    from .hybrid import HybridSetup

__all__ = ["memory_per_gpu"]


def memory_per_gpu(
    st: HybridSetup, a: Mapping[str, np.ndarray], schedule: str, recompute: str, attention: str = "fused"
) -> dict[str, np.ndarray]:
    """``mem_*`` variables (bytes) and ``fits`` of the configurations ``a`` (arrays of
    :data:`dlexplore.model.hybrid.HYBRID_INPUTS`); ``attention="flash"`` keeps no attention
    matrices (:mod:`dlexplore.model.states`)."""
    wl = st.wl
    tp, pp, mb = a["tp"], a["pp"], a["micro_batch"]
    m = a["batch_size"] / (a["dp"] * mb)
    v = a["virtual_stages"] if schedule == "interleaved" else np.ones(())
    states = model_state_bytes(
        wl.params / (tp * pp),
        a["dp"],
        a["zero"],
        precision=st.precision,
        optimizer=st.optimizer,
        offload=a["offload"] > 0,
        convention=st.memory_convention,
    )
    scale = ACTIVATION_SCALE[st.precision] * 2  # the formulas count 16-bit bytes
    if st.transformer:
        first, last, buffer = _transformer_activations(st, a, schedule, recompute, m, v, attention)
        acts, acts_first = np.maximum(first, last) * scale, first * scale
        buffer = buffer * scale
    else:
        acts = acts_first = wl.activation_bytes_per_sample * ACTIVATION_SCALE[st.precision] * mb
        buffer = np.zeros(())
    total = states["params"] + states["grads"] + states["optimizer"] + acts + buffer + a["workspace"]
    capacity = float(st.dev.memory_bytes)
    return {
        "mem_params": states["params"],
        "mem_grads": states["grads"],
        "mem_optimizer": states["optimizer"],
        "mem_activations": acts,
        "mem_activations_first": acts_first,
        "mem_recompute": buffer,
        "mem_workspace": a["workspace"],
        "mem_total": total,
        "mem_capacity": np.asarray(capacity),
        "fits": total <= capacity,
        "mem_cpu_offload": states["cpu"],
    }


def _transformer_activations(
    st: HybridSetup,
    a: Mapping[str, np.ndarray],
    schedule: str,
    recompute: str,
    m: np.ndarray,
    v: np.ndarray,
    attention: str = "fused",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """16-bit bytes of the first and the last stage, and the recomputation buffer."""
    c = st.wl.config
    s, h, heads, L = c["seq"], c["hidden"], c["heads"], c["layers"]
    tp, pp, mb = a["tp"], a["pp"], a["micro_batch"]
    sp = a["sequence_parallel"] > 0
    per_layer = activation_bytes_per_layer(
        s, mb, h, heads, tp=tp, recompute=recompute, sequence_parallel=sp, attention=attention
    )
    embed, output = outside_layer_bytes(s, mb, h, c["vocab"], tp=tp, sequence_parallel=sp)
    first_held = micro_batches_in_flight(schedule, pp, m, v)
    first = (
        per_layer * layers_in_flight(schedule, L, pp, m, v)
        + (embed + np.where(pp > 1, 0.0, output)) * first_held
    )
    last_held = micro_batches_in_flight(schedule, pp, m, v, pp - 1)
    last = (per_layer * L / pp + output) * last_held
    buffer = recompute_buffer(
        s, mb, h, heads, tp=tp, recompute=recompute, sequence_parallel=sp, attention=attention
    )
    return first, last, buffer
