"""Score-P OTF2 archives -> :class:`Trace`, through the PyPI ``otf2`` package (optional extra).

Give the anchor file (``traces.otf2``), its folder, or any file of the archive. The ``otf2``
package is Score-P's own reader (the one Score-P writes with); install it with
``pip install 'dlexplore[otf2]'``.

What becomes of the records (OTF2 3.x event and definition records):

``Enter``/``Leave``
    Regions, per location (an OTF2 location is a thread or a GPU stream: the ``stream`` column).
    By default (``regions="exclusive"``) each region call becomes the pieces of time in which it
    was the innermost region (its *exclusive* time, as Score-P's profiles count it), so that
    ``main`` around everything does not cover the MPI calls inside it; the pieces of one call share
    the ``call`` column. ``regions="inclusive"`` gives one row per call instead, and the regions
    that have regions inside them become ``annotation`` (their time is their children's).
    Categories: MPI regions for collectives, point-to-point and waits (region role ``COLL_*``,
    ``BARRIER``, ``POINT2POINT``; ``MPI_Wait*``, ``MPI_Test*``) are ``communication``, other MPI
    calls (``MPI_Init``) ``other``; regions with role ``DATA_TRANSFER`` ``memcpy``; file I/O
    (``FILE_IO``, paradigm ``IO``) ``data``; CUDA API calls on CPU threads ``runtime``; the
    measurement system's own regions ``other``; everything else (user, compiler, OpenMP, kernels)
    ``compute``.
``MpiCollectiveBegin``/``MpiCollectiveEnd``
    Give the enclosing MPI region its ``collective`` (from the collective operation), ``peer``
    (the root, where there is one), ``bytes_sent`` and ``bytes_received`` as Score-P records them,
    ``communicator``, and ``bytes``: the message size as nccl-tests counts it (the buffer of each
    rank for all-reduce, broadcast and reduce; the whole gathered buffer for all-gather,
    reduce-scatter, all-to-all, gather and scatter). Score-P counts bytes as if every rank sent
    its buffer to every rank (``scorep_mpi_coll.c``: all-reduce ``sent = N x count x size``), so
    ``bytes`` is derived from them with the communicator's size ``N``, assuming the buffers were
    not ``MPI_IN_PLACE`` (in place, Score-P counts ``N - 1`` blocks and ``bytes`` is ``(N-1)/N`` of
    the buffer).
``MpiSend``/``MpiIsend``/``MpiRecv``/``MpiIrecv``
    Give the enclosing region (``MPI_Send``, ``MPI_Isend``, ``MPI_Recv``, the ``MPI_Wait`` that
    completes an ``MPI_Irecv``) ``collective`` ``send`` or ``recv``, ``bytes`` (the message length,
    summed when one region holds several messages), ``peer`` (the other rank).
``ParameterInt``/``ParameterUnsignedInt`` named ``step``, ``iteration`` or ``iter``
    (``SCOREP_USER_PARAMETER_INT64("iteration", i)``), and regions named like ``ProfilerStep#3``
    or ``step 3``, make the enclosing region call a ``step`` event: one more row, the whole call,
    category ``step``. Every event of the rank inside a step's time gets its number in ``step``.
Clock
    Timestamps are ticks; ``start`` is ``(time - global_offset) / timer_resolution`` seconds, from
    the ``ClockProperties`` definition (all locations share that clock in OTF2).
Ranks
    The position of the location in the MPI ``COMM_LOCATIONS`` group (Score-P lists the MPI
    ranks' locations there in rank order); other locations of the same process (threads, GPU
    streams: their location group, or the process group that created an accelerator group) get
    its rank. Without MPI, ``rank N`` in the location group's name, else the order of the process
    location groups (with a warning).

Errors name the archive, and for events the location and the event's index and time: an archive
that the ``otf2`` library cannot open, a ``Leave`` that does not match the ``Enter`` before it,
regions still open at the end (a truncated trace).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, InputFileError
from .schema import Trace, make_events

__all__ = ["read", "COLLECTIVE_OPS"]

#: OTF2 ``CollectiveOp`` name -> collective (schema names; "" where there is none).
COLLECTIVE_OPS = {
    "BARRIER": "barrier",
    "BCAST": "broadcast",
    "GATHER": "gather",
    "GATHERV": "gather",
    "SCATTER": "scatter",
    "SCATTERV": "scatter",
    "ALLGATHER": "allgather",
    "ALLGATHERV": "allgather",
    "ALLTOALL": "alltoall",
    "ALLTOALLV": "alltoall",
    "ALLTOALLW": "alltoall",
    "ALLREDUCE": "allreduce",
    "REDUCE": "reduce",
    "REDUCE_SCATTER": "reduce_scatter",
    "REDUCE_SCATTER_BLOCK": "reduce_scatter",
    "SCAN": "",
    "EXSCAN": "",
}

_COMM_ROLES = {
    "COLL_ALL2ALL",
    "COLL_ALL2ONE",
    "COLL_ONE2ALL",
    "COLL_OTHER",
    "BARRIER",
    "IMPLICIT_BARRIER",
    "POINT2POINT",
}
_STEP_NAME = re.compile(
    r"^(?:ProfilerStep#|step[\s_#:=-]*|iteration[\s_#:=-]*|iter[\s_#:=-]*)(\d+)$", re.IGNORECASE
)
_STEP_PARAMETER = re.compile(r"^(?:step|iteration|iter)$", re.IGNORECASE)
_RANK_IN_NAME = re.compile(r"rank\s*(\d+)", re.IGNORECASE)
_UINT32_UNDEFINED = 0xFFFFFFFF


@dataclass
class _Frame:
    """A region call open on one location."""

    region: Any
    enter: int  # ticks
    resume: int  # ticks: when this call last became the innermost
    call: int
    depth: int
    rows: list[int] = field(default_factory=list)  # its exclusive pieces
    children: bool = False
    collective: str = ""
    nbytes: float = 0.0
    has_bytes: bool = False
    sent: float = np.nan
    received: float = np.nan
    peer: int | None = None
    communicator: str = ""
    step: int | None = None


def read(paths: Sequence[Path], *, regions: str = "exclusive", batch_events: int = 10_000) -> Trace:
    """Read one Score-P OTF2 archive (see the module docstring for what becomes of each record).

    ``paths`` are the anchor file ``traces.otf2``, its folder, or files of the archive; all must
    belong to one archive. ``regions`` is ``"exclusive"`` (default) or ``"inclusive"``.
    ``batch_events`` is how many events the ``otf2`` reader hands over at once. Times in seconds.
    """
    if regions not in ("exclusive", "inclusive"):
        raise DlexploreError(f"regions must be 'exclusive' or 'inclusive', got {regions!r}")
    anchor = _anchor(paths)
    try:
        import otf2
    except ImportError:
        raise DlexploreError(
            "reading OTF2 traces needs the otf2 package (Score-P's reader): pip install 'dlexplore[otf2]'"
        ) from None
    try:
        reader_context = otf2.reader.open(str(anchor), batch_events=batch_events)
        trace = reader_context.__enter__()
    except Exception as err:  # the C library's errors have no common Python base
        raise InputFileError(
            anchor,
            f"the otf2 library cannot open this archive ({err}); expected a Score-P "
            "OTF2 archive (its anchor file, e.g. traces.otf2)",
        ) from None
    try:
        return _read_archive(anchor, trace, regions)
    finally:
        reader_context.__exit__(None, None, None)


def _anchor(paths: Sequence[Path]) -> Path:
    anchors = set()
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.glob("*.otf2"))
            if not found:
                raise InputFileError(path, "is a folder without an OTF2 anchor file (*.otf2)")
            anchors.update(found)
        elif path.suffix == ".otf2":
            anchors.add(path)
        elif path.suffix in (".def", ".evt", ".snap", ".thumb"):
            # traces.def beside traces.otf2, or traces/<location>.evt inside its folder
            candidates = [path.with_suffix(".otf2"), path.parent.with_suffix(".otf2")]
            found = [c for c in candidates if c.is_file()]
            if not found:
                raise InputFileError(
                    path, "is part of an OTF2 archive, but no anchor file (*.otf2) is beside it"
                )
            anchors.add(found[0])
        else:
            raise InputFileError(
                path, "is not part of an OTF2 archive; expected the anchor file (*.otf2) or its folder"
            )
    if not anchors:
        raise DlexploreError("no OTF2 archive given")
    if len(anchors) > 1:
        listing = ", ".join(str(a) for a in sorted(anchors))
        raise DlexploreError(
            f"these paths hold {len(anchors)} OTF2 archives ({listing}); read one archive at "
            "a time (one Score-P run writes one archive for all its ranks)"
        )
    anchor = next(iter(anchors))
    if not anchor.is_file():
        raise InputFileError(anchor, "no such file; expected an OTF2 anchor file")
    return anchor


def _name(value: Any) -> str:
    """An OTF2 enum member's name (``RegionRole.COLL_ALL2ALL`` -> ``COLL_ALL2ALL``)."""
    return str(getattr(value, "name", value)).rsplit(".", 1)[-1]


