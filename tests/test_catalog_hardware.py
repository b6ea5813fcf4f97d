"""The GPU, link/network and storage catalogs: ids, data-sheet values, sanity, and the CSV reader."""

from __future__ import annotations

import math
import re
import time

import pandas as pd
import pytest

from dlexplore._data import data_dir
from dlexplore.catalog import (
    GPU,
    GPUS,
    NETWORKS,
    STORAGE,
    Link,
    StorageTier,
    gpu,
    gpus,
    network,
    networks,
    storage,
    storages,
)
from dlexplore.catalog.hardware import LINK_KINDS, STORAGE_SCOPES, infer_kind, read_csv
from dlexplore.errors import DlexploreError, InputFileError, UnknownNameError

GIB = 2**30

GPU_IDS = [
    "K20X", "K40", "K80", "P100", "P100-PCIe", "V100-16GB", "V100-32GB", "A100-40GB", "A100-80GB",
    "H100-SXM", "H200", "GTX1080Ti", "MI250X", "MI250X-GCD",
]  # fmt: skip
INTRA_IDS = ["PCIe3", "PCIe4", "PCIe5", "NVLink1", "NVLink2", "NVLink3", "NVLink4"]
NETWORK_IDS = [
    "10GbE", "25GbE", "40GbE", "50GbE", "100GbE", "200GbE", "400GbE",
    "IB-FDR", "IB-EDR", "IB-HDR", "IB-NDR", "OmniPath", "Slingshot",
]  # fmt: skip
STORAGE_IDS = ["pfs", "burst-buffer", "nvme", "page-cache"]


def _spellings(name: str) -> list[str]:
    return [name, name.lower(), name.upper(), name.replace("-", "_"), name.replace("-", " "),
            f"  {name}  "]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Ids and aliases


@pytest.mark.parametrize("name", GPU_IDS)
def test_every_gpu_id_resolves(name):
    for spelling in _spellings(name):
        assert gpu(spelling).name == name


@pytest.mark.parametrize("name", INTRA_IDS + NETWORK_IDS)
def test_every_network_id_resolves(name):
    for spelling in _spellings(name):
        assert network(spelling).name == name


@pytest.mark.parametrize("name", STORAGE_IDS)
def test_every_storage_id_resolves(name):
    for spelling in _spellings(name):
        assert storage(spelling).name == name


@pytest.mark.parametrize(
    "alias, name",
    [
        ("K80-die", "K80"),
        ("tesla_k40m", "K40"),
        ("P100-SXM2", "P100"),
        ("V100-SXM2-32GB", "V100-32GB"),
        ("A100 SXM4 80GB", "A100-80GB"),
        ("H100-SXM5", "H100-SXM"),
        ("GTX 1080 Ti", "GTX1080Ti"),
        ("MI250X-die", "MI250X-GCD"),
        ("mi250x-oam", "MI250X"),
    ],
)
def test_gpu_aliases(alias, name):
    assert gpu(alias).name == name


@pytest.mark.parametrize(
    "alias, name",
    [
        ("pcie-gen3", "PCIe3"),
        ("PCIe 4.0", "PCIe4"),
        ("nvlink-p100", "NVLink1"),
        ("nvlink-v100", "NVLink2"),
        ("NVLink_A100", "NVLink3"),
        ("nvlink-h100", "NVLink4"),
        ("100gbe", "100GbE"),
        ("25G-Ethernet", "25GbE"),
        ("fdr", "IB-FDR"),
        ("edr", "IB-EDR"),
        ("ib-edr", "IB-EDR"),
        ("infiniband-edr", "IB-EDR"),
        ("InfiniBand HDR", "IB-HDR"),
        ("ndr", "IB-NDR"),
        ("opa", "OmniPath"),
        ("omni-path", "OmniPath"),
        ("slingshot-11", "Slingshot"),
    ],
)
def test_network_aliases(alias, name):
    assert network(alias).name == name


@pytest.mark.parametrize(
    "alias, name",
    [
        ("lustre", "pfs"),
        ("gpfs", "pfs"),
        ("parallel file system", "pfs"),
        ("bb", "burst-buffer"),
        ("DataWarp", "burst-buffer"),
        ("node-local-nvme", "nvme"),
        ("local_ssd", "nvme"),
        ("dram", "page-cache"),
        ("RAM", "page-cache"),
    ],
)
def test_storage_aliases(alias, name):
    assert storage(alias).name == name


def test_instances_pass_through():
    g, n, s = GPUS.get("A100-40GB"), NETWORKS.get("IB-HDR"), STORAGE.get("nvme")
    assert gpu(g) is g and network(n) is n and storage(s) is s


