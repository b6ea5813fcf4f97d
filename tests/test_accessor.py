"""``ds.dlx`` on the datasets dlexplore returns: kind, source, units, breakdown, compare, plot, quantify;
and what ``import dlexplore`` loads (the accessor, not bokeh, ipywidgets, scipy or dask)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from _public_datasets import DATASETS, quiet

import dlexplore as dlx
from dlexplore.errors import DlexploreError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "traces" / "gloo-mlp-2rank"
PUBLISHED = "horovod-2017-16gpu-25gbe"


@pytest.fixture(scope="module")
def prediction() -> xr.Dataset:
    return dlx.predict("resnet101", "P100", "25GbE", gpus=[1, 4, 8, 16], batch_size=64, buckets=True)


@pytest.fixture(scope="module")
def measured() -> xr.Dataset:
    return dlx.measured.load(PUBLISHED)


@pytest.fixture(scope="module")
def breakdown() -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dlx.load_trace(SAMPLE).breakdown()


def test_kind_source_and_units(prediction, measured, breakdown):
    assert prediction.dlx.kind == "prediction" and measured.dlx.kind == "measured"
    assert breakdown.dlx.kind == "breakdown"
    assert dlx.compare(prediction, measured).dlx.kind == "comparison"
    assert xr.Dataset({"x": ("i", [1.0])}).dlx.kind == "dataset"
    assert prediction.dlx.source.startswith("predicted: dlexplore")
    assert measured.dlx.source.startswith("measured: Horovod project README")
    assert prediction.dlx.units["throughput"] == "samples/s" and prediction.dlx.units["gpus"] == "count"
    assert breakdown.dlx.units["time_idle"] == "s"
    with pytest.raises(DlexploreError, match="no attrs\\['source'\\]"):
        _ = xr.Dataset().dlx.source


def test_a_predictions_breakdown_adds_up_to_its_step_time(prediction):
    parts = prediction.dlx.breakdown()
    total = parts.compute_only + parts.comm_overlapped + parts.comm_exposed + parts.io_exposed
    np.testing.assert_allclose(total.values, prediction.step_time.values, rtol=1e-12)
    one = parts.sel(gpus=1)  # one GPU communicates nothing: the whole compute is compute_only
    assert float(one.comm_overlapped) == 0 and float(one.comm_exposed) == 0
    assert float(one.compute_only) == float(prediction.time_compute)
    # at 16 GPUs the hidden part is what communication takes beyond what the step waits for
    sixteen = prediction.sel(gpus=16)
    hidden = float(sixteen.time_comm - sixteen.time_comm_exposed)
    assert float(parts.sel(gpus=16).comm_overlapped) == pytest.approx(
        min(hidden, float(sixteen.time_compute))
    )
    assert all(parts[name].attrs["units"] == "s" for name in parts.data_vars)


def test_breakdown_where_it_applies(breakdown, measured):
    assert breakdown.dlx.breakdown() is breakdown
    with pytest.raises(DlexploreError, match="a measured dataset .* has no step-time breakdown"):
        measured.dlx.breakdown()


def test_compare_either_way_round(prediction, measured):
    forward = prediction.dlx.compare(measured)
    backward = measured.dlx.compare(prediction)
    xr.testing.assert_identical(forward, backward)
    xr.testing.assert_identical(forward, prediction.dlx.compare(PUBLISHED))
    # the error by hand, from the two columns: |predicted - measured| / measured
    compared = np.isfinite(forward.predicted.values)
    by_hand = (
        np.abs(forward.predicted.values - forward.measured.values)[compared]
        / forward.measured.values[compared]
    )
    assert compared.sum() >= 1
    assert float(forward.mape) == pytest.approx(by_hand.mean())
    with pytest.raises(
        DlexploreError, match="needs a prediction and a measured dataset; this one is a prediction"
    ):
        prediction.dlx.compare(prediction)


def test_plot_draws_each_kind(prediction, measured, breakdown):
    from bokeh.models import ColumnDataSource, GridPlot

    layout = prediction.dlx.plot()
    assert isinstance(layout, GridPlot)  # the explorer's four figures
    line = next(m for m in layout.select({"type": ColumnDataSource}) if m.name == "throughput_predicted")
    np.testing.assert_allclose(line.data["throughput"], prediction.throughput.values)

    points = measured.dlx.plot()
    data = next(iter(points.select({"type": ColumnDataSource}))).data
    np.testing.assert_array_equal(data["x"], measured.gpus.values)
    np.testing.assert_array_equal(data["y"], measured.throughput.values)
    assert points.yaxis[0].axis_label == "throughput (samples/s)"

    bars = breakdown.dlx.plot()
    data = next(iter(bars.select({"type": ColumnDataSource}))).data
    assert list(data["label"]) == ["0", "1"]
    np.testing.assert_allclose(data["step_time"], breakdown.step_time.mean("step").values * 1e3)

    scatter = prediction.dlx.compare(measured).dlx.plot()
    sources = [s for s in scatter.select({"type": ColumnDataSource}) if "error" in s.data]
    np.testing.assert_array_equal(sources[0].data["x"], measured.throughput.values)


def test_plot_of_a_sweep_has_a_line_per_other_setting():
    comm = dlx.predict_comm(
        "allreduce", "ring", nbytes=[1e6, 1e8], gpus=[8, 16, 64], bandwidth=10, latency=5e-6
    )
    fig = comm.dlx.plot()
    lines = [r for r in fig.renderers if hasattr(r.glyph, "line_width")]
    assert comm.time.dims == ("nbytes", "gpus") or set(comm.time.dims) == {"bytes", "gpus"}
    assert len(lines) == 3  # one per GPU count, against the first sweep
    with pytest.raises(DlexploreError, match="one number"):
        dlx.predict_comm("allreduce", "ring", nbytes=1e8, gpus=8, bandwidth=10, latency=5e-6).dlx.plot()


def test_quantify_gives_pint_quantities(prediction):
    pytest.importorskip("pint_xarray")  # the test extra installs it; it is not a core dependency
    q = prediction.dlx.quantify()
    assert str(q.throughput.data.units) == "sample / second"
    np.testing.assert_array_equal(q.throughput.data.magnitude, prediction.throughput.values)
    assert str((q.throughput * q.step_time).pint.to("sample").data.units) == "sample"


def test_import_registers_the_accessor_and_loads_nothing_heavy():
    code = (
        "import json, sys, xarray, dlexplore\n"
        "heavy = [m for m in ('bokeh', 'ipywidgets', 'jupyter_bokeh', 'scipy', 'dask', 'distributed',"
        " 'h5py', 'h5netcdf', 'IPython', 'pint') if m in sys.modules]\n"
        "print(json.dumps({'dlx': hasattr(xarray.Dataset(), 'dlx'), 'heavy': heavy,"
        " 'predict': callable(dlexplore.predict)}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"dlx": True, "heavy": [], "predict": True}


def test_without_the_plots_extra_the_core_works_and_plots_say_what_to_install():
    # A None entry in sys.modules is how Python marks a module as not importable: as in a core
    # install (pip install dlexplore), which has no bokeh or ipywidgets since the plots extra.
    code = (
        "import json, sys\n"
        "sys.modules['bokeh'] = sys.modules['ipywidgets'] = None\n"
        "import dlexplore\n"
        "ds = dlexplore.predict('resnet50', 'V100-16GB', '25GbE', gpus=[1, 8], batch_size=64)\n"
        "out = {'breakdown': float(ds.dlx.breakdown().compute_only.sel(gpus=1))}\n"
        "calls = (('plot', ds.dlx.plot), ('explorer', lambda: dlexplore.Explorer),\n"
        "         ('report', lambda: dlexplore.report))\n"
        "for name, call in calls:\n"
        "    try:\n"
        "        call()\n"
        "    except ModuleNotFoundError as err:\n"
        "        out[name] = [str(err), err.name]\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["breakdown"] > 0
    assert out["plot"][1] == "bokeh" and "pip install 'dlexplore[plots]'" in out["plot"][0]
    assert out["explorer"][1] == "bokeh" and out["explorer"][0].startswith("dlexplore.widgets needs bokeh")
    assert (
        out["report"][0].startswith("dlexplore.report needs bokeh") and "dlexplore[plots]" in out["report"][0]
    )


@pytest.mark.parametrize("label", sorted(DATASETS))
def test_every_public_dataset_plots_or_says_why_not(label):
    from bokeh.models import ColumnDataSource

    ds = quiet(DATASETS[label])
    try:
        drawn = ds.dlx.plot()
    except DlexploreError as err:  # one number, nothing numeric, an empty table: said in words
        assert any(
            w in str(err) for w in ("one number", "no numeric variable", "to plot against", "is empty")
        ), err
        return
    sizes = [len(next(iter(s.data.values()))) for s in drawn.select({"type": ColumnDataSource}) if s.data]
    assert sizes and max(sizes) > 0, f"{label}: a figure with nothing in it"
