"""The workload catalog: networks to train, as layers derived from their definitions.

``data/catalog/workloads.csv`` names, for each entry, a *builder* and its configuration
(``resnet`` with ``depth=50``; ``transformer`` with ``layers=12,hidden=768,...``); the parameter
counts, FLOPs and activation sizes are derived here from the layer definitions, never typed in.
The builders and their counting rules are documented in :mod:`dlexplore.catalog._cnn` (CNNs, as
torchvision defines them) and :mod:`dlexplore.catalog._transformer` (BERT/GPT-style transformers).
In short:

- ``params``: trainable parameters, as ``sum(p.numel() for p in model.parameters())``.
- ``flops`` (forward, per sample): 2 FLOPs per multiply-add of convolutions, linear layers and
  attention matrix products; normalisation, activation functions, pooling, softmax, dropout, bias
  and residual adds count 0 (under 1% here, and memory-bound). A training step costs about 3x.
- ``activation_bytes`` (per sample, fp32): the tensors autograd keeps for the backward pass, each
  counted once; for transformers Korthikanti et al. (2022), stored at twice their 16-bit figure.
- A sample is one image (``sample_unit`` ``images``) or one token sequence (``sequences``).

Input bytes per sample (what the loader reads from storage):

- Images: the mean ImageNet JPEG, :data:`IMAGENET_JPEG_BYTES` = 115,440 bytes: the ILSVRC2012
  training archive ``ILSVRC2012_img_train.tar`` is 147,897,477,120 bytes (about 138 GiB) for
  1,281,167 images (Russakovsky et al. 2015); tar headers add under 1%.
- Token sequences: ``seq`` token ids at 2 bytes each when the vocabulary has fewer than 65,500
  entries, else 4, as Megatron-LM's preprocessed datasets store them (``best_fitting_dtype`` in
  ``megatron/data/indexed_dataset.py``: uint16, else int32).

Besides catalog names, :func:`workload` accepts ad-hoc specs ``"builder:config"``, e.g.
``"transformer:layers=24,hidden=1024,heads=16,seq=512,vocab=50257"``, its positional short form
``"transformer:24,1024,16,512,50257"`` (layers, hidden, heads, seq, vocab), or ``"resnet:200"``.

Kept whole: the workload catalog and the three forms a user file may give a workload in, which build
the same Workload through the same builders (:mod:`dlexplore.catalog._builders`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import pandas as pd

from .._data import data_dir
from ..errors import DlexploreError, InputFileError
from ._builders import (
    _BUILDERS,
    _REQUIRED,
    _TRANSFORMER_ARGS,
    _as_aliases,
    _as_int,
    _as_number,
    _as_str,
    _bad,
    _Builder,
    _get_builder,
    _parse_config,
    _resolve_args,
    _transformer_defaults,
    _unknown_key,
)
from ._registry import Registry
from ._types import Layer, Workload

__all__ = [
    "WORKLOADS",
    "IMAGENET_JPEG_BYTES",
    "workload",
    "workloads",
    "transformer",
    "workload_from_dict",
    "with_sequence",
]

#: Mean bytes of one ILSVRC2012 training JPEG: 147,897,477,120-byte archive / 1,281,167 images.
IMAGENET_JPEG_BYTES = 115_440.0

_TRANSFORMER_SOURCE = (
    "ad-hoc transformer; FLOPs as Narayanan et al. 2021 (Megatron-LM), activations as Korthikanti et al. 2022"
)

# ---------------------------------------------------------------------------------------------
# Building workloads
# ---------------------------------------------------------------------------------------------


def _default_input_bytes(builder: _Builder, config: Mapping[str, Any]) -> float:
    if builder.kind == "transformer":
        return float(config["seq"] * (2 if config["vocab"] < 65_500 else 4))
    return IMAGENET_JPEG_BYTES


def _spec_name(builder_name: str, builder: _Builder, raw: Mapping[str, Any]) -> str:
    given = [k for k in builder.args if k in raw and raw[k] is not None]
    return f"{builder_name}:" + ",".join(f"{k}={_fmt(raw[k])}" for k in given)


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _build(
    builder_name: str,
    raw: Mapping[str, object],
    *,
    where: str,
    prefix: str = "",
    name: str | None = None,
    aliases: tuple[str, ...] = (),
    source: str | None = None,
    description: str = "",
    input_bytes_per_sample: float | None = None,
    sample_unit: str | None = None,
) -> Workload:
    builder_name, builder = _get_builder(builder_name, where)
    config = _resolve_args(builder, raw, where, prefix)
    if builder.kind == "transformer":
        config = _transformer_defaults(config, where)
    layers = builder.build(config, where)
    if name is None:
        name = _spec_name(builder_name, builder, {k: config[k] for k in raw})
    return Workload(
        name=name,
        kind=builder.kind,
        layers=layers,
        input_bytes_per_sample=float(
            _default_input_bytes(builder, config)
            if input_bytes_per_sample is None
            else input_bytes_per_sample
        ),
        sample_unit=sample_unit or builder.sample_unit,
        source=source
        or (
            _TRANSFORMER_SOURCE
            if builder.kind == "transformer"
            else f"ad-hoc {builder_name}; architecture as torchvision.models"
        ),
        aliases=aliases,
        description=description,
        config=config,
    )


def transformer(
    layers: int,
    hidden: int,
    heads: int,
    seq: int,
    vocab: int,
    *,
    name: str | None = None,
    ffn_hidden: int | None = None,
    causal: bool = False,
    tied_embeddings: bool = True,
    max_positions: int | None = None,
    type_vocab: int = 0,
    pooler: bool = False,
    prenorm: bool | None = None,
    source: str | None = None,
    input_bytes_per_sample: float | None = None,
    aliases: Iterable[str] = (),
    description: str = "",
) -> Workload:
    """A BERT/GPT-style transformer encoder or decoder as a :class:`Workload`.

    ``layers`` transformer layers of width ``hidden`` with ``heads`` attention heads, on sequences
    of ``seq`` tokens from a ``vocab``-entry vocabulary; the feed-forward width ``ffn_hidden``
    defaults to ``4 * hidden``, the learned position table ``max_positions`` to ``seq``. ``causal``
    marks a decoder (GPT) and selects pre-LN unless ``prenorm`` says otherwise; ``type_vocab`` adds
    BERT's token-type embeddings, ``pooler`` its pooler. With ``tied_embeddings`` the output
    projection shares the word embeddings. ``input_bytes_per_sample`` defaults to ``seq`` token ids
    of 2 bytes (4 for vocabularies of 65,500 or more). ``config`` of the result holds every size,
    defaults filled in. Counting rules: :mod:`dlexplore.catalog._transformer`.
    """
    raw = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "seq": seq,
        "vocab": vocab,
        "ffn_hidden": ffn_hidden,
        "causal": causal,
        "tied_embeddings": tied_embeddings,
        "max_positions": max_positions,
        "type_vocab": type_vocab,
        "pooler": pooler,
        "prenorm": prenorm,
    }
    if name is None:
        # Name it by its spec, leaving out arguments at their defaults.
        defaults = {k: d for k, (_, d) in _TRANSFORMER_ARGS.items()}
        given = {k: v for k, v in raw.items() if defaults[k] is _REQUIRED or v != defaults[k]}
        name = _spec_name("transformer", _BUILDERS["transformer"], given)
    if input_bytes_per_sample is not None:
        input_bytes_per_sample = _as_number(input_bytes_per_sample, "transformer()", "input_bytes_per_sample")
    return _build(
        "transformer",
        raw,
        where="transformer()",
        name=name,
        source=source,
        aliases=_as_aliases(aliases if isinstance(aliases, str) else list(aliases), "transformer()"),
        description=description,
        input_bytes_per_sample=input_bytes_per_sample,
    )


@lru_cache(maxsize=256)
def _from_spec(spec: str) -> Workload:
    where = f"workload spec {spec!r}"
    head, _, body = spec.partition(":")
    builder_name, builder = _get_builder(head, where)
    raw = _parse_config(body, builder, where)
    if not raw and any(d is _REQUIRED for _, d in builder.args.values()):
        names = ", ".join(builder.positional)
        raise DlexploreError(f"{where}: expected {builder_name}:{names} or key=value pairs after the colon")
    return _build(builder_name, raw, where=where)


_COMMON_KEYS = ("name", "aliases", "source", "description", "sample_unit", "input_bytes_per_sample")
_TOTAL_KEYS = ("params", "flops_per_sample", "activation_bytes_per_sample")
_LAYER_KEYS = ("name", "kind", "params", "flops", "activation_bytes")


def workload_from_dict(entry: Mapping[str, Any], *, origin: str) -> Workload:
    """Build a :class:`Workload` from one entry of a user's file (parsed JSON).

    One of three forms, with ``name`` and optional ``aliases`` (list or ``;``-separated),
    ``source`` (default ``"user file {origin}"``), ``description`` and ``sample_unit``:

    - ``{"transformer": {"layers", "hidden", "heads", "seq", "vocab", ...}}``, the arguments of
      :func:`transformer`; ``input_bytes_per_sample`` optional. (Likewise ``{"builder": "resnet",
      "config": {"depth": 200}}`` for the other builders.)
    - ``{"layers": [{"name", "params", "flops", "activation_bytes", "kind"?}, ...],
      "input_bytes_per_sample"}``: layers in forward order; ``flops`` is forward FLOPs per
      sample, ``activation_bytes`` the fp32 bytes kept for backward per sample.
    - ``{"params", "flops_per_sample", "activation_bytes_per_sample", "input_bytes_per_sample"}``:
      totals only, one layer (so gradients are one message, ready at the end of backward).

    ``origin`` (e.g. ``"my.json entry 3"``) starts every error message, which names the key and
    what was expected.
    """
    if not isinstance(entry, Mapping):
        raise DlexploreError(
            f"{origin}: expected an object with 'name' and a model, got {type(entry).__name__}"
        )
    form = _form_of(entry, origin)

    if "name" not in entry:
        raise DlexploreError(f"{origin}: name: missing; expected a non-empty string")
    name = _as_str(entry["name"], origin, "name")
    meta: dict[str, Any] = {
        "name": name,
        "aliases": _as_aliases(entry.get("aliases"), origin),
        "source": _as_str(entry["source"], origin, "source") if "source" in entry else f"user file {origin}",
        "description": _as_str(entry.get("description", ""), origin, "description", empty=True),
        "sample_unit": _as_str(entry["sample_unit"], origin, "sample_unit")
        if "sample_unit" in entry
        else None,
    }
    input_bytes = None
    if "input_bytes_per_sample" in entry:
        input_bytes = _as_number(entry["input_bytes_per_sample"], origin, "input_bytes_per_sample")
    elif form in ("layers", "totals"):
        raise DlexploreError(
            f"{origin}: input_bytes_per_sample: missing; expected a non-negative number "
            "(bytes the loader reads per sample)"
        )

    if form == "transformer":
        spec = entry["transformer"]
        if not isinstance(spec, Mapping):
            raise _bad(origin, "transformer", "an object of transformer sizes", spec)
        return _build(
            "transformer",
            spec,
            where=origin,
            prefix="transformer.",
            input_bytes_per_sample=input_bytes,
            **meta,
        )
    if form == "builder":
        builder_name = entry["builder"]
        _, builder = _get_builder(builder_name, f"{origin}: builder")
        config = entry.get("config", {})
        if isinstance(config, str):
            config = _parse_config(config, builder, f"{origin}: config")
        if not isinstance(config, Mapping):
            raise _bad(origin, "config", "an object or a 'key=value,...' string", config)
        return _build(
            builder_name, config, where=origin, prefix="config.", input_bytes_per_sample=input_bytes, **meta
        )

    layers = _custom_layers(entry, form, origin)
    return Workload(
        name=name,
        kind="custom",
        layers=layers,
        input_bytes_per_sample=float(input_bytes),
        sample_unit=meta["sample_unit"] or "samples",
        source=meta["source"],
        aliases=meta["aliases"],
        description=meta["description"],
        config={},
    )


def _form_of(entry: Mapping[str, Any], origin: str) -> str:
    """Which of :func:`workload_from_dict`'s forms ``entry`` is, its keys checked."""
    forms = [k for k in ("transformer", "builder", "layers") if k in entry]
    if any(k in entry for k in _TOTAL_KEYS):
        forms.append("totals")
    if len(forms) != 1:
        found = f"found {', '.join(forms)}" if forms else "found none"
        raise DlexploreError(
            f"{origin}: expected exactly one of 'transformer', 'builder', 'layers' or the totals "
            f"{', '.join(repr(k) for k in _TOTAL_KEYS)}; {found}"
        )
    form = forms[0]
    form_keys = {
        "transformer": ("transformer",),
        "builder": ("builder", "config"),
        "layers": ("layers",),
        "totals": _TOTAL_KEYS,
    }[form]
    allowed = (*_COMMON_KEYS, *form_keys)
    for key in entry:
        if key not in allowed:
            raise _unknown_key(origin, str(key), allowed)

    return form


