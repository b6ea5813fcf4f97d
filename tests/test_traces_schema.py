"""The shared event schema, format detection and the netCDF round trip."""

import gzip

import numpy as np
import pandas as pd
import pytest

from dlexplore.errors import DlexploreError
from dlexplore.traces import Trace, detect_format, load_trace, make_events, write_netcdf
from dlexplore.traces.schema import CATEGORIES, COLLECTIVES, as_paths, normalize_collective_name


@pytest.mark.parametrize("name, expected", [
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
])
def test_collective_names(name, expected):
    assert normalize_collective_name(name) == expected
    assert expected == "" or expected in COLLECTIVES


def _table(**extra):
    columns = dict(rank=[0, 1], stream=["cpu:1:1", "cpu:2:1"], name=["aten::mm", "gloo:all_reduce"],
                   category=["compute", "communication"], start=[0.0, 1e-3], duration=[2e-3, 5e-4],
                   collective=["", "allreduce"], bytes=[np.nan, 4096.0],
                   step=pd.array([3, pd.NA], dtype="Int64"))
    columns.update(extra)
    return make_events(columns)


def test_make_events_dtypes_order_and_defaults():
    events = make_events(dict(rank=[0], stream=["s"], name=["n"], category=["compute"], start=[1.0],
                              duration=[2.0], op=[7]))
    assert list(events.columns) == ["rank", "stream", "name", "category", "start", "duration", "bytes",
                                    "collective", "step", "op"]
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
    pd.testing.assert_frame_equal(back.events, trace.events, check_categorical=False)
    assert back.format == "pytorch" and back.files == trace.files and back.world_size == 2
    assert back.meta == {"backend": "gloo"}
    assert back.source == trace.source
    assert not list(tmp_path.glob(".*.tmp"))


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
    out.write_text("[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor)\n"
                   "[1,0]<stdout>:#\n")
    assert detect_format(out) == "nccl-tests"
    only_bracket = tmp_path / "timeline.json"
    only_bracket.write_text("[\n")  # what Horovod leaves when no operation ran
    assert detect_format(only_bracket) == "horovod"
