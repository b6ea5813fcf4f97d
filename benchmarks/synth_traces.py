"""Deterministic, realistic synthetic traces of any size: PyTorch profiler (Kineto) and Horovod.

Benchmarks need traces of 10, 100 and 400 MB that look like what the tools write, not a repeated
toy. The shapes here are copied from the real files in ``../shared/traces-real/pytorch`` (HTA's
test traces from A100/V100 NCCL runs, Kineto's own samples) and from the Horovod 0.28.1 timelines in
``tests/data/traces/horovod``:

* **Kineto**: the pretty-printed layout Kineto writes (one member per line, two-space indent), a
  top-level object with ``schemaVersion``, ``deviceProperties``, ``distributedInfo`` (backend nccl,
  rank, world size, ``pg_config``), ``record_shapes`` before ``traceEvents`` and ``traceName``,
  ``displayTimeUnit``, ``baseTimeNanoseconds`` after it. Each step is a ``ProfilerStep#N``
  annotation on the main thread holding a DataLoader annotation, a host-to-device copy, a forward
  pass of ``layers`` linear layers (``aten::linear`` > ``aten::addmm`` > ``cudaLaunchKernel`` >
  a GEMM ``kernel`` with the launch's ``correlation`` and an ``ac2g`` flow pair), a backward pass on
  the autograd thread whose gradient buckets are all-reduced (``record_param_comms`` with
  ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``, ``Process
  Group Name``/``Ranks``; ``nccl:all_reduce``; ``cudaLaunchKernelExC``; an NCCL kernel on its own
  stream, ``ncclDevKernel_Generic`` or ``ncclKernel_AllReduce_RING_LL_Sum_float`` with Kineto's copy
  of the arguments), memsets, the allocator's ``[memory]`` instants, an optimizer step, and a
  ``cudaStreamSynchronize``. Metadata (``M``) rows name the processes and threads; Kineto's
  ``Trace`` span and the ``Record Window End`` instant close the list, as in the real files.
* **Horovod**: a JSON array as Horovod 0.28.1's writer leaves it (``,{...}`` appended, a line break
  after metadata): per tensor a ``process_name``; negotiations with rank-ready ticks in the first
  step; per step the gradient tensors' ``ALLREDUCE`` ranges (fused in groups, started back to back)
  with ``QUEUE``, ``MEMCPY_IN_FUSION_BUFFER``, ``NCCL_ALLREDUCE``, ``MEMCPY_OUT_FUSION_BUFFER``
  inside and ``{"dtype", "shape"}`` on the ``E``; ``CYCLE_START`` markers every millisecond.

Everything comes from ``numpy.random.default_rng(seed)``: the same arguments give the same bytes.

    python benchmarks/synth_traces.py kineto out.json --size-mb 100 [--gzip] [--rank 0 --world-size 8]
    python benchmarks/synth_traces.py horovod timeline.json --size-mb 100
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import IO

import numpy as np

__all__ = ["write_kineto", "write_horovod", "write_kineto_set"]

_GEMM = "ampere_sgemm_128x64_tn"
_RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()"
    "() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous "
    "namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()"
    "() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
)
_SGD = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor"
    "<float, 3, 2, 2>, std::plus<float>, float>(at::native::(anonymous namespace)::"
    "TensorListMetadata<3>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 3, "
    "2, 2>, std::plus<float>, float)"
)
_NCCL = (
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
)


def _device(i: int) -> str:
    return (
        f'    {{\n      "id": {i}, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 84987740160,\n'
        '      "computeMajor": 8, "computeMinor": 0,\n      "maxThreadsPerBlock": 1024, '
        '"maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, "warpSize": 32,\n'
        '      "sharedMemPerBlock": 49152, "numSms": 108\n    , "regsPerMultiprocessor": 65536, '
        '"sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936\n    }'
    )


class _Kineto:
    """One rank's event text, step after step (times in µs, as Kineto writes them)."""

    def __init__(self, rank: int, world_size: int, seed: int, layers: int):
        self.rng = np.random.default_rng([seed, rank])
        self.rank, self.world_size, self.layers = rank, world_size, layers
        self.pid = 2_910_249 + 17 * rank
        self.main, self.autograd = self.pid, self.pid + 9503
        self.now = {self.main: 4_458_676_416_788.066, self.autograd: 0.0}
        self.stream_free = {7: 0.0, 20: 0.0}
        self.ext = 1
        self.corr = 57_532  # CUPTI correlation ids of real runs are this large (HTA 0.5 needs > 32767)
        self.ev_idx = 0
        self.step = 0
        self.out: list[str] = []

    # -- event text in Kineto's layout ---------------------------------------------------------

    def _x(self, cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: str) -> None:
        self.out.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }}'
        )

    def _flow(self, ph: str, ident: int, pid: int, tid: int, ts: float) -> None:
        end = ', "bp": "e"' if ph == "f" else ""
        self.out.append(
            f'  {{\n    "ph": "{ph}", "id": {ident}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},\n'
            f'    "cat": "ac2g", "name": "ac2g"{end}\n  }}'
        )

    def _op(self, name: str, tid: int, dur: float, extra: str = "", cat: str = "cpu_op") -> tuple[float, int]:
        """A host operation starting now on ``tid``; (its start, its External id)."""
        ts = self.now[tid]
        ext, self.ext, self.ev_idx = self.ext, self.ext + 1, self.ev_idx + 1
        self._x(
            cat,
            name,
            self.pid,
            tid,
            ts,
            dur,
            f'"External id": {ext},"Record function id": {ext}, "Ev Idx": {self.ev_idx}{extra}',
        )
        self.now[tid] = ts + self.rng.uniform(0.5, 3.0)
        return ts, ext

    def _launch(
        self,
        tid: int,
        ext: int,
        stream: int,
        kernel: str,
        kdur: float,
        kargs: str = "",
        api: str = "cudaLaunchKernel",
        cat: str = "kernel",
    ) -> None:
        """A runtime call launching device work, the work on ``stream``, and their ac2g flow."""
        ts = self.now[tid]
        dur = self.rng.uniform(3.0, 9.0)
        corr, self.corr = self.corr, self.corr + 1
        self._x(
            "cuda_runtime",
            api,
            self.pid,
            tid,
            ts,
            dur,
            f'"External id": {ext},      "cbid": 211, "correlation": {corr}',
        )
        self._flow("s", corr, self.pid, tid, ts)
        start = max(ts + dur + self.rng.uniform(2.0, 20.0), self.stream_free[stream])
        if cat == "kernel":
            grid = int(self.rng.integers(1, 4096))
            args = (
                f'"External id": {ext},      "queued": 0, "device": 0, "context": 1,      '
                f'"stream": {stream}, "correlation": {corr},      "registers per thread": 128,      '
                f'"shared memory": 32768,      "blocks per SM": {grid / 108:.6f},      '
                f'"warps per SM": {grid / 27:.6f},      "grid": [{grid}, 1, 1],      '
                f'"block": [256, 1, 1],      "est. achieved occupancy %": 25{kargs}'
            )
        else:
            args = (
                f'"External id": {ext},      "device": 0, "context": 1,      "stream": {stream}, '
                f'"correlation": {corr},      {kargs}'
            )
        self._x(cat, kernel, 0, stream, start, kdur, args)
        self._flow("f", corr, 0, stream, start)
        self.stream_free[stream] = start + kdur
        self.now[tid] = ts + dur + self.rng.uniform(0.5, 2.0)

    def _memory(self, tid: int, nbytes: int) -> None:
        ts = self.now[tid]
        self.out.append(
            f'  {{\n    "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",\n'
            f'    "pid": {self.pid}, "tid": {tid},\n    "ts": {ts:.3f},\n    "args": {{\n'
            f'      "Total Reserved": 2097152000, "Total Allocated": {1_000_000_000 + nbytes}, '
            f'"Bytes": {nbytes}, "Addr": {139_800_000_000_000 + self.ev_idx * 512}, "Device Id": 0, '
            f'"Device Type": 1\n    }}\n  }}'
        )

    # -- one training step -------------------------------------------------------------------------

    def step_events(self) -> None:
        main, grad = self.main, self.autograd
        rng = self.rng
        step_start = self.now[main]
        mark = len(self.out)
        self.out.append("")  # the ProfilerStep annotation goes here once its end is known
        step_ext, self.ext = self.ext, self.ext + 1
        self.now[main] += 5.0
        _, ext = self._op(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            main,
            rng.uniform(200, 900),
            cat="user_annotation",
        )
        _, ext = self._op(
            "aten::to",
            main,
            60.0,
            ', "Input Dims": [[64, 3, 224, 224], [], [], [], []], '
            '"Input type": ["float", "ScalarType", "", "", ""]',
        )
        nbytes = 64 * 3 * 224 * 224 * 4
        self._launch(
            main,
            ext,
            7,
            "Memcpy HtoD (Pageable -> Device)",
            nbytes / 12e3,
            api="cudaMemcpyAsync",
            cat="gpu_memcpy",
            kargs=f'"bytes": {nbytes}, "memory bandwidth (GB/s)": 12.0',
        )
        width = 1024
        for layer in range(self.layers):
            _, ext = self._op(
                "aten::linear",
                main,
                rng.uniform(20, 60),
                f', "Input Dims": [[64, {width}], [{width}, {width}], [{width}]], '
                '"Input type": ["float", "float", "float"]',
            )
            _, ext = self._op("aten::addmm", main, rng.uniform(10, 40))
            self._launch(main, ext, 7, _GEMM, rng.uniform(20, 400))
            if layer % 2 == 0:
                self._memory(main, 64 * width * 4)
            _, ext = self._op("aten::relu", main, rng.uniform(5, 20))
            self._launch(main, ext, 7, _RELU, rng.uniform(3, 30))
        # backward on the autograd thread, gradient buckets all-reduced as they fill
        self.now[grad] = max(self.now[grad], self.now[main] + 10.0)
        buckets = max(1, self.layers // 4)
        for layer in range(self.layers):
            _, ext = self._op(
                "autograd::engine::evaluate_function: AddmmBackward0",
                grad,
                rng.uniform(40, 120),
                ', "Sequence number": 1080, "Fwd thread id": 1',
            )
            for _ in range(2):
                _, ext = self._op("aten::mm", grad, rng.uniform(10, 30))
                self._launch(grad, ext, 7, _GEMM, rng.uniform(20, 400))
            if layer % 4 == 3 or layer == self.layers - 1:
                self._allreduce(grad, width * width * 4 // buckets + int(rng.integers(0, 1024)))
        if self.step % 2 == 0:
            _, ext = self._op("aten::zero_", main, 8.0)
            self._launch(
                main,
                ext,
                7,
                "Memset (Device)",
                4.0,
                api="cudaMemsetAsync",
                cat="gpu_memset",
                kargs=f'"bytes": {width * 4}, "memory bandwidth (GB/s)": 1.0',
            )
        self.now[main] = max(self.now[main], self.now[grad]) + 5.0
        _, ext = self._op("Optimizer.step#SGD.step", main, rng.uniform(100, 300), cat="user_annotation")
        _, ext = self._op("aten::_foreach_add_", main, rng.uniform(50, 100))
        self._launch(main, ext, 7, _SGD, rng.uniform(50, 200))
        _, ext = self._op("cudaStreamSynchronize", main, 1.0, cat="cuda_runtime")
        self.now[main] = max(self.now[main], self.stream_free[7], self.stream_free[20]) + 3.0
        self.out[mark] = (
            f'  {{\n    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{self.step}", '
            f'"pid": {self.pid}, "tid": {main},\n    "ts": {step_start:.3f}, '
            f'"dur": {self.now[main] - step_start:.3f},\n    "args": {{\n      "External id": {step_ext},'
            f'"Record function id": {step_ext}, "Ev Idx": {self.ev_idx}\n    }}\n  }}'
        )
        self.now[main] += rng.uniform(10, 50)
        self.step += 1

    def _allreduce(self, tid: int, nelems: int) -> None:
        ranks = json.dumps(list(range(self.world_size)))
        comm = (
            f'"Collective name": "allreduce", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
            f'"Group size": {self.world_size}, "dtype": "Float", "In split size": "[]", '
            f'"Out split size": "[]", "Global rank start": 0, "Global rank stride": 1, '
            f'"Process Group Name": "0", "Process Group Description": "default_pg", '
            f'"Process Group Ranks": "{ranks}"'
        )
        ts, _ = self._op("record_param_comms", tid, 0.0, ", " + comm)
        rpc_at = len(self.out) - 1
        _, ext = self._op("nccl:all_reduce", tid, 0.0, cat="user_annotation")
        ann_at = len(self.out) - 1
        kernel = _NCCL[int(self.rng.integers(0, 2))]
        self._launch(
            tid, ext, 20, kernel, 8.0 + nelems * 4 / 90e3, api="cudaLaunchKernelExC", kargs=", " + comm
        )
        end = self.now[tid]
        # the enclosing host ops last until the launch returns
        for at in (rpc_at, ann_at):
            self.out[at] = self.out[at].replace('"dur": 0.000,', f'"dur": {end - ts:.3f},', 1)
        self.now[tid] = end + 2.0

    def metadata(self) -> str:
        rows = [
            ("process_name", self.pid, 0, '"name": "python3.10"'),
            ("process_labels", self.pid, 0, '"labels": "CPU"'),
            ("process_name", 0, 0, '"name": "python3.10"'),
            ("process_labels", 0, 0, '"labels": "GPU 0"'),
            ("thread_name", self.pid, self.main, '"name": "thread 1 (python3.10)"'),
            ("thread_name", self.pid, self.autograd, '"name": "thread 2 (pt_autograd_0)"'),
            ("thread_name", 0, 7, '"name": "stream 7 "'),
            ("thread_name", 0, 20, '"name": "stream 20 "'),
        ]
        return ",\n".join(
            f'  {{\n    "name": "{name}", "ph": "M", "ts": 4458676416431.397, "pid": {pid}, '
            f'"tid": {tid},\n    "args": {{\n      {args}\n    }}\n  }}'
            for name, pid, tid, args in rows
        )

    def tail(self) -> str:
        start, end = 4_458_676_416_000.0, self.now[self.main] + 100.0
        return (
            f'  {{\n    "ph": "X", "cat": "Trace", "ts": {start:.3f}, "dur": {end - start:.3f},\n'
            '    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
            '    "args": {\n      "Op count": 0\n    }\n  },\n  {\n    "name": "Iteration Start: '
            'PyTorch Profiler", "ph": "i", "s": "g",\n    "pid": "Traces", "tid": "Trace PyTorch '
            f'Profiler", "ts": {start:.3f}\n  }},\n  {{\n    "name": "Record Window End", "ph": "i", '
            f'"s": "g",\n    "pid": "", "tid": "", "ts": {end:.3f}\n  }}\n'
        )


def _kineto_head(rank: int, world_size: int) -> str:
    info = {
        "backend": "nccl",
        "rank": rank,
        "world_size": world_size,
        "pg_count": 1,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": world_size,
                "ranks": list(range(world_size)),
            }
        ],
        "nccl_version": "2.21.5",
    }
    devices = ",\n".join(_device(i) for i in range(8))
    return (
        f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [\n{devices}\n  ],\n'
        f'  "distributedInfo": {json.dumps(info)},\n  "record_shapes": 1,\n  "traceEvents": [\n'
    )


