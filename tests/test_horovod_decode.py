"""The column decoder of Horovod timelines: msgspec against the standard library on the timelines
Horovod 0.28.1 wrote, unfinished files, and bad events named as the reader names them."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dlexplore.errors import InputFileError
from dlexplore.traces import load_trace
from dlexplore.traces.horovod_decode import decode_horovod
from dlexplore.traces.kineto_decode import PARSER

ROOT = Path(__file__).resolve().parents[1]
HOROVOD = ROOT / "tests" / "data" / "traces" / "horovod"
sys.path.insert(0, str(ROOT / "benchmarks"))

from synth_traces import write_horovod  # noqa: E402

PARSERS = ["json"] + (["msgspec"] if PARSER == "msgspec" else [])


def decode_both(path: Path):
    results = []
    for parser in PARSERS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append((decode_horovod(path, parser=parser), [str(w.message) for w in caught]))
    first, first_warnings = results[0]
    for other, other_warnings in results[1:]:
        assert other.labels == first.labels
        for key in first.columns:
            np.testing.assert_array_equal(other.columns[key], first.columns[key], err_msg=key)
        assert other.args == first.args
        assert (other.terminated, other.partial_event_at) == (first.terminated, first.partial_event_at)
        assert other_warnings == first_warnings
    return first, first_warnings


@pytest.mark.parametrize("name", sorted(p.name for p in HOROVOD.glob("timeline*.json*")))
def test_timelines_horovod_wrote_decode_alike_and_as_the_reader_reads_them(name):
    path = HOROVOD / name
    columns, _ = decode_both(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = load_trace(path, format="horovod")
    ph = columns.strings("ph")
    # one row per range (B), tick (X) and marker (i), less the ranges left open
    rows = int(np.isin(ph, ["B", "X", "i"]).sum()) - trace.meta["files"][0]["open_ranges_dropped"]
    assert rows == len(trace.events)
    begins = columns.columns["ts"][ph != "M"]
    assert np.isclose(begins.min() * 1e-6, trace.events["start"].min())


def test_synthetic_unfinished_timeline(tmp_path):
    path = tmp_path / "timeline.json"
    write_horovod(path, 0.5, tensors=16, fusion=4, terminated=False)
    columns, _ = decode_both(path)
    assert not columns.terminated
    ph = columns.strings("ph")
    assert (ph == "E").sum() == (ph == "B").sum()  # every range closed before the cut
    shapes = {a["shape"] for a in columns.args.values() if isinstance(a, dict) and "shape" in a}
    assert len(shapes) == 16


def test_a_cut_off_last_event_is_dropped_with_a_warning(tmp_path):
    path = tmp_path / "timeline.json"
    write_horovod(path, 0.2, tensors=8, fusion=4, terminated=False)
    data = path.read_bytes()
    path.write_bytes(data + b'{"ph": "B", "name": "ALLRE')
    columns, caught = decode_both(path)
    assert columns.partial_event_at == len(data)
    assert any("is cut off" in message for message in caught)


def test_args_horovod_does_not_write_decode_as_the_standard_library_reads_them(tmp_path):
    """msgspec reads args as a struct of the keys Horovod writes: an unknown key, a number where a
    string belongs, and empty args must still come out as json.loads gives them (or as none)."""
    path = tmp_path / "timeline.json"
    op = '{"ph": "B", "name": "ALLREDUCE", "ts": %d, "pid": 1}'
    end = '{"ph": "E", "ts": %d, "pid": 1, "args": %s}'
    args = [
        '{"dtype": "float32", "shape": "[4]"}',
        '{"shape": "[2, 2]", "dtype": "float32", "extra": [1, null]}',
        '{"dtype": 7, "shape": "[4]"}',
        "{}",
        '{"sort_index": 3}',
        '{"dtype": "float32", "shape": "[4]"}',
    ]
    events = [f"{op % (10 * i)},\n{end % (10 * i + 5, a)}" for i, a in enumerate(args)]
    path.write_text("[\n" + ",\n".join(events) + "]")
    # pieces of about one operation, so that msgspec decodes the sound ones itself
    decoded = [decode_horovod(path, parser=parser, chunk=40) for parser in PARSERS]
    assert all(columns.args == decoded[0].args for columns in decoded)
    assert decoded[0].args == {
        1: {"dtype": "float32", "shape": "[4]"},
        3: {"shape": "[2, 2]", "dtype": "float32", "extra": [1, None]},
        5: {"dtype": 7, "shape": "[4]"},
        9: {"sort_index": 3},
        11: {"dtype": "float32", "shape": "[4]"},
    }


@pytest.mark.parametrize("parser", PARSERS)
def test_a_bad_pid_is_named_with_event_offset_and_line(tmp_path, parser):
    path = tmp_path / "timeline.json"
    path.write_text(
        '[\n{"ph": "B", "name": "ALLREDUCE", "ts": 1, "pid": 1},\n{"ph": "E", "ts": 2, "pid": "one"}]'
    )
    with pytest.raises(
        InputFileError, match=r"event #1 at byte offset 55: 'pid' is 'one'; expected the tensor's"
    ) as error:
        decode_horovod(path, parser=parser)
    assert error.value.line == 3 and error.value.path == str(path)


def rows_both_ways(path: Path):
    """The table made from the columns (horovod_rows) and event by event (the builder)."""
    from dlexplore.traces.horovod_builder import Builder
    from dlexplore.traces.horovod_json import event_chunks, read_data
    from dlexplore.traces.horovod_rows import rows_from_columns

    tables = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast = rows_from_columns(decode_horovod(path), path, 3)
        assert fast is not None, "a sound timeline is read from its columns"
        tables.append(fast.finish(2, "auto"))
        builder = Builder(path, 3)
        for chunk in event_chunks(read_data(path), path, {}):
            builder.add(chunk)
        tables.append(builder.finish(2, "auto"))
    said = [str(w.message) for w in caught if "cut off" not in str(w.message)]
    return tables, said


@pytest.mark.parametrize("name", sorted(p.name for p in HOROVOD.glob("timeline*.json*")))
def test_rows_from_columns_are_the_builders_rows(name):
    """Ranges paired, operations counted and fused, steps, sizes and leftovers: the column path
    gives the table (and the warnings) of the event-by-event reference on every real timeline."""
    import pandas as pd

    ((fast, fast_details), (slow, slow_details)), said = rows_both_ways(HOROVOD / name)
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert fast_details == slow_details
    assert said[: len(said) // 2] == said[len(said) // 2 :]  # each warning given by both


@pytest.mark.parametrize("terminated", [True, False])
def test_rows_from_columns_on_a_synthetic_timeline(tmp_path, terminated):
    import pandas as pd

    path = tmp_path / "timeline.json"
    write_horovod(path, 1.0, tensors=24, fusion=5, terminated=terminated, seed=4)
    (fast, fast_details), (slow, slow_details) = rows_both_ways(path)[0]
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert fast_details == slow_details and fast_details["fusions"] > 10


def test_without_msgspec_the_reader_gives_the_same_table(tmp_path):
    """A platform without msgspec's wheels (the import blocked in a child process)."""
    import pickle
    import subprocess

    import pandas as pd

    source = HOROVOD / "timeline-cycles.json.gz"
    out = tmp_path / "trace.pickle"
    code = (
        "import pickle, sys, warnings\n"
        "sys.modules['msgspec'] = None  # as if it could not be installed\n"
        "warnings.simplefilter('ignore')\n"
        "from dlexplore.traces import horovod, horovod_decode\n"
        "assert horovod_decode.msgspec is None\n"
        f"pickle.dump(horovod.read([{str(source)!r}]), open({str(out)!r}, 'wb'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    without = pickle.loads(out.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        here = load_trace(source, format="horovod")
    pd.testing.assert_frame_equal(without.events, here.events)
    assert without.meta == here.meta


# What is done to a sound .json.gz timeline, and what the standard library's gzip says of it.
HOROVOD_GZIP_FAULTS = {
    "truncated": (
        lambda data: data[: len(data) // 2],
        r"corrupt or truncated gzip data \(Compressed file ended",
    ),
    # ISA-L reads bytes after the last member as a truncation; the standard library names them
    "trailing bytes": (
        lambda data: data + b"xx",
        r"corrupt or truncated gzip data \(Not a gzipped file \(b'xx'\)\)",
    ),
    "bad checksum": (
        lambda data: data[:-8] + bytes(4) + data[-4:],
        r"corrupt or truncated gzip data \(CRC check",
    ),
}


@pytest.mark.parametrize("fault", sorted(HOROVOD_GZIP_FAULTS))
@pytest.mark.parametrize("decompressor", ["isal", "zlib"])
def test_gzip_faults_of_a_timeline_are_named_as_the_standard_library_names_them(
    tmp_path, monkeypatch, fault, decompressor
):
    from dlexplore.traces import horovod_json

    if decompressor == "zlib":
        monkeypatch.setattr(horovod_json, "igzip", None)
    else:
        assert horovod_json.igzip is not None, "isal is a core dependency: README's install has it"
    path = tmp_path / "timeline.json.gz"
    change, message = HOROVOD_GZIP_FAULTS[fault]
    path.write_bytes(change((HOROVOD / "timeline-cycles.json.gz").read_bytes()))
    with pytest.raises(InputFileError, match=message) as error:
        decode_horovod(path)
    assert str(error.value).startswith(str(path))


@pytest.mark.parametrize("members", [1, 3])
def test_isal_and_zlib_inflate_a_timeline_to_the_same_bytes(tmp_path, monkeypatch, members):
    """One gzip member (the trailer gives the size) and several (it gives the last one's only)."""
    import gzip

    from dlexplore.traces import horovod_json

    text = gzip.decompress((HOROVOD / "timeline-cycles.json.gz").read_bytes())
    path = tmp_path / "timeline.json.gz"
    parts = [text[i * len(text) // members : (i + 1) * len(text) // members] for i in range(members)]
    path.write_bytes(b"".join(gzip.compress(part) for part in parts))
    fast = horovod_json.read_data(path)
    monkeypatch.setattr(horovod_json, "igzip", None)
    assert fast == horovod_json.read_data(path) == text


def test_a_gzip_timeline_reads_under_an_address_space_limit():
    """Asking the gzip reader for up to 16 GiB at once made it allocate 16 GiB first: every .json.gz
    timeline was refused as "more than fits in memory" under ``ulimit -v`` or without overcommit."""
    import subprocess

    source = HOROVOD / "timeline-cycles.json.gz"
    code = (
        "import resource, warnings\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "warnings.simplefilter('ignore')\n"
        "from dlexplore.traces import horovod\n"
        f"print(len(horovod.read([{str(source)!r}]).events))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert int(done.stdout) == len(load_trace(source, format="horovod").events) > 0
