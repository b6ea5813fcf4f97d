"""NCCL debug logs (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=COLL``) as a table of collectives.

    ops = dlexplore.traces.read_nccl_log("nccl.log")       # one row per logged operation
    dlexplore.traces.nccl_log_table(ops)                    # one row per collective, size, group

**Lines read.** With the ``COLL`` subsystem NCCL (and RCCL) logs every collective it is handed::

    host:pid:tid [dev] NCCL INFO AllReduce: opCount 28c sendbuff 0x.. recvbuff 0x.. count 9984512
        datatype 7 op 0 root 0 comm 0x55bef0201370 [nranks=4] stream 0x.. [task 0 globalrank 2]

``opCount`` is hexadecimal (NCCL prints it with ``%lx``); ``[dev]`` is the CUDA device, not the
rank; RCCL may put a timestamp before ``NCCL INFO``, an ``acc <ptr>`` after ``recvbuff`` (RCCL 7)
and append ``task``/``globalrank``. The rank is
the ``globalrank`` when logged, else the rank of the communicator's initialisation line of the same
process (``ncclCommInitRank comm 0x.. rank R nranks N``, also ``ncclCommInitRankConfig``,
``ncclCommSplit`` ..., and in NCCL <= 2.18 ``comm 0x.. rank R nranks N .. - Init COMPLETE``), else
unknown (<NA>); a line cut inside ``task N globalrank N`` takes that fallback too, with a warning
(a wrap before the digits is rejoined). With ``TUNING`` NCCL also logs
its choice, ``[Coll: ]<bytes> Bytes -> Algo <a> proto <p> [time <us>|channel...]`` (numbers in
NCCL 2.2x, names in later versions; ``include/nccl_common.h`` orders the algorithms TREE, RING,
COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT and the protocols LL, LL128, SIMPLE): those
lines become :func:`read_nccl_log`'s ``attrs["tuning"]`` table, and a choice is attached to the
operation logged just before it by the same thread with the same size (NCCL 2.19 and later log one
rank's part of an allgather or reduce_scatter: that size too).

Interleaved output of several processes (one line holding two prefixes) is read from the last
prefix; an operation line whose prefix was lost keeps its fields with host, pid and device unknown.

**Bytes**, in the convention of nccl-tests and :mod:`dlexplore.traces.collectives`: ``count x
size(datatype)`` for allreduce, broadcast, reduce, send and recv; ``x nranks`` for allgather (count
is what each rank sends) and reduce_scatter (count is what each rank receives).

Kept whole: the line forms, the repairs of wrapped and cut lines and the warnings that name the
lines not read share the same patterns and line numbers; the table of collectives is their one view.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from .._io import read_text
from ..errors import DlexploreError, InputFileError
from .schema import normalize_collective_name

__all__ = [
    "read_nccl_log",
    "nccl_log_table",
    "is_nccl_log",
    "log_files",
    "DATATYPES",
    "ALGORITHMS",
    "PROTOCOLS",
]

#: ncclDataType_t -> (name, bytes), in the order of nccl.h (fp8 types from NCCL 2.24).
DATATYPES = {
    0: ("int8", 1),
    1: ("uint8", 1),
    2: ("int32", 4),
    3: ("uint32", 4),
    4: ("int64", 8),
    5: ("uint64", 8),
    6: ("float16", 2),
    7: ("float32", 4),
    8: ("float64", 8),
    9: ("bfloat16", 2),
    10: ("float8e4m3", 1),
    11: ("float8e5m2", 1),
}
#: ncclRedOp_t
REDUCE_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
#: include/nccl_common.h's NCCL_ALGO_* and NCCL_PROTO_* order.
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")

# "NCCL INFO [2] AllReduce: ..." in some builds (NVIDIA/nccl#1352): the bracketed number is skipped
_PREFIX = (
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\d+ )?NCCL INFO (?:\[\d+\] )?)"
)
_OP = re.compile(
    _PREFIX + r"?(?P<coll>[A-Za-z]+): opCount (?P<op>[0-9a-fA-F]+) sendbuff (?P<send>\S+) "
    r"recvbuff (?P<recv>\S+) (?:acc \S+ )?count (?P<count>\d+) datatype (?P<dt>\d+) op (?P<redop>\d+) "
    r"root (?P<root>\d+) comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\] stream (?P<stream>\S+)"
    r"(?: task (?P<task>\d+) globalrank (?P<grank>\d+))?"
)
_TUNING = re.compile(
    _PREFIX + r"(?:(?P<coll>[A-Za-z]+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) "
    r"proto (?P<proto>\w+)(?: time (?P<time>[0-9.]+))?"
)
# "ncclCommInitRank comm .. rank R nranks N" (NCCL 2.19+); ncclCommInitRankConfig, ncclCommSplit,
# ncclCommInitAll and RCCL's *_impl name their call too; NCCL <= 2.18 logs "comm .. rank R nranks N"
_INIT = re.compile(
    _PREFIX + r"(?:ncclComm\w+ )?comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
)
_GATHERED = {"allgather", "reduce_scatter"}
# "NCCL version 2.20.5+cuda12.4" (printed bare by rank 0, or after an INFO prefix), RCCL's too, and
# RCCL 2.26+'s "RCCL version : 2.27.7-HEAD:0d2c4fd"; MSCCL's builds "2.12.12.MSCCL.0.7.3+cuda11.6"
_VERSION = re.compile(
    r"\b([NR]CCL) version\s*:?\s*"
    r"(\d+\.\d+\.\d+(?:\.MSCCL(?:\.\d+)+)?(?:\+[a-z]+\d+(?:\.\d+)?)?(?:-[A-Za-z]+:[0-9a-f]{7,40})?)"
)  # (each suffix by its shape: interleaved output may run the next line's host into it)
_TASK = re.compile(r" task\b")  # the start of RCCL's "task N globalrank N", after the stream
_OP_START = re.compile(r"[A-Za-z]+: opCount\b")  # an operation line, however it ends
_REPEATED = re.compile(r"\[repeated \d+x across cluster\]")


def is_nccl_log(text: str) -> bool:
    """Whether ``text`` holds NCCL ``COLL`` (or ``TUNING``) debug lines."""
    return bool(
        re.search(r"NCCL INFO (?:\[\d+\] )?[A-Za-z]+: opCount [0-9a-fA-F]+ sendbuff", text)
        or re.search(r"NCCL INFO (?:[A-Za-z]+: )?\d+ Bytes -> Algo", text)
    )


def _choice(value: str, names: tuple[str, ...]) -> str:
    if value.isdigit():
        index = int(value)
        return names[index] if index < len(names) else f"unknown({index})"
    return value.lower()


def _parse_file(path: Path, versions: set[str]) -> tuple[list[dict], list[dict], tuple[list[int], ...]]:
    """The operation and tuning rows of one log, its lines not read (cut, merged by Ray) and those
    read without their global rank (cut inside it); the library versions it names go to
    ``versions``."""
    ops: list[dict] = []
    tuning: list[dict] = []
    ranks: dict[tuple, int] = {}
    last_op: dict[tuple, int] = {}
    lines = read_text(path, "an NCCL debug log").split("\n")
    cut: list[int] = []  # operation lines that do not parse: cut short, or wrapped past repair
    repeated: list[int] = []  # Ray's "[repeated Nx across cluster]": similar lines merged
    rankless: list[int] = []  # read, but cut inside "task N globalrank N": the rank from elsewhere
    for number, line in enumerate(lines, start=1):
        if (v := _VERSION.search(line)) is not None:
            versions.add(f"{v[1]} {v[2]}")  # and read on: interleaved output may hold an operation
        if "NCCL INFO" not in line and "opCount" not in line:
            continue
        if m := _INIT.search(line):
            ranks[(m["host"], m["pid"], m["comm"])] = int(m["rank"])
            continue
        m = _OP.search(line)
        rest = lines[number] if number < len(lines) else "NCCL INFO"
        if m is None and "sendbuff" in line and "NCCL INFO" not in rest and "opCount" not in rest:
            # a terminal or a web page may wrap a long line: the rest is on the next one (a line
            # of its own, not another operation)
            m = _OP.search(line.rstrip() + " " + rest.lstrip())
        elif m is not None and m["grank"] and m.end() == len(line.rstrip()) and rest.strip().isdigit():
            m = _OP.search(line.rstrip() + rest.strip())  # wrapped inside the global rank's digits
        elif m is not None and not m["grank"] and _TASK.match(line, m.end()):
            # "task N globalrank" and its digits on the next line (wrapped), or nothing (cut)
            joined = _OP.search(line.rstrip() + " " + rest.strip()) if rest.strip().isdigit() else None
            if joined is not None and joined["grank"]:
                m = joined
            else:
                rankless.append(number)
        if m is not None:
            ops.append(_op_row(path, number, m, ranks))
            last_op[(m["host"], m["pid"], m["tid"])] = len(ops) - 1
            if _REPEATED.search(line):
                repeated.append(number)
            continue
        if (m := _TUNING.search(line)) is not None:
            _tuning_row(path, number, m, ops, tuning, last_op)
        elif _OP_START.search(line):
            cut.append(number)
    return ops, tuning, (cut, repeated, rankless)


def _tuning_row(
    path: Path, number: int, m: re.Match, ops: list[dict], tuning: list[dict], last: dict
) -> None:
    """A TUNING line as a row of ``tuning``, its choice attached to the operation logged just
    before it by the same thread with the same size (or, for allgather and reduce_scatter, the
    size of one rank's part: NCCL 2.19 and later log that)."""
    row = {
        "file": str(path),
        "line": number,
        "host": m["host"],
        "pid": int(m["pid"]) if m["pid"] else pd.NA,
        "device": _int(m["dev"]),
        "collective": normalize_collective_name(m["coll"]) if m["coll"] else "",
        "bytes": float(m["bytes"]),
        "algorithm": _choice(m["algo"], ALGORITHMS),
        "protocol": _choice(m["proto"], PROTOCOLS),
        "predicted_time": float(m["time"]) * 1e-6 if m["time"] else np.nan,
    }
    tuning.append(row)
    i = last.get((m["host"], m["pid"], m["tid"]))
    if i is None or ops[i]["algorithm"]:
        return
    op = ops[i]
    # NCCL 2.19+ logs count x size of the task, per rank for allgather and reduce_scatter (the
    # operation's bytes are x nranks); earlier versions, the whole buffer as the operation's
    gathered = (
        op["collective"] in ("allgather", "reduce_scatter") and op["bytes"] == row["bytes"] * op["nranks"]
    )
    if op["bytes"] == row["bytes"] or gathered:
        op["algorithm"], op["protocol"] = row["algorithm"], row["protocol"]


def _say_lost_lines(path: Path, cut: list[int], repeated: list[int], rankless: list[int], found: int) -> None:
    """Operation lines not read (an error where none was), lines Ray merged and lines cut inside
    their global rank, as warnings."""
    expected = (
        "expected '<Coll>: opCount <hex> sendbuff .. recvbuff .. [acc ..] count <n> datatype <n> "
        "op <n> root <n> comm <ptr> [nranks=<n>] stream <ptr> [task <n> globalrank <n>]'"
    )
    if cut and not found:
        raise InputFileError(path, f"an NCCL operation line that does not parse; {expected}", line=cut[0])
    if cut:
        warnings.warn(
            f"{path}: {len(cut)} NCCL operation line(s) that do not parse (cut short in the log of "
            "a killed job, broken in copying, or a form this reader does not know) were not read: "
            f"lines {cut[:5]}" + (" ..." if len(cut) > 5 else "") + f"; {expected}",
            stacklevel=3,
        )
    if rankless:
        warnings.warn(
            f"{path}: {len(rankless)} NCCL operation line(s) end inside 'task N globalrank N' (cut "
            f"short): lines {rankless[:5]}" + (" ..." if len(rankless) > 5 else "") + "; their rank is "
            "the communicator's initialisation line's in the same process, or unknown without one",
            stacklevel=3,
        )
    if repeated:
        warnings.warn(
            f"{path}: {len(repeated)} operation line(s) end in Ray's '[repeated Nx across cluster]' "
            f"(lines {repeated[:5]}{' ...' if len(repeated) > 5 else ''}): Ray's log deduplication "
            "merged lines that differ only in their numbers, so calls, sizes and ranks are missing "
            "here; rerun with RAY_DEDUP_LOGS=0 to log every call",
            stacklevel=3,
        )


def _int(text: str | None) -> object:
    return int(text) if text is not None else pd.NA


def _op_row(path: Path, number: int, m: re.Match, ranks: dict) -> dict:
    dtype = int(m["dt"])
    if dtype not in DATATYPES:
        raise InputFileError(path, f"datatype {dtype}: expected an ncclDataType_t 0-11", line=number)
    name, size = DATATYPES[dtype]
    collective = normalize_collective_name(m["coll"])
    if not collective:
        raise InputFileError(path, f"unknown collective {m['coll']!r}", line=number)
    nranks = int(m["nranks"])
    count = int(m["count"])
    nbytes = count * size * (nranks if collective in _GATHERED else 1)
    if m["grank"] is not None:
        rank: object = int(m["grank"])
    else:
        rank = ranks.get((m["host"], m["pid"], m["comm"]), pd.NA)
    return {
        "file": str(path),
        "line": number,
        "host": m["host"],
        "pid": _int(m["pid"]),
        "tid": _int(m["tid"]),
        "device": _int(m["dev"]),
        "rank": rank,
        "collective": collective,
        "op_count": int(m["op"], 16),
        "count": count,
        "datatype": name,
        "bytes": float(nbytes),
        "reduce_op": REDUCE_OPS.get(int(m["redop"]), m["redop"]),
        "root": int(m["root"]),
        "comm": m["comm"],
        "nranks": nranks,
        "stream": m["stream"],
        "algorithm": "",
        "protocol": "",
    }


_COLUMNS = (
    "file",
    "line",
    "host",
    "pid",
    "tid",
    "device",
    "rank",
    "collective",
    "op_count",
    "count",
    "datatype",
    "bytes",
    "reduce_op",
    "root",
    "comm",
    "nranks",
    "stream",
    "algorithm",
    "protocol",
)


def log_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """The files ``paths`` name: files as given, a glob's matches, and of a folder the files that
    hold NCCL debug lines (a job's folder also holds its hostfile, scripts, other output: skipped,
    and named in a warning)."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            listed = sorted(p for p in path.iterdir() if p.is_file())
            logs = [p for p in listed if _holds_nccl_lines(p)]
            skipped = [p.name for p in listed if p not in logs]
            if skipped and logs:
                warnings.warn(
                    f"{path}: {len(skipped)} file(s) without NCCL debug lines skipped: "
                    + ", ".join(skipped[:5])
                    + (" ..." if len(skipped) > 5 else ""),
                    stacklevel=3,
                )
            files += logs or listed  # none: the reader says what the first one lacks
        elif any(ch in str(item) for ch in "*?[") and not path.exists():
            import glob

            matches = sorted(Path(p) for p in glob.glob(str(item)))
            if not matches:
                raise InputFileError(path, "no file matches this pattern; expected NCCL debug logs")
            files += matches
        else:
            files.append(path)
    return files


def _holds_nccl_lines(path: Path) -> bool:
    """Whether a file's first 64 KiB hold an NCCL INFO line (cheap: a job folder's other files)."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(1 << 16).decode("utf-8", errors="replace")
    except OSError:
        return False
    return "NCCL INFO" in head


