"""The columns a measurement CSV may have: what each holds, its units, and how it is checked.

One table here defines every column once, so the reader, the dataset attrs and the documentation
agree. Units and long names match the model's (``dlexplore.model``) where the names are shared, so
that measured and predicted datasets can be laid over each other.

Kept whole: one table: every column a measured file may have, with its units, meaning and the tables
it belongs to (most of the module), and the units they may be given in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Column",
    "COLUMNS",
    "TRAINING",
    "HYBRID",
    "COMMUNICATION",
    "CONVERGENCE",
    "NOISE_SCALE",
    "TABLES",
    "REQUIRED",
    "MEASURED",
    "UNIT_ALIASES",
]

TRAINING = "training"
COMMUNICATION = "communication"
#: Steps (or final quality) against the global batch: published large-batch results.
CONVERGENCE = "convergence"
#: Critical batch sizes and gradient noise scales per task (McCandlish et al. 2018's Table 1).
NOISE_SCALE = "noise_scale"
#: Hybrid-parallel training (tensor, pipeline, data parallelism): LLM tables such as Narayanan et
#: al. 2021's Table 1, with the parallel layout and the transformer's sizes per row.
HYBRID = "hybrid"
TABLES = (TRAINING, COMMUNICATION, CONVERGENCE, NOISE_SCALE, HYBRID)


@dataclass(frozen=True)
class Column:
    """One column of a measurement table.

    ``role`` is ``"coord"`` (identifies a point) or ``"var"`` (a measured quantity). ``kind`` is
    ``"str"``, ``"int"`` (a positive integer) or ``"float"``. ``minimum`` is the smallest value
    allowed for floats and ``strict`` says whether it is excluded. ``expect`` is how the error
    messages describe a good value.
    """

    name: str
    role: str
    kind: str
    units: str | None
    long_name: str
    tables: frozenset[str]
    expect: str
    minimum: float = 0.0
    strict: bool = False


_BOTH = frozenset({TRAINING, COMMUNICATION})
_ALL = frozenset(TABLES)
_TRAIN = frozenset({TRAINING})
_COMM = frozenset({COMMUNICATION})
_CONV = frozenset({CONVERGENCE})
_NOISE = frozenset({NOISE_SCALE})
_HYB = frozenset({HYBRID})

#: Every column, in the order the datasets and :func:`~dlexplore.measured.to_frame` list them.
COLUMNS: dict[str, Column] = {
    c.name: c
    for c in [
        Column(
            "workload",
            "coord",
            "str",
            None,
            "workload (catalog id)",
            _TRAIN | _CONV | _HYB,
            "a workload id such as resnet50",
        ),
        Column(
            "global_batch",
            "coord",
            "int",
            "samples",
            "global batch (samples per optimizer step, all workers)",
            _CONV | _HYB,
            "a positive integer (samples per step, all workers together)",
        ),
        Column(
            "rule",
            "coord",
            "str",
            None,
            "optimizer and learning-rate rule",
            _CONV,
            "a rule such as linear, lars, lamb",
        ),
        Column(
            "target_metric",
            "coord",
            "str",
            None,
            "quality metric of the target",
            _CONV,
            "a metric such as 'ImageNet top-1 error'",
        ),
        Column(
            "task",
            "coord",
            "str",
            None,
            "task or data set, as the source names it",
            _NOISE,
            "a task such as ImageNet or 'Billion Word LSTM'",
        ),
        Column(
            "phase",
            "coord",
            "str",
            None,
            "when in training the value holds",
            _NOISE,
            "a phase such as start or average",
        ),
        Column(
            "sample_unit",
            "coord",
            "str",
            None,
            "what one sample of the batch is",
            _NOISE,
            "a unit such as images, tokens or frames",
        ),
        Column(
            "bound",
            "coord",
            "str",
            None,
            "how the value bounds the quantity ('' a value, 'lower' a lower bound, "
            "'min'/'max' the extremes of a group)",
            _NOISE,
            "one of lower, min, max or empty",
        ),
        Column(
            "collective",
            "coord",
            "str",
            None,
            "collective operation",
            _COMM,
            "a collective such as allreduce",
        ),
        Column("gpu", "coord", "str", None, "GPU (catalog id)", _BOTH | _HYB, "a GPU id such as V100-16GB"),
        Column(
            "network",
            "coord",
            "str",
            None,
            "network or link the GPUs communicate over (catalog id)",
            _BOTH | _HYB,
            "a network or link id such as 25GbE",
        ),
        Column(
            "intra_link",
            "coord",
            "str",
            None,
            "link between the GPUs of one node (catalog id), where network names the one between nodes",
            _TRAIN,
            "an intra-node link id such as NVLink3",
        ),
        Column(
            "gpus",
            "coord",
            "int",
            "count",
            "GPUs (total devices)",
            _BOTH | _HYB,
            "a positive integer (the total number of GPUs)",
        ),
        Column(
            "gpus_per_node",
            "coord",
            "int",
            "count",
            "GPUs used per node",
            _BOTH | _HYB,
            "a positive integer no larger than gpus",
        ),
        Column(
            "batch_size",
            "coord",
            "int",
            "samples",
            "batch size per GPU",
            _TRAIN,
            "a positive integer (samples per GPU per step)",
        ),
        Column(
            "precision",
            "coord",
            "str",
            None,
            "training precision",
            _TRAIN | _HYB,
            "one of fp32, tf32, fp16, bf16 (case-insensitive)",
        ),
        Column(
            "algorithm",
            "coord",
            "str",
            None,
            "gradient exchange or collective algorithm",
            _BOTH,
            "an algorithm label such as ring",
        ),
        Column(
            "bytes", "coord", "int", "bytes", "message size", _COMM, "a positive integer (bytes per rank)"
        ),
        Column(
            "grad_accum",
            "coord",
            "int",
            "count",
            "micro-batches per step (gradient accumulation)",
            _TRAIN,
            "a positive integer (micro-batches of batch_size per GPU per step)",
        ),
        Column(
            "seq",
            "coord",
            "int",
            "tokens",
            "sequence length",
            _TRAIN | _HYB,
            "a positive integer (tokens per sequence)",
        ),
        Column(
            "layout",
            "coord",
            "str",
            None,
            "memory layout of a CNN's activations",
            _TRAIN,
            "nhwc (channels last) or nchw",
        ),
        Column(
            "fusion",
            "coord",
            "str",
            None,
            "how a CNN's batch norms run with the residual add and ReLU after them",
            _TRAIN,
            "none (separate kernels) or bn_add_relu (one fused kernel)",
        ),
        Column(
            "framework",
            "coord",
            "str",
            None,
            "training framework",
            _BOTH,
            "a framework label such as ddp, horovod, tensorflow, mxnet",
        ),
        Column("transport", "coord", "str", None, "network transport", _BOTH, "tcp or rdma"),
        Column(
            "servers",
            "coord",
            "int",
            "count",
            "parameter servers (0: one per node)",
            _BOTH,
            "a whole number >= 0 (0: one per node, the model's default)",
        ),
        Column(
            "servers_colocated",
            "coord",
            "str",
            None,
            "whether the parameter servers run on the workers' nodes",
            _BOTH,
            "yes or no",
        ),
        Column(
            "nics_per_node",
            "coord",
            "int",
            "count",
            "network adapters per node (0: one per GPU)",
            _BOTH,
            "a whole number >= 0 (0: one per GPU, the model's default)",
        ),
        Column(
            "host_staging",
            "coord",
            "str",
            None,
            "whether gradients are reduced in host memory (Horovod's CPU allreduce)",
            _BOTH,
            "yes or no",
        ),
        Column(
            "baseline_gpus",
            "coord",
            "int",
            "count",
            "GPUs of the baseline that efficiency is relative to",
            _TRAIN,
            "a positive integer no larger than gpus",
        ),
        Column("setup", "coord", "str", None, "setup label", _ALL, "a short label"),
        Column(
            "model",
            "coord",
            "str",
            None,
            "model name as the source gives it",
            _HYB,
            "a name such as 'GPT 1.7B'",
        ),
        Column("layers", "coord", "int", "count", "transformer layers", _HYB, "a positive integer"),
        Column("hidden", "coord", "int", "count", "hidden size", _HYB, "a positive integer"),
        Column("heads", "coord", "int", "count", "attention heads", _HYB, "a positive integer"),
        Column("vocab", "coord", "int", "count", "vocabulary size", _HYB, "a positive integer"),
        Column(
            "ffn_hidden",
            "coord",
            "int",
            "count",
            "feed-forward width (default 4 x hidden)",
            _HYB,
            "a positive integer",
        ),
        Column("tp", "coord", "int", "count", "tensor-parallel degree", _HYB, "a positive integer"),
        Column(
            "pp", "coord", "int", "count", "pipeline-parallel degree (stages)", _HYB, "a positive integer"
        ),
        Column(
            "dp",
            "coord",
            "int",
            "count",
            "data-parallel degree",
            _HYB,
            "a positive integer (gpus / (tp x pp))",
        ),
        Column(
            "micro_batch",
            "coord",
            "int",
            "samples",
            "micro-batch size",
            _HYB,
            "a positive integer (samples per micro-batch)",
        ),
        Column(
            "recompute",
            "coord",
            "str",
            None,
            "activation recomputation",
            _HYB,
            "one of none, selective, full",
        ),
        Column("sequence_parallel", "coord", "str", None, "Megatron sequence parallelism", _HYB, "yes or no"),
        Column(
            "schedule", "coord", "str", None, "pipeline schedule", _HYB, "one of 1f1b, gpipe, interleaved"
        ),
        Column(
            "virtual_stages",
            "coord",
            "int",
            "count",
            "model chunks per GPU (interleaved schedule)",
            _HYB,
            "a positive integer",
        ),
        Column("zero", "coord", "int", "1", "ZeRO stage (1: distributed optimizer)", _HYB, "0, 1, 2 or 3"),
        Column("source", "coord", "str", None, "source of the measurement", _ALL, "a publication or file"),
        Column(
            "throughput",
            "var",
            "float",
            "samples/s",
            "global training throughput",
            _TRAIN | _HYB,
            "a number >= 0 (samples/s, all GPUs together)",
        ),
        Column(
            "efficiency",
            "var",
            "float",
            "1",
            "scaling efficiency: throughput / (gpus / baseline_gpus x baseline throughput)",
            _TRAIN,
            "a number >= 0 (1 = linear scaling)",
        ),
        Column(
            "step_time",
            "var",
            "float",
            "s",
            "time per training step (iteration)",
            _HYB,
            "a number > 0 (seconds unless the units line says otherwise)",
            strict=True,
        ),
        Column(
            "tokens_per_s",
            "var",
            "float",
            "tokens/s",
            "global training throughput in tokens",
            _HYB,
            "a number > 0 (tokens/s)",
            strict=True,
        ),
        Column(
            "tflops_per_gpu",
            "var",
            "float",
            "TFLOP/s",
            "achieved TFLOP/s per GPU, counting recomputation unless '# flops: model' says the "
            "source counts the model's FLOPs only",
            _HYB,
            "a number > 0 (TFLOP/s per GPU)",
            strict=True,
        ),
        Column(
            "mfu",
            "var",
            "float",
            "1",
            "model FLOPs utilisation (fraction of peak)",
            _HYB,
            "a number > 0 (a fraction, or % when the units line says so)",
            strict=True,
        ),
        Column(
            "hfu",
            "var",
            "float",
            "1",
            "hardware FLOPs utilisation, recomputation counted (fraction of peak)",
            _HYB,
            "a number > 0 (a fraction, or % when the units line says so)",
            strict=True,
        ),
        Column(
            "steps",
            "var",
            "float",
            "count",
            "optimizer steps of the run (to the target)",
            _CONV,
            "a number > 0 (optimizer steps)",
            strict=True,
        ),
        Column(
            "samples",
            "var",
            "float",
            "samples",
            "training samples processed in the run (to the target)",
            _CONV,
            "a number > 0 (samples, all workers together)",
            strict=True,
        ),
        Column(
            "epochs",
            "var",
            "float",
            "1",
            "epochs of training data in the run (to the target)",
            _CONV,
            "a number > 0 (passes over the training set)",
            strict=True,
        ),
        Column(
            "quality",
            "var",
            "float",
            "1",
            "quality reached (accuracy, F1 or error, as a fraction)",
            _CONV,
            "a number >= 0 (a fraction, or % when the units line says so)",
        ),
        Column(
            "quality_std",
            "var",
            "float",
            "1",
            "standard deviation of the quality over repeated runs",
            _CONV,
            "a number >= 0 (a fraction, or % when the units line says so)",
        ),
        Column(
            "b_crit",
            "var",
            "float",
            "samples",
            "critical batch size B_crit = E_min / S_min (McCandlish et al. 2018)",
            _NOISE,
            "a number > 0 (samples per step)",
            strict=True,
        ),
        Column(
            "b_simple",
            "var",
            "float",
            "samples",
            "simple gradient noise scale B_simple = tr(Sigma) / |G|^2",
            _NOISE,
            "a number > 0 (samples)",
            strict=True,
        ),
        Column(
            "time",
            "var",
            "float",
            "s",
            "collective time",
            _COMM,
            "a number > 0 (seconds unless the units line says otherwise)",
            strict=True,
        ),
        Column(
            "algbw",
            "var",
            "float",
            "GB/s",
            "algorithm bandwidth (bytes / time)",
            _COMM,
            "a number >= 0 (GB/s)",
        ),
        Column(
            "busbw",
            "var",
            "float",
            "GB/s",
            "bus bandwidth (algbw x nccl-tests factor)",
            _COMM,
            "a number >= 0 (GB/s)",
        ),
    ]
}

#: Columns every table of a kind must have. A training table needs a measured column too
#: (``throughput`` or ``efficiency``); a communication table needs ``time``, ``algbw`` or ``busbw``.
REQUIRED: dict[str, tuple[str, ...]] = {
    TRAINING: ("workload", "gpu", "network", "gpus", "batch_size", "precision"),
    COMMUNICATION: ("collective", "gpus"),
    CONVERGENCE: ("workload", "global_batch"),
    NOISE_SCALE: ("task",),
    HYBRID: ("gpu", "gpus", "tp", "pp", "precision", "global_batch"),
}
MEASURED: dict[str, tuple[str, ...]] = {
    TRAINING: ("throughput", "efficiency"),
    COMMUNICATION: ("time", "algbw", "busbw"),
    CONVERGENCE: ("steps", "samples", "epochs", "quality"),
    NOISE_SCALE: ("b_crit", "b_simple"),
    HYBRID: ("step_time", "throughput", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu"),
}

#: Units a file may declare on its ``# units:`` line, per canonical unit: spelling -> divisor
#: (value in the canonical unit = value in the file / divisor). Published tables keep their own
#: units (images/s, ms); loading converts them. A divisor, not a factor, so that 152.47 ms becomes
#: exactly the float nearest 0.15247 s. Spellings are matched exactly: case carries meaning
#: (GB/s is not Gb/s).
UNIT_ALIASES: dict[str, dict[str, float]] = {
    "samples/s": {
        "samples/s": 1.0,
        "sample/s": 1.0,
        "samples/sec": 1.0,
        "images/s": 1.0,
        "image/s": 1.0,
        "images/sec": 1.0,
        "img/s": 1.0,
        "sequences/s": 1.0,
        "seq/s": 1.0,
    },
    "s": {"s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6},
    "GB/s": {"GB/s": 1.0, "GBps": 1.0, "MB/s": 1e3},
    "1": {"1": 1.0, "fraction": 1.0, "%": 1e2, "percent": 1e2},
    # Integer columns take no scale: only other spellings of the same unit.
    "count": {"count": 1.0, "1": 1.0, "GPUs": 1.0, "gpus": 1.0},
    "samples": {"samples": 1.0, "images": 1.0, "sequences": 1.0},
    "tokens/s": {"tokens/s": 1.0, "tokens/sec": 1.0},
    "TFLOP/s": {"TFLOP/s": 1.0, "TFLOPS": 1.0, "PFLOP/s": 1e-3},
    "tokens": {"tokens": 1.0},
    "bytes": {"bytes": 1.0, "B": 1.0, "byte": 1.0},
}
