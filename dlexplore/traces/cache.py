"""A cache of parsed traces keyed by the files' content, so reopening a notebook does not re-parse.

:func:`~dlexplore.traces.load_trace` keeps the :class:`~dlexplore.traces.schema.Trace` of a large
trace set as a netCDF file (:mod:`.netcdf`'s layout, uncompressed: about 44 bytes per event) and,
next time the same bytes are loaded with the same reader and options, reads that back instead of
the JSON (:mod:`.cache_entry`: the arrays straight from the file's bytes, at the places a sidecar
file records).

* **Where**: ``$DLEXPLORE_CACHE_DIR`` if set, else the user's cache folder
  (``$XDG_CACHE_HOME/dlexplore/traces``, ``~/.cache/dlexplore/traces``; ``~/Library/Caches`` on
  macOS, ``%LOCALAPPDATA%`` on Windows), never beside the input files.
* **Key**: BLAKE2b of each file's bytes, the format, the reader's options, the dlexplore version,
  the readers' code (:func:`reader_digest`: the source of this package, so that a development
  install whose reader changed, the version not, parses again) and this cache's layout version. A
  file's hash is remembered against its path, size, modification time and inode (as git's index
  does), so an unchanged file is not hashed again; a changed or copied file is. A new dlexplore
  version, or an edited reader, never reads an older entry.
* **When**: ``cache=True`` always, ``cache=False`` never; by default (``cache=None``) for sets of at
  least :data:`MIN_JSON_BYTES` of JSON (gzip's own size field tells), unless ``DLEXPLORE_CACHE=off``.
* **Size**: at most ``$DLEXPLORE_CACHE_MAX_BYTES`` (default 4 GiB); the least recently used entries
  go first. :func:`clear_cache` empties it.
* **Safety**: entries are written to a temporary file and renamed (a reader sees a whole entry or
  none), carry a checksum checked before they are opened, and any entry that cannot be read is
  deleted and the trace parsed again: the cache can make a load faster, never wrong or failing.
  The warnings the first load gave (a rank taken from a file name, ranges left open) are kept
  with the entry and given again on every reload, at the line that called ``load_trace``.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .._io import atomic_path
from .._version import __version__
from .cache_entry import LABELS, SIDECAR, read_entry, write_entry
from .netcdf import from_variables, to_dataset
from .schema import Trace, as_paths

__all__ = ["cache_dir", "clear_cache", "cached", "json_bytes", "reader_digest", "MIN_JSON_BYTES"]

LAYOUT = 4  #: bump when what an entry holds changes
#: Beside each entry: its CRC-32 (against damage, not tampering: 2.5x faster to check than BLAKE2b
#: with zlib's, 12x with ISA-L's) and, from layout 4, where its arrays lie (:mod:`.cache_entry`).
#: Layout 1 wrote BLAKE2b beside it, as ``.b2``; layouts 2 and 3 the CRC-32 alone, as ``.crc32``
#: (layout 3 added every variable's attributes as one, ``dlexplore_attrs``).
_SIDECARS = (SIDECAR, ".crc32", ".b2")
#: What the cache's own files are named: the key (BLAKE2b, 20 bytes in hex) and a suffix. Nothing
#: else in the folder is touched: ``$DLEXPLORE_CACHE_DIR`` may name a folder that holds traces.
_OWN = re.compile(r"[0-9a-f]{40}(\.nc|" + "|".join(re.escape(s) for s in _SIDECARS) + ")")
MIN_JSON_BYTES = 16 * 2**20  #: smallest trace set cached by default (bytes of JSON)
_DEFAULT_MAX_BYTES = 4 * 2**30
_INDEX = "hashes.json"


def cache_dir() -> Path:
    """The folder of the trace cache (see the module docstring)."""
    if os.environ.get("DLEXPLORE_CACHE_DIR"):
        return Path(os.environ["DLEXPLORE_CACHE_DIR"]).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dlexplore" / "traces"


def clear_cache() -> int:
    """Delete every cache entry; the number deleted."""
    folder = cache_dir()
    entries = _entries(folder)
    for entry in entries:
        _remove(entry)
    (folder / _INDEX).unlink(missing_ok=True)
    for orphan in folder.iterdir() if folder.is_dir() else ():  # sidecars another version left
        if _OWN.fullmatch(orphan.name):
            orphan.unlink(missing_ok=True)
    return len(entries)


def _entries(folder: Path) -> list[Path]:
    """The cache's entries in ``folder`` (its own, by name)."""
    if not folder.is_dir():
        return []
    return [p for p in folder.glob("*.nc") if _OWN.fullmatch(p.name)]


