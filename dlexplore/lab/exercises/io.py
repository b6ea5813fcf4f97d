"""Exercises 301.. of the I/O lab (``notebooks/io-lab.ipynb``): file layouts and where I/O dominates.

Expected values come from the formulas, with the ``pfs`` tier figures read from the catalog
(aggregate ``A`` GB/s, per-reader cap ``c`` GB/s, open latency ``L`` s), not from
:mod:`dlexplore.model.dataio`:

- many small files, one reader, one request in flight: ``t_step = B (L + s / c)``;
- LMDB (no open per sample) with ``P`` readers sharing the tier: ``t_step = B s / min(c, A / P)``;
  I/O exceeds compute ``t_c`` once ``A / P < B s / t_c``, i.e. at ``P = floor(A t_c / (B s)) + 1``.
"""

from __future__ import annotations

import math

from ... import catalog
from ..core import Exercise, Solution, register

_S_JPEG = 110e3  # bytes: an ImageNet JPEG
_B = 64  # samples per step per GPU
_S_BIG, _B_BIG, _T_C = 1e6, 10, 0.010  # bytes, samples, s per step (exercise 302)


def _small_files() -> Solution:
    t = catalog.storage("pfs")
    step = _B * (t.latency_s + _S_JPEG / (t.client_bandwidth_gbs * 1e9))
    lmdb = _B * _S_JPEG / (t.client_bandwidth_gbs * 1e9)
    work = (
        f"t = B (L + s / c) = {_B} x ({t.latency_s:g} s + {_S_JPEG:g} B / "
        f"{t.client_bandwidth_gbs:g} GB/s)"
        f" = {step * 1e3:.3f} ms; the opens are {1 - lmdb / step:.0%} of it."
    )
    return Solution(
        EXERCISES_IO[0],
        step * 1e3,
        work,
        (
            (lmdb * 1e3, "that is the transfer only: each small file also costs one open (latency L)."),
            (step, "the answer is in ms, not s."),
        ),
    )


def _io_bound() -> Solution:
    t = catalog.storage("pfs")
    p = math.floor(t.bandwidth_gbs * 1e9 * _T_C / (_B_BIG * _S_BIG)) + 1
    work = (
        f"Each GPU needs B s / t_c = {_B_BIG * _S_BIG / _T_C / 1e9:g} GB/s; the tier gives A / P = "
        f"{t.bandwidth_gbs:g} / P GB/s (below the {t.client_bandwidth_gbs:g} GB/s cap), so I/O "
        f"exceeds compute once P > {t.bandwidth_gbs * 1e9 * _T_C / (_B_BIG * _S_BIG):g}: P = {p}."
    )
    hint = "at exactly that count I/O equals compute; the question asks where it exceeds it."
    return Solution(EXERCISES_IO[1], p, work, ((p - 1, hint),))


EXERCISES_IO = (
    register(
        Exercise(
            301,
            "io-small-files",
            "Small files on a parallel file system",
            f"One GPU reads a batch of {_B} ImageNet JPEGs ({_S_JPEG / 1e3:g} kB each, one file "
            "per sample) from the 'pfs' tier, one request at a time. How long does reading one "
            "batch take?",
            "ms",
            0.01,
            "a number",
        ),
        _small_files,
        "t = B (L + s / c): each sample pays one open (L) and its transfer (s / c).",
    ),
    register(
        Exercise(
            302,
            "io-bound-gpus",
            "Where I/O starts to dominate",
            f"Every GPU reads {_B_BIG} samples of {_S_BIG / 1e6:g} MB per step from an LMDB on "
            "'pfs' "
            f"(no opens per sample) while computing {_T_C * 1e3:g} ms per step. From how many GPUs "
            "on does reading take longer than computing?",
            "GPUs",
            0.0,
            "a whole number",
            rounding="the answer is a whole number of GPUs: the first count at which reading "
            "takes longer than computing (round up past the break-even point).",
        ),
        _io_bound,
        "the tier's aggregate bandwidth A is shared by P readers: reading exceeds compute when "
        "A / P < B s / t_c.",
    ),
)
