"""Users' own catalog files: extra or corrected GPUs, networks, storage tiers and workloads.

:func:`load_file` adds the entries of one file to the catalogs, overriding bundled entries of the
same name. Importing :mod:`dlexplore.catalog` loads every file named in the environment variable
``DLEXPLORE_CATALOG`` (paths separated by :data:`os.pathsep`, ``:`` on Linux), so a site can
describe its machines once without editing the package.

* CSV files hold GPUs, networks or storage tiers, in the format of the bundled files (see
  :mod:`dlexplore.catalog.hardware`); which one is inferred from the columns unless ``kind`` is
  given. ``source`` may be left out (it becomes ``"user file PATH"``), and so may ``aliases``.
* JSON files hold a list of workload objects, each turned into a workload by
  :func:`dlexplore.catalog.workloads.workload_from_dict`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .._io import read_text
from ..errors import DlexploreError, InputFileError
from ._registry import _key
from .hardware import CATALOG_FILE, REGISTRY_OF, normalize_kind, read_csv

__all__ = ["load_file", "load_env", "ENV_VAR"]

#: The environment variable naming catalog files to load at import.
ENV_VAR = "DLEXPLORE_CATALOG"

_JSON_WS = " \t\r\n"


def _file_format(path: Path, kind: str | None) -> str:
    """Return "csv" or "json": from the kind, else the suffix, else the file's first character."""
    if kind == "workloads":
        return "json"
    suffix = path.suffix.lower()
    if suffix == ".json":
        if kind is not None:
            raise InputFileError(path, f"JSON catalog files hold workloads; give {kind} as a CSV file")
        return "json"
    if suffix == ".csv" or kind is not None:
        return "csv"
    text = read_text(path, CATALOG_FILE).lstrip()
    return "json" if text[:1] in ("[", "{") else "csv"


def load_file(path: str | os.PathLike, kind: str | None = None) -> list[str]:
    """Add the entries of the catalog file ``path`` to the catalogs; return their names.

    ``kind`` is ``"gpus"``, ``"networks"``, ``"storage"`` or ``"workloads"``; None infers it (JSON
    files hold workloads; a CSV file's columns tell the rest). Entries replace existing entries of
    the same name (or alias). The whole file is checked before anything is added, so a bad file
    changes nothing; problems raise :class:`~dlexplore.errors.InputFileError` naming the file and
    line. The file is only read.
    """
    path = Path(os.fspath(path))
    if kind is not None:
        is_workloads = isinstance(kind, str) and _key(kind) in ("workloads", "workload")
        kind = "workloads" if is_workloads else normalize_kind(kind)
    if _file_format(path, kind) == "json":
        return _load_workloads(path)
    records = read_csv(path, kind, default_source=f"user file {path}")
    for record in records:
        REGISTRY_OF[type(record)].add(record, replace=True)
    return [r.name for r in records]


def _element_lines(text: str) -> list[int]:
    """Line (1-based) where each element of the top-level JSON array in ``text`` starts; ``text``
    must already be known to be a valid JSON array."""
    decoder = json.JSONDecoder()
    i = len(text) - len(text.lstrip(_JSON_WS)) + 1  # just past "["
    lines = []
    while True:
        while text[i] in _JSON_WS:
            i += 1
        if text[i] == "]":
            return lines
        lines.append(text.count("\n", 0, i) + 1)
        _, i = decoder.raw_decode(text, i)
        while text[i] in _JSON_WS:
            i += 1
        if text[i] == ",":
            i += 1


def _load_workloads(path: Path) -> list[str]:
    text = read_text(path, CATALOG_FILE)
    if not text.strip():
        raise InputFileError(path, "the file is empty; expected a JSON list of workload objects")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(path, f"not valid JSON: {e.msg} (column {e.colno})", line=e.lineno) from None
    if not isinstance(data, list):
        raise InputFileError(
            path, f"expected a JSON list of workload objects, got a {type(data).__name__}", line=1
        )
    if not data:
        raise InputFileError(path, "the list holds no workloads; expected workload objects")
    lines = _element_lines(text)
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise InputFileError(
                path,
                f"entry {i}: expected a workload object {{...}}, got {json.dumps(entry)[:40]}",
                line=lines[i],
            )

    # Imported here: workloads.py is a sibling module that may itself be mid-import when
    # dlexplore.catalog loads DLEXPLORE_CATALOG files.
    from .workloads import WORKLOADS, workload_from_dict

    made = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(data):
        origin = f"{path} entry {i}"
        try:
            workload = workload_from_dict(entry, origin=origin)
        except InputFileError:
            raise
        except DlexploreError as e:
            message = str(e)
            # workload_from_dict names the origin itself; don't name the file twice
            message = message.removeprefix(origin).lstrip(": ")
            raise InputFileError(path, f"entry {i}: {message}", line=lines[i]) from e
        for k in dict.fromkeys([_key(workload.name), *(_key(a) for a in workload.aliases)]):
            if k in seen:
                raise InputFileError(
                    path,
                    f"entry {i}: the name {k!r} of {workload.name!r} is already used by the "
                    f"entry on line {seen[k]}; names and aliases must be unique within a file",
                    line=lines[i],
                )
            seen[k] = lines[i]
        made.append(workload)
    for workload in made:
        WORKLOADS.add(workload, replace=True)
    return [w.name for w in made]


def load_env(variable: str = ENV_VAR) -> list[str]:
    """Load every catalog file named in the environment variable ``variable`` (separated by
    :data:`os.pathsep`; empty items are skipped) and return the names added. A bad file raises a
    :class:`~dlexplore.errors.DlexploreError` naming the file and the variable."""
    names: list[str] = []
    for item in os.environ.get(variable, "").split(os.pathsep):
        if not item.strip():
            continue
        try:
            names += load_file(item)
        except InputFileError as e:
            # Re-raise with the variable named, keeping the file and line (and not repeating them).
            where = e.path + (f", line {e.line}" if e.line is not None else "")
            where += f", row {e.row}" if e.row is not None else ""
            message = str(e).removeprefix(where).lstrip(": ")
            raise InputFileError(
                e.path,
                f"{message} (the file is named in the environment variable {variable})",
                line=e.line,
                row=e.row,
            ) from e
        except DlexploreError as e:
            raise DlexploreError(
                f"{item}: {e} (the file is named in the environment variable {variable})"
            ) from e
    return names


# Importing dlexplore.catalog loads the user's files, so every later lookup sees them.
load_env()
