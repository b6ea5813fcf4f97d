"""PyTorch profiler (Kineto) Chrome traces: ``.json`` / ``.json.gz``, one file per rank.

    trace = dlexplore.load_trace("runs/profile/")          # a folder of per-rank traces
    trace.events.groupby(["rank", "category"]).duration.sum()

Every complete event (``"ph": "X"``) becomes one row of the schema (:mod:`dlexplore.traces.schema`);
flow (``s``/``f``), metadata (``M``) events and Kineto's ``Trace`` spans do not. The allocator's
``[memory]`` instant events (``profile_memory=True``) become :attr:`Trace.memory`.
Timestamps (µs in the file) become seconds; ``start`` is ``ts`` plus the file's
``baseTimeNanoseconds`` less the earliest one of the set, so ranks share one time axis
(``trace.meta["epoch_ns"]`` is its zero in Unix nanoseconds). Files without
``baseTimeNanoseconds`` hold Unix times in µs. Times count from a whole number of 2**30 µs before
the set's first event (so that a 1.7e9 s Unix time keeps its nanoseconds).

Rank and world size come from the ``ranks=`` option (one per file), else the top-level
``distributedInfo`` (``rank``, ``world_size``, ``backend``), else a rank the file name states
(``rank3``, ``rank_3``, ``rank-3``, ``job_rank_3``; with a warning). Other numbers in a name are not
ranks (``worker0.1623143089861``, ``host_1016005``: process ids, time stamps). A single file whose
rank is unknown is shown as rank 0 with a warning and ``trace.meta["rank_unknown"]``; several such
files are an error asking for ``ranks=``. Two files with the same rank, mixed world sizes, or
several files that leave ranks out (``allow_missing_ranks=True`` accepts the last, listing them in
``trace.meta["missing_ranks"]``) are errors naming the files.

Traces of every Kineto release read alike: the 2021 category names (``Operator``, ``Runtime``,
``Kernel``, ``Memcpy``, ``Memset``; row ids such as ``"stream 7"``; ``external id``) are today's
``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``. Device events of other
accelerators count as the device's work: ROCm and XPU write ``kernel`` too; MTIA writes
``mtia_ccp_events`` (rows ``mtia:<pid>:<tid>``; names ``dma*`` are copies), Gaudi ``hpu_op``
(``hpu:``).

Categories
----------
=========================================================  ==================================
event (``cat``, ``name``)                                   category, collective
=========================================================  ==================================
``kernel`` named ``nccl...Kernel...`` (HTA's rule)         communication; the collective of
                                                            the call (:mod:`.kineto_comm`)
``kernel``, ``mtia_ccp_events``, ``hpu_op`` (others)        compute (``Memcpy*``/``dma*``:
                                                            memcpy)
``gpu_memcpy`` / ``gpu_memset``                             memcpy (``bytes`` from args) / memset
``cuda_runtime``, ``cuda_driver`` (and xpu/mtia/privateuse1) runtime
``cpu_op`` / ``user_annotation`` ``ProfilerStep#N``         step (sets ``step`` = N)
``enumerate(DataLoader)#...``                               data
``user_annotation`` ``gloo:*``                              communication, the collective, bytes
``c10d::*``, ``record_param_comms``, ``nccl:*`` (host)      communication, collective ""
``cpu_op`` (others)                                         cpu in GPU traces, compute in CPU-only
                                                            traces (no ``kernel`` events)
``user_annotation`` (others), ``gpu_user_annotation``       annotation
anything else (``python_function``, ``cuda_sync`` ...)      other
=========================================================  ==================================

One row per rank and collective operation carries ``collective`` (and ``bytes``): **the row that
does the work**. On GPUs that is the NCCL kernel on its CUDA stream. With gloo it is the
``gloo:*`` annotation on gloo's own ``pt_gloo_runloop`` thread: in the traces this module was
tested on (torch 2.13, DDP over gloo) ``c10d::allreduce_`` on the training thread only enqueues
the work (it ends before or just after the ``gloo:all_reduce`` starts on the other thread), and
carries no size of its own apart from its inputs. The host-side rows (``c10d::*``,
``record_param_comms``, the ``nccl:*`` annotation around the kernel launch) are category
communication with ``collective`` "" and no ``bytes``: they are the time the issuing thread
spends in communication calls, and counting them as operations would count every collective
twice. ``gpu_user_annotation`` copies of ``nccl:*`` / ``ProfilerStep#N`` on the GPU rows are
annotations for the same reason.

The collective, message size (``bytes``, as nccl-tests counts it), group and peer of each NCCL
kernel come from the kernel's own arguments or from the host calls around its launch
(``record_param_comms``, ``nccl:*``, ``c10d::*``): see :mod:`dlexplore.traces.kineto_comm`. So
``ncclDevKernel_Generic`` (NCCL >= 2.19) and the ``ncclKernel_SendRecv`` that NCCL runs for an
all-to-all take the collective the program called. For gloo, the element count of ``Input Dims``
(needs ``record_shapes=True``) times the size of ``Input type``, times the group size for
allgather and gather (whose outputs are that much larger than their inputs).

Steps: a host event belongs to the ``ProfilerStep#N`` interval of its rank that contains its
start. A GPU event belongs to the step of the launch (the ``cuda_runtime``/``cuda_driver`` event
with the same ``correlation``), else of the host op with its ``External id``; one whose launch is
not in any step (launched before the profiler started, or before the first step) has none (<NA>);
one that nothing links to a launch (no correlation id, or no launch events in the trace) belongs
to the last step that started before it (GPU work trails the host). The breakdown counts all of
them by time (:mod:`dlexplore.traces.breakdown`).

Extra columns: ``correlation`` (CUDA correlation id of kernels, copies and launches),
``group_size``, ``process_group`` and ``dtype`` (for collectives, when the trace says), ``peer``
(the global rank at the other end of a send or recv, when the trace says).
``trace.meta`` holds per rank the file, ``distributedInfo``, ``deviceProperties``,
``baseTimeNanoseconds`` and the thread names.

Large files are streamed (:mod:`dlexplore.traces._json`): the JSON is parsed a few MB at a time
and only the needed fields are kept, in column arrays.
"""