def _custom_layers(entry: Mapping[str, Any], form: str, origin: str) -> tuple[Layer, ...]:
    """The layers of a ``layers`` or ``totals`` entry."""
    if form == "totals":
        missing = [k for k in _TOTAL_KEYS if k not in entry]
        if missing:
            raise DlexploreError(
                f"{origin}: missing {', '.join(missing)}; the totals form needs all of "
                f"{', '.join(_TOTAL_KEYS)}"
            )
        return (
            Layer(
                "model",
                "model",
                _as_int(entry["params"], 0, origin, "params"),
                _as_number(entry["flops_per_sample"], origin, "flops_per_sample"),
                _as_number(entry["activation_bytes_per_sample"], origin, "activation_bytes_per_sample"),
            ),
        )
    else:
        items = entry["layers"]
        if not isinstance(items, list) or not items:
            raise _bad(origin, "layers", "a non-empty list of layer objects", items)
        return tuple(_layer_from_dict(item, origin, f"layers[{i}]") for i, item in enumerate(items))


def _layer_from_dict(item: object, origin: str, at: str) -> Layer:
    if not isinstance(item, Mapping):
        raise _bad(origin, at, "an object with name, params, flops, activation_bytes", item)
    for key in item:
        if key not in _LAYER_KEYS:
            raise _unknown_key(origin, str(key), _LAYER_KEYS, f"{at}.")
    missing = [k for k in _LAYER_KEYS if k != "kind" and k not in item]
    if missing:
        raise DlexploreError(
            f"{origin}: {at}: missing {', '.join(missing)}; a layer needs name, params, flops "
            "and activation_bytes"
        )
    return Layer(
        name=_as_str(item["name"], origin, f"{at}.name"),
        kind=_as_str(item.get("kind", "layer"), origin, f"{at}.kind"),
        params=_as_int(item["params"], 0, origin, f"{at}.params"),
        flops=_as_number(item["flops"], origin, f"{at}.flops"),
        activation_bytes=_as_number(item["activation_bytes"], origin, f"{at}.activation_bytes"),
    )


