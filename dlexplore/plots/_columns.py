"""Plot columns from datasets: pure numpy, no bokeh, so that the slider's path is cheap and testable.

Every function takes a prediction over the ``gpus`` dimension (``dlexplore.predict(..., gpus=[...],
buckets=True)``) and returns ``{column: 1-D numpy array}`` ready for ``ColumnDataSource.data``.
Times are converted to milliseconds and memory to GiB here, once, so that hover tools can show
them with their units.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ..errors import DlexploreError

# the figures colour by cols.BLUE etc.: the palette, as the columns name it
from .palette import BLUE, GIB, GREEN, GREY, MIB, ORANGE, PURPLE, SKY, VERMILION, YELLOW  # noqa: F401

__all__ = [
    "GPU_COUNTS",
    "PHASE_COLORS",
    "MEMORY_PARTS",
    "STEP_PARTS",
    "throughput_columns",
    "selected_columns",
    "measured_columns",
    "measured_points",
    "step_breakdown_columns",
    "memory_columns",
    "bucket_columns",
    "phase_columns",
    "largest_batch",
]

#: GPU counts the explorer predicts at once (1 to 1024, powers of two).
GPU_COUNTS = tuple(2**k for k in range(11))

#: What :func:`largest_batch` says when the batch takes no memory: any batch fits.
ANY_BATCH = 2**31 - 1

#: The step-time stack: (column, legend label, colour). Their sum is the step time.
STEP_PARTS = (
    ("compute_only", "compute", BLUE),
    ("comm_overlapped", "compute (allreduce hidden)", SKY),
    ("comm_exposed", "allreduce (exposed)", VERMILION),
    ("io_exposed", "input I/O (exposed)", ORANGE),
)

#: The memory stack: (column, dataset variable, legend label, colour).
MEMORY_PARTS = (
    ("params", "mem_params", "parameters", BLUE),
    ("grads", "mem_grads", "gradients", SKY),
    ("optimizer", "mem_optimizer", "optimizer state", GREEN),
    ("activations", "mem_activations", "activations", ORANGE),
    ("workspace", "mem_workspace", "workspace", GREY),
)

PHASE_COLORS = {
    "forward": BLUE,
    "backward": SKY,
    "optimizer": GREEN,
    "input I/O (exposed)": ORANGE,
    "allreduce": VERMILION,
}


def _along_gpus(pred: xr.Dataset, name: str) -> np.ndarray:
    """``pred[name]`` as one value per GPU count (variables constant in ``gpus`` are broadcast)."""
    if "gpus" not in pred.dims:
        raise DlexploreError("the prediction must have a 'gpus' dimension (predict(..., gpus=[...]))")
    da = pred[name]
    extra = [d for d in da.dims if d != "gpus"]
    if extra:
        raise DlexploreError(
            f"plots need one configuration per GPU count; {name!r} also varies along {extra}: "
            "select one value of each (ds.sel(...)) first"
        )
    return np.broadcast_to(da.values, (pred.sizes["gpus"],)).astype(float)


class _Point(dict):
    """One GPU count of a prediction: every variable and coordinate as a numpy value, read by name
    or attribute. A GPU-slider move reads some sixty of them; through xarray each read builds a
    DataArray, which cost more than the rest of the move together."""

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# The last point taken: a move asks every column function for the same one.
_last_point: tuple[xr.Dataset, int, _Point] | None = None


def _at(pred: xr.Dataset, gpus: int) -> _Point:
    global _last_point
    if _last_point is not None and _last_point[0] is pred and _last_point[1] == gpus:
        return _last_point[2]
    if gpus not in pred.gpus.values:
        raise DlexploreError(f"no prediction at {gpus} GPUs; predicted at {pred.gpus.values.tolist()}")
    selected = pred.sel(gpus=gpus)
    point = _Point({str(name): variable.values for name, variable in selected.variables.items()})
    _last_point = (pred, gpus, point)
    return point


def throughput_columns(pred: xr.Dataset) -> dict[str, np.ndarray]:
    """Predicted throughput (samples/s) per GPU count, ideal linear scaling from the smallest count,
    scaling efficiency (fraction), step time (ms), whether it fits in memory, and the prediction
    interval ``lower``/``upper`` (samples/s) where the prediction is calibrated
    (``throughput_lower``/``throughput_upper``, :mod:`dlexplore.fit.band`; NaN otherwise)."""
    gpus = pred.gpus.values.astype(float)
    throughput = _along_gpus(pred, "throughput")
    # linear from the smallest count that can run (a hybrid configuration cannot on too few GPUs)
    runs = np.flatnonzero(np.isfinite(throughput))
    per_gpu = throughput[runs[0]] / gpus[runs[0]] if runs.size else np.nan
    fits = _along_gpus(pred, "fits").astype(bool)
    band = {
        bound: _along_gpus(pred, f"throughput_{bound}")
        if f"throughput_{bound}" in pred
        else np.full(gpus.size, np.nan)
        for bound in ("lower", "upper")
    }
    return {
        "gpus": gpus,
        "throughput": throughput,
        "lower": band["lower"],
        "upper": band["upper"],
        "ideal": per_gpu * gpus,
        "efficiency": _along_gpus(pred, "efficiency"),
        "step_time_ms": _along_gpus(pred, "step_time") * 1e3,
        "fits": np.where(fits, "yes", "NO: out of memory"),
        "color": np.where(fits, BLUE, VERMILION),
    }


def selected_columns(pred: xr.Dataset, gpus: int) -> dict[str, np.ndarray]:
    """The one highlighted point: GPUs, throughput (samples/s), efficiency, step time (ms)."""
    point = _at(pred, gpus)
    return {
        "gpus": np.array([float(gpus)]),
        "throughput": np.array([float(point.throughput)]),
        "efficiency": np.array([float(point.efficiency)]),
        "step_time_ms": np.array([float(point.step_time) * 1e3]),
    }


def _same_gpu(names: pd.Series, gpu: str) -> np.ndarray:
    """Which of ``names`` are ``gpu``, as the catalog resolves names and aliases."""
    from .. import catalog

    def canonical(name: str) -> str:
        try:
            return catalog.gpu(name).name.lower()
        except DlexploreError:
            return name.lower()

    target = canonical(gpu)
    resolved = {name: canonical(name) for name in names.astype(str).unique()}
    return names.astype(str).map(resolved).to_numpy() == target


#: The columns of :func:`measured_columns`, in order.
MEASURED_COLUMNS = (
    "gpus",
    "throughput",
    "label",
    "group",
    "color",
    "source",
    "gpu",
    "network",
    "batch_size",
    "algorithm",
    "predicted",
    "error",
)


def measured_points(
    measured: xr.Dataset | None,
    *,
    workload: str | None = None,
    precision: str | None = None,
    gpu: str | None = None,
) -> pd.DataFrame:
    """The measured points :func:`measured_columns` lays over a prediction, one row each (empty
    when none match): the part that does not depend on the prediction, which a widget keeps
    while only the model's controls move."""
    if measured is None or "throughput" not in measured or "point" not in measured.dims:
        return pd.DataFrame()
    frame = measured.reset_coords().to_dataframe().reset_index(drop=True)
    frame = frame[np.isfinite(frame["throughput"].astype(float))]
    if workload is not None and "workload" in frame:
        frame = frame[frame["workload"].astype(str).str.lower() == workload.lower()]
    if gpu is not None and "gpu" in frame:
        frame = frame[_same_gpu(frame["gpu"], gpu)]
    if precision is not None and "precision" in frame and frame["precision"].nunique() > 1:
        frame = frame[frame["precision"] == precision]
    return frame


