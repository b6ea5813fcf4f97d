"""TAU profiles (``profile.N.C.T`` text files) as a profile dataset, with MPI time as communication.

    prof = dlexplore.traces.read_tau_profile("run/")   # profile.* files, or MULTI__<metric>/ folders
    prof["exclusive"].sel(metric="TIME")                # s, on (metric, rank, thread, function)
    dlexplore.traces.tau_breakdown(prof)                # time_comm (MPI), time_compute per rank

**Format** (TAU's ``TauCollate``/``TauProfiler`` writers; one file per node N = MPI rank, context C,
thread T; with several metrics one folder ``MULTI__<metric>`` each)::

    20 templated_functions_MULTI_TIME
    # Name Calls Subrs Excl Incl ProfileCalls # <metadata>...</metadata>
    "MPI_Allreduce()  " 34 0 790537 790537 0 GROUP="MPI"
    ...                                       (one line per function, as many as the first line says)
    0 aggregates
    3 userevents                              (optional)
    # eventname numevents max min mean sumsqr
    "Message size for all-reduce" 34 4 4 4 544

Times of ``TIME`` and ``*WALL_CLOCK*`` metrics are microseconds in the file and seconds here
(``metric_units`` "s"); other metrics (PAPI counters) stay counts. Values are taken as written:
a 32-bit hardware counter that wrapped (``4294968161`` in the shipped P_WALL_CLOCK_TIME example)
is kept, not corrected.

**Communication** is the exclusive time of functions whose TAU group contains ``MPI``
(``communication`` coordinate), except MPI-IO's ``MPI_File_*``, which is input/output (``io``):
``time_comm`` and ``time_io`` per rank and thread in :func:`tau_breakdown`,
``time_total`` the largest inclusive time (the application's root), ``time_compute`` the rest.
Contexts other than 0 are refused (TAU uses them only for special runtimes).

**Throttled timers.** TAU stops timing a function called more than 100,000 times at under 10 us a
call (TAU_THROTTLE): its name gets `` [THROTTLED]`` and its group ``TAU_DISABLE``, its calls and
times stop at that point and the rest of its time lands in its caller's exclusive time. Such
functions are marked (``throttled`` coordinate on ``function``) and named in a warning: their
numbers are partial.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xarray as xr

from .._io import read_text
from ..errors import DlexploreError, InputFileError

__all__ = ["read_tau_profile", "tau_breakdown", "is_tau_profile"]

_FILE_NAME = re.compile(r"^profile\.(\d+)\.(\d+)\.(\d+)$")
_FIRST = re.compile(r"^(\d+)\s+templated_functions(?:_MULTI_(\S+))?\s*$")
_FUNCTION = re.compile(
    r'^"(?P<name>.*)"\s+(?P<calls>\S+)\s+(?P<subrs>\S+)\s+(?P<excl>\S+)\s+'
    r'(?P<incl>\S+)\s+(?P<pcalls>\S+)\s+GROUP="(?P<group>[^"]*)"\s*$'
)
_USER_EVENT = re.compile(
    r'^"(?P<name>.*)"\s+(?P<n>\S+)\s+(?P<max>\S+)\s+(?P<min>\S+)\s+'
    r"(?P<mean>\S+)\s+(?P<sumsqr>\S+)\s*$"
)
_COUNT_LINE = re.compile(r"^(\d+)\s+(aggregates|userevents)\s*$")
_USER_FIELDS = ("numevents", "max", "min", "mean", "sumsqr")


def is_tau_profile(text: str) -> bool:
    """Whether ``text`` (a file's first bytes) starts like a TAU profile."""
    return bool(_FIRST.match(text.split("\n", 1)[0].strip()))


def _is_io(name: str, group: str) -> bool:
    return "MPI" in group and name.startswith("MPI_File")


def _is_comm(name: str, group: str) -> bool:
    # MPI-IO (MPI_File_*) is input/output, not communication between ranks.
    return "MPI" in group and not _is_io(name, group)


def _is_throttled(name: str, group: str) -> bool:
    # TAU renames a throttled timer "... [THROTTLED]" and moves it to the TAU_DISABLE group.
    return name.endswith("[THROTTLED]") or "TAU_DISABLE" in group.split("|")


def _warn_throttled(files: list[str], names: list[str]) -> None:
    """One warning naming the throttled functions, whose counts and times are partial."""
    if names:
        shown = "; ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        warnings.warn(
            f"{', '.join(os.path.basename(f) for f in files[:3])}: {len(names)} function(s) throttled by TAU "
            f"(GROUP TAU_DISABLE): their calls and times stop where TAU stopped timing them, the rest is in "
            f"their callers' exclusive time: {shown}",
            UserWarning,
            stacklevel=3,
        )


def _is_time(metric: str) -> bool:
    return metric == "TIME" or "WALL_CLOCK" in metric or metric.endswith("_TIME")


@dataclass
class _Profile:
    metric: str
    rank: int
    thread: int
    functions: dict[str, tuple[float, float, float, float, str]] = field(default_factory=dict)
    user_events: dict[str, tuple[float, ...]] = field(default_factory=dict)


