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
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
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
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._io import atomic_open, replace_folder
from .._version import __version__
from ..errors import DlexploreError, UnknownNameError

__all__ = ["collect", "MODELS", "MANIFEST_NAME", "build_model", "TRANSFORMER"]

#: The models a run can train, with what they are (shown in errors and the manifest).
MODELS: dict[str, str] = {
    "mlp": "multilayer perceptron: Linear(256, 512), ReLU, Linear(512, 512), ReLU, Linear(512, 10)",
    "cnn": "small convolutional net on 3x32x32 images: Conv2d(3, 16, 3), ReLU, MaxPool(2), "
    "Conv2d(16, 32, 3), ReLU, MaxPool(2), Linear(2048, 10)",
    "transformer": "BERT-style transformer encoder on 64-token sequences: word and position "
    "embeddings (vocabulary 1024, hidden 128), LayerNorm, 2 post-LN TransformerEncoderLayers (4 heads, "
    "feed-forward 512, GELU), logits through the tied word embeddings; a language-model loss",
}
#: The transformer's sizes, as dlexplore's catalog builds the same network (the manifest names it).
TRANSFORMER = {"layers": 2, "hidden": 128, "heads": 4, "seq": 64, "vocab": 1024}

#: File name of the run's manifest inside the output folder.
MANIFEST_NAME = "manifest.json"

MANIFEST_VERSION = 1

# Steps skipped before the profiler's warm-up: the first iteration builds DDP's buckets and the
# allocator's pools, which is not what a steady-state trace should show.
_WAIT_STEPS = 1

# Worker lines that start with this are messages to the parent (JSON), everything else is log.
_MESSAGE_PREFIX = "@dlexplore-collect "

_NUM_CLASSES = 10
_MLP_FEATURES = 256
_IMAGE_SHAPE = (3, 32, 32)

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
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    # mkdtemp makes the folder private (0700); give it the mode a plain mkdir would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(partial, 0o777 & ~umask)
    work = partial / ".work"
    work.mkdir()
    try:
        port = port if port is not None else _free_port()
        say(
            f"{nproc} ranks, model {model}, {_WAIT_STEPS}+{warmup}+{steps} steps "
            f"(skipped+warm-up+profiled), gloo on 127.0.0.1:{port}"
        )
        config = dict(
            world_size=nproc,
            steps=steps,
            model=model,
            batch_size=batch_size,
            warmup=warmup,
            wait=_WAIT_STEPS,
            seed=seed,
            port=port,
            out=str(partial),
            work=str(work),
            timeout=timeout,
            fail_rank=_fail_rank,
            sys_path=list(sys.path),
        )
        results = _run_workers(config, nproc, timeout, say)
        shutil.rmtree(work)
        files = []
        for rank in range(nproc):
            path = partial / f"rank{rank}.json.gz"
            if not path.is_file():
                raise DlexploreError(f"rank {rank} finished without writing its trace {path.name}")
            files.append(
                {"rank": rank, "path": path.name, "bytes": path.stat().st_size, "sha256": _sha256(path)}
            )
        wall_time = time.perf_counter() - started
        manifest = _manifest(
            arguments,
            results[0]["torch_version"],
            nproc,
            model,
            results[0]["parameters"],
            batch_size,
            steps,
            warmup,
            port,
            results,
            files,
            wall_time,
        )
        with atomic_open(partial / MANIFEST_NAME, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1)
            handle.write("\n")
        _publish(partial, target, overwrite)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    say(f"wrote {nproc} traces and {MANIFEST_NAME} to {target} in {wall_time:.1f} s")
    return target / MANIFEST_NAME


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
    torch_version: str,
    nproc: int,
    model: str,
    parameters: int,
    batch_size: int,
    steps: int,
    warmup: int,
    port: int,
    results: list[dict[str, Any]],
    files: list[dict[str, Any]],
    wall_time: float,
) -> dict[str, Any]:
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
            **({"workload": _transformer_spec()} if model == "transformer" else {}),
            "dtype": "float32",
            "optimizer": "SGD(lr=0.01, momentum=0.9)",
            "loss": "cross_entropy",
        },
        "data": {
            "kind": "synthetic",
            "sample_shape": list(_sample_shape(model)),
            "classes": TRANSFORMER["vocab"] if model == "transformer" else _NUM_CLASSES,
            # Random labels: nothing to learn, the loss stays near ln(classes) (2.303 for 10).
            "labels": "uniform random",
            "loader": "torch.utils.data.DataLoader(num_workers=0) with DistributedSampler",
        },
        "batch_size_per_rank": batch_size,
        "global_batch_size": batch_size * nproc,
        "profiler": {
            "activities": ["CPU"],
            "record_shapes": True,
            "schedule": {"wait": _WAIT_STEPS, "warmup": warmup, "active": steps, "repeat": 1},
            # ProfilerStep#N counts every step from 0, so the kept ones are these.
            "profiled_steps": list(range(_WAIT_STEPS + warmup, _WAIT_STEPS + warmup + steps)),
        },
        "steps_trained": _WAIT_STEPS + warmup + steps,
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
            if line.startswith(_MESSAGE_PREFIX):
                try:
                    message = json.loads(line[len(_MESSAGE_PREFIX) :])
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
        "from dlexplore.traces.collect import _worker_main; _worker_main(config)"
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


