"""README.md as a user reads it: every command and every Python block runs as written, from a folder
laid out like the repository's root (``examples/``, ``data/``, ``benchmarks/`` and ``.venv``
linked in, so that what they write lands in a temporary folder); the Python uses only public
names; the files it names exist; the Binder links point at the repository ``pyproject.toml``
names.

Commands are the lines of ```bash blocks (a trailing backslash continues a line) outside "Set up",
whose two commands CI itself runs (tests/test_packaging.py). A command that serves pages
(``dlexplore explore``) runs until it answers HTTP, then stops; one that drives Chromium is marked
``browser`` and runs with the browser tests.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
VENV = Path(sys.executable).parent.parent


def _body() -> str:
    """README without its "Set up" section."""
    before, _, rest = README.partition("## Set up")
    return before + "\n## " + rest.split("\n## ", 1)[1]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)\n\s*```", _body(), flags=re.S)


def _commands() -> list[str]:
    out = []
    for block in _blocks("bash"):
        block = re.sub(r"\\\n\s*", " ", block)
        out += [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return out


COMMANDS = _commands()
BROWSER = [c for c in COMMANDS if "bench_explorer_browser" in c]
SERVERS = [c for c in COMMANDS if " explore" in c and c not in BROWSER]
PLAIN = [c for c in COMMANDS if c not in BROWSER and c not in SERVERS]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder like the repository's root: its inputs linked in, its outputs its own."""
    for name in ("examples", "data", "benchmarks", "tests", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".venv").symlink_to(VENV)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        command,
        shell=True,
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        executable="/bin/bash",
    )


def test_the_readme_has_commands_of_every_kind():
    assert len(PLAIN) >= 20 and SERVERS and BROWSER
    assert any(c.startswith(".venv/bin/dlexplore whatif") for c in PLAIN)
    assert any("--tp 2" in c for c in PLAIN)


COLLECT = next(c for c in PLAIN if "dlexplore collect" in c)


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    """The README's traced run, made once: what its trace commands read as ``run/``."""
    folder = tmp_path_factory.mktemp("readme-run")
    (folder / ".venv").symlink_to(VENV)
    done = _run(COLLECT, folder)
    assert done.returncode == 0, f"$ {COLLECT}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return folder / "run"


def _plain_params() -> list:
    """The plain commands; those that read the traced run share a worker, so that it is made once."""
    run_group = pytest.mark.xdist_group("readme-traced-run")
    return [
        pytest.param(c, id=c[:70], marks=[run_group] if " run/" in c or c == COLLECT else []) for c in PLAIN
    ]


@pytest.mark.parametrize("command", _plain_params())
def test_readme_command_runs(command, workdir, request):
    if command == COLLECT:  # the fixture ran it, exactly, and checked its exit status: once is enough
        workdir = request.getfixturevalue("collected").parent
    else:
        if " run/" in command:
            (workdir / "run").symlink_to(request.getfixturevalue("collected"))
        done = _run(command, workdir)
        assert done.returncode == 0, f"$ {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for output in re.findall(r"(?:-o|--out)\s+(\S+)", command):
        assert (workdir / output).exists(), f"{command} did not write {output}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", SERVERS, ids=[c[:70] for c in SERVERS])
def test_readme_server_command_serves(command, workdir):
    port = _free_port()
    argv = [*shlex.split(command), "--no-browser", "--port", str(port), "--pool-size", "0"]
    process = subprocess.Popen(
        argv,
        cwd=workdir,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, f"$ {command}\n{process.stdout.read()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=120) as page:
                    assert page.status == 200 and b"dlexplore" in page.read()
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"{command} did not answer on port {port}"
                time.sleep(0.5)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.browser
@pytest.mark.parametrize("command", BROWSER, ids=[c[:70] for c in BROWSER])
def test_readme_browser_command_runs(command, workdir, chromium):
    done = _run(command, workdir, timeout=900)
    assert done.returncode == 0, f"$ {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "first_paint_ms" in done.stdout and "GPUs slider_ms" in done.stdout


@pytest.fixture
def chromium():
    found = os.environ.get("DLX_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(found, os.X_OK):
        pytest.skip("Chromium is missing: the browser tests install it (tests/browser)")


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_readme_python_block_runs(index, workdir):
    from dlexplore.catalog import GPUS

    block = _blocks("python")[index]
    namespace: dict = {}
    try:
        exec(compile(block, f"README.md python block {index + 1}", "exec"), namespace)
    finally:
        if "L40S" in GPUS:
            GPUS.remove("L40S")


def test_the_tour_says_what_it_does(workdir):
    # the values the tour's comments promise
    import dlexplore as dlx

    tour = next(b for b in _blocks("python") if "dlx.predict(" in b)
    namespace: dict = {}
    try:
        exec(compile(tour, "README.md tour", "exec"), namespace)
        assert namespace["ds"].throughput.dims == ("algorithm", "gpus")
        assert namespace["ds"].attrs["source"].startswith("predicted: dlexplore")
        assert namespace["mine"].throughput.values.tolist() == [219.0, 422.0, 852.0, 1734.0]
        ring = namespace["ring"]
        assert (ring.dlx.kind, ring.dlx.units["throughput"]) == ("prediction", "samples/s")
        parts = ring.dlx.breakdown()
        total = sum(parts[name] for name in ("compute_only", "comm_overlapped", "comm_exposed", "io_exposed"))
        assert abs(total - ring.step_time).max() < 1e-12
        assert dlx.catalog.gpu("L40S").memory_bytes == 48 * 2**30
    finally:
        if "L40S" in dlx.catalog.GPUS:
            dlx.catalog.GPUS.remove("L40S")


def test_the_readme_uses_public_names_and_real_files():
    code = "\n".join(_blocks("python") + _blocks("bash"))
    private = re.findall(r"\b(?:dlexplore|dlx)(?:\.\w+)*\._\w+", code)
    assert not private, f"private names in README code: {private}"
    # a path starts the word: tests/data/x is named as itself, not also as data/x
    named = re.findall(r"(?<![\w/.-])((?:examples|data|tests|benchmarks|docs|notebooks)/[\w./-]+)", README)
    for path in named:
        assert (ROOT / path.rstrip(".")).exists(), f"README names {path}, which does not exist"
    # a command with options belongs in a bash block, where it is run
    inline = re.findall(r"`((?:\.venv/bin/)?dlexplore [^`]*--[^`]*)`", README)
    assert not inline, f"commands in the text that no test runs: {inline}"


def test_binder_links_point_at_the_repository_in_pyproject():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    url = project["urls"]["Repository"]
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", url)
    assert match, url
    links = re.findall(r"https://mybinder\.org/v2/gh/([\w.-]+)/([\w.-]+)/HEAD\?(\w+)=([\w/.-]+)", README)
    assert len(links) >= 3, "the badge, JupyterLab and the dashboard"
    for owner, repo, _, path in links:
        assert (owner, repo) == match.groups(), f"Binder link to {owner}/{repo}, pyproject says {url}"
        notebook = path.removeprefix("voila/render/")
        assert (ROOT / notebook).is_file(), notebook
    assert "OWNER" not in README and "REPO/" not in README
