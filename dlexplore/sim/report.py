"""The what-if replay as text, for ``dlexplore whatif TRACE... --bandwidth x2 [--gpus 64]``.

    print(whatif_report(dlexplore.load_trace("run/"), bandwidth="x1,x2", gpus="64"))

One row per scenario (or per scenario and step): the measured and the replayed step time (mean over
ranks, and over steps), the change, communication and exposed communication, throughput when the
batch size is known. ``table`` is for people (times in ms, change in %), ``csv`` and ``json`` keep
SI units (s, fractions) and name them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError
from ..traces.schema import Trace
from .graph import ReplayGraph
from .replay import parse_factor
from .whatif import scenario_summary, whatif

__all__ = ["REPORT_COLUMNS", "parse_factors", "parse_gpus", "whatif_report", "whatif_frame"]

#: Columns of the report: units (SI, as in csv and json) and meaning.
REPORT_COLUMNS: dict[str, tuple[str, str]] = {
    "scenario": ("", "what-if scenario"),
    "step": ("1", "training step (with per_step)"),
    "gpus": ("count", "ranks"),
    "bandwidth_factor": ("1", "network bandwidth factor"),
    "latency_factor": ("1", "network latency factor"),
    "compute_factor": ("1", "compute speed factor"),
    "step_time_measured": ("s", "measured step time, mean over ranks (and steps)"),
    "step_time": ("s", "replayed step time, mean over ranks (and steps)"),
    "change": ("1", "replayed / measured - 1"),
    "time_comm": ("s", "replayed communication time per step, mean over ranks (and steps)"),
    "time_comm_exposed": ("s", "replayed exposed communication per step, mean over ranks (and steps)"),
    "throughput": ("samples/s", "gpus x batch size per rank / replayed step time"),
}


def parse_factors(text: str | float | Iterable[Any] | None) -> list[float]:
    """Factors from the command line: ``"x2"``, ``"x1,x2,x4"``, ``0.5`` -> ``[2.0]``, ...; None -> [1.0]."""
    if text is None:
        return [1.0]
    if isinstance(text, (int, float)):
        return [float(text)]
    items = str(text).split(",") if isinstance(text, str) else list(text)
    values = [parse_factor(item) for item in items if str(item).strip()]
    if not values:
        raise DlexploreError(f"expected one or more factors such as x2 or x1,x2, got {text!r}")
    return values


def parse_gpus(text: str | int | Iterable[Any] | None) -> list[int | None]:
    """Rank counts from the command line: ``"64"``, ``"8,16,64"`` -> ints; None -> [None] (as measured)."""
    if text is None:
        return [None]
    items = str(text).split(",") if isinstance(text, (str, int)) else list(text)
    out: list[int | None] = []
    for item in items:
        word = str(item).strip()
        if not word:
            continue
        try:
            value = float(word)
        except ValueError:
            raise DlexploreError(f"expected a whole number of GPUs such as 64, got {word!r}") from None
        if not math.isfinite(value) or value != int(value) or value < 1:
            raise DlexploreError(f"expected a whole number of GPUs >= 1, got {word!r}")
        out.append(int(value))
    if not out:
        raise DlexploreError(f"expected one or more GPU counts such as 64 or 8,64, got {text!r}")
    return out


def whatif_frame(ds: xr.Dataset, per_step: bool = False) -> pd.DataFrame:
    """The rows of the report (SI units, :data:`REPORT_COLUMNS`) from a :func:`whatif` dataset."""
    factors = ["gpus", "bandwidth_factor", "latency_factor", "compute_factor"]
    if not per_step:
        summary = scenario_summary(ds)
        frame = summary.to_dataframe().reset_index()
    else:
        replayed = ds["step_time"].mean("rank")
        data = {
            "step_time_measured": ds["step_time_measured"].mean("rank").broadcast_like(replayed),
            "step_time": replayed,
            "time_comm": ds["time_comm"].mean("rank"),
            "time_comm_exposed": ds["time_comm_exposed"].mean("rank"),
        }
        data["change"] = data["step_time"] / data["step_time_measured"] - 1.0
        if "throughput" in ds:
            data["throughput"] = ds["throughput"]
        frame = xr.Dataset(data).to_dataframe(dim_order=["scenario", "step"]).reset_index()
    columns = [c for c in REPORT_COLUMNS if c in frame.columns and (per_step or c != "step")]
    frame = frame[columns]
    for name in factors:
        if name not in frame.columns:
            frame[name] = ds[name].sel(scenario=frame["scenario"].to_numpy()).to_numpy()
    return frame[[c for c in REPORT_COLUMNS if c in frame.columns]].reset_index(drop=True)


def _json_value(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def whatif_report(
    trace: Trace | pd.DataFrame | ReplayGraph,
    *,
    bandwidth: Any = None,
    latency: Any = None,
    compute: Any = None,
    gpus: Any = None,
    batch_size: int | None = None,
    fmt: str = "table",
    per_step: bool = False,
    fit: str = "auto",
) -> str:
    """The what-if replay of ``trace`` as text (``fmt``: ``table``, ``csv`` or ``json``).

    ``bandwidth``, ``latency``, ``compute``: factors as the command line writes them (``"x2"``,
    ``"x1,x2,x4"``, ``0.5``; None = 1); ``gpus``: ``"64"`` or ``"8,16,64"`` (None = as measured).
    Every combination is a scenario; the first row is always the replay as measured, whose
    difference from the measurement (``identity error``) the header states. ``per_step``: one row
    per scenario and step instead of the mean over steps.
    """
    if fmt not in ("table", "csv", "json"):
        raise DlexploreError(f"format must be table, csv or json, got {fmt!r}")
    ds = whatif(
        trace,
        bandwidth=parse_factors(bandwidth),
        latency=parse_factors(latency),
        compute=parse_factors(compute),
        gpus=parse_gpus(gpus),
        batch_size=batch_size,
        fit=fit,
    )
    frame = whatif_frame(ds, per_step=per_step)
    title = "what-if replay of a measured trace"
    attrs = ds.attrs
    config = {
        "identity_error": attrs["identity_error"],
        "fit_latency_s": attrs["fit_alpha_s"],
        "fit_bandwidth_GBps": attrs["fit_bandwidth_GBps"],
        "fit_method": attrs["fit_method"],
        "fit_note": attrs["fit_note"],
        "measured_gpus": int(ds["gpus"].values[0]),
        **({"batch_size": attrs["batch_size"]} if "batch_size" in attrs else {}),
        "notes": attrs["notes"],
    }
    if fmt == "csv":
        return frame.to_csv(index=False, float_format="%.12g", lineterminator="\n")
    if fmt == "json":
        payload = {
            "title": title,
            "source": attrs["source"],
            "kind": "simulated",
            "config": {k: _json_value(v) for k, v in config.items()},
            "units": {c: REPORT_COLUMNS[c][0] for c in frame.columns},
            "rows": [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")],
        }
        return json.dumps(payload, indent=2) + "\n"
    shown = frame.copy()
    names = {}
    for column in shown.columns:
        units = REPORT_COLUMNS[column][0]
        if units == "s":
            shown[column] = shown[column] * 1e3
            units = "ms"
        elif column == "change":
            shown[column] = shown[column] * 100.0
            units = "%"
        names[column] = f"{column} [{units}]" if units and units not in ("1", "count") else column
    shown = shown.rename(columns=names)
    bandwidth_text = (
        "no bandwidth term"
        if not math.isfinite(attrs["fit_bandwidth_GBps"])
        else f"{attrs['fit_bandwidth_GBps']:.4g} GB/s"
    )
    lines = [
        f"# {title}",
        f"# source: {attrs['source']}",
        f"# network fitted to the trace's collectives: latency {attrs['fit_alpha_s'] * 1e6:.4g} us, "
        f"bandwidth {bandwidth_text} ({attrs['fit_method'].rsplit('.', 1)[-1]})",
        f"# replay as measured vs measurement: largest per-step error {attrs['identity_error']:.2%}",
    ]
    with pd.option_context("display.max_columns", None, "display.width", 250):
        body = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    return "\n".join(lines) + "\n" + body + "\n"
