"""A Horovod timeline's bytes -> its events: the JSON array, terminated or not, checked.

Split from :mod:`.horovod` (stage 1 of its reading: the bytes and the array; stage 2, events to
rows, is :mod:`.horovod_builder` event by event or :mod:`.horovod_rows` in columns).
Horovod writes the array while the job runs, so it may lack its ``]``, end in a comma or inside an
event (see :mod:`.horovod`): the array is parsed a chunk at a time, and a chunk that does not parse
sends the rest to an exact event-by-event scan that tells a cut-off end from corruption.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import DlexploreError, InputFileError

try:
    from isal import igzip
except ImportError:  # pragma: no cover - exercised where isal has no wheel
    igzip = None

__all__ = ["read_data", "event_chunks", "MAX_INFLATED_BYTES", "CHUNK", "BOUNDARY"]

#: The most bytes a .json.gz timeline may inflate to; a larger one is refused, not held (B).
MAX_INFLATED_BYTES = 1 << 34
#: Bytes inflated at a time (B).
INFLATE_BLOCK = 1 << 26
#: Inflated to compressed bytes beyond which the gzip trailer's size is not used to size the buffer:
#: timelines compress 10-20x, while the trailer of a truncated or damaged file is any 4 bytes, and
#: the buffer is zero-filled (resident) when made.
TRUSTED_RATIO = 64
#: Inflated to compressed bytes beyond which a .json.gz is refused as a gzip bomb once it passes
#: :data:`BOMB_FLOOR` bytes: five times what timelines compress to (10-20x), and a bomb is refused after a
#: fraction of a second rather than when memory runs out (B/B, B).
BOMB_RATIO = 100
BOMB_FLOOR = 1 << 28
#: Bytes of JSON parsed at once: the parsed objects of one chunk are all that is held in memory
#: besides the text and the compact columns. 256 KiB: a 4 MB chunk's decoded structs were 1.2x the
#: JSON of a 10 MB timeline (peak growth 2.58x -> 1.78x) and left the caches (decode 733 -> 695 ms
#: CPU at 100 MB); below 128 KiB the per-chunk cost shows.
CHUNK = 1 << 18
#: Where one event ends and the next begins. Inside Horovod's events "{" only follows ": " (args);
#: a tensor name holding ',{"' would make a chunk fail to parse, and the exact scan takes over.
BOUNDARY = re.compile(rb',\s*(?=\{")')
_SPACE = re.compile(rb"[ \t\r\n]*")
_BLANK = frozenset(b" \t\n\r\x0b\x0c")  # what bytes.rstrip() strips


def read_data(path: Path) -> bytearray:
    """The file's bytes (gunzipped if need be), checked to open a JSON array.

    A bytearray, read in place: :mod:`.horovod_decode` frames each piece of it as an array for the
    decoder by setting the bytes around it, rather than copying it."""
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            if gzipped:
                data = _gunzip(raw, path)
            else:
                data = bytearray(os.fstat(raw.fileno()).st_size)
                del data[raw.readinto(data) :]
                data += raw.read()  # a file still being written may have grown
    except FileNotFoundError:
        raise InputFileError(path, "no such file; expected a Horovod timeline") from None
    except (OSError, EOFError) as err:
        raise InputFileError(path, f"cannot be read ({err}); expected a Horovod timeline") from None
    start = _SPACE.match(data).end()  # type: ignore[union-attr]
    if data[start : start + 3] == b"\xef\xbb\xbf":  # a byte-order mark
        start = _SPACE.match(data, start + 3).end()  # type: ignore[union-attr]
    if start == len(data):
        raise InputFileError(
            path,
            "is empty; expected a Horovod timeline (a JSON array). Horovod "
            "writes it from the first operation on; a copy taken earlier is empty",
        )
    if data[start : start + 1] != b"[":
        shown = data[start : start + 20].decode("utf-8", errors="replace")
        raise InputFileError(
            path,
            f"byte offset {start}: starts with {shown!r}; expected '[' (a "
            "Horovod timeline is a JSON array of trace events)",
            line=data.count(b"\n", 0, start) + 1,
        )
    return data


def _gunzip(raw: BinaryIO, path: Path) -> bytearray:
    """Inflate a .json.gz timeline, refusing more than :data:`MAX_INFLATED_BYTES` (a gzip bomb).

    ISA-L inflates it (``isal``, a core dependency; 3-4x less CPU than zlib) where it is installed.
    It names faults less well (trailing bytes read as a truncation, its own exception classes), so on
    any fault the file is inflated again by the standard library, whose words the error gives."""
    try:
        if igzip is not None:
            try:
                return _inflate(raw, path, igzip.IGzipFile)
            except (InputFileError, MemoryError):
                raise
            except Exception:  # noqa: BLE001 - the standard library's reading names the fault
                raw.seek(0)
        return _inflate(raw, path, gzip.GzipFile)
    except MemoryError:
        raise InputFileError(
            path,
            "the gzip data inflates to more than fits in memory; expected a "
            "Horovod timeline (decompress it and read the .json)",
        ) from None
    except (OSError, EOFError, zlib.error) as err:
        raise InputFileError(
            path, f"corrupt or truncated gzip data ({err}); expected a Horovod timeline"
        ) from None


def _inflate(raw: BinaryIO, path: Path, opener: Any) -> bytearray:
    """The inflated bytes, in one buffer sized by the gzip trailer where it can be trusted.

    The buffer is filled a block at a time: asking a gzip reader for everything at once (``read(n)``
    with a bound) makes it allocate ``n`` bytes first, and a bound of 16 GiB failed on every machine
    with less memory to promise (an address-space limit, or no overcommit)."""
    size, hint = _inflated_size(raw)
    bound = min(MAX_INFLATED_BYTES, max(BOMB_FLOOR, BOMB_RATIO * size))
    try:
        out = bytearray(hint)
    except MemoryError:
        out = bytearray()
    view = memoryview(out)
    filled = 0
    with opener(fileobj=raw, mode="rb") as stream:
        while filled < len(out) and (block := stream.read(min(INFLATE_BLOCK, len(out) - filled))):
            view[filled : filled + len(block)] = block
            filled += len(block)
        view.release()
        del out[filled:]  # fewer bytes than the trailer said: a fault, which the reads below find
        while block := stream.read(INFLATE_BLOCK):  # more: several members, or a size past 4 GiB
            out += block
            if len(out) > bound:
                raise InputFileError(
                    path,
                    (
                        f"the gzip data inflates to more than {MAX_INFLATED_BYTES} bytes"
                        if bound == MAX_INFLATED_BYTES
                        else f"the gzip data inflates to more than {BOMB_RATIO} times its {size} bytes "
                        "(a gzip bomb?)"
                    )
                    + "; expected a Horovod timeline (decompress it and read the .json)",
                )
    return out


def _inflated_size(raw: BinaryIO) -> tuple[int, int]:
    """The file's size, and the size its gzip trailer gives (the last member's, modulo 4 GiB); 0
    where the file cannot be measured or the stated size is beyond :data:`TRUSTED_RATIO` times the
    file's (B)."""
    size = stated = 0
    try:
        size = raw.seek(0, os.SEEK_END)
        if size >= 18:  # a gzip header and trailer
            raw.seek(-4, os.SEEK_END)
            stated = int.from_bytes(raw.read(4), "little")
    except OSError:
        pass
    finally:
        raw.seek(0)
    return size, stated if stated <= min(TRUSTED_RATIO * size, MAX_INFLATED_BYTES) else 0


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(
            path,
            f"byte offset {err.start}: not UTF-8 text; expected a Horovod timeline (a JSON array)",
            line=data.count(b"\n", 0, err.start) + 1,
        ) from None