@pytest.mark.parametrize(
    "lookup, name, expected",
    [
        (gpu, "V100", "V100-16GB"),  # ambiguous on purpose: 16 or 32 GB?
        (gpu, "A100", "A100-40GB"),
        (gpu, "h100", "H100-SXM"),
        (network, "25gbee", "25GbE"),
        (network, "25gb", "25GbE"),
        (network, "nvlink5", "NVLink4"),
        (storage, "lustr", "lustre"),
    ],
)
def test_unknown_names_suggest_nearest_ids(lookup, name, expected):
    with pytest.raises(UnknownNameError) as info:
        lookup(name)
    assert repr(name) in str(info.value)
    assert repr(expected) in str(info.value)
    # Callers may catch it as either a bad input or a missing key.
    assert isinstance(info.value, DlexploreError) and isinstance(info.value, KeyError)


def test_ambiguous_short_names_are_not_aliases():
    # "V100" or "A100" alone would silently pick one memory size; the user must say which.
    for name in ("V100", "A100", "V100-SXM2", "A100-SXM4"):
        assert name not in GPUS


# --------------------------------------------------------------------------------------------------
# Data-sheet values


def test_gpu_datasheet_values():
    # NVIDIA Tesla V100 data sheet (2018), SXM2: 15.7 fp32, 125 fp16 tensor core, 900 GB/s, 300 W.
    v100 = gpu("V100-16GB")
    assert (v100.fp32_tflops, v100.fp16_tflops) == (15.7, 125)
    assert (v100.memory_bytes, v100.memory_bandwidth_gbs, v100.tdp_w) == (16 * GIB, 900, 300)
    assert math.isnan(v100.tf32_tflops) and math.isnan(v100.bf16_tflops)
    assert gpu("V100-32GB").memory_bytes == 32 * GIB
    # NVIDIA A100 data sheet (2021), SXM4: 19.5 fp32, 156 TF32, 312 fp16/bf16 (dense),
    # 1555 GB/s (40GB) and 2039 GB/s (80GB), 400 W; an "80GB" HBM part holds 80 GiB.
    a40, a80 = gpu("A100-40GB"), gpu("A100-80GB")
    assert (a80.fp32_tflops, a80.tf32_tflops, a80.fp16_tflops, a80.bf16_tflops) == (
        19.5, 156, 312, 312)  # fmt: skip
    assert a80.memory_bytes == 80 * 2**30 and a40.memory_bytes == 40 * 2**30
    assert (a40.memory_bandwidth_gbs, a80.memory_bandwidth_gbs) == (1555, 2039)
    assert a80.tdp_w == 400
    # NVIDIA H100 data sheet / white paper (2022), SXM5: 67 fp32, 494.7 TF32 and 989.4 fp16/bf16
    # dense (989 and 1979 are with sparsity), 80 GB HBM3, 3.35 TB/s, 700 W.
    h100 = gpu("H100-SXM")
    assert (h100.fp32_tflops, h100.tf32_tflops, h100.fp16_tflops, h100.bf16_tflops) == (
        67, 494.7, 989.4, 989.4)  # fmt: skip
    assert (h100.memory_bytes, h100.memory_bandwidth_gbs, h100.tdp_w) == (80 * GIB, 3350, 700)
    # NVIDIA H200 data sheet (2024): H100 compute, 141 GB HBM3e (nvidia-smi: 143771 MiB, so
    # taken as GiB), 4.8 TB/s, 700 W.
    h200 = gpu("H200")
    assert (h200.fp16_tflops, h200.memory_bandwidth_gbs, h200.tdp_w) == (989.4, 4800, 700)
    assert h200.memory_bytes == 141 * GIB
    # NVIDIA Tesla P100 data sheet (2016), SXM2: 10.6 fp32, 21.2 fp16, 16 GB, 732 GB/s, 300 W.
    p100 = gpu("P100")
    assert (p100.fp32_tflops, p100.fp16_tflops, p100.memory_bandwidth_gbs, p100.tdp_w) == (
        10.6, 21.2, 732, 300)  # fmt: skip
    # NVIDIA Tesla K80 data sheet (2014): 24 GB and 480 GB/s for the board's two dies.
    k80 = gpu("K80")
    assert (k80.memory_bytes, k80.memory_bandwidth_gbs) == (12 * GIB, 240)
    # Kepler has no fp16 arithmetic; GP102 runs fp16 at 1/64 of fp32 (11.34 TFLOP/s boost).
    for name in ("K20X", "K40", "K80"):
        assert math.isnan(gpu(name).fp16_tflops)
    g1080 = gpu("GTX1080Ti")
    assert g1080.fp32_tflops == 11.34
    assert g1080.fp16_tflops == pytest.approx(g1080.fp32_tflops / 64, rel=0.01)
    # AMD Instinct MI250X data sheet (2021), OAM module: 95.7 fp32 matrix, 383 fp16/bf16,
    # 128 GB HBM2e, 3.2768 TB/s, 560 W; a GCD is half of it.
    mi, gcd = gpu("MI250X"), gpu("MI250X-GCD")
    assert (mi.fp32_tflops, mi.fp16_tflops, mi.bf16_tflops) == (95.7, 383, 383)
    assert (mi.memory_bytes, mi.memory_bandwidth_gbs, mi.tdp_w) == (128 * GIB, 3276.8, 560)
    assert gcd.memory_bytes == mi.memory_bytes / 2
    assert gcd.fp16_tflops == pytest.approx(mi.fp16_tflops / 2)


