"""The README's Python tour runs as written (with the two user files it names made here)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def user_files(tmp_path, monkeypatch):
    (tmp_path / "my-runs.csv").write_text(
        "workload,gpu,network,gpus,batch_size,precision,throughput\n"
        "resnet50,V100-16GB,100GbE,1,64,fp32,370\n"
        "resnet50,V100-16GB,100GbE,8,64,fp32,2800\n"
    )
    (tmp_path / "our-cluster.csv").write_text(
        "name,kind,bandwidth_gbs,latency_s,source\n"
        "our-fabric,network,23.5,1.5e-6,measured with osu_bw\n"
    )
    monkeypatch.chdir(tmp_path)


def test_readme_python_tour_runs(user_files):
    from dlexplore.catalog import NETWORKS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```python\n(.*?)\n```", text, flags=re.S)
    namespace: dict = {}
    try:
        exec(compile(block, "README.md", "exec"), namespace)
        assert namespace["ds"].throughput.dims == ("algorithm", "gpus")
        assert namespace["mine"].throughput.values.tolist() == [370.0, 2800.0]
        assert NETWORKS.get("our-fabric").bandwidth_gbs == 23.5
    finally:
        if "our-fabric" in NETWORKS:
            NETWORKS.remove("our-fabric")
