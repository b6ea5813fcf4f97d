"""The standalone HTML report and the explore command's checks (the served dashboard itself is
tested in a real browser in tests/browser)."""

import json
import os
import re
import socket
import types

import pytest
from _cli import run_in_process, run_process

from dlexplore import serve
from dlexplore.errors import DlexploreError
from dlexplore.report import explorer_report, write_report


def cli(*args):
    """``explore`` as a real process (a command that wrongly went on would serve, not return)."""
    return run_process(*args, timeout=120)


def _bokeh_docs(page: str) -> dict:
    (payload,) = re.findall(
        r'<script type="application/json" id="[^"]+">\s*(.*?)\s*</script>', page, flags=re.S
    )
    return json.loads(payload)


def test_report_is_standalone_and_carries_every_gpu_count(tmp_path):
    target = write_report(
        tmp_path / "report.html",
        "resnet101",
        "P100",
        "25GbE",
        gpus=16,
        gpus_per_node=4,
        measured_data="horovod-2017-16gpu-25gbe",
    )
    page = target.read_text(encoding="utf-8")
    # BokehJS is inlined: no script or stylesheet is fetched from anywhere
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', page)
    assert "Bokeh" in page and len(page) > 500_000
    text = json.dumps(_bokeh_docs(page))
    for name in (
        "throughput_predicted",
        "throughput_measured",
        "step_breakdown",
        "memory",
        "comm_buckets",
        "report_gpus",
    ):
        assert f'"name": "{name}"' in text or f'"name":"{name}"' in text, name
    assert "Horovod project README" in page
    assert "resnet101 on 16 x P100" in page
    assert oct(os.stat(target).st_mode & 0o777) != "0o600"  # shareable, like any file we write


def test_report_refuses_bad_input_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old")
    with pytest.raises(DlexploreError, match="one of"):
        write_report(target, gpus=3)
    with pytest.raises(DlexploreError, match="no throughput"):
        write_report(target, measured_data="nccl-tests-h100-allreduce")
    with pytest.raises(DlexploreError, match="does not exist"):
        write_report(tmp_path / "no" / "such" / "folder.html")
    assert target.read_text() == "old"
    assert not list(tmp_path.glob(".*.tmp"))


def test_report_html_string_names_the_configuration():
    page = explorer_report("vgg16", "K80", "IB-EDR", gpus=64, batch_size=32, algorithm="tree")
    assert "vgg16 on 64 x K80" in page and "IB-EDR: 12.5 GB/s" in page and "tree" in page


def test_report_command(tmp_path):
    target = tmp_path / "r.html"
    done = run_in_process(
        "report",
        "--workload",
        "alexnet",
        "--gpu",
        "K40",
        "--network",
        "IB-FDR",
        "--gpus",
        "32",
        "--measured",
        "tf-benchmarks-2017-dgx1",
        "-o",
        str(target),
    )
    assert done.returncode == 0, done.stderr
    assert "alexnet on 32 x K40" in target.read_text(encoding="utf-8")
    bad = run_in_process("report", "--gpus", "12", "-o", str(target))
    assert bad.returncode == 2 and "power of two" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    bad = run_in_process("report", "--measured", "deepbench-allreduce-p100", "-o", str(target))
    assert bad.returncode == 2 and "no throughput" in bad.stderr


def test_explore_checks_its_options_before_serving():
    bad = cli("explore", "--no-browser", "--workload", "resnet5")
    assert bad.returncode == 2 and "did you mean" in bad.stderr
    bad = cli("explore", "--no-browser", "--gpus", "0")
    assert bad.returncode == 2 and "--gpus must be a whole number from 1 to 1024; got 0" in bad.stderr
    bad = cli("explore", "--no-browser", "--gpu", "V100-16GB", "--precision", "bf16")
    assert bad.returncode == 2 and "V100-16GB has no bf16 arithmetic" in bad.stderr
    bad = cli("explore", "--no-browser", "--pool-size", "-1")
    assert bad.returncode == 2 and "pool_size must be a whole number from 0 to 64; got -1" in bad.stderr


def test_explore_refuses_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = cli("explore", "--no-browser", "--port", str(port))
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is not free" in done.stderr


def test_a_kernel_leaving_the_pool_counts_as_active():
    """Voila's culler spares pooled kernels only while pooled: the one a page has just taken had
    idled there and has no connection yet. Leaving the pool refreshes its last activity."""
    import asyncio
    import datetime

    from dlexplore_jupyter.kernels import ClassroomKernelManager

    assert any("ClassroomKernelManager" in a for a in serve.explore_command(9999, open_browser=False))
    long_ago = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    kernels = {k: types.SimpleNamespace(last_activity=long_ago) for k in ("pooled", "taken", "page")}

    def pool_item(kernel_id):
        future = asyncio.Future(loop=loop)
        future.set_result({"kernel_id": kernel_id})
        return future

    loop = asyncio.new_event_loop()
    try:
        manager = ClassroomKernelManager()
        manager._kernels.update(kernels)
        manager._pools = {"explorer.ipynb": [pool_item("pooled"), pool_item("taken")]}
        assert manager.note_pool() == set() and manager.pooled_kernel_ids() == {"pooled", "taken"}
        manager._pools["explorer.ipynb"].pop(1)  # a page takes it
        assert manager.note_pool() == {"taken"}
        assert kernels["taken"].last_activity > long_ago  # a full cull time to connect
        assert kernels["pooled"].last_activity == kernels["page"].last_activity == long_ago
        assert manager.note_pool() == set()  # once: a page that never connects is culled later
    finally:
        loop.close()


def test_explore_serves_the_packaged_dashboard_on_localhost_only():
    command = serve.explore_command(9999, open_browser=False)
    assert "--Voila.ip=127.0.0.1" in command and "--port=9999" in command
    assert "--Voila.open_browser=False" in command
    # a pool of kernels that ran the notebook ahead, and idle kernels stopped (a classroom's server)
    assert {
        "--preheat_kernel=True",
        "--pool_size=1",
        "--MappingKernelManager.cull_idle_timeout=900",
        "--MappingKernelManager.cull_connected=True",
    } <= set(command)
    assert "--preheat_kernel=True" not in serve.explore_command(9999, pool_size=0)
    assert serve.DASHBOARD.is_file()
    template = serve.TEMPLATES / "voila" / "templates" / "dlexplore" / "index.html.j2"
    # Voila's own lab template fetches Font Awesome from a CDN; ours must not fetch anything
    assert "https://" not in template.read_text()
    notebook = json.loads(serve.DASHBOARD.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert all(not cell.get("outputs") for cell in notebook["cells"])


def test_explore_help_says_how_to_use_jupyterlab():
    done = run_in_process("explore", "--help")
    assert done.returncode == 0 and "JupyterLab" in done.stdout
