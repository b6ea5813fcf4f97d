"""Real training steps of catalog workloads on one GPU, to check the compute model against them.

For each workload (torchvision ResNet-50; GPT-2 small and BERT-Large built from their published
configurations by transformers, random weights, no download), it times training steps (forward,
backward, optimizer) on random data already on the GPU, so that neither input nor communication
is in the time: ``dlexplore predict --gpus 1 --storage none`` predicts the same step. It also
writes two profiled steps of the smaller configurations as Kineto traces (the PyTorch profiler,
CPU and CUDA activity, memory events), and sweeps cuBLAS GEMMs (``torch.matmul``) over sizes and
precisions, the curve ``data/catalog/gemm.csv`` describes.

    python benchmarks/gpu_steps.py --out DIR [--quick]

writes ``DIR/steps.json`` (per run: workload, batch, sequence length, precision, the median step
time over the timed steps and its spread, samples/s, the GPU's name, torch and CUDA versions),
``DIR/gemm.json`` (per shape and precision: the median time of one product and its TFLOP/s) and
``DIR/<workload>-b<batch>.pt.trace.json.gz``. Step times are CUDA events around each step, after
warm-up steps (cuDNN's autotuning included); ``--quick`` runs tiny configurations (a check of the
script itself, on CPU too). Results of a run are in ``benchmarks/results/``;
``benchmarks/gpu_steps_compare.py`` sets them beside dlexplore's predictions.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_steps(step, device: torch.device, warmup: int, steps: int) -> list[float]:
    """Seconds of each of ``steps`` calls of ``step`` after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    _sync(device)
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
    return times


def _resnet50(batch: int, device: torch.device, dtype: torch.dtype | None):
    import torchvision

    model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()

    return step


#: ``--set compiled``: the models go through torch.compile (Inductor fuses their element-wise kernels).
COMPILE = [False]


def _compiled(model):
    return torch.compile(model) if COMPILE[0] else model


