"""Write nccl-mlp-2rank/: a 2-rank DDP step on GPUs with NCCL, in the PyTorch profiler's JSON.

No GPU can run here, so these two files are written by hand, event by event, in the layout that
Kineto writes (see README.txt beside this file for the sources). They model the same tiny MLP as
gloo-mlp-2rank (Linear(16, 32), ReLU, Linear(32, 256); batch 8 per rank; DDP buckets of 16 KiB,
so two allreduces per step: 8,448 floats = 33,792 bytes, then 544 floats = 2,176 bytes), on one
GPU per rank, profiled for steps 2 and 3 without record_shapes.

Run: ``python make_nccl_traces.py [OUT_DIR]`` (default: nccl-mlp-2rank/ beside this file).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

BASE_NS = 1790857026000000000  # baseTimeNanoseconds, as in the gloo traces
WORLD = 2
COMPUTE_STREAM = 7  # PyTorch's default stream on the device
NCCL_STREAM = 24  # ProcessGroupNCCL's own stream
BUCKETS = (8448, 544)  # floats per DDP bucket, in the order they are reduced
GEMM = "ampere_sgemm_32x32_sliced1x4_tn"
GEMM_NN = "ampere_sgemm_32x32_sliced1x4_nn"
CLAMP = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::"
    "ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::"
    "ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}, at::detail::Array<char*, 2>)"
)
MSE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
    "float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps"
    "<float, float, float, float>, unsigned int, float, 4>)"
)
MSE_BW = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::mse_backward_cuda_kernel"
    "(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#8}::"
    "operator()() const::{lambda(float, float, float)#1}, at::detail::Array<char*, 4> >(int, "
    "at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::"
    "operator()() const::{lambda()#8}::operator()() const::{lambda(float, float, float)#1}, "
    "at::detail::Array<char*, 4>)"
)
SUM = (
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t"
    "<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
    "{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator"
    "&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
)
THRESHOLD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}"
    ", at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl"
    "<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array"
    "<char*, 3>)"
)
FOREACH = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor"
    "<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata"
    "<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus"
    "<float>, float)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def us(ns: int) -> str:
    """Kineto's "{}.{:03}" of a time in ns, as µs."""
    return f"{ns // 1000}.{ns % 1000:03}"