def _remove(entry: Path) -> None:
    entry.unlink(missing_ok=True)
    for suffix in _SIDECARS:
        entry.with_suffix(suffix).unlink(missing_ok=True)


def json_bytes(path: Path) -> int:
    """The file's bytes of JSON: gzip's trailer holds the size (mod 4 GiB) of what it inflates to."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            if handle.read(2) == b"\x1f\x8b" and size >= 18:
                handle.seek(-4, os.SEEK_END)
                return max(size, int.from_bytes(handle.read(4), "little"))
    except OSError:
        pass
    return size


def _wanted(cache: bool | None, files: list[Path]) -> bool:
    if cache is not None:
        return bool(cache)
    if os.environ.get("DLEXPLORE_CACHE", "").strip().lower() in ("0", "off", "false", "no"):
        return False
    try:
        return sum(json_bytes(p) for p in files if p.is_file()) >= MIN_JSON_BYTES
    except OSError:
        return False


def _file_hash(path: Path, index: dict[str, Any]) -> str:
    """BLAKE2b of the file's bytes, remembered against its path, size, mtime and inode."""
    stat = path.stat()
    signature = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    known = index.get(str(path.resolve()))
    if known and known[0] == signature:
        return known[1]
    digest = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    index[str(path.resolve())] = [signature, digest.hexdigest()]
    return digest.hexdigest()


def _read_index(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / _INDEX).read_text())
    except (OSError, ValueError):
        return {}


def _write_index(folder: Path, index: dict[str, Any]) -> None:
    with atomic_path(folder / _INDEX) as tmp:
        tmp.write_text(json.dumps(index))


_READERS = Path(__file__).resolve().parent


@functools.cache
def reader_digest(folder: Path = _READERS) -> str:
    """BLAKE2b (hex) of the names and bytes of the ``.py`` files in ``folder`` (by default this
    package: every reader and what assembles their events), read once per process (about 5 ms)."""
    digest = hashlib.blake2b(digest_size=20)
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _key(files: list[Path], fmt: str | None, options: dict[str, Any], index: dict[str, Any]) -> str:
    parts = {
        "layout": LAYOUT,
        "dlexplore": __version__,
        "readers": reader_digest(),
        "format": fmt,
        "options": json.dumps(options, sort_keys=True, default=repr),
        "files": [_file_hash(p, index) for p in files],
    }
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=20).hexdigest()


