"""Single kernels on one GPU, timed without the host in the way: what the per-operator compute model
(:mod:`dlexplore.model.operators`) assumes of a GPU, measured.

    python benchmarks/gpu_kernels.py --out DIR [--quick]

writes ``DIR/kernels.json`` with five parts:

- ``gemm``: matrix products (``torch.nn.functional.linear`` and ``torch.matmul``) in bf16, fp16, tf32
  and fp32 over square sizes 256-16384 and over the three products of a language model's output
  layer (logits ``X W^T``, input gradient ``dY W``, weight gradient ``dY^T X``) with the vocabulary
  as published (GPT-2's 50,257, BERT's 30,522: not multiples of 8) and padded to a multiple of 64
  (50,304; 30,528 is a multiple of 8 only, as NVIDIA's BERT pads it). Each product is captured 20
  times in a CUDA graph and the graph replayed, so the time per product is the GPU's alone: the
  per-call timing of ``gpu_steps.py`` measured the host's launch (about 46 us on a lent H200) for
  every product under 2048^3;
- ``launch``: a one-element add launched 2,000 times from Python (the host's time per kernel,
  which bounds a step of many small kernels) and the same kernels replayed from a graph (the GPU's
  fixed time per kernel: ``kernel_time``);
- ``memory``: a device-to-device copy, an add, a layer norm and a softmax over tensors far larger
  than the L2 cache, with the bytes each must move (each input read once, each output written
  once) over its time: the fraction of the memory bandwidth streaming kernels reach
  (``memory_efficiency``);
- ``attention``: fused attention (PyTorch's ``scaled_dot_product_attention``) forward and forward
  plus backward in bf16, head widths 64 and 128, 512-8,192 tokens, with and without a causal mask:
  the fraction of peak ``flash_efficiency`` stands for;
- ``facts``: GPU, torch, CUDA and the datasheet figures it is read against.

Times are medians of CUDA-event timings of graph replays after warm-up; inputs are random (never
zeros). ``--quick`` runs tiny sizes on any device, to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from gpu_steps import timed_steps  # this folder is on the path of a script run from it

REPLAYS_PER_GRAPH = 20
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}


def _median_seconds(run, device: torch.device, repeat: int, per_call: int = 1) -> float:
    """Median seconds of one of the ``per_call`` operations each ``run()`` does (CUDA events
    around each call after 3 warm-up calls: :func:`gpu_steps.timed_steps`)."""
    return statistics.median(timed_steps(run, device, warmup=3, steps=repeat)) / per_call


def _graph_seconds(op, device: torch.device, repeat: int) -> float:
    """Seconds of one ``op()`` on the GPU: ``REPLAYS_PER_GRAPH`` of them captured in one graph."""
    if device.type != "cuda":
        return _median_seconds(op, device, repeat)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture: cuBLAS picks its kernel here
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPLAYS_PER_GRAPH):
            op()
    return _median_seconds(graph.replay, device, repeat, per_call=REPLAYS_PER_GRAPH)


def _gemm_rows(device: torch.device, quick: bool) -> list[dict]:
    squares = [256, 512] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]
    tokens, vocabs = (64, [(257, 320)]) if quick else (8192, [(50257, 50304), (30522, 30528)])
    hidden = {50257: 768, 50304: 768, 30522: 1024, 30528: 1024, 257: 64, 320: 64}
    rows = []
    for precision, dtype in DTYPES.items():
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        for s in squares:
            if precision == "fp32" and s > 8192:
                continue
            a, b = (torch.randn(s, s, device=device, dtype=dtype) for _ in range(2))
            seconds = _graph_seconds(lambda a=a, b=b: torch.matmul(a, b), device, 10)
            rows.append(dict(precision=precision, kind="square", m=s, n=s, k=s, seconds=seconds))
        if precision not in ("bf16", "tf32"):
            continue
        for vocab in (v for pair in vocabs for v in pair):
            h = hidden[vocab]
            x = torch.randn(tokens, h, device=device, dtype=dtype)
            w = torch.randn(vocab, h, device=device, dtype=dtype)
            dy = torch.randn(tokens, vocab, device=device, dtype=dtype)
            products = {  # (m, n, k) of each, as 2 m n k FLOPs
                "logits": (lambda x=x, w=w: F.linear(x, w), (tokens, vocab, h)),
                "input_grad": (lambda dy=dy, w=w: torch.matmul(dy, w), (tokens, h, vocab)),
                "weight_grad": (lambda dy=dy, x=x: torch.matmul(dy.t(), x), (vocab, h, tokens)),
            }
            for kind, (op, (m, n, k)) in products.items():
                seconds = _graph_seconds(op, device, 10)
                rows.append(dict(precision=precision, kind=kind, vocab=vocab, m=m, n=n, k=k, seconds=seconds))
    torch.backends.cuda.matmul.allow_tf32 = False
    for row in rows:
        row["tflops"] = 2 * row["m"] * row["n"] * row["k"] / row["seconds"] / 1e12
    return rows


def _launch_rows(device: torch.device) -> dict:
    one = torch.ones(1, device=device)
    count = 2000

    def eager():
        for _ in range(count):
            one.add_(1.0)

    host = _median_seconds(eager, device, 5, per_call=count)
    replayed = _graph_seconds(lambda: one.add_(1.0), device, 50)
    return dict(host_seconds_per_kernel=host, graph_seconds_per_kernel=replayed, kernels=count)


def _memory_rows(device: torch.device, quick: bool) -> list[dict]:
    n = 1 << (16 if quick else 28)  # 2^28 bf16 values: 512 MiB a tensor, far beyond the L2
    rows = []
    a = torch.randn(n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    cases = {
        "copy bf16": (lambda: out.copy_(a), 2 * n * 2),
        "add bf16": (lambda: torch.add(a, b, out=out), 3 * n * 2),
    }
    rows_tokens, width = (64, 256) if quick else (65536, 1024)
    x = torch.randn(rows_tokens, width, device=device, dtype=torch.bfloat16)
    weight = torch.ones(width, device=device, dtype=torch.bfloat16)
    cases["layer_norm bf16"] = (lambda: F.layer_norm(x, (width,), weight, weight), 2 * x.numel() * 2)
    logits_rows, vocab = (64, 257) if quick else (8192, 50257)
    logits = torch.randn(logits_rows, vocab, device=device, dtype=torch.float32)
    cases["softmax fp32"] = (lambda: torch.softmax(logits, dim=-1), 2 * logits.numel() * 4)
    logits_bf16 = logits.to(torch.bfloat16)  # the upcast a framework's loss makes of 16-bit logits
    cases["bf16 -> fp32 cast"] = (lambda: logits_bf16.float(), logits.numel() * (2 + 4))
    # batch norm in training mode on a ResNet-50 activation (64 x 256 x 56 x 56, channels last):
    # the model counts 3 passes forward (statistics, then normalise: read, write)
    nchw = (2, 8, 16, 16) if quick else (64, 256, 56, 56)
    act = torch.randn(*nchw, device=device, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    scale = torch.ones(nchw[1], device=device)
    cases["batch_norm bf16 nhwc"] = (
        lambda: F.batch_norm(act, None, None, scale, scale, training=True),
        3 * act.numel() * 2,
    )
    for power in (18, 20, 22, 24, 26) if not quick else (10,):  # the add again, smaller: 0.5-128 MiB
        small = [torch.randn(1 << power, device=device, dtype=torch.bfloat16) for _ in range(3)]
        cases[f"add bf16 2^{power}"] = (
            lambda small=small: torch.add(small[0], small[1], out=small[2]),
            3 * (1 << power) * 2,
        )
    for name, (op, moved) in cases.items():
        seconds = _graph_seconds(op, device, 20)
        rows.append(dict(kernel=name, bytes=moved, seconds=seconds, gb_per_s=moved / seconds / 1e9))
    return rows


def _attention_rows(device: torch.device, quick: bool) -> list[dict]:
    """Fused attention (``scaled_dot_product_attention``, the backend PyTorch picks) forward and
    forward + backward in bf16 over head widths and sequence lengths, 2,048 channels of heads and
    16,384 tokens a call: its FLOPs (4 b h s^2 d forward, half with a causal mask; 2.5 times that
    backward) over its time, the rate ``flash_efficiency`` stands for."""
    rows = []
    widths, lengths = ((64,), (128,)) if quick else ((64, 128), (512, 1024, 2048, 4096, 8192))
    tokens, channels = (256, 128) if quick else (16384, 2048)
    repeat = 10
    for d in widths:
        for s in lengths:
            b, h = max(1, tokens // s), channels // d
            q, k, v = (
                torch.randn(b, h, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                for _ in range(3)
            )
            grad = torch.randn(b, h, s, d, device=device, dtype=torch.bfloat16)
            for causal in (False, True):
                fwd_flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)

                def forward(causal=causal, q=q, k=k, v=v):
                    with torch.no_grad():
                        for _ in range(repeat):
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def both(causal=causal, q=q, k=k, v=v, grad=grad):
                    for _ in range(repeat):
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)

                t_fwd = _median_seconds(forward, device, 5, per_call=repeat)
                t_both = _median_seconds(both, device, 5, per_call=repeat)
                rows.append(
                    dict(
                        head_dim=d,
                        seq=s,
                        batch=b,
                        heads=h,
                        causal=causal,
                        forward_seconds=t_fwd,
                        forward_tflops=fwd_flops / t_fwd / 1e12,
                        training_seconds=t_both,
                        training_tflops=3.5 * fwd_flops / t_both / 1e12,
                    )
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the script")
    parser.add_argument(
        "--parts", nargs="+", default=["gemm", "launch", "memory", "attention"], help="which parts to run"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    facts = dict(
        gpu=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        torch=torch.__version__,
        cuda=torch.version.cuda,
        date=time.strftime("%Y-%m-%d"),
        replays_per_graph=REPLAYS_PER_GRAPH,
    )
    result: dict = dict(facts=facts)
    path = args.out / "kernels.json"
    for part, measure in (
        ("gemm", lambda: _gemm_rows(device, args.quick)),
        ("launch", lambda: _launch_rows(device)),
        ("memory", lambda: _memory_rows(device, args.quick)),
        ("attention", lambda: _attention_rows(device, args.quick)),
    ):
        if part not in args.parts:
            continue
        started = time.perf_counter()
        try:
            result[part] = measure()
        except Exception as err:  # noqa: BLE001 - a part that fails is recorded, the others go on
            result[part] = dict(error=f"{type(err).__name__}: {err}")
        print(f"{part}: {time.perf_counter() - started:.1f} s", flush=True)
        path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result.get("launch")))
    for row in result.get("memory") if isinstance(result.get("memory"), list) else []:
        print(f"{row['kernel']:<20}{row['gb_per_s']:>9.0f} GB/s")
    for row in result.get("attention") if isinstance(result.get("attention"), list) else []:
        print(
            f"attention d={row['head_dim']:<4}s={row['seq']:<6}causal={row['causal']!s:<6}"
            f"fwd {row['forward_tflops']:6.1f}  fwd+bwd {row['training_tflops']:6.1f} TFLOP/s"
        )
    for row in result.get("gemm") if isinstance(result.get("gemm"), list) else []:
        print(
            f"{row['precision']:<6}{row['kind']:<12}{row['m']:>7}{row['n']:>7}{row['k']:>7}"
            f"{row['seconds'] * 1e6:>11.1f} us{row['tflops']:>8.1f} TFLOP/s"
        )


if __name__ == "__main__":
    main()