def read_nccl_log(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Every collective logged in NCCL debug logs (one file per rank, or one merged file).

    Returns one row per operation line: ``file``, ``line``, ``host``, ``pid``, ``tid``, ``device``,
    ``rank`` (nullable), ``collective`` (dlexplore's names), ``op_count`` (per communicator),
    ``count`` (elements), ``datatype``, ``bytes``, ``reduce_op``, ``root``, ``comm``, ``nranks``,
    ``stream``, ``algorithm`` and ``protocol`` (from ``TUNING`` lines; "" when not logged).
    ``attrs``: ``source``, ``files``, ``tuning`` (the tuning lines as a DataFrame),
    ``unattributed_lines`` (operation lines whose prefix was lost in interleaved output),
    ``versions`` (the ``NCCL version ..``/``RCCL version ..`` the logs name, e.g. "NCCL 2.20.5+cuda12.4").
    """
    files = log_files(paths)
    rows, tuning, versions = [], [], set()
    lost = []
    for path in files:
        ops, tune, lines = _parse_file(path, versions)
        rows += ops
        tuning += tune
        lost.append((path, *lines))
    for path, cut, repeated, rankless in lost:  # an error only where no file of the set has a line read
        _say_lost_lines(path, cut, repeated, rankless, found=len(rows))
    if not rows and not tuning:
        raise InputFileError(
            files[0] if files else "?",
            "holds no NCCL collective lines; expected "
            "a log written with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL (or TUNING)",
        )
    frame = pd.DataFrame(rows, columns=list(_COLUMNS))
    for name in ("pid", "tid", "device", "rank"):
        frame[name] = pd.array(frame[name], dtype="Int64")
    lost = frame.loc[frame["host"].isna(), "line"].tolist()
    if lost:
        warnings.warn(
            f"{len(lost)} operation line(s) without a host:pid:tid [device] prefix (lost in "
            f"interleaved output, or cut off where the log was copied): lines {lost[:5]}; their process "
            "is unknown",
            stacklevel=2,
        )
    frame.attrs.update(
        source="measured: NCCL debug log " + ", ".join(p.name for p in files[:3]),
        kind="measured",
        format="nccl-log",
        files=[str(p) for p in files],
        tuning=pd.DataFrame(tuning),
        unattributed_lines=lost,
        versions=sorted(versions),
    )
    return frame


def nccl_log_table(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per collective, message size, datatype and group size: ``calls`` (operation lines),
    ``processes`` (distinct known host:pid), ``ranks_seen`` (distinct known ranks), ``bytes_total``."""
    if "collective" not in ops or "bytes" not in ops:
        raise DlexploreError("expected read_nccl_log's table")
    keys = ["collective", "bytes", "datatype", "nranks", "algorithm", "protocol"]
    process = ops["host"].astype(str) + ":" + ops["pid"].astype(str)
    table = (
        ops.assign(process=process)
        .groupby(keys, dropna=False, sort=True)
        .agg(
            calls=("line", "size"),
            processes=("process", "nunique"),
            ranks_seen=("rank", "nunique"),
            bytes_total=("bytes", "sum"),
        )
        .reset_index()
    )
    table.attrs.update(
        source=ops.attrs.get("source", "measured: NCCL debug log"),
        kind="measured",
        units={
            "bytes": "bytes",
            "bytes_total": "bytes",
            "calls": "count",
            "processes": "count",
            "ranks_seen": "count",
            "nranks": "count",
        },
    )
    return table