def _encode_meta(value: Any) -> Any:
    """JSON that keeps what JSON alone loses: non-string dict keys, tuples."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _encode_meta(v) for k, v in value.items()}
        return {"__items__": [[_encode_meta(k), _encode_meta(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode_meta(v) for v in value]}
    if isinstance(value, list):
        return [_encode_meta(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    return value


def _decode_meta(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__items__"}:
            return {_decode_meta(k): _decode_meta(v) for k, v in value["__items__"]}
        if set(value) == {"__tuple__"}:
            return tuple(_decode_meta(v) for v in value["__tuple__"])
        return {k: _decode_meta(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_meta(v) for v in value]
    return value


def _store(trace: Trace, entry: Path, index: dict[str, Any], caught: list[tuple[type, str]]) -> None:
    ds = to_dataset(trace)
    ds.attrs["dlexplore_warnings"] = json.dumps([[c.__name__, m] for c, m in caught])
    ds.attrs["dlexplore_meta"] = json.dumps(_encode_meta(trace.meta), default=str)
    ds.attrs["dlexplore_columns"] = json.dumps([[c, str(t)] for c, t in trace.events.dtypes.items()])
    ds.attrs["dlexplore_event_attrs"] = json.dumps(_encode_meta(dict(trace.events.attrs)), default=str)
    # each variable's dimensions, so that a reload need not resolve HDF5 dimension scales (slow)
    ds.attrs["dlexplore_dims"] = json.dumps({str(k): list(v.dims) for k, v in ds.variables.items()})
    for name, variable in list(ds.data_vars.items()):
        if variable.dtype.kind in "UO":  # a string per row (the memory table's device): as codes
            labels, codes = np.unique(variable.values.astype(str), return_inverse=True)
            attrs = {**variable.attrs, LABELS: json.dumps(labels.tolist())}
            ds[name] = xr.Variable(variable.dims, codes.astype(np.int32), attrs)
    # every variable's attributes in one: a reload reads one attribute instead of ~100 (h5py reads
    # each for about 50 us, a quarter of a small trace's reload)
    ds.attrs["dlexplore_attrs"] = json.dumps(
        {str(k): _encode_meta(dict(v.attrs)) for k, v in ds.variables.items()}, default=str
    )
    # uncompressed (44 instead of 4 bytes per event; the size bound keeps the folder in check); the
    # checksum and the arrays' places go beside the entry, not into the shared index: processes
    # that fill the cache at once (Dask workers) would lose each other's index updates
    write_entry(ds, entry)


def _load(entry: Path, index: dict[str, Any]) -> tuple[Trace, list[tuple[type, str]]] | None:
    """The trace of a cache entry and the warnings its first load gave, or None (and the entry
    deleted) if it cannot be trusted."""
    try:
        variables, data_vars, attrs = read_entry(entry)
        # copy=False: the arrays are fresh from the file, held by nothing else
        trace = from_variables(variables, data_vars, attrs, str(entry), copy=False)
        order = [c for c, _ in json.loads(attrs["dlexplore_columns"])]
        events = trace.events[order]
        events.attrs = _decode_meta(json.loads(attrs["dlexplore_event_attrs"]))
        meta = _decode_meta(json.loads(attrs["dlexplore_meta"]))
        caught = [(_category(c), m) for c, m in json.loads(attrs["dlexplore_warnings"])]
        os.utime(entry)  # recently used: evicted last
        return dataclasses.replace(trace, events=events, meta=meta), caught  # other fields as stored
    except Exception:  # noqa: BLE001 - a damaged entry is dropped, the trace parsed again
        _remove(entry)
        return None


def _evict(folder: Path, keep: Path) -> None:
    limit = int(os.environ.get("DLEXPLORE_CACHE_MAX_BYTES") or _DEFAULT_MAX_BYTES)
    entries = sorted(_entries(folder), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in entries)
    for entry in entries:
        if total <= limit:
            break
        if entry != keep:
            total -= entry.stat().st_size
            _remove(entry)


def _recorded(
    load: Callable[..., Trace], paths: Any, fmt: str | None, options: dict[str, Any]
) -> tuple[Trace, list[tuple[type, str]]]:
    """``load``'s trace and the warnings it gave (re-emitted by the caller at the user's line)."""
    failure: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trace = load(paths, format=fmt, **options)
        except BaseException as err:
            failure = err
    if failure is not None:
        # said even when the load fails, once the recording is over: said inside it, each warning
        # was recorded again, into the list being read, until memory ran out
        for item in caught:
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
        raise failure
    return trace, [(item.category, str(item.message)) for item in caught]


def _reemit(caught: list[tuple[type, str]]) -> None:
    for category, message in caught:
        warnings.warn(message, category, stacklevel=3)  # the line that called load_trace


def _category(name: str) -> type:
    found = getattr(builtins, name, None)
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning


def cached(load: Callable[..., Trace]) -> Callable[..., Trace]:
    """``load_trace`` with a ``cache`` argument (module docstring); other arguments pass through."""

    @functools.wraps(load)
    def load_trace(
        paths: Any,
        *,
        format: str | None = None,
        cache: bool | None = None,  # noqa: A002
        **options: Any,
    ) -> Trace:
        try:
            files = as_paths(paths)
            use = _wanted(cache, files) and format != "netcdf" and all(p.is_file() for p in files)
        except Exception:  # noqa: BLE001 - the loader reports bad paths in its own words
            use = False
        if not use:
            trace, caught = _recorded(load, paths, format, options)
            _reemit(caught)
            return trace
        folder = cache_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            index = _read_index(folder)
            entry = folder / f"{_key(files, format, options, index)}.nc"
        except OSError as error:
            warnings.warn(f"trace cache {folder} cannot be used ({error}); reading the files", stacklevel=2)
            trace, caught = _recorded(load, paths, format, options)
            _reemit(caught)
            return trace
        found = _load(entry, index) if entry.exists() else None
        if found is not None:
            trace, caught = found
            trace.meta["cached_in"] = str(entry)
            _reemit(caught)  # what the first load said, said again
            return trace
        trace, caught = _recorded(load, paths, format, options)
        try:
            _store(trace, entry, index, caught)
            _write_index(folder, index)
            _evict(folder, entry)
        except Exception as error:  # noqa: BLE001 - a full disk must not fail the load
            caught.append((UserWarning, f"trace cache {folder}: could not keep this trace ({error})"))
        _reemit(caught)
        return trace

    signature = inspect.signature(load)
    parameters = list(signature.parameters.values())
    extra = inspect.Parameter("cache", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="bool | None")
    parameters.insert(len(parameters) - 1, extra)
    load_trace.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    load_trace.__doc__ = (load.__doc__ or "") + (
        "\n    ``cache``: keep the parsed trace in the user's cache folder, keyed by the files' content, "
        "and\n    read it from there next time: True, False, or None (default: sets of 16 MiB of JSON "
        "or more,\n    unless ``DLEXPLORE_CACHE=off``); see :mod:`dlexplore.traces.cache`.\n"
    )
    return load_trace
