"""Nsight Systems SQLite exports -> dlexplore.traces.nsys.

nsys cannot run here (no NVIDIA GPU or Nsight Systems install on the test machines), so the
exports are written by :func:`make_export` below, table by table, with the ``CREATE TABLE``
statements of the Nsight Systems "SQLite Schema Reference" for the 2026.4 release (export schema
version 3.28.1; ``Nsight Systems AnalysisGuide, topics/sqlite-schema-reference.rst``): every
column, type and ``NOT NULL`` of the tables used is as documented there (the documentation's
per-column comments are left out). What the docs fix besides the schema, and the file follows:

- ids: ``globalTid = globalPid | tid`` with ``pid = globalTid / 0x1000000 % 0x1000000`` ("Serialized
  process and thread identifiers" in the SQLite examples); kernel, CUDA call and NVTX names are ids
  into ``StringIds``; ``ENUM_NSYS_EVENT_TYPE`` 59 ``NvtxPushPopRange``, 60 ``NvtxStartEndRange``,
  75 ``NvtxDomainCreate``; memcpy names as nsys's own reports build them, ``'[CUDA memcpy ' ||
  ENUM_CUDA_MEMCPY_OPER.label || ']'`` and ``[CUDA memset]``;
- NCCL's NVTX annotations as NCCL's source writes them (``src/include/nvtx.h``,
  ``nvtx_payload_schemas.h``, NCCL 2.2x): a domain named ``NCCL``, push/pop ranges named by the API
  function (``ncclAllReduce``, ``ncclCommInitRank``) as registered strings, with payload schemas
  whose fields are ``Message size [bytes]``, ``Reduction operation``, ``Rank``, ``No. of ranks``;
- binary payloads exported with ``nsys export --dynamic-tables=all`` as
  ``DYNAMIC_NVTXPAYLOAD_DATATYPE_<globalPid>_<domainId>_<schemaId>`` tables joined to
  ``NVTX_EVENTS`` on ``eventId``, linked through ``NVTX_EVENTS_PAYLOAD_SCHEMAS`` and with field
  names through ``NVTX_EXPORT_TRANSLATION``. The docs do not give nsys's rule for sanitized names;
  the ones used here (``Message_size__bytes_``) are this file's choice, reached through the
  translation table as a real export's would be.

Times in the files are nanoseconds; the expected values are worked out by hand below.
"""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest

from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.traces import detect_format, load_trace, nsys

