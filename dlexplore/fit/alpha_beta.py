"""The alpha-beta model of a trace's collectives: latency ``alpha`` (s) and time per byte ``beta``
(s/byte), fitted to the operations a trace measured.

    model(p) = a(p) alpha + b(p) n beta

with ``a(p)`` and ``b(p)`` the algorithm's message count and byte factor
(:func:`dlexplore.model.comm.collective_time`: ring allreduce ``a = 2(p-1)``, ``b = 2(p-1)/p``;
:func:`message_factors`) and ``n`` the message bytes. :func:`fit_network` is the one entry point:
it fits with :func:`dlexplore.fit.calibrate_from_trace` (least squares on the relative error over
the fastest operation of each collective, size and rank count, with an identifiability check), and
falls back to :func:`fit_alpha_beta` (non-negative linear least squares over the same points) when
the calibration determines neither parameter. When all operations have one size and one rank count,
latency and bandwidth cannot be told apart: ``calibrate_from_trace`` then leaves the bandwidth term
out (all latency), :func:`fit_alpha_beta` the latency term (all bandwidth); the note says which.
:mod:`dlexplore.sim` scales a replay's transfers with the result.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ..model.comm import ALGORITHMS, algorithm_for, collective_time
from ..traces.schema import Trace
from .calibrate import calibrate_from_trace

__all__ = ["AlphaBeta", "fit_alpha_beta", "fit_network", "message_factors"]


@dataclass(frozen=True)
class AlphaBeta:
    """Latency and inverse bandwidth fitted to a trace's collectives.

    Attributes
    ----------
    alpha:
        Latency per message, s.
    beta:
        Time per byte, s/byte (``1 / (bandwidth * 1e9)``).
    operations:
        Operations the fit used (count).
    r2:
        Coefficient of determination of the fit (1); NaN with fewer than 3 operations.
    note:
        How the fit was made, in words.
    method:
        The function that made it.
    """

    alpha: float
    beta: float
    operations: int
    r2: float
    note: str
    method: str = "dlexplore.fit.fit_alpha_beta"

    @property
    def bandwidth(self) -> float:
        """Fitted bandwidth per link, GB/s (inf when beta is 0)."""
        return float(np.inf) if self.beta <= 0 else 1.0 / (self.beta * 1e9)

    def as_attrs(self) -> dict[str, object]:
        """The fit as dataset attrs (units in the names)."""
        return {
            "fit_alpha_s": self.alpha,
            "fit_beta_s_per_byte": self.beta,
            "fit_bandwidth_GBps": self.bandwidth,
            "fit_operations": self.operations,
            "fit_r2": self.r2,
            "fit_note": self.note,
            "fit_method": self.method,
        }


def _algorithm(collective: str, algorithm: str | Mapping[str, str] | None) -> str | None:
    if collective not in ALGORITHMS:
        return None
    return algorithm_for(collective, algorithm)


def message_factors(
    collective: np.ndarray,
    nbytes: np.ndarray,
    ranks: np.ndarray,
    algorithm: str | Mapping[str, str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``a(p)`` (messages, 1) and ``b(p) n`` (bytes) per operation; NaN where the model has none.

    ``algorithm``: one name, or ``{collective: name}``; a name that does not apply to a collective
    (or None) gives that collective's default (:data:`dlexplore.model.comm.ALGORITHMS`).
    """
    collective = np.asarray(collective, dtype=object)
    nbytes = np.asarray(nbytes, dtype=float)
    ranks = np.asarray(ranks, dtype=float)
    a = np.full(collective.shape, np.nan)
    bn = np.full(collective.shape, np.nan)
    for name in pd.unique(collective):
        algo = _algorithm(str(name), algorithm)
        rows = (collective == name) & np.isfinite(nbytes) & np.isfinite(ranks) & (ranks >= 1)
        if algo is None or not rows.any():
            continue
        # latency 1 s and no bytes gives a(p); latency 0 and 1 s/byte (1e-9 GB/s) gives b(p) n
        a[rows] = collective_time(str(name), algo, 0.0, ranks[rows], 1.0, 1.0)
        bn[rows] = collective_time(str(name), algo, nbytes[rows], ranks[rows], 1e-9, 0.0)
    return a, bn


