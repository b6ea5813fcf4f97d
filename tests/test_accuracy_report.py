"""docs/accuracy.md is what docs/make_accuracy.py writes today (the date line aside).

The script is run the way a maintainer runs it, ``python docs/make_accuracy.py --check``, on a
copy of the committed report whose date line is changed, so the test also shows that the date is
the only line the check ignores. It recomputes the fidelity benchmark on every bundled table
(about 10-20 s on two cores); the LLM rows and the peer come from the committed
benchmarks/results/fidelity-external.csv.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dlexplore

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "make_accuracy.py"
REPORT = ROOT / "docs" / "accuracy.md"


def _module():
    if "make_accuracy" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_accuracy", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["make_accuracy"] = module
        spec.loader.exec_module(module)
    return sys.modules["make_accuracy"]


def test_committed_report_is_up_to_date(tmp_path):
    text = REPORT.read_text(encoding="utf-8")
    copy = tmp_path / "accuracy.md"
    copy.write_text(re.sub(r"(?m)^_Generated on .*$", "_Generated on 1999-12-31._", text), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "-o", str(copy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "is up to date" in result.stdout


def test_report_header_and_coverage():
    text = REPORT.read_text(encoding="utf-8")
    assert "python docs/make_accuracy.py" in text
    assert f"dlexplore {dlexplore.__version__}" in text
    assert re.search(r"(?m)^_Generated on \d{4}-\d{2}-\d{2}\._$", text)
    for name in dlexplore.measured.available():
        assert f"## `{name}`" in text
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{name}`" in summary for name in dlexplore.measured.available())
    # every section that misses a target says why
    for section in text.split("\n## `")[1:]:
        if "**no**" in section:
            assert "### What the model lacks here" in section, section.splitlines()[0]


def test_check_reports_a_changed_number(tmp_path):
    module = _module()
    text = REPORT.read_text(encoding="utf-8")
    copy = tmp_path / "accuracy.md"
    copy.write_text(text, encoding="utf-8")
    assert module.check(copy, text) == []
    changed = text.replace("| `tf-benchmarks-2017-dgx1` |", "| `tf-benchmarks-2017-DGX1` |", 1)
    assert changed != text
    diff = module.check(copy, changed)
    assert any(line.startswith("+| `tf-benchmarks-2017-DGX1` |") for line in diff)
    redated = re.sub(r"(?m)^_Generated on .*$", "_Generated on 2000-01-01._", text)
    assert module.check(copy, redated) == []


def test_check_tolerates_the_last_digit_only(tmp_path):
    # A standard error printed as 0.058 on one machine and 0.059 on another (BLAS, CPU) is the
    # same report; 0.061, or a changed word, is not.
    module = _module()
    copy = tmp_path / "accuracy.md"
    line = "| `compute_efficiency` | inception_v3, P100, fp32 | 0.461 ± 0.058 | 0.500 | 3 |"
    copy.write_text(line + "\n", encoding="utf-8")
    assert module.check(copy, line.replace("0.058", "0.059") + "\n") == []
    assert module.check(copy, line.replace("0.461", "0.460") + "\n") == []
    assert module.check(copy, line.replace("0.058", "0.061") + "\n") != []
    assert module.check(copy, line.replace("P100", "V100") + "\n") != []
    assert module.check(copy, line.replace("| 3 |", "| 4 |") + "\n") != []


def test_check_of_a_missing_file_fails_at_once(tmp_path, capsys):
    module = _module()
    assert module.main(["--check", "-o", str(tmp_path / "none.md")]) == 1
    assert "missing" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "stderr", "text"),
    [
        (0.60438, 0.00416, "0.6044 ± 0.0042"),
        (13.5277, 8.7559, "13.5 ± 8.8"),
        (0.81960, 0.26778, "0.82 ± 0.27"),
        (166.4, 132.0, "170 ± 130"),  # the value to the precision of its error
        (12345.0, 2100.0, "12300 ± 2100"),
        (1409.2, 0.94, "1409.20 ± 0.94"),
    ],
)
def test_value_with_standard_error(value, stderr, text):
    assert _module()._with_error(value, stderr) == text


def test_smallest_configurations_are_what_calibration_fits():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity
    import pandas as pd

    # four GPU counts: the smallest three are fitted, the largest held out
    frame = pd.DataFrame({"gpus": [1, 2, 4, 8, 1, 8], "algorithm": ["none"] + ["ring"] * 5})
    assert fidelity.fit_mask(frame).tolist() == [True, True, True, False, True, False]
    # two counts: the smaller; one count: the ring rows
    assert fidelity.fit_mask(frame[frame.gpus.isin([1, 8])]).tolist() == [True, False, True, False]
    one = pd.DataFrame({"gpus": [8, 8], "algorithm": ["ring", "nvls"]})
    assert fidelity.fit_mask(one).tolist() == [True, False]


def test_each_link_and_setup_is_fitted_on_its_own_smallest_configuration():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity
    import pandas as pd

    # Horovod's tables: only the single-GPU rows are the smallest GPU count; each setup at 16 GPUs
    # (4 per node: the network) is fitted on its smallest model, Inception-v3 (27M parameters),
    # and predicts ResNet-101 and VGG-16
    setups = ["1 GPU"] * 3 + ["PS"] * 3 + ["Horovod TCP"] * 3
    frame = pd.DataFrame(
        {
            "workload": ["inception_v3", "resnet101", "vgg16"] * 3,
            "gpus": [1] * 3 + [16] * 6,
            "gpus_per_node": [1] * 3 + [4] * 6,
            "algorithm": ["none"] * 3 + ["parameter_server"] * 3 + ["ring"] * 3,
            "setup": setups,
            "transport": [""] * 3 + ["tcp"] * 6,
            "framework": ["tensorflow"] * 6 + ["horovod"] * 3,
            "precision": ["fp32"] * 9,
        }
    )
    fit = fidelity.fit_mask(frame)
    assert fit.tolist() == [True] * 3 + [True, False, False] * 2
    # what each stage fits: the GEMM plateau on one GPU, then the overheads the 16-GPU rows add
    assert fidelity._calibration_params(frame, fit & (frame.gpus == 1).to_numpy(), "training") == (
        "compute_efficiency",
    )
    assert fidelity._calibration_params(frame, fit & (frame.gpus == 16).to_numpy(), "training") == (
        "compute_efficiency",
        "negotiation_time",
        "tcp_efficiency",
        "server_bandwidth",
    )
    # DeepBench: 2-8 GPUs inside a node, 16 across two nodes at three message sizes: the network
    # is fitted on the smallest message, the two larger ones held out; a link seen at one message
    # size gets its bandwidth only
    bench = pd.DataFrame(
        {
            "gpus": [2, 4, 8, 16] * 3,
            "gpus_per_node": [2, 4, 8, 8] * 3,
            "bytes": [1.6e7] * 4 + [6.7e7] * 4 + [2.6e8] * 4,
            "algorithm": ["unknown"] * 12,
            "setup": ["DeepBench"] * 12,
        }
    )
    fit = fidelity.fit_mask(bench)
    assert fit.tolist() == [True, True, True, True] + [True, True, True, False] * 2
    assert fidelity._calibration_params(bench, fit, "communication") == (
        "intra_bandwidth",
        "intra_latency",
        "bandwidth",
    )
    # a setup seen in one configuration only is not fitted: nothing would be left to predict
    goyal = pd.DataFrame(
        {"gpus": [8, 256], "gpus_per_node": [8, 8], "algorithm": ["hierarchical"] * 2, "setup": ["a", "b"]}
    )
    assert fidelity.fit_mask(goyal).tolist() == [True, False]
