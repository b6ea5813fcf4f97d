"""Energy model, Pareto front, trade-off sweep, trade-off plot and the energy lab's exercises.

Expected values are worked out by hand in the comments from the phase-power formulas of
dlexplore/model/energy.py's docstring (P_compute = idle + (tdp - idle) u, P_comm = idle +
(tdp - idle) f, waiting at idle; E_step = PUE (gpus E_gpu + nodes P_node step_time)).
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import dlexplore as dlx
from dlexplore import lab
from dlexplore.catalog import GPU
from dlexplore.errors import DlexploreError
from dlexplore.model.energy import ENERGY_VARIABLES, energy, pareto_front, time_energy_tradeoff
from dlexplore.plots.energy import tradeoff_columns, tradeoff_figure

TOY = GPU(
    name="toy",
    vendor="none",
    fp32_tflops=10.0,
    tf32_tflops=float("nan"),
    fp16_tflops=20.0,
    bf16_tflops=float("nan"),
    memory_bytes=16e9,
    memory_bandwidth_gbs=900.0,
    tdp_w=300.0,
    idle_w=50.0,
    source="test",
)


def _step(
    compute: float, comm: float, io: float = 0.0, gpus: int = 8, batch: int = 32, gpus_per_node: int = 8
) -> xr.Dataset:
    """A prediction with given phases (s), laid out as dlexplore.predict lays it out."""
    return xr.Dataset(
        {
            "time_compute": compute,
            "time_comm_exposed": comm,
            "time_io_exposed": io,
            "step_time": compute + comm + io,
        },
        coords={"gpus": gpus, "batch_size": batch, "gpus_per_node": gpus_per_node},
    )


def test_step_energy_by_hand():
    # P_compute = 300 W, P_comm = 50 + 250 x 0.5 = 175 W.
    # Per GPU: 0.1 x 300 + 0.02 x 175 = 30 + 3.5 = 33.5 J; 8 GPUs: 268 J; x 1.2 = 321.6 J.
    ds = energy(_step(0.1, 0.02), gpu=TOY, pue=1.2)
    assert float(ds["power_compute"]) == pytest.approx(300.0)
    assert float(ds["power_comm"]) == pytest.approx(175.0)
    assert float(ds["power_idle"]) == pytest.approx(50.0)
    assert float(ds["energy_step"]) == pytest.approx(321.6)
    assert float(ds["energy_compute"]) == pytest.approx(288.0)  # 8 x 30 x 1.2
    assert float(ds["energy_comm"]) == pytest.approx(33.6)  # 8 x 3.5 x 1.2
    # 256 samples per step: 321.6 / 256 = 1.25625 J; average power 321.6 J / 0.12 s = 2680 W
    assert float(ds["energy_sample"]) == pytest.approx(1.25625)
    assert float(ds["power_average"]) == pytest.approx(2680.0)
    assert ds.attrs["source"].startswith("predicted: ")
    for name in ds.data_vars:
        assert ds[name].attrs["units"] == ENERGY_VARIABLES[name][0]


def test_nodes_io_utilisation_and_epoch():
    # 16 GPUs, 8 per node -> 2 nodes at 200 W each. Step: 0.1 compute (u = 0.6 -> 50 + 150 = 200 W),
    # 0.02 comm at f = 0.2 -> 100 W, 0.03 waiting for input at 50 W; step 0.15 s.
    # Per GPU: 20 + 2 + 1.5 = 23.5 J; 16 GPUs 376 J; nodes 2 x 200 x 0.15 = 60 J; total 436 J, PUE 1.5
    # -> 654 J. 16 x 32 = 512 samples per step: 1.27734375 J per sample.
    # Epoch of 1,024,000 samples: 2000 steps -> 1,308,000 J = 0.36333 kWh, 300 s.
    ds = energy(
        _step(0.1, 0.02, 0.03, gpus=16),
        gpu=TOY,
        pue=1.5,
        node_power_w=200.0,
        utilization=0.6,
        comm_power_fraction=0.2,
        samples_per_epoch=1_024_000,
    )
    assert float(ds["nodes"]) == 2
    assert float(ds["energy_idle"]) == pytest.approx(1.5 * 16 * 0.03 * 50)
    assert float(ds["energy_node"]) == pytest.approx(90.0)
    assert float(ds["energy_step"]) == pytest.approx(654.0)
    assert float(ds["energy_epoch"]) == pytest.approx(1_308_000.0)
    assert float(ds["energy_epoch_kwh"]) == pytest.approx(1_308_000.0 / 3.6e6)
    assert float(ds["time_epoch"]) == pytest.approx(300.0)
    # gpus_per_node given explicitly overrides the prediction's: 16 nodes of 1 GPU
    ds1 = energy(_step(0.1, 0.02, 0.03, gpus=16), gpu=TOY, node_power_w=200.0, gpus_per_node=1)
    assert float(ds1["nodes"]) == 16


def test_real_prediction_gpu_from_catalog_and_efficiency_utilisation():
    pred = dlx.predict(
        "resnet50", ["V100-16GB", "H100-SXM"], "100GbE", gpus=[1, 8], batch_size=64, gpus_per_node=8
    )
    ds = energy(pred)
    # V100: 300 W TDP; H100-SXM: 700 W TDP (catalog)
    assert ds["power_compute"].sel(gpu="V100-16GB").values == pytest.approx([300.0, 300.0])
    assert ds["power_compute"].sel(gpu="H100-SXM").values == pytest.approx([700.0, 700.0])
    # energy per step equals the sum of the phases, which equals power x time phase by phase
    one = pred.sel(gpu="V100-16GB", gpus=8)
    expected = 8 * (
        300.0 * float(one["time_compute"])
        + 170.0 * float(one["time_comm_exposed"])
        + 40.0 * float(one["time_io_exposed"])
    )
    assert float(ds["energy_step"].sel(gpu="V100-16GB", gpus=8)) == pytest.approx(expected)
    # "efficiency": u = compute_efficiency, the V100's fp32 GEMM plateau: cuBLAS SGEMM at 83/7 =
    # 11.86 of 15.7 TFLOP/s (Markidis et al. 2018, data/catalog/gemm.csv) -> 40 + 260 u W
    eff = energy(pred.sel(gpu="V100-16GB"), utilization="efficiency")
    assert float(eff["power_compute"].isel(gpus=0)) == pytest.approx(40 + 260 * 11.86 / 15.7)


def test_a_utilisation_per_gpu_is_matched_by_label_not_by_position():
    """The energy is worked out on arrays (a slider move's speed): a DataArray argument must still
    meet the prediction's GPUs by name, as xarray's arithmetic would, whatever its order."""
    pred = dlx.predict("resnet50", ["V100-16GB", "A100-40GB"], "25GbE", gpus=[1, 8], batch_size=64)
    u = xr.DataArray([0.5, 0.9], dims="gpu", coords={"gpu": ["A100-40GB", "V100-16GB"]})
    ds = energy(pred, utilization=u)
    # catalog: V100-16GB 300 W TDP, 40 W idle; A100-40GB 400 W, 55 W -> idle + (TDP - idle) u
    assert ds["power_compute"].sel(gpu="V100-16GB").values == pytest.approx([40 + 260 * 0.9] * 2)
    assert ds["power_compute"].sel(gpu="A100-40GB").values == pytest.approx([55 + 345 * 0.5] * 2)
    assert ds["power_compute"].dims == pred["step_time"].dims
    with pytest.raises(DlexploreError, match="varies along"):
        energy(pred, utilization=xr.DataArray([0.5, 0.6], dims="rack"))


def test_more_gpus_never_less_energy_idle_free():
    pred = dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=[1, 2, 4, 8, 16, 32, 64], batch_size=32)
    ds = energy(pred, pue=1.3)
    per_sample = ds["energy_sample"].values
    # weak scaling: the compute energy per sample is fixed; communication only adds energy
    assert np.all(np.diff(per_sample) >= -1e-12)
    assert np.all(np.diff(ds["energy_step"].values) > 0)
    # a faster network means less waiting, hence less energy at the same GPU count
    fast = energy(dlx.predict("resnet50", "V100-16GB", "IB-EDR", gpus=[8, 64], batch_size=32), pue=1.3)
    assert np.all(fast["energy_sample"].values < ds["energy_sample"].sel(gpus=[8, 64]).values)


def test_bad_arguments():
    with pytest.raises(DlexploreError, match="pue"):
        energy(_step(0.1, 0.0), gpu=TOY, pue=0.9)
    with pytest.raises(DlexploreError, match="comm_power_fraction"):
        energy(_step(0.1, 0.0), gpu=TOY, comm_power_fraction=1.5)
    with pytest.raises(DlexploreError, match="time_comm_exposed"):
        energy(xr.Dataset({"step_time": 1.0}), gpu=TOY)
    with pytest.raises(DlexploreError, match="gpu="):
        energy(_step(0.1, 0.0))


def test_pareto_front_hand_made():
    t = np.array([1.0, 2.0, 3.0, 2.0, 4.0, 1.0, np.nan])
    e = np.array([5.0, 3.0, 1.0, 4.0, 1.0, 5.0, 0.0])
    # (2, 4) is dominated by (2, 3); (4, 1) by (3, 1); the duplicate (1, 5) stays; NaN is never on it
    assert pareto_front(t, e).tolist() == [True, True, True, False, False, True, False]
    grid = pareto_front(t[:6].reshape(2, 3), e[:6].reshape(2, 3))
    assert grid.shape == (2, 3)
    with pytest.raises(DlexploreError):
        pareto_front([1.0], [1.0, 2.0])


def test_tradeoff_sweep_and_plot():
    ds = time_energy_tradeoff(
        "resnet50",
        ["V100-16GB", "H100-SXM"],
        "100GbE",
        gpus=[1, 8, 64],
        batch_size=64,
        gpus_per_node=8,
        samples_per_epoch=1_281_167,
        pue=1.2,
    )
    assert set(ds["pareto"].dims) == {"gpu", "gpus"}
    mask = pareto_front(ds["time_sample"].values, ds["energy_sample"].values)
    assert (ds["pareto"].transpose(*ds["time_sample"].dims).values == mask).all()
    # the fastest configuration and the one with the least energy are always on the front
    flat_t, flat_e = ds["time_epoch"].values.ravel(), ds["energy_epoch"].values.ravel()
    on = ds["pareto"].transpose(*ds["time_epoch"].dims).values.ravel()
    assert on[np.argmin(flat_t)] and on[np.argmin(flat_e)]
    columns, x_label, y_label = tradeoff_columns(ds)
    assert x_label == "time per epoch (h)" and y_label == "energy per epoch (kWh)"
    assert len(columns["time_h"]) == 6
    assert sorted(columns["time_h"]) == pytest.approx(sorted(flat_t / 3600))
    fig = tradeoff_figure(ds)
    names = {r.data_source.name for r in fig.renderers}
    assert names == {"tradeoff_points", "tradeoff_front"}
    assert len(fig.select(name="tradeoff_front")[0].data["gpus"]) == int(on.sum())


def test_tradeoff_excludes_what_does_not_fit():
    ds = time_energy_tradeoff(
        "bert-large", "V100-16GB", "100GbE", gpus=[1, 2], batch_size=64, optimizer="adam"
    )
    assert not ds["fits"].any() and not ds["pareto"].any()


def test_exercises():
    # 201: V100 (300 W TDP, 40 W idle): 8 x (0.1 x 300 + 0.02 x 170) x 1.2 = 320.64 J
    assert lab.check(201, 320.64).correct
    assert not lab.check(201, 267.2).correct  # forgot the PUE
    assert "PUE" in lab.check(201, 267.2).hint
    # 202: 1,281,167 / 512 steps x 320.64 J / 3.6e6 = 0.22288 kWh
    assert lab.check(202, 1_281_167 / 512 * 320.64 / 3.6e6).correct
    assert "3.6e6" in lab.check(202, 1_281_167 / 512 * 320.64 / 1e3).hint
    # 203: 267.2 / (8 x 30) = 1.11333
    assert lab.check("energy-ratio", 1.1133).correct
    assert lab.check(203, None).status == "unanswered"
    assert lab.check(203, 42.0).hint  # a hint even for an unrecognised answer
    # cross-check 201 with the model on the same phases
    ds = energy(_step(0.1, 0.02, gpus=8, batch=64), gpu="V100-16GB", pue=1.2)
    assert float(ds["energy_step"]) == pytest.approx(lab.solution(201).value)
