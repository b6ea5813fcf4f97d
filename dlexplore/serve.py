"""Serving the explorer as a Voila dashboard (``dlexplore explore``).

The dashboard is the notebook ``dlexplore/dashboard/explorer.ipynb`` shipped in the package; the
explorer's starting configuration reaches its kernel in the ``DLEXPLORE_EXPLORE`` environment
variable (JSON), and extra catalogs in ``DLEXPLORE_CATALOG``. The server listens on 127.0.0.1 only.
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

from .catalog.user import ENV_VAR as CATALOG_ENV_VAR
from .errors import DlexploreError

__all__ = ["DASHBOARD", "DEFAULT_PORT", "explore_command", "serve_explorer"]

DASHBOARD = Path(__file__).resolve().parent / "dashboard" / "explorer.ipynb"
#: Holds voila/templates/dlexplore: Voila's lab template without its CDN stylesheets.
TEMPLATES = DASHBOARD.parent / "jupyter"
DEFAULT_PORT = 8866
HOST = "127.0.0.1"


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


def explore_command(port: int = DEFAULT_PORT, *, open_browser: bool = True) -> list[str]:
    """The Voila command line that serves the dashboard on 127.0.0.1:``port``."""
    return [
        sys.executable, "-m", "voila", str(DASHBOARD),
        f"--port={port}", f"--Voila.ip={HOST}", "--Voila.port_retries=0",
        f"--Voila.open_browser={open_browser}",
        "--VoilaConfiguration.show_tracebacks=True",
        "--VoilaConfiguration.template=dlexplore",
    ]


def serve_explorer(
    explorer_args: dict[str, Any] | None = None,
    *,
    port: int = DEFAULT_PORT,
    open_browser: bool = True,
    catalogs: Sequence[str | os.PathLike] = (),
) -> int:
    """Serve the explorer with ``explorer_args`` (keywords of :class:`dlexplore.widgets.Explorer`)
    until interrupted; returns Voila's exit status.

    ``catalogs`` are extra catalog files the dashboard's kernel loads. Needs the ``explore`` extra
    (``pip install 'dlexplore[explore]'``).
    """
    if importlib.util.find_spec("voila") is None:
        raise DlexploreError(
            "dlexplore explore needs Voila, which comes with the 'explore' extra: "
            "pip install 'dlexplore[explore]'"
        )
    _check_port(port)
    env = dict(os.environ)
    env["DLEXPLORE_EXPLORE"] = json.dumps(explorer_args or {})
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(TEMPLATES), env.get("JUPYTER_PATH")) if p)
    paths = [str(Path(p).resolve()) for p in catalogs]
    if env.get(CATALOG_ENV_VAR):
        paths = [env[CATALOG_ENV_VAR], *paths]
    if paths:
        env[CATALOG_ENV_VAR] = os.pathsep.join(paths)
    print(f"dlexplore explorer: http://{HOST}:{port}/  (Ctrl-C stops it)", flush=True)
    process = subprocess.Popen(explore_command(port, open_browser=open_browser), env=env)
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
