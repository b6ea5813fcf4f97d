"""Strategy search: which dp x tp x pp, micro-batch, recomputation and ZeRO stage to train with.

:func:`advise` enumerates every valid configuration of a workload on ``gpus`` GPUs, predicts each
with :func:`dlexplore.model.parallel.predict_parallel`'s model, drops those that do not fit in GPU
memory, and ranks the rest by predicted throughput. :func:`pareto_configurations` keeps the
configurations no other beats on both step time and energy (:func:`dlexplore.model.energy.pareto_front`
on two columns of the frame).

Energy per step comes from :func:`dlexplore.model.energy.energy` (compute, communication and the
pipeline bubble each at their power); ``energy="tdp"`` asks for the stand-in ``gpus x TDP x
step_time`` instead (every GPU drawing its board power limit for the whole step, an upper bound that
ignores idle and communication phases), and the ``energy_model`` column says which was used.

The widget over it is :class:`dlexplore.widgets.advisor.AdvisorWidget`, the command
``dlexplore advise`` (:mod:`dlexplore.cli.advise`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from .. import catalog, validation
from ..errors import DlexploreError
from .energy import pareto_front
from .memory import DEFAULT_WORKSPACE
from .parallel import RECOMPUTE_MODES, HybridSetup, evaluate_hybrid, hybrid_setup

__all__ = ["advise", "pareto_configurations", "ADVISE_COLUMNS", "COLUMN_UNITS"]


#: Columns of :func:`advise`'s frame, in order, with their units.
COLUMN_UNITS: dict[str, str] = {
    "dp": "count",
    "tp": "count",
    "pp": "count",
    "micro_batch": "samples",
    "micro_batches": "count",
    "recompute": "",
    "sequence_parallel": "",
    "zero": "",
    "step_time": "s",
    "throughput": "samples/s",
    "tokens_per_s": "tokens/s",
    "mfu": "1",
    "bubble_fraction": "1",
    "time_compute": "s",
    "time_tp_comm": "s",
    "time_pp_comm": "s",
    "time_dp_comm_exposed": "s",
    "mem_total": "bytes",
    "mem_capacity": "bytes",
    "energy_per_step": "J",
    "energy_model": "",
}


ADVISE_COLUMNS = tuple(COLUMN_UNITS)


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0 and (limit is None or d <= limit)]


def _configurations(
    wl: catalog.Workload,
    gpus: int,
    batch_size: int,
    gpus_per_node: int,
    stages: list[int],
    max_micro_batch: int | None,
) -> list[dict]:
    """Every (dp, tp, pp, micro-batch, ZeRO stage) :func:`advise` enumerates."""
    if wl.kind == "transformer":
        tps = _divisors(wl.config["heads"], min(gpus_per_node, gpus))
        pps = _divisors(wl.config["layers"], gpus)
    else:
        tps, pps = [1], [1]
    out = []
    for tp in tps:
        for pp in pps:
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            if batch_size % dp:
                continue
            per_replica = batch_size // dp
            mbs = [
                b
                for b in (2**k for k in range(per_replica.bit_length()))
                if per_replica % b == 0 and (max_micro_batch is None or b <= max_micro_batch)
            ]
            for mb in mbs:
                for z in stages:
                    if (z >= 2 and pp > 1) or (z > 0 and dp == 1):
                        continue  # DeepSpeed's pipeline takes ZeRO 0-1; nothing to shard over
                    out.append({"dp": dp, "tp": tp, "pp": pp, "micro_batch": mb, "zero": z})
    return out


def _energy_function() -> Callable | None:
    from .energy import energy

    return energy


def _phase_energy(
    rows: list[dict], gpus: int, batch_size: int, dev: catalog.GPU, gpus_per_node: int, function: Callable
) -> list[float]:
    """Energy per step (J) of every row, ``function`` (:func:`dlexplore.model.energy.energy`) called
    once on all rows' phases (:func:`dlexplore.model.energy.parallel_phases`)."""
    import numpy as np
    import xarray as xr

    from .energy import parallel_phases

    def column(name: str) -> xr.DataArray:
        return xr.DataArray(np.array([r[name] for r in rows], dtype=float), dims="config")

    step = xr.Dataset(
        {
            name: column(key)
            for name, key in (
                ("step_time", "step_time"),
                ("time_compute", "time_compute"),
                ("time_optimizer", "_time_optimizer"),
                ("time_offload", "_time_offload"),
                ("time_tp_comm", "time_tp_comm"),
                ("time_pp_comm", "time_pp_comm"),
                ("time_dp_comm_exposed", "time_dp_comm_exposed"),
                ("time_bubble", "_time_bubble"),
            )
        },
        coords={"gpus": gpus, "batch_size": batch_size, "gpu": dev.name, "gpus_per_node": gpus_per_node},
    )
    return [float(e) for e in function(parallel_phases(step), gpu=dev)["energy_step"].values]


