"""Lazy (Dask) sweeps: :func:`dlexplore.model.bigsweep.predict_lazy` must equal eager ``predict``
exactly, block by block, and :func:`best_per_gpus` must pick the same winners as an argmax over the
whole eager grid (numpy's first-in-C-order rule on ties). Needs Dask (the ``scale`` extra)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore.errors import DlexploreError
from dlexplore.model.bigsweep import best_per_gpus, predict_lazy

# Batch 256 does not fit in a V100-16GB with ResNet-50 (mem_total > 16 GiB): it must never win.
SWEEP = dict(
    workload="resnet50",
    gpu="V100-16GB",
    gpus_per_node=8,
    gpus=[1, 2, 4, 8, 16, 64],
    batch_size=[16, 32, 64, 256],
    bandwidth=[1.0, 10.0, 100.0],
    latency=[1e-6, 2e-6, 5e-6, 1e-5],
)


def _eager_best(ds: xr.Dataset, objective: str, maximize: bool) -> dict:
    var = ds[objective].where(ds.fits, -np.inf if maximize else np.inf)
    others = [d for d in var.dims if d != "gpus"]
    flat = var.transpose("gpus", *others).values.reshape(var.sizes["gpus"], -1)
    where = flat.argmax(axis=1) if maximize else flat.argmin(axis=1)
    idx = np.unravel_index(where, [var.sizes[d] for d in others])
    best = flat[np.arange(len(where)), where]
    return {
        objective: np.where(np.isinf(best), np.nan, best),
        **{d: ds[d].values[i] for d, i in zip(others, idx, strict=True)},
    }


@pytest.mark.parametrize("chunks", [None, 2, {"gpus": 4, "batch_size": 1, "latency": 3}])
def test_lazy_equals_eager_exactly(chunks):
    eager = dlx.predict(**SWEEP)
    lazy = predict_lazy(**SWEEP, chunks=chunks)
    assert all(hasattr(lazy[v].data, "dask") for v in lazy.data_vars if lazy[v].ndim)
    xr.testing.assert_identical(lazy.compute(), eager)  # values, dims, coords and attrs
    assert lazy.step_time.attrs == {"units": "s", "long_name": "time per training step"}


def test_lazy_keeps_size_one_sweeps_and_positional_arguments():
    args = dict(gpus=[2], batch_size=[32, 64], latency=[1e-6])
    lazy = predict_lazy("vgg16", "V100-16GB", **args, chunks=1)
    xr.testing.assert_identical(lazy.compute(), dlx.predict("vgg16", "V100-16GB", **args))


@pytest.mark.parametrize("objective", ["throughput", "step_time", "efficiency"])
def test_best_per_gpus_matches_the_eager_argmax(objective):
    eager = dlx.predict(**SWEEP)
    best = best_per_gpus(predict_lazy(**SWEEP, chunks={"gpus": 4, "latency": 3}), objective)
    maximize = objective != "step_time"
    want = _eager_best(eager, objective, maximize)
    for name, values in want.items():
        np.testing.assert_array_equal(best[name].values, values)
    assert best.attrs["direction"] == ("max" if maximize else "min")
    assert best[objective].attrs["units"] == eager[objective].attrs["units"]
    assert best["bandwidth"].attrs["units"] == "GB/s"
    # The same from the arguments, from the eager dataset and with other blocks.
    for other in (best_per_gpus(SWEEP, objective, chunks={"batch_size": 2}), best_per_gpus(eager, objective)):
        xr.testing.assert_identical(other, best)


def test_best_per_gpus_hand_worked_single_gpu():
    # One GPU, no communication and no input: step = t_f + t_b + t_opt = 3 t_f + t_opt with t_f
    # proportional to the batch, so throughput = B / (3 k B + t_opt) grows with B: the largest
    # batch that fits wins (256 would not fit in 16 GB), and bandwidth/latency (no effect on one
    # GPU) tie, so their first values win.
    best = best_per_gpus(
        dict(gpus=[1, 2], batch_size=[8, 16, 128], bandwidth=[5.0, 50.0], latency=[1e-5, 1e-6]),
        chunks={"batch_size": 1},
    )
    assert best.batch_size.values[0] == 128
    assert best.bandwidth.values[0] == 5.0 and best.latency.values[0] == 1e-5
    one = dlx.predict(gpus=1, batch_size=128)
    assert best.throughput.values[0] == one.throughput.item()


def test_categorical_sweeps_equal_eager_and_pick_the_winning_names():
    # A user-defined workload (not in the catalog) in the sweep: blocks must call predict with the
    # object, not its name. It is ResNet-50 with half the layers' FLOPs, so at one GPU and equal
    # batch it is faster than ResNet-50.
    base = dlx.catalog.workload("resnet50")
    light = dataclasses.replace(
        base,
        name="resnet50-light",
        aliases=(),
        layers=tuple(dataclasses.replace(layer, flops=layer.flops / 2) for layer in base.layers),
    )
    sweep = dict(
        workload=["resnet50", light, "vgg16"],
        gpu=["V100-16GB", "A100-40GB"],
        gpus=[1, 4, 16],
        batch_size=[32, 64],
        bandwidth=[1.0, 25.0],
    )
    eager = dlx.predict(**sweep)
    lazy = predict_lazy(**sweep, chunks={"workload": 1, "gpu": 1, "gpus": 2, "batch_size": 1})
    assert lazy.throughput.dims[:2] == ("workload", "gpu")
    assert lazy.throughput.data.numblocks == (3, 2, 2, 2, 1)
    xr.testing.assert_identical(lazy.compute(), eager)
    assert list(lazy.workload.values) == ["resnet50", "resnet50-light", "vgg16"]
    best = best_per_gpus(lazy)
    want = _eager_best(eager, "throughput", True)
    for name, values in want.items():
        np.testing.assert_array_equal(best[name].values, values)
    # Half the FLOPs on the faster GPU wins at every GPU count.
    assert list(best.workload.values) == ["resnet50-light"] * 3
    assert list(best.gpu.values) == ["A100-40GB"] * 3


def test_bad_arguments_are_dlexplore_errors():
    with pytest.raises(DlexploreError, match="unknown workload 'resnet5'"):
        predict_lazy(workload=["resnet5", "vgg16"], gpus=[1, 2])
    with pytest.raises(DlexploreError, match="repeats"):
        predict_lazy(workload=["vgg16", "vgg16"], gpus=[1, 2])
    with pytest.raises(DlexploreError, match="per-bucket"):
        predict_lazy(gpus=[1, 2], buckets=True)
    with pytest.raises(DlexploreError, match="gpus must be a whole number from 1 to 1,048,576; got 0"):
        predict_lazy(gpus=[1, 0])
    with pytest.raises(DlexploreError, match="chunk"):
        predict_lazy(gpus=[1, 2], chunks={"nope": 1})
    with pytest.raises(DlexploreError, match="objective"):
        best_per_gpus(dict(gpus=[1, 2]), "speed")
    nothing_fits = best_per_gpus(dict(gpus=[1, 2], batch_size=[4096]))
    assert np.isnan(nothing_fits.throughput.values).all()
    with pytest.raises(DlexploreError, match="gpus dimension"):
        best_per_gpus(dict(batch_size=[1, 2]))


def test_lazy_takes_layout_and_fusion_as_spelled_by_the_user():
    # predict writes channels_last as nhwc and bn-add-relu as bn_add_relu: each block must still
    # find the value the user gave
    kw = dict(gpus=[1, 2, 4], precision="fp16", batch_size=64)
    lazy = predict_lazy(
        "resnet50", "V100-16GB", layout=["channels_last", "nchw"], fusion=["none", "bn-add-relu"], **kw
    ).compute()
    eager = dlx.predict(
        "resnet50", "V100-16GB", layout=["nhwc", "nchw"], fusion=["none", "bn_add_relu"], **kw
    )
    assert lazy.layout.values.tolist() == ["nhwc", "nchw"]
    assert lazy.fusion.values.tolist() == ["none", "bn_add_relu"]
    np.testing.assert_array_equal(lazy.throughput.values, eager.throughput.values)