def build_model(name: str) -> Any:
    """The torch module for one of :data:`MODELS` (float32, on the CPU, weights from torch's RNG)."""
    from torch import nn

    if name == "mlp":
        return nn.Sequential(
            nn.Linear(_MLP_FEATURES, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, _NUM_CLASSES),
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 8 * 8, _NUM_CLASSES),
        )
    if name == "transformer":
        return _transformer_module()
    raise UnknownNameError("model", name, MODELS)


def _transformer_spec() -> str:
    """The catalog's name for the transformer: ``transformer:layers=2,hidden=128,...``."""
    return "transformer:" + ",".join(f"{k}={v}" for k, v in TRANSFORMER.items())


def _sample_shape(model: str) -> tuple[int, ...]:
    if model == "cnn":
        return _IMAGE_SHAPE
    if model == "transformer":
        return (TRANSFORMER["seq"],)
    return (_MLP_FEATURES,)


def _transformer_module() -> Any:
    """:data:`MODELS`' transformer: token ids (batch, seq) in, logits (batch, vocab, seq) out.

    Its parameters are the catalog's count for these sizes (post-LN, tied output, no token types):
    ``V h + s h + 2h + L (12 h^2 + 13 h)`` = 131,072 + 8,192 + 256 + 2 x 198,272 = 536,064."""
    import torch
    from torch import nn

    t = TRANSFORMER
    h = t["hidden"]

    class TinyTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(t["vocab"], h)
            self.position = nn.Embedding(t["seq"], h)
            self.norm = nn.LayerNorm(h)
            layer = nn.TransformerEncoderLayer(
                h, t["heads"], dim_feedforward=4 * h, activation="gelu", batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, t["layers"], enable_nested_tensor=False)
            # BERT's and GPT-2's initialisation: with N(0, 1) embeddings the tied logits would be
            # N(0, h) and the first losses near 80 instead of ln(vocab) = 6.93
            nn.init.normal_(self.word.weight, std=0.02)
            nn.init.normal_(self.position.weight, std=0.02)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.norm(self.word(tokens) + self.position.weight[: tokens.shape[1]])
            return (self.encoder(x) @ self.word.weight.T).transpose(1, 2)

    return TinyTransformer()


def _send(kind: str, **payload: Any) -> None:
    print(_MESSAGE_PREFIX + json.dumps(dict(payload, kind=kind)), flush=True)


def _worker_main(config: dict[str, Any]) -> None:
    """Entry point of one rank's process: train, profile, write ``rank<R>.json.gz``, report."""
    try:
        result = _train(config)
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent, then exit 1
        _send("error", text=f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}")
        sys.stdout.flush()
        os._exit(1)
    _send("result", result=result)