DDL = """
CREATE TABLE StringIds (
    id INTEGER NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE META_DATA_EXPORT (
    name TEXT NOT NULL,
    value TEXT
);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (
    id INTEGER NOT NULL PRIMARY KEY,
    name TEXT,
    label TEXT
);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (
    id INTEGER NOT NULL PRIMARY KEY,
    name TEXT,
    label TEXT
);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs INTEGER,
    utcTime TEXT,
    localTime TEXT,
    systemClockNs INTEGER,
    sessionStartCntVctNs INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL,
    greenContextId INTEGER,
    streamId INTEGER NOT NULL,
    correlationId INTEGER,
    globalPid INTEGER,
    bytes INTEGER NOT NULL,
    copyKind INTEGER NOT NULL,
    deprecatedSrcId INTEGER,
    srcKind INTEGER,
    dstKind INTEGER,
    srcDeviceId INTEGER,
    srcContextId INTEGER,
    dstDeviceId INTEGER,
    dstContextId INTEGER,
    migrationCause INTEGER,
    graphNodeId INTEGER,
    virtualAddress INTEGER,
    copyCount INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL,
    greenContextId INTEGER,
    streamId INTEGER NOT NULL,
    correlationId INTEGER,
    globalPid INTEGER,
    value INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    graphNodeId INTEGER,
    memKind INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL,
    greenContextId INTEGER,
    streamId INTEGER NOT NULL,
    correlationId INTEGER,
    globalPid INTEGER,
    demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL,
    mangledName INTEGER,
    launchType INTEGER,
    cacheConfig INTEGER,
    registersPerThread INTEGER NOT NULL,
    gridX INTEGER NOT NULL,
    gridY INTEGER NOT NULL,
    gridZ INTEGER NOT NULL,
    blockX INTEGER NOT NULL,
    blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL,
    staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL,
    localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL,
    gridId INTEGER NOT NULL,
    sharedMemoryExecuted INTEGER,
    graphNodeId INTEGER,
    sharedMemoryLimitConfig INTEGER,
    qmdBulkReleaseDone INTEGER,
    qmdPreexitDone INTEGER,
    qmdLastCtaDone INTEGER,
    graphId INTEGER,
    clusterX INTEGER,
    clusterY INTEGER,
    clusterZ INTEGER,
    clusterSchedulingPolicy INTEGER,
    maxPotentialClusterSize INTEGER,
    maxActiveClusters INTEGER,
    sharedMemoryRequestedPercentage INTEGER,
    tensorSizeMinusOneElements TEXT NOT NULL
);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL,
    globalTid INTEGER,
    correlationId INTEGER,
    nameId INTEGER NOT NULL,
    returnValue INTEGER NOT NULL,
    callchainId INTEGER
);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL,
    end INTEGER,
    eventType INTEGER NOT NULL,
    rangeId INTEGER,
    category INTEGER,
    color INTEGER,
    text TEXT,
    globalTid INTEGER,
    endGlobalTid INTEGER,
    textId INTEGER,
    domainId INTEGER,
    uint64Value INTEGER,
    int64Value INTEGER,
    doubleValue REAL,
    uint32Value INTEGER,
    int32Value INTEGER,
    floatValue REAL,
    jsonTextId INTEGER,
    jsonText TEXT,
    binaryData TEXT,
    eventId INTEGER NOT NULL PRIMARY KEY
);
CREATE TABLE NVTX_EVENTS_PAYLOAD_SCHEMAS (
    eventId INTEGER NOT NULL,
    globalPid INTEGER NOT NULL,
    domainId INTEGER NOT NULL,
    payloadSchemaID INTEGER NOT NULL
);
CREATE TABLE NVTX_EXPORT_TRANSLATION (
    originalName TEXT NOT NULL,
    sanitizedName TEXT NOT NULL
);
"""

MPI_RANKS_DDL = """
CREATE TABLE MPI_RANKS (
    globalTid INTEGER NOT NULL,
    rank INTEGER NOT NULL
);
"""

US = 1000  # ns per microsecond, to write times readably
VM = 1 << 48  # the hardware/VM part of nsys global ids
NCCL_DOMAIN = 1
SCHEMA_ALLREDUCE = 0x200 + 1  # NCCL's static schema ids (NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START + n)
SCHEMA_INIT_RANK = 0x200 + 2
ALLREDUCE_BYTES = 4 * 1024 * 1024
STRINGS = {
    1: "cudaMemcpyAsync_v3020",
    2: "cudaLaunchKernel_v7000",
    3: "cudaMemsetAsync_v3020",
    4: "ampere_sgemm_128x64_nn",
    5: "void ampere_sgemm_128x64_nn<float>(cublasGemmParams)",
    6: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    7: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    8: "ncclCommInitRank",
    9: "ncclAllReduce",
}


def global_ids(pid: int, tid: int) -> tuple[int, int]:
    """(globalPid, globalTid) as nsys serializes them."""
    global_pid = VM | (pid << 24)
    return global_pid, global_pid | tid


