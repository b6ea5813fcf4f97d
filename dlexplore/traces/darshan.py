"""Darshan I/O characterisation logs: per-file, per-rank POSIX and STDIO counters and a job summary.

:func:`read_darshan` reads a binary ``.darshan`` log through PyDarshan (the optional PyPI package
``darshan``: ``pip install darshan``, or ``pip install dlexplore[darshan]``).
:func:`read_darshan_parser_text` reads the text that ``darshan-parser LOG`` prints, without any
dependency. Both return a :class:`DarshanLog`.

Counters kept, per module (darshan-posix-log-format.h, darshan-stdio-log-format.h): ``<M>_OPENS``,
``<M>_READS``, ``<M>_WRITES``, ``<M>_BYTES_READ``, ``<M>_BYTES_WRITTEN`` and the float counters
``<M>_F_READ_TIME``, ``<M>_F_WRITE_TIME``, ``<M>_F_META_TIME`` (seconds, summed over ranks in a
shared record, whose rank is -1), for M = POSIX and STDIO.

**Which modules the job totals count.** POSIX (open/read/write) and STDIO (fopen/fread/fwrite) are
disjoint: Darshan does not see the system calls the C library makes under fread, so a byte read with
fread is in STDIO only. Darshan's own job summary lists them as separate modules; the totals here
(``bytes_read``, ``read_time`` ...) add the two, and ``posix_*`` / ``stdio_*`` keep each module's
share (``attrs["modules"]`` names the modules counted). MPI-IO, HDF5 and PnetCDF sit on top of POSIX
(their bytes are POSIX's again), so they are not added. A module outside these that moved bytes is
left out with a warning naming it and its bytes.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError, InputFileError

__all__ = ["DarshanLog", "read_darshan", "read_darshan_parser_text", "COUNTERS", "MODULES"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: The modules whose records are kept and added into the job totals (module docstring).
MODULES = ("POSIX", "STDIO")
#: Modules layered over POSIX (their bytes are POSIX's again) or holding no byte counts of their own.
_LAYERED = ("MPI-IO", "H5F", "H5D", "PNETCDF_FILE", "PNETCDF_VAR", "LUSTRE", "HEATMAP", "APMPI", "APXC")

#: Counter suffix -> (column of :attr:`DarshanLog.records`, units); the counter is ``<module>_<suffix>``.
_SUFFIXES: dict[str, tuple[str, str]] = {
    "OPENS": ("opens", "count"),
    "READS": ("reads", "count"),
    "WRITES": ("writes", "count"),
    "BYTES_READ": ("bytes_read", "bytes"),
    "BYTES_WRITTEN": ("bytes_written", "bytes"),
    "F_READ_TIME": ("read_time", "s"),
    "F_WRITE_TIME": ("write_time", "s"),
    "F_META_TIME": ("meta_time", "s"),
}
#: Darshan counter -> (column of :attr:`DarshanLog.records`, units), for every module kept.
COUNTERS: dict[str, tuple[str, str]] = {f"{m}_{s}": v for m in MODULES for s, v in _SUFFIXES.items()}
_COLUMNS = ["module", "rank", "record_id", "file", *[c for c, _ in _SUFFIXES.values()]]
#: The per-module share each kept module gets in the summary (``posix_bytes_read`` ...).
_PER_MODULE = ("bytes_read", "bytes_written", "read_time", "write_time", "meta_time")
#: Units of the job facts kept as attributes (``attrs["attr_units"]``, a JSON object).
_ATTR_UNITS = {"nprocs": "count", "run_time": "s", "jobid": "1", "log_version": ""}


@dataclass
class DarshanLog:
    """A Darshan log: ``records`` (one row per module, file and rank, rank -1 = shared by all ranks;
    columns module (POSIX or STDIO), rank, record_id, file, opens, reads, writes, bytes_read [bytes],
    bytes_written [bytes], read_time [s], write_time [s], meta_time [s]), ``summary`` (an xr.Dataset
    of job totals with units) and ``meta`` (job header: nprocs, run_time [s], jobid, ...)."""

    records: pd.DataFrame
    summary: xr.Dataset
    meta: dict = field(default_factory=dict)


def _summary(records: pd.DataFrame, meta: dict, path) -> xr.Dataset:
    """Job totals over the kept modules, each module's share, bandwidths and the metadata share."""
    tot = {c: float(records[c].sum()) for c, _ in _SUFFIXES.values()}
    units = dict(_SUFFIXES.values())
    present = [m for m in MODULES if (records["module"] == m).any()]
    counted = " + ".join(present)
    run = float(meta.get("run_time", np.nan))
    data = {
        c: xr.DataArray(tot[c], attrs={"units": u, "long_name": f"{c.replace('_', ' ')}, {counted}"})
        for c, u in _SUFFIXES.values()
    }
    for module in present:
        mine = records[records["module"] == module]
        for c in _PER_MODULE:
            data[f"{module.lower()}_{c}"] = xr.DataArray(
                float(mine[c].sum()),
                attrs={"units": units[c], "long_name": f"{c.replace('_', ' ')}, {module}"},
            )
    io_time = tot["read_time"] + tot["write_time"] + tot["meta_time"]
    data.update(
        files=xr.DataArray(float(records["file"].nunique()), attrs={"units": "count"}),
        # bytes per rank-second spent in read(): the bandwidth one reader saw while reading
        read_bandwidth_reader=xr.DataArray(
            # the bytes of records whose read time was recorded (_without_negatives)
            float(records.loc[records["read_time"].notna(), "bytes_read"].sum()) / tot["read_time"] / 1e9
            if tot["read_time"] > 0
            else np.nan,
            attrs={
                "units": "GB/s",
                "long_name": f"bytes read / cumulative read time (per reader), {counted}",
            },
        ),
        read_bandwidth_job=xr.DataArray(
            tot["bytes_read"] / run / 1e9 if run > 0 else np.nan,
            attrs={"units": "GB/s", "long_name": f"bytes read / job run time, {counted}"},
        ),
        meta_fraction=xr.DataArray(
            tot["meta_time"] / io_time if io_time > 0 else np.nan,
            attrs={"units": "1", "long_name": f"metadata time / (read + write + metadata time), {counted}"},
        ),
    )
    ds = xr.Dataset(data)
    ds.attrs.update(
        source=f"measured: Darshan log {os.fspath(path)}",
        kind="measured",
        modules=", ".join(present),
        attr_units=json.dumps({k: u for k, u in _ATTR_UNITS.items() if k in meta}),
        **{k: v for k, v in meta.items() if isinstance(v, (int, float, str))},
    )
    return ds