def _train(config: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    rank, world_size = int(config["rank"]), int(config["world_size"])
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeError(
            f"this torch build ({torch.__version__}) has no gloo backend for "
            "torch.distributed; install the official one: pip install 'dlexplore[torch]'"
        )
    torch.set_num_threads(1)
    _send("progress", text="joining the gloo process group")
    dist.init_process_group(
        "gloo",
        init_method="env://",
        rank=rank,
        world_size=world_size,
        timeout=_dt.timedelta(seconds=float(config["timeout"])),
    )
    try:
        if config.get("fail_rank") == rank:
            raise RuntimeError(f"forced failure of rank {rank} (the _fail_rank test option)")
        wait, warmup, active = int(config["wait"]), int(config["warmup"]), int(config["steps"])
        total_steps = wait + warmup + active
        batch = int(config["batch_size"])

        torch.manual_seed(int(config["seed"]))  # the same initial weights on every rank
        net = build_model(config["model"])
        parameters = sum(p.numel() for p in net.parameters())
        if rank == 0:
            _send("progress", text=f"model {config['model']}: {parameters:,} parameters")
        shape = _sample_shape(config["model"])
        samples = batch * total_steps * world_size
        data_rng = torch.Generator().manual_seed(int(config["seed"]) + 1)
        if config["model"] == "transformer":
            # token ids, and a next token to predict at every position (random: nothing to learn)
            vocab = TRANSFORMER["vocab"]
            inputs = torch.randint(0, vocab, (samples, *shape), generator=data_rng)
            labels = torch.randint(0, vocab, (samples, *shape), generator=data_rng)
        else:
            inputs = torch.randn((samples, *shape), generator=data_rng)
            labels = torch.randint(0, _NUM_CLASSES, (samples,), generator=data_rng)
        sampler = DistributedSampler(
            TensorDataset(inputs, labels),
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=int(config["seed"]),
            drop_last=True,
        )
        loader = DataLoader(
            TensorDataset(inputs, labels), batch_size=batch, sampler=sampler, num_workers=0, drop_last=True
        )
        ddp = DistributedDataParallel(net)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()

        out = Path(config["out"])
        written: list[Path] = []

        def save(prof: Any) -> None:
            raw = Path(config["work"]) / f"rank{rank}.json"
            prof.export_chrome_trace(str(raw))
            final = out / f"rank{rank}.json.gz"
            # mtime=0: the same trace gives the same bytes (and the same sha256) whenever it is written.
            with (
                atomic_open(final, "wb") as handle,
                open(raw, "rb") as source,
                gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0, compresslevel=9) as gz,
            ):
                shutil.copyfileobj(source, gz)
            raw.unlink()
            written.append(final)

        schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=1)
        step_times: list[float] = []
        losses: list[float] = []
        _send("progress", text=f"training {total_steps} steps, profiling {active}")
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule,
            on_trace_ready=save,
        ) as prof:
            tick = time.perf_counter()
            for x, y in loader:
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(ddp(x), y)
                loss.backward()
                optimizer.step()
                losses.append(round(float(loss.detach()), 6))
                # Read before prof.step(): the last one writes the trace, which is not training.
                now = time.perf_counter()
                step_times.append(round(now - tick, 6))
                prof.step()
                tick = time.perf_counter()
        if len(step_times) != total_steps:
            raise RuntimeError(f"the data loader gave {len(step_times)} batches, expected {total_steps}")
        if not written:
            raise RuntimeError("the profiler did not hand over a trace (on_trace_ready was not called)")
        dist.barrier()
        _send("progress", text=f"wrote {written[0].name} ({written[0].stat().st_size:,} bytes)")
    finally:
        dist.destroy_process_group()
    return {
        "rank": rank,
        "pid": os.getpid(),
        "torch_version": torch.__version__,
        "parameters": parameters,
        "step_times_s": step_times,
        "losses": losses,
        "wall_time_s": round(time.perf_counter() - started, 3),
    }
