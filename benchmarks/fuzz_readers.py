"""Fuzz every dlexplore reader with mutated real files; count what each one does with them.

Seeds are the project's real test files (``tests/data/traces``, ``data/``), plus, for the readers
whose inputs the tests build, an Nsight Systems export made by ``tests/test_traces_nsys.py``'s
``make_export``, a netCDF trace written by :func:`dlexplore.traces.netcdf.write_netcdf` and a
task-event CSV and JSON. Each case mutates one seed (truncation, bit flips, byte insertions and
deletions, wrong JSON types, huge numbers, bad UTF-8, 100k-deep nesting, an empty file, and gzip
bombs that inflate to 2 GiB) and runs the reader on it in a worker process that has

* a per-case time bound (``signal.alarm`` inside, and the parent kills a worker stuck in C code),
* an address-space bound (``RLIMIT_AS``, 2 GiB by default), so a reader that holds a bomb in
  memory fails with ``MemoryError`` instead of taking the machine.

A case is ``ok`` (the reader returned), ``error`` (a :class:`~dlexplore.errors.DlexploreError`
whose message names the file) or a ``finding``: any other exception, an error message that does
not name the file, a time-out, a memory blow-up or a crashed worker.

Usage::

    python benchmarks/fuzz_readers.py [--cases 10000] [--reader NAME] [--workers 2] [--timeout 5]
    python benchmarks/fuzz_readers.py --engine hypothesis [--cases 2000] [--reader NAME] [--seed 0]

The second form lets hypothesis choose the mutations (``st.randoms()`` driving the same code, up to
three stacked) and shrink the first failing file of each reader to a minimal one, kept on disk.

Cases are numbered; case ``i`` of a reader is reproducible from ``(reader, i, --seed)``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import multiprocessing as mp
import os
import random
import re
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
DATA = ROOT / "data"

MEMORY_BYTES = 2 << 30  # RLIMIT_AS of a worker (B)
BOMB_BYTES = 2 << 30  # inflated size of a gzip bomb (B)
DEEP = 100_000  # nesting depth of the deep-nesting mutation (levels)

MUTATIONS = (
    "truncate",
    "bitflip",
    "insert",
    "delete",
    "wrong_type",
    "huge_number",
    "bad_utf8",
    "deep_nesting",
    "empty",
    "duplicate_lines",
    "gzip_bomb",
)


# -- readers ---------------------------------------------------------------------------------------


def _pytorch(path: Path) -> Any:
    from dlexplore.traces import pytorch

    return pytorch.read([path])


def _horovod(path: Path) -> Any:
    from dlexplore.traces import horovod

    return horovod.read([path])


def _nsys(path: Path) -> Any:
    from dlexplore.traces import nsys

    return nsys.read([path])


def _nccl_tests(path: Path) -> Any:
    from dlexplore.traces import nccl_tests

    return nccl_tests.read(path)


def _darshan(path: Path) -> Any:
    from dlexplore.traces.darshan import read_darshan_parser_text

    return read_darshan_parser_text(path)


def _dlio(path: Path) -> Any:
    from dlexplore.traces.dlio import read_dlio_summary

    return read_dlio_summary(path)


def _netcdf(path: Path) -> Any:
    from dlexplore.traces import netcdf

    return netcdf.read([path])


def _measured(path: Path) -> Any:
    from dlexplore.measured import read_csv

    return read_csv(path)


def _catalog(path: Path) -> Any:
    # The registries are process-global: load into them, then restore them, so that one case's
    # entries never change the next case's outcome.
    from dlexplore.catalog.user import REGISTRY_OF, load_file

    registries = list({id(r): r for r in REGISTRY_OF.values()}.values())
    saved = {
        id(r): (r, {k: (v.copy() if isinstance(v, dict) else v) for k, v in vars(r).items()})
        for r in registries
    }
    try:
        return load_file(path)
    finally:
        for obj, state in saved.values():
            vars(obj).clear()
            vars(obj).update({k: (v.copy() if isinstance(v, dict) else v) for k, v in state.items()})


def _workflow(path: Path) -> Any:
    from dlexplore.traces.tasks import read_task_events

    return read_task_events(path)


READERS: dict[str, Callable[[Path], Any]] = {
    "pytorch": _pytorch,
    "horovod": _horovod,
    "nsys": _nsys,
    "nccl_tests": _nccl_tests,
    "darshan": _darshan,
    "dlio": _dlio,
    "netcdf": _netcdf,
    "measured": _measured,
    "catalog": _catalog,
    "workflow": _workflow,
}

#: Readers that accept gzip-compressed files (gzip seeds are mutated inside the compression too).
GZIP_READERS = frozenset({"pytorch", "horovod"})


# -- seeds -----------------------------------------------------------------------------------------


def _glob(folder: Path, *patterns: str) -> list[Path]:
    return sorted(p for pattern in patterns for p in folder.glob(pattern) if p.is_file())


def _built_seeds(workdir: Path) -> dict[str, list[Path]]:
    """Seeds of the readers whose real inputs the test suite builds (written under ``workdir``)."""
    seeds: dict[str, list[Path]] = {}
    spec = importlib.util.spec_from_file_location("_nsys_tests", ROOT / "tests" / "test_traces_nsys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seeds["nsys"] = [module.make_export(workdir / "rank0.sqlite", pid=4242, payload_rank=0)]
    from dlexplore.traces import horovod, netcdf

    # Read through a path relative to the checkout: the trace records the path it was read from, so
    # an absolute one would make the seed's bytes (and every numbered netCDF case) depend on where
    # the project is cloned.
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        trace = horovod.read([(TRACES / "horovod" / "timeline.json").relative_to(ROOT)])
    finally:
        os.chdir(here)
    # The current layout, and one written in the layout before categorical codes (still read).
    seeds["netcdf"] = [
        netcdf.write_netcdf(trace, workdir / "horovod.nc"),
        TRACES / "netcdf" / "horovod-timeline-v1.nc",
    ]
    csv_file = workdir / "tasks.csv"
    csv_file.write_text(
        "task,worker,start,end,kind\nsim-0,node0,0.0,1.5,simulate\n"
        "train-0,gpu0,1.5,2.25,train\nsim-1,node0,1.5,3.0,simulate\n"
    )
    json_file = workdir / "tasks.json"
    json_file.write_text(
        json.dumps(
            {
                "events": [
                    {"task": "sim-0", "worker": "node0", "start": 0.0, "end": 1.5, "kind": "simulate"},
                    {"task": "train-0", "worker": "gpu0", "start": 1.5, "end": 2.25, "kind": "train"},
                ]
            }
        )
    )
    seeds["workflow"] = [csv_file, json_file]
    return seeds


REAL = Path(__file__).resolve().parents[1].parent / "shared" / "traces-real"


def seed_files(workdir: Path) -> dict[str, list[Path]]:
    """The seed files of every reader (real test data; built ones written under ``workdir``)."""
    seeds = {
        "pytorch": (
            _glob(TRACES / "pytorch", "*/rank0.pt.trace.json.gz")
            + _glob(DATA / "traces", "*/rank0.json.gz")
            # real traces of other runs when ../shared/traces-real is there: NCCL calls and
            # kernels, ROCm, memory events
            + _glob(REAL / "pytorch", "*amd_trace*", "*trace_filter__sampled_rank-0*")
        ),
        "horovod": _glob(TRACES / "horovod", "*.json", "*.json.gz"),
        "nccl_tests": _glob(TRACES / "nccl-tests", "*.out", "*.txt", "*.log", "*.json"),
        "darshan": _glob(TRACES / "darshan", "*.txt"),
        "dlio": _glob(TRACES / "dlio", "*.json"),
        "measured": _glob(DATA / "measured", "*.csv"),
        "catalog": _glob(DATA / "catalog", "*.csv"),
    }
    seeds["nccl_tests"] = [p for p in seeds["nccl_tests"] if p.name != "README.txt"]
    seeds.update(_built_seeds(workdir))
    return seeds


# -- mutations -------------------------------------------------------------------------------------

_WRONG = [
    b'"x"',
    b"null",
    b"[]",
    b"{}",
    b"true",
    b"1e308",
    b"-1",
    b"18446744073709551616",
    b"NaN",
    b'{"a": [1, {"b": null}]}',
    b'""',
    b"-1e308",
    b"0",
]
_HUGE = [
    b"1e308",
    b"-1",
    b"18446744073709551616",
    b"1e999",
    b"-0",
    b"nan",
    b"inf",
    b"9" * 400,
    b"-9223372036854775809",
]
_VALUE_AFTER_KEY = re.compile(rb'":\s*("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*|true|false|null|\[\]|\{\})')
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80", b"\xc0\xaf"]

_bomb_cache: dict[bytes, bytes] = {}


def gzip_bomb(prefix: bytes = b"", inflated: int = BOMB_BYTES) -> bytes:
    """A gzip file of about 2 MB that inflates to ``inflated`` bytes: ``prefix`` then spaces.

    Built as one deflate stream of repeated 64 MiB blocks of spaces (cheap to make), so a reader
    that decompresses it whole needs ``inflated`` bytes of memory.
    """
    key = prefix + b"|" + str(inflated).encode()
    if key not in _bomb_cache:
        block = b" " * (64 << 20)
        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [comp.compress(prefix)]
        compressed_block = comp.compress(block)  # first block primes the window
        parts.append(compressed_block)
        # The remaining blocks compress identically once the window is all spaces.
        again = comp.compress(block)
        parts.append(again)
        parts.extend([again] * max(0, inflated // len(block) - 2))
        parts.append(comp.flush())
        # The trailer's CRC and size would need the whole stream; a wrong CRC is only seen at the
        # end, after a reader has already had to decide what to do with 2 GiB.
        _bomb_cache[key] = b"".join(parts)
    return _bomb_cache[key]


def mutate(data: bytes, rng: random.Random, kind: str) -> bytes:
    """``data`` changed by one mutation of ``kind`` (see :data:`MUTATIONS`)."""
    n = len(data)
    if kind == "empty":
        return rng.choice([b"", b" \n", b"\xef\xbb\xbf", b"\n\n\n"])
    if kind == "truncate":
        return data[: rng.randrange(n + 1)] if n else data
    if kind == "bitflip":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if buf:
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if kind == "insert":
        at = rng.randrange(n + 1)
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        junk = rng.choice([junk, b",", b"]", b"}", b'"', b"\n", b"\x00", b",,", b"\\"])
        return data[:at] + junk + data[at:]
    if kind == "delete":
        at = rng.randrange(n + 1)
        return data[:at] + data[at + rng.randint(1, 64) :]
    if kind == "duplicate_lines":
        lines = data.splitlines(keepends=True)
        if not lines:
            return data
        i = rng.randrange(len(lines))
        return b"".join(lines[:i] + [lines[i]] * rng.randint(2, 5) + lines[i + 1 :])
    if kind == "wrong_type":
        hits = list(_VALUE_AFTER_KEY.finditer(data)) or list(_NUMBER.finditer(data))
        if not hits:
            return data
        out = data
        for m in sorted(rng.sample(hits, min(len(hits), rng.randint(1, 4))), key=lambda m: -m.start()):
            g = 1 if m.re is _VALUE_AFTER_KEY else 0
            out = out[: m.start(g)] + rng.choice(_WRONG) + out[m.end(g) :]
        return out
    if kind == "huge_number":
        hits = list(_NUMBER.finditer(data))
        if not hits:
            return data + rng.choice(_HUGE)
        out = data
        for m in sorted(rng.sample(hits, min(len(hits), rng.randint(1, 4))), key=lambda m: -m.start()):
            out = out[: m.start()] + rng.choice(_HUGE) + out[m.end() :]
        return out
    if kind == "bad_utf8":
        at = rng.randrange(n + 1)
        return data[:at] + rng.choice(_BAD_UTF8) + data[at:]
    if kind == "deep_nesting":
        deep = b"[" * DEEP + b"]" * DEEP
        if rng.random() < 0.3:
            deep = b'{"a":' * DEEP + b"1" + b"}" * DEEP
        hits = list(_VALUE_AFTER_KEY.finditer(data))
        if hits and rng.random() < 0.7:
            m = rng.choice(hits)
            return data[: m.start(1)] + deep + data[m.end(1) :]
        if rng.random() < 0.5:
            return deep
        at = rng.randrange(n + 1)
        return data[:at] + deep + data[at:]
    raise ValueError(f"unknown mutation {kind!r}")


def make_case(reader: str, seeds: list[Path], index: int, seed: int) -> tuple[str, str, bytes]:
    """Case ``index`` of ``reader``: (mutation, file suffix, the file's bytes)."""
    return mutate_seed(reader, seeds, random.Random(f"{seed}:{reader}:{index}"))


def mutate_seed(
    reader: str, seeds: list[Path], rng: random.Random, *, stack: int = 1, bombs: bool = True
) -> tuple[str, str, bytes]:
    """One of ``seeds`` changed by ``stack`` mutations chosen with ``rng``: (mutations joined by
    ``+``, file suffix, the file's bytes).

    Any :class:`random.Random` drives it: the numbered cases of :func:`make_case` use a seeded one,
    the hypothesis tests (``tests/test_fuzz.py``) pass ``st.randoms()``, so that hypothesis chooses
    every position and byte, and shrinks a failing file to a minimal mutation.
    """
    path = seeds[rng.randrange(len(seeds))]
    raw = path.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    suffix = "".join(path.suffixes[-2:]) if gz else path.suffix
    # Gzip bombs are a few % of cases (each costs the reader real work); only for gzip readers.
    kinds = [k for k in MUTATIONS if k != "gzip_bomb"]
    if bombs and reader in GZIP_READERS and rng.random() < 0.003:
        prefix = gzip.decompress(raw)[:200] if gz else raw[:200]
        return "gzip_bomb", ".json.gz", gzip_bomb(prefix[: rng.randrange(len(prefix) + 1)])
    kind = rng.choice(kinds)
    compressed = gz and rng.random() < 0.2  # corrupt the compressed stream itself
    out = mutate(raw if compressed else gzip.decompress(raw) if gz else raw, rng, kind)
    names = [kind]
    for _ in range(stack - 1):
        names.append(rng.choice(kinds))
        out = mutate(out, rng, names[-1])
    if gz and not compressed and kind != "empty":
        out = gzip.compress(out, compresslevel=1, mtime=0)
    return "+".join(names), suffix, out


# -- running ---------------------------------------------------------------------------------------


class _CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so a reader's ``except Exception`` cannot swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise _CaseTimeout()


def refusal(path: Path, err: Exception) -> tuple[str, str]:
    """The outcome of a reader's DlexploreError on ``path``: ``error`` when it names the file,
    else a ``finding``."""
    message = str(err)
    if str(path) not in message and path.name not in message:
        return "finding", f"DlexploreError without the file name: {message[:300]}"
    return "error", message[:300]


def run_one(reader: str, path: Path, timeout_s: float) -> tuple[str, str]:
    """Run ``reader`` on ``path`` under a ``timeout_s`` alarm: (outcome, detail).

    outcome is ``ok``, ``error`` (a DlexploreError naming the file) or ``finding``.
    """
    from dlexplore.errors import DlexploreError
    from dlexplore.hdf5_probe import ENV_SECONDS

    # netCDF files are probed in a child process first (HDF5 can loop in C on a damaged file); its
    # limit must fall inside this case's, or a refused file would count as a hang.
    os.environ[ENV_SECONDS] = str(timeout_s / 2)
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            READERS[reader](path)
        return "ok", ""
    except _CaseTimeout:
        return "finding", f"hang: no result after {timeout_s} s"
    except DlexploreError as err:
        return refusal(path, err)
    except MemoryError:
        return "finding", "MemoryError: more than the address-space bound"
    except RecursionError:
        return "finding", "RecursionError: " + _where(sys.exc_info()[2])
    except BaseException as err:  # noqa: BLE001 - every other exception is what we look for
        return "finding", f"{type(err).__name__}: {str(err)[:200]} at {_where(sys.exc_info()[2])}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _where(tb: Any) -> str:
    frames = [f for f in traceback.extract_tb(tb) if "dlexplore" in f.filename]
    if not frames:
        frames = traceback.extract_tb(tb)[-1:]
    f = frames[-1]
    name = Path(f.filename).relative_to(ROOT) if ROOT in Path(f.filename).parents else f.filename
    return f"{name}:{f.lineno}"


def _limit_memory(memory: int) -> None:
    """Allow ``memory`` bytes of address space beyond what this (forked) process already maps: a
    fork of a large parent (a test session with torch loaded) already uses more than the bound."""
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:
        mapped = 0
    limit = mapped + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _worker(
    conn: Any, seeds: dict[str, list[str]], seed: int, timeout_s: float, memory: int, tmp: str
) -> None:
    _limit_memory(memory)
    seed_paths = {k: [Path(p) for p in v] for k, v in seeds.items()}
    for reader in READERS:  # import everything once, outside the per-case time bound
        try:
            run_one(reader, Path(tmp) / "warm-up-no-such-file", 60)
        except BaseException:  # noqa: BLE001
            pass
    while True:
        job = conn.recv()
        if job is None:
            return
        reader, index = job
        kind, suffix, data = make_case(reader, seed_paths[reader], index, seed)
        path = Path(tmp) / f"case-{os.getpid()}-{index}{suffix}"
        path.write_bytes(data)
        try:
            # Streaming 2 GiB of inflated text takes a reader ~10 s: bombs test memory, not speed.
            bound_s = max(timeout_s, 60.0) if kind == "gzip_bomb" else timeout_s
            outcome, detail = run_one(reader, path, bound_s)
        finally:
            path.unlink(missing_ok=True)
        conn.send((reader, index, kind, outcome, detail))


def _isolated(conn: Any, reader: str, path: str, timeout_s: float, memory: int) -> None:
    _limit_memory(memory)
    conn.send(run_one(reader, Path(path), timeout_s))


def warm_up(reader: str, seed: Path) -> None:
    """Read the sound file ``seed`` with ``reader`` in this process, so that the processes
    :func:`run_isolated` forks find the reader's modules imported: a fork per case would otherwise
    import them for every case (0.1-0.2 s each, most of a case's time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            READERS[reader](seed)
        except Exception:  # noqa: BLE001 - a seed the reader refuses still imported what it needs
            pass


def probe_here(path: Path, timeout_s: float) -> tuple[str, str] | None:
    """Probe a netCDF case in this process, under the limit :func:`run_one` gives it: its outcome
    when the probe refuses it, None when the probe passes it (remembered, so that the fork reading
    it does not probe again).

    The probe reads the file in a kept child process under a time limit (``dlexplore.hdf5_probe``), which
    is what makes a damaged HDF5 file safe to open in the caller's process, so the caller's process
    is where it is tested. A fork per case would start a child of its own, a fresh interpreter
    importing h5py (0.4-1 s), and that was most of each case's time.
    """
    from dlexplore.errors import DlexploreError
    from dlexplore.hdf5_probe import ENV_SECONDS, probe_hdf5

    before = os.environ.get(ENV_SECONDS)
    os.environ[ENV_SECONDS] = str(timeout_s / 2)  # as run_one sets it in the fork
    try:
        probe_hdf5(path)
    except DlexploreError as err:
        return refusal(path, err)
    except BaseException as err:  # noqa: BLE001 - the probe must refuse a file with a DlexploreError
        where = _where(sys.exc_info()[2])
        return "finding", f"{type(err).__name__} from the probe: {str(err)[:200]} at {where}"
    finally:
        if before is None:
            os.environ.pop(ENV_SECONDS, None)
        else:
            os.environ[ENV_SECONDS] = before
    return None


def run_isolated(
    reader: str,
    path: str | Path,
    *,
    timeout_s: float = 5.0,
    memory: int = MEMORY_BYTES,
    kill_after_s: float | None = None,
) -> tuple[str, str]:
    """Run one reader on one file in a fresh process under ``timeout_s`` (s) and ``memory`` (B).

    Returns ``(outcome, detail)`` as :func:`run_one`; a killed or crashed process is a finding.

    A netCDF file is first probed here (:func:`probe_here`), as it would be in a user's notebook;
    only a file the probe passes is read in the fresh process.
    """
    if reader == "netcdf" and (refused := probe_here(Path(path), timeout_s)) is not None:
        return refused
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_isolated, args=(child, reader, str(path), timeout_s, memory), daemon=True)
    proc.start()
    child.close()
    kill_after_s = 3 * timeout_s + 60 if kill_after_s is None else kill_after_s
    try:
        if parent.poll(kill_after_s):
            return parent.recv()
        return "finding", f"hang in C code (no result after {kill_after_s} s)"
    except EOFError:
        proc.join(5)
        return "finding", f"worker died (exit {proc.exitcode})"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()


def fuzz(
    readers: list[str],
    cases: int,
    *,
    workers: int = 2,
    seed: int = 0,
    timeout_s: float = 5.0,
    memory: int = MEMORY_BYTES,
    progress: bool = True,
    kill_after_s: float | None = None,
) -> dict[str, Any]:
    """Run ``cases`` cases per reader on ``workers`` processes.

    A worker that returns nothing for ``kill_after_s`` (s; default ``3 * timeout_s + 60``, which
    leaves room for gzip bombs) is stuck in C code: it is killed and the case is a finding.

    Returns ``{"counts": {reader: Counter(cases, ok, error, finding)}, "findings": [(reader, index,
    mutation, detail)], "seconds": wall time (s)}``.
    """
    started = time.perf_counter()
    kill_after_s = 3 * timeout_s + 60 if kill_after_s is None else kill_after_s
    counts = {r: Counter(cases=0, ok=0, error=0, finding=0) for r in readers}
    findings: list[tuple[str, int, str, str]] = []
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="dlexplore-fuzz-") as tmp:
        seeds = {k: [str(p) for p in v] for k, v in seed_files(Path(tmp)).items()}
        jobs = [(r, i) for i in range(cases) for r in readers]
        jobs.reverse()
        pool: dict[Any, tuple[Any, Any, tuple | None, float]] = {}

        def start() -> None:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, seeds, seed, timeout_s, memory, tmp), daemon=True)
            proc.start()
            child.close()
            pool[parent] = (proc, parent, None, 0.0)

        def record(reader: str, index: int, kind: str, outcome: str, detail: str) -> None:
            counts[reader]["cases"] += 1
            counts[reader][outcome] += 1
            if outcome == "finding":
                findings.append((reader, index, kind, detail))

        def feed(conn: Any) -> None:
            proc, _, _, _ = pool[conn]
            if jobs:
                job = jobs.pop()
                conn.send(job)
                pool[conn] = (proc, conn, job, time.monotonic())
            else:
                conn.send(None)
                pool.pop(conn)

        for _ in range(workers):
            start()
        for conn in list(pool):
            feed(conn)
        done = 0
        while pool:
            ready = wait(list(pool), timeout=1.0)
            for conn in ready:
                proc, _, job, _ = pool[conn]
                try:
                    reader, index, kind, outcome, detail = conn.recv()
                except (EOFError, OSError):  # the worker died (killed for memory, or crashed)
                    proc.join(5)
                    pool.pop(conn)
                    if job is not None:
                        record(job[0], job[1], "?", "finding", f"worker died (exit {proc.exitcode})")
                        done += 1
                    start()
                    feed(list(pool)[-1])
                    continue
                record(reader, index, kind, outcome, detail)
                done += 1
                feed(conn)
            now = time.monotonic()
            for conn, (proc, _, job, since) in list(pool.items()):
                # The alarm cannot interrupt C code (sqlite, regex); the parent kills the worker.
                if job is not None and now - since > kill_after_s:
                    proc.kill()
                    proc.join()
                    pool.pop(conn)
                    waited_s = now - since
                    record(job[0], job[1], "?", "finding", f"hang in C code (killed after {waited_s:.0f} s)")
                    done += 1
                    start()
                    feed(list(pool)[-1])
            if progress and done and not ready:
                print(f"  {done}/{cases * len(readers)} cases", file=sys.stderr, flush=True)
    return {"counts": counts, "findings": findings, "seconds": time.perf_counter() - started}


def table(result: dict[str, Any]) -> str:
    """The counts per reader as a text table."""
    rows = [f"{'reader':<12}{'cases':>8}{'ok':>8}{'errors':>8}{'findings':>10}"]
    for reader, c in result["counts"].items():
        rows.append(f"{reader:<12}{c['cases']:>8}{c['ok']:>8}{c['error']:>8}{c['finding']:>10}")
    return "\n".join(rows)


def _hypothesis_case(
    reader: str,
    seeds: list[Path],
    workdir: Path,
    counts: Counter,
    examples: int,
    seed: int,
    timeout_s: float,
    memory: int,
    api: tuple,
) -> tuple[Callable, dict]:
    """The hypothesis test of one reader, and the dict where it leaves its (shrunk) finding."""
    given, settings, hypothesis_seed, st, health_check = api
    last: dict[str, Any] = {}

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(health_check))
    @given(rng=st.randoms(use_true_random=False), stack=st.integers(1, 3))
    def one(rng: random.Random, stack: int) -> None:
        kinds, suffix, data = mutate_seed(reader, seeds, rng, stack=stack, bombs=False)
        path = workdir / f"{reader}-example{suffix}"
        path.write_bytes(data)
        outcome, detail = run_isolated(reader, path, timeout_s=timeout_s, memory=memory)
        counts["cases"] += 1
        counts[outcome] += 1
        if outcome == "finding":
            kept = workdir / f"{reader}-finding{suffix}"
            kept.write_bytes(data)  # the last failing example is the shrunk one
            last.update(file=str(kept), kinds=kinds, detail=detail)
            raise AssertionError(detail)

    return one, last


def fuzz_hypothesis(
    readers: list[str],
    examples: int,
    *,
    seed: int = 0,
    timeout_s: float = 5.0,
    memory: int = MEMORY_BYTES,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Run ``examples`` hypothesis examples per reader, one at a time, each in a fresh process.

    Hypothesis drives :func:`mutate_seed` (``st.randoms()``, up to 3 stacked mutations) and stops a
    reader at its first finding, which it shrinks to the smallest failing file; that file is kept
    under ``workdir``. Returns ``{"counts": ..., "findings": [(reader, file, mutations, detail)],
    "seconds": ...}`` as :func:`fuzz`.
    """
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    started = time.perf_counter()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="dlexplore-hypothesis-"))
    seeds = seed_files(workdir)
    counts = {r: Counter(cases=0, ok=0, error=0, finding=0) for r in readers}
    findings: list[tuple[str, str, str, str]] = []
    for reader in readers:
        warm_up(reader, seeds[reader][0])
        one, last = _hypothesis_case(
            reader,
            seeds[reader],
            workdir,
            counts[reader],
            examples,
            seed,
            timeout_s,
            memory,
            (given, settings, hypothesis_seed, st, HealthCheck),
        )
        try:
            one()
        except AssertionError:
            findings.append((reader, last["file"], last["kinds"], last["detail"]))
    return {"counts": counts, "findings": findings, "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    """Command line: fuzz, print the table and the first findings; exit 1 when there are findings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="cases per reader")
    parser.add_argument("--reader", action="append", choices=sorted(READERS), help="only this reader")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0, help="per-case time bound (s)")
    parser.add_argument(
        "--memory-gb", type=float, default=MEMORY_BYTES / 2**30, help="per-worker RLIMIT_AS (GiB)"
    )
    parser.add_argument("--show", type=int, default=20, help="how many findings to print")
    parser.add_argument(
        "--engine",
        choices=("numbered", "hypothesis"),
        default="numbered",
        help="numbered: seeded cases on --workers processes, counts every finding; "
        "hypothesis: one process, stops a reader at its first finding and shrinks it",
    )
    args = parser.parse_args(argv)
    readers = args.reader or list(READERS)
    if args.engine == "hypothesis":
        result = fuzz_hypothesis(
            readers, args.cases, seed=args.seed, timeout_s=args.timeout, memory=int(args.memory_gb * 2**30)
        )
        print(table(result))
        print(
            f"{sum(c['cases'] for c in result['counts'].values())} hypothesis examples (shrinking "
            f"included) in {result['seconds']:.0f} s"
        )
        for reader, path, kinds, detail in result["findings"]:
            print(f"  {reader}: shrunk to {path} [{kinds}]: {detail}")
        return 1 if result["findings"] else 0
    result = fuzz(
        readers,
        args.cases,
        workers=args.workers,
        seed=args.seed,
        timeout_s=args.timeout,
        memory=int(args.memory_gb * 2**30),
    )
    print(table(result))
    print(
        f"{sum(c['cases'] for c in result['counts'].values())} cases in {result['seconds']:.0f} s "
        f"on {args.workers} workers"
    )
    by_kind = Counter(
        (r, d.split(":")[0] + " " + d.rsplit(" at ", 1)[-1] if " at " in d else d[:80])
        for r, _, _, d in result["findings"]
    )
    if by_kind:
        print("\ndistinct findings (reader, kind at place): count")
        for (reader, what), n in by_kind.most_common(args.show):
            print(f"  {reader}: {what}: {n}")
        print("\nfirst findings (reader, case, mutation, detail):")
        for reader, index, kind, detail in result["findings"][: args.show]:
            print(f"  {reader} #{index} [{kind}] {detail}")
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