def make_export(
    path: Path,
    *,
    pid: int,
    payload_rank: int | None = None,
    nranks: int = 2,
    mpi_rank: int | None = None,
    payloads: bool = True,
) -> Path:
    """One rank's export: two training steps, a GEMM per step, a memcpy, a memset and an NCCL
    all-reduce of 4 MiB; see the module docstring for the sources of every table.

    Timeline of the main thread and GPU 0 (µs from the session start)::

        NVTX  ProfilerStep#1 [1000, 3000]   ProfilerStep#2 [3000, 5000]
              ncclCommInitRank [500, 900]   ncclAllReduce [2400, 2600]
        CUDA  cudaMemcpyAsync [1050, 1060] corr 10 -> memcpy H2D [1100, 1150] 4 MiB, stream 7
              cudaLaunchKernel [1200, 1210] corr 11 -> sgemm      [1300, 1800] stream 7
              cudaMemsetAsync  [1250, 1255] corr 14 -> memset     [1260, 1270] 1024 B, stream 7
              cudaLaunchKernel [2500, 2510] corr 12 -> nccl AR    [2700, 3200] stream 13
              cudaLaunchKernel [4900, 4910] corr 13 -> sgemm      [5100, 5600] stream 7
    """
    global_pid, tid = global_ids(pid, pid + 5)
    db = sqlite3.connect(path)
    db.executescript(DDL)
    if mpi_rank is not None:
        db.executescript(MPI_RANKS_DDL)
        db.execute("INSERT INTO MPI_RANKS VALUES (?, ?)", (tid, mpi_rank))
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", list(STRINGS.items()))
    db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.28.1')")
    db.executemany(
        "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
        [
            (34, "NvtxMark", "NVTX Mark"),
            (59, "NvtxPushPopRange", "NVTX PushPop Range"),
            (60, "NvtxStartEndRange", "NVTX StartEnd Range"),
            (75, "NvtxDomainCreate", "NVTX Domain Create"),
        ],
    )
    db.executemany(
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
        [
            (1, "CUDA_MEMCPY_OPER_HTOD", "Host-to-Device"),
            (2, "CUDA_MEMCPY_OPER_DTOH", "Device-to-Host"),
            (8, "CUDA_MEMCPY_OPER_DTOD", "Device-to-Device"),
        ],
    )
    db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs) VALUES (1780000000000000000)")
    runtime = [
        (1050, 1060, 10, 1),
        (1200, 1210, 11, 2),
        (1250, 1255, 14, 3),
        (2500, 2510, 12, 2),
        (4900, 4910, 13, 2),
    ]
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, "
        "nameId, returnValue) VALUES (?, ?, 1, ?, ?, ?, 0)",
        [(a * US, b * US, tid, corr, name) for a, b, corr, name in runtime],
    )
    kernels = [(1300, 1800, 7, 11, 5, 4), (2700, 3200, 13, 12, 7, 6), (5100, 5600, 7, 13, 5, 4)]
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, "
        "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, "
        "blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, "
        "tensorSizeMinusOneElements) "
        "VALUES (?, ?, 0, 1, ?, ?, ?, ?, ?, 64, 128, 1, 1, 256, 1, 1, 0, 0, 0, 0, ?, '')",
        [
            (a * US, b * US, stream, corr, global_pid, demangled, short, corr)
            for a, b, stream, corr, demangled, short in kernels
        ],
    )
    db.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (?, ?, 0, 1, 7, 10, ?, ?, 1, 1, 2)",
        (1100 * US, 1150 * US, global_pid, ALLREDUCE_BYTES),
    )
    db.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, correlationId, "
        "globalPid, value, bytes) VALUES (?, ?, 0, 1, 7, 14, ?, 0, 1024)",
        (1260 * US, 1270 * US, global_pid),
    )
    nvtx = [  # start, end, eventType, text, textId, domainId, eventId
        (400, None, 75, "NCCL", None, NCCL_DOMAIN, 1),
        (500, 900, 59, None, 8, NCCL_DOMAIN, 2),
        (1000, 3000, 59, "ProfilerStep#1", None, 0, 3),
        (3000, 5000, 59, "ProfilerStep#2", None, 0, 4),
        (2400, 2600, 59, None, 9, NCCL_DOMAIN, 5),
    ]
    db.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId, eventId) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (a * US, None if b is None else b * US, kind, text, tid, text_id, domain, event)
            for a, b, kind, text, text_id, domain, event in nvtx
        ],
    )
    if payloads:
        db.executemany(
            "INSERT INTO NVTX_EXPORT_TRANSLATION VALUES (?, ?)",
            [
                ("NCCL communicator ID", "NCCL_communicator_ID"),
                ("Message size [bytes]", "Message_size__bytes_"),
                ("Reduction operation", "Reduction_operation"),
                ("No. of ranks", "No__of_ranks"),
                ("Rank", "Rank"),
                ("CUDA device", "CUDA_device"),
            ],
        )
        init_table = f"DYNAMIC_NVTXPAYLOAD_DATATYPE_{global_pid}_{NCCL_DOMAIN}_{SCHEMA_INIT_RANK}"
        reduce_table = f"DYNAMIC_NVTXPAYLOAD_DATATYPE_{global_pid}_{NCCL_DOMAIN}_{SCHEMA_ALLREDUCE}"
        db.execute(
            f"CREATE TABLE {init_table} (eventId INTEGER NOT NULL, NCCL_communicator_ID INTEGER, "
            "No__of_ranks INTEGER, Rank INTEGER, CUDA_device INTEGER)"
        )
        db.execute(
            f"CREATE TABLE {reduce_table} (eventId INTEGER NOT NULL, NCCL_communicator_ID INTEGER, "
            "Message_size__bytes_ INTEGER, Reduction_operation INTEGER)"
        )
        db.execute(
            f"INSERT INTO {init_table} VALUES (2, 7046530118468624017, ?, ?, 0)",
            (nranks, payload_rank if payload_rank is not None else 0),
        )
        db.execute(f"INSERT INTO {reduce_table} VALUES (5, 7046530118468624017, ?, 0)", (ALLREDUCE_BYTES,))
        db.executemany(
            "INSERT INTO NVTX_EVENTS_PAYLOAD_SCHEMAS VALUES (?, ?, ?, ?)",
            [(2, global_pid, NCCL_DOMAIN, SCHEMA_INIT_RANK), (5, global_pid, NCCL_DOMAIN, SCHEMA_ALLREDUCE)],
        )
    db.commit()
    db.close()
    return path


