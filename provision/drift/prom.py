"""`provision check --prom FILE`: the result in the Prometheus text format, for node_exporter's
textfile collector, written the way it asks: to a temporary file in the same folder, then renamed,
so the collector never reads half a file.
"""

from __future__ import annotations

from pathlib import Path

from provision.drift.check import CheckResult
from provision.errors import ProvisionError, UsageError
from provision.fileio import write_atomic

STATES = ("ok", "drift", "unknown", "missing")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def text(result: CheckResult) -> str:
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {_number(value)}" for labels, value in rows)

    envs = result.envs
    metric(
        "provision_env_drift", "gauge",
        "1 when what the environment runs on changed since its facts were recorded, or they "
        "cannot be read; 0 otherwise.",
        [(f'{{env="{_label(e.name)}"}}', 0 if e.state == "ok" else 1) for e in envs],
    )  # fmt: skip
    metric(
        "provision_env_changes", "gauge",
        "Changes found per environment, by severity (breaks: known to stop it).",
        [
            (f'{{env="{_label(e.name)}",severity="{sev}"}}',
             sum(c.severity == sev for c in e.changes))
            for e in envs for sev in ("breaks", "changed")
        ],
    )  # fmt: skip
    metric(
        "provision_env_state", "gauge",
        "1 for the environment's state: ok, drift, unknown (no usable record), missing.",
        [(f'{{env="{_label(e.name)}",state="{s}"}}', int(e.state == s)) for e in envs
         for s in STATES],
    )  # fmt: skip
    metric(
        "provision_env_ok", "gauge",
        "1 when nothing that matters changed or a smoke test run by this check passed.",
        [(f'{{env="{_label(e.name)}"}}', int(e.ok)) for e in envs],
    )  # fmt: skip
    verified = [e for e in envs if e.reverified is not None]
    if verified:
        metric(
            "provision_env_reverify_ok", "gauge",
            "1 when the smoke test this check ran passed.",
            [(f'{{env="{_label(e.name)}"}}', int(bool(e.reverified and e.reverified.ok)))
             for e in verified],
        )  # fmt: skip
    metric(
        "provision_check_timestamp_seconds",
        "gauge",
        "When the check ran, seconds since the epoch.",
        [("", round(result.at, 3))],
    )
    metric("provision_check_duration_seconds", "gauge", "How long the check took.",
           [("", round(result.seconds, 3))])  # fmt: skip
    return "\n".join(lines) + "\n"


def check_target(path: Path) -> None:
    """Before the check runs: a name node_exporter reads (it reads only *.prom files, and writing
    another name than the one given would surprise more), in a folder that is there."""
    path = Path(path)
    if path.suffix != ".prom" or path.name == ".prom":
        raise UsageError(
            f"--prom {path}: node_exporter's textfile collector reads only files named *.prom; "
            f"name it so (e.g. --prom {path.with_name((path.stem or 'provision') + '.prom')})"
        )
    folder = path.absolute().parent
    if not folder.is_dir():
        raise ProvisionError(f"--prom {path}: {folder} is not a folder")


def write(result: CheckResult, path: Path) -> None:
    path = Path(path)
    check_target(path)
    folder = path.absolute().parent
    try:
        write_atomic(path, text(result), mode=0o644)  # node_exporter reads it as another user
    except OSError as exc:
        raise ProvisionError(f"--prom {path}: cannot write into {folder}: {exc.strerror}") from exc
