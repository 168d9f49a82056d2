"""Frozen dataclasses from parsed data (a TOML table, a JSON object): the one reader of the matrix's
data file and of every report provision reads back.

A dataclass declares its own shape: the type hints of its fields say what each value must be, its
defaults what may be left out, and field metadata the rest: `checked` for a check beyond the type
("is a version"), `named` for how messages name the rows of a nested table. `read` builds the
instance, or raises the caller's error class with a message that names the place and the field:

    release 2.13: missing field 'pin'
    release 2.13: field 'python' must be list, got '3.11'
    release 2.13: field 'latest': '2.13.x' is not a version
    release 2.13: unknown field(s) colour

Types understood: str, int, float (an int is a float too), bool, X | None, Literal[...],
tuple[X, ...] (a list in the data), dict[str, X], and nested dataclasses, alone or in those. A value
that already is the dataclass it should become is taken as it is. The analysis of a class (its
fields and hints; typing.get_type_hints is slow) is made once per process.

The bottom of the import graph: this module imports nothing of provision's; callers name the
error to raise.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Literal, TypeVar

T = TypeVar("T")
_CHECK = "provision.records.check"
_NAME = "provision.records.name"


def checked(problem: Callable[[T], str | None]) -> dict[str, object]:
    """Field metadata: `problem(value)`, given a value of the field's type, says what is wrong with
    it ("is not a version") or returns None; the message is "{where}: field 'x': {value!r} {what}".
    Only values read from the data are checked, never the field's default."""
    return {_CHECK: problem}


def named(template: str) -> dict[str, object]:
    """Field metadata for a nested dataclass or a tuple of them: what messages call each row, as a
    format string over the row's own keys and its index {i} ("release {tf}", "source[{i}]"); a key
    the row lacks shows as '?'. Without it a row is "{where}.{field}" or "{where}.{field}[{i}]"."""
    return {_NAME: template}


def read(cls: type[T], data: object, where: str, error: type[Exception]) -> T:
    """An instance of the frozen dataclass `cls` from `data`, or `error` naming `where` and the
    field: a missing field without a default, a value of another type, a failed check, a key the
    class does not have."""
    if not isinstance(data, Mapping):
        raise error(f"{where}: must be dict, got {_shown(data)}")
    return typing.cast(T, _build(cls, data, where, error))


def _build(cls: type, data: Mapping[object, object], where: str, error: type[Exception]) -> object:
    fields, names = _analysis(cls)
    values: dict[str, object] = {}
    for f in fields:
        if f.name not in data:
            if f.required:
                raise error(f"{where}: missing field {f.name!r}")
            continue  # the dataclass fills in its default
        value = data[f.name]
        if not (f.shape.whole and f.shape.outer(value)):
            value = f.shape.read(value, _At(where, f.name, error))
        if f.check is not None:
            problem = f.check(value)
            if problem:
                raise error(f"{where}: field {f.name!r}: {value!r} {problem}")
        values[f.name] = value
    extra = sorted(str(k) for k in data if k not in names)
    if extra:
        raise error(f"{where}: unknown field(s) {', '.join(extra)}")
    make: Callable[..., object] = cls
    return make(**values)


