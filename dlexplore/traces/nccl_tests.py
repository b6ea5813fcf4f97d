"""nccl-tests output (``all_reduce_perf``, ``all_gather_perf`` ...) as a measured communication dataset.

nccl-tests (https://github.com/NVIDIA/nccl-tests) print, per test, a header, the devices, and one
row per message size with an out-of-place and an in-place measurement::

    # nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid 1583223 on gpu-dp-2jvzl-pqq7p device  0 [0000:29:00] NVIDIA H100 80GB HBM3
    ...
    #                                                 out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us) ...
               8             2     float     sum      -1    34.98    0.00    0.00       0    34.52 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 122.955

The columns are read from the column header line, so every version is understood: recent ones
(``size count type redop root`` then ``time algbw busbw #wrong`` twice; ``#wrong`` is a count of
wrong elements, ``N/A`` where not checked), older ones without ``root`` for all-reduce or without
``redop`` for all-gather, whose last column is ``error`` (the largest error, ``2e-07``), and the
columns options add (``cputime``, ``#bitdiff``, the per-iteration ``i_min i_max i_p99 i_cv%`` of
nccl-tests 2.19, rccl-tests' ``algo proto nchannels``: :mod:`.nccl_tests_columns`). rccl-tests
print the same tables (older ones a header with colons, ``# nThread: 1 nGpus: 1 ...``, and their
version as ``rccl-tests: Version ...``); versions before 2019 printed the header lines without the
``#``; a paste that lost the ``nThread`` header takes the threads and GPUs from the echoed command's
``-t`` and ``-g``. mscclpp-test (MSCCL++'s nccl-tests) prints the table without ``type``, in-place
first, and leaves the placement it did not run blank: each value is read under the column header it
ends under (placements wholly there or wholly blank; anything else is a row cut short).
``NCCL_DEBUG=INFO`` lines between the rows are skipped, and a test that died before its first row
is refused with the failure it reported. The JSON results file of nccl-tests 2.17+ (``-J FILE``)
reads as its printed table does (:mod:`.nccl_tests_json`).

The result of one test is an ``xarray.Dataset`` on dims ``bytes`` (the ``size`` column, bytes, as
nccl-tests counts it: the buffer of each rank for all-reduce, broadcast and reduce, the total
gathered buffer for all-gather, reduce-scatter and all-to-all, the same convention as
:func:`dlexplore.predict_comm`) and ``placement`` (``out-of-place``, ``in-place``), so that it lays
over a prediction by coordinate::

    meas = dlexplore.traces.read_nccl_tests("all_reduce.out")
    pred = dlexplore.predict_comm("allreduce", nbytes=meas.bytes.values, gpus=int(meas.gpus), ...)
    meas.busbw.sel(placement="out-of-place") / pred.busbw       # aligned on bytes

Variables: ``time`` (s; nccl-tests prints µs), ``algbw`` and ``busbw`` (GB/s, as printed, two
decimals), ``wrong`` (count) or ``error`` (largest error) for older versions; where printed,
``bitdiff`` and the per-iteration ``time_min``, ``time_max``, ``time_p99`` (s) and ``time_cv``
(%). Coordinates: ``collective`` (from the binary's name, e.g. ``all_reduce_perf`` -> ``allreduce``, or the
``collective=`` option, or the ``# Collective test concluded: ..._perf`` line after a table that
lost its binary's name), ``gpus`` (the ranks listed under "Using devices", i.e. processes x
threads x GPUs per thread: the highest ``Rank N`` + 1, for a list pasted in part; without a list,
the ranks busbw / algbw implies where the printed decimals fix them, with a warning),
``dtype``, ``redop``, ``root``, ``count`` (elements, on ``bytes``).

Where nccl-tests repeats a size (reduce-scatter and all-gather round small sizes down to 0 bytes;
runs started with ``-b 0`` repeat size 0), the default ``by="bytes"`` aggregates the repeated rows:
``time``, ``algbw`` and ``busbw`` are their means, ``wrong`` their sum, ``error`` their maximum,
and the variable ``rows`` says how many rows each size stands for (the lines are in
``attrs["aggregated_lines"]``). ``by="point"`` keeps every row (dims ``point``, ``placement``, with
``bytes`` a coordinate on ``point``). Rows of one size that are different measurements (several
data types, reduction operations or roots: ``--datatype all``, ``--op all``) are never averaged:
``by="bytes"`` refuses them, naming the line, and ``by="point"`` reads them. A test whose check
failed (``# Out of bounds values : 4 FAILED``) is read with a warning, and so is a test whose rows
end without the lines nccl-tests close a table with (a paste or a log cut short: ``avg_busbw`` NaN)
or whose ``# Avg bus bandwidth`` is not the mean busbw of its rows, as nccl-tests computes it (rows
left out of a paste).

A file may hold several tests (one run after another, or pasted from a log); :func:`read_all`
returns them all, :func:`read` the only one or the one chosen with ``collective=``, and
:func:`read_tests` all of them in one dataset (a ``test`` dimension, each test's ``avg_busbw`` and
``out_of_bounds`` lines coordinates on it). Lines that launchers prefix (``mpirun``'s
``[1,0]<stdout>:``, ``srun -l``'s ``0:``, ``pdsh``'s ``host:``, Ray's ``(head, rank=0, pid=3808)``,
up to three of them) and NCCL's own log
lines (``host:pid:tid [0] NCCL INFO``) are understood; any other line inside a table that is not a
row is skipped and listed in ``attrs["skipped_lines"]``. Rows whose ``redop`` (or ``root``) is
blank, as all-to-all prints them, read with an empty value. A row that cannot be read is an
:class:`~dlexplore.errors.InputFileError` naming the file, the line and the expected columns. A
file that does not name its binary (``all_reduce_perf`` ...) takes the collective from its file
name when that names one (``nccl_allreduce.log``), with a warning.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError, InputFileError
from .detect import head_text
from .nccl_tests_dataset import coordinates, variables
from .nccl_tests_json import is_nccl_tests_json, parse_json
from .nccl_tests_parse import (
    COLLECTIVE_OF_BINARY,
    PLACEMENTS,
    Test,
    canonical_collective,
    collective_of,
    died_before_table,
    parse_tests,
)
from .nccl_tests_rows import (
    aggregate_repeats,
    ranks_listed,
    ranks_unlisted,
    refuse_mixed_rows,
    row_values,
    select_rows,
)
from .schema import normalize_collective_name

__all__ = ["read", "read_all", "read_tests", "COLLECTIVE_OF_BINARY", "PLACEMENTS"]


def read(
    path: str | os.PathLike,
    *,
    collective: str | None = None,
    gpus: int | None = None,
    by: str = "bytes",
    dtype: str | None = None,
    redop: str | None = None,
    root: int | None = None,
) -> xr.Dataset:
    """One nccl-tests result of the file at ``path`` as a measured dataset (see the module docs).

    ``collective`` picks the test when the file holds several (``"allreduce"``, ``"allgather"``
    ...), and names the collective when the file does not (no binary name in it). ``gpus``
    overrides the number of ranks when the device list is missing. ``by`` is ``"bytes"`` (dims
    ``bytes``, ``placement``) or ``"point"`` (dims ``point``, ``placement``). ``dtype``, ``redop``
    and ``root`` keep the rows of that data type (as nccl-tests prints it: ``"float"``,
    ``"bfloat16"``), reduction operation and root only: one measurement per size of a run with
    ``--datatype all`` or ``--op all``, which ``by="bytes"`` refuses to average otherwise.
    """
    path = Path(path)
    choice = {"dtype": dtype, "redop": redop, "root": root}
    tests, died = _parse_tests(path)
    if collective is not None:
        wanted = canonical_collective(collective)
        chosen = [t for t in tests if collective_of(t) in (wanted, None)]
        dead = [t for t in died if collective_of(t) == wanted]
        if not chosen and dead:
            raise InputFileError(path, died_before_table(dead[0]), line=dead[0].failure_line)
        if not chosen:
            found = ", ".join(f"{collective_of(t)} (line {t.first_line})" for t in tests)
            raise InputFileError(path, f"holds no {wanted} test; it holds {found}")
        if len(chosen) > 1:
            where = ", ".join(str(t.first_line) for t in chosen)
            raise InputFileError(
                path,
                f"holds {len(chosen)} {wanted} tests (starting on lines {where}); "
                "use read_all() and pick one",
            )
        return _dataset(path, chosen[0], collective=wanted, gpus=gpus, by=by, choice=choice)
    if len(tests) > 1:
        found = ", ".join(f"{collective_of(t) or 'unknown'} (line {t.first_line})" for t in tests)
        raise InputFileError(
            path,
            f"holds {len(tests)} nccl-tests results: {found}; pass collective=... "
            "to pick one, or use read_all()",
        )
    return _dataset(path, tests[0], collective=None, gpus=gpus, by=by, choice=choice)


def read_all(
    path: str | os.PathLike, *, gpus: int | None = None, by: str = "bytes", **choice: Any
) -> list[xr.Dataset]:
    """Every nccl-tests result in the file at ``path``, in file order (see :func:`read`; ``choice``:
    its ``dtype``, ``redop``, ``root``)."""
    path = Path(path)
    choice = _choice(choice)
    return [
        _dataset(path, test, collective=None, gpus=gpus, by=by, choice=choice)
        for test in _parse_tests(path)[0]
    ]


def _parse_tests(path: Path) -> tuple[list[Test], list[Test]]:
    """The tests of printed output or of a JSON results file (nccl-tests -J), and those that died."""
    if path.is_file() and is_nccl_tests_json(head_text(path)):
        return parse_json(path)
    return parse_tests(path)


def _choice(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - {"dtype", "redop", "root"})
    if unknown:
        raise TypeError(f"unexpected keyword arguments {unknown}; expected dtype, redop or root")
    return {k: options.get(k) for k in ("dtype", "redop", "root")}


def read_tests(
    path: str | os.PathLike, *, gpus: int | None = None, by: str = "bytes", **choice: Any
) -> xr.Dataset:
    """Every nccl-tests result in the file at ``path`` as one dataset: :func:`read_all`'s results
    along a ``test`` dimension (0, 1, ... in file order), with ``collective`` and ``gpus`` (and
    ``dtype``, ``redop``, ``root``) as coordinates on ``test``; sizes a test lacks are NaN. A file
    with one test gives that test's dataset, without the ``test`` dimension."""
    tests = read_all(path, gpus=gpus, by=by, **choice)
    if len(tests) == 1:
        return tests[0]
    names = set().union(*(t.data_vars for t in tests))
    filled = []
    for test in tests:  # old and new formats differ in their check column: give each the other's
        missing = {
            n: xr.full_like(test["time"], np.nan).assign_attrs(tests[0].get(n, test["time"]).attrs)
            for n in names - set(test.data_vars)
        }
        filled.append(test.assign(missing))
    ds = xr.concat(
        filled, dim="test", join="outer", coords="different", compat="equals", combine_attrs="drop_conflicts"
    )
    ds = ds.assign_coords(
        test=("test", np.arange(len(tests)), {"long_name": "result in the file"}),
        # each test's summary lines (the attributes of one test's dataset)
        avg_busbw=(
            "test",
            [t.attrs["avg_busbw"] for t in tests],
            {"units": "GB/s", "long_name": "the test's '# Avg bus bandwidth' line"},
        ),
        out_of_bounds=(
            "test",
            [t.attrs["out_of_bounds"] for t in tests],
            {"long_name": "the test's '# Out of bounds values' line"},
        ),
    )
    first_lines = ", ".join(str(t.attrs.get("first_line")) for t in tests)
    kinds = ", ".join(str(t.collective.item()) for t in tests)
    ds.attrs.update(title=f"{len(tests)} nccl-tests results: {kinds}", first_line=first_lines)
    return ds


