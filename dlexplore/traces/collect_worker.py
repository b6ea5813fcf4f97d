"""Inside one rank's process of :func:`dlexplore.traces.collect.collect`: join the gloo group, train the
model with DistributedDataParallel on random data, profile the steps with ``torch.profiler`` and
write the rank's trace atomically; messages to the parent are JSON lines after
:data:`MESSAGE_PREFIX`, everything else the process prints is its log. Imports torch only when run.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .._io import atomic_open
from ..errors import UnknownNameError

__all__ = ["MODELS", "TRANSFORMER", "build_model", "main", "sample_shape", "transformer_spec"]

# Steps skipped before the profiler's warm-up: the first iteration builds DDP's buckets and the
# allocator's pools, which is not what a steady-state trace should show.
WAIT_STEPS = 1


# Worker lines that start with this are messages to the parent (JSON), everything else is log.
MESSAGE_PREFIX = "@dlexplore-collect "


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

NUM_CLASSES = 10


MLP_FEATURES = 256


IMAGE_SHAPE = (3, 32, 32)


def build_model(name: str) -> Any:
    """The torch module for one of :data:`MODELS` (float32, on the CPU, weights from torch's RNG)."""
    from torch import nn

    if name == "mlp":
        return nn.Sequential(
            nn.Linear(MLP_FEATURES, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, NUM_CLASSES),
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
            nn.Linear(32 * 8 * 8, NUM_CLASSES),
        )
    if name == "transformer":
        return _transformer_module()
    raise UnknownNameError("model", name, MODELS)


def transformer_spec() -> str:
    """The catalog's name for the transformer: ``transformer:layers=2,hidden=128,...``."""
    return "transformer:" + ",".join(f"{k}={v}" for k, v in TRANSFORMER.items())


def sample_shape(model: str) -> tuple[int, ...]:
    """The shape of one sample of ``model``'s synthetic data."""
    if model == "cnn":
        return IMAGE_SHAPE
    if model == "transformer":
        return (TRANSFORMER["seq"],)
    return (MLP_FEATURES,)


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
    print(MESSAGE_PREFIX + json.dumps(dict(payload, kind=kind)), flush=True)


def main(config: dict[str, Any]) -> None:
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

    rank, world_size = int(config["rank"]), int(config["world_size"])
    _join_group(config, rank, world_size)
    try:
        if config.get("fail_rank") == rank:
            raise RuntimeError(f"forced failure of rank {rank} (the _fail_rank test option)")
        total_steps = int(config["wait"]) + int(config["warmup"]) + int(config["steps"])
        torch.manual_seed(int(config["seed"]))  # the same initial weights on every rank
        net = build_model(config["model"])
        parameters = sum(p.numel() for p in net.parameters())
        if rank == 0:
            _send("progress", text=f"model {config['model']}: {parameters:,} parameters")
        loader = _data_loader(config, rank, world_size, total_steps)
        step_times, losses, written = _profiled_training(config, rank, net, loader, total_steps)
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


def _join_group(config: dict[str, Any], rank: int, world_size: int) -> None:
    import torch
    import torch.distributed as dist

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


def _data_loader(config: dict[str, Any], rank: int, world_size: int, total_steps: int) -> Any:
    """Random inputs and labels for every step, each rank its own shard (DistributedSampler)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    batch = int(config["batch_size"])
    shape = sample_shape(config["model"])
    samples = batch * total_steps * world_size
    data_rng = torch.Generator().manual_seed(int(config["seed"]) + 1)
    if config["model"] == "transformer":
        # token ids, and a next token to predict at every position (random: nothing to learn)
        vocab = TRANSFORMER["vocab"]
        inputs = torch.randint(0, vocab, (samples, *shape), generator=data_rng)
        labels = torch.randint(0, vocab, (samples, *shape), generator=data_rng)
    else:
        inputs = torch.randn((samples, *shape), generator=data_rng)
        labels = torch.randint(0, NUM_CLASSES, (samples,), generator=data_rng)
    sampler = DistributedSampler(
        TensorDataset(inputs, labels),
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=int(config["seed"]),
        drop_last=True,
    )
    return DataLoader(
        TensorDataset(inputs, labels), batch_size=batch, sampler=sampler, num_workers=0, drop_last=True
    )


def _profiled_training(
    config: dict[str, Any], rank: int, net: Any, loader: Any, total_steps: int
) -> tuple[list[float], list[float], list[Path]]:
    """Train every step under the profiler; the trace is written as ``rank<R>.json.gz`` when the
    schedule's active steps end. Returns the step times (s), the losses and the files written."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    wait, warmup, active = int(config["wait"]), int(config["warmup"]), int(config["steps"])
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
    return step_times, losses, written