@pytest.fixture
def two_ranks(tmp_path):
    """Rank 1's file first, to show the rank comes from the NCCL payload and not the order."""
    return [
        make_export(tmp_path / "node-b.sqlite", pid=4242, payload_rank=1),
        make_export(tmp_path / "node-a.sqlite", pid=1717, payload_rank=0),
    ]


def test_detect_format(two_ranks):
    assert detect_format(two_ranks[0]) == "nsys"


def test_events_times_and_categories(two_ranks):
    trace = load_trace(two_ranks)
    assert trace.format == "nsys" and trace.world_size == 2
    ev = trace.events
    rank0 = ev[ev["rank"] == 0]
    # 5 runtime calls, 3 kernels, 1 memcpy, 1 memset, 4 NVTX ranges (the domain create is no range)
    assert len(rank0) == 14 and len(ev) == 28
    gemm = rank0[rank0["name"] == "ampere_sgemm_128x64_nn"].sort_values("start")
    assert gemm["start"].tolist() == pytest.approx([1300e-6, 5100e-6])
    assert gemm["duration"].tolist() == pytest.approx([500e-6, 500e-6])
    assert set(gemm["category"]) == {"compute"} and set(gemm["stream"]) == {"cuda:0:7"}
    memcpy = rank0[rank0["category"] == "memcpy"].iloc[0]
    assert memcpy["name"] == "[CUDA memcpy Host-to-Device]" and memcpy["bytes"] == ALLREDUCE_BYTES
    assert memcpy["duration"] == pytest.approx(50e-6)
    memset = rank0[rank0["category"] == "memset"].iloc[0]
    assert memset["name"] == "[CUDA memset]" and memset["bytes"] == 1024
    calls = rank0[rank0["category"] == "runtime"]
    assert len(calls) == 5 and set(calls["stream"]) == {"cpu:1717:1722"}
    assert "cudaLaunchKernel_v7000" in set(calls["name"])


