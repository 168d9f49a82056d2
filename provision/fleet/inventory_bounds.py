"""An inventory read as Ansible's YAML plugin would read it, within bounds, before Ansible does.

Ansible expands YAML aliases as it builds its hosts: nine anchors of nine aliases each (a "billion
laughs" of a few hundred bytes) keep ansible-inventory busy past any deadline, and an alias to its
own anchor never ends. Ansible also takes a host given twice under one group with a warning, the
last one winning. Here the file is composed (nodes and aliases, nothing expanded), its size, its
expanded size and its keys are judged, and a refusal is one line (UsageError). A file that is no
YAML is left to Ansible's other plugins (INI, scripts), which read it as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from provision.errors import UsageError

if TYPE_CHECKING:
    import yaml

SIZE_LIMIT = 4 << 20  # bytes: an inventory of tens of thousands of hosts
NODE_LIMIT = 1_000_000  # nodes once every alias is expanded
YAML_SUFFIXES = ("", ".yml", ".yaml", ".json")  # what Ansible's YAML plugin tries


def check(inventory: Path) -> None:
    """Refuse an inventory that is too large, expands too far, or names a key twice."""
    try:
        size = inventory.stat().st_size
    except OSError as exc:
        raise UsageError(f"the inventory {inventory}: {exc.strerror}") from None
    if size > SIZE_LIMIT:
        raise UsageError(
            f"the inventory {inventory} is {size / 2**20:.1f} MiB, more than the "
            f"{SIZE_LIMIT >> 20} MiB provision reads; split it (ansible -i takes a folder)"
        )
    if inventory.suffix.lower() not in YAML_SUFFIXES:
        return
    import yaml

    try:
        text = inventory.read_bytes()
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        node = yaml.compose(text, Loader=loader)
    except (OSError, yaml.YAMLError, ValueError):
        return  # not YAML: Ansible's INI or script plugin reads it, or says why it cannot
    if node is not None:
        _judge(inventory, node)


def _judge(inventory: Path, root: yaml.Node) -> None:
    """Count the nodes as if every alias were expanded (each node once, by its identity), and
    refuse a mapping that names a key twice."""
    import yaml

    expanded: dict[int, int] = {}
    busy: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            busy.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in _children(node))
            if expanded[key] > NODE_LIMIT:
                raise UsageError(
                    f"the inventory {inventory} expands to more than {NODE_LIMIT:,} YAML nodes "
                    "through its aliases (&anchor, *alias); write its hosts out"
                )
            continue
        if key in expanded:
            continue
        if key in busy:
            raise UsageError(
                f"the inventory {inventory} holds a YAML alias inside its own anchor (line "
                f"{node.start_mark.line + 1}): it never ends"
            )
        busy.add(key)
        if isinstance(node, yaml.MappingNode):
            _no_twice(inventory, node)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in expanded)


def _children(node: yaml.Node) -> list[yaml.Node]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _no_twice(inventory: Path, node: yaml.MappingNode) -> None:
    import yaml

    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            if key.value in seen:
                raise UsageError(
                    f"the inventory {inventory} names {key.value[:80]!r} twice in one mapping "
                    f"(line {key.start_mark.line + 1}); Ansible would keep the last one only"
                )
            seen.add(key.value)
