"""The ``dlexplore`` command line: a thin layer over the public API.

Errors a user can cause print one line and exit with status 2; nothing prints a traceback unless
``DLEXPLORE_DEBUG=1`` is set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ._io import atomic_open, atomic_path
from ._version import __version__
from .errors import DlexploreError

__all__ = ["main"]

FORMATS = ("table", "csv", "json", "netcdf")

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

#: What the table format shows besides the swept coordinates.
_TABLE_COLUMNS = (
    "throughput",
    "step_time",
    "efficiency",
    "time_compute",
    "time_comm_exposed",
    "time_io_exposed",
    "mem_total",
    "mem_capacity",
    "fits",
    "time",
    "algbw",
    "busbw",
)

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


class _UsageError(DlexploreError):
    """A malformed command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise _UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


# ---------------------------------------------------------------------------------------------
# argument value parsers: each turns one option string into a list (a sweep)


def _split(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    if not items or any(not t for t in items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def _numbers(integer: bool = False) -> Callable[[str], list]:
    # argparse prefixes ArgumentTypeError messages with "argument --option: "
    def parse(text: str) -> list:
        out = []
        for item in _split(text):
            try:
                value = float(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got {item!r}") from None
            if integer:
                if not value.is_integer():
                    raise argparse.ArgumentTypeError(f"expected a whole number, got {item!r}")
                value = int(value)
            out.append(value)
        return out

    return parse


def _split_workloads(text: str) -> list[str]:
    """Like :func:`_split`, but a spec such as ``transformer:24,1024,16,512,50257`` keeps its
    comma-separated arguments: a number or ``key=value`` after a spec belongs to that spec."""
    out: list[str] = []
    for item in _split(text):
        spec_argument = re.fullmatch(r"[0-9.eE+-]+|\w+=.*", item) is not None
        if out and ":" in out[-1] and spec_argument:
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def parse_bytes(text: str) -> float:
    """``"25MiB"`` -> 26214400.0; ``"1e8"`` -> 1e8; ``"inf"`` -> inf (bytes)."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+|inf)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    problem = f"expected a size in bytes such as 1e8, 64MB or 25MiB, got {text!r}"
    if not match or unit not in _BYTE_UNITS:
        raise argparse.ArgumentTypeError(problem)
    try:
        return float(match.group(1)) * _BYTE_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(problem) from None


def _sizes(text: str) -> list:
    return [parse_bytes(item) for item in _split(text)]


# ---------------------------------------------------------------------------------------------
# output


def dataset_to_frame(ds: xr.Dataset, columns: Sequence[str]) -> pd.DataFrame:
    """One row per point of the dataset's dimensions: the swept coordinates, then ``columns``."""
    present = [c for c in columns if c in ds.data_vars]
    # the dimensions of the chosen variables (not the compute breakdown's operator)
    dims = [d for d in ds.dims if any(d in ds[c].dims for c in present)]
    if not dims:
        return pd.DataFrame([{c: ds[c].item() for c in present}])
    frame = ds[present].to_dataframe().reset_index()
    keep = dims + [c for c in present if c not in dims]
    return frame[keep]


def _units(ds: xr.Dataset, columns: Sequence[str]) -> dict[str, str]:
    return {c: ds[c].attrs.get("units", "") for c in columns if c in ds.variables}


def _scalar_config(ds: xr.Dataset) -> dict[str, object]:
    out = {}
    for name, coord in ds.coords.items():
        if coord.ndim == 0:
            value = coord.item()
            out[str(name)] = value.item() if isinstance(value, np.generic) else value
    return out


def _json_value(value: object) -> object:
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def _render(
    ds: xr.Dataset, frame: pd.DataFrame, fmt: str, title: str, table_columns: Sequence[str] = _TABLE_COLUMNS
) -> str:
    units = _units(ds, frame.columns)
    if fmt == "csv":
        return frame.to_csv(index=False, float_format="%.12g", lineterminator="\n")
    if fmt == "json":
        payload = {
            "title": title,
            "source": ds.attrs.get("source", ""),
            "kind": ds.attrs.get("kind", ""),
            "config": {k: _json_value(v) for k, v in _scalar_config(ds).items()},
            "units": units,
            "rows": [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")],
        }
        return json.dumps(payload, indent=2) + "\n"
    # table: for people; times in ms and memory in GiB, the full set stays in csv/json/netcdf
    shown = frame[[c for c in frame.columns if c in ds.dims or c in table_columns]].copy()
    names = {}
    for column in shown.columns:
        unit = units.get(column, "")
        if unit == "s" and column not in ds.dims:
            shown[column] = shown[column] * 1e3
            unit = "ms"
        elif unit == "bytes" and column not in ds.dims:
            shown[column] = shown[column] / 2**30
            unit = "GiB"
        names[column] = f"{column} [{unit}]" if unit and unit not in ("1", "count") else column
    shown = shown.rename(columns=names)
    lines = [f"# {title}", f"# source: {ds.attrs.get('source', '')}"]
    config = _scalar_config(ds)
    if config:
        lines.append("# " + ", ".join(f"{k}={_fmt(v)}" for k, v in config.items()))
    with pd.option_context("display.max_columns", None, "display.width", 250):
        body = shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")
    return "\n".join(lines) + "\n" + body + "\n"


def _readable_table(frame: pd.DataFrame, units: dict[str, str]) -> str:
    """A measured table for people, in the units ``trace summary`` uses: times in ms, message
    sizes as "512 KiB" (csv and json keep s and bytes)."""
    from .units import format_bytes

    shown = frame.copy()
    names = {}
    for column in shown.columns:
        unit = units.get(column, "")
        if unit == "s":
            shown[column] = shown[column] * 1e3
            unit = "ms"
        elif unit == "bytes":
            shown[column] = [format_bytes(v) for v in shown[column]]
            unit = ""
        names[column] = f"{column} [{unit}]" if unit and unit not in ("1", "count") else column
    with pd.option_context("display.max_columns", None, "display.width", 250):
        return shown.rename(columns=names).to_string(index=False, float_format=lambda v: f"{v:.4g}")


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _write(text: str, output: str | None) -> None:
    """Write ``text`` to ``output`` atomically, or to standard output."""
    if output:
        with atomic_open(output, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)


def _emit(
    ds: xr.Dataset,
    frame: pd.DataFrame,
    args: argparse.Namespace,
    title: str,
    table_columns: Sequence[str] = _TABLE_COLUMNS,
) -> None:
    if args.format == "netcdf":
        if not args.output:
            raise _UsageError("--format netcdf writes a binary file: give -o FILE.nc")
        with atomic_path(args.output) as tmp:
            ds.to_netcdf(tmp, engine="h5netcdf")
        return
    text = _render(ds, frame, args.format, title, table_columns)
    _write(text, args.output)


# ---------------------------------------------------------------------------------------------
# commands


def _cmd_predict(args: argparse.Namespace) -> None:
    from .model import predict

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
        "framework",
        "transport",
        "memory_efficiency",
        "kernel_time",
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
            from .model.energy import energy, parallel_phases

            ds = ds.merge(_energy_columns(energy(parallel_phases(ds), **_energy_options(args))))
        # One configuration: its inputs lead the row, as the swept options do for data parallelism;
        # the compute breakdown by operator (time_operator) is a dimension a row cannot hold.
        inputs = [name for name in _HYBRID_INPUTS if name in ds.coords]
        outputs = [v for v in ds.data_vars if "operator" not in ds[v].dims]
        frame = dataset_to_frame(ds.reset_coords(inputs), [*inputs, *outputs])
        table = (*inputs, *_HYBRID_TABLE, *(ENERGY_COLUMNS if args.energy else ()))
        _emit(ds, frame, args, "predicted hybrid-parallel training step", table)
        return
    if args.seq is not None:
        kwargs["seq"] = args.seq
    ds = predict(**kwargs)
    columns = PREDICT_COLUMNS
    if args.energy:
        from .model.energy import energy

        ds = ds.merge(_energy_columns(energy(ds, **_energy_options(args))))
        columns = (*PREDICT_COLUMNS, *ENERGY_COLUMNS)
    table = (*_TABLE_COLUMNS, *ENERGY_COLUMNS) if args.energy else _TABLE_COLUMNS
    if args.target is not None:
        ds, columns, table = _time_to_accuracy(ds, args, columns, table)
    frame = dataset_to_frame(ds, columns)
    _emit(ds, frame, args, "predicted data-parallel training step", table)


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
    from .model.time_to_accuracy import time_to_accuracy

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
    for item in _split(text):
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
    from .model import predict_parallel

    call: dict[str, object] = {}
    for name, value in kwargs.items():
        if isinstance(value, list):
            if len(value) != 1:
                raise _UsageError(
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
            "bandwidth",
            "latency",
            "intra_bandwidth",
            "intra_latency",
        }
    )
    if unsupported:
        raise _UsageError(f"with --tp/--pp/--zero ... these options do not apply: {unsupported}")
    call.update({k: v for k, v in hybrid.items() if v not in (None, False)})
    return predict_parallel(**call)


def _cmd_advise(args: argparse.Namespace) -> None:
    from . import advisor

    advisor.run_cli(args)


def _cmd_comm(args: argparse.Namespace) -> None:
    from .model import predict_comm

    kwargs = dict(
        nbytes=args.bytes,
        gpus=args.gpus,
        bandwidth=args.bandwidth,
        latency=args.latency,
        gamma=args.gamma,
        servers=args.servers,
        gpus_per_node=args.gpus_per_node,
    )
    if args.intra_bandwidth is not None:
        kwargs["intra_bandwidth"] = args.intra_bandwidth
    if args.intra_latency is not None:
        kwargs["intra_latency"] = args.intra_latency
    ds = predict_comm(args.collective, args.algorithm, **kwargs)
    frame = dataset_to_frame(ds, ("time", "algbw", "busbw"))
    title = f"predicted {ds.collective.item()} ({ds.algorithm.item()}), alpha-beta model"
    _emit(ds, frame, args, title)


def _cmd_catalog(args: argparse.Namespace) -> None:
    from . import catalog

    frames = {
        "gpus": catalog.gpus,
        "networks": catalog.networks,
        "workloads": catalog.workloads,
        "storage": catalog.storages,
    }
    frame = frames[args.kind]()
    if args.format == "table":
        frame = _readable_catalog(frame)
    _emit_frame(frame, args, f"catalog: {args.kind}")


def _readable_catalog(frame: pd.DataFrame) -> pd.DataFrame:
    """The catalog for people: byte counts as "16 GiB", latencies in µs or ms, FLOPs in GFLOP
    (csv and json keep SI units)."""
    from .units import format_bytes

    out = frame.copy()
    for column in list(out.columns):
        if column.endswith("_bytes") or column.endswith("_bytes_per_sample"):
            out[column] = [format_bytes(v) for v in out[column]]
            out = out.rename(columns={column: column.replace("_bytes", "")})
    if "latency_s" in out:
        scale, unit = (1e6, "µs") if out["latency_s"].max() < 1e-4 else (1e3, "ms")
        out["latency_s"] = out["latency_s"] * scale
        out = out.rename(columns={"latency_s": f"latency [{unit}]"})
    if "flops_per_sample" in out:
        out["flops_per_sample"] = out["flops_per_sample"] * 1e-9
        out = out.rename(columns={"flops_per_sample": "forward [GFLOP/sample]"})
    return out


def _emit_frame(frame: pd.DataFrame, args: argparse.Namespace, title: str) -> None:
    if args.format == "netcdf":
        raise _UsageError("this listing is a table: use --format table, csv or json")
    if args.format == "csv":
        text = frame.to_csv(index=False, lineterminator="\n")
    elif args.format == "json":
        rows = [{k: _json_value(v) for k, v in r.items()} for r in frame.to_dict("records")]
        text = json.dumps({"title": title, "rows": rows}, indent=2) + "\n"
    else:
        # sources are long: the table shows their start, csv/json carry them whole
        with pd.option_context("display.max_columns", None, "display.width", 250):
            text = f"# {title}\n" + frame.to_string(index=False, max_colwidth=48, na_rep="n/a") + "\n"
    _write(text, args.output)


def _cmd_measured(args: argparse.Namespace) -> None:
    from . import measured

    if args.action == "list":
        if args.name:
            raise _UsageError("measured list takes no name")
        _emit_frame(measured.describe(), args, "published measurements")
        return
    if not args.name:
        raise _UsageError("measured show needs a dataset NAME (see: dlexplore measured list)")
    ds = measured.load(args.name, by=args.by)
    _show_measured(ds, args, f"measured: {ds.attrs.get('title', args.name)}")


def _show_measured(ds: xr.Dataset, args: argparse.Namespace, title: str) -> None:
    """A measured dataset as a table: its dimensions (bytes, placement, test ...) then variables."""
    frame = (
        ds.reset_coords().to_dataframe().reset_index()
        if ds.dims
        else pd.DataFrame([{name: ds[name].item() for name in ds.variables}])
    )
    if "point" in frame.columns and "point" not in ds.coords:
        frame = frame.drop(columns="point")  # a bare row number
    if args.format == "table":
        header = f"# source: {ds.attrs.get('source', '')}\n"
        if ds.attrs.get("setup"):
            header += f"# setup: {ds.attrs['setup']}\n"
        with pd.option_context("display.max_columns", None, "display.width", 250):
            text = f"# {title}\n" + header + frame.to_string(index=False) + "\n"
        _write(text, args.output)
        return
    _emit(ds, frame, args, title)


#: Breakdown variables in the order ``trace summary`` prints them.
TRACE_SUMMARY_COLUMNS = (
    "step_time",
    "time_compute",
    "time_comm",
    "time_comm_exposed",
    "overlap_fraction",
    "time_memcpy",
    "time_data",
    "time_idle",
    "events",
)


def _load_trace(args: argparse.Namespace, *, any_format: bool = False):
    """The trace the command names (with ``any_format``, or a measured table: nccl-tests ...)."""
    from .traces import load, load_trace

    options = {"allow_missing_ranks": True} if getattr(args, "allow_missing_ranks", False) else {}
    if not any_format:
        return load_trace(args.paths, format=args.trace_format, **options)
    if getattr(args, "by", None):
        options["by"] = args.by
    return load(args.paths, format=args.trace_format, **options)


def _trace_notes(trace) -> str:
    """What the title says besides the trace: ranks left out, files skipped, ranks unknown."""
    notes = []
    if trace.meta.get("missing_ranks"):
        missing = trace.meta["missing_ranks"]
        notes.append(
            f"{len(missing)} of {trace.world_size} ranks missing: "
            + ", ".join(map(str, missing[:20]))
            + (" ..." if len(missing) > 20 else "")
        )
    if trace.meta.get("skipped_files"):
        notes.append("skipped (not traces): " + "; ".join(trace.meta["skipped_files"]))
    if trace.meta.get("rank_unknown"):
        notes.append("the trace does not say its rank (shown as 0)")
    return "".join(f"\n# {n}" for n in notes)


def _cmd_trace_summary(args: argparse.Namespace) -> None:
    if args.dask is None and args.scheduler_address is None:
        if args.workers is not None:
            raise _UsageError("--workers goes with --dask threads|processes")
        trace = _load_trace(args, any_format=True)
        if not hasattr(trace, "breakdown"):  # a measured table (nccl-tests, Darshan, DLIO)
            ds = getattr(trace, "summary", trace)
            _show_measured(ds, args, str(ds.attrs.get("title") or ds.attrs.get("source", "")))
            return
        ds = trace.breakdown()
        title = f"measured breakdown per rank and step: {trace!r}{_trace_notes(trace)}"
    else:
        ds = _summarize_on_dask(args)
        title = f"measured breakdown per rank and step ({ds.sizes['rank']} ranks, read on Dask)"
    frame = dataset_to_frame(ds, TRACE_SUMMARY_COLUMNS)
    _emit(ds, frame, args, title, TRACE_SUMMARY_COLUMNS)


def _summarize_on_dask(args: argparse.Namespace) -> xr.Dataset:
    """``trace summary`` one file at a time on Dask: never all events in memory at once."""
    if importlib.util.find_spec("dask") is None:
        raise _UsageError("--dask needs Dask: pip install 'dlexplore[scale]'")
    from .traces.scale import summarize

    if args.workers is not None and args.workers < 1:
        raise _UsageError(f"--workers must be >= 1, got {args.workers}")
    options = dict(format=args.trace_format, progress=not args.quiet, n_workers=args.workers)
    if args.scheduler_address is None:
        return summarize(args.paths, scheduler=args.dask, **options)
    if args.dask is not None:
        raise _UsageError("give --dask (local) or --scheduler-address (a running cluster), not both")
    if importlib.util.find_spec("distributed") is None:
        raise _UsageError("--scheduler-address needs dask.distributed: pip install 'dlexplore[scale]'")
    from distributed import Client

    try:
        client = Client(args.scheduler_address, timeout="10s")
    except OSError as err:
        raise _UsageError(f"cannot reach the Dask scheduler at {args.scheduler_address}: {err}") from None
    with client:
        return summarize(args.paths, client=client, **options)


def _cmd_trace_collectives(args: argparse.Namespace) -> None:
    trace = _load_trace(args)
    table = trace.collectives()
    given = [args.bandwidth is not None, args.latency is not None]
    if any(given) and not all(given):
        raise _UsageError("to compare with the model give both --bandwidth (GB/s) and --latency (s)")
    if all(given):
        from .traces.collectives import compare_collectives

        attrs = dict(table.attrs)
        table = compare_collectives(
            table, bandwidth=args.bandwidth, latency=args.latency, algorithm=args.algorithm
        )
        table.attrs = {**attrs, **table.attrs}
    if args.format == "table":
        body = _readable_table(table, table.attrs.get("units", {}))
        _write(
            f"# collectives: {trace!r}{_trace_notes(trace)}\n# source: {trace.source}\n{body}\n", args.output
        )
        return
    _emit_frame(table, args, f"collectives: {trace.source}")


def _cmd_trace_convert(args: argparse.Namespace) -> None:
    from .traces import write_netcdf

    trace = _load_trace(args)
    write_netcdf(trace, args.output)
    print(
        f"dlexplore: wrote {args.output} ({len(trace):,} events, {len(trace.ranks)} ranks)", file=sys.stderr
    )


def _cmd_trace_report(args: argparse.Namespace) -> None:
    from .report import write_trace_report

    trace = _load_trace(args)
    write_trace_report(args.output, trace, title=args.title)
    print(f"dlexplore: wrote {args.output}", file=sys.stderr)


def _cmd_collect(args: argparse.Namespace) -> None:
    from .traces.collect import collect

    manifest = collect(
        args.out,
        nproc=args.nproc,
        steps=args.steps,
        model=args.model,
        batch_size=args.batch_size,
        warmup=args.warmup,
        seed=args.seed,
        port=args.port,
        overwrite=args.overwrite,
        timeout=args.timeout,
        **({"progress": None} if args.quiet else {}),
    )
    print(f"dlexplore: wrote {manifest}", file=sys.stderr)


def _cmd_calibrate(args: argparse.Namespace) -> None:
    import warnings

    from .fit import CalibrationWarning, calibrate

    options: dict[str, object] = {}
    for name in ("intra_link", "network", "gpus_per_node", "servers", "bucket_size", "batch_size"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    source = args.source if not os.path.exists(args.source) else os.path.abspath(args.source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CalibrationWarning)
        cal = calibrate(
            source,
            fit_on=args.fit_on,
            params=_split(args.params) if args.params else None,
            per=tuple(_split(args.per)) if args.per else None,
            **options,
        )
    for warning in caught:
        if issubclass(warning.category, CalibrationWarning):
            print(f"dlexplore: warning: {warning.message}", file=sys.stderr)
    if args.format == "json":
        text = cal.to_json() + "\n"
    elif args.format == "csv":
        lines = [
            f"# param: {row.name}"
            + (f" [{row.group}]" if isinstance(row.group, str) and row.group else "")
            + f" = {row.value:.6g} +- {row.stderr:.3g} {row.units}"
            for row in cal.params.itertuples()
        ]
        text = "\n".join(lines) + "\n" + cal.points.to_csv(index=False, lineterminator="\n")
    else:
        with pd.option_context("display.max_columns", None, "display.width", 250):
            body = cal.points.to_string(index=False, float_format=lambda v: f"{v:.4g}")
            text = f"{cal!r}\n\n{body}\n"
    _write(text, args.output)


def _cmd_whatif(args: argparse.Namespace) -> None:
    from .sim import whatif_report

    trace = _load_trace(args)
    _write(
        whatif_report(
            trace,
            bandwidth=args.bandwidth,
            latency=args.latency,
            compute=args.compute,
            gpus=args.gpus,
            batch_size=args.batch_size,
            fmt=args.format,
            per_step=args.per_step,
        ),
        args.output,
    )


def _explorer_args(args: argparse.Namespace) -> dict[str, object]:
    """The Explorer's starting configuration from the options given (the explorer fills the rest
    from the matching measurement), checked here with the explorer's own rules so that a typo is
    one line on the terminal rather than an error page in the browser."""
    from . import catalog, measured, validation
    from .model.comm import normalize_algorithm
    from .model.compute import normalize_precision

    traces = [os.path.abspath(t) for t in getattr(args, "trace", None) or []]
    if not traces:  # a trace says what it can of these; without one, the explorer's defaults
        args.workload = args.workload or "resnet50"
        args.gpu = args.gpu or "V100-16GB"
        args.algorithm = args.algorithm or "ring"
        args.gpus = 8 if args.gpus is None else args.gpus
    config: dict[str, object] = {"trace": traces} if traces else {}
    if args.workload is not None:
        config["workload"] = (
            catalog.workload(args.workload).name if ":" not in args.workload else args.workload
        )
    if args.gpu is not None:
        config["gpu"] = catalog.gpu(args.gpu).name
    if args.algorithm is not None:
        config["algorithm"] = normalize_algorithm(args.algorithm)
    if args.gpus is not None:
        config["gpus"] = validation.count("--gpus", args.gpus, maximum=1024)
    if traces:
        from .fit.trace_setup import load_traces

        load_traces(traces if len(traces) > 1 else traces[0])  # a bad trace: one line here, not a page
    if args.workload is not None and ":" in args.workload:
        catalog.workload(args.workload)
    if args.network is not None:
        config["network"] = catalog.network(args.network).name
    if args.intra_link is not None:
        config["intra_link"] = catalog.network(args.intra_link).name
    if args.precision is not None:
        config["precision"] = validation.precision_for(
            catalog.gpu(args.gpu or "V100-16GB"), normalize_precision(args.precision)
        )
    if args.batch_size is not None:
        config["batch_size"] = validation.count("--batch-size", args.batch_size, maximum=1024)
    if args.gpus_per_node is not None:
        config["gpus_per_node"] = validation.count("--gpus-per-node", args.gpus_per_node, maximum=16)
    names = []
    for item in args.measured:
        path = os.path.abspath(item)
        ds = measured.load(path if os.path.exists(path) else item)
        if "throughput" not in ds:
            raise _UsageError(
                f"--measured {item}: the dataset has no throughput to overlay "
                f"(it has {', '.join(sorted(ds.data_vars))})"
            )
        names.append(path if os.path.exists(path) else item)
    if names and args.no_measured:
        raise _UsageError("give --measured or --no-measured, not both")
    if names:
        config["measured"] = names
    elif args.no_measured:
        config["measured"] = None
    return config


def _cmd_explore(args: argparse.Namespace) -> None:
    from .serve import serve_explorer

    status = serve_explorer(
        _explorer_args(args),
        port=args.port,
        open_browser=not args.no_browser,
        catalogs=args.catalog,
        pool_size=args.pool_size,
        cull_idle=args.cull_idle,
    )
    if status not in (0, -2, 130):
        raise DlexploreError(f"the Voila server stopped with status {status} (see its messages above)")


def _cmd_report(args: argparse.Namespace) -> None:
    from . import measured
    from .report import write_report

    config = _explorer_args(args)
    shown = config.pop("measured", None) or [None]
    if len(shown) > 1:
        raise _UsageError("report overlays one measured dataset: give --measured once")
    data = measured.load(shown[0]) if shown[0] is not None else None
    from .plots import GPU_COUNTS

    if config["gpus"] not in GPU_COUNTS:
        raise _UsageError(f"--gpus must be a power of two from 1 to 1024 in the report, got {config['gpus']}")
    write_report(args.output, measured_data=data, title=args.title, **config)
    print(f"dlexplore: wrote {args.output}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# parser


def _add_explorer_options(parser: argparse.ArgumentParser, *, trace: bool = False) -> None:
    if trace:
        parser.add_argument(
            "--trace",
            action="append",
            default=[],
            metavar="PATH",
            help="your own run as the measured point: a trace file, a folder of per-rank files or a "
            "glob; repeat for runs of one job at other GPU counts. The controls start at what the "
            "trace says (GPUs, workload, batch, GPU, precision); options given win",
        )
    by_trace = " or the trace's" if trace else ""
    parser.add_argument("--workload", help=f"workload id (default{by_trace} resnet50)")
    parser.add_argument("--gpu", help=f"GPU id (default{by_trace} V100-16GB)")
    parser.add_argument("--gpus", type=int, help=f"GPUs selected at start (default{by_trace} 8)")
    parser.add_argument("--algorithm", help=f"allreduce algorithm (default{by_trace} ring)")
    unset = "; default: the matching measurement's setup, else {}"
    parser.add_argument("--network", help="network id" + unset.format("25GbE"))
    parser.add_argument("--batch-size", type=int, help="batch per GPU" + unset.format(64))
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node" + unset.format(1))
    parser.add_argument("--intra-link", help="intra-node link" + unset.format("PCIe3"))
    parser.add_argument(
        "--precision", help="fp32, tf32, fp16, bf16 (those the GPU has)" + unset.format("fp32")
    )
    parser.add_argument(
        "--measured",
        action="append",
        default=[],
        metavar="NAME_OR_CSV",
        help="measured dataset to overlay (bundled name or CSV file); repeatable; "
        "default: the bundled one of this workload and GPU",
    )
    parser.add_argument("--no-measured", action="store_true", help="overlay no measurement")


def _add_output(parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    parser.add_argument("--format", choices=formats, default="table", help="output format")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of standard output"
    )


def _add_trace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-missing-ranks",
        action="store_true",
        help="read per-rank files that leave ranks of the world out (the output lists them)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dlexplore`` command."""
    parser = _Parser(
        prog="dlexplore",
        description="Predict and measure the performance of distributed deep-learning training.",
    )
    parser.add_argument("--version", action="version", version=f"dlexplore {__version__}")
    parser.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="FILE",
        help="load extra catalog entries from FILE (CSV or JSON); repeatable",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "predict",
        help="predict step time, throughput, memory of a configuration",
        description="Predict data-parallel training. Comma-separated values sweep "
        "a parameter; every option given becomes a column.",
    )
    p.add_argument(
        "--workload",
        type=_split_workloads,
        help="workload id(s), e.g. resnet50, or transformer:LAYERS,HIDDEN,HEADS,SEQ,VOCAB",
    )
    p.add_argument("--gpu", type=_split, help="GPU id(s), e.g. P100")
    p.add_argument("--network", type=_split, help="network id(s), e.g. 25GbE (default 100GbE)")
    p.add_argument("--gpus", type=_numbers(integer=True), help="total GPUs, e.g. 1,2,4,8")
    p.add_argument("--batch-size", type=_numbers(integer=True), help="batch size per GPU (samples)")
    p.add_argument("--gpus-per-node", type=_numbers(integer=True), help="GPUs per node (default 1)")
    p.add_argument(
        "--algorithm",
        type=_split,
        help="nccl (NCCL's own choice, the default), nvls, ring, tree, recursive_doubling, "
        "halving_doubling, hierarchical, parameter_server",
    )
    p.add_argument(
        "--servers", type=_numbers(integer=True), help="parameter servers (with --algorithm parameter_server)"
    )
    p.add_argument("--precision", type=_split, help="fp32, tf32, fp16, bf16")
    p.add_argument("--optimizer", type=_split, help="sgd, momentum, adam")
    p.add_argument("--bandwidth", type=_numbers(), help="network bandwidth, GB/s (overrides the network's)")
    p.add_argument("--latency", type=_numbers(), help="network latency, s (overrides the network's)")
    p.add_argument("--intra-link", type=_split, help="intra-node link id (default PCIe3)")
    p.add_argument("--intra-bandwidth", type=_numbers(), help="GB/s")
    p.add_argument("--intra-latency", type=_numbers(), help="s")
    p.add_argument(
        "--compute-efficiency",
        type=_numbers(),
        help="fraction of peak FLOP/s large GEMMs reach (default: published GEMM measurements of the GPU)",
    )
    p.add_argument(
        "--memory-efficiency", type=_numbers(), help="fraction of memory bandwidth memory-bound kernels reach"
    )
    p.add_argument("--kernel-time", type=_numbers(), help="fixed time per GPU kernel, s")
    p.add_argument(
        "--grad-accum",
        type=_numbers(integer=True),
        help="micro-batches of --batch-size per GPU per step (gradient accumulation)",
    )
    p.add_argument("--attention", type=_split, help="transformers: fused (default), unfused, flash")
    p.add_argument(
        "--framework",
        type=_split,
        help="ddp (default: 25 MiB buckets) or horovod (fusion, cycle, negotiation)",
    )
    p.add_argument("--transport", type=_split, help="auto (TCP on Ethernet; default), tcp, rdma")
    p.add_argument(
        "--bucket-size", type=_sizes, help="gradient bucket size, e.g. 25MiB (default), 64MB, 0 (per layer)"
    )
    p.add_argument(
        "--overlap", type=_numbers(), help="1 overlaps communication with backward (default), 0 does not"
    )
    p.add_argument("--gamma", type=_numbers(), help="reduction cost, s/byte (default 0)")
    p.add_argument(
        "--storage", type=_split, help="storage tier the input is read from (default: synthetic data)"
    )
    p.add_argument("--io-threads", type=_numbers(integer=True), help="reads in flight per GPU (default 4)")
    p.add_argument("--no-prefetch", action="store_true", help="do not overlap input with compute")
    p.add_argument("--workspace", type=parse_bytes, help="workspace allowance, e.g. 1GiB")
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
    _add_output(p)
    p.set_defaults(func=_cmd_predict)

    c = sub.add_parser(
        "comm",
        help="predict one collective's time, algbw and busbw",
        description="Alpha-beta-gamma cost of a collective; bandwidth in GB/s "
        "(1e9 bytes/s); algbw and busbw as nccl-tests defines them.",
    )
    c.add_argument(
        "--collective",
        default="allreduce",
        help="allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall",
    )
    c.add_argument("--algorithm", default=None, help="algorithm (default: the collective's first)")
    c.add_argument("--bytes", type=_sizes, required=True, help="message size(s), bytes")
    c.add_argument("--gpus", type=_numbers(integer=True), required=True, help="ranks")
    c.add_argument("--bandwidth", type=_numbers(), required=True, help="GB/s")
    c.add_argument("--latency", type=_numbers(), required=True, help="s")
    c.add_argument("--gamma", type=_numbers(), default=0.0, help="s/byte (default 0)")
    c.add_argument("--servers", type=_numbers(integer=True), default=1, help="parameter servers")
    c.add_argument(
        "--gpus-per-node", type=_numbers(integer=True), default=8, help="GPUs per node (hierarchical)"
    )
    c.add_argument("--intra-bandwidth", type=_numbers(), help="GB/s")
    c.add_argument("--intra-latency", type=_numbers(), help="s")
    _add_output(c)
    c.set_defaults(func=_cmd_comm)

    k = sub.add_parser("catalog", help="list GPUs, networks, workloads or storage tiers")
    k.add_argument("kind", choices=("gpus", "networks", "workloads", "storage"))
    _add_output(k, ("table", "csv", "json"))
    k.set_defaults(func=_cmd_catalog)

    m = sub.add_parser("measured", help="list or show published measurements")
    m.add_argument("action", choices=("list", "show"))
    m.add_argument("name", nargs="?", help="dataset name (for show) or a CSV file")
    m.add_argument(
        "--by",
        choices=("bytes", "point"),
        default="bytes",
        help="nccl-tests output: one row per size (repeats averaged) or per result row",
    )
    _add_output(m)
    m.set_defaults(func=_cmd_measured)

    a = sub.add_parser(
        "advise",
        help="rank dp x tp x pp, micro-batch, recompute and ZeRO "
        "configurations that fit, by predicted throughput",
        description="Enumerate hybrid-parallel configurations of a workload on N GPUs, "
        "drop those that do not fit in memory, rank the rest by predicted throughput, "
        "with energy per step and the time-energy Pareto front.",
    )
    from . import advisor

    advisor.add_arguments(a)
    a.set_defaults(func=_cmd_advise)

    e = sub.add_parser(
        "explore",
        help="serve the interactive explorer (Voila) on 127.0.0.1",
        description="Serve the explorer as a Voila dashboard on 127.0.0.1 with the "
        "bundled data; options set its starting configuration. Needs the 'explore' "
        "extra. The same explorer runs in JupyterLab: "
        "from dlexplore.widgets import Explorer; Explorer().",
    )
    e.add_argument("--port", type=int, default=8866, help="port (default 8866)")
    e.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    e.add_argument(
        "--pool-size",
        type=int,
        default=1,
        metavar="N",
        help="explorer kernels kept started and run ahead, so a page opens in about a "
        "second (default 1; about 200 MB each; 0 starts one per page)",
    )
    e.add_argument(
        "--cull-idle",
        type=int,
        default=900,
        metavar="SECONDS",
        help="stop a page's kernel after this long without activity (default 900); a "
        "closed page's kernel stops at once",
    )
    _add_explorer_options(e, trace=True)
    e.set_defaults(func=_cmd_explore)

    r = sub.add_parser(
        "report",
        help="write the explorer's plots as one standalone HTML page",
        description="Write the explorer's plots for one configuration to a "
        "standalone HTML page (BokehJS inlined: it opens without a network).",
    )
    _add_explorer_options(r)
    r.add_argument("--title", help="page title")
    r.add_argument(
        "-o", "--output", required=True, metavar="FILE.html", help="the page to write (atomically)"
    )
    r.set_defaults(func=_cmd_report)

    k = sub.add_parser(
        "calibrate",
        help="fit model parameters to measured points, predict the rest",
        description="Fit model parameters (compute efficiency, bandwidth, latency, ...) "
        "to the points --fit-on selects, with standard errors, and print one row per "
        "measured point: measured, predicted, error ((predicted - measured) / measured). "
        "SOURCE is a bundled dataset name, a measurement CSV, nccl-tests output, or a "
        "trace file or folder.",
    )
    k.add_argument("source", metavar="FILE_OR_NAME")
    k.add_argument(
        "--fit-on",
        help="which points to fit, e.g. 'gpus<=8' or 'gpus == 1 and precision == fp32' (default: all)",
    )
    k.add_argument("--params", help="parameters to fit, e.g. compute_efficiency,bandwidth,latency")
    k.add_argument("--per", help="one value per group, e.g. workload,precision")
    k.add_argument("--network", help="network id for points that do not name one")
    k.add_argument("--intra-link", help="intra-node link id")
    k.add_argument("--gpus-per-node", type=int, help="GPUs per node where the points do not say")
    k.add_argument("--servers", type=int, help="parameter servers")
    k.add_argument("--bucket-size", type=parse_bytes, help="gradient bucket size, e.g. 25MiB")
    k.add_argument("--batch-size", type=int, help="samples per rank per step (traces)")
    _add_output(k, ("table", "csv", "json"))
    k.set_defaults(func=_cmd_calibrate)

    w = sub.add_parser(
        "whatif",
        help="replay a measured trace with other bandwidth, latency, compute speed or GPUs",
        description="Replay the dependency graph of a measured trace with changed "
        "parameters. Factors: x2 = twice, x0.5 = half; comma lists sweep, every "
        "combination is a scenario; the first row replays the trace as measured.",
    )
    w.add_argument("paths", nargs="+", metavar="TRACE", help="trace file, folder or glob")
    w.add_argument("--trace-format", help="skip format detection: pytorch, horovod, nsys, otf2")
    _add_trace_options(w)
    w.add_argument("--bandwidth", default="x1", help="network bandwidth factor(s): x2, or x1,x2,x4")
    w.add_argument("--latency", default="x1", help="network latency factor(s): x0.5")
    w.add_argument("--compute", default="x1", help="compute speed factor(s): x1.5")
    w.add_argument(
        "--gpus", help="ranks: 64, or 8,16,64 (default: as measured; extra ranks copy measured ones)"
    )
    w.add_argument(
        "--batch-size",
        type=int,
        help="samples per rank per step, for throughput (default: from the collector's manifest.json)",
    )
    w.add_argument("--per-step", action="store_true", help="one row per scenario and step")
    _add_output(w, ("table", "csv", "json"))
    w.set_defaults(func=_cmd_whatif)

    t = sub.add_parser(
        "trace",
        help="read traces: per-rank breakdown, collectives, convert",
        description="Read PyTorch profiler, Horovod, Nsight Systems (SQLite) or "
        "OTF2 traces: files, folders of per-rank files, or glob patterns.",
    )
    tsub = t.add_subparsers(dest="trace_command", metavar="ACTION", parser_class=_Parser, required=True)
    for action, helptext, func in (
        ("summary", "per-rank, per-step time breakdown", _cmd_trace_summary),
        (
            "collectives",
            "one row per collective and message size, with algbw and busbw",
            _cmd_trace_collectives,
        ),
    ):
        a = tsub.add_parser(action, help=helptext, description=helptext)
        a.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
        a.add_argument("--trace-format", help="skip format detection: pytorch, horovod, nsys, otf2")
        _add_trace_options(a)
        _add_output(a, ("table", "csv", "json") if action == "collectives" else FORMATS)
        if action == "summary":
            a.add_argument(
                "--by",
                choices=("bytes", "point"),
                help="nccl-tests output: one row per size (repeats averaged, the default) or per result row",
            )
            a.add_argument(
                "--dask",
                choices=("threads", "processes", "sync"),
                help="read the files one at a time on local Dask workers (for thousands "
                "of ranks: never all events in memory)",
            )
            a.add_argument(
                "--workers", type=int, help="local Dask threads or processes (default: one per core)"
            )
            a.add_argument(
                "--scheduler-address",
                metavar="ADDRESS",
                help="read on a running Dask cluster instead (tcp://host:8786)",
            )
            a.add_argument("--quiet", action="store_true", help="no progress bar")
        if action == "collectives":
            a.add_argument(
                "--bandwidth",
                type=float,
                help="GB/s: add the alpha-beta prediction (`predicted`, `error`) per row",
            )
            a.add_argument("--latency", type=float, help="s, with --bandwidth")
            a.add_argument("--algorithm", default="ring", help="algorithm of the prediction (ring)")
        a.set_defaults(func=func)
    h = tsub.add_parser("report", help="write the timeline, breakdown and collectives as one HTML page")
    h.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
    h.add_argument("--trace-format", help="skip format detection")
    _add_trace_options(h)
    h.add_argument("--title", help="page title")
    h.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the page to write")
    h.set_defaults(func=_cmd_trace_report)
    v = tsub.add_parser("convert", help="write the event table to netCDF (reload with load_trace)")
    v.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
    v.add_argument("--trace-format", help="skip format detection")
    _add_trace_options(v)
    v.add_argument("-o", "--output", required=True, metavar="FILE.nc", help="netCDF file to write")
    v.set_defaults(func=_cmd_trace_convert)

    g = sub.add_parser(
        "collect",
        help="run real data-parallel training on CPU and trace every rank",
        description="Run data-parallel training with torch.distributed (gloo, "
        "127.0.0.1) on CPU, profile every rank, write per-rank traces and a manifest. "
        "Needs the 'torch' extra.",
    )
    g.add_argument("--nproc", type=int, default=2, help="processes (ranks), default 2")
    g.add_argument("--steps", type=int, default=4, help="profiled training steps, default 4")
    g.add_argument("--model", default="mlp", choices=("mlp", "cnn"), help="model, default mlp")
    g.add_argument("--out", required=True, metavar="DIR", help="folder to create")
    g.add_argument("--batch-size", type=int, default=32, help="samples per rank per step, default 32")
    g.add_argument("--warmup", type=int, default=1, help="profiler warm-up steps, default 1")
    g.add_argument("--seed", type=int, default=0, help="random seed, default 0")
    g.add_argument("--port", type=int, help="rendezvous port on 127.0.0.1 (default: a free one)")
    g.add_argument("--overwrite", action="store_true", help="replace DIR once the new run succeeded")
    g.add_argument("--timeout", type=float, default=300.0, help="seconds before giving up, default 300")
    g.add_argument("--quiet", action="store_true", help="no progress lines")
    g.set_defaults(func=_cmd_collect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 2 bad input, 1 internal error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        if args.catalog:
            from .catalog import load_file

            for path in args.catalog:
                load_file(path)
        with warnings.catch_warnings():
            # a reader's warning (a rank taken from a file name, files skipped) is one line too
            warnings.showwarning = lambda message, *_, **__: print(
                f"dlexplore: warning: {message}", file=sys.stderr
            )
            args.func(args)
        return 0
    except DlexploreError as err:
        print(f"dlexplore: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; say nothing more.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the CLI promises one line, never a traceback
        if os.environ.get("DLEXPLORE_DEBUG"):
            raise
        print(
            f"dlexplore: internal error: {type(err).__name__}: {err} "
            "(set DLEXPLORE_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
