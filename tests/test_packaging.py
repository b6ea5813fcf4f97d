"""The project's own set-up: README commands, CI script, and a wheel that carries data/."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", setup, flags=re.S)


def test_readme_gives_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2, commands
    explore, test = commands
    assert "pip install" in explore and ".venv/bin/dlexplore" in explore
    assert "pip install -e '.[test]'" in test and "pytest" in test


def test_ci_runs_the_readme_test_command():
    ci_lines = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))
    ]
    assert ci_lines == [_readme_commands()[1]]


@pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")
def test_wheel_carries_the_data_and_finds_it(tmp_path):
    # Build a real wheel with hatchling (no network: the test extra installs hatchling) and use it
    # from a plain folder, so that only the wheel's files can be found.
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("dlexplore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dlexplore/data/catalog/gpus.csv" in names
    assert any(n.startswith("dlexplore/data/measured/") and n.endswith(".csv") for n in names)
    # the sample traces made by `dlexplore collect`
    assert "dlexplore/data/traces/gloo-mlp-2rank/rank0.json.gz" in names
    # the dashboard `dlexplore explore` serves, and its offline Voila template
    assert "dlexplore/dashboard/explorer.ipynb" in names
    template = "dlexplore/dashboard/jupyter/voila/templates/dlexplore/"
    assert {template + "conf.json", template + "index.html.j2"} <= set(names)
    # the browser's JavaScript, shipped as .js files beside dlexplore/plots/js/__init__.py
    assert {f"dlexplore/plots/js/{n}.js" for n in ("timeline", "report_gpus", "report_trace_step")} <= set(
        names
    )
    # the Jupyter server extension that serves BokehJS to notebooks, and the file that enables it
    assert "dlexplore_jupyter/__init__.py" in names
    assert any(n.endswith(".data/data/etc/jupyter/jupyter_server_config.d/dlexplore.json") for n in names)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    env = dict(os.environ, PYTHONPATH=str(target))
    code = (
        "import dlexplore, dlexplore._data as d;"
        f"assert str(d.data_dir()).startswith({str(target)!r}), d.data_dir();"
        "import dlexplore.serve as s; assert s.DASHBOARD.is_file(), s.DASHBOARD;"
        "from dlexplore.plots.timeline import TIMELINE_JS; assert 'function upper' in TIMELINE_JS;"
        "print(dlexplore.catalog.gpu('P100').name, len(dlexplore.measured.available()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, check=True, capture_output=True, text=True
    )
    name, count = out.stdout.split()
    assert name == "P100" and int(count) >= 5
