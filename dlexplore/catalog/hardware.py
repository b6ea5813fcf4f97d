"""GPU, link/network and storage-tier catalogs, read from the bundled ``data/catalog/*.csv``.

The same reader, :func:`read_csv`, parses the bundled files and users' own files, so both are
validated alike. File format (one entry per row):

* the first line that is not a comment is the header: the record's field names (any case);
  ``aliases`` (``;``-separated) and ``source`` are optional columns, every other field is required;
* GPU memory is given either as ``memory_bytes`` or as ``memory_gib`` (GiB, times ``2**30``);
* a blank cell or ``nan`` means "not available" (NaN), where the field allows it (a GPU's tf32,
  fp16, bf16 rates, TDP and idle power);
* lines whose first non-blank character is ``#`` are comments; blank lines are skipped.

Errors are :class:`~dlexplore.errors.InputFileError` naming the file and the line a person sees in
an editor (comment lines counted).

Kept whole: the three hardware catalogs share one CSV reader and one record checker (the kinds,
their columns and units); the readers of user files (:mod:`dlexplore.catalog.user`) use them too.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd

from .. import validation
from .._data import data_dir
from .._io import read_text
from ..errors import DlexploreError, InputFileError
from ._registry import Registry, _key
from ._types import GPU, Link, StorageTier

__all__ = [
    "GPUS",
    "NETWORKS",
    "STORAGE",
    "LINK_KINDS",
    "STORAGE_SCOPES",
    "gpu",
    "network",
    "storage",
    "gpus",
    "networks",
    "storages",
    "read_csv",
    "infer_kind",
    "normalize_kind",
    "REGISTRY_OF",
]

Record = GPU | Link | StorageTier

#: Allowed values of :attr:`Link.kind` and :attr:`StorageTier.scope`.
LINK_KINDS = ("intra", "network")
STORAGE_SCOPES = ("shared", "node")
#: Link technologies NCCL's cost model tells apart (``""``: inferred from the link's kind), and the
#: in-network reductions a link may offer to allreduce (``""``: none).
FABRICS = ("", "nvlink", "pcie", "infiniband", "ethernet")
REDUCTIONS = ("", "nvls", "sharp")

GIB = 2**30  # bytes per GiB: HBM and GDDR capacities are binary

_BLANK = {"", "nan", "na", "n/a"}


# --------------------------------------------------------------------------------------------------
# Column specifications


@dataclass(frozen=True)
class _Column:
    """How one CSV column becomes one dataclass field."""

    name: str
    number: bool = True  # numeric (float) or text
    blank_ok: bool = False  # a blank / "nan" cell means NaN ("not available")
    positive: bool = False  # must be > 0, not just >= 0
    inf_ok: bool = False
    choices: tuple[str, ...] = ()  # allowed text values (compared in lower case)
    field: str | None = None  # the dataclass field it fills, when not ``name``
    scale: float = 1.0  # multiplies the value (GiB -> bytes)
    optional: bool = False  # may be left out of a file: the record's default applies


@dataclass(frozen=True)
class _Kind:
    name: str  # canonical kind: "gpus", "networks", "storage"
    record: type
    columns: tuple[_Column, ...]
    # groups of columns of which exactly one must be given (memory_bytes or memory_gib)
    alternatives: tuple[tuple[str, ...], ...] = ()

    def column(self, name: str) -> _Column | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def required(self) -> list[str]:
        alt = {n for group in self.alternatives for n in group}
        names = [c.name for c in self.columns if c.name not in ("source", "aliases", *alt) and not c.optional]
        names += [" or ".join(group) for group in self.alternatives]
        return names


_KINDS: dict[str, _Kind] = {
    "gpus": _Kind(
        "gpus",
        GPU,
        (
            _Column("name", number=False),
            _Column("vendor", number=False, blank_ok=True),
            _Column("fp32_tflops", positive=True),
            _Column("tf32_tflops", positive=True, blank_ok=True),
            _Column("fp16_tflops", positive=True, blank_ok=True),
            _Column("bf16_tflops", positive=True, blank_ok=True),
            _Column("memory_bytes", positive=True),
            _Column("memory_gib", positive=True, field="memory_bytes", scale=GIB),
            _Column("memory_bandwidth_gbs", positive=True),
            _Column("tdp_w", positive=True, blank_ok=True),
            _Column("idle_w", blank_ok=True),
            _Column("architecture", number=False, optional=True),
            _Column("sm_count", optional=True),
            _Column("aliases", number=False),
            _Column("source", number=False),
        ),
        alternatives=(("memory_bytes", "memory_gib"),),
    ),
    "networks": _Kind(
        "networks",
        Link,
        (
            _Column("name", number=False),
            _Column("kind", number=False, choices=LINK_KINDS),
            _Column("bandwidth_gbs", positive=True),
            _Column("latency_s"),
            _Column("fabric", number=False, optional=True, choices=FABRICS),
            _Column("efficiency", positive=True, optional=True),
            _Column("reduction", number=False, optional=True, choices=REDUCTIONS),
            _Column("aliases", number=False),
            _Column("source", number=False),
        ),
    ),
    "storage": _Kind(
        "storage",
        StorageTier,
        (
            _Column("name", number=False),
            _Column("scope", number=False, choices=STORAGE_SCOPES),
            _Column("bandwidth_gbs", positive=True),
            # "inf" = no per-reader cap beyond the tier's own bandwidth
            _Column("client_bandwidth_gbs", positive=True, inf_ok=True),
            _Column("latency_s"),
            _Column("aliases", number=False),
            _Column("source", number=False),
        ),
    ),
}

_KIND_SYNONYMS = {
    "gpus": "gpus",
    "gpu": "gpus",
    "networks": "networks",
    "network": "networks",
    "links": "networks",
    "link": "networks",
    "storage": "storage",
    "storages": "storage",
    "storage-tier": "storage",
    "storage-tiers": "storage",
}


def normalize_kind(kind: str) -> str:
    """Return the canonical catalog kind (``"gpus"``, ``"networks"`` or ``"storage"``) for ``kind``
    (singular, plural and ``"links"`` accepted)."""
    if isinstance(kind, str) and _key(kind) in _KIND_SYNONYMS:
        return _KIND_SYNONYMS[_key(kind)]
    raise DlexploreError(f"unknown catalog kind {kind!r}; expected 'gpus', 'networks' or 'storage'")


def infer_kind(columns: list[str] | tuple[str, ...]) -> str | None:
    """Guess which catalog a CSV header belongs to: ``fp32_tflops`` -> gpus, ``scope`` -> storage,
    ``bandwidth_gbs`` with ``latency_s`` (or a ``kind`` column) -> networks. None if no single one
    fits."""
    cols = {c.strip().lower() for c in columns}
    hits = []
    if "fp32_tflops" in cols:
        hits.append("gpus")
    if "scope" in cols or "client_bandwidth_gbs" in cols:
        hits.append("storage")
    elif "kind" in cols or {"bandwidth_gbs", "latency_s"} <= cols:
        hits.append("networks")
    return hits[0] if len(hits) == 1 else None


# --------------------------------------------------------------------------------------------------
# Reading


#: What a catalog file is, in the error a file that cannot be read gets.
CATALOG_FILE = "a catalog file (CSV or JSON)"


def _records(path: str | os.PathLike, text: str) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line, cells)`` for each CSV record, ``line`` being the 1-based line in the file
    where the record starts. Comment and blank lines are skipped but counted."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another one
    kept: list[int] = []  # file line number of each line handed to the csv module

    def feed() -> Iterator[str]:
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("#"):
                continue
            kept.append(number)
            yield line + "\n"

    reader = csv.reader(feed(), strict=True, skipinitialspace=True)
    consumed = 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            # Name the line where the bad record starts: for an unclosed quote that is where the
            # quote opened, not the end of the file.
            line = kept[consumed] if consumed < len(kept) else None
            hint = " (a quoted value is never closed)" if "end of data" in str(e) else ""
            raise InputFileError(path, f"malformed CSV: {e}{hint}", line=line) from None
        start = kept[consumed]
        consumed = reader.line_num
        cells = [c.strip() for c in cells]
        if any(cells):  # a line of bare commas is as blank as an empty one
            yield start, cells


def _parse_number(path: object, line: int, col: _Column, text: str) -> float:
    if text.lower() in _BLANK:
        if col.blank_ok:
            return math.nan
        raise InputFileError(path, f"{col.name}: a value is required, got {text!r}", line=line)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value) or value < 0:
        raise InputFileError(path, f"{col.name}: expected a non-negative number, got {text!r}", line=line)
    if math.isinf(value) and not col.inf_ok:
        raise InputFileError(path, f"{col.name}: expected a finite number, got {text!r}", line=line)
    if col.positive and value == 0:
        raise InputFileError(path, f"{col.name}: expected a positive number, got {text!r}", line=line)
    return value * col.scale


def _parse_header(path: object, line: int, cells: list[str], kind: _Kind) -> list[_Column]:
    names = [c.lower() for c in cells]
    known = [c.name for c in kind.columns]
    for i, n in enumerate(names):
        if not n:
            raise InputFileError(path, f"column {i + 1} of the header has no name", line=line)
        if n not in known:
            raise InputFileError(
                path,
                f"unknown column {cells[i]!r} for {kind.name}; expected columns: {', '.join(known)}",
                line=line,
            )
        if names.index(n) != i:
            raise InputFileError(path, f"column {n!r} appears twice in the header", line=line)
    missing = [
        c.name
        for c in kind.columns
        if c.name not in names
        and c.name not in ("source", "aliases")
        and not c.optional
        and not any(c.name in group for group in kind.alternatives)
    ]
    for group in kind.alternatives:
        given = [n for n in group if n in names]
        if not given:
            missing.append(" or ".join(group))
        elif len(given) > 1:
            raise InputFileError(path, f"give one of the columns {' or '.join(group)}, not both", line=line)
    if missing:
        raise InputFileError(
            path,
            f"missing required column(s) for {kind.name}: {', '.join(missing)} "
            f"(required: {', '.join(kind.required())}; optional: "
            f"{', '.join(c.name for c in kind.columns if c.optional or c.name in ('aliases', 'source'))})",
            line=line,
        )
    return [kind.column(n) for n in names]  # type: ignore[misc]


def _make_record(
    path: object,
    line: int,
    kind: _Kind,
    header: list[_Column],
    cells: list[str],
    default_source: str | None,
) -> Record:
    if len(cells) > len(header) and not any(cells[len(header) :]):
        cells = cells[: len(header)]  # trailing empty cells, as spreadsheets export them
    if len(cells) != len(header):
        raise InputFileError(
            path,
            f"expected {len(header)} values ({', '.join(c.name for c in header)}), got {len(cells)}",
            line=line,
        )
    values: dict[str, object] = {}
    for col, text in zip(header, cells, strict=True):
        target = col.field or col.name
        if col.optional and text.lower() in _BLANK:
            continue  # the record's default
        if col.name == "aliases":
            values[target] = tuple(a.strip() for a in text.split(";") if a.strip())
        elif col.number:
            values[target] = _parse_number(path, line, col, text)
        elif col.choices:
            if text.lower() not in col.choices:
                raise InputFileError(
                    path,
                    f"{col.name}: expected one of {', '.join(repr(c) for c in col.choices)}, got {text!r}",
                    line=line,
                )
            values[target] = text.lower()
        else:
            values[target] = text
    if not values["name"]:
        raise InputFileError(path, "name: a value is required, got ''", line=line)
    if not values.get("source"):
        if default_source is None:
            raise InputFileError(path, "source: every entry must say where its numbers come from", line=line)
        values["source"] = default_source
    values.setdefault("aliases", ())
    if kind.name == "networks" and not 0 < float(values.get("efficiency", 1.0)) <= 1:
        raise InputFileError(
            path, f"efficiency: expected a fraction in (0, 1], got {values['efficiency']:g}", line=line
        )
    if "sm_count" in values:
        count = float(values["sm_count"])  # type: ignore[arg-type]
        if not count.is_integer():
            raise InputFileError(path, f"sm_count: expected a whole number, got {count:g}", line=line)
        values["sm_count"] = int(count)
    if kind.name == "gpus":
        idle, tdp = values["idle_w"], values["tdp_w"]
        if idle > tdp:  # type: ignore[operator]  # False when either is NaN
            raise InputFileError(path, f"idle_w ({idle:g} W) exceeds tdp_w ({tdp:g} W)", line=line)
    return kind.record(**values)


def read_csv(
    path: str | os.PathLike,
    kind: str | None = None,
    *,
    default_source: str | None = None,
) -> list[Record]:
    """Parse a catalog CSV file into records, validating every value.

    ``kind`` is ``"gpus"``, ``"networks"`` or ``"storage"``; None infers it from the header (see
    :func:`infer_kind`). A row without a ``source`` gets ``default_source``; if that is None (the
    bundled files) a source is required. Names and aliases must be unique within the file.
    Raises :class:`~dlexplore.errors.InputFileError` naming the file and line of the first problem.
    The file is only read.
    """
    if kind is not None:
        kind = normalize_kind(kind)  # a bad argument is the caller's error, not the file's
    text = read_text(path, CATALOG_FILE)
    rows = _records(path, text)
    first = next(rows, None)
    if first is None:
        expected = "a header line naming the columns"
        if kind is not None:
            expected += f" ({', '.join(_KINDS[kind].required())})"
        raise InputFileError(path, f"the file is empty; expected {expected} and one row per entry")
    header_line, header_cells = first
    if kind is None:
        inferred = infer_kind(header_cells)
        if inferred is None:
            raise InputFileError(
                path,
                "cannot tell which catalog this file is for: expected a 'fp32_tflops' column "
                "(gpus), a 'scope' column (storage), or 'bandwidth_gbs' and 'latency_s' columns "
                f"(networks); got columns {', '.join(header_cells)}",
                line=header_line,
            )
        kind = inferred
    spec = _KINDS[normalize_kind(kind)]
    header = _parse_header(path, header_line, header_cells, spec)

    records: list[Record] = []
    seen: dict[str, tuple[str, int]] = {}  # lookup key -> (entry name, line)
    for line, cells in rows:
        record = _make_record(path, line, spec, header, cells, default_source)
        for k in dict.fromkeys([_key(record.name), *(_key(a) for a in record.aliases)]):
            if k in seen:
                other, other_line = seen[k]
                raise InputFileError(
                    path,
                    f"the name {k!r} of {record.name!r} is already used by {other!r} on line "
                    f"{other_line}; names and aliases must be unique within a file",
                    line=line,
                )
            seen[k] = (record.name, line)
        records.append(record)
    if not records:
        raise InputFileError(path, "no entries: the header is not followed by any row", line=header_line)
    return records


# --------------------------------------------------------------------------------------------------
# The catalogs

GPUS: Registry[GPU] = Registry("GPU")
NETWORKS: Registry[Link] = Registry("network")
STORAGE: Registry[StorageTier] = Registry("storage tier")

#: Which registry holds records of each type (used by :mod:`dlexplore.catalog.user`).
REGISTRY_OF: dict[type, Registry] = {GPU: GPUS, Link: NETWORKS, StorageTier: STORAGE}


def _load_bundled() -> None:
    folder = data_dir() / "catalog"
    for registry, filename, kind in (
        (GPUS, "gpus.csv", "gpus"),
        (NETWORKS, "networks.csv", "networks"),
        (STORAGE, "storage.csv", "storage"),
    ):
        for record in read_csv(folder / filename, kind):
            registry.add(record)


_load_bundled()


def gpu(name: str | GPU) -> GPU:
    """Return the GPU called ``name`` (case-insensitive, aliases accepted); a :class:`GPU` is
    returned unchanged. Unknown names raise :class:`~dlexplore.errors.UnknownNameError`."""
    return _checked(name) if isinstance(name, GPU) else GPUS.get(name)


def network(name: str | Link) -> Link:
    """Return the link or network called ``name`` (PCIe/NVLink links have ``kind == "intra"``,
    networks ``"network"``); a :class:`Link` is returned unchanged."""
    return _checked(name) if isinstance(name, Link) else NETWORKS.get(name)


def storage(name: str | StorageTier) -> StorageTier:
    """Return the storage tier called ``name``; a :class:`StorageTier` is returned unchanged."""
    return _checked(name) if isinstance(name, StorageTier) else STORAGE.get(name)


def _checked(record: GPU | Link | StorageTier) -> GPU | Link | StorageTier:
    """A record made in Python (``dataclasses.replace(gpu("V100"), fp32_tflops=...)``) held to the
    rules a catalog file's cells are: numbers >= 0, > 0 where the model divides by them, NaN only
    where a blank cell is allowed."""
    kind = next(k for k in _KINDS.values() if isinstance(record, k.record))
    for col in kind.columns:
        if not col.number or col.field is not None:
            continue
        value = getattr(record, col.name)
        if col.blank_ok and isinstance(value, float) and math.isnan(value):
            continue
        validation.number(
            f"{col.name} of {record.name!r}",
            value,
            minimum=0,
            strict_min=col.positive,
            allow_inf=col.inf_ok,
        )
    return record


def gpus() -> pd.DataFrame:
    """The GPU catalog, one row per GPU: ``name`` then the fields (TFLOP/s, bytes, GB/s, W);
    aliases joined by ``;``."""
    return GPUS.to_frame()


def networks() -> pd.DataFrame:
    """The link/network catalog, one row per entry: ``name``, ``kind``, ``bandwidth_gbs`` (GB/s per
    direction), ``latency_s`` (s), ``source``, ``aliases``."""
    return NETWORKS.to_frame()


def storages() -> pd.DataFrame:
    """The storage-tier catalog, one row per tier: ``name``, ``scope``, ``bandwidth_gbs``,
    ``client_bandwidth_gbs`` (GB/s), ``latency_s`` (s), ``source``, ``aliases``."""
    return STORAGE.to_frame()