def measured_columns(
    measured: xr.Dataset | None,
    pred: xr.Dataset | None = None,
    *,
    workload: str | None = None,
    precision: str | None = None,
    algorithm: str | None = None,
    gpu: str | None = None,
    points: pd.DataFrame | None = None,
) -> dict[str, np.ndarray]:
    """Measured throughput points to lay over the prediction.

    Points are kept when their ``workload`` (and ``gpu``, and, where the dataset has several,
    ``precision``) match: the line predicts one GPU, so points measured on another are not its.
    Each point's ``label`` names its setup; ``error`` is (predicted - measured) / measured (as
    :data:`dlexplore.fit.ERROR_DEFINITION` defines it) against the predicted line shown,
    interpolated in log-log between GPU counts. Given
    ``algorithm``, only points that ran it (or ran on one GPU, or do not say) are compared: a
    parameter-server measurement is not an error of a ring-allreduce prediction, so the others get
    NaN. ``group`` (the legend) and ``color`` say which: ``"measured"`` (vermilion) or
    ``"measured, not compared"`` (grey). ``points``: :func:`measured_points` of the same
    ``measured``, ``workload``, ``precision`` and ``gpu``, kept from an earlier call.
    """
    empty = {
        n: np.array(
            [], dtype=float if n in ("gpus", "throughput", "batch_size", "predicted", "error") else object
        )
        for n in MEASURED_COLUMNS
    }
    if points is None:
        points = measured_points(measured, workload=workload, precision=precision, gpu=gpu)
    frame = points
    if frame.empty:
        return empty
    labels = _point_labels(frame)
    gpus = frame["gpus"].to_numpy(float)
    throughput = frame["throughput"].to_numpy(float)
    predicted = np.full(len(frame), np.nan)
    if pred is not None:
        line = throughput_columns(pred)
        predicted = np.exp(
            np.interp(
                np.log(gpus), np.log(line["gpus"]), np.log(line["throughput"]), left=np.nan, right=np.nan
            )
        )
    comparable = np.ones(len(frame), dtype=bool)
    if algorithm is not None and "algorithm" in frame:
        ran = frame["algorithm"].astype(str).to_numpy()
        comparable = (ran == algorithm) | np.isin(ran, ("none", "unknown", "")) | (gpus == 1)
        predicted = np.where(comparable, predicted, np.nan)
    source = measured.attrs.get("source", "") if measured is not None else ""
    column = lambda name, default="": (  # noqa: E731
        frame[name].astype(str).to_numpy(object) if name in frame else np.full(len(frame), default, object)
    )
    return {
        "gpus": gpus,
        "throughput": throughput,
        "label": np.array(labels, dtype=object),
        "group": np.where(comparable, "measured", "measured, not compared").astype(object),
        "color": np.where(comparable, VERMILION, GREY).astype(object),
        "source": np.array([source] * len(frame), dtype=object),
        "gpu": column("gpu"),
        "network": column("network"),
        "batch_size": frame["batch_size"].to_numpy(float)
        if "batch_size" in frame
        else np.full(len(frame), np.nan),
        "algorithm": column("algorithm"),
        "predicted": predicted,
        "error": (predicted - throughput) / throughput,
    }


