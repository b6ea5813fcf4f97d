"""Serving the explorer as a Voila dashboard (``dlexplore explore``).

The dashboard is the notebook ``dlexplore/dashboard/explorer.ipynb`` shipped in the package; the
explorer's starting configuration reaches its kernel in the ``DLEXPLORE_EXPLORE`` environment
variable (JSON), and extra catalogs in ``DLEXPLORE_CATALOG``. The server listens on 127.0.0.1 only.

For a classroom on a small server:

- **a pool of pre-started kernels** (Voila's ``preheat_kernel``): ``pool_size`` kernels have run
  the notebook before anyone asks, so a page shows its plots in about a second instead of waiting
  for Python, numpy, bokeh and the explorer to start; the pool refills behind each page;
- **kernels stop when their page goes**: the page's template tells Voila when it closes (and sets
  the cookie Voila's own request needs to be accepted, voila-dashboards/voila#1458), and a kernel
  idle for ``cull_idle`` seconds, or left without its page, is stopped by the server
  (``MappingKernelManager.cull_*``); the page then says to reload. A kernel just taken from the
  pool counts as active (:class:`dlexplore_jupyter.kernels.ClassroomKernelManager`): it had idled
  in the pool, and a cull check before the page connected used to stop it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import validation
from .catalog.user import ENV_VAR as CATALOG_ENV_VAR
from .errors import DlexploreError

__all__ = [
    "DASHBOARD",
    "DEFAULT_PORT",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_CULL_IDLE",
    "cull_interval",
    "explore_command",
    "serve_explorer",
]

DASHBOARD = Path(__file__).resolve().parent / "dashboard" / "explorer.ipynb"
#: Holds voila/templates/dlexplore: Voila's lab template without its CDN stylesheets.
TEMPLATES = DASHBOARD.parent / "jupyter"
DEFAULT_PORT = 8866
HOST = "127.0.0.1"
#: Kernels kept started and run ahead (each holds about 200 MB).
DEFAULT_POOL_SIZE = 1
#: Seconds without activity after which a page's kernel is stopped.
DEFAULT_CULL_IDLE = 900


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise DlexploreError(f"--port must be within 1..65535, got {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As the server will: a port in TIME_WAIT after a previous run counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as err:
            raise DlexploreError(
                f"port {port} on {HOST} is not free ({err.strerror}); choose another with --port"
            ) from None


def cull_interval(cull_idle: int) -> int:
    """Seconds between the server's checks for idle kernels: a quarter of ``cull_idle`` (s), within
    1-60, so that a kernel is stopped at most a quarter late."""
    return max(1, min(60, cull_idle // 4))


def explore_command(
    port: int = DEFAULT_PORT,
    *,
    open_browser: bool = True,
    pool_size: int = DEFAULT_POOL_SIZE,
    cull_idle: int = DEFAULT_CULL_IDLE,
) -> list[str]:
    """The Voila command line that serves the dashboard on 127.0.0.1:``port`` with ``pool_size``
    pre-started kernels (0: one started per page) and idle kernels stopped after ``cull_idle`` s."""
    pool_size = validation.count("pool_size", pool_size, minimum=0, maximum=64)
    cull_idle = validation.count("cull_idle", cull_idle, units="s")  # Jupyter takes whole seconds
    argv = [
        sys.executable,
        "-m",
        "voila",
        str(DASHBOARD),
        f"--port={port}",
        f"--Voila.ip={HOST}",
        "--Voila.port_retries=0",
        f"--Voila.open_browser={open_browser}",
        "--VoilaConfiguration.show_tracebacks=True",
        "--VoilaConfiguration.template=dlexplore",
        # Connected or not: a page left open for long gives its memory back too (it says so).
        f"--MappingKernelManager.cull_idle_timeout={cull_idle}",
        f"--MappingKernelManager.cull_interval={cull_interval(cull_idle)}",
        "--MappingKernelManager.cull_connected=True",
        # Culling that spares the kernel a page has just been given from the pool.
        "--VoilaConfiguration.multi_kernel_manager_class=dlexplore_jupyter.kernels.ClassroomKernelManager",
    ]
    if pool_size:
        argv += ["--preheat_kernel=True", f"--pool_size={pool_size}"]
    return argv


def serve_explorer(
    explorer_args: dict[str, Any] | None = None,
    *,
    port: int = DEFAULT_PORT,
    open_browser: bool = True,
    catalogs: Sequence[str | os.PathLike] = (),
    pool_size: int = DEFAULT_POOL_SIZE,
    cull_idle: int = DEFAULT_CULL_IDLE,
) -> int:
    """Serve the explorer with ``explorer_args`` (keywords of :class:`dlexplore.widgets.Explorer`)
    until interrupted; returns Voila's exit status.

    ``catalogs`` are extra catalog files the dashboard's kernel loads; ``pool_size`` and
    ``cull_idle`` as in :func:`explore_command`. Needs the ``explore`` extra
    (``pip install 'dlexplore[explore]'``).
    """
    if importlib.util.find_spec("voila") is None:
        raise DlexploreError(
            "dlexplore explore needs Voila, which comes with the 'explore' extra: "
            "pip install 'dlexplore[explore]'"
        )
    _check_port(port)
    explore_command(port, pool_size=pool_size, cull_idle=cull_idle)  # refuses bad values here
    env = dict(os.environ)
    env["DLEXPLORE_EXPLORE"] = json.dumps(explorer_args or {})
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(TEMPLATES), env.get("JUPYTER_PATH")) if p)
    paths = [str(Path(p).resolve()) for p in catalogs]
    if env.get(CATALOG_ENV_VAR):
        paths = [env[CATALOG_ENV_VAR], *paths]
    if paths:
        env[CATALOG_ENV_VAR] = os.pathsep.join(paths)
    print(f"dlexplore explorer: http://{HOST}:{port}/  (Ctrl-C stops it)", flush=True)
    argv = explore_command(port, open_browser=open_browser, pool_size=pool_size, cull_idle=cull_idle)
    process = subprocess.Popen(argv, env=env)
    # Pass a termination on to Voila so that it shuts its kernels down rather than orphaning them.
    previous = signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        try:
            return process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