def test_nccl_kernel_and_nvtx_payload(two_ranks):
    ev = load_trace(two_ranks).events
    nccl = ev[(ev["rank"] == 1) & (ev["category"] == "communication")]
    assert len(nccl) == 1
    kernel = nccl.iloc[0]
    assert kernel["name"] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert kernel["collective"] == "allreduce" and kernel["stream"] == "cuda:0:13"
    assert kernel["duration"] == pytest.approx(500e-6)
    # launched at 2500 µs inside the ncclAllReduce range [2400, 2600] whose payload says 4 MiB
    assert kernel["bytes"] == ALLREDUCE_BYTES
    ranges = ev[(ev["rank"] == 1) & (ev["domain"] == "NCCL")].set_index("name")
    assert ranges.loc["ncclAllReduce", "collective"] == "allreduce"
    assert ranges.loc["ncclAllReduce", "bytes"] == ALLREDUCE_BYTES
    assert ranges.loc["ncclAllReduce", "category"] == "annotation"
    assert ranges.loc["ncclCommInitRank", "collective"] == ""


def test_steps_follow_the_launch(two_ranks):
    ev = load_trace(two_ranks).events
    rank0 = ev[ev["rank"] == 0]
    steps = rank0[rank0["category"] == "step"].set_index("name")["step"]
    assert steps.to_dict() == {"ProfilerStep#1": 1, "ProfilerStep#2": 2}
    gemm = rank0[rank0["name"] == "ampere_sgemm_128x64_nn"].sort_values("start")
    # The second GEMM runs at 5100 µs, after ProfilerStep#2 ended (5000), but was launched at 4900.
    assert gemm["step"].tolist() == [1, 2]
    nccl = rank0[rank0["category"] == "communication"].iloc[0]
    assert nccl["step"] == 1  # runs until 3200 µs, launched in step 1 at 2500
    init = rank0[rank0["name"] == "ncclCommInitRank"].iloc[0]
    assert init["step"] is None or str(init["step"]) == "<NA>"


def test_demangled_names(two_ranks):
    ev = load_trace(two_ranks, kernel_names="demangled").events
    assert "void ampere_sgemm_128x64_nn<float>(cublasGemmParams)" in set(ev["name"])


def test_rank_from_mpi_table(tmp_path):
    path = make_export(tmp_path / "a.sqlite", pid=10, mpi_rank=5, payloads=False)
    trace = nsys.read([path])
    assert set(trace.events["rank"]) == {5}


def test_rank_from_file_name_warns(tmp_path):
    paths = [make_export(tmp_path / f"report.rank{r}.sqlite", pid=100 + r, payloads=False) for r in (3, 2)]
    with pytest.warns(UserWarning, match="file name"):
        trace = nsys.read(paths)
    assert sorted(set(trace.events["rank"])) == [2, 3]
    assert trace.events[trace.events["rank"] == 3]["pid"].iloc[0] == 103


