"""A Chrome trace JSON document as metadata plus chunks of whole events, for column decoders.

A profiler trace is one JSON object: a few small members (``schemaVersion``, ``deviceProperties``,
``distributedInfo``, ``baseTimeNanoseconds`` ...), some after the events, and one large member,
``traceEvents``, an array of event objects (a bare array of events is also accepted).
:class:`EventChunks` reads the (optionally gzip-compressed) file in blocks of bytes into one
sliding buffer (blocks are read, and gunzipped, ahead in a thread), so memory stays at about three
chunks whatever the file's size, and hands each window of about ``chunk_bytes`` bytes of whole
events to the caller's decoders:

* the window is cut after the last ``}`` that is followed by ``,`` and ``{`` (or by the array's
  ``]``); a cut inside a string or a nested object can never decode as a complete array (a quote,
  bracket or brace would be missing), so a wrong cut costs time but never gives wrong events;
* ``fast(view)`` decodes it in place (the bytes before and after the window become ``[`` and
  ``]`` while it runs: no copy), e.g. msgspec into typed structs; whatever it raises,
* ``events(list)`` gets the window parsed by the standard library instead; when that fails too,
  the window is decoded one event at a time, which pinpoints the error.

So the fast decoder never decides an error and never sees a bad window: the standard library's
reading is the reference. Every problem is a :class:`~dlexplore.errors.DlexploreError` naming the
file, the event index and the byte offset in the (decompressed) JSON text: truncated or corrupt
gzip, truncated JSON, bytes that are not UTF-8 (anywhere in the file, also where no decoder looks),
JSON nested too deeply, a value longer than :data:`MAX_VALUE_BYTES`, trailing commas, extra data.

Kept whole: the scanner's state (the buffer, the offset of each byte in the decompressed text, the
read-ahead thread, the cut of each window) is what every error message reads its byte offset and
event index from; apart, each piece would have to hand that state around.
"""

from __future__ import annotations

import codecs
import gzip
import json
import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from ..errors import DlexploreError

try:
    from isal import igzip
except ImportError:  # pragma: no cover - exercised where isal has no wheel
    igzip = None

__all__ = ["EventChunks", "MAX_VALUE_BYTES", "CHUNK_BYTES"]

T = TypeVar("T")

CHUNK_BYTES = 1 << 23  #: bytes of events decoded at a time (at most, by default)
MIN_CHUNK_BYTES = 1 << 20  #: ... and at least: below, per-chunk overhead shows
MAX_VALUE_BYTES = 1 << 27  #: the longest single JSON value (bytes): a bound against gzip bombs
_BLOCK = 1 << 22  # bytes read at a time
_WS = re.compile(rb"[ \t\r\n]*")
_DECODER = json.JSONDecoder()
#: The two shapes of a trace read, for messages: Kineto's object, and the bare array of events that
#: the legacy profiler's export_chrome_trace (torch <= 2.0) and other Chrome-trace writers produce.
_SHAPES = "a JSON object with a traceEvents array, or a bare JSON array of events"