def _ranks(anchor: Path, definitions: Any) -> dict[Any, int]:
    """Location -> rank (see the module docstring)."""
    groups = list(definitions.groups)
    mpi = [g for g in groups if _name(g.group_type) == "COMM_LOCATIONS" and _name(g.paradigm) == "MPI"]
    process_rank: dict[Any, int] = {}
    if mpi:
        for rank, location in enumerate(mpi[0].members):
            process_rank.setdefault(location.group, rank)
    else:
        processes = [g for g in definitions.location_groups if _name(g.location_group_type) == "PROCESS"]
        named = {g: int(m.group(1)) for g in processes if (m := _RANK_IN_NAME.search(str(g.name)))}
        if len(named) == len(processes) and len(set(named.values())) == len(named):
            process_rank = named
        else:
            process_rank = {g: i for i, g in enumerate(processes)}
            if len(processes) > 1:
                warnings.warn(
                    f"{anchor}: no MPI location group and no 'rank N' in the location group names; "
                    "ranks follow the order of the process location groups",
                    stacklevel=4,
                )
    out: dict[Any, int] = {}
    for location in definitions.locations:
        group = location.group
        seen = set()
        while group not in process_rank and group is not None and group not in seen:
            seen.add(group)
            group = getattr(group, "creating_location_group", None)
        if group in process_rank:
            out[location] = process_rank[group]
    return out


