"""Calibration of hybrid-parallel tables and prediction intervals.

- A table the model itself wrote with known parameters: the calibration gives them back, and with
  noise-free points the prediction interval closes on the prediction.
- The interval's arithmetic against a hand computation (Student's t with 2 degrees of freedom,
  2.919986 at 90%, from the published tables).
- With log-normal noise of known size, the 90% band covers about 90% of the held-out points.
- Narayanan et al. 2021's Table 1 as it is in ../shared (skipped without it); the bundled
  Korthikanti et al. table; ``predict_parallel(..., calibration=cal)``; leave-one-out.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import dlexplore as dlx
from dlexplore.fit.band import interval, t_quantile
from dlexplore.fit.calibrate import CalibrationWarning

NARAYANAN = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "narayanan2021-table1.csv"
HEADER = (
    "model,layers,hidden,heads,seq,vocab,gpu,gpus,gpus_per_node,tp,pp,dp,global_batch,"
    "micro_batch,precision,recompute,network,step_time"
)
# GPT-2-medium-like sizes: small enough that a table of them evaluates in milliseconds
# (gpus, tp, pp); every replica runs 4 micro-batches of 2 sequences
CONFIGS = [
    (8, 1, 1),
    (8, 2, 1),
    (8, 4, 1),
    (8, 2, 2),
    (16, 2, 2),
    (16, 4, 2),
    (32, 4, 2),
    (32, 2, 4),
    (64, 4, 4),
    (64, 8, 2),
]


def _table(tmp_path: Path, noise: np.ndarray | None = None, **truth) -> Path:
    """A hybrid table written by the model itself at the parameters ``truth``."""
    rows = []
    wl = dlx.catalog.transformer(24, 1024, 16, 1024, 51200, causal=True, name="M")
    for i, (gpus, tp, pp) in enumerate(CONFIGS):
        batch = gpus // (tp * pp) * 2 * 4
        ds = dlx.predict_parallel(
            wl,
            "A100-80GB",
            "IB-HDR",
            gpus=gpus,
            tp=tp,
            pp=pp,
            batch_size=batch,
            micro_batch=2,
            recompute="selective",
            operators=False,
            **truth,
        )
        t = float(ds["step_time"]) * (math.exp(noise[i]) if noise is not None else 1.0)
        rows.append(
            f"M,24,1024,16,1024,51200,A100-80GB,{gpus},8,{tp},{pp},{gpus // (tp * pp)},"
            f"{batch},2,bf16,selective,IB-HDR,{t!r}"
        )
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_calibration_gives_back_the_parameters_that_made_the_table(tmp_path):
    path = _table(tmp_path, compute_efficiency=0.62, memory_efficiency=0.55)
    cal = dlx.calibrate(path, fit_on=dlx.fit.smallest(6), params=["compute_efficiency", "memory_efficiency"])
    values = cal.params.set_index("name")["value"]
    assert values["compute_efficiency"] == pytest.approx(0.62, rel=1e-5)
    assert values["memory_efficiency"] == pytest.approx(0.55, rel=1e-5)
    assert cal.mape_holdout < 1e-5
    # noise-free points: no residual, so the interval closes on the prediction
    width = (cal.points["upper"] - cal.points["lower"]) / cal.points["predicted"]
    assert width.max() < 1e-4
    assert cal.points["fitted"].sum() == 6
    assert cal.kind == "hybrid"


def test_interval_by_hand():
    assert t_quantile(0.9, 2) == pytest.approx(2.919986, abs=1e-6)
    assert t_quantile(0.95, 10) == pytest.approx(2.228139, abs=1e-6)
    lower, upper = interval(
        np.array([100.0]), {"a": np.array([2.0])}, np.array([[0.0025]]), ["a"], 0.0004, 2, 0.9
    )
    # var = 0.0004 + 2^2 x 0.0025 = 0.0104; half width 2.919986 x 0.101980 = 0.297780
    assert float(lower[0]) == pytest.approx(100 * math.exp(-0.297780), rel=1e-5)
    assert float(upper[0]) == pytest.approx(100 * math.exp(0.297780), rel=1e-5)
    assert np.isnan(interval(np.array([1.0]), {}, np.zeros((0, 0)), [], 0.01, 0, 0.9)[0]).all()


def test_band_covers_about_its_level_of_held_out_points(tmp_path):
    rng = np.random.default_rng(7)
    draws, covered = 6, []
    for _ in range(draws):
        path = _table(tmp_path, noise=rng.normal(0, 0.04, len(CONFIGS)), compute_efficiency=0.7)
        cal = dlx.calibrate(path, fit_on=dlx.fit.smallest(5))
        held = ~cal.points["fitted"]
        covered.extend(cal.points.loc[held, "in_band"].tolist())
        assert cal.dof == 4
    rate = float(np.mean(covered))
    # 30 held-out points against a nominal 90%: binomial sd 5.5 points of percentage
    assert 0.72 <= rate <= 1.0


@pytest.mark.skipif(not NARAYANAN.is_file(), reason="needs ../shared/reference")
def test_narayanan_table_as_it_is():
    cal = dlx.calibrate(str(NARAYANAN), fit_on="gpus <= 128")
    assert list(cal.params["name"]) == ["compute_efficiency"]
    assert cal.points["fitted"].sum() == 3
    assert np.isfinite(cal.points["predicted"]).all()
    assert any("micro_batch" in n for n in cal.notes)  # what the table leaves out is said
    ce = float(cal.params["value"].iloc[0])
    wl = dlx.catalog.transformer(24, 2304, 24, 2048, 51200, causal=True)
    ds = dlx.predict_parallel(
        wl,
        "A100-80GB",
        gpus=32,
        tp=1,
        pp=1,
        batch_size=512,
        precision="fp16",
        recompute="full",
        compute_efficiency=ce,
    )
    assert cal.points["predicted"].iloc[0] == pytest.approx(
        float(ds["hardware_flops_per_gpu"]) / 1e12, rel=1e-12
    )


def test_calibrated_prediction_of_another_configuration():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        cal = dlx.calibrate("korthikanti-2022-megatron", fit_on=dlx.fit.smallest(2))
    assert set(cal.points.loc[cal.points["fitted"], "gpus"]) == {8}
    ce = float(cal.params["value"].iloc[0])
    wl = dlx.catalog.transformer(96, 12288, 96, 2048, 51200, causal=True)
    ds = dlx.predict_parallel(
        wl,
        "A100-80GB",
        gpus=128,
        tp=8,
        pp=8,
        batch_size=128,
        precision="fp16",
        recompute="selective",
        sequence_parallel=True,
        calibration=cal,
    )
    assert float(ds["compute_efficiency"]) == ce
    assert float(ds["step_time_lower"]) < float(ds["step_time"]) < float(ds["step_time_upper"])
    assert ds["step_time_upper"].attrs["units"] == "s"
    assert ds.attrs["band_level"] == 0.9
    # an explicit setting wins over the calibration
    mine = dlx.predict_parallel(
        wl, "A100-80GB", gpus=128, tp=8, pp=8, batch_size=128, compute_efficiency=0.5, calibration=cal
    )
    assert float(mine["compute_efficiency"]) == 0.5
    # the calibration's own predict takes the shared settings of the table (A100-80GB, fp16, ...)
    same = cal.predict(
        workload=wl, gpus=128, tp=8, pp=8, batch_size=128, recompute="selective", sequence_parallel=True
    )
    assert float(same["step_time"]) == pytest.approx(float(ds["step_time"]), rel=1e-12)
    other = cal.predict(workload=wl, gpus=128, tp=4, pp=8, batch_size=128)
    assert int(other["tp"]) == 4 and str(other["precision"].values) == "fp16"


def test_leave_one_out(tmp_path):
    path = _table(tmp_path, noise=np.random.default_rng(1).normal(0, 0.03, len(CONFIGS)))
    loo = dlx.calibrate(path, fit_on="leave-one-out")
    assert not loo.points["fitted"].any()
    assert len(loo.folds) == len(CONFIGS)
    one = dlx.calibrate(path, fit_on=np.arange(len(CONFIGS)) != 3)
    assert loo.points["predicted"].iloc[3] == pytest.approx(one.points["predicted"].iloc[3], rel=1e-9)
    assert loo.mape_holdout == pytest.approx(np.abs(loo.points["error"]).mean())


def test_hybrid_points_and_bad_parameters():
    ds = dlx.predict_points("smith-2022-mt-nlg-530b")
    assert ds["tflops_per_gpu"].attrs["units"] == "TFLOP/s"
    assert ds.sizes["point"] == 3
    with pytest.raises(dlx.UnknownNameError, match="servers"):
        dlx.calibrate("smith-2022-mt-nlg-530b", params=["servers"])


def test_a_parameter_the_rows_cannot_determine_is_held_and_said(tmp_path):
    # Rows inside one node (8 GPUs, 8 per node) never use the network: its bandwidth changes no
    # prediction, so it keeps IB-HDR's catalog figure, with a warning, while the efficiency is fitted.
    path = _table(tmp_path, compute_efficiency=0.62)
    with pytest.warns(CalibrationWarning, match="bandwidth cannot be determined"):
        cal = dlx.calibrate(path, fit_on="gpus == 8", params=["compute_efficiency", "bandwidth"])
    rows = cal.params.set_index("name")
    assert rows.loc["compute_efficiency", "value"] == pytest.approx(0.62, rel=1e-5)
    assert not rows.loc["bandwidth", "identifiable"]
    assert rows.loc["bandwidth", "value"] == pytest.approx(dlx.catalog.network("IB-HDR").bandwidth_gbs)
    assert cal.points["fitted"].sum() == 4  # (tp, pp) = (1, 1), (2, 1), (4, 1), (2, 2) on 8 GPUs
