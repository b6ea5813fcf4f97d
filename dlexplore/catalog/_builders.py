"""The builders a workload is made with (``resnet``, ``vgg``, ``transformer``, ...: the networks of
:mod:`dlexplore.catalog._cnn` and :mod:`dlexplore.catalog._transformer`), their arguments and how a
configuration's values are checked; every error names the entry and the key. Used by
:mod:`dlexplore.catalog.workloads`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DlexploreError, suggest
from . import _cnn
from ._transformer import transformer_layers
from ._types import Layer

# ---------------------------------------------------------------------------------------------
# Builders and their arguments
# ---------------------------------------------------------------------------------------------

_REQUIRED = object()


@dataclass(frozen=True)
class _Builder:
    kind: str  # the Workload.kind of what it builds
    sample_unit: str
    # name -> (check, default): check is "int>0", "int>=0" or "bool"; the default is a value,
    # _REQUIRED, or None for one derived from the others.
    args: dict[str, tuple[str, Any]]
    positional: tuple[str, ...]  # order of the positional short form of a spec
    build: Callable[[dict[str, Any], str], tuple[Layer, ...]]  # (resolved args, where) -> layers


def _cnn_builder(
    function: Callable[..., tuple[Layer, ...]],
    args: dict[str, tuple[str, Any]],
    positional: tuple[str, ...] = (),
    image_size: int = 224,
) -> _Builder:
    def build(config: dict[str, Any], where: str) -> tuple[Layer, ...]:
        try:
            return function(**config)
        except ValueError as exc:  # an unsupported depth, or an image too small for the network
            raise DlexploreError(f"{where}: {exc}") from None

    image = {"image_size": ("int>0", image_size), "num_classes": ("int>0", 1000)}
    return _Builder("cnn", "images", {**args, **image}, positional, build)


def _transformer_defaults(config: dict[str, Any], where: str) -> dict[str, Any]:
    """Fill the derived defaults of transformer arguments and check that the sizes fit together."""
    c = dict(config)
    if c.get("ffn_hidden") is None:
        c["ffn_hidden"] = 4 * c["hidden"]
    if c.get("max_positions") is None:
        c["max_positions"] = c["seq"]
    if c.get("prenorm") is None:
        c["prenorm"] = c["causal"]
    if c["hidden"] % c["heads"]:
        raise DlexploreError(f"{where}: hidden ({c['hidden']}) must be a multiple of heads ({c['heads']})")
    if c["max_positions"] < c["seq"]:
        raise DlexploreError(
            f"{where}: max_positions ({c['max_positions']}) must be at least seq ({c['seq']}): "
            "a sequence cannot be longer than the learned position table"
        )
    return c


def _build_transformer(config: dict[str, Any], where: str) -> tuple[Layer, ...]:
    c = {k: v for k, v in config.items() if k != "causal"}  # causal only sets the prenorm default
    return transformer_layers(**c)


_TRANSFORMER_ARGS: dict[str, tuple[str, Any]] = {
    "layers": ("int>0", _REQUIRED),
    "hidden": ("int>0", _REQUIRED),
    "heads": ("int>0", _REQUIRED),
    "seq": ("int>0", _REQUIRED),
    "vocab": ("int>0", _REQUIRED),
    "ffn_hidden": ("int>0", None),  # None: 4 * hidden
    "causal": ("bool", False),
    "tied_embeddings": ("bool", True),
    "max_positions": ("int>0", None),  # None: seq
    "type_vocab": ("int>=0", 0),
    "pooler": ("bool", False),
    "prenorm": ("bool", None),  # None: same as causal (GPT pre-LN, BERT post-LN)
}

_BUILDERS: dict[str, _Builder] = {
    "alexnet": _cnn_builder(_cnn.alexnet, {}),
    "vgg": _cnn_builder(_cnn.vgg, {"depth": ("int>0", _REQUIRED), "batch_norm": ("bool", False)}, ("depth",)),
    "resnet": _cnn_builder(_cnn.resnet, {"depth": ("int>0", _REQUIRED)}, ("depth",)),
    "googlenet": _cnn_builder(_cnn.googlenet, {"aux": ("bool", False)}),
    # Inception-v3 looks at 299x299 images.
    "inception_v3": _cnn_builder(_cnn.inception_v3, {"aux": ("bool", True)}, image_size=299),
    "transformer": _Builder(
        "transformer",
        "sequences",
        _TRANSFORMER_ARGS,
        ("layers", "hidden", "heads", "seq", "vocab"),
        _build_transformer,
    ),
}


def _get_builder(name: object, where: str) -> tuple[str, _Builder]:
    key = str(name).strip().lower().replace("-", "_") if isinstance(name, str) else None
    if key not in _BUILDERS:
        raise DlexploreError(f"{where}: unknown builder {name!r}; expected one of {', '.join(_BUILDERS)}")
    return key, _BUILDERS[key]


# ---------------------------------------------------------------------------------------------
# Checking values
# ---------------------------------------------------------------------------------------------


def _bad(where: str, key: str, expected: str, value: object) -> DlexploreError:
    return DlexploreError(f"{where}: {key}: expected {expected}, got {value!r}")


def _as_int(value: object, minimum: int, where: str, key: str) -> int:
    expected = "a positive integer" if minimum > 0 else "a non-negative integer"
    result: int | None = None
    if isinstance(value, bool):
        result = None
    elif isinstance(value, int):
        result = value
    elif isinstance(value, float) and value.is_integer():
        result = int(value)
    elif isinstance(value, str):
        try:
            result = int(value.strip())
        except ValueError:
            result = None
    if result is None or result < minimum:
        raise _bad(where, key, expected, value)
    return result


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _as_bool(value: object, where: str, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise _bad(where, key, "true or false", value)


def _as_number(value: object, where: str, key: str) -> float:
    """A finite, non-negative number (int, float, or a numeric string)."""
    result: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            result = None
    if result is None or not math.isfinite(result) or result < 0:
        raise _bad(where, key, "a non-negative number", value)
    return result


def _as_str(value: object, where: str, key: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise _bad(where, key, "a string" if empty else "a non-empty string", value)
    return value.strip()


def _as_aliases(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[object] = value.split(";")
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise _bad(where, "aliases", "a list of strings or a ';'-separated string", value)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise _bad(where, "aliases", "a list of strings or a ';'-separated string", value)
        if item.strip():
            out.append(item.strip())
    return tuple(out)


def _unknown_key(where: str, key: str, allowed: Iterable[str], prefix: str = "") -> DlexploreError:
    allowed = list(allowed)
    close = suggest(key, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return DlexploreError(f"{where}: {prefix}{key}: unknown key{hint}; expected one of {', '.join(allowed)}")


def _resolve_args(
    builder: _Builder, raw: Mapping[str, object], where: str, prefix: str = ""
) -> dict[str, Any]:
    """Check ``raw`` against ``builder``'s arguments; return them all, defaults filled in."""
    for key in raw:
        if key not in builder.args:
            raise _unknown_key(where, str(key), builder.args, prefix)
    resolved: dict[str, Any] = {}
    missing = []
    for key, (kind, default) in builder.args.items():
        if key not in raw or (raw[key] is None and default is None):
            if default is _REQUIRED:
                missing.append(key)
            resolved[key] = default
            continue
        value = raw[key]
        if kind == "bool":
            resolved[key] = _as_bool(value, where, prefix + key)
        else:
            resolved[key] = _as_int(value, 1 if kind == "int>0" else 0, where, prefix + key)
    if missing:
        raise DlexploreError(f"{where}: missing {', '.join(prefix + m for m in missing)}")
    return resolved


def _parse_config(text: str, builder: _Builder, where: str) -> dict[str, str]:
    """Parse ``"k=v,k=v"``; values before the first ``k=v`` fill ``builder.positional`` in order."""
    raw: dict[str, str] = {}
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    n_positional = 0
    for item in items:
        if not item:
            raise DlexploreError(f"{where}: empty item in {text!r}")
        key, eq, value = item.partition("=")
        if eq:
            key = key.strip()
            if key in raw:
                raise DlexploreError(f"{where}: {key} given twice")
            raw[key] = value.strip()
            continue
        if len(raw) > n_positional:
            raise DlexploreError(
                f"{where}: positional value {item!r} after key=value items; positional values "
                f"({', '.join(builder.positional) or 'none'}) come first"
            )
        if n_positional >= len(builder.positional):
            raise DlexploreError(
                f"{where}: too many positional values; expected at most "
                f"{len(builder.positional)} ({', '.join(builder.positional) or 'none'})"
            )
        raw[builder.positional[n_positional]] = item
        n_positional += 1
    return raw
