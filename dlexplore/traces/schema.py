"""The :class:`Trace` that carries the one event table every trace reader produces.

The table's columns, categories and helpers live in :mod:`dlexplore.traces.events` (re-exported
here: ``from dlexplore.traces.schema import COLUMNS`` keeps working). This module adds the
:class:`Trace` around the table, whose methods are the doors to the analyses
(:mod:`~dlexplore.traces.breakdown`, :mod:`~dlexplore.traces.collectives`, ...), and the path helpers
the readers share (:func:`as_paths`, :func:`expand_paths`). The analyses import the events module,
never this one, so that the doors and the rooms do not import each other.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError
from .events import (
    CATEGORIES,
    COLLECTIVES,
    COLUMNS,
    MEMORY_COLUMNS,
    POINT_TO_POINT,
    empty_events,
    make_events,
    normalize_collective_name,
)

__all__ = [
    "COLUMNS",
    "MEMORY_COLUMNS",
    "CATEGORIES",
    "COLLECTIVES",
    "POINT_TO_POINT",
    "Trace",
    "empty_events",
    "make_events",
    "normalize_collective_name",
]


@dataclass
class Trace:
    """Events of one run, from one or many files, in the schema of this module.

    Attributes
    ----------
    events:
        The event table (see the module docstring), one row per event, all ranks.
    format:
        The reader that made it: ``pytorch``, ``horovod``, ``nsys``, ``otf2``.
    files:
        The files read, in rank order where that is known.
    world_size:
        Ranks in the job, when the trace says (else the number of ranks seen).
    meta:
        What else the files say (per-rank metadata, device properties, clock notes;
        ``missing_ranks`` when ranks of the world were not given).
    memory:
        The memory allocator's events when the trace has them (PyTorch's ``profile_memory=True``),
        else None: one row per allocation (``bytes`` > 0) or release (< 0) with columns
        :data:`MEMORY_COLUMNS` (``rank``, ``device``, ``time`` [s, the events' axis], ``bytes``,
        ``allocated`` and ``reserved`` [bytes, the allocator's totals after the event, NaN where the
        trace does not say], ``address``).
    """

    events: pd.DataFrame
    format: str
    files: tuple[str, ...] = ()
    world_size: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    memory: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        if self.world_size is None and len(self.events):
            self.world_size = int(self.events["rank"].max()) + 1
        self.events.attrs.setdefault("format", self.format)
        self.events.attrs.setdefault("files", list(self.files))
        self.events.attrs.setdefault("source", self.source)

    @property
    def source(self) -> str:
        """Where the numbers come from, for ``attrs["source"]`` of everything derived."""
        shown = ", ".join(os.path.basename(f) for f in self.files[:3])
        more = f" and {len(self.files) - 3} more" if len(self.files) > 3 else ""
        return f"measured: {self.format} trace {shown}{more}"

    @property
    def ranks(self) -> np.ndarray:
        """The ranks present, sorted."""
        return np.unique(self.events["rank"].to_numpy())

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        return (
            f"<dlexplore.Trace format={self.format!r} ranks={len(self.ranks)} "
            f"world_size={self.world_size} events={len(self.events):,} files={len(self.files)}>"
        )

    # Analyses live in their own modules; these are the doors to them.

    def breakdown(self, **kwargs: Any):
        """Per-rank, per-step time breakdown (:func:`dlexplore.traces.breakdown.breakdown`)."""
        from .breakdown import breakdown

        return breakdown(self, **kwargs)

    def collectives(self, **kwargs: Any) -> pd.DataFrame:
        """One row per collective kind and message size
        (:func:`dlexplore.traces.collectives.collective_table`)."""
        from .collectives import collective_table

        return collective_table(self, **kwargs)

    def point_to_point(self) -> pd.DataFrame:
        """Send, recv and sendrecv operations per rank, peer and size
        (:func:`dlexplore.traces.p2p.point_to_point`)."""
        from .p2p import point_to_point

        return point_to_point(self)

    def temporal_breakdown(self, **kwargs: Any):
        """Device time per rank: compute, non-compute, idle, as HTA's temporal breakdown
        (:func:`dlexplore.traces.temporal.temporal_breakdown`)."""
        from .temporal import temporal_breakdown

        return temporal_breakdown(self, **kwargs)

    def critical_path(self, **kwargs: Any) -> pd.DataFrame:
        """The events that set one step's length (:func:`dlexplore.traces.critical_path.critical_path`)."""
        from .critical_path import critical_path

        return critical_path(self, **kwargs)

    def launch_stats(self) -> pd.DataFrame:
        """Each device event with its launch: delay, short kernels
        (:func:`dlexplore.traces.launches.launch_stats`)."""
        from .launches import launch_stats

        return launch_stats(self)

    def kernels(self) -> pd.DataFrame:
        """Device time per rank and kernel name, with its kind and alignment
        (:func:`dlexplore.traces.kernels.kernel_table`)."""
        from .kernels import kernel_table

        return kernel_table(self)

    def kernel_breakdown(self) -> pd.DataFrame:
        """Device time per rank and kernel kind: GEMM, convolution, attention, element-wise ...
        (:func:`dlexplore.traces.kernels.kernel_breakdown`)."""
        from .kernels import kernel_breakdown

        return kernel_breakdown(self)

    def queue_length(self) -> pd.DataFrame:
        """Operations queued per stream over time (:func:`dlexplore.traces.launches.queue_length`)."""
        from .launches import queue_length

        return queue_length(self)

    def memory_timeline(self) -> pd.DataFrame:
        """Memory in use per device over time (:func:`dlexplore.traces.memory.memory_timeline`)."""
        from .memory import memory_timeline

        return memory_timeline(self)

    def diff(self, test: Trace) -> pd.DataFrame:
        """Operators and kernels of ``test`` against this trace, the control
        (:func:`dlexplore.traces.diff.trace_diff`)."""
        from .diff import trace_diff

        return trace_diff(self, test)

    def stragglers(self, **kwargs: Any) -> pd.DataFrame:
        """Ranks slower than the rest (:func:`dlexplore.traces.breakdown.stragglers`)."""
        from .breakdown import stragglers

        return stragglers(self, **kwargs)

    def select(
        self,
        *,
        ranks: Iterable[int] | None = None,
        steps: Iterable[int] | None = None,
        categories: Sequence[str] | None = None,
    ) -> Trace:
        """A new trace with only some ranks, steps or categories (the original is unchanged)."""
        keep = np.ones(len(self.events), dtype=bool)
        if ranks is not None:
            keep &= self.events["rank"].isin(list(ranks)).to_numpy()
        if steps is not None:
            keep &= self.events["step"].isin(list(steps)).fillna(False).to_numpy(dtype=bool)
        if categories is not None:
            keep &= self.events["category"].isin(list(categories)).to_numpy()
        events = self.events[keep].reset_index(drop=True)
        events.attrs = dict(self.events.attrs)
        memory = self.memory
        if memory is not None and ranks is not None:
            memory = memory[memory["rank"].isin(list(ranks))].reset_index(drop=True)
        return Trace(events, self.format, self.files, self.world_size, dict(self.meta), memory)


# Files that travel with traces in a folder (the collector's manifest, notes) but are not traces.
_COMPANIONS = {"manifest.json"}
_COMPANION_SUFFIXES = {".txt", ".md", ".log", ".csv", ".yaml", ".yml", ".sha256", ".py", ".sh"}


def _companion(path: Path) -> bool:
    name = path.name.lower()
    return (
        name.startswith(".")
        or name in _COMPANIONS
        or name.startswith("readme")
        or path.suffix.lower() in _COMPANION_SUFFIXES
    )


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[tuple[Path, bool]]:
    """Like :func:`as_paths`, each path with whether it was found by listing a folder (True) rather
    than named (a file, a glob match: False). A folder's stray files can be skipped; named ones not."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list[tuple[Path, bool]] = []
    for item in paths:
        text = os.fspath(item)
        path = Path(text)
        if path.is_dir():
            anchors = sorted(path.glob("*.otf2"))
            if anchors:  # an OTF2 archive: its anchor file stands for the whole folder
                found.extend((a, False) for a in anchors)
                continue
            files = sorted(p for p in path.iterdir() if p.is_file() and not _companion(p))
            if not files:
                raise DlexploreError(
                    f"{text}: the folder holds no trace file (expected per-rank "
                    "traces such as rank0.json.gz, a Horovod timeline, an Nsight "
                    "export or an OTF2 archive)"
                )
            found.extend((p, True) for p in files)
        elif any(ch in text for ch in "*?[") and not path.exists():
            import glob

            matches = sorted(Path(p) for p in glob.glob(text))
            if not matches:
                raise DlexploreError(f"{text}: no file matches this pattern")
            found.extend((m, False) for m in matches)
        else:
            found.append((path, False))
    if not found:
        raise DlexploreError("no trace files given")
    return found


def as_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Paths from one path, a folder (its files, sorted), a glob pattern, or a list of these.

    A folder's hidden files and the files that accompany traces (``manifest.json``, ``README*``,
    ``*.txt``, ``*.md``, ``*.log``) are skipped; files named directly are always kept.
    """
    return [path for path, _ in expand_paths(paths)]
