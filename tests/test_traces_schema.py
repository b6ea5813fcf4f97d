"""The shared event schema, format detection and the netCDF round trip."""

import gzip
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.traces import Trace, detect_format, horovod, load_trace, make_events, write_netcdf
from dlexplore.traces.schema import CATEGORIES, COLLECTIVES, as_paths, normalize_collective_name


@pytest.mark.parametrize(
    "name, expected",
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce"),
        ("ncclKernel_ReduceScatter_RING_LL_Sum_float", "reduce_scatter"),
        ("ncclDevKernel_AllGather_RING_LL", "allgather"),
        ("gloo:all_reduce", "allreduce"),
        ("c10d::allreduce_", "allreduce"),
        ("c10d::broadcast_", "broadcast"),
        ("MPI_Allreduce", "allreduce"),
        ("MPI_Bcast", "broadcast"),
        ("MPI_Reduce", "reduce"),
        ("MPI_Alltoall", "alltoall"),
        ("MPI_Isend", "send"),
        ("MPI_Irecv", "recv"),
        ("NCCL_ALLREDUCE", "allreduce"),
        ("nccl:all_gather", "allgather"),
        ("aten::addmm", ""),
    ],
)
def test_collective_names(name, expected):
    assert normalize_collective_name(name) == expected
    assert expected == "" or expected in COLLECTIVES


def _table(**extra):
    columns = dict(
        rank=[0, 1],
        stream=["cpu:1:1", "cpu:2:1"],
        name=["aten::mm", "gloo:all_reduce"],
        category=["compute", "communication"],
        start=[0.0, 1e-3],
        duration=[2e-3, 5e-4],
        collective=["", "allreduce"],
        bytes=[np.nan, 4096.0],
        step=pd.array([3, pd.NA], dtype="Int64"),
    )
    columns.update(extra)
    return make_events(columns)


def test_make_events_dtypes_order_and_defaults():
    events = make_events(
        dict(rank=[0], stream=["s"], name=["n"], category=["compute"], start=[1.0], duration=[2.0], op=[7])
    )
    assert list(events.columns) == [
        "rank",
        "stream",
        "name",
        "category",
        "start",
        "duration",
        "bytes",
        "collective",
        "step",
        "op",
    ]
    assert events["rank"].dtype == np.int32 and str(events["step"].dtype) == "Int64"
    assert np.isnan(events["bytes"][0]) and events["collective"][0] == "" and events["step"].isna()[0]
    assert isinstance(events["category"].dtype, pd.CategoricalDtype)
    with pytest.raises(DlexploreError, match="lacks the column"):
        make_events(dict(rank=[0], stream=["s"], name=["n"], category=["compute"], start=[1.0]))
    with pytest.raises(DlexploreError, match="unknown event categories"):
        _table(category=["compute", "network"])
    assert set(CATEGORIES) >= {"compute", "communication", "memcpy", "data", "step"}


def test_trace_select_keeps_the_original():
    trace = Trace(_table(), "pytorch", ("rank0.json", "rank1.json"))
    assert trace.world_size == 2 and list(trace.ranks) == [0, 1]
    assert trace.source == "measured: pytorch trace rank0.json, rank1.json"
    one = trace.select(ranks=[1])
    assert len(one) == 1 and len(trace) == 2
    assert len(trace.select(steps=[3])) == 1
    assert len(trace.select(categories=["communication"])) == 1


def test_netcdf_round_trip_keeps_everything(tmp_path):
    trace = Trace(_table(), "pytorch", ("rank0.json", "rank1.json"), 2, {"backend": "gloo"})
    path = write_netcdf(trace, tmp_path / "trace.nc")
    assert detect_format(path) == "netcdf"
    back = load_trace(path)
    pd.testing.assert_frame_equal(back.events, trace.events)
    assert back.format == "pytorch" and back.files == trace.files and back.world_size == 2
    assert back.meta == {"backend": "gloo"}
    assert back.source == trace.source
    assert not list(tmp_path.glob(".*.tmp"))


TRACES = Path(__file__).parent / "data" / "traces"


def test_netcdf_stores_categories_as_codes_and_labels(tmp_path):
    # Read with h5py, not dlexplore: each categorical column is int32 codes on event plus a label
    # table, compressed; labels[codes] gives back the names of the real Horovod timeline.
    trace = horovod.read([TRACES / "horovod" / "timeline.json"])
    path = write_netcdf(trace, tmp_path / "trace.nc")
    with h5py.File(path, "r") as raw:
        codes = raw["name"]
        assert codes.dtype == np.int32 and codes.shape == (len(trace.events),)
        assert codes.compression == "gzip" and codes.shuffle
        assert codes.attrs["categories"] == "name_categories"
        labels = np.array([label.decode() for label in raw["name_categories"][()]], dtype=object)
        assert list(labels[codes[()]]) == list(trace.events["name"].astype(str))
        assert len(labels) == trace.events["name"].nunique() < len(trace.events)


