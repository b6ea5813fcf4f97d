"""Collect real PyTorch profiler traces from a small data-parallel training run on this machine's CPU.

    from dlexplore.traces.collect import collect
    manifest = collect("runs/mlp-2rank", nproc=2, steps=4, model="mlp")
    trace = dlexplore.load_trace(manifest.parent)

``nproc`` worker processes train one model with ``torch.distributed`` (gloo backend, rendezvous on
127.0.0.1 at a free port) and ``DistributedDataParallel``: synthetic data through a real
``DataLoader`` with a ``DistributedSampler``, cross-entropy loss, SGD with momentum. Every rank runs
``torch.profiler.profile`` (CPU activity, ``record_shapes=True``) over a ``wait``/``warmup``/``active``
schedule and writes ``rank<R>.json.gz``, a Chrome trace whose top-level ``distributedInfo`` gives the
backend, rank and world size. ``manifest.json`` beside them says how the run was made (arguments,
versions, host, model size, per-rank step times and losses) and lists every file with its size and
SHA-256.

Workers are separate Python processes started with :mod:`subprocess` (not ``multiprocessing``), so a
script that calls :func:`collect` needs no ``if __name__ == "__main__":`` guard, each worker's output
can be read back line by line, and a hung worker can be killed. Each runs with
``OMP_NUM_THREADS=1``: ``nproc`` workers that each use every core would oversubscribe the machine
and the trace would show contention, not training.

Nothing half-made is left behind: the run writes into a hidden folder beside ``out`` and renames it
to ``out`` only when every rank has finished and the manifest is written; on any failure (a worker
error, the time limit, Ctrl-C) the hidden folder is removed and the workers are killed.

Kept whole: the parent side of a collection run, in order: arguments, workers, their output, the
manifest, publishing the folder.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import importlib.util
import json
import os
import platform
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._io import atomic_open, replace_folder
from .._version import __version__
from ..errors import DlexploreError, UnknownNameError
from .collect_worker import (
    MESSAGE_PREFIX,
    MODELS,
    NUM_CLASSES,
    TRANSFORMER,
    WAIT_STEPS,
    build_model,
    sample_shape,
    transformer_spec,
)

__all__ = ["collect", "MODELS", "MANIFEST_NAME", "build_model", "TRANSFORMER"]


#: File name of the run's manifest inside the output folder.
MANIFEST_NAME = "manifest.json"

MANIFEST_VERSION = 1


ProgressFn = Callable[[str], None]


def _print_progress(message: str) -> None:
    print(f"dlexplore collect: {message}", file=sys.stderr, flush=True)


def collect(
    out: str | os.PathLike,
    *,
    nproc: int = 2,
    steps: int = 4,
    model: str = "mlp",
    batch_size: int = 32,
    warmup: int = 1,
    port: int | None = None,
    overwrite: bool = False,
    timeout: float = 300.0,
    seed: int = 0,
    progress: ProgressFn | None = _print_progress,
    _fail_rank: int | None = None,
) -> Path:
    """Run data-parallel training on the CPU with ``nproc`` gloo ranks, profile every rank, and write
    the per-rank traces and a manifest into the folder ``out``.

    Parameters
    ----------
    out:
        Folder to create. It must not exist or be empty, unless ``overwrite`` is true (then the old
        folder is replaced once the new run has succeeded, never before).
    nproc:
        Worker processes (ranks), >= 1.
    steps:
        Training steps (iterations) the profiler records on every rank, >= 1. The run trains
        ``1 + warmup + steps`` steps: one skipped, ``warmup`` profiled but discarded, ``steps`` kept.
    model:
        One of :data:`MODELS`: ``mlp`` or ``cnn``.
    batch_size:
        Samples per rank per step (the global batch is ``nproc * batch_size``).
    warmup:
        Profiler warm-up steps (recorded, then discarded), >= 0.
    port:
        TCP port on 127.0.0.1 for the rendezvous; default: a free port chosen by the system.
    overwrite:
        Replace a non-empty ``out``.
    timeout:
        Seconds the whole run may take; then every worker is killed and a :class:`DlexploreError`
        raised, so nothing hangs.
    seed:
        Seed of the model's initial weights and the synthetic data.
    progress:
        Called with one line of text per phase and rank (from the calling thread); default prints
        to stderr; ``None`` is silent.
    _fail_rank:
        For tests: this rank raises an error after joining the process group.

    Returns
    -------
    pathlib.Path
        The path of ``out/manifest.json``. The traces are ``out/rank<R>.json.gz``.

    Raises
    ------
    DlexploreError
        Bad arguments, ``torch`` not installed, ``out`` not empty, a worker's failure (with that
        rank's error), or the time limit.
    """
    started = time.perf_counter()
    say: ProgressFn = progress if progress is not None else (lambda message: None)
    arguments = dict(
        nproc=nproc,
        steps=steps,
        model=model,
        batch_size=batch_size,
        warmup=warmup,
        port=port,
        overwrite=overwrite,
        timeout=timeout,
        seed=seed,
    )
    _check_arguments(
        nproc=nproc,
        steps=steps,
        model=model,
        batch_size=batch_size,
        warmup=warmup,
        port=port,
        timeout=timeout,
        fail_rank=_fail_rank,
    )
    target = Path(out).expanduser().absolute()
    _check_target(target, overwrite)
    # torch is imported by the workers only: the calling process (the CLI) stays light and quick.
    if importlib.util.find_spec("torch") is None:
        raise DlexploreError(
            "collecting traces needs PyTorch, which is not installed: pip install 'dlexplore[torch]'"
        )
    partial = _partial_folder(target)
    work = partial / ".work"
    work.mkdir()
    try:
        port = port if port is not None else _free_port()
        say(
            f"{nproc} ranks, model {model}, {WAIT_STEPS}+{warmup}+{steps} steps "
            f"(skipped+warm-up+profiled), gloo on 127.0.0.1:{port}"
        )
        config = _worker_config(arguments, port, partial, work, _fail_rank)
        results = _run_workers(config, nproc, timeout, say)
        shutil.rmtree(work)
        files = _written_traces(partial, nproc)
        wall_time = time.perf_counter() - started
        manifest = _manifest(arguments, port, results, files, wall_time)
        with atomic_open(partial / MANIFEST_NAME, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1)
            handle.write("\n")
        _publish(partial, target, overwrite)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    say(f"wrote {nproc} traces and {MANIFEST_NAME} to {target} in {wall_time:.1f} s")
    return target / MANIFEST_NAME


def _worker_config(
    arguments: dict[str, Any], port: int, partial: Path, work: Path, fail_rank: int | None
) -> dict[str, Any]:
    """What every rank's process is told (its own rank is added when it starts)."""
    return dict(
        world_size=arguments["nproc"],
        steps=arguments["steps"],
        model=arguments["model"],
        batch_size=arguments["batch_size"],
        warmup=arguments["warmup"],
        wait=WAIT_STEPS,
        seed=arguments["seed"],
        port=port,
        out=str(partial),
        work=str(work),
        timeout=arguments["timeout"],
        fail_rank=fail_rank,
        sys_path=list(sys.path),
    )