def _category(region: Any, location_is_gpu: bool, frame: _Frame) -> str:
    paradigm, role, name = _name(region.paradigm), _name(region.region_role), str(region.name)
    if paradigm == "MPI":
        if role in _COMM_ROLES or frame.collective or name.startswith(("MPI_Wait", "MPI_Test")):
            return "communication"
        return "other"
    if role == "DATA_TRANSFER":
        return "memcpy"
    if role in ("FILE_IO", "FILE_IO_METADATA") or paradigm == "IO":
        return "data"
    if paradigm == "MEASUREMENT_SYSTEM":
        return "other"
    if paradigm in ("CUDA", "HIP", "OPENCL") and not location_is_gpu and role != "KERNEL":
        return "runtime"
    return "compute"


def _bytes_of(collective: str, sent: float, received: float, size: int, rank_is_root: bool) -> float:
    """The nccl-tests message size from Score-P's byte counts (``scorep_mpi_coll.c``, not in place)."""
    n = max(size, 1)
    if collective == "allreduce":
        return sent / n
    if collective == "broadcast":
        return sent / n if rank_is_root else received
    if collective == "reduce":
        return sent
    if collective in ("allgather", "reduce_scatter", "alltoall"):
        return received if collective == "allgather" else sent
    if collective == "gather":
        return received if rank_is_root else sent * n
    if collective == "scatter":
        return sent if rank_is_root else received * n
    if collective == "barrier":
        return 0.0
    return max(sent, received)


