"""A case-insensitive name -> entry table with aliases, shared by every catalog."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

import pandas as pd

from ..errors import DlexploreError, UnknownNameError

T = TypeVar("T")

__all__ = ["Registry"]


def _key(name: str) -> str:
    # "V100-16GB", "v100_16gb" and "V100 16GB" are the same id.
    return name.strip().lower().replace("_", "-").replace(" ", "-")


class Registry(Generic[T]):
    """Entries (frozen dataclasses with ``name``, ``aliases`` and ``source``) looked up by name.

    Lookups ignore case, and treat ``_``, ``-`` and spaces alike. An unknown name raises
    :class:`~dlexplore.errors.UnknownNameError` suggesting the nearest ids.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._lookup: dict[str, str] = {}

    def add(self, entry: T, *, replace: bool = False) -> T:
        """Add ``entry``; a clash with an existing name or alias is an error unless ``replace``."""
        name = entry.name  # type: ignore[attr-defined]
        previous = self._entries.get(_key(name)) if replace else None
        if previous is not None and not getattr(entry, "aliases", ()):
            # A user's override that names no aliases keeps the bundled ones, so that
            # "V100-SXM2-16GB" still finds the user's "V100-16GB".
            entry = dataclasses.replace(entry, aliases=previous.aliases)  # type: ignore[type-var]
        keys = [_key(name), *(_key(a) for a in getattr(entry, "aliases", ()))]
        if not replace:
            for k in keys:
                if k in self._lookup:
                    raise DlexploreError(
                        f"{self.kind} {name!r}: the name {k!r} is already used by "
                        f"{self._lookup[k]!r}; pass replace=True to override it"
                    )
        elif _key(name) in self._entries:
            self.remove(name)
        self._entries[_key(name)] = entry
        for k in keys:
            self._lookup[k] = _key(name)
        return entry

    def remove(self, name: str) -> None:
        """Remove the entry called ``name`` (or one of its aliases)."""
        canonical = self._canonical(name)
        del self._entries[canonical]
        for k in [k for k, v in self._lookup.items() if v == canonical]:
            del self._lookup[k]

    def _canonical(self, name: str) -> str:
        if not isinstance(name, str):
            raise DlexploreError(f"{self.kind} name must be a string, got {name!r}")
        k = _key(name)
        if k not in self._lookup:
            raise UnknownNameError(self.kind, name, self.names(with_aliases=True))
        return self._lookup[k]

    def get(self, name: str) -> T:
        """Return the entry called ``name`` (case-insensitive, aliases accepted)."""
        return self._entries[self._canonical(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _key(name) in self._lookup

    def __iter__(self) -> Iterator[T]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def names(self, with_aliases: bool = False) -> list[str]:
        """Canonical names in catalog order (and aliases, if asked)."""
        names = [e.name for e in self._entries.values()]  # type: ignore[attr-defined]
        if with_aliases:
            for e in self._entries.values():
                names.extend(getattr(e, "aliases", ()))
        return names

    def to_frame(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """One row per entry, dataclass fields as columns (aliases joined by ``;``)."""
        rows = []
        for e in self._entries.values():
            row = {}
            for f in dataclasses.fields(e):  # type: ignore[arg-type]
                value = getattr(e, f.name)
                if f.name == "aliases":
                    value = ";".join(value)
                elif isinstance(value, tuple):
                    continue  # structured fields (layers) are not table columns
                row[f.name] = value
            rows.append(row)
        frame = pd.DataFrame(rows)
        if columns is not None:
            frame = frame[list(columns)]
        return frame
