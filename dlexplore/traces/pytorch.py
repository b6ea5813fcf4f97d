"""PyTorch profiler (Kineto) Chrome traces: ``.json`` / ``.json.gz``, one file per rank.

    trace = dlexplore.load_trace("runs/profile/")          # a folder of per-rank traces
    trace.events.groupby(["rank", "category"]).duration.sum()

Every complete event (``"ph": "X"``) becomes one row of the schema (:mod:`dlexplore.traces.schema`);
flow (``s``/``f``), instant (``i``), metadata (``M``) events and Kineto's ``Trace`` spans do not.
Timestamps (µs in the file) become seconds; ``start`` is ``ts`` plus the file's
``baseTimeNanoseconds`` less the earliest one of the set, so ranks share one time axis
(``trace.meta["epoch_ns"]`` is its zero in Unix nanoseconds).

Rank and world size come from the top-level ``distributedInfo`` (``rank``, ``world_size``,
``backend``); a file without it takes its rank from its name (``rank3``, ``rank_3``, ``rank-3``,
``..._3.json``, ``...-3.pt.trace.json.gz``) with a warning. Two files with the same rank, mixed
world sizes, or several files that leave ranks out (``allow_missing_ranks=True`` accepts the
last) are errors naming the files.

Categories
----------
=========================================================  ==================================
event (``cat``, ``name``)                                   category, collective
=========================================================  ==================================
``kernel`` ``ncclKernel_*`` / ``ncclDevKernel_*``           communication, from the kernel's
                                                            ``Collective name`` (else its name)
``kernel`` (others)                                         compute
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

Message size (``bytes``) follows nccl-tests: the larger of the input and output buffers,
``max(In msg nelems, Out msg nelems) x dtype size`` from the ``record_param_comms`` arguments
that Kineto copies onto the NCCL kernel it launched (``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``Group size``, ``dtype``); a kernel without them is matched to its
``record_param_comms`` by ``External id``, else by order on the rank. For gloo, the element
count of ``Input Dims`` (needs ``record_shapes=True``) times the size of ``Input type``, times the
group size for allgather and gather (whose outputs are that much larger than their inputs).

Steps: a host event belongs to the ``ProfilerStep#N`` interval of its rank that contains its
start. A GPU event belongs to the step of the launch (the ``cuda_runtime``/``cuda_driver`` event
with the same ``correlation``), else of the host op with its ``External id``, else to the last
step that started before it (GPU work trails the host).

Extra columns: ``correlation`` (CUDA correlation id of kernels, copies and launches),
``group_size``, ``process_group`` and ``dtype`` (for collectives, when the trace says).
``trace.meta`` holds per rank the file, ``distributedInfo``, ``deviceProperties``,
``baseTimeNanoseconds`` and the thread names.

Large files are streamed (:mod:`dlexplore.traces._json`): the JSON is parsed a few MB at a time
and only the needed fields are kept, in column arrays.
"""

from __future__ import annotations

import gc
import math
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
from .schema import CATEGORIES, COLLECTIVES, Trace, make_events, normalize_collective_name

__all__ = ["read", "rank_from_filename", "DTYPE_BYTES"]

_OPTIONS = ("allow_missing_ranks", "chunk_chars")

_KERNEL_CATS = frozenset({"kernel", "Kernel"})
_GPU_CATS = frozenset(
    {"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "gpu_memory"}
)
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
_HOST_OP_CATS = frozenset({"cpu_op", "user_annotation"})
_SKIPPED_CATS = frozenset({"Trace"})  # Kineto's whole-window spans (pid "Spans")
_NCCL_KERNEL = ("ncclKernel", "ncclDevKernel")
_HOST_COMM = ("c10d::", "c10d_functional::", "_c10d_functional::", "nccl:")
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_DATA_PREFIX = "enumerate(DataLoader)"
_RPC = "record_param_comms"
_REQUIRED_KEYS = ("ts", "dur", "cat", "name", "pid", "tid")
_REQUIRED = itemgetter(*_REQUIRED_KEYS)
_get = dict.get

#: Bytes per element for the dtype names in traces: c10 ScalarType names (``record_param_comms``'s
#: ``dtype``) and C++ type names (``Input type`` with ``record_shapes=True``).
DTYPE_BYTES: dict[str, int] = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long": 8,
    "int64_t": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
}

