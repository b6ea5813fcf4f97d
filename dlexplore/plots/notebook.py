"""BokehJS in a notebook page, loaded once per page and never saved into the notebook.

Bokeh's own ``output_notebook(resources=INLINE)`` writes BokehJS (3.9 MB, twice: one copy per
MIME type) into the cell's output, so every saved notebook weighs 8 MB, and one that calls it twice
16 MB. :func:`load_bokehjs` instead writes a loader of a few hundred bytes:

- in JupyterLab, Notebook 7 or Binder, the loader fetches ``bokeh.min.js`` of the installed bokeh
  from the Jupyter server (dlexplore's server extension, :mod:`dlexplore_jupyter`, serves it;
  the browser caches it) and runs it, unless the page already has that BokehJS;
- under Voila, whose pages are never saved, BokehJS goes inline into the page, once.

Either way only the bundles asked for: the explorer's figures need the core alone (1.3 MB), a trace
view the tables too; never MathJax (1.8 MB), which nothing in dlexplore renders.

``DLEXPLORE_BOKEHJS=inline`` (or ``load_bokehjs(inline=True)``) forces the inline copy, for a
front end without the server extension (VS Code, a Jupyter server from another environment).
Nothing here imports ipywidgets: it serves :func:`bokeh.io.show` as well as the widgets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import DlexploreError

if TYPE_CHECKING:
    from bokeh.resources import Component

__all__ = ["load_bokehjs", "output_notebook", "bokehjs_loader", "COMPONENTS"]

#: The Voila page's kernel environment says it is one (Voila sets these for every kernel it starts).
_VOILA_VARIABLES = ("VOILA_BASE_URL", "VOILA_PREHEAT", "VOILA_KERNEL_ID")
_JS_MIME = "application/javascript"
#: BokehJS bundles to load (bokeh/server/static/js/<name>.min.js), in load order.
COMPONENTS: tuple[Component, ...] = ("bokeh", "bokeh-gl", "bokeh-widgets", "bokeh-tables")
_LOAD_MIME = "application/vnd.bokehjs_load.v0+json"

# The bundles this kernel has put inline into its (Voila) page.
_inline_loaded: set[str] = set()


def _inline_wanted(inline: bool | None) -> bool:
    if inline is not None:
        return bool(inline)
    choice = os.environ.get("DLEXPLORE_BOKEHJS", "").strip().lower()
    if choice in ("inline", "server"):
        return choice == "inline"
    return any(os.environ.get(name) for name in _VOILA_VARIABLES)


def _components(components: Iterable[str] | None) -> list[Component]:
    wanted = list(COMPONENTS if components is None else components)
    unknown = sorted(set(wanted) - set(COMPONENTS))
    if unknown:
        raise DlexploreError(f"unknown BokehJS bundle(s) {unknown}; expected some of {list(COMPONENTS)}")
    # the core first, always: the others register into it
    return ["bokeh", *[c for c in COMPONENTS if c in wanted and c != "bokeh"]]


def bokehjs_loader(*, inline: bool = False, components: Iterable[str] | None = None) -> str:
    """The JavaScript that gives the page the installed bokeh's BokehJS bundles ``components``
    (default all of :data:`COMPONENTS`), synchronously (a widget rendered right after it finds
    them), each one only if the page does not have it yet.

    ``inline``: the bundles' code is in the text (1.3 MB for the core, 2.1 MB for all); otherwise
    they are fetched from the Jupyter server's ``dlexplore/bokehjs/`` (see :mod:`dlexplore_jupyter`),
    and a failure raises an error the notebook shows in the output.
    """
    from bokeh import __version__ as version

    names = _components(components)
    # A page keeps what it loaded in window.__dlxBokehJS; another bokeh version starts afresh.
    head = (
        f"const version = {json.dumps(version)};\n"
        "const have = (window.Bokeh !== undefined && window.Bokeh.version === version &&\n"
        "  window.__dlxBokehJS) || (window.__dlxBokehJS = new Set());\n"
    )
    if inline:
        from bokeh.resources import Resources

        parts = []
        for name in names:
            code = "\n".join(Resources(mode="inline", components=[name]).js_raw)
            # bokeh's bundles register themselves on ``this``: run them with this = window.
            parts.append(
                f"if (!have.has({json.dumps(name)})) {{\n(function () {{\n{code}\n}})"
                f".call(window);\nhave.add({json.dumps(name)});\n}}"
            )
        return "(function () {\n" + head + "\n".join(parts) + "\n})();"
    from dlexplore_jupyter import URL_PATH

    return f"""(function () {{
  {head}
  let base = "/";
  const config = document.getElementById("jupyter-config-data");
  try {{ base = JSON.parse(config.textContent).baseUrl || "/"; }} catch (err) {{}}
  for (const name of {json.dumps(names)}) {{
    if (have.has(name)) continue;
    const url = base + {json.dumps(URL_PATH)} + name + ".min.js?v=" + version;
    const request = new XMLHttpRequest();
    // Synchronous on purpose: the widgets displayed next need BokehJS when they render.
    request.open("GET", url, false);
    request.send(null);
    if (request.status !== 200) {{
      throw new Error("dlexplore could not load BokehJS from " + url + " (HTTP " + request.status +
        "): install dlexplore in the Jupyter server's environment (it serves BokehJS there), " +
        "or run dlexplore.plots.load_bokehjs(inline=True)");
    }}
    const script = document.createElement("script");
    script.text = request.responseText + "\\n//# sourceURL=" + url;
    document.head.appendChild(script);
    have.add(name);
  }}
}})();"""


def load_bokehjs(
    *, inline: bool | None = None, components: Iterable[str] | None = None, force: bool = False
) -> None:
    """Make BokehJS available to the notebook page (see the module docstring): the bundles
    ``components`` (default all of :data:`COMPONENTS`; the explorer's figures need ``("bokeh",)``,
    tables need ``"bokeh-tables"``). Figures inside widgets and :func:`bokeh.io.show` both need it.

    The loader that fetches BokehJS is written every time (a few hundred bytes, and a page that
    already has the bundles skips them: a page reloaded against the same kernel gets them again);
    inline code only once per kernel and bundle (a Voila kernel serves one page), unless ``force``.
    """
    inline = _inline_wanted(inline)
    names = _components(components)
    if inline and not force:
        names = [n for n in names if n not in _inline_loaded]
        if not names:
            return
    from IPython.display import publish_display_data

    code = bokehjs_loader(inline=inline, components=names)
    # Both MIME types where they are small, as bokeh does: jupyter_bokeh's renderer takes the second
    # in JupyterLab, classic front ends run the first. Inline (Voila), the first alone: a second
    # copy of BokehJS would double the page.
    publish_display_data({_JS_MIME: code} if inline else {_JS_MIME: code, _LOAD_MIME: code})
    if inline:
        _inline_loaded.update(names)


def output_notebook(*, inline: bool | None = None) -> None:
    """:func:`bokeh.io.output_notebook` without BokehJS in the saved notebook: ``show(figure)``
    then draws in the page. Use it instead of ``output_notebook(resources=INLINE)``."""
    from bokeh.io.state import curstate

    curstate().output_notebook()
    load_bokehjs(inline=inline)