def _read_archive(anchor: Path, trace: Any, regions: str) -> Trace:
    definitions = trace.definitions
    clock = definitions.clock_properties
    resolution = float(clock.timer_resolution)  # ticks per second
    if resolution <= 0:
        raise InputFileError(
            anchor,
            f"ClockProperties timer_resolution is {clock.timer_resolution}; expected ticks per second > 0",
        )
    offset = int(clock.global_offset)
    rank_of = _ranks(anchor, definitions)
    # A location is named by its OTF2 name ("Master thread"), made unique within its rank.
    seen = Counter((rank_of.get(loc), str(loc.name)) for loc in definitions.locations)
    names: dict[Any, str] = {
        loc: str(loc.name) if seen[(rank_of.get(loc), str(loc.name))] == 1 else f"{loc.name} #{loc._ref}"
        for loc in definitions.locations
    }

    rows: dict[str, list] = {
        c: []
        for c in (
            "location",
            "name",
            "category",
            "start",
            "end",
            "collective",
            "bytes",
            "sent",
            "received",
            "peer",
            "communicator",
            "depth",
            "call",
        )
    }
    stacks: dict[Any, list[_Frame]] = {}
    pending: dict[Any, dict[str, Any]] = {}  # collective begun, not ended, per location
    calls = 0
    steps: list[tuple[Any, int, int, int]] = []  # (location, start, end, step)

    def emit(location: Any, frame: _Frame, start: int, end: int, category: str | None = None) -> int:
        rows["location"].append(location)
        rows["name"].append(str(frame.region.name))
        rows["category"].append(category)
        rows["start"].append(start)
        rows["end"].append(end)
        for key in ("collective", "bytes", "sent", "received", "peer", "communicator"):
            rows[key].append(None)
        rows["depth"].append(frame.depth)
        rows["call"].append(frame.call)
        return len(rows["start"]) - 1

    index = -1
    try:
        for location, event in trace.events:
            index += 1
            kind = type(event).__name__
            time = int(event.time)
            stack = stacks.setdefault(location, [])
            if kind == "Enter":
                if stack:
                    top = stack[-1]
                    top.children = True
                    if regions == "exclusive" and time > top.resume:
                        top.rows.append(emit(location, top, top.resume, time))
                calls += 1
                stack.append(_Frame(event.region, time, time, calls, len(stack)))
            elif kind == "Leave":
                if not stack or stack[-1].region is not event.region:
                    open_name = stack[-1].region.name if stack else "nothing"
                    raise InputFileError(
                        anchor,
                        f"location {names.get(location, location)!s}, event {index} "
                        f"(time {time}): Leave of region {event.region.name!r} while "
                        f"{open_name!r} is open; expected Leave to match the last Enter",
                    )
                frame = stack.pop()
                if regions == "exclusive":
                    if time > frame.resume or not frame.rows:
                        frame.rows.append(emit(location, frame, frame.resume, time))
                else:
                    frame.rows.append(emit(location, frame, frame.enter, time))
                _finish(
                    frame,
                    rows,
                    location_is_gpu=_name(location.type) in ("GPU", "ACCELERATOR_STREAM"),
                    inclusive=regions == "inclusive",
                )
                if _STEP_NAME.match(str(frame.region.name)) and frame.step is None:
                    frame.step = int(_STEP_NAME.match(str(frame.region.name)).group(1))
                if frame.step is not None:
                    steps.append((location, frame.enter, time, frame.step))
                    row = emit(location, frame, frame.enter, time, "step")
                    rows["depth"][row] = frame.depth
                if stack:
                    stack[-1].resume = time
            elif kind == "MpiCollectiveBegin":
                pending[location] = {"begin": time}
            elif kind == "MpiCollectiveEnd":
                begin = pending.pop(location, {}).get("begin", time)
                op = _name(event.collective_op)
                collective = COLLECTIVE_OPS.get(op, op.lower())
                comm = event.communicator
                size = _comm_size(comm)
                root = None if int(event.root) == _UINT32_UNDEFINED else int(event.root)
                members = getattr(getattr(comm, "group", None), "members", None) or ()
                is_root = root is not None and root < len(members) and members[root] is location
                sent, received = float(event.size_sent), float(event.size_received)
                nbytes = _bytes_of(collective, sent, received, size, is_root)
                target = stack[-1] if stack and _name(stack[-1].region.paradigm) == "MPI" else None
                if target is None:  # a collective outside any MPI region: a row of its own
                    calls += 1
                    frame = _Frame(_Named(f"MPI collective {op}"), begin, begin, calls, len(stack))
                    frame.rows.append(emit(location, frame, begin, time, "communication"))
                    target = frame
                target.collective, target.nbytes, target.has_bytes = collective, nbytes, True
                target.sent, target.received = sent, received
                target.peer = None if root is None else _peer_rank(comm, root, rank_of)
                target.communicator = str(getattr(comm, "name", ""))
                if target is not (stack[-1] if stack else None):
                    _finish(target, rows, location_is_gpu=False, inclusive=True)
            elif kind in ("MpiSend", "MpiIsend", "MpiRecv", "MpiIrecv"):
                if not stack:
                    continue  # a message outside any region: nothing to attach its size to
                top = stack[-1]
                send = kind in ("MpiSend", "MpiIsend")
                top.collective = "send" if send or top.collective == "send" else "recv"
                top.nbytes += float(event.msg_length)
                top.has_bytes = True
                peer = int(event.receiver if send else event.sender)
                top.peer = _peer_rank(event.communicator, peer, rank_of)
                top.communicator = str(getattr(event.communicator, "name", ""))
            elif kind in ("ParameterInt", "ParameterUnsignedInt"):
                if stack and _STEP_PARAMETER.match(str(event.parameter.name)):
                    stack[-1].step = int(event.value)
    except InputFileError:
        raise
    except Exception as err:  # the C reader fails on damaged event files while iterating
        raise InputFileError(
            anchor,
            f"event {index + 1}: the otf2 library cannot read on ({err}); expected a "
            "complete archive (truncated or damaged event files?)",
        ) from None
    still_open = {
        names.get(loc, str(loc)): [str(f.region.name) for f in st] for loc, st in stacks.items() if st
    }
    if still_open:
        where = "; ".join(f"{loc}: {', '.join(open_)}" for loc, open_ in list(still_open.items())[:4])
        raise InputFileError(
            anchor,
            f"regions never left at the end of the trace ({where}); expected every Enter "
            "to have its Leave (a truncated trace?)",
        )
    return _trace(anchor, rows, steps, rank_of, names, offset, resolution, clock, definitions)