_RANK_PATTERNS = (
    re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)", re.IGNORECASE),
    re.compile(r"[-_](\d+)(?:\.pt\.trace)?\.json(?:\.gz)?$", re.IGNORECASE),
)


def rank_from_filename(path: str | Path) -> int | None:
    """The rank in a trace file's name (``rank3``, ``rank_3``, ``rank-3``, ``trace-3.json``), or None."""
    name = Path(path).name
    for pattern in _RANK_PATTERNS:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    return None


class _Strings:
    """Interns strings to int codes, shared by all files of a trace."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: Any) -> int:
        text = "" if value is None else value if isinstance(value, str) else str(value)
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.values)
            self.values.append(text)
        return code

    def encode(self, values: list[Any]) -> np.ndarray:
        """int32 codes of ``values`` (hashing each distinct value once per call)."""
        array = np.fromiter(values, dtype=object, count=len(values))  # never 2-D, whatever the values
        local, uniques = pd.factorize(array, use_na_sentinel=True)
        table = np.fromiter((self.code(u) for u in uniques), dtype=np.int32, count=len(uniques))
        table = np.append(table, np.int32(self.code("")))  # code -1 (None) -> ""
        return table[local]


class _Comm:
    """Arguments of the few events that carry sizes: memcpy, NCCL kernels, record_param_comms, gloo."""

    __slots__ = (
        "row",
        "bytes",
        "collective",
        "in_nelems",
        "out_nelems",
        "dtype",
        "group_size",
        "group",
        "dims",
        "types",
    )

    def __init__(self, row: int, args: dict[str, Any]):
        self.row = row
        self.bytes = args.get("bytes")
        self.collective = args.get("Collective name")
        self.in_nelems = args.get("In msg nelems")
        self.out_nelems = args.get("Out msg nelems")
        self.dtype = args.get("dtype")
        self.group_size = args.get("Group size")
        self.group = args.get("Process Group Name")
        self.dims = args.get("Input Dims")
        self.types = args.get("Input type")

    #: Arguments read as counts: an integer beyond 64 bits would overflow the int64 and float64
    #: columns (silently, or deep inside numpy), so it is refused where the event is known.
    _COUNTS = {"bytes": "bytes", "in_nelems": "In msg nelems", "out_nelems": "Out msg nelems",
               "group_size": "Group size"}

    def oversized(self) -> str | None:
        """The name of the first count argument that does not fit 64 bits, or None."""
        for attribute, key in self._COUNTS.items():
            value = getattr(self, attribute)
            if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                return key
        return None


class _RankFile:
    """The columns read from one file (one rank)."""

    def __init__(
        self, path: Path, names: _Strings, cats: _Strings, streams: _Strings, chunk_chars: int | None
    ):
        self.path = path
        self.names, self.cats, self.streams = names, cats, streams
        self.reader = ChromeTraceStream(path, **({"chunk_chars": chunk_chars} if chunk_chars else {}))
        self.parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("ts", "dur", "cat", "name", "stream", "corr", "ext")
        }
        self.comm: list[_Comm] = []
        self.threads: dict[str, str] = {}
        self.rows = 0
        self.rank: int | None = None
        self.world_size: int | None = None
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
        gpu = _gpu_cat_table(self.cats)[cat_codes]
        if gpu.any() or any(c in _RUNTIME_CATS for c in set(cat)):
            # Links between host and device exist only in GPU traces.
            try:
                corr = [-1 if a is None else a.get("correlation", -1) for a in args]
                ext = [-1 if a is None else a.get("External id", -1) for a in args]
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

        # Only copies, NCCL kernels, record_param_comms and gloo annotations carry sizes.
        sized = np.flatnonzero(self._wanted_names()[name_codes] | _sized_cat_table(self.cats)[cat_codes])
        for i in sized.tolist():
            a = args[i]
            if a:
                if not isinstance(a, dict):
                    raise self._fail(
                        int(index[i]),
                        f"event {events[i].get('name')!r} has args of type "
                        f"{type(a).__name__}; expected a JSON object",
                    )
                info = _Comm(rows + i, a)
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
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v
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
        self, strings: _Strings, values: tuple, field: str, index: np.ndarray, events: list
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
        bad = next(i for i, v in enumerate(values)
                   if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63)
        raise self._fail(
            int(index[bad]),
            f"event {events[bad].get('name')!r} has args {field!r} = {values[bad]!r}; expected an integer id",
        )

    def _stream_codes(self, pid: tuple, tid: tuple, gpu: np.ndarray) -> np.ndarray:
        """Codes of ``cpu:<pid>:<tid>`` / ``cuda:<device>:<stream>`` (Kineto puts the GPU in pid)."""
        try:
            p = np.fromiter(pid, dtype=np.int64, count=len(pid))
            t = np.fromiter(tid, dtype=np.int64, count=len(tid))
            exact = not any(v.__class__ is not int for v in pid[:1] + tid[:1])
        except (TypeError, ValueError, OverflowError):
            exact = False
        if exact:
            key = (p << 33) + ((t & 0xFFFFFFFF) << 1) + gpu
            local, uniques = pd.factorize(key)
            labels = [
                f"{'cuda' if u & 1 else 'cpu'}:{u >> 33}:{(u >> 1) & 0xFFFFFFFF}" for u in uniques.tolist()
            ]
        else:
            keys = [
                f"{'cuda' if g else 'cpu'}:{a}:{b}" for g, a, b in zip(gpu.tolist(), pid, tid, strict=True)
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
                (v.startswith(_NCCL_KERNEL) or v == _RPC or v.startswith("gloo:") for v in self.names.values),
                dtype=bool,
                count=len(self.names.values),
            )
            self._wanted = cache
        return cache

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


def _opt_int(value: Any, file: _RankFile, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise file.reader.error(f"{field} is {value!r}; expected a non-negative integer")
    return value


def _table(strings: _Strings, test) -> np.ndarray:
    return np.fromiter((test(v) for v in strings.values), dtype=bool, count=len(strings.values))


def _gpu_cat_table(cats: _Strings) -> np.ndarray:
    return _table(cats, lambda c: c in _GPU_CATS).astype(np.int64)


def _sized_cat_table(cats: _Strings) -> np.ndarray:
    return _table(cats, lambda c: c in ("gpu_memcpy", "gpu_memset"))


# -- the whole set --------------------------------------------------------------------------------


def read(paths: list[Path], **options: Any) -> Trace:
    """Read PyTorch profiler Chrome traces (one per rank) into one :class:`Trace`.

    Parameters
    ----------
    paths:
        The trace files (``.json`` or ``.json.gz``), one per rank or a single file.
    allow_missing_ranks:
        Accept several files that do not cover ranks ``0 .. world_size - 1`` (default: an error).
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

    names, cats, streams = _Strings(), _Strings(), _Strings()
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
    world_size = _assign_ranks(files, allow_missing)
    files.sort(key=lambda f: f.rank)
    return _assemble(files, world_size, names, cats, streams)


