"""Decoding only some phases (``decode_kineto(..., phases=...)``, what the PyTorch reader asks for):
the kept events' columns against the standard library's columns of every event, on every real
trace, synthetic ones and hand-written odd ones, by both paths."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dlexplore.traces.kineto_decode import PARSER, decode_kineto, decode_kineto_files

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces-real" / "pytorch"
sys.path.insert(0, str(ROOT / "benchmarks"))

from synth_traces import write_kineto  # noqa: E402

KEPT = ("X", "i", "M")
PARSERS = ["json"] + (["msgspec"] if PARSER == "msgspec" else [])


def strings(c, key: str) -> list:
    """A column as the values it stands for (codes of two decodings may differ)."""
    if key in ("ph", "cat", "name"):
        return list(c.strings(key))
    labels = c.strings(f"{key}_label")
    return [str(t) if code >= 0 else int(n) for t, code, n in zip(labels, c.columns[f"{key}_label"], c.columns[key])]


def kept_like_reference(selected, full) -> None:
    """``selected`` holds exactly the events of KEPT of ``full`` (every event, the reference), with
    the same values, and the arguments each phase keeps."""
    ph = full.strings("ph")
    keep = np.flatnonzero(np.isin(ph, KEPT))
    assert selected.events_read == len(full)
    np.testing.assert_array_equal(selected.index, keep)
    assert len(selected) == len(keep)
    for key in ("ph", "cat", "name", "pid", "tid"):
        assert strings(selected, key) == [strings(full, key)[i] for i in keep], key
    for key in ("ts", "dur", "bytes", "correlation", "external_id"):
        np.testing.assert_array_equal(selected.columns[key], full.columns[key][keep], err_msg=key)
    position = {int(e): r for r, e in enumerate(keep)}
    assert selected.comm == {position[i]: v for i, v in full.comm.items() if ph[i] == "X"}
    assert selected.meta_args == {position[i]: v for i, v in full.meta_args.items() if ph[i] == "M"}
    memory = np.asarray([ph[r] == "i" for r in full.memory["row"].tolist()], dtype=bool)
    np.testing.assert_array_equal(selected.index[selected.memory["row"]], full.memory["row"][memory])
    for key in full.memory:
        if key != "row":
            np.testing.assert_array_equal(selected.memory[key], full.memory[key][memory], err_msg=key)
    np.testing.assert_array_equal(
        selected.index[selected.comm_rows], [r for r in full.comm_rows.tolist() if ph[r] == "X"]
    )
    assert selected.meta == full.meta


def real_files() -> list[Path]:
    if not REAL.is_dir():
        pytest.fail(f"{REAL} is missing: the real traces of shared/traces-real are needed")
    return sorted(REAL.glob("*.json.gz"))


@pytest.mark.parametrize("parser", PARSERS)
def test_kept_phases_of_every_real_trace(parser):
    files = real_files()
    assert len(files) >= 13
    for path in files:
        full = decode_kineto(path, parser="json", lenient=True)
        kept_like_reference(decode_kineto(path, parser=parser, lenient=True, phases=KEPT), full)


@pytest.mark.parametrize("chunk_bytes", [64, 4096, 1 << 23])
@pytest.mark.parametrize("parser", PARSERS)
def test_kept_phases_at_any_chunk_size(tmp_path, parser, chunk_bytes):
    path = tmp_path / "rank-0.json.gz"
    write_kineto(path, 0.3, rank=0, world_size=2, seed=3, layers=4)
    full = decode_kineto(path, parser="json", lenient=True, chunk_bytes=1 << 30)
    selected = decode_kineto(path, parser=parser, lenient=True, phases=KEPT, chunk_bytes=chunk_bytes)
    kept_like_reference(selected, full)
    assert {"s", "f"} <= set(full.strings("ph")) and not {"s", "f"} & set(selected.strings("ph"))


@pytest.mark.parametrize("parser", PARSERS)
def test_odd_phases_and_values_go_to_the_reference(tmp_path, parser):
    """A phase outside the Trace Event Format's, a ph that is missing or not a string, two ph
    members, null values and names that mislead the chunk cut: the chunk is read the reference
    way and still gives the kept events only, with the same problems noted."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2},
        {"ph": "Z", "name": "odd", "ts": 2},
        {"name": "no phase", "ts": 3},
        {"ph": 5, "name": "number phase", "ts": 4},
        {"ph": "X", "name": 'a"},{"b', "ts": None, "dur": 1, "pid": True, "tid": 1.5},
        {"ph": "i", "name": "[memory]", "ts": 5, "args": {"Bytes": 4, "Device Type": 1}},
        {"ph": "s", "id": 1, "ts": "later", "cat": "ac2g", "name": "ac2g"},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "main"}},
        {"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "ts": 6, "dur": 1, "args": {"Ev Idx": 3}},
    ]
    path = tmp_path / "odd.json.gz"
    with gzip.open(path, "wt") as out:
        json.dump({"traceEvents": events * 40}, out)
    full = decode_kineto(path, parser="json", lenient=True, chunk_bytes=256)
    for chunk_bytes in (256, 1 << 20):
        selected = decode_kineto(path, parser=parser, lenient=True, phases=KEPT, chunk_bytes=chunk_bytes)
        kept_like_reference(selected, full)
        kept = set(selected.index.tolist())
        # problems of kept events are noted alike; those of left-out events may not be read at all
        assert sorted(p for p in selected.problems if p[0] in kept) == sorted(
            p for p in full.problems if p[0] in kept
        )


def test_phases_need_lenient_reading(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]}))
    with pytest.raises(ValueError, match="lenient"):
        decode_kineto(path, phases=KEPT)


def test_several_files_with_phases_in_order(tmp_path):
    paths = []
    for rank in range(3):
        path = tmp_path / f"rank-{rank}.json"
        write_kineto(path, 0.1, rank=rank, world_size=3, layers=4)
        paths.append(path)
    for path, got in zip(paths, decode_kineto_files(paths, workers=1, lenient=True, phases=KEPT), strict=True):
        assert got.path == str(path)
        kept_like_reference(got, decode_kineto(path, parser="json", lenient=True))
