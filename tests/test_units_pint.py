"""Every ``attrs["units"]`` of every dataset the public functions return is a unit pint parses: pint's
default registry, plus the counted things :data:`dlexplore.units.DEFINITIONS` adds (sample, token,
FLOP, element); and pint-xarray quantifies each dataset with that registry."""

from __future__ import annotations

import pint
import pint_xarray  # noqa: F401 - registers ds.pint
import pytest
import xarray as xr
from _public_datasets import DATASETS, quiet

from dlexplore.units import DEFINITIONS, registry


def _units_of(ds: xr.Dataset) -> dict[str, str]:
    return {name: var.attrs["units"] for name, var in ds.variables.items() if "units" in var.attrs}


@pytest.mark.parametrize("label", sorted(DATASETS))
def test_every_units_attribute_parses_with_pint(label):
    ds = quiet(DATASETS[label])
    if not isinstance(ds, xr.Dataset):  # a result object that holds its dataset
        ds = ds.dataset
    units = registry()
    found = _units_of(ds)
    assert found, f"{label}: no units at all"
    pointers = []
    for name, text in found.items():
        try:
            units.parse_units(text)
        except (pint.errors.UndefinedUnitError, AssertionError, ValueError) as err:
            if text in ds.variables and ds[text].dtype == object:
                # units that vary along a dimension (TAU's metrics) name the variable holding them
                for value in {str(v) for v in ds[text].values.ravel()}:
                    units.parse_units(value)
                pointers.append(name)
                continue
            pytest.fail(f"{label}: {name} has units {text!r} that pint cannot parse ({err})")
    plain = ds.drop_vars(pointers)
    quantified = plain.pint.quantify(unit_registry=units)
    assert any(isinstance(v.data, units.Quantity) for v in quantified.data_vars.values())


def test_the_added_units_keep_their_dimensions_apart():
    units = registry()
    throughput = units.Quantity(1200.0, "samples/s")
    assert (throughput * units.Quantity(2.0, "s")).to("sample").magnitude == 2400.0
    assert units.Quantity(0.3, "TFLOP/s").to("FLOP/s").magnitude == pytest.approx(3e11)
    with pytest.raises(pint.errors.DimensionalityError):
        throughput.to("FLOP/s")
    with pytest.raises(pint.errors.DimensionalityError):
        throughput.to("1/s")
    # and pint's own registry knows none of them: that is why they are defined
    for line in DEFINITIONS:
        name = line.split("=")[0].strip()
        with pytest.raises(pint.errors.UndefinedUnitError):
            pint.UnitRegistry().parse_units(name)
