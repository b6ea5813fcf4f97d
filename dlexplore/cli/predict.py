"""``dlexplore predict``: data-parallel training (every option a sweep), the hybrid-parallel model
with ``--tp/--pp/--zero ...``, energy with ``--energy`` and time to accuracy with ``--target``.

Kept whole: the ``predict`` command's options (data-parallel, hybrid, energy, time to accuracy) and
the code that passes each on; one command, one module.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import xarray as xr

from .options import UsageError, add_output, numbers, parse_bytes, sizes, split_list, split_workloads
from .output import TABLE_COLUMNS, dataset_to_frame, emit

#: Variables in the order the predict command prints them.
PREDICT_COLUMNS = (
    "throughput",
    "step_time",
    "efficiency",
    "time_compute",
    "time_comm",
    "time_comm_exposed",
    "time_io",
    "time_io_exposed",
    "time_forward",
    "time_backward",
    "time_optimizer",
    "comm_bytes",
    "n_buckets",
    "mem_params",
    "mem_grads",
    "mem_optimizer",
    "mem_activations",
    "mem_workspace",
    "mem_total",
    "mem_capacity",
    "fits",
)


#: Energy variables ``predict --energy`` adds (see dlexplore.model.energy).
ENERGY_COLUMNS = ("energy_step", "energy_sample", "power_average", "energy_epoch_kwh", "time_epoch")


def run(args: argparse.Namespace) -> None:
    from ..model import predict

    kwargs: dict[str, object] = {}
    for option in (
        "workload",
        "gpu",
        "network",
        "gpus",
        "batch_size",
        "gpus_per_node",
        "algorithm",
        "precision",
        "optimizer",
        "bandwidth",
        "latency",
        "intra_link",
        "intra_bandwidth",
        "intra_latency",
        "servers",
        "compute_efficiency",
        "bucket_size",
        "overlap",
        "storage",
        "io_threads",
        "gamma",
        "grad_accum",
        "attention",
        "layout",
        "fusion",
        "framework",
        "transport",
        "memory_efficiency",
        "kernel_time",
        "unaligned_efficiency",
    ):
        value = getattr(args, option)
        if value is not None:
            # a one-element list stays a (length-1) sweep: every option given becomes a column
            kwargs[option] = value
    if args.network is None and args.bandwidth is not None and args.latency is not None:
        kwargs["network"] = None  # a custom network, labelled as such
    if args.no_prefetch:
        kwargs["prefetch"] = False
    if args.workspace is not None:
        kwargs["workspace"] = args.workspace
    hybrid = {name: getattr(args, name) for name in _HYBRID_OPTIONS}
    if any(value not in (None, False) for name, value in hybrid.items() if name != "seq"):
        ds = _predict_hybrid(kwargs, hybrid)
        if args.energy:
            from ..model.energy import energy, parallel_phases

            ds = ds.merge(_energy_columns(energy(parallel_phases(ds), **_energy_options(args))))
        # One configuration: its inputs lead the row, as the swept options do for data parallelism;
        # the compute breakdown by operator (time_operator) is a dimension a row cannot hold.
        inputs = [name for name in _HYBRID_INPUTS if name in ds.coords]
        outputs = [v for v in ds.data_vars if "operator" not in ds[v].dims]
        frame = dataset_to_frame(ds.reset_coords(inputs), [*inputs, *outputs])
        table = (*inputs, *_HYBRID_TABLE, *(ENERGY_COLUMNS if args.energy else ()))
        emit(ds, frame, args, "predicted hybrid-parallel training step", table)
        return
    if args.seq is not None:
        kwargs["seq"] = args.seq
    ds = predict(**kwargs)
    columns = PREDICT_COLUMNS
    if args.energy:
        from ..model.energy import energy

        ds = ds.merge(_energy_columns(energy(ds, **_energy_options(args))))
        columns = (*PREDICT_COLUMNS, *ENERGY_COLUMNS)
    table = (*TABLE_COLUMNS, *ENERGY_COLUMNS) if args.energy else TABLE_COLUMNS
    if args.target is not None:
        ds, columns, table = _time_to_accuracy(ds, args, columns, table)
    frame = dataset_to_frame(ds, columns)
    emit(ds, frame, args, "predicted data-parallel training step", table)


#: What ``predict --target`` adds (dlexplore.model.time_to_accuracy).
TARGET_COLUMNS = (
    "global_batch",
    "steps_to_target",
    "epochs_to_target",
    "time_to_target",
    "energy_to_target",
    "reachable",
    "fastest",
)


def _time_to_accuracy(
    ds: xr.Dataset, args: argparse.Namespace, columns: Sequence[str], table: Sequence[str]
) -> tuple[xr.Dataset, tuple, tuple]:
    """``predict --target``: steps, time (and energy) to the target accuracy per configuration."""
    from ..model.time_to_accuracy import time_to_accuracy

    energy = ds if args.energy else None
    tta = time_to_accuracy(ds, args.target or None, energy=energy)
    extra = [c for c in TARGET_COLUMNS if c in tta]
    merged = ds.assign({c: tta[c] for c in extra})
    merged.attrs = dict(tta.attrs)
    return merged, (*columns, *extra), (*table, *extra)


def _target(text: str) -> object:
    """``--target``: '' (the workload's catalog entry), a workload name, or key=value pairs."""
    text = text.strip()
    if "=" not in text:
        return text
    fields: dict[str, object] = {}
    for item in split_list(text):
        key, _, value = (part.strip() for part in item.partition("="))
        if key in ("rule", "target", "workload"):
            fields[key] = value
            continue
        try:
            fields[key] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--target {key}: expected a number, got {value!r}") from None
    return fields


def _energy_options(args: argparse.Namespace) -> dict[str, object]:
    return dict(pue=args.pue, node_power_w=args.node_power, samples_per_epoch=args.samples_per_epoch)


def _energy_columns(ds: xr.Dataset) -> xr.Dataset:
    return ds[[name for name in ENERGY_COLUMNS if name in ds]].reset_coords(drop=True)


_HYBRID_OPTIONS = (
    "tp",
    "pp",
    "dp",
    "micro_batch",
    "seq",
    "recompute",
    "sequence_parallel",
    "zero",
    "offload",
    "schedule",
    "virtual_stages",
    "memory_convention",
    "tp_overlap",
)


#: The configuration columns of a hybrid prediction, in the order they lead its row.
_HYBRID_INPUTS = (
    "workload",
    "gpu",
    "network",
    "gpus",
    "gpus_per_node",
    "dp",
    "tp",
    "pp",
    "micro_batch",
    "batch_size",
    "seq",
    "precision",
    "recompute",
    "sequence_parallel",
    "zero",
    "offload",
    "schedule",
    "virtual_stages",
)


_HYBRID_TABLE = (
    "throughput",
    "tokens_per_s",
    "step_time",
    "efficiency",
    "mfu",
    "time_bubble",
    "time_tp_comm_exposed",
    "time_pp_comm",
    "time_dp_comm_exposed",
    "mem_total",
    "mem_capacity",
    "fits",
)


def _predict_hybrid(kwargs: dict[str, object], hybrid: dict[str, object]) -> xr.Dataset:
    """``predict --tp/--pp/--zero ...``: dlexplore.predict_parallel, which takes one configuration."""
    from ..model import predict_parallel

    call: dict[str, object] = {}
    for name, value in kwargs.items():
        if isinstance(value, list):
            if len(value) != 1:
                raise UsageError(
                    f"--{name.replace('_', '-')}: the hybrid-parallel model takes one "
                    "value per option (use dlexplore advise to compare configurations)"
                )
            value = value[0]
        call[name] = value
    unsupported = sorted(
        set(call)
        - {
            "workload",
            "gpu",
            "network",
            "gpus",
            "batch_size",
            "gpus_per_node",
            "intra_link",
            "precision",
            "optimizer",
            "compute_efficiency",
            "overlap",
            "workspace",
            "attention",
            "memory_efficiency",
            "kernel_time",
            "unaligned_efficiency",
            "bandwidth",
            "latency",
            "intra_bandwidth",
            "intra_latency",
        }
    )
    if unsupported:
        raise UsageError(f"with --tp/--pp/--zero ... these options do not apply: {unsupported}")
    call.update({k: v for k, v in hybrid.items() if v not in (None, False)})
    return predict_parallel(**call)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``predict`` command and its options."""
    p = sub.add_parser(
        "predict",
        help="predict step time, throughput, memory of a configuration",
        description="Predict data-parallel training. Comma-separated values sweep "
        "a parameter; every option given becomes a column.",
    )
    _add_data_parallel_options(p)
    _add_hybrid_options(p)
    _add_energy_options(p)
    add_output(p)
    p.set_defaults(func=run)


def _add_data_parallel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workload",
        type=split_workloads,
        help="workload id(s), e.g. resnet50, or transformer:LAYERS,HIDDEN,HEADS,SEQ,VOCAB",
    )
    p.add_argument("--gpu", type=split_list, help="GPU id(s), e.g. P100")
    p.add_argument("--network", type=split_list, help="network id(s), e.g. 25GbE (default 100GbE)")
    p.add_argument("--gpus", type=numbers(integer=True), help="total GPUs, e.g. 1,2,4,8")
    p.add_argument("--batch-size", type=numbers(integer=True), help="batch size per GPU (samples)")
    p.add_argument("--gpus-per-node", type=numbers(integer=True), help="GPUs per node (default 1)")
    p.add_argument(
        "--algorithm",
        type=split_list,
        help="nccl (NCCL's own choice, the default), nvls, ring, tree, recursive_doubling, "
        "halving_doubling, hierarchical, parameter_server",
    )
    p.add_argument(
        "--servers", type=numbers(integer=True), help="parameter servers (with --algorithm parameter_server)"
    )
    p.add_argument("--precision", type=split_list, help="fp32, tf32, fp16, bf16")
    p.add_argument("--optimizer", type=split_list, help="sgd, momentum, adam")
    p.add_argument("--bandwidth", type=numbers(), help="network bandwidth, GB/s (overrides the network's)")
    p.add_argument("--latency", type=numbers(), help="network latency, s (overrides the network's)")
    p.add_argument("--intra-link", type=split_list, help="intra-node link id (default PCIe3)")
    p.add_argument("--intra-bandwidth", type=numbers(), help="GB/s")
    p.add_argument("--intra-latency", type=numbers(), help="s")
    p.add_argument(
        "--compute-efficiency",
        type=numbers(),
        help="fraction of peak FLOP/s large GEMMs reach (default: fitted to bundled runs on the GPU, else "
        "its published GEMM measurements)",
    )
    p.add_argument(
        "--memory-efficiency", type=numbers(), help="fraction of memory bandwidth memory-bound kernels reach"
    )
    p.add_argument("--kernel-time", type=numbers(), help="fixed time per GPU kernel, s")
    p.add_argument(
        "--unaligned-efficiency",
        type=numbers(),
        help="share of its aligned rate a tensor-core GEMM reaches with operand rows aligned to 4-8 bytes, "
        "not 16 (half that at 2 bytes; default 0.406, measured on an H200)",
    )
    p.add_argument(
        "--grad-accum",
        type=numbers(integer=True),
        help="micro-batches of --batch-size per GPU per step (gradient accumulation)",
    )
    p.add_argument("--attention", type=split_list, help="transformers: fused (default), unfused, flash")
    p.add_argument(
        "--layout",
        type=split_list,
        help="CNNs: nhwc (default, channels last) or nchw (PyTorch's default: cuDNN transposes each "
        "convolution on tensor cores)",
    )
    p.add_argument(
        "--fusion",
        type=split_list,
        help="CNNs: none (default: batch norm, add and ReLU as separate kernels) or bn_add_relu "
        "(one fused kernel each, as MXNet's --fuse-bn-add-relu)",
    )
    p.add_argument(
        "--framework",
        type=split_list,
        help="ddp (default: 25 MiB buckets) or horovod (fusion, cycle, negotiation)",
    )
    p.add_argument("--transport", type=split_list, help="auto (TCP on Ethernet; default), tcp, rdma")
    p.add_argument(
        "--bucket-size", type=sizes, help="gradient bucket size, e.g. 25MiB (default), 64MB, 0 (per layer)"
    )
    p.add_argument(
        "--overlap", type=numbers(), help="1 overlaps communication with backward (default), 0 does not"
    )
    p.add_argument("--gamma", type=numbers(), help="reduction cost, s/byte (default 0)")
    p.add_argument(
        "--storage", type=split_list, help="storage tier the input is read from (default: synthetic data)"
    )
    p.add_argument("--io-threads", type=numbers(integer=True), help="reads in flight per GPU (default 4)")
    p.add_argument("--no-prefetch", action="store_true", help="do not overlap input with compute")
    p.add_argument("--workspace", type=parse_bytes, help="workspace allowance, e.g. 1GiB")


def _add_hybrid_options(p: argparse.ArgumentParser) -> None:
    h = p.add_argument_group(
        "hybrid parallelism (dlexplore.predict_parallel; --batch-size is then the global batch)"
    )
    h.add_argument("--tp", type=int, help="tensor-parallel degree")
    h.add_argument("--pp", type=int, help="pipeline-parallel stages")
    h.add_argument("--dp", type=int, help="data-parallel replicas (default gpus / (tp x pp))")
    h.add_argument("--micro-batch", type=int, help="samples per micro-batch")
    h.add_argument("--seq", type=int, help="sequence length (default the workload's)")
    h.add_argument("--recompute", choices=("none", "selective", "full"), help="activation recomputation")
    h.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism")
    h.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage (3 = FSDP)")
    h.add_argument("--offload", action="store_true", help="optimizer state and master weights on the CPU")
    h.add_argument(
        "--schedule",
        choices=("1f1b", "gpipe", "interleaved"),
        help="pipeline schedule (default 1f1b; interleaved: Megatron's interleaved 1F1B)",
    )
    h.add_argument("--virtual-stages", type=int, help="model chunks per GPU with --schedule interleaved")
    h.add_argument(
        "--memory-convention",
        choices=("megatron", "megatron-fp32-grads", "zero"),
        help="how model states are counted (default megatron: 18 B/param in bf16, 20 in fp16)",
    )
    h.add_argument(
        "--tp-overlap",
        type=float,
        help="share of tensor-parallel communication hidden behind the GEMMs (0..1)",
    )


def _add_energy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--energy", action="store_true", help="add energy per step and sample (J) and average power (W)"
    )
    p.add_argument("--pue", type=float, default=1.0, help="power usage effectiveness (with --energy)")
    p.add_argument(
        "--node-power",
        type=float,
        default=0.0,
        help="W per node besides the GPUs: CPUs, NICs, fans (with --energy)",
    )
    p.add_argument(
        "--samples-per-epoch", type=int, help="add energy (kWh) and time (s) per epoch (with --energy)"
    )
    p.add_argument(
        "--target",
        type=_target,
        nargs="?",
        const="",
        default=None,
        metavar="SPEC",
        help="add steps, time (and with --energy energy) to the target accuracy: the "
        "workload's convergence parameters from the catalog, another workload's "
        "(--target resnet50), or s_min=STEPS,b_noise=SAMPLES[,samples_per_epoch=N,"
        "max_batch=N,epochs_budget=N,rule=linear|lars|lamb]",
    )
