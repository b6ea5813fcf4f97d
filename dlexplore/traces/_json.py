"""Stream a Chrome trace JSON document (the PyTorch profiler's format) without holding it whole.

A profiler trace is one JSON object: a few small metadata members (``schemaVersion``,
``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds`` ...) and one large member,
``traceEvents``, an array of event objects (a bare array of events is also accepted). Kineto writes
some metadata after the array (``distributedInfo`` in on-demand traces, ``traceName``), so the
metadata is complete only once the events have been read.

:class:`ChromeTraceStream` reads the (optionally gzip-compressed) file in blocks, decodes the
metadata members one by one with :meth:`json.JSONDecoder.raw_decode`, and hands out the events
array in batches of parsed objects:

* the raw text of about ``chunk_chars`` characters is cut after the last ``},`` in the window
  and parsed as one JSON array (orjson when it is installed, else the standard library). A cut
  inside a string or a nested object can never parse as a complete array (the closing quote or
  brace would be missing), so a wrong cut costs time but never gives wrong events;
* when that fails (no ``},`` in the window, a wrong cut, or a real syntax error) the window is
  decoded one event at a time, which also pinpoints the error.

So memory stays at a few chunks whatever the file size, and every problem is reported as a
:class:`~dlexplore.errors.DlexploreError` naming the file, the byte offset in the (decompressed)
JSON text and the event index: truncated or corrupt gzip, truncated JSON, a JSON value that is not
a trace, trailing commas or extra data.

The cyclic garbage collector is paused while a batch is built: parsing allocates millions of
containers and CPython would otherwise re-scan all live objects many times (3x slower here).
"""

from __future__ import annotations

import codecs
import gc
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import DlexploreError

try:  # optional: about 1.6x faster than the standard library on trace events
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - exercised where orjson is absent
    orjson = None
    _loads = json.loads

__all__ = ["ChromeTraceStream", "PARSER"]

#: The JSON parser used for event batches: ``"orjson"`` or ``"json"``.
PARSER = "orjson" if orjson is not None else "json"

_BLOCK_BYTES = 1 << 22  # bytes read from the (decompressed) stream at a time
_CHUNK_CHARS = 1 << 23  # characters of event text parsed at a time
_MAX_VALUE_CHARS = 1 << 27  # longest single JSON value (characters): a bound against gzip bombs
_GZIP_MAGIC = b"\x1f\x8b"
_WS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