def advise(
    workload: str | catalog.Workload,
    gpus: int,
    gpu: str | catalog.GPU,
    network: str | catalog.Link | None = "IB-HDR",
    *,
    batch_size: int,
    seq: int | None = None,
    precision: str = "bf16",
    optimizer: str = "adam",
    gpus_per_node: int = 8,
    intra_link: str | catalog.Link = "NVLink3",
    compute_efficiency: float | None = None,
    recompute: Iterable[str] = RECOMPUTE_MODES,
    zero: Iterable[int] = (0, 1, 2, 3),
    sequence_parallel: bool = True,
    schedule: str = "1f1b",
    max_micro_batch: int | None = None,
    overlap: float = 0.0,
    workspace: float = DEFAULT_WORKSPACE,
    energy: Callable | str | None = None,
) -> pd.DataFrame:
    """Rank every valid parallel configuration of ``workload`` on ``gpus`` GPUs by throughput.

    ``batch_size`` is the global batch per step (samples). Enumerated: ``tp`` among the divisors of
    the heads up to ``gpus_per_node`` (tensor parallelism stays inside a node), ``pp`` among the
    divisors of the layers, ``dp = gpus / (tp pp)`` whole, micro-batches the powers of two dividing
    the per-replica batch ``batch_size / dp`` (up to ``max_micro_batch``), each ``recompute`` mode
    and ZeRO stage (2 and 3 only without pipelining, as DeepSpeed requires; 1-3 only with
    ``dp > 1``). ``overlap`` is the fraction of data-parallel communication allowed to hide behind
    the last micro-batch's backward (see :mod:`dlexplore.model.parallel`). With
    ``sequence_parallel`` it is on wherever ``tp > 1``. CNN workloads get ``tp = pp = 1`` and
    recompute ``none`` only.

    ``energy``: ``None`` uses :func:`dlexplore.model.energy.energy` when available (compute at its
    power, tensor/pipeline/data-parallel communication at communication power, the pipeline bubble
    at idle power), else the stand-in; ``"tdp"`` forces the stand-in ``gpus x TDP x step_time``; a
    function is called like ``energy(prediction, gpu=...)`` on a dataset with a ``config``
    dimension and must return a dataset with ``energy_step`` (J).

    Returns a :class:`pandas.DataFrame` of the configurations that fit, best throughput first, with
    :data:`ADVISE_COLUMNS` (units in :data:`COLUMN_UNITS` and ``frame.attrs["units"]``);
    ``frame.attrs`` also holds ``evaluated``, ``dropped`` (configurations that did not fit in
    memory) and ``source``. Raises :class:`DlexploreError` when nothing fits.
    """
    st = hybrid_setup(workload, gpu, network, intra_link, "PCIe4", precision, optimizer, seq)
    gpus = validation.gpu_count("gpus", gpus)
    batch_size = validation.batch_size("batch_size", batch_size, gpus=validation.MAX_GPUS)
    gpus_per_node = validation.gpu_count("gpus_per_node", gpus_per_node)
    validation.precision_for(st.dev, st.precision)
    _check_settings(max_micro_batch, compute_efficiency, overlap, workspace)
    wl = st.wl
    modes = [str(r).lower() for r in recompute]
    stages = [int(z) for z in zero]
    energy = _energy_model(energy)
    if wl.kind != "transformer":
        modes = ["none"]
    configs = _configurations(wl, gpus, batch_size, gpus_per_node, stages, max_micro_batch)
    rows, evaluated, dropped = _evaluate_all(
        st,
        configs,
        modes,
        gpus,
        batch_size,
        gpus_per_node,
        sequence_parallel,
        schedule,
        dict(compute_efficiency=compute_efficiency, overlap=overlap, workspace=workspace),
    )
    if not rows:
        raise DlexploreError(
            f"no configuration of {wl.name!r} fits on {gpus} x {st.dev.name} with a global batch of "
            f"{batch_size} ({evaluated} evaluated, {dropped} do not fit in memory)"
        )
    if callable(energy):
        values = _phase_energy(rows, gpus, batch_size, st.dev, gpus_per_node, energy)
        label = f"{getattr(energy, '__module__', '?')}.{getattr(energy, '__name__', 'energy')}"
    else:
        values = [gpus * st.dev.tdp_w * r["step_time"] for r in rows]
        label = "stand-in: gpus x TDP x step_time"
    for row, value in zip(rows, values, strict=True):
        row.update(energy_per_step=value, energy_model=label)
    frame = pd.DataFrame(rows, columns=list(ADVISE_COLUMNS))
    frame = frame.sort_values(["throughput", "mem_total"], ascending=[False, True], kind="stable")
    frame = frame.reset_index(drop=True)
    frame.attrs.update(
        evaluated=evaluated,
        dropped=dropped,
        units=dict(COLUMN_UNITS),
        workload=wl.name,
        gpu=st.dev.name,
        gpus=gpus,
        batch_size=batch_size,
        source="predicted: dlexplore parallel model (dlexplore.model.parallel)",
    )
    return frame


