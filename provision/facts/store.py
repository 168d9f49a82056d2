"""The facts recorded per environment: PROVISION_HOME/facts/<name>.json.

Sealed as locks are: the file carries the sha256 of its body (canonical JSON), so an edit, a
truncation or a copy from another environment is caught when it is read, and `check` says to
re-verify instead of judging against facts nobody recorded.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from provision import registry
from provision.errors import ProvisionError
from provision.facts.collect import Facts
from provision.fileio import sha256_text, write_atomic

SCHEMA = 1


class FactsError(ProvisionError):
    """The recorded facts are missing or cannot be trusted."""


def folder() -> Path:
    return registry.home() / "facts"


def path_of(name: str) -> Path:
    return folder() / f"{name}.json"


def body_digest(body: object) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return sha256_text(text)


def put(facts: Facts) -> None:
    """Write atomically: a reader sees the old record or the new one, never half."""
    body = facts.to_json()
    doc = {"schema": SCHEMA, "body_sha256": body_digest(body), "body": body}
    where = folder()
    try:
        where.mkdir(parents=True, exist_ok=True)
        text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        write_atomic(path_of(facts.name), text, mode=0o600)  # private, as mkstemp made it
    except OSError as exc:
        raise FactsError(f"cannot record the facts of {facts.name} in {where}: {exc}") from exc


def get(name: str) -> Facts:
    """The recorded facts of NAME; FactsError saying why they cannot be used and what to do."""
    path = path_of(name)
    redo = f"re-verify it to record them again: provision verify {name}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FactsError(
            f"{name}: no facts were recorded for it ({path} is missing; built before provision "
            f"recorded them, or removed); {redo}"
        ) from None
    except OSError as exc:
        raise FactsError(f"{name}: cannot read {path}: {exc.strerror}; {redo}") from exc
    try:
        doc = json.loads(text)
    except ValueError:
        raise FactsError(f"{name}: {path} is damaged (not JSON); {redo}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "body" not in doc:
        raise FactsError(f"{name}: {path} is not a provision facts record; {redo}")
    if doc.get("body_sha256") != body_digest(doc["body"]):
        raise FactsError(
            f"{name}: {path} was changed after provision wrote it (its body no longer matches "
            f"its sha256); {redo}"
        )
    try:
        facts = Facts.from_json(doc["body"])
    except ValueError as exc:
        raise FactsError(f"{name}: {path} cannot be read ({exc}); {redo}") from exc
    if facts.name != name:
        raise FactsError(f"{name}: {path} holds the facts of {facts.name!r}; {redo}")
    return facts


def get_or_none(name: str) -> Facts | None:
    """The recorded facts of NAME, or None when there are none that can be used."""
    try:
        return get(name)
    except FactsError:
        return None


def forget(name: str) -> None:
    with contextlib.suppress(OSError):
        path_of(name).unlink(missing_ok=True)


def record(rec: registry.Record, source: str, gpus_used: int = 0) -> Facts:
    """Read the facts of a registered environment now and record them as its baseline."""
    from provision.facts.collect import collect

    facts = collect(
        rec.name, rec.tf, Path(rec.prefix), Path(rec.interpreter), rec.python, source=source,
        gpus_used=gpus_used,
    )  # fmt: skip
    put(facts)
    return facts


def record_quietly(name: str, source: str, gpus_used: int = 0) -> str:
    """`record` after an install or a passing verify: "" when done, else why not (never raises,
    so that a build or a verify that worked is not reported as failed for want of its facts)."""
    try:
        rec = registry.get(name)
        if rec is None:
            return f"{name} is not registered"
        record(rec, source, gpus_used)
    except (ProvisionError, OSError) as exc:
        return str(exc)
    return ""