def _assign_ranks(files: list[_RankFile], allow_missing: bool) -> int:
    """Fill in ranks from file names where distributedInfo lacks them; check the set; world size."""
    for file in files:
        if file.rank is not None:
            continue
        rank = rank_from_filename(file.path)
        if rank is None:
            if len(files) > 1:
                raise DlexploreError(
                    f"{file.path}: no distributedInfo.rank in the trace and no rank in the "
                    "file name (e.g. rank3.json); cannot tell which rank it holds"
                )
            rank = 0
            warnings.warn(
                f"{file.path}: no distributedInfo in the trace and no rank in the file name; read as rank 0",
                stacklevel=4,
            )
        else:
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
            "pass allow_missing_ranks=True to read them anyway"
        )
    return world_size


def _assemble(
    files: list[_RankFile], world_size: int, names: _Strings, cats: _Strings, streams: _Strings
) -> Trace:
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
    if all(isinstance(b, int) and not isinstance(b, bool) for b in bases):
        epoch_ns = min(bases)
        shift = np.asarray([(b - epoch_ns) * 1e-9 for b in bases])
    start = column("ts", np.float64) * 1e-6 + np.repeat(shift, counts)
    duration = column("dur", np.float64) * 1e-6
    cat_code = column("cat", np.int32)
    name_code = column("name", np.int32)
    stream_code = column("stream", np.int32)
    corr = column("corr", np.int64)
    ext = column("ext", np.int64)

    gpu_trace = any(cats.values[c] in _KERNEL_CATS for c in np.unique(cat_code).tolist())
    category, collective, step_of_name = _classify(cat_code, name_code, cats, names, gpu_trace)

    nbytes = np.full(total, np.nan)
    group_size = np.full(total, -1, dtype=np.int64)
    dtypes = _Strings()
    dtypes.code("")
    groups = _Strings()
    groups.code("")
    dtype_code = np.zeros(total, dtype=np.int32)
    group_code = np.zeros(total, dtype=np.int32)
    coll_names = list(COLLECTIVES)
    coll_index = {c: i + 1 for i, c in enumerate(coll_names)}  # 0 is ""

    is_rpc = name_code == names.codes.get(_RPC, -1)
    comm_cat = CATEGORIES.index("communication")
    nccl_kernels = (collective > 0) & (category == comm_cat) & _isin(cat_code, cats, _KERNEL_CATS)
    matched = np.zeros(total, dtype=bool)
    rpc_info: dict[int, _Comm] = {}
    for file, offset in zip(files, offsets[:-1], strict=True):
        for info in file.comm:
            row = offset + info.row
            cat = cats.values[cat_code[row]]
            if cat in ("gpu_memcpy", "gpu_memset"):
                nbytes[row] = _number(info.bytes)
            elif is_rpc[row]:
                rpc_info[row] = info
                _describe(row, info, group_size, dtype_code, group_code, dtypes, groups)
            elif nccl_kernels[row] and info.collective is not None:
                name = normalize_collective_name(info.collective)
                if name:
                    collective[row] = coll_index[name]
                nbytes[row] = _message_bytes(info)
                _describe(row, info, group_size, dtype_code, group_code, dtypes, groups)
                matched[row] = True
            elif collective[row] > 0 and names.values[name_code[row]].startswith("gloo:"):
                size = world_size
                nbytes[row] = _gloo_bytes(info, coll_names[collective[row] - 1], size)
                dtype = (info.types or [None])[0] if isinstance(info.types, list) else None
                if isinstance(dtype, str):
                    dtype_code[row] = dtypes.code(dtype)

    _match_kernels(
        nccl_kernels & ~matched,
        rpc_info,
        rank,
        ext,
        start,
        collective,
        coll_index,
        nbytes,
        group_size,
        dtype_code,
        group_code,
        dtypes,
        groups,
    )

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
        "process_group": pd.Categorical.from_codes(group_code, categories=groups.values),
        "dtype": pd.Categorical.from_codes(dtype_code, categories=dtypes.values),
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
    return Trace(events, "pytorch", paths, world_size, meta)