class _At:
    """Where a value is, for messages: the row, the field, and the place in the field's list."""

    __slots__ = ("error", "field", "index", "where")

    def __init__(
        self, where: str, field: str, error: type[Exception], index: int | str | None = None
    ) -> None:
        self.where, self.field, self.error, self.index = where, field, error, index

    def at(self, index: int | str) -> _At:
        return _At(self.where, self.field, self.error, index)

    def fail(self, problem: str) -> Exception:
        return self.error(f"{self.where}: field {self.field!r} {problem}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Shape:
    """What one type hint accepts, and the words messages use for it."""

    name = ""  # as in "must be str"
    plural = ""  # as in "must be a list of strings"
    whole = True  # `outer` is the whole check: a value it takes is read as it is

    def outer(self, value: object) -> bool:
        """Whether `value` has the right type on the outside (for containers: before their items
        are looked at)."""
        raise NotImplementedError

    def read(self, value: object, at: _At) -> object:
        if not self.outer(value):
            raise at.fail(f"must be {self.name}, got {_shown(value)}")
        return value


class _Scalar(_Shape):
    def __init__(self, kind: type, name: str, plural: str) -> None:
        self.kinds: tuple[type, ...] = (int, float) if kind is float else (kind,)
        self.boolean = kind is bool
        self.name, self.plural = name, plural

    def outer(self, value: object) -> bool:
        # JSON and TOML booleans are not numbers, whatever Python's bool says.
        return isinstance(value, self.kinds) and isinstance(value, bool) == self.boolean


class _Str(_Shape):
    name, plural = "str", "strings"

    def outer(self, value: object) -> bool:
        return isinstance(value, str)


class _Literal(_Shape):
    def __init__(self, words: tuple[object, ...]) -> None:
        self.words = words
        self.name = self.plural = "one of " + ", ".join(repr(w) for w in words)

    def outer(self, value: object) -> bool:
        # `in` would take True for 1 and 1.0 for 1: the type must match too.
        return any(type(value) is type(w) and value == w for w in self.words)


class _Optional(_Shape):
    def __init__(self, inner: _Shape) -> None:
        self.inner, self.whole = inner, inner.whole
        self.name, self.plural = f"{inner.name} or None", f"{inner.plural} or None"

    def outer(self, value: object) -> bool:
        return value is None or self.inner.outer(value)

    def read(self, value: object, at: _At) -> object:
        if value is None:
            return None
        if not self.inner.outer(value):
            raise at.fail(f"must be {self.name}, got {_shown(value)}")
        return self.inner.read(value, at)


class _Tuple(_Shape):
    whole = False
    name, plural = "list", "lists"

    def __init__(self, item: _Shape) -> None:
        self.item = item

    def outer(self, value: object) -> bool:
        return isinstance(value, list | tuple)

    def read(self, value: object, at: _At) -> object:
        if not isinstance(value, list | tuple):
            raise at.fail(f"must be list, got {_shown(value)}")
        if not all(self.item.outer(v) for v in value):
            raise at.fail(f"must be a list of {self.item.plural}, got {_shown(value)}")
        if self.item.whole:
            return tuple(value)
        return tuple(self.item.read(v, at.at(i)) for i, v in enumerate(value))


class _Dict(_Shape):
    whole = False
    name, plural = "dict", "dicts"

    def __init__(self, item: _Shape) -> None:
        self.item = item

    def outer(self, value: object) -> bool:
        return isinstance(value, Mapping)

    def read(self, value: object, at: _At) -> object:
        if not isinstance(value, Mapping):
            raise at.fail(f"must be dict, got {_shown(value)}")
        if not all(isinstance(k, str) and self.item.outer(v) for k, v in value.items()):
            raise at.fail(f"must be a dict of {self.item.plural}, got {_shown(value)}")
        if self.item.whole:
            return dict(value)
        return {k: self.item.read(v, at.at(k)) for k, v in value.items()}


class _Keys(dict[str, object]):
    """A row's keys for a `named` template; a key the row lacks is '?'."""

    def __missing__(self, key: str) -> str:
        return "?"


class _Dataclass(_Shape):
    whole = False
    name, plural = "dict", "dicts"

    def __init__(self, cls: type, template: str | None) -> None:
        self.cls, self.template = cls, template

    def outer(self, value: object) -> bool:
        return isinstance(value, Mapping | self.cls)

    def read(self, value: object, at: _At) -> object:
        if isinstance(value, self.cls):
            return value
        if not isinstance(value, Mapping):
            raise at.fail(f"must be dict, got {_shown(value)}")
        if self.template is not None:
            keys = _Keys({str(k): v for k, v in value.items()}, i=at.index)
            where = self.template.format_map(keys)
        elif at.index is None:
            where = f"{at.where}.{at.field}"
        elif isinstance(at.index, int):
            where = f"{at.where}.{at.field}[{at.index}]"
        else:
            where = f"{at.where}.{at.field}[{at.index!r}]"
        return _build(self.cls, value, where, at.error)


class _Field(typing.NamedTuple):
    name: str
    shape: _Shape
    required: bool
    check: Callable[[object], str | None] | None


@cache
def _analysis(cls: type) -> tuple[tuple[_Field, ...], frozenset[str]]:
    """The fields `read` fills in, and their names; once per class."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        template = f.metadata.get(_NAME)
        shape = _shape(hints[f.name], template if isinstance(template, str) else None, cls)
        check = f.metadata.get(_CHECK)
        out.append(_Field(f.name, shape, required, check if callable(check) else None))
    return tuple(out), frozenset(f.name for f in out)


_SCALARS: dict[object, _Shape] = {
    str: _Str(),
    int: _Scalar(int, "int", "ints"),
    float: _Scalar(float, "float", "numbers"),
    bool: _Scalar(bool, "bool", "booleans"),
}


def _shape(hint: object, template: str | None, owner: type) -> _Shape:
    """The shape of one type hint; TypeError for a hint this reader does not know (a bug in the
    dataclass, found the first time it is read)."""
    if hint in _SCALARS:
        return _SCALARS[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _Dataclass(hint, template)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return _Literal(args)
    if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        inner = args[0] if args[1] is type(None) else args[1]
        return _Optional(_shape(inner, template, owner))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _Tuple(_shape(args[0], template, owner))
    if origin in (dict, Mapping) and len(args) == 2 and args[0] is str:
        return _Dict(_shape(args[1], template, owner))
    raise TypeError(f"{owner.__name__}: records cannot read a field of type {hint!r}")
