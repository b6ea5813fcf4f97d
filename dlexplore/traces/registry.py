"""Trace formats as readers: each one a name, a way to recognise its files and a way to read them.

:func:`dlexplore.load` and :func:`dlexplore.load_trace` ask this registry which reader claims a
file and then call that reader. The built-in formats are registered here, in one place, with their
reader modules imported only when a file of theirs is read. Other packages add formats without
editing dlexplore, through the ``dlexplore.readers`` entry-point group (as xarray finds its
backends): the entry point's name is the format's name and its object a :class:`Reader` subclass
(or instance)::

    # pyproject.toml of a package "dlexplore-steplog"
    [project.entry-points."dlexplore.readers"]
    steplog = "dlexplore_steplog:StepLogReader"

CONTRIBUTING.md walks through a complete one (``examples/reader-plugin/``, installed and read by
``tests/test_reader_registry.py``).

Which reader claims a file: the built-in formats are asked first, in the order of
:func:`~dlexplore.traces.detect.detect_format` (a file one of them recognises is theirs, so a
plug-in cannot take a PyTorch trace from dlexplore); only a file none of them knows is offered to
the plug-ins' :meth:`Reader.sniff`, and the highest confidence wins. ``format=`` skips all of it.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import warnings
from collections.abc import Iterable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..errors import DlexploreError, InputFileError
from .detect import detect_format

__all__ = [
    "ENTRY_POINT_GROUP",
    "KINDS",
    "Reader",
    "detect",
    "get_reader",
    "listing",
    "read",
    "readers",
    "register_reader",
    "unregister_reader",
]

#: The entry-point group other packages register readers in.
ENTRY_POINT_GROUP = "dlexplore.readers"

#: What a reader gives: ``trace`` a :class:`~dlexplore.traces.schema.Trace` (events with start
#: times: :func:`~dlexplore.load_trace` takes it); ``measured`` a measured table (an xarray dataset
#: or an object of the reader's own) read from the files as listed; ``profile`` the same but read
#: from the paths as the user gave them (folders and all). :func:`~dlexplore.load` reads all three.
KINDS = ("trace", "measured", "profile")


#: Paths as a user gives them (a ``profile`` reader gets them so): one file or folder, or several.
PathsGiven = str | os.PathLike | Iterable[str | os.PathLike]


class Reader:
    """One file format: how to recognise its files (:meth:`sniff`) and read them (:meth:`read`).

    Subclass it, set the class attributes, and register the class through the
    ``dlexplore.readers`` entry-point group (or :func:`register_reader` in a running session).

    Attributes
    ----------
    name:
        The format's name, what ``format=`` takes (an entry point's name sets it).
    description:
        A few words for error messages and listings: "step logs of my trainer".
    patterns:
        File-name patterns (``fnmatch``, e.g. ``("*.steplog",)``) the default :meth:`sniff` matches;
        informative otherwise.
    kind:
        One of :data:`KINDS`: ``trace`` (the default) or ``measured``/``profile`` for tables.
    url:
        Where the format or the reader is documented.
    """

    name: str = ""
    description: str = ""
    patterns: tuple[str, ...] = ()
    kind: str = "trace"
    url: str = ""
    #: Set by the registry on the readers it adds: the distribution (or "this session") that added it.
    distribution: str = ""

    def sniff(self, path: Path) -> bool | float:
        """Whether this reader can read ``path`` (a file, or a folder a user named): ``True``/``False``
        or a confidence in (0, 1]. Look at the first bytes rather than trust a name: the default
        matches :attr:`patterns` against the file name. Must not raise for files it does not know."""
        return any(fnmatch.fnmatch(path.name, pattern) for pattern in self.patterns)

    def read(self, paths: Sequence[Path] | PathsGiven, **options: Any) -> Any:
        """Read ``paths`` (files: a folder the user named comes as its files, sorted; ``profile``
        readers get the paths as given) into a :class:`~dlexplore.traces.schema.Trace` (kind
        ``trace``) or a table. ``options`` are the keyword arguments of ``dlexplore.load``. Bad
        input should raise :class:`~dlexplore.errors.DlexploreError` naming the file and position."""
        raise NotImplementedError(f"reader {self.name!r} does not implement read()")

    def __repr__(self) -> str:
        origin = f" from {self.distribution}" if getattr(self, "distribution", "") else ""
        return f"<{type(self).__name__} {self.name!r} ({self.kind}){origin}>"


class _Builtin(Reader):
    """A format dlexplore ships: its module is imported when a file of it is read."""

    def __init__(
        self, name: str, kind: str, module: str, function: str, description: str, patterns: tuple[str, ...]
    ):
        self.name, self.kind, self.description, self.patterns = name, kind, description, patterns
        self._module, self._function = module, function

    def sniff(self, path: Path) -> bool:
        try:
            return detect_format(path) == self.name
        except DlexploreError:
            return False

    def _reader(self) -> Any:
        return getattr(importlib.import_module(self._module, __package__), self._function)

    def read(self, paths: Sequence[Path] | PathsGiven, **options: Any) -> Any:
        if self.kind == "profile":
            return self._reader()(paths, **options)
        files = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
        if self.kind == "trace":
            if self.name != "pytorch":
                options.pop("allow_missing_ranks", None)  # other readers take whatever ranks they get
            return self._reader()(files, **options)
        if len(files) != 1:
            raise DlexploreError(f"{self.name} output is read one file at a time; got {len(files)} files")
        if options and self.name != "nccl-tests":
            raise DlexploreError(f"{self.name} files take no options, got {sorted(options)}")
        return self._reader()(files[0], **options)


_JSON = ("*.json", "*.json.gz")
_BUILTIN: dict[str, Reader] = {
    reader.name: reader
    for reader in (
        _Builtin("pytorch", "trace", ".pytorch", "read", "PyTorch profiler (Kineto) Chrome trace", _JSON),
        _Builtin("horovod", "trace", ".horovod", "read", "Horovod timeline", _JSON),
        _Builtin("nsys", "trace", ".nsys", "read", "Nsight Systems SQLite export", ("*.sqlite",)),
        _Builtin("otf2", "trace", ".otf2", "read", "Score-P OTF2 archive", ("*.otf2",)),
        _Builtin("netcdf", "trace", ".netcdf", "read", "trace converted by dlexplore (netCDF)", ("*.nc",)),
        _Builtin(
            "nccl-tests", "measured", ".nccl_tests", "read_tests", "nccl-tests output", ("*.out", "*.log")
        ),
        _Builtin("darshan", "measured", ".darshan", "read_darshan", "Darshan log", ("*.darshan",)),
        _Builtin(
            "darshan-text",
            "measured",
            ".darshan",
            "read_darshan_parser_text",
            "darshan-parser text",
            ("*.txt",),
        ),
        _Builtin(
            "dlio",
            "measured",
            ".dlio",
            "read_dlio_summary",
            "DLIO / MLPerf Storage summary",
            ("summary.json",),
        ),
        _Builtin(
            "tensorboard",
            "profile",
            ".tensorboard",
            "read_tensorboard",
            "a TensorBoard event file (logged scalars)",
            ("events.out.tfevents.*",),
        ),
        _Builtin(
            "tau",
            "profile",
            ".tau",
            "read_tau_profile",
            "a TAU profile (per-function totals)",
            ("profile.*",),
        ),
        _Builtin(
            "nccl-log",
            "profile",
            ".nccl_log",
            "read_nccl_log",
            "an NCCL debug log (collectives as called)",
            ("*.log",),
        ),
    )
}

_added: dict[str, Reader] = {}  # plug-ins: entry points, then register_reader
_entry_points_loaded = False


def _load_entry_points() -> None:
    """Every reader of the ``dlexplore.readers`` group, once; one that fails to load is left out
    with a warning naming it, so a broken plug-in cannot stop dlexplore from reading other files."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        dist = getattr(point.dist, "name", "") or "an unknown package"
        try:
            reader = point.load()
            if isinstance(reader, type):
                reader = reader()
            _register(reader, point.name, dist, replace=False)
        except Exception as err:  # noqa: BLE001 - any failure of a third party's code
            warnings.warn(
                f"dlexplore: the reader {point.name!r} of {dist} ({point.value}) could not be loaded "
                f"and is left out: {type(err).__name__}: {err}",
                RuntimeWarning,
                stacklevel=3,
            )


