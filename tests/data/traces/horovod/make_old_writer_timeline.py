"""Write ``timeline-old-writer.json``: a Horovod timeline as the writer before v0.20.1 left it.

The writer is ``horovod/common/timeline.cc`` before pull request #2215 (released in v0.20.1): the
file opens with ``[\\n``, every record is written as ``{...},`` followed by ``std::endl``, and the
``]`` never comes. ``_event`` and ``_marker`` below are line-by-line ports of that version's
``TimelineWriter::DoWriteEvent`` and ``DoWriteMarker``; the timestamps are steady-clock
microseconds, as that version wrote them (pull request #1476 shows such values, 678417958358).
The job: TensorFlow names, NCCL on GPUs, 2 ranks, one broadcast and two training steps whose two
gradients are fused; every number is chosen so that the tests can check it by hand.

    python make_old_writer_timeline.py   # rewrites timeline-old-writer.json beside this file
"""

from __future__ import annotations

from pathlib import Path

T0_US = 678417958000  # steady-clock µs at the run's first event
BCAST = "HorovodBroadcast_global_step_0"
KERNEL = "HorovodAllreduce_gradients_dense_MatMul_grad_MatMul_1_0"
BIAS = "HorovodAllreduce_gradients_dense_BiasAdd_grad_BiasAddGrad_0"

# (offset from T0 in µs, kind, tensor, phase, name, args); kind "m" is a CYCLE_START marker.
RECORDS: list[tuple] = [
    (0, "m"),
    (100, "e", BCAST, "B", "NEGOTIATE_BROADCAST", ""),
    (100, "e", BCAST, "X", "0", ""),
    (350, "e", BCAST, "X", "1", ""),
    (350, "e", BCAST, "E", "", ""),
    (5000, "m"),
    (5010, "e", BCAST, "B", "BROADCAST", ""),
    (5012, "e", BCAST, "B", "MPI_BCAST", ""),
    (5212, "e", BCAST, "E", "", ""),
    (5215, "e", BCAST, "E", "", '"dtype": "int64", "shape": "[]"'),
    (10000, "m"),
    # step 0: both ranks' requests reach the coordinator (response-cache misses: ticks)
    (10100, "e", KERNEL, "B", "NEGOTIATE_ALLREDUCE", ""),
    (10100, "e", KERNEL, "X", "1", ""),
    (10120, "e", BIAS, "B", "NEGOTIATE_ALLREDUCE", ""),
    (10120, "e", BIAS, "X", "1", ""),
    (10900, "e", KERNEL, "X", "0", ""),
    (10900, "e", KERNEL, "E", "", ""),
    (10900, "e", BIAS, "X", "0", ""),
    (10900, "e", BIAS, "E", "", ""),
    (15000, "m"),
    (15010, "e", KERNEL, "B", "ALLREDUCE", ""),
    (15011, "e", BIAS, "B", "ALLREDUCE", ""),
    (15020, "e", KERNEL, "B", "WAIT_FOR_DATA", ""),
    (15021, "e", BIAS, "B", "WAIT_FOR_DATA", ""),
    (15120, "e", KERNEL, "E", "", ""),
    (15121, "e", BIAS, "E", "", ""),
    (15130, "e", KERNEL, "B", "MEMCPY_IN_FUSION_BUFFER", ""),
    (15131, "e", BIAS, "B", "MEMCPY_IN_FUSION_BUFFER", ""),
    (15170, "e", KERNEL, "E", "", ""),
    (15171, "e", BIAS, "E", "", ""),
    (15180, "e", KERNEL, "B", "NCCL_ALLREDUCE", ""),
    (15181, "e", BIAS, "B", "NCCL_ALLREDUCE", ""),
    (15680, "e", KERNEL, "E", "", ""),
    (15681, "e", BIAS, "E", "", ""),
    (15690, "e", KERNEL, "B", "MEMCPY_OUT_FUSION_BUFFER", ""),
    (15691, "e", BIAS, "B", "MEMCPY_OUT_FUSION_BUFFER", ""),
    (15730, "e", KERNEL, "E", "", ""),
    (15731, "e", BIAS, "E", "", ""),
    (15740, "e", KERNEL, "E", "", '"dtype": "float32", "shape": "[784, 10]"'),
    (15741, "e", BIAS, "E", "", '"dtype": "float32", "shape": "[10]"'),
    (20000, "m"),
    # step 1: response-cache hits, so the negotiation has no per-rank ticks
    (20100, "e", KERNEL, "B", "NEGOTIATE_ALLREDUCE", ""),
    (20101, "e", BIAS, "B", "NEGOTIATE_ALLREDUCE", ""),
    (25000, "m"),
    (25005, "e", KERNEL, "E", "", ""),
    (25006, "e", BIAS, "E", "", ""),
    (25010, "e", KERNEL, "B", "ALLREDUCE", ""),
    (25011, "e", BIAS, "B", "ALLREDUCE", ""),
    (25020, "e", KERNEL, "B", "QUEUE", ""),
    (25021, "e", BIAS, "B", "QUEUE", ""),
    (25060, "e", KERNEL, "E", "", ""),
    (25061, "e", BIAS, "E", "", ""),
    (25070, "e", KERNEL, "B", "MEMCPY_IN_FUSION_BUFFER", ""),
    (25071, "e", BIAS, "B", "MEMCPY_IN_FUSION_BUFFER", ""),
    (25110, "e", KERNEL, "E", "", ""),
    (25111, "e", BIAS, "E", "", ""),
    (25120, "e", KERNEL, "B", "NCCL_ALLREDUCE", ""),
    (25121, "e", BIAS, "B", "NCCL_ALLREDUCE", ""),
    (25520, "e", KERNEL, "E", "", ""),
    (25521, "e", BIAS, "E", "", ""),
    (25530, "e", KERNEL, "B", "MEMCPY_OUT_FUSION_BUFFER", ""),
    (25531, "e", BIAS, "B", "MEMCPY_OUT_FUSION_BUFFER", ""),
    (25570, "e", KERNEL, "E", "", ""),
    (25571, "e", BIAS, "E", "", ""),
    (25580, "e", KERNEL, "E", "", '"dtype": "float32", "shape": "[784, 10]"'),
    (25581, "e", BIAS, "E", "", '"dtype": "float32", "shape": "[10]"'),
    (30000, "m"),
]


