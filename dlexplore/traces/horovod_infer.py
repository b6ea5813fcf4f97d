"""What a Horovod timeline implies beyond its rows: the training steps, the job's size, and two
things a rewritten or edited timeline can carry (ready ticks with a duration, cycle markers out of
order), for :meth:`.horovod_builder.Builder.finish`.

A timeline has no step marker and no rank count: both are inferred (:mod:`.horovod`'s docstring),
and where the file cannot tell, the answer is none, with a warning, rather than a guess.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

__all__ = ["infer_steps", "world_size", "instant_ticks", "markers_out_of_order"]

_US = 1e-6  # s per µs


def infer_steps(
    path: Path,
    start: np.ndarray,
    occurrence_start: dict[int, list[float]],
    ops: list[str],
    pid: np.ndarray,
    is_op: np.ndarray,
    op: np.ndarray,
    occurrence: np.ndarray,
) -> np.ndarray:
    """Step of each row, -1 for none: step *k* starts at the earliest start (µs in
    ``occurrence_start``: per tensor, where each of its operations began) of the *k*-th reduction
    of the tensors reduced most often (gathers where nothing is reduced, else broadcasts repeated);
    ``start`` [s], ``pid``, ``is_op``, ``op`` (a code into ``ops``) and ``occurrence``: each row's
    start, tensor, whether it is an operation, which, and the how-manieth of its tensor."""
    # Reductions mark steps: every gradient is reduced once a step. Broadcasts are the initial
    # broadcast of the parameters (and a re-broadcast after a restore): counted, a timeline cut
    # before any reduction would make the broadcast step 0, and a tensor both broadcast and reduced
    # would add a step; joins and barriers may come more than once a step. Without reductions,
    # gathers (sparse gradients) mark them, else a tensor broadcast at every step.
    names = np.asarray(ops + [""], dtype=object)[np.where(is_op, op, len(ops))]
    for kinds in (("allreduce", "adasum", "reducescatter"), ("allgather", "alltoall"), ("broadcast",)):
        chosen = is_op & np.isin(names, kinds)
        if chosen.any():
            break
    rows = np.flatnonzero(chosen)
    order = np.lexsort((occurrence[rows], pid[rows]))
    tensor_of, k_of = pid[rows][order], occurrence[rows][order]
    tensors, first, counts = np.unique(tensor_of, return_index=True, return_counts=True)
    if not len(counts) or (kinds == ("broadcast",) and counts.max() < 2):
        if is_op.any():
            warnings.warn(
                f"{path}: no step is inferred: no tensor is reduced or gathered, and none is "
                "broadcast more than once (the initial broadcast of the parameters), so nothing "
                "marks a training step; every event's step is <NA>",
                stacklevel=6,
            )
        return np.full(len(start), -1)
    most = int(counts.max())
    bounds = None
    for tensor, at in zip(tensors[counts == most].tolist(), first[counts == most].tolist(), strict=True):
        starts = occurrence_start[tensor]
        begins = np.array([starts[k] for k in k_of[at : at + most].tolist()], dtype=np.float64)
        # the earliest of each step's starts, one tensor at a time
        bounds = begins if bounds is None else np.minimum(bounds, begins)
    bounds = np.maximum.accumulate(bounds * _US)
    return np.searchsorted(bounds, start, side="right") - 1


def world_size(
    path: Path,
    ready_rank: np.ndarray,
    pid: np.ndarray,
    closed_negotiation: np.ndarray,
    occurrence: np.ndarray,
) -> int | None:
    """Ranks in the job: the highest rank that reported ready (``ready_rank`` >= 0 on tick rows),
    plus one, where a closed negotiation has ticks (it closes when the last rank's request arrives,
    so every rank ticked in it); None, with a warning, when only negotiations left open at the end
    have ticks. A tick belongs to the negotiation of its tensor (``pid``) and ``occurrence``."""
    ticks = np.flatnonzero(ready_rank >= 0)
    if not len(ticks):
        return None
    negotiations = np.flatnonzero(closed_negotiation)
    closed = set(zip(pid[negotiations].tolist(), occurrence[negotiations].tolist(), strict=True))
    seen = sorted(set(ready_rank[ticks].tolist()))
    if not closed.isdisjoint(zip(pid[ticks].tolist(), occurrence[ticks].tolist(), strict=True)):
        return seen[-1] + 1
    warnings.warn(
        f"{path}: the world size is unknown: ranks {seen} reported ready only in negotiations still "
        "open at the end of the timeline (the other ranks had not asked yet), so the job had at "
        f"least {seen[-1] + 1} rank(s)",
        stacklevel=6,
    )
    return None


def instant_ticks(path: Path, ticks: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """Horovod writes a rank's ready tick with ``"dur": 0``; a timeline rewritten by another tool
    (SageMaker Debugger's, for one) can carry durations of days there, which would stretch the step
    they fall in: read them as instants (``end`` in place), and say so."""
    lasting = ticks & (end > start)
    if lasting.any():
        longest = float(np.max(end[lasting] - start[lasting]))
        warnings.warn(
            f"{path}: {int(lasting.sum())} rank-ready tick(s) have a duration (the longest "
            f"{longest:.3g} s) where Horovod writes 0 (a timeline rewritten by another tool?); "
            "read as instants",
            stacklevel=6,
        )
        end[lasting] = start[lasting]


def markers_out_of_order(path: Path, markers: np.ndarray, start: np.ndarray, step: np.ndarray) -> None:
    """Horovod's background loop writes its cycle markers one after the other, so their times only
    grow down the file; a marker stamped later than one written after it (a clock that jumped, or
    an edited file) would stretch the step it falls in to its time: leave it out of the steps
    (``step`` in place), and say so."""
    if len(markers) < 2:
        return
    times = start[markers]
    later = np.minimum.accumulate(times[::-1])[::-1]  # the earliest time from each marker on
    ahead = markers[:-1][times[:-1] > later[1:]]
    if len(ahead):
        warnings.warn(
            f"{path}: {len(ahead)} CYCLE_START marker(s) stamped later than markers written after "
            f"them (the first at {start[ahead[0]]:.6f} s); left out of the steps",
            stacklevel=6,
        )
        step[ahead] = -1
