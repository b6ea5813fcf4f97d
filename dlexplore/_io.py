"""Writing output files safely: a reader never sees a half-written file, and a failed write leaves
the previous file as it was."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_path", "atomic_open", "replace_folder"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed over ``path``.

    The temporary file lives in the same folder so that the final ``os.replace`` is atomic.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    from .errors import DlexploreError

    if not folder.is_dir():
        raise DlexploreError(f"{target}: the folder {folder} does not exist")
    if target.is_dir():
        # os.replace would fail only after the whole output was written, naming the temporary file.
        raise DlexploreError(f"{target}: is a folder; expected the name of a file to write")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise DlexploreError(f"{target}: cannot write in {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    # mkstemp makes the file private (0600); give it the mode a plain open() would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary file for writing that replaces ``path`` when the block ends without error."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``).

    Returns False where the system or the file system cannot (other systems, old kernels or C
    libraries, some network file systems); raises OSError for any other failure.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library older than glibc 2.28, or not glibc at all
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(second))


def replace_folder(new: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put the finished folder ``new`` at ``target``, replacing what is there, and remove the old.

    ``rename(2)`` replaces only an empty folder. Where Linux can swap the two in one step, ``target``
    holds either the whole old folder or the whole new one at every instant, and the old is deleted
    after the swap. Elsewhere the old folder is first moved aside (into a hidden folder beside it),
    which leaves ``target`` missing for the time between two renames, and is put back if the second
    fails. ``new`` and ``target`` must be on one file system.
    """
    new, target = Path(new), Path(target)
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.replace(new, target)
        return
    if _exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)  # it now holds the old folder
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", suffix=".tmp", dir=target.parent))
    try:
        os.replace(target, aside / "previous")
        try:
            os.replace(new, target)
        except BaseException:
            os.replace(aside / "previous", target)
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def read_text(path: str | os.PathLike, expected: str = "a text file") -> str:
    """The text of ``path`` decoded as UTF-8 (a byte-order mark, as spreadsheets write, is dropped).

    Every reason it cannot be read becomes an :class:`~dlexplore.errors.InputFileError` naming the
    file, the line of an undecodable byte, and ``expected`` (what the caller wanted to read).
    """
    from .errors import InputFileError

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputFileError(path, f"no such file (not found); expected {expected}") from None
    except IsADirectoryError:
        raise InputFileError(path, f"is a folder; expected {expected}") from None
    except PermissionError:
        raise InputFileError(path, "cannot read the file: permission denied") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read the file: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(
            path,
            f"byte 0x{data[exc.start]:02x} is not UTF-8 text; expected UTF-8 (save the file as UTF-8)",
            line=line,
        ) from None
