"""The classroom lab's own exercises (``notebooks/classroom-lab.ipynb``), numbers 1 to 7.

Worked out from the published formulas (written out in each solver), with the hardware and
workload figures read from the catalog; they do not call the model that the lab teaches, so a bug in
:`dlexplore.model` cannot make a wrong answer look right. The tests cross-check them against
:func:`dlexplore.predict` and :func:`dlexplore.model.collective_time`.

Formulas (alpha-beta model; Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): ``p`` ranks,
``n`` bytes, ``alpha`` s per message, ``B`` bytes/s per link and direction, ``L = ceil(log2 p)``:

- ring allreduce: each rank sends ``2(p-1)/p n`` bytes; time ``2(p-1) alpha + 2(p-1)/p n / B``;
- binomial-tree allreduce (reduce, then broadcast): time ``2L alpha + 2L n / B``;
- nccl-tests bus bandwidth of an allreduce: ``busbw = algbw x 2(p-1)/p``, ``algbw = n / time``;
- weak scaling with a fixed batch per GPU: speedup ``S = p t_1 / t_p``, efficiency ``E = S / p``;
- memory per GPU: ``M(b) = P (w + g + o) + W + a b``; the largest batch is
  ``floor((C - P (w + g + o) - W) / a)`` for capacity ``C``.
"""

from __future__ import annotations

import math

from ... import catalog
from ..core import Exercise, Solution, register

__all__ = ["RING_BYTES", "RING_TIME_25GBE", "SCALING", "BERT_BATCH", "SMALL_MESSAGE", "CROSSOVER", "ALGBW"]

_P_RING = 8  # GPUs in exercises 1 and 2
_MB = 1e6  # bytes per MB
_T1, _T16 = 0.250, 0.290  # s per step in exercise 3 (64 images per GPU on 1 and on 16 GPUs)
_BUSBW_H100 = 370.0  # GB/s, nccl-tests issue 212 (ring allreduce on 8 H100)
_WORKSPACE = 2**30  # bytes: dlexplore's allowance for CUDA context and library workspaces
_FP32_ADAM_BYTES = 4 + 4 + 8  # bytes per parameter: weights, gradients, two Adam moments


def _ring_bytes() -> Solution:
    p = _P_RING
    params = catalog.workload("resnet50").params
    n = params * 4  # fp32 gradients, bytes
    sent = 2 * (p - 1) / p * n  # reduce-scatter (p-1)/p n, then allgather (p-1)/p n
    working = (
        f"n = {params:,} parameters x 4 bytes = {n:,} bytes of fp32 gradients.\n"
        f"Ring allreduce: p-1 reduce-scatter steps and p-1 allgather steps, each sending n/p bytes,\n"
        f"so each GPU sends 2(p-1)/p n = 2 x {p - 1}/{p} x {n:,} = {sent:,.0f} bytes "
        f"= {sent / _MB:.3f} MB."
    )
    return Solution(
        RING_BYTES,
        sent / _MB,
        working,
        (
            (n / _MB, "that is the whole gradient buffer n; in a ring each GPU sends 2(p-1)/p of it."),
            (
                (p - 1) / p * n / _MB,
                "that is one phase only: the allgather sends as much again as the reduce-scatter.",
            ),
            (2 * n / _MB, "the factor is 2(p-1)/p, not 2: each of the 2(p-1) steps sends n/p bytes."),
            (2 * (p - 1) * n / _MB, "each of the 2(p-1) steps sends one chunk of n/p bytes, not n."),
            (sent / 2**20, "MB here is 10^6 bytes, not MiB (2^20 bytes)."),
            (params * 2 * (p - 1) / p / _MB, "gradients are fp32: 4 bytes per parameter."),
        ),
    )


def _ring_time() -> Solution:
    p = _P_RING
    link = catalog.network("25GbE")
    n = catalog.workload("resnet50").params * 4
    bw = link.bandwidth_gbs * 1e9  # bytes/s
    alpha = link.latency_s
    latency_term = 2 * (p - 1) * alpha
    bandwidth_term = 2 * (p - 1) / p * n / bw
    t = latency_term + bandwidth_term
    working = (
        f"25GbE: B = 25 Gbit/s / 8 = {link.bandwidth_gbs} GB/s, alpha = {alpha * 1e6:g} us.\n"
        f"T = 2(p-1) alpha + 2(p-1)/p n / B = {2 * (p - 1)} x {alpha * 1e6:g} us + "
        f"{2 * (p - 1) / p * n:,.0f} B / {bw:.4g} B/s\n"
        f"  = {latency_term * 1e3:.3f} ms + {bandwidth_term * 1e3:.3f} ms = {t * 1e3:.2f} ms."
    )
    wrong_bw = latency_term + 2 * (p - 1) / p * n / 25e9
    return Solution(
        RING_TIME_25GBE,
        t * 1e3,
        working,
        (
            (wrong_bw * 1e3, "25GbE carries 25 Gbit/s, i.e. 25/8 = 3.125 GB/s (bytes!)."),
            ((latency_term + n / bw) * 1e3, "the bytes on the wire per GPU are 2(p-1)/p n, not n."),
            ((latency_term + (p - 1) / p * n / bw) * 1e3, "count both phases: reduce-scatter and allgather."),
        ),
    )


