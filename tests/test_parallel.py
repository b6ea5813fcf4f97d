"""Hybrid-parallel model (dlexplore.model.parallel) against numbers worked out by hand from the
published formulas:

- Rajbhandari et al. (2020), ZeRO, Figure 1: 7.5B parameters, N_d = 64, K = 12 -> 120 GB (baseline),
  31.4 GB (P_os), 16.6 GB (P_os+g), 1.9 GB (P_os+g+p) per device;
- Korthikanti et al. (2022), Reducing Activation Recomputation in Large Transformer Models, Table 2
  (activation bytes per layer) with GPT-3 175B's s = 2048, h = 12288, a = 96, t = 8;
- Narayanan et al. (2021): pipeline bubble (p - 1)/(m + p - 1) of the step, (p - 1)/m of the ideal;
- Shoeybi et al. (2019), Megatron-LM: 2 allreduces forward + 2 backward per layer of s b h values;
- the ring allreduce 2(p-1) alpha + 2(p-1)/p n beta (Thakur et al. 2005) with the catalog's NVLink3
  (300 GB/s, 0.6 us).
"""

from __future__ import annotations

import math

import pytest

import dlexplore as dlx
from dlexplore import catalog, lab
from dlexplore.errors import DlexploreError
from dlexplore.model.parallel import (
    activation_bytes_per_layer,
    bubble_fraction,
    model_state_bytes,
    predict_parallel,
    tp_allreduce_bytes,
)

# GPT-2 small (catalog "gpt2"): L, h, a, s, V
L, H, A, S, V = 12, 768, 12, 1024, 50257


@pytest.mark.parametrize(("zero", "expected_gb"), [(0, 120.0), (1, 31.40625), (2, 16.640625), (3, 1.875)])
def test_zero_figure_1(zero, expected_gb):
    states = model_state_bytes(7.5e9, 64, zero, precision="bf16", optimizer="adam", convention="zero")
    total = states["params"] + states["grads"] + states["optimizer"]
    assert total / 1e9 == pytest.approx(expected_gb, rel=1e-12)
    # the paper's rounded figures
    assert round(total / 1e9, 1) == {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}[zero]


def test_offload_moves_optimizer_state_to_cpu():
    states = model_state_bytes(7.5e9, 64, 1, offload=True, convention="zero")
    assert states["optimizer"] == 0
    assert states["cpu"] == pytest.approx(12 * 7.5e9 / 64)


# GPT-3 175B layer, t = 8: sbh = 25,165,824; 5as/h = 80
_SBH = 2048 * 12288


@pytest.mark.parametrize(
    ("tp", "recompute", "sp", "expected"),
    [
        (1, "none", False, _SBH * 114),  # sbh(34 + 5as/h) = 2,868,903,936
        (8, "none", False, _SBH * 23),  # sbh(10 + 24/8 + 80/8) = 578,813,952
        (8, "none", True, _SBH * 114 / 8),  # sbh/t (34 + 5as/h) = 358,612,992
        (8, "selective", False, _SBH * 13),  # sbh(10 + 24/8)
        (8, "selective", True, _SBH * 34 / 8),  # 34 sbh / t = 106,954,752
        (8, "full", False, _SBH * 2),  # 2 sbh
        (8, "full", True, _SBH * 2 / 8),
    ],
)
def test_korthikanti_table_2(tp, recompute, sp, expected):
    got = activation_bytes_per_layer(2048, 1, 12288, 96, tp=tp, recompute=recompute, sequence_parallel=sp)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("tp", "recompute", "sp", "expected"),
    [
        # GPT-3's layer with flash attention: no s x s matrix, 4 asb bytes of fp32 softmax
        # statistics (96 heads x 2048 tokens x 4 = 786,432) in place of the 5as/h term, in every
        # row but full recomputation
        (1, "none", False, _SBH * 34 + 4 * 96 * 2048),
        (8, "none", False, _SBH * 13 + 4 * 96 * 2048 / 8),
        (8, "none", True, _SBH * 34 / 8 + 4 * 96 * 2048 / 8),
        (8, "selective", True, _SBH * 34 / 8 + 4 * 96 * 2048 / 8),
        (8, "full", True, _SBH * 2 / 8),
    ],
)
def test_flash_attention_keeps_no_attention_matrices(tp, recompute, sp, expected):
    got = activation_bytes_per_layer(
        2048, 1, 12288, 96, tp=tp, recompute=recompute, sequence_parallel=sp, attention="flash"
    )
    assert got == pytest.approx(expected, rel=1e-12)


