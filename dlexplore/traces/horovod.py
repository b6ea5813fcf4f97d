"""Horovod timelines (``HOROVOD_TIMELINE=file``) into the event table of :mod:`.schema`.

What Horovod writes (``horovod/common/timeline.cc``; read for v0.28.1 and for the writer before
v0.20.1, which pull request #2215 replaced):

* A JSON array in the Chrome trace-event format, written only by the coordinator (rank 0) while the
  job runs. Each *tensor* is a Chrome "process": its ``pid`` is the tensor's index and a
  ``process_name`` metadata event (``"ph": "M"``) gives the tensor's name. v0.20.1+ also writes a
  ``pid`` 0 ``process_name`` whose args hold ``start_time_since_epoch_in_micros``.
* Per tensor, B/E ranges nest two deep. The outer range is either the negotiation
  (``NEGOTIATE_ALLREDUCE``, ``NEGOTIATE_BROADCAST`` ...: from the first rank's request to the last
  one's) or the operation (``ALLREDUCE``, ``ALLGATHER``, ``BROADCAST``, ``REDUCESCATTER``,
  ``ALLTOALL``, ``ADASUM`` ...). Inside an operation come its activities: ``QUEUE``,
  ``WAIT_FOR_DATA``, ``WAIT_FOR_OTHER_TENSOR_DATA``, ``INIT_FUSION_BUFFER``, ``ALLOCATE_OUTPUT``,
  ``MEMCPY_IN_FUSION_BUFFER``, ``MEMCPY_OUT_FUSION_BUFFER``, and the transfer itself
  (``NCCL_ALLREDUCE``, ``MPI_ALLREDUCE``, ``GLOO_ALLREDUCE``, ``GLOO_BCAST``, ``CCL_ALLGATHER``
  ...). ``E`` events carry no name; the operation's ``E`` carries ``"args": {"dtype": "float32",
  "shape": "[10, 64]"}`` (the output tensor) when the operation succeeded.
* Inside a negotiation, one ``"ph": "X"`` event with ``"dur": 0`` per rank whose request reached
  the coordinator, named by that rank's number (``"name": "1"``). They are written on response-cache
  misses only, so usually in the first step.
* ``HOROVOD_TIMELINE_MARK_CYCLES=1`` adds ``{"ph": "i", "name": "CYCLE_START", "s": "g"}``
  markers, one per cycle of Horovod's background loop (every ``HOROVOD_CYCLE_TIME`` ms, not per
  training step).
* ``ts`` is in microseconds since the timeline started (steady clock).
* The file is written while the job runs. Before v0.20.1 every event ends with ``},\\n`` and the
  ``]`` never comes: the array is *unterminated* with a trailing comma. Since v0.20.1 each event is
  written as ``,{...}]`` over the previous closing bracket, so a file copied mid-run or left by a
  killed job is valid JSON whose last ranges are still open, or (when a new tensor's metadata line
  was just flushed) ends in ``},\\n``. A copy taken during a write ends inside an event.

The reader accepts a missing ``]``, a trailing comma and a final partial event (dropped, with a
warning naming its byte offset), and warns about (and drops) ranges left open at the end. A corrupt
event anywhere else is an :class:`~dlexplore.errors.InputFileError` naming the file, the event's
index, its byte offset and line. Horovod writes tensor names unescaped, so a name with ``"`` or
``\\`` breaks the JSON at that event: the error says so.

Mapping to the schema (one row per range, tick or marker):

=============================== ================ ===============================================
Horovod                         category         why
=============================== ================ ===============================================
``NCCL_*``, ``MPI_*``,          communication    the transfer itself; ``collective`` from
``GLOO_*``, ``CCL_*``,                           :func:`normalize_collective_name`
``DDL_*`` transfers
``MEMCPY_*``,                   memcpy           copies into and out of the fusion/host buffers
``COPY_ALLGATHER_OUTPUT``
``NEGOTIATE_*``                 other            waiting for the slowest rank to ask for the
                                                 tensor: a wait, not a transfer, so it must not
                                                 swell the communication time
``QUEUE``, ``WAIT_FOR_*``,      other            waiting for a stream or for the framework's
``INIT_*``, ``ALLOCATE_*``                       compute, or one-off setup
``ALLREDUCE``, ``BROADCAST``    annotation       the operation's enclosing range (Horovod also
... (the operation)                              emits it as an NVTX range); counting it as
                                                 communication would count its waits and copies
                                                 twice
rank-ready ticks (``X``)        annotation       zero-length; ``ready_rank`` says which rank
``CYCLE_START``                 annotation       zero-length, on the stream ``cycles``
=============================== ================ ===============================================

Columns: ``stream`` is the tensor's name, ``name`` the activity as Horovod wrote it, ``rank`` 0
(the coordinator's view; Horovod writes no other rank's file), ``start``/``duration`` in seconds
since the timeline started. ``bytes`` is the tensor's size from the operation's ``dtype`` and
``shape`` (the output tensor: for allgather the gathered result, as nccl-tests counts it), on the
operation row and its communication and memcpy rows; NaN for waits, negotiations, and operations
whose ``E`` has no args (failed ones, and the PyTorch broadcasts of v0.28.1).

A fused operation's transfer and copies appear on the row of every tensor it carried, with the
same interval and each tensor's own ``bytes``: the union of intervals is right, a sum over rows
is not. :func:`fused_operations` collapses them into one row per message, with the fused bytes.

Extra columns: ``op`` (the tensor's operation kind, ``allreduce`` ...; "" for markers),
``fusion`` (id of the fused operation: tensors that Horovod processed in one response share it,
and each of their rows repeats the same transfer interval), ``fusion_bytes`` (bytes of the whole
fused buffer, the message that actually went over the wire), ``ready_rank`` (ticks), ``cycle``
(index of the ``CYCLE_START`` cycle the event started in, when marked), ``dtype``.

Steps: a Horovod timeline has no step marker (``CYCLE_START`` is a background-loop cycle, often
1 ms). With ``steps="auto"`` (the default) the tensors operated on most often (every gradient is
reduced once per step) define the steps: step *k* starts at the earliest start (negotiation
included) of those tensors' *k*-th operation and lasts until step *k+1* starts; every event gets
the step it starts in, events before step 0 (the initial broadcast) get <NA>. ``steps=None`` leaves
every step <NA>.

Large files are parsed 4 MB of JSON at a time (measured here: a 161 MB timeline of 2.76 M events
in about 5 s, peak RSS 620 MB with the interpreter, where ``json.load`` alone takes 2.6 s and
990 MB), and only a chunk that fails to parse is read again event by event, to say where.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import math
import re
import warnings
import zlib
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, InputFileError
from .schema import Trace, make_events, normalize_collective_name

__all__ = ["read", "fused_operations"]

FORMAT = "horovod"
#: The most bytes a .json.gz timeline may inflate to; a larger one is refused, not held (B).
MAX_INFLATED_BYTES = 1 << 34

#: Response types (horovod/common/message.cc ``Response::ResponseType_Name``): the outer range
#: of an operation.
OPERATIONS = frozenset(
    {"ALLREDUCE", "ALLGATHER", "BROADCAST", "REDUCESCATTER", "JOIN", "ADASUM", "ALLTOALL", "BARRIER", "ERROR"}
)
_TRANSFER_PREFIXES = ("NCCL_", "MPI_", "GLOO_", "CCL_", "DDL_", "SYCL_")
#: horovod/common/message.cc ``DataType_Name`` -> bytes per element.
_ITEMSIZE = {
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "bool": 1,
}
_US = 1e-6  # s per µs
_DIGITS = re.compile(r"(\d+)")
# Characters of JSON parsed at once: the parsed objects of one chunk are all that is held in memory
# besides the text and the compact columns.
_CHUNK = 1 << 22
# Where one event ends and the next begins. Inside Horovod's events "{" only follows ": " (args);
# a tensor name holding ',{"' would make a chunk fail to parse, and the exact scan takes over.
_BOUNDARY = re.compile(rb',\s*(?=\{")')
# Row kinds.
_MARKER, _TICK, _OP, _NEGOTIATION, _ACTIVITY = range(5)
_CATEGORIES = ["annotation", "other", "memcpy", "communication"]
_ANNOTATION, _OTHER, _MEMCPY, _COMMUNICATION = range(4)


def read(
    paths: Sequence[Path], *, rank: int | Sequence[int] | None = None, steps: str | None = "auto"
) -> Trace:
    """Read Horovod timelines into a :class:`~dlexplore.traces.schema.Trace`.

    Parameters
    ----------
    paths:
        One timeline (``.json``, or ``.json.gz``), or several (see ``rank``).
    rank:
        The rank of each file. Horovod writes one timeline per job, on rank 0, so one file is rank
        0. For several files give their ranks; otherwise they are taken from a number in each file
        name when all differ (``timeline-3.json`` is rank 3), else from their order, with a warning.
    steps:
        ``"auto"`` infers steps from the most often operated tensors (module docstring); ``None``
        leaves every step <NA>.

    Times are in seconds since each timeline started; ``bytes`` in bytes. Raises
    :class:`~dlexplore.errors.InputFileError` naming the file, event index and byte offset of a
    corrupt or incomplete event.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise DlexploreError("no Horovod timeline given")
    if steps not in ("auto", None):
        raise DlexploreError(f"steps={steps!r}: expected 'auto' or None")
    ranks = _ranks_of(paths, rank)
    frames: list[pd.DataFrame] = []
    files_meta: list[dict[str, Any]] = []
    world_size = len(set(ranks)) if len(paths) > 1 else 0
    fusion_offset = 0  # fusion ids stay distinct across files
    for path, file_rank in zip(paths, ranks, strict=True):
        data = _read_data(path)
        builder = _Builder(path, fusion_offset)
        info = {"terminated": False, "partial_event_at": None}
        # Parsing makes millions of short-lived dicts that CPython's cyclic collector would scan
        # again and again (a third of the time here); nothing made here forms a cycle.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for chunk in _event_chunks(data, path, info):
                builder.add(chunk)
        finally:
            if collecting:
                gc.enable()
        del data
        frame, details = builder.finish(file_rank, steps)
        fusion_offset += details.pop("fusions")
        frames.append(frame)
        files_meta.append({"file": str(path), "rank": file_rank, **info, **details})
        world_size = max(world_size, details["world_size"] or 0)
    if len(frames) == 1:
        events = frames[0]  # already in time order
    else:
        events = pd.concat(frames, ignore_index=True)
        for name in ("stream", "name", "category", "collective", "op", "dtype"):
            events[name] = events[name].astype(str).astype("category")
        events = events.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    events.attrs["clock"] = "seconds since the Horovod timeline started (steady clock of rank 0)"
    meta = {
        "view": "coordinator: Horovod records every tensor's negotiation and operation on rank 0",
        "files": files_meta,
        "steps": "inferred from the most often operated tensors" if steps == "auto" else "none",
    }
    return Trace(events, FORMAT, tuple(str(p) for p in paths), world_size or None, meta)


