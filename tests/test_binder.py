"""binder/ agrees with pyproject.toml: Binder installs every requirement at a version the project
accepts, a Python the project supports, and then the project itself."""

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _pins() -> dict[str, str]:
    pins = {}
    for number, line in enumerate((BINDER / "requirements.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"binder/requirements.txt line {number}: pin an exact version, got {line!r}"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _runtime_requirements() -> list[Requirement]:
    project = _project()
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for r in project["optional-dependencies"]["explore"]]
    # extras of a requirement (h5netcdf[h5py]) are packages too
    extra_packages = [Requirement(extra) for r in reqs for extra in sorted(r.extras)]
    return reqs + extra_packages


@pytest.mark.parametrize("requirement", _runtime_requirements(), ids=str)
def test_binder_pins_every_requirement_at_an_accepted_version(requirement):
    pins = _pins()
    name = canonicalize_name(requirement.name)
    assert name in pins, f"binder/requirements.txt lacks {requirement.name}"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"binder pins {name}=={pins[name]}, pyproject.toml asks for {requirement}"
    )


def test_binder_pins_nothing_the_project_does_not_need():
    needed = {canonicalize_name(r.name) for r in _runtime_requirements()}
    assert set(_pins()) <= needed


def test_binder_python_is_supported():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    match = re.fullmatch(r"python-(\d+\.\d+)", runtime)
    assert match, runtime
    assert SpecifierSet(_project()["requires-python"]).contains(match.group(1) + ".0")


def test_binder_installs_the_project_and_readme_links_exist():
    post_build = BINDER / "postBuild"
    assert post_build.stat().st_mode & 0o111, "postBuild must be executable"
    assert re.search(r"pip install .*--no-deps \.$", post_build.read_text(), flags=re.M)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in re.findall(r"(?:labpath|voila/render)[=/](notebooks/[\w.-]+\.ipynb)", readme):
        assert (ROOT / path).is_file(), path


def test_binder_culls_idle_kernels():
    # A classroom on one Binder server: read the file the way jupyter_server reads its config.
    import json

    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager
    from traitlets.config import Config

    config = Config(json.loads((BINDER / "jupyter-kernel-culling.json").read_text(encoding="utf-8")))
    manager = MappingKernelManager(config=config)
    assert (manager.cull_idle_timeout, manager.cull_interval, manager.cull_connected) == (1200, 60, True)
    # postBuild puts it where jupyter_server looks: <prefix>/etc/jupyter/jupyter_server_config.d
    post_build = (BINDER / "postBuild").read_text(encoding="utf-8")
    assert "etc/jupyter/jupyter_server_config.d" in post_build
    assert re.search(r"^cp binder/jupyter-kernel-culling\.json \"\$config/", post_build, flags=re.M)