class _Named:
    """Stands in for a region where a record has none (a collective outside MPI regions)."""

    def __init__(self, name: str):
        self.name = name
        self.paradigm = "MPI"
        self.region_role = "COLL_OTHER"


def _comm_size(comm: Any) -> int:
    group = getattr(comm, "group", None) or getattr(comm, "groupA", None)
    members = getattr(group, "members", None)
    return len(members) if members is not None else 1


def _peer_rank(comm: Any, peer: int, rank_of: dict[Any, int]) -> int:
    """The world rank of rank ``peer`` of ``comm`` (OTF2 records the rank within the communicator)."""
    group = getattr(comm, "group", None)
    members = getattr(group, "members", None)
    if members is not None and 0 <= peer < len(members) and members[peer] in rank_of:
        return rank_of[members[peer]]
    return peer


def _finish(frame: _Frame, rows: dict[str, list], *, location_is_gpu: bool, inclusive: bool) -> None:
    """Categories and MPI details of a finished call onto its rows."""
    category = _category(frame.region, location_is_gpu, frame)
    if inclusive and frame.children and category == "compute":
        category = "annotation"  # its time is its children's, which have rows of their own
    last = frame.rows[-1] if frame.rows else None
    for row in frame.rows:
        rows["category"][row] = category
        rows["collective"][row] = frame.collective
        rows["communicator"][row] = frame.communicator
        rows["peer"][row] = frame.peer
        if row == last and frame.has_bytes:  # once per call, so that sums of bytes stay right
            rows["bytes"][row] = frame.nbytes
            rows["sent"][row] = frame.sent
            rows["received"][row] = frame.received