def fused_operations(events: pd.DataFrame) -> pd.DataFrame:
    """The event table with each fused transfer and copy as one row instead of one per tensor.

    Horovod repeats a fused operation's transfer (``GLOO_ALLREDUCE`` ...) and copies on the row of
    every tensor in it. Here the communication and memcpy rows that share ``rank``, ``fusion`` and
    ``name`` become one row: on the first tensor's stream, from the earliest start to the latest
    end [s], with ``bytes`` = ``fusion_bytes`` (the whole fused buffer, bytes) and a ``tensors``
    column (how many tensors it carried; 1 on every other row). Other rows are kept as they are.
    This is the table to count collectives and their sizes on (one row per message on the wire).
    """
    table = events.copy()
    table["tensors"] = np.ones(len(table), dtype=np.int64)
    fused = (
        table["category"].isin(["communication", "memcpy"]).to_numpy() & table["fusion"].notna().to_numpy()
    )
    if not fused.any():
        return table
    parts = table.loc[fused]
    parts = parts.assign(_end=parts["start"] + parts["duration"])
    grouped = parts.groupby(["rank", "fusion", "name"], observed=True, sort=False)
    first = grouped.head(1).copy()  # the earliest row: events are sorted by start
    first["start"] = grouped["start"].transform("min").loc[first.index]
    first["duration"] = grouped["_end"].transform("max").loc[first.index] - first["start"]
    first["bytes"] = first["fusion_bytes"]
    first["tensors"] = grouped["start"].transform("size").loc[first.index].astype(np.int64)
    joined = pd.concat([table.loc[~fused], first.drop(columns="_end")])
    joined = joined.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)
    joined.attrs = dict(events.attrs)
    return joined


