"""Prediction intervals in the plot builders: the explorer's throughput band and the calibration plot.

A calibrated prediction (TensorFlow's DGX-1 benchmarks, ResNet-50 fitted on 1-4 GPUs) carries
``throughput_lower``/``throughput_upper``; the throughput figure shows them as a band and hides the
band (and its legend entry) for an uncalibrated prediction. The calibration plot draws every
measured point with its prediction and interval; the page renders with BokehJS inlined.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from bokeh.embed import file_html
from bokeh.resources import INLINE

import dlexplore as dlx
from dlexplore.fit.calibrate import CalibrationWarning
from dlexplore.plots import ExplorerFigures, calibration_columns, calibration_figure, throughput_columns

GPUS = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def calibration():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        return dlx.calibrate("tf-benchmarks-2017-dgx1", fit_on="gpus <= 4 and workload == resnet50")


def test_throughput_band_follows_the_calibration(calibration):
    calibrated = calibration.predict(workload="resnet50", gpus=GPUS, buckets=True)
    cols = throughput_columns(calibrated)
    assert np.all(cols["lower"] < cols["throughput"]) and np.all(cols["throughput"] < cols["upper"])
    np.testing.assert_allclose(cols["upper"], calibrated["throughput_upper"].values)
    figures = ExplorerFigures(GPUS)
    figures.show(calibrated, 8)
    assert figures.band.visible and figures.band_item.visible
    assert figures.band_item.label["value"] == "90% prediction interval (calibrated)"
    source = figures.sources["throughput_predicted"]
    np.testing.assert_allclose(source.data["lower"], calibrated["throughput_lower"].values)
    plain = dlx.predict("resnet50", "P100", "NVLink1", gpus=GPUS, batch_size=64, buckets=True)
    figures.show(plain, 8)
    assert not figures.band.visible and not figures.band_item.visible
    assert np.isnan(figures.sources["throughput_predicted"].data["lower"]).all()
    assert "throughput_predicted" in file_html(figures.layout, INLINE, "band")


def test_calibration_plot(calibration):
    cols = calibration_columns(calibration)
    points = calibration.points
    assert len(cols["measured"]) == len(points)
    np.testing.assert_array_equal(cols["upper"], points["upper"].to_numpy(float))
    assert set(cols["role"]) == {"fitted", "held out"}
    assert (cols["role"] == "fitted").sum() == int(points["fitted"].sum())
    fig = calibration_figure(calibration)
    assert (
        fig.select_one({"name": "calibration_points"}).data["predicted"].tolist()
        == points["predicted"].tolist()
    )
    assert "throughput" in fig.xaxis[0].axis_label
    html = file_html(fig, INLINE, "calibration")
    assert "calibration_figure" in html


def test_explorer_draws_the_calibrated_band():
    from dlexplore.widgets import Explorer

    explorer = Explorer("resnet50", "P100", "NVLink1", gpus_per_node=8, measured="tf-benchmarks-2017-dgx1")
    assert not explorer.figures.band.visible
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        # the four points (1-8 GPUs) and three parameters (compute efficiency, the NVLink's
        # bandwidth and latency): one degree of freedom left for the interval
        explorer.calibrate("gpus <= 8")
    data = explorer.figures.sources["throughput_predicted"].data
    assert explorer.figures.band.visible
    assert np.all(np.asarray(data["lower"]) < np.asarray(data["throughput"]))
    np.testing.assert_allclose(data["upper"], explorer.prediction["throughput_upper"].values)
    # no point held out: the band drawn is that interval
    band = explorer.figures.sources["throughput_band"].data
    np.testing.assert_allclose(band["lower"], data["lower"])
    np.testing.assert_allclose(band["upper"], data["upper"])
    assert "90% prediction interval" in explorer.fit_report.value
    explorer.reset_calibration()
    assert not explorer.figures.band.visible
