"""Step logs: what a training loop that times its own phases writes, one file per rank.

A log starts with a line ``# steplog 1 rank=<rank>``, then a CSV header and one row per phase::

    # steplog 1 rank=0
    step,name,category,start_s,duration_s,bytes
    0,forward,compute,0.000,0.012,
    0,allreduce,communication,0.030,0.008,4194304

``category`` is one of dlexplore's event categories (compute, communication, data, ...); ``bytes``
is the message size of communication, empty otherwise.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dlexplore.errors import InputFileError
from dlexplore.traces import Reader, Trace, make_events

__all__ = ["StepLogReader"]

MAGIC = "# steplog 1 "
HEADER = ["step", "name", "category", "start_s", "duration_s", "bytes"]


class StepLogReader(Reader):
    """dlexplore's reader of step logs (registered as ``steplog`` by this package's entry point)."""

    description = "step log of a training loop (dlexplore-steplog)"
    patterns = ("*.steplog",)
    kind = "trace"

    def sniff(self, path: Path) -> bool:
        # The first bytes decide, not the name: a renamed log is still a log.
        if not path.is_file():
            return False
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC.encode()

    def read(self, paths: Sequence[Path], **options: Any) -> Trace:
        if options:
            raise InputFileError(paths[0], f"step logs take no options, got {sorted(options)}")
        columns: dict[str, list] = {
            k: [] for k in ("rank", "stream", "name", "category", "start", "duration")
        }
        columns.update(bytes=[], step=[])
        for path in paths:
            _read_one(Path(path), columns)
        events = make_events(columns)
        return Trace(events, format="steplog", files=tuple(str(p) for p in paths))


def _read_one(path: Path, columns: dict[str, list]) -> None:
    with open(path, newline="") as handle:
        first = handle.readline()
        if not first.startswith(MAGIC) or "rank=" not in first:
            raise InputFileError(path, f"expected a first line '{MAGIC}rank=N', got {first[:40]!r}", line=1)
        rank = int(first.split("rank=")[1].split()[0])
        rows = csv.reader(handle)
        header = next(rows, None)
        if header != HEADER:
            raise InputFileError(path, f"expected the header {','.join(HEADER)}", line=2)
        for line, row in enumerate(rows, start=3):
            if len(row) != len(HEADER):
                raise InputFileError(path, f"expected {len(HEADER)} fields, got {len(row)}", line=line)
            try:
                start, duration = float(row[3]), float(row[4])
                size = float(row[5]) if row[5] else math.nan
                step = int(row[0])
            except ValueError as err:
                raise InputFileError(
                    path, f"expected numbers in step, start_s, duration_s, bytes ({err})", line=line
                ) from None
            columns["rank"].append(rank)
            columns["stream"].append(f"cpu:{rank}:0")
            columns["name"].append(row[1])
            columns["category"].append(row[2])
            columns["start"].append(start)
            columns["duration"].append(duration)
            columns["bytes"].append(size)
            columns["step"].append(step)