def _point_labels(frame: pd.DataFrame) -> list[str]:
    """A legend label per point: its setup (or algorithm), and the 1-GPU baseline named as such."""
    if "setup" in frame:
        base = frame["setup"].astype(str)
    elif "algorithm" in frame:
        base = frame["algorithm"].astype(str)
    else:
        base = pd.Series(["measured"] * len(frame), index=frame.index)
    if "precision" in frame and frame["precision"].nunique() > 1:
        base = base + " (" + frame["precision"].astype(str) + ")"
    return base.tolist()


def step_breakdown_columns(pred: xr.Dataset, selected: int | None = None) -> dict[str, np.ndarray]:
    """Step time per GPU count (ms), split so that the parts add up to the step time.

    ``compute_only`` is compute with no communication under it; ``comm_overlapped`` is the part of
    the backward pass that runs while gradients are being allreduced (communication hidden behind
    compute); ``comm_exposed`` and ``io_exposed`` are what the step waits for. The selected GPU count
    gets an opaque bar with an outline.
    """
    gpus = pred.gpus.values
    compute = _along_gpus(pred, "time_compute")
    comm = _along_gpus(pred, "time_comm")
    exposed = _along_gpus(pred, "time_comm_exposed")
    overlapped = np.clip(comm - exposed, 0.0, compute)
    chosen = gpus == selected
    return {
        "label": np.array([str(int(g)) for g in gpus], dtype=object),
        "gpus": gpus.astype(float),
        "compute_only": (compute - overlapped) * 1e3,
        "comm_overlapped": overlapped * 1e3,
        "comm_exposed": exposed * 1e3,
        "io_exposed": _along_gpus(pred, "time_io_exposed") * 1e3,
        # the parts only the hybrid model has (dlexplore.plots.hybrid), none here
        "tp_exposed": np.zeros(gpus.size),
        "pp_comm": np.zeros(gpus.size),
        "bubble": np.zeros(gpus.size),
        "step_time": _along_gpus(pred, "step_time") * 1e3,
        "comm_total": comm * 1e3,
        "alpha": np.where(chosen, 1.0, 0.45),
        "outline": np.where(chosen, "black", "white").astype(object),
    }