def _partial_folder(target: Path) -> Path:
    """A new folder beside ``target`` for the run to fill before it is published (renamed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    # mkdtemp makes the folder private (0700); give it the mode a plain mkdir would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(partial, 0o777 & ~umask)
    return partial


def _written_traces(partial: Path, nproc: int) -> list[dict]:
    """Each rank's trace file: its name, size and checksum; a rank without one is an error."""
    files = []
    for rank in range(nproc):
        path = partial / f"rank{rank}.json.gz"
        if not path.is_file():
            raise DlexploreError(f"rank {rank} finished without writing its trace {path.name}")
        files.append({"rank": rank, "path": path.name, "bytes": path.stat().st_size, "sha256": _sha256(path)})
    return files


def _check_arguments(
    *,
    nproc: int,
    steps: int,
    model: str,
    batch_size: int,
    warmup: int,
    port: int | None,
    timeout: float,
    fail_rank: int | None,
) -> None:
    if model not in MODELS:
        raise UnknownNameError("model", model, MODELS)
    for name, value, least in (
        ("nproc", nproc, 1),
        ("steps", steps, 1),
        ("batch_size", batch_size, 1),
        ("warmup", warmup, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise DlexploreError(f"{name} must be an integer >= {least}, got {value!r}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise DlexploreError(f"port must be an integer in 1..65535, got {port!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise DlexploreError(f"timeout must be > 0 seconds, got {timeout!r}")
    if fail_rank is not None and not 0 <= fail_rank < nproc:
        raise DlexploreError(f"_fail_rank must be a rank in 0..{nproc - 1}, got {fail_rank!r}")


def _check_target(target: Path, overwrite: bool) -> None:
    if target.exists() and not target.is_dir():
        raise DlexploreError(f"{target}: exists and is not a folder; choose another --out")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise DlexploreError(
            f"{target}: the folder exists and is not empty; choose another --out "
            "or allow overwriting it (overwrite=True, --overwrite)"
        )


def _free_port() -> int:
    # The port is free now; another program could take it before rank 0 binds it, then the
    # rendezvous fails with "address already in use" and the user passes a port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loopback_interface() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _publish(partial: Path, target: Path, overwrite: bool) -> None:
    """Rename the finished folder to ``target``; an old ``target`` goes only after the rename."""
    if target.is_dir() and any(target.iterdir()) and not overwrite:  # it filled up meanwhile
        raise DlexploreError(f"{target}: the folder is not empty any more; the run is not saved")
    replace_folder(partial, target)


def _manifest(
    arguments: dict[str, Any],
    port: int,
    results: list[dict[str, Any]],
    files: list[dict[str, Any]],
    wall_time: float,
) -> dict[str, Any]:
    # Kept whole: the manifest is one JSON document, written here literally in the order it has
    # in the file, so that reading this function is reading the file.
    nproc, steps, model = arguments["nproc"], arguments["steps"], arguments["model"]
    batch_size, warmup = arguments["batch_size"], arguments["warmup"]
    torch_version, parameters = results[0]["torch_version"], results[0]["parameters"]
    call_args = ", ".join(
        f"{k}={v!r}"
        for k, v in arguments.items()
        if k in ("nproc", "steps", "model", "batch_size", "warmup", "seed")
    )
    return {
        "manifest_version": MANIFEST_VERSION,
        "made_by": "dlexplore.traces.collect.collect",
        "call": f"collect(OUT, {call_args})",
        "command": shlex.join(
            [
                "dlexplore",
                "collect",
                "--nproc",
                str(nproc),
                "--steps",
                str(steps),
                "--model",
                model,
                "--batch-size",
                str(batch_size),
                "--warmup",
                str(warmup),
                "--seed",
                str(arguments["seed"]),
                "--out",
                "OUT",
            ]
        ),
        "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]] if sys.argv else [],
        "arguments": {k: v for k, v in arguments.items() if k != "overwrite"},
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            "dlexplore": __version__,
            "torch": torch_version,
            "python": platform.python_version(),
        },
        "host": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "machine": platform.machine(),
        },
        "distributed": {
            "backend": "gloo",
            "world_size": nproc,
            "master": f"127.0.0.1:{port}",
            "wrapper": "torch.nn.parallel.DistributedDataParallel",
            "threads_per_rank": 1,
        },
        "model": {
            "name": model,
            "description": MODELS[model],
            "parameters": parameters,
            "gradient_bytes": parameters * 4,  # float32 gradients, what the allreduces carry
            **({"workload": transformer_spec()} if model == "transformer" else {}),
            "dtype": "float32",
            "optimizer": "SGD(lr=0.01, momentum=0.9)",
            "loss": "cross_entropy",
        },
        "data": {
            "kind": "synthetic",
            "sample_shape": list(sample_shape(model)),
            "classes": TRANSFORMER["vocab"] if model == "transformer" else NUM_CLASSES,
            # Random labels: nothing to learn, the loss stays near ln(classes) (2.303 for 10).
            "labels": "uniform random",
            "loader": "torch.utils.data.DataLoader(num_workers=0) with DistributedSampler",
        },
        "batch_size_per_rank": batch_size,
        "global_batch_size": batch_size * nproc,
        "profiler": {
            "activities": ["CPU"],
            "record_shapes": True,
            "schedule": {"wait": WAIT_STEPS, "warmup": warmup, "active": steps, "repeat": 1},
            # ProfilerStep#N counts every step from 0, so the kept ones are these.
            "profiled_steps": list(range(WAIT_STEPS + warmup, WAIT_STEPS + warmup + steps)),
        },
        "steps_trained": WAIT_STEPS + warmup + steps,
        "notes": {
            "step_times_s": "wall time of every trained step on the rank (time.perf_counter, from the end "
            "of the previous step to the end of optimizer.step(), before prof.step()), "
            "skipped and warm-up steps included",
            "losses": "training loss of every trained step on the rank",
            "wall_time_s": "the whole collection, from the call to the manifest (rank: from its start)",
        },
        "ranks": [
            {key: result[key] for key in ("rank", "pid", "step_times_s", "losses", "wall_time_s")}
            for result in results
        ],
        "files": files,
        "wall_time_s": round(wall_time, 3),
    }


class _Worker:
    """One rank's process and the thread that reads its output."""

    def __init__(self, rank: int, process: subprocess.Popen, messages: queue.Queue):
        self.rank = rank
        self.process = process
        self.log: deque[str] = deque(maxlen=40)
        self.error: str | None = None
        self.error_at = float("inf")  # time.monotonic() when the error arrived
        self.result: dict[str, Any] | None = None
        self.reader = threading.Thread(target=self._read, args=(messages,), daemon=True)
        self.reader.start()

    def _read(self, messages: queue.Queue) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.rstrip("\n")
            if line.startswith(MESSAGE_PREFIX):
                try:
                    message = json.loads(line[len(MESSAGE_PREFIX) :])
                except ValueError:
                    self.log.append(line)
                    continue
                if message.get("kind") == "error":
                    # Stamped here, as it arrives: the rank that failed first is the cause, the
                    # others usually fail only because it left.
                    self.error, self.error_at = str(message.get("text")), time.monotonic()
                messages.put((self.rank, message))
            else:
                self.log.append(line)

    def kill(self) -> None:
        if self.process.poll() is None:
            # The worker leads its own process group (start_new_session): end it and its children.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self.reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _run_workers(config: dict[str, Any], nproc: int, timeout: float, say: ProgressFn) -> list[dict]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(config["port"]),
        WORLD_SIZE=str(nproc),
    )
    loopback = _loopback_interface()
    if loopback and "GLOO_SOCKET_IFNAME" not in env:
        # Gloo otherwise binds to the address the host name resolves to, which need not be local.
        env["GLOO_SOCKET_IFNAME"] = loopback
    messages: queue.Queue = queue.Queue()
    workers: list[_Worker] = []
    bootstrap = (
        "import sys, json; config = json.loads(sys.argv[1]); sys.path[:] = config['sys_path']; "
        "from dlexplore.traces.collect_worker import main; main(config)"
    )
    deadline = time.monotonic() + timeout
    try:
        for rank in range(nproc):
            rank_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
            process = subprocess.Popen(
                [sys.executable, "-c", bootstrap, json.dumps(dict(config, rank=rank))],
                cwd=config["work"],
                env=rank_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                encoding="utf-8",
                errors="replace",
                start_new_session=True,
            )
            workers.append(_Worker(rank, process, messages))
        say(f"started {nproc} worker processes (pids {', '.join(str(w.process.pid) for w in workers)})")
        while True:
            _drain(messages, workers, say)
            failed = [w for w in workers if w.process.poll() not in (None, 0)]
            if failed:
                for w in workers:
                    w.kill()
                _drain(messages, workers, say)
                raise DlexploreError(_failure_message(failed, workers))
            if all(w.process.poll() == 0 for w in workers):
                for w in workers:
                    w.reader.join(timeout=10)
                _drain(messages, workers, say)
                break
            if time.monotonic() > deadline:
                for w in workers:
                    w.kill()
                waiting = [w.rank for w in workers if w.result is None]
                raise DlexploreError(
                    f"the run took longer than its time limit of {timeout:g} s; "
                    f"ranks {waiting} had not finished and were stopped"
                )
            time.sleep(0.05)
    except BaseException:
        for w in workers:
            w.kill()
        raise
    for w in workers:
        if w.process.stdout is not None:
            w.process.stdout.close()
    missing = [w.rank for w in workers if w.result is None]
    if missing:
        raise DlexploreError(f"ranks {missing} exited without reporting their results")
    return [w.result for w in workers]  # type: ignore[misc]


def _drain(messages: queue.Queue, workers: list[_Worker], say: ProgressFn) -> None:
    while True:
        try:
            rank, message = messages.get_nowait()
        except queue.Empty:
            return
        kind = message.get("kind")
        if kind == "progress":
            say(f"rank {rank}: {message['text']}")
        elif kind == "result":
            workers[rank].result = message["result"]


def _failure_message(failed: list[_Worker], workers: list[_Worker]) -> str:
    reported = [w for w in workers if w.error] or failed
    first = min(reported, key=lambda w: (w.error_at, w.rank))
    detail = first.error or "\n".join(first.log) or "(no output)"
    code = first.process.returncode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
    text = f"rank {first.rank} of {len(workers)} failed ({how}): {detail.strip()}"
    if first.error and first.log:
        text += "\n  its last output:\n    " + "\n    ".join(list(first.log)[-10:])
    return text


# --- inside a worker process ---------------------------------------------------------------------
