"""Open untrusted netCDF4/HDF5 files without risking a hang.

A few damaged HDF5 files (a flipped bit in an object header, for one) make the HDF5 C library loop
forever while reading an attribute. Inside the C call nothing can interrupt it: not a signal, not a
thread, not Python's ``KeyboardInterrupt``. So before a file is opened in this process, a child
process reads every object, attribute and variable of it, the way h5netcdf will, under a time limit.
If the child does not finish, crashes or fails, the file is refused with an
:class:`~dlexplore.errors.InputFileError`; the caller's process never touches it.

The limit is ``DLEXPLORE_HDF5_PROBE_SECONDS`` (s, default 10) plus 1 s per 10 MB of file, so a
slow disk or a large trace is not mistaken for a hang. The child costs about 0.2 s (starting Python
and importing h5py) plus one extra read of the file.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from .errors import InputFileError

__all__ = ["probe_hdf5", "probe_seconds"]

ENV_SECONDS = "DLEXPLORE_HDF5_PROBE_SECONDS"
BASE_SECONDS = 10.0  # limit for a small file (s)
BYTES_PER_SECOND = 10e6  # allowance for reading a large one (B/s)

# Runs in the child with the path as argv[1]; the file is data, never code. It reads what xarray's
# h5netcdf backend will: every object's attributes and values (h5py), then every group, dimension
# and variable as h5netcdf resolves them (dimension-scale references included).
_PROBE = r"""
import sys
import h5py
import h5netcdf

def walk(name, obj):
    for key in obj.attrs:
        obj.attrs[key]
    if isinstance(obj, h5py.Dataset):
        obj[()]

path = sys.argv[1]
with h5py.File(path, "r") as raw:
    for key in raw.attrs:
        raw.attrs[key]
    raw.visititems(walk)

def group(g):
    dict(g.attrs)
    dict(g.dimensions)
    for variable in g.variables.values():
        dict(variable.attrs)
        variable.dimensions  # the values were read above, through h5py
    for child in g.groups.values():
        group(child)

with h5netcdf.File(path, "r") as nc:
    group(nc)
"""


#: Files that passed the probe, by :func:`_fingerprint`; cleared when it reaches _PASSED_MAX entries.
_PASSED: set[tuple[int, bytes]] = set()
_PASSED_MAX = 4096


def _fingerprint(path: Path) -> tuple[int, bytes] | None:
    """Size and SHA-256 of ``path``'s bytes: what HDF5 will read, whatever the name or timestamps.

    Content, not (inode, mtime): a file rewritten in place within one timestamp tick (a few ms)
    would keep its times. Hashing costs about 5 ms per 10 MB, a small part of the probe it saves.
    """
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except OSError:
        return None
    return (size, digest.digest())


def probe_seconds(path: str | os.PathLike) -> float:
    """The time limit (s) for probing ``path``: the base limit plus 1 s per 10 MB."""
    raw = os.environ.get(ENV_SECONDS, "")
    try:
        base = float(raw) if raw else BASE_SECONDS
    except ValueError:
        raise InputFileError(path, f"{ENV_SECONDS}={raw!r} is not a number of seconds") from None
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    return base + size / BYTES_PER_SECOND


def probe_hdf5(path: str | os.PathLike, what: str = "netCDF") -> None:
    """Read all of ``path`` in a child process under :func:`probe_seconds`; raise
    :class:`InputFileError` (naming the file) if it hangs, crashes or cannot be read.

    A missing file is left to the caller, whose own error says what it expected. A file that passed
    is not probed again in this process while its bytes are unchanged (see :func:`_fingerprint`),
    so reloading a trace in a notebook does not pay for the child process again.
    """
    source = Path(path)
    if not source.is_file():
        return
    identity = _fingerprint(source)
    if identity in _PASSED:
        return
    limit = probe_seconds(source)
    # -P (3.11+) keeps the current folder off sys.path, so no stray h5py.py there is imported.
    flags = ["-P"] if sys.version_info >= (3, 11) else []
    try:
        done = subprocess.run(
            [sys.executable, *flags, "-c", _PROBE, str(source)],
            capture_output=True,
            text=True,
            timeout=limit,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        shown = f"{limit:.0f}" if limit >= 10 else f"{limit:.2g}"
        raise InputFileError(
            source,
            f"cannot be read as {what}: HDF5 did not finish reading it in "
            f"{shown} s (a damaged file can make it loop forever; raise "
            f"{ENV_SECONDS} if the file is sound and the disk is slow)",
        ) from None
    if done.returncode == 0:
        if identity is not None:
            if len(_PASSED) >= _PASSED_MAX:
                _PASSED.clear()
            _PASSED.add(identity)
        return
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    if done.returncode < 0:
        reason = f"HDF5 crashed reading it (signal {-done.returncode})"
    elif lines:
        reason = lines[-1].strip()
    else:
        reason = f"the reader exited with status {done.returncode}"
    raise InputFileError(source, f"cannot be read as {what} ({reason})")