def fit_alpha_beta(ops: pd.DataFrame, algorithm: str | Mapping[str, str] | None = None) -> AlphaBeta:
    """Least-squares ``T = a(p) alpha + b(p) n beta`` over a table of operations, alpha, beta >= 0.

    ``ops`` has one row per (operation, rank) with ``op``, ``collective``, ``bytes``, ``group_size``
    and ``transfer`` (s: from the last rank in to the first rank out, the same on every rank).
    Each (collective, size, group) enters the fit once, with its fastest operation: the others
    carry waits and contention (a run's first steps, threads competing for cores) that the model
    does not describe. The fit only splits each transfer into latency and bandwidth parts
    (:func:`transfer_ratio`); the replay scales the measured transfers themselves.
    """
    if len(ops) == 0:
        return AlphaBeta(0.0, 0.0, 0, float("nan"), "no collective operations in the trace")
    per_op = ops.groupby("op").agg(
        collective=("collective", "first"),
        bytes=("bytes", "first"),
        ranks=("group_size", "max"),
        time=("transfer", "min"),
    )
    # the fastest operation of each kind, size and group: the slower ones carry waits and contention
    # (a run's first steps, CPU threads fighting for cores) that the model does not describe
    per_op = (
        per_op.assign(size_key=per_op["bytes"].fillna(-1.0))
        .groupby(["collective", "size_key", "ranks"], sort=True)
        .agg(bytes=("bytes", "first"), time=("time", "min"), count=("time", "size"))
        .reset_index()
    )
    a, bn = message_factors(
        per_op["collective"].to_numpy(), per_op["bytes"].to_numpy(), per_op["ranks"].to_numpy(), algorithm
    )
    y = per_op["time"].to_numpy(dtype=float)
    count = per_op["count"].to_numpy()
    use = np.isfinite(a) & np.isfinite(bn) & np.isfinite(y)
    a, bn, y = a[use], bn[use], y[use]
    if y.size == 0:
        return AlphaBeta(
            0.0, 0.0, 0, float("nan"), "no operation of known size that the alpha-beta model covers"
        )
    points = np.unique(np.round(np.column_stack([a, bn]), 12), axis=0)
    ratios = np.unique(np.round(bn[a > 0] / a[a > 0], 9)) if (a > 0).any() else np.zeros(0)
    if len(points) < 2 or (ratios.size < 2 and not (a == 0).any()):
        beta = float(np.sum(bn * y) / np.sum(bn * bn)) if np.sum(bn * bn) > 0 else 0.0
        alpha = 0.0 if beta > 0 else float(np.sum(a * y) / max(np.sum(a * a), 1e-300))
        note = (
            "one message size and rank count: latency and bandwidth cannot be told apart; "
            "the whole transfer is taken as bandwidth-bound (alpha = 0)"
        )
    else:
        design = np.column_stack([a, bn])
        (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
        note = "least squares over the fastest operation of each size, alpha and beta >= 0"
        if alpha < 0:
            alpha, beta = 0.0, float(np.sum(bn * y) / np.sum(bn * bn))
            note += " (alpha came out negative: set to 0 and beta refitted)"
        if beta < 0:
            alpha, beta = float(np.sum(a * y) / np.sum(a * a)), 0.0
            note += " (beta came out negative: set to 0 and alpha refitted)"
    alpha, beta = max(float(alpha), 0.0), max(float(beta), 0.0)
    predicted = a * alpha + bn * beta
    total = np.sum((y - y.mean()) ** 2)
    r2 = float(1.0 - np.sum((y - predicted) ** 2) / total) if y.size >= 3 and total > 0 else float("nan")
    return AlphaBeta(alpha, beta, int(count[use].sum()), r2, note + f" ({y.size} sizes)")


def fit_network(
    trace: Trace | None,
    ops: pd.DataFrame,
    algorithm: str | Mapping[str, str] | None = None,
    method: str = "auto",
) -> AlphaBeta:
    """Latency and bandwidth of the trace's collectives, for the replay's network ratio.

    ``method``: ``"calibrate"`` (:func:`dlexplore.fit.calibrate_from_trace`, needs ``trace``),
    ``"own"`` (:func:`fit_alpha_beta` on ``ops``, the operations of
    :func:`dlexplore.sim.build_graph`), or ``"auto"``: the first when it determines at least one of
    the two (and raises no :class:`DlexploreError`), else the second. A parameter
    the calibration cannot determine from the trace (bandwidth from one message size) is left out
    of the model (latency 0, or bandwidth infinite), as the calibration's own predictions do, and
    the note says so.
    """
    if method not in ("auto", "calibrate", "own"):
        raise DlexploreError(f"fit method must be 'auto', 'calibrate' or 'own', got {method!r}")
    if method != "own" and trace is not None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cal = calibrate_from_trace(
                    trace, params=("latency", "bandwidth"), algorithm=algorithm, batch_size=1
                )
                rows = cal.params.set_index("name")
            except DlexploreError as err:
                if method == "calibrate":
                    raise
                cal = None
                reason = f"{type(err).__name__}: {err}"
        if cal is not None:
            value = {}
            for name in ("latency", "bandwidth"):
                ok = name in rows.index and bool(np.atleast_1d(rows.loc[name, "identifiable"])[0])
                v = float(np.atleast_1d(rows.loc[name, "value"])[0]) if ok else math.nan
                value[name] = v if math.isfinite(v) and v > 0 else math.nan
            if any(math.isfinite(v) for v in value.values()) or method == "calibrate":
                said = "; ".join(
                    str(w.message)
                    for w in caught
                    if "latency" in str(w.message) or "bandwidth" in str(w.message)
                )
                alpha = value["latency"] if math.isfinite(value["latency"]) else 0.0
                beta = 1.0 / (value["bandwidth"] * 1e9) if math.isfinite(value["bandwidth"]) else 0.0
                fitted = cal.points["fitted"].to_numpy(dtype=bool)
                note = (
                    f"calibrate_from_trace over {int(fitted.sum())} collective points "
                    f"(MAPE {cal.mape_fit:.1%})" + (f"; {said}" if said else "")
                )
                if not math.isfinite(value["bandwidth"]):
                    note += "; no bandwidth term: the bandwidth factor changes nothing"
                if not math.isfinite(value["latency"]):
                    note += "; no latency term: the latency factor changes nothing"
                count = int(cal.points.loc[fitted, "count"].sum()) if "count" in cal.points else 0
                return AlphaBeta(alpha, beta, count, math.nan, note, "dlexplore.fit.calibrate_from_trace")
            reason = "it determined neither latency nor bandwidth"
        own = fit_alpha_beta(ops, algorithm)
        return AlphaBeta(
            own.alpha,
            own.beta,
            own.operations,
            own.r2,
            f"{own.note} (calibrate_from_trace: {reason})",
            own.method,
        )
    return fit_alpha_beta(ops, algorithm)
