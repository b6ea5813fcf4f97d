"""The variables and coordinates of one nccl-tests test's dataset, with their units, for
:mod:`dlexplore.traces.nccl_tests` (which documents them)."""

from __future__ import annotations

import numpy as np

from .nccl_tests_parse import Test

__all__ = ["variables", "coordinates"]

_MICROSECOND = 1e-6  # s
#: ``cputime`` (nccl-tests -C 1) and PCCL's ``cpu_time``: the host's clock, not the GPU's events.
_TIME_LONG_NAME = {
    "time": "collective time (nccl-tests average over iterations)",
    "cputime": "collective time on the host's clock (the 'cputime' column), average over iterations",
    "cpu_time": "collective time on the host's clock (the 'cpu_time' column), average over iterations",
}


#: The variables of a placement's extra columns (nccl_tests_rows.EXTRA_VALUES): (scale from the
#: printed value, units, long name).
_EXTRA_VARIABLES = {
    "bitdiff": (1.0, "1", "bits that differed between repeated runs (nccl-tests' bitwise check)"),
    "time_min": (_MICROSECOND, "s", "shortest iteration (nccl-tests' per-iteration report, i_min)"),
    "time_max": (_MICROSECOND, "s", "longest iteration (per-iteration report, i_max)"),
    "time_p99": (_MICROSECOND, "s", "99th percentile of the iterations (per-iteration report, i_p99)"),
    "time_cv": (1.0, "%", "iterations' standard deviation / mean (per-iteration report, i_cv%)"),
}


def variables(values: dict, check: str, dim: str, rows: np.ndarray | None, time_header: str = "time") -> dict:
    """The dataset's variables, with units (``rows``: results per size, when aggregated by size;
    ``time_header``: what the table called its time column)."""
    data_vars = {
        "time": (
            (dim, "placement"),
            values["time"] * _MICROSECOND,
            {"units": "s", "long_name": _TIME_LONG_NAME.get(time_header, _TIME_LONG_NAME["time"])},
        ),
        "algbw": (
            (dim, "placement"),
            values["algbw"],
            {"units": "GB/s", "long_name": "algorithm bandwidth (bytes / time)"},
        ),
        "busbw": (
            (dim, "placement"),
            values["busbw"],
            {"units": "GB/s", "long_name": "bus bandwidth (algbw x nccl-tests factor)"},
        ),
    }
    if check == "#wrong":
        data_vars["wrong"] = (
            (dim, "placement"),
            values["check"],
            {"units": "1", "long_name": "wrong elements found by the check (NaN: not checked)"},
        )
    else:
        data_vars["error"] = (
            (dim, "placement"),
            values["check"],
            {"units": "1", "long_name": "largest error found by the check (older nccl-tests)"},
        )
    for name, (scale, units, long_name) in _EXTRA_VARIABLES.items():
        if name in values:
            data_vars[name] = (
                (dim, "placement"),
                values[name] * scale,
                {"units": units, "long_name": long_name},
            )
    if rows is not None:
        data_vars["rows"] = (
            ("bytes",),
            rows,
            {"units": "count", "long_name": "result rows of this size (repeated sizes are means)"},
        )
    return data_vars


def coordinates(
    test: Test, name: str, ranks: int, dim: str, size_array: np.ndarray, counts: list, extra: dict
) -> dict:
    """The dataset's coordinates: placement, count, bytes (or point), collective, gpus, dtype ..."""
    by = "bytes" if dim == "bytes" else "point"
    coords: dict[str, object] = {
        "placement": ("placement", list(test.placements), {"long_name": "output buffer placement"}),
        "count": (
            dim,
            np.asarray(counts, dtype=np.int64),
            {"units": "elements", "long_name": "elements per rank (nccl-tests count column)"},
        ),
        "collective": ((), name, {"long_name": "collective operation"}),
        "gpus": ((), int(ranks), {"units": "count", "long_name": "GPUs (ranks) in the test"}),
    }
    bytes_attrs = {"units": "bytes", "long_name": "message size (nccl-tests size column)"}
    if by == "bytes":
        coords["bytes"] = ("bytes", size_array, bytes_attrs)
    else:
        coords["point"] = ("point", np.arange(len(size_array)), {"long_name": "result row"})
        coords["bytes"] = ("point", size_array, bytes_attrs)
    for column, coord, long_name in (
        ("type", "dtype", "data type"),
        ("redop", "redop", "reduction operation"),
        ("root", "root", "root rank (-1: none)"),
    ):
        if column not in extra:
            continue
        column_values = extra[column]
        attrs = {"long_name": long_name}
        if coord == "root":
            attrs["units"] = "1"
        if len(set(column_values)) == 1:
            coords[coord] = ((), column_values[0], attrs)
        else:
            coords[coord] = (dim, np.asarray(column_values), attrs)
    for column in test.layout.trailing:  # rccl-tests' algo, proto, nchannels; timestamp: per row
        texts = extra[column]
        whole = all(t.isdigit() for t in texts)
        attrs = {"long_name": f"the row's {column!r} column", **({"units": "count"} if whole else {})}
        coords[column] = (dim, np.asarray([int(t) for t in texts] if whole else texts), attrs)
    return coords
