"""``dlexplore trace summary|collectives|report|convert``: what a measured trace holds."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING

import pandas as pd
import xarray as xr

from .measured_view import show_measured
from .options import FORMATS, Parser, UsageError, add_nccl_tests_choice, add_output, add_trace_options
from .output import dataset_to_frame, emit, emit_frame, readable_table, write_text

if TYPE_CHECKING:
    from ..traces import Trace

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


def load_trace_from_args(args: argparse.Namespace, *, any_format: bool = False):
    """The trace the command names (with ``any_format``, or a measured table: nccl-tests ...)."""
    from ..traces import load, load_trace

    options = {"allow_missing_ranks": True} if getattr(args, "allow_missing_ranks", False) else {}
    if not any_format:
        return load_trace(args.paths, format=args.trace_format, **options)
    if getattr(args, "by", None):
        options["by"] = args.by
    for choice in ("dtype", "redop", "root"):
        if getattr(args, choice, None) is not None:
            options[choice] = getattr(args, choice)
    return load(args.paths, format=args.trace_format, **options)


def trace_notes(trace) -> str:
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


def run_summary(args: argparse.Namespace) -> None:
    if (args.dask is not None or args.scheduler_address is not None) and _nccl_log_given(args):
        raise UsageError(
            "--dask and --scheduler-address summarise event traces; drop them for NCCL debug logs"
        )
    if args.dask is None and args.scheduler_address is None:
        if args.workers is not None:
            raise UsageError("--workers goes with --dask threads|processes")
        if _nccl_log_given(args):
            _show_table(_per_collective(_read_nccl_logs(args)), args)
            return
        trace = load_trace_from_args(args, any_format=True)
        if not hasattr(trace, "breakdown"):  # a measured table (nccl-tests, Darshan, DLIO)
            ds = _with_tau_breakdown(getattr(trace, "summary", trace))
            show_measured(ds, args, str(ds.attrs.get("title") or ds.attrs.get("source", "")))
            return
        ds = trace.breakdown()
        title = f"measured breakdown per rank and step: {trace!r}{trace_notes(trace)}"
    else:
        ds = _summarize_on_dask(args)
        title = f"measured breakdown per rank and step ({ds.sizes['rank']} ranks, read on Dask)"
    frame = dataset_to_frame(ds, TRACE_SUMMARY_COLUMNS)
    emit(ds, frame, args, title, TRACE_SUMMARY_COLUMNS)


def _with_tau_breakdown(ds: xr.Dataset) -> xr.Dataset:
    """TAU profiles with their per-rank breakdown (time_comm, time_io, time_compute [s], as for every
    other trace's summary), from the first time metric; other datasets as they are."""
    if ds.attrs.get("format") != "tau":
        return ds
    from ..traces import tau_breakdown

    times = [str(m) for m, u in zip(ds["metric"].values, ds["metric_units"].values, strict=True) if u == "s"]
    if not times:
        return ds
    parts = tau_breakdown(ds, metric=times[0]).drop_vars("metric", errors="ignore")
    for name in parts.data_vars:
        parts[name].attrs["long_name"] += f" (metric {times[0]})"
    return xr.merge([ds, parts], combine_attrs="override")


def _summarize_on_dask(args: argparse.Namespace) -> xr.Dataset:
    """``trace summary`` one file at a time on Dask: never all events in memory at once."""
    if importlib.util.find_spec("dask") is None:
        raise UsageError("--dask needs Dask: pip install 'dlexplore[scale]'")
    from ..traces.scale import summarize

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    options = dict(format=args.trace_format, progress=not args.quiet, n_workers=args.workers)
    if args.scheduler_address is None:
        return summarize(args.paths, scheduler=args.dask, **options)
    if args.dask is not None:
        raise UsageError("give --dask (local) or --scheduler-address (a running cluster), not both")
    if importlib.util.find_spec("distributed") is None:
        raise UsageError("--scheduler-address needs dask.distributed: pip install 'dlexplore[scale]'")
    from distributed import Client

    try:
        client = Client(args.scheduler_address, timeout="10s")
    except OSError as err:
        raise UsageError(f"cannot reach the Dask scheduler at {args.scheduler_address}: {err}") from None
    with client:
        return summarize(args.paths, client=client, **options)


def _per_collective(table: pd.DataFrame) -> pd.DataFrame:
    """An NCCL debug log's operations as one row per collective and size."""
    from ..traces import nccl_log_table

    if table.empty and len(table.attrs.get("tuning", [])):  # TUNING lines only: NCCL's choices
        tuning = table.attrs["tuning"].drop(columns=["file"], errors="ignore")
        tuning.attrs.update(
            source=table.attrs["source"] + " (TUNING lines only: no operation was logged)",
            units={"bytes": "bytes", "predicted_time": "s"},
        )
        return tuning
    return nccl_log_table(table)


def _show_table(table: pd.DataFrame, args: argparse.Namespace) -> None:
    if args.format == "table":
        body = readable_table(table, table.attrs.get("units", {})) if len(table) else "(no rows)"
        write_text(f"# {table.attrs.get('source', '')}\n{body}\n", args.output)
        return
    emit_frame(table, args, str(table.attrs.get("source", "")))


def _nccl_log_given(args: argparse.Namespace) -> bool:
    """Whether the command names NCCL debug logs (read as operations, not as an event trace): files
    that are, folders holding some, glob patterns matching them."""
    if args.trace_format is not None:
        return args.trace_format == "nccl-log"
    from ..errors import DlexploreError
    from ..traces import detect_format
    from ..traces.nccl_log import log_files

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # said once, when the files are read
            files = log_files(args.paths)
        return bool(files) and all(detect_format(p) == "nccl-log" for p in files)
    except (DlexploreError, OSError):
        return False  # the trace reader says what is wrong


def _read_nccl_logs(args: argparse.Namespace) -> pd.DataFrame:
    """The operations of the NCCL logs the command names, refusing options meant for other formats."""
    from ..traces import read_nccl_log

    given = [f"--{o.replace('_', '-')}" for o in ("by", "dtype", "redop", "root") if getattr(args, o, None)]
    if getattr(args, "allow_missing_ranks", False):
        given.append("--allow-missing-ranks")
    if given:
        raise UsageError(
            f"{', '.join(given)}: not for NCCL debug logs (nccl-tests output and traces take them)"
        )
    return read_nccl_log(args.paths)


def run_collectives(args: argparse.Namespace) -> None:
    if _nccl_log_given(args):
        if args.bandwidth is not None or args.latency is not None:
            raise UsageError("--bandwidth/--latency compare timed collectives; an NCCL log has no times")
        _show_table(_per_collective(_read_nccl_logs(args)), args)
        return
    trace = load_trace_from_args(args)
    table = trace.collectives()
    given = [args.bandwidth is not None, args.latency is not None]
    if any(given) and not all(given):
        raise UsageError("to compare with the model give both --bandwidth (GB/s) and --latency (s)")
    if all(given):
        from ..fit.collectives import compare_collectives

        attrs = dict(table.attrs)
        table = compare_collectives(
            table, bandwidth=args.bandwidth, latency=args.latency, algorithm=args.algorithm
        )
        table.attrs = {**attrs, **table.attrs}
    if args.format == "table":
        body = readable_table(table, table.attrs.get("units", {}))
        if table.empty:  # not pandas' "Empty DataFrame" and its column index
            body = "(no collectives: the trace holds no communication event)"
        write_text(
            f"# collectives: {trace!r}{trace_notes(trace)}\n# source: {trace.source}\n{body}\n", args.output
        )
        return
    emit_frame(table, args, f"collectives: {trace.source}")


def run_kernels(args: argparse.Namespace) -> None:
    trace = load_trace_from_args(args)
    table = trace.kernels() if args.by == "name" else trace.kernel_breakdown()
    if args.top is not None:
        if args.top < 1:
            raise UsageError(f"--top must be >= 1, got {args.top}")
        table = table.groupby("rank", sort=False).head(args.top).reset_index(drop=True)
    what = "device time per kernel" if args.by == "name" else "device time per kernel kind"
    if args.format == "table":
        shown = table.assign(share=table["share"] * 100).rename(columns={"share": "share [%]"})
        if "name" in shown:
            shown["name"] = shown["name"].str.slice(0, 90)  # csv and json keep names whole
        body = readable_table(shown, {k: v for k, v in table.attrs["units"].items() if k != "share"})
        if table.empty:
            body = "(no device kernels: the trace holds no GPU activity)"
        write_text(
            f"# {what}: {trace!r}{trace_notes(trace)}{_unaligned_note(trace)}\n# source: {trace.source}\n"
            f"{body}\n",
            args.output,
        )
        return
    emit_frame(table, args, f"{what}: {trace.source}")


def _unaligned_note(trace: Trace) -> str:
    """A line on the GEMM kernels built for operands aligned below 16 bytes, where there are any."""
    kernels = trace.kernels()
    unaligned = kernels[(kernels["kind"] == "gemm") & (kernels["alignment"] < 16)]
    if unaligned.empty:
        return ""
    share = unaligned["time"].sum() / kernels["time"].sum()
    return (
        f"\n# {len(unaligned)} GEMM kernel(s) for operands aligned to under 16 bytes ran "
        f"{unaligned['time'].sum() * 1e3:,.3f} ms, {share:.0%} of the device time: a matrix dimension "
        "not a multiple of 8 (16-bit types) or 4 (32-bit); padding it lets cuBLAS take aligned kernels"
    )


def run_convert(args: argparse.Namespace) -> None:
    from ..traces import write_netcdf

    trace = load_trace_from_args(args)
    write_netcdf(trace, args.output)
    print(
        f"dlexplore: wrote {args.output} ({len(trace):,} events, {len(trace.ranks)} ranks)", file=sys.stderr
    )


def run_report(args: argparse.Namespace) -> None:
    from ..report import write_trace_report

    trace = load_trace_from_args(args)
    write_trace_report(args.output, trace, title=args.title)
    print(f"dlexplore: wrote {args.output}", file=sys.stderr)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``trace`` command and its actions."""
    t = sub.add_parser(
        "trace",
        help="read traces: per-rank breakdown, collectives, convert",
        description="Read PyTorch profiler, Horovod, Nsight Systems (SQLite) or "
        "OTF2 traces: files, folders of per-rank files, or glob patterns.",
    )
    tsub = t.add_subparsers(dest="trace_command", metavar="ACTION", parser_class=Parser, required=True)
    for action, helptext, func in (
        ("summary", "per-rank, per-step time breakdown", run_summary),
        (
            "collectives",
            "one row per collective and message size, with algbw and busbw",
            run_collectives,
        ),
    ):
        a = tsub.add_parser(action, help=helptext, description=helptext)
        a.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
        a.add_argument(
            "--trace-format",
            help="skip format detection: pytorch, horovod, nsys, otf2, netcdf, nccl-log"
            + (
                ", or a measured table: nccl-tests, darshan, darshan-text, dlio, tau"
                if action == "summary"
                else ""
            ),
        )
        add_trace_options(a)
        add_output(a, ("table", "csv", "json") if action == "collectives" else FORMATS)
        if action == "summary":
            a.add_argument(
                "--by",
                choices=("bytes", "point"),
                help="nccl-tests output: one row per size (repeats averaged, the default) or per result row",
            )
            add_nccl_tests_choice(a)
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
    _add_kernels_parser(tsub)
    h = tsub.add_parser("report", help="write the timeline, breakdown and collectives as one HTML page")
    h.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
    h.add_argument("--trace-format", help="skip format detection")
    add_trace_options(h)
    h.add_argument("--title", help="page title")
    h.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the page to write")
    h.set_defaults(func=run_report)
    v = tsub.add_parser("convert", help="write the event table to netCDF (reload with load_trace)")
    v.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
    v.add_argument("--trace-format", help="skip format detection")
    add_trace_options(v)
    v.add_argument("-o", "--output", required=True, metavar="FILE.nc", help="netCDF file to write")
    v.set_defaults(func=run_convert)


def _add_kernels_parser(tsub: argparse._SubParsersAction) -> None:
    k = tsub.add_parser(
        "kernels",
        help="device time per kernel kind (GEMM, convolution, element-wise ...) or per kernel",
        description="Device time per rank and kernel kind, or per kernel name (--by name) with the "
        "operand alignment a CUTLASS kernel's name states.",
    )
    k.add_argument("paths", nargs="+", metavar="PATH", help="trace file, folder or glob")
    k.add_argument("--trace-format", help="skip format detection")
    add_trace_options(k)
    k.add_argument(
        "--by", choices=("kind", "name"), default="kind", help="rows per kernel kind (default) or name"
    )
    k.add_argument("--top", type=int, metavar="N", help="only the N rows with the most time per rank")
    add_output(k, ("table", "csv", "json"))
    k.set_defaults(func=run_kernels)
