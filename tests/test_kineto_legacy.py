"""The PyTorch reader on traces that are not today's Kineto output: the legacy profiler's export
(tests/data/traces/kineto-legacy/README.txt) and runs that used a GPU without profiling it
(tests/data/traces/kineto-gpus-without-activity/README.txt). Every number below is derived by
hand from the files' own ts and dur (µs), as the README there says.
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest
from _real_traces import real

from dlexplore.errors import DlexploreError
from dlexplore.traces import load_trace

DATA = Path(__file__).parent / "data" / "traces"
LEGACY = DATA / "kineto-legacy"


def test_an_invalid_legacy_array_names_both_shapes_of_a_trace():
    """The legacy export of pytorch/pytorch#33961 lost a quote before "tid": the error names the
    event and byte, and says that a bare array of events is a trace too (the file is one)."""
    with pytest.raises(
        DlexploreError,
        match=r"legacy-autograd-cuda-33961\.json \(event 2, byte 306 of the file\): invalid or truncated "
        r"JSON .*expected a complete Chrome trace \(a JSON object with a traceEvents array, or a "
        r"bare JSON array of events\)",
    ):
        load_trace(LEGACY / "legacy-autograd-cuda-33961.json", cache=False)


def test_the_legacy_cpu_export_reads_its_ops_as_host_compute():
    """torch 2.0's tensorboard_trace_handler wrote the legacy format (pytorch/kineto#728,
    pytorch/pytorch#95460): 13 ops on "CPU functions", no "cat". They are host operators of a
    CPU-only trace: 30+6+3+3+2+2+2+5+6+6+4+10+16 = 95 µs busy (none overlap) from the first op's
    start, 1221 µs, to the last op's end, 1897 + 30 = 1927 µs; with a warning saying what it is."""
    with pytest.warns(
        UserWarning,
        match=r"legacy-cpu-functions-95460-DERIVED\.json: the legacy profiler's export \(torch\.autograd"
        r"\.profiler's export_chrome_trace: a JSON array of events on \"CPU functions\", without "
        r"categories\), read with Kineto's: its 13 CPU functions as host operators, with no CUDA "
        r"functions, as a CPU-only trace",
    ):
        trace = load_trace(LEGACY / "legacy-cpu-functions-95460-DERIVED.json", cache=False)
    assert trace.meta["device"] == "cpu" and trace.meta["ranks"][0]["legacy_export"] is True
    events = trace.events
    assert len(events) == 13 and set(events["category"]) == {"compute"}
    assert set(events["stream"]) == {"cpu:CPU functions:1"}
    steps = trace.breakdown()
    assert float(steps.step_time.squeeze()) == pytest.approx((1927 - 1221) * 1e-6)
    assert float(steps.time_compute.squeeze()) == pytest.approx(95e-6)
    assert float(steps.time_idle.squeeze()) == pytest.approx((706 - 95) * 1e-6)


def test_the_legacy_cuda_export_reads_cuda_functions_as_gpu_kernels():
    """The torch <= 1.7 export of pytorch/pytorch#33961 (its missing quote restored): "add" takes
    134.49 µs on "CPU functions" from 101.524 µs, and 134.17599487304688 µs on "CUDA functions"
    (device 0) from 102.95699890136719 µs. The GPU's time is the compute of a GPU trace; the host
    op is host work ('cpu'); the span runs from 101.524 µs to 102.957 + 134.176 = 237.133 µs."""
    with pytest.warns(
        UserWarning,
        match=r"events on \"CPU functions\" and \"CUDA functions\", without categories\), read with "
        r"Kineto's: its 1 CPU functions as host operators, its 1 CUDA functions as GPU kernels",
    ):
        trace = load_trace(LEGACY / "legacy-autograd-cuda-33961-fixed-DERIVED.json", cache=False)
    assert trace.meta["device"] == "cuda"
    events = trace.events.set_index("category")
    assert events.loc["compute", "stream"] == "cuda:CUDA functions:0"
    assert events.loc["compute", "duration"] == pytest.approx(134.17599487304688e-6)
    assert events.loc["cpu", "stream"] == "cpu:CPU functions:1"
    assert events.loc["cpu", "duration"] == pytest.approx(134.49e-6)
    steps = trace.breakdown()
    end = 102.95699890136719 + 134.17599487304688
    assert float(steps.step_time.squeeze()) == pytest.approx((end - 101.524) * 1e-6)
    assert float(steps.time_compute.squeeze()) == pytest.approx(134.17599487304688e-6)
    assert float(steps.time_idle.squeeze()) == pytest.approx((end - 101.524 - 134.17599487304688) * 1e-6)


