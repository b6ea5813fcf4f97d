"""The reader registry: built-in formats through it, a third-party package's reader found through the
``dlexplore.readers`` entry point (really built and installed), and readers added in a session.

The plug-in is the worked example of CONTRIBUTING.md (``examples/reader-plugin``): installing it here
keeps that document true.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dlexplore
from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.traces import Reader, Trace, make_events, readers, register_reader, unregister_reader

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "reader-plugin"
SAMPLE = ROOT / "data" / "traces" / "gloo-mlp-2rank"
NCCL_TESTS = ROOT / "tests" / "data" / "traces" / "nccl-tests" / "together-h100-all_reduce_ring.out"

STEPLOG = """\
# steplog 1 rank={rank}
step,name,category,start_s,duration_s,bytes
0,forward,compute,0.000,0.012,
0,backward,compute,0.012,0.020,
0,allreduce,communication,0.030,0.008,4194304
1,forward,compute,0.050,0.011,
1,backward,compute,0.061,0.021,
1,allreduce,communication,0.080,{last},4194304
"""


def _pip_install(source: Path, target: Path) -> None:
    """A real ``pip install`` (the package's own build backend, its entry points written into its
    dist-info), into a folder put on PYTHONPATH by the child processes below."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _run(code: str, site: Path, cwd: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=env, cwd=cwd, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example plug-in and a broken one (its module fails on import), installed by pip."""
    target = tmp_path_factory.mktemp("site")
    _pip_install(PLUGIN, target)
    broken = tmp_path_factory.mktemp("broken-plugin")
    (broken / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [build-system]
        requires = ["hatchling>=1.18"]
        build-backend = "hatchling.build"
        [project]
        name = "dlexplore-broken-reader"
        version = "0.1.0"
        [project.entry-points."dlexplore.readers"]
        broken = "dlexplore_broken:Reader"
        [tool.hatch.build.targets.wheel]
        packages = ["dlexplore_broken"]
        """)
    )
    (broken / "dlexplore_broken").mkdir()
    (broken / "dlexplore_broken" / "__init__.py").write_text("raise ImportError('needs libfoo 2')\n")
    _pip_install(broken, target)
    return target


@pytest.fixture()
def logs(tmp_path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "rank0.steplog").write_text(STEPLOG.format(rank=0, last="0.008"))
    # a renamed log: the reader's sniff reads the first bytes, not the name
    (folder / "rank1.dat").write_text(STEPLOG.format(rank=1, last="0.018"))
    return folder


def test_an_installed_plugin_reads_its_files_through_dlexplore_load(site, logs):
    out = _run(
        """
        import json, sys, warnings
        import dlexplore
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = dlexplore.load("run")
            same = dlexplore.load_trace("run/rank0.steplog", format="steplog")
        b = trace.breakdown()
        reader = dlexplore.traces.readers()["steplog"]
        print(json.dumps({
            "type": type(trace).__name__, "format": trace.format, "ranks": trace.ranks.tolist(),
            "events": len(trace.events), "comm": b.time_comm.mean("step").values.tolist(),
            "bytes": float(trace.events["bytes"].max()), "one": len(same.events),
            "distribution": reader.distribution, "warnings": [str(w.message) for w in caught],
            "builtin": dlexplore.load(sys.argv[1]).format,
        }))
        """,
        site,
        logs.parent,
        str(SAMPLE),
    )
    assert out["type"] == "Trace" and out["format"] == "steplog"
    assert out["ranks"] == [0, 1] and out["events"] == 12 and out["one"] == 6
    # rank 0: two allreduces of 8 ms; rank 1: 8 ms and 18 ms (hand-derived from STEPLOG)
    assert out["comm"] == pytest.approx([0.008, 0.013])
    assert out["bytes"] == 4194304
    assert out["distribution"] == "dlexplore-steplog"
    # the broken plug-in is left out with a warning naming it and its package; the rest works
    assert any("'broken' of dlexplore-broken-reader" in w and "libfoo" in w for w in out["warnings"])
    assert out["builtin"] == "pytorch"  # a plug-in never takes a built-in format's files


def test_a_file_nothing_claims_lists_every_registered_reader(site, tmp_path):
    (tmp_path / "notes.dat").write_text("just some words\n")
    out = _run(
        """
        import json, warnings
        import dlexplore
        warnings.simplefilter("ignore")
        try:
            dlexplore.load("notes.dat")
        except dlexplore.DlexploreError as err:
            print(json.dumps({"error": str(err)}))
        """,
        site,
        tmp_path,
    )
    assert out["error"].startswith("notes.dat: unknown trace format")
    assert "registered readers: pytorch, horovod, nsys, otf2" in out["error"]
    assert "steplog (from dlexplore-steplog)" in out["error"]


def test_a_plugins_bad_input_is_a_dlexplore_error_naming_the_file_and_line(site, tmp_path):
    (tmp_path / "bad.steplog").write_text(STEPLOG.format(rank=0, last="soon"))
    out = _run(
        """
        import json, dlexplore, warnings
        warnings.simplefilter("ignore")
        try:
            dlexplore.load("bad.steplog")
        except dlexplore.errors.InputFileError as err:
            print(json.dumps({"error": str(err)}))
        """,
        site,
        tmp_path,
    )
    assert out["error"].startswith("bad.steplog, line 8: expected numbers")


# -- readers added in a session ----------------------------------------------------------------------


class _Lines(Reader):
    """A table format: lines of ``name value``; gives a dict (kind "measured")."""

    description = "name-value lines"
    kind = "measured"

    def sniff(self, path: Path) -> float:
        return 0.7 if path.read_bytes().startswith(b"#lines") else 0.0

    def read(self, paths, **options):
        rows = paths[0].read_text().splitlines()[1:]
        return {k: float(v) * options.get("scale", 1) for k, v in (row.split() for row in rows)}


class _Crashing(Reader):
    kind = "trace"

    def sniff(self, path: Path) -> bool:
        raise RuntimeError("sniff bug")

    def read(self, paths, **options):
        return {"not": "a trace"}


@pytest.fixture()
def lines_reader():
    reader = register_reader(_Lines, name="lines")
    yield reader
    unregister_reader("lines")


def test_a_session_reader_is_detected_and_takes_options(lines_reader, tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("#lines\nalpha 2\nbeta 3\n")
    assert dlexplore.load(path) == {"alpha": 2.0, "beta": 3.0}
    assert dlexplore.load(path, format="lines", scale=10) == {"alpha": 20.0, "beta": 30.0}
    with pytest.raises(
        DlexploreError, match=r"a.txt: this is lines output, a measured table rather than a trace"
    ):
        dlexplore.load_trace(path)
    assert readers()["lines"] is lines_reader and lines_reader.distribution == "this session"


def test_built_in_formats_cannot_be_taken_and_names_are_unique(lines_reader):
    with pytest.raises(DlexploreError, match="'pytorch' is a built-in format"):
        register_reader(_Lines, name="pytorch")
    with pytest.raises(DlexploreError, match="'lines' is registered already by this session"):
        register_reader(_Lines, name="lines")
    with pytest.raises(DlexploreError, match="kind 'table'; expected one of"):
        register_reader(type("T", (_Lines,), {"kind": "table"}), name="t")


def test_a_crashing_sniff_warns_and_a_wrong_result_is_refused(tmp_path):
    register_reader(_Crashing, name="crashing")
    try:
        path = tmp_path / "x.bin"
        path.write_bytes(b"\x00\x01 nothing known")
        with pytest.warns(RuntimeWarning, match="reader 'crashing' of this session failed to sniff"):
            with pytest.raises(DlexploreError, match="unknown trace format.*crashing"):
                dlexplore.load(path)
        with pytest.raises(DlexploreError, match="gave a dict, not a dlexplore Trace"):
            dlexplore.load_trace(path, format="crashing")
    finally:
        unregister_reader("crashing")


class _CrashingProfile(Reader):
    kind = "profile"

    def read(self, paths, **options):
        raise RuntimeError("read bug")


def test_a_crashing_profile_reader_is_named_with_the_folder_it_was_given(tmp_path):
    # profile readers get the paths as given (a folder, as TAU's): the error names that folder,
    # not its first character as it once did
    (tmp_path / "profile.0.0.0").write_text("1 templated_functions\n")
    register_reader(_CrashingProfile, name="crashing-profile")
    try:
        with pytest.raises(DlexploreError) as caught:
            dlexplore.load(str(tmp_path), format="crashing-profile")
    finally:
        unregister_reader("crashing-profile")
    assert str(caught.value).startswith(
        f"{tmp_path}: the reader 'crashing-profile' of this session failed: RuntimeError: read bug"
    )


def test_unknown_format_names_list_the_trace_readers():
    with pytest.raises(
        DlexploreError, match=r"unknown trace format 'nope'; expected one of \['horovod', 'netcdf'"
    ):
        dlexplore.load_trace(SAMPLE, format="nope")


def test_every_built_in_format_is_registered_with_its_kind():
    kinds = {name: r.kind for name, r in readers().items() if name in dlexplore.traces.FORMATS}
    assert set(kinds) == set(dlexplore.traces.FORMATS)
    assert {n for n, k in kinds.items() if k == "measured"} == set(dlexplore.traces.MEASURED_FORMATS)
    assert {n for n, k in kinds.items() if k == "profile"} == {"tensorboard", "tau", "nccl-log"}


def test_built_in_readers_sniff_their_own_files():
    sniffed = {name for name, r in readers().items() if r.sniff(SAMPLE / "rank0.json.gz")}
    assert sniffed == {"pytorch"}
    assert readers()["nccl-tests"].sniff(NCCL_TESTS) and not readers()["pytorch"].sniff(NCCL_TESTS)


def test_make_events_and_trace_are_what_a_plugin_needs():
    # the names CONTRIBUTING.md's reader imports are public and make a Trace load_trace accepts
    events = make_events({"rank": [0], "stream": ["s"], "name": ["f"], "category": ["compute"],
                          "start": [0.0], "duration": [1.0]})  # fmt: skip
    assert Trace(events, format="steplog").source == "measured: steplog trace "
    with pytest.raises(InputFileError):
        raise InputFileError("x", "y")


def test_contributing_quotes_the_example_plugin_verbatim():
    # CONTRIBUTING.md's worked example is the package installed above: its toml and Python blocks
    # must be excerpts of the example's files, so the document cannot drift from what is tested.
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("### In a package of your own")[1].split("### Inside dlexplore")[0]
    blocks = re.findall(r"```(toml|python)\n(.*?)```", section, flags=re.S)
    sources = {
        "toml": (PLUGIN / "pyproject.toml").read_text(),
        "python": (PLUGIN / "dlexplore_steplog" / "__init__.py").read_text(),
    }
    quoted = [body for lang, body in blocks if "class StepLogReader" in body or lang == "toml"]
    assert len(quoted) == 2
    for lang, body in blocks:
        if body in quoted:
            assert body in sources[lang], f"CONTRIBUTING.md's {lang} block differs from the example"