def test_rank_from_order_warns_and_option_overrides(tmp_path):
    paths = [
        make_export(tmp_path / f"{name}.sqlite", pid=pid, payloads=False)
        for name, pid in (("x", 1), ("y", 2))
    ]
    with pytest.warns(UserWarning, match="file order"):
        trace = nsys.read(paths)
    assert trace.events.groupby("rank")["pid"].first().to_dict() == {0: 1, 1: 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = nsys.read(paths, ranks=[7, 6])
    assert trace.events.groupby("rank")["pid"].first().to_dict() == {6: 2, 7: 1}
    with pytest.raises(DlexploreError, match="one per file"):
        nsys.read(paths, ranks=[0])


def test_same_rank_twice_is_an_error(tmp_path):
    paths = [
        make_export(tmp_path / f"{n}.sqlite", pid=pid, payload_rank=0) for n, pid in (("a", 1), ("b", 2))
    ]
    with pytest.raises(InputFileError, match="rank 0 is also the rank"):
        nsys.read(paths)


def test_missing_table_names_file_and_table(tmp_path):
    path = make_export(tmp_path / "r.sqlite", pid=1, payload_rank=0)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE StringIds")
    db.commit()
    db.close()
    with pytest.raises(InputFileError, match=r"r\.sqlite: table StringIds is missing"):
        nsys.read([path])


def test_missing_column_names_table_and_column(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
        "deviceId INTEGER NOT NULL, shortName INTEGER NOT NULL)"
    )
    db.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    db.commit()
    db.close()
    with pytest.raises(
        InputFileError,
        match=r"old\.sqlite: table CUPTI_ACTIVITY_KIND_KERNEL lacks the "
        r"column\(s\) \['streamId'\]",
    ):
        nsys.read([path])


def test_name_id_not_in_strings(tmp_path):
    path = make_export(tmp_path / "r.sqlite", pid=1, payload_rank=0)
    db = sqlite3.connect(path)
    db.execute("DELETE FROM StringIds WHERE id = 6")
    db.commit()
    db.close()
    with pytest.raises(
        InputFileError, match=r"table CUPTI_ACTIVITY_KIND_KERNEL, row 2: shortName 6 is not an id"
    ):
        nsys.read([path])


def test_no_trace_tables(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(InputFileError, match="holds none of the tables"):
        nsys.read([path])


def test_not_sqlite_and_truncated(tmp_path):
    text = tmp_path / "trace.sqlite"
    text.write_text("not a database\n")
    with pytest.raises(InputFileError, match="is not an SQLite database"):
        nsys.read([text])
    good = make_export(tmp_path / "good.sqlite", pid=1, payload_rank=0)
    cut = tmp_path / "cut.sqlite"
    shutil.copy(good, cut)
    with open(cut, "r+b") as handle:
        handle.truncate(good.stat().st_size // 3)
    with pytest.raises(InputFileError, match=r"cut\.sqlite"):
        nsys.read([cut])


def test_backwards_range_is_an_error(tmp_path):
    path = make_export(tmp_path / "r.sqlite", pid=1, payload_rank=0)
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET end = start - 1")
    db.commit()
    db.close()
    with pytest.raises(
        InputFileError, match=r"table CUPTI_ACTIVITY_KIND_MEMSET, row 1: end .* is before start"
    ):
        nsys.read([path])


def test_file_left_unchanged(two_ranks):
    before = [p.read_bytes() for p in two_ranks]
    load_trace(two_ranks)
    assert [p.read_bytes() for p in two_ranks] == before
    assert not any(p.with_name(p.name + "-journal").exists() for p in two_ranks)


def test_meta_and_source(two_ranks):
    trace = load_trace(two_ranks)
    meta = trace.meta["files"][str(two_ranks[0])]
    assert meta["export"]["EXPORT_SCHEMA_VERSION"] == "3.28.1"
    assert meta["session_start_utc_ns"] == 1780000000000000000
    assert trace.events.attrs["source"].startswith("measured: nsys trace node-b.sqlite")
    assert np.all(trace.events["duration"] >= 0)


def test_wrong_type_names_row_and_column(tmp_path):
    path = make_export(tmp_path / "r.sqlite", pid=1, payload_rank=0)
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE correlationId = 12")
    db.commit()
    db.close()
    with pytest.raises(
        InputFileError,
        match=r"table CUPTI_ACTIVITY_KIND_KERNEL, row 2: start is 'soon'; expected "
        r"an integer",
    ):
        nsys.read([path])


def test_folder_of_exports(two_ranks):
    trace = load_trace(two_ranks[0].parent)
    assert trace.world_size == 2 and len(trace) == 28


def test_kernel_names_stored_as_text(tmp_path):
    """The oldest exports kept kernel names as text in the name column itself."""
    path = make_export(tmp_path / "r.sqlite", pid=1, payload_rank=0)
    db = sqlite3.connect(path)
    db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 'legacy_gemm' WHERE correlationId = 11")
    db.commit()
    db.close()
    ev = nsys.read([path]).events
    kernels = ev[ev["category"] == "compute"].sort_values("start")
    assert kernels["name"].astype(str).tolist() == ["legacy_gemm", "ampere_sgemm_128x64_nn"]