def _open(path: Path, compress: bool) -> IO[bytes]:
    return gzip.open(path, "wb", compresslevel=1) if compress else open(path, "wb")


def write_kineto(
    path: str | Path,
    size_mb: float,
    *,
    rank: int = 0,
    world_size: int = 8,
    seed: int = 0,
    layers: int = 24,
    compress: bool | None = None,
) -> int:
    """Write one rank's Kineto trace of about ``size_mb`` MB of JSON; returns its bytes of JSON.

    ``compress`` defaults to whether ``path`` ends in ``.gz``. The same arguments give the same bytes.
    """
    path = Path(path)
    compress = path.suffix == ".gz" if compress is None else compress
    target = size_mb * 1e6
    gen = _Kineto(rank, world_size, seed, layers)
    written = 0
    with _open(path, compress) as out:
        for text in (_kineto_head(rank, world_size), gen.metadata()):
            data = text.encode()
            out.write(data)
            written += len(data)
        while written < target or gen.step == 0:
            gen.out = []
            gen.step_events()
            data = (",\n" + ",\n".join(gen.out)).encode()
            out.write(data)
            written += len(data)
        data = (
            ",\n" + gen.tail() + '  ],\n  "traceName": "/tmp/libkineto_activities_'
            f'{gen.pid}.json",\n  "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": 1711964646000000000\n}}\n'
        ).encode()
        out.write(data)
        written += len(data)
    return written


