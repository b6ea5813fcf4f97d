"""The JSON results file of nccl-tests 2.17 and later (``-J PATH``), read into the tests that
:mod:`dlexplore.traces.nccl_tests` makes datasets of, as it does the printed tables.

The file is one object, written by nccl-tests' own JSON writer (``src/util.cu``)::

    {"version": 3, "start_time": "2026-08-21 03:26:03", "args": [".../all_reduce_perf", "-b", ...],
     "env": [...], "nccl_version": 22903,
     "config": {"nthreads": 1, "ngpus": 2, ..., "devices": [{"rank": 0, "hostname": ..., ...}]},
     "results": [{"size": 134217728, "count": 67108864, "type": "half", "redop": "sum",
                  "root": "    -1",
                  "out_of_place": {"time": 23418.69756, "alg_bw": 5.731221, "bus_bw": 5.731221,
                                   "nwrong": 0.0},
                  "out_of_place_per_iter": {"min_us": ..., "max_us": ..., "p99_us": ...,
                                            "cv_pct": ..., "times_us": [...]},
                  "in_place": {...}, "in_place_per_iter": {...}, ...}],
     "out_of_bounds": {"count": 0, "okay": "true"},
     "average_bus_bandwidth": {"bandwidth": 5.724297, "okay": "unchecked"},
     "errors": [""], "end_time": "..."}

Times are in microseconds (``cpu_time`` in place of ``time`` with ``-C 1``), bandwidths in GB/s,
``nwrong`` is null where nothing was checked and a placement null where it did not run; NaN is
written as the string ``"nan"``. ``devices`` holds one entry per process (nccl-tests parses only
the first of each process's device lines), so the ranks are ``len(devices) x nthreads x ngpus``.
The per-iteration summaries become the same variables as the printed ``-I 1`` columns
(``time_min``, ``time_max``, ``time_p99``, ``time_cv``); the per-iteration samples themselves
(``times_us``) are not kept. In messages and attributes, a result's "line" is its position in
``results`` (from 1): the writer puts the whole object on one line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .._io import read_text
from ..errors import InputFileError
from .nccl_tests_columns import PLACEMENTS, Layout
from .nccl_tests_parse import BINARY, Test

__all__ = ["parse_json", "is_nccl_tests_json"]

_KEYS = ("out_of_place", "in_place")
#: The per-iteration summary's keys, in the order of the printed columns i_min i_max i_p99 i_cv%.
_PER_ITERATION = (("i_min", "min_us"), ("i_max", "max_us"), ("i_p99", "p99_us"), ("i_cv%", "cv_pct"))
_EXPECTED = "expected nccl-tests' JSON results file (all_reduce_perf ... -J FILE, nccl-tests 2.17 or later)"


def is_nccl_tests_json(text: str) -> bool:
    """Whether the start of a JSON document is nccl-tests' results file (its writer puts no spaces)."""
    head = text.lstrip("\ufeff \t\r\n")
    return head.startswith('{"version":') and '"start_time":' in head[:200] and '"args":[' in head[:400]