# --- parsing -----------------------------------------------------------------------------------


# --- building the dataset ----------------------------------------------------------------------


def _dataset(
    path: Path, test: Test, *, collective: str | None, gpus: int | None, by: str, choice: dict[str, Any]
) -> xr.Dataset:
    if by not in ("bytes", "point"):
        raise DlexploreError(f"by must be 'bytes' or 'point', got {by!r}")
    found = collective_of(test)
    if collective is not None and found is not None and collective != found:
        raise InputFileError(path, f"the test on line {test.first_line} is {found}, not {collective}")
    name = collective or found
    if name is None:
        named = normalize_collective_name(path.stem)
        if named in COLLECTIVE_OF_BINARY.values():
            warnings.warn(
                f"{path}: no nccl-tests binary name (e.g. all_reduce_perf) before line "
                f"{test.first_line}; the collective {named!r} is taken from the file name",
                stacklevel=3,
            )
            name = named
        else:
            warnings.warn(
                f"{path}: no nccl-tests binary name (e.g. all_reduce_perf) before line {test.first_line}; "
                "the collective is 'unknown' (pass collective=...)",
                stacklevel=3,
            )
            name = "unknown"
    sizes, counts, extra, values, check = row_values(path, test)
    _say_rows_left_out(path, test, values["busbw"])
    if gpus is not None:
        ranks = gpus
    elif test.ranks is not None:
        ranks = test.ranks
    elif test.devices:
        ranks = ranks_listed(path, test, name, values)
    else:
        ranks = ranks_unlisted(path, test, name, values)

    dim = "bytes" if by == "bytes" else "point"
    lines = [line for line, _ in test.rows]
    if any(v is not None for v in choice.values()):
        keep = select_rows(path, choice, extra)
        sizes, counts, lines = (
            [x for x, k in zip(v, keep, strict=True) if k] for v in (sizes, counts, lines)
        )
        extra = {k: [x for x, kept in zip(v, keep, strict=True) if kept] for k, v in extra.items()}
        values = {k: v[keep] for k, v in values.items()}
    size_array = np.asarray(sizes, dtype=np.int64)
    rows = np.ones(len(size_array), dtype=np.int64)
    aggregated = ""
    if by == "bytes" and len(np.unique(size_array)) < len(size_array):
        refuse_mixed_rows(path, lines, size_array, extra)
        size_array, rows, values, counts, extra, aggregated = aggregate_repeats(
            size_array, values, counts, extra, lines, check
        )
    data_vars = variables(values, check, dim, rows if by == "bytes" else None, test.layout.time_header)
    coords = coordinates(test, name, ranks, dim, size_array, counts, extra)
    ds = xr.Dataset(data_vars, coords=coords)
    _say_failed_check(path, test, check)
    shown = test.binary + "_perf" if test.binary else name
    ds.attrs.update(
        source=f"measured: nccl-tests output {path}",
        kind="measured",
        title=f"nccl-tests {shown} on {int(ranks)} GPUs",
        file=str(path),
        first_line=test.first_line,
        command=test.header,
        nccl_tests_version=test.version,
        devices="\n".join(test.devices),
        nthreads=test.nthreads if test.nthreads is not None else -1,
        ngpus_per_thread=test.ngpus if test.ngpus is not None else -1,
        avg_busbw=test.avg_busbw if test.avg_busbw is not None else math.nan,
        avg_busbw_units="GB/s",
        out_of_bounds=test.out_of_bounds,
        skipped_lines=", ".join(str(n) for n in test.skipped),
        aggregated_lines=aggregated,
    )
    return ds


