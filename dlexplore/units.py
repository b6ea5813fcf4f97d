"""Units: numbers written for people, and the unit registry that reads ``attrs["units"]``.

``format_bytes(17179869184)`` -> ``"16 GiB"``: tables and headlines use these; csv, json and netCDF
keep the raw numbers in SI units (bytes, s).

Every ``attrs["units"]`` dlexplore writes is a pint unit expression. Most are pint's own spellings
(``s``, ``bytes``, ``GB/s``, ``J``, ``W``, ``1``, ``count``, ``%``). The things dlexplore counts that
pint does not know are defined by :func:`registry` as dimensions of their own, so that they keep
their names (``samples/s`` stays samples per second, not ``1/s``) and never convert into each
other: :data:`DEFINITIONS`. ``ds.dlx.quantify()`` uses it; with pint-xarray directly,
``ds.pint.quantify(unit_registry=dlexplore.units.registry())``.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

__all__ = ["format_bytes", "format_seconds", "registry", "DEFINITIONS"]

#: What :func:`registry` adds to pint's default units (pint's syntax; plurals come by themselves:
#: ``samples``, ``tokens``; SI prefixes too: ``TFLOP/s``).
DEFINITIONS = (
    "sample = [sample]",  # a training example: an image, a sequence
    "token = [token]",  # a sequence element of a language model
    "FLOP = [floating_point_operation] = flop",  # one floating-point operation
    "element = [element]",  # an element of a buffer (nccl-tests' count column)
)


@cache
def registry() -> Any:
    """A pint ``UnitRegistry`` that parses every units attribute dlexplore writes (needs ``pint``,
    which the ``test`` extra installs, or ``pip install pint-xarray``)."""
    try:
        import pint
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "dlexplore.units.registry needs pint: pip install pint-xarray", name=err.name
        ) from None
    units = pint.UnitRegistry(force_ndarray_like=True)  # what pint-xarray asks of a registry
    for line in DEFINITIONS:
        units.define(line)
    return units


_BINARY = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_bytes(n: float) -> str:
    """A byte count with a binary prefix and three significant digits: ``"97.5 MiB"``,
    ``"16 GiB"``, ``"512 bytes"``; ``"n/a"`` for NaN."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "n/a"
    value = float(n)
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if value < 0 else ""
    value = abs(value)
    step = 0
    while value >= 1024 and step < len(_BINARY) - 1:
        value /= 1024
        step += 1
    if step == 0:
        return f"{sign}{value:.0f} bytes"
    text = f"{value:.3g}" if value < 1000 else f"{value:.0f}"
    return f"{sign}{text} {_BINARY[step]}"


def format_seconds(t: float) -> str:
    """A duration with the unit that suits it: ``"20 µs"``, ``"57.5 ms"``, ``"3.2 s"``."""
    if t is None or (isinstance(t, float) and math.isnan(t)):
        return "n/a"
    value = float(t)
    magnitude = abs(value)
    if magnitude >= 1 or magnitude == 0:
        return f"{value:.3g} s"
    if magnitude >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    if magnitude >= 1e-6:
        return f"{value * 1e6:.3g} µs"
    return f"{value * 1e9:.3g} ns"
