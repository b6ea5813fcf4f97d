"""Fused operations as one row each: Horovod repeats a fused transfer and its copies on the row of
every tensor it carried (:mod:`.horovod`), so a sum or a count over rows needs them collapsed first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["fused_operations"]


def fused_operations(events: pd.DataFrame) -> pd.DataFrame:
    """The event table with each fused transfer and copy as one row instead of one per tensor.

    Horovod repeats a fused operation's transfer (``GLOO_ALLREDUCE`` ...) and copies on the row of
    every tensor in it. Here the communication and memcpy rows that share ``rank``, ``fusion`` and
    ``name`` become one row: on the first tensor's stream, from the earliest start to the latest
    end [s], with ``bytes`` = ``fusion_bytes`` (the whole fused buffer, bytes) and a ``tensors``
    column (how many tensors it carried; 1 on every other row). Other rows are kept as they are.
    This is the table to count collectives and their sizes on (one row per message on the wire).
    """
    table = events.copy()
    table["tensors"] = np.ones(len(table), dtype=np.int64)
    fused = (
        table["category"].isin(["communication", "memcpy"]).to_numpy() & table["fusion"].notna().to_numpy()
    )
    if not fused.any():
        return table
    parts = table.loc[fused]
    parts = parts.assign(_end=parts["start"] + parts["duration"])
    grouped = parts.groupby(["rank", "fusion", "name"], observed=True, sort=False)
    first = grouped.head(1).copy()  # the earliest row: events are sorted by start
    first["start"] = grouped["start"].transform("min").loc[first.index]
    first["duration"] = grouped["_end"].transform("max").loc[first.index] - first["start"]
    first["bytes"] = first["fusion_bytes"]
    first["tensors"] = grouped["start"].transform("size").loc[first.index].astype(np.int64)
    joined = pd.concat([table.loc[~fused], first.drop(columns="_end")])
    joined = joined.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    joined.attrs = dict(events.attrs)
    return joined
