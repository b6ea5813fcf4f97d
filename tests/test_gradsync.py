"""Gradient synchronisation as frameworks run it (dlexplore.model.gradsync), worked out by hand;
the catalog's published GEMM measurements and the fitted defaults behind the uncalibrated model."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlexplore as dlx
from dlexplore.catalog import Link
from dlexplore.errors import InputFileError
from dlexplore.model.gradsync import (
    horovod_delay,
    parameter_server_time,
    resolve_transport,
    server_load_fraction,
)

ROOT = Path(__file__).resolve().parents[1]


def test_vgg16s_first_fully_connected_layer_sits_whole_on_one_server():
    vgg = dlx.catalog.workload("vgg16")
    fc6 = 512 * 7 * 7 * 4096 + 4096  # classifier.0: 102,764,544 parameters
    share = fc6 / vgg.params
    np.testing.assert_allclose(server_load_fraction(vgg, [1, 2, 4, 16]), [1.0, share, share, share])
    # ResNet-50's largest layer (fc, 2.05M of 25.6M) leaves 4 servers nearly even
    resnet = dlx.catalog.workload("resnet50")
    assert 0.25 <= float(server_load_fraction(resnet, 4)) < 0.26


def test_parameter_server_time_by_hand():
    n, p, g, f, bw, a = 1e8, 16, 4, 0.5, 2.0, 1e-5
    # colocated: the busiest server's node link carries n (f (p - g) + g (1 - f)) = 8 n each way
    colocated = parameter_server_time(n, p, g, 4, f, True, bw, a)
    assert float(colocated) == pytest.approx(2 * a + 2 * 8 * n / 2e9)
    dedicated = parameter_server_time(n, p, g, 4, f, False, bw, a)
    assert float(dedicated) == pytest.approx(2 * a + 2 * 8 * n / 2e9)  # f p n = 8 n too
    assert float(parameter_server_time(n, p, g, 4, 0.25, False, bw, a)) == pytest.approx(
        2 * a + 2 * 4 * n / 2e9
    )
    # one worker still pushes and pulls its own bytes
    assert float(parameter_server_time(n, 1, 1, 1, 1.0, True, bw, a)) == pytest.approx(2 * a + 2 * n / 2e9)


def test_horovod_delay_and_transport():
    # half a 5 ms cycle, then 10 tensors negotiated up and down ceil(log2 64) = 6 tree levels
    assert float(horovod_delay(10, 64, 5e-3, 1e-5)) == pytest.approx(2.5e-3 + 10 * 6 * 1e-5)
    assert resolve_transport("auto", dlx.catalog.network("25GbE")) == "tcp"
    assert resolve_transport("auto", dlx.catalog.network("IB-HDR")) == "rdma"
    assert resolve_transport("rdma", dlx.catalog.network("25GbE")) == "rdma"
    assert resolve_transport("auto", None) == "rdma"


@pytest.mark.parametrize(
    ("gpu", "precision", "value", "rule"),
    [
        # DeepBench's SGEMM on its (PCIe) P100, 8.21 of 9.3 TFLOP/s, serves the SXM2 part
        ("P100", "fp32", 8.21 / 9.3, "measured on a Pascal GPU"),
        ("V100-16GB", "fp16", 83 / 125, "measured on this GPU"),
        ("A100-40GB", "bf16", 267.9 / 312, "measured on a Ampere GPU"),
        # TF32 runs on the same tensor cores as bf16: the A100's measured fraction
        ("A100-80GB", "tf32", 267.9 / 312, "same kind of unit, at bf16"),
        ("H100-SXM", "fp16", 792.1 / 989.4, "as bf16"),
        # Kepler has no row: the median over GPUs of each one's best large vector-unit row, P100
        # 8.21/9.3, V100 11.86/15.7 and the H200's 51.3/67
        ("K80", "fp32", 51.3 / 67, "median of the published vector-unit GEMMs"),
        # the H200's own rows (benchmarks/gpu_kernels.py): the best large product, 751.4 of 989.4
        ("H200", "bf16", 751.4 / 989.4, "measured on this GPU"),
        ("H200", "tf32", 356.2 / 494.7, "measured on this GPU"),
    ],
)
def test_gemm_plateau_from_published_measurements(gpu, precision, value, rule):
    found = dlx.catalog.gemm_efficiency(gpu, precision)
    assert found.value == pytest.approx(value)
    assert rule in found.rule
    assert found.source
    table = dlx.catalog.gemm_measurements()
    assert set(table.columns) >= {"gpu", "precision", "tflops", "source", "efficiency"}
    assert (table["source"].str.len() > 20).all()


def test_network_catalog_efficiency_and_fabric(tmp_path):
    nvlink4 = dlx.catalog.network("NVLink4")
    assert nvlink4.efficiency == pytest.approx(20.6 / 25)  # NCCL's SM90_NVLINK_BW per 25 GB/s link
    assert (nvlink4.fabric, nvlink4.reduction) == ("nvlink", "nvls")
    assert dlx.catalog.network("PCIe3").efficiency == pytest.approx(12.0 / 15.75, abs=1e-3)
    assert Link("x", "network", 1.0, 1e-6, "test").efficiency == 1.0  # the default
    bad = tmp_path / "links.csv"
    bad.write_text(
        "name,kind,bandwidth_gbs,latency_s,efficiency,source\nmylink,intra,10,1e-6,1.5,test\n",
        encoding="utf-8",
    )
    with pytest.raises(InputFileError, match=r"efficiency: expected a fraction in \(0, 1\]"):
        dlx.catalog.hardware.read_csv(bad, "networks")
    ok = tmp_path / "ok.csv"
    ok.write_text(
        "name,kind,bandwidth_gbs,latency_s,efficiency,fabric,source\nmylink,intra,10,1e-6,,nvlink,test\n",
        encoding="utf-8",
    )
    (link,) = dlx.catalog.hardware.read_csv(ok, "networks")
    assert (link.efficiency, link.fabric) == (1.0, "nvlink")  # a blank optional cell: the default


def test_defaults_file_says_where_each_value_comes_from():
    defaults = dlx.catalog.model_defaults()
    assert set(defaults) >= {
        "memory_efficiency",
        "kernel_time",
        "winograd_speedup",
        "tcp_efficiency",
        "ps_efficiency",
        "cycle_time",
        "negotiation_time",
        "flash_efficiency",
        "unaligned_efficiency",
    }
    for d in defaults.values():
        assert d.units and d.meaning and d.source
        assert np.isfinite(d.value)
    text = (ROOT / "data" / "catalog" / "defaults.csv").read_text(encoding="utf-8")
    assert "written by benchmarks/fit_defaults.py" in text
    fitted = [d for d in defaults.values() if d.source.startswith("fitted")]
    held = [d for d in defaults.values() if not d.source.startswith("fitted")]
    assert fitted and held
    assert all(np.isfinite(d.stderr) for d in fitted) and all(math.isnan(d.stderr) for d in held)


def _fitted_rows() -> dict[tuple[str, str], tuple[float, float]]:
    import csv

    path = ROOT / "data" / "catalog" / "gemm_fitted.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        return {(r["gpu"], r["precision"]): (float(r["efficiency"]), float(r["stderr"])) for r in rows}


@pytest.mark.parametrize(
    ("gpu", "precision", "rule"),
    [
        ("A100-80GB", "fp16", "fitted to bundled training runs on this GPU"),
        ("A100-80GB", "bf16", "on this GPU, at fp16"),  # the same peak
        ("A100-80GB", "tf32", "on this GPU, at fp16"),  # the same tensor cores
        ("A100-40GB", "bf16", "on a Ampere GPU, at fp16"),
    ],
)
def test_the_models_plateau_is_the_one_fitted_to_bundled_runs(gpu, precision, rule):
    """Where the bundled LLM tables measured a GPU, its 16-bit plateau is the fitted one (as
    data/catalog/gemm_fitted.csv records it), below the tuned library's published best, and the
    model's default compute efficiency is that plateau."""
    value, stderr = _fitted_rows()[("A100-80GB", "fp16")]
    found = dlx.catalog.gemm_plateau(gpu, precision)
    assert found.value == value and rule in found.rule and "korthikanti" in found.source
    assert (
        0 < stderr < value < dlx.catalog.gemm_efficiency(gpu, precision).value == pytest.approx(267.9 / 312)
    )
    ds = dlx.predict(workload="resnet50", gpu=gpu, gpus=1, batch_size=64, precision=precision)
    assert float(ds.compute_efficiency) == value


