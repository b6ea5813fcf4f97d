"""Writing output files safely: a reader never sees a half-written file, and a failed write leaves
the previous file as it was."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_path", "atomic_open"]


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