class ChromeTraceStream:
    """One Chrome trace file, read as metadata plus batches of events.

    Parameters
    ----------
    path:
        A ``.json`` or gzip-compressed (``.json.gz``; recognised by its magic bytes) trace.
    chunk_chars:
        About how many characters of event text are parsed at a time (memory vs overhead).

    Use :meth:`batches` once; afterwards :attr:`meta` holds every top-level member except
    ``traceEvents`` and :attr:`events_read` the number of events.
    """

    def __init__(self, path: str | Path, *, chunk_chars: int = _CHUNK_CHARS):
        self.path = Path(path)
        self.chunk_chars = int(chunk_chars)
        self.meta: dict[str, Any] = {}
        self.events_read = 0
        self.compressed = False
        self._raw: BinaryIO | None = None
        self._stream: BinaryIO | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._buf = ""
        self._pos = 0
        self._dropped_bytes = 0  # UTF-8 bytes of the text before self._buf
        self._eof = False

    # -- public ----------------------------------------------------------------------------

    def batches(self) -> Iterator[tuple[int, list[Any]]]:
        """Yield ``(index of the first event, list of parsed events)`` until the document ends.

        Raises :class:`DlexploreError` for anything that is not a complete trace document.
        """
        self._open()
        try:
            yield from self._document()
        finally:
            self.close()

    def close(self) -> None:
        """Close the file (done automatically when :meth:`batches` finishes)."""
        for handle in (self._stream, self._raw):
            if handle is not None:
                handle.close()
        self._stream = self._raw = None

    def error(self, message: str, *, offset: int | None = None, event: int | None = None) -> DlexploreError:
        """A :class:`DlexploreError` naming this file, the byte offset and the event index."""
        where = []
        if event is not None:
            where.append(f"event {event}")
        if offset is not None:
            text = "decompressed JSON text" if self.compressed else "file"
            where.append(f"byte {offset} of the {text}")
        prefix = f"{self.path}" + (f" ({', '.join(where)})" if where else "")
        return DlexploreError(f"{prefix}: {message}")

    # -- reading ---------------------------------------------------------------------------

    def _open(self) -> None:
        try:
            self._raw = open(self.path, "rb")
            magic = self._raw.read(2)
            self._raw.seek(0)
        except FileNotFoundError:
            raise self.error("no such file; expected a PyTorch profiler trace (.json or .json.gz)") from None
        except IsADirectoryError:
            raise self.error("is a folder; expected a PyTorch profiler trace file") from None
        except OSError as err:
            raise self.error(f"cannot be read ({err})") from None
        if magic == _GZIP_MAGIC:
            self.compressed = True
            self._stream = gzip.GzipFile(fileobj=self._raw, mode="rb")
        else:
            self._stream = self._raw

    def _offset(self, pos: int) -> int:
        """Byte offset in the JSON text of character ``pos`` of the buffer."""
        head = self._buf[:pos]
        return self._dropped_bytes + (len(head) if head.isascii() else len(head.encode("utf-8")))

    def _fill(self, size: int = _BLOCK_BYTES) -> bool:
        """Append at least one block to the buffer (dropping what was consumed); False at EOF."""
        if self._eof:
            return False
        if self._pos:
            self._dropped_bytes = self._offset(self._pos)
            self._buf = self._buf[self._pos :]
            self._pos = 0
        try:
            data = self._stream.read(max(size, _BLOCK_BYTES))
        except EOFError:
            raise self.error(
                "the gzip stream is truncated (the file ends before its end-of-stream "
                "marker); expected a complete .json.gz trace",
                offset=self._dropped_bytes + len(self._buf.encode("utf-8")),
            ) from None
        except (OSError, zlib.error) as err:
            raise self.error(
                f"corrupt gzip data ({err}); expected a complete .json.gz trace",
                offset=self._dropped_bytes + len(self._buf.encode("utf-8")),
            ) from None
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as err:
            raise self.error(
                f"is not UTF-8 text ({err.reason}); expected a JSON trace",
                offset=self._dropped_bytes + len(self._buf.encode("utf-8")) + err.start,
            ) from None
        if not data:
            self._eof = True
            return bool(text)
        self._buf += text
        return True

    def _skip_ws(self) -> str:
        """Skip whitespace; the next character ("" at the end of the document)."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return ""

    def _value(self, what: str, event: int | None = None) -> Any:
        """Decode the JSON value at the current position (reading more text as needed)."""
        want = _BLOCK_BYTES
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except RecursionError:
                raise self.error(
                    f"JSON nested too deeply in {what}; expected a Chrome trace",
                    offset=self._offset(self._pos),
                    event=event,
                ) from None
            except json.JSONDecodeError as err:
                # Only an error at the end of the text (or an open string) may be cured by reading
                # more; anything else is a real error and must not pull the rest of the file in.
                truncated = err.pos >= len(self._buf) - 8 or err.msg.startswith("Unterminated string")
                if truncated and len(self._buf) - self._pos > _MAX_VALUE_CHARS:
                    raise self.error(
                        f"a JSON value in {what} longer than {_MAX_VALUE_CHARS} characters (or not "
                        "closed); expected a Chrome trace",
                        offset=self._offset(self._pos),
                        event=event,
                    ) from None
                if truncated and self._fill(want):
                    want = min(2 * want, 1 << 25)  # fewer retries on a long value, in bounded steps
                    continue
                raise self.error(
                    f"invalid or truncated JSON in {what}: {err.msg}; expected a complete "
                    "Chrome trace (a JSON object with a traceEvents array)",
                    offset=self._offset(err.pos),
                    event=event,
                ) from None
            # A number at the very end of the buffer may continue in the next block.
            if end == len(self._buf) and self._fill():
                continue
            self._pos = end
            return value

    # -- grammar ---------------------------------------------------------------------------

    def _document(self) -> Iterator[tuple[int, list[Any]]]:
        first = self._skip_ws()
        if first == "\ufeff":
            self._pos += 1
            first = self._skip_ws()
        if first == "[":
            yield from self._events()
        elif first == "{":
            yield from self._object()
        elif first == "":
            raise self.error("is empty; expected a PyTorch profiler trace (JSON)")
        else:
            raise self.error(
                f"starts with {self._buf[self._pos : self._pos + 20]!r}; expected a JSON object "
                "with a traceEvents array (a PyTorch profiler trace)",
                offset=self._offset(self._pos),
            )
        if self._skip_ws() != "":
            raise self.error(
                f"extra data after the end of the trace ({self._buf[self._pos : self._pos + 20]!r})",
                offset=self._offset(self._pos),
            )

    def _object(self) -> Iterator[tuple[int, list[Any]]]:
        self._pos += 1  # "{"
        found = False
        if self._skip_ws() == "}":
            self._pos += 1
        else:
            while True:
                char = self._skip_ws()
                if char != '"':
                    raise self._expected("a member name in quotes", "the top-level object")
                key = self._value("a member name")
                if self._skip_ws() != ":":
                    raise self._expected("':'", f"the member name {key!r}")
                self._pos += 1
                if key == "traceEvents":
                    if self._skip_ws() != "[":
                        raise self._expected("'[' (traceEvents must be an array of events)", '"traceEvents":')
                    found = True
                    yield from self._events()
                else:
                    self._skip_ws()
                    self.meta[key] = self._value(f"the top-level member {key!r}")
                char = self._skip_ws()
                if char == ",":
                    self._pos += 1
                    continue
                if char == "}":
                    self._pos += 1
                    break
                raise self._expected("',' or '}'", "a top-level member")
        if not found:
            members = ", ".join(sorted(self.meta)[:8]) or "none"
            raise self.error(
                f"is a JSON object without a traceEvents array (members: {members}); "
                "expected a PyTorch profiler trace"
            )

    def _expected(self, what: str, after: str, event: int | None = None) -> DlexploreError:
        if self._pos >= len(self._buf):
            return self.error(
                f"the JSON text ends after {after}; expected {what} (truncated file?)",
                offset=self._offset(self._pos),
                event=event,
            )
        found = self._buf[self._pos : self._pos + 20]
        return self.error(
            f"found {found!r} after {after}; expected {what}", offset=self._offset(self._pos), event=event
        )

    def _events(self) -> Iterator[tuple[int, list[Any]]]:
        """The elements of the array whose "[" is at the current position, in batches."""
        self._pos += 1  # "["
        if self._skip_ws() == "]":
            self._pos += 1
            return
        while True:
            # Here the buffer is at the start of an element.
            while len(self._buf) - self._pos < self.chunk_chars and self._fill():
                pass
            limit = min(len(self._buf), self._pos + self.chunk_chars)
            cut = self._buf.rfind("},", self._pos, limit)
            batch = None
            if cut > self._pos:
                enabled = gc.isenabled()
                gc.disable()
                try:
                    batch = _loads("[" + self._buf[self._pos : cut + 1] + "]")
                except (ValueError, RecursionError):
                    # a cut inside a string or object, or a real error (the standard library's
                    # parser raises RecursionError on deep nesting): go slowly, event by event
                    batch = None
                finally:
                    if enabled:
                        gc.enable()
            if batch is not None:
                start = self.events_read
                self.events_read += len(batch)
                self._pos = cut + 2
                if self._skip_ws() == "]":
                    raise self.error(
                        "trailing comma at the end of traceEvents; expected another event",
                        offset=self._offset(self._pos),
                        event=self.events_read,
                    )
                yield start, batch
                continue
            start = self.events_read
            batch, done = self._events_one_by_one(limit)
            if batch:
                yield start, batch
            if done:
                return

    def _events_one_by_one(self, limit: int) -> tuple[list[Any], bool]:
        """Decode elements one at a time up to about ``limit``; (events, whether "]" was reached)."""
        batch: list[Any] = []
        enabled = gc.isenabled()
        gc.disable()
        try:
            while True:
                index = self.events_read
                batch.append(self._value("traceEvents", event=index))
                self.events_read += 1
                char = self._skip_ws()
                if char == "]":
                    self._pos += 1
                    return batch, True
                if char != ",":
                    raise self._expected("',' or ']' between events", f"event {index}", event=index)
                self._pos += 1
                if self._skip_ws() == "]":
                    raise self.error(
                        "trailing comma at the end of traceEvents; expected another event",
                        offset=self._offset(self._pos),
                        event=self.events_read,
                    )
                if self._pos >= limit or len(batch) >= 65536:
                    return batch, False
        finally:
            if enabled:
                gc.enable()