def test_a_prediction_says_where_its_default_plateau_comes_from():
    """The ``source`` of ``compute_efficiency``: per GPU and precision, the fitted or published rule
    that served; none where the caller gave the value."""
    ds = dlx.predict(
        workload="resnet50", gpu=["A100-80GB", "V100-16GB"], gpus=8, batch_size=64, precision="fp16"
    )
    said = ds.compute_efficiency.attrs["source"]
    fitted = _fitted_rows()[("A100-80GB", "fp16")][0]
    assert f"A100-80GB fp16: default {fitted:.3g}, fitted to bundled training runs on this GPU" in said
    assert f"V100-16GB fp16: default {83 / 125:.3g}, measured on this GPU" in said
    given = dlx.predict(workload="resnet50", gpu="A100-80GB", gpus=8, batch_size=64, compute_efficiency=0.5)
    assert "source" not in given.compute_efficiency.attrs
    llm = dlx.predict_parallel(workload="gpt2-1.5b", gpu="A100-40GB", gpus=64, tp=1, pp=2, batch_size=512)
    assert "fitted to bundled training runs on a Ampere GPU" in llm.compute_efficiency.attrs["source"]


def test_a_plateau_fitted_on_tensor_cores_does_not_serve_vector_units():
    """An Ampere card of the user's whose 16-bit arithmetic runs on its vector units (fp16 at twice
    fp32, not on tensor cores) is not served by the A100's tensor-core plateau: it takes the
    published rules, as fp32 on the A100 does."""
    import dataclasses

    card = dataclasses.replace(
        dlx.catalog.gpu("A100-40GB"), name="A100-vector-fp16", fp16_tflops=39.0, bf16_tflops=39.0
    )
    for precision in ("fp16", "fp32"):
        found = dlx.catalog.gemm_plateau(card, precision)
        assert "fitted" not in found.rule
        assert found == dlx.catalog.gemm_efficiency(card, precision)
    assert "fitted" not in dlx.catalog.gemm_plateau("A100-80GB", "fp32").rule