def _ranks_of(paths: list[Path], rank: int | Sequence[int] | None) -> list[int]:
    """The rank of each file (see :func:`read`)."""
    if rank is not None:
        given = [int(rank)] if isinstance(rank, (int, np.integer)) else [int(r) for r in rank]
        if len(given) != len(paths):
            raise DlexploreError(f"rank={rank!r} gives {len(given)} rank(s) for {len(paths)} file(s)")
        return given
    if len(paths) == 1:
        return [0]
    numbers = []
    for path in paths:
        found = _DIGITS.findall(path.name.split(".")[0])
        numbers.append(int(found[-1]) if found else None)
    if None not in numbers and len(set(numbers)) == len(numbers):
        how = "the number in each file name"
        chosen = [int(n) for n in numbers if n is not None]
    else:
        how = "the order of the files"
        chosen = list(range(len(paths)))
    warnings.warn(
        f"{len(paths)} Horovod timelines: Horovod writes one per job, on rank 0; "
        f"taking their ranks from {how}: "
        + ", ".join(f"{p.name} -> {r}" for p, r in zip(paths, chosen, strict=True))
        + " (pass rank=[...] to say otherwise)",
        stacklevel=4,
    )
    return chosen


# -- the JSON array, terminated or not ---------------------------------------------------------------