from __future__ import annotations

import gc
import re
import warnings
from collections.abc import Iterable
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from ._json import PARSER, ChromeTraceStream
from .kineto_comm import (
    DTYPE_BYTES,
    HOST_COMM_PREFIXES,
    RPC,
    CommArgs,
    EventColumns,
    Labels,
    resolve_communication,
)
from .schema import CATEGORIES, COLLECTIVES, Trace, make_events, normalize_collective_name

__all__ = ["read", "rank_from_filename", "DTYPE_BYTES"]

_OPTIONS = ("allow_missing_ranks", "chunk_chars", "ranks")

#: Kineto's categories as PyTorch 1.8-1.9 (2021) wrote them -> the names used since.
_CAT_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Python": "python_function",
}
#: Categories of events that run on a device -> the prefix of their rows (``cuda:<pid>:<tid>``).
#: ROCm and XPU builds of Kineto write ``kernel``/``gpu_memcpy`` too; MTIA writes
#: ``mtia_ccp_events``, Gaudi ``hpu_op``.
_DEVICE_CATS = {
    "kernel": "cuda",
    "gpu_memcpy": "cuda",
    "gpu_memset": "cuda",
    "gpu_user_annotation": "cuda",
    "cuda_sync": "cuda",
    "gpu_memory": "cuda",
    "mtia_ccp_events": "mtia",
    "hpu_op": "hpu",
}
_DEVICE_KINDS = ("cpu", "cuda", "mtia", "hpu")  # code 0 .. 3 of a row's prefix
#: Device categories whose events are work the device does (kernels, and what other devices call them).
_KERNEL_CATS = frozenset({"kernel", "mtia_ccp_events", "hpu_op"})
_RUNTIME_CATS = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "xpu_runtime",
        "xpu_driver",
        "mtia_runtime",
        "privateuse1_runtime",
        "privateuse1_driver",
        "hip_runtime",
    }
)
_COPY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
_HOST_OP_CATS = frozenset({"cpu_op", "user_annotation"})
_SKIPPED_CATS = frozenset({"Trace"})  # Kineto's whole-window spans (pid "Spans")
_NCCL_KERNEL = re.compile(r"^nccl.*Kernel|^rccl.*Kernel")  # HTA's rule; NCCL names change by version
_DEVICE_COPY = re.compile(r"^(?:hip)?(Memcpy|Memset)|^dma")  # copies named as kernels (MTIA: dma*)
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_DATA_PREFIX = "enumerate(DataLoader)"
_REQUIRED_KEYS = ("ts", "dur", "cat", "name", "pid", "tid")
_REQUIRED = itemgetter(*_REQUIRED_KEYS)
_ORIGIN_GRID = 2.0**30  # µs
_MAX_WORLD = 1 << 22  # ranks: far beyond any job, well within the int32 rank column
_MEMORY_ARGS = ("Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr")
_get = dict.get


def canonical_category(cat: str) -> str:
    """Kineto's category name as written since 2022 (``Operator`` -> ``cpu_op`` ...)."""
    return _CAT_ALIASES.get(cat, cat)


# Only an explicit rank: other numbers in names are process ids, hosts, times (worker0.1623143089861).
_RANK_PATTERN = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)(?!\d)", re.IGNORECASE)


def rank_from_filename(path: str | Path) -> int | None:
    """The rank a trace file's name states (``rank3``, ``rank_3``, ``rank-3``, ``_rank_3``), or None.

    Other numbers in a name (a process id, a host, a time stamp) are not ranks."""
    match = _RANK_PATTERN.search(Path(path).name)
    return int(match.group(1)) if match else None


