"""The rules a hybrid-parallel configuration must follow, checked on arrays of configurations.

:func:`configuration_problems` returns each rule as a mask of the configurations that break it and a
message naming the values of one of them, so that a sweep marks the broken configurations (NaN) while a
single configuration raises the message. The rules: whole numbers where the model needs them, ZeRO
stage 0-3, overlaps within [0, 1], ``dp x tp x pp = gpus``, a global batch that ``dp x micro_batch``
divides, ZeRO 2-3 only without pipelining (DeepSpeed), a network for more than one node, ``tp``
dividing the heads and ``pp`` the layers of a transformer (data parallelism only for other
workloads), and Megatron-LM's rules for the interleaved schedule
(:func:`dlexplore.model.pipeline.schedule_problem`).

Before those rules, :func:`check_values` holds each setting by itself to what it may be
(:mod:`dlexplore.validation`: a GPU count from 1 to a million, a fraction within (0, 1] ...) and
refuses a bad one in words, even inside a sweep: a negative bandwidth is a typo, not a configuration
to mark NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from .. import validation
from ..errors import InvalidValueError

if TYPE_CHECKING:
    from .hybrid import HybridSetup

__all__ = ["Problem", "check_values", "configuration_problems", "sanitized"]

Problem = tuple[np.ndarray, Callable[[int], str]]


def _fraction(name: str, value: object) -> object:
    return validation.fraction(name, value, allow_zero=False)


#: How each numeric setting of the hybrid model is checked (settings not named here are not numbers
#: a user gives: ``sequence_parallel`` and ``offload`` are flags).
_CHECKS: dict[str, Callable[[str, object], object]] = {
    "gpus": validation.gpu_count,
    "dp": validation.gpu_count,
    "tp": validation.gpu_count,
    "pp": validation.gpu_count,
    "gpus_per_node": validation.gpu_count,
    "micro_batch": validation.batch_size,
    "batch_size": lambda name, value: validation.batch_size(name, value, gpus=validation.MAX_GPUS),
    "zero": lambda name, value: validation.count(name, value, minimum=0, maximum=3),
    "virtual_stages": validation.count,
    "overlap": validation.fraction,
    "tp_overlap": validation.fraction,
    "workspace": lambda name, value: validation.nonnegative(name, value, units="bytes"),
    "cpu_bandwidth": lambda name, value: validation.positive(name, value, units="GB/s"),
    "bandwidth": lambda name, value: validation.positive(name, value, units="GB/s"),
    "intra_bandwidth": lambda name, value: validation.positive(name, value, units="GB/s"),
    "latency": lambda name, value: validation.nonnegative(name, value, units="s"),
    "intra_latency": lambda name, value: validation.nonnegative(name, value, units="s"),
    "compute_efficiency": _fraction,
    "memory_efficiency": _fraction,
    "flash_efficiency": _fraction,
    "unaligned_efficiency": _fraction,
    "kernel_time": lambda name, value: validation.nonnegative(name, value, units="s"),
    "winograd_speedup": lambda name, value: validation.number(name, value, minimum=1),
}


def check_values(st: HybridSetup, values: Mapping[str, object]) -> None:
    """Refuse, with :class:`~dlexplore.errors.InvalidValueError`, a setting outside what it may be
    (each value of a sweep too) and a precision the GPU does not compute in; ``None`` is a default
    and passes."""
    for name, value in values.items():
        if value is None:
            continue
        check = _CHECKS.get(name)
        if check is not None:
            check(name, value)
        elif name in ("sequence_parallel", "offload"):
            flags = np.asarray(value)
            if flags.dtype != bool and not (
                flags.dtype.kind in "iuf" and np.all((flags == 0) | (flags == 1))
            ):
                raise InvalidValueError(name, value, "True or False")
    validation.precision_for(st.dev, st.precision)


def configuration_problems(
    st: HybridSetup, a: Mapping[str, np.ndarray], schedule: str, recompute: str
) -> list[Problem]:
    """Each rule a configuration can break: (mask of the configurations that break it, the message
    for the configuration at a flat index)."""
    shape = np.broadcast_shapes(*(v.shape for v in a.values()))
    b = a

    def at(name: str, i: int) -> float:
        value = float(np.broadcast_to(a[name], shape).flat[i])
        return int(value) if value.is_integer() else value

    def whole(x: np.ndarray, minimum: float = 1) -> np.ndarray:
        return ~((x == np.floor(x)) & (x >= minimum))

    out: list[Problem] = []
    for name in ("gpus", "tp", "pp", "micro_batch", "gpus_per_node", "virtual_stages"):
        out.append((whole(b[name]), lambda i, n=name: f"{n} must be a whole number >= 1, got {at(n, i)}"))
    out.append(
        (whole(b["zero"], 0) | (b["zero"] > 3), lambda i: f"zero must be 0, 1, 2 or 3, got {at('zero', i)}")
    )
    for name in ("overlap", "tp_overlap"):
        out.append(
            ((b[name] < 0) | (b[name] > 1), lambda i, n=name: f"{n} must be within [0, 1], got {at(n, i)}")
        )
    tp_pp = b["tp"] * b["pp"]
    out.append(
        (
            np.mod(b["gpus"], tp_pp) != 0,
            lambda i: (
                f"tp x pp = {at('tp', i)} x {at('pp', i)} = {at('tp', i) * at('pp', i)} does not divide "
                f"gpus = {at('gpus', i)}"
            ),
        )
    )
    out.append(
        (
            whole(b["dp"]) | (b["dp"] * tp_pp != b["gpus"]),
            lambda i: (
                f"dp x tp x pp = {at('dp', i)} x {at('tp', i)} x {at('pp', i)} != gpus = {at('gpus', i)}"
            ),
        )
    )
    dp_mb = b["dp"] * b["micro_batch"]
    out.append(
        (
            whole(b["batch_size"]) | (np.mod(b["batch_size"], dp_mb) != 0),
            lambda i: (
                f"the global batch {at('batch_size', i)} must be a multiple of dp x micro_batch = "
                f"{at('dp', i)} x {at('micro_batch', i)} = {at('dp', i) * at('micro_batch', i)}"
            ),
        )
    )
    out.append(
        (
            (b["zero"] >= 2) & (b["pp"] > 1),
            lambda i: (
                f"ZeRO stage {at('zero', i)} with pipeline parallelism (pp = {at('pp', i)}): DeepSpeed's "
                "pipeline engine supports ZeRO stages 0 and 1 only"
            ),
        )
    )
    if st.net is None or not np.isfinite(st.net.bandwidth_gbs):
        multi = (b["gpus"] > b["gpus_per_node"]) & ~np.isfinite(b["bandwidth"])
        out.append(
            (multi, lambda i: f"{at('gpus', i)} GPUs over {at('gpus_per_node', i)} per node need a network")
        )
    out += _model_problems(st, b, schedule, recompute)
    return out


def _model_problems(
    st: HybridSetup, b: Mapping[str, np.ndarray], schedule: str, recompute: str
) -> list[Problem]:
    wl = st.wl
    shape = np.broadcast_shapes(*(v.shape for v in b.values()))

    def at(name: str, i: int) -> int:
        return int(np.broadcast_to(b[name], shape).flat[i])

    if not st.transformer:
        model_parallel = (b["tp"] > 1) | (b["pp"] > 1) | (b["sequence_parallel"] > 0)
        if recompute != "none":
            model_parallel = model_parallel | True
        return [
            (
                model_parallel,
                lambda i: (
                    f"{wl.name!r} is a {wl.kind}: only data parallelism and ZeRO apply "
                    "(tp = pp = 1, recompute none, no sequence parallelism)"
                ),
            )
        ]
    L, a = wl.config["layers"], wl.config["heads"]
    out: list[Problem] = [
        (
            np.mod(a, b["tp"]) != 0,
            lambda i: f"tp = {at('tp', i)} must divide the {a} attention heads of {wl.name!r}",
        ),
        (np.mod(L, b["pp"]) != 0, lambda i: f"pp = {at('pp', i)} must divide the {L} layers of {wl.name!r}"),
    ]
    v = b["virtual_stages"]
    if schedule != "interleaved":
        out.append(
            (
                v != 1,
                lambda i: (
                    f"virtual_stages = {at('virtual_stages', i)} needs the "
                    f"interleaved schedule, not {schedule}"
                ),
            )
        )
        return out
    m = b["batch_size"] / (b["dp"] * b["micro_batch"])
    out.append((b["pp"] < 2, lambda i: "the interleaved schedule needs pp >= 2"))
    out.append(
        (
            np.mod(L / b["pp"], v) != 0,
            lambda i: (
                f"the interleaved schedule splits each stage's {L} / {at('pp', i)} layers into "
                f"virtual_stages = {at('virtual_stages', i)} equal chunks"
            ),
        )
    )
    out.append(
        (
            np.mod(m, b["pp"]) != 0,
            lambda i: (
                f"Megatron-LM's interleaved schedule needs the micro-batches per step "
                f"({int(np.broadcast_to(m, shape).flat[i])}) to be a multiple of pp = {at('pp', i)}"
            ),
        )
    )
    return out


#: Harmless values for settings that are wrong on their own (the configuration is NaN anyway).
_SAFE = {
    "gpus": 1.0,
    "dp": 1.0,
    "tp": 1.0,
    "pp": 1.0,
    "micro_batch": 1.0,
    "batch_size": 1.0,
    "zero": 0.0,
    "virtual_stages": 1.0,
    "gpus_per_node": 1.0,
    "overlap": 0.0,
    "tp_overlap": 0.0,
}


def sanitized(a: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``a`` with each setting that is wrong by itself (not a whole number, out of range) replaced
    by a harmless value, each array keeping its own shape (so a sweep's axes stay apart)."""
    out = dict(a)
    for name, safe in _SAFE.items():
        v = a[name]
        if name in ("overlap", "tp_overlap"):
            wrong = ~((v >= 0) & (v <= 1))
        elif name == "zero":
            wrong = ~((v == np.floor(v)) & (v >= 0) & (v <= 3))
        else:
            wrong = ~((v == np.floor(v)) & (v >= 1))
        if wrong.any():
            out[name] = np.where(wrong, safe, v)
    return out