def memory_columns(pred: xr.Dataset, gpus: int) -> dict[str, np.ndarray]:
    """Memory per GPU at ``gpus`` GPUs, in GiB, one stacked bar, with the device capacity."""
    point = _at(pred, gpus)
    data: dict[str, np.ndarray] = {"label": np.array(["per GPU"], dtype=object)}
    for column, variable, _, _ in MEMORY_PARTS:
        data[column] = np.array([float(point[variable]) / GIB])
    data["total"] = np.array([float(point.mem_total) / GIB])
    data["capacity"] = np.array([float(point.mem_capacity) / GIB])
    return data


def largest_batch(pred: xr.Dataset, gpus: int) -> int:
    """The largest per-GPU batch size that fits in memory at ``gpus`` GPUs (0 if none does).

    Memory is affine in the batch size (only activations grow with it), so the answer follows from
    one prediction: ``floor((capacity - fixed) / activations_per_sample)``.
    """
    point = _at(pred, gpus)
    per_sample = float(point.mem_activations) / float(point.batch_size)
    fixed = float(point.mem_total) - float(point.mem_activations)
    room = float(point.mem_capacity) - fixed
    if per_sample <= 0:  # a model with no activation memory known (one made from a trace)
        return ANY_BATCH if room >= 0 else 0
    if room < per_sample:
        return 0
    return int(np.floor(room / per_sample))


def bucket_columns(pred: xr.Dataset, gpus: int) -> dict[str, np.ndarray]:
    """Every gradient bucket's allreduce at ``gpus`` GPUs: start and end (ms from the step start),
    size (MiB), time (ms), algbw and busbw (GB/s)."""
    if "bucket_start" not in pred:
        raise DlexploreError("the prediction has no bucket schedule: use predict(..., buckets=True)")
    point = _at(pred, gpus)
    real = ~np.isnan(point.bucket_bytes)  # a sweep pads workloads with fewer buckets with NaN
    start = point.bucket_start[real] * 1e3
    time = point.bucket_time[real] * 1e3
    return {
        "bucket": point.bucket[real].astype(float),
        "row": np.array(["allreduce"] * int(real.sum()), dtype=object),
        "start": start,
        "end": start + time,
        "ready": point.bucket_ready[real] * 1e3,
        "time": time,
        "mib": point.bucket_bytes[real] / MIB,
        "algbw": point.bucket_algbw[real],
        "busbw": point.bucket_busbw[real],
    }


def phase_columns(pred: xr.Dataset, gpus: int) -> dict[str, np.ndarray]:
    """The compute stream of one step at ``gpus`` GPUs as segments (ms): forward, backward, the
    wait for the last allreduce, the optimizer update, then any input I/O the step waits for."""
    point = _at(pred, gpus)
    t_f, t_b = float(point.time_forward) * 1e3, float(point.time_backward) * 1e3
    wait = float(point.time_comm_exposed) * 1e3
    t_o = float(point.time_optimizer) * 1e3
    t_io = float(point.time_io_exposed) * 1e3
    names = ["forward", "backward", "optimizer", "input I/O (exposed)"]
    starts = [0.0, t_f, t_f + t_b + wait, t_f + t_b + wait + t_o]
    lengths = [t_f, t_b, t_o, t_io]
    return {
        "phase": np.array(names, dtype=object),
        "row": np.array(["compute"] * 4, dtype=object),
        "start": np.array(starts),
        "end": np.array(starts) + np.array(lengths),
        "time": np.array(lengths),
        "color": np.array([PHASE_COLORS[n] for n in names], dtype=object),
    }
