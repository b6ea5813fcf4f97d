"""Numbers with units, written for people: ``format_bytes(17179869184)`` -> ``"16 GiB"``.

Tables and headlines use these; csv, json and netCDF keep the raw numbers in SI units (bytes, s).
"""

from __future__ import annotations

import math

__all__ = ["format_bytes", "format_seconds"]

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
