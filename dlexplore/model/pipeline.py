"""Pipeline schedules: the bubble, the point-to-point traffic and the activations each keeps in flight.

``p`` pipeline stages, ``m`` micro-batches per replica and step, ``v`` virtual stages (model chunks)
per GPU, ``t_mb`` the time one stage needs for one micro-batch (forward, backward, recomputation and
its communication), ``L`` transformer layers (Narayanan et al. 2021, sections 2.2 and 3.1):

===============  ======================  ==========================  ===========================
schedule         pipelined time          first stage holds           p2p messages per micro-batch
===============  ======================  ==========================  ===========================
``gpipe``        ``(m + p - 1) t_mb``    ``m`` micro-batches          1 forward + 1 backward
``1f1b``         ``(m + p - 1) t_mb``    ``min(p, m)`` micro-batches  1 forward + 1 backward
``interleaved``  ``(m + (p-1)/v) t_mb``  ``min(vp + p - 1, vm)``      ``v`` forward + ``v`` backward
                                         chunks of ``L/(pv)`` layers
===============  ======================  ==========================  ===========================

- **Bubble.** Narayanan et al.'s *bubble time fraction* (the idle time over the ideal time
  ``m t_mb``) is ``(p - 1)/m``, and ``(p - 1)/(v m)`` with ``v`` model chunks per GPU, each of which
  takes ``t_mb / v``: :func:`bubble_overhead`. :func:`bubble_fraction` is the idle share of the
  pipelined time, ``(p - 1)/(v m + p - 1)``.
- **Point-to-point traffic.** Every micro-batch crosses each boundary between chunks: ``v p - 1``
  boundaries instead of ``p - 1``, so a stage sends and receives ``v`` times as often (the extra
  communication of interleaving, Narayanan et al. section 2.2.2).
- **Activations in flight.** 1F1B's first stage runs ``p - 1`` warm-up forwards before its first
  backward, so it holds ``min(p, m)`` micro-batches of ``L/p`` layers: ``L`` layers' activations
  whatever ``p`` is. GPipe holds all ``m``. Megatron-LM's interleaved schedule warms up with
  ``2(p - 1) + (v - 1) p`` chunk forwards on the first stage (``get_forward_backward_func``,
  ``num_warmup_microbatches``), so ``vp + p - 1`` chunks of ``L/(pv)`` layers are live:
  ``L (1 + (p - 1)/(p v))`` layers' activations, Korthikanti et al. (2022)'s factor for the
  interleaved schedule (section 4.2.3).

Megatron-LM's interleaved schedule needs ``m`` to be a multiple of ``p`` and ``L/p`` a multiple of
``v``: :func:`schedule_problem` says which configurations break a rule.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..errors import DlexploreError

__all__ = [
    "SCHEDULES",
    "normalize_schedule",
    "bubble_fraction",
    "bubble_overhead",
    "pipeline_time",
    "layers_in_flight",
    "micro_batches_in_flight",
    "p2p_messages",
    "schedule_problem",
]

SCHEDULES = ("1f1b", "gpipe", "interleaved")
_ALIASES = {"pipedream-flush": "1f1b", "interleaved-1f1b": "interleaved", "virtual": "interleaved"}


def normalize_schedule(schedule: str) -> str:
    """Canonical schedule name: ``1f1b``, ``gpipe`` or ``interleaved``."""
    key = str(schedule).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in SCHEDULES:
        raise DlexploreError(f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    return key


def _float(*values: npt.ArrayLike) -> list[np.ndarray]:
    return [np.asarray(v, dtype=float) for v in values]


def bubble_overhead(
    pp: npt.ArrayLike, micro_batches: npt.ArrayLike, virtual_stages: npt.ArrayLike = 1
) -> np.ndarray:
    """Narayanan et al.'s bubble time fraction, idle time over ideal time: ``(p - 1)/(v m)``."""
    p, m, v = _float(pp, micro_batches, virtual_stages)
    return (p - 1) / (v * m)