def _check_settings(
    max_micro_batch: int | None, compute_efficiency: float | None, overlap: float, workspace: float
) -> None:
    if max_micro_batch is not None:
        validation.count("max_micro_batch", max_micro_batch, units="samples")
    if compute_efficiency is not None:
        validation.fraction("compute_efficiency", compute_efficiency, allow_zero=False)
    validation.fraction("overlap", overlap)
    validation.nonnegative("workspace", workspace, units="bytes")


def _energy_model(energy: Callable | str | None) -> Callable | None:
    """The energy function :func:`advise` uses: the model's, a given one, or None for the stand-in."""
    if energy is None:
        return _energy_function()
    if energy == "tdp":
        return None
    if not callable(energy):
        raise DlexploreError(f"energy must be None, 'tdp' or a function, got {energy!r}")
    return energy


def _evaluate_all(
    st: HybridSetup,
    configs: list[dict],
    modes: list[str],
    gpus: int,
    batch_size: int,
    gpus_per_node: int,
    sequence_parallel: bool,
    schedule: str,
    settings: dict,
) -> tuple[list[dict], int, int]:
    """Every configuration under every recompute mode, one vectorised model call per mode: the rows
    of those that fit, how many were evaluated and how many dropped (out of memory)."""
    rows, evaluated, dropped = [], 0, 0
    columns = {
        k: np.array([c[k] for c in configs], dtype=float) for k in ("dp", "tp", "pp", "micro_batch", "zero")
    }
    sp = columns["tp"] > 1 if sequence_parallel else np.zeros(len(configs), dtype=bool)
    for mode in modes:
        if not configs:
            break
        v = evaluate_hybrid(
            st,
            {
                **columns,
                "gpus": gpus,
                "batch_size": batch_size,
                "sequence_parallel": sp,
                "gpus_per_node": gpus_per_node,
                **settings,
            },
            recompute=mode,
            schedule=schedule,
        )
        for i, config in enumerate(configs):
            evaluated += 1
            if not v["fits"][i]:
                dropped += 1
                continue
            row = {k: float(v[k][i]) for k in ADVISE_COLUMNS if k in v}
            row.update(config, recompute=mode, sequence_parallel=bool(sp[i]))
            row.update(
                _time_bubble=float(v["time_bubble"][i]),
                _time_optimizer=float(v["time_optimizer"][i]),
                _time_offload=float(v["time_offload"][i]),
            )
            rows.append(row)
    return rows, evaluated, dropped


def pareto_configurations(
    frame: pd.DataFrame, x: str = "step_time", y: str = "energy_per_step"
) -> pd.DataFrame:
    """The rows of ``frame`` no other row beats on both ``x`` and ``y`` (both minimised), sorted by
    ``x``; of rows equal on both, the first is kept. The front itself is
    :func:`dlexplore.model.energy.pareto_front`'s."""
    for col in (x, y):
        if col not in frame.columns:
            raise DlexploreError(f"pareto_front: no column {col!r}; columns are {list(frame.columns)}")
    ordered = frame.sort_values([x, y], kind="stable")
    on_front = pareto_front(ordered[x].to_numpy(dtype=float), ordered[y].to_numpy(dtype=float))
    out = ordered[on_front]
    out = out[~out.duplicated(subset=[x, y], keep="first")]
    out.attrs = dict(frame.attrs)
    return out
