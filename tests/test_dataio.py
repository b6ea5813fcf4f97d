"""Data I/O model (dlexplore.model.dataio) and the I/O lab exercises, against hand-worked numbers.

Catalog figures used: pfs = shared, 2500 GB/s aggregate, 2 GB/s per reader, 1 ms per open;
nvme = node, 5.5 GB/s per node, 3 GB/s per reader; page-cache = node, 100 GB/s, 10 GB/s, 10 us.
"""

import math

import numpy as np
import pytest

from dlexplore import lab
from dlexplore.errors import DlexploreError
from dlexplore.model.dataio import DLIOWorkload, io_bound_gpus, io_model


def test_small_files_pay_metadata_lmdb_does_not():
    small = io_model(
        "pfs", layout="small_files", sample_bytes=110e3, readers_per_node=1, nodes=1, batch_size=64
    )
    # 1 ms open + 110e3 B / 2e9 B/s = 1e-3 + 55e-6 s per sample
    assert float(small.time_sample) == pytest.approx(1.055e-3)
    assert float(small.time_io) == pytest.approx(64 * 1.055e-3)
    assert float(small.time_metadata) / float(small.time_sample) > 0.9
    lmdb = io_model(
        "pfs",
        layout="lmdb",
        sample_bytes=110e3,
        dataset_bytes=110e9,
        readers_per_node=1,
        nodes=1,
        batch_size=64,
    )
    # one open per epoch over 1e6 samples: 1e-3 / 1e6 s per sample
    assert float(lmdb.time_sample) == pytest.approx(55e-6 + 1e-9)
    assert float(lmdb.effective_bandwidth_reader) == pytest.approx(110e3 / (55e-6 + 1e-9) / 1e9)


def test_sharded_opens_once_per_shard():
    ds = io_model("pfs", layout="sharded", sample_bytes=1e6, file_bytes=100e6, readers_per_node=1)
    assert float(ds.opens_per_sample) == pytest.approx(0.01)
    assert float(ds.time_sample) == pytest.approx(0.01 * 1e-3 + 1e6 / 2e9)


def test_shared_contention_divides_aggregate_node_local_scales():
    ds = io_model("pfs", layout="lmdb", sample_bytes=1e6, readers_per_node=8, nodes=[1, 100, 1000])
    # 8, 800, 8000 readers: min(2, 2500/P) = 2, 2, 0.3125 GB/s
    np.testing.assert_allclose(ds.bandwidth_reader, [2.0, 2.0, 0.3125])
    np.testing.assert_allclose(ds.effective_bandwidth, [16.0, 1600.0, 2500.0])
    nv = io_model("nvme", layout="lmdb", sample_bytes=1e6, readers_per_node=8, nodes=[1, 1000])
    np.testing.assert_allclose(nv.bandwidth_reader, [5.5 / 8, 5.5 / 8])  # per node, not shared
    np.testing.assert_allclose(nv.effective_bandwidth, [5.5, 5500.0])
    free = io_model("pfs", layout="lmdb", sample_bytes=1e6, readers_per_node=8, nodes=1000, contention=False)
    assert float(free.bandwidth_reader) == 2.0


def test_metadata_rate_queues_opens():
    # 1000 readers x 1 in flight / 1e5 opens/s = 10 ms per open, above the 1 ms idle latency
    ds = io_model("pfs", sample_bytes=1e3, readers_per_node=10, nodes=100, metadata_rate=1e5)
    assert float(ds.open_time) == pytest.approx(0.01)