def bubble_fraction(
    pp: npt.ArrayLike, micro_batches: npt.ArrayLike, virtual_stages: npt.ArrayLike = 1
) -> np.ndarray:
    """The idle share of the pipelined time, ``(p - 1)/(v m + p - 1)`` (``v = 1``: GPipe, 1F1B)."""
    p, m, v = _float(pp, micro_batches, virtual_stages)
    return (p - 1) / (v * m + p - 1)


def pipeline_time(
    micro_batch_time: npt.ArrayLike,
    pp: npt.ArrayLike,
    micro_batches: npt.ArrayLike,
    virtual_stages: npt.ArrayLike = 1,
) -> np.ndarray:
    """Time (s) of ``m`` micro-batches through ``p`` stages: ``(m + (p - 1)/v) t_mb``."""
    t, p, m, v = _float(micro_batch_time, pp, micro_batches, virtual_stages)
    return (m + (p - 1) / v) * t


def micro_batches_in_flight(
    schedule: str,
    pp: npt.ArrayLike,
    micro_batches: npt.ArrayLike,
    virtual_stages: npt.ArrayLike = 1,
    stage: npt.ArrayLike = 0,
) -> np.ndarray:
    """Micro-batches whose activations stage ``stage`` (0 the first, ``p - 1`` the last) holds at
    its peak, counted in whole micro-batches of the stage's ``L/p`` layers: ``min(p - r, m)`` for
    1F1B, ``m`` for GPipe, ``min(2(p - r - 1) + (v - 1) p + 1, v m) / v`` interleaved (Megatron-LM's
    warm-up forwards plus the one in flight); 1 without pipeline parallelism (``p = 1``: the
    micro-batches run one after the other)."""
    schedule = normalize_schedule(schedule)
    p, m, v, r = _float(pp, micro_batches, virtual_stages, stage)
    if schedule == "gpipe":
        return np.where(p > 1, m, 1.0) + 0 * (v + r)
    if schedule == "1f1b":
        return np.minimum(p - r, m) + 0 * v
    return np.minimum(2 * (p - r - 1) + (v - 1) * p + 1, v * m) / v


def layers_in_flight(
    schedule: str,
    layers: npt.ArrayLike,
    pp: npt.ArrayLike,
    micro_batches: npt.ArrayLike,
    virtual_stages: npt.ArrayLike = 1,
) -> np.ndarray:
    """Layer activations of one micro-batch each that the first stage holds at its peak: ``L``
    for 1F1B (``m >= p``), ``m L / p`` for GPipe, ``L (1 + (p - 1)/(p v))`` interleaved."""
    L, p = _float(layers, pp)
    return micro_batches_in_flight(schedule, pp, micro_batches, virtual_stages) * L / p


def p2p_messages(schedule: str, virtual_stages: npt.ArrayLike = 1) -> np.ndarray:
    """Point-to-point messages a middle stage sends per micro-batch, forward and backward together:
    2, or ``2 v`` with the interleaved schedule."""
    v = np.asarray(virtual_stages, dtype=float)
    return 2 * v if normalize_schedule(schedule) == "interleaved" else np.full_like(v, 2.0)


def schedule_problem(
    schedule: str, layers: int, pp: int, micro_batches: int, virtual_stages: int = 1
) -> str | None:
    """Why the schedule cannot run this configuration (Megatron-LM's rules), or None."""
    schedule = normalize_schedule(schedule)
    if schedule != "interleaved":
        if virtual_stages != 1:
            return f"virtual_stages = {virtual_stages} needs the interleaved schedule, not {schedule}"
        return None
    if virtual_stages < 1:
        return f"virtual_stages must be >= 1, got {virtual_stages}"
    if pp < 2:
        return "the interleaved schedule needs pp >= 2"
    if (layers // pp) % virtual_stages or layers % pp:
        return (
            f"the interleaved schedule splits each stage's {layers} / {pp} layers into "
            f"virtual_stages = {virtual_stages} equal chunks: {layers} / ({pp} x "
            f"{virtual_stages}) is not a whole number"
        )
    if micro_batches % pp:
        return (
            f"Megatron-LM's interleaved schedule needs the micro-batches per step ({micro_batches}) "
            f"to be a multiple of pp = {pp}"
        )
    return None
