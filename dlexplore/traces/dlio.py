"""DLIO benchmark results: ``summary.json`` written by rank 0 at the end of a run.

Keys follow DLIO's ``dlio_benchmark/utils/statscounter.py`` (argonne-lcf/dlio_benchmark):
``metric.train_au_percentage`` and ``metric.train_throughput_samples_per_second`` are lists with
one value per epoch; ``train_io_mean_MB_per_second`` is ``mean(throughput) x record_length / 1024
/ 1024``, so its "MB" are MiB (2**20 bytes); ``num_accelerators``, ``num_hosts``,
``num_files_train``, ``num_samples_per_file``, ``epochs``, ``start``, ``end`` at the top level
(kept as attributes, with v0.5's ``model`` and ``metric.train_au_meet_expectation``, MLPerf Storage's
verdict "success" or "fail"; ``attrs["attr_units"]`` gives their units as a JSON object). A run
with evaluation (``do_eval``) has the same ``eval_`` numbers.

A checkpointing run (MLPerf Storage's checkpointing workload) has scalars only: the mean and
standard deviation of each checkpoint's write (``save_``) and read (``load_``) rate and duration,
and ``checkpoint_size_GB``, the checkpoint summed over the ranks. Its "GB" are GiB (2**30 bytes:
DLIO divides the bytes by 1024**3), so the rates are aggregate GiB/s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from ..errors import InputFileError

__all__ = ["read_dlio_summary"]

_PER_EPOCH = {
    "train_au_percentage": ("%", "accelerator utilisation (compute time / step time)"),
    "train_throughput_samples_per_second": ("samples/s", "training throughput"),
    "eval_au_percentage": ("%", "evaluation accelerator utilisation"),
    "eval_throughput_samples_per_second": ("samples/s", "evaluation throughput"),
}
_SCALAR = {
    "train_au_mean_percentage": ("%", "mean accelerator utilisation over epochs"),
    "train_au_stdev_percentage": ("%", "standard deviation of accelerator utilisation"),
    "train_throughput_mean_samples_per_second": ("samples/s", "mean training throughput"),
    "train_throughput_stdev_samples_per_second": ("samples/s", "std of training throughput"),
    "train_io_mean_MB_per_second": ("MiB/s", "mean training I/O throughput (DLIO's MB = MiB)"),
    "train_io_stdev_MB_per_second": ("MiB/s", "std of training I/O throughput (DLIO's MB = MiB)"),
    "eval_au_mean_percentage": ("%", "mean evaluation accelerator utilisation"),
    "eval_au_stdev_percentage": ("%", "standard deviation of evaluation accelerator utilisation"),
    "eval_throughput_mean_samples_per_second": ("samples/s", "mean evaluation throughput"),
    "eval_throughput_stdev_samples_per_second": ("samples/s", "std of evaluation throughput"),
    "eval_io_mean_MB_per_second": ("MiB/s", "mean evaluation I/O throughput (DLIO's MB = MiB)"),
    "eval_io_stdev_MB_per_second": ("MiB/s", "std of evaluation I/O throughput (DLIO's MB = MiB)"),
}

#: The run's facts kept as attributes, with their units (``attrs["attr_units"]``, a JSON object):
#: top-level keys, then MLPerf Storage's verdicts from ``metric`` ("success" when the mean
#: accelerator utilisation reached the workload's threshold, else "fail").
_FACTS = {
    "model": "",
    "num_accelerators": "count",
    "num_hosts": "count",
    "num_files_train": "count",
    "num_files_eval": "count",
    "num_samples_per_file": "count",
    "epochs": "count",
    "data_size_per_host_GB": "GiB",
    "hostname": "",
    "start": "",
    "end": "",
}
_VERDICTS = ("train_au_meet_expectation", "eval_au_meet_expectation")


_CHECKPOINT = {
    "save_checkpoint_io_mean_GB_per_second": ("GiB/s", "mean checkpoint write rate, all ranks"),
    "save_checkpoint_io_stdev_GB_per_second": ("GiB/s", "std of the checkpoint write rate"),
    "save_checkpoint_duration_mean_seconds": ("s", "mean time to write a checkpoint"),
    "save_checkpoint_duration_stdev_seconds": ("s", "std of the time to write a checkpoint"),
    "load_checkpoint_io_mean_GB_per_second": ("GiB/s", "mean checkpoint read rate, all ranks"),
    "load_checkpoint_io_stdev_GB_per_second": ("GiB/s", "std of the checkpoint read rate"),
    "load_checkpoint_duration_mean_seconds": ("s", "mean time to read a checkpoint"),
    "load_checkpoint_duration_stdev_seconds": ("s", "std of the time to read a checkpoint"),
    "checkpoint_size_GB": ("GiB", "checkpoint size summed over the ranks (DLIO's GB = GiB)"),
}


def _is_float(value: object) -> bool:
    """A JSON number that converts to a float (an integer beyond 1.8e308 does not)."""
    return isinstance(value, (int, float)) and (isinstance(value, float) or abs(value) < 2**1023)


def read_dlio_summary(path: str | os.PathLike) -> xr.Dataset:
    """Read DLIO's ``summary.json`` (or the output folder holding it) into an ``xr.Dataset``:
    per-epoch variables along ``epoch``, the means as scalars, ``train_io_mean_GB_per_second``
    (GB/s) and the record length DLIO used (bytes, from I/O / sample throughput), all with units."""
    p = Path(path)
    if p.is_dir():
        p = p / "summary.json"
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(p, f"cannot read DLIO summary.json: {err}") from err
    try:
        doc = json.loads(text)
    except RecursionError:
        raise InputFileError(p, "JSON nested too deeply; expected a DLIO summary") from None
    except json.JSONDecodeError as err:
        raise InputFileError(p, f"not valid JSON: {err.msg} (column {err.colno})", line=err.lineno) from err
    if not isinstance(doc, dict) or not isinstance(doc.get("metric"), dict):
        raise InputFileError(p, "expected a DLIO summary: an object with a 'metric' object")
    metric = doc["metric"]
    missing = [k for k in ("train_au_percentage", "train_throughput_samples_per_second") if k not in metric]
    if missing and "save_checkpoint_io_mean_GB_per_second" in metric:
        return _finish(_checkpointing(p, metric), doc, p, "checkpointing")
    if missing:
        raise InputFileError(
            p,
            f"metric lacks {', '.join(missing)} (a training run's) and save_checkpoint_io_mean_GB_per_second "
            "(a checkpointing run's)",
        )
    data = {}
    n_epochs = None
    for key, (units, long) in _PER_EPOCH.items():
        if key not in metric:
            continue
        values = metric[key]
        if not isinstance(values, list) or not all(map(_is_float, values)):
            raise InputFileError(p, f"metric.{key} must be a list of numbers (one per epoch)")
        if key.startswith("train"):
            if n_epochs is not None and len(values) != n_epochs:
                raise InputFileError(p, f"metric.{key} has {len(values)} epochs, expected {n_epochs}")
            n_epochs = len(values)
            data[key] = xr.DataArray(
                np.asarray(values, float), dims="epoch", attrs={"units": units, "long_name": long}
            )
        else:
            data[key] = xr.DataArray(
                np.asarray(values, float), dims="eval_epoch", attrs={"units": units, "long_name": long}
            )
    data.update(_scalars(p, metric, _SCALAR))
    ds = xr.Dataset(data, coords={"epoch": np.arange(1, n_epochs + 1)})
    ds["epoch"].attrs.update(units="1", long_name="epoch")
    for stage, name in (("train", "training"), ("eval", "evaluation")):
        if f"{stage}_io_mean_MB_per_second" in ds:
            ds[f"{stage}_io_mean_GB_per_second"] = ds[f"{stage}_io_mean_MB_per_second"] * 2**20 / 1e9
            ds[f"{stage}_io_mean_GB_per_second"].attrs.update(
                units="GB/s", long_name=f"mean {name} I/O throughput (decimal GB: 1e9 bytes)"
            )
    if "train_io_mean_MB_per_second" in ds:
        thr = ds.get("train_throughput_mean_samples_per_second")
        if thr is not None and float(thr) > 0:
            ds["record_length"] = ds["train_io_mean_MB_per_second"] * 2**20 / thr
            ds["record_length"].attrs.update(
                units="bytes", long_name="bytes per sample (from DLIO's I/O rate)"
            )
    return _finish(ds, doc, p, "training")


def _checkpointing(p: Path, metric: dict) -> xr.Dataset:
    """A checkpointing run's scalars (module docstring), and ``checkpoint_bytes``."""
    ds = xr.Dataset(_scalars(p, metric, _CHECKPOINT))
    if "checkpoint_size_GB" in ds:
        ds["checkpoint_bytes"] = ds["checkpoint_size_GB"] * 2**30
        ds["checkpoint_bytes"].attrs.update(units="bytes", long_name="checkpoint size summed over the ranks")
    return ds


def _scalars(p: Path, metric: dict, table: dict[str, tuple[str, str]]) -> dict[str, xr.DataArray]:
    """The numbers of ``table`` that ``metric`` holds, each with its units and meaning."""
    out = {}
    for key, (units, long) in table.items():
        if key in metric:
            if not _is_float(metric[key]):
                raise InputFileError(p, f"metric.{key} must be a number, got {metric[key]!r}")
            out[key] = xr.DataArray(float(metric[key]), attrs={"units": units, "long_name": long})
    return out


def _finish(ds: xr.Dataset, doc: dict, p: Path, workload: str) -> xr.Dataset:
    """The run's settings and the dataset's source as attributes."""
    attrs = {k: doc[k] for k in _FACTS if isinstance(doc.get(k), (int, float, str))}
    attrs.update({k: doc["metric"][k] for k in _VERDICTS if isinstance(doc["metric"].get(k), str)})
    units = {k: _FACTS.get(k, "") for k in attrs} | {"workload": ""}
    ds.attrs.update(
        attrs,
        source=f"measured: DLIO benchmark summary {p}",
        kind="measured",
        workload=workload,
        attr_units=json.dumps(units),
    )
    return ds