def _without_negatives(records: pd.DataFrame, path) -> pd.DataFrame:
    """The records with negative counts, bytes and times as NaN (not recorded), and a warning
    naming them: Darshan writes -1 where it did not count, and some versions wrote negative
    times (a real 3.10 log's <STDERR> write time is -2662.7 s), which would be subtracted from
    the job's totals."""
    columns = [c for c, _ in _SUFFIXES.values()]
    negative = records[columns].lt(0)
    if not negative.any().any():
        return records
    shown = []
    for row, column in zip(*np.nonzero(negative.to_numpy()), strict=True):
        record = records.iloc[row]
        shown.append(
            f"{record['module']} {columns[column]} of {record['file']} (rank {record['rank']}): "
            f"{records[columns[column]].iloc[row]:g}"
        )
    warnings.warn(
        f"{os.fspath(path)}: {len(shown)} negative counter(s) read as not recorded and left out of the "
        "totals: " + "; ".join(shown[:3]) + (" ..." if len(shown) > 3 else ""),
        UserWarning,
        stacklevel=3,
    )
    return records.assign(**{c: records[c].where(~negative[c]) for c in columns})


def _warn_left_out(path, moved: dict[str, float]) -> None:
    """Warn once per module outside :data:`MODULES` and :data:`_LAYERED` that moved bytes."""
    for module, nbytes in moved.items():
        if nbytes > 0 and module not in MODULES and module not in _LAYERED and not module.startswith("DXT"):
            warnings.warn(
                f"{os.fspath(path)}: Darshan module {module} moved {nbytes:.0f} bytes that the totals leave "
                f"out (they count {', '.join(MODULES)})",
                UserWarning,
                stacklevel=3,
            )


def read_darshan(path: str | os.PathLike) -> DarshanLog:
    """Read a binary Darshan log (``.darshan``) with PyDarshan: the POSIX and STDIO modules' records
    (module docstring), with the job header (nprocs, run_time [s], jobid, log_version)."""
    try:
        import darshan
    except ImportError as err:
        raise DlexploreError(
            "reading Darshan logs needs PyDarshan: pip install darshan "
            "(or read darshan-parser's text with read_darshan_parser_text)"
        ) from err
    if not os.path.isfile(path):
        raise InputFileError(path, "no such file (expected a Darshan .darshan log)")
    try:
        report = darshan.DarshanReport(os.fspath(path), read_all=True)
    except Exception as err:  # PyDarshan raises RuntimeError/ValueError/OSError on bad logs
        raise InputFileError(path, f"not a readable Darshan log: {err}") from err
    kept = [m for m in MODULES if m in report.records]
    if not kept:
        raise InputFileError(path, f"no POSIX or STDIO module records (modules: {', '.join(report.modules)})")
    names = report.name_records
    frames, moved = [], {}
    for module in report.records:
        if module not in kept and module not in _LAYERED and not module.startswith("DXT"):
            try:
                counters = report.records[module].to_df()["counters"]
                moved[module] = float(
                    counters.filter(regex="_BYTES_(READ|WRITTEN)$").clip(lower=0).sum().sum()
                )
            except Exception:  # a module PyDarshan cannot tabulate moved no bytes we could count
                moved[module] = 0.0
    for module in kept:
        parts = report.records[module].to_df()
        c, f = parts["counters"], parts["fcounters"]
        rec = pd.DataFrame(
            {
                "module": module,
                "rank": c["rank"].astype("int64").to_numpy(),
                "record_id": c["id"].astype("uint64").to_numpy(),
                "file": [names.get(i, str(i)) for i in c["id"].tolist()],
            }
        )
        for suffix, (col, _) in _SUFFIXES.items():
            counter = f"{module}_{suffix}"
            src = f if suffix.startswith("F_") else c
            rec[col] = src[counter].to_numpy(dtype=float if src is f else "int64")
        frames.append(rec)
    _warn_left_out(path, moved)
    rec = pd.concat(frames, ignore_index=True)[_COLUMNS]
    job = report.metadata["job"]
    meta = {
        "nprocs": int(job["nprocs"]),
        "run_time": float(job["run_time"]),
        "jobid": int(job["jobid"]),
        "log_version": str(job.get("log_ver", "")),
    }
    rec = _without_negatives(rec, path)
    return DarshanLog(rec, _summary(rec, meta, path), meta)


