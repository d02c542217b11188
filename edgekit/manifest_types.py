"""The JSON types a manifest field may have (``manifest_schema`` builds the schema from them),
the shapes several sections share (a file, a tensor, decode settings), and the checks that
hold anywhere in the document: numbers finite, text valid Unicode.

A check that fails raises ``Mismatch`` naming the field (``model.meta.conditioning``), what it
expected and the value found; ``validate_manifest`` turns that into one ``BundleError`` line."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from edgekit.limits import MAX_STEPS

# A required field that is absent: what ``Mismatch.value`` holds then.
MISSING = object()


class Mismatch(Exception):
    def __init__(self, where: str, expected: str, value: Any):
        super().__init__(where)
        self.where, self.expected, self.value = where, expected, value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f"{where}[{key!r}]"


class Type:
    """One JSON type a field must have; ``check`` raises Mismatch naming the field."""

    expected = "a value"

    def check(self, value: Any, where: str) -> None:
        if not self.accepts(value):
            raise Mismatch(where, self.expected, value)

    def accepts(self, value: Any) -> bool:
        return True


class Str(Type):
    expected = "a string"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str)


class Int(Type):
    def __init__(self, low: int = 0, high: int | None = None):
        self.low, self.high = low, high
        self.expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def accepts(self, value: Any) -> bool:
        return type(value) is int and value >= self.low and (self.high is None or value <= self.high)


class Number(Type):
    expected = "a number"

    def accepts(self, value: Any) -> bool:
        return type(value) in (int, float)


class Bool(Type):
    expected = "true or false"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


class IntOr(Type):
    """An integer within ``Int``'s bounds, or one of a few words (``--step-buckets 4 | auto``)."""

    def __init__(self, number: Int, *words: str):
        self.number, self.words = number, words
        self.expected = f"{number.expected} or {', '.join(words)}"

    def accepts(self, value: Any) -> bool:
        return self.number.accepts(value) or (isinstance(value, str) and value in self.words)


class Scalar(Type):
    expected = "a string, number, true/false or null"

    def accepts(self, value: Any) -> bool:
        return value is None or isinstance(value, (str, int, float, bool))


class OneOf(Type):
    def __init__(self, *values: str):
        self.values = values
        self.expected = "one of " + ", ".join(values)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values


class Uncond(Type):
    """A conditioning input's unconditional fill: null (none), a number, a (nested) list of
    numbers, or "same" (the unconditional rows keep the conditional value: a frame mask)."""

    expected = 'null, a number, a list of numbers or "same"'

    def accepts(self, value: Any) -> bool:
        if value is None or value == "same" or type(value) in (int, float):
            return True
        return isinstance(value, list) and all(self.accepts(v) and v != "same" and v is not None for v in value)


class Nullable(Type):
    def __init__(self, inner: Type):
        self.inner = inner
        self.expected = f"null or {inner.expected}"

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            try:
                self.inner.check(value, where)
            except Mismatch as exc:
                if exc.where == where:  # the value itself, not a field inside it: say null is fine too
                    raise Mismatch(where, self.expected, value) from None
                raise


class ListOf(Type):
    def __init__(self, item: Type):
        self.item = item
        self.expected = f"a list of {item.expected.removeprefix('a ').removeprefix('an ')} items"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise Mismatch(where, self.expected, value)
        for i, item in enumerate(value):
            self.item.check(item, f"{where}[{i}]")


class Table(Type):
    """An object with known fields (typed when present; ``required`` ones must be there) and
    any other fields of type ``extra`` (default: anything, ignored)."""

    expected = "an object"

    def __init__(
        self, fields: Mapping[str, Type] | None = None, required: tuple[str, ...] = (), extra: Type | None = None
    ):
        self.fields, self.required, self.extra = dict(fields or {}), required, extra

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Mismatch(where, self.expected, value)
        for key in self.required:
            if key not in value:
                raise Mismatch(_join(where, key), self.fields[key].expected, MISSING)
        for key, item in value.items():
            rule = self.fields.get(key, self.extra)
            if rule is not None:
                rule.check(item, _join(where, str(key)))


class MapOf(Table):
    """An object whose every value has type ``value`` (names chosen by the user: inputs, artifacts)."""

    def __init__(self, value: Type, non_empty: bool = False):
        super().__init__(extra=value)
        self.non_empty = non_empty
        self.expected = "a non-empty object" if non_empty else "an object"

    def check(self, value: Any, where: str) -> None:
        if self.non_empty and value == {}:
            raise Mismatch(where, self.expected, value)
        super().check(value, where)


# Shapes several sections share: a file, a tensor, decode settings.
ANY = Type()
OBJECT = Table()
NAME = Str()
HASH = Str()
FILE = Table({"path": Str(), "sha256": HASH}, required=("path",))
# An engine's weights file (older entries lack bytes).
SIDE_FILE = Table({"path": Str(), "sha256": HASH, "bytes": Int(0)}, required=("path", "sha256"))
TENSOR = Table(
    {"shape": ListOf(Int(0)), "dtype": Str(), "low": Nullable(Number()), "high": Nullable(Number())},
    required=("shape", "dtype"),
)
DECODE = Table(
    {
        "steps": Int(1, MAX_STEPS),
        "length": Nullable(Int(1, MAX_STEPS)),
        "top_k": Int(0),
        "temperature": Number(),
        "choice_temperature": Number(),
        "guidance": Number(),
        "sway": Number(),
        "schedule": Str(),
        "solver": Str(),
        "grid": Str(),
        "spacing": Int(0),
    },
    extra=Scalar(),
)


def found(value: Any) -> str:
    """The value a check found, as the error line shows it (type and a short repr)."""
    if value is MISSING:
        return "nothing (the field is missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        what = "object" if isinstance(value, dict) else "list"
        text = repr(value)
        return f"{what} {text if len(text) <= 40 else text[:37] + '...'}"
    kind = {str: "string", int: "integer", float: "number"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def _text_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\udcff" in the JSON): no file system path or library takes it
        return False
    return True


def check_json_values(doc: Any) -> None:
    """Every number finite and every string (keys too) valid Unicode, anywhere in ``doc``: walked
    with a stack, not recursion (the parser already bounded the depth)."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise Mismatch(where, "a finite number (JSON has no NaN or Infinity)", value)
        if isinstance(value, str) and not _text_ok(value):
            raise Mismatch(where, "valid Unicode text", value)
        if isinstance(value, dict):
            for key, item in value.items():
                if not _text_ok(str(key)):
                    raise Mismatch(where, "field names of valid Unicode text", str(key))
                stack.append((item, _join(where, str(key))))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(value))
