"""Measured collectives against the alpha-beta model: :func:`compare_collectives` lays the model's
time for each row's message size and group beside the measured time of
:func:`dlexplore.traces.collectives.collective_table`, with the error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ..model.comm import ALGORITHMS, algorithm_for, collective_time

__all__ = ["compare_collectives"]


def compare_collectives(
    table: pd.DataFrame,
    *,
    bandwidth: float,
    latency: float,
    algorithm: str | Mapping[str, str] = "ring",
    gamma: float = 0.0,
    **kwargs: Any,
) -> pd.DataFrame:
    """The measured collective table beside the alpha-beta prediction for the same sizes and ranks.

    Parameters
    ----------
    table:
        The output of :func:`dlexplore.traces.collectives.collective_table` (``trace.collectives()``).
    bandwidth:
        GB/s per link and direction (as :func:`dlexplore.model.collective_time`).
    latency:
        Seconds per message.
    algorithm:
        One algorithm name, or ``{collective: algorithm}``. Where a name does not apply to a
        collective (``ring`` for alltoall), that collective's default algorithm is used; the
        ``algorithm`` column says which.
    gamma:
        Reduction cost, s/byte.
    kwargs:
        Passed to :func:`dlexplore.model.collective_time` (``servers``, ``gpus_per_node``, ...).

    Returns
    -------
    pandas.DataFrame
        The table plus ``algorithm``, ``predicted`` (s, the model's time at the row's ``bytes``
        and ``ranks``) and ``error`` (1, ``(time - predicted) / predicted``). Collectives the model
        does not cover (barrier, gather, scatter) and rows of unknown size get NaN.
    """
    if bandwidth is None or latency is None:
        raise DlexploreError("compare_collectives needs bandwidth (GB/s) and latency (s)")
    out = table.copy()
    out.attrs = dict(table.attrs)
    used = np.full(len(out), "", dtype=object)
    predicted = np.full(len(out), np.nan)
    for name, rows in out.groupby("collective").groups.items():
        collective = str(name)
        if collective not in ALGORITHMS:
            continue
        where = out.index.get_indexer(rows)
        choice = algorithm_for(collective, algorithm)
        nbytes = out["bytes"].to_numpy(dtype=float)[where]
        ranks = out["ranks"].to_numpy(dtype=float)[where]
        known = np.isfinite(nbytes)
        values = np.full(len(where), np.nan)
        if known.any():
            values[known] = collective_time(
                collective, choice, nbytes[known], ranks[known], bandwidth, latency, gamma, **kwargs
            )
        predicted[where] = values
        used[where] = choice
    out["algorithm"] = used
    out["predicted"] = predicted
    with np.errstate(divide="ignore", invalid="ignore"):
        out["error"] = np.where(
            predicted > 0, (out["time"].to_numpy(dtype=float) - predicted) / predicted, np.nan
        )
    units = dict(out.attrs.get("units", {}))
    units.update(algorithm="", predicted="s", error="1")
    out.attrs.update(
        units=units,
        predicted_by="dlexplore.model.collective_time",
        bandwidth=bandwidth,
        latency=latency,
        gamma=gamma,
    )
    return out