def write_kineto_set(
    folder: str | Path, size_mb: float, ranks: int, *, seed: int = 0, compress: bool = False
) -> list[Path]:
    """``ranks`` per-rank Kineto traces (``rank-<r>.json[.gz]``) of ``size_mb`` MB of JSON in all."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        path = folder / f"rank-{rank}.json{'.gz' if compress else ''}"
        write_kineto(path, size_mb / ranks, rank=rank, world_size=ranks, seed=seed, compress=compress)
        paths.append(path)
    return paths


def write_horovod(
    path: str | Path,
    size_mb: float,
    *,
    seed: int = 0,
    tensors: int = 64,
    fusion: int = 8,
    compress: bool | None = None,
    terminated: bool = True,
) -> int:
    """Write a Horovod 0.28.1-style timeline of about ``size_mb`` MB; returns its bytes of JSON.

    ``tensors`` gradient tensors are all-reduced every step in fused groups of ``fusion``;
    ``terminated=False`` leaves the array open as a running job's file is.
    """
    path = Path(path)
    compress = path.suffix == ".gz" if compress is None else compress
    rng = np.random.default_rng(seed)
    target = size_mb * 1e6
    sizes = [int(s) for s in rng.integers(64, 1 << 20, size=tensors)]
    now = 857_285
    next_cycle = now
    written = 0
    step = 0
    with _open(path, compress) as out:

        def emit(text: str) -> None:
            nonlocal written
            data = text.encode()
            out.write(data)
            written += len(data)

        emit(
            '[\n{"name": "process_name", "ph": "M", "pid": 0, "args": '
            '{"start_time_since_epoch_in_micros":1795297140323029}},\n'
            '{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},\n'
        )
        first = True
        while written < target or step == 0:
            parts: list[str] = []
            for group in range(0, tensors, fusion):
                members = range(group + 1, min(group + fusion, tensors) + 1)
                while next_cycle <= now:
                    parts.append(f'{{"ph": "i", "name": "CYCLE_START", "ts": {next_cycle}, "s": "g"}}')
                    next_cycle += int(rng.integers(900, 1300))
                if step == 0:
                    for pid in members:
                        parts.append(
                            f'{{"name": "process_name", "ph": "M", "pid": {pid}, "args": '
                            f'{{"name": "DistributedOptimizer.Allreduce.grad.{pid}"}}}},\n'
                            f'{{"name": "process_sort_index", "ph": "M", "pid": {pid}, "args": '
                            f'{{"sort_index": {pid}}}}},\n{{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", '
                            f'"ts": {now}, "pid": {pid}}},{{"ph": "X", "name": "0", "ts": {now + 1}, '
                            f'"pid": {pid}, "dur": 0}},{{"ph": "X", "name": "1", "ts": {now + 40}, '
                            f'"pid": {pid}, "dur": 0}},{{"ph": "E", "ts": {now + 41}, "pid": {pid}}}'
                        )
                        now += 2
                    now += 41
                for pid in members:  # the fused operation's ranges start back to back
                    parts.append(f'{{"ph": "B", "name": "ALLREDUCE", "ts": {now}, "pid": {pid}}}')
                    now += 1
                fused = sum(sizes[p - 1] for p in members) * 4
                for name, dur in (
                    ("QUEUE", 5),
                    ("MEMCPY_IN_FUSION_BUFFER", fused // 8_000 + 3),
                    ("NCCL_ALLREDUCE", fused // 2_000 + 20),
                    ("MEMCPY_OUT_FUSION_BUFFER", fused // 8_000 + 3),
                ):
                    for pid in members:
                        parts.append(f'{{"ph": "B", "name": "{name}", "ts": {now}, "pid": {pid}}}')
                    now += int(dur + rng.integers(0, 5))
                    for pid in members:
                        parts.append(f'{{"ph": "E", "ts": {now}, "pid": {pid}}}')
                    now += 1
                for pid in members:
                    parts.append(
                        f'{{"ph": "E", "ts": {now}, "pid": {pid}, "args": '
                        f'{{"dtype": "float32", "shape": "[{sizes[pid - 1]}]"}}}}'
                    )
                now += int(rng.integers(20, 200))
            emit(("" if first else ",") + ",".join(parts))
            first = False
            now += int(rng.integers(2_000, 20_000))  # the framework's compute between steps
            step += 1
        emit("]" if terminated else ",\n")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["kineto", "horovod"])
    parser.add_argument("path", type=Path)
    parser.add_argument("--size-mb", type=float, default=10.0, help="MB of JSON")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--gzip", action="store_true", help="gzip the output (also when PATH ends in .gz)")
    args = parser.parse_args(argv)
    compress = args.gzip or args.path.suffix == ".gz"
    if args.kind == "kineto":
        n = write_kineto(
            args.path,
            args.size_mb,
            rank=args.rank,
            world_size=args.world_size,
            seed=args.seed,
            compress=compress,
        )
    else:
        n = write_horovod(args.path, args.size_mb, seed=args.seed, compress=compress)
    print(f"{args.path}: {n / 1e6:.1f} MB of JSON")


if __name__ == "__main__":
    main()