def parse_json(path: Path) -> tuple[list[Test], list[Test]]:
    """The test of an nccl-tests JSON results file, as :func:`~.nccl_tests_parse.parse_tests` gives
    a printed one's: ([the test], []). A file without results (a run that died after writing its
    configuration) is refused, as is anything that is not the writer's layout, naming the member."""
    text = read_text(path, "nccl-tests JSON results")
    try:
        doc = json.loads(text)
    except ValueError as err:
        ended = isinstance(err, json.JSONDecodeError) and err.pos >= len(text.rstrip()) - 1
        why = "it ends early (the run may have been killed while writing it)" if ended else err.args[0]
        raise InputFileError(path, f"is not complete JSON ({why}); {_EXPECTED}") from None
    except RecursionError:
        raise InputFileError(path, f"is JSON nested too deeply; {_EXPECTED}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise InputFileError(path, f'has no "config" object; {_EXPECTED}')
    config = doc["config"]
    results = doc.get("results")
    if not results:
        raise InputFileError(
            path,
            "holds the run's configuration but no results: the run stopped before its result table "
            "(its printed output says why)",
        )
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise InputFileError(path, f'"results" is not a list of objects; {_EXPECTED}')
    nthreads, ngpus = (_count(path, config, key) for key in ("nthreads", "ngpus"))
    devices = config.get("devices") or []
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise InputFileError(path, f'"config.devices" is not a list of objects; {_EXPECTED}')
    args = [str(a) for a in doc["args"]] if isinstance(doc.get("args"), list) else []
    binary = BINARY.search(Path(args[0]).name) if args else None
    layout = _layout(results)
    test = Test(
        first_line=1,
        binary=binary.group(1) if binary else None,
        header=" ".join(args),
        version=f"JSON results v{doc.get('version')}, NCCL {_nccl_version(doc.get('nccl_version'))}",
        nthreads=nthreads,
        ngpus=ngpus,
        processes=len(devices) or None,
        devices=[_device_line(d) for d in devices],
        columns=layout.columns,
        layout=layout,
        placements=PLACEMENTS,
        rows=[(i, _fields(path, i, result, layout)) for i, result in enumerate(results, start=1)],
        closed=True,
    )
    test.ranks = len(devices) * nthreads * ngpus if devices else None
    test.avg_busbw = _summary(path, doc, "average_bus_bandwidth", "bandwidth")
    bounds = _object(doc.get("out_of_bounds"))
    if "count" in bounds:
        count = _number_text(path, bounds["count"], "out_of_bounds.count", whole=True)
        test.out_of_bounds = f"{count} {'OK' if bounds.get('okay') in ('true', True) else 'FAILED'}"
    return [test], []


def _layout(results: list[dict]) -> Layout:
    """The printed table's columns that the results hold (per-iteration and bitwise ones if any)."""
    cpu = any("cpu_time" in _object(r.get(k)) for r in results for k in _KEYS)
    extras = ("#bitdiff",) if any("bitwise" in _object(r.get(k)) for r in results for k in _KEYS) else ()
    if any(f"{k}_per_iter" in r for r in results for k in _KEYS):
        extras += tuple(column for column, _ in _PER_ITERATION)
    return Layout(
        leading=("size", "count", "type", "redop", "root"),
        group=("time", "algbw", "busbw", "#wrong", *extras),
        n_groups=2,
        time_header="cpu_time" if cpu else "time",
    )


def _fields(path: Path, index: int, result: dict, layout: Layout) -> list[str]:
    """One result as the cells of a printed row ("" where a placement did not run)."""
    where = f"results[{index - 1}]"
    cells = [_number_text(path, result.get(key), f"{where}.{key}", whole=True) for key in ("size", "count")]
    cells += [
        str(result.get("type", "")),
        str(result.get("redop", "")),
        str(result.get("root", "-1")).strip(),
    ]
    for key in _KEYS:
        run = result.get(key)
        if run is None:
            cells += [""] * len(layout.group)
            continue
        if not isinstance(run, dict):
            raise InputFileError(path, f"{where}.{key} is {run!r}; expected an object or null")
        time_key = "cpu_time" if "cpu_time" in run else "time"
        named = {"time": time_key, "algbw": "alg_bw", "busbw": "bus_bw", "#wrong": "nwrong"}
        per_iteration = _object(result.get(f"{key}_per_iter"))
        for column in layout.group:
            if column in named:
                value = run.get(named[column])
                cells.append(
                    "N/A"
                    if value is None and column == "#wrong"
                    else _number_text(path, value, f"{where}.{key}.{named[column]}")
                )
            elif column == "#bitdiff":
                bitwise = _object(run.get("bitwise"))
                cells.append(
                    _number_text(path, bitwise.get("different_bits"), f"{where}.{key}.bitwise.different_bits")
                )
            else:
                name = dict(_PER_ITERATION)[column]
                cells.append(_number_text(path, per_iteration.get(name), f"{where}.{key}_per_iter.{name}"))
    return cells


def _number_text(path: Path, value: Any, where: str, *, whole: bool = False) -> str:
    """A JSON number as a printed cell ("nan", as the writer spells NaN, is one)."""
    if value == "nan" and not whole:
        return "nan"
    if whole and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
            raise TypeError
        return str(value) if whole else repr(float(value))
    except (TypeError, OverflowError):  # not a number, or an integer beyond a float
        expected = "a whole number" if whole else 'a number (or "nan")'
        raise InputFileError(path, f"{where} is {value!r:.80}; expected {expected}") from None


def _count(path: Path, config: dict, key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
        raise InputFileError(path, f"config.{key} is {value!r}; expected a count from 1")
    return value


def _summary(path: Path, doc: dict, key: str, member: str) -> float:
    """A summary number (``average_bus_bandwidth.bandwidth``, ``out_of_bounds.count``); NaN if absent."""
    part = doc.get(key)
    if part is None:
        return math.nan
    value = part.get(member) if isinstance(part, dict) else None
    return float(_number_text(path, value, f"{key}.{member}"))


def _device_line(device: dict) -> str:
    """A device as nccl-tests printed the line it parsed it from."""
    field = {k: str(device.get(k, "?")) for k in ("rank", "group", "pid", "hostname", "device", "device_hex")}
    return (
        f"Rank {field['rank']:>2} Group {field['group']:>2} Pid {field['pid']:>6} on {field['hostname']:>10} "
        f"device {field['device']:>2} [{field['device_hex']}] {device.get('device_info', '')}"
    ).rstrip()


def _object(value: Any) -> dict:
    """A member that should be an object, or {} (null, or the wrong type: its values are checked
    where they are read)."""
    return value if isinstance(value, dict) else {}


def _nccl_version(code: object) -> str:
    """NCCL's version code as a version: 22903 -> 2.29.3 (2.9 and later; 2708 -> 2.7.8 before)."""
    if isinstance(code, bool) or not isinstance(code, int) or code <= 0:
        return "unknown"
    major, rest = divmod(code, 10000) if code >= 20900 else divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"