def _sorted_categorical(codes: np.ndarray, strings: _Strings) -> pd.Categorical:
    """Codes as a categorical of the values used, sorted: the same whatever the files' order."""
    used, inverse = np.unique(codes, return_inverse=True)
    labels = np.asarray([strings.values[c] for c in used.tolist()], dtype=object)
    order = np.argsort(labels, kind="stable")
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return pd.Categorical.from_codes(rank[inverse.ravel()], categories=labels[order].tolist())


def _thread_stream(key: str, streams: _Strings) -> str:
    """The stream name of a ``pid:tid`` thread_name record (a CUDA stream if events ran there)."""
    return f"cuda:{key}" if f"cuda:{key}" in streams.codes else f"cpu:{key}"


def _isin(codes: np.ndarray, strings: _Strings, values: frozenset) -> np.ndarray:
    return _table(strings, lambda v: v in values)[codes] if len(codes) else np.zeros(0, dtype=bool)


def _classify(
    cat_code: np.ndarray, name_code: np.ndarray, cats: _Strings, names: _Strings, gpu_trace: bool
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
    if cat in _KERNEL_CATS:
        if name.startswith(_NCCL_KERNEL):
            return "communication", normalize_collective_name(name.split("(")[0])
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
        if name.startswith(_HOST_COMM) or name == _RPC:
            return "communication", ""
        if cat == "user_annotation":
            return "annotation", ""
        return ("cpu" if gpu_trace else "compute"), ""
    if cat == "gpu_user_annotation":
        return "annotation", ""
    return "other", ""


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(value)
        except (TypeError, ValueError):
            return math.nan
    return float(value)


def _message_bytes(info: _Comm) -> float:
    """nccl-tests' message size: the larger buffer, elements x dtype size (NaN if unknown)."""
    size = DTYPE_BYTES.get(str(info.dtype)) if info.dtype is not None else None
    counts = [_number(info.in_nelems), _number(info.out_nelems)]
    counts = [c for c in counts if not math.isnan(c)]
    if size is None or not counts:
        return math.nan
    return max(counts) * size


def _elements(dims: Any) -> float:
    """Elements of one ``Input Dims`` entry: a shape, or a list of shapes (a TensorList)."""
    if isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims):
        return sum(_elements(d) for d in dims)
    if isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return float(np.prod(dims)) if dims else 1.0
    return math.nan