def _event(
    out: list[str], tensors: dict[str, int], tensor: str, phase: str, op_name: str, args: str, ts_micros: int
) -> None:
    """``TimelineWriter::DoWriteEvent`` before v0.20.1, one ``file_ <<`` per ``out.append``."""
    tensor_idx = tensors.get(tensor, 0)
    if tensor_idx == 0:
        tensor_idx = tensors[tensor] = len(tensors) + 1
        # We model tensors as processes. Register metadata for this "pid".
        out.append("{")
        out.append('"name": "process_name"')
        out.append(', "ph": "M"')
        out.append(', "pid": ' + str(tensor_idx))
        out.append(', "args": {"name": "' + tensor + '"}')
        out.append("},\n")
        out.append("{")
        out.append('"name": "process_sort_index"')
        out.append(', "ph": "M"')
        out.append(', "pid": ' + str(tensor_idx))
        out.append(', "args": {"sort_index": ' + str(tensor_idx) + "}")
        out.append("},\n")
    out.append("{")
    out.append('"ph": "' + phase + '"')
    if phase != "E":
        # Not necessary for ending event.
        out.append(', "name": "' + op_name + '"')
    out.append(', "ts": ' + str(ts_micros))
    out.append(', "pid": ' + str(tensor_idx))
    if phase == "X":
        out.append(', "dur": ' + str(0))
    if args:
        out.append(', "args": {' + args + "}")
    out.append("},\n")


def _marker(out: list[str], name: str, ts_micros: int) -> None:
    """``TimelineWriter::DoWriteMarker`` before v0.20.1."""
    out.append("{")
    out.append('"ph": "i"')
    out.append(', "name": "' + name + '"')
    out.append(', "ts": ' + str(ts_micros))
    out.append(', "s": "g"')
    out.append("},\n")


def main() -> None:
    out = ["[\n"]  # TimelineWriter::Initialize
    tensors: dict[str, int] = {}
    for record in RECORDS:
        if record[1] == "m":
            _marker(out, "CYCLE_START", T0_US + record[0])
        else:
            offset, _, tensor, phase, name, args = record
            _event(out, tensors, tensor, phase, name, args, T0_US + offset)
    Path(__file__).with_name("timeline-old-writer.json").write_text("".join(out))


if __name__ == "__main__":
    main()
