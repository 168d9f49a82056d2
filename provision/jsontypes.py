"""Parsed JSON as types: what `json.loads` can return, so a document read from a file or a child
process crosses a module boundary typed, not as Any.

Readers narrow a value with isinstance (it is one of seven kinds) before they use it. Code that
builds plain data for `json.dumps` returns `dict[str, object]` (or a TypedDict where the shape is
known): a `list[str]` is no `list[JSON]`, since lists are invariant. Imports nothing from
provision, so that every layer may use it.
"""

from __future__ import annotations

from typing import TypeAlias

JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"
JSONObject: TypeAlias = "dict[str, JSON]"
