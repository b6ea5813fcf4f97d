"""Users' catalog files: loading, overriding bundled entries, errors, and DLEXPLORE_CATALOG."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dlexplore
from dlexplore.catalog import (
    GPUS,
    NETWORKS,
    STORAGE,
    WORKLOADS,
    gpu,
    load_file,
    network,
    storage,
    workload,
)
from dlexplore.catalog.user import ENV_VAR, load_env
from dlexplore.errors import DlexploreError, InputFileError

ROOT = Path(dlexplore.__file__).resolve().parents[1]

GPU_HEADER = (
    "name,vendor,fp32_tflops,tf32_tflops,fp16_tflops,bf16_tflops,memory_gib,memory_bandwidth_gbs,tdp_w,idle_w"
)
# NVIDIA L40S data sheet (2023): 91.6 fp32, 183 TF32, 362 fp16/bf16 dense, 48 GB, 864 GB/s, 350 W.
L40S_ROW = "L40S,NVIDIA,91.6,183,362,362,48,864,350,35"
NET_HEADER = "name,kind,bandwidth_gbs,latency_s"
STORAGE_HEADER = "name,scope,bandwidth_gbs,client_bandwidth_gbs,latency_s"


@contextlib.contextmanager
def restored_catalogs():
    """Snapshot the four registries and put them back afterwards, whatever the block added,
    replaced or removed. (Registry has no public snapshot, hence its two private dicts.)"""
    registries = (GPUS, NETWORKS, STORAGE, WORKLOADS)
    saved = [(dict(r._entries), dict(r._lookup)) for r in registries]
    try:
        yield
    finally:
        for registry, (entries, lookup) in zip(registries, saved, strict=True):
            registry._entries.clear()
            registry._entries.update(entries)
            registry._lookup.clear()
            registry._lookup.update(lookup)


@pytest.fixture(autouse=True)
def catalogs():
    with restored_catalogs():
        yield


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# Loading


def test_load_gpu_csv_with_defaults(tmp_path):
    path = write(tmp_path, "site-gpus.csv", f"# our cluster\n{GPU_HEADER}\n{L40S_ROW}\n")
    assert load_file(path) == ["L40S"]
    g = gpu("l40s")
    assert g.memory_bytes == 48 * 2**30
    assert (g.fp32_tflops, g.tf32_tflops, g.fp16_tflops) == (91.6, 183, 362)
    assert g.source == f"user file {path}"  # no source column
    assert g.aliases == ()  # no aliases column
    assert g.peak_flops("bf16") == 362e12


def test_load_network_and_storage_csv(tmp_path):
    nets = write(
        tmp_path, "nets.csv",
        f"{NET_HEADER},aliases,source\nRoCE-200,network,25,2.5e-6,rocev2; roce,our ping-pong 2024\n",
    )  # fmt: skip
    tiers = write(tmp_path, "tiers.csv", f"{STORAGE_HEADER}\nweka,shared,400,8,2e-4\n")
    assert load_file(nets) == ["RoCE-200"]
    assert load_file(tiers) == ["weka"]
    assert network("roce") == network("RoCE-200")
    assert network("rocev2").latency_s == 2.5e-6 and network("rocev2").source == "our ping-pong 2024"
    assert (storage("WEKA").scope, storage("weka").client_bandwidth_gbs) == ("shared", 8)


@pytest.mark.parametrize("kind", ["networks", "network", "links"])
def test_explicit_kind(tmp_path, kind):
    # With the kind given, the file need not look like one (no suffix, no inference needed).
    path = write(tmp_path, "fabric", f"{NET_HEADER}\nfabric-x,network,10,1e-6\n")
    assert load_file(path, kind=kind) == ["fabric-x"]
    assert network("fabric-x").bandwidth_gbs == 10


def test_explicit_kind_must_match_the_columns(tmp_path):
    path = write(tmp_path, "nets.csv", f"{NET_HEADER}\nfabric-x,network,10,1e-6\n")
    with pytest.raises(InputFileError, match="unknown column 'kind' for gpus") as info:
        load_file(path, kind="gpus")
    assert info.value.line == 1


def test_user_entry_overrides_bundled_and_is_restored(tmp_path):
    bundled, n = gpu("V100-16GB"), len(GPUS)
    path = write(
        tmp_path, "v100.csv",
        f"{GPU_HEADER},source\nv100_16gb,NVIDIA,14,,112,,16,900,250,35,our clocks 2024\n",
    )  # fmt: skip
    with restored_catalogs():
        assert load_file(path) == ["v100_16gb"]
        assert gpu("V100-16GB").fp32_tflops == 14
        assert gpu("V100-16GB").source == "our clocks 2024"
        assert len(GPUS) == n  # replaced, not added
        # an override that names no aliases keeps the bundled ones
        assert gpu("V100-SXM2-16GB").fp32_tflops == 14
    assert gpu("V100-16GB") is bundled
    assert gpu("V100-SXM2-16GB") is bundled  # the bundled aliases are back too


def test_overriding_a_network_by_alias_name(tmp_path):
    path = write(tmp_path, "eth.csv", f"{NET_HEADER}\n25GbE,network,3.125,50e-6\n")
    load_file(path)
    assert network("25gbe").latency_s == 50e-6
    assert network("25GbE").source == f"user file {path}"


def test_later_file_overrides_earlier(tmp_path):
    first = write(tmp_path, "a.csv", f"{NET_HEADER}\nlab,network,1,1e-6\n")
    second = write(tmp_path, "b.csv", f"{NET_HEADER}\nLAB,network,2,1e-6\n")
    load_file(first)
    load_file(second)
    assert network("lab").bandwidth_gbs == 2


def test_loading_does_not_modify_the_file(tmp_path):
    path = write(tmp_path, "g.csv", f"{GPU_HEADER}\r\n{L40S_ROW}\r\n")
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    load_file(path)
    bad = write(tmp_path, "bad.csv", f"{GPU_HEADER}\nX,NVIDIA,fast,,,,1,1,1,1\n")
    bad_before = (bad.read_bytes(), bad.stat().st_mtime_ns)
    with pytest.raises(InputFileError):
        load_file(bad)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert (bad.read_bytes(), bad.stat().st_mtime_ns) == bad_before


def test_a_bad_file_adds_nothing(tmp_path):
    path = write(tmp_path, "g.csv", f"{GPU_HEADER}\n{L40S_ROW}\nX,NVIDIA,fast,,,,1,1,1,1\n")
    n = len(GPUS)
    with pytest.raises(InputFileError):
        load_file(path)
    assert len(GPUS) == n and "L40S" not in GPUS


# --------------------------------------------------------------------------------------------------
# Workloads from JSON

WORKLOADS_JSON = [
    {
        "name": "tiny-mlp",
        "aliases": ["tiny"],
        "source": "our model 2024",
        "layers": [
            {"name": "fc1", "kind": "linear", "params": 1000, "flops": 2000, "activation_bytes": 400},
            {"name": "fc2", "kind": "linear", "params": 110, "flops": 220, "activation_bytes": 40},
        ],
        "input_bytes_per_sample": 3072,
    },
    {
        "name": "blob",
        "params": 10,
        "flops_per_sample": 20,
        "activation_bytes_per_sample": 4,
        "input_bytes_per_sample": 8,
    },
]


def test_load_workloads_json(tmp_path):
    path = write(tmp_path, "models.json", json.dumps(WORKLOADS_JSON, indent=2))
    assert load_file(path) == ["tiny-mlp", "blob"]
    tiny = workload("TINY")
    assert tiny.name == "tiny-mlp" and tiny.params == 1110 and tiny.flops_per_sample == 2220
    assert tiny.input_bytes_per_sample == 3072 and tiny.source == "our model 2024"
    assert WORKLOADS.get("blob").params == 10


def test_json_workload_overrides_existing(tmp_path):
    name = WORKLOADS.names()[0]  # a bundled workload
    entry = dict(WORKLOADS_JSON[1], name=name)
    path = write(tmp_path, "w.json", json.dumps([entry]))
    n = len(WORKLOADS)
    assert load_file(path, kind="workloads") == [name]
    assert workload(name).params == 10 and len(WORKLOADS) == n


def test_json_without_suffix_is_recognised(tmp_path):
    path = write(tmp_path, "models", json.dumps(WORKLOADS_JSON))
    assert load_file(path) == ["tiny-mlp", "blob"]


def test_json_holds_only_workloads(tmp_path):
    path = write(tmp_path, "g.json", "[]")
    with pytest.raises(InputFileError, match="JSON catalog files hold workloads"):
        load_file(path, kind="gpus")


def test_bad_workload_entry_names_file_line_and_entry_once(tmp_path):
    entries = [WORKLOADS_JSON[1], dict(WORKLOADS_JSON[1], name="bad", flops_per_sample="lots")]
    path = write(tmp_path, "w.json", json.dumps(entries, indent=1))
    line = json.dumps(entries, indent=1).splitlines().index(" {", 2) + 1
    with pytest.raises(InputFileError) as info:
        load_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line {line}: entry 1: ")
    assert "flops_per_sample" in message and "'lots'" in message
    assert message.count(str(path)) == 1
    assert "blob" not in WORKLOADS  # nothing from a bad file is added


# --------------------------------------------------------------------------------------------------
# Bad files: InputFileError naming the file and the line a person sees in an editor

BAD_FILES = [
    # (file name, content, kind, line, what the message must say)
    ("missing.csv", f"{NET_HEADER.rsplit(',', 1)[0]}\nx,network,1\n", "networks", 1,
     "missing required column(s) for networks: latency_s"),
    ("gpus.csv", "# site GPUs\nname,fp32_tflops\nX,1\n", None, 2,
     "tf32_tflops, fp16_tflops, bf16_tflops, memory_bandwidth_gbs, tdp_w, idle_w, "
     "memory_bytes or memory_gib"),
    ("what.csv", "name,speed\nx,1\n", None, 1,
     "cannot tell which catalog this file is for: expected a 'fp32_tflops' column (gpus), "
     "a 'scope' column (storage), or 'bandwidth_gbs' and 'latency_s' columns (networks)"),
    ("nan.csv", f"# a\n\n{GPU_HEADER}\n# b\nX,NVIDIA,fast,,,,1,1,1,1\n", None, 5,
     "fp32_tflops: expected a non-negative number, got 'fast'"),
    ("neg.csv", f"{NET_HEADER}\nok,network,1,1e-6\nx,network,1,-1e-6\n", None, 3,
     "latency_s: expected a non-negative number, got '-1e-6'"),
    ("zero.csv", f"{STORAGE_HEADER}\nx,node,0,1,1e-6\n", None, 2,
     "bandwidth_gbs: expected a positive number, got '0'"),
    ("kind.csv", f"{NET_HEADER}\n#\nx,wan,1,1e-6\n", None, 3,
     "kind: expected one of 'intra', 'network', got 'wan'"),
    ("scope.csv", f"{STORAGE_HEADER}\nx,cloud,1,1,1e-3\n", None, 2,
     "scope: expected one of 'shared', 'node', got 'cloud'"),
    ("dup.csv", f"{NET_HEADER}\nFoo,network,1,1e-6\n\nfoo,network,2,1e-6\n", None, 4,
     "already used by 'Foo' on line 2"),
    ("dupalias.csv", f"{NET_HEADER},aliases\na,network,1,1e-6,x\nb,network,1,1e-6,X;y\n", None, 3,
     "the name 'x' of 'b' is already used by 'a' on line 2"),
    ("width.csv", f"{NET_HEADER}\nx,network,1\n", None, 2, "expected 4 values"),
    ("unknown.csv", f"{NET_HEADER},colour\nx,network,1,1e-6,red\n", None, 1,
     "unknown column 'colour' for networks; expected columns: name, kind"),
    ("twice.csv", f"{NET_HEADER},Kind\nx,network,1,1e-6,intra\n", None, 1, "appears twice"),
    ("quote.csv", f'{NET_HEADER}\nx,network,1,1e-6\n"y,network,1,1e-6\n', None, 3,
     "a quoted value is never closed"),
    ("empty.csv", "", None, None, "the file is empty"),
    ("comments.csv", "# nothing but\n# comments\n\n", "storage", None, "the file is empty"),
    ("header.csv", f"# header only\n{NET_HEADER}\n", None, 2, "no entries"),
    ("latin1.csv", f"{NET_HEADER}\nok,network,1,1e-6\nCaf\xe9,network,1,1e-6\n".encode("latin-1"),
     None, 3, "byte 0xe9 is not UTF-8"),
    ("syntax.json", '[\n  {"name": "a",\n   "params": 1,,\n  }\n]\n', None, 3, "not valid JSON"),
    ("object.json", '{"name": "a"}', None, 1, "expected a JSON list of workload objects, got a dict"),
    ("items.json", '[\n  {"name": "a", "params": 1, "flops_per_sample": 1,\n'
     '   "activation_bytes_per_sample": 1, "input_bytes_per_sample": 1},\n  "b"\n]', None, 4,
     "entry 1: expected a workload object"),
    ("nothing.json", "[]", None, None, "holds no workloads"),
    ("blank.json", "  \n", "workloads", None, "the file is empty"),
    ("dupw.json", json.dumps([WORKLOADS_JSON[1], WORKLOADS_JSON[1]], indent=0), None, 9,
     "already used by the entry on line 2"),
]  # fmt: skip


@pytest.mark.parametrize(
    "name, content, kind, line, expected", BAD_FILES, ids=[case[0] for case in BAD_FILES]
)
def test_bad_files(tmp_path, name, content, kind, line, expected):
    path = write(tmp_path, name, content)
    with pytest.raises(InputFileError) as info:
        load_file(path, kind=kind)
    error = info.value
    assert error.path == str(path) and error.line == line
    where = f"{path}, line {line}: " if line is not None else f"{path}: "
    assert str(error).startswith(where), str(error)
    assert expected in str(error), str(error)
    assert isinstance(error, DlexploreError)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(InputFileError, match="no such file") as info:
        load_file(tmp_path / "nope.csv")
    assert str(tmp_path / "nope.csv") in str(info.value)
    with pytest.raises(InputFileError, match="folder"):
        load_file(tmp_path)


def test_unknown_kind_argument(tmp_path):
    path = write(tmp_path, "g.csv", f"{GPU_HEADER}\n{L40S_ROW}\n")
    with pytest.raises(DlexploreError, match="catalog kind"):
        load_file(path, kind="cpus")


# --------------------------------------------------------------------------------------------------
# DLEXPLORE_CATALOG


def test_load_env_in_process(tmp_path, monkeypatch):
    gpus_file = write(tmp_path, "g.csv", f"{GPU_HEADER}\n{L40S_ROW}\n")
    nets_file = write(tmp_path, "n.csv", f"{NET_HEADER}\nlab-net,network,5,3e-6\n")
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(gpus_file), "", str(nets_file)]))
    assert load_env() == ["L40S", "lab-net"]
    assert gpu("L40S").tdp_w == 350 and network("lab-net").bandwidth_gbs == 5
    monkeypatch.setenv(ENV_VAR, "")
    assert load_env() == []


def _python(code: str, catalog: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with DLEXPLORE_CATALOG set, so the real import runs."""
    env = dict(os.environ)
    env[ENV_VAR] = catalog
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_env_variable_is_loaded_at_import(tmp_path):
    gpus_file = write(tmp_path, "g.csv", f"{GPU_HEADER}\n{L40S_ROW}\n")
    override = write(tmp_path, "eth.csv", f"{NET_HEADER}\n25GbE,network,3.125,42e-6\n")
    models = write(tmp_path, "m.json", json.dumps(WORKLOADS_JSON))
    catalog = os.pathsep.join([str(gpus_file), "", str(override), str(models)])
    code = (
        "import dlexplore.catalog as c\n"
        "print(c.gpu('L40S').fp16_tflops, c.network('25GbE').latency_s, "
        "c.workload('tiny').params)\n"
    )
    result = _python(code, catalog)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["362.0", "4.2e-05", "1110"]


