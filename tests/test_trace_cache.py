"""The cache of parsed traces: keyed by content, invalidated by change, bounded, never wrong."""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from dlexplore.traces import cache as trace_cache
from dlexplore.traces import cache_entry, load_trace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from synth_traces import write_kineto  # noqa: E402


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("DLEXPLORE_CACHE_DIR", str(folder))
    monkeypatch.delenv("DLEXPLORE_CACHE", raising=False)
    return folder


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "runs" / "rank-0.json.gz"
    path.parent.mkdir()
    write_kineto(path, 0.4, rank=0, world_size=1, layers=4)
    return path


def assert_same(cached, fresh):
    pd.testing.assert_frame_equal(cached.events, fresh.events)
    assert cached.events.attrs == fresh.events.attrs
    assert (cached.format, cached.files, cached.world_size) == (fresh.format, fresh.files, fresh.world_size)
    assert {k: v for k, v in cached.meta.items() if k != "cached_in"} == fresh.meta
    memory = getattr(fresh, "memory", None)  # the allocator's events, where the reader keeps them
    if memory is None:
        assert getattr(cached, "memory", None) is None
    else:
        pd.testing.assert_frame_equal(cached.memory, memory)


def test_a_reload_reads_the_cache_and_gives_the_same_trace(cache_dir, trace_file):
    fresh = load_trace(trace_file, cache=False)
    first = load_trace(trace_file, cache=True)
    assert "cached_in" not in first.meta
    entries = list(cache_dir.glob("*.nc"))
    assert len(entries) == 1
    again = load_trace(trace_file, cache=True)
    assert again.meta["cached_in"] == str(entries[0])
    assert_same(again, fresh)
    assert isinstance(next(iter(again.meta["ranks"])), int)  # integer keys survive
    assert again.breakdown().equals(fresh.breakdown())
    again.events.loc[0, "duration"] = 1.5  # raises where an array is read-only
    assert again.events["duration"].iloc[0] == 1.5


def test_the_key_is_the_content(cache_dir, trace_file, tmp_path):
    load_trace(trace_file, cache=True)
    copy = tmp_path / "elsewhere" / "rank-0.json.gz"
    copy.parent.mkdir()
    shutil.copy(trace_file, copy)
    assert "cached_in" in load_trace(copy, cache=True).meta  # same bytes, another path
    write_kineto(trace_file, 0.4, rank=0, world_size=1, layers=4, seed=1)  # same name, new content
    changed = load_trace(trace_file, cache=True)
    assert "cached_in" not in changed.meta
    assert_same(changed, load_trace(trace_file, cache=False))
    assert len(list(cache_dir.glob("*.nc"))) == 2
    load_trace(trace_file, cache=True, chunk_chars=1 << 20)  # other reader options: another entry
    assert len(list(cache_dir.glob("*.nc"))) == 3


def test_an_edited_reader_does_not_read_the_entries_of_the_old_one(
    cache_dir, trace_file, tmp_path, monkeypatch
):
    # A development install: a reader's code changes, dlexplore's version does not.
    package = Path(trace_cache.__file__).parent
    readers = tmp_path / "readers"
    readers.mkdir()
    for source in package.glob("*.py"):
        shutil.copy(source, readers / source.name)
    assert trace_cache.reader_digest(readers) == trace_cache.reader_digest()  # the same bytes
    load_trace(trace_file, cache=True)
    assert "cached_in" in load_trace(trace_file, cache=True).meta
    edited = readers / "kineto_assemble.py"
    edited.write_text(edited.read_text() + "\n# a fix\n")
    digest = trace_cache.reader_digest.__wrapped__  # not the value kept for this process
    assert digest(readers) != trace_cache.reader_digest()
    monkeypatch.setattr(trace_cache, "reader_digest", lambda: digest(readers))
    assert "cached_in" not in load_trace(trace_file, cache=True).meta  # parsed again
    assert len(list(cache_dir.glob("*.nc"))) == 2
    assert "cached_in" in load_trace(trace_file, cache=True).meta  # and kept for the new code