def array_bounds(data: bytearray) -> tuple[int, int, bool]:
    """Where the array's events begin and end in ``data``, and whether its ``]`` was written."""
    pos = data.index(b"[") + 1
    body_end = len(data)
    while body_end and data[body_end - 1] in _BLANK:
        body_end -= 1
    terminated = data[body_end - 1 : body_end] == b"]" and body_end - 1 >= pos
    return pos, body_end - 1 if terminated else body_end, terminated


def piece_end(data: bytearray, pos: int, stop: int) -> int:
    """The end of the last events, before ``stop``: blanks then trailing commas left out."""
    while stop > pos and data[stop - 1] in _BLANK:
        stop -= 1
    while stop > pos and data[stop - 1] == 0x2C:
        stop -= 1
    return stop


def event_chunks(
    data: bytearray, path: Path, info: dict[str, Any], chunk: int = CHUNK
) -> Iterator[list[Any]]:
    """The array's events, 256 KiB of JSON at a time, at C speed while the JSON is sound.

    A chunk that does not parse sends the rest of the file to :func:`_scan`, event by event, to
    tell a cut-off end from corruption and to say where. ``info`` learns whether the array was
    closed and where a dropped partial event began.
    """
    pos, stop, terminated = array_bounds(data)
    seen = 0
    while pos < stop:
        found = BOUNDARY.search(data, pos + chunk, stop) if stop - pos > chunk else None
        cut = found.start() if found else stop
        piece = data[pos : piece_end(data, pos, cut) if cut == stop else cut]
        try:
            events = json.loads(b"[" + piece + b"]")
        except (ValueError, RecursionError):  # UnicodeDecodeError included
            events = None
        if not isinstance(events, list):
            text = _decode(data, path)
            yield from _scan(text, len(data[:pos].decode("utf-8")), path, seen, info)
            return
        seen += len(events)
        yield events
        pos = cut + 1
    info["terminated"] = terminated
    if not seen:
        raise InputFileError(
            path,
            "holds no events (Horovod had written only '['); expected trace "
            "events: did any operation run after the timeline was opened?",
        )