def test_network_datasheet_values():
    # Per direction, GB/s. NVLink: links x 25 GB/s (20 for NVLink 1) per direction (NVIDIA white
    # papers 2016-2022); NCCL maintainers quote "H100 NVLink line rate 450 GB/s".
    assert network("NVLink1").bandwidth_gbs == 4 * 20
    assert network("NVLink2").bandwidth_gbs == 6 * 25
    assert network("NVLink3").bandwidth_gbs == 12 * 25
    assert network("NVLink4").bandwidth_gbs == 18 * 25 == 450
    # PCIe x16 after 128b/130b encoding: 8/16/32 GT/s x 16 lanes x 128/130 / 8.
    for name, gts in (("PCIe3", 8), ("PCIe4", 16), ("PCIe5", 32)):
        assert network(name).bandwidth_gbs == pytest.approx(gts * 16 * 128 / 130 / 8, rel=1e-3)
    # Ethernet: line rate / 8 (IEEE 802.3).
    for name, gbit in (("10GbE", 10), ("25GbE", 25), ("40GbE", 40), ("50GbE", 50),
                       ("100GbE", 100), ("200GbE", 200), ("400GbE", 400)):  # fmt: skip
        assert network(name).bandwidth_gbs == gbit / 8
    assert network("25GbE").bandwidth_gbs == 3.125
    # InfiniBand 4x data rates (IBTA): FDR 54.5 Gb/s after 64b/66b, EDR 100, HDR 200, NDR 400.
    assert network("IB-FDR").bandwidth_gbs == pytest.approx(4 * 14.0625 * 64 / 66 / 8, rel=1e-3)
    assert [network(n).bandwidth_gbs for n in ("IB-EDR", "IB-HDR", "IB-NDR")] == [12.5, 25, 50]
    # Omni-Path 100 Gb/s (Birrittella et al. 2015); Slingshot-11 200 Gb/s Cassini NIC.
    assert network("OmniPath").bandwidth_gbs == 12.5
    assert network("Slingshot").bandwidth_gbs == 25
    # Latencies: sub-microsecond to ~1 us for InfiniBand, tens of us for kernel TCP.
    for name in ("IB-FDR", "IB-EDR", "IB-HDR", "IB-NDR"):
        assert 0.5e-6 <= network(name).latency_s <= 1e-6
    for name in ("10GbE", "25GbE", "100GbE"):
        assert 10e-6 <= network(name).latency_s <= 30e-6


def test_link_kinds():
    for name in INTRA_IDS:
        assert network(name).kind == "intra"
    for name in NETWORK_IDS:
        assert network(name).kind == "network"


def test_storage_tiers():
    assert storage("pfs").scope == "shared" and storage("burst-buffer").scope == "shared"
    assert storage("nvme").scope == "node" and storage("page-cache").scope == "node"
    # A small-file read on a parallel file system costs of the order of a millisecond; the
    # faster tiers are faster.
    assert 0.3e-3 <= storage("pfs").latency_s <= 3e-3
    latencies = [storage(n).latency_s for n in ("pfs", "burst-buffer", "nvme", "page-cache")]
    assert latencies == sorted(latencies, reverse=True)


# --------------------------------------------------------------------------------------------------
# Precisions


def test_peak_flops_precisions():
    v100, a100 = gpu("V100-16GB"), gpu("A100-40GB")
    assert v100.peak_flops("fp32") == 15.7e12
    assert v100.peak_flops("tf32") == v100.peak_flops("fp32")  # no TF32: runs as fp32
    assert v100.peak_flops("fp16") == 125e12
    assert a100.peak_flops("tf32") == 156e12
    assert a100.peak_flops("bf16") == 312e12
    with pytest.raises(DlexploreError, match="bf16"):
        v100.peak_flops("bf16")
    with pytest.raises(DlexploreError, match="fp16"):
        gpu("K40").peak_flops("fp16")
    with pytest.raises(DlexploreError, match="precision"):
        a100.peak_flops("fp8")


