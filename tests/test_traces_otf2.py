"""Score-P OTF2 archives -> dlexplore.traces.otf2.

Score-P itself is not installed here; the archives are written by the ``otf2`` Python package's
writer (PyPI ``otf2`` 3.x, the library Score-P writes its traces with), with the definitions and
records Score-P's MPI adapter writes (Score-P ``src/adapters/mpi``): a location group ``MPI Rank
<r>`` per process with a ``Master thread`` location, the MPI ``COMM_LOCATIONS`` group listing the
ranks' locations in rank order, ``MPI_COMM_WORLD`` as a ``COMM_GROUP`` and its communicator, MPI
regions with paradigm ``MPI`` and roles ``COLL_ALL2ALL``/``COLL_ONE2ALL``/``POINT2POINT``, each
collective recorded as ``Enter``, ``MpiCollectiveBegin``, ``MpiCollectiveEnd`` (operation,
communicator, root, bytes sent and received), ``Leave``, with the byte counts of Score-P's
``scorep_mpi_coll.c`` (``MPI_Allreduce`` of ``count`` elements of ``size`` bytes on ``N`` ranks:
sent = received = ``N x count x size``; ``MPI_Bcast``: the root sends ``N x count x size`` and
receives ``count x size``, the others receive ``count x size``), point-to-point messages as
``MpiSend``/``MpiRecv``/``MpiIsend``/``MpiIrecvRequest``/``MpiIrecv`` inside their MPI regions,
and the iteration as a user parameter (``SCOREP_USER_PARAMETER_INT64("iteration", i)`` ->
``ParameterInt``).

The program, 4 ranks, timer resolution 1 MHz (ticks are microseconds), first event at 1000 ticks
(so ``global_offset`` = 1000 and times in seconds are ``(ticks - 1000) / 1e6``)::

    main [1000, 9000]
      train_step (iteration = 0) [1000, 4000] and (iteration = 1) [5000, 8000], each from t:
        compute        [t, t + 1000 + 100 * rank]     (rank 3 is the straggler)
        MPI_Allreduce  [t + 1500, t + 2000]  1024 floats (4096 bytes per rank)
        MPI_Bcast      [t + 2000, t + 2200]  256 doubles (2048 bytes), root 0
      after the loop: rank 0 MPI_Send 1000 bytes -> rank 1 (MPI_Recv), rank 2 MPI_Isend 512 bytes ->
      rank 3 (MPI_Irecv, completed in MPI_Wait)

The locations are defined in reverse rank order, so that a rank can only come out right through
the MPI group, as in Score-P traces.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import otf2
import pytest
from otf2.enums import (
    CollectiveOp,
    GroupType,
    LocationGroupType,
    Paradigm,
    ParameterType,
    RegionRole,
)

from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.traces import detect_format, load_trace
from dlexplore.traces import otf2 as reader

RANKS = 4
RESOLUTION = 1_000_000  # ticks per second
ALLREDUCE_COUNT, FLOAT = 1024, 4
BCAST_COUNT, DOUBLE = 256, 8
UNDEFINED_ROOT = 0xFFFFFFFF


def write_archive(folder: Path, *, break_leave: bool = False, leave_open: bool = False) -> Path:
    """The 4-rank program of the module docstring; returns the anchor file."""
    with otf2.writer.open(str(folder), timer_resolution=RESOLUTION) as trace:
        defs = trace.definitions
        machine = defs.system_tree_node("machine")
        node = defs.system_tree_node("node0", parent=machine)
        location = {}
        for rank in reversed(range(RANKS)):
            group = defs.location_group(
                f"MPI Rank {rank}", location_group_type=LocationGroupType.PROCESS, system_tree_parent=node
            )
            location[rank] = defs.location("Master thread", group=group)
        defs.group(
            "MPI",
            group_type=GroupType.COMM_LOCATIONS,
            paradigm=Paradigm.MPI,
            members=[location[r] for r in range(RANKS)],
        )
        world_group = defs.group(
            "MPI_COMM_WORLD",
            group_type=GroupType.COMM_GROUP,
            paradigm=Paradigm.MPI,
            members=list(range(RANKS)),
        )
        world = defs.comm("MPI_COMM_WORLD", group=world_group)
        region = {
            "main": defs.region("main", paradigm=Paradigm.COMPILER, region_role=RegionRole.FUNCTION),
            "train_step": defs.region("train_step", paradigm=Paradigm.USER, region_role=RegionRole.FUNCTION),
            "compute": defs.region("compute", paradigm=Paradigm.USER, region_role=RegionRole.FUNCTION),
            "MPI_Allreduce": defs.region(
                "MPI_Allreduce", paradigm=Paradigm.MPI, region_role=RegionRole.COLL_ALL2ALL
            ),
            "MPI_Bcast": defs.region("MPI_Bcast", paradigm=Paradigm.MPI, region_role=RegionRole.COLL_ONE2ALL),
            "MPI_Send": defs.region("MPI_Send", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT),
            "MPI_Recv": defs.region("MPI_Recv", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT),
            "MPI_Isend": defs.region("MPI_Isend", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT),
            "MPI_Irecv": defs.region("MPI_Irecv", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT),
            "MPI_Wait": defs.region("MPI_Wait", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT),
        }
        iteration = defs.parameter("iteration", parameter_type=ParameterType.INT64)
        for rank in range(RANKS):
            w = trace.event_writer_from_location(location[rank])
            w.enter(1000, region["main"])
            for i, t in enumerate((1000, 5000)):
                w.enter(t, region["train_step"])
                w.parameter_int(t, iteration, i)
                w.enter(t, region["compute"])
                w.leave(t + 1000 + 100 * rank, region["compute"])
                w.enter(t + 1500, region["MPI_Allreduce"])
                w.mpi_collective_begin(t + 1500)
                n = RANKS * ALLREDUCE_COUNT * FLOAT
                w.mpi_collective_end(t + 2000, CollectiveOp.ALLREDUCE, world, UNDEFINED_ROOT, n, n)
                w.leave(t + 2000, region["MPI_Allreduce"])
                w.enter(t + 2000, region["MPI_Bcast"])
                w.mpi_collective_begin(t + 2000)
                block = BCAST_COUNT * DOUBLE
                sent, received = (RANKS * block, block) if rank == 0 else (0, block)
                w.mpi_collective_end(t + 2200, CollectiveOp.BCAST, world, 0, sent, received)
                w.leave(t + 2200, region["MPI_Bcast"])
                w.leave(t + 3000, region["compute" if break_leave and i == 1 else "train_step"])
            if rank == 0:
                w.enter(8000, region["MPI_Send"])
                w.mpi_send(8000, 1, world, 7, 1000)
                w.leave(8100, region["MPI_Send"])
            elif rank == 1:
                w.enter(8000, region["MPI_Recv"])
                w.mpi_recv(8150, 0, world, 7, 1000)
                w.leave(8150, region["MPI_Recv"])
            elif rank == 2:
                w.enter(8000, region["MPI_Isend"])
                w.mpi_isend(8000, 3, world, 9, 512, 41)
                w.leave(8010, region["MPI_Isend"])
                w.enter(8020, region["MPI_Wait"])
                w.mpi_isend_complete(8200, 41)
                w.leave(8200, region["MPI_Wait"])
            else:
                w.enter(8000, region["MPI_Irecv"])
                w.mpi_irecv_request(8000, 77)
                w.leave(8005, region["MPI_Irecv"])
                w.enter(8005, region["MPI_Wait"])
                w.mpi_irecv(8300, 2, world, 9, 512, 77)
                w.leave(8300, region["MPI_Wait"])
            if not (leave_open and rank == 3):
                w.leave(9000, region["main"])
    return folder / "traces.otf2"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_archive(tmp_path_factory.mktemp("otf2") / "scorep-run")


def test_detect_format(archive):
    assert detect_format(archive) == "otf2"
    assert detect_format(archive.parent) == "otf2"


def test_archive_folder_loads_like_its_anchor(archive):
    from dlexplore.traces import load_trace

    by_folder = load_trace(archive.parent)
    by_anchor = load_trace(archive)
    assert len(by_folder) == len(by_anchor) > 0 and list(by_folder.ranks) == [0, 1, 2, 3]


def test_ranks_and_clock(archive):
    trace = load_trace(archive)
    assert trace.format == "otf2" and trace.world_size == 4
    assert sorted(set(trace.events["rank"])) == [0, 1, 2, 3]
    assert trace.meta["clock"]["timer_resolution"] == RESOLUTION
    assert trace.meta["clock"]["global_offset"] == 1000
    assert set(trace.events["stream"]) == {"Master thread"}


def test_compute_regions_exclusive(archive):
    ev = load_trace(archive).events
    compute = ev[(ev["name"] == "compute") & (ev["rank"] == 3)].sort_values("start")
    # rank 3 computes 1000 + 300 ticks = 1.3 ms, from 1000 and 5000 ticks -> 0 s and 4 ms
    assert compute["start"].tolist() == pytest.approx([0.0, 4e-3])
    assert compute["duration"].tolist() == pytest.approx([1.3e-3, 1.3e-3])
    assert set(compute["category"]) == {"compute"}
    # main is left only with its own time: after the loop and between the two steps, per rank
    main = ev[(ev["name"] == "main") & (ev["rank"] == 0)]
    assert main["category"].eq("compute").all()
    # main [1000, 9000] less the two train_step calls (3000 ticks each) and MPI_Send (100)
    assert main["duration"].sum() == pytest.approx((9000 - 1000 - 2 * 3000 - 100) / 1e6)
    # train_step's own time: [end of compute, allreduce) and [bcast end, leave) per step
    own = ev[(ev["name"] == "train_step") & (ev["rank"] == 0) & (ev["category"] == "compute")]
    assert own["duration"].sum() == pytest.approx(2 * ((1500 - 1000) + (3000 - 2200)) / 1e6)


def test_allreduce_and_bcast_sizes(archive):
    ev = load_trace(archive).events
    allreduce = ev[ev["name"] == "MPI_Allreduce"]
    assert len(allreduce) == 8 and set(allreduce["category"]) == {"communication"}
    assert set(allreduce["collective"]) == {"allreduce"}
    assert set(allreduce["bytes"]) == {ALLREDUCE_COUNT * FLOAT}  # 16384 sent / 4 ranks
    assert set(allreduce["bytes_sent"]) == {RANKS * ALLREDUCE_COUNT * FLOAT}
    assert allreduce["duration"].tolist() == pytest.approx([500e-6] * 8)
    assert set(allreduce["communicator"]) == {"MPI_COMM_WORLD"}
    bcast = ev[ev["name"] == "MPI_Bcast"]
    assert set(bcast["collective"]) == {"broadcast"}
    assert set(bcast["bytes"]) == {BCAST_COUNT * DOUBLE}  # root: 8192 / 4; others: 2048 received
    assert set(bcast["peer"].astype(int)) == {0}
    root = bcast[bcast["rank"] == 0]
    assert set(root["bytes_sent"]) == {RANKS * BCAST_COUNT * DOUBLE}


def test_point_to_point(archive):
    ev = load_trace(archive).events.set_index(["rank", "name"])
    send = ev.loc[(0, "MPI_Send")]
    assert send["collective"] == "send" and send["bytes"] == 1000 and send["peer"] == 1
    recv = ev.loc[(1, "MPI_Recv")]
    assert recv["collective"] == "recv" and recv["bytes"] == 1000 and recv["peer"] == 0
    assert recv["duration"] == pytest.approx(150e-6)
    isend = ev.loc[(2, "MPI_Isend")]
    assert isend["collective"] == "send" and isend["bytes"] == 512 and isend["peer"] == 3
    wait = ev.loc[(3, "MPI_Wait")]
    assert wait["collective"] == "recv" and wait["bytes"] == 512 and wait["peer"] == 2
    assert wait["category"] == "communication"
    assert np.isnan(ev.loc[(2, "MPI_Wait")]["bytes"])  # the Isend's bytes are counted once, on MPI_Isend


def test_steps_from_parameter(archive):
    ev = load_trace(archive).events
    steps = ev[ev["category"] == "step"]
    assert len(steps) == 8 and set(steps["name"]) == {"train_step"}
    assert steps[steps["rank"] == 2].sort_values("start")["step"].tolist() == [0, 1]
    assert steps["duration"].tolist() == pytest.approx([3e-3] * 8)  # [t, t + 3000] ticks
    allreduce = ev[(ev["name"] == "MPI_Allreduce") & (ev["rank"] == 1)].sort_values("start")
    assert allreduce["step"].tolist() == [0, 1]
    send = ev[ev["name"] == "MPI_Send"].iloc[0]
    assert str(send["step"]) == "<NA>"


def test_inclusive_regions(archive):
    ev = reader.read([archive], regions="inclusive").events
    main = ev[(ev["name"] == "main") & (ev["rank"] == 0)]
    assert len(main) == 1 and main["category"].iloc[0] == "annotation"
    assert main["duration"].iloc[0] == pytest.approx(8e-3)
    compute = ev[(ev["name"] == "compute")]
    assert set(compute["category"]) == {"compute"} and len(compute) == 8


def test_any_file_of_the_archive(archive):
    assert len(reader.read([archive.parent / "traces.def"])) == len(load_trace(archive))
    with pytest.raises(DlexploreError, match="2 OTF2 archives"):
        other = write_archive(archive.parent.parent / "second-run")
        reader.read([archive, other])


def test_mismatched_leave(tmp_path):
    anchor = write_archive(tmp_path / "bad", break_leave=True)
    with pytest.raises(
        InputFileError,
        match=r"traces\.otf2: location Master thread, event \d+ \(time 8000\): Leave "
        r"of region 'compute' while 'train_step' is open",
    ):
        reader.read([anchor])


def test_region_never_left(tmp_path):
    anchor = write_archive(tmp_path / "open", leave_open=True)
    with pytest.raises(InputFileError, match="regions never left.*main"):
        reader.read([anchor])


def test_damaged_archive(tmp_path, archive):
    copy = tmp_path / "copy"
    shutil.copytree(archive.parent, copy)
    (copy / "traces.otf2").write_bytes(b"not an otf2 anchor file\n")
    with pytest.raises(InputFileError, match=r"traces\.otf2: the otf2 library cannot open this archive"):
        reader.read([copy / "traces.otf2"])
    cut = tmp_path / "cut"
    shutil.copytree(archive.parent, cut)
    events = sorted((cut / "traces").glob("*.evt"))[0]
    events.write_bytes(events.read_bytes()[: events.stat().st_size // 2])
    with pytest.raises(InputFileError, match=r"cut/traces\.otf2"):
        reader.read([cut / "traces.otf2"])


def test_missing_package_says_how_to_install(monkeypatch, archive):
    import sys

    monkeypatch.setitem(sys.modules, "otf2", None)
    with pytest.raises(DlexploreError, match=r"pip install 'dlexplore\[otf2\]'"):
        reader.read([archive])