def _scaling() -> Solution:
    p = 16
    speedup = p * _T1 / _T16
    efficiency = speedup / p
    working = (
        f"Weak scaling: each of the p = {p} GPUs still processes 64 images per step, so one step\n"
        f"does p times the work. Throughput ratio: S = p t_1 / t_p = {p} x {_T1} / {_T16} "
        f"= {speedup:.2f}; efficiency E = S / p = t_1 / t_p = {efficiency:.3f}."
    )
    return Solution(
        SCALING,
        (speedup, efficiency),
        working,
        (
            ((_T1 / _T16, efficiency), "the 16 GPUs process 16 times the images per step: S = p t_1 / t_p."),
            ((speedup, 100 * efficiency), "give the efficiency as a fraction (0..1), not in %."),
            (
                (_T16 / _T1, _T1 / _T16),
                "speedup is old time per image / new time per image: S = p t_1 / t_p.",
            ),
        ),
    )


def _bert_batch() -> Solution:
    wl = catalog.workload("bert-large")
    dev = catalog.gpu("V100-16GB")
    capacity = dev.memory_bytes
    static = wl.params * _FP32_ADAM_BYTES + _WORKSPACE
    per_sample = wl.activation_bytes_per_sample
    batch = math.floor((capacity - static) / per_sample)
    working = (
        f"C = {capacity:,.0f} bytes (16 GiB). Static memory: P (4 + 4 + 8) + W = "
        f"{wl.params:,} x 16 + {_WORKSPACE:,} = {static:,.0f} bytes.\n"
        f"Activations a = {per_sample:,.0f} bytes per 512-token sequence (fp32).\n"
        f"b_max = floor((C - static) / a) = floor({capacity - static:,.0f} / {per_sample:,.0f}) "
        f"= floor({(capacity - static) / per_sample:.2f}) = {batch}."
    )
    no_adam = math.floor((capacity - wl.params * 8 - _WORKSPACE) / per_sample)
    decimal_gb = math.floor((16e9 - static) / per_sample)
    half_act = math.floor((capacity - static) / (per_sample / 2))
    mistakes = [
        (no_adam, "count Adam's two moments: 8 bytes per parameter on top of weights and gradients."),
        (half_act, "the run is fp32: activations are 4-byte values (do not halve them)."),
        (decimal_gb, "a 16 GB GPU has 16 GiB = 16 x 2^30 bytes."),
        (batch + 1, f"a batch of {batch + 1} does not fit: round down."),
    ]
    return Solution(BERT_BATCH, batch, working, tuple((v, h) for v, h in mistakes if v != batch))


def _tree_ring_times(n: float, p: int) -> tuple[float, float]:
    link = catalog.network("IB-EDR")
    alpha, beta = link.latency_s, 1.0 / (link.bandwidth_gbs * 1e9)
    lg = math.ceil(math.log2(p))
    ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta
    tree = 2 * lg * (alpha + n * beta)  # binomial reduce then broadcast, lg p rounds each
    return ring, tree


def _small_message() -> Solution:
    n, p = 4096, 64
    ring, tree = _tree_ring_times(n, p)
    best = "tree" if tree < ring else "ring"
    working = (
        f"IB-EDR: alpha = {catalog.network('IB-EDR').latency_s * 1e6:g} us, B = 12.5 GB/s; "
        f"n = 4 KiB = {n} bytes, p = {p}, lg p = 6.\n"
        f"ring: 2(p-1) alpha + 2(p-1)/p n / B = {ring * 1e6:.1f} us;\n"
        f"tree: 2 lg p (alpha + n / B) = {tree * 1e6:.1f} us.\n"
        f"Small messages are latency-bound: ring pays 2(p-1) = 126 latencies, tree 2 lg p = 12. "
        f"-> {best}."
    )
    other = "ring" if best == "tree" else "tree"
    return Solution(
        SMALL_MESSAGE,
        best,
        working,
        (
            (
                other,
                "for small messages the latency term dominates: ring pays 2(p-1) alpha, tree 2 lg p alpha.",
            ),
        ),
    )