def _trace(
    anchor: Path,
    rows: dict[str, list],
    steps: list,
    rank_of: dict[Any, int],
    names: dict[Any, str],
    offset: int,
    resolution: float,
    clock: Any,
    definitions: Any,
) -> Trace:
    locations = rows["location"]
    missing = {names.get(loc, str(loc)) for loc in locations if loc not in rank_of}
    if missing:
        raise InputFileError(
            anchor,
            f"no rank for location(s) {sorted(missing)[:4]}: they are in no MPI group "
            "and belong to no process location group",
        )
    start = (np.asarray(rows["start"], dtype=np.int64) - offset) / resolution
    end = (np.asarray(rows["end"], dtype=np.int64) - offset) / resolution
    rank = np.array([rank_of[loc] for loc in locations], dtype=np.int32)
    step = np.full(len(start), -1, dtype=np.int64)
    if steps:
        by_rank: dict[int, list[tuple[float, float, int]]] = {}
        for location, s, e, n in steps:
            by_rank.setdefault(rank_of[location], []).append(
                ((s - offset) / resolution, (e - offset) / resolution, n)
            )
        for r, spans in by_rank.items():
            spans.sort()
            starts = np.array([s for s, _, _ in spans])
            ends = np.array([e for _, e, _ in spans])
            numbers = np.array([n for _, _, n in spans])
            mine = np.flatnonzero(rank == r)
            where = np.searchsorted(starts, start[mine], side="right") - 1
            ok = (where >= 0) & (start[mine] < ends[np.clip(where, 0, None)])  # steps are [start, end)
            step[mine[ok]] = numbers[where[ok]]
    step_array = pd.array(np.where(step >= 0, step, 0), dtype="Int64")
    step_array[step < 0] = pd.NA
    columns = {
        "rank": rank,
        "stream": np.array([names[loc] for loc in locations], dtype=object),
        "name": np.array(rows["name"], dtype=object),
        "category": np.array(rows["category"], dtype=object),
        "start": start,
        "duration": end - start,
        "bytes": np.array([np.nan if b is None else b for b in rows["bytes"]], dtype=float),
        "collective": np.array([c or "" for c in rows["collective"]], dtype=object),
        "step": step_array,
        "peer": pd.array(rows["peer"], dtype="Int64"),
        "bytes_sent": np.array([np.nan if b is None else b for b in rows["sent"]], dtype=float),
        "bytes_received": np.array([np.nan if b is None else b for b in rows["received"]], dtype=float),
        "communicator": np.array([c or "" for c in rows["communicator"]], dtype=object),
        "location": np.array([loc._ref for loc in locations], dtype=np.int64),
        "depth": np.array(rows["depth"], dtype=np.int32),
        "call": np.array(rows["call"], dtype=np.int64),
    }
    order = np.lexsort((columns["start"], columns["rank"]))
    columns = {k: (v[order] if isinstance(v, np.ndarray) else v.take(order)) for k, v in columns.items()}
    events = make_events(columns)
    processes = {g for g in definitions.location_groups if _name(g.location_group_type) == "PROCESS"}
    world = len(set(rank_of.values())) if rank_of else None
    meta = {
        "clock": {
            "timer_resolution": int(clock.timer_resolution),
            "global_offset": offset,
            "trace_length": int(clock.trace_length),
            "realtime_timestamp": int(clock.realtime_timestamp),
        },
        "locations": {
            int(loc._ref): {"name": str(loc.name), "group": str(loc.group.name), "rank": rank_of.get(loc)}
            for loc in definitions.locations
        },
        "processes": len(processes),
    }
    return Trace(events, "otf2", (str(anchor),), world, meta)