def _header(path, meta: dict, line: str, number: int) -> None:
    """A ``# key: value`` line: the job facts kept (nprocs, jobid, run time [s])."""
    key, sep, value = line[1:].partition(":")
    key = key.strip()
    if sep and key in ("nprocs", "jobid", "run time"):
        try:
            meta[key.replace(" ", "_")] = float(value.split()[0])
        except (ValueError, IndexError) as err:
            raise InputFileError(path, f"expected a number after '# {key}:'", line=number) from err


def _value(path, cells: list[str], number: int) -> float | int:
    """The record's counter value: int64 for integer counters, checked on the exact text, because a
    float beyond 2**63 would wrap silently when the column is cast."""
    value = float(cells[4])
    if "_F_" in cells[3] or cells[3] not in COUNTERS:
        return value
    try:
        exact = int(cells[4])
    except ValueError:
        exact = value if value.is_integer() else None
    if exact is None or not _INT64_MIN <= exact <= _INT64_MAX:
        raise InputFileError(
            path,
            f"counter {cells[3]} = {cells[4][:40]!r}; expected an integer that fits 64 bits",
            line=number,
        )
    return exact


def read_darshan_parser_text(path: str | os.PathLike) -> DarshanLog:
    """Read the text printed by ``darshan-parser LOG`` (darshan-util 3.x): ``# key: value`` header
    lines and tab-separated records ``<module> <rank> <record id> <counter> <value> <file name>
    <mount pt> <fs type>``. POSIX and STDIO records are kept (module docstring); a module that is
    neither, nor layered over POSIX, and moved bytes is left out with a warning."""
    try:
        with open(path, encoding="utf-8", errors="strict") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(path, f"cannot read darshan-parser text: {err}") from err
    meta: dict = {}
    rows: dict[tuple[str, int, int], dict] = {}
    moved: dict[str, float] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.startswith("#"):
            _header(path, meta, line, number)
            continue
        cells = line.split("\t")
        if len(cells) < 5:
            raise InputFileError(
                path,
                "expected a tab-separated record '<module> <rank> <record id> "
                f"<counter> <value> <file name> <mount pt> <fs type>', got {line[:80]!r}",
                line=number,
            )
        module = cells[0]
        if module not in MODULES:
            if cells[3].endswith(("_BYTES_READ", "_BYTES_WRITTEN")):
                try:
                    nbytes = max(float(cells[4]), 0.0)  # -1: Darshan could not count it
                except ValueError:
                    nbytes = 0.0
                moved[module] = moved.get(module, 0.0) + nbytes
            continue
        try:
            rank, rid = int(cells[1]), int(cells[2])
            value = _value(path, cells, number)
        except ValueError as err:
            raise InputFileError(
                path, f"expected integer rank and record id and a numeric value: {err}", line=number
            ) from err
        row = rows.setdefault(
            (module, rank, rid),
            {
                "module": module,
                "rank": rank,
                "record_id": rid,
                "file": cells[5] if len(cells) > 5 else str(rid),
            },
        )
        if cells[3] in COUNTERS:
            row[COUNTERS[cells[3]][0]] = value
    if not rows:
        raise InputFileError(path, "no POSIX or STDIO records (is this darshan-parser output?)")
    _warn_left_out(path, moved)
    return _finish_text(path, rows, meta)


def _finish_text(path, rows: dict, meta: dict) -> DarshanLog:
    """The records table, with 64-bit integer columns, and the summary."""
    columns = [c for c, _ in _SUFFIXES.values()]
    rec = pd.DataFrame(list(rows.values())).reindex(columns=_COLUMNS).fillna({c: 0.0 for c in columns})
    try:
        rec["record_id"] = rec["record_id"].astype("uint64")
        for suffix, (col, _) in _SUFFIXES.items():
            if not suffix.startswith("F_"):
                rec[col] = rec[col].astype("int64")
        meta = {k: (int(v) if k in ("nprocs", "jobid") else v) for k, v in meta.items()}
    except (OverflowError, ValueError) as err:  # a counter or id beyond 64 bits, or nan/inf
        raise InputFileError(path, f"a record id or counter does not fit 64-bit integers ({err})") from None
    rec = _without_negatives(rec, path)
    return DarshanLog(rec, _summary(rec, meta, path), meta)
