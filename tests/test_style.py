"""ruff keeps the code base clean and formatted, and mypy the public API typed; run as part of the
suite so that CI enforces both."""

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["dlexplore", "dlexplore_jupyter", "tests", "benchmarks", "docs"]


def _ruff() -> str:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed: it comes with the test extra")
    return ruff


def test_ruff_clean():
    result = subprocess.run([_ruff(), "check", *CHECKED], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_formatted():
    # The test extra pins ruff's minor version: its formatter's style changes between them.
    result = subprocess.run(
        [_ruff(), "format", "--check", *CHECKED], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, "run `ruff format`:\n" + result.stdout + result.stderr


# The public API: dlexplore/__init__.py and what its exports come from (its lazy _LAZY table names
# the subpackages; each subpackage's __init__ re-exports from the modules below). mypy checks these
# and reads whatever they import for its types only (follow_imports = "silent" in pyproject.toml).
PUBLIC_MODULES = [
    "dlexplore/__init__.py",
    "dlexplore/_data.py",
    "dlexplore/_version.py",
    "dlexplore/accessor.py",
    "dlexplore/advisor.py",
    "dlexplore/errors.py",
    "dlexplore/report.py",
    "dlexplore/store.py",
    "dlexplore/catalog/__init__.py",
    "dlexplore/catalog/_types.py",
    "dlexplore/catalog/defaults.py",
    "dlexplore/catalog/gemm.py",
    "dlexplore/catalog/hardware.py",
    "dlexplore/catalog/user.py",
    "dlexplore/catalog/workloads.py",
    "dlexplore/fit/__init__.py",
    "dlexplore/fit/alpha_beta.py",
    "dlexplore/fit/calibrate.py",
    "dlexplore/fit/calibration_file.py",
    "dlexplore/fit/compare.py",
    "dlexplore/fit/extrap.py",
    "dlexplore/fit/hybrid.py",
    "dlexplore/fit/noise_scale.py",
    "dlexplore/fit/trace_fit.py",
    "dlexplore/fit/trace_point.py",
    "dlexplore/fit/trace_setup.py",
    "dlexplore/lab/__init__.py",
    "dlexplore/lab/core.py",
    "dlexplore/measured/__init__.py",
    "dlexplore/measured/_columns.py",
    "dlexplore/measured/_reader.py",
    "dlexplore/model/__init__.py",
    "dlexplore/model/comm.py",
    "dlexplore/model/compute.py",
    "dlexplore/model/convergence.py",
    "dlexplore/model/dataio.py",
    "dlexplore/model/energy.py",
    "dlexplore/model/parallel.py",
    "dlexplore/model/step.py",
    "dlexplore/model/stragglers.py",
    "dlexplore/model/strategy.py",
    "dlexplore/model/time_to_accuracy.py",
    "dlexplore/model/workflow.py",
    "dlexplore/plots/__init__.py",
    "dlexplore/plots/_advice.py",
    "dlexplore/plots/_columns.py",
    "dlexplore/plots/calibration.py",
    "dlexplore/plots/figures.py",
    "dlexplore/plots/notebook.py",
    "dlexplore/plots/operators.py",
    "dlexplore/sim/__init__.py",
    "dlexplore/sim/graph.py",
    "dlexplore/sim/network.py",
    "dlexplore/sim/replay.py",
    "dlexplore/sim/report.py",
    "dlexplore/sim/whatif.py",
    "dlexplore/traces/__init__.py",
    "dlexplore/traces/cache.py",
    "dlexplore/traces/detect.py",
    "dlexplore/traces/loading.py",
    "dlexplore/traces/netcdf.py",
    "dlexplore/traces/registry.py",
    "dlexplore/traces/schema.py",
    "dlexplore/widgets/__init__.py",
    "dlexplore/widgets/advisor.py",
    "dlexplore/widgets/explorer.py",
    "dlexplore/widgets/traceview.py",
]


def _module_file(dotted: str) -> Path:
    path = ROOT.joinpath(*dotted.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    # the statements run on import, and those under `if TYPE_CHECKING:` (advisor's AdvisorWidget)
    return [s for node in tree.body for s in (node.body if isinstance(node, ast.If) else [node])]


def _sources_of_exports() -> set[str]:
    """Every module that dlexplore/__init__.py's exports come from, read from the code: the modules
    it imports, those its _LAZY table names, and the modules their __init__ files import from."""
    init = ROOT / "dlexplore" / "__init__.py"
    tree = ast.parse(init.read_text())
    modules = {"dlexplore"}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            modules.add(f"dlexplore.{node.module}" if node.module else "dlexplore")
            if not node.module:
                modules.update(f"dlexplore.{alias.name}" for alias in node.names)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_LAZY" for t in node.targets):
            modules.update(f"dlexplore.{value.elts[0].value}" for value in node.value.values)
    found = set()
    for module in modules:
        path = _module_file(module)
        found.add(path)
        if path.name != "__init__.py" and module != "dlexplore.advisor":
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _module_level(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(_module_file(f"{base}.{node.module}" if node.module else base))
    return {str(p.relative_to(ROOT)) for p in found}


def test_public_modules_cover_every_export():
    # A new export (or a subpackage re-exporting from a new module) joins the mypy check below.
    missing = sorted(_sources_of_exports() - set(PUBLIC_MODULES))
    assert not missing, f"add to PUBLIC_MODULES: {missing}"


def test_mypy_clean_on_the_public_api():
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed: it comes with the test extra")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *PUBLIC_MODULES], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, "mypy on the public API:\n" + result.stdout + result.stderr
