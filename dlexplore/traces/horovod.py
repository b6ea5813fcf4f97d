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
every step <NA>. Two things another tool's rewrite of a timeline can carry are read with a warning:
a cycle marker stamped later than the markers written after it gets <NA> (else it would stretch
its step to its time), and a rank-ready tick with a duration is read as an instant.

Reading goes in stages, a module each: the bytes and the JSON array, terminated or not
(:mod:`.horovod_json`); the events decoded straight into columns, 256 KiB of JSON at a time
(:mod:`.horovod_decode`: msgspec where installed, else the standard library); the rows made from
the columns (:mod:`.horovod_rows`) or, for a file with an event to name, one event at a time by
the reference (:mod:`.horovod_builder`), which also makes the table. Here: the options and ranks.
"""

from __future__ import annotations

import gc
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, InputFileError
from .fused import fused_operations
from .horovod_builder import OPERATIONS, Builder
from .horovod_decode import decode_horovod
from .horovod_json import CHUNK, MAX_INFLATED_BYTES, event_chunks, read_data
from .horovod_rows import rows_from_columns
from .schema import Trace

__all__ = ["read", "fused_operations", "OPERATIONS", "MAX_INFLATED_BYTES"]

FORMAT = "horovod"
_DIGITS = re.compile(r"(\d+)")
#: Bytes of JSON parsed at once (module-level so that tests can make chunks small).
_CHUNK = CHUNK


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
        builder, info = _state(path, fusion_offset)
        frame, details = builder.finish(file_rank, steps)
        fusion_offset += details.pop("fusions")
        frames.append(frame)
        files_meta.append({"file": str(path), "rank": file_rank, **info, **details})
        # where the file cannot tell (it warned), the ranks seen ready: what Trace.world_size
        # gives without a count from the trace
        world_size = max(world_size, details["world_size"] or details["world_size_at_least"] or 0)
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


def _state(path: Path, fusion_offset: int) -> tuple[Builder, dict[str, Any]]:
    """One file's rows before :meth:`Builder.finish`: from its columns when every event is sound
    (:mod:`.horovod_rows`), else event by event (:class:`Builder`), which names the odd event."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            columns = decode_horovod(path, chunk=_CHUNK)
            builder = rows_from_columns(columns, path, fusion_offset)
        except InputFileError:
            builder = None  # read again below, where the error is named as the reference names it
    if builder is not None:
        for w in said:  # the decoder's (a cut-off last event), said once the columns are kept
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return builder, {"terminated": columns.terminated, "partial_event_at": columns.partial_event_at}
    data = read_data(path)
    builder = Builder(path, fusion_offset)
    info = {"terminated": False, "partial_event_at": None}
    # Parsing makes millions of short-lived dicts that CPython's cyclic collector would scan
    # again and again (a third of the time here); nothing made here forms a cycle.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for chunk in event_chunks(data, path, info, _CHUNK):
            builder.add(chunk)
    finally:
        if collecting:
            gc.enable()
    return builder, info


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
