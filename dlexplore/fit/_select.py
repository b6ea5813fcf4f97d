"""Select measured points with a small filter language: ``gpus<=8``, ``precision == fp32 and gpus > 1``.

The expression is parsed here, token by token, and evaluated against a table's columns; nothing in
it is ever handed to Python's ``eval``, so ``__import__('os')`` is a syntax error, not a call.

Grammar (keywords are case-insensitive)::

    expr        := or_expr
    or_expr     := and_expr (("or" | "|" | "||") and_expr)*
    and_expr    := not_expr (("and" | "&" | "&&") not_expr)*
    not_expr    := ("not" | "!") not_expr | "(" expr ")" | comparison
    comparison  := NAME OP value
                 | value OP NAME OP value          (a range: 2 <= gpus <= 8)
                 | NAME ["not"] "in" values        (workload in resnet50,vgg16)
    OP          := "==" | "=" | "!=" | "<" | "<=" | ">" | ">="
    values      := value ("," value)*  |  "(" value ("," value)* ")"  |  "[" ... "]"
    value       := a number, a quoted string ('V100 16GB', "x"), or a bare word (fp32, V100-16GB)

A ``NAME`` is a column of the table (``gpus``, ``batch_size``, ``workload``, ``precision`` ...).
Numbers compare with numeric columns; words and quoted strings with text columns, ignoring case.
On a text column only ``==``, ``!=`` and ``in`` apply. A text value that no row has is an error
(it is nearly always a typo), and so is an expression that selects no row.

Every error is a :class:`~dlexplore.errors.DlexploreError` that quotes the expression, gives the
1-based character position and points at it with a caret.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DlexploreError, suggest

__all__ = ["parse", "select", "Selection"]

_OPERATORS = ("==", "!=", "<=", ">=", "<", ">", "=")
_KEYWORDS = {"and", "or", "not", "in"}
# A bare word runs until a space or a character with a meaning of its own.
_WORD = re.compile(r"[^\s()\[\],'\"<>=!&|]+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "string", "op", "and", "or", "not", "in", "(", ")", "[", "]", ",", "end"
    text: str
    pos: int  # 0-based offset in the expression


def _error(expression: str, pos: int, message: str) -> DlexploreError:
    caret = " " * pos + "^"
    return DlexploreError(
        f"fit_on {expression!r}, position {pos + 1}: {message}\n    {expression}\n    {caret}"
    )


def _tokens(expression: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(expression)
    while i < n:
        ch = expression[i]
        if ch.isspace():
            i += 1
            continue
        if ch in "()[],":
            out.append(_Token(ch, ch, i))
            i += 1
            continue
        if ch in "'\"":
            end = expression.find(ch, i + 1)
            if end < 0:
                raise _error(expression, i, f"unterminated string (no closing {ch})")
            out.append(_Token("string", expression[i + 1 : end], i))
            i = end + 1
            continue
        if expression.startswith(("&&", "||"), i):
            out.append(_Token("and" if ch == "&" else "or", expression[i : i + 2], i))
            i += 2
            continue
        if ch in "&|":
            out.append(_Token("and" if ch == "&" else "or", ch, i))
            i += 1
            continue
        op = next((o for o in _OPERATORS if expression.startswith(o, i)), None)
        if op is not None:
            out.append(_Token("op", "==" if op == "=" else op, i))
            i += len(op)
            continue
        if ch == "!":
            out.append(_Token("not", ch, i))
            i += 1
            continue
        m = _WORD.match(expression, i)
        if m is None:  # every other character starts a word; kept as a guard
            raise _error(expression, i, f"unexpected character {ch!r}")
        word = m.group(0)
        lowered = word.lower()
        out.append(_Token(lowered if lowered in _KEYWORDS else "word", word, i))
        i = m.end()
    out.append(_Token("end", "", len(expression)))
    return out


# --- the syntax tree --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    text: str
    quoted: bool
    pos: int

    @property
    def number(self) -> float | None:
        if self.quoted or not _NUMBER.fullmatch(self.text):
            return None
        return float(self.text)


@dataclass(frozen=True)
class _Compare:
    column: str
    column_pos: int
    op: str
    values: tuple[_Value, ...]  # one for a comparison, several for "in"
    negate_in: bool = False


@dataclass(frozen=True)
class _Bool:
    op: str  # "and", "or"
    items: tuple[Node, ...]


@dataclass(frozen=True)
class _Not:
    item: Node


Node = _Compare | _Bool | _Not


class _Parser:
    def __init__(self, expression: str):
        self.expression = expression
        self.tokens = _tokens(expression)
        self.i = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def fail(self, token: _Token, expected: str) -> DlexploreError:
        found = "the end of the expression" if token.kind == "end" else repr(token.text)
        return _error(self.expression, token.pos, f"expected {expected}, found {found}")

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise _error(
                self.expression, 0, "the expression is empty; expected a condition such as 'gpus<=8'"
            )
        node = self.or_expr()
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "'and', 'or' or the end of the expression")
        return node

    def or_expr(self) -> Node:
        items = [self.and_expr()]
        while self.peek().kind == "or":
            self.take()
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else _Bool("or", tuple(items))

    def and_expr(self) -> Node:
        items = [self.not_expr()]
        while self.peek().kind == "and":
            self.take()
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else _Bool("and", tuple(items))

    def not_expr(self) -> Node:
        token = self.peek()
        if token.kind == "not":
            self.take()
            return _Not(self.not_expr())
        if token.kind == "(":
            self.take()
            node = self.or_expr()
            if self.peek().kind != ")":
                raise self.fail(self.peek(), "')'")
            self.take()
            return node
        return self.comparison()

    def value(self) -> _Value:
        token = self.take()
        if token.kind not in ("word", "string"):
            raise self.fail(token, "a value (a number, a word or a quoted string)")
        return _Value(token.text, token.kind == "string", token.pos)

    def comparison(self) -> Node:
        first = self.take()
        if first.kind not in ("word", "string"):
            raise self.fail(first, "a column name such as 'gpus'")
        token = self.peek()
        if token.kind == "in" or (token.kind == "not" and self.tokens[self.i + 1].kind == "in"):
            negate = token.kind == "not"
            self.take()
            if negate:
                self.take()
            return _Compare(self.column(first), first.pos, "in", self.values(), negate)
        if token.kind != "op":
            raise self.fail(
                token, f"a comparison ('==', '!=', '<', '<=', '>', '>=') or 'in' after {first.text!r}"
            )
        op = self.take().text
        second = self.take()
        if second.kind not in ("word", "string"):
            raise self.fail(second, "a value (a number, a word or a quoted string)")
        if self.peek().kind == "op":  # a range: low <= column <= high
            op2 = self.take().text
            third = self.value()
            column = self.column(second)
            flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
            low = _Value(first.text, first.kind == "string", first.pos)
            return _Bool(
                "and",
                (_Compare(column, second.pos, flip[op], (low,)), _Compare(column, second.pos, op2, (third,))),
            )
        return _Compare(
            self.column(first), first.pos, op, (_Value(second.text, second.kind == "string", second.pos),)
        )

    def column(self, token: _Token) -> str:
        if token.kind != "word" or _NUMBER.fullmatch(token.text):
            raise self.fail(token, "a column name such as 'gpus'")
        return token.text

    def values(self) -> tuple[_Value, ...]:
        closing = {"(": ")", "[": "]"}.get(self.peek().kind)
        if closing:
            self.take()
        items = [self.value()]
        while self.peek().kind == ",":
            self.take()
            items.append(self.value())
        if closing:
            if self.peek().kind != closing:
                raise self.fail(self.peek(), f"',' or {closing!r}")
            self.take()
        return tuple(items)


def parse(expression: str) -> Node:
    """Parse a selection expression (module docstring) into a tree; raises on a syntax error."""
    if not isinstance(expression, str):
        raise DlexploreError(f"fit_on: expected an expression string, got {type(expression).__name__}")
    return _Parser(expression).parse()


# --- evaluation ---------------------------------------------------------------------------------


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _evaluate(node: Node, frame: pd.DataFrame, expression: str) -> np.ndarray:
    if isinstance(node, _Bool):
        masks = [_evaluate(item, frame, expression) for item in node.items]
        return np.logical_and.reduce(masks) if node.op == "and" else np.logical_or.reduce(masks)
    if isinstance(node, _Not):
        return ~_evaluate(node.item, frame, expression)
    columns = {str(c).lower(): c for c in frame.columns}
    key = columns.get(node.column.lower())
    if key is None:
        hint = suggest(node.column, [str(c) for c in frame.columns])
        raise _error(
            expression,
            node.column_pos,
            f"unknown column {node.column!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; the points have columns {', '.join(map(str, frame.columns))}",
        )
    series = frame[key]
    if _is_numeric(series):
        values = series.to_numpy(dtype=float)
        numbers = []
        for v in node.values:
            if v.number is None:
                raise _error(
                    expression, v.pos, f"{node.column} is numeric; expected a number, found {v.text!r}"
                )
            numbers.append(v.number)
        if node.op == "in":
            mask = np.isin(values, numbers)
            return ~mask if node.negate_in else mask
        x = numbers[0]
        with np.errstate(invalid="ignore"):
            return {
                "==": values == x,
                "!=": values != x,
                "<": values < x,
                "<=": values <= x,
                ">": values > x,
                ">=": values >= x,
            }[node.op]
    if node.op not in ("==", "!=", "in"):
        raise _error(
            expression,
            node.values[0].pos,
            f"{node.column} is text; only '==', '!=' and 'in' apply to it, not {node.op!r}",
        )
    text = series.astype(str).str.lower().to_numpy()
    present = sorted(set(series.astype(str)))
    wanted = []
    for v in node.values:
        if v.text.lower() not in set(text):
            hint = suggest(v.text, present)
            raise _error(
                expression,
                v.pos,
                f"no point has {node.column} {v.text!r}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; the points have {', '.join(present)}",
            )
        wanted.append(v.text.lower())
    mask = np.isin(text, wanted)
    if node.op == "!=" or (node.op == "in" and node.negate_in):
        return ~mask
    return mask


Selection = str | np.ndarray | pd.Series | list | Callable[[pd.DataFrame], Any] | None


def select(frame: pd.DataFrame, fit_on: Selection) -> np.ndarray:
    """Boolean mask of the rows of ``frame`` that ``fit_on`` selects.

    ``fit_on`` is an expression (module docstring), a boolean sequence with one entry per row, a
    callable that takes ``frame`` and returns such a sequence, or ``None`` (every row). Raises
    :class:`~dlexplore.errors.DlexploreError` when it is malformed or selects no row.
    """
    n = len(frame)
    if fit_on is None:
        mask = np.ones(n, dtype=bool)
        what = "None"
    elif isinstance(fit_on, str):
        mask = _evaluate(parse(fit_on), frame, fit_on)
        what = repr(fit_on)
    else:
        what = "the mask" if not callable(fit_on) else f"the callable {getattr(fit_on, '__name__', '')}"
        result = fit_on(frame.copy()) if callable(fit_on) else fit_on
        values = np.asarray(result)
        if values.dtype != bool:
            raise DlexploreError(
                f"fit_on: {what} gave dtype {values.dtype}; expected booleans, one per point ({n})"
            )
        if values.shape != (n,):
            raise DlexploreError(
                f"fit_on: {what} has shape {values.shape}; expected one boolean per point ({n},)"
            )
        mask = values.copy()
    if n and not mask.any():
        raise DlexploreError(f"fit_on {what} selects none of the {n} points; expected at least one")
    return mask