def _gpt2(batch: int, seq: int, device: torch.device, dtype: torch.dtype | None, vocab: int | None = None):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_positions=max(seq, 1024), vocab_size=vocab or 50257)
    model = _compiled(GPT2LMHeadModel(config).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()

    return step


def _bert_large(
    batch: int, seq: int, device: torch.device, dtype: torch.dtype | None, vocab: int | None = None
):
    from transformers import BertConfig, BertForPreTraining

    config = BertConfig(
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        vocab_size=vocab or 30522,
    )
    model = _compiled(BertForPreTraining(config).to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    next_sentence = torch.randint(0, 2, (batch,), device=device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(input_ids=tokens, labels=tokens, next_sentence_label=next_sentence).loss
        loss.backward()
        optimizer.step()

    return step


def _profile(step, device: torch.device, path: Path) -> None:
    """Two profiled steps (after one to wait and one to warm up) as a gzip Kineto trace."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities, schedule=schedule(wait=1, warmup=1, active=2), profile_memory=True
    ) as prof:
        for _ in range(4):
            step()
            _sync(device)
            prof.step()
    plain = path.with_suffix("")
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()


def _kernel_stats(step, device: torch.device, steps: int = 3) -> dict:
    """Kernels a step launches and their summed device time (s), from ``steps`` profiled steps
    (CUDA activity only, after one warm-up): what the GPU works of a step, against its time."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return {}
    step()
    _sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        _sync(device)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return dict(
        kernels_per_step=len(kernels) / steps,
        kernel_time_per_step=sum(e["dur"] for e in kernels) / steps / 1e6,
    )


def _gemm_sweep(device: torch.device, quick: bool) -> list[dict]:
    sizes = [256, 1024] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]
    shapes = [(s, s, s) for s in sizes]
    if not quick:  # transformer-layer products: tokens x hidden by hidden x 4 hidden, and back
        shapes += [
            (8192, 3072, 768),
            (8192, 768, 3072),
            (8192, 4096, 1024),
            (8192, 1024, 4096),
            (16384, 16384, 4096),
        ]
    rows = []
    for precision in ("bf16", "fp16", "tf32", "fp32"):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        for m, n, k in shapes:
            if precision == "fp32" and m * n * k > 8192**3:
                continue  # seconds each: the curve is flat long before
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            times = timed_steps(
                lambda a=a, b=b: torch.matmul(a, b), device, warmup=3, steps=10 if quick else 20
            )
            seconds = statistics.median(times)
            rows.append(
                dict(
                    precision=precision, m=m, n=n, k=k, seconds=seconds, tflops=2 * m * n * k / seconds / 1e12
                )
            )
            del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="tiny configurations: check the script")
    parser.add_argument("--skip-gemm", action="store_true")
    parser.add_argument(
        "--set",
        choices=("steps", "vocab", "host", "compiled"),
        default="steps",
        help="steps: the catalog workloads' steps (default); vocab: GPT-2 and BERT-Large with the "
        "vocabulary as published and padded to a multiple of 8 or 64; host: small batches, each "
        "run with its kernels per step and their device time; compiled: GPT-2 and BERT-Large "
        "(vocabularies padded) through torch.compile, with their kernels",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    facts = dict(
        gpu=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        date=time.strftime("%Y-%m-%d"),
    )
    bf16 = torch.bfloat16
    # (workload, batch, sequence, autocast dtype (None: fp32 with TF32), profile it, vocabulary)
    if args.quick:
        runs = [("resnet50", 2, None, bf16, True, None), ("gpt2", 1, 64, bf16, True, None)]
        warmup, steps = 1, 2
    elif args.set == "vocab":  # the output layer's products with the vocabulary as published and padded
        runs = [
            ("gpt2", 8, 1024, bf16, False, 50257),
            ("gpt2", 8, 1024, bf16, True, 50304),
            ("bert-large", 16, 512, bf16, True, 30522),
            ("bert-large", 16, 512, bf16, False, 30528),
        ]
        warmup, steps = 10, 20
    elif args.set == "compiled":  # Inductor's fused kernels: nearer the model's Megatron-style ones
        COMPILE[0] = True
        runs = [("gpt2", 8, 1024, bf16, False, 50304), ("bert-large", 16, 512, bf16, False, 30528)]
        warmup, steps = 5, 20
    elif args.set == "host":  # small batches: where the host's launching, not the GPU, sets the step
        runs = [("resnet50", b, None, bf16, False, None) for b in (1, 4, 16, 64)]
        runs += [("gpt2", 1, s, bf16, False, None) for s in (128, 512)]
        warmup, steps = 10, 30
    else:
        runs = [
            ("resnet50", 64, None, bf16, True, None),
            ("resnet50", 256, None, bf16, False, None),
            ("resnet50", 128, None, None, False, None),
            ("gpt2", 8, 1024, bf16, True, None),
            ("gpt2", 16, 1024, bf16, False, None),
            ("bert-large", 16, 512, bf16, False, None),
            ("bert-large", 32, 512, bf16, False, None),
        ]
        warmup, steps = 10, 30
    torch.backends.cuda.matmul.allow_tf32 = True  # "fp32" runs: TF32 tensor cores, as tf32 in dlexplore
    torch.backends.cudnn.allow_tf32 = True
    results = []
    for workload, batch, seq, dtype, profiled, vocab in runs:
        started = time.perf_counter()
        try:
            if workload == "resnet50":
                step = _resnet50(batch, device, dtype)
            elif workload == "gpt2":
                step = _gpt2(batch, seq, device, dtype, vocab)
            else:
                step = _bert_large(batch, seq, device, dtype, vocab)
            times = timed_steps(step, device, warmup, steps)
            if profiled:
                name = f"{workload}-b{batch}" + (f"-v{vocab}" if vocab else "")
                _profile(step, device, args.out / f"{name}.pt.trace.json.gz")
            median = statistics.median(times)
            stats = _kernel_stats(step, device) if args.set in ("host", "compiled") else {}
            results.append(
                dict(
                    workload=workload,
                    batch=batch,
                    seq=seq,
                    vocab=vocab,
                    compiled=COMPILE[0],
                    precision="bf16" if dtype is bf16 else "tf32",
                    step_time=median,
                    step_time_min=min(times),
                    step_time_max=max(times),
                    steps=len(times),
                    samples_per_s=batch / median,
                    peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30
                    if device.type == "cuda"
                    else None,
                    seconds=time.perf_counter() - started,
                    **stats,
                )
            )
        except Exception as err:  # noqa: BLE001 - a run that fails is recorded, the others go on
            results.append(
                dict(workload=workload, batch=batch, seq=seq, error=f"{type(err).__name__}: {err}")
            )
        print(json.dumps(results[-1]), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        (args.out / "steps.json").write_text(json.dumps(dict(facts, runs=results), indent=1))
    if not args.skip_gemm:
        rows = _gemm_sweep(device, args.quick)
        (args.out / "gemm.json").write_text(json.dumps(dict(facts, rows=rows), indent=1))
        for row in rows:
            print(json.dumps(row), flush=True)
    os.sync()


if __name__ == "__main__":
    main()