def _read_data(path: Path) -> bytes:
    """The file's bytes (gunzipped if need be), checked to open a JSON array."""
    try:
        with open(path, "rb") as raw:
            data = raw.read()
        if data[:2] == b"\x1f\x8b":
            data = _gunzip(data, path)
    except FileNotFoundError:
        raise InputFileError(path, "no such file; expected a Horovod timeline") from None
    except (OSError, EOFError) as err:
        raise InputFileError(path, f"cannot be read ({err}); expected a Horovod timeline") from None
    start = len(data) - len(data.lstrip(b" \t\r\n"))
    if data[start : start + 3] == b"\xef\xbb\xbf":  # a byte-order mark
        start += 3
        start = len(data) - len(data[start:].lstrip(b" \t\r\n"))
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


def _gunzip(data: bytes, path: Path) -> bytes:
    """Inflate a .json.gz timeline, refusing more than :data:`MAX_INFLATED_BYTES` (a gzip bomb)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as stream:
            out = stream.read(MAX_INFLATED_BYTES + 1)
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
    if len(out) > MAX_INFLATED_BYTES:
        raise InputFileError(
            path,
            f"the gzip data inflates to more than {MAX_INFLATED_BYTES} bytes; "
            "expected a Horovod timeline (decompress it and read the .json)",
        )
    return out


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(
            path,
            f"byte offset {err.start}: not UTF-8 text; expected a Horovod timeline (a JSON array)",
            line=data.count(b"\n", 0, err.start) + 1,
        ) from None


def _event_chunks(data: bytes, path: Path, info: dict[str, Any]) -> Iterator[list[Any]]:
    """The array's events, a few MB of JSON at a time, at C speed while the JSON is sound.

    A chunk that does not parse sends the rest of the file to :func:`_scan`, event by event, to
    tell a cut-off end from corruption and to say where. ``info`` learns whether the array was
    closed and where a dropped partial event began.
    """
    pos = data.index(b"[") + 1
    body_end = len(data.rstrip())
    terminated = data[body_end - 1 : body_end] == b"]" and body_end - 1 >= pos
    stop = body_end - 1 if terminated else body_end
    seen = 0
    while pos < stop:
        found = _BOUNDARY.search(data, pos + _CHUNK, stop) if stop - pos > _CHUNK else None
        cut = found.start() if found else stop
        piece = data[pos:cut]
        if cut == stop:
            piece = piece.rstrip().rstrip(b",")
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


def _locate(path: Path, index: int) -> tuple[str, int | None]:
    """``"byte offset N"`` and the line of event ``index`` in the file, for error messages."""
    try:
        text = _decode(_read_data(path), path)
        decoder = json.JSONDecoder()
        pos = _skip_space(text, text.index("[") + 1)
        for _ in range(index):
            _, pos = decoder.raw_decode(text, pos)
            pos = _skip_space(text, pos)
            pos = _skip_space(text, pos + 1) if text[pos] == "," else pos
        return f"byte offset {_byte_offset(text, pos)}", _line(text, pos)
    except (DlexploreError, ValueError, IndexError):
        return "byte offset unknown", None


# -- events to rows ----------------------------------------------------------------------------------


def _category(name: str) -> int:
    """The category code of an activity (module docstring's table)."""
    if name.startswith("MEMCPY_") or name == "COPY_ALLGATHER_OUTPUT":
        return _MEMCPY
    if name.startswith(_TRANSFER_PREFIXES) and normalize_collective_name(name):
        return _COMMUNICATION
    return _OTHER


def _tensor_bytes(args: Any) -> tuple[float, str]:
    """Bytes and dtype from an operation's ``E`` args (``{"dtype": ..., "shape": "[a, b]"}``)."""
    if not isinstance(args, dict) or "shape" not in args:
        return np.nan, ""
    dtype = str(args.get("dtype", ""))
    shape = str(args["shape"]).strip()
    inner = shape[1:-1].strip()
    dims = [dim.strip() for dim in inner.split(",")] if inner else []
    if not (shape.startswith("[") and shape.endswith("]")) or not all(d.isdigit() for d in dims):
        raise ValueError(f'shape {shape!r} is not a list of sizes like "[10, 64]"')
    elements = 1
    for dim in dims:
        elements *= int(dim)
    itemsize = _ITEMSIZE.get(dtype)
    if itemsize and elements * itemsize >= 2**1023:  # the caller reports the ValueError with the event
        raise ValueError(f"shape {shape!r} is too large to be a tensor's")
    return (float(elements * itemsize) if itemsize else np.nan), dtype


def _finite_number(value: object) -> bool:
    """A JSON number that is a finite float (not a bool, a string, nan or an int beyond 2**1024)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


class _Builder:
    """Rows of the schema from one file's events, in compact arrays (µs until :meth:`finish`)."""

    def __init__(self, path: Path, fusion_offset: int):
        self.path = path
        self.pid = array("q")  # -1 for markers
        self.label = array("q")  # code into self.labels
        self.kind = array("b")
        self.start = array("d")  # µs
        self.end = array("d")  # µs; NaN while open
        self.occurrence = array("q")  # which operation of its tensor the row belongs to
        self.op = array("q")  # code into self.ops
        self.fusion = array("q")  # -1 for none
        self.labels: list[str] = []
        self.label_codes: dict[str, int] = {}
        self.ops: list[str] = [""]
        self.op_codes: dict[str, int] = {"": 0}
        self.tensor_names: dict[int, str] = {}
        self.open_ranges: dict[int, list[int]] = {}
        self.count: dict[int, int] = {}  # operations started per pid
        self.current_op: dict[int, int] = {}
        self.current_fusion: dict[int, int] = {}
        self.sizes: dict[tuple[int, int], tuple[float, str]] = {}
        self.occurrence_start: dict[int, list[float]] = {}
        self.markers: list[float] = []
        self.start_epoch: float | None = None
        self.seen = 0
        self.unmatched_end = 0
        self.skipped: dict[str, int] = {}
        self.group_name: str | None = None
        self.group_pids: set[int] = set()
        self.fusion_offset = fusion_offset
        self.fusion_id = fusion_offset - 1

    def fail(self, index: int, message: str) -> InputFileError:
        where, line = _locate(self.path, index)
        return InputFileError(self.path, f"event #{index} at {where}: {message}", line=line)

    def code(self, label: str) -> int:
        code = self.label_codes.get(label)
        if code is None:
            code = self.label_codes[label] = len(self.labels)
            self.labels.append(label)
        return code

    def op_code(self, op: str) -> int:
        code = self.op_codes.get(op)
        if code is None:
            code = self.op_codes[op] = len(self.ops)
            self.ops.append(op)
        return code

    def row(
        self, pid: int, label: str, kind: int, ts: float, end: float, occurrence: int, op: int, fusion: int
    ) -> int:
        self.pid.append(pid)
        self.label.append(self.code(label))
        self.kind.append(kind)
        self.start.append(ts)
        self.end.append(end)
        self.occurrence.append(occurrence)
        self.op.append(op)
        self.fusion.append(fusion)
        return len(self.start) - 1

    def add(self, events: list[Any]) -> None:
        """Turn a chunk of events into rows (the file's events in order, chunk after chunk)."""
        count, open_ranges, current_op = self.count, self.open_ranges, self.current_op
        nan = float("nan")
        for index, event in enumerate(events, start=self.seen):
            if type(event) is not dict:
                raise self.fail(index, f"is {type(event).__name__}; expected a trace event object")
            ph = event.get("ph")
            if ph == "M":
                self.metadata(event, index)
                continue
            if type(ph) is not str:
                raise self.fail(
                    index, f"'ph' is {ph!r}; expected the event's phase ('B', 'E', 'X', 'i' or 'M')"
                )
            ts = event.get("ts")
            if type(ts) is not int and type(ts) is not float:
                raise self.fail(index, f"'ts' is {ts!r}; expected the time in µs (a number)")
            if type(ts) is int and not -(2**63) <= ts < 2**63:
                raise self.fail(index, f"'ts' is {ts}; expected the time in µs (within 64 bits)")
            if ph == "E":
                self.group_name = None
                pid = self.pid_of(event, index)
                stack = open_ranges.get(pid)
                if not stack:
                    self.unmatched_end += 1
                    continue
                row = stack.pop()
                if ts < self.start[row]:
                    raise self.fail(
                        index,
                        f"ends at {ts} µs, before its range began at "
                        f"{self.start[row]:.0f} µs; expected 'ts' not to go back in time",
                    )
                self.end[row] = ts
                if self.kind[row] == _OP:
                    try:
                        self.sizes[(pid, self.occurrence[row])] = _tensor_bytes(event.get("args"))
                    except ValueError as err:
                        raise self.fail(
                            index, f'{err}; expected args {{"dtype": ..., "shape": "[...]"}}'
                        ) from None
                continue
            if ph == "i" or ph == "I":
                self.group_name = None
                self.markers.append(ts)
                self.row(-1, str(event.get("name", "")), _MARKER, ts, ts, -1, 0, -1)
                continue
            if ph != "B" and ph != "X":
                self.skipped[str(ph)] = self.skipped.get(str(ph), 0) + 1
                continue
            pid = self.pid_of(event, index)
            label = event.get("name")
            if type(label) is not str:
                raise self.fail(index, f"'name' is {label!r}; expected the activity's name (a string)")
            if ph == "X":
                self.group_name = None
                dur = event.get("dur", 0)
                if (type(dur) is not int and type(dur) is not float) or not 0 <= dur < 2**63:
                    raise self.fail(index, f"'dur' is {dur!r}; expected a duration in µs >= 0")
                self.row(pid, label, _TICK, ts, ts + dur, count.get(pid, 0), current_op.get(pid, 0), -1)
                continue
            k = count.get(pid, 0)
            if label in OPERATIONS:
                op = current_op[pid] = self.op_code(label.lower())
                count[pid] = k + 1
                # Horovod's PerformOperation starts every tensor of one response back to back: a run
                # of operation B events with one name is one (fused) operation.
                if self.group_name != label or pid in self.group_pids:
                    self.fusion_id += 1
                    self.group_pids = set()
                self.group_name = label
                self.group_pids.add(pid)
                self.current_fusion[pid] = self.fusion_id
                row = self.row(pid, label, _OP, ts, nan, k, op, self.fusion_id)
                self.first_start(pid, k, ts)
            elif label.startswith("NEGOTIATE_"):
                self.group_name = None
                op = current_op[pid] = self.op_code(label[len("NEGOTIATE_") :].lower())
                row = self.row(pid, label, _NEGOTIATION, ts, nan, k, op, -1)
                self.first_start(pid, k, ts)
            else:
                self.group_name = None
                row = self.row(
                    pid,
                    label,
                    _ACTIVITY,
                    ts,
                    nan,
                    k - 1 if k else 0,
                    current_op.get(pid, 0),
                    self.current_fusion.get(pid, -1),
                )
            stack = open_ranges.get(pid)
            if stack is None:
                stack = open_ranges[pid] = []
            stack.append(row)
        self.seen += len(events)

    def metadata(self, event: dict, index: int) -> None:
        args = event.get("args")
        if event.get("name") != "process_name" or not isinstance(args, dict):
            return
        if "name" in args:
            self.tensor_names[self.pid_of(event, index)] = str(args["name"])
        elif "start_time_since_epoch_in_micros" in args:
            value = args["start_time_since_epoch_in_micros"]
            if not _finite_number(value):
                raise self.fail(
                    index,
                    f"'start_time_since_epoch_in_micros' is {str(value)[:40]!r}; "
                    "expected a number of µs since the epoch",
                )
            self.start_epoch = float(value) * _US

    def pid_of(self, event: dict, index: int) -> int:
        pid = event.get("pid")
        if type(pid) is not int or not -(2**63) <= pid < 2**63:
            raise self.fail(index, f"'pid' is {pid!r}; expected the tensor's index (a 64-bit integer)")
        return pid

    def first_start(self, pid: int, k: int, ts: float) -> None:
        """Remember where operation ``k`` of ``pid`` began (its negotiation, if there was one)."""
        firsts = self.occurrence_start.get(pid)
        if firsts is None:
            firsts = self.occurrence_start[pid] = []
        if len(firsts) <= k:
            firsts.append(ts)

    def finish(self, rank: int, steps: str | None) -> tuple[pd.DataFrame, dict[str, Any]]:
        """The event table of this file, and what the file says about itself."""
        start = np.frombuffer(self.start, dtype=np.float64) * _US
        end = np.frombuffer(self.end, dtype=np.float64) * _US
        keep = ~np.isnan(end)
        if not keep.any():
            raise InputFileError(
                self.path,
                "holds no trace events, only metadata or ranges never "
                "closed; expected the ranges of at least one negotiation or operation",
            )
        self.warn_about_leftovers(keep)
        pid = np.frombuffer(self.pid, dtype=np.int64)
        label = np.frombuffer(self.label, dtype=np.int64)
        kind = np.frombuffer(self.kind, dtype=np.int8)
        occurrence = np.frombuffer(self.occurrence, dtype=np.int64)
        fusion = np.frombuffer(self.fusion, dtype=np.int64)
        n = len(start)

        label_category = np.array([_category(lab) for lab in self.labels], dtype=np.int64)
        category = np.where(
            kind == _ACTIVITY, label_category[label], np.where(kind == _NEGOTIATION, _OTHER, _ANNOTATION)
        )
        # The operation, its transfers and its copies move the tensor; waits and negotiations do not.
        carries = (kind == _OP) | (category == _MEMCPY) | (category == _COMMUNICATION)
        size = np.full(n, np.nan)
        dtype_codes = np.zeros(n, dtype=np.int64)
        dtypes = [""]
        if self.sizes:
            keys = np.array([p * (1 << 32) + o for p, o in self.sizes])
            values = np.array([b for b, _ in self.sizes.values()])
            dtype_of = {d: i for i, d in enumerate(dict.fromkeys(["", *(d for _, d in self.sizes.values())]))}
            dtypes = list(dtype_of)
            dcodes = np.array([dtype_of[d] for _, d in self.sizes.values()])
            order = np.argsort(keys)
            keys, values, dcodes = keys[order], values[order], dcodes[order]
            wanted = pid * (1 << 32) + occurrence
            at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
            hit = carries & (keys[at] == wanted) & (pid >= 0)
            size[hit] = values[at[hit]]
            dtype_codes[hit] = dcodes[at[hit]]
        # the bytes of each fused operation: its tensors' sizes added up (NaN if any is unknown)
        is_op = (kind == _OP) & keep
        fusion_bytes = np.full(n, np.nan)
        if is_op.any():
            local = fusion - self.fusion_offset
            width = int(local.max()) + 1
            totals = np.bincount(local[is_op], weights=size[is_op], minlength=width)
            present = np.bincount(local[is_op], minlength=width) > 0
            totals[~present] = np.nan
            has = fusion >= 0
            fusion_bytes[has] = totals[local[has]]
        step = self.steps(start) if steps == "auto" else np.full(n, -1)
        cycle = np.full(n, -1)
        if self.markers:
            cycle = np.searchsorted(np.sort(np.array(self.markers) * _US), start, side="right") - 1
        ready = np.array(
            [int(lab) if lab.isascii() and lab.isdigit() and len(lab) < 19 else -1 for lab in self.labels],
            dtype=np.int64,
        )
        ready_rank = np.where(kind == _TICK, ready[label], -1)

        pids = np.unique(pid)
        streams = [self.tensor_names.get(int(p), f"pid {p}") if p >= 0 else "cycles" for p in pids]
        stream_codes = np.searchsorted(pids, pid)
        collectives_of = [
            normalize_collective_name(lab) if c == _COMMUNICATION else ""
            for lab, c in zip(self.labels, label_category, strict=True)
        ]
        collective_names = list(dict.fromkeys(["", *collectives_of]))
        collective_code = np.array([collective_names.index(c) for c in collectives_of], dtype=np.int64)
        collective = np.where(category == _COMMUNICATION, collective_code[label], 0)

        rows = np.flatnonzero(keep)
        if np.any(np.diff(start[rows]) < 0):  # writer threads can interleave slightly
            rows = rows[np.argsort(start[rows], kind="stable")]
        columns: dict[str, Any] = {
            "rank": np.full(len(rows), rank, dtype=np.int32),
            "stream": _categorical(stream_codes[rows], streams),
            "name": _categorical(label[rows], self.labels),
            "category": _categorical(category[rows], _CATEGORIES),
            "start": start[rows],
            "duration": (end - start)[rows],
            "bytes": size[rows],
            "collective": _categorical(collective[rows], collective_names),
            "step": _nullable(step[rows]),
            "op": _categorical(np.frombuffer(self.op, dtype=np.int64)[rows], self.ops),
            "fusion": _nullable(fusion[rows]),
            "fusion_bytes": fusion_bytes[rows],
            "ready_rank": _nullable(ready_rank[rows]),
            "cycle": _nullable(cycle[rows]),
            "dtype": _categorical(dtype_codes[rows], dtypes),
        }
        ticks = ready_rank[ready_rank >= 0]
        details = {
            "open_ranges_dropped": int((~keep).sum()),
            "tensors": len(self.tensor_names),
            "start_time_since_epoch": self.start_epoch,
            "world_size": int(ticks.max()) + 1 if len(ticks) else None,
            "fusions": self.fusion_id + 1 - self.fusion_offset,
        }
        # the full-length arrays go before the table is built: only the kept rows' copies stay
        del start, end, size, category, collective, step, cycle, ready_rank, fusion_bytes, stream_codes
        return make_events(columns), details

    def steps(self, start: np.ndarray) -> np.ndarray:
        """Step of each row (module docstring), -1 for none; ``start`` in s."""
        if not self.count:
            return np.full(len(start), -1)
        most = max(self.count.values())
        per_step = [pid for pid, c in self.count.items() if c == most]
        bounds = np.array([min(self.occurrence_start[pid][k] for pid in per_step) for k in range(most)])
        bounds = np.maximum.accumulate(bounds * _US)
        return np.searchsorted(bounds, start, side="right") - 1

    def warn_about_leftovers(self, keep: np.ndarray) -> None:
        still_open = np.flatnonzero(~keep)
        if len(still_open):
            shown = sorted(
                {
                    f"{self.tensor_names.get(self.pid[r], self.pid[r])} ({self.labels[self.label[r]]})"
                    for r in still_open
                }
            )
            warnings.warn(
                f"{self.path}: {len(still_open)} range(s) still open at the end of the "
                "timeline, as Horovod leaves it while running or when killed; dropped: "
                + ", ".join(shown[:5])
                + (" ..." if len(shown) > 5 else ""),
                stacklevel=5,
            )
        if self.unmatched_end:
            warnings.warn(
                f"{self.path}: {self.unmatched_end} 'E' event(s) without an open range on "
                "their pid (a timeline started mid-operation); ignored",
                stacklevel=5,
            )
        if self.skipped:
            warnings.warn(
                f"{self.path}: events with phases Horovod does not write were ignored: "
                + ", ".join(f"{k!r} x{v}" for k, v in sorted(self.skipped.items())),
                stacklevel=5,
            )


def _categorical(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    """A categorical from codes; categories that repeat (two pids, one name) are merged."""
    # A lone surrogate (a "\\ud800" escape in the JSON) cannot be hashed as UTF-8: keep it visible.
    categories = [
        c.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(c, str) else c for c in categories
    ]
    if len(set(categories)) == len(categories):
        return pd.Categorical.from_codes(codes, categories=categories)
    return pd.Categorical(np.asarray(categories, dtype=object)[codes])


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    """Int64 with <NA> where ``values`` is negative (the builder's "none")."""
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, values < 0)
