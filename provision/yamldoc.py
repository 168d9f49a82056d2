"""YAML that people read and tools parse (environment.yml, the fleet's vars and playbook): written
by yaml.safe_dump from plain data, so every value is quoted as YAML needs (a name like `1.10` or
`yes` stays a string), keys keep their order, and lists are indented under their key as
ansible-lint's yamllint and conda's own files have them."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _dumper() -> Any:
    import yaml

    class Indented(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)

    return Indented


def dump(data: object) -> str:
    import yaml

    return str(yaml.dump(data, Dumper=_dumper(), sort_keys=False, width=1000))
