"""What changed between two runs: per operator and per kernel, counts and times, added and removed.

:func:`trace_diff` compares a *control* trace with a *test* trace (two runs of the same program
before and after a change, as HTA's ``TraceDiff``) by event name, separately for

``operator``
    host operators (PyTorch ``cpu_op`` events, ``aten::*`` ...; category ``cpu``, or ``compute`` on
    CPU-only ranks, and communication calls on the host), and
``kernel``
    device work (kernels, copies, sets and communication kernels on device streams).

Counts and times are per rank and per step (each trace's totals divided by its ranks times its
steps), so runs of different lengths or scale compare. Only the events of a step count where a trace
has steps: what ran outside every step (Horovod's initial broadcast of the parameters, the work
before the first ``ProfilerStep`` or after the last, kernels those launched) would otherwise be
spread over the steps, and a short profile's per-step figures would grow with it; how many events
were left out is in ``attrs["outside_steps"]`` (per trace, on the diff). A trace without steps is
one step of all its events. Times are the summed durations of the events
(a nested operator's time is in its parent's too, as in HTA); a transfer or copy that Horovod fused
counts once, not once per tensor it carried (:func:`~.fused.fused_operations`). Columns:

``kind``, ``name``; ``count_control``, ``count_test`` (per rank and step), ``count_delta``;
``time_control``, ``time_test``, ``time_delta`` (s per rank and step), ``time_ratio`` (test /
control); ``status``: ``added`` (only in test), ``removed`` (only in control), ``changed``
(the count differs), ``same``. Sorted by the size of ``time_delta``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .events import category_mask, device_streams, events_of
from .fused import fused_operations

if TYPE_CHECKING:
    from .schema import Trace

__all__ = ["DIFF_COLUMNS", "op_stats", "trace_diff"]

#: Columns of :func:`trace_diff`: units and meaning.
DIFF_COLUMNS: dict[str, tuple[str, str]] = {
    "kind": ("", "operator (host) or kernel (device)"),
    "name": ("", "event name"),
    "count_control": ("count", "events per rank and step in the control trace"),
    "count_test": ("count", "events per rank and step in the test trace"),
    "count_delta": ("count", "count_test - count_control"),
    "time_control": ("s", "summed duration per rank and step in the control trace"),
    "time_test": ("s", "summed duration per rank and step in the test trace"),
    "time_delta": ("s", "time_test - time_control"),
    "time_ratio": ("1", "time_test / time_control"),
    "status": ("", "added, removed, changed (count differs) or same"),
}
_HOST_OPS = ("cpu", "compute", "communication", "data")
_DEVICE_WORK = ("compute", "communication", "memcpy", "memset")


def op_stats(trace: Trace | pd.DataFrame) -> pd.DataFrame:
    """Per (kind, name): ``count`` and ``time`` (s) per rank and step of the events in a step
    (module docstring); ``attrs`` say the divisor and how many events were outside every step."""
    events, source, _ = events_of(trace)
    if "fusion" in events.columns and "fusion_bytes" in events.columns:
        # Horovod repeats a fused transfer on the row of every tensor it carried: counted per row,
        # a fusion of two tensors would be two transfers and twice its time
        events = fused_operations(events)
    on_device = device_streams(events)
    rank = events["rank"].to_numpy()
    category = events["category"]
    # host operators are "cpu" on GPU ranks, "compute" on CPU-only ones
    host_ops = ~on_device & category_mask(category, _HOST_OPS)
    kernels = on_device & category_mask(category, _DEVICE_WORK)
    kind = np.where(kernels, "kernel", np.where(host_ops, "operator", ""))
    keep = kind != ""
    in_step = events["step"].notna().to_numpy(dtype=bool)
    outside = 0
    if in_step.any():
        outside = int((keep & ~in_step).sum())
        keep &= in_step
    frame = pd.DataFrame(
        {
            "kind": kind[keep],
            "name": events["name"].astype(str).to_numpy()[keep],
            "duration": events["duration"].to_numpy(dtype=float)[keep],
        }
    )
    ranks = max(len(np.unique(rank)), 1)
    steps = max(int(events["step"].nunique()), 1)
    stats = frame.groupby(["kind", "name"], sort=True).agg(
        count=("duration", "size"), time=("duration", "sum")
    )
    stats = stats / (ranks * steps)
    stats.attrs.update(source=source, ranks=ranks, steps=steps, outside_steps=outside)
    return stats


def trace_diff(control: Trace | pd.DataFrame, test: Trace | pd.DataFrame) -> pd.DataFrame:
    """Per operator and kernel name: counts and times of ``test`` against ``control`` (module
    docstring); :data:`DIFF_COLUMNS`, with ``attrs`` naming both sources and their divisors."""
    before, after = op_stats(control), op_stats(test)
    joined = before.merge(
        after, how="outer", left_index=True, right_index=True, suffixes=("_control", "_test")
    )
    present_before = joined["count_control"].notna().to_numpy()
    present_after = joined["count_test"].notna().to_numpy()
    joined = joined.fillna(0.0).reset_index()
    joined["count_delta"] = joined["count_test"] - joined["count_control"]
    joined["time_delta"] = joined["time_test"] - joined["time_control"]
    with np.errstate(divide="ignore", invalid="ignore"):
        joined["time_ratio"] = np.where(
            joined["time_control"] > 0, joined["time_test"] / joined["time_control"], np.nan
        )
    changed = ~np.isclose(joined["count_test"], joined["count_control"], rtol=1e-9, atol=1e-12)
    joined["status"] = np.where(
        ~present_before, "added", np.where(~present_after, "removed", np.where(changed, "changed", "same"))
    )
    order = np.argsort(-np.abs(joined["time_delta"].to_numpy()), kind="stable")
    table = joined.iloc[order].reset_index(drop=True)[list(DIFF_COLUMNS)]
    table.attrs.update(
        kind="measured",
        title="trace diff: test against control",
        source=f"control: {before.attrs['source']}; test: {after.attrs['source']}",
        control=before.attrs["source"],
        test=after.attrs["source"],
        per=f"per rank and step: control {before.attrs['ranks']} rank(s) x {before.attrs['steps']} "
        f"step(s), test {after.attrs['ranks']} rank(s) x {after.attrs['steps']} step(s)"
        + _left_out(before.attrs["outside_steps"], after.attrs["outside_steps"]),
        outside_steps={"control": before.attrs["outside_steps"], "test": after.attrs["outside_steps"]},
        units={n: u for n, (u, _) in DIFF_COLUMNS.items()},
        long_names={n: long for n, (_, long) in DIFF_COLUMNS.items()},
    )
    return table


def _left_out(control: int, test: int) -> str:
    if not control and not test:
        return ""
    return f"; left out, outside every step: {control:,} event(s) of control, {test:,} of test"