class Rank:
    """The events of one rank's trace, as Kineto prints them."""

    def __init__(self, rank: int):
        self.rank = rank
        self.pid = 48211 + rank  # the training process
        self.main = self.pid  # its main thread
        self.autograd = 48260 + rank  # the CUDA autograd engine thread (backward runs there)
        self.device = rank
        self.text: list[str] = []
        self.next_id = 1  # External id / record function correlation ids
        self.next_corr = 4000  # CUPTI correlation ids
        self.slow = 1.0 + 0.07 * rank  # rank 1 runs 7 % slower

    # -- Kineto's printers --------------------------------------------------------------------

    def x(self, cat: str, name: str, pid: int, tid: int, ts: int, dur: int, args: str | None) -> None:
        body = (
            f'\n  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": "{name}",\n    "pid": {pid},\n'
            f'    "tid": {tid},\n    "ts": {us(ts)},\n    "dur": {us(dur)}\n    '
        )
        if args is None:
            body += "\n  },"
        else:
            body += f',\n    "args": {{\n      {args}\n    }}\n  }},'
        self.text.append(body)

    def flow(self, ph: str, ident: int, pid: int, tid: int, ts: int) -> None:
        end = '\n    , "bp": "e"' if ph == "f" else "\n    "
        self.text.append(
            f'\n  {{\n    "ph": "{ph}",\n    "id": {ident},\n    "pid": {pid},\n    "tid": {tid},\n'
            f'    "ts": {us(ts)},\n    "cat": "ac2g",\n    "name": "ac2g"{end}\n  }},'
        )

    def meta(self, name: str, pid: int, tid: int, ts: int, key: str, value: str) -> None:
        self.text.append(
            f'\n  {{\n    "ph": "M",\n    "name": "{name}",\n    "ts": {us(ts)},\n    "pid": {pid},\n'
            f'    "tid": {tid},\n    "args": {{\n      "{key}": {value}\n    }}\n  }},'
        )

    # -- the events -----------------------------------------------------------------------------

    def op(self, cat: str, name: str, tid: int, ts: int, dur: int, extra: str = "") -> int:
        """A host op (torch's record function) with its External id; returns the id."""
        ident = self.next_id
        self.next_id += 1
        args = f'"External id": {ident},"Record function id": 0, "Ev Idx": {ident - 1}{extra}'
        self.x(cat, name, self.pid, tid, ts, dur, args)
        return ident

    def launch(
        self,
        op_id: int,
        tid: int,
        ts: int,
        kind: str,
        name: str,
        gpu_ts: int,
        gpu_dur: int,
        stream: int = COMPUTE_STREAM,
        nbytes: int = 0,
        comm: str = "",
    ) -> int:
        """A runtime/driver call at ``ts`` on the host and the GPU activity it started."""
        corr = self.next_corr
        self.next_corr += 1
        api, cbid, cat = {
            "kernel": ("cudaLaunchKernel", 211, "cuda_runtime"),
            "nccl": ("cuLaunchKernelEx", 652, "cuda_driver"),
            "memcpy": ("cudaMemcpyAsync", 41, "cuda_runtime"),
            "memset": ("cudaMemsetAsync", 51, "cuda_runtime"),
        }[kind]
        call_dur = 7000 if kind == "memcpy" else 4200
        self.x(
            cat,
            api,
            self.pid,
            tid,
            ts,
            call_dur,
            f'"External id": {op_id},\n      "cbid": {cbid}, "correlation": {corr}',
        )
        self.flow("s", corr, self.pid, tid, ts)
        if kind in ("kernel", "nccl"):
            meta = (
                f'\n      "queued": 0, "device": {self.device}, "context": 1,\n      "stream": {stream}, '
                f'"correlation": {corr},\n      "registers per thread": {96 if kind == "nccl" else 32},\n'
                f'      "shared memory": {89296 if kind == "nccl" else 4096},\n      "blocks per SM": '
                f'{0.018519 if kind == "nccl" else 0.074074},\n      "warps per SM": '
                f"{0.314815 if kind == 'nccl' else 0.296296},\n      "
                f'"grid": [{2 if kind == "nccl" else 8}, 1, 1],'
                f'\n      "block": [{544 if kind == "nccl" else 128}, 1, 1],\n      '
                f'"est. achieved occupancy %": 0'
            )
            self.x(
                "kernel", name, self.device, stream, gpu_ts, gpu_dur, f'"External id": {op_id},{meta}{comm}'
            )
        else:
            bandwidth = nbytes / gpu_dur  # bytes/ns = GB/s, as Kineto prints it
            meta = (
                f'\n      "device": {self.device}, "context": 1,\n      "stream": {stream}, "correlation": '
                f'{corr},\n      "bytes": {nbytes}, "memory bandwidth (GB/s)": {bandwidth:.6g}'
            )
            cat = "gpu_memcpy" if kind == "memcpy" else "gpu_memset"
            self.x(cat, name, self.device, stream, gpu_ts, gpu_dur, f'"External id": {op_id},{meta}')
        self.flow("f", corr, self.device, stream, gpu_ts)
        return corr

    def allreduce(self, ts: int, nelems: int, gpu_ts: int, gpu_dur: int) -> int:
        """DDP's bucket allreduce: c10d::allreduce_ > record_param_comms > nccl:all_reduce > launch."""
        t = self.autograd
        self.op("cpu_op", "c10d::allreduce_", t, ts, 61000)
        nccl_meta = (
            f', "Collective name": "allreduce", "dtype": "Float", "In msg nelems": {nelems}, '
            f'"Out msg nelems": {nelems}, "In split size": "[]", "Out split size": "[]", '
            f'"Global rank start": 0, "Global rank stride": 1, "Group size": {WORLD}, '
            f'"Process Group Name": "0", "Process Group Description": "default_pg", '
            f'"Process Group Ranks": "[0, 1]", "Rank": {self.rank}'
        )
        rpc = self.op("cpu_op", "record_param_comms", t, ts + 3000, 55000, nccl_meta)
        note = self.op("user_annotation", "nccl:all_reduce", t, ts + 9000, 41000)
        self.x(
            "cuda_runtime",
            "cudaStreamWaitEvent",
            self.pid,
            t,
            ts + 14000,
            2100,
            f'"External id": {rpc},\n      "cbid": 147, "correlation": {self.next_corr}',
        )
        self.next_corr += 1
        # Kineto copies the record_param_comms arguments onto the kernel it launched.
        comm = (
            f', "Collective name": "allreduce", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
            f'"Group size": {WORLD}, "dtype": "Float", "In split size": "[]", "Out split size": "[]", '
            f'"Process Group Name": "0", "Process Group Description": "default_pg", '
            f'"Process Group Ranks": "[0, 1]"'
        )
        self.launch(rpc, t, ts + 20000, "nccl", NCCL, gpu_ts, gpu_dur, stream=NCCL_STREAM, comm=comm)
        self.x(
            "gpu_user_annotation",
            "nccl:all_reduce",
            self.device,
            NCCL_STREAM,
            gpu_ts - 1,
            gpu_dur + 2,
            f'"External id": {note}',
        )
        return rpc

    def step(self, number: int, t0: int) -> int:
        """One training step from ``t0`` (ns); returns when the next may start."""

        def s(ns: float) -> int:  # scale a duration by this rank's speed
            return int(ns * self.slow)

        m = self.main
        gpu = t0 + s(150_000)  # when the GPU is free for this step's work
        step_id = self.op("user_annotation", f"ProfilerStep#{number}", m, t0, s(2_400_000))
        del step_id
        self.op(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            m,
            t0 + s(12_000),
            s(95_000),
        )
        t = t0 + s(120_000)
        for nbytes in (8 * 16 * 4, 8 * 256 * 4):  # inputs, then targets, to the GPU
            self.op("cpu_op", "aten::to", m, t, s(48_000))
            self.op("cpu_op", "aten::_to_copy", m, t + 2000, s(44_000))
            copy = self.op("cpu_op", "aten::copy_", m, t + 9000, s(33_000))
            self.launch(
                copy,
                m,
                t + 13_000,
                "memcpy",
                "Memcpy HtoD (Pageable -> Device)",
                gpu,
                1_400 + nbytes // 8,
                nbytes=nbytes,
            )
            gpu += 3_000 + nbytes // 8
            t += s(55_000)
        zero = self.op("cpu_op", "aten::zero_", m, t, s(19_000))
        self.launch(zero, m, t + 6_000, "memset", "Memset (Device)", gpu, 1_216, nbytes=8 * 4)
        gpu += 2_000
        t += s(25_000)
        self.op("user_annotation", "DistributedDataParallel.forward", m, t, s(330_000))
        for kernel, width in ((GEMM, 9_100), (CLAMP, 2_300), (GEMM, 11_400)):
            self.op("cpu_op", "aten::linear" if kernel == GEMM else "aten::relu", m, t + 8_000, s(70_000))
            op = self.op(
                "cpu_op", "aten::addmm" if kernel == GEMM else "aten::clamp_min", m, t + 20_000, s(50_000)
            )
            gpu = max(gpu, t + 30_000) + 1_500
            self.launch(op, m, t + 30_000, "kernel", kernel, gpu, width)
            gpu += width
            t += s(100_000)
        op = self.op("cpu_op", "aten::mse_loss", m, t + 40_000, s(60_000))
        gpu = max(gpu, t + 60_000) + 1_500
        self.launch(op, m, t + 60_000, "kernel", MSE, gpu, 3_100)
        gpu += 3_100
        t += s(140_000)
        # Backward on the autograd thread; each bucket's allreduce starts when its gradients are ready.
        b = self.autograd
        backward = (
            ("MseLossBackward0", [MSE_BW]),
            ("AddmmBackward0", [GEMM_NN, GEMM, SUM]),
            ("torch::autograd::AccumulateGrad", []),
            ("ReluBackward0", [THRESHOLD]),
            ("AddmmBackward0", [GEMM_NN, SUM]),
            ("torch::autograd::AccumulateGrad", []),
        )
        nccl_gpu = 0
        buckets = iter(BUCKETS)
        for node, kernels in backward:
            self.op(
                "cpu_op",
                f"autograd::engine::evaluate_function: {node}",
                b,
                t,
                s(40_000 + 30_000 * len(kernels)),
            )
            for kernel in kernels:
                op = self.op(
                    "cpu_op",
                    "aten::mm"
                    if "sgemm" in kernel
                    else "aten::sum"
                    if kernel == SUM
                    else "aten::threshold_backward"
                    if kernel == THRESHOLD
                    else "aten::mse_loss_backward",
                    b,
                    t + 5_000,
                    s(25_000),
                )
                gpu = max(gpu, t + 12_000) + 1_200
                self.launch(op, b, t + 12_000, "kernel", kernel, gpu, 4_000)
                gpu += 4_000
                t += s(30_000)
            t += s(40_000)
            if node == "torch::autograd::AccumulateGrad":
                nelems = next(buckets)
                width = 9_000 + nelems * 3  # the LL protocol at small sizes: latency-bound
                start = max(gpu + 500, nccl_gpu, t + 25_000)
                self.allreduce(t, nelems, start, width)
                nccl_gpu = start + width
                t += s(70_000)
        # The optimizer waits for the last bucket (the reducer's future), then updates.
        gpu = max(gpu, nccl_gpu) + 800
        self.op("user_annotation", "Optimizer.step#SGD.step", m, t, s(140_000))
        op = self.op("cpu_op", "aten::_foreach_add_", m, t + 30_000, s(70_000))
        self.launch(op, m, t + 45_000, "kernel", FOREACH, max(gpu, t + 45_000) + 1_000, 5_200)
        return t0 + s(2_450_000)

    def document(self) -> str:
        t = 5_101_300_000  # ns after baseTimeNanoseconds
        for name, key, value in (
            ("process_name", "name", '"python"'),
            ("process_labels", "labels", '"CPU"'),
            ("process_sort_index", "sort_index", str(self.pid)),
        ):
            self.meta(name, self.pid, 0, t, key, value)
        for tid, label in ((self.main, "python"), (self.autograd, "pt_autograd_0")):
            self.meta("thread_name", self.pid, tid, t, "name", f'"thread {tid} ({label})"')
            self.meta("thread_sort_index", self.pid, tid, t, "sort_index", str(tid))
        for name, key, value in (
            ("process_name", "name", '"python"'),
            ("process_labels", "labels", f'"GPU {self.device}"'),
            ("process_sort_index", "sort_index", str(5000000 + self.device)),
        ):
            self.meta(name, self.device, 0, t, key, value)
        for stream in (COMPUTE_STREAM, NCCL_STREAM):
            self.meta("thread_name", self.device, stream, t, "name", f'"stream {stream} "')
            self.meta("thread_sort_index", self.device, stream, t, "sort_index", str(stream))
        t += 400_000
        for number in (2, 3):
            t = self.step(number, t)
        self.x("Trace", "PyTorch Profiler (0)", 0, 0, 5_101_300_000, t - 5_101_300_000, '"Op count": 0')
        self.text[-1] = self.text[-1].replace(
            '"pid": 0,\n    "tid": 0,', '"pid": "Spans",\n    "tid": "PyTorch Profiler",'
        )
        info = {
            "backend": "nccl",
            "rank": self.rank,
            "world_size": WORLD,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": WORLD,
                    "ranks": list(range(WORLD)),
                }
            ],
            "nccl_version": "2.27.5",
        }
        props = (
            f'\n    {{\n      "id": {self.device}, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": '
            '85097971712,\n      "computeMajor": 8, "computeMinor": 0,\n      "maxThreadsPerBlock": 1024, '
            '"maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, "warpSize": 32,\n      '
            '"sharedMemPerBlock": 49152, "numSms": 108\n    , "regsPerMultiprocessor": 65536, '
            '"sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936\n    }'
        )
        head = (
            f'\n  {{\n    "schemaVersion": 1,\n    "deviceProperties": [{props}\n    ],\n    \n'
            f'      "trace_id": "5E1F0C6A2B7D4E8F9A0B1C2D3E4F{self.rank:04X}",\n'
            f'      "distributedInfo": {json.dumps(info)},\n      "host_name": "gpu-node-0",\n'
            f'    "displayTimeUnit": "ms",\n    "baseTimeNanoseconds": {BASE_NS},\n    "traceEvents": [\n    '
        )
        end = (
            f'\n  {{\n    "ph": "i",\n    \n    "s": "g",\n    "name": "Record Window End",\n    "pid": "",\n'
            f'    "tid": "",\n    "ts": {us(t + 80_000)}\n    \n  }}\n  ],"traceName": '
            f'"/tmp/nccl-mlp-2rank/rank{self.rank}.pt.trace.json" }}'
        )
        return head + "".join(self.text) + end


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(WORLD):
        text = Rank(rank).document()
        json.loads(text)  # it must be valid JSON
        with (
            open(out / f"rank{rank}.pt.trace.json.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, filename="", mtime=0) as packed,
        ):
            packed.write(text.encode("utf-8"))  # mtime=0: the same bytes on every run


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "nccl-mlp-2rank")