class _RankFile:
    """The columns read from one file (one rank)."""

    def __init__(self, path: Path, names: Labels, cats: Labels, streams: Labels, chunk_chars: int | None):
        self.path = path
        self.names, self.cats, self.streams = names, cats, streams
        self.reader = ChromeTraceStream(path, **({"chunk_chars": chunk_chars} if chunk_chars else {}))
        self.parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("ts", "dur", "cat", "name", "stream", "corr", "ext")
        }
        self.comm: list[CommArgs] = []
        self.threads: dict[str, str] = {}
        self.rows = 0
        self.rank: int | None = None
        self.rank_known = True
        self.world_size: int | None = None
        self.memory: list[tuple] = []
        self.ts_origin = 0.0  # µs subtracted from ts (files without baseTimeNanoseconds)
        self.backend: str | None = None

    # -- reading ---------------------------------------------------------------------------

    def read(self) -> None:
        for start, batch in self.reader.batches():
            self._batch(start, batch)
        self.meta = self.reader.meta

    def _fail(self, index: int, message: str) -> DlexploreError:
        return self.reader.error(message, event=index)

    def _batch(self, start: int, batch: list[Any]) -> None:
        # C-level map/compress/itemgetter rather than Python loops: this is the hot path.
        try:
            phs = list(map(_get, batch, repeat("ph")))
        except TypeError:
            bad = next(i for i, e in enumerate(batch) if not isinstance(e, dict))
            raise self._fail(
                start + bad,
                f"is {type(batch[bad]).__name__} {str(batch[bad])[:40]!r}; "
                "expected a trace event (a JSON object with ph, name, ts ...)",
            ) from None
        is_x = list(map("X".__eq__, phs))
        events = list(compress(batch, is_x))
        if "M" in phs:
            self._metadata(compress(batch, map("M".__eq__, phs)))
        if "i" in phs:
            self._instants(start, batch, phs)
        if not events:
            return
        try:
            ts, dur, cat, name, pid, tid = zip(*map(_REQUIRED, events), strict=True)
        except KeyError:
            ts, dur, cat, name, pid, tid = (tuple(map(_get, events, repeat(k))) for k in _REQUIRED_KEYS)
        if "Trace" in cat:  # Kineto's whole-window spans are not events of the run
            keep = [not (isinstance(c, str) and c in _SKIPPED_CATS) for c in cat]
            events = list(compress(events, keep))
            ts, dur, cat, name, pid, tid = (tuple(compress(v, keep)) for v in (ts, dur, cat, name, pid, tid))
            flags = iter(keep)
            is_x = [x and next(flags) for x in is_x]
            if not events:
                return
        index = np.flatnonzero(is_x) + start
        ts = self._numbers(ts, "ts", index, events)
        dur = self._numbers(dur, "dur", index, events)
        negative = np.flatnonzero(dur < 0)
        if len(negative):
            i = negative[0]
            raise self._fail(
                int(index[i]),
                f"event {events[i].get('name')!r} has a negative dur ({dur[i]}); expected a duration >= 0 µs",
            )
        args = list(map(_get, events, repeat("args")))
        cat_codes = self._encode(self.cats, cat, "cat", index, events)
        gpu = _device_table(self.cats)[cat_codes]
        if gpu.any() or any(canonical_category(c) in _RUNTIME_CATS for c in set(cat) if isinstance(c, str)):
            # Links between host and device exist only in GPU traces.
            try:
                corr = [-1 if a is None else a.get("correlation", -1) for a in args]
                # 2021 releases spell it "external id" on device events and launches
                ext = [-1 if a is None else a.get("External id", a.get("external id", -1)) for a in args]
            except AttributeError:
                bad = next(i for i, a in enumerate(args) if a is not None and not isinstance(a, dict))
                raise self._fail(
                    int(index[bad]),
                    f"event {events[bad].get('name')!r} has args of type "
                    f"{type(args[bad]).__name__}; expected a JSON object",
                ) from None
            corr = self._ints(corr, "correlation", index, events)
            ext = self._ints(ext, "External id", index, events)
        else:
            corr = ext = np.full(len(events), -1, dtype=np.int64)
        name_codes = self._encode(self.names, name, "name", index, events)
        stream_codes = self._stream_codes(pid, tid, gpu)

        rows = self.rows
        parts = self.parts
        parts["ts"].append(ts)
        parts["dur"].append(dur)
        parts["cat"].append(cat_codes)
        parts["name"].append(name_codes)
        parts["stream"].append(stream_codes)
        parts["corr"].append(corr)
        parts["ext"].append(ext)
        self.rows += len(events)

        # Only copies and communication (kernels, host calls, gloo annotations) carry sizes.
        sized = np.flatnonzero(self._wanted_names()[name_codes] | _copy_cat_table(self.cats)[cat_codes])
        for i in sized.tolist():
            a = args[i]
            if a:
                if not isinstance(a, dict):
                    raise self._fail(
                        int(index[i]),
                        f"event {events[i].get('name')!r} has args of type "
                        f"{type(a).__name__}; expected a JSON object",
                    )
                info = CommArgs(rows + i, a)
                field = info.oversized()
                if field:
                    raise self._fail(
                        int(index[i]),
                        f"event {events[i].get('name')!r} has args {field!r} = "
                        f"{str(a[field])[:20]}... ({len(str(a[field]))} digits); expected a count "
                        "that fits 64 bits",
                    )
                self.comm.append(info)

    def _numbers(self, values: tuple, field: str, index: np.ndarray, events: list[dict]) -> np.ndarray:
        try:
            array = np.fromiter(values, dtype=np.float64, count=len(values))
            if not np.isnan(array).any():
                return array
        except (TypeError, ValueError, OverflowError):
            pass
        bad = next(
            (
                i
                for i, v in enumerate(values)
                if isinstance(v, bool)
                or not isinstance(v, (int, float))
                or v != v
                or (isinstance(v, int) and abs(v) >= 2**1023)  # beyond a float
            ),
            None,
        )
        if bad is None:
            return np.asarray(values, dtype=np.float64)
        value = values[bad]
        what = "has no" if value is None else f"has {field} = {value!r} ({type(value).__name__}), not a"
        raise self._fail(
            int(index[bad]),
            f"complete event {events[bad].get('name')!r} {what} {field}; "
            f'expected a number of µs ("ph": "X" events need ts and dur)',
        )

    def _encode(
        self, strings: Labels, values: tuple, field: str, index: np.ndarray, events: list
    ) -> np.ndarray:
        try:
            return strings.encode(values)
        except (TypeError, ValueError):  # a list or object where a string belongs
            bad = next(i for i, v in enumerate(values) if isinstance(v, (list, dict)))
            raise self._fail(
                int(index[bad]), f"has {field} = {str(values[bad])[:40]!r}; expected a string"
            ) from None

    def _ints(self, values: list[Any], field: str, index: np.ndarray, events: list[dict]) -> np.ndarray:
        try:
            array = np.asarray(values)
        except (ValueError, TypeError):  # lists of different lengths among the values
            array = np.asarray(values, dtype=object)
        if array.dtype.kind in "iu":
            return array.astype(np.int64, copy=False)
        bad = next(
            i
            for i, v in enumerate(values)
            if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63
        )
        raise self._fail(
            int(index[bad]),
            f"event {events[bad].get('name')!r} has args {field!r} = {values[bad]!r}; expected an integer id",
        )

    def _stream_codes(self, pid: tuple, tid: tuple, kind: np.ndarray) -> np.ndarray:
        """Codes of ``cpu:<pid>:<tid>`` / ``cuda:<device>:<stream>`` (Kineto puts the device in pid;
        other devices' rows are ``mtia:``, ``hpu:``)."""
        try:
            p = np.fromiter(pid, dtype=np.int64, count=len(pid))
            t = np.fromiter(tid, dtype=np.int64, count=len(tid))
            exact = not any(v.__class__ is not int for v in pid[:1] + tid[:1])
        except (TypeError, ValueError, OverflowError):
            exact = False
        if exact:
            key = (p << 34) + ((t & 0xFFFFFFFF) << 2) + kind
            local, uniques = pd.factorize(key)
            labels = [f"{_DEVICE_KINDS[u & 3]}:{u >> 34}:{(u >> 2) & 0xFFFFFFFF}" for u in uniques.tolist()]
        else:
            # 2021 releases write string ids: tid "stream 7" on devices, "25738" on host threads
            keys = [
                f"{_DEVICE_KINDS[k]}:{a}:{_thread_id(b)}"
                for k, a, b in zip(kind.tolist(), pid, tid, strict=True)
            ]
            local, uniques = pd.factorize(np.asarray(keys, dtype=object))
            labels = list(uniques)
        table = np.fromiter((self.streams.code(s) for s in labels), dtype=np.int32, count=len(labels))
        return table[local]

    def _wanted_names(self) -> np.ndarray:
        """Per name code: does an event of this name carry sizes (NCCL kernel, rpc, gloo)?"""
        cache = getattr(self, "_wanted", None)
        if cache is None or len(cache) < len(self.names.values):
            cache = np.fromiter(
                (
                    _NCCL_KERNEL.match(v) is not None
                    or v == RPC
                    or v.startswith(("gloo:", *HOST_COMM_PREFIXES))
                    for v in self.names.values
                ),
                dtype=bool,
                count=len(self.names.values),
            )
            self._wanted = cache
        return cache

    def _instants(self, start: int, batch: list[Any], phs: list[Any]) -> None:
        """Keep the allocator's ``[memory]`` instant events (``profile_memory=True``)."""
        for i, ph in enumerate(phs):
            if ph != "i":
                continue
            event = batch[i]
            if event.get("name") != "[memory]":
                continue
            args = event.get("args")
            row = (event.get("ts"), *(args.get(k) for k in _MEMORY_ARGS)) if isinstance(args, dict) else ()
            if (
                not row
                or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in (row[0], row[1], row[3])
                )
                or any(
                    v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in row
                )
            ):
                raise self._fail(
                    start + i,
                    f"memory event {str(event)[:80]!r}: expected a ts and args with "
                    "numbers Device Type, Device Id, Bytes (Total Allocated, Total Reserved, "
                    "Addr)",
                )
            self.memory.append(row)

    def _metadata(self, events: Iterable[dict]) -> None:
        for e in events:
            if e.get("name") == "thread_name":
                name = (e.get("args") or {}).get("name")
                if name is not None:
                    self.threads[f"{e.get('pid')}:{e.get('tid')}"] = str(name)

    # -- rank --------------------------------------------------------------------------------

    def identify(self) -> None:
        """Rank, world size and backend from distributedInfo (else rank from the name, later)."""
        info = self.meta.get("distributedInfo")
        if isinstance(info, dict):
            self.rank = _opt_int(info.get("rank"), self, "distributedInfo.rank")
            self.world_size = _opt_int(info.get("world_size"), self, "distributedInfo.world_size")
            backend = info.get("backend")
            self.backend = str(backend) if backend is not None else None
        elif info is not None:
            raise self.reader.error(
                f"distributedInfo is {type(info).__name__}; expected a JSON object with rank and world_size"
            )


