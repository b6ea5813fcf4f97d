"""Tiny data-parallel training with Horovod (gloo, CPU) to record a Horovod timeline.

    HOROVOD_TIMELINE=timeline.json horovodrun -np 2 -H localhost:2 --gloo python train_tiny.py

TINY_STEPS (default 4) training steps; TINY_PAUSE_S (default 0) seconds of sleep per step, so that a
copy of the timeline can be taken while the run is going.
"""

import os
import time

import horovod.torch as hvd
import torch

STEPS = int(os.environ.get("TINY_STEPS", "4"))
PAUSE_S = float(os.environ.get("TINY_PAUSE_S", "0"))
BATCH = 16

hvd.init()
torch.manual_seed(1234 + hvd.rank())
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(STEPS):
    x = torch.randn(BATCH, 32)
    y = torch.randint(0, 10, (BATCH,))
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    avg = hvd.allreduce(loss.detach(), name="avg_loss")
    if hvd.rank() == 0:
        print(f"step {step} loss {avg.item():.4f}", flush=True)
    time.sleep(PAUSE_S)
sizes = hvd.allgather(torch.tensor([hvd.rank()], dtype=torch.int64), name="ranks")
if hvd.rank() == 0:
    print("allgather", sizes.tolist(), flush=True)
