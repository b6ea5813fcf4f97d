"""Coupled simulation + training: simulations produce samples into a buffer, training consumes them.

The model: ``n`` producers (simulation ranks) each make one sample every ``1 / r_p`` seconds; a
finished sample goes into a buffer of capacity ``C`` samples, and a producer whose buffer is full
waits (is *blocked*) until a slot frees before it starts its next sample. The consumer (training)
takes one sample from the buffer and spends ``1 / r_c`` seconds on it; with an empty buffer it
waits (*starves*). Everything starts at time 0 with an empty buffer.

Steady state (a tandem line with a finite buffer and deterministic times):

- throughput ``X = min(n r_p, r_c)`` samples/s;
- the consumer waits a fraction ``1 - X / r_c`` of the time, the producers are blocked a fraction
  ``1 - X / (n r_p)`` of theirs;
- the buffer is nearly empty when training is faster (``n r_p < r_c``) and full (``C``) when the
  simulation is faster.

:func:`coupled` runs a small discrete-event simulation over ``duration`` seconds to show the
transient and the occupancy over time; its events follow the recursion (sample ``k`` made by
producer ``k mod n``, FIFO buffer):

- production starts ``P_k = D_{k-n}`` (the same producer's previous deposit; 0 for ``k < n``) and
  ends ``F_k = P_k + 1 / r_p``;
- deposit ``D_k = max(F_k, S_{k-C})``: sample ``k - C`` must have left the buffer first;
- consumption starts ``S_k = max(D_k, E_{k-1})`` and ends ``E_k = S_k + 1 / r_c``.

The recursion is a loop over samples (each depends on earlier ones); the occupancy, the waits and
the statistics on the time grid are vectorised (``searchsorted``).

:func:`coupled_tasks` turns the simulation into a task-event table (columns :data:`TASK_COLUMNS`)
for :func:`dlexplore.plots.tasks.task_timeline_figure`, the table that
:func:`dlexplore.traces.tasks.read_task_events` reads from a measured run's file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from .._version import __version__
from ..errors import DlexploreError

__all__ = [
    "WORKFLOW_VARIABLES",
    "TASK_COLUMNS",
    "coupled",
    "coupled_tasks",
    "steady_state",
]

PREDICTED_SOURCE = f"predicted: dlexplore {__version__} producer/consumer model (deterministic times)"

#: units and long names of what :func:`coupled` writes.
WORKFLOW_VARIABLES: dict[str, tuple[str, str]] = {
    "time": ("s", "time from the start of the run"),
    "producers": ("count", "simulation producers"),
    "producer_rate": ("samples/s", "samples produced per second by one producer"),
    "consumer_rate": ("samples/s", "samples consumed per second by training"),
    "buffer": ("samples", "buffer capacity"),
    "duration": ("s", "simulated time"),
    "throughput": ("samples/s", "steady-state throughput min(n r_p, r_c)"),
    "throughput_simulated": ("samples/s", "samples consumed per second over the second half of the run"),
    "consumer_wait_fraction": ("1", "steady-state fraction of time training waits for samples"),
    "producer_wait_fraction": ("1", "steady-state fraction of time a producer is blocked by a full buffer"),
    "consumer_wait": ("s", "simulated time training waited for samples"),
    "producer_wait": ("s", "simulated time blocked by a full buffer, mean per producer"),
    "consumed": ("samples", "samples consumed (training started on them) by this time"),
    "produced": ("samples", "samples deposited in the buffer by this time"),
    "occupancy": ("samples", "samples waiting in the buffer"),
    "mean_occupancy": ("samples", "time-averaged buffer occupancy over the second half of the run"),
}

#: Columns of a task-event table: task (str), worker (str), start (s), end (s), kind (str).
TASK_COLUMNS = ("task", "worker", "start", "end", "kind")

_MAX_SAMPLES = 2_000_000  # the event loop is Python: keep a run under a couple of seconds


def _positive(name: str, value: float, *, integer: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DlexploreError(f"{name} must be a number, got {value!r}") from None
    if not np.isfinite(number) or number <= 0 or (integer and number != int(number)):
        kind = "a whole number >= 1" if integer else "a number > 0"
        raise DlexploreError(f"{name} must be {kind}, got {value!r}")
    return number


def steady_state(producers: int, producer_rate: float, consumer_rate: float) -> dict[str, float]:
    """Steady-state throughput (samples/s) and the wait fractions (1) of each side.

    ``throughput = min(n r_p, r_c)``; ``consumer_wait_fraction = 1 - throughput / r_c``;
    ``producer_wait_fraction = 1 - throughput / (n r_p)``.
    """
    n = _positive("producers", producers, integer=True)
    rp = _positive("producer_rate", producer_rate)
    rc = _positive("consumer_rate", consumer_rate)
    x = min(n * rp, rc)
    return {"throughput": x, "consumer_wait_fraction": 1 - x / rc, "producer_wait_fraction": 1 - x / (n * rp)}


def _simulate(n: int, rp: float, rc: float, capacity: int, duration: float):
    """Arrays P, F, D, S, E (s) of the recursion in the module docstring, for samples started in time."""
    tp, tc = 1.0 / rp, 1.0 / rc
    # No more samples can be consumed than either side can handle in the run (plus a margin).
    k_max = int(min(n * rp, rc) * duration) + n + capacity + 2
    if k_max > _MAX_SAMPLES:
        raise DlexploreError(
            f"the run would simulate {k_max:,} samples (over {_MAX_SAMPLES:,}); "
            "shorten the duration or lower the rates"
        )
    p = np.empty(k_max)
    f = np.empty(k_max)
    d = np.empty(k_max)
    s = np.empty(k_max)
    e = np.empty(k_max)
    last_end = 0.0
    for k in range(k_max):
        p[k] = d[k - n] if k >= n else 0.0
        f[k] = p[k] + tp
        d[k] = max(f[k], s[k - capacity]) if k >= capacity else f[k]
        s[k] = max(d[k], last_end)
        e[k] = last_end = s[k] + tc
    return p, f, d, s, e


def coupled(
    producers: int,
    producer_rate: float,
    consumer_rate: float,
    buffer: int,
    duration: float,
    *,
    points: int = 401,
) -> xr.Dataset:
    """Coupled simulation + training as producers and a consumer around a bounded buffer.

    Parameters
    ----------
    producers:
        Simulation producers ``n`` (count).
    producer_rate:
        Samples per second made by one producer ``r_p`` (samples/s).
    consumer_rate:
        Samples per second training consumes ``r_c`` (samples/s).
    buffer:
        Buffer capacity ``C`` (samples, >= 1).
    duration:
        Simulated time (s).
    points:
        Points of the time grid for the occupancy curve (count).

    Returns
    -------
    xarray.Dataset
        Dim ``time`` (s): ``occupancy``, ``produced``, ``consumed`` (samples). Scalars: steady-state
        ``throughput`` (samples/s), ``consumer_wait_fraction`` and ``producer_wait_fraction`` (1);
        from the simulation ``throughput_simulated`` (samples/s, second half of the run),
        ``consumer_wait`` and ``producer_wait`` (s, whole run; the consumer's first wait for the
        first sample included), ``mean_occupancy`` (samples, second half). Inputs as coordinates.
    """
    n = int(_positive("producers", producers, integer=True))
    rp = _positive("producer_rate", producer_rate)
    rc = _positive("consumer_rate", consumer_rate)
    capacity = int(_positive("buffer", buffer, integer=True))
    duration = _positive("duration", duration)
    p, f, d, s, e = _simulate(n, rp, rc, capacity, duration)
    grid = np.linspace(0.0, duration, int(points))
    produced = np.searchsorted(d, grid, side="right")
    consumed = np.searchsorted(s, grid, side="right")
    # waits within [0, duration]: consumer idle before each start, producers blocked F -> D
    previous_end = np.concatenate([[0.0], e[:-1]])
    consumer_wait = float(
        np.clip(np.minimum(s, duration) - np.minimum(previous_end, duration), 0, None).sum()
    )
    producer_wait = float((np.minimum(d, duration) - np.minimum(f, duration)).sum()) / n
    half = duration / 2
    late = np.searchsorted(s, duration, side="right") - np.searchsorted(s, half, side="right")
    throughput_sim = float(late / (duration - half))
    # exact time average of the step function occupancy(t) = #D<=t - #S<=t over [half, duration]
    fine = np.sort(
        np.concatenate([d[(d > half) & (d < duration)], s[(s > half) & (s < duration)], [half, duration]])
    )
    level = np.searchsorted(d, fine[:-1], side="right") - np.searchsorted(s, fine[:-1], side="right")
    mean_occ = float((level * np.diff(fine)).sum() / (duration - half))
    steady = steady_state(n, rp, rc)
    ds = xr.Dataset(
        {
            "occupancy": ("time", (produced - consumed).astype(np.int64)),
            "produced": ("time", produced.astype(np.int64)),
            "consumed": ("time", consumed.astype(np.int64)),
            **steady,
            "throughput_simulated": throughput_sim,
            "consumer_wait": consumer_wait,
            "producer_wait": producer_wait,
            "mean_occupancy": mean_occ,
        },
        coords={
            "time": grid,
            "producers": n,
            "producer_rate": rp,
            "consumer_rate": rc,
            "buffer": capacity,
            "duration": duration,
        },
    )
    for name in ds.variables:
        units, long_name = WORKFLOW_VARIABLES[str(name)]
        ds[name].attrs.update(units=units, long_name=long_name)
    bottleneck = (
        "training (consumer)" if rc < n * rp else "simulation (producers)" if rc > n * rp else "balanced"
    )
    ds.attrs.update(
        source=PREDICTED_SOURCE,
        kind="predicted",
        bottleneck=bottleneck,
        title="coupled simulation + training: producers, bounded buffer, consumer",
    )
    return ds


def coupled_tasks(
    producers: int, producer_rate: float, consumer_rate: float, buffer: int, duration: float
) -> pd.DataFrame:
    """The simulation of :func:`coupled` as a task-event table (columns :data:`TASK_COLUMNS`, s).

    Workers ``sim 0 .. sim n-1`` run ``simulate`` tasks and ``blocked`` waits (buffer full); worker
    ``train`` runs ``train`` tasks and ``wait`` (buffer empty). Intervals are clipped to ``duration``.
    """
    n = int(_positive("producers", producers, integer=True))
    rp = _positive("producer_rate", producer_rate)
    rc = _positive("consumer_rate", consumer_rate)
    capacity = int(_positive("buffer", buffer, integer=True))
    duration = _positive("duration", duration)
    p, f, d, s, e = _simulate(n, rp, rc, capacity, duration)
    k = np.arange(p.size)
    sims = np.array([f"sim {i}" for i in range(n)])[k % n]
    previous_end = np.concatenate([[0.0], e[:-1]])
    parts = [
        (k, sims, p, f, "simulate"),
        (k, sims, f, d, "blocked"),
        (k, np.full(k.size, "train"), previous_end, s, "wait"),
        (k, np.full(k.size, "train"), s, e, "train"),
    ]
    frames = []
    for idx, worker, start, end, kind in parts:
        start, end = np.minimum(start, duration), np.minimum(end, duration)
        keep = end > start
        frames.append(
            pd.DataFrame(
                {
                    "task": [f"{kind} {i}" for i in idx[keep]],
                    "worker": worker[keep],
                    "start": start[keep],
                    "end": end[keep],
                    "kind": kind,
                }
            )
        )
    frame = pd.concat(frames, ignore_index=True).sort_values(["worker", "start"], ignore_index=True)
    frame["duration"] = frame["end"] - frame["start"]
    frame.attrs.update(source=PREDICTED_SOURCE, units={"start": "s", "end": "s", "duration": "s"})
    return frame
