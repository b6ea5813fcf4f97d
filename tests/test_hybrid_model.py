"""The hybrid model's schedules, memory conventions and communication, against the published
formulas and numbers worked out by hand:

- Megatron Core's Distributed Optimizer guide: bytes per parameter 20 (fp16 parameters and
  gradients), 18 (16-bit parameters, fp32 gradients), 16 (fp32); with the distributed optimizer
  4 + 16/d, 6 + 12/d, 8 + 8/d;
- Korthikanti et al. (2022): activations per layer (Table 2) for every recomputation mode with and
  without sequence parallelism, ``L`` layers' worth on the first 1F1B stage, times
  ``1 + (p - 1)/(p v)`` with the interleaved schedule; GPipe keeps all ``m`` micro-batches;
- Narayanan et al. (2021): bubble ``(p - 1)/(v m)``, ``v`` times the point-to-point messages with
  interleaving;
- NCCL's cost model (tuning.cc) for a tensor-parallel group spanning two nodes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlexplore import catalog
from dlexplore.errors import DlexploreError
from dlexplore.model.parallel import model_state_bytes, predict_parallel
from dlexplore.model.pipeline import bubble_overhead, layers_in_flight, micro_batches_in_flight
from dlexplore.model.states import state_bytes_per_param

# GPT-3 175B (Korthikanti et al.'s Table 3): s, h, a, L, V; t = 8, p = 8, one sequence per micro-batch
S, H, A, L, V = 2048, 12288, 96, 96, 51200
GPT3 = catalog.transformer(L, H, A, S, V, causal=True, name="gpt3-175b")
SBH = S * H


@pytest.mark.parametrize(
    ("precision", "convention", "plain", "distributed"),
    [
        ("fp16", "megatron", 20, (4, 16)),  # fp16 parameters, fp16 gradients
        ("bf16", "megatron", 18, (6, 12)),  # bf16 parameters, fp32 gradients
        ("fp16", "megatron-fp32-grads", 18, (6, 12)),
        ("fp32", "megatron", 16, (8, 8)),
        ("bf16", "zero", 16, (4, 12)),  # Rajbhandari et al.: 2 + 2 + K, K = 12
    ],
)
def test_bytes_per_parameter_as_megatron_counts_them(precision, convention, plain, distributed):
    assert sum(state_bytes_per_param(precision, "adam", convention).values()) == plain
    for d in (1, 8, 64):
        one = model_state_bytes(1.0, d, 0, precision=precision, convention=convention)
        dist = model_state_bytes(1.0, d, 1, precision=precision, convention=convention)
        assert float(sum(one[k] for k in ("params", "grads", "optimizer"))) == plain
        fixed, sharded = distributed
        assert float(sum(dist[k] for k in ("params", "grads", "optimizer"))) == fixed + sharded / d


def test_model_states_of_gpt3_on_the_distributed_optimizer():
    # 8 x 8 x 4 = 256 GPUs: each rank holds P / 64 parameters, Adam's state sharded over dp = 4
    ds = predict_parallel(GPT3, "A100-80GB", gpus=256, tp=8, pp=8, batch_size=64, zero=1, precision="bf16")
    p_rank = GPT3.params / 64
    assert float(ds["mem_params"]) == 2 * p_rank
    assert float(ds["mem_grads"]) == 4 * p_rank
    assert float(ds["mem_optimizer"]) == pytest.approx(12 * p_rank / 4, rel=1e-15)
    assert "18 B/param" in ds.attrs["memory_convention"]
    fp16 = predict_parallel(GPT3, "A100-80GB", gpus=256, tp=8, pp=8, batch_size=64, zero=1, precision="fp16")
    assert float(fp16["mem_params"] + fp16["mem_grads"] + fp16["mem_optimizer"]) == pytest.approx(
        (4 + 16 / 4) * p_rank, rel=1e-15
    )
    assert "20 B/param" in fp16.attrs["memory_convention"]


def _korthikanti_layer(recompute: str, sp: bool, t: int = 8) -> float:
    """Table 2 of Korthikanti et al., bytes of one layer for one micro-batch of one sequence."""
    if recompute == "full":
        return 2 * SBH / (t if sp else 1)
    scores = 5 * A * S / H if recompute == "none" else 0
    return SBH / t * (34 + scores) if sp else SBH * (10 + 24 / t + scores / t)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize(("schedule", "virtual"), [("1f1b", 1), ("interleaved", 3), ("gpipe", 1)])
def test_activations_within_5_percent_of_korthikanti(recompute, sp, schedule, virtual):
    # 64 GPUs = t 8 x p 8, global batch 64 -> m = 64 micro-batches of one sequence
    ds = predict_parallel(
        GPT3,
        "A100-80GB",
        gpus=64,
        tp=8,
        pp=8,
        batch_size=64,
        recompute=recompute,
        sequence_parallel=sp,
        schedule=schedule,
        virtual_stages=virtual,
        precision="bf16",
    )
    layer = _korthikanti_layer(recompute, sp)
    p, m = 8, 64
    # Korthikanti et al.: the first stage keeps L layers with 1F1B, L (1 + (p-1)/(pv)) interleaved;
    # GPipe keeps every micro-batch of its L/p layers
    layers = {"1f1b": L, "interleaved": L * (1 + (p - 1) / (p * virtual)), "gpipe": m * L / p}
    published = layer * layers[schedule]
    got = float(ds["mem_activations_first"])
    assert abs(got / published - 1) <= 0.05
    # and exactly: the layers, plus the embedding's dropout mask (sbh, /t with sequence
    # parallelism) for each micro-batch the first stage holds
    held = {"1f1b": p, "interleaved": (virtual * p + p - 1) / virtual, "gpipe": m}[schedule]
    first = published + SBH / (8 if sp else 1) * held
    # the last stage: its L/p layers, the output layer's 4 sbh (/t with SP) and fp32 logits 4 s V / t
    last_held = {"1f1b": 1, "interleaved": ((virtual - 1) * p + 1) / virtual, "gpipe": m}[schedule]
    last = (layer * L / p + 4 * SBH / (8 if sp else 1) + 4 * S * V / 8) * last_held
    assert got == pytest.approx(first, rel=1e-12)
    # the most loaded stage is what must fit: with GPipe, the last one holds every micro-batch's
    # fp32 logits too
    assert float(ds["mem_activations"]) == pytest.approx(max(first, last), rel=1e-12)


def test_schedule_helpers_by_hand():
    # Megatron-LM's warm-up on the first stage: 2 (p - 1) + (v - 1) p chunk forwards, plus one
    assert float(micro_batches_in_flight("interleaved", 4, 16, 2)) == (2 * 3 + 4 + 1) / 2
    assert float(layers_in_flight("interleaved", 32, 4, 16, 2)) == pytest.approx(32 * (1 + 3 / 8))
    assert float(micro_batches_in_flight("1f1b", 4, 2)) == 2  # fewer micro-batches than stages
    assert float(micro_batches_in_flight("1f1b", 4, 16, stage=3)) == 1
    assert float(bubble_overhead(8, 64, 3)) == pytest.approx(7 / 192)


def test_interleaving_shrinks_the_bubble_and_multiplies_the_messages():
    kw = dict(gpus=8, tp=2, pp=4, micro_batch=1, batch_size=8, precision="bf16")
    plain = predict_parallel("gpt2", "A100-80GB", schedule="1f1b", **kw)
    inter = predict_parallel("gpt2", "A100-80GB", schedule="interleaved", virtual_stages=3, **kw)
    m = 8
    assert float(plain["bubble_overhead"]) == pytest.approx(3 / 8)
    assert float(inter["bubble_overhead"]) == pytest.approx(3 / (3 * 8))
    for ds, v in ((plain, 1), (inter, 3)):
        t_mb = float(ds["time_compute"] + ds["time_tp_comm_exposed"] + ds["time_pp_comm"]) / m
        assert float(ds["time_bubble"]) == pytest.approx((4 - 1) / v * t_mb, rel=1e-12)
        # each micro-batch crosses v chunk boundaries per stage, forward and backward: s b h / t
        # bf16 bytes per tensor-parallel rank (Megatron's scatter/gather)
        assert float(ds["pp_comm_bytes"]) == pytest.approx(m * 2 * v * 1024 * 768 * 2 / 2)
    assert float(inter["time_pp_comm"]) == pytest.approx(3 * float(plain["time_pp_comm"]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(schedule="interleaved", virtual_stages=4, pp=4, gpus=4, batch_size=8),
            "equal chunks",
        ),  # 12 / 4 = 3 layers per stage cannot make 4 chunks
        (dict(schedule="interleaved", virtual_stages=3, pp=4, gpus=4, batch_size=6), "multiple of pp = 4"),
        (dict(schedule="1f1b", virtual_stages=2, pp=4, gpus=4, batch_size=8), "interleaved"),
        (dict(memory_convention="lots", gpus=1), "unknown memory_convention"),
    ],
)
def test_schedule_rules(kwargs, message):
    with pytest.raises(DlexploreError, match=message):
        predict_parallel("gpt2", "A100-80GB", **kwargs)


def test_sequence_parallel_communication():
    # Korthikanti et al. 4.2.2: a reduce-scatter plus an all-gather take the ring allreduce's
    # time; the backward re-gathers the two column-parallel inputs (2 all-gathers per layer)
    kw = dict(gpus=4, tp=4, micro_batch=2, batch_size=2, precision="bf16")
    plain = predict_parallel("gpt2", "A100-80GB", **kw)
    sp = predict_parallel("gpt2", "A100-80GB", sequence_parallel=True, **kw)
    n = 1024 * 2 * 768 * 2
    assert float(sp["time_tp_comm"]) == pytest.approx(float(plain["time_tp_comm"]), rel=1e-12)
    assert float(plain["tp_comm_bytes"]) == pytest.approx(12 * 4 * 2 * 3 / 4 * n)
    assert float(sp["tp_comm_bytes"]) == pytest.approx(12 * (4 * 2 + 2) * 3 / 4 * n)
    assert float(sp["mem_activations"]) < float(plain["mem_activations"])


def test_tensor_parallel_group_across_two_nodes_uses_the_network():
    # tp = 4 over nodes of 2 GPUs: NCCL's ring over 2 nodes (N = 2, 2 per node) on IB-HDR (25 GB/s
    # at NCCL's NIC speed, 0.6 us), bus bandwidth min(240, 25); per candidate (tuning.cc):
    #   ring latency base + (2(p-1) - 2N) hop_nvlink + 2N (hop_net + 0.6 us), algbw bus f p/(2(p-1))
    #   tree latency base + 2 ((p/N - 1) hop_nvlink + log2(N) (hop_net + 0.6)), algbw bus f / 2
    n = 1024 * 1 * 768 * 2  # one s b h bf16 tensor
    us = 1e-6
    ring = {
        "LL": (6.6 + 2 * 0.6 + 4 * 3.3, 0.25),
        "LL128": (14 + 2 * 1.9 + 4 * 4.6, 0.92),
        "Simple": (8.4 + 2 * 3.4 + 4 * 14.6, 1.0),
    }
    tree = {
        "LL": (6.8 + 2 * (0.6 + 5.6), 0.92 / 3.8),
        "LL128": (14 + 2 * (1.25 + 9.1), 0.92 * 120 / 128),
        "Simple": (2 * (28 + 28.6), 0.92),
    }
    times = [lat * us + n / (25e9 * f * 4 / 6) for lat, f in ring.values()]
    times += [lat * us + n / (25e9 * f / 2) for lat, f in tree.values()]
    one = min(times)
    assert one == pytest.approx(36.2e-6 + n / (25e9 * 0.92 * 4 / 6))  # ring LL128 wins
    ds = predict_parallel("gpt2", "A100-80GB", gpus=4, tp=4, gpus_per_node=2, batch_size=1)
    assert float(ds["time_tp_comm"]) == pytest.approx(4 * 12 * one, rel=1e-12)
    inside = predict_parallel("gpt2", "A100-80GB", gpus=4, tp=4, gpus_per_node=4, batch_size=1)
    assert float(inside["time_tp_comm"]) < float(ds["time_tp_comm"]) / 3


def test_overlap_of_tensor_and_data_parallel_communication():
    kw = dict(gpus=16, tp=2, micro_batch=4, batch_size=32, precision="bf16", gpus_per_node=8)
    base = predict_parallel("gpt2", "A100-80GB", **kw)
    t_tp = float(base["time_tp_comm"])
    assert float(base["time_tp_comm_exposed"]) == t_tp
    half = predict_parallel("gpt2", "A100-80GB", tp_overlap=0.5, **kw)
    # gpt2's GEMMs take longer than its tensor-parallel collectives: exposed = t - 0.5 t
    assert float(half["time_tp_comm_exposed"]) == pytest.approx(0.5 * t_tp, rel=1e-12)
    assert float(base["step_time"] - half["step_time"]) == pytest.approx(0.5 * t_tp, rel=1e-9)
    hidden = predict_parallel("gpt2", "A100-80GB", overlap=1.0, **kw)
    t_dp = float(base["time_dp_comm"])
    assert float(base["time_dp_comm_exposed"]) == pytest.approx(t_dp, rel=1e-12)
    # hidden behind the last micro-batch's backward as far as it lasts
    saved = float(base["step_time"] - hidden["step_time"])
    assert 0 < saved <= t_dp
    assert float(hidden["time_dp_comm_exposed"]) == pytest.approx(t_dp - saved, rel=1e-9)


def test_sweeps_equal_the_single_configurations():
    ds = predict_parallel(
        "gpt2",
        "A100-80GB",
        gpus=8,
        tp=[1, 2, 4, 5],
        pp=[1, 2],
        batch_size=16,
        micro_batch=[1, 2],
        recompute=["none", "full"],
    )
    assert ds["step_time"].dims == ("tp", "pp", "micro_batch", "recompute")
    for tp in (1, 2, 4):
        for pp in (1, 2):
            one = predict_parallel(
                "gpt2", "A100-80GB", gpus=8, tp=tp, pp=pp, batch_size=16, micro_batch=2, recompute="full"
            )
            cell = ds.sel(tp=tp, pp=pp, micro_batch=2, recompute="full")
            for name in ("step_time", "mem_total", "tp_comm_bytes", "dp_comm_bytes", "mfu"):
                assert float(cell[name]) == pytest.approx(float(one[name]), rel=1e-12), name
            assert int(cell["dp"]) == 8 // (tp * pp)
    # tp = 5 divides neither the 12 heads nor the 8 GPUs: NaN, not valid
    assert not ds["valid"].sel(tp=5).any()
    assert np.isnan(ds["step_time"].sel(tp=5)).all()
    assert ds["valid"].sel(tp=[1, 2, 4]).all()


def test_hardware_flops_count_the_recomputed_forward_as_narayanan_eq_3():
    # Narayanan et al. eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) FLOPs per iteration with full
    # recomputation
    ds = predict_parallel(GPT3, "A100-80GB", gpus=64, tp=8, pp=8, batch_size=64, recompute="full")
    flops = 96 * 64 * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H))
    assert float(ds["hardware_flops_per_gpu"]) == pytest.approx(
        flops / float(ds["step_time"]) / 64, rel=1e-12
    )
    model = 72 * 64 * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H))  # 3 F x batch
    assert float(ds["mfu"]) == pytest.approx(model / float(ds["step_time"]) / 64 / 312e12, rel=1e-12)
    assert math.isclose(float(ds["peak_flops"]), 312e12)