def test_a_trace_without_any_category_that_is_not_the_legacy_export_says_so(tmp_path):
    """The same 13 events with a numeric pid (as a Chrome trace of some other tool has) are not the
    legacy layout: nothing says what they are, all read as 'other', and the reader says so rather
    than report 706 µs of idle time silently."""
    text = (LEGACY / "legacy-cpu-functions-95460-DERIVED.json").read_text()
    other = tmp_path / "no-categories.json"
    other.write_text(text.replace('"pid": "CPU functions"', '"pid": 7'))
    with pytest.warns(
        UserWarning,
        match=r"no-categories\.json: none of its 13 events has a category \(\"cat\"\), and it is not the "
        r"legacy profiler's export .* every event is 'other', which the breakdown counts as idle",
    ):
        trace = load_trace(other, cache=False)
    assert set(trace.events["category"]) == {"other"}


GPUS_WITHOUT_ACTIVITY = DATA / "kineto-gpus-without-activity"


def test_a_cuda_run_profiled_with_cpu_activity_only_says_so():
    """CongSheng's Windows trace (torch ~1.12): no deviceProperties, but all 22 [memory] events have
    "Device Type": 1 (CUDA), "Device Id": 0, and aten::cudnn_convolution runs only on a GPU. Its
    51 cpu_op events read as compute of a CPU-only trace, which is the host's time in operators:
    the reader says the run used a GPU that the trace does not show."""
    path = GPUS_WITHOUT_ACTIVITY / "congsheng-win-cuda-cpuonly-mem.json"
    with pytest.warns(
        UserWarning,
        match=r"congsheng-win-cuda-cpuonly-mem\.json: the run used a GPU \(22 of its allocator's "
        r"\[memory\] events are on cuda:0; it calls aten::cudnn_convolution, which runs only on a "
        r"GPU\); the trace holds no GPU activity \(profile with activities=\[ProfilerActivity\.CPU, "
        r"ProfilerActivity\.CUDA\] .*read as a CPU-only trace, host work counted as compute \(the "
        r"time the host spent in operators, not the GPU's compute\)",
    ):
        trace = load_trace(path, cache=False)
    assert trace.meta["device"] == "cpu"
    assert (trace.events["category"] == "compute").sum() == 51
    assert len(trace.memory) == 22 and set(trace.memory["device"]) == {"cuda:0"}


def test_a_legacy_export_whose_kernels_were_left_out_says_so(tmp_path):
    """Since torch 1.8 the legacy export writes an op's flow to its kernels ("ph": "s") but not the
    kernels. Derived from the #33961 export (its quote restored) by dropping the "f" flow end and
    the "CUDA functions" event, which is what such a file holds: the op launched GPU work that the
    file leaves out, so its 134.49 µs on the host are not the GPU's compute."""
    events = json.loads((LEGACY / "legacy-autograd-cuda-33961-fixed-DERIVED.json").read_text())
    kept = [e for e in events if e["pid"] == "CPU functions"]
    assert [e["ph"] for e in kept] == ["X", "s"]
    path = tmp_path / "legacy-flows-only.json"
    path.write_text(json.dumps(kept))
    with pytest.warns(
        UserWarning,
        match=r"legacy-flows-only\.json: the run used a GPU \(its operators launched kernels \(it has "
        r"flows, \"ph\": \"s\", to them\)\); the legacy profiler's export of this torch leaves the "
        r"kernels out",
    ):
        trace = load_trace(path, cache=False)
    assert trace.meta["device"] == "cpu"
    assert float(trace.breakdown().time_compute.squeeze()) == pytest.approx(134.49e-6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_trace(path, cache=False)
    legacy = [str(w.message) for w in caught if "legacy profiler's export (" in str(w.message)]
    assert legacy and "kernels its flows point to are not in the file" in legacy[0]
    assert "as a CPU-only trace" not in legacy[0]  # the flows say the run used a GPU


def test_a_cpu_run_that_only_asked_for_its_gpus_is_not_a_gpu_run(tmp_path):
    """torch.cuda.is_available() and Kineto itself call cudaGetDeviceCount on a machine whose GPU
    does no work: a runtime call is evidence of GPU use only when it launches, copies or
    allocates. Derived from HTA's real CPU-only trace (shared/traces-real) plus such a call."""
    source = real("pytorch/HolisticTraceAnalysis__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(source.read_bytes()))
    first = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    query = {**first, "cat": "cuda_runtime", "name": "cudaGetDeviceCount", "dur": 1, "args": {}}
    doc["traceEvents"].append(query)
    path = tmp_path / "cpu-with-device-query.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_trace(path, cache=False)
    assert not [w for w in caught if "the run used a GPU" in str(w.message)]
    launch = {**query, "name": "cudaLaunchKernel"}
    doc["traceEvents"].append(launch)
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match=r"the run used a GPU \(it holds 1 device runtime calls that launch"):
        load_trace(path, cache=False)