def _thread_id(tid: Any) -> Any:
    """A row id as Kineto writes it today: "stream 7" -> 7 (2021 releases wrote the label)."""
    if isinstance(tid, str):
        text = tid.removeprefix("stream ").strip()
        return int(text) if text.lstrip("-").isdigit() else tid
    return tid


def _opt_int(value: Any, file: _RankFile, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise file.reader.error(f"{field} is {value!r}; expected a non-negative integer")
    return value


def _table(strings: Labels, test) -> np.ndarray:
    return np.fromiter((test(v) for v in strings.values), dtype=bool, count=len(strings.values))


def _device_table(cats: Labels) -> np.ndarray:
    """Per category code: the device kind of its rows (0 host, else an index in _DEVICE_KINDS)."""
    kinds = (_DEVICE_CATS.get(canonical_category(c)) for c in cats.values)
    return np.fromiter(
        (_DEVICE_KINDS.index(k) if k else 0 for k in kinds), dtype=np.int64, count=len(cats.values)
    )


def _copy_cat_table(cats: Labels) -> np.ndarray:
    return _table(cats, lambda c: canonical_category(c) in _COPY_CATS)


# -- the whole set --------------------------------------------------------------------------------


def read(paths: list[Path], **options: Any) -> Trace:
    """Read PyTorch profiler Chrome traces (one per rank) into one :class:`Trace`.

    Parameters
    ----------
    paths:
        The trace files (``.json`` or ``.json.gz``), one per rank or a single file.
    allow_missing_ranks:
        Accept several files that do not cover ranks ``0 .. world_size - 1`` (default: an error);
        ``trace.meta["missing_ranks"]`` lists the ranks left out.
    ranks:
        The rank of each file, in the order given (for traces that do not say).
    chunk_chars:
        Characters of JSON parsed at a time (default 8 Mi); memory vs per-chunk overhead.

    Returns a :class:`Trace` with ``format="pytorch"``; times in s, sizes in bytes. Raises
    :class:`DlexploreError` naming the file and event (or byte offset) for bad input.
    """
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise DlexploreError(f"unknown option(s) {unknown} for PyTorch traces; expected {list(_OPTIONS)}")
    allow_missing = bool(options.get("allow_missing_ranks", False))
    chunk_chars = options.get("chunk_chars")
    paths = [Path(p) for p in paths]
    if not paths:
        raise DlexploreError("no trace files given")

    names, cats, streams = Labels(), Labels(), Labels()
    files = [_RankFile(p, names, cats, streams, chunk_chars) for p in paths]
    enabled = gc.isenabled()
    gc.disable()  # millions of short-lived containers: see dlexplore.traces._json
    try:
        for file in files:
            file.read()
            file.identify()
    finally:
        if enabled:
            gc.enable()
    world_size, missing = _assign_ranks(files, allow_missing, options.get("ranks"))
    files.sort(key=lambda f: f.rank)
    trace = _assemble(files, world_size, names, cats, streams)
    trace.meta["missing_ranks"] = missing
    trace.meta["rank_unknown"] = [f.rank for f in files if not f.rank_known]
    return trace


def _assign_ranks(files: list[_RankFile], allow_missing: bool, ranks: Any = None) -> tuple[int, list[int]]:
    """Each file's rank (``ranks=``, else distributedInfo, else a rank its name states); the world
    size and the ranks missing from it. See the module docstring."""
    if ranks is not None:
        given = list(ranks) if not isinstance(ranks, (str, bytes)) else None
        if (
            given is None
            or len(given) != len(files)
            or not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) and r >= 0 for r in given)
        ):
            raise DlexploreError(
                f"ranks= must give one rank (an integer >= 0) per file, in the order of the "
                f"files ({len(files)}); got {ranks!r}"
            )
        for file, rank in zip(files, given, strict=True):
            file.rank = int(rank)
    for file in files:
        if file.rank is not None:
            continue
        rank = rank_from_filename(file.path)
        if rank is None:
            if len(files) > 1:
                raise DlexploreError(
                    f"{file.path}: the rank is unknown: no distributedInfo.rank in the trace and no rank in "
                    "the file name (rank3, rank_3, rank-3); pass ranks=[...] (one per file, in order)"
                )
            file.rank, file.rank_known = 0, False
            warnings.warn(
                f"{file.path}: the rank is unknown (no distributedInfo in the trace, no rank in "
                "the file name); shown as rank 0",
                stacklevel=4,
            )
            continue
        warnings.warn(
            f"{file.path}: no distributedInfo in the trace; rank {rank} taken from the file name",
            stacklevel=4,
        )
        file.rank = rank
    sizes = {f.world_size for f in files if f.world_size is not None}
    if len(sizes) > 1:
        listing = "; ".join(f"{f.path.name}: {f.world_size}" for f in files if f.world_size is not None)
        raise DlexploreError(
            f"these traces come from runs of different world sizes ({listing}); expected the files of one run"
        )
    by_rank: dict[int, _RankFile] = {}
    for file in files:
        if file.rank in by_rank:
            raise DlexploreError(
                f"{by_rank[file.rank].path} and {file.path} both hold rank {file.rank}; "
                "expected one file per rank"
            )
        by_rank[file.rank] = file
    world_size = sizes.pop() if sizes else max(by_rank) + 1
    if world_size > _MAX_WORLD:
        big = max(files, key=lambda f: max(f.rank or 0, f.world_size or 0))
        raise DlexploreError(
            f"{big.path}: rank {big.rank} of world size {world_size}; expected fewer than "
            f"{_MAX_WORLD:,} ranks"
        )
    beyond = sorted(r for r in by_rank if r >= world_size)
    if beyond:
        raise DlexploreError(
            f"{by_rank[beyond[0]].path}: rank {beyond[0]} but the world size is "
            f"{world_size}; expected ranks 0 .. {world_size - 1}"
        )
    missing = sorted(set(range(world_size)) - set(by_rank))
    if missing and len(files) > 1 and not allow_missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        given = ", ".join(f"{f.path.name} (rank {f.rank})" for f in sorted(files, key=lambda f: f.rank)[:8])
        raise DlexploreError(
            f"rank(s) {shown} of {world_size} missing from the traces given ({given}); "
            "pass allow_missing_ranks=True (CLI: --allow-missing-ranks) to read them anyway"
        )
    return world_size, missing


