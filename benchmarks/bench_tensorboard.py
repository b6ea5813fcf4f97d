"""Read speed of TensorBoard scalars: dlexplore.traces.read_tensorboard against tensorboard's own
EventFileLoader and tbparse's SummaryReader (when installed), on one event file written by
torch.utils.tensorboard (3 tags x N steps). Alternates the readers, median of 5 each.

    .venv/bin/python benchmarks/bench_tensorboard.py [--steps 100000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def write(folder: Path, steps: int) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder / "run"))
    for step in range(steps):
        writer.add_scalar("train/loss", 1.0 / (1 + step), step)
        writer.add_scalar("train/accuracy", step / steps, step)
        writer.add_scalar("lr", 0.1, step)
    writer.close()
    return next((folder / "run").glob("events.out.tfevents.*"))


def ours(path: Path) -> int:
    from dlexplore.traces import read_tensorboard

    ds = read_tensorboard(path)
    return int(ds["lr"].count())


def loader(path: Path) -> int:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    n = 0
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            n += value.tag == "lr"
    return n


def tbparse(path: Path) -> int:
    from tbparse import SummaryReader

    frame = SummaryReader(str(path)).scalars
    return int((frame["tag"] == "lr").sum())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    readers = {"dlexplore": ours, "EventFileLoader": loader}
    try:
        import tbparse as _  # noqa: F401

        readers["tbparse"] = tbparse
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), args.steps)
        times: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(5):
            for name, read in readers.items():
                start = time.perf_counter()
                count = read(path)
                times[name].append(time.perf_counter() - start)
                assert count == args.steps, (name, count)
        base = statistics.median(times["dlexplore"])
        print(f"{path.stat().st_size / 1e6:.1f} MB, {3 * args.steps:,} scalars")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"{name:16s} median {median:.3f} s  ({median / base:.2f}x dlexplore)")


if __name__ == "__main__":
    main()
