"""Darshan I/O characterisation logs: per-file, per-rank POSIX counters and a job summary.

:func:`read_darshan` reads a binary ``.darshan`` log through PyDarshan (the optional PyPI package
``darshan``: ``pip install darshan``, or ``pip install dlexplore[darshan]``).
:func:`read_darshan_parser_text` reads the text that ``darshan-parser LOG`` prints, without any
dependency. Both return a :class:`DarshanLog`.

Counters kept (Darshan's POSIX module, darshan-posix-log-format.h): ``POSIX_OPENS``,
``POSIX_READS``, ``POSIX_WRITES``, ``POSIX_BYTES_READ``, ``POSIX_BYTES_WRITTEN`` and the float
counters ``POSIX_F_READ_TIME``, ``POSIX_F_WRITE_TIME``, ``POSIX_F_META_TIME`` (seconds, summed
over ranks in a shared record, whose rank is -1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError, InputFileError

__all__ = ["DarshanLog", "read_darshan", "read_darshan_parser_text", "COUNTERS"]

#: Darshan counter -> (column of :attr:`DarshanLog.records`, units).
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

COUNTERS: dict[str, tuple[str, str]] = {
    "POSIX_OPENS": ("opens", "count"),
    "POSIX_READS": ("reads", "count"),
    "POSIX_WRITES": ("writes", "count"),
    "POSIX_BYTES_READ": ("bytes_read", "bytes"),
    "POSIX_BYTES_WRITTEN": ("bytes_written", "bytes"),
    "POSIX_F_READ_TIME": ("read_time", "s"),
    "POSIX_F_WRITE_TIME": ("write_time", "s"),
    "POSIX_F_META_TIME": ("meta_time", "s"),
}
_COLUMNS = ["rank", "record_id", "file", *[c for c, _ in COUNTERS.values()]]


@dataclass
class DarshanLog:
    """A Darshan log: ``records`` (one row per file and rank, rank -1 = shared by all ranks;
    columns rank, record_id, file, opens, reads, writes, bytes_read [bytes], bytes_written [bytes],
    read_time [s], write_time [s], meta_time [s]), ``summary`` (an xr.Dataset of job totals with
    units) and ``meta`` (job header: nprocs, run_time [s], jobid, ...)."""

    records: pd.DataFrame
    summary: xr.Dataset
    meta: dict = field(default_factory=dict)


def _summary(records: pd.DataFrame, meta: dict, path) -> xr.Dataset:
    tot = {c: float(records[c].sum()) for c, _ in COUNTERS.values()}
    io_time = tot["read_time"] + tot["meta_time"]
    run = float(meta.get("run_time", np.nan))
    data = {
        **{c: xr.DataArray(tot[c], attrs={"units": u}) for c, u in COUNTERS.values()},
        "files": xr.DataArray(float(records["file"].nunique()), attrs={"units": "count"}),
        # bytes per rank-second spent in read(): the bandwidth one reader saw while reading
        "read_bandwidth_reader": xr.DataArray(
            tot["bytes_read"] / tot["read_time"] / 1e9 if tot["read_time"] > 0 else np.nan,
            attrs={"units": "GB/s", "long_name": "bytes read / cumulative read time (per reader)"},
        ),
        "read_bandwidth_job": xr.DataArray(
            tot["bytes_read"] / run / 1e9 if run > 0 else np.nan,
            attrs={"units": "GB/s", "long_name": "bytes read / job run time"},
        ),
        "meta_fraction": xr.DataArray(
            tot["meta_time"] / io_time if io_time > 0 else np.nan,
            attrs={"units": "1", "long_name": "share of metadata time in read + metadata time"},
        ),
    }
    ds = xr.Dataset(data)
    ds.attrs.update(
        source=f"measured: Darshan log {os.fspath(path)}",
        kind="measured",
        **{k: v for k, v in meta.items() if isinstance(v, (int, float, str))},
    )
    return ds


def read_darshan(path: str | os.PathLike) -> DarshanLog:
    """Read a binary Darshan log (``.darshan``) with PyDarshan; POSIX module records only."""
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
    if "POSIX" not in report.records:
        raise InputFileError(path, f"no POSIX module records (modules: {', '.join(report.modules)})")
    frames = report.records["POSIX"].to_df()
    c, f = frames["counters"], frames["fcounters"]
    names = report.name_records
    rec = pd.DataFrame(
        {
            "rank": c["rank"].astype("int64").to_numpy(),
            "record_id": c["id"].astype("uint64").to_numpy(),
            "file": [names.get(i, str(i)) for i in c["id"].tolist()],
        }
    )
    for counter, (col, _) in COUNTERS.items():
        src = f if counter.startswith("POSIX_F_") else c
        rec[col] = src[counter].to_numpy(dtype=float if src is f else "int64")
    job = report.metadata["job"]
    meta = {
        "nprocs": int(job["nprocs"]),
        "run_time": float(job["run_time"]),
        "jobid": int(job["jobid"]),
        "log_version": str(job.get("log_ver", "")),
    }
    return DarshanLog(rec, _summary(rec, meta, path), meta)


def read_darshan_parser_text(path: str | os.PathLike) -> DarshanLog:
    """Read the text printed by ``darshan-parser LOG`` (darshan-util 3.x): ``# key: value`` header
    lines and tab-separated records ``<module> <rank> <record id> <counter> <value> <file name>
    <mount pt> <fs type>``. POSIX records only; other modules are skipped."""
    try:
        with open(path, encoding="utf-8", errors="strict") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(path, f"cannot read darshan-parser text: {err}") from err
    meta: dict = {}
    rows: dict[tuple[int, int], dict] = {}
    seen_posix = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            key = key.strip()
            if sep and key in ("nprocs", "jobid", "run time"):
                try:
                    meta[key.replace(" ", "_")] = float(value.split()[0])
                except (ValueError, IndexError) as err:
                    raise InputFileError(path, f"expected a number after '# {key}:'", line=number) from err
            continue
        cells = line.split("\t")
        if len(cells) < 5:
            raise InputFileError(
                path,
                "expected a tab-separated record '<module> <rank> <record id> "
                f"<counter> <value> <file name> <mount pt> <fs type>', got {line[:80]!r}",
                line=number,
            )
        if cells[0] != "POSIX":
            continue
        seen_posix = True
        try:
            rank, rid, value = int(cells[1]), int(cells[2]), float(cells[4])
        except ValueError as err:
            raise InputFileError(
                path, f"expected integer rank and record id and a numeric value: {err}", line=number
            ) from err
        if cells[3] in COUNTERS and not cells[3].startswith("POSIX_F_"):
            # Integer counters are stored as int64; checked here, on the exact text, because a float
            # beyond 2**63 would wrap silently when the column is cast.
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
            value = exact
        row = rows.setdefault(
            (rank, rid), {"rank": rank, "record_id": rid, "file": cells[5] if len(cells) > 5 else str(rid)}
        )
        if cells[3] in COUNTERS:
            row[COUNTERS[cells[3]][0]] = value
    if not seen_posix:
        raise InputFileError(path, "no POSIX records (is this darshan-parser output?)")
    rec = (
        pd.DataFrame(list(rows.values()))
        .reindex(columns=_COLUMNS)
        .fillna({c: 0.0 for c, _ in COUNTERS.values()})
    )
    try:
        rec["record_id"] = rec["record_id"].astype("uint64")
        for counter, (col, _) in COUNTERS.items():
            if not counter.startswith("POSIX_F_"):
                rec[col] = rec[col].astype("int64")
        meta = {k: (int(v) if k in ("nprocs", "jobid") else v) for k, v in meta.items()}
    except (OverflowError, ValueError) as err:  # a counter or id beyond 64 bits, or nan/inf
        raise InputFileError(path, f"a record id or counter does not fit 64-bit integers ({err})") from None
    return DarshanLog(rec, _summary(rec, meta, path), meta)