def _number(path: Path, line: int, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value) or value < 0:
        raise InputFileError(path, f"{what}: expected a number >= 0, found {text!r}", line=line)
    return value


def _parse(path: Path, metric_hint: str | None) -> _Profile:
    match = _FILE_NAME.match(path.name)
    if not match:
        raise InputFileError(path, "expected a TAU profile named profile.<node>.<context>.<thread>")
    node, context, thread = (int(g) for g in match.groups())
    if context != 0:
        raise InputFileError(
            path,
            f"context {context}: only context 0 is read (TAU uses other contexts only for special runtimes)",
        )
    lines = read_text(path, "a TAU profile").split("\n")
    first = _FIRST.match(lines[0].strip())
    if not first:
        raise InputFileError(
            path, f"expected '<count> templated_functions_MULTI_<metric>', found {lines[0][:60]!r}", line=1
        )
    count = int(first.group(1))
    metric = first.group(2) or metric_hint or "TIME"
    if len(lines) < 2 or not lines[1].startswith("# Name Calls Subrs Excl Incl"):
        raise InputFileError(path, "expected the header '# Name Calls Subrs Excl Incl ProfileCalls'", line=2)
    profile = _Profile(metric, node, thread)
    scale = 1e-6 if _is_time(metric) else 1.0
    for number in range(3, 3 + count):
        text = lines[number - 1] if number <= len(lines) else ""
        m = _FUNCTION.match(text.strip())
        if not m:
            raise InputFileError(
                path,
                f"expected function {number - 2} of {count}: "
                '"name" calls subrs excl incl profilecalls GROUP="..."; found '
                f"{text[:60]!r}",
                line=number,
            )
        values = [_number(path, number, m.group(k), k) for k in ("calls", "subrs", "excl", "incl")]
        name = m.group("name").strip()
        profile.functions[name] = (
            values[0],
            values[1],
            values[2] * scale,
            values[3] * scale,
            m.group("group"),
        )
    _user_events(path, lines, 3 + count, profile)
    return profile


def _user_events(path: Path, lines: list[str], start: int, profile: _Profile) -> None:
    number = start
    while number <= len(lines):
        text = lines[number - 1].strip()
        number += 1
        if not text:
            continue
        m = _COUNT_LINE.match(text)
        if not m:
            raise InputFileError(
                path, f"expected '<n> aggregates' or '<n> userevents', found {text[:60]!r}", line=number - 1
            )
        n, kind = int(m.group(1)), m.group(2)
        if kind == "aggregates":
            if n:
                raise InputFileError(
                    path,
                    f"{n} aggregates: TAU aggregates are not read; expected 0 aggregates",
                    line=number - 1,
                )
            continue
        if number <= len(lines) and lines[number - 1].startswith("#"):
            number += 1  # "# eventname numevents max min mean sumsqr"
        for k in range(n):
            line_text = lines[number - 1] if number <= len(lines) else ""
            ev = _USER_EVENT.match(line_text.strip())
            if not ev:
                raise InputFileError(
                    path,
                    f'expected user event {k + 1} of {n}: "name" numevents '
                    f"max min mean sumsqr; found {line_text[:60]!r}",
                    line=number,
                )
            profile.user_events[ev.group("name").strip()] = tuple(
                _number(path, number, ev.group(g), g) for g in ("n", "max", "min", "mean", "sumsqr")
            )
            number += 1


def _files(paths: str | os.PathLike | Iterable) -> list[tuple[Path, str | None]]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    found: list[tuple[Path, str | None]] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            multi = sorted(p for p in path.glob("MULTI__*") if p.is_dir())
            folders = [(p, p.name.removeprefix("MULTI__")) for p in multi] or [(path, None)]
            for folder, metric in folders:
                found += [
                    (f, metric) for f in sorted(folder.glob("profile.*.*.*")) if _FILE_NAME.match(f.name)
                ]
            if not found:
                raise InputFileError(
                    path, "holds no TAU profiles (profile.N.C.T files or MULTI__<metric> folders)"
                )
        elif path.is_file():
            metric = (
                path.parent.name.removeprefix("MULTI__") if path.parent.name.startswith("MULTI__") else None
            )
            found.append((path, metric))
        else:
            raise InputFileError(path, "no such file or folder; expected TAU profiles")
    return found