def _gloo_bytes(info: _Comm, collective: str, group_size: int) -> float:
    """Bytes of a gloo collective from its ``Input Dims`` x ``Input type`` (NaN without shapes)."""
    if not isinstance(info.dims, list) or not isinstance(info.types, list):
        return math.nan
    total = 0.0
    counted = False
    for dims, dtype in zip(info.dims, info.types, strict=False):
        size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        elements = _elements(dims)
        if size is None or math.isnan(elements):
            continue
        total += elements * size
        counted = True
    if not counted:
        return math.nan
    return total * group_size if collective in ("allgather", "gather") else total


def _describe(
    row: int,
    info: _Comm,
    group_size: np.ndarray,
    dtype_code: np.ndarray,
    group_code: np.ndarray,
    dtypes: _Strings,
    groups: _Strings,
) -> None:
    size = info.group_size
    if isinstance(size, int) and not isinstance(size, bool):
        group_size[row] = size
    if info.dtype is not None:
        dtype_code[row] = dtypes.code(info.dtype)
    if info.group is not None:
        group_code[row] = groups.code(info.group)


def _match_kernels(
    unmatched: np.ndarray,
    rpc_info: dict[int, _Comm],
    rank: np.ndarray,
    ext: np.ndarray,
    start: np.ndarray,
    collective: np.ndarray,
    coll_index: dict[str, int],
    nbytes: np.ndarray,
    group_size,
    dtype_code,
    group_code,
    dtypes,
    groups,
) -> None:
    """Sizes for NCCL kernels that lack Kineto's copy of the record_param_comms arguments:
    the record_param_comms with the kernel's External id, else the same position on the rank."""
    rows = np.flatnonzero(unmatched)
    if not len(rows) or not rpc_info:
        return
    # what _apply fills in, in its argument order
    columns = (collective, coll_index, nbytes, group_size, dtype_code, group_code, dtypes, groups)
    by_ext = {(int(rank[r]), int(ext[r])): r for r in rpc_info if ext[r] >= 0}
    used: set[int] = set()
    left = []
    for row in rows.tolist():
        source = by_ext.get((int(rank[row]), int(ext[row]))) if ext[row] >= 0 else None
        if source is None:
            left.append(row)
            continue
        _apply(row, rpc_info[source], *columns)
        used.add(source)
    for r in np.unique(rank[left]).tolist() if left else []:
        kernels = sorted((row for row in left if rank[row] == r), key=lambda row: start[row])
        sources = sorted(
            (
                s
                for s, info in rpc_info.items()
                if rank[s] == r and s not in used and normalize_collective_name(str(info.collective or ""))
            ),
            key=lambda s: start[s],
        )
        if len(kernels) != len(sources):
            continue  # no safe pairing
        for row, source in zip(kernels, sources, strict=True):
            name = normalize_collective_name(str(rpc_info[source].collective))
            if collective[row] and collective[row] != coll_index.get(name):
                continue
            _apply(row, rpc_info[source], *columns)


def _apply(row, info, collective, coll_index, nbytes, group_size, dtype_code, group_code, dtypes, groups):
    name = normalize_collective_name(str(info.collective or ""))
    if name:
        collective[row] = coll_index[name]
    nbytes[row] = _message_bytes(info)
    _describe(row, info, group_size, dtype_code, group_code, dtypes, groups)


def _steps(
    rank: np.ndarray,
    start: np.ndarray,
    duration: np.ndarray,
    category: np.ndarray,
    step_number: np.ndarray,
    stream_code: np.ndarray,
    streams: _Strings,
    corr: np.ndarray,
    ext: np.ndarray,
) -> pd.arrays.IntegerArray:
    """The training step of every row (see the module docstring), as a nullable Int64 array."""
    total = len(rank)
    step = np.full(total, -1, dtype=np.int64)
    is_step = (category == CATEGORIES.index("step")) & (step_number >= 0)
    on_gpu = _table(streams, lambda s: s.startswith("cuda:"))[stream_code] if total else np.zeros(0, bool)
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
    """Steps of GPU rows: the launch's step by correlation, else the op's by External id, else time."""
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
    need = result < 0
    if need.any():
        slot = np.searchsorted(begins, start[device[need]], side="right") - 1
        result[np.where(need)[0][slot >= 0]] = numbers[slot[slot >= 0]]
    return result
