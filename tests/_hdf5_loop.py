"""The damaged netCDF file that HDF5 loops on, and whether this machine's HDF5 still does."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

#: Case 166 of the netCDF fuzzer (seed 7), kept as a file: one flipped bit in an object header makes
#: HDF5 2.0.0 (h5py 3.16.0) loop forever in C while it reads an attribute. Kept rather than rebuilt,
#: because the mutation lands elsewhere when the seed's bytes change (another h5netcdf, another path).
HDF5_LOOP = Path(__file__).resolve().parent / "data" / "fuzz" / "hdf5-attribute-loop.nc"

_READ_ATTRIBUTES = """
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    [f.attrs[k] for k in f.attrs]
    f.visititems(lambda name, obj: [obj.attrs[k] for k in obj.attrs])
"""


@functools.cache
def hdf5_hangs(seconds: float = 3.0) -> bool:
    """Whether this machine's HDF5, used directly (no dlexplore), fails to read :data:`HDF5_LOOP`
    in ``seconds`` (asked once per process: the answer costs the whole wait when it hangs)."""
    try:
        subprocess.run(
            [sys.executable, "-c", _READ_ATTRIBUTES, str(HDF5_LOOP)],
            capture_output=True,
            timeout=seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return True
    return False