# --------------------------------------------------------------------------------------------------
# Sanity of every entry


def test_every_entry_has_a_dated_source():
    for entry in [*GPUS, *NETWORKS, *STORAGE]:
        assert entry.source.strip(), entry.name
        assert re.search(r"\b(19|20)\d\d\b", entry.source), f"{entry.name}: no year in source"


def test_gpu_sanity():
    for g in GPUS:
        assert isinstance(g, GPU)
        assert g.vendor in ("NVIDIA", "AMD"), g.name
        assert g.fp32_tflops > 0 and g.memory_bandwidth_gbs > 0, g.name
        assert g.memory_bytes > 0 and g.memory_bytes % GIB == 0, g.name  # whole GiB
        assert 0 < g.idle_w < g.tdp_w, g.name
        if not math.isnan(g.fp16_tflops) and g.name != "GTX1080Ti":  # GP102: 1/64 rate
            assert g.fp16_tflops >= g.fp32_tflops, g.name
        if not math.isnan(g.tf32_tflops):  # Ampere and later: tensor cores beat fp32 ...
            assert g.fp32_tflops < g.tf32_tflops < g.fp16_tflops, g.name
            assert g.bf16_tflops == g.fp16_tflops, g.name  # ... and bf16 runs at fp16 rate
        # Roofline sanity: between 1 and 1000 FLOP per byte of memory traffic at fp32.
        assert 1 < g.fp32_tflops * 1e3 / g.memory_bandwidth_gbs < 1000, g.name


def test_network_sanity():
    for link in NETWORKS:
        assert isinstance(link, Link)
        assert link.kind in LINK_KINDS, link.name
        assert link.bandwidth_gbs > 0 and link.latency_s > 0, link.name
        assert link.latency_s < 1e-4, link.name
    # Inside a node is faster than between nodes of the same era.
    assert network("NVLink2").bandwidth_gbs > network("IB-EDR").bandwidth_gbs
    assert network("PCIe3").bandwidth_gbs > network("100GbE").bandwidth_gbs


def test_storage_sanity():
    for tier in STORAGE:
        assert isinstance(tier, StorageTier)
        assert tier.scope in STORAGE_SCOPES, tier.name
        assert tier.bandwidth_gbs > 0 and tier.latency_s > 0, tier.name
        assert 0 < tier.client_bandwidth_gbs <= tier.bandwidth_gbs, tier.name


# --------------------------------------------------------------------------------------------------
# Tables


@pytest.mark.parametrize(
    "table, registry, cls",
    [(gpus, GPUS, GPU), (networks, NETWORKS, Link), (storages, STORAGE, StorageTier)],
)
def test_tables(table, registry, cls):
    frame = table()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns)[0] == "name"
    assert set(frame.columns) == set(cls.__dataclass_fields__)
    assert list(frame["name"]) == registry.names()
    assert frame["source"].str.len().min() > 0


def test_table_aliases_are_joined():
    frame = gpus().set_index("name")
    assert "K80-die" in frame.loc["K80", "aliases"].split(";")
    assert frame.loc["A100-80GB", "memory_bytes"] == 80 * GIB


# --------------------------------------------------------------------------------------------------
# The reader of the bundled files (the same one reads user files)


@pytest.mark.parametrize(
    "filename, kind, registry",
    [
        ("gpus.csv", "gpus", GPUS),
        ("networks.csv", "networks", NETWORKS),
        ("storage.csv", "storage", STORAGE),
    ],  # fmt: skip
)
def test_bundled_files_are_what_the_registries_hold(filename, kind, registry):
    path = data_dir() / "catalog" / filename
    records = read_csv(path, kind)
    assert records and all(registry.get(r.name) == r for r in records)
    # Inference from the header agrees with the file's kind.
    assert read_csv(path) == records


def test_bundled_files_load_fast():
    folder = data_dir() / "catalog"
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for filename in ("gpus.csv", "networks.csv", "storage.csv"):
            read_csv(folder / filename)
        best = min(best, time.perf_counter() - start)
    assert best < 0.030


