"""The event records of an OTF2 archive read in order into region rows: each location's stack of
regions (Enter/Leave), the MPI collective or messages inside a region giving its message size and
peer, and the step a region marks. :mod:`dlexplore.traces.otf2` reads the archive and its
definitions and builds the :class:`~dlexplore.traces.schema.Trace`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputFileError

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


def _name(value: Any) -> str:
    """An OTF2 enum member's name (``RegionRole.COLL_ALL2ALL`` -> ``COLL_ALL2ALL``)."""
    return str(getattr(value, "name", value)).rsplit(".", 1)[-1]


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


class _EventReader:
    """Reads the archive's records in order, one location's region stack each: a row per region
    (its exclusive time, or its whole span with ``regions="inclusive"``), with the sizes of the MPI
    collective or message inside it, and the step rows."""

    COLUMNS = (
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

    def __init__(self, anchor: Path, regions: str, rank_of: dict, names: dict):
        self.anchor, self.regions, self.rank_of, self.names = anchor, regions, rank_of, names
        self.rows: dict[str, list] = {c: [] for c in self.COLUMNS}
        self.stacks: dict[Any, list[_Frame]] = {}
        self.pending: dict[Any, dict[str, Any]] = {}  # collective begun, not ended, per location
        self.calls = 0
        self.steps: list[tuple[Any, int, int, int]] = []  # (location, start, end, step)

    def emit(self, location: Any, frame: _Frame, start: int, end: int, category: str | None = None) -> int:
        rows = self.rows
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

    def event(self, index: int, location: Any, event: Any) -> None:
        kind = type(event).__name__
        time = int(event.time)
        stack = self.stacks.setdefault(location, [])
        if kind == "Enter":
            self._enter(location, event, time, stack)
        elif kind == "Leave":
            self._leave(index, location, event, time, stack)
        elif kind == "MpiCollectiveBegin":
            self.pending[location] = {"begin": time}
        elif kind == "MpiCollectiveEnd":
            self._collective_end(location, event, time, stack)
        elif kind in ("MpiSend", "MpiIsend", "MpiRecv", "MpiIrecv"):
            self._message(kind, event, stack)
        elif kind in ("ParameterInt", "ParameterUnsignedInt"):
            if stack and _STEP_PARAMETER.match(str(event.parameter.name)):
                stack[-1].step = int(event.value)

    def _enter(self, location: Any, event: Any, time: int, stack: list[_Frame]) -> None:
        if stack:
            top = stack[-1]
            top.children = True
            if self.regions == "exclusive" and time > top.resume:
                top.rows.append(self.emit(location, top, top.resume, time))
        self.calls += 1
        stack.append(_Frame(event.region, time, time, self.calls, len(stack)))

    def _leave(self, index: int, location: Any, event: Any, time: int, stack: list[_Frame]) -> None:
        if not stack or stack[-1].region is not event.region:
            open_name = stack[-1].region.name if stack else "nothing"
            raise InputFileError(
                self.anchor,
                f"location {self.names.get(location, location)!s}, event {index} "
                f"(time {time}): Leave of region {event.region.name!r} while "
                f"{open_name!r} is open; expected Leave to match the last Enter",
            )
        frame = stack.pop()
        if self.regions == "exclusive":
            if time > frame.resume or not frame.rows:
                frame.rows.append(self.emit(location, frame, frame.resume, time))
        else:
            frame.rows.append(self.emit(location, frame, frame.enter, time))
        _finish(
            frame,
            self.rows,
            location_is_gpu=_name(location.type) in ("GPU", "ACCELERATOR_STREAM"),
            inclusive=self.regions == "inclusive",
        )
        if _STEP_NAME.match(str(frame.region.name)) and frame.step is None:
            frame.step = int(_STEP_NAME.match(str(frame.region.name)).group(1))
        if frame.step is not None:
            self.steps.append((location, frame.enter, time, frame.step))
            row = self.emit(location, frame, frame.enter, time, "step")
            self.rows["depth"][row] = frame.depth
        if stack:
            stack[-1].resume = time

    def _collective_end(self, location: Any, event: Any, time: int, stack: list[_Frame]) -> None:
        begin = self.pending.pop(location, {}).get("begin", time)
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
            self.calls += 1
            frame = _Frame(_Named(f"MPI collective {op}"), begin, begin, self.calls, len(stack))
            frame.rows.append(self.emit(location, frame, begin, time, "communication"))
            target = frame
        target.collective, target.nbytes, target.has_bytes = collective, nbytes, True
        target.sent, target.received = sent, received
        target.peer = None if root is None else _peer_rank(comm, root, self.rank_of)
        target.communicator = str(getattr(comm, "name", ""))
        if target is not (stack[-1] if stack else None):
            _finish(target, self.rows, location_is_gpu=False, inclusive=True)

    def _message(self, kind: str, event: Any, stack: list[_Frame]) -> None:
        if not stack:
            return  # a message outside any region: nothing to attach its size to
        top = stack[-1]
        send = kind in ("MpiSend", "MpiIsend")
        top.collective = "send" if send or top.collective == "send" else "recv"
        top.nbytes += float(event.msg_length)
        top.has_bytes = True
        peer = int(event.receiver if send else event.sender)
        top.peer = _peer_rank(event.communicator, peer, self.rank_of)
        top.communicator = str(getattr(event.communicator, "name", ""))


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


_UINT32_UNDEFINED = 0xFFFFFFFF