def _scan(text: str, pos: int, path: Path, seen: int, info: dict[str, Any]) -> Iterator[list[Any]]:
    """Events one by one from ``pos`` (after the ``seen`` events before it) to the end of the file."""
    decoder = json.JSONDecoder()
    events: list[Any] = []
    n = len(text)
    while True:
        pos = _skip_space(text, pos)
        if pos >= n:
            break
        if text[pos] == "]":
            rest = _skip_space(text, pos + 1)
            if rest < n:
                raise InputFileError(
                    path,
                    f"byte offset {_byte_offset(text, rest)}: "
                    f"{text[rest : rest + 20]!r} after the array's closing ']'; "
                    "expected the end of the file",
                    line=_line(text, rest),
                )
            info["terminated"] = True
            break
        try:
            event, end = decoder.raw_decode(text, pos)
        except RecursionError:
            raise InputFileError(
                path,
                f"byte offset {_byte_offset(text, pos)}: event "
                f"#{seen + len(events)} is nested too deeply; expected a trace event",
                line=_line(text, pos),
            ) from None
        except ValueError as err:
            index = seen + len(events)
            offset = _byte_offset(text, pos)
            if not _later_event(text, pos + 1, decoder):
                warnings.warn(
                    f"{path}: the last event (#{index}, byte offset {offset}) is cut off, "
                    "as in a timeline copied while Horovod was writing it; dropped",
                    stacklevel=6,
                )
                info["partial_event_at"] = offset
                break
            raise InputFileError(
                path,
                f"event #{index} at byte offset {offset}: not valid JSON "
                f"({err.msg} at byte offset {_byte_offset(text, err.pos)}); "
                "expected a trace event object such as "
                '{"ph": "B", "name": "ALLREDUCE", "ts": 123, "pid": 1} (Horovod '
                "writes tensor names unescaped: a name with '\"' or '\\' breaks "
                "the JSON)",
                line=_line(text, pos),
            ) from None
        events.append(event)
        pos = _skip_space(text, end)
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos < n and text[pos] != "]":
            raise InputFileError(
                path,
                f"byte offset {_byte_offset(text, pos)}: "
                f"{text[pos : pos + 20]!r} after event #{seen + len(events) - 1}; "
                "expected ',' or ']'",
                line=_line(text, pos),
            )
    if not seen and not events:
        raise InputFileError(
            path,
            "holds no events (Horovod had written only '['); expected trace "
            "events: did any operation run after the timeline was opened?",
        )
    yield events


def _later_event(text: str, pos: int, decoder: json.JSONDecoder) -> bool:
    """Whether a whole trace event (an object with ``"ph"``) starts anywhere after ``pos``."""
    while True:
        pos = text.find("{", pos)
        if pos < 0:
            return False
        try:
            value, _ = decoder.raw_decode(text, pos)
        except RecursionError:  # garbage nested too deep to be an event: corrupt, not cut off
            return True
        except ValueError:
            value = None
        if isinstance(value, dict) and "ph" in value:
            return True
        pos += 1


def _skip_space(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _byte_offset(text: str, pos: int) -> int:
    return len(text[:pos].encode("utf-8"))


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def locate(path: Path, index: int) -> tuple[str, int | None]:
    """``"byte offset N"`` and the line of event ``index`` in the file, for error messages."""
    try:
        text = _decode(read_data(path), path)
        decoder = json.JSONDecoder()
        pos = _skip_space(text, text.index("[") + 1)
        for _ in range(index):
            _, pos = decoder.raw_decode(text, pos)
            pos = _skip_space(text, pos)
            pos = _skip_space(text, pos + 1) if text[pos] == "," else pos
        return f"byte offset {_byte_offset(text, pos)}", _line(text, pos)
    except (DlexploreError, ValueError, IndexError):
        return "byte offset unknown", None