def test_published_plateaus_turns_the_fitted_ones_off_for_the_fit_that_writes_them():
    fitted = dlx.catalog.gemm_plateau("A100-80GB", "fp16")
    with dlx.catalog.published_plateaus():
        assert dlx.catalog.gemm_plateau("A100-80GB", "fp16").value == pytest.approx(267.9 / 312)
        ds = dlx.predict(workload="resnet50", gpu="A100-80GB", gpus=1, batch_size=64, precision="fp16")
        assert float(ds.compute_efficiency) == pytest.approx(267.9 / 312)
    assert dlx.catalog.gemm_plateau("A100-80GB", "fp16") == fitted


@pytest.mark.parametrize(
    ("gpu", "precision"), [("V100-16GB", "fp16"), ("H100-SXM", "bf16"), ("P100", "fp32")]
)
def test_a_gpu_no_bundled_run_measured_keeps_its_published_plateau(gpu, precision):
    assert not any(g == gpu for g, _ in _fitted_rows())
    assert dlx.catalog.gemm_plateau(gpu, precision) == dlx.catalog.gemm_efficiency(gpu, precision)


def test_fit_defaults_reproduces_the_committed_file():
    """The defaults and the fitted GEMM plateaus are what benchmarks/fit_defaults.py fits to the
    bundled tables (about 20 s)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fit_defaults.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_fit_defaults_holds_out_the_training_tables_of_a_gpu_whose_plateau_is_fitted():
    """A training table with a GPU of an architecture whose GEMM plateau the hybrid tables fit is
    not fitted (its defaults would have to be fitted with that plateau): it judges them out of
    sample, and the defaults file says so; every other training table is fitted."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import fit_defaults
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    architecture = {g.name: g.architecture for g in dlx.catalog.GPUS}
    fitted_architectures = {architecture[g] for g, _ in _fitted_rows()}
    assert fitted_architectures == {"Ampere"}  # the hybrid tables' A100s
    held = fit_defaults.held_out_tables()
    assert set(held) == {"nvidia-pytorch-bert-large", "nvidia-pytorch-resnet50-v1.5"}
    fitted = fit_defaults.training_tables()
    for name in dlx.measured.available():
        table = dlx.measured.load(name)
        if table.attrs["table"] != "training":
            continue
        on_fitted_gpu = any(
            architecture[str(g)] in fitted_architectures for g in np.unique(table["gpu"].values)
        )
        assert (name in held) == on_fitted_gpu and (name in fitted) == (not on_fitted_gpu), name
    text = (ROOT / "data" / "catalog" / "defaults.csv").read_text(encoding="utf-8")
    header = text.split("\nparameter,")[0]
    assert all(f"#   {name} (" in header for name in held)
    assert not any(f"#   {name}: " in header for name in held)  # no in-sample MAPE for them


