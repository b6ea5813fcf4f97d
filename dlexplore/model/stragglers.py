"""Stragglers: a synchronous step lasts as long as the slowest rank's work.

In synchronous data parallelism every rank waits inside the gradient allreduce for the last rank to
arrive, so the step time is the *maximum* over the ``n`` ranks of their per-rank work times ``W_i``.
If the ``W_i`` are independent draws from one distribution, the expected step time is
``E[max(W_1 .. W_n)]``, which grows with ``n`` even though every rank is equally fast on average.

Formulas (order statistics; David & Nagaraja, *Order Statistics*, 3rd ed., 2003):

- normal ``N(mu, sigma)``: ``E[max] = mu + sigma e_n`` with ``e_n = E[max of n standard normals] =
  integral z n phi(z) Phi(z)^(n-1) dz`` (``e_1 = 0``, ``e_2 = 1/sqrt(pi) = 0.5642``, ``e_3 = 0.8463``,
  ``e_10 = 1.5388``; it grows like ``sqrt(2 ln n)``);
- lognormal with mean ``m`` and standard deviation ``s`` (so ``sigma_log^2 = ln(1 + s^2/m^2)``,
  ``mu_log = ln m - sigma_log^2 / 2``): ``E[max] = integral exp(mu_log + sigma_log z) n phi Phi^(n-1) dz``;
- exponential with mean ``m``: ``E[max] = m H_n``, ``H_n = 1 + 1/2 + ... + 1/n`` (exact);
- empirical, from ``m`` measured values sorted ``x_(1) <= .. <= x_(m)`` drawn with replacement:
  ``E[max] = sum_k x_(k) ((k/m)^n - ((k-1)/m)^n)`` (exact for the empirical CDF).

The integrals are evaluated on a fixed grid of ``z`` (trapezoid rule, ``Phi^(n-1)`` through
``log_ndtr`` so that a million ranks neither underflow nor overflow), vectorised over rank counts;
the error is below 1e-9 for the normal case.

Independence is the assumption to keep in mind: a rank that is *always* slower (a slow node, an
unbalanced shard) is systematic imbalance, not noise, and :func:`compare_with_measured` shows it as a
measured maximum well above the i.i.d. prediction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache

import numpy as np
import xarray as xr

from .. import validation
from .._version import __version__
from ..errors import DlexploreError, InvalidValueError

__all__ = [
    "STRAGGLER_VARIABLES",
    "DISTRIBUTIONS",
    "expected_max",
    "expected_max_standard_normal",
    "harmonic",
    "straggler_slowdown",
    "per_rank_work",
    "compare_with_measured",
]

DISTRIBUTIONS = ("normal", "lognormal", "exponential", "empirical")

#: units and long names of what this module writes.
STRAGGLER_VARIABLES: dict[str, tuple[str, str]] = {
    "ranks": ("count", "ranks taking part in the synchronous step"),
    "mean_time": ("s", "mean per-rank work time per step"),
    "std_time": ("s", "standard deviation of per-rank work time per step"),
    "expected_step_time": ("s", "expected step time: expected maximum over ranks of per-rank work"),
    "slowdown": ("1", "expected step time / mean per-rank work time"),
    "expected_step_time_normal": ("s", "expected step time with a normal fit to the per-rank times"),
    "slowdown_normal": ("1", "slowdown with a normal fit to the per-rank times"),
    "measured_mean": ("s", "measured mean per-rank work time per step"),
    "measured_max": ("s", "measured maximum over ranks of work time, mean over steps"),
    "measured_slowdown": ("1", "measured_max / measured_mean"),
    "predicted_max": ("s", "predicted expected maximum over ranks (empirical, i.i.d. ranks)"),
    "predicted_slowdown": ("1", "predicted_max / measured_mean"),
    "predicted_max_normal": ("s", "predicted expected maximum over ranks (normal fit, i.i.d. ranks)"),
    "samples": ("count", "per-rank, per-step work times used"),
}

PREDICTED_SOURCE = f"predicted: dlexplore {__version__} straggler model (expected maximum over ranks)"

# z grid for the integrals: the integrand n phi Phi^(n-1) is negligible below -9 for any n, and its
# peak sits near sqrt(2 ln n) < 6 for n < 1e7; 0.002 steps keep the trapezoid error below 1e-9.
_Z = np.linspace(-9.0, 12.0, 10_501)
_LOG_PHI_PDF = -0.5 * _Z**2 - 0.5 * np.log(2 * np.pi)


@cache
def _log_cdf() -> np.ndarray:
    """``log Phi(z)`` on the z grid; scipy is imported on first use (0.2-0.4 s), not with dlexplore."""
    from scipy.special import log_ndtr

    return log_ndtr(_Z)


def _ranks(ranks: int | Iterable[int], bounded: bool = True) -> tuple[np.ndarray, bool]:
    """Rank counts as a 1-D int array, and whether a single count was given. ``bounded``: at most
    :data:`dlexplore.validation.MAX_GPUS` (the pure-math helpers take any count)."""
    scalar = np.ndim(ranks) == 0
    check = validation.gpu_count if bounded else validation.count
    n = np.atleast_1d(check("ranks", ranks))
    return n.astype(np.int64), scalar


def _times(name: str, values: object) -> np.ndarray:
    """Per-rank times (s) as a flat array, NaN (missing) dropped; negative or infinite refused."""
    try:
        sample = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise InvalidValueError(name, values, "per-rank times, numbers of s >= 0") from None
    sample = sample[~np.isnan(sample)]
    if sample.size == 0:
        raise DlexploreError("the sample of per-rank times is empty (or all NaN)")
    return np.asarray(validation.nonnegative(name, sample, units="s"))


def _max_density(n: np.ndarray) -> np.ndarray:
    """``n phi(z) Phi(z)^(n-1)`` on the z grid, one row per rank count (units 1/z)."""
    log_w = np.log(n)[:, None] + _LOG_PHI_PDF[None, :] + (n - 1)[:, None] * _log_cdf()[None, :]
    return np.exp(log_w)


def expected_max_standard_normal(ranks: int | Iterable[int]) -> np.ndarray | float:
    """``E[max of n independent N(0, 1)]`` (1), for each ``n`` in ``ranks``: 0.5642 for 2, 1.5388 for 10."""
    n, scalar = _ranks(ranks)
    values = np.trapezoid(_Z[None, :] * _max_density(n), _Z, axis=1)
    values[n == 1] = 0.0  # exact; the grid gives ~1e-17
    return float(values[0]) if scalar else values


def harmonic(ranks: int | Iterable[int]) -> np.ndarray | float:
    """Harmonic numbers ``H_n = 1 + 1/2 + ... + 1/n`` (1): exact sums up to 10^6, digamma beyond."""
    from scipy.special import digamma

    n, scalar = _ranks(ranks, bounded=False)
    top = int(min(n.max(), 1_000_000))
    sums = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, top + 1))])
    values = np.where(n <= top, sums[np.minimum(n, top)], digamma(n + 1.0) + np.euler_gamma)
    return float(values[0]) if scalar else values


def _empirical(sample: np.ndarray, n: np.ndarray) -> np.ndarray:
    x = np.sort(sample)
    m = x.size
    k = np.arange(1, m + 1)
    # (k/m)^n - ((k-1)/m)^n: probability that the maximum of n draws is the k-th smallest value
    weights = (k / m)[None, :] ** n[:, None] - ((k - 1) / m)[None, :] ** n[:, None]
    return weights @ x


def expected_max(
    distribution: str | Sequence[float] | np.ndarray | xr.DataArray,
    ranks: int | Iterable[int],
    *,
    mean: float | None = None,
    std: float | None = None,
) -> np.ndarray | float:
    """Expected maximum over ``ranks`` independent per-rank times (the synchronous step time), in s.

    Parameters
    ----------
    distribution:
        ``"normal"`` (``mean``, ``std``), ``"lognormal"`` (its own ``mean`` and ``std``, not those of
        its log), ``"exponential"`` (``mean``), or a measured sample of per-rank times (s) for the
        empirical distribution (any shape, NaN dropped).
    ranks:
        Rank count ``n`` (count), or several.
    mean, std:
        Mean and standard deviation of one rank's time (s) for the named distributions.

    Returns
    -------
    float or numpy.ndarray
        ``E[max]`` in s (in the units of ``mean`` or of the sample), one per rank count.
    """
    n, scalar = _ranks(ranks)
    if isinstance(distribution, str):
        name = distribution.strip().lower()
        if name not in DISTRIBUTIONS[:3]:
            raise DlexploreError(
                f"unknown distribution {distribution!r}; expected one of "
                f"{', '.join(DISTRIBUTIONS[:3])} or a sample of times"
            )
        if mean is None or (name != "exponential" and std is None):
            need = "mean" if name == "exponential" else "mean and std"
            raise DlexploreError(f"the {name} distribution needs {need} (s)")
        mean = validation.number("mean", mean, units="s")
        if std is not None:
            std = validation.nonnegative("std", std, units="s")
        if name == "normal":
            validation.nonnegative("mean", mean, units="s")
            values = mean + std * np.atleast_1d(expected_max_standard_normal(n))
        elif name == "exponential":
            if mean < 0:
                raise DlexploreError(f"the exponential distribution needs mean >= 0 s, got {mean!r}")
            values = mean * np.atleast_1d(harmonic(n))
        else:
            if mean <= 0:
                raise DlexploreError(f"the lognormal distribution needs mean > 0 s, got {mean!r}")
            with np.errstate(over="ignore"):
                sigma_log = np.sqrt(np.log1p(np.square(np.float64(std) / mean)))
            if sigma_log > 8:  # the z grid (-9..12) holds E[max] to 1e-4 up to sigma_log = 8
                raise DlexploreError(
                    f"a lognormal with mean {mean:g} s and std {std:g} s is too wide "
                    "for the model's integration: std / mean must stay below 7.9e13"
                )
            mu_log = np.log(mean) - sigma_log**2 / 2
            values = np.trapezoid(np.exp(mu_log + sigma_log * _Z)[None, :] * _max_density(n), _Z, axis=1)
            values[n == 1] = mean
    else:
        values = _empirical(_times("the sample of per-rank times", distribution), n)
    return float(values[0]) if scalar else values


def straggler_slowdown(
    per_rank_times: Sequence[float] | np.ndarray | xr.DataArray,
    ranks: Iterable[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
) -> xr.Dataset:
    """Predicted step time and slowdown at each rank count, from a measured sample of per-rank times.

    Parameters
    ----------
    per_rank_times:
        Per-rank work times (s), e.g. ``time_work`` of every (rank, step) of a measured breakdown
        (see :func:`per_rank_work`); pooled, NaN dropped.
    ranks:
        Rank counts (count) to predict at.

    Returns
    -------
    xarray.Dataset
        Dim ``ranks``; ``expected_step_time`` (s) and ``slowdown`` (1, against the sample's mean) from
        the empirical distribution, ``expected_step_time_normal`` and ``slowdown_normal`` from a
        normal fit; scalars ``mean_time``, ``std_time`` (s) and ``samples`` (count).
    """
    sample = _times("per_rank_times", per_rank_times)
    n, _ = _ranks(list(ranks))
    mean = float(sample.mean())
    std = float(sample.std(ddof=1)) if sample.size > 1 else 0.0
    emp = expected_max(sample, n)
    normal = expected_max("normal", n, mean=mean, std=std)
    with np.errstate(divide="ignore", invalid="ignore"):  # all-zero times: no slowdown to speak of
        slowdown, slowdown_normal = emp / mean, normal / mean
    ds = xr.Dataset(
        {
            "expected_step_time": ("ranks", emp),
            "slowdown": ("ranks", slowdown),
            "expected_step_time_normal": ("ranks", normal),
            "slowdown_normal": ("ranks", slowdown_normal),
            "mean_time": mean,
            "std_time": std,
            "samples": sample.size,
        },
        coords={"ranks": n},
    )
    return _finish(ds, "straggler slowdown: expected maximum over ranks of per-rank work times")


def _finish(ds: xr.Dataset, title: str, source: str = PREDICTED_SOURCE) -> xr.Dataset:
    for name in ds.variables:
        if name in STRAGGLER_VARIABLES:
            units, long_name = STRAGGLER_VARIABLES[str(name)]
            ds[name].attrs.update(units=units, long_name=long_name)
    ds.attrs.update(
        source=source,
        kind="predicted",
        title=title,
        assumption="ranks' work times are independent draws from one distribution",
    )
    return ds


def per_rank_work(trace_or_breakdown, *, steps: Iterable[int] | None = None) -> xr.DataArray:
    """Per-rank work time per step (s): ``step_time - time_comm_exposed`` of the measured breakdown.

    That is the time a rank spends on its own work; the exposed communication of the fast ranks is
    mostly waiting for the slowest one, so it is taken out (as in
    :func:`dlexplore.traces.breakdown.stragglers`).
    Accepts a trace (:func:`dlexplore.load_trace`; anything with a ``breakdown(steps=...)`` method)
    or a breakdown dataset (:func:`dlexplore.traces.breakdown.breakdown`, which also takes an event
    table); dims (rank, step).
    """
    # The model sits below the trace readers: it asks the trace for its breakdown rather than
    # importing dlexplore.traces.
    if isinstance(trace_or_breakdown, xr.Dataset):
        ds = trace_or_breakdown if steps is None else trace_or_breakdown.sel(step=list(steps))
    elif callable(getattr(trace_or_breakdown, "breakdown", None)):
        ds = trace_or_breakdown.breakdown(steps=steps)
    else:
        raise DlexploreError(
            f"expected a trace (dlexplore.load_trace) or its breakdown dataset, got a "
            f"{type(trace_or_breakdown).__name__}; for an event table, pass "
            "dlexplore.traces.breakdown.breakdown(events)"
        )
    work = ds["step_time"] - ds["time_comm_exposed"]
    work.attrs.update(units="s", long_name="per-rank work time per step (step time - exposed communication)")
    work.name = "time_work"
    return work


def compare_with_measured(
    trace, *, steps: Iterable[int] | None = None, ranks: Iterable[int] | None = None
) -> xr.Dataset:
    """Measured maximum over ranks against the i.i.d. prediction, at the trace's rank count.

    Per step, the measured synchronous time is the maximum over ranks of :func:`per_rank_work`;
    ``measured_max`` is its mean over steps. The prediction pools every (rank, step) work time into
    one empirical distribution and takes the expected maximum of ``world_size`` draws
    (``predicted_max``; ``predicted_max_normal`` from a normal fit). A measured maximum well above the
    prediction means systematic imbalance (one rank always slower), not random jitter.

    Parameters
    ----------
    trace:
        A measured trace (:func:`dlexplore.load_trace`) or its breakdown dataset.
    steps:
        Steps to use (leave out warm-up); ``None`` uses all.
    ranks:
        Also predict the slowdown curve at these rank counts (count); ``None``: powers of two from 1
        to 1024 plus the trace's rank count.

    Returns
    -------
    xarray.Dataset
        Scalars ``measured_mean``, ``measured_max``, ``predicted_max``, ``predicted_max_normal`` (s),
        ``measured_slowdown``, ``predicted_slowdown`` (1), ``samples`` (count), coordinate
        ``world_size``; and the curve of :func:`straggler_slowdown` along ``ranks``.
        ``attrs["source"]`` names the trace's source and the model.
    """
    work = per_rank_work(trace, steps=steps)
    world = int(work.sizes["rank"])
    values = work.values
    if not np.isfinite(values).any():
        raise DlexploreError("the trace has no per-rank work time to compare (no step on any rank)")
    measured_max = float(np.nanmean(np.nanmax(values, axis=0)))
    measured_mean = float(np.nanmean(values))
    counts = sorted({*(2**k for k in range(11)), world}) if ranks is None else list(ranks)
    ds = straggler_slowdown(values, ranks=counts)
    predicted = expected_max(values[np.isfinite(values)], world)
    ds = ds.assign(
        measured_mean=measured_mean,
        measured_max=measured_max,
        measured_slowdown=measured_max / measured_mean,
        predicted_max=predicted,
        predicted_slowdown=predicted / measured_mean,
        predicted_max_normal=float(
            expected_max("normal", world, mean=float(ds.mean_time), std=float(ds.std_time))
        ),
    ).assign_coords(world_size=world)
    ds.world_size.attrs.update(units="count", long_name="ranks in the measured trace")
    source = getattr(trace, "source", None) or (
        trace.attrs.get("source") if hasattr(trace, "attrs") else None
    )
    return _finish(
        ds,
        "stragglers: measured maximum over ranks vs the i.i.d. prediction",
        source=f"{PREDICTED_SOURCE}; measured: {source or 'a trace'}",
    )
