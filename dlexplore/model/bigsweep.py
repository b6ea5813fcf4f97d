"""Sweeps too big for memory: :func:`predict` evaluated lazily, block by block, on Dask.

:func:`predict_lazy` takes the arguments of :func:`~dlexplore.model.step.predict` and returns the
same Dataset, but every variable is a Dask array: nothing is computed until it is reduced, saved
(``to_zarr`` writes it chunk by chunk) or loaded, and then each block of the sweep grid is one call of
``predict`` on that block's coordinate values, so a block's values equal the eager ones exactly.

:func:`best_per_gpus` reduces a sweep to the best configuration for each GPU count (the argmax of the
objective over every other sweep dimension) one block at a time and then combines the per-block
winners, so the full grid never exists in memory: a 1e9-point sweep needs only a few blocks at once.

Dask (``pip install 'dlexplore[scale]'``) is imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..errors import DlexploreError
from .conventions import VARIABLES, as_dataarray, is_sweep
from .operators import NORMALIZERS
from .step import label_of, predict
from .step_grid import CATEGORICAL_PARAMETERS, NUMERIC_PARAMETERS, validate_parameter


def _originals(name: str, values: Any) -> dict[str, Any]:
    """Each value the user gave, by its label and by the label predict writes for it (a layout or
    fusion is normalised there: channels_last is nhwc, bn-add-relu is bn_add_relu)."""
    return {key: v for v in values for key in (label_of(v), _normalized(name, label_of(v)))}


def _normalized(name: str, label: str) -> str:
    """A categorical label as predict writes it (an unknown one as given: predict names it)."""
    try:
        return NORMALIZERS[name](label) if name in NORMALIZERS else label
    except DlexploreError:
        return label


__all__ = ["predict_lazy", "best_per_gpus", "DEFAULT_BLOCK_POINTS"]

#: Sweep points per block when ``chunks`` is not given: a block's predict holds about 25 float64
#: arrays of this size (~200 MB at 1e6 points), so two threads stay well under a gigabyte.
DEFAULT_BLOCK_POINTS = 1_000_000

#: Objectives where smaller is better; every other variable is maximised.
_MINIMISED = ("step_time", "time_", "mem_", "comm_bytes", "n_buckets")


def _require_dask():
    try:
        import dask.array as dsa
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise DlexploreError(
            "lazy sweeps need Dask: pip install 'dlexplore[scale]' (or 'dask[array]')"
        ) from None
    return dsa


def _block_chunks(
    shape: tuple[int, ...], dims: list[str], chunks: Mapping[str, int] | int | None
) -> tuple[int, ...]:
    """Chunk length along each sweep dimension (points)."""
    if isinstance(chunks, Mapping):
        unknown = sorted(set(chunks) - set(dims))
        if unknown:
            raise DlexploreError(f"chunks names {unknown}, which are not sweep dimensions {dims}")
        sizes = [int(chunks.get(d, n)) for d, n in zip(dims, shape, strict=True)]
    elif chunks is not None:
        sizes = [int(chunks)] * len(dims)
    else:
        # Whole trailing dimensions, splitting the leading ones, so blocks are contiguous in C order.
        sizes, inner = [], 1
        for n in reversed(shape):
            size = min(n, max(1, DEFAULT_BLOCK_POINTS // inner))
            sizes.append(size)
            inner *= size
        sizes.reverse()
    if any(s < 1 for s in sizes):
        raise DlexploreError(f"chunk lengths must be >= 1 point, got {dict(zip(dims, sizes, strict=True))}")
    return tuple(min(s, n) for s, n in zip(sizes, shape, strict=True))


def _fit_to(template: xr.DataArray, value: xr.DataArray) -> xr.DataArray:
    """``value`` (one block's eager result) with exactly ``template``'s dimensions.

    A block one point long along a dimension keeps that dimension in predict's result even where the
    variable does not vary along it; the full sweep drops it, so take its single point.
    """
    extra = [d for d in value.dims if d not in template.dims]
    if extra:
        value = value.isel({d: 0 for d in extra}, drop=True)
    return value.transpose(*template.dims)


def predict_lazy(*args: Any, chunks: Mapping[str, int] | int | None = None, **kwargs: Any) -> xr.Dataset:
    """:func:`~dlexplore.model.step.predict` as a Dask-backed Dataset, evaluated block by block.

    Takes the same arguments as ``predict`` (units as there: bandwidths GB/s, latencies s, batch
    size samples per GPU, ...). Any parameter may be a sweep, numeric (:data:`NUMERIC_PARAMETERS`)
    or categorical (workload, gpu, network, ... by name or as catalog objects, including your own);
    categorical sweeps come first among the dimensions, as in ``predict``. Only
    ``buckets=True`` (the per-bucket schedule, for one configuration at a time) is refused.
    ``chunks`` gives the block length (points) along sweep dimensions: a mapping ``{dim: length}``
    (dimensions left out stay whole), one int for every dimension, or None for blocks of about
    :data:`DEFAULT_BLOCK_POINTS` points.

    The result has predict's variables, dimensions, coordinates, units and attrs; computing any
    block gives exactly the values eager ``predict`` gives there. Sweep values are checked now; the
    model runs only when the result is computed.
    """
    _require_dask()
    import dask.array as dsa

    if args:
        names = ("workload", "gpu", "network")
        if len(args) > len(names):
            raise DlexploreError(f"predict_lazy takes at most {len(names)} positional arguments")
        clash = [n for n in names[: len(args)] if n in kwargs]
        if clash:
            raise DlexploreError(f"{clash} given both by position and by name")
        kwargs = {**dict(zip(names, args, strict=False)), **kwargs}
    if kwargs.get("buckets"):
        raise DlexploreError("predict_lazy does not give the per-bucket schedule; use predict(buckets=True)")
    categorical = [n for n in CATEGORICAL_PARAMETERS if n in kwargs and is_sweep(kwargs[n])]
    numeric = [n for n in NUMERIC_PARAMETERS if n in kwargs and is_sweep(kwargs[n])]
    dims = categorical + numeric  # predict's order: categorical sweeps first
    # A block gets coordinate labels (names); it calls predict with the objects the user gave, so a
    # user-defined workload or GPU that is not in the catalog works too.
    originals = {n: _originals(n, kwargs[n]) for n in categorical}
    coords = {d: as_dataarray(d, kwargs[d]).values for d in numeric}
    for d in numeric:
        validate_parameter(d, np.asarray(coords[d], dtype=float))

    # Two points per numeric dimension give every variable the dimensions it has on the full grid:
    # numpy broadcasting, not the values, decides which sweep axes a variable keeps. Categorical
    # sweeps are short and are evaluated whole, which also checks every name now.
    small = predict(**{**kwargs, **{d: coords[d][: min(2, len(coords[d]))] for d in numeric}})
    for d in categorical:
        coords[d] = small[d].values
    shape = tuple(len(coords[d]) for d in dims)
    sizes = _block_chunks(shape, dims, chunks)
    fixed = {k: v for k, v in kwargs.items() if k not in dims}

    template_vars = {}
    # Dimensions that are not sweeps (the compute breakdown's operator) are whole in every block.
    inner = {d: small.sizes[d] for d in small.dims if d not in dims}
    for name, var in small.data_vars.items():
        vshape = tuple(len(coords[d]) if d in dims else inner[d] for d in var.dims)
        vchunks = tuple(sizes[dims.index(d)] if d in dims else inner[d] for d in var.dims)
        data = dsa.empty(vshape, dtype=var.dtype, chunks=vchunks)
        template_vars[name] = xr.Variable(var.dims, data, var.attrs)
    # Coordinates that are not sweep dimensions are scalars or lie along categorical sweeps (a
    # GPU's peak_flops along gpu): small has them whole.
    other_coords = {name: c.variable for name, c in small.coords.items() if name not in dims}
    inner_coords = {d: other_coords.pop(d) for d in inner if d in other_coords}
    dim_coords = {d: xr.Variable(d, coords[d], small[d].attrs) for d in dims}
    template = xr.Dataset(
        template_vars, coords={**dim_coords, **inner_coords, **other_coords}, attrs=small.attrs
    )
    if not numeric:
        return small.chunk()

    # A cheap carrier whose blocks tell map_blocks where each block of the grid lies.
    carrier = xr.Dataset(
        {"_block": (dims, dsa.zeros(shape, dtype=np.int8, chunks=sizes))},
        coords={d: coords[d] for d in dims},
    )

    def block(piece: xr.Dataset) -> xr.Dataset:
        values = {d: piece[d].values for d in numeric}
        values.update({d: [originals[d][v] for v in piece[d].values.tolist()] for d in categorical})
        out = predict(**fixed, **values)
        return xr.Dataset(
            {name: _fit_to(template[name], out[name]) for name in template.data_vars},
            coords={
                **{d: piece[d].variable for d in dims},
                **inner_coords,
                **{name: out[name].variable for name in other_coords},
            },
            attrs=template.attrs,
        )

    # map_blocks makes the other coordinates Dask arrays too; they are known now, so keep numpy.
    lazy = xr.map_blocks(block, carrier, template=template).assign_coords(other_coords)
    for name in lazy.variables:
        lazy[name].attrs = dict(template[name].attrs)
    lazy.attrs = dict(template.attrs)
    return lazy


def _direction(objective: str, maximize: bool | None) -> bool:
    if maximize is not None:
        return bool(maximize)
    return not objective.startswith(_MINIMISED)


def _block_best(
    values: np.ndarray, offsets: tuple[int, ...], shape: tuple[int, ...], maximize: bool
) -> tuple[int, np.ndarray, np.ndarray]:
    """One block's winners: (first gpus index, best value per GPU count, global flat index of the
    winner over the other dimensions, C order; the first on ties, as numpy's argmax)."""
    flat = values.reshape(values.shape[0], -1)
    local = np.argmax(flat, axis=1) if maximize else np.argmin(flat, axis=1)
    best = np.take_along_axis(flat, local[:, None], axis=1)[:, 0]
    unravelled = np.unravel_index(local, values.shape[1:])
    global_idx = tuple(u + o for u, o in zip(unravelled, offsets[1:], strict=True))
    where = np.ravel_multi_index(global_idx, shape[1:]) if shape[1:] else np.zeros_like(local)
    return offsets[0], best, np.asarray(where, dtype=np.int64)


def best_per_gpus(
    ds_or_args: xr.Dataset | Mapping[str, Any],
    objective: str = "throughput",
    *,
    maximize: bool | None = None,
    require_fit: bool = True,
    chunks: Mapping[str, int] | int | None = None,
    scheduler: str | None = None,
    num_workers: int | None = None,
) -> xr.Dataset:
    """The best configuration for each GPU count, found without materialising the sweep.

    ``ds_or_args`` is a (lazy or eager) prediction Dataset with a ``gpus`` dimension, or a mapping
    of :func:`predict_lazy` arguments (then ``chunks`` sets its blocks). ``objective`` names the
    variable to optimise (default ``throughput``, samples/s); ``maximize`` defaults to False for
    times, memory and byte counts and True otherwise. With ``require_fit`` (default) only points
    whose step fits in GPU memory (``fits``) compete; a GPU count where none fits gets NaN.
    ``scheduler``/``num_workers`` go to ``dask.compute`` (a ``distributed.Client`` in scope is used
    when none is given).

    Returns a Dataset on ``gpus``: the best ``objective`` value (its units) and, named like each other
    sweep dimension, the coordinate value that achieves it (its units). On ties the first point in
    C order of the sweep wins, as :func:`numpy.argmax` on the full grid; a dimension the objective
    does not vary along reports its first value.
    """
    _require_dask()
    import dask as dask_mod
    from dask import delayed

    if isinstance(ds_or_args, xr.Dataset):  # a Dataset is a Mapping too: test it first
        ds = ds_or_args
    elif isinstance(ds_or_args, Mapping):
        ds = predict_lazy(**dict(ds_or_args), chunks=chunks)
    else:
        raise DlexploreError(
            f"best_per_gpus takes a Dataset or a mapping of predict arguments, "
            f"got {type(ds_or_args).__name__}"
        )
    if objective not in ds.data_vars:
        raise DlexploreError(f"objective {objective!r} is not a variable; choose from {sorted(ds.data_vars)}")
    if "gpus" not in ds.dims:
        raise DlexploreError("best_per_gpus needs a sweep over gpus (a gpus dimension)")
    up = _direction(objective, maximize)
    var = ds[objective]
    others = [d for d in ds[objective].dims if d != "gpus"]
    var = var.transpose("gpus", *others)
    worst = -np.inf if up else np.inf
    if require_fit and "fits" in ds.data_vars:
        # Lazy broadcast: fits has fewer dimensions than the objective, Dask evaluates it per block.
        var = xr.where(ds["fits"], var, worst, keep_attrs=True).transpose("gpus", *others)
    data = var.data
    if not hasattr(data, "to_delayed"):
        data = _require_dask().from_array(np.asarray(data), chunks=data.shape or ())
    shape = data.shape
    starts = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in data.chunks]
    tasks = []
    for index, piece in np.ndenumerate(data.to_delayed(optimize_graph=False)):
        offsets = tuple(int(starts[axis][i]) for axis, i in enumerate(index))
        tasks.append(delayed(_block_best)(piece, offsets, shape, up))
    kwargs = {k: v for k, v in (("scheduler", scheduler), ("num_workers", num_workers)) if v is not None}
    results = dask_mod.compute(*tasks, **kwargs)

    n_gpus = shape[0]
    best = np.full(n_gpus, -np.inf if up else np.inf)
    where = np.full(n_gpus, np.iinfo(np.int64).max, dtype=np.int64)
    for g0, values, flat in results:
        sl = slice(g0, g0 + len(values))
        better = values > best[sl] if up else values < best[sl]
        tie = (values == best[sl]) & (flat < where[sl])
        take = better | tie
        best[sl] = np.where(take, values, best[sl])
        where[sl] = np.where(take, flat, where[sl])

    gpus = ds["gpus"]
    best = np.where(best == worst, np.nan, best)
    out = {objective: xr.DataArray(best, dims="gpus", attrs=dict(ds[objective].attrs))}
    idx = np.unravel_index(where, shape[1:]) if others else ()
    sweep_dims = [d for d in ds.dims if d != "gpus" and d in ds.coords]
    for d in sweep_dims:
        values = ds[d].values[idx[others.index(d)]] if d in others else np.repeat(ds[d].values[:1], n_gpus)
        attrs = dict(ds[d].attrs) or dict(zip(("units", "long_name"), VARIABLES.get(d, ()), strict=False))
        out[d] = xr.DataArray(values, dims="gpus", attrs=attrs)
    scalars = {name: c.variable for name, c in ds.coords.items() if c.ndim == 0}
    result = xr.Dataset(out, coords={"gpus": gpus.variable, **scalars})
    result.attrs.update(ds.attrs)
    result.attrs.update(
        objective=objective,
        direction="max" if up else "min",
        require_fit=int(require_fit),
        title=f"best {objective} per GPU count over {', '.join(sweep_dims) or 'nothing'}",
    )
    return result
