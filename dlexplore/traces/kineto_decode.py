"""Kineto (PyTorch profiler) traces decoded straight into columns, one file or many in parallel.

    columns = decode_kineto("rank-0.json.gz")          # KinetoColumns: numpy columns + metadata
    columns.to_frame()                                  # the same as a pandas DataFrame
    sets = decode_kineto_files(paths)                   # several files in worker processes

Why: parsing a trace into Python objects (one dict per event, one object per value) is most of
the time a trace takes to load, whatever the parser (``benchmarks/bench_json_parsers.py``). With
msgspec (a core dependency) each chunk of events is decoded into ``msgspec.Struct`` s holding only
the fields the readers use (:mod:`.kineto_structs`); every other member is skipped without building
an object (with ``phases=``, every event of another phase too); the chunk's columns follow at C
speed (``operator.attrgetter`` into ``numpy.fromiter``, ``pandas.factorize``).
Without msgspec (a platform without its wheels) the standard library parses each chunk and
:func:`~dlexplore.traces.kineto_columns.python_chunk` builds the same columns; that path is also
the reference: a chunk that msgspec refuses, or whose values need checking (a ``null`` where a
number belongs, an integer beyond 64 bits), is read the reference way, so both give the same
columns and the same errors (``tests/test_kineto_decode.py`` compares them on every file).

The file is read in blocks of bytes (:class:`~dlexplore.traces.jsonchunks.EventChunks`): a load
holds about three chunks of JSON (a sixteenth of the file each, 1 to 8 MiB: see
:class:`~dlexplore.traces.jsonchunks.EventChunks`) plus the columns (about 90 bytes per event), whatever
the file's size. See :mod:`.kineto_columns` for what each column holds.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .jsonchunks import EventChunks
from .kineto_columns import (
    INT_COLUMNS,
    MEMORY_ARGS,
    ChunkColumns,
    Labels,
    new_labels,
    python_chunk,
)
from .kineto_structs import all_chunk, select_chunk, subset_chunk

try:
    import msgspec
except ImportError:  # pragma: no cover - exercised where msgspec has no wheel
    msgspec = None

__all__ = ["KinetoColumns", "decode_kineto", "decode_kineto_files", "iter_kineto_files", "PARSER"]

#: The decoder in use: ``"msgspec"`` (typed structs) or ``"json"`` (the standard library).
PARSER = "msgspec" if msgspec is not None else "json"


@dataclass
class KinetoColumns:
    """One trace file's events as columns (:mod:`.kineto_columns`) plus its top-level members.

    ``meta`` holds every top-level member except ``traceEvents`` (``distributedInfo``,
    ``deviceProperties``, ``baseTimeNanoseconds``, ``displayTimeUnit`` ...); ``labels`` the
    strings the codes of ``ph``, ``cat``, ``name`` and ``pid_label``/``tid_label`` stand for.
    """

    path: str
    meta: dict[str, Any]
    labels: dict[str, list[str]]
    columns: dict[str, np.ndarray]
    comm: dict[int, dict[str, Any]] = field(default_factory=dict)
    memory: dict[str, np.ndarray] = field(default_factory=dict)
    meta_args: dict[int, dict[str, Any]] = field(default_factory=dict)
    parser: str = PARSER
    #: Rows of communication calls (:data:`~.kineto_columns.COMM_NAME`) that carry an ``args``
    #: object, whether or not it holds any of :data:`~.kineto_columns.COMM_ARGS`.
    comm_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: ``lenient=True``: ``(event index, field, value)`` of every value that could not be read
    #: (see :func:`~.kineto_columns.python_chunk`); None when decoded strictly.
    problems: list[tuple[int, str, Any]] | None = None
    #: Events in ``traceEvents`` (kept or not).
    events_read: int = 0
    #: Chunks msgspec refused and the standard library read (0 when every chunk was fast).
    refused_chunks: int = 0
    #: ``phases=``: each row's index in ``traceEvents`` (None: every event has its row, in order).
    index: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.columns["ts"])

    def strings(self, column: str) -> np.ndarray:
        """A coded column (``ph``, ``cat``, ``name``) as an object array of strings."""
        key = column.removesuffix("_label")
        values = np.asarray(self.labels[key] + [""], dtype=object)
        return values[self.columns[column]]

    def to_frame(self) -> pd.DataFrame:
        """The events as a DataFrame: categoricals for strings, times in µs as written."""
        frame = {}
        for key in ("ph", "cat", "name"):
            frame[key] = pd.Categorical.from_codes(self.columns[key], categories=_unique(self.labels[key]))
        for key in ("pid", "tid"):
            numbers, text = self.columns[key], self.columns[f"{key}_label"]
            values = np.where(text >= 0, self.strings(f"{key}_label"), numbers.astype(object))
            frame[key] = values
        for key in ("ts", "dur", "bytes", *(c for c, _, _ in INT_COLUMNS)):
            frame[key] = self.columns[key]
        return pd.DataFrame(frame)


def _unique(values: list[str]) -> list[str]:
    return values if len(set(values)) == len(values) else list(dict.fromkeys(values))


def decode_kineto(
    path: str | os.PathLike,
    *,
    chunk_bytes: int | None = None,
    parser: str | None = None,
    lenient: bool = False,
    phases: Collection[str] | None = None,
) -> KinetoColumns:
    """Decode one Kineto trace (``.json`` or ``.json.gz``) into columns.

    ``parser``: ``"msgspec"`` (default when installed) or ``"json"`` (the standard library, the
    reference). Raises :class:`~dlexplore.errors.DlexploreError` naming the file, the event and the
    byte offset for anything that is not a complete trace. ``lenient``: a value that cannot be
    read (a string where a number belongs ...) is no error but goes to ``columns.problems`` (the
    reader decides which matter for the events it keeps); the JSON itself must still be sound.
    ``phases``: keep only the events of these ``ph`` values (lenient only): the columns hold those
    events in file order and ``columns.index`` their indices in ``traceEvents``; the other events
    are skipped unread (:mod:`.kineto_structs`).
    """
    use = parser or PARSER
    if use not in ("msgspec", "json") or (use == "msgspec" and msgspec is None):
        raise ValueError(f"parser={parser!r}: expected 'json'" + (" or 'msgspec'" if msgspec else ""))
    keep = None if phases is None else frozenset(phases)
    if keep is not None and not lenient:
        raise ValueError("phases= reads the events it keeps only: it needs lenient=True")
    stream = EventChunks(path, chunk_bytes=chunk_bytes)
    labels = new_labels()
    problems: list[tuple[int, str, Any]] | None = [] if lenient else None

    def reference(events: list[Any], first: int) -> ChunkColumns:
        chunk = python_chunk(events, first, labels, stream.error, problems)
        return chunk if keep is None else subset_chunk(chunk, first, labels["ph"], keep)

    def fast(view: memoryview, first: int) -> tuple[ChunkColumns, int]:
        if keep is not None:
            return select_chunk(view, first, labels, keep, lenient)
        return all_chunk(view, labels, lenient)

    chunks = list(stream.decode(fast if use == "msgspec" else None, reference))
    columns = _join(str(path), stream.meta, labels, chunks, use)
    columns.problems = problems
    columns.events_read = stream.events_read
    columns.refused_chunks = stream.refused
    if keep is not None:
        columns.index = np.concatenate([c.index for c in chunks]) if chunks else np.zeros(0, np.int64)
    return columns


def _join(
    path: str, meta: dict[str, Any], labels: dict[str, Labels], chunks: list[ChunkColumns], parser: str
) -> KinetoColumns:
    def cat(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)

    columns = {}
    for key, dtype in (
        ("ph", np.int32),
        ("cat", np.int32),
        ("name", np.int32),
        ("pid", np.int64),
        ("tid", np.int64),
        ("pid_label", np.int32),
        ("tid_label", np.int32),
        ("ts", np.float64),
        ("dur", np.float64),
        ("bytes", np.float64),
    ):
        columns[key] = cat([getattr(c, key) for c in chunks], dtype)
    for key, _, _ in INT_COLUMNS:
        columns[key] = cat([c.ints[key] for c in chunks], np.int64)
    comm: dict[int, dict[str, Any]] = {}
    meta_args: dict[int, dict[str, Any]] = {}
    rows, comm_rows, offset = [], [], 0
    for chunk in chunks:
        comm.update({offset + i: v for i, v in chunk.comm.items()})
        meta_args.update({offset + i: v for i, v in chunk.meta_args.items()})
        rows.append(chunk.memory_rows + offset)
        comm_rows.append(chunk.comm_rows + offset)
        offset += len(chunk.ts)
    memory = {"row": cat(rows, np.int64)}
    for key in MEMORY_ARGS:
        memory[key] = cat([c.memory[key] for c in chunks], np.float64)
    return KinetoColumns(
        path,
        meta,
        {k: v.values for k, v in labels.items()},
        columns,
        comm,
        memory,
        meta_args,
        parser,
        cat(comm_rows, np.int64),
    )


def _decode_one(args: tuple[str, int | None, str | None, bool, frozenset[str] | None]) -> KinetoColumns:
    path, chunk_bytes, parser, lenient, phases = args
    return decode_kineto(path, chunk_bytes=chunk_bytes, parser=parser, lenient=lenient, phases=phases)


#: Smallest set (bytes of JSON) decoded in worker processes by default, on 4 cores or more: a worker
#: imports dlexplore first (0.7-2.6 s measured here), which smaller sets or fewer cores do not win
#: back (2 loaded cores, 8 files of 12.5 MB: 2.2-2.5 s in this process, 6.3-7.8 s in 2 workers).
PARALLEL_MIN_BYTES = 256 * 2**20


def _spawn_safe() -> bool:
    """Whether worker processes can start: spawn re-imports ``__main__``, which a notebook, a console
    script or ``python -m`` allows, but a script without an ``if __name__ == "__main__":`` guard
    would run again (and stdin cannot be re-read)."""
    main = sys.modules.get("__main__")
    return getattr(main, "__file__", None) is None or getattr(main, "__spec__", None) is not None


def _default_workers(files: list[str]) -> int:
    from .cache import json_bytes

    cores = os.cpu_count() or 1
    if len(files) < 2 or cores < 4 or not _spawn_safe():
        return 1
    try:
        total = sum(json_bytes(Path(p)) for p in files)
    except OSError:
        return 1
    return min(len(files), cores) if total >= PARALLEL_MIN_BYTES else 1


def decode_kineto_files(
    paths: Sequence[str | os.PathLike],
    *,
    workers: int | None = None,
    chunk_bytes: int | None = None,
    parser: str | None = None,
    progress: bool | None = None,
    lenient: bool = False,
    phases: Collection[str] | None = None,
) -> list[KinetoColumns]:
    """Decode several trace files, in parallel worker processes; results in the order given.

    ``workers``: processes to decode in (default: one per core, at most one per file, for sets of
    at least :data:`PARALLEL_MIN_BYTES` of JSON on 4 cores or more where workers can start, see
    :func:`_spawn_safe`;
    1 decodes in this process; a script asking for more needs the ``__main__`` guard). Memory is
    bounded by the number of workers: each holds about three chunks of JSON and one file's columns
    and sends back its compact numpy columns only, so the peak is the set's columns plus
    ``workers`` x (24 MiB + one file's columns). ``progress`` shows a tqdm bar of files done
    (default: when someone watches, :func:`dlexplore.progress.progress_enabled`). ``lenient``,
    ``phases``: as for :func:`decode_kineto`. :func:`iter_kineto_files` yields them one at a time.
    """
    return list(
        iter_kineto_files(
            paths,
            workers=workers,
            chunk_bytes=chunk_bytes,
            parser=parser,
            progress=progress,
            lenient=lenient,
            phases=phases,
        )
    )


def iter_kineto_files(
    paths: Sequence[str | os.PathLike],
    *,
    workers: int | None = None,
    chunk_bytes: int | None = None,
    parser: str | None = None,
    progress: bool | None = None,
    lenient: bool = False,
    phases: Collection[str] | None = None,
) -> Iterator[KinetoColumns]:
    """:func:`decode_kineto_files` one file at a time, in the order given: a caller that turns each
    file's columns into something smaller before taking the next holds one file's columns at a
    time (with workers, also those decoded ahead of it)."""
    from ..progress import progress_bar

    files = [str(Path(p)) for p in paths]
    count = min(len(files), workers if workers is not None else _default_workers(files))
    tasks = [(p, chunk_bytes, parser, lenient, None if phases is None else frozenset(phases)) for p in files]
    done = 0
    with progress_bar(total=len(files), desc="traces", unit="file", enabled=progress) as bar:
        if count > 1:
            try:
                # spawn: a forked child of a process holding threads (Jupyter, Dask) may deadlock
                with ProcessPoolExecutor(max_workers=count, mp_context=get_context("spawn")) as pool:
                    for result in pool.map(_decode_one, tasks):
                        done += 1
                        bar.update(1)
                        yield result
                    return
            except BrokenProcessPool:
                warnings.warn(
                    "worker processes could not start (a script without an "
                    "'if __name__ == \"__main__\":' guard?); decoding here instead",
                    stacklevel=2,
                )
        for task in tasks[done:]:
            result = _decode_one(task)
            bar.update(1)
            yield result
            del result
