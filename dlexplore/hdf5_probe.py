"""Open untrusted netCDF4/HDF5 files without risking a hang.

A few damaged HDF5 files (a flipped bit in an object header, for one) make the HDF5 C library loop
forever while reading an attribute. Inside the C call nothing can interrupt it: not a signal, not a
thread, not Python's ``KeyboardInterrupt``. So before a file is opened in this process, a child
process reads every object, attribute and variable of it, the way h5netcdf will, under a time limit.
If the child does not finish, crashes or fails, the file is refused with an
:class:`~dlexplore.errors.InputFileError`; the caller's process never touches it.

The limit is ``DLEXPLORE_HDF5_PROBE_SECONDS`` (s, default 10) plus 1 s per 10 MB of file, so a
slow disk or a large trace is not mistaken for a hang.

The child is kept between probes (:class:`_Worker`): starting Python and importing h5py costs about
0.2 s, paid by the first probe of a process, while a probe by the waiting child costs one extra read
of the file (a few ms for a small one). A child that hangs or crashes is killed and replaced; a file
it fails to read leaves it serving, since h5py closes what it opened as the exception unwinds, and a
child that dies while a file is read after others (its idle limit reached, or damage left behind by
an earlier file) is replaced and the file read again once, so that a sound file is not refused for
what another did. Probes from several threads at once do not wait for each other: whoever finds the
child busy starts a child of its own for that one file.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from .errors import InputFileError

__all__ = ["probe_hdf5", "probe_seconds", "close_worker", "start_worker", "worker_pid", "forget_passed"]

ENV_SECONDS = "DLEXPLORE_HDF5_PROBE_SECONDS"
BASE_SECONDS = 10.0  # limit for a small file (s)
BYTES_PER_SECOND = 10e6  # allowance for reading a large one (B/s)

# Runs in the child: one request per line on stdin, ``[path, seconds]`` as JSON (the path is data,
# never code), one reply per line, ``{"ok": true}`` or ``{"error": the exception's last line}``. It
# reads what xarray's h5netcdf backend will: every object's attributes and values (h5py), then every
# group, dimension and variable as h5netcdf resolves them (dimension-scale references included).
# SIGALRM keeps its default action, ending the process: the alarm bounds a probe even when the
# caller is gone (killed while it waited) and the loop in HDF5 holds the GIL, and it ends a child
# left idle for IDLE_SECONDS.
_WORKER = r"""
import json, math, os, signal, sys, traceback

replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # nothing the C library prints can fall between two replies
alarm = getattr(signal, "alarm", lambda seconds: None)
if hasattr(signal, "SIGALRM"):  # inherited ignored or blocked, it would bound nothing
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})

try:
    import h5py
    import h5netcdf
    broken = None
except Exception as err:  # every request is answered with why, rather than an exit with no words
    broken = traceback.format_exception_only(type(err), err)[-1].strip()

def walk(name, obj):
    for key in obj.attrs:
        obj.attrs[key]
    if isinstance(obj, h5py.Dataset):
        obj[()]

def group(g):
    dict(g.attrs)
    dict(g.dimensions)
    for variable in g.variables.values():
        dict(variable.attrs)
        variable.dimensions  # the values were read through h5py
    for child in g.groups.values():
        group(child)

def probe(path):
    with h5py.File(path, "r") as raw:
        for key in raw.attrs:
            raw.attrs[key]
        raw.visititems(walk)
    with h5netcdf.File(path, "r") as nc:
        group(nc)

