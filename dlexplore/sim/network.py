"""Transfer times of a replay: the alpha-beta model fitted to the trace's own collectives.

Each measured operation's transfer ``T`` (from the last rank in to the first rank out, aligned
clocks: :mod:`dlexplore.sim.graph`) is split by the model into a latency part and a bandwidth part,

    model(p) = a(p) alpha + b(p) n beta

with ``a(p)`` and ``b(p)`` the algorithm's message count and byte factor
(:func:`dlexplore.model.comm.collective_time`: ring allreduce ``a = 2(p-1)``, ``b = 2(p-1)/p``),
``n`` the message bytes, ``alpha`` (s) and ``beta`` (s/byte) one pair for the whole trace,
fitted to the trace's own collectives by :func:`dlexplore.fit.alpha_beta.fit_network`. A what-if with
bandwidth factor ``B``, latency factor ``L`` and ``p'`` ranks scales every transfer by

    ratio = (a(p') alpha L + b(p') n beta / B) / (a(p) alpha + b(p) n beta),

so the part of the measured time the model does not explain (contention, noise) scales with it,
and ``ratio`` is exactly 1 at unchanged parameters. When all operations have one size and one
rank count, latency and bandwidth cannot be told apart: the fit then leaves one term out (the
factor on it changes nothing); the attrs say which. Operations of unknown size, or of a
collective the model does not cover (barrier, gather, scatter), keep their measured transfer
(ratio 1), counted in ``unscaled``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..fit.alpha_beta import AlphaBeta, message_factors

__all__ = ["transfer_ratio"]


def transfer_ratio(
    ops: pd.DataFrame,
    fit: AlphaBeta,
    *,
    bandwidth: np.ndarray,
    latency: np.ndarray,
    gpus: np.ndarray,
    world_size: int,
    algorithm: str | Mapping[str, str] | None = None,
) -> tuple[np.ndarray, int]:
    """Factor on each row's transfer time per scenario, shape (rows of ``ops``, scenarios).

    ``bandwidth`` and ``latency`` are factors (2 = twice the bandwidth, 0.5 = half the latency);
    ``gpus`` the ranks of each scenario. An operation's group grows with the job
    (``group_size * gpus / world_size``, at least 1). Also returns how many rows keep their
    measured time (unknown size or a collective outside the model).
    """
    bandwidth = np.asarray(bandwidth, dtype=float)
    latency = np.asarray(latency, dtype=float)
    gpus = np.asarray(gpus, dtype=float)
    n = len(ops)
    if n == 0:
        return np.ones((0, bandwidth.size)), 0
    collective = ops["collective"].to_numpy(dtype=object)
    nbytes = ops["bytes"].to_numpy(dtype=float)
    p = ops["group_size"].to_numpy(dtype=float)
    a0, bn0 = message_factors(collective, nbytes, p, algorithm)
    now = a0 * fit.alpha + bn0 * fit.beta
    ratio = np.ones((n, bandwidth.size))
    known = np.isfinite(now) & (now > 0)
    for s in range(bandwidth.size):
        p_new = np.maximum(np.round(p * gpus[s] / world_size), 1.0)
        a1, bn1 = message_factors(collective, nbytes, p_new, algorithm)
        new = a1 * fit.alpha * latency[s] + bn1 * fit.beta / bandwidth[s]
        ratio[known, s] = new[known] / now[known]
    return ratio, int((~known).sum())
