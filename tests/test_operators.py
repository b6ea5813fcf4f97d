"""The per-operator compute model (dlexplore.model.operators) against numbers worked out by hand:
a GEMM's 2mnk FLOPs and its three operands, a roofline crossover, tile and wave quantisation,
Winograd only on vector units, Megatron's tensor-parallel split and flash attention's FLOPs."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import dlexplore as dlx
from dlexplore.catalog import GPU, Layer, Workload
from dlexplore.model.compute import compute_defaults, kernel_times
from dlexplore.model.operator_table import operator_table, tile_efficiency
from dlexplore.model.operators import (
    CATEGORIES,
    PHASES,
    alignment_factor,
    category_sums,
    operand_alignment,
    operator_times,
    phase_sums,
    wave_efficiency,
)

#: The compute parameters of the tests that give every one (kernel_times takes them all).
PARAMS = dict(
    compute_efficiency=0.7,
    memory_efficiency=0.8,
    kernel_time=0.0,
    winograd_speedup=1.0,
    flash_efficiency=0.6,
    unaligned_efficiency=0.4,
)

# 10 TFLOP/s fp32, 40 fp16, 1000 GB/s, no SM count (no wave quantisation)
CARD = GPU("card", "test", 10.0, math.nan, 40.0, math.nan, 16 * 2**30, 1000.0, 300.0, 50.0, "test")
# one fully connected layer of 4096 x 4096 on a vector of 4096 values per sample
FC = Workload(
    "fc",
    "custom",
    (
        Layer(
            "fc",
            "linear",
            4096 * 4096,
            2.0 * 4096 * 4096,
            4 * 4096,
            gemm=(1.0, 4096.0, 4096.0, 1.0),
            values_in=4096.0,
            values_out=4096.0,
        ),
    ),
    input_bytes_per_sample=0.0,
    sample_unit="samples",
    source="test",
)


def test_a_gemm_is_three_products_of_2mnk_flops_over_three_operands():
    ops = operator_table(FC, "fp32")
    names = list(ops.name)
    # the first layer's input needs no gradient: forward and weight gradient only, and the update
    assert names == ["fc:fwd", "fc:wgrad", "optimizer:update"]
    np.testing.assert_allclose(ops.flops[:2], [2 * 4096**2] * 2)
    # operands m x k (per sample 1 x 4096), k x n (the weights, 4096 x 4096, fixed), m x n (1 x 4096)
    np.testing.assert_allclose(ops.bytes_sample[:2], [4 * (4096 + 4096)] * 2)
    np.testing.assert_allclose(ops.bytes_fixed[:2], [4 * 4096**2] * 2)
    # momentum streams 20 bytes per parameter once per step
    assert ops.bytes_fixed[2] == pytest.approx(20 * 4096**2)
    assert [PHASES[p] for p in ops.phase] == ["forward", "backward", "optimizer"]


def test_roofline_crossover_by_hand():
    ops = operator_table(FC, "fp32")
    # per sample: 2 x 4096^2 FLOPs at 0.5 x 10 TFLOP/s = 6.7109 us; 32768 bytes at 1000 GB/s =
    # 32.768 ns; the weights' 67.1 MB take 67.109 us whatever the batch. Memory-bound below
    # b* = 67.109 / (6.7109 - 0.032768) = 10.05 samples, compute-bound above.
    compute, per_sample, fixed = 2 * 4096**2 / 5e12, 32768 / 1e12, 4 * 4096**2 / 1e12
    crossover = fixed / (compute - per_sample)
    assert crossover == pytest.approx(10.05, abs=0.01)
    batch = np.array([1.0, 5.0, 10.0, 11.0, 64.0])
    times = operator_times(
        ops, batch, 10e12, 1000.0, compute_efficiency=0.5, memory_efficiency=1.0, kernel_time=0.0
    )
    forward = times[:, 0]
    expected = np.maximum(compute * batch, fixed + per_sample * batch)
    np.testing.assert_allclose(forward, expected, rtol=1e-12)
    assert np.all((forward == fixed + per_sample * batch) == (batch < crossover))
    # the fixed time per kernel makes the achieved rate a curve of size: F / (F / R + t)
    with_launch = operator_times(
        ops, 64.0, 10e12, 1000.0, compute_efficiency=0.5, memory_efficiency=1.0, kernel_time=5e-6
    )
    assert with_launch[0] == pytest.approx(64 * compute + 5e-6)


@pytest.mark.parametrize(
    ("size", "share"),
    [(128, 1.0), (96, 0.75), (48, 0.75), (64, 1.0), (1000, 1000 / 1024), (130, 130 / 256), (3, 0.75)],
)
def test_tile_quantisation(size, share):
    assert tile_efficiency(size) == pytest.approx(share)


def test_wave_quantisation_by_hand():
    # ResNet-50's layer1 1x1 convolution: 56 x 56 = 3136 output rows per sample, 64 channels
    ops = operator_table("resnet50", "fp32")
    i = ops.name.index("layer1.0.conv1:fwd")
    # one sample: ceil(3136 / 128) = 25 row tiles x 1 column tile on 80 SMs: one wave, 25 busy
    share = wave_efficiency(ops, np.array([[1.0], [4.0]]), 80)
    assert share[0, i] == pytest.approx(25 / 80)
    # four samples: ceil(12544 / 128) = 98 tiles: two waves of 80, 98 of 160 slots busy
    assert share[1, i] == pytest.approx(98 / 160)
    # the weight gradient is split along its long reduction: no wave loss
    assert share[0, ops.name.index("layer1.0.conv1:wgrad")] == 1.0
    # the V100 has 80 SMs: its times carry the same share
    v100 = dlx.catalog.gpu("V100-16GB")
    params = dict(PARAMS, compute_efficiency=0.8, memory_efficiency=1.0)
    t = kernel_times(ops, 1.0, v100, "fp32", params)
    flops = ops.flops[i]
    bytes_ = ops.bytes_sample[i] + ops.bytes_fixed[i]
    assert t[i] == pytest.approx(max(flops / (0.8 * 15.7e12 * 25 / 80), bytes_ / 900e9))


def test_winograd_only_on_vector_units():
    v100 = dlx.catalog.gpu("V100-16GB")
    params = dict(PARAMS, compute_efficiency=0.8, memory_efficiency=1.0, winograd_speedup=2.0)
    base = dict(params, winograd_speedup=1.0)
    for precision, saving in (("fp32", True), ("fp16", False)):  # fp16 on the V100: tensor cores
        ops = operator_table("vgg16", precision)
        fast = kernel_times(ops, 64.0, v100, precision, params)
        slow = kernel_times(ops, 64.0, v100, precision, base)
        i = ops.name.index("features.2:fwd")  # a 3x3 stride-1 convolution, compute-bound here
        assert ops.winograd[i]
        assert fast[i] == pytest.approx(slow[i] / 2 if saving else slow[i])


def test_transformer_flops_match_the_catalog_and_split_over_tensor_parallel_ranks():
    wl = dlx.catalog.workload("gpt2")
    flops = operator_table(wl, "bf16").flops_per_sample("forward")
    assert flops == pytest.approx(wl.flops_per_sample, rel=1e-12)
    # Megatron splits every product t ways: QKV and fc1 by columns, the attention output and fc2
    # by rows, attention by heads, the logits by the vocabulary
    for tp in (2, 4):
        split = operator_table(wl, "bf16", tp=tp).flops_per_sample("forward")
        assert split == pytest.approx(wl.flops_per_sample / tp, rel=1e-12)
        assert operator_table(wl, "bf16", tp=tp).flops_per_sample("backward") == pytest.approx(
            2 * wl.flops_per_sample / tp, rel=1e-12
        )
    with pytest.raises(dlx.DlexploreError, match="must divide the 12 attention heads"):
        operator_table(wl, "bf16", tp=5)


def test_flash_attention_kernels_by_hand():
    wl = dlx.catalog.workload("gpt2")  # causal: the kernel skips the masked half
    L, s, h = 12, 1024, 768
    ops = operator_table(wl, "bf16", attention="flash")
    i = ops.name.index("layers.attn.flash:fwd")
    assert ops.flops[i] == pytest.approx(L * 4 * s * s * h * 0.5)
    assert ops.flops[ops.name.index("layers.attn.flash:bwd")] == pytest.approx(2.5 * ops.flops[i])
    # Q, K, V read and the output written, 2 bytes each: no s x s matrix in memory
    assert ops.bytes_sample[i] == pytest.approx(L * 4 * 2 * s * h)
    assert not any("softmax" in name for name in ops.name)
    fused = operator_table(wl, "bf16")
    softmax = fused.name.index("layers.attn.softmax:fwd")
    assert fused.bytes_sample[softmax] == pytest.approx(L * 2 * 2 * 12 * s * s)  # read + write


def test_batch_norm_relu_and_residual_bytes_by_hand():
    ops = operator_table("resnet50", "fp16")
    values = 256 * 56 * 56  # layer1.0.bn3: 256 channels of 56 x 56
    bn = ops.name.index("layer1.0.bn3:fwd")
    assert ops.bytes_sample[bn] == pytest.approx(3 * 2 * values)  # statistics pass, then normalise
    assert ops.bytes_sample[ops.name.index("layer1.0.bn3:bwd")] == pytest.approx(5 * 2 * values)
    assert ops.bytes_sample[ops.name.index("layer1.0.bn3.add:fwd")] == pytest.approx(3 * 2 * values)
    assert ops.bytes_sample[ops.name.index("layer1.0.bn3.relu:bwd")] == pytest.approx(3 * 2 * values)
    assert CATEGORIES[ops.category[bn]] == "norm"


def test_breakdown_adds_up_to_the_compute_time():
    ds = dlx.predict(
        "resnet50", "A100-80GB", gpus=[1, 8], batch_size=[32, 256], precision="tf32", operators=True
    )
    total = ds.time_operator.sum("operator")
    np.testing.assert_allclose(total.values, ds.time_compute.values, rtol=1e-12)
    assert ds.time_operator.attrs["units"] == "s"
    assert list(ds.operator.values) == list(CATEGORIES)
    np.testing.assert_allclose(ds.time_kernel.sum("kernel").values, ds.time_compute.values, rtol=1e-12)
    # at tf32 on an A100 the convolutions are not the whole step: memory-bound kernels weigh
    conv = float(ds.time_operator.sel(operator="conv", batch_size=256) / ds.time_compute.sel(batch_size=256))
    assert 0.4 < conv < 0.9
    ops = operator_table("resnet50", "tf32")
    times = operator_times(
        ops, np.array([32.0]), 156e12, 2039.0, compute_efficiency=0.8, memory_efficiency=0.9, kernel_time=2e-6
    )
    np.testing.assert_allclose(
        category_sums(ops, times).sum(-1), sum(phase_sums(ops, times).values()), rtol=1e-12
    )


def test_nchw_layout_transposes_each_tensor_core_convolution_by_hand():
    # ResNet-50 on an A100 in TF32 (4-byte values on tensor cores), 256 images, one GPU: in NCHW
    # cuDNN turns each convolution's input to NHWC and its output back, around the forward
    # product (2 passes over input + output: read and write) and around both gradients' products
    # (4; 2 for the first layer, which has no input gradient), one kernel each way
    a100 = dlx.catalog.gpu("A100-80GB")
    memory_efficiency = dlx.catalog.model_default("memory_efficiency")
    kernel_time = dlx.catalog.model_default("kernel_time")
    convs = [layer for layer in dlx.catalog.workload("resnet50").layers if layer.kind == "conv"]
    passes = np.array([6.0 if i else 4.0 for i in range(len(convs))])
    moved = float((passes * np.array([c.values_in + c.values_out for c in convs])).sum()) * 4 * 256
    extra = moved / (memory_efficiency * a100.memory_bandwidth_gbs * 1e9) + 2 * len(convs) * kernel_time
    run = dict(gpus=1, batch_size=256, precision="tf32")
    nhwc = dlx.predict("resnet50", "A100-80GB", layout="nhwc", **run)
    nchw = dlx.predict("resnet50", "A100-80GB", layout="channels_first", **run)
    assert str(nchw.layout.values) == "nchw"
    assert float(nchw.step_time - nhwc.step_time) == pytest.approx(extra, rel=1e-9)
    # shown as element-wise kernels in the breakdown
    ops = operator_table("resnet50", "tf32", layout="nchw")
    assert ops.transpose.sum() == 2 * len(convs) and not operator_table("resnet50", "tf32").transpose.any()
    assert {CATEGORIES[c] for c in ops.category[ops.transpose]} == {"elementwise"}
    # on vector units (fp32 on a V100) cuDNN convolves NCHW as it is: no transposes
    v100 = dict(gpus=1, batch_size=112, precision="fp32")
    assert float(dlx.predict("resnet50", "V100-16GB", layout="nchw", **v100).step_time) == float(
        dlx.predict("resnet50", "V100-16GB", **v100).step_time
    )
    with pytest.raises(dlx.errors.DlexploreError, match="unknown layout 'nwhc'"):
        dlx.predict("resnet50", "A100-80GB", layout="nwhc", **run)


def test_no_transposes_where_cudnn_runs_none():
    # MIOpen on an AMD GPU convolves NCHW as it is; grouped convolutions run kernels of their own
    run = dict(gpus=1, batch_size=256, precision="fp16")
    assert float(dlx.predict("resnet50", "MI250X-GCD", layout="nchw", **run).step_time) == float(
        dlx.predict("resnet50", "MI250X-GCD", **run).step_time
    )
    grouped = Workload(
        "grouped",
        "cnn",
        (
            Layer(
                "stem",
                "conv",
                64 * 27,
                2.0 * 3136 * 64 * 27,
                4 * 3136 * 64,
                gemm=(3136.0, 64.0, 27.0, 1.0),
                values_in=3 * 12544.0,
                values_out=64 * 3136.0,
            ),
            Layer(
                "grouped",
                "conv",
                64 * 288,
                2.0 * 3136 * 32 * 288 * 2,
                4 * 3136 * 64,
                gemm=(3136.0, 32.0, 288.0, 2.0),
                values_in=64 * 3136.0,
                values_out=64 * 3136.0,
            ),
        ),
        input_bytes_per_sample=0.0,
        sample_unit="images",
        source="test",
    )
    ops = operator_table(grouped, "fp16", layout="nchw")
    assert [n for n, t in zip(ops.name, ops.transpose, strict=True) if t] == [
        "stem.transpose:fwd",
        "stem.transpose:bwd",
    ]


def test_fused_batch_norm_saves_the_add_and_relu_passes_by_hand():
    # ResNet-50 on a V100 in mixed precision (2-byte values), 256 images, one GPU. With
    # fusion="bn_add_relu" each batch norm followed by a ReLU (and a residual add) is one kernel:
    # the ReLU's own kernels go (forward read + write, backward read of the gradient and the
    # output + write: 5 passes over the norm's output) and so do the add's (3 + 3), for one pass
    # more of the norm each way (the residual read forward, its gradient written backward).
    v100 = dlx.catalog.gpu("V100-16GB")
    memory_efficiency = dlx.catalog.model_default("memory_efficiency")
    kernel_time = dlx.catalog.model_default("kernel_time")
    saved_values, saved_kernels = 0.0, 0
    for layer in dlx.catalog.workload("resnet50").layers:
        if layer.kind == "bn" and layer.tail:
            added = "add" in layer.tail
            saved_values += layer.values_out * (5.0 + (6.0 - 2.0 if added else 0.0))
            saved_kernels += 2 * len(layer.tail)  # each op a forward and a backward kernel
    assert saved_kernels == 2 * (33 + 2 * 16)  # 33 norms with a ReLU, 16 with an add and a ReLU
    saved = saved_values * 2 * 256 / (memory_efficiency * v100.memory_bandwidth_gbs * 1e9)
    saved += saved_kernels * kernel_time
    run = dict(gpus=1, batch_size=256, precision="fp16")
    unfused = dlx.predict("resnet50", "V100-16GB", **run)
    fused = dlx.predict("resnet50", "V100-16GB", fusion="bn-add-relu", **run)
    assert str(fused.fusion.values) == "bn_add_relu" and str(unfused.fusion.values) == "none"
    assert float(unfused.step_time - fused.step_time) == pytest.approx(saved, rel=1e-9)
    # the FLOPs are the same: only memory-bound passes and kernels go
    none_ops = operator_table("resnet50", "fp16")
    fused_ops = operator_table("resnet50", "fp16", fusion="bn_add_relu")
    assert fused_ops.flops.sum() == pytest.approx(none_ops.flops.sum(), rel=1e-12)
    # a transformer has no batch norm: nothing changes
    bert = dict(gpus=1, batch_size=8, precision="fp16")
    assert float(dlx.predict("bert-base", "V100-16GB", fusion="bn_add_relu", **bert).step_time) == float(
        dlx.predict("bert-base", "V100-16GB", **bert).step_time
    )
    with pytest.raises(dlx.errors.DlexploreError, match="unknown fusion 'xla'"):
        dlx.predict("resnet50", "V100-16GB", fusion="xla", **run)


def test_operand_alignment_by_hand():
    # the largest power of two dividing each row's bytes, at most 16
    assert operand_alignment(2, 768, 50257) == 2  # GPT-2's vocabulary in 16-bit: odd
    assert operand_alignment(2, 1024, 30522) == 4  # BERT's: 30522 = 2 x 15261, 61044 bytes
    assert operand_alignment(4, 1024, 30522) == 8  # in tf32: 122088 bytes = 8 x 15261
    assert operand_alignment(4, 768, 50257) == 4
    assert operand_alignment(2, 768, 50304) == 16  # padded to a multiple of 64
    assert operand_alignment(2, 1024, 30528) == 16  # NVIDIA's BERT: a multiple of 8
    assert operand_alignment(2, 50257 / 2) == 2  # split unevenly over two ranks: one value


def test_alignment_factor_by_hand():
    assert alignment_factor([16, 8, 4, 2], 0.4).tolist() == pytest.approx([1.0, 0.4, 0.4, 0.2])


def test_an_unaligned_output_layer_is_slower_on_tensor_cores_only():
    # GPT-2's logits (m = 1024 tokens per sequence, n = 50257, k = 768), 8 sequences: 632 GFLOP,
    # compute-bound at either rate, so its time scales by 1 / (0.4 x 2/4) = 5 in 16-bit (rows
    # aligned to 2 bytes) and by 1 / 0.4 = 2.5 for BERT's 30522 (4-byte rows); fp32 on vector
    # units reads element by element: no change
    h200, v100 = dlx.catalog.gpu("H200"), dlx.catalog.gpu("V100-16GB")
    params = PARAMS
    for workload, gpu, precision, slower in (
        ("gpt2", h200, "bf16", 5.0),
        ("bert-large", h200, "bf16", 2.5),
        ("bert-large-nvidia", h200, "bf16", 1.0),
        ("gpt2", v100, "fp32", 1.0),
        ("gpt2", dlx.catalog.gpu("P100"), "fp16", 1.0),  # 16-bit on the P100's vector units
    ):
        ops = operator_table(workload, precision)
        i = ops.name.index("logits:fwd")
        t = kernel_times(ops, 8.0, gpu, precision, params)
        as_if_aligned = dataclasses.replace(ops, alignment=np.full(len(ops), 16.0))
        t_aligned = kernel_times(as_if_aligned, 8.0, gpu, precision, params)
        assert t[i] == pytest.approx(slower * t_aligned[i]), workload
        layers = ops.name.index("layers.mlp.fc1:fwd")  # 768 and 3072: aligned
        assert ops.alignment[layers] == 16 and t[layers] == t_aligned[layers]


def _square_product(size: int) -> Workload:
    """One linear layer of ``size`` x ``size`` on a vector per sample: at batch ``size``, its forward
    product is the square ``size`` x ``size`` x ``size`` GEMM."""
    s = float(size)
    layer = Layer(
        "fc", "linear", size * size, 2.0 * s * s, 4 * s, gemm=(1.0, s, s, 1.0), values_in=s, values_out=s
    )
    return Workload(
        "square", "custom", (layer,), input_bytes_per_sample=0.0, sample_unit="samples", source="test"
    )


@pytest.mark.parametrize("precision", ["bf16", "tf32", "fp32"])
def test_the_gemm_size_curve_against_an_h200(precision):
    """Square products timed on one H200 from CUDA-graph replays (benchmarks/gpu_kernels.py,
    benchmarks/results/gpu-kernels-h200.json) against the model's forward product with the
    catalog defaults. The plateau is the best of those same rows (data/catalog/gemm.csv), so the
    large sizes agree by construction within their spread (0.91-1.04); the smaller ones test the
    size curve, the fixed kernel time (2 us, from Calculon's A100 curve) and the tile and wave
    quantisation: on tensor cores within 50% down to 256^3 (the model 0.93-1.46x the measured
    time). On vector units (fp32) the model is 1.6-3.4x too slow at 256-1024: cuBLAS takes tiles
    smaller than the model's 128 for small products."""
    import json
    from pathlib import Path

    results = json.loads(
        (Path(__file__).parents[1] / "benchmarks" / "results" / "gpu-kernels-h200.json").read_text()
    )
    h200 = dlx.catalog.gpu("H200")
    params = compute_defaults(h200, precision)
    for row in results["gemm"]:
        if row["kind"] != "square" or row["precision"] != precision:
            continue
        size = row["m"]
        ops = operator_table(_square_product(size), precision)
        predicted = kernel_times(ops, float(size), h200, precision, params)[ops.name.index("fc:fwd")]
        ratio = predicted / row["seconds"]
        if size >= 2048:
            assert ratio == pytest.approx(1.0, abs=0.1), (size, ratio)
        elif precision != "fp32":
            assert ratio == pytest.approx(1.0, abs=0.5), (size, ratio)
