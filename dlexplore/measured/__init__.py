"""Measured results: published benchmark tables and the user's own measurement CSVs.

Every measured dataset is an ``xarray.Dataset`` with one dimension, ``point``: measured points are
sparse (a table, not a grid). The columns that identify a point are coordinates on ``point`` with
the model's names; the measured quantities are data variables. Every variable and every numeric
coordinate has ``attrs["units"]`` and ``attrs["long_name"]``; ``attrs["kind"]`` is ``"measured"``
and ``attrs["source"]`` starts with ``"measured: "`` so that a measurement is never mistaken for a
prediction.

>>> from dlexplore import measured
>>> measured.available()                                   # doctest: +SKIP
>>> ds = measured.load("horovod-2017-16gpu-25gbe")
>>> float(measured.select(ds, workload="vgg16", setup="Horovod RDMA, NCCL").throughput[0])
1787.4

Bundled datasets (``data/measured/<name>.csv``; each file names its source, setup and units)
--------------------------------------------------------------------------------------------------
``horovod-2017-16gpu-25gbe``     Horovod README (2017): 16 P100, 4 servers over 25 GbE RoCE
``horovod-2017-64gpu-40gbit``    Horovod README (2017): 64 P100, 16 servers over 40 Gbit/s
``tf-benchmarks-2017-dgx1``      TensorFlow benchmarks page (2017): DGX-1 (8x P100), 1-8 GPUs
``nvidia-mxnet-resnet50-v1.5``   NVIDIA DeepLearningExamples MXNet ResNet-50 v1.5: DGX-1, DGX-2,
                                 FP32 and mixed precision
``nvidia-pytorch-resnet50-v1.5`` NVIDIA DeepLearningExamples PyTorch ResNet-50 v1.5: DGX A100 (TF32,
                                 mixed), DGX-1 16/32 GB (FP32, mixed), 1 and 8 GPUs
``nvidia-pytorch-bert-large``    NVIDIA DeepLearningExamples PyTorch BERT-large pre-training, length
                                 128, gradient accumulation: 1 GPU to 32 DGX A100 servers
``deepbench-allreduce-p100``     Baidu DeepBench allreduce times, P100, 2-16 GPUs
``goyal-2017-resnet50``          Goyal et al. (2017): ~90% scaling efficiency, 8 -> 256 P100
``nccl-tests-h100-allreduce``    nccl-tests issue 212: H100 NVLink4 allreduce busbw, ring vs NVLS

Convergence datasets (``data/measured/convergence/``; :func:`available_convergence`): a table with
``workload``, ``global_batch`` (samples per step, all workers), optional ``rule``,
``target_metric``, ``setup``, ``source``, and one or more of ``steps``, ``samples``, ``epochs``
(the run's length, or its length to the target) and ``quality`` with ``quality_std`` (fractions;
``%`` on the units line). Steps, samples and epochs are derived from each other where a file gives
one (epochs need a ``# samples_per_epoch:`` line), and say so in ``attrs["comment"]``.
``you-2019-lamb-bert`` (LAMB, BERT-Large), ``goyal-2017-resnet50-minibatch`` (ResNet-50 error vs
minibatch, 90 epochs), ``you-2017-lars-imagenet`` (LARS tables), ``mlperf-rcp-resnet50`` and
``mlperf-rcp-bert`` (MLPerf's reference convergence points: steps *to a target* at 10 and 13 batch
sizes). A *noise-scale* table (``b_crit`` and/or ``b_simple``, samples; ``task``, ``phase``,
``sample_unit``, ``bound``) holds critical batch sizes: ``mccandlish-2018-noise-scale``.

Hybrid-parallel LLM tables (``data/measured/hybrid/``; :func:`available_hybrid`):
``korthikanti-2022-megatron`` (GPT 22B to 1T, full recomputation against selective recomputation
with sequence parallelism: iteration times, Korthikanti et al. 2022, Tables 3 and 5) and
``smith-2022-mt-nlg-530b`` (Megatron-Turing NLG 530B on 2240 to 3360 GPUs: iteration time and
TFLOP/s per GPU). Narayanan et al. 2021's Table 1 reads the same way from
``../shared/reference/narayanan2021-table1.csv``.

Not available: the Horovod experiments of seed 004 (Malik et al., NYSDS 2018: AlexNet, GoogLeNet,
ResNet-50 on K20, K40, K80 and P100, up to about 400 K80 GPUs over InfiniBand EDR) are described
only in words ("throughput and latency almost linear"); the slides give no numbers, so no dataset
is shipped for them. Nor for Shallue et al. 2018 (arXiv:1811.03600, steps to result against the
batch size for 35 workloads): their values are only drawn (the paper's figures, and the PNG outputs
of google-research/batch_science/reproduce_paper_plots.ipynb) or in an 802 MB archive on Google
Cloud Storage that was out of reach when the other convergence datasets were written.

File format
-----------
A UTF-8, comma-separated file: optional leading ``# key: value`` metadata lines (a line starting
with ``#`` and two or more spaces continues the entry above it), one header line, then one row per
measured point. Blank lines and lines starting with ``#`` are skipped anywhere.

Metadata keys kept as dataset attrs: ``name``, ``title``, ``source``, ``url``, ``setup``,
``notes`` and any other key; ``units`` declares the units of columns that are not in the
canonical units, e.g. ``# units: throughput=images/s, time=ms`` (see ``UNIT_ALIASES`` in
``_columns.py``); values are converted to the canonical units on loading.

A *training* table (no ``collective`` column) needs ``workload, gpu, network, gpus,
batch_size, precision`` and ``throughput`` (samples/s of all GPUs together) or ``efficiency``.
Optional: ``algorithm``, ``gpus_per_node``, ``setup``, ``source``, ``baseline_gpus``, and the
setup the model runs each point with: ``intra_link`` (the link inside a node, where ``network``
names the one between nodes), ``nics_per_node``, ``grad_accum`` (micro-batches per step),
``seq`` (tokens per sequence), ``layout`` (a CNN's ``nhwc`` or ``nchw``), ``fusion`` (its batch
norms ``none`` or ``bn_add_relu``), ``framework``, ``transport``, ``host_staging``, ``servers`` and
``servers_colocated`` (``_columns.py`` says what each accepts).

A *hybrid* table (a ``tp`` or ``pp`` column) has one row per run of a transformer with tensor,
pipeline and data parallelism: ``gpu``, ``gpus``, ``tp``, ``pp``, ``precision``, ``global_batch``
(samples per step), the model as ``workload`` (a catalog id or spec) or its sizes ``layers``,
``hidden``, ``heads``, ``seq``, ``vocab`` (optional ``ffn_hidden``; ``model`` a free label), and
one or more of ``step_time`` (s), ``throughput`` (samples/s), ``tokens_per_s``,
``tflops_per_gpu`` (TFLOP/s per GPU, the recomputed forward counted, as Narayanan et al.'s eq. 3;
``# flops: model`` says the source counts the model's FLOPs only), ``mfu`` or ``hfu``. Optional:
``network``, ``gpus_per_node``, ``dp``, ``micro_batch``, ``recompute`` (none, selective, full),
``sequence_parallel`` (yes, no), ``schedule`` (1f1b, gpipe, interleaved), ``virtual_stages``,
``zero`` (0-3), ``setup``, ``source``; what a table leaves out, the calibration takes from its
keywords or the model's defaults and says so.

A *communication* table has ``collective`` and ``gpus`` and one or more of ``time`` (s),
``algbw`` or ``busbw`` (GB/s). Optional: ``algorithm``, ``gpu``, ``network``, ``gpus_per_node``,
``bytes`` (message size per rank), ``setup``, ``source``. Missing bandwidths and times are derived
with the nccl-tests definitions, ``algbw = bytes / time / 1e9`` and
``busbw = algbw x busbw_factor(collective, gpus)``; derived variables say so in
``attrs["comment"]``.

Columns and their meaning: ``gpus`` is the total number of GPUs; ``gpus_per_node`` the GPUs *used*
in each node (so 2 for 2 GPUs of a DGX-1); ``batch_size`` is per GPU; ``network`` is the
network or link the GPUs exchange gradients over (catalog id; for single-node rows the node's
link); ``precision`` is one of fp32, tf32, fp16, bf16 (fp16/bf16 = mixed precision);
``algorithm`` is a free label (the model's names where they apply: ring, tree,
recursive_doubling, halving_doubling, hierarchical, parameter_server; others such as ``nvls``
are kept as written); ``efficiency`` is relative to ``baseline_gpus`` (default 1).

Optional columns a file leaves out: ``algorithm`` becomes ``"none"`` on 1-GPU rows and
``"unknown"`` elsewhere (an empty cell too); ``setup`` becomes ``""``; ``source`` becomes the
file's ``# source:`` line, else the file's path; a communication table's ``gpu`` and ``network``
become ``"unknown"``. Numeric optional columns (``gpus_per_node``, ``bytes``) stay absent rather
than take made-up values; ``baseline_gpus`` defaults to 1 when there is an efficiency column.
Names (workload, GPU, network) are kept as written and not checked against the catalog, so that a
user can measure hardware the catalog does not know.

Every problem is an :class:`~dlexplore.errors.InputFileError` naming the file, the line as an
editor numbers it, the column and what was expected; nothing is returned half-read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from .._data import data_dir
from ..errors import DlexploreError, UnknownNameError
from ._columns import COLUMNS, UNIT_ALIASES
from ._reader import MEASURED_PREFIX, read_table

__all__ = [
    "available",
    "available_convergence",
    "available_hybrid",
    "describe",
    "load",
    "read_csv",
    "to_frame",
    "select",
    "concat",
    "matching",
    "COLUMNS",
    "UNIT_ALIASES",
    "MEASURED_PREFIX",
]


def _folder() -> Path:
    return data_dir() / "measured"


def available() -> list[str]:
    """Names of the bundled measured datasets, sorted."""
    return sorted(p.stem for p in _folder().glob("*.csv"))


def available_convergence() -> list[str]:
    """Names of the bundled convergence datasets (steps and quality against the global batch, from
    large-batch training papers; ``data/measured/convergence/``), sorted. :func:`load` reads them."""
    return sorted(p.stem for p in (_folder() / "convergence").glob("*.csv"))


def available_hybrid() -> list[str]:
    """Names of the bundled hybrid-parallel LLM tables (``data/measured/hybrid/``), sorted.
    :func:`load` reads them; :func:`dlexplore.calibrate` fits them."""
    return sorted(p.stem for p in (_folder() / "hybrid").glob("*.csv"))


def read_csv(path: str | Path) -> xr.Dataset:
    """Read a measurement CSV (the format in this module's docs) into a dataset along ``point``.

    Raises :class:`~dlexplore.errors.InputFileError` naming the file, line, column and
    expectation for any problem. The file is only read, never modified.
    """
    return read_table(path)


def load(
    name: str | os.PathLike[str],
    *,
    by: str = "bytes",
    dtype: str | None = None,
    redop: str | None = None,
    root: int | None = None,
) -> xr.Dataset:
    """Load a bundled measured dataset by name (see :func:`available`), or a CSV file by path.

    A path to nccl-tests output returns :func:`dlexplore.traces.nccl_tests.read_tests`'s dataset
    (dims ``bytes`` or, with ``by="point"``, ``point``; ``placement``; ``test`` when the file holds
    several results; ``dtype``, ``redop``, ``root`` keep the rows of that data type, reduction
    operation and root, as :func:`dlexplore.traces.nccl_tests.read` does).

    An unknown name raises :class:`~dlexplore.errors.UnknownNameError` with the nearest names.
    """
    text = os.fspath(name)
    choice = {k: v for k, v in (("dtype", dtype), ("redop", redop), ("root", root)) if v is not None}
    if choice and not _is_nccl_tests(Path(text)):
        raise DlexploreError(
            f"{', '.join(f'{k}={v!r}' for k, v in choice.items())} chooses rows of nccl-tests output "
            f"only; {text} is not nccl-tests output"
        )
    names = available()
    if text in names:
        return read_table(_folder() / f"{text}.csv")
    if text in available_convergence():
        return read_table(_folder() / "convergence" / f"{text}.csv")
    if text in available_hybrid():
        return read_table(_folder() / "hybrid" / f"{text}.csv")
    lowered = {n.lower(): n for n in names}
    if text.lower() in lowered:
        return read_table(_folder() / f"{lowered[text.lower()]}.csv")
    path = Path(text)
    if _is_nccl_tests(path):
        # nccl-tests output (all_reduce_perf ...) is a measured communication dataset too.
        from ..traces.nccl_tests import read_tests

        return read_tests(path, by=by, dtype=dtype, redop=redop, root=root)
    # Anything that looks like a path is read as one, so that a typo in a path says "no such
    # file" rather than suggesting bundled dataset names.
    if path.is_file() or path.suffix.lower() == ".csv" or len(path.parts) > 1:
        return read_table(path)
    raise UnknownNameError("measured dataset", text, names)


def _is_nccl_tests(path: Path) -> bool:
    if not path.is_file() or path.suffix.lower() == ".csv":
        return False
    from ..errors import DlexploreError
    from ..traces.detect import detect_format

    try:
        return detect_format(path) == "nccl-tests"
    except DlexploreError:
        return False  # not a trace either: the CSV reader says what is wrong


def describe() -> pd.DataFrame:
    """One row per bundled dataset: name, title, table (training or communication), points,
    variables (comma-separated) and source."""
    rows = []
    for name in available():
        ds = load(name)
        rows.append(
            {
                "name": name,
                "title": ds.attrs["title"],
                "table": ds.attrs["table"],
                "points": ds.sizes["point"],
                "variables": ", ".join(str(v) for v in ds.data_vars),
                "source": ds.attrs["source"].removeprefix(MEASURED_PREFIX),
            }
        )
    return pd.DataFrame(rows, columns=["name", "title", "table", "points", "variables", "source"])


def to_frame(ds: xr.Dataset) -> pd.DataFrame:
    """The tidy table back: one row per point, coordinates then variables, in canonical units.

    The result written with ``DataFrame.to_csv(path, index=False)`` is a valid input file.
    """
    names = [n for n in COLUMNS if n in ds.coords or n in ds.data_vars]
    extra = [n for n in (*ds.coords, *ds.data_vars) if n not in names and n != "point"]
    frame = pd.DataFrame({n: ds[n].values for n in (*names, *extra) if ds[n].dims == ("point",)})
    return frame


def concat(datasets: list[xr.Dataset | str | Path], *, name: str = "combined") -> xr.Dataset:
    """Several measured tables of one kind (training or communication) as one, along ``point``.

    A coordinate some tables lack is filled per point the way a file that leaves the column out
    gets it: text columns with ``""`` (unsaid), ``baseline_gpus`` with 1; other numbers must be
    in every table or in none. A measured variable some tables lack is NaN there. Each point
    keeps its own source in the ``source`` coordinate; ``attrs["source"]`` lists them all and
    ``attrs["name"]`` is ``name``. Names and paths are loaded with :func:`load`.
    """
    from ..errors import DlexploreError

    tables = [load(d) if not isinstance(d, xr.Dataset) else d for d in datasets]
    if not tables:
        raise DlexploreError("concat: no measured datasets given")
    kinds = {t.attrs.get("table") for t in tables}
    if len(kinds) != 1:
        raise DlexploreError(
            f"concat: the tables mix kinds {sorted(map(str, kinds))}; expected all "
            "training or all communication tables"
        )
    frames = [to_frame(t) for t in tables]
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    for frame, table in zip(frames, tables, strict=True):
        for column in columns:
            if column in frame:
                continue
            spec = COLUMNS.get(column)
            if spec is not None and spec.role == "var":
                frame[column] = np.nan
            elif column == "baseline_gpus":
                frame[column] = 1
            elif column in ("servers", "nics_per_node"):
                frame[column] = 0  # what a table without the column means: the model's default
            elif spec is not None and spec.kind == "int":
                raise DlexploreError(
                    f"concat: {table.attrs.get('name', 'a table')} has no "
                    f"{column!r} column, which another table has"
                )
            else:
                frame[column] = ""
    combined = pd.concat(frames, ignore_index=True)
    coords = {}
    data_vars = {}
    for column in combined.columns:
        spec = COLUMNS.get(column)
        values = combined[column].to_numpy()
        if spec is not None and spec.role == "var":
            first = next(t[column] for t in tables if column in t.data_vars)
            data_vars[column] = xr.Variable("point", values.astype(float), dict(first.attrs))
        else:
            attrs = next((dict(t[column].attrs) for t in tables if column in t.coords), {})
            dtype = object if values.dtype == object or spec is None or spec.kind == "str" else None
            coords[column] = xr.Variable("point", values.astype(dtype) if dtype else values, attrs)
    ds = xr.Dataset(data_vars, coords=coords)
    sources = list(dict.fromkeys(t.attrs.get("source", "") for t in tables))
    ds.attrs = {
        "name": name,
        "title": f"{len(tables)} measured tables",
        "source": MEASURED_PREFIX + "; ".join(s.removeprefix(MEASURED_PREFIX) for s in sources),
        "kind": "measured",
        "table": kinds.pop(),
    }
    return ds


def select(ds: xr.Dataset, **criteria: object) -> xr.Dataset:
    """The points whose coordinates equal the given values (a list or tuple matches any of them).

    >>> select(ds, workload="vgg16", gpus=[1, 16])  # doctest: +SKIP
    """
    mask = np.ones(ds.sizes["point"], dtype=bool)
    for name, wanted in criteria.items():
        if name not in ds.coords:
            raise UnknownNameError("coordinate", name, [str(c) for c in ds.coords])
        values = ds[name].values
        if isinstance(wanted, (list, tuple, set, np.ndarray)):
            mask &= np.isin(values, list(wanted))
        else:
            mask &= values == wanted
    return ds.isel(point=np.flatnonzero(mask))


def _catalog_name(kind: str, name: str) -> str:
    """A GPU's or workload's catalog name (aliases resolved), or the name itself if unknown."""
    from .. import catalog
    from ..errors import DlexploreError

    try:
        return (catalog.gpu if kind == "gpu" else catalog.workload)(name).name.lower()
    except DlexploreError:
        return str(name).lower()


def matching(workload: str, gpu: str, datasets: Mapping[str, xr.Dataset] | None = None) -> list[str]:
    """Names of the training datasets with measured throughput of ``workload`` on ``gpu``, the one
    with most such points first (ties by name). Names and aliases compare as the catalog resolves
    them (``"Tesla P100"`` is ``"P100"``).

    ``datasets`` maps names to datasets to search (default: every bundled one). The explorer uses
    this to lay the matching measurement over its prediction from the start.
    """
    if datasets is None:
        datasets = {name: load(name) for name in available()}
    want = (_catalog_name("workload", workload), _catalog_name("gpu", gpu))
    counts = {}
    for name, ds in datasets.items():
        if "throughput" not in ds or "point" not in ds.dims:
            continue
        if not {"workload", "gpu"} <= set(ds.coords):
            continue
        pairs = zip(ds["workload"].values.astype(str), ds["gpu"].values.astype(str), strict=True)
        memo: dict[tuple[str, str], bool] = {}
        n = 0
        for pair in pairs:
            if pair not in memo:
                memo[pair] = (_catalog_name("workload", pair[0]), _catalog_name("gpu", pair[1])) == want
            n += memo[pair]
        if n:
            counts[name] = n
    return sorted(counts, key=lambda name: (-counts[name], name))
