"""Device time by kernel (dlexplore.traces.kernels) on real traces. Expected numbers are read from
the JSON with the standard library ("kernel" and "gpu_memset" events, their "dur" in us):

  h200-gpt2-b8: 2,212 kernels, 112,357.015 us; 238 sets, 228.86 us; 6 kernels named "..._align1"
                (three CUTLASS bf16 GEMMs, twice each), 30,730.276 us.
  h200-resnet50-b64: 530 "batch_norm" kernels, 12,946.079 us.
  HTA's trace_diff test trace: 64 NCCL kernels (ncclKernel_AllReduce_RING_LL_Sum_float and
                ncclKernel_SendRecv_RING_SIMPLE_Sum_int8), 251,341 us.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from _real_traces import real

from dlexplore.cli import main
from dlexplore.traces import load_trace
from dlexplore.traces.kernels import kind_of

PYTORCH = Path(__file__).parent / "data" / "traces" / "pytorch-gpu"


@pytest.fixture(scope="module")
def gpt2():
    return load_trace(PYTORCH / "h200-gpt2-b8", cache=False)


def test_every_device_microsecond_is_in_one_kind(gpt2):
    kinds = gpt2.kernel_breakdown()
    assert kinds["time"].sum() == pytest.approx((112_357.015 + 228.86) * 1e-6)
    assert kinds["share"].sum() == pytest.approx(1.0) and kinds["count"].sum() == 2212 + 238
    memset = kinds.set_index("kind").loc["memset"]
    assert (memset["count"], memset["time"]) == (238, pytest.approx(228.86e-6))
    assert kinds.attrs["units"]["time"] == "s"


def test_unaligned_gemms_of_gpt2s_language_model_head(gpt2):
    """The three align1 CUTLASS GEMMs: 2 bytes of alignment (1 bf16 element), 30.73 ms of 112.6."""
    table = gpt2.kernels()
    unaligned = table[table["alignment"] < 16]
    assert len(unaligned) == 3 and set(unaligned["kind"]) == {"gemm"} and set(unaligned["alignment"]) == {2.0}
    assert unaligned["count"].tolist() == [2, 2, 2]
    assert unaligned["time"].sum() == pytest.approx(30_730.276e-6)
    assert table["time"].is_monotonic_decreasing  # the most time first


def test_kinds_of_resnet50_and_of_an_nccl_trace():
    resnet = load_trace(PYTORCH / "h200-resnet50-b64", cache=False).kernels()
    norms = resnet[resnet["name"].str.contains("batch_norm")]
    assert set(norms["kind"]) == {"norm"} and norms["count"].sum() == 530
    assert norms["time"].sum() == pytest.approx(12_946.079e-6)
    hta = load_trace(real("pytorch/HolisticTraceAnalysis__trace_diff__test__test.json.gz"), cache=False)
    comm = hta.kernel_breakdown().set_index("kind").loc["communication"]
    assert (comm["count"], comm["kernels"]) == (64, 2) and comm["time"] == pytest.approx(0.251341)


@pytest.mark.parametrize(
    "name, kind",
    [
        # names from the H200 traces (cuDNN's SDPA kernels are "fprop" too) and from cuDNN/cuBLAS
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64", "attention"),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)", "other"),
        ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "conv"),
        ("void cudnn::detail::convolve_common_engine_float_NHWC<float, float>", "conv"),
        ("ampere_sgemm_128x64_tn", "gemm"),
        ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float>", "norm"),
        ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16>", "elementwise"),
        ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel", "other"),
        # torch.compile's Triton kernels (Inductor's names) and ROCm's libraries
        ("triton_poi_fused_add_gelu_0", "elementwise"),
        ("triton_per_fused_native_layer_norm_1", "norm"),
        ("triton_tem_fused_mm_2", "gemm"),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1", "gemm"),
        ("miopenSp3AsmConv_v30_3_1_gfx9_fp32_f2x3_stride1", "conv"),
        # from HTA's and kineto's real traces (V100, A100): cuDNN 7/8 kernels
        ("volta_scudnn_128x128_stridedB_splitK_small_nn_v1", "conv"),
        ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "conv"),
        ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float)", "norm"),
        (
            "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(cudnn::ops::params)",
            "elementwise",
        ),
        ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int)", "elementwise"),
        (
            "void epilogue::impl::globalKernel<float, float, float, true, true>(int, cublasLtEpilogue_t)",
            "gemm",
        ),
    ],
)
def test_kind_of_a_kernel_name(name, kind):
    assert kind_of(name) == kind


def test_cli_trace_kernels(capsys):
    assert (
        main(
            [
                "trace",
                "kernels",
                str(PYTORCH / "h200-gpt2-b8"),
                "--by",
                "name",
                "--top",
                "3",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(table) == 3 and table["alignment"].tolist() == [2.0, 2.0, 2.0]
    assert main(["trace", "kernels", str(PYTORCH / "h200-resnet50-b64")]) == 0
    out = capsys.readouterr().out
    assert "share [%]" in out and "time [ms]" in out and out.splitlines()[3].split()[1] == "norm"
    assert "aligned to under 16 bytes" not in out  # ResNet-50's GEMMs are aligned
    assert main(["trace", "kernels", str(PYTORCH / "h200-gpt2-b8")]) == 0
    said = capsys.readouterr().out.splitlines()[1]
    assert said.startswith("# 3 GEMM kernel(s) for operands aligned to under 16 bytes ran 30.730 ms, 27%")
