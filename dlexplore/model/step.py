"""Step time, throughput, scaling efficiency and memory of synchronous data-parallel training.

One step on each GPU: forward, backward, gradient allreduce, optimizer update, with the next batch
read from storage meanwhile. Gradients are grouped into buckets (fusion buffers) in the order the
backward pass produces them; a bucket's allreduce starts when its last gradient is ready and the
previous bucket's allreduce has finished (one communication stream), so communication overlaps the
rest of the backward pass. With ``t_f`` forward, ``t_b`` backward, bucket ``k`` ready at
``r_k = t_f + f_k t_b`` (``f_k`` the fraction of backward done) and taking ``c_k``::

    e_k = max(r_k, e_{k-1}) + c_k                      (e_0 = 0)
    time_comm          = sum_k c_k
    time_comm_exposed  = overlap * max(0, e_K - t_f - t_b) + (1 - overlap) * time_comm
    step_time          = t_f + t_b + time_comm_exposed + t_update + time_io_exposed
    throughput         = gpus * batch_size / step_time
    efficiency         = step_time(1 GPU) / step_time

Which link carries the allreduce: when all GPUs sit in one node (``gpus <= gpus_per_node``) the
intra-node link; otherwise a flat algorithm is limited by the network (its slowest link), while the
``hierarchical`` algorithm uses both (see :mod:`dlexplore.model.comm`).

Frameworks' own delays (Horovod's cycle and negotiation, parameter servers) are in
:mod:`dlexplore.model.gradsync`, reduction in host memory (Horovod's CPU allreduce) in
:mod:`dlexplore.model.hoststaging`, NICs shared by a node's GPUs in :mod:`dlexplore.model.topology`.

What this lacks: contention between communication and compute for GPU memory bandwidth and SMs,
rail-optimised networks, stragglers (every rank is assumed identical), and the dependence of
compute efficiency on batch size. Compare with measurements and calibrate before trusting
extrapolations.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Sequence
from typing import Any

import pandas as pd
import xarray as xr

from .. import catalog, validation
from ..errors import DlexploreError
from .compute import COMPUTE_PARAMETERS, default_source, normalize_precision, plateau_source
from .conventions import finish_dataset, is_sweep
from .memory import DEFAULT_WORKSPACE
from .operators import normalize_fusion, normalize_layout
from .step_grid import CATEGORICAL_PARAMETERS, NUMERIC_PARAMETERS
from .step_one import DEFAULT_BUCKET_SIZE, StepArrays, gradient_buckets, predict_one, step_arrays

__all__ = [
    "predict",
    "predict_arrays",
    "StepArrays",
    "gradient_buckets",
    "DEFAULT_BUCKET_SIZE",
    "NUMERIC_PARAMETERS",
]


def predict(
    workload: str | catalog.Workload | Sequence[str] = "resnet50",
    gpu: str | catalog.GPU | Sequence[str] = "V100-16GB",
    network: str | catalog.Link | Sequence[str] | None = "100GbE",
    *,
    gpus: int | Sequence[int] = 1,
    batch_size: int | Sequence[int] = 32,
    bandwidth: float | Sequence[float] | None = None,
    latency: float | Sequence[float] | None = None,
    gpus_per_node: int | Sequence[int] = 1,
    nics_per_node: int | Sequence[int] = 0,
    intra_link: str | catalog.Link | Sequence[str] = "PCIe3",
    intra_bandwidth: float | Sequence[float] | None = None,
    intra_latency: float | Sequence[float] | None = None,
    algorithm: str | Sequence[str] = "nccl",
    servers: int | Sequence[int] = 0,
    precision: str | Sequence[str] = "fp32",
    optimizer: str | Sequence[str] = "momentum",
    compute_efficiency: float | Sequence[float] | None = None,
    bucket_size: float | Sequence[float] | None = None,
    overlap: float | Sequence[float] = 1.0,
    gamma: float | Sequence[float] = 0.0,
    storage: str | catalog.StorageTier | Sequence[str] | None = None,
    io_threads: int | Sequence[int] = 4,
    prefetch: bool = True,
    workspace: float = DEFAULT_WORKSPACE,
    buckets: bool = False,
    grad_accum: int | Sequence[int] = 1,
    seq: int | Sequence[int] | None = None,
    attention: str | Sequence[str] = "fused",
    layout: str | Sequence[str] = "nhwc",
    fusion: str | Sequence[str] = "none",
    memory_efficiency: float | Sequence[float] | None = None,
    kernel_time: float | Sequence[float] | None = None,
    winograd_speedup: float | Sequence[float] | None = None,
    flash_efficiency: float | Sequence[float] | None = None,
    unaligned_efficiency: float | Sequence[float] | None = None,
    framework: str | Sequence[str] = "ddp",
    transport: str | Sequence[str] = "auto",
    servers_colocated: bool | Sequence[bool] = True,
    tcp_efficiency: float | Sequence[float] | None = None,
    ps_efficiency: float | Sequence[float] | None = None,
    cycle_time: float | Sequence[float] | None = None,
    negotiation_time: float | Sequence[float] | None = None,
    host_staging: bool | Sequence[bool] = False,
    host_bandwidth: float | Sequence[float] | None = None,
    server_bandwidth: float | Sequence[float] | None = None,
    operators: bool = False,
) -> xr.Dataset:
    """Predict step time, throughput, scaling efficiency and memory of data-parallel training.

    Every argument may be a scalar or a 1-D sequence (a sweep); each sweep becomes a dimension of
    the result, named like the argument. Units: ``bandwidth``/``intra_bandwidth`` GB/s (1e9 bytes/s)
    per direction, ``latency``/``intra_latency`` s, ``batch_size`` samples per GPU, ``bucket_size``
    and ``workspace`` bytes, ``gamma`` s/byte, ``compute_efficiency`` and ``overlap`` fractions.

    Parameters
    ----------
    workload, gpu, network, intra_link, storage:
        Catalog ids (or catalog records). ``bandwidth``/``latency`` override the network's figures
        and ``intra_bandwidth``/``intra_latency`` the intra-node link's; ``network=None`` requires
        both ``bandwidth`` and ``latency``. ``storage=None`` means synthetic data (no reading).
    gpus, gpus_per_node, nics_per_node:
        Total GPUs, GPUs per node (default 1: every GPU talks over the network) and network
        adapters per node (default 0: one per GPU); the GPUs of a node share its NICs in the
        algorithms that send from all of them at once (:mod:`dlexplore.model.topology`).
    algorithm:
        Gradient allreduce: ``ring``, ``tree``, ``recursive_doubling``, ``halving_doubling``,
        ``hierarchical`` (ring inside nodes, ring between them) or ``parameter_server`` with
        ``servers`` servers.
    precision:
        ``fp32``, ``tf32``, or mixed precision ``fp16``/``bf16`` (16-bit compute, activations and
        gradients; fp32 master weights).
    optimizer:
        ``sgd``, ``momentum`` or ``adam``: sets optimizer-state memory and update traffic.
    compute_efficiency:
        Fraction of peak FLOP/s that large GEMMs and convolutions reach (the plateau of the GEMM
        efficiency curve, :mod:`dlexplore.model.operators`); default fitted to the bundled
        training runs on the GPU (or its architecture) at the precision where there are any, else
        from published GEMM measurements, :func:`dlexplore.catalog.gemm_plateau`.
    memory_efficiency, kernel_time, winograd_speedup, flash_efficiency:
        The rest of the per-operator compute model: the fraction of memory bandwidth that
        memory-bound kernels reach, the fixed time of one kernel (s), the FLOP saving of
        Winograd's algorithm on 3x3 convolutions (applied on vector units only), and the fraction
        of peak of a flash-attention kernel. Defaults: :func:`dlexplore.catalog.model_default` for
        the GPU (its architecture's fitted value where ``defaults_by_architecture.csv`` has one, else
        ``defaults.csv``'s); the variable's ``source`` attribute says which served.
    unaligned_efficiency:
        The share of its aligned rate a matrix product on tensor cores reaches when a weight
        dimension leaves operand rows aligned to 4 or 8 bytes, not 16 (half that at 2 bytes: an odd
        16-bit dimension such as GPT-2's 50,257-entry vocabulary); default measured on an H200,
        :func:`dlexplore.model.operators.alignment_factor`.
    grad_accum:
        Micro-batches per step (gradient accumulation): each GPU runs ``grad_accum`` forward and
        backward passes of ``batch_size`` samples, then one allreduce and one update; only the
        last micro-batch's backward hides the allreduce. The global batch is
        ``gpus * batch_size * grad_accum``.
    seq, attention:
        Transformers only: the sequence length (tokens; default the workload's) and the attention
        kernels (``fused``, ``unfused`` or ``flash``).
    layout:
        CNNs only: the activations' memory layout, ``nhwc`` (channels last, what cuDNN's
        tensor-core convolutions take) or ``nchw`` (PyTorch's default), for which cuDNN
        transposes each convolution's input and output on tensor cores (fp16, bf16, tf32 on
        Volta and later; nothing on vector units).
    fusion:
        CNNs only: ``none`` (each batch norm, residual add and ReLU its own kernel: PyTorch eager,
        TensorFlow without XLA) or ``bn_add_relu`` (each batch norm one cuDNN kernel with the add
        and ReLU after it, as MXNet's ``--fuse-bn-add-relu`` runs it): fewer passes over the
        activations.
    bucket_size:
        Gradient fusion buffer, bytes (default 25 MiB, as PyTorch DDP; 64 MiB with Horovod);
        0 = one allreduce per layer.
    overlap:
        1 lets communication overlap the backward pass as the bucket schedule allows; 0 serialises it.
    framework, transport, servers_colocated, tcp_efficiency, ps_efficiency, cycle_time, negotiation_time:
        How the framework synchronises gradients: Horovod's cycle and negotiation, kernel TCP's
        efficiency, parameter servers' placement and link efficiency
        (:mod:`dlexplore.model.gradsync`).
    host_staging, host_bandwidth, server_bandwidth:
        ``host_staging=True`` reduces gradients in host memory: copied off the GPU, through a
        fusion buffer, Open MPI's ring with the sums on the CPU, and back (Horovod's CPU
        allreduce; :mod:`dlexplore.model.hoststaging`). ``host_bandwidth`` (GB/s) is the memory
        traffic one host CPU core sustains; ``server_bandwidth`` (GB/s) the memory traffic of a
        parameter server's CPU receiving, summing and sending gradients.
    prefetch:
        Whether the next batch is read while the current one computes.
    buckets:
        Also return the schedule of every gradient bucket's allreduce on a ``bucket`` dimension
        (bucket 0 is the first one the backward pass fills): ``bucket_bytes``,
        ``bucket_ready``, ``bucket_start``, ``bucket_end`` (s from the start of the step),
        ``bucket_time`` (s), ``bucket_algbw`` and ``bucket_busbw`` (GB/s).
    operators:
        Also return ``time_kernel``, the time of every kernel of one step on a ``kernel``
        dimension (with its ``kernel_category`` and ``kernel_phase``): the per-operator detail
        behind ``time_operator``.

    Returns
    -------
    xarray.Dataset
        Variables ``step_time``, ``time_forward``, ``time_backward``, ``time_optimizer``,
        ``time_compute``, ``time_operator`` (compute time per step by operator category, on an
        ``operator`` dimension), ``time_comm``, ``time_comm_exposed``, ``time_io``, ``time_io_exposed``
        (s), ``throughput`` (samples/s), ``efficiency`` (1), ``comm_bytes`` (bytes),
        ``n_buckets``, ``mem_params``, ``mem_grads``, ``mem_optimizer``, ``mem_activations``,
        ``mem_workspace``, ``mem_total``, ``mem_capacity`` (bytes) and ``fits``; every variable has
        ``units`` and ``long_name``; ``attrs["source"]`` says the numbers are predicted.
    """
    # Kept whole: the two dictionaries name every argument once, by kind (categorical, numeric);
    # the rest is four short steps (check, sweep, evaluate, combine).
    args: dict[str, Any] = dict(
        workload=workload,
        gpu=gpu,
        network=network,
        intra_link=intra_link,
        algorithm=algorithm,
        precision=precision,
        optimizer=optimizer,
        storage=storage,
        bucket_size=bucket_size,
        seq=seq,
        attention=attention,
        layout=[normalize_layout(v) for v in layout] if is_sweep(layout) else normalize_layout(str(layout)),
        fusion=[normalize_fusion(v) for v in fusion] if is_sweep(fusion) else normalize_fusion(str(fusion)),
        framework=framework,
        transport=transport,
        servers_colocated=servers_colocated,
        host_staging=host_staging,
    )
    numeric = dict(
        gpus=gpus,
        batch_size=batch_size,
        bandwidth=bandwidth,
        latency=latency,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        servers=servers,
        compute_efficiency=compute_efficiency,
        overlap=overlap,
        gamma=gamma,
        io_threads=io_threads,
        grad_accum=grad_accum,
        memory_efficiency=memory_efficiency,
        kernel_time=kernel_time,
        winograd_speedup=winograd_speedup,
        flash_efficiency=flash_efficiency,
        unaligned_efficiency=unaligned_efficiency,
        tcp_efficiency=tcp_efficiency,
        ps_efficiency=ps_efficiency,
        cycle_time=cycle_time,
        negotiation_time=negotiation_time,
        host_bandwidth=host_bandwidth,
        server_bandwidth=server_bandwidth,
    )
    workspace = _check(args, workspace)
    swept = [name for name in CATEGORICAL_PARAMETERS if is_sweep(args[name])]
    for name in swept:
        values = list(args[name])
        if not values:
            raise DlexploreError(f"{name}: the sweep is empty")
        labels = [label_of(v) for v in values]
        if len(set(labels)) != len(labels):
            raise DlexploreError(f"{name}: the sweep repeats values {labels}")
    pieces = []
    for combo in itertools.product(*(list(args[name]) for name in swept)):
        one = dict(args, **dict(zip(swept, combo, strict=True)))
        pieces.append(
            predict_one(one, numeric, bool(prefetch), float(workspace), bool(buckets), bool(operators))
        )
    ds = _combine(pieces, swept, [[label_of(v) for v in args[name]] for name in swept])
    if compute_efficiency is None and "compute_efficiency" in ds:  # say which plateau served
        ds.variables["compute_efficiency"].attrs["source"] = plateau_source(
            _each(args["gpu"]), _each(args["precision"])
        )
    for name in COMPUTE_PARAMETERS[1:]:
        if numeric[name] is None and name in ds:  # and which default
            ds.variables[name].attrs["source"] = default_source(name, _each(args["gpu"]))
    title = "data-parallel training step"
    return finish_dataset(ds, title=title)


def _check(args: dict[str, Any], workspace: float) -> float:
    """The checks of the arguments the grid does not validate; ``workspace`` validated."""
    workspace = validation.nonnegative("workspace", workspace, units="bytes")
    if args["bucket_size"] is not None:
        validation.nonnegative("bucket_size", args["bucket_size"], units="bytes", allow_inf=True)
    for one_gpu, one_precision in itertools.product(_each(args["gpu"]), _each(args["precision"])):
        validation.precision_for(catalog.gpu(one_gpu), normalize_precision(one_precision))
    return workspace


@functools.cache
def _option_defaults() -> dict[str, Any]:
    """:func:`predict`'s categorical and numeric arguments with their defaults."""
    parameters = inspect.signature(predict).parameters
    return {name: parameters[name].default for name in (*CATEGORICAL_PARAMETERS, *NUMERIC_PARAMETERS)}


def predict_arrays(
    workload: str | catalog.Workload = "resnet50",
    gpu: str | catalog.GPU = "V100-16GB",
    network: str | catalog.Link | None = "100GbE",
    *,
    prefetch: bool = True,
    workspace: float = DEFAULT_WORKSPACE,
    **options: Any,
) -> StepArrays:
    """:func:`predict` of one configuration as numpy arrays, without building a Dataset.

    Takes :func:`predict`'s arguments (same units and defaults); numeric ones may be sweeps,
    categorical ones may not (one workload, GPU, precision, algorithm, ...). Returns a
    :class:`~dlexplore.model.step_one.StepArrays`: :func:`predict`'s variables but the
    per-operator ones, on the sweeps' grid. The numbers are :func:`predict`'s; what it saves is
    the Dataset around them (about 0.03 s a call), which is most of a calibration's time.
    """
    defaults = _option_defaults()
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"predict_arrays() got unexpected keyword arguments {unknown}")
    values = {**defaults, **options, "workload": workload, "gpu": gpu, "network": network}
    args = {name: values[name] for name in CATEGORICAL_PARAMETERS}
    swept = [name for name in CATEGORICAL_PARAMETERS if is_sweep(args[name])]
    if swept:
        raise DlexploreError(
            f"predict_arrays evaluates one configuration: {', '.join(swept)} given as a sequence; "
            "use dlexplore.predict to sweep them"
        )
    workspace = _check(args, workspace)
    numeric = {name: values[name] for name in NUMERIC_PARAMETERS}
    return step_arrays(args, numeric, bool(prefetch), float(workspace))


def _each(value: Any) -> list:
    return list(value) if is_sweep(value) else [value]


def label_of(value: object) -> object:
    name = getattr(value, "name", None)
    return name if name is not None else value


def _combine(pieces: list[xr.Dataset], dims: list[str], labels: list[list]) -> xr.Dataset:
    """Concatenate per-combination datasets along the categorical sweep dimensions."""
    if not dims:
        return pieces[0]
    size = len(pieces) // len(labels[0])
    groups = [
        _combine(pieces[i * size : (i + 1) * size], dims[1:], labels[1:]) for i in range(len(labels[0]))
    ]
    groups = [g.drop_vars(dims[0]) if dims[0] in g.coords else g for g in groups]
    # Names get object dtype: pandas 3 would infer its string dtype, which xarray's idxmax cannot
    # handle. Numbers (bucket_size) keep their numeric dtype.
    names = all(isinstance(label, str) for label in labels[0])
    index = pd.Index(labels[0], name=dims[0], dtype=object if names else None)
    out = xr.concat(groups, dim=index, coords="different", compat="equals", join="outer")
    return out