def _register(reader: Any, name: str, distribution: str, *, replace: bool) -> Reader:
    if not (callable(getattr(reader, "sniff", None)) and callable(getattr(reader, "read", None))):
        raise DlexploreError(f"reader {name!r} of {distribution} has no sniff(path) and read(paths) methods")
    if not name:
        raise DlexploreError(f"a reader of {distribution} has no name")
    kind = getattr(reader, "kind", "trace")
    if kind not in KINDS:
        raise DlexploreError(f"reader {name!r} of {distribution}: kind {kind!r}; expected one of {KINDS}")
    if name in _BUILTIN:
        raise DlexploreError(f"reader {name!r} of {distribution}: {name!r} is a built-in format")
    if name in _added and not replace:
        raise DlexploreError(
            f"reader {name!r} of {distribution}: {name!r} is registered already by "
            f"{getattr(_added[name], 'distribution', '?')}"
        )
    reader.name = name
    reader.distribution = distribution
    _added[name] = reader
    return reader


def register_reader(
    reader: Reader | type[Reader], *, name: str | None = None, replace: bool = False
) -> Reader:
    """Add a reader in this session (plug-ins use the entry-point group instead): a :class:`Reader`
    subclass or instance; ``name`` defaults to its ``name``. A built-in format cannot be replaced;
    another reader's name only with ``replace=True``. Returns the registered instance."""
    _load_entry_points()
    if isinstance(reader, type):
        reader = reader()
    own_name: str = getattr(reader, "name", "")
    return _register(reader, name or own_name, "this session", replace=replace)