def test_a_damaged_entry_is_dropped_and_the_trace_parsed_again(cache_dir, trace_file):
    load_trace(trace_file, cache=True)
    (entry,) = cache_dir.glob("*.nc")
    entry.write_bytes(entry.read_bytes()[:1000])
    again = load_trace(trace_file, cache=True)
    assert "cached_in" not in again.meta
    assert_same(again, load_trace(trace_file, cache=False))
    assert "cached_in" in load_trace(trace_file, cache=True).meta


def _rewrite_layout(entry, change=None, *, text=None, checksum=True):
    """Change the layout an entry's sidecar records (``change`` edits it in place, or ``text``
    replaces it); with ``checksum`` its CRC-32 is made to match (what a writer's mistake would
    give), without it the change is damage the CRC-32 must find."""
    import json
    import zlib

    sidecar = entry.with_suffix(cache_entry.SIDECAR)
    found = json.loads(sidecar.read_text())
    if text is None:
        layout = json.loads(found["layout"])
        change(layout)
        text = json.dumps(layout)
    found["layout"] = text
    if checksum:
        found["crc32"] = f"{zlib.crc32(found['layout'].encode(), zlib.crc32(entry.read_bytes())):08x}"
    sidecar.write_text(json.dumps(found))


def _shift_start(layout):
    layout["arrays"]["start"][0] += 8  # inside the file: the next event's start, a plausible number


def _start_past_the_end(layout):
    layout["arrays"]["start"][0] = 1 << 40


def _start_with_a_negative_shape(layout):
    layout["arrays"]["start"][2] = [-1]


def _relabel(layout):
    labels = layout["strings"]["name_categories"]
    labels[0] = labels[0] + "X"


@pytest.mark.parametrize(
    "change, checksum",
    [
        (_shift_start, False),
        (_relabel, False),
        (_start_past_the_end, True),
        (_start_with_a_negative_shape, True),
    ],
    ids=["shifted-start", "relabelled", "past-the-end", "negative-shape"],
)
def test_a_layout_that_does_not_add_up_drops_the_entry(cache_dir, trace_file, change, checksum):
    """The layout is covered by the entry's CRC-32 (a shifted array or a changed label would be
    silently wrong numbers); one whose CRC-32 matches but that places an array outside the file or
    gives it a negative size is refused too. Either way the entry is dropped and the trace parsed
    again, never read short or wrong."""
    load_trace(trace_file, cache=True)
    (entry,) = cache_dir.glob("*.nc")
    _rewrite_layout(entry, change, checksum=checksum)
    again = load_trace(trace_file, cache=True)
    assert "cached_in" not in again.meta
    assert_same(again, load_trace(trace_file, cache=False))
    assert "cached_in" in load_trace(trace_file, cache=True).meta


def test_an_entry_without_a_layout_reloads_through_h5py(cache_dir, trace_file):
    """Where the sidecar records no places (an array HDF5 did not keep in one run), the reload
    reads the bytes it checked with h5py and gives the same trace."""
    fresh = load_trace(trace_file, cache=False)
    load_trace(trace_file, cache=True)
    (entry,) = cache_dir.glob("*.nc")
    _rewrite_layout(entry, text="null")
    again = load_trace(trace_file, cache=True)
    assert again.meta["cached_in"] == str(entry)
    assert_same(again, fresh)


def test_the_cache_keeps_under_its_size_bound(cache_dir, trace_file, monkeypatch):
    load_trace(trace_file, cache=True)
    (first,) = cache_dir.glob("*.nc")
    monkeypatch.setenv("DLEXPLORE_CACHE_MAX_BYTES", str(first.stat().st_size + 10))
    write_kineto(trace_file, 0.4, rank=0, world_size=1, layers=4, seed=2)
    load_trace(trace_file, cache=True)
    entries = list(cache_dir.glob("*.nc"))
    assert len(entries) == 1 and entries[0] != first


def test_clear_cache_removes_its_own_files_only(cache_dir, trace_file):
    """Every entry, its sidecar, the index, and a sidecar whose entry an older dlexplore deleted
    (it knew only its own sidecar's suffix); not the user's files, where ``DLEXPLORE_CACHE_DIR``
    names a folder that holds traces."""
    load_trace(trace_file, cache=True)
    assert len(list(cache_dir.iterdir())) == 3  # entry, sidecar, index
    (cache_dir / f"{'0a' * 20}.crc32").write_text("00000000")
    (cache_dir / f"{'1b' * 20}{cache_entry.SIDECAR}").write_text("{}")
    users = ["rank-0.pt.trace.json", "notes.json", "run.nc", f"{'2c' * 20}.json.gz"]
    for name in users:
        (cache_dir / name).write_text("the user's")
    assert trace_cache.clear_cache() == 1
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(users)