idle = int(sys.argv[1])
while True:
    alarm(idle)
    line = sys.stdin.readline()
    if not line:
        break
    path, seconds = json.loads(line)
    alarm(math.ceil(seconds) + 2)
    try:
        if not broken:
            probe(path)
        reply = {"error": broken} if broken else {"ok": True}
    except Exception as err:
        reply = {"error": traceback.format_exception_only(type(err), err)[-1].strip()}
    alarm(0)
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
"""

#: Seconds a waiting child lives without a request before it ends itself (POSIX; elsewhere it
#: lives as long as this process).
IDLE_SECONDS = 300


class _Worker:
    """A child process that probes files one at a time, and the thread that reads its replies."""

    def __init__(self) -> None:
        # -P (3.11+) keeps the current folder off sys.path, so no stray h5py.py there is imported.
        flags = ["-P"] if sys.version_info >= (3, 11) else []
        self.proc = subprocess.Popen(
            [sys.executable, *flags, "-c", _WORKER, str(IDLE_SECONDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )
        self.replies: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self.probes = 0
        self.environment = _environment()
        threading.Thread(target=self._read, args=(self.proc, self.replies), daemon=True).start()

    @staticmethod
    def _read(proc: subprocess.Popen, replies: queue.SimpleQueue[str | None]) -> None:
        try:
            for line in proc.stdout:  # type: ignore[union-attr]
                replies.put(line)
        except (OSError, ValueError):  # the pipe was closed under the thread by close()
            pass
        finally:
            replies.put(None)  # the child is gone
            proc.wait()  # and reaped when it ends by itself (idle), not left a zombie

    def ask(self, path: Path, limit: float) -> dict[str, Any]:
        """The child's reply for ``path``: ``{"ok": True}``, ``{"error": reason}``, ``{"timeout":
        True}`` (no reply within ``limit`` s; the child is then killed) or ``{"exit": status}``."""
        self.probes += 1
        request = (json.dumps([str(path), limit]) + "\n").encode()
        try:
            assert self.proc.stdin is not None
            # unbuffered: a fork from another thread must not copy a request left in a buffer,
            # which the copy would send again when it ends
            descriptor = self.proc.stdin.fileno()
            while request:
                request = request[os.write(descriptor, request) :]
            line = self.replies.get(timeout=limit)
        except queue.Empty:
            self.close()
            return {"timeout": True}
        except OSError:  # the child had ended (its idle limit): a broken pipe
            line = None
        except BaseException:
            self.close()  # interrupted while the child reads: its next reply would be this file's
            raise
        if line is None:  # the child ended; its replies closed just before it exits
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            return {"exit": self.close()}
        return json.loads(line)

    def close(self) -> int:
        """End the child; its exit status (negative: the signal that ended it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        status = self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        return status


def _environment() -> dict[str, str]:
    """The environment a child reads files in (``HDF5_USE_FILE_LOCKING``, ``HDF5_PLUGIN_PATH``,
    ``PYTHONPATH``...), but the probe's limit, which each request carries."""
    return {k: v for k, v in os.environ.items() if k != ENV_SECONDS}


_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _forget_worker() -> None:
    # A forked child shares the parent's pipes to the worker, and the lock may have been held by a
    # thread that does not exist in it: it starts its own worker.
    # Its copies are left as they are: the reader thread, gone in the fork, held the lock of the
    # stdout reader, so closing it here would wait forever.
    global _worker, _worker_lock
    _worker, _worker_lock = None, threading.Lock()


def close_worker() -> None:
    """End the kept child now (the next probe starts another)."""
    global _worker
    with _worker_lock:
        if _worker is not None:
            _worker.close()
            _worker = None


def start_worker() -> int:
    """Start the kept child now if there is none (as the first probe would); its process id."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = _Worker()
        return _worker.proc.pid


def worker_pid() -> int | None:
    """The process id of the kept child, None while there is none."""
    worker = _worker
    return worker.proc.pid if worker is not None else None


def forget_passed() -> None:
    """Forget which files passed the probe (the next probe of each reads it again)."""
    _PASSED.clear()


atexit.register(close_worker)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)


def _ask(path: Path, limit: float) -> dict[str, Any]:
    """Probe ``path`` in the kept child, or in a child of its own when another thread is using it."""
    global _worker
    if not _worker_lock.acquire(blocking=False):
        single = _Worker()
        try:
            return single.ask(path, limit)
        finally:
            single.close()
    try:
        for _attempt in range(2):
            # Taken out while it reads: however the wait below is interrupted, no child that may
            # still owe a reply is left for the next probe.
            worker, _worker = _worker, None
            if worker is not None and (
                worker.proc.poll() is not None or worker.environment != _environment()
            ):
                worker.close()  # ended, or started before the environment HDF5 reads was changed
                worker = None
            worker = worker or _Worker()
            served = worker.probes
            reply = worker.ask(path, limit)
            if "ok" in reply or "error" in reply:
                _worker = worker
                return reply
            if "exit" not in reply or served == 0:
                return reply
        return reply
    finally:
        _worker_lock.release()


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
    reply = _ask(Path(os.path.abspath(source)), limit)  # the kept child has its own working folder
    if "timeout" in reply:
        shown = f"{limit:.0f}" if limit >= 10 else f"{limit:.2g}"
        raise InputFileError(
            source,
            f"cannot be read as {what}: HDF5 did not finish reading it in "
            f"{shown} s (a damaged file can make it loop forever; raise "
            f"{ENV_SECONDS} if the file is sound and the disk is slow)",
        )
    if "ok" in reply:
        if identity is not None:
            if len(_PASSED) >= _PASSED_MAX:
                _PASSED.clear()
            _PASSED.add(identity)
        return
    if "error" in reply:
        reason = reply["error"] or "the reader failed"
    elif reply["exit"] < 0:
        reason = f"HDF5 crashed reading it (signal {-reply['exit']})"
    else:
        reason = f"the reader exited with status {reply['exit']}"
    raise InputFileError(source, f"cannot be read as {what} ({reason})")