# ---------------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------------

_CSV_COLUMNS = (
    "name",
    "aliases",
    "builder",
    "config",
    "input_bytes_per_sample",
    "sample_unit",
    "source",
    "description",
)


def _load_csv(registry: Registry[Workload]) -> None:
    path = data_dir() / "catalog" / "workloads.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header: list[str] | None = None
        for cells in reader:
            if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
                continue  # '#' lines document the file
            line_no = reader.line_num
            if header is None:
                header = [c.strip() for c in cells]
                if tuple(header) != _CSV_COLUMNS:
                    raise InputFileError(
                        path,
                        f"expected the columns {', '.join(_CSV_COLUMNS)}, got {cells}",
                        line=line_no,
                    )
                continue
            if len(cells) != len(header):
                raise InputFileError(path, f"expected {len(header)} columns, got {len(cells)}", line=line_no)
            try:
                registry.add(
                    _workload_from_row(dict(zip(header, cells, strict=True)), f"{path}, line {line_no}")
                )
            except DlexploreError as exc:
                message = str(exc).removeprefix(f"{path}, line {line_no}: ")
                raise InputFileError(path, message, line=line_no) from None


def _workload_from_row(row: dict[str, str], where: str) -> Workload:
    _, builder = _get_builder(row["builder"], where)
    input_bytes = row["input_bytes_per_sample"].strip()
    return _build(
        row["builder"],
        _parse_config(row["config"], builder, where),
        where=where,
        name=_as_str(row["name"], where, "name"),
        aliases=_as_aliases(row["aliases"], where),
        source=_as_str(row["source"], where, "source"),
        description=row["description"].strip(),
        input_bytes_per_sample=(
            _as_number(input_bytes, where, "input_bytes_per_sample") if input_bytes else None
        ),
        sample_unit=row["sample_unit"].strip() or None,
    )