def read_tau_profile(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> xr.Dataset:
    """TAU profiles as a dataset.

    Returns variables ``exclusive`` and ``inclusive`` on (``metric``, ``rank``, ``thread``,
    ``function``) in each metric's ``metric_units`` (s for time metrics); ``calls`` and
    ``subroutines`` (count) on (``rank``, ``thread``, ``function``); when the profiles hold user
    events, ``event_count``, ``event_max``, ``event_min``, ``event_mean``, ``event_sumsqr`` on
    (``rank``, ``thread``, ``user_event``) as TAU records them (bytes for its "Message size"
    events). Coordinates on ``function``: ``group`` (TAU group), ``communication`` (MPI), ``io``
    (MPI-IO) and ``throttled`` (numbers partial, warned of: module docstring).
    NaN where a function did not run on a rank or thread.
    """
    parsed = [_parse(path, hint) for path, hint in _files(paths)]
    metrics = sorted({p.metric for p in parsed}, key=lambda m: (m != "TIME", m))
    ranks = sorted({p.rank for p in parsed})
    threads = sorted({p.thread for p in parsed})
    functions = sorted({f for p in parsed for f in p.functions})
    events = sorted({e for p in parsed for e in p.user_events})
    fi = {f: i for i, f in enumerate(functions)}
    shape = (len(metrics), len(ranks), len(threads), len(functions))
    excl, incl = np.full(shape, np.nan), np.full(shape, np.nan)
    calls, subrs = np.full(shape[1:], np.nan), np.full(shape[1:], np.nan)
    ev = np.full((len(_USER_FIELDS), len(ranks), len(threads), len(events)), np.nan)
    groups: dict[str, str] = {}
    for p in parsed:
        m, r, t = metrics.index(p.metric), ranks.index(p.rank), threads.index(p.thread)
        for name, (c, s, e, i, group) in p.functions.items():
            excl[m, r, t, fi[name]], incl[m, r, t, fi[name]] = e, i
            calls[r, t, fi[name]], subrs[r, t, fi[name]] = c, s
            groups.setdefault(name, group)
        for name, values in p.user_events.items():
            ev[:, r, t, events.index(name)] = values
    units = ["s" if _is_time(m) else "count" for m in metrics]
    throttled = [_is_throttled(f, groups[f]) for f in functions]
    dims4 = ("metric", "rank", "thread", "function")
    data = {
        "exclusive": (
            dims4,
            excl,
            {
                "units": "metric_units",
                "long_name": "exclusive value (this function alone), in the metric's units",
            },
        ),
        "inclusive": (
            dims4,
            incl,
            {
                "units": "metric_units",
                "long_name": "inclusive value (with the functions it called), in the metric's units",
            },
        ),
        "calls": (dims4[1:], calls, {"units": "count", "long_name": "calls"}),
        "subroutines": (dims4[1:], subrs, {"units": "count", "long_name": "child calls"}),
    }
    if events:
        for k, name in enumerate(_USER_FIELDS):
            unit = "count" if name == "numevents" else ("1" if name != "sumsqr" else "1")
            data[f"event_{'count' if name == 'numevents' else name}"] = (
                ("rank", "thread", "user_event"),
                ev[k],
                {
                    "units": unit,
                    "long_name": f"user event {name} as TAU records it (bytes for message sizes)",
                },
            )
    ds = xr.Dataset(
        {k: xr.Variable(*v) for k, v in data.items()},
        coords={
            "metric": np.array(metrics, dtype=object),
            "rank": ranks,
            "thread": threads,
            "function": np.array(functions, dtype=object),
            "metric_units": ("metric", np.array(units, dtype=object)),
            "group": ("function", np.array([groups[f] for f in functions], dtype=object)),
            "communication": ("function", np.array([_is_comm(f, groups[f]) for f in functions])),
            "io": ("function", np.array([_is_io(f, groups[f]) for f in functions])),
            "throttled": ("function", np.array(throttled)),
            **({"user_event": np.array(events, dtype=object)} if events else {}),
        },
    )
    files = [str(path) for path, _ in _files(paths)]
    _warn_throttled(files, [f for f, t in zip(functions, throttled, strict=True) if t])
    ds.attrs.update(
        source=f"measured: TAU profiles {', '.join(os.path.basename(f) for f in files[:3])}"
        + (f" and {len(files) - 3} more" if len(files) > 3 else ""),
        kind="measured",
        format="tau",
        files=files,
    )
    return ds


def tau_breakdown(profile: xr.Dataset, metric: str = "TIME") -> xr.Dataset:
    """Per rank and thread: ``time_total`` (the largest inclusive time: the application's root),
    ``time_comm`` (exclusive time in MPI functions), ``time_compute`` (the rest), in s."""
    if metric not in profile["metric"].values:
        raise DlexploreError(f"no metric {metric!r} in the profile; it has {list(profile['metric'].values)}")
    if profile["metric_units"].sel(metric=metric) != "s":
        raise DlexploreError(f"metric {metric!r} is not a time")
    one = profile.sel(metric=metric)
    total = one["inclusive"].max("function")
    comm = one["exclusive"].where(one["communication"]).sum("function")
    io = one["exclusive"].where(one["io"]).sum("function")
    out = xr.Dataset(
        {"time_total": total, "time_comm": comm, "time_io": io, "time_compute": total - comm - io}
    )
    for name, long_name in (
        ("time_total", "run time (root's inclusive time)"),
        ("time_comm", "time in MPI communication (exclusive; MPI_File_* excluded)"),
        ("time_io", "time in MPI-IO (MPI_File_*), exclusive"),
        ("time_compute", "time outside MPI"),
    ):
        out[name].attrs.update(units="s", long_name=long_name)
    out.attrs.update(source=profile.attrs.get("source", "measured: TAU profiles"), kind="measured")
    return out.drop_vars("metric_units", errors="ignore")