def test_flash_attention_in_both_models_by_hand():
    # BERT-Large (24 layers, 16 heads) on 512 tokens: flash keeps a s (5 s - 4) bytes less per
    # layer and sequence at 16 bits: 16 x 512 x 2556 x 24 = 502,530,048 bytes a sequence
    saved = 24 * 16 * 512 * (5 * 512 - 4)
    for precision, scale in (("bf16", 1), ("tf32", 2)):
        fused, flash = (
            dlx.predict("bert-large", "A100-80GB", gpus=1, batch_size=16, precision=precision, attention=a)
            for a in ("fused", "flash")
        )
        assert float(fused.mem_activations - flash.mem_activations) == pytest.approx(16 * saved * scale)
    # the hybrid model, one GPU, micro-batch 16: the same bytes (its layers as Korthikanti's table)
    fused, flash = (
        predict_parallel("bert-large", "A100-80GB", gpus=1, micro_batch=16, batch_size=16, attention=a)
        for a in ("fused", "flash")
    )
    assert float(fused.mem_activations - flash.mem_activations) == pytest.approx(16 * saved)
    # selective recomputation has no attention core left to recompute with flash
    sel = predict_parallel(
        "bert-large",
        "A100-80GB",
        gpus=1,
        micro_batch=16,
        batch_size=16,
        attention="flash",
        recompute="selective",
    )
    assert float(sel.mem_recompute) == 0.0


def test_activations_without_parallelism_match_the_catalog():
    # The catalog's gpt2 activations are Korthikanti's L sh(34 + 5as/h) + 5sh + 4sV at 16 bits, x 2.
    ds = predict_parallel("gpt2", "A100-80GB", gpus=1, micro_batch=1, batch_size=1)
    hand = L * S * H * (34 + 5 * A * S / H) + 5 * S * H + 4 * S * V
    assert float(ds["mem_activations"]) == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(catalog.workload("gpt2").activation_bytes_per_sample / 2, rel=1e-12)


