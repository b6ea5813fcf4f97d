"""Where the bundled data lives.

In a wheel, ``data/`` is installed as ``dlexplore/data``; in an editable install or a source checkout
it is the top-level ``data/`` folder beside the package.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["data_dir"]


@cache
def data_dir() -> Path:
    """Return the folder that holds the bundled catalogs, measurements and sample traces."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "data", here.parent / "data"):
        if (candidate / "catalog").is_dir():
            return candidate
    raise FileNotFoundError(
        f"dlexplore's bundled data folder is missing (looked in {here / 'data'} and "
        f"{here.parent / 'data'}); reinstall the package"
    )
