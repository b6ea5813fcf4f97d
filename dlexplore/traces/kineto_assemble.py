"""The rows of every rank's file -> one event table: times on one axis, categories, steps, sizes.

Stage 3 of 3 of the PyTorch reader (:mod:`.pytorch`; the files' rows come from
:mod:`.kineto_rows`): a module of its own because deciding categories, steps and communication
for the whole set is a different concern from reading one file.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .events import storable_labels
from .kineto_comm import HOST_COMM_PREFIXES, RPC, CommArgs, EventColumns, Labels, resolve_communication
from .kineto_decode import PARSER
from .kineto_rows import (
    COPY_CATS,
    DEVICE_KINDS,
    KERNEL_CATS,
    NCCL_KERNEL,
    RUNTIME_CATS,
    RankFile,
    canonical_category,
)
from .schema import CATEGORIES, COLLECTIVES, Trace, make_events, normalize_collective_name

__all__ = ["assemble", "ORIGIN_GRID"]

_HOST_OP_CATS = frozenset({"cpu_op", "user_annotation"})
_DEVICE_COPY = re.compile(r"^(?:hip)?(Memcpy|Memset)|^dma")  # copies named as kernels (MTIA: dma*)
_STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
_DATA_PREFIX = "enumerate(DataLoader)"
ORIGIN_GRID = 2.0**30  # µs


def _table(strings: Labels, test) -> np.ndarray:
    return np.fromiter((test(v) for v in strings.values), dtype=bool, count=len(strings.values))


def _sized_rows(
    files: list[RankFile], offsets: np.ndarray
) -> tuple[list[CommArgs], tuple[np.ndarray, np.ndarray] | None]:
    """The files' communication arguments and plain copies' (rows, bytes), rows in the assembled order."""
    infos, copy_rows, copy_bytes = [], [], []
    for file, offset in zip(files, offsets[:-1], strict=True):
        for info in file.comm:
            info.row += offset
            infos.append(info)
        copy_rows.append(file.copy_rows + offset)
        copy_bytes.append(file.copy_bytes)
    return infos, (np.concatenate(copy_rows), np.concatenate(copy_bytes)) if copy_rows else None


def assemble(files: list[RankFile], world_size: int, names: Labels, cats: Labels, streams: Labels) -> Trace:
    """One :class:`Trace` of the files' rows (each file's ``rank`` known)."""
    counts = [f.rows for f in files]
    total = int(sum(counts))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def column(key: str, dtype) -> np.ndarray:
        parts = [f.parts[key] for f in files]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)

    rank = np.repeat(np.asarray([f.rank for f in files], dtype=np.int32), counts)
    ts, shift, epoch_ns = _time_axis(files, column("ts", np.float64))
    start = ts * 1e-6 + np.repeat(shift, counts)
    duration = column("dur", np.float64) * 1e-6
    cat_code = column("cat", np.int32)
    name_code = column("name", np.int32)
    stream_code = column("stream", np.int32)
    corr = column("corr", np.int64)
    ext = column("ext", np.int64)

    gpu_trace = any(canonical_category(cats.values[c]) in KERNEL_CATS for c in np.unique(cat_code).tolist())
    category, collective, step_of_name = _classify(cat_code, name_code, cats, names, gpu_trace)
    on_device = (
        _table(streams, lambda v: not v.startswith("cpu:"))[stream_code] if total else np.zeros(0, bool)
    )
    infos, copies = _sized_rows(files, offsets)
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
        kernel_cats=frozenset(c for c in cats.values if canonical_category(c) in KERNEL_CATS),
        runtime_cats=frozenset(c for c in cats.values if canonical_category(c) in RUNTIME_CATS),
        copy_cats=frozenset(c for c in cats.values if canonical_category(c) in COPY_CATS),
        world_size=world_size,
        copies=copies,
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
        "process_group": _categorical(comm.group, comm.groups.values),
        "dtype": _categorical(comm.dtype, comm.dtypes.values),
        "peer": pd.arrays.IntegerArray(np.where(peer >= 0, peer, 0), peer < 0),
    }
    columns["correlation"][corr < 0] = pd.NA
    columns["group_size"][group_size < 0] = pd.NA
    paths = tuple(str(f.path) for f in files)
    events = make_events(columns, {"source": "", "format": "pytorch", "files": list(paths)})
    events.attrs.pop("source")
    meta = _meta(files, streams, gpu_trace, epoch_ns)
    return Trace(events, "pytorch", paths, world_size, meta, memory=_memory_table(files, shift))


def _time_axis(files: list[RankFile], ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int | None]:
    """The files' times (µs) from a common origin, each file's shift (s) from its
    ``baseTimeNanoseconds``, and the origin as Unix ns where the files say it (else None)."""
    bases = [f.meta.get("baseTimeNanoseconds") for f in files]
    epoch_ns = None
    shift = np.zeros(len(files))
    # Count from a whole number of 2**30 µs (18 minutes) before the set's first event: times of
    # 1.7e9 s (Unix time) or 4e6 s (a device clock) would otherwise keep only 0.2 µs or 1 ns of
    # resolution. A coarse origin is the same for one rank's file alone as for the whole set, so
    # both give the same numbers (dlexplore.traces.summarize reads one file at a time).
    origin = float(np.floor(ts.min() / ORIGIN_GRID) * ORIGIN_GRID) if len(ts) else 0.0
    ts = ts - origin
    for file in files:
        file.ts_origin = origin
    if all(isinstance(b, int) and not isinstance(b, bool) for b in bases):
        epoch_ns = min(bases) + int(origin) * 1000
        shift = np.asarray([(b - min(bases)) * 1e-9 for b in bases])
    elif origin > 1e14:  # after 1973: the file's times are Unix times in µs
        epoch_ns = int(origin) * 1000
    return ts, shift, epoch_ns


def _meta(files: list[RankFile], streams: Labels, gpu_trace: bool, epoch_ns: int | None) -> dict:
    """The trace's ``meta``: each rank's file and what its metadata says, backend, device, epoch."""
    backends = sorted({f.backend for f in files if f.backend})
    return {
        "ranks": {
            f.rank: {
                "file": str(f.path),
                "distributedInfo": f.meta.get("distributedInfo"),
                "deviceProperties": f.meta.get("deviceProperties"),
                "baseTimeNanoseconds": f.meta.get("baseTimeNanoseconds"),
                "schemaVersion": f.meta.get("schemaVersion"),
                "profile_memory": f.meta.get("profile_memory"),
                "threads": {_thread_stream(k, streams): v for k, v in f.threads.items()},
                "events_read": f.events_read,
            }
            for f in files
        },
        "backend": backends[0] if len(backends) == 1 else (backends or None),
        "device": "cuda" if gpu_trace else "cpu",
        "epoch_ns": epoch_ns,
        "parser": files[0].parser if files else PARSER,
    }


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


def _memory_table(files: list[RankFile], shift: np.ndarray) -> pd.DataFrame | None:
    """The allocator's ``[memory]`` events of every rank (see :class:`~dlexplore.traces.schema.Trace`)."""
    parts = []
    for file, offset in zip(files, shift, strict=True):
        if not len(file.memory["ts"]):
            continue
        ts, kind, device, delta, allocated, reserved, address = (
            file.memory[k]
            for k in ("ts", "Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr")
        )
        # a label per distinct (type, id): the allocator writes tens of thousands of events
        # (type, id) as one complex number: np.unique of pairs by rows sorts a structured view (15 of
        # a 54 MB trace's 21 ms here), of complex numbers the plain way
        pairs, inverse = np.unique(kind + 1j * np.nan_to_num(device), return_inverse=True)
        names = [_DEVICE_TYPES.get(int(k), f"device{int(k)}") for k in pairs.real]
        distinct = [n if n == "cpu" else f"{n}:{int(d)}" for n, d in zip(names, pairs.imag, strict=True)]
        labels = np.asarray(distinct, dtype=object)[inverse.ravel()]
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


