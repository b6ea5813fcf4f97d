"""Colours and unit factors every plot shares, public so that widgets can match the figures.

The colours are Okabe and Ito's (2008): distinguishable with the common colour-vision deficiencies.
"""

from __future__ import annotations

__all__ = ["BLUE", "SKY", "GREEN", "ORANGE", "VERMILION", "PURPLE", "YELLOW", "GREY", "GIB", "MIB"]

BLUE, SKY, GREEN, ORANGE, VERMILION, PURPLE, YELLOW, GREY = (
    "#0072B2",
    "#56B4E9",
    "#009E73",
    "#E69F00",
    "#D55E00",
    "#CC79A7",
    "#F0E442",
    "#999999",
)

#: Bytes per GiB and MiB: memory is drawn in GiB, message sizes in MiB.
GIB = 2.0**30
MIB = 2.0**20
