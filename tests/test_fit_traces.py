"""What a trace says of its run (dlexplore.fit.trace_setup) and the model calibrated to traced runs
(dlexplore.fit.trace_fit), on traces real tools wrote: the bundled gloo runs of dlexplore's own
collector (their manifests say how they were made) and other people's Kineto traces
(../shared/traces-real).

Expected values are worked out here from the layer shapes, the files' events and the model's
published formulas, never read back from the code under test:

- mlp: 131,584 + 262,656 + 5,130 = 399,370 parameters (tests/test_collect.py), in float32 gradients
  DDP allreduces as two buckets of 131,584 and 267,786 elements (526,336 and 1,071,144 bytes);
- transformer (V = 1024, h = 128, s = 64, L = 2, tied output, post-LN): V h + s h + 2h +
  L (12 h^2 + 13 h) = 131,072 + 8,192 + 256 + 2 x 198,272 = 536,064 parameters;
- ResNet-50: 25,557,032 parameters (torchvision), 102,228,128 bytes of float32 gradients.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from _real_traces import real

import dlexplore as dlx
from dlexplore import catalog
from dlexplore._data import data_dir
from dlexplore.errors import DlexploreError
from dlexplore.fit import calibrate_from_trace
from dlexplore.fit.calibration_file import load_calibration, save_calibration
from dlexplore.fit.trace_fit import calibrate_traces, link_factor
from dlexplore.fit.trace_point import points_dataset, step_collectives, trace_point
from dlexplore.fit.trace_setup import infer_setup, load_traces
from dlexplore.model.comm import collective_time

TRACES = data_dir() / "traces"
MLP = 131_584 + 262_656 + 5_130
TRANSFORMER = 1024 * 128 + 64 * 128 + 2 * 128 + 2 * (12 * 128**2 + 13 * 128)
RESNET50 = 25_557_032


def test_hand_counts():
    assert MLP == 399_370 and TRANSFORMER == 536_064
    assert 102_228_128 == 4 * RESNET50


# --- what the trace says ---------------------------------------------------------------------


def test_the_mlp_run_says_its_setup_and_asks_for_the_rest():
    trace = dlx.load_trace(TRACES / "gloo-mlp-2rank")
    setup = infer_setup(trace)
    assert setup.inferred == {
        "gpus": 2,
        "workload": "traced-gloo-mlp-2rank",
        "batch_size": 32,
        "precision": "fp32",
        "algorithm": "ring",
        "gpus_per_node": 2,
    }
    assert setup.parameters == MLP and setup.workload.params == MLP
    # 2 FLOPs per parameter per sample: the forward pass of fully connected layers
    assert setup.workload.flops_per_sample == 2 * MLP
    assert set(setup.asked) == {"gpu", "network"}
    assert "CPU" in setup.asked["gpu"]
    assert "manifest.json" in setup.settings["batch_size"].how


def test_without_a_manifest_the_parameters_come_from_the_allreduces(tmp_path):
    for name in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(TRACES / "gloo-mlp-2rank" / name, tmp_path / name)
    setup = infer_setup(dlx.load_trace(tmp_path))
    # the two buckets' bytes, 526,336 + 1,071,144, over 4-byte float gradients
    assert (526_336 + 1_071_144) / 4 == MLP
    assert setup.parameters == MLP
    assert "1,597,480 bytes of allreduce" in setup.settings["workload"].how
    assert setup.settings["batch_size"].value is None  # nothing says it now: asked
    assert setup.settings["gpus_per_node"].value is None


def test_the_transformer_run_is_the_catalog_transformer_it_names():
    setup = infer_setup(dlx.load_trace(TRACES / "gloo-transformer-2rank"))
    assert setup.workload.kind == "transformer"
    assert setup.workload.params == TRANSFORMER
    assert setup.workload.config["layers"] == 2 and setup.workload.config["heads"] == 4


def test_a_real_nccl_trace_is_resnet50_on_an_a100():
    trace = dlx.load_trace(real("pytorch/HolisticTraceAnalysis__nccl_parser_config__nccl_data.json.gz"))
    setup = infer_setup(trace)
    assert setup.parameters == RESNET50
    assert setup.settings["workload"].value == "resnet50"
    # 'NVIDIA A100-PG509-200' with 39.4 GiB: the catalog's A100 of that memory
    assert setup.settings["gpu"].value == "A100-40GB"
    assert setup.settings["algorithm"].value == "nccl"


def test_a_real_gpu_trace_with_allocator_events_gives_its_device_precision_and_memory():
    trace = dlx.load_trace(
        real(
            "pytorch/kineto__tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
        )
    )
    setup = infer_setup(trace)
    assert setup.settings["gpu"].value == "V100-32GB"  # 'Tesla V100-DGXS-32GB'
    assert setup.settings["precision"].value == "fp32"  # volta_sgemm and <float> cuDNN kernels
    assert setup.settings["workload"].value is None  # one GPU, no allreduce: asked
    point = trace_point(trace, setup, batch_size=32)
    timeline = trace.memory_timeline()
    on_gpu = timeline[timeline["device"].astype(str).str.startswith("cuda")]
    assert point.memory_peak == float(on_gpu["allocated"].max()) and point.memory_peak > 1e9


def test_the_measured_point_is_the_breakdown_of_the_steps_kept():
    trace = dlx.load_trace(TRACES / "gloo-mlp-2rank")
    point = trace_point(trace)
    bd = trace.breakdown()  # steps partition each rank's timeline (dlexplore.traces.breakdown)
    per_step = dict(
        zip(bd["step"].values.tolist(), bd["step_time"].mean("rank").values.tolist(), strict=True)
    )
    median = float(np.median(list(per_step.values())))
    kept = sorted(s for s, t in per_step.items() if t <= 2 * median)
    assert point.steps == kept and point.dropped_steps == sorted(set(per_step) - set(kept))
    assert point.dropped_steps == [2]  # the first profiled step: 10.7 ms against 2.6-4.3 ms
    mean = float(bd["step_time"].sel(step=kept).mean())
    assert point.step_time == pytest.approx(mean, rel=1e-9)
    assert point.throughput == pytest.approx(2 * 32 / mean, rel=1e-9)
    assert point.time_compute == pytest.approx(float(bd["time_compute"].sel(step=kept).mean()), rel=1e-9)
    assert point.comm_bytes > 0 and point.memory_peak is None
    ds = points_dataset([point])
    assert ds["throughput"].attrs["units"] == "samples/s" and ds.attrs["source"].startswith("measured: ")
    one = step_collectives(point)
    assert len(one["start"]) >= 1 and np.all(one["end"] >= one["start"]) and np.all(one["mib"] > 0)


def test_runs_of_one_job_are_several_traces():
    runs = load_traces([TRACES / "gloo-transformer-1rank", TRACES / "gloo-transformer-2rank"])
    assert [t.world_size for t in runs] == [1, 2]
    one = load_traces(str(TRACES / "gloo-mlp-2rank" / "rank*.json.gz"))
    assert len(one) == 1 and one[0].world_size == 2
    with pytest.raises(DlexploreError, match="no file matches"):
        load_traces(str(TRACES / "nothing-here-*.json"))


# --- calibrating to the runs -------------------------------------------------------------------


def _settings(setup) -> dict:
    return dict(
        workload=setup.workload,
        gpu="V100-16GB",
        network="25GbE",
        precision="fp32",
        algorithm="ring",
        gpus_per_node=2,
        intra_link="PCIe3",
    )


@pytest.fixture(scope="module")
def mlp():
    trace = dlx.load_trace(TRACES / "gloo-mlp-2rank")
    setup = infer_setup(trace)
    point = trace_point(trace, setup)
    return point, calibrate_traces([point], _settings(setup))


def test_the_links_are_the_collectives_alpha_beta(mlp):
    point, cal = mlp
    alone = calibrate_from_trace(point.trace, algorithm="ring", steps=point.steps).params.set_index("name")
    fitted = cal.fitted()
    pcie = catalog.network("PCIe3")
    assert link_factor(pcie, "intra") == pcie.efficiency
    # the model divides by what it applies to the link, so its transfers take the measured times
    assert fitted["intra_bandwidth"] * pcie.efficiency == pytest.approx(alone.loc["bandwidth", "value"])
    assert fitted["intra_latency"] == pytest.approx(alone.loc["latency", "value"])
    ds = dlx.predict(
        point.setup.workload, "V100-16GB", "25GbE", gpus=2, batch_size=32, gpus_per_node=2, algorithm="ring",
        intra_link="PCIe3", buckets=True, **fitted,
    )  # fmt: skip
    n = float(ds["bucket_bytes"].values[0])  # one layer: one bucket of every gradient
    assert n == 4 * MLP
    # ring allreduce over 2 ranks: 2 (p - 1) alpha + 2 (p - 1) / p n / B
    alpha, beta = alone.loc["latency", "value"], alone.loc["bandwidth", "value"] * 1e9
    assert float(ds["bucket_time"].values[0]) == pytest.approx(2 * alpha + n / beta, rel=1e-6)
    assert float(ds["bucket_time"].values[0]) == pytest.approx(
        float(collective_time("allreduce", "ring", n, 2, beta / 1e9, alpha)), rel=1e-6
    )


def test_compute_efficiency_makes_the_step_the_geometric_mean_of_the_steps(mlp):
    point, cal = mlp
    observed = point.breakdown()["step_time"].values.ravel()
    observed = observed[np.isfinite(observed)]
    # least squares in log with one parameter and one configuration: the residuals sum to zero
    assert cal.points.loc[0, "predicted_step_time"] == pytest.approx(
        math.exp(np.mean(np.log(observed))), rel=1e-3
    )
    assert cal.dof == observed.size - 1
    bd = point.breakdown()
    comm, exposed = bd["time_comm"].values.ravel(), bd["time_comm_exposed"].values.ravel()
    ok = np.isfinite(comm) & (comm > 0)
    assert cal.fitted()["overlap"] == pytest.approx(np.mean(np.clip((comm - exposed)[ok] / comm[ok], 0, 1)))
    row = cal.points.iloc[0]
    assert row["lower"] < row["predicted"] < row["upper"] and bool(row["in_band"])
    assert row["error"] == pytest.approx((row["predicted"] - point.throughput) / point.throughput)
    assert any("holds what is not communication" in line for line in cal.report())


def test_a_run_held_out_is_predicted_with_the_fit_of_the_others():
    points = [
        trace_point(t)
        for t in load_traces([TRACES / "gloo-transformer-1rank", TRACES / "gloo-transformer-2rank"])
    ]
    settings = _settings(points[0].setup)
    cal = calibrate_traces(points, settings, fit=[True, False])
    held = cal.points.iloc[1]
    assert not held["fitted"] and cal.points.iloc[0]["fitted"]
    # the held-out run predicted by hand: the model with the fitted parameters at its configuration
    again = dlx.predict(**settings, gpus=2, batch_size=8, **cal.fitted())
    assert held["predicted"] == pytest.approx(float(again["throughput"]), rel=1e-9)
    assert held["error"] == pytest.approx((held["predicted"] - points[1].throughput) / points[1].throughput)
    assert cal.mape_holdout == pytest.approx(abs(held["error"]))
    # one rank moves nothing: no link or overlap from it
    assert set(cal.fitted()) == {"compute_efficiency"}
    with pytest.raises(DlexploreError, match="must choose some"):
        calibrate_traces(points, settings, fit=[False, False])


def test_a_saved_calibration_comes_back_whole(mlp, tmp_path):
    point, cal = mlp
    path = tmp_path / "fit.json"
    save_calibration(cal, path)
    back = load_calibration(path)
    assert back.fitted() == pytest.approx(cal.fitted())
    assert np.allclose(back.covariance.to_numpy(), cal.covariance.to_numpy(), equal_nan=True)
    assert (back.residual_variance, back.dof, back.level) == (cal.residual_variance, cal.dof, cal.level)
    settings = _settings(point.setup)
    ds = dlx.predict(**settings, gpus=[1, 2, 4], batch_size=32, **cal.fitted())

    def again(c):
        return c.add_band(
            ds, lambda **p: dlx.predict(**{**settings, **cal.fitted(), **p}, gpus=[1, 2, 4], batch_size=32)
        )

    assert np.allclose(again(back)["throughput_upper"], again(cal)["throughput_upper"])
    assert back.report() == cal.report()
    data = json.loads(path.read_text())
    assert data["format"] == "dlexplore-calibration/1" and data["params"][0]["units"] == "1"


def test_bad_calibration_files_are_refused_by_name(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(DlexploreError, match="missing.json: cannot read"):
        load_calibration(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DlexploreError, match="bad.json: not JSON"):
        load_calibration(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(DlexploreError, match="other.json: not a dlexplore calibration"):
        load_calibration(other)
    odd = tmp_path / "odd.json"
    odd.write_text(
        json.dumps(
            {
                "format": "dlexplore-calibration/1",
                "kind": "training",
                "points": [],
                "params": [{"name": "speed"}],
            }
        )
    )
    with pytest.raises(DlexploreError, match=r"odd.json: unknown parameter\(s\) \['speed'\]"):
        load_calibration(odd)