def test_infer_kind():
    assert infer_kind(["name", "fp32_tflops"]) == "gpus"
    assert infer_kind(["name", "scope", "bandwidth_gbs", "latency_s"]) == "storage"
    assert infer_kind(["name", "bandwidth_gbs", "latency_s"]) == "networks"
    assert infer_kind(["Name", " KIND "]) == "networks"
    assert infer_kind(["name", "speed"]) is None
    assert infer_kind(["fp32_tflops", "scope"]) is None


GPU_HEADER = (
    "name,vendor,fp32_tflops,tf32_tflops,fp16_tflops,bf16_tflops,{memory},memory_bandwidth_gbs,tdp_w,idle_w"
)


def test_read_csv_memory_units_and_blanks(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text(
        GPU_HEADER.format(memory="memory_bytes") + ",aliases\n"
        "A,acme,10,,nan,NaN,1073741824,100,200,,a1; a2 ;\n"
    )
    (g,) = read_csv(path, "gpus", default_source="mine")
    assert g.memory_bytes == GIB and g.aliases == ("a1", "a2") and g.source == "mine"
    assert math.isnan(g.tf32_tflops) and math.isnan(g.fp16_tflops) and math.isnan(g.idle_w)
    path.write_text(GPU_HEADER.format(memory="memory_gib") + "\nA,acme,10,,,,1.5,100,200,20\n")
    (g,) = read_csv(path, "gpus", default_source="mine")
    assert g.memory_bytes == 1.5 * GIB and g.aliases == ()


def test_read_csv_requires_a_source_unless_defaulted(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("name,kind,bandwidth_gbs,latency_s\nx,intra,1,1e-6\n")
    with pytest.raises(InputFileError, match="source") as info:
        read_csv(path, "networks")
    assert info.value.line == 2
    assert read_csv(path, "networks", default_source="here")[0].source == "here"


def test_read_csv_line_endings_bom_spaces_and_quotes(tmp_path):
    path = tmp_path / "n.csv"
    text = (
        "\ufeff# comment\r\n"
        "Name, Kind, Bandwidth_GBs, Latency_s, Source\r\n"
        "\r\n"
        'x, INTRA, 1, 1e-6, "a, b\r\nc"\r\n'
        "y,network,2,2e-6,s,,\r\n"  # trailing empty cells, as spreadsheets write them
        "z,network,-1,2e-6,s\r\n"
    )
    path.write_bytes(text.encode("utf-8"))
    with pytest.raises(InputFileError) as info:
        read_csv(path)
    # The quoted value spans lines 4-5, so z is on line 7.
    assert info.value.line == 7 and "bandwidth_gbs" in str(info.value)
    path.write_bytes(text.rsplit("z,", 1)[0].encode("utf-8"))
    x, y = read_csv(path)
    assert (x.kind, x.bandwidth_gbs, x.source) == ("intra", 1.0, "a, b\nc")
    assert (y.name, y.latency_s) == ("y", 2e-6)


@pytest.mark.parametrize(
    "row, message",
    [
        ("A,acme,0,,,,1,100,200,20", "fp32_tflops: expected a positive number, got '0'"),
        ("A,acme,inf,,,,1,100,200,20", "fp32_tflops: expected a finite number"),
        ("A,acme,,,,,1,100,200,20", "fp32_tflops: a value is required"),
        ("A,acme,10,,,,1,100,200,300", "idle_w (300 W) exceeds tdp_w (200 W)"),
        (",acme,10,,,,1,100,200,20", "name: a value is required"),
        ("A,acme,10,,,,1,100,200", "expected 10 values"),
    ],
)
def test_read_csv_rejects_bad_gpu_rows(tmp_path, row, message):
    path = tmp_path / "g.csv"
    path.write_text(GPU_HEADER.format(memory="memory_gib") + "\n# note\n" + row + "\n")
    with pytest.raises(InputFileError) as info:
        read_csv(path, "gpus", default_source="mine")
    assert message in str(info.value)
    assert str(info.value).startswith(f"{path}, line 3: ")


def test_read_csv_rejects_both_memory_columns(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text(GPU_HEADER.format(memory="memory_gib,memory_bytes") + "\n")
    with pytest.raises(InputFileError, match="memory_bytes or memory_gib, not both"):
        read_csv(path, "gpus")


def test_client_bandwidth_may_be_unlimited(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("name,scope,bandwidth_gbs,client_bandwidth_gbs,latency_s\nt,node,5,inf,0\n")
    (tier,) = read_csv(path, default_source="mine")
    assert math.isinf(tier.client_bandwidth_gbs) and tier.latency_s == 0


def test_unknown_kind_argument(tmp_path):
    with pytest.raises(DlexploreError, match="catalog kind"):
        read_csv(tmp_path / "x.csv", "cpus")