def _crossover() -> Solution:
    p = 64
    link = catalog.network("IB-EDR")
    alpha, beta = link.latency_s, 1.0 / (link.bandwidth_gbs * 1e9)
    lg = math.ceil(math.log2(p))
    # 2(p-1) a + 2(p-1)/p n b = 2 L a + 2 L n b  =>  n = (p - 1 - L) a / ((L - (p-1)/p) b)
    n = (p - 1 - lg) * alpha / ((lg - (p - 1) / p) * beta)
    working = (
        "Set ring = tree: 2(p-1) alpha + 2(p-1)/p n beta = 2 lg p alpha + 2 lg p n beta\n"
        "=> n* = (p - 1 - lg p) alpha / ((lg p - (p-1)/p) beta)\n"
        f"   = ({p - 1} - {lg}) x {alpha:g} s / (({lg} - {p - 1}/{p}) x {beta:g} s/B) = {n:,.0f} bytes "
        f"({n / 1024:.1f} KiB). Below it tree wins, above it ring."
    )
    return Solution(
        CROSSOVER,
        n,
        working,
        (
            (
                (p - 1 - lg) * alpha / (lg * beta),
                "keep the ring's bandwidth term 2(p-1)/p n beta on the ring side.",
            ),
        ),
    )


def _algbw() -> Solution:
    p = 8
    factor = 2 * (p - 1) / p
    value = _BUSBW_H100 / factor
    working = (
        f"nccl-tests: busbw = algbw x 2(p-1)/p, so algbw = busbw / (2(p-1)/p) = {_BUSBW_H100:g} / "
        f"(2 x {p - 1}/{p}) = {_BUSBW_H100:g} / {factor} = {value:.1f} GB/s.\n"
        f"(A 1 GB allreduce then takes 1e9 B / {value:.1f}e9 B/s = {1e3 / value:.2f} ms.)"
    )
    return Solution(
        ALGBW,
        value,
        working,
        (
            (_BUSBW_H100 * factor, "busbw = algbw x 2(p-1)/p, so divide by the factor."),
            (_BUSBW_H100 / 2, "the factor is 2(p-1)/p = 1.75 for p = 8, not 2."),
            (_BUSBW_H100, "busbw and algbw differ by the factor 2(p-1)/p for an allreduce."),
        ),
    )


RING_BYTES = register(
    Exercise(
        1,
        "ring-bytes",
        "Bytes sent by a ring allreduce",
        "How many bytes does each GPU send when 8 GPUs ring-allreduce ResNet-50's fp32 gradients?",
        "MB (1e6 bytes)",
        0.01,
        "a number",
    ),
    _ring_bytes,
    "a ring allreduce has 2(p-1) steps; in each, every GPU sends one chunk of n/p bytes.",
)

RING_TIME_25GBE = register(
    Exercise(
        2,
        "ring-time-25gbe",
        "Time of the allreduce over 25GbE",
        "How long does that allreduce take over 25GbE in the alpha-beta model?",
        "ms",
        0.02,
        "a number",
    ),
    _ring_time,
    "T = 2(p-1) alpha + 2(p-1)/p n / B, with B in bytes/s and alpha in s.",
)

SCALING = register(
    Exercise(
        3,
        "scaling",
        "Speedup and efficiency",
        "A step takes 0.250 s on 1 GPU and 0.290 s on 16 GPUs (64 images per GPU both "
        "times). Speedup and efficiency at 16 GPUs?",
        "",
        0.01,
        "a pair (speedup in x, efficiency as a fraction 0..1)",
        ("speedup", "efficiency"),
    ),
    _scaling,
    "weak scaling: S = p t_1 / t_p and E = S / p.",
)

BERT_BATCH = register(
    Exercise(
        4,
        "bert-batch",
        "Largest batch that fits",
        "Largest per-GPU batch of BERT-large (512-token sequences) on a V100-16GB with Adam in fp32?",
        "sequences",
        0.0,
        "a whole number",
        rounding="the answer is a whole number of sequences: round down (the whole batch must fit).",
    ),
    _bert_batch,
    "memory = params x (4 + 4 + 8) + 1 GiB workspace + activations per sequence x "
    "batch; solve for the batch and round down.",
)

SMALL_MESSAGE = register(
    Exercise(
        5,
        "small-message",
        "Ring or tree for a small message",
        "Which allreduce is faster for a 4 KiB message on 64 ranks over IB-EDR: ring or tree?",
        "",
        0.0,
        "the name 'ring' or 'tree'",
    ),
    _small_message,
    "compare 2(p-1) alpha + 2(p-1)/p n beta with 2 lg p (alpha + n beta).",
)

CROSSOVER = register(
    Exercise(
        6,
        "crossover",
        "Crossover message size",
        "Above which message size does ring beat tree on 64 ranks over IB-EDR?",
        "bytes",
        0.02,
        "a number",
    ),
    _crossover,
    "set the ring and tree times equal and solve for n.",
)

ALGBW = register(
    Exercise(
        7,
        "algbw",
        "Bus bandwidth to algorithm bandwidth",
        "nccl-tests reports busbw 370 GB/s for a ring allreduce on 8 H100. What is the algbw?",
        "GB/s",
        0.01,
        "a number",
    ),
    _algbw,
    "nccl-tests: busbw = algbw x 2(p-1)/p for an allreduce.",
)