class EventChunks:
    """One trace file, read as metadata (:attr:`meta`) plus decoded chunks of events.

    Use :meth:`decode` once; afterwards :attr:`meta` holds every top-level member except
    ``traceEvents`` and :attr:`events_read` the number of events.
    """

    def __init__(self, path: str | Path, *, chunk_bytes: int | None = None):
        self.path = Path(path)
        # None: a sixteenth of the JSON within [MIN_CHUNK_BYTES, CHUNK_BYTES] (set on opening), so
        # that the chunks in hand stay a small part of a small file's memory too
        self.chunk_bytes = None if chunk_bytes is None else max(int(chunk_bytes), 64)
        self.meta: dict[str, Any] = {}
        self.events_read = 0
        self.refused = 0  # windows the fast decoder gave to the standard library
        self.compressed = False
        self.bare_array = False
        self._raw: BinaryIO | None = None
        self._stream: BinaryIO | None = None
        self._ahead: _ReadAhead | None = None
        self._block = _BLOCK
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._buf = bytearray()
        self._pos = 0
        self._base = 0  # offset in the JSON text of self._buf[0]
        self._eof = False

    # -- public --------------------------------------------------------------------------------

    def decode(
        self, fast: Callable[[memoryview, int], tuple[T, int]] | None, events: Callable[[list[Any], int], T]
    ) -> Iterator[T]:
        """Yield, chunk after chunk, what ``fast`` or ``events`` made of it.

        ``fast(view, first_index)`` gets a JSON array of whole events (``view`` is valid only during
        the call) and returns (its result, the number of events); ``events(parsed, first_index)`` gets
        the same events as Python objects (the standard library's reading) and returns its result.
        ``fast=None`` uses ``events`` throughout.
        """
        self._open()
        try:
            yield from self._document(fast, events)
        finally:
            self.close()

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.close()  # first: its thread may be reading the stream
        for handle in (self._stream, self._raw):
            if handle is not None:
                handle.close()
        self._stream = self._raw = self._ahead = None

    def error(self, message: str, *, offset: int | None = None, event: int | None = None) -> DlexploreError:
        """A :class:`DlexploreError` naming this file, the byte offset and the event index."""
        where = []
        if event is not None:
            where.append(f"event {event}")
        if offset is not None:
            where.append(f"byte {offset} of the {'decompressed JSON text' if self.compressed else 'file'}")
        return DlexploreError(f"{self.path}" + (f" ({', '.join(where)})" if where else "") + f": {message}")

    # -- bytes -------------------------------------------------------------------------------------

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
        self.compressed = magic == b"\x1f\x8b"
        if self.chunk_bytes is None:
            self.chunk_bytes = min(CHUNK_BYTES, max(MIN_CHUNK_BYTES, self._json_size() // 16))
        self._block = min(_BLOCK, max(1 << 16, self.chunk_bytes // 2))
        self._stream = _gunzip(self._raw) if self.compressed else self._raw
        self._ahead = _ReadAhead(self._stream, self._block)

    def _json_size(self) -> int:
        """Bytes of JSON: the file's, or what gzip's trailer says it inflates to (mod 4 GiB)."""
        size = self._raw.seek(0, 2)
        if self.compressed and size >= 18:
            self._raw.seek(-4, 2)
            size = max(size, int.from_bytes(self._raw.read(4), "little"))
        self._raw.seek(0)
        return size

    def _gzip_error(self, fast_error: Exception) -> DlexploreError:
        """What is wrong with the gzip stream, as the standard library's reading says it.

        The fast decompressor (:func:`_gunzip`) says less (trailing bytes after the last member read
        as a truncation, its own exception classes), so the file is read again up to the standard
        library's error, whichever decompressor found the fault; in blocks of 64 KiB, so that the
        offset named is within 64 KiB of the fault."""
        at = 0
        try:
            with open(self.path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                while block := stream.read(1 << 16):
                    at += len(block)
        except EOFError:
            return self.error(
                "the gzip stream is truncated (the file ends before its end-of-stream "
                "marker); expected a complete .json.gz trace",
                offset=at,
            )
        except (OSError, zlib.error) as err:
            return self.error(f"corrupt gzip data ({err}); expected a complete .json.gz trace", offset=at)
        return self.error(f"corrupt gzip data ({fast_error}); expected a complete .json.gz trace", offset=at)

    def _fill(self) -> bool:
        """Append a block to the buffer (first dropping what was consumed); False at the end."""
        if self._eof:
            return False
        if self._pos > 1:  # keep one byte before the position: decode() writes "[" there
            del self._buf[: self._pos - 1]
            self._base += self._pos - 1
            self._pos = 1
        at = self._base + len(self._buf)
        try:
            data = self._ahead.read()
        except Exception as err:  # noqa: BLE001 - the standard library's gzip names what is wrong
            if not self.compressed:
                raise self.error(f"cannot be read ({err})", offset=at) from None
            raise self._gzip_error(err) from None
        pending = len(self._utf8.getstate()[0])
        if not data.isascii() or pending or not data:
            try:
                self._utf8.decode(data, final=not data)
            except UnicodeDecodeError as err:
                raise self.error(
                    f"is not UTF-8 text ({err.reason}); expected a JSON trace",
                    offset=at - pending + max(err.start, 0),
                ) from None
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    def _offset(self, pos: int | None = None) -> int:
        return self._base + (self._pos if pos is None else pos)

    def _skip_ws(self) -> int:
        """Skip whitespace; the next byte (-1 at the end of the document)."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return -1

    def _value(self, what: str, event: int | None = None) -> Any:
        """Decode the JSON value at the current position with the standard library."""
        size = 1 << 16
        while True:
            while len(self._buf) - self._pos < size and self._fill():
                pass
            text, _ = codecs.utf_8_decode(bytes(self._buf[self._pos : self._pos + size]), "strict", False)
            try:
                value, end = _DECODER.raw_decode(text)
            except RecursionError:
                raise self.error(
                    f"JSON nested too deeply in {what}; expected a Chrome trace",
                    offset=self._offset(),
                    event=event,
                ) from None
            except json.JSONDecodeError as err:
                more = len(self._buf) - self._pos > len(text) or not self._eof
                truncated = err.pos >= len(text) - 8 or err.msg.startswith("Unterminated string")
                if truncated and more and size < MAX_VALUE_BYTES:
                    size = min(size * 4, MAX_VALUE_BYTES)
                    continue
                if truncated and more:
                    raise self.error(
                        f"a JSON value in {what} longer than {MAX_VALUE_BYTES} bytes (or "
                        "not closed); expected a Chrome trace",
                        offset=self._offset(),
                        event=event,
                    ) from None
                raise self.error(
                    f"invalid or truncated JSON in {what}: {err.msg}; expected a complete "
                    f"Chrome trace ({_SHAPES})",
                    offset=self._offset() + len(text[: err.pos].encode()),
                    event=event,
                ) from None
            except ValueError as err:  # an integer of more digits than Python converts (4,300)
                raise self.error(
                    f"a number in {what} that cannot be read ({err}); expected a Chrome trace",
                    offset=self._offset(),
                    event=event,
                ) from None
            nbytes = end if text.isascii() else len(text[:end].encode())
            if end == len(text) and (len(self._buf) - self._pos > nbytes or not self._eof):
                if size >= MAX_VALUE_BYTES:  # a number as long as the bound: not a trace's
                    raise self.error(
                        f"a JSON value in {what} longer than {MAX_VALUE_BYTES} bytes; "
                        "expected a Chrome trace",
                        offset=self._offset(),
                        event=event,
                    )
                size = min(size * 2, MAX_VALUE_BYTES)  # a number at the end of the window may go on
                continue
            self._pos += nbytes
            return value

    def _expected(self, what: str, after: str, event: int | None = None) -> DlexploreError:
        if self._pos >= len(self._buf):
            return self.error(
                f"the JSON text ends after {after}; expected {what} (truncated file?)",
                offset=self._offset(),
                event=event,
            )
        found = bytes(self._buf[self._pos : self._pos + 20]).decode("utf-8", "replace")
        return self.error(
            f"found {found!r} after {after}; expected {what}", offset=self._offset(), event=event
        )

    # -- grammar -----------------------------------------------------------------------------------

    def _document(self, fast, events) -> Iterator[Any]:
        first = self._skip_ws()
        if self._buf[self._pos : self._pos + 3] == b"\xef\xbb\xbf":
            self._pos += 3
            first = self._skip_ws()
        if first == ord("["):
            self.bare_array = True
            yield from self._events(fast, events)
        elif first == ord("{"):
            yield from self._object(fast, events)
        elif first == -1:
            raise self.error("is empty; expected a PyTorch profiler trace (JSON)")
        else:
            found = bytes(self._buf[self._pos : self._pos + 20]).decode("utf-8", "replace")
            raise self.error(
                f"starts with {found!r}; expected a PyTorch profiler trace ({_SHAPES})",
                offset=self._offset(),
            )
        if self._skip_ws() != -1:
            found = bytes(self._buf[self._pos : self._pos + 20]).decode("utf-8", "replace")
            raise self.error(f"extra data after the end of the trace ({found!r})", offset=self._offset())

    def _object(self, fast, events) -> Iterator[Any]:
        self._pos += 1  # "{"
        found = False
        if self._skip_ws() == ord("}"):
            self._pos += 1
        else:
            while True:
                if self._skip_ws() != ord('"'):
                    raise self._expected("a member name in quotes", "the top-level object")
                key = self._value("a member name")
                if self._skip_ws() != ord(":"):
                    raise self._expected("':'", f"the member name {key!r}")
                self._pos += 1
                if key == "traceEvents":
                    if self._skip_ws() != ord("["):
                        raise self._expected("'[' (traceEvents must be an array of events)", '"traceEvents":')
                    found = True
                    yield from self._events(fast, events)
                else:
                    self._skip_ws()
                    self.meta[key] = self._value(f"the top-level member {key!r}")
                char = self._skip_ws()
                if char == ord(","):
                    self._pos += 1
                    continue
                if char == ord("}"):
                    self._pos += 1
                    break
                raise self._expected("',' or '}'", "a top-level member")
        if not found:
            members = ", ".join(sorted(self.meta)[:8]) or "none"
            raise self.error(
                f"is a JSON object without a traceEvents array (members: {members}); "
                "expected a PyTorch profiler trace"
            )

    def _events(self, fast, events) -> Iterator[Any]:
        """The elements of the array whose "[" is at the current position, chunk after chunk."""
        self._pos += 1  # "["
        if self._skip_ws() == ord("]"):
            self._pos += 1
            return
        while True:  # here the buffer is at the start of an element
            while len(self._buf) - self._pos < self.chunk_bytes and self._fill():
                pass
            cut = self._cut()
            result = None
            if cut > self._pos:
                result = self._try(fast, events, cut)
            if result is None:
                done = yield from self._one_by_one(events)
                if done:
                    return
                continue
            yield result
            self._pos = cut + 1
            char = self._skip_ws()
            if char == ord("]"):
                self._pos += 1
                return
            self._pos += 1  # "," (checked by _cut)
            if self._skip_ws() == ord("]"):
                raise self.error(
                    "trailing comma at the end of traceEvents; expected another event",
                    offset=self._offset(),
                    event=self.events_read,
                )

    def _cut(self) -> int:
        """The last "}" in the window followed by ", {" or by "]" (-1 if none)."""
        buf, hi = self._buf, min(len(self._buf), self._pos + self.chunk_bytes)
        while True:
            cut = buf.rfind(b"}", self._pos, hi)
            if cut < 0:
                return -1
            after = _WS.match(buf, cut + 1).end()
            if after < len(buf) and buf[after] == ord("]"):
                return cut
            if after < len(buf) and buf[after] == ord(","):
                nxt = _WS.match(buf, after + 1).end()
                if nxt < len(buf) and buf[nxt] == ord("{"):
                    return cut
            hi = cut

    def _try(self, fast, events, cut: int) -> Any:
        """The window [pos, cut] decoded by ``fast`` (in place) or the standard library; None if
        it is not a valid array of events (a wrong cut or an error: the caller goes event by event)."""
        buf, start = self._buf, self._pos
        before, after = buf[start - 1], buf[cut + 1]
        if fast is not None:
            buf[start - 1], buf[cut + 1] = ord("["), ord("]")
            try:
                with memoryview(buf) as whole:
                    view = whole[start - 1 : cut + 2]
                    try:
                        result = fast(view, self.events_read)
                    finally:
                        view.release()
            except Exception:  # noqa: BLE001 - anything the fast decoder dislikes: the reference decides
                result = None
            finally:
                buf[start - 1], buf[cut + 1] = before, after
            if result is not None:
                self.events_read += result[1]
                return result[0]
            self.refused += 1
        try:
            parsed = json.loads(b"[" + bytes(buf[start : cut + 1]) + b"]")
        except (ValueError, RecursionError):
            return None
        first = self.events_read
        self.events_read += len(parsed)
        return events(parsed, first)

    def _one_by_one(self, events) -> Iterator[Any]:
        """Decode up to a window of elements one at a time (exact errors); True once "]" is reached."""
        batch: list[Any] = []
        first = self.events_read
        start = self._offset()
        while True:
            index = self.events_read
            batch.append(self._value("traceEvents", event=index))
            self.events_read += 1
            char = self._skip_ws()
            if char == ord("]"):
                self._pos += 1
                yield events(batch, first)
                return True
            if char != ord(","):
                raise self._expected("',' or ']' between events", f"event {index}", event=index)
            self._pos += 1
            if self._skip_ws() == ord("]"):
                raise self.error(
                    "trailing comma at the end of traceEvents; expected another event",
                    offset=self._offset(),
                    event=self.events_read,
                )
            if self._offset() - start >= self.chunk_bytes or len(batch) >= 65536:
                yield events(batch, first)
                return False


def _gunzip(raw: BinaryIO) -> BinaryIO:
    """A gzip file's decompressed stream: ISA-L's inflate (``isal``, a core dependency) where it is
    installed, the standard library's zlib otherwise.

    ISA-L inflates these traces 3.5x faster (``benchmarks/bench_gunzip.py``: 0.013 against 0.047 CPU s
    for the 54 MB real trace of ``../shared/traces-real``), a tenth of that trace's load; it reads the
    same bytes from every sound file, and :meth:`EventChunks._gzip_error` names faults the way the
    standard library does."""
    if igzip is None:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return igzip.IGzipFile(fileobj=raw, mode="rb")


class _ReadAhead:
    """Blocks of a stream read (and gunzipped) in a thread while the caller decodes the ones before.

    File reads and inflation release the GIL while they run, so on two cores or more they overlap
    decoding. The standard library's gzip reader takes the GIL back many times per block: beside a
    thread that holds it (the decoder) it inflated the 54 MB real trace 120x slower here, ISA-L's
    (:func:`_gunzip`) 11x, in 0.02 s CPU alone. At most ``depth`` blocks wait, so memory stays
    bounded; an exception of the stream is raised by :meth:`read`, in the caller's thread.
    """

    def __init__(self, stream: BinaryIO, block: int, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(stream, block), daemon=True)
        self._thread.start()

    def _run(self, stream: BinaryIO, block: int) -> None:
        try:
            while not self._stop.is_set():
                data = stream.read(block)
                self._put((True, data))
                if not data:
                    return
        except BaseException as err:  # noqa: BLE001 - raised again where the caller reads
            self._put((False, err))

    def _put(self, item: tuple[bool, Any]) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def read(self) -> bytes:
        """The next block (b"" at the end); the stream's exception, if reading it failed."""
        ok, value = self._queue.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get_nowait()
            except queue.Empty:
                self._thread.join(0.01)