#: The bundled workloads, by name (case-insensitive, with aliases).
WORKLOADS: Registry[Workload] = Registry("workload")
_load_csv(WORKLOADS)


def workload(name: str | Workload) -> Workload:
    """Return the workload called ``name`` (case-insensitive; aliases accepted).

    Also accepts an ad-hoc spec ``"builder:config"`` (see the module docstring), e.g.
    ``"transformer:24,1024,16,512,50257"``; a :class:`Workload` is returned unchanged. An unknown
    name raises :class:`~dlexplore.errors.UnknownNameError` suggesting the nearest ids; a malformed
    spec raises :class:`~dlexplore.errors.DlexploreError` saying what was expected.
    """
    if isinstance(name, Workload):
        return name
    if not isinstance(name, str):
        raise DlexploreError(f"a workload is a name, a spec or a Workload, got {name!r}")
    if ":" in name and name not in WORKLOADS:
        return _from_spec(name.strip())
    return WORKLOADS.get(name)


def with_sequence(name: str | Workload, seq: int | None) -> Workload:
    """The transformer ``name`` on sequences of ``seq`` tokens (its own length when None): the same
    sizes, rebuilt so that FLOPs and activations follow, named ``"<name>@seq<seq>"``. The position
    table grows to ``seq`` where it is shorter. Other workloads take no ``seq``."""
    wl = workload(name)
    if seq is None:
        return wl
    if wl.kind != "transformer":
        raise DlexploreError(f"seq applies to transformer workloads; {wl.name!r} is a {wl.kind}")
    seq = _as_int(seq, 1, "with_sequence()", "seq")
    if seq == wl.config["seq"]:
        return wl
    return _resized(wl, seq)


