"""Which format a file holds, from its first bytes (never from its name alone)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from ..errors import DlexploreError, InputFileError
from .nccl_tests_json import is_nccl_tests_json
from .nccl_tests_parse import LAUNCHER_PREFIX

__all__ = ["FORMATS", "MEASURED_FORMATS", "detect_format", "head_text"]

FORMATS = (
    "pytorch",
    "horovod",
    "nsys",
    "otf2",
    "netcdf",
    "nccl-tests",
    "darshan",
    "darshan-text",
    "dlio",
    "tensorboard",
    "tau",
    "nccl-log",
)

#: Formats that hold a measured table (a dataset) rather than a trace of events.
MEASURED_FORMATS = ("nccl-tests", "darshan", "darshan-text", "dlio")

_HEAD = 1 << 16
_SQLITE = b"SQLite format 3\x00"
_GZIP = b"\x1f\x8b"
_HDF5 = b"\x89HDF\r\n\x1a\n"
# A Darshan 3.x log: its version string ("3.21\0..."), then DARSHAN_MAGIC_NR 6567223 (little-endian).
_NCCL_INFO = re.compile(r"^.{0,200}?\S+:\d+:\d+ \[\d+\] (?:\d+ )?NCCL INFO ", re.M)
_DARSHAN = re.compile(rb"^3\.\d{1,2}\x00{3,5}.{0,3}75d\x00", re.DOTALL)


def head_text(path: Path, size: int = _HEAD) -> str:
    """The first ``size`` bytes of ``path`` (decompressed if gzip) as text, undecodable bytes replaced."""
    try:
        with open(path, "rb") as raw:
            start = raw.read(2)
            raw.seek(0)
            if start == _GZIP:
                with gzip.open(raw) as unzipped:
                    data = unzipped.read(size)
            else:
                data = raw.read(size)
    except FileNotFoundError:
        raise InputFileError(path, "no such file; expected a trace file") from None
    except IsADirectoryError:
        raise InputFileError(path, "is a folder; expected a trace file") from None
    except (OSError, EOFError) as err:
        raise InputFileError(path, f"cannot be read ({err}); expected a trace file") from None
    return data.decode("utf-8", errors="replace")


def _head_bytes(path: Path, size: int = 64) -> bytes:
    with open(path, "rb") as raw:
        return raw.read(size)


def detect_format(path: str | Path) -> str:
    """One of :data:`FORMATS` for the file at ``path``, or a :class:`DlexploreError` saying what it
    looks like instead."""
    path = Path(path)
    if path.is_dir():
        if any(path.glob("*.otf2")):
            return "otf2"
        if any(path.glob("MULTI__*/profile.*")) or any(path.glob("profile.*.*.*")):
            return "tau"
        raise InputFileError(path, "is a folder without an OTF2 anchor file (*.otf2)")
    try:
        with open(path, "rb") as raw:
            magic = raw.read(16)
    except FileNotFoundError:
        raise InputFileError(path, "no such file; expected a trace file") from None
    except OSError as err:
        raise InputFileError(path, f"cannot be read ({err})") from None
    if magic.startswith(_SQLITE):
        return "nsys"
    if _DARSHAN.match(magic):
        return "darshan"
    if magic.startswith(_HDF5):
        return "netcdf"  # written by `dlexplore trace convert`
    if path.suffix == ".otf2" or magic.startswith(b"OTF2"):
        return "otf2"
    from .nccl_log import is_nccl_log
    from .tau import is_tau_profile
    from .tensorboard import is_event_file

    if is_event_file(_head_bytes(path)):
        return "tensorboard"
    text = head_text(path)
    if is_tau_profile(text):
        return "tau"
    if is_nccl_log(text):
        return "nccl-log"
    stripped = text.lstrip("\ufeff \t\r\n")
    # nccl-tests first: its lines under mpirun start "[1,0]<stdout>:", like JSON ("#" from 2019 on)
    prefix = r"^" + LAUNCHER_PREFIX + r"{0,3}"
    if re.search(prefix + r"#\s+(out-of-place|size\s+count)", text, flags=re.M) or re.search(
        prefix + r"\s*#?\s*(?:nThread:? \d+ nGpus|size\s+count\s+type\b)", text, flags=re.M
    ):
        return "nccl-tests"
    if stripped.startswith("# darshan log version:"):
        return "darshan-text"  # what darshan-parser prints
    if stripped.startswith(("{", "[")):
        return _json_format(path, text, stripped)
    if "nccl-tests" in text:
        return "nccl-tests"
    if "NCCL INFO" in text and _NCCL_INFO.search(text):
        # NCCL's init lines can fill the first 64 KiB before any collective is logged, and a log
        # without the COLL subsystem has none: its reader reads the whole file and says which
        return "nccl-log"
    if not stripped:
        raise InputFileError(path, "is empty; expected a trace file")
    try:
        json.loads(stripped[:100])
    except ValueError:
        pass
    raise DlexploreError(
        f"{path}: unknown trace format (starts with {stripped[:40]!r}); expected a PyTorch profiler "
        "trace (.json/.json.gz), a Horovod timeline, an Nsight Systems SQLite export, an OTF2 archive, "
        "nccl-tests output, an NCCL debug log (NCCL_DEBUG=INFO), a Darshan log (or darshan-parser text) "
        "or a DLIO summary.json"
    )


def _json_format(path: Path, text: str, stripped: str) -> str:
    """The format of a file whose text starts with a JSON object or array."""
    if stripped.startswith("{"):
        if '"traceEvents"' in text:
            return "pytorch"
        if is_nccl_tests_json(stripped):
            return "nccl-tests"  # its JSON results file (-J), nccl-tests 2.17 and later
        if re.search(r'"(train_au_percentage|num_accelerators|train_throughput_samples_per_second)"', text):
            return "dlio"  # DLIO / MLPerf Storage summary.json
        raise InputFileError(
            path,
            'is a JSON object without "traceEvents"; expected a PyTorch '
            "profiler trace, a Horovod timeline, an Nsight Systems SQLite export, "
            "an OTF2 archive, nccl-tests output (or its -J JSON results), a Darshan log or a DLIO summary",
        )
    # a JSON array
    if (
        re.search(
            r'"(NEGOTIATE_|ALLREDUCE|ALLGATHER|BROADCAST|MEMCPY_IN_FUSION_BUFFER|QUEUE|'
            r"CYCLE_START|start_time_since_epoch_in_micros)",
            text,
        )
        or stripped.rstrip(", \t\r\n") == "["
    ):
        return "horovod"  # "[" alone is what Horovod leaves when no operation ran
    if '"ph"' in text:
        return "pytorch"  # a bare Chrome trace array
    raise InputFileError(path, 'is a JSON array but not of trace events (no "ph" fields)')
