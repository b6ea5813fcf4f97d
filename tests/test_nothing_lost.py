"""Nothing lost (issue 7, point 5): inputs are never modified, outputs are written atomically (a
writer killed mid-way leaves the old file intact), no pickle or eval of user data, servers bind
127.0.0.1 by default.

Every command runs as a real ``dlexplore`` process on copies, in ``tmp_path``, of the shipped inputs:
the published measurements (``data/measured``), the collector's gloo trace (``data/traces/gloo-mlp-2rank``,
written by ``dlexplore collect``) and the Horovod timeline written by Horovod itself
(``tests/data/traces/horovod/timeline.json``). The killed writers are real processes too: one writes
through :func:`dlexplore._io.atomic_open` (which every text output of the CLI, the HTML reports and the
collector's manifest use), one through :func:`dlexplore.traces.write_netcdf` (``trace convert``) and
one through :func:`dlexplore.store.to_zarr` (a folder, put in place by one ``RENAME_EXCHANGE`` swap).

What a kill leaves: the target holds its old bytes; the temporary file, hidden beside it as
``.<name>.<random>.tmp``, may remain (SIGKILL runs no clean-up) and is never renamed over the target.
That ``calibrate --fit-on`` never evaluates Python is tested in tests/test_cli_calibrate.py
(``test_bad_selection_is_refused_and_evaluates_nothing``) and tests/test_fit_calibrate.py
(``test_fit_on_never_evaluates_python``); it is not repeated here.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dlexplore
from dlexplore._data import data_dir
from dlexplore.serve import HOST, explore_command

EXE = shutil.which("dlexplore") or str(Path(sys.executable).parent / "dlexplore")
PACKAGE = Path(dlexplore.__file__).resolve().parent
TESTS_DATA = Path(__file__).resolve().parent / "data" / "traces"
OLD = b"old content: a previous run's output, which must survive\n" * 100

# A network entry (name, kind, bandwidth [GB/s], latency [s]) for --catalog.
CATALOG_CSV = "name,kind,bandwidth_gbs,latency_s\nlab-fabric,network,12.5,2e-6\n"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout)


# Runs several command lines through dlexplore.cli.main (what the ``dlexplore`` script calls) in one
# real process, so that the imports are paid once: the suite runs on 2 cores.
BATCH = """
import contextlib, io, json, sys
from dlexplore.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    results.append([status, err.getvalue()])
sys.stdout.write(json.dumps(results))
"""


def cli_batch(commands: list[tuple[str, ...]]) -> list[tuple[int, str]]:
    """(exit status, standard error) of each command line, run one after another in one process."""
    done = subprocess.run(
        [sys.executable, "-c", BATCH, json.dumps([list(c) for c in commands])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return [(status, err) for status, err in json.loads(done.stdout)]


def snapshot(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``folder``: relative path -> (sha256, size [bytes], mtime [ns])."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[str(path.relative_to(folder))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                stat.st_size,
                stat.st_mtime_ns,
            )
    return out


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders the writers leave beside their target."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture()
def inputs(tmp_path: Path) -> Path:
    """Copies of the real inputs, with an old mtime, in ``tmp_path/in``."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(data_dir() / "measured" / "tf-benchmarks-2017-dgx1.csv", folder / "measured.csv")
    shutil.copytree(data_dir() / "traces" / "gloo-mlp-2rank", folder / "gloo-mlp-2rank")
    shutil.copy(TESTS_DATA / "horovod" / "timeline.json", folder / "timeline.json")
    (folder / "lab.csv").write_text(CATALOG_CSV, encoding="utf-8")
    # An old mtime makes any rewrite, even of the same bytes, visible in the snapshot.
    for path in folder.rglob("*"):
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return folder


# --------------------------------------------------------------------------------------------------
# 1. inputs are never modified