def test_env_variable_bad_file_fails_the_import(tmp_path):
    bad = write(tmp_path, "bad.csv", f"{NET_HEADER}\nok,network,1,1e-6\nx,network,fast,1e-6\n")
    result = _python("import dlexplore.catalog", str(bad))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert "InputFileError" in last
    assert f"{bad}, line 3: bandwidth_gbs: expected a non-negative number, got 'fast'" in last
    assert ENV_VAR in last


def test_env_variable_missing_file_fails_the_import(tmp_path):
    missing = tmp_path / "gone.csv"
    result = _python("import dlexplore", str(missing))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert str(missing) in last and "not found" in last and ENV_VAR in last


def test_a_gpu_loaded_later_takes_its_architectures_defaults(tmp_path):
    """A site's GPU of a fitted architecture (data/catalog/defaults_by_architecture.csv) takes
    that architecture's kernel time by name too, also when its name was looked up before it was
    loaded (then, as a GPU the catalog lacked, it had defaults.csv's)."""
    general = dlexplore.catalog.model_defaults()["kernel_time"].value
    pascal = dlexplore.catalog.architecture_defaults()[("Pascal", "kernel_time")].value
    assert dlexplore.catalog.model_default("kernel_time", "GP100-site") == general
    header = GPU_HEADER + ",architecture"
    path = write(tmp_path, "site.csv", f"{header}\nGP100-site,NVIDIA,10.6,,21.2,,16,732,300,30,Pascal\n")
    assert load_file(path) == ["GP100-site"]
    assert dlexplore.catalog.model_default("kernel_time", "GP100-site") == pascal