@pytest.mark.parametrize(("schedule", "first_held", "last_held"), [("1f1b", 2, 1), ("gpipe", 4, 4)])
def test_activations_per_stage_and_in_flight(schedule, first_held, last_held):
    # 8 GPUs = dp 2 x tp 2 x pp 2, micro-batch 2, global batch 16 -> m = 4 micro-batches.
    ds = predict_parallel(
        "gpt2", "A100-80GB", gpus=8, tp=2, pp=2, micro_batch=2, batch_size=16, schedule=schedule
    )
    assert int(ds["micro_batches"]) == 4
    sbh = S * 2 * H  # 1,572,864
    per_layer = sbh * (10 + 24 / 2 + 5 * A * S / (H * 2))  # x 62 = 97,517,568
    # the first stage: 6 layers and the embedding's dropout mask (sbh) per micro-batch it holds
    first = (per_layer * (L // 2) + sbh) * first_held
    # the last: 6 layers, the final norm's and the logits' inputs (4 sbh) and the fp32 logits
    # split over tp = 2 (4 s b V / 2)
    last = (per_layer * (L // 2) + 4 * sbh + 4 * S * 2 * V / 2) * last_held
    assert float(ds["mem_activations"]) == pytest.approx(max(first, last), rel=1e-12)
    # 1F1B: the first stage holds p = 2 micro-batches (1,173,356,544 B) and is the most loaded;
    # GPipe: all 4 on both, and the last stage's logits make it the larger (3,188,998,144 B)
    assert max(first, last) == {2: 1_173_356_544, 4: 3_188_998_144}[first_held]


def test_seq_override_rebuilds_the_workload():
    ds = predict_parallel("gpt2", "A100-80GB", gpus=1, batch_size=1, seq=512)
    s = 512
    hand = L * s * H * (34 + 5 * A * s / H) + 5 * s * H + 4 * s * V
    assert float(ds["mem_activations"]) == pytest.approx(hand, rel=1e-12)
    assert int(ds["seq"]) == 512


def test_bubble_fraction():
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    # 4 stages in one node, 8 micro-batches: idle share of the pipelined part of the step
    ds = predict_parallel("gpt2", "A100-80GB", gpus=4, pp=4, micro_batch=1, batch_size=8)
    assert float(ds["bubble_fraction"]) == pytest.approx(3 / 11)
    assert float(ds["bubble_overhead"]) == pytest.approx(3 / 8)  # Narayanan's (p - 1)/m
    busy = float(ds["time_compute"] + ds["time_pp_comm"])
    assert float(ds["time_bubble"]) / (busy + float(ds["time_bubble"])) == pytest.approx(3 / 11)


# A made-up GPU whose memory is so fast that every GEMM of GPT-2 small is compute-bound (its ridge
# is 100e12 x 0.5 / 1e15 = 0.05 FLOP/byte) and without an SM count (no wave quantisation): the
# compute time is then the GEMM FLOPs at the plateau plus the memory-bound kernels' bytes.
FAST_MEMORY = catalog.GPU(
    "fastmem", "test", 50.0, math.nan, 100.0, 100.0, 80 * 2**30, 1e6, 400.0, 50.0, "test"
)


def test_step_time_one_gpu_by_hand():
    # 1 GPU, bf16 (100 TFLOP/s), GEMM efficiency 0.5, 4 sequences of gpt2 in 4 micro-batches.
    gemm = 24 * S * L * H**2 * (1 + S / (6 * H)) + 2 * S * H * V  # forward FLOPs per sequence
    # tile quantisation: the logits' 50257 columns fill 50257 of 393 x 128 = 50304 tiles' width in
    # the forward and the weight gradient (whose outputs have V columns), not in the input gradient
    # (its rows of 50257 bf16 values align to 2 bytes, which costs nothing on this card's vector
    # units: 100 TFLOP/s of 16-bit is not above twice its fp32 50)
    logits = 2 * S * H * V
    gemm_time = (3 * (gemm - logits) + logits * (1 + 2 * 50304 / V)) / (100e12 * 0.5)
    # memory-bound kernels, forward + backward passes x values x 2 bytes (operators.py's table)
    sh, f, a = S * H, 4 * H, A
    per_layer = 2 * (
        6 * sh
        + 6 * sh  # ln1, ln2
        + 5 * a * S * S
        + 4 * a * S * S  # softmax; attention dropout
        + 6 * sh
        + 6 * sh  # two bias-dropout-adds
        + 5 * S * f
    )  # bias-GeLU
    per_layer += 2 * a * S * S + 2 * 2 * sh  # the dropout masks, 1 byte written, then read
    outside = 2 * (4 * sh + 4 * sh + 6 * sh + 5 * S * V) + 2 * sh  # embedding, its dropout, final
    outside += 4 * (V + S) * H  # norm, cross-entropy; the embedding tables' fp32 gradient, zeroed
    vector_time = (L * per_layer + outside) / (1e6 * 1e9 * 0.9)
    params = catalog.workload("gpt2").params
    update = 28 * params / (1e6 * 1e9 * 0.9)  # Adam streams 28 bytes per parameter
    ds = predict_parallel(
        "gpt2",
        FAST_MEMORY,
        gpus=1,
        micro_batch=1,
        batch_size=4,
        compute_efficiency=0.5,
        memory_efficiency=0.9,
        kernel_time=0.0,
        unaligned_efficiency=0.5,
    )
    compute = 4 * (gemm_time + vector_time)
    assert float(ds["time_compute"]) == pytest.approx(compute, rel=1e-9)
    assert float(ds["step_time"]) == pytest.approx(compute + update, rel=1e-9)
    assert float(ds["throughput"]) == pytest.approx(4 / (compute + update), rel=1e-9)
    assert float(ds["tokens_per_s"]) == pytest.approx(4 * S / (compute + update), rel=1e-9)
    assert float(ds["time_operator"].sum()) == pytest.approx(compute, rel=1e-9)
    # full recomputation reruns every layer kernel's forward: a third of the layers' GEMMs
    full = predict_parallel(
        "gpt2",
        FAST_MEMORY,
        gpus=1,
        micro_batch=1,
        batch_size=4,
        compute_efficiency=0.5,
        memory_efficiency=0.9,
        kernel_time=0.0,
        recompute="full",
    )
    layer_gemm = 24 * S * L * H**2 * (1 + S / (6 * H)) / (100e12 * 0.5)
    layer_vector_forward = (
        L * 2 * (2 * sh + 2 * sh + 2 * a * S * S + 2 * a * S * S + 3 * sh + 3 * sh + 2 * S * f)
    )
    layer_vector_forward += L * (a * S * S + 2 * sh)  # masks written
    recompute = 4 * (layer_gemm + layer_vector_forward / (1e6 * 1e9 * 0.9))
    assert float(full["time_recompute"]) == pytest.approx(recompute, rel=1e-9)


def test_tensor_parallel_allreduces_by_hand():
    # tp 2 in a node (NVLink3), micro-batch 4, one micro-batch: 4 allreduces x 12 layers of 2sbh bytes.
    msg = 2 * S * 4 * H
    assert tp_allreduce_bytes(S, 4, H) == msg == 6_291_456
    ds = predict_parallel("gpt2", "A100-80GB", gpus=8, tp=2, micro_batch=4, batch_size=16)
    assert float(ds["tp_comm_bytes"]) == 4 * L * msg == 301_989_888
    # NCCL inside one node over NVLink3 (NCCL's 20 of 25 GB/s per link: 240 GB/s), p = 2:
    #   ring/LL:     6.6 + 2 x 0.6 us,  busbw 240/4 = 60 GB/s    -> 7.8 us + msg / 60e9
    #   ring/LL128:  14 + 2 x 1.9 us,   busbw 240 x 0.92          -> 17.8 us + msg / 220.8e9
    #   ring/Simple: 8.4 + 2 x 3.4 us,  busbw 240                 -> 15.2 us + msg / 240e9
    # (algbw = busbw p / (2(p-1)) = busbw at p = 2); for 6.3 MB Simple wins
    one = 15.2e-6 + msg / 240e9
    assert one < 17.8e-6 + msg / 220.8e9 and one < 7.8e-6 + msg / 60e9
    assert float(ds["time_tp_comm"]) == pytest.approx(4 * L * one, rel=1e-9)
    full = predict_parallel("gpt2", "A100-80GB", gpus=8, tp=2, micro_batch=4, batch_size=16, recompute="full")
    assert float(full["tp_comm_bytes"]) == 6 * L * msg  # the recomputed forward's 2 again


def test_zero3_data_parallel_traffic_by_hand():
    params = catalog.workload("gpt2").params
    n = 2 * params  # 16-bit gradients and parameters (the ZeRO paper's accounting)
    ds = predict_parallel("gpt2", "A100-80GB", gpus=8, zero=3, batch_size=8, memory_convention="zero")
    # NCCL's ring inside one node of 8 on NVLink3 as NCCL sees it (20 of 25 GB/s per link: 240 GB/s):
    # ring/Simple 8.4 + 14 x 3.4 us at algbw 240 x 8/14 GB/s beats LL and LL128 for 249 MB; a
    # reduce-scatter or all-gather is half of it: 28 us + n x 7/8 / 240e9
    half = 28e-6 + n * 7 / 8 / 240e9
    # ZeRO-3 with one micro-batch: the gradients' reduce-scatter, the parameters' all-gather for
    # the forward and again for the backward
    assert float(ds["time_dp_comm"]) == pytest.approx(3 * half, rel=1e-12)
    assert float(ds["dp_comm_bytes"]) == pytest.approx(7 / 8 * 3 * n, rel=1e-12)
    assert float(ds["mem_params"]) == pytest.approx(2 * params / 8)
    assert float(ds["mem_grads"]) == pytest.approx(2 * params / 8)
    assert float(ds["mem_optimizer"]) == pytest.approx(12 * params / 8)
    plain = predict_parallel("gpt2", "A100-80GB", gpus=8, zero=0, batch_size=8, memory_convention="zero")
    assert float(plain["time_dp_comm"]) == pytest.approx(56e-6 + n * 14 / 8 / 240e9)
    # Megatron's bf16 default reduces fp32 gradients: twice the bytes
    megatron = predict_parallel("gpt2", "A100-80GB", gpus=8, zero=0, batch_size=8)
    assert float(megatron["time_dp_comm"]) == pytest.approx(56e-6 + 2 * n * 14 / 8 / 240e9)


def test_offload_pcie_traffic():
    params = catalog.workload("gpt2").params
    ds = predict_parallel("gpt2", "A100-80GB", gpus=8, zero=1, offload=True, batch_size=8)
    # Megatron's bf16: fp32 gradients (4 B) down, bf16 parameters (2 B) up, for this rank's shard
    assert float(ds["offload_bytes"]) == pytest.approx(params / 8 * 6)
    assert float(ds["time_offload"]) == pytest.approx(params / 8 * 6 / 31.5e9)  # PCIe4
    assert float(ds["mem_optimizer"]) == 0
    assert float(ds["mem_cpu_offload"]) == pytest.approx(12 * params / 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(gpus=5, tp=5), "must divide the 12 attention heads"),
        (dict(gpus=5, pp=5), "must divide the 12 layers"),
        (dict(gpus=8, dp=2, tp=2, pp=1), "!= gpus = 8"),
        (dict(gpus=6, tp=4), "does not divide gpus"),
        (dict(gpus=8, pp=2, zero=2), "ZeRO stages 0 and 1 only"),
        (dict(gpus=8, batch_size=12, micro_batch=1), "multiple of dp x micro_batch"),
        (dict(gpus=8, recompute="some"), "unknown recompute"),
    ],
)
def test_invalid_configurations(kwargs, message):
    with pytest.raises(DlexploreError, match=message):
        predict_parallel("gpt2", "A100-80GB", **kwargs)


def test_cnn_takes_data_parallelism_only():
    with pytest.raises(DlexploreError, match="only data parallelism"):
        predict_parallel("resnet50", "V100-16GB", gpus=8, tp=2, precision="fp16")
    ds = predict_parallel(
        "resnet50", "V100-16GB", gpus=8, zero=2, micro_batch=32, batch_size=256, precision="fp16"
    )
    wl = catalog.workload("resnet50")
    assert float(ds["mem_activations"]) == pytest.approx(wl.activation_bytes_per_sample * 0.5 * 32)
    assert math.isnan(float(ds["tokens_per_s"]))


def test_exercises():
    assert lab.solution(101).value == pytest.approx(16 * 13e9 / 64 / 1e9)  # 3.25 GB
    assert lab.solution(102).value == pytest.approx(7 / 39)
    assert lab.solution(103).value == pytest.approx(_SBH * 23 / 1e9)
    assert lab.check(101, 3.25).correct
    assert not lab.check(101, 28.84375).correct  # stage 2's figure
    assert lab.check(102, 0.1795).correct
    assert lab.check(103, 0.5788).correct
