"""Write the 2-rank gloo DDP profiler traces kept next to this file (see README.txt).

Run from anywhere: ``OMP_NUM_THREADS=1 python make_gloo_traces.py [OUT_DIR]`` (default:
gloo-mlp-2rank/ beside this file).
A tiny MLP (Linear(16, 32), ReLU, Linear(32, 256); 8,992 parameters) is trained data-parallel on
CPU with gloo over 127.0.0.1; DDP buckets of 16 KiB split its gradients into two allreduces per
step: 8,448 floats (Linear(32, 256): 8,192 weights + 256 biases) and 544 floats (Linear(16, 32):
512 weights + 32 biases).
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

WORLD_SIZE = 2
STEPS = 5  # profiler schedule: 1 wait, 1 warmup, 3 active (steps 2, 3, 4)
BATCH = 8  # samples per rank and step


def _worker(rank: int, out: str, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 256))
    ddp = DistributedDataParallel(model, bucket_cap_mb=16 / 1024)
    data = TensorDataset(
        torch.randn(WORLD_SIZE * BATCH * STEPS, 16), torch.randn(WORLD_SIZE * BATCH * STEPS, 256)
    )
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)

    def save(prof: torch.profiler.profile) -> None:
        path = Path(out) / f"rank{rank}.pt.trace.json"
        prof.export_chrome_trace(str(path))
        with open(path, "rb") as raw, gzip.open(f"{path}.gz", "wb", compresslevel=9) as packed:
            shutil.copyfileobj(raw, packed)
        path.unlink()

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=save,
        record_shapes=True,
    ) as prof:
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            optimizer.step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent / "gloo-mlp-2rank")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(out_dir, 29517), nprocs=WORLD_SIZE, join=True)
