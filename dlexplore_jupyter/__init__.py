"""dlexplore's Jupyter server extension: serves the installed bokeh's BokehJS to the page, so that
notebooks load it by URL (once per page, cached by the browser) instead of carrying 4 MB of it in
every saved notebook.

A package of its own, beside ``dlexplore``, so that the Jupyter server imports only this (tornado
and jupyter_server, already loaded), not numpy, xarray and bokeh. Enabled by the file
``etc/jupyter/jupyter_server_config.d/dlexplore.json`` that the wheel installs;
:func:`dlexplore.plots.load_bokehjs` writes the loader that uses it.

URL: ``<base_url>dlexplore/bokehjs/<file>`` (``bokeh.min.js``, ``bokeh-gl.min.js`` ...), the files of
``bokeh/server/static/js`` of the bokeh the server runs with, behind the server's authentication.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["URL_PATH", "bokehjs_folder"]

#: Where the files are served, below the server's base URL.
URL_PATH = "dlexplore/bokehjs/"


def bokehjs_folder() -> Path | None:
    """bokeh's folder of built JavaScript, found without importing bokeh; None without bokeh."""
    spec = importlib.util.find_spec("bokeh")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "server" / "static" / "js"
    return folder if folder.is_dir() else None


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "dlexplore_jupyter"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from jupyter_server.base.handlers import FileFindHandler
    from jupyter_server.utils import url_path_join

    folder = bokehjs_folder()
    if folder is None:
        serverapp.log.warning("dlexplore: bokeh is not installed here; BokehJS is not served")
        return
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], URL_PATH, "(.*)")
    # FileFindHandler: the server's own static handler (authenticated, cached by version query).
    web_app.add_handlers(".*$", [(route, FileFindHandler, {"path": [str(folder)]})])
    serverapp.log.info("dlexplore: serving BokehJS from %s at /%s", folder, URL_PATH)