def _architecture_rows() -> dict[tuple[str, str], float]:
    import csv

    path = ROOT / "data" / "catalog" / "defaults_by_architecture.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        return {(r["architecture"], r["parameter"]): float(r["value"]) for r in rows}


def test_a_gpu_takes_its_architectures_fitted_kernel_time():
    """data/catalog/defaults_by_architecture.csv's Pascal kernel time serves every Pascal GPU, in
    dlexplore.predict and in the measured tables' point model alike; other architectures and GPUs
    the catalog lacks take defaults.csv's. The kernel time is added once per kernel, so the step
    of one GPU grows by (kernels) x (the difference)."""
    from dlexplore.model.operator_table import operator_table

    pascal = _architecture_rows()[("Pascal", "kernel_time")]
    general = dlx.catalog.model_defaults()["kernel_time"].value
    assert pascal > 10 * general
    for gpu in ("P100", "P100-PCIe", "GTX1080Ti"):
        assert dlx.catalog.model_default("kernel_time", gpu) == pascal
    for gpu in ("V100-16GB", "A100-80GB", "no-such-gpu", None):
        assert dlx.catalog.model_default("kernel_time", gpu) == general
    setup = dict(workload="resnet50", gpus=1, batch_size=64, precision="fp32")
    default = dlx.predict(gpu="P100", **setup)
    assert default.kernel_time.attrs["source"].startswith(
        f"P100: default {pascal:.3g}, fitted for Pascal GPUs"
    )
    assert dlx.predict(gpu="A100-80GB", **setup).kernel_time.attrs["source"].endswith("defaults.csv")
    assert float(default.step_time) == float(dlx.predict(gpu="P100", kernel_time=pascal, **setup).step_time)
    kernels = operator_table("resnet50", "fp32").kernels.sum()
    at_general = dlx.predict(gpu="P100", kernel_time=general, **setup)
    grown = float(default.step_time - at_general.step_time)
    assert grown == pytest.approx(kernels * (pascal - general), rel=1e-9)
    points = dlx.fit.predict_points("tf-benchmarks-2017-dgx1")
    one = points.isel(
        point=int(np.flatnonzero((points.gpus.values == 1) & (points.workload.values == "resnet50"))[0])
    )
    assert float(one.throughput) == pytest.approx(float(default.throughput), rel=1e-9)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("Pascal,kernel_tim,1e-4,,3,typo\n", r"line 2: 'kernel_tim' is not a parameter"),
        ("Pascall,kernel_time,1e-4,,3,typo\n", r"line 2: 'Pascall' is not the architecture of a catalog GPU"),
        (
            "Pascal,kernel_time,1e-4,,3,a\nPascal,kernel_time,2e-4,,3,b\n",
            r"line 3: a second Pascal kernel_time",
        ),
    ],
)
def test_defaults_by_architecture_are_checked(tmp_path, monkeypatch, rows, message):
    path = tmp_path / "catalog" / "defaults_by_architecture.csv"
    path.parent.mkdir()
    (path.parent / "defaults.csv").write_text((ROOT / "data" / "catalog" / "defaults.csv").read_text("utf-8"))
    path.write_text("architecture,parameter,value,stderr,points,source\n" + rows)
    monkeypatch.setattr("dlexplore.catalog.defaults.data_dir", lambda: tmp_path)
    dlx.catalog.model_defaults.cache_clear()
    dlx.catalog.architecture_defaults.cache_clear()
    try:
        with pytest.raises(InputFileError, match=r"defaults_by_architecture\.csv, " + message):
            dlx.catalog.architecture_defaults()
    finally:
        dlx.catalog.model_defaults.cache_clear()
        dlx.catalog.architecture_defaults.cache_clear()