def test_netcdf_keeps_missing_values_and_extra_dtypes(tmp_path):
    # Missing labels come back missing (the string layout made them "nan" and "None"), and extra
    # columns keep their pandas dtype: categorical, string, nullable integer and boolean. An id
    # beyond 2**53 stays exact (float with NaN would round 2**62 + 1 to 2**62).
    events = _table(
        op=pd.Categorical(["allreduce", np.nan]),
        note=np.array(["first", None], dtype=object),
        fusion=pd.array([pd.NA, 7], dtype="Int64"),
        id=pd.array([2**62 + 1, pd.NA], dtype="Int64"),
        flag=pd.array([True, pd.NA], dtype="boolean"),
    )
    trace = Trace(events, "horovod", ("timeline.json",))
    back = load_trace(write_netcdf(trace, tmp_path / "trace.nc"))
    pd.testing.assert_frame_equal(back.events, trace.events)
    assert back.events["op"].isna().tolist() == [False, True]
    assert back.events["note"].isna().tolist() == [False, True]
    assert back.events["id"][0] == 4611686018427387905 and back.events["id"].isna()[1]
    assert bool(back.events["flag"][0])
    assert back.events["flag"].isna().tolist() == [False, True]


def test_netcdf_round_trip_of_an_empty_trace(tmp_path):
    # No events: the label tables are empty and nothing is chunked or compressed.
    trace = Trace(_table().iloc[:0], "pytorch", ("rank0.json",))
    back = load_trace(write_netcdf(trace, tmp_path / "empty.nc"))
    assert len(back.events) == 0
    pd.testing.assert_frame_equal(back.events, trace.events)


def test_netcdf_written_with_string_columns_still_reads():
    # Written by dlexplore before the codes layout (commit f730817) from the real Horovod timeline;
    # its extra columns come back with the values they had, as the old layout stored them.
    fresh = horovod.read([TRACES / "horovod" / "timeline.json"])
    old = load_trace(TRACES / "netcdf" / "horovod-timeline-v1.nc")
    pd.testing.assert_frame_equal(old.events, fresh.events, check_categorical=False, check_dtype=False)
    assert old.format == "horovod" and old.world_size == 2


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda raw: raw["name"].__setitem__(0, 999), "codes need to be between -1"),
        (lambda raw: raw["name"].attrs.__setitem__("categories", "nowhere"), "names its labels 'nowhere'"),
    ],
)
def test_netcdf_damaged_codes_are_refused(tmp_path, damage, expected):
    trace = horovod.read([TRACES / "horovod" / "timeline.json"])
    path = write_netcdf(trace, tmp_path / "trace.nc")
    with h5py.File(path, "r+") as raw:
        damage(raw)
    with pytest.raises(InputFileError, match=expected) as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_paths_folders_and_globs(tmp_path):
    for name in ("rank1.json", "rank0.json", ".hidden"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in as_paths(tmp_path)] == ["rank0.json", "rank1.json"]
    assert [p.name for p in as_paths(str(tmp_path / "rank*.json"))] == ["rank0.json", "rank1.json"]
    with pytest.raises(DlexploreError, match="no file matches"):
        as_paths(str(tmp_path / "nothing*.json"))


def test_detection_refuses_what_is_not_a_trace(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(DlexploreError, match="empty.json.*empty"):
        detect_format(empty)
    obj = tmp_path / "config.json"
    obj.write_text('{"learning_rate": 0.1}')
    with pytest.raises(DlexploreError, match="config.json.*traceEvents"):
        detect_format(obj)
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(DlexploreError, match="notes.txt: unknown trace format"):
        load_trace(text)
    with pytest.raises(DlexploreError, match="missing.json: no such file"):
        load_trace(tmp_path / "missing.json")
    zipped = tmp_path / "t.json.gz"
    zipped.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert detect_format(zipped) == "pytorch"
    bad_gzip = tmp_path / "bad.json.gz"
    bad_gzip.write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(DlexploreError, match="bad.json.gz"):
        detect_format(bad_gzip)


def test_nccl_tests_under_mpirun_is_not_taken_for_json(tmp_path):
    out = tmp_path / "allreduce.out"
    out.write_text(
        "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor)\n[1,0]<stdout>:#\n"
    )
    assert detect_format(out) == "nccl-tests"
    only_bracket = tmp_path / "timeline.json"
    only_bracket.write_text("[\n")  # what Horovod leaves when no operation ran
    assert detect_format(only_bracket) == "horovod"
