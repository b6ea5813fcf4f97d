"""The hang-proof netCDF read (:mod:`dlexplore.hdf5_probe`) keeps its child process between probes.

The child reads file after file, a file it fails on included; one that hangs is killed and replaced;
one left idle ends itself, and so does one whose caller was killed while HDF5 looped; a forked
process and a second thread get children of their own. Real files throughout: a netCDF trace from
the test data, a truncated copy of it, and the file HDF5 loops on (``_hdf5_loop``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _hdf5_loop import HDF5_LOOP, hdf5_hangs

from dlexplore import hdf5_probe
from dlexplore.errors import InputFileError

SOUND = Path(__file__).resolve().parent / "data" / "traces" / "netcdf" / "horovod-timeline-v1.nc"
POSIX_ALARM = pytest.mark.skipif(not hasattr(signal, "alarm"), reason="the child's time bound is SIGALRM")


@pytest.fixture
def fresh():
    """No file has passed, and no child is kept, before and after the test."""
    hdf5_probe.forget_passed()
    hdf5_probe.close_worker()
    yield
    hdf5_probe.forget_passed()
    hdf5_probe.close_worker()


def probe(path: Path) -> int:
    """Probe ``path`` as a file this process has not read, and return the kept child's pid."""
    hdf5_probe.forget_passed()
    hdf5_probe.probe_hdf5(path)
    return hdf5_probe.worker_pid()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:  # Linux: a zombie has ended, not yet reaped
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return True


def ends_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_one_child_reads_file_after_file_the_one_it_fails_on_included(fresh, tmp_path):
    broken = tmp_path / "half.nc"
    broken.write_bytes(SOUND.read_bytes()[:5000])
    first = probe(SOUND)
    with pytest.raises(
        InputFileError, match=r"half\.nc: cannot be read as netCDF \(OSError: .*truncated file"
    ):
        hdf5_probe.probe_hdf5(broken)
    assert hdf5_probe.worker_pid() == first
    assert probe(SOUND) == first  # how much this saves: benchmarks/bench_netcdf_probe.py


def test_a_child_that_hangs_is_killed_and_the_next_file_gets_another(fresh, tmp_path, monkeypatch):
    loop = tmp_path / "loop.nc"
    shutil.copyfile(HDF5_LOOP, loop)
    hangs = hdf5_hangs()
    first = probe(SOUND)
    monkeypatch.setenv(hdf5_probe.ENV_SECONDS, "1")
    expected = "did not finish reading it in 1 s" if hangs else r"cannot be read as netCDF \("
    with pytest.raises(InputFileError, match=expected):
        hdf5_probe.probe_hdf5(loop)
    monkeypatch.delenv(hdf5_probe.ENV_SECONDS)
    if hangs:
        assert hdf5_probe.worker_pid() is None and not alive(first)
        assert probe(SOUND) != first
    else:
        assert probe(SOUND) == first


@POSIX_ALARM
def test_an_idle_child_ends_itself_and_the_next_probe_starts_another(fresh, monkeypatch):
    monkeypatch.setattr(hdf5_probe, "IDLE_SECONDS", 1)
    first = probe(SOUND)
    assert ends_within(first, 10)
    second = probe(SOUND)
    assert second != first and alive(second)


@POSIX_ALARM
def test_the_child_ends_when_its_caller_is_killed_while_hdf5_loops(tmp_path):
    loop = tmp_path / "loop.nc"
    shutil.copyfile(HDF5_LOOP, loop)
    script = (
        "import sys\n"
        "from dlexplore import hdf5_probe\n"
        "print(hdf5_probe.start_worker(), flush=True)\n"
        "hdf5_probe.probe_hdf5(sys.argv[1])\n"
    )
    env = {**os.environ, hdf5_probe.ENV_SECONDS: "1"}  # the child's own bound: ceil(1 + size / 10 MB) + 2 s
    caller = subprocess.Popen(
        [sys.executable, "-c", script, str(loop)], stdout=subprocess.PIPE, text=True, env=env
    )
    child = int(caller.stdout.readline())
    time.sleep(0.5)  # the request is on its way or being read
    caller.kill()
    caller.wait()
    caller.stdout.close()
    assert ends_within(child, 10)


def test_a_forked_process_probes_with_a_child_of_its_own(fresh):
    first = probe(SOUND)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked process
        try:
            os.write(write, str(probe(SOUND)).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as reply:
        theirs = int(reply.read())
    assert theirs != first
    assert probe(SOUND) == first  # the parent's child was not disturbed


def test_a_probe_does_not_wait_for_another_thread(fresh, tmp_path, monkeypatch):
    if not hdf5_hangs():
        pytest.skip("this HDF5 reads the looping file and fails cleanly: no probe to wait for")
    loop = tmp_path / "loop.nc"
    shutil.copyfile(HDF5_LOOP, loop)
    probe(SOUND)
    monkeypatch.setenv(hdf5_probe.ENV_SECONDS, "4")
    refused: list[BaseException] = []

    def hang() -> None:
        try:
            hdf5_probe.probe_hdf5(loop)
        except InputFileError as err:
            refused.append(err)

    other = threading.Thread(target=hang)
    other.start()
    time.sleep(0.5)  # the kept child is looping on the other thread's file
    hdf5_probe.forget_passed()
    hdf5_probe.probe_hdf5(SOUND)  # in a child of its own: a new Python, not a 4 s wait
    assert other.is_alive()  # the other thread's child is still looping: this probe did not wait
    other.join()
    assert len(refused) == 1 and "did not finish reading it in 4 s" in str(refused[0])


def test_a_relative_path_is_read_where_the_caller_is_not_where_the_child_started(
    fresh, tmp_path, monkeypatch
):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shutil.copyfile(SOUND, tmp_path / "a" / "trace.nc")
    (tmp_path / "b" / "trace.nc").write_bytes(SOUND.read_bytes()[:5000])
    monkeypatch.chdir(tmp_path / "a")
    first = probe(Path("trace.nc"))
    monkeypatch.chdir(tmp_path / "b")  # a notebook's %cd
    with pytest.raises(
        InputFileError, match=r"trace\.nc: cannot be read as netCDF \(OSError: .*truncated file"
    ):
        hdf5_probe.probe_hdf5("trace.nc")
    assert hdf5_probe.worker_pid() == first


def test_a_changed_environment_gets_a_child_that_reads_it(fresh, tmp_path, monkeypatch):
    """HDF5 reads its environment (HDF5_USE_FILE_LOCKING=FALSE is the cure for NFS locks), and
    Python its PYTHONPATH: a child started before a change would not see it. Here an h5netcdf that
    cannot be imported shows the new child's environment, and its error is told, not lost."""
    first = probe(SOUND)
    monkeypatch.setenv(hdf5_probe.ENV_SECONDS, "9")  # the limit travels with each request: no new child
    assert probe(SOUND) == first
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "h5netcdf.py").write_text("raise ImportError('h5netcdf cannot be imported here')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    hdf5_probe.forget_passed()
    with pytest.raises(
        InputFileError, match=r"cannot be read as netCDF \(ImportError: h5netcdf cannot be imported"
    ):
        hdf5_probe.probe_hdf5(SOUND)
    assert not alive(first)
    monkeypatch.delenv("PYTHONPATH")
    assert probe(SOUND) not in (first,)
