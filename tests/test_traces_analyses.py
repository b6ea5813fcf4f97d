"""The analyses HTA users rely on (issue 20), on real traces and against HTA's own figures.

HTA's figures below were produced by HolisticTraceAnalysis 0.5.0 (``pip install
holistictraceanalysis==0.5.0`` in a separate venv; it needs no torch) with
``.venv/bin/python benchmarks/compare_hta.py --hta-python /path/to/hta-venv/bin/python``, which runs
``TraceAnalysis(trace_dir=...)`` on each file alone, ``get_temporal_breakdown()`` (idle, compute,
non-compute, kernel_time = span) and ``get_gpu_kernel_breakdown(include_memory_kernels=True)``
(communication and memory: the union of that kernel type, summed over its overlap rows). All in µs.
HTA cannot read the two CPU-only traces of ../shared/traces-real (it needs GPU kernels).
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _real_traces import events_of, real

from dlexplore.traces import Trace, load_trace, make_events
from dlexplore.traces.critical_path import PATH_PARTS, critical_path, critical_path_summary
from dlexplore.traces.diff import trace_diff
from dlexplore.traces.launches import launch_stats, launch_summary, queue_length, queue_summary
from dlexplore.traces.memory import memory_summary, memory_timeline
from dlexplore.traces.temporal import temporal_breakdown

P = "pytorch/HolisticTraceAnalysis__"
#: file -> HTA 0.5.0's figures (µs) and why dlexplore may differ: "us" HTA rounds nanosecond
#: times to whole µs (start up, end down), "sync" HTA counts cuda_sync events as device work.
HTA = {
    P + "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": (
        dict(idle=8780, compute=96, non_compute=35, span=8911, comm=0, memory=35),
        "us",
    ),
    P + "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz": (
        dict(idle=12929684, compute=10637, non_compute=55690, span=12996011, comm=0, memory=55511),
        "sync",
    ),
    P + "df_index_resolver__df_index_resolver.json.gz": (
        dict(idle=643612, compute=496485, non_compute=256572, span=1396669, comm=238274, memory=18298),
        "",
    ),
    P + "nccl_parser_config__nccl_data.json.gz": (
        dict(idle=338781, compute=75169, non_compute=21636, span=435586, comm=24278, memory=1015),
        "us",
    ),
    P + "negative_queue_length_values_check__rank0.json.gz": (
        dict(idle=705853, compute=143836, non_compute=166865, span=1016554, comm=136490, memory=36011),
        "",
    ),
    P + "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (
        dict(idle=10113, compute=372150, non_compute=2371, span=384634, comm=0, memory=2371),
        "us",
    ),
    P + "trace_diff__control__control.json.gz": (
        dict(idle=62119, compute=234760, non_compute=86525, span=383404, comm=132510, memory=45338),
        "",
    ),
    P + "trace_diff__test__test.json.gz": (
        dict(idle=46910, compute=429216, non_compute=152245, span=628371, comm=190234, memory=130628),
        "",
    ),
    P + "trace_filter__sampled_rank-0.json.gz": (
        dict(idle=321378, compute=106252, non_compute=172428, span=600058, comm=195327, memory=662),
        "",
    ),
    P + "trace_filter__sampled_rank-1.json.gz": (
        dict(idle=328671, compute=135548, non_compute=136455, span=600674, comm=168027, memory=2667),
        "",
    ),
    "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz": (
        dict(idle=327463, compute=492891, non_compute=10140, span=830494, comm=0, memory=10140),
        "",
    ),
    "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz": (
        dict(idle=164699, compute=495912, non_compute=16562, span=677173, comm=0, memory=16562),
        "",
    ),
}
_VARIABLES = dict(
    idle="time_idle",
    compute="time_compute",
    non_compute="time_non_compute",
    span="time_span",
    comm="time_comm",
    memory="time_memcpy",
)


def quiet(path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_trace(path, **options)


@pytest.mark.parametrize("relative", sorted(HTA), ids=lambda r: r.split("__")[1][:30])
def test_temporal_breakdown_agrees_with_hta(relative):
    hta, why = HTA[relative]
    ds = temporal_breakdown(quiet(real(relative)), exclude_last_step=True)
    assert ds.sizes["rank"] == 1
    # within 1 % of the span (the difference of HTA's percentage columns); where dlexplore and HTA
    # count the same way (whole-µs traces without GPU syncs), the same to the microsecond
    bound = 0.01 * hta["span"] if why else 0.5
    for key, variable in _VARIABLES.items():
        ours = float(ds[variable].isel(rank=0)) * 1e6
        assert abs(ours - hta[key]) <= bound, (key, ours, hta[key])
        assert ds[variable].attrs["units"] == "s"


def test_temporal_breakdown_of_a_cpu_only_trace_says_so():
    ds = temporal_breakdown(quiet(real(P + "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")))
    assert ds.sizes["rank"] == 0 and "CPU-only" in ds.attrs["note"]


# -- trace diff on HTA's trace_diff pair --------------------------------------------------------


def test_trace_diff_on_the_hta_pair():
    control = quiet(real(P + "trace_diff__control__control.json.gz"))
    test = quiet(real(P + "trace_diff__test__test.json.gz"))
    diff = trace_diff(control, test).set_index(["kind", "name"])
    # hand count (json): cpu_op "aten::copy_" 444 in control, 5,232 in test; gpu_memcpy
    # "Memcpy DtoD (Device -> Device)" 18 and 4,645, of which 18 and 4,608 have their cudaMemcpyAsync
    # (by correlation) inside a ProfilerStep, 768 a step: the other 37 were launched after the
    # last; cpu_op "CompiledFunction" 0 and 6. Both traces hold one rank and 6 steps
    # (ProfilerStep#1009..1014): counts per rank and step are /6, of the events in a step.
    copy = diff.loc[("operator", "aten::copy_")]
    assert (copy["count_control"], copy["count_test"]) == (444 / 6, 5232 / 6)
    assert copy["count_delta"] == pytest.approx((5232 - 444) / 6) and copy["status"] == "changed"
    dtod = diff.loc[("kernel", "Memcpy DtoD (Device -> Device)")]
    assert (dtod["count_control"], dtod["count_test"]) == (18 / 6, 4608 / 6)
    # outside every step, by the same hand count: control's 24 cpu_op (aten::empty, zero_, zeros)
    # whose ts is in no ProfilerStep
    assert diff.attrs["outside_steps"]["control"] == 24
    assert "left out, outside every step: 24 event(s) of control" in diff.attrs["per"]
    compiled = diff.loc[("operator", "CompiledFunction")]
    assert compiled["status"] == "added" and compiled["count_test"] == 1.0 and compiled["time_control"] == 0
    # the time deltas come from the events' durations: aten::copy_ in the test trace, by hand
    durations = [
        e["dur"]
        for e in events_of(real(P + "trace_diff__test__test.json.gz"))
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::copy_"
    ]
    assert copy["time_test"] == pytest.approx(sum(durations) * 1e-6 / 6)
    assert set(diff["status"]) == {"added", "removed", "changed", "same"}
    assert diff.attrs["units"]["time_delta"] == "s"
    ordered = trace_diff(control, test)["time_delta"].abs().to_numpy()
    assert (np.diff(ordered) <= 0).all()


# -- kernel launches and stream queues -------------------------------------------------------------


def test_launch_statistics_and_queue_length():
    trace = quiet(real(P + "negative_queue_length_values_check__rank0.json.gz"))
    stats = launch_stats(trace)
    # hand count (json): 7,747 kernel/gpu_memcpy/gpu_memset events, 6,875 with a cuda_runtime of
    # the same correlation (872 launched before the profiler started), 2,486 shorter than their
    # launch call; the first launch is a cudaMemcpyAsync of 20 us, its copy starts 23 us later and
    # runs 10 us
    assert len(stats) == 6875 and stats.attrs["unlinked"] == 872
    assert int(stats["short"].sum()) == 2486
    first = stats.iloc[0]
    assert first["launch"] == "cudaMemcpyAsync" and first["launch_duration"] == pytest.approx(20e-6)
    assert first["launch_delay"] == pytest.approx(23e-6) and first["duration"] == pytest.approx(10e-6)
    summary = launch_summary(stats)
    assert int(summary.launches.sel(rank=0)) == 6875 and int(summary.short_kernels.sel(rank=0)) == 2486
    assert summary.launch_delay_p95.attrs["units"] == "s"
    # HTA's "negative queue length" file: counting only what was launched in the trace, a queue
    # never goes below zero, and it is empty again at the end
    queue = queue_length(stats)
    assert queue["queue_length"].min() == 0
    assert (queue.groupby("stream", observed=True)["queue_length"].last() == 0).all()
    assert int(queue_summary(queue).queue_max.max()) == queue["queue_length"].max()


def test_launches_need_correlation_ids():
    events = make_events(
        dict(rank=[0], stream=["cpu:1:1"], name=["x"], category=["compute"], start=[0.0], duration=[1.0])
    )
    with pytest.raises(Exception, match="no correlation ids"):
        launch_stats(Trace(events, "horovod"))


# -- memory ---------------------------------------------------------------------------------------


def test_memory_timeline_from_the_allocator_events():
    path = real(P + "df_index_resolver__df_index_resolver.json.gz")
    trace = quiet(path)
    timeline = memory_timeline(trace)
    summary = memory_summary(timeline)
    # hand count (json): 26,770 "[memory]" instants on Device Type 1 Id 1, largest "Total
    # Allocated" 6,629,508,096 B and "Total Reserved" 12,782,141,440 B; 1,240 on the CPU
    gpu = summary.sel(rank=1, device="cuda:1")
    assert int(gpu.events) == 26770 and int(summary.events.sel(rank=1, device="cpu")) == 1240
    assert float(gpu.peak_allocated) == 6_629_508_096 and float(gpu.peak_reserved) == 12_782_141_440
    assert int(gpu.relative) == 0 and summary.peak_allocated.attrs["units"] == "bytes"
    # a 2021 trace gives only the changes: the level counts from the first event; by hand, the
    # running sum of "Bytes" of the Device Type 1 events in time order peaks at the summary's peak
    old_path = real(
        "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
    )
    old = memory_timeline(quiet(old_path))
    gpu_events = sorted(
        (e["ts"], i, e["args"]["Bytes"])
        for i, e in enumerate(events_of(old_path))
        if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1
    )
    assert old["relative"].all()
    assert (
        memory_summary(old).peak_allocated.sel(rank=0, device="cuda:0").item()
        == np.cumsum([b for _, _, b in gpu_events]).max()
    )
    with pytest.raises(Exception, match="no memory events.*profile_memory=True"):
        memory_timeline(quiet(real(P + "trace_filter__sampled_rank-0.json.gz"), allow_missing_ranks=True))


# -- critical path ------------------------------------------------------------------------------


def test_critical_path_by_hand():
    """One step [0, 3.5] s: an op launches a kernel, syncs, then one more op.

    Host thread: aten::op [0, 1] holding cudaLaunchKernel [0.25, 0.375]; cudaDeviceSynchronize
    [1, 3.125]; aten::after [3.125, 3.5]. Stream: the kernel [0.5, 3.0]. Backwards from aten::after:
    it waits for the sync; the sync for the kernel (the device work that ended last before it
    returned); the kernel for its launch; the launch for the op's first piece. So: cpu 0.25 + 0.375
    (the op before the launch, aten::after), runtime 0.125, idle 0.125 (launch end 0.375 to kernel
    start 0.5), compute 2.5, sync 0.125 (3.0 to 3.125): 3.5 s.
    """
    rows = [
        ("cpu:1:1", "ProfilerStep#0", "step", 0.0, 3.5, np.nan),
        ("cpu:1:1", "aten::op", "cpu", 0.0, 1.0, np.nan),
        ("cpu:1:1", "cudaLaunchKernel", "runtime", 0.25, 0.375, 1),
        ("cuda:0:7", "gemm", "compute", 0.5, 3.0, 1),
        ("cpu:1:1", "cudaDeviceSynchronize", "runtime", 1.0, 3.125, 2),
        ("cpu:1:1", "aten::after", "cpu", 3.125, 3.5, np.nan),
    ]
    stream, name, category, start, end, corr = (list(c) for c in zip(*rows, strict=True))
    events = make_events(
        dict(
            rank=[0] * 6,
            stream=stream,
            name=name,
            category=category,
            start=start,
            duration=np.subtract(end, start),
            step=pd.array([0] * 6, dtype="Int64"),
            correlation=pd.array(corr, dtype="Float64").astype("Int64"),
        )
    )
    path = critical_path(Trace(events, "pytorch"))
    assert path["name"].tolist() == [
        "aten::op",
        "cudaLaunchKernel",
        "gemm",
        "cudaDeviceSynchronize",
        "aten::after",
    ]
    summary = critical_path_summary(path).time.to_series()
    assert summary.to_dict() == {
        "compute": 2.5,
        "communication": 0.0,
        "memcpy": 0.0,
        "memset": 0.0,
        "cpu": 0.625,
        "runtime": 0.125,
        "sync": 0.125,
        "data": 0.0,
        "idle": 0.125,
    }


@pytest.mark.parametrize(
    "relative",
    [
        P + "trace_diff__control__control.json.gz",
        P + "negative_queue_length_values_check__rank0.json.gz",
        "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    ],
)
def test_critical_path_of_real_steps_adds_up_to_the_step(relative):
    trace = quiet(real(relative))
    path = critical_path(trace)
    summary = critical_path_summary(path)
    window = trace.breakdown().step_time.sel(rank=path.attrs["rank"], step=path.attrs["step"]).item()
    # the parts add up to the step's window, each event gated by one that ended before it ended
    assert float(summary.time.sum()) == pytest.approx(window, rel=1e-9)
    assert float(summary.step_time) == pytest.approx(window, rel=1e-12)
    assert list(summary.part.values) == list(PATH_PARTS)
    assert (path["gate_end"].to_numpy() <= path["end"].to_numpy() + 1e-12).all()
    assert (np.diff(path["end"].to_numpy()) >= -1e-12).all()  # a chain in time order
    assert float(summary.fraction.sum()) == pytest.approx(1.0)
    # every event on it is one of the trace's
    names = set(trace.events["name"].astype(str))
    assert set(path["name"]) <= names
    json.dumps(summary.attrs, default=str)


def test_critical_path_of_a_replayed_scenario():
    """The what-if replay's events have a critical path too: at unchanged parameters the same as
    the trace's; with compute twice as fast, a shorter compute part on the path (the collector's
    real gloo sample: CPU-only ranks compute on the host)."""
    from pathlib import Path

    from dlexplore.sim.replay import Scenario, replay, replay_events

    trace = load_trace(Path(__file__).parents[1] / "data" / "traces" / "gloo-mlp-2rank")
    result = replay(trace, [Scenario(), Scenario(compute=2.0)])
    measured = critical_path_summary(critical_path(trace, rank=0, step=3))
    same = critical_path_summary(critical_path(replay_events(result, 0), rank=0, step=3))
    faster = critical_path_summary(critical_path(replay_events(result, 1), rank=0, step=3))
    np.testing.assert_allclose(same.time.values, measured.time.values, atol=1e-9)
    assert float(measured.time.sel(part="compute")) > 0
    assert float(faster.time.sel(part="compute")) < float(measured.time.sel(part="compute"))
    assert float(faster.step_time) < float(measured.step_time)


def test_trace_report_carries_the_analyses(tmp_path):
    from dlexplore.report import write_trace_report

    trace = quiet(real(P + "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    text = write_trace_report(tmp_path / "report.html", trace).read_text()
    summary = critical_path_summary(critical_path(trace))
    assert "trace_critical_path" in text and "trace_launches" in text
    assert f"Critical path of step {summary.attrs['step']} on rank 0" in text
    # the kernels tab's title: rank 0's device time, as kernel_breakdown sums it
    total = trace.kernel_breakdown().query("rank == 0")["time"].sum() * 1e3
    assert f"Device time per kernel kind on rank 0: {total:,.3f} ms over the trace" in text


def test_device_work_without_correlation_ids_is_counted_unlinked(tmp_path):
    # the 2-rank NCCL trace's rank 0 with the correlation ids taken off its kernels, copies and
    # memsets (as a trace that links them some other way writes them): nothing links, and it says so
    source = Path(__file__).parent / "data" / "traces" / "pytorch" / "nccl-mlp-2rank"
    rank0 = source / "rank0.pt.trace.json.gz"
    document = json.loads(gzip.decompress(rank0.read_bytes()))
    device = {"kernel", "gpu_memcpy", "gpu_memset"}
    stripped = 0
    for event in document["traceEvents"]:
        if event.get("cat") in device and "correlation" in event.get("args", {}):
            del event["args"]["correlation"]
            stripped += 1
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(json.dumps(document))
    trace = quiet(path, cache=False)
    with pytest.warns(
        UserWarning, match=rf"none of its {stripped} kernels, copies and memsets carries a correlation"
    ):
        stats = launch_stats(trace)
    assert len(stats) == 0 and stats.attrs["unlinked"] == stripped > 0
