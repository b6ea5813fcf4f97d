"""Thousands of ranks: the per-rank, per-step breakdown of a folder of traces, one file at a time on Dask.

    from dlexplore.traces.scale import summarize
    ds = summarize("runs/1024-ranks/")                    # local threads, a progress bar on long loads
    ds = summarize("runs/1024-ranks/", scheduler="processes")
    ds = summarize("runs/1024-ranks/", client=client)     # a distributed.Client of your own

Each file is one task (``dask.delayed``): it is read alone (a single file of a multi-rank job reads
as that rank), broken down (:func:`dlexplore.traces.breakdown.breakdown`) and its events dropped,
so a worker holds one rank's events at a time and the whole event table never exists. The result
is what ``load_trace(folder).breakdown()`` gives, within float noise, with the same checks across
files (one world size, one file per rank, no rank missing unless ``allow_missing_ranks=True``).

:func:`replicate_traces` makes a large rank set from a few real PyTorch profiler traces (benchmarks,
tests). Needs the optional extra ``scale`` (``dask``; ``distributed`` for a client).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError, InputFileError
from ..progress import in_notebook, progress_enabled
from .breakdown import BREAKDOWN_VARIABLES
from .schema import as_paths

__all__ = ["summarize", "load_events_lazily", "replicate_traces"]

_SCHEDULERS = ("threads", "processes", "sync")
_MAX_BATCH = 16  # files per task at most: keeps the progress bar moving on big folders


def _summarize_one(
    path: str,
    format: str | None,
    steps: list[int] | None,  # noqa: A002
    options: dict[str, Any],
) -> dict[str, Any]:
    """One file's breakdown as plain arrays (cheap to send between processes), or the error it raised.

    Errors come back as values rather than exceptions: dlexplore's exceptions take keyword
    arguments that pickle cannot restore, and a value lets the caller name the file in every case.
    """
    from .loading import load_trace

    try:
        trace = load_trace([path], format=format, **options)
        world_size, fmt = trace.world_size, trace.format
        n_events = len(trace.events)
        ds = trace.breakdown(steps=steps)
        del trace  # the events go here, before the next file is read
        return {
            "path": path,
            "format": fmt,
            "world_size": world_size,
            "events_total": n_events,
            "rank": ds["rank"].values.astype(np.int64),
            "step": ds["step"].values.astype(np.int64),
            "data": {name: ds[name].values for name in BREAKDOWN_VARIABLES},
            "attrs": dict(ds.attrs),
        }
    except Exception as error:  # noqa: BLE001 - every failure is reported with the file's name
        message = str(error)
        return {
            "path": path,
            "error": message,
            "error_type": type(error).__name__,
            "user_error": isinstance(error, (DlexploreError, OSError, EOFError)),
        }


def _summarize_batch(
    paths: list[str],
    format: str | None,
    steps: list[int] | None,  # noqa: A002
    options: dict[str, Any],
) -> list[dict[str, Any]]:
    """:func:`_summarize_one` for each of a few files, one after another."""
    return [_summarize_one(path, format, steps, options) for path in paths]


def summarize(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    client: Any = None,
    scheduler: str = "threads",
    n_workers: int | None = None,
    progress: bool = True,
    format: str | None = None,  # noqa: A002 - as load_trace
    steps: Iterable[int] | None = None,
    **options: Any,
) -> xr.Dataset:
    """Per-rank, per-step breakdown of per-rank trace files, computed one file at a time on Dask.

    Parameters
    ----------
    paths:
        A folder of per-rank traces, a glob, a file or a list of these (as :func:`load_trace`).
    client:
        A ``distributed.Client``; the files are read on its workers. ``None``: local ``scheduler``.
    scheduler:
        ``threads`` (default), ``processes`` or ``sync`` (one file after another, in this process).
    n_workers:
        Local threads or processes (default: Dask's, one per core); ignored with a client.
    progress:
        Show a progress bar when the load takes more than a second and someone watches (a notebook,
        or a terminal on stderr; never under CI or into a pipe): tqdm's, a widget in a notebook;
        with a client, ``distributed.progress``.
    format:
        Skip detection (``pytorch``, ``horovod``, ``nsys``, ``otf2``); all files must share one.
    steps:
        Steps to keep (step numbers); ``None`` keeps all.
    options:
        Reader options (``allow_missing_ranks=True`` ...), as :func:`load_trace`.

    Returns
    -------
    xarray.Dataset
        As :func:`dlexplore.traces.breakdown.breakdown`: dims ``rank``, ``step``; times in s,
        ``overlap_fraction`` in 1, ``events`` a count; ``attrs["source"]`` names the files.
        Raises :class:`~dlexplore.errors.DlexploreError` naming the file for bad input.
    """
    import dask

    files = as_paths(paths)
    if not files:
        raise DlexploreError(f"no trace files in {paths!r}")
    if client is None and scheduler not in _SCHEDULERS:
        raise DlexploreError(f"unknown scheduler {scheduler!r}; expected one of {list(_SCHEDULERS)}")
    allow_missing = bool(options.get("allow_missing_ranks", False))
    wanted = None if steps is None else [int(s) for s in steps]
    # Files go in batches: one task per file costs the scheduler more than a small file takes to read.
    workers = n_workers or os.cpu_count() or 1
    batch = max(1, min(_MAX_BATCH, len(files) // (8 * workers)))
    task = dask.delayed(_summarize_batch)
    tasks = [
        task(
            [str(p) for p in files[i : i + batch]],
            format,
            wanted,
            dict(options),
            dask_key_name=f"summarize-{i}",
        )
        for i in range(0, len(files), batch)
    ]
    if client is not None:
        futures = client.compute(tasks)
        if progress and progress_enabled():
            from distributed import progress as show_progress

            show_progress(futures)
        results = client.gather(futures)
    else:
        kwargs: dict[str, Any] = {"scheduler": scheduler}
        if n_workers is not None and scheduler != "sync":
            kwargs["num_workers"] = int(n_workers)
        with _progress_bar(progress):
            results = dask.compute(*tasks, **kwargs)
    return _assemble([one for batch_results in results for one in batch_results], allow_missing)


def _events_of_file(path: str, format: str | None, options: dict[str, Any]) -> Any:  # noqa: A002
    """One file's event table, schema columns only (partitions of :func:`load_events_lazily`)."""
    from .loading import load_trace
    from .schema import COLUMNS

    try:
        events = load_trace([path], format=format, **options).events
    except (OSError, EOFError) as error:
        raise DlexploreError(f"{path}: {error}") from None
    return events[list(COLUMNS)]


def load_events_lazily(
    paths: str | os.PathLike | Iterable[str | os.PathLike], *, format: str | None = None, **options: Any
) -> Any:  # noqa: A002
    """The event table of per-rank trace files as a ``dask.dataframe.DataFrame``, one partition per file.

    Nothing is read until a result is computed (``df.groupby("rank").duration.sum().compute()``);
    each partition is one file's events with the schema's columns (:mod:`dlexplore.traces.schema`:
    ``start``, ``duration`` in s, ``bytes`` in bytes). Category columns have unknown categories
    (each file has its own). Cross-file checks (one file per rank) are not made: use
    :func:`summarize` or :func:`load_trace` for those.
    """
    import dask
    import dask.dataframe as dd
    from dask.dataframe.utils import clear_known_categories

    from .schema import empty_events

    files = as_paths(paths)
    if not files:
        raise DlexploreError(f"no trace files in {paths!r}")
    meta = clear_known_categories(empty_events())
    task = dask.delayed(_events_of_file)
    parts = [
        task(str(path), format, dict(options), dask_key_name=f"events-{i}") for i, path in enumerate(files)
    ]
    return dd.from_delayed(parts, meta=meta, verify_meta=False)


def _assemble(results: list[dict[str, Any]], allow_missing: bool) -> xr.Dataset:
    """The files' breakdowns as one dataset on (rank, step), with load_trace's checks across files."""
    for result in results:
        if "error" in result:
            if result["user_error"]:
                error = InputFileError(result["path"], result["error"])
                if result["error"].startswith(result["path"]):  # the reader named the file already
                    error.args = (result["error"],)
                raise error
            raise DlexploreError(
                f"{result['path']}: could not be summarised ({result['error_type']}: {result['error']})"
            )
    formats, world_size, owner = _checked_results(results, allow_missing)

    # load_trace(folder).breakdown() numbers every rank's whole trace as step 0 only when no file
    # marks steps; when some do, the unmarked ranks' events are outside steps there, so here too.
    unmarked = [r["attrs"].get("steps_note", "").startswith("the trace marks no steps") for r in results]
    outside = sum(int(r["attrs"].get("events_outside_steps", 0)) for r in results)
    if any(unmarked) and not all(unmarked):
        for result, flag in zip(results, unmarked, strict=True):
            if flag:
                outside += int(result["events_total"])
                result["step"] = result["step"][:0]
                result["data"] = {k: v[:, :0] for k, v in result["data"].items()}
    first = next((r for r, flag in zip(results, unmarked, strict=True) if not flag), results[0])

    rank_coords = np.sort(np.fromiter(owner, dtype=np.int64, count=len(owner)))
    step_coords = np.unique(np.concatenate([r["step"] for r in results])).astype(np.int64)
    row_of = np.searchsorted(rank_coords, np.concatenate([r["rank"] for r in results]))
    shape = (len(rank_coords), len(step_coords))
    arrays = {
        name: np.zeros(shape, np.int64) if name == "events" else np.full(shape, np.nan)
        for name in BREAKDOWN_VARIABLES
    }
    row = 0
    for result in results:
        rows = row_of[row : row + len(result["rank"])]
        row += len(result["rank"])
        cols = np.searchsorted(step_coords, result["step"])
        for name, values in result["data"].items():
            arrays[name][np.ix_(rows, cols)] = values
    variables = {
        name: (("rank", "step"), arrays[name], {"units": units, "long_name": long_name})
        for name, (units, long_name) in BREAKDOWN_VARIABLES.items()
    }
    ds = xr.Dataset(
        variables,
        coords={
            "rank": ("rank", rank_coords, {"units": "1", "long_name": "process rank"}),
            "step": ("step", step_coords, {"units": "1", "long_name": "training step"}),
        },
    )
    ordered = [
        results[i]["path"]
        for i in np.argsort([r["rank"].min() if len(r["rank"]) else -1 for r in results], kind="stable")
    ]
    attrs = dict(first["attrs"])
    attrs.update(
        source=_source(formats[0], ordered),
        events_outside_steps=outside,
        computed="one file at a time on Dask (dlexplore.traces.scale.summarize)",
    )
    ds.attrs.update(attrs)
    return ds


def _checked_results(
    results: list[dict[str, Any]], allow_missing: bool
) -> tuple[list[str], int, dict[int, str]]:
    """load_trace's checks across the files: one format, one world size, one file per rank, no
    rank missing (unless allowed). Returns the format, the world size and each rank's file."""
    formats = sorted({r["format"] for r in results})
    if len(formats) > 1:
        listing = "; ".join(f"{Path(r['path']).name}: {r['format']}" for r in results[:6])
        raise DlexploreError(f"these files hold different formats ({', '.join(formats)}): {listing}")
    sizes = {r["world_size"] for r in results if r["world_size"] is not None}
    if len(sizes) > 1:
        listing = "; ".join(f"{Path(r['path']).name}: {r['world_size']}" for r in results[:6])
        raise DlexploreError(
            f"these traces come from runs of different world sizes ({listing}); expected the files of one run"
        )
    owner: dict[int, str] = {}
    for result in results:
        for rank in result["rank"].tolist():
            if rank in owner:
                raise DlexploreError(
                    f"{owner[rank]} and {result['path']} both hold rank {rank}; expected one file per rank"
                )
            owner[rank] = result["path"]
    world_size = sizes.pop() if sizes else (max(owner) + 1 if owner else 0)
    missing = sorted(set(range(world_size)) - set(owner))
    if missing and len(results) > 1 and not allow_missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise DlexploreError(
            f"rank(s) {shown} of {world_size} missing from the traces given "
            f"({len(results)} files); pass allow_missing_ranks=True to read them anyway"
        )
    return formats, world_size, owner


def _source(fmt: str, files: Sequence[str]) -> str:
    """The source line :class:`~dlexplore.traces.schema.Trace` writes for the same files."""
    shown = ", ".join(os.path.basename(f) for f in files[:3])
    more = f" and {len(files) - 3} more" if len(files) > 3 else ""
    return f"measured: {fmt} trace {shown}{more}"


def _progress_bar(progress: bool, minimum: float = 1.0) -> Any:
    """Local Dask progress as a tqdm bar (a widget in notebooks) shown after ``minimum`` s, only where
    someone watches (:func:`dlexplore.progress.progress_enabled`); else a context that does nothing."""
    if not (progress and progress_enabled()):
        return contextlib.nullcontext()
    from tqdm.dask import TqdmCallback

    if in_notebook():
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    return TqdmCallback(tqdm_class=tqdm, desc="traces", unit="task", delay=minimum, dynamic_ncols=True)


_NUMBER = r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
_TS = re.compile(rf'("ts"\s*:\s*)({_NUMBER})')
_DUR = re.compile(rf'("dur"\s*:\s*)({_NUMBER})')
_INFO = re.compile(r'"distributedInfo"\s*:\s*')


def replicate_traces(
    sources: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    n_ranks: int,
    *,
    jitter: float = 0.02,
    shift: float = 5e-3,
    seed: int = 0,
    compresslevel: int = 1,
) -> list[Path]:
    """Make ``n_ranks`` PyTorch profiler traces from a few real ones, with jitter (benchmarks, tests).

    Rank ``r`` is a copy of ``sources[r % len(sources)]`` with ``distributedInfo`` saying rank ``r``
    of ``n_ranks``, every duration (``dur``) and every time since the first event stretched by
    ``1 + e`` (``e`` normal, standard deviation ``jitter``, a fraction) and the clock shifted by up to
    ``shift`` seconds. The text is edited in place (no JSON round trip), so the files keep the
    profiler's layout. Written as ``rank<r>.json.gz`` in ``out_dir``; returns their paths.
    """
    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = []
    for source in sources:
        source = Path(source)
        opener = gzip.open if source.suffix == ".gz" else open
        with opener(source, "rt", encoding="utf-8") as handle:
            texts.append(handle.read())
    written = []
    for rank in range(n_ranks):
        text = texts[rank % len(texts)]
        found = _INFO.search(text)
        if found is None:
            raise InputFileError(sources[rank % len(sources)], "no distributedInfo to rewrite")
        info, end = json.JSONDecoder().raw_decode(text, found.end())
        info.update(rank=rank, world_size=n_ranks)
        for group in info.get("pg_config", []):
            group.update(pg_size=n_ranks, ranks=list(range(n_ranks)))
        text = text[: found.end()] + json.dumps(info) + text[end:]
        scale = 1.0 + jitter * float(rng.standard_normal())
        offset_us = shift * 1e6 * float(rng.random())
        t0 = min(float(m.group(2)) for m in _TS.finditer(text))
        text = _TS.sub(
            lambda m, t0=t0, k=scale, dt=offset_us: (
                f"{m.group(1)}{t0 + (float(m.group(2)) - t0) * k + dt:.3f}"
            ),
            text,
        )
        text = _DUR.sub(lambda m, k=scale: f"{m.group(1)}{float(m.group(2)) * k:.3f}", text)
        path = out / f"rank{rank}.json.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=compresslevel) as handle:
            handle.write(text)
        written.append(path)
    return written