def _assemble(files: list[_RankFile], world_size: int, names: Labels, cats: Labels, streams: Labels) -> Trace:
    counts = [f.rows for f in files]
    total = int(sum(counts))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def column(key: str, dtype) -> np.ndarray:
        parts = [p for f in files for p in f.parts[key]]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)

    rank = np.repeat(np.asarray([f.rank for f in files], dtype=np.int32), counts)
    bases = [f.meta.get("baseTimeNanoseconds") for f in files]
    epoch_ns = None
    shift = np.zeros(len(files))
    ts = column("ts", np.float64)
    # Count from a whole number of 2**30 µs (18 minutes) before the set's first event: times of
    # 1.7e9 s (Unix time) or 4e6 s (a device clock) would otherwise keep only 0.2 µs or 1 ns of
    # resolution. A coarse origin is the same for one rank's file alone as for the whole set, so
    # both give the same numbers (dlexplore.traces.summarize reads one file at a time).
    origin = float(np.floor(ts.min() / _ORIGIN_GRID) * _ORIGIN_GRID) if len(ts) else 0.0
    ts = ts - origin
    for file in files:
        file.ts_origin = origin
    if all(isinstance(b, int) and not isinstance(b, bool) for b in bases):
        epoch_ns = min(bases) + int(origin) * 1000
        shift = np.asarray([(b - min(bases)) * 1e-9 for b in bases])
    elif origin > 1e14:  # after 1973: the file's times are Unix times in µs
        epoch_ns = int(origin) * 1000
    start = ts * 1e-6 + np.repeat(shift, counts)
    duration = column("dur", np.float64) * 1e-6
    cat_code = column("cat", np.int32)
    name_code = column("name", np.int32)
    stream_code = column("stream", np.int32)
    corr = column("corr", np.int64)
    ext = column("ext", np.int64)

    gpu_trace = any(canonical_category(cats.values[c]) in _KERNEL_CATS for c in np.unique(cat_code).tolist())
    category, collective, step_of_name = _classify(cat_code, name_code, cats, names, gpu_trace)
    on_device = (
        _table(streams, lambda v: not v.startswith("cpu:"))[stream_code] if total else np.zeros(0, bool)
    )
    infos = []
    for file, offset in zip(files, offsets[:-1], strict=True):
        for info in file.comm:
            info.row += offset
            infos.append(info)
    comm = resolve_communication(
        EventColumns(
            rank,
            start,
            start + duration,
            category,
            collective,
            name_code,
            names,
            cat_code,
            cats,
            stream_code,
            on_device,
            corr,
            ext,
        ),
        infos,
        kernel_cats=frozenset(c for c in cats.values if canonical_category(c) in _KERNEL_CATS),
        runtime_cats=frozenset(c for c in cats.values if canonical_category(c) in _RUNTIME_CATS),
        copy_cats=frozenset(c for c in cats.values if canonical_category(c) in _COPY_CATS),
        world_size=world_size,
    )
    nbytes, group_size, peer = comm.nbytes, comm.group_size, comm.peer
    coll_names = list(COLLECTIVES)

    step = _steps(rank, start, duration, category, step_of_name[name_code], stream_code, streams, corr, ext)

    columns = {
        "rank": rank,
        "stream": _sorted_categorical(stream_code, streams),
        "name": _sorted_categorical(name_code, names),
        "category": pd.Categorical.from_codes(category, categories=list(CATEGORIES)),
        "start": start,
        "duration": duration,
        "bytes": nbytes,
        "collective": pd.Categorical.from_codes(collective, categories=[""] + coll_names),
        "step": step,
        "correlation": pd.array(np.where(corr >= 0, corr, 0), dtype="Int64"),
        "group_size": pd.array(np.where(group_size >= 0, group_size, 0), dtype="Int64"),
        "process_group": pd.Categorical.from_codes(comm.group, categories=comm.groups.values),
        "dtype": pd.Categorical.from_codes(comm.dtype, categories=comm.dtypes.values),
        "peer": pd.arrays.IntegerArray(np.where(peer >= 0, peer, 0), peer < 0),
    }
    columns["correlation"][corr < 0] = pd.NA
    columns["group_size"][group_size < 0] = pd.NA
    paths = tuple(str(f.path) for f in files)
    events = make_events(columns, {"source": "", "format": "pytorch", "files": list(paths)})
    events.attrs.pop("source")
    backends = sorted({f.backend for f in files if f.backend})
    meta = {
        "ranks": {
            f.rank: {
                "file": str(f.path),
                "distributedInfo": f.meta.get("distributedInfo"),
                "deviceProperties": f.meta.get("deviceProperties"),
                "baseTimeNanoseconds": f.meta.get("baseTimeNanoseconds"),
                "schemaVersion": f.meta.get("schemaVersion"),
                "threads": {_thread_stream(k, streams): v for k, v in f.threads.items()},
                "events_read": f.reader.events_read,
            }
            for f in files
        },
        "backend": backends[0] if len(backends) == 1 else (backends or None),
        "device": "cuda" if gpu_trace else "cpu",
        "epoch_ns": epoch_ns,
        "parser": PARSER,
    }
    return Trace(events, "pytorch", paths, world_size, meta, memory=_memory_table(files, shift))


