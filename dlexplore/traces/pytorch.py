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
ranks (``worker0.1623143089861``, ``host_1016005``: process ids, time stamps). A single file without
any of them that holds no communication (no NCCL kernel, c10d or gloo call) is a single-process run:
rank 0 of 1, said by nothing. A single file whose rank is unknown but that communicates (a 2021
trace of a DDP run, before distributedInfo) is shown as rank 0 with a warning and
``trace.meta["rank_unknown"]``; several such files are an error asking for ``ranks=``. Two files
with the same rank, mixed world sizes, or several files that leave ranks out
(``allow_missing_ranks=True`` accepts the last, listing them in ``trace.meta["missing_ranks"]``)
are errors naming the files.

Traces of every Kineto release read alike: the 2021 category names (``Operator``, ``Runtime``,
``Kernel``, ``Memcpy``, ``Memset``; row ids such as ``"stream 7"``; ``external id``) are today's
``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``. Device events of other
accelerators count as the device's work: ROCm and XPU write ``kernel`` too; MTIA writes
``mtia_ccp_events`` (rows ``mtia:<pid>:<tid>``; names ``dma*`` are copies), Gaudi ``hpu_op``
(``hpu:``). The legacy profiler's export (``torch.autograd.profiler``'s ``export_chrome_trace``: a
JSON array, events on ``"CPU functions"`` / ``"CUDA functions"`` without categories) reads as
``cpu_op`` and ``kernel`` events, with a warning (:mod:`.kineto_legacy`); a file whose events carry
no category and that is not that export is all 'other', with a warning.

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
``baseTimeNanoseconds``, the thread names and whether the file is a legacy export
(``legacy_export``). What the reader warns of (a legacy export, a run that used a GPU but whose
trace holds no GPU activity, a file of another tool) is in :mod:`.kineto_notes`.

Reading goes in three stages, a module each: every file is decoded straight into columns of the
fields used (:mod:`.kineto_decode`: msgspec structs where msgspec is installed, else the standard
library; a few MB of JSON at a time, several files in worker processes when the set is large); the
rows kept are chosen and checked per file (:mod:`.kineto_rows`); the ranks' rows become one event
table (:mod:`.kineto_assemble`). Here: the options, and which file is which rank.
"""

from __future__ import annotations

import gc
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DlexploreError
from .kineto_assemble import assemble
from .kineto_comm import DTYPE_BYTES, Labels
from .kineto_decode import iter_kineto_files
from .kineto_notes import say_what_is_missing
from .kineto_rows import PHASES_READ, RankFile, canonical_category, carries_sizes
from .schema import Trace

__all__ = ["read", "rank_from_filename", "canonical_category", "DTYPE_BYTES"]

_OPTIONS = ("allow_missing_ranks", "chunk_chars", "ranks")
_MAX_WORLD = 1 << 22  # ranks: far beyond any job, well within the int32 rank column

# Only an explicit rank: other numbers in names are process ids, hosts, times (worker0.1623143089861).
_RANK_PATTERN = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)(?!\d)", re.IGNORECASE)


def rank_from_filename(path: str | Path) -> int | None:
    """The rank a trace file's name states (``rank3``, ``rank_3``, ``rank-3``, ``_rank_3``), or None.

    Other numbers in a name (a process id, a host, a time stamp) are not ranks."""
    match = _RANK_PATTERN.search(Path(path).name)
    return int(match.group(1)) if match else None


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
        Bytes of JSON decoded at a time (default 8 Mi); memory vs per-chunk overhead.

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
    enabled = gc.isenabled()
    gc.disable()  # the standard library's parse makes millions of containers, none in a cycle
    try:
        files = []
        # one file's columns at a time: each file's rows are taken before the next is decoded
        for columns in iter_kineto_files(
            paths,
            progress=None if len(paths) > 1 else False,
            lenient=True,
            phases=PHASES_READ,
            **({"chunk_bytes": int(chunk_chars)} if chunk_chars else {}),
        ):
            files.append(RankFile(columns, names, cats, streams))
            files[-1].identify()
            del columns
    finally:
        if enabled:
            gc.enable()
    # one file that neither says a rank nor communicates is a single-process run: rank 0 of 1
    alone = len(files) == 1 and not any(carries_sizes(name) for name in names.values)
    world_size, missing = _assign_ranks(files, allow_missing, options.get("ranks"), alone)
    files.sort(key=lambda f: f.rank)
    trace = assemble(files, world_size, names, cats, streams)
    trace.meta["missing_ranks"] = missing
    trace.meta["rank_unknown"] = [f.rank for f in files if not f.rank_known]
    for file in files:
        trace.meta["ranks"][file.rank]["legacy_export"] = file.legacy is not None
    say_what_is_missing(trace, files, [c for c in cats.values if c])
    return trace


def _assign_ranks(
    files: list[RankFile], allow_missing: bool, ranks: Any = None, single_process: bool = False
) -> tuple[int, list[int]]:
    """Each file's rank (``ranks=``, else distributedInfo, else a rank its name states, else 0 for a
    ``single_process`` run); the world size and the ranks missing from it. See the module docstring."""
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
        if rank is None and single_process:
            file.rank = 0
            continue
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
    by_rank: dict[int, RankFile] = {}
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
