"""Exercises of the parallelism lab (``notebooks/parallelism-lab.ipynb``), numbers 101 and up.

Worked from the published formulas, not by calling :mod:`dlexplore.model.parallel`:

- ZeRO (Rajbhandari et al. 2020): mixed-precision Adam keeps 2 + 2 + K bytes per parameter, K = 12;
  stage 3 shards all of it over the ``N_d`` data-parallel ranks: ``(2 + 2 + K) psi / N_d``;
- pipeline bubble of GPipe and 1F1B (Narayanan et al. 2021): ``(p - 1) / (m + p - 1)``;
- activations of one transformer layer with tensor parallelism ``t`` (Korthikanti et al. 2022):
  ``sbh (10 + 24/t + 5as/(ht))`` bytes at 16 bits.
"""

from __future__ import annotations

from ..core import Exercise, Solution, register

__all__ = ["ZERO3", "BUBBLE", "ACTIVATIONS"]

_PSI = 13e9  # parameters (a GPT-3 13B-sized model)
_ND = 64  # data-parallel ranks
_K = 12  # bytes of optimizer state per parameter, mixed-precision Adam
_GB = 1e9

_P, _M = 8, 32  # pipeline stages and micro-batches

# GPT-3 175B layer (Brown et al. 2020) as in Korthikanti et al. (2022): s, b, h, a, t.
_S, _B, _H, _A, _T = 2048, 1, 12288, 96, 8


def _zero3() -> Solution:
    per_gpu = (2 + 2 + _K) * _PSI / _ND
    working = (
        f"Mixed-precision Adam: 2 (fp16 weights) + 2 (fp16 gradients) + K = {_K} (fp32 master weights, "
        f"momentum, variance) = {2 + 2 + _K} bytes per parameter.\n"
        f"ZeRO stage 3 shards all three over N_d = {_ND}: {2 + 2 + _K} x {_PSI:.3g} / {_ND} = "
        f"{per_gpu:.4g} bytes = {per_gpu / _GB:.4g} GB."
    )
    stage2 = (2 * _PSI + (2 + _K) * _PSI / _ND) / _GB
    stage1 = (4 * _PSI + _K * _PSI / _ND) / _GB
    return Solution(
        ZERO3,
        per_gpu / _GB,
        working,
        (
            (
                (2 + 2 + _K) * _PSI / _GB,
                f"ZeRO-3 shards parameters, gradients and optimizer state: divide by N_d = {_ND}.",
            ),
            (stage2, "that is stage 2: stage 3 also shards the fp16 parameters."),
            (stage1, "that is stage 1: stage 3 also shards gradients and parameters."),
            ((2 + 2 + 8) * _PSI / _ND / _GB, "mixed-precision Adam also keeps fp32 master weights: K = 12."),
            (per_gpu / 2**30, "GB here is 1e9 bytes, not GiB."),
        ),
    )


def _bubble() -> Solution:
    frac = (_P - 1) / (_M + _P - 1)
    working = (
        f"A pipeline of p = {_P} stages fills and drains once per step: p - 1 = {_P - 1} micro-batch "
        f"slots idle out of m + p - 1 = {_M + _P - 1}.\nBubble = (p - 1)/(m + p - 1) = "
        f"{_P - 1}/{_M + _P - 1} = {frac:.4f} (the same for GPipe and 1F1B)."
    )
    return Solution(
        BUBBLE,
        frac,
        working,
        (
            (
                (_P - 1) / _M,
                "that is bubble time / ideal time; as a fraction of the whole step divide by m + p - 1.",
            ),
            (_P / (_M + _P), "p - 1 slots are idle, not p."),
            (100 * frac, "give a fraction (0..1), not %."),
        ),
    )


def _activations() -> Solution:
    sbh = _S * _B * _H
    per_layer = sbh * (10 + 24 / _T + 5 * _A * _S / (_H * _T))
    working = (
        f"s b h = {_S} x {_B} x {_H} = {sbh:,}. With t = {_T}: 10 + 24/t + 5as/(ht) = 10 + {24 / _T:g} "
        f"+ {5 * _A * _S / (_H * _T):g} = {10 + 24 / _T + 5 * _A * _S / (_H * _T):g}.\n"
        f"Per layer: {sbh:,} x {10 + 24 / _T + 5 * _A * _S / (_H * _T):g} = {per_layer:,.0f} bytes "
        f"= {per_layer / _GB:.4g} GB."
    )
    return Solution(
        ACTIVATIONS,
        per_layer / _GB,
        working,
        (
            (
                sbh * (34 + 5 * _A * _S / _H) / _GB,
                f"tensor parallelism splits most activations t = {_T} ways: sbh(10 + 24/t + 5as/(ht)).",
            ),
            (
                sbh * (34 + 5 * _A * _S / _H) / _T / _GB,
                "without sequence parallelism the layer norms, "
                "dropouts and their inputs (10 sbh) stay whole.",
            ),
            (sbh * (10 + 24 / _T) / _GB, "that is with selective recomputation; here nothing is recomputed."),
        ),
    )


ZERO3 = register(
    Exercise(
        101,
        "zero3-memory",
        "ZeRO-3 memory per GPU",
        f"A {_PSI / 1e9:g}-billion-parameter model trains with mixed-precision Adam on N_d = {_ND} "
        "data-parallel GPUs with ZeRO stage 3. How much memory do parameters, gradients and optimizer "
        "state take per GPU?",
        "GB (1e9 bytes)",
        0.01,
        "a number",
    ),
    _zero3,
    "(2 + 2 + 12) bytes per parameter, all of it divided by N_d at stage 3.",
)
BUBBLE = register(
    Exercise(
        102,
        "pipeline-bubble",
        "Pipeline bubble",
        f"A 1F1B pipeline has p = {_P} stages and m = {_M} micro-batches per step. What fraction of the "
        "step is each stage idle (the bubble)?",
        "",
        0.01,
        "a number (a fraction, 0..1)",
    ),
    _bubble,
    "(p - 1) / (m + p - 1).",
)
ACTIVATIONS = register(
    Exercise(
        103,
        "tp-activations",
        "Activations of a tensor-parallel layer",
        f"GPT-3 175B: s = {_S}, h = {_H}, a = {_A} heads, micro-batch b = {_B}, tensor parallelism "
        f"t = {_T}, no sequence parallelism, no recomputation, 16-bit activations. Activation memory "
        "of one transformer layer per GPU?",
        "GB (1e9 bytes)",
        0.01,
        "a number",
    ),
    _activations,
    "Korthikanti et al. (2022): sbh (10 + 24/t + 5as/(ht)) bytes per layer.",
)
