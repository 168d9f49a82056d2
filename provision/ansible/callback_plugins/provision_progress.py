"""Ansible stdout callback of `provision fleet`: one line per host and step as it ends, and the
same facts as JSON lines in the file named by PROVISION_FLEET_EVENTS (what the summary is made of).

Steps are the prefixes of the provision_env role's task names ("Doctor | ..."); "Report" tasks
belong to the step before them. Runs inside ansible-playbook, never imported by provision.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: provision_progress
    type: stdout
    short_description: provision fleet's per-host progress and JSON events
    description: One line per host and step; JSON lines into $PROVISION_FLEET_EVENTS.
"""


VERDICTS = {"runs": "runs", "fix": "runs after a fix", "cannot": "cannot"}


def _step(task_name: str) -> str:
    """ "provision_env : Doctor | judge ..." -> "doctor"."""
    head, sep, _ = task_name.rpartition(" : ")[2].partition(" | ")
    return head.strip().lower() if sep else "setup"


def _last_line(text: str) -> str:
    lines = [
        ln
        for ln in (text or "").strip().splitlines()
        if ln.strip() and not ln.startswith("Shared connection to ")  # ssh's own last words
    ]
    return lines[-1].strip()[:300] if lines else ""


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "provision_progress"

    def __init__(self) -> None:
        super().__init__()
        self._t0 = time.monotonic()
        self._task_t0 = self._t0  # when the task whose results arrive now started (all hosts)
        self._open: dict[str, tuple[str, float, bool]] = {}  # host -> (step, start, changed)
        self._changed: dict[str, list[str]] = {}  # host -> what the open step changed
        self._detail: dict[str, str] = {}
        self._check = False
        path = os.environ.get("PROVISION_FLEET_EVENTS", "")
        self._events = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    # -- output --

    def _emit(self, event: dict[str, Any]) -> None:
        if self._events is not None:
            event["t"] = round(time.monotonic() - self._t0, 3)
            self._events.write(json.dumps(event) + "\n")
            self._events.flush()

    def _line(self, host: str, step: str, status: str, seconds: float, detail: str) -> None:
        self._display.display(f"{host:<18} {step:<10} {status:<11} {seconds:6.1f} s  {detail}")
        self._emit(
            {"host": host, "step": step, "status": status, "seconds": round(seconds, 2),
             "detail": detail}
        )  # fmt: skip

    def _close(
        self, host: str, status: str | None = None, detail: str = "", end: float | None = None
    ) -> None:
        if host not in self._open:
            return
        step, start, changed = self._open.pop(host)
        status = status or ("changed" if changed else "ok")
        what = self._changed.pop(host, [])
        detail = (
            detail or self._detail.pop(host, "") or (f"changed: {'; '.join(what)}" if what else "")
        )
        self._line(host, step, status, (end or time.monotonic()) - start, detail)

    def _enter(self, host: str, task_name: str, changed: bool) -> None:
        step = _step(task_name)
        current = self._open.get(host)
        if step == "report":  # a report belongs to the step before it
            if current is None:
                return
            step = current[0]
        if current is None or current[0] != step:
            # A step ends where the task that opens the next one started: the time a command
            # runs belongs to its own step, not to the one before it.
            if current is not None:
                self._close(host, end=self._task_t0)
            else:
                self._emit({"host": host, "event": "start"})
            current = (step, self._task_t0, False)
        self._open[host] = (current[0], current[1], current[2] or changed)

    # -- what a result says --

    def _note(self, host: str, task_name: str, res: dict[str, Any]) -> None:
        facts = res.get("ansible_facts") or {}
        verdict = facts.get("provision_env_verdict")
        if isinstance(verdict, dict):
            status = str(verdict.get("status", ""))
            reasons = "; ".join(str(r) for r in verdict.get("reasons") or [])
            shown = VERDICTS.get(status, status)
            self._detail[host] = f"{shown}: {reasons}" if reasons else shown
            self._emit({"host": host, "event": "verdict", "status": status, "reasons": reasons})
            if status == "cannot":
                self._close(host, "refused")
        task_name = task_name.rpartition(" : ")[2]
        if task_name.startswith("Install | what a dry run"):
            would = "would build" if res.get("changed") else "up to date"
            self._detail[host] = would
            self._emit({"host": host, "event": "check", "result": would})
        if task_name.startswith("Setup | copy the bundle") and res.get("changed"):
            self._emit({"host": host, "event": "bundle", "copied": not self._check})
        if task_name.startswith("Install | build") and res.get("rc") == 0:
            try:
                report = json.loads(res.get("stdout") or "{}")
            except ValueError:
                report = {}
            if isinstance(report, dict) and isinstance(report.get("install"), dict):
                report = report["install"]  # install --from-bundle: the build is one part of it
            skipped = report.get("skipped") if isinstance(report, dict) else None
            self._detail[host] = "already built from this lock" if skipped else "built"

    # -- Ansible's events --

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._check = bool(getattr(play, "check_mode", False))
        self._emit({"event": "play", "name": play.get_name()})

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._task_t0 = time.monotonic()

    def v2_runner_on_ok(self, result: Any) -> None:
        host, name = result._host.get_name(), result._task.get_name()
        changed = bool(result._result.get("changed"))
        self._enter(host, name, changed)
        if changed:
            self._changed.setdefault(host, []).append(name.rpartition(" | ")[2])
        self._note(host, name, result._result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._enter(result._host.get_name(), result._task.get_name(), False)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        host, name = result._host.get_name(), result._task.get_name()
        self._enter(host, name, False)
        if ignore_errors:
            return
        res = result._result
        detail = str(res.get("msg") or "") if "Install | stop" in name else ""
        detail = detail or _last_line(str(res.get("stderr") or "")) or str(res.get("msg") or "")
        self._close(host, "FAILED", detail.splitlines()[0][:300] if detail else "failed")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        host, name = result._host.get_name(), result._task.get_name()
        self._enter(host, name, False)
        msg = str(result._result.get("msg") or "unreachable").strip().splitlines()
        self._close(host, "UNREACHABLE", msg[-1][:300] if msg else "unreachable")

    def v2_runner_item_on_failed(self, result: Any) -> None:
        pass  # the task's own failure follows

    def v2_playbook_on_stats(self, stats: Any) -> None:
        for host in list(self._open):
            self._close(host)
        for host in sorted(stats.processed):
            self._emit({"host": host, "event": "stats", **stats.summarize(host)})
        if self._events is not None:
            self._events.close()
            self._events = None