@lru_cache(maxsize=64)
def _resized(wl: Workload, seq: int) -> Workload:
    cfg = dict(wl.config)
    cfg["seq"] = seq
    cfg["max_positions"] = max(cfg["max_positions"], seq)
    return transformer(**cfg, name=f"{wl.name}@seq{seq}", source=wl.source, description=wl.description)


def workloads() -> pd.DataFrame:
    """The catalog as a table, one row per workload.

    Columns: ``name``, ``aliases`` (``;``-joined), ``kind``, ``params`` (count),
    ``flops_per_sample`` (forward FLOPs), ``activation_bytes_per_sample`` (fp32 bytes),
    ``input_bytes_per_sample`` (bytes), ``sample_unit``, ``layers`` (count of layers),
    ``gradient_tensors`` (layers with parameters: the gradient messages of one step before any
    bucketing), ``source``, ``description``.
    """
    rows = [
        {
            "name": w.name,
            "aliases": ";".join(w.aliases),
            "kind": w.kind,
            "params": w.params,
            "flops_per_sample": w.flops_per_sample,
            "activation_bytes_per_sample": w.activation_bytes_per_sample,
            "input_bytes_per_sample": w.input_bytes_per_sample,
            "sample_unit": w.sample_unit,
            "layers": len(w.layers),
            "gradient_tensors": len(w.gradient_params_backward),
            "source": w.source,
            "description": w.description,
        }
        for w in WORKLOADS
    ]
    return pd.DataFrame(rows)
