"""Which gzip decompressor for trace loading: the standard library against ISA-L and zlib-ng.

Each gzip-compressed real trace of ``../shared/traces-real`` (and any ``--files``) is decompressed
as ``dlexplore.traces.jsonchunks.EventChunks`` reads it: a file object streamed in blocks of 1 MiB,
the bytes discarded. Reported: CPU seconds of the decompression (median of ``--repeat``), MB/s of
decompressed JSON, and each decompressor's ratio to the standard library's. A decompressor that is
not installed is listed as such (README's install has ``isal``; ``zlib-ng`` is measured when a
user installs it, for comparison only).

    python benchmarks/bench_gunzip.py [--repeat 5] [--files a.json.gz ...]
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

REAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces-real" / "pytorch"
BLOCK = 1 << 20


def _openers() -> dict[str, Callable[[BinaryIO], BinaryIO] | None]:
    found: dict[str, Callable[[BinaryIO], BinaryIO] | None] = {
        "zlib (standard library)": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")
    }
    for label, module, cls in (
        ("isal (ISA-L)", "isal.igzip", "IGzipFile"),
        ("zlib-ng", "zlib_ng.gzip_ng", "GzipFile"),
    ):
        try:
            opener = getattr(importlib.import_module(module), cls)
        except ImportError:
            found[label] = None
        else:
            found[label] = lambda raw, opener=opener: opener(fileobj=raw, mode="rb")
    return found


def _decompress(path: Path, opener: Callable[[BinaryIO], BinaryIO]) -> tuple[float, int]:
    """CPU seconds to stream the file through ``opener``, and the bytes it gave."""
    size = 0
    start = time.process_time()
    with open(path, "rb") as raw, opener(raw) as stream:
        while block := stream.read(BLOCK):
            size += len(block)
    return time.process_time() - start, size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", nargs="*", type=Path, default=None)
    args = parser.parse_args(argv)
    files = args.files or sorted(REAL.glob("*.json.gz"), key=lambda p: -p.stat().st_size)[:4]
    if not files:
        raise SystemExit(f"no .json.gz traces found (looked in {REAL}); give --files")
    openers = _openers()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; CPU s, medians of {args.repeat}")
    print(f"{'file':60s} {'JSON MB':>8s} {'decompressor':25s} {'CPU s':>7s} {'MB/s':>7s} {'vs zlib':>8s}")
    for path in files:
        baseline = None
        for label, opener in openers.items():
            if opener is None:
                print(f"{path.name[:60]:60s} {'':8s} {label:25s} {'not installed':>24s}")
                continue
            runs = [_decompress(path, opener) for _ in range(args.repeat)]
            seconds, size = statistics.median(r[0] for r in runs), runs[0][1]
            baseline = baseline or seconds
            print(
                f"{path.name[:60]:60s} {size / 1e6:8.1f} {label:25s} {seconds:7.3f} "
                f"{size / 1e6 / seconds:7.0f} {baseline / seconds:7.1f}x"
            )


if __name__ == "__main__":
    main()
