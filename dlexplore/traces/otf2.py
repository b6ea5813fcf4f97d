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
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, InputFileError
from .otf2_events import COLLECTIVE_OPS, _EventReader, _name
from .schema import Trace, make_events

__all__ = ["read", "COLLECTIVE_OPS"]


_RANK_IN_NAME = re.compile(r"rank\s*(\d+)", re.IGNORECASE)


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
    reader = _EventReader(anchor, regions, rank_of, names)
    index = -1
    try:
        for index, (location, event) in enumerate(trace.events):
            reader.event(index, location, event)
    except InputFileError:
        raise
    except Exception as err:  # the C reader fails on damaged event files while iterating
        raise InputFileError(
            anchor,
            f"event {index + 1}: the otf2 library cannot read on ({err}); expected a "
            "complete archive (truncated or damaged event files?)",
        ) from None
    still_open = {
        names.get(loc, str(loc)): [str(f.region.name) for f in st] for loc, st in reader.stacks.items() if st
    }
    if still_open:
        where = "; ".join(f"{loc}: {', '.join(open_)}" for loc, open_ in list(still_open.items())[:4])
        raise InputFileError(
            anchor,
            f"regions never left at the end of the trace ({where}); expected every Enter "
            "to have its Leave (a truncated trace?)",
        )
    return _trace(anchor, reader.rows, reader.steps, rank_of, names, offset, resolution, clock, definitions)


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