def test_reading_commands_never_modify_their_inputs(inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    trace = str(inputs / "gloo-mlp-2rank")
    before = snapshot(inputs)
    commands = [
        (
            "--catalog",
            str(inputs / "lab.csv"),
            "predict",
            "--workload",
            "resnet50",
            "--gpu",
            "V100-16GB",
            "--network",
            "lab-fabric",
            "--gpus",
            "1,8",
            "-o",
            str(out / "predict.txt"),
        ),
        ("measured", "show", str(inputs / "measured.csv"), "--format", "csv", "-o", str(out / "m.csv")),
        ("trace", "summary", trace, "--format", "netcdf", "-o", str(out / "summary.nc")),
        ("trace", "summary", str(inputs / "timeline.json"), "--format", "csv"),
        ("trace", "collectives", trace, "--bandwidth", "1", "--latency", "1e-5", "--format", "json"),
        ("trace", "convert", trace, "-o", str(out / "trace.nc")),
        ("trace", "report", trace, "-o", str(out / "trace.html")),
        (
            "calibrate",
            str(inputs / "measured.csv"),
            "--fit-on",
            "gpus == 1",
            "--per",
            "workload",
            "--format",
            "csv",
        ),
        ("calibrate", trace, "--format", "json", "-o", str(out / "cal.json")),
        ("whatif", trace, "--bandwidth", "x1,x2", "--format", "csv"),
    ]
    # The converted trace reads back too (load_trace's netcdf reader).
    commands.append(("trace", "summary", str(out / "trace.nc"), "--format", "csv"))
    for command, (status, err) in zip(commands, cli_batch(commands), strict=True):
        assert status == 0, (command, err)
    # The first command ran as the installed script too, the way a user runs it.
    done = cli(*commands[0])
    assert done.returncode == 0, done.stderr
    assert snapshot(inputs) == before, "an input file changed, or a file appeared beside the inputs"
    assert sorted(p.name for p in out.iterdir()) == [
        "cal.json",
        "m.csv",
        "predict.txt",
        "summary.nc",
        "trace.html",
        "trace.nc",
    ]


# --------------------------------------------------------------------------------------------------
# 2a. a failing run leaves the old output as it was, and no temporary file


def test_failing_runs_leave_the_old_output_intact(inputs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # The collector's trace with rank 0's gzip stream cut in half. (A cut Horovod timeline would not
    # do: Horovod leaves its timeline unterminated when killed, so its reader accepts that.)
    broken = tmp_path / "broken"
    shutil.copytree(inputs / "gloo-mlp-2rank", broken)
    whole = (broken / "rank0.json.gz").read_bytes()
    (broken / "rank0.json.gz").write_bytes(whole[: len(whole) // 2])
    failing = {
        "predict.txt": ("predict", "--gpu", "no-such-gpu", "-o"),
        "comm.nc": (
            "comm",
            "--bytes",
            "1e6",
            "--gpus",
            "0",
            "--bandwidth",
            "1",
            "--latency",
            "1e-5",
            "--format",
            "netcdf",
            "-o",
        ),
        "measured.csv": ("measured", "show", str(tmp_path / "missing.csv"), "-o"),
        "report.html": ("report", "--gpus", "3", "-o"),
        "trace.html": ("trace", "report", str(broken), "-o"),
        "trace.nc": ("trace", "convert", str(broken), "-o"),
        "summary.nc": ("trace", "summary", str(broken), "--format", "netcdf", "-o"),
        "cal.csv": ("calibrate", str(inputs / "measured.csv"), "--fit-on", "gpus <= ", "-o"),
        "whatif.csv": ("whatif", str(broken), "-o"),
    }
    for name in failing:
        (out / name).write_bytes(OLD)
    commands = [(*command, str(out / name)) for name, command in failing.items()]
    for (name, command), (status, err) in zip(failing.items(), cli_batch(commands), strict=True):
        assert status == 2, (command, err)
        assert err.startswith("dlexplore: error:") and "Traceback" not in err
        assert (out / name).read_bytes() == OLD, name
    assert leftovers(out) == []
    # The collector refuses to touch a folder that is not empty, and a run that fails (here: the
    # ranks cannot start within 0.5 s) leaves the folder as it was, with no partial folder beside it.
    runs = tmp_path / "runs"
    shutil.copytree(inputs / "gloo-mlp-2rank", runs / "old")
    before = snapshot(runs / "old")
    done = cli("collect", "--out", str(runs / "old"), "--quiet")
    assert done.returncode == 2 and "not empty" in done.stderr
    done = cli("collect", "--out", str(runs / "old"), "--overwrite", "--timeout", "0.5", "--quiet")
    assert done.returncode == 2, done.stderr
    assert snapshot(runs / "old") == before
    assert leftovers(runs) == []


def test_output_that_is_a_folder_is_refused_without_leftovers(tmp_path):
    """``-o`` naming an existing folder: one error line, the folder untouched, no temporary file."""
    target = tmp_path / "result"
    target.mkdir()
    (target / "keep.txt").write_bytes(OLD)
    done = cli(
        "comm", "--bytes", "1e6", "--gpus", "8", "--bandwidth", "1", "--latency", "1e-5", "-o", str(target)
    )
    # Before dlexplore/_io.py checked this, os.replace failed after the write: "internal error".
    assert done.returncode == 2 and done.stderr.startswith("dlexplore: error:")
    assert "is a folder" in done.stderr and ".tmp" not in done.stderr
    assert (target / "keep.txt").read_bytes() == OLD
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------------------------------
# 2b. a writer killed mid-way leaves the old file intact

SLOW_WRITER = """
import sys, time
from dlexplore._io import atomic_open
with atomic_open(sys.argv[1], "wb") as handle:
    for _ in range(10_000):  # 1 MiB every 10 ms: 100 s in all, far longer than the test waits
        handle.write(b"new" * 349_526)
        handle.flush()
        time.sleep(0.01)
"""

BIG_CONVERT = """
import sys
import pandas as pd
from dlexplore.traces import load_trace, write_netcdf
from dlexplore.traces.schema import Trace
trace = load_trace(sys.argv[1])
write_netcdf(trace, sys.argv[2])  # the old file, written whole
# The real 2-rank trace, repeated 200 times: a write of some 10^5 events that takes a while.
events = pd.concat([trace.events] * 200, ignore_index=True)
big = Trace(events, format=trace.format, files=trace.files, world_size=trace.world_size, meta=trace.meta)
print("writing", flush=True)
write_netcdf(big, sys.argv[2])
print("done", flush=True)
"""


def _kill_when(
    script: str,
    args: list[str],
    far_enough: Callable[[], bool],
    on_ready: Callable[[], Any] | None = None,
    wait_s: float = 60,
) -> Any:
    """Run ``script`` and SIGKILL it as soon as ``far_enough()`` holds; fail if it finishes first.

    With ``on_ready``, wait first for the script to print ``writing`` (its old output is complete)
    and return what ``on_ready()`` reads then.
    """
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    old = None
    try:
        if on_ready is not None:
            assert process.stdout.readline() == b"writing\n", process.communicate()
            old = on_ready()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if far_enough():
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.001)
        else:
            pytest.fail("the writer never got far enough to be killed mid-way")
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
    return old


def _kill_while_writing(
    script: str, args: list[str], folder: Path, target: Path, least_bytes: int, ready: bool = False
) -> tuple[bytes | None, list[Path]]:
    """Run ``script``; SIGKILL it once its temporary file beside ``target`` holds ``least_bytes``.

    With ``ready``, wait first for the script to print a line and read ``target`` then (the old
    content the script wrote). Returns that content and the temporary files left behind. Fails if the
    writer finished before it was killed.
    """

    def far_enough() -> bool:
        temps = list(folder.glob(f".{target.name}.*.tmp"))
        return bool(temps) and temps[0].stat().st_size >= least_bytes

    old = _kill_when(script, args, far_enough, target.read_bytes if ready else None)
    return old, list(folder.glob(f".{target.name}.*.tmp"))


def test_killed_atomic_open_writer_leaves_the_old_file(tmp_path):
    target = tmp_path / "report.html"
    target.write_bytes(OLD)
    _, temps = _kill_while_writing(SLOW_WRITER, [str(target)], tmp_path, target, least_bytes=3 << 20)
    assert target.read_bytes() == OLD
    # What a SIGKILL leaves: the hidden, half-written temporary file, never renamed over the target.
    assert len(temps) == 1 and temps[0].name.startswith(".report.html.")
    assert temps[0].stat().st_size >= 3 << 20
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["report.html", temps[0].name])


def test_killed_trace_convert_leaves_the_old_netcdf(inputs, tmp_path):
    target = tmp_path / "trace.nc"
    old, temps = _kill_while_writing(
        BIG_CONVERT,
        [str(inputs / "gloo-mlp-2rank"), str(target)],
        tmp_path,
        target,
        least_bytes=1,
        ready=True,
    )
    assert old and target.read_bytes() == old
    assert len(temps) == 1
    # The old file is still a whole trace: it reads back.
    done = cli("trace", "summary", str(target), "--format", "csv")
    assert done.returncode == 0, done.stderr


ZARR_WRITER = """
import sys
import numpy as np
import xarray as xr
from dlexplore.store import to_zarr
old = xr.Dataset({"throughput": ("gpus", np.arange(4.0), {"units": "samples/s"})},
                 coords={"gpus": [1, 2, 4, 8]}, attrs={"source": "old run"})
to_zarr(old, sys.argv[1])
# A store of 400 chunks, written one by one: a kill lands in the middle of it.
big = xr.Dataset({"throughput": ("point", np.random.default_rng(0).random(4_000_000),
                                 {"units": "samples/s"})}, attrs={"source": "new run"})
print("writing", flush=True)
to_zarr(big.chunk({"point": 10_000}), sys.argv[1])
print("done", flush=True)
"""


def test_killed_zarr_writer_leaves_the_old_store(tmp_path):
    from dlexplore.store import open_zarr

    target = tmp_path / "pred.zarr"
    # Killed once the new store holds some 20 of its 400 chunks.
    old = _kill_when(
        ZARR_WRITER,
        [str(target)],
        lambda: len(list(tmp_path.glob(".pred.zarr.*.tmp/store/throughput/*"))) >= 20,
        lambda: snapshot(target),
        wait_s=120,
    )
    assert snapshot(target) == old
    ds = open_zarr(target, lazy=False)
    assert ds.attrs["source"] == "old run" and ds.throughput.values.tolist() == [0.0, 1.0, 2.0, 3.0]
    # SIGKILL runs no clean-up: the hidden, half-written store stays beside the target.
    assert [p.name for p in tmp_path.iterdir() if p.name != "pred.zarr"][0].startswith(".pred.zarr.")


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_replace_folder_puts_the_whole_new_folder_in_place(tmp_path, monkeypatch, swap):
    from dlexplore import _io

    swapped: list[bool] = []
    if swap == "two renames":  # what systems without renameat2(RENAME_EXCHANGE) do
        monkeypatch.setattr(_io, "_exchange", lambda first, second: False)
    elif not sys.platform.startswith("linux"):
        pytest.skip("RENAME_EXCHANGE is Linux's")
    else:
        real = _io._exchange
        monkeypatch.setattr(
            _io, "_exchange", lambda first, second: swapped.append(real(first, second)) or swapped[-1]
        )
    target, new = tmp_path / "out", tmp_path / ".out.partial"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "old.txt").write_bytes(OLD)
    (new / "deep" / "er").mkdir(parents=True)
    (new / "deep" / "er" / "new.txt").write_text("new")
    before = os.stat(tmp_path).st_ino
    _io.replace_folder(new, target)
    assert snapshot(target).keys() == {"deep/er/new.txt"}
    assert (target / "deep" / "er" / "new.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old folder is deleted
    assert os.stat(tmp_path).st_ino == before
    if swapped == [False]:  # the replacement above fell back to two renames
        pytest.skip(f"the file system under {tmp_path} cannot swap folders (RENAME_EXCHANGE)")
    assert swapped == ([True] if swap == "exchange" else [])  # one atomic swap, where there is one


def test_replace_folder_keeps_the_old_folder_when_the_new_cannot_move(tmp_path, monkeypatch):
    from dlexplore import _io

    monkeypatch.setattr(_io, "_exchange", lambda first, second: False)
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_bytes(OLD)
    with pytest.raises(OSError):
        _io.replace_folder(tmp_path / "missing", target)  # the second rename fails
    assert (target / "old.txt").read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# --------------------------------------------------------------------------------------------------
# 3. no pickle or eval of user data

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}


def _sources() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _call_name(node: ast.Call) -> str:
    func = node.func
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def test_no_pickle_marshal_eval_or_unsafe_loaders_in_the_package():
    problems = []
    sources = _sources()
    assert len(sources) > 20  # the scan found the package
    for path, tree in sources:
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                names = []
            problems += [f"{where}:{node.lineno}: imports {n}" for n in names if n in UNSAFE_MODULES]
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            keywords = {k.arg: k.value for k in node.keywords}
            if name in ("eval", "exec", "compile", "__import__", "builtins.eval", "builtins.exec"):
                problems.append(f"{where}:{node.lineno}: calls {name}")
            if name.endswith(("pd.eval", "DataFrame.eval", ".query")) or name in ("pandas.eval",):
                problems.append(f"{where}:{node.lineno}: calls {name} (evaluates a string)")
            if name.endswith("yaml.load") or name.endswith("yaml.load_all"):
                loader = keywords.get("Loader") or (node.args[1] if len(node.args) > 1 else None)
                if loader is None or "Safe" not in ast.unparse(loader):
                    problems.append(f"{where}:{node.lineno}: yaml.load without SafeLoader")
            if name.endswith("yaml.unsafe_load") or name.endswith("yaml.full_load"):
                problems.append(f"{where}:{node.lineno}: {name}")
            allow = keywords.get("allow_pickle")
            if allow is not None and not (isinstance(allow, ast.Constant) and allow.value is False):
                problems.append(f"{where}:{node.lineno}: {name}(allow_pickle={ast.unparse(allow)})")
            if name.endswith(("read_pickle", "torch.load")):
                weights_only = keywords.get("weights_only")
                if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                    problems.append(f"{where}:{node.lineno}: {name} unpickles")
    assert problems == []


# --------------------------------------------------------------------------------------------------
# 4. servers bind 127.0.0.1 by default


def test_explorer_serves_on_loopback_only():
    assert HOST == "127.0.0.1"
    command = explore_command(8866, open_browser=False)
    assert "--Voila.ip=127.0.0.1" in command
    assert not any(
        arg.startswith(("--ip", "--Voila.ip=")) and arg != "--Voila.ip=127.0.0.1" for arg in command
    )


def test_every_socket_and_server_in_the_package_binds_loopback():
    """Every ``bind((host, port))``, ``ip=``/``host=`` keyword, ``LocalCluster``/``Client`` call and
    ``MASTER_ADDR`` in the package names 127.0.0.1 (or the module's ``HOST``, which is 127.0.0.1);
    no source mentions a wildcard address."""
    problems, binds = [], 0
    for path, tree in _sources():
        where = path.relative_to(PACKAGE.parent)
        text = path.read_text(encoding="utf-8")
        for wildcard in ('"0.0.0.0"', "'0.0.0.0'", '"::"', "'::'", "INADDR_ANY", "in6addr_any"):
            if wildcard in text:
                problems.append(f"{where}: mentions {wildcard}")
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _call_name(node)
            if name.endswith(".bind") and node.args and isinstance(node.args[0], ast.Tuple):
                binds += 1
                host = ast.unparse(node.args[0].elts[0])
                if host not in ("'127.0.0.1'", "HOST"):
                    problems.append(f"{where}:{node.lineno}: binds {host}")
            for keyword in node.keywords:
                if keyword.arg in ("ip", "host", "MASTER_ADDR", "dashboard_address"):
                    value = ast.unparse(keyword.value)
                    if "127.0.0.1" not in value and value != "HOST":
                        problems.append(f"{where}:{node.lineno}: {keyword.arg}={value}")
            if name.split(".")[-1] in ("LocalCluster", "Client", "serve", "run_simple", "HTTPServer"):
                values = {k.arg: ast.unparse(k.value) for k in node.keywords}
                if name.split(".")[-1] == "LocalCluster" and "127.0.0.1" not in values.get("host", ""):
                    problems.append(f"{where}:{node.lineno}: LocalCluster without host='127.0.0.1'")
    assert problems == []
    assert binds >= 2  # serve's port probe and the collector's free-port probe


def test_collector_rendezvous_is_on_loopback():
    """The shipped trace's manifest, written by a real ``dlexplore collect``, names its gloo master."""
    manifest = json.loads((data_dir() / "traces" / "gloo-mlp-2rank" / "manifest.json").read_text())
    assert manifest["distributed"]["master"].startswith("127.0.0.1:")
    source = (PACKAGE / "traces" / "collect.py").read_text(encoding="utf-8")
    assert 'MASTER_ADDR="127.0.0.1"' in source and "GLOO_SOCKET_IFNAME" in source