def unregister_reader(name: str) -> Reader:
    """Remove a reader that a plug-in or :func:`register_reader` added (not a built-in); returns it."""
    _load_entry_points()
    if name not in _added:
        raise DlexploreError(f"no added reader {name!r}; added: {', '.join(_added) or 'none'}")
    return _added.pop(name)


def readers() -> dict[str, Reader]:
    """Every registered reader by format name: the built-in ones, then the plug-ins'."""
    _load_entry_points()
    return {**_BUILTIN, **_added}


def get_reader(name: str) -> Reader | None:
    """The reader of format ``name``, or None."""
    if name in _BUILTIN:
        return _BUILTIN[name]
    _load_entry_points()
    return _added.get(name)


def listing() -> str:
    """The registered formats in one line, for error messages."""
    names = [
        f"{name} (from {getattr(reader, 'distribution', '?')})" if name in _added else name
        for name, reader in readers().items()
    ]
    return ", ".join(names)


def detect(path: str | Path) -> str:
    """The format of the file (or folder) at ``path``: a built-in format if one recognises it
    (:func:`~dlexplore.traces.detect.detect_format`), else the plug-in reader whose :meth:`Reader.sniff`
    is most confident; else the built-in detection's error, with the registered readers listed."""
    path = Path(path)
    try:
        return detect_format(path)
    except InputFileError as err:
        if not path.exists():
            raise  # nothing to offer the plug-ins
        failure: DlexploreError = err
    except DlexploreError as err:
        failure = err
    _load_entry_points()
    best, confidence = None, 0.0
    for name, reader in _added.items():
        try:
            claim = reader.sniff(path)
        except Exception as err:  # noqa: BLE001 - a plug-in's bug must not hide the other readers
            warnings.warn(
                f"dlexplore: reader {name!r} of {getattr(reader, 'distribution', '?')} failed to sniff "
                f"{path}: {type(err).__name__}: {err}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        value = float(claim) if claim not in (None, False) else 0.0
        if value > confidence:
            best, confidence = name, value
    if best is not None:
        return best
    message = str(failure)
    if "unknown trace format" in message or _added:
        # the built-in message names the built-in formats in words; list every reader that was asked
        failure.args = (f"{message}; registered readers: {listing()}", *failure.args[1:])
    raise failure


def read(name: str, paths: Sequence[Path] | PathsGiven, **options: Any) -> Any:
    """Read ``paths`` (files; a ``profile`` reader's as the user gave them: a folder, a list...) with
    the reader of format ``name``; a plug-in's failure other than a :class:`DlexploreError` is given
    as one that names the reader and its package."""
    reader = get_reader(name)
    if reader is None:
        raise DlexploreError(f"unknown format {name!r}; registered readers: {listing()}")
    if name in _BUILTIN:
        return reader.read(paths, **options)
    origin = f"reader {name!r} of {getattr(reader, 'distribution', '?')}"
    try:
        result = reader.read(paths, **options)
    except DlexploreError:
        raise
    except Exception as err:  # noqa: BLE001 - a third party's reader: say whose it was
        # a profile reader's single folder or file names itself, not its first character
        given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        first = given[0] if given else "?"
        raise DlexploreError(f"{first}: the {origin} failed: {type(err).__name__}: {err}") from err
    if reader.kind == "trace":
        from .schema import Trace

        if not isinstance(result, Trace):
            raise DlexploreError(f"the {origin} gave a {type(result).__name__}, not a dlexplore Trace")
    return result