#: c10::DeviceType numbers in ``[memory]`` events -> device names.
_DEVICE_TYPES = {
    0: "cpu",
    1: "cuda",
    6: "hip",
    12: "xpu",
    13: "mps",
    15: "hpu",
    19: "mtia",
    20: "privateuse1",
}


def _memory_table(files: list[_RankFile], shift: np.ndarray) -> pd.DataFrame | None:
    """The allocator's ``[memory]`` events of every rank (see :class:`~dlexplore.traces.schema.Trace`)."""
    parts = []
    for file, offset in zip(files, shift, strict=True):
        if not file.memory:
            continue
        ts, kind, device, delta, allocated, reserved, address = (
            np.asarray([np.nan if v is None else v for v in column], dtype=np.float64)
            for column in zip(*file.memory, strict=True)
        )
        names = [_DEVICE_TYPES.get(int(k), f"device{int(k)}") for k in kind]
        ids = np.nan_to_num(device)
        labels = [n if n == "cpu" else f"{n}:{int(d)}" for n, d in zip(names, ids, strict=True)]
        parts.append(
            pd.DataFrame(
                {
                    "rank": np.full(len(ts), file.rank, dtype=np.int32),
                    "device": labels,
                    "time": (ts - file.ts_origin) * 1e-6 + offset,
                    "bytes": delta,
                    "allocated": allocated,
                    "reserved": reserved,
                    "address": pd.array(
                        np.where(np.isnan(address), 0, address).astype(np.int64), dtype="Int64"
                    ),
                }
            )
        )
        parts[-1].loc[np.isnan(address), "address"] = pd.NA
    if not parts:
        return None
    table = pd.concat(parts, ignore_index=True)
    table["device"] = table["device"].astype("category")
    return table.sort_values(["rank", "time"], kind="stable").reset_index(drop=True)