def _categorical(codes: np.ndarray, values: list[str]) -> pd.Categorical:
    """Codes into ``values`` (-1: missing) as a categorical that pandas' string storage can hold."""
    shown = storable_labels(values)
    if len(set(shown)) < len(shown):  # an escaped surrogate met its escape written out
        return pd.Categorical(np.asarray(shown + [np.nan], dtype=object)[codes])
    return pd.Categorical.from_codes(codes, categories=shown)


def _sorted_categorical(codes: np.ndarray, strings: Labels) -> pd.Categorical:
    """Codes as a categorical of the values used, sorted: the same whatever the files' order."""
    used, inverse = np.unique(codes, return_inverse=True)
    labels = np.asarray(storable_labels([strings.values[c] for c in used.tolist()]), dtype=object)
    order = np.argsort(labels, kind="stable")
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    if len(set(labels.tolist())) < len(labels):  # an escaped surrogate met its escape written out
        return pd.Categorical(labels[inverse.ravel()])
    return pd.Categorical.from_codes(rank[inverse.ravel()], categories=labels[order].tolist())


def _thread_stream(key: str, streams: Labels) -> str:
    """The stream name of a ``pid:tid`` thread_name record (a device's row if events ran there)."""
    return next(
        (f"{kind}:{key}" for kind in DEVICE_KINDS[1:] if f"{kind}:{key}" in streams.codes), f"cpu:{key}"
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
    if cat in KERNEL_CATS:
        if NCCL_KERNEL.match(name):
            return "communication", normalize_collective_name(name.split("(")[0])
        copy = _DEVICE_COPY.match(name)
        if copy:  # MTIA's dma, copies that a runtime reports as kernels
            return ("memset" if copy.group(1) == "Memset" else "memcpy"), ""
        return "compute", ""
    if cat == "gpu_memcpy":
        return "memcpy", ""
    if cat == "gpu_memset":
        return "memset", ""
    if cat in RUNTIME_CATS:
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