def _say_rows_left_out(path: Path, test: Test, busbw: np.ndarray) -> None:
    """nccl-tests' '# Avg bus bandwidth' is the mean busbw of every row and placement it printed
    (within 0.05% on 50 complete real outputs): far from the rows' mean, rows were left out."""
    avg, measured = test.avg_busbw, busbw[np.isfinite(busbw)]
    if avg is None or not math.isfinite(avg) or not len(measured):
        return
    mean = float(measured.mean())
    if abs(mean - avg) > 0.05 + 0.01 * abs(avg):  # printed to 1-2 decimals: 0.05 GB/s at most off
        warnings.warn(
            f"{path}: the '# Avg bus bandwidth' of the test on line {test.first_line} ({avg:g} GB/s) "
            f"is not the mean busbw of its {len(measured)} values ({mean:.4g} GB/s), as nccl-tests "
            "computes it: rows were left out of this output (a trimmed paste?); the rows there are read",
            stacklevel=4,
        )


def _say_failed_check(path: Path, test: Test, check: str) -> None:
    if "FAILED" in test.out_of_bounds.upper():
        warnings.warn(
            f"{path}: nccl-tests' check of the test on line {test.first_line} failed ('Out of bounds "
            f"values : {test.out_of_bounds}'): the collective computed wrong values (variable "
            f"{'wrong' if check == '#wrong' else 'error'!r} says at which sizes), so its times may "
            "not be those of a working run",
            stacklevel=4,
        )