def _sorted_categorical(codes: np.ndarray, strings: Labels) -> pd.Categorical:
    """Codes as a categorical of the values used, sorted: the same whatever the files' order."""
    used, inverse = np.unique(codes, return_inverse=True)
    labels = np.asarray([strings.values[c] for c in used.tolist()], dtype=object)
    order = np.argsort(labels, kind="stable")
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return pd.Categorical.from_codes(rank[inverse.ravel()], categories=labels[order].tolist())


def _thread_stream(key: str, streams: Labels) -> str:
    """The stream name of a ``pid:tid`` thread_name record (a device's row if events ran there)."""
    return next(
        (f"{kind}:{key}" for kind in _DEVICE_KINDS[1:] if f"{kind}:{key}" in streams.codes), f"cpu:{key}"
    )


def _classify(
    cat_code: np.ndarray, name_code: np.ndarray, cats: Labels, names: Labels, gpu_trace: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Category and collective codes per row (decided once per distinct (cat, name)), and the
    step number of each name (-1 if not ``ProfilerStep#N``)."""
    coll_index = {c: i + 1 for i, c in enumerate(COLLECTIVES)}
    key = cat_code.astype(np.int64) * max(len(names.values), 1) + name_code
    local, uniques = pd.factorize(key)
    category_table = np.empty(len(uniques), dtype=np.int8)
    collective_table = np.empty(len(uniques), dtype=np.int8)
    n_names = max(len(names.values), 1)
    for i, k in enumerate(uniques.tolist()):
        category, collective = _category(cats.values[k // n_names], names.values[k % n_names], gpu_trace)
        category_table[i] = CATEGORIES.index(category)
        collective_table[i] = coll_index.get(collective, 0)
    step_of_name = np.fromiter(
        (int(m.group(1)) if (m := _STEP_RE.match(v)) else -1 for v in names.values),
        dtype=np.int64,
        count=len(names.values),
    )
    if not len(local):
        return np.zeros(0, np.int8), np.zeros(0, np.int8), step_of_name
    return category_table[local], collective_table[local].copy(), step_of_name


def _category(cat: str, name: str, gpu_trace: bool) -> tuple[str, str]:
    """(category, collective) of one kind of event; see the module docstring's table."""
    cat = canonical_category(cat)
    if cat in _KERNEL_CATS:
        if _NCCL_KERNEL.match(name):
            return "communication", normalize_collective_name(name.split("(")[0])
        copy = _DEVICE_COPY.match(name)
        if copy:  # MTIA's dma, copies that a runtime reports as kernels
            return ("memset" if copy.group(1) == "Memset" else "memcpy"), ""
        return "compute", ""
    if cat == "gpu_memcpy":
        return "memcpy", ""
    if cat == "gpu_memset":
        return "memset", ""
    if cat in _RUNTIME_CATS:
        return "runtime", ""
    if cat in _HOST_OP_CATS:
        if _STEP_RE.match(name):
            return "step", ""
        if name.startswith(_DATA_PREFIX):
            return "data", ""
        if name.startswith("gloo:"):
            return "communication", normalize_collective_name(name[5:])
        if name.startswith(HOST_COMM_PREFIXES) or name == RPC:
            return "communication", ""
        if cat == "user_annotation":
            return "annotation", ""
        return ("cpu" if gpu_trace else "compute"), ""
    if cat == "gpu_user_annotation":
        return "annotation", ""
    return "other", ""


def _steps(
    rank: np.ndarray,
    start: np.ndarray,
    duration: np.ndarray,
    category: np.ndarray,
    step_number: np.ndarray,
    stream_code: np.ndarray,
    streams: Labels,
    corr: np.ndarray,
    ext: np.ndarray,
) -> pd.arrays.IntegerArray:
    """The training step of every row (see the module docstring), as a nullable Int64 array."""
    total = len(rank)
    step = np.full(total, -1, dtype=np.int64)
    is_step = (category == CATEGORIES.index("step")) & (step_number >= 0)
    on_gpu = _table(streams, lambda s: not s.startswith("cpu:"))[stream_code] if total else np.zeros(0, bool)
    for r in np.unique(rank[is_step]).tolist():
        marks = np.flatnonzero(is_step & (rank == r))
        order = np.argsort(start[marks], kind="stable")
        marks = marks[order]
        begins, ends, numbers = start[marks], start[marks] + duration[marks], step_number[marks]
        mine = np.flatnonzero(rank == r)
        host = mine[~on_gpu[mine]]
        slot = np.searchsorted(begins, start[host], side="right") - 1
        inside = (slot >= 0) & (start[host] < ends[np.maximum(slot, 0)])
        step[host[inside]] = numbers[slot[inside]]
        step[marks] = numbers  # a marker is its own step, whatever rounding did to its end
        device = mine[on_gpu[mine]]
        if len(device):
            step[device] = _device_steps(
                device, rank, start, step, category, corr, ext, on_gpu, begins, numbers
            )
    return _nullable(step)


def _nullable(step: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.arrays.IntegerArray(np.where(step >= 0, step, 0), step < 0)


def _device_steps(device: np.ndarray, rank, start, step, category, corr, ext, on_gpu, begins, numbers):
    """Steps of GPU rows: the launch's step by correlation, else the op's by External id, else (rows
    that no launch could name: no correlation id, or a rank without launch events) by time. A row
    whose launch is known to be outside every step (before the trace or the first step) has none."""
    r = rank[device[0]]
    mine = np.flatnonzero((rank == r) & ~on_gpu & (step >= 0))
    runtime = mine[category[mine] == CATEGORIES.index("runtime")]
    result = np.full(len(device), -1, dtype=np.int64)
    if len(runtime):
        lookup = pd.Series(step[runtime], index=corr[runtime])
        lookup = lookup[~lookup.index.duplicated() & (lookup.index >= 0)]
        found = lookup.reindex(corr[device]).to_numpy()
        ok = ~np.isnan(found)
        result[ok] = found[ok].astype(np.int64)
    need = (result < 0) & (ext[device] >= 0)
    if need.any():
        ops = mine[(category[mine] != CATEGORIES.index("runtime")) & (ext[mine] >= 0)]
        lookup = pd.Series(step[ops], index=ext[ops])
        lookup = lookup[~lookup.index.duplicated()]
        found = lookup.reindex(ext[device[need]]).to_numpy()
        fill = np.where(need)[0]
        ok = ~np.isnan(found)
        result[fill[ok]] = found[ok].astype(np.int64)
    need = (result < 0) & ((corr[device] < 0) | (not len(runtime)))
    if need.any():
        slot = np.searchsorted(begins, start[device[need]], side="right") - 1
        result[np.where(need)[0][slot >= 0]] = numbers[slot[slot >= 0]]
    return result