def test_page_cache_hit_ratio():
    # 100 GB over 4 nodes = 25 GB per node, 10 GB cache: 0.4 from epoch 2; over 5 epochs 0.4 x 4/5
    ds = io_model(
        "pfs",
        layout="lmdb",
        sample_bytes=1e6,
        dataset_bytes=100e9,
        nodes=4,
        readers_per_node=1,
        page_cache_bytes=10e9,
        epochs=5,
    )
    assert float(ds.hit_ratio) == pytest.approx(0.32)
    t_hit = 1e6 / 10e9 + 1e-5
    t_miss = 1e-3 / 25e3 + 1e6 / 2e9
    assert float(ds.time_sample) == pytest.approx(0.32 * t_hit + 0.68 * t_miss)
    full = io_model("pfs", sample_bytes=1e6, dataset_bytes=1e9, page_cache_bytes=5e9, epochs=1)
    assert float(full.hit_ratio) == 0.0  # the first epoch always reads from storage


def test_io_bound_gpus_toy_and_sweep():
    # need 10 x 1e6 B / 0.01 s = 1 GB/s per GPU; pfs gives 2500/P: exceeded from P = 2501 on
    p = io_bound_gpus(0.01, "pfs", layout="lmdb", sample_bytes=1e6, batch_size=10, gpus=np.arange(1, 5001))
    assert float(p) == 2501
    sweep = io_bound_gpus(0.01, "pfs", layout="lmdb", sample_bytes=1e6, batch_size=[5, 10, 20])
    np.testing.assert_array_equal(sweep.values, [8192, 4096, 2048])  # P > 5000, 2500, 1250
    assert sweep.attrs["units"] == "count"
    # compute slower than the fastest read on one GPU: never I/O bound on node-local NVMe
    assert math.isnan(float(io_bound_gpus(10.0, "nvme", layout="lmdb", sample_bytes=1e6, batch_size=10)))


def test_io_bound_gpus_from_predict():
    import dlexplore as dlx

    ds = dlx.predict("resnet50", "A100-80GB", None, bandwidth=12.5, latency=1e-6, batch_size=64)
    p = io_bound_gpus(ds, "pfs", layout="small_files", sample_bytes=110e3, batch_size=64, io_threads=4)
    t_c = float(ds.time_compute)
    # small files: each GPU is capped by 64 x (1e-3/4 + 110e3/2e9) s until 2500/P < 2 GB/s
    assert (64 * (1e-3 / 4 + 55e-6) > t_c) == (float(p) == 1)


def test_dlio_workload_from_dict():
    cfg = {
        "model": "unet3d",
        "dataset": {"num_files_train": 168, "num_samples_per_file": 1, "record_length": 146600628},
        "reader": {"batch_size": 4, "read_threads": 4},
        "train": {"epochs": 5, "computation_time": 1.3604},
    }
    w = DLIOWorkload.from_yaml_dict(cfg)
    assert w.dataset_bytes == 168 * 146600628 and w.layout == "small_files"
    ds = w.io_model("pfs", readers_per_node=8, nodes=1)
    t_io = 4 * (1e-3 / 4 + 146600628 / 2e9)  # 0.2942 s < 1.3604 s: compute bound, AU 100 %
    assert float(ds.time_io) == pytest.approx(t_io)
    assert float(ds.au) == pytest.approx(100.0)
    with pytest.raises(DlexploreError, match="record_length"):
        DLIOWorkload.from_yaml_dict({"dataset": {"num_files_train": 3}})


def test_bad_arguments():
    with pytest.raises(DlexploreError, match="layout"):
        io_model("pfs", layout="tar", sample_bytes=1)
    with pytest.raises(DlexploreError, match="file_bytes"):
        io_model("pfs", layout="sharded", sample_bytes=1)
    with pytest.raises(DlexploreError, match="sample_bytes"):
        io_model("pfs", sample_bytes=-1)


def test_exercises():
    t = 64 * (1e-3 + 110e3 / 2e9) * 1e3  # ms
    assert lab.check(301, t).correct
    assert not lab.check(301, 64 * 110e3 / 2e9 * 1e3).correct
    assert lab.check("io-bound-gpus", 2501).correct
    assert not lab.check(302, 2500).correct
    assert lab.check(302, None).status == "unanswered"