def test_by_default_only_large_sets_are_cached(cache_dir, trace_file, monkeypatch):
    load_trace(trace_file)
    assert not list(cache_dir.glob("*.nc"))
    # gzip's trailer says how much JSON a file holds: a small .gz of a large trace is cached
    big = trace_file.parent / "big.json.gz"
    text = gzip.open(trace_file).read().rstrip()
    with gzip.open(big, "wb", compresslevel=1) as out:
        out.write(text[:-1] + b', "pad": "' + b" " * (17 << 20) + b'"}')
    assert big.stat().st_size < 1 << 20
    load_trace(big)
    assert len(list(cache_dir.glob("*.nc"))) == 1
    monkeypatch.setenv("DLEXPLORE_CACHE", "off")
    trace_cache.clear_cache()
    load_trace(big)
    assert not list(cache_dir.glob("*.nc"))


def test_the_cache_folder_is_the_users_not_the_inputs(monkeypatch, tmp_path):
    monkeypatch.delenv("DLEXPLORE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert trace_cache.cache_dir() == tmp_path / "xdg" / "dlexplore" / "traces"
    monkeypatch.setenv("DLEXPLORE_CACHE_DIR", str(tmp_path / "mine"))
    assert trace_cache.cache_dir() == tmp_path / "mine"


def test_a_horovod_timeline_round_trips_through_the_cache(cache_dir, tmp_path):
    """Other readers' columns (nullable integers, categoricals of their own) come back as they were."""
    path = ROOT / "tests" / "data" / "traces" / "horovod" / "timeline-cycles.json.gz"
    with pytest.warns(UserWarning, match="2 range.s. still open") as first:
        fresh = load_trace(path, cache=False)
    with pytest.warns(UserWarning, match="2 range.s. still open"):
        load_trace(path, cache=True)
    with pytest.warns(UserWarning, match="2 range.s. still open") as said_again:  # kept with the entry
        again = load_trace(path, cache=True)
    assert "cached_in" in again.meta
    assert first[0].filename == said_again[0].filename == __file__  # at the caller's line
    assert_same(again, fresh)


@pytest.mark.parametrize("read", [cache_entry.read_entry, cache_entry.read_entry_h5py], ids=["bytes", "h5py"])
def test_an_entry_reads_as_xarray_reads_its_netcdf(cache_dir, read):
    """The reload takes the arrays from the file's bytes at the places its sidecar records (or,
    where it records none, reads them with h5py), and every variable's attributes from one JSON
    attribute: the same variables, values and attributes as ``xarray.open_dataset`` reads from the
    file."""
    import json

    import numpy as np
    import xarray as xr

    source = ROOT.parent / "shared" / "traces-real" / "pytorch"
    # one with the allocator's events: their device names are stored as codes with their labels
    path = (
        source / "kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
    )
    if not path.exists():
        pytest.fail(f"{path} is missing: the real traces of shared/traces-real are needed")
    load_trace(path, cache=True)
    (entry,) = cache_dir.glob("*.nc")
    variables, data_vars, attrs = read(entry)
    with xr.open_dataset(entry, engine="h5netcdf", mask_and_scale=False) as ds:
        assert data_vars == [str(name) for name in ds.data_vars]
        assert set(variables) == {str(name) for name in ds.variables} - {"event", "memory_event"}
        assert {k: v for k, v in attrs.items()} == {k: v for k, v in ds.attrs.items()}
        labelled = []
        for name, variable in variables.items():
            expected = ds.variables[name]
            stored = dict(expected.attrs)
            values = expected.values
            if "dlexplore_labels" in stored:  # strings stored as codes: the reload gives the strings
                labelled.append(name)
                values = np.asarray(json.loads(stored.pop("dlexplore_labels")), dtype=object)[values]
            stored.pop("_FillValue", None)
            assert variable.dims == expected.dims, name
            assert variable.attrs == stored, name
            np.testing.assert_array_equal(variable.values, values, err_msg=name)
    assert labelled == ["memory_device"]
