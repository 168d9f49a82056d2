"""What a fleet run did on each host: read from the progress events and the reports the role
wrote back, judged once (Status), shown as a table, a JSON report and a static HTML page."""

from __future__ import annotations

import enum
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from provision import diskread
from provision.environment import EnvDir
from provision.fileio import write_atomic
from provision.jsontypes import JSON, JSONObject

REPORT_LIMIT = 64 << 20  # what one host sends back: a few KiB


class Status(enum.Enum):
    READY = "ready"
    REFUSED = "refused"  # the doctor says the host cannot run the release: left untouched
    INSTALL_FAILED = "install failed"
    VERIFY_FAILED = "verify failed"
    FAILED = "failed"  # another step (setup, GPU policy) failed
    UNREACHABLE = "unreachable"
    UNFINISHED = "unfinished"  # the run stopped before this host's result
    WOULD_BUILD = "would build"  # --check
    UP_TO_DATE = "up to date"  # --check
    WOULD_SET_UP = "would set up"  # --check on a host without provision yet
    UNCHANGED = "unchanged"  # --drift: nothing changed under the environment since the roll-out
    CHANGED = "changed"  # --drift: something changed; verify again
    REGRESSED = "regressed"  # --drift: a change breaks it, or its facts cannot be read
    NOT_BUILT = "not built"  # --drift: the environment is not built on the host

    @property
    def ok(self) -> bool:
        return self in (
            Status.READY, Status.WOULD_BUILD, Status.UP_TO_DATE, Status.WOULD_SET_UP,
            Status.UNCHANGED,
        )  # fmt: skip


# --drift: the order hosts are listed in, those that regressed first.
DRIFT_ORDER = (
    Status.REGRESSED, Status.UNREACHABLE, Status.FAILED, Status.UNFINISHED, Status.CHANGED,
    Status.NOT_BUILT, Status.UNCHANGED,
)  # fmt: skip


class StepEvent(TypedDict):
    """One step the role ran on a host, as its progress event said (parsed, not checked)."""

    step: JSON
    status: JSON
    seconds: JSON
    detail: JSON


@dataclass(frozen=True)
class HostResult:
    host: str
    status: Status
    detail: str
    gpus: str = ""
    driver: str = ""
    seconds: float = 0.0
    changed: int = 0
    steps: tuple[StepEvent, ...] = ()
    changes: tuple[str, ...] = ()  # --drift: "breaks: ..." / "changed: ..." lines from the host

    def as_json(self) -> dict[str, object]:
        return {
            "host": self.host,
            "result": self.status.value,
            "ok": self.status.ok,
            "detail": self.detail,
            "gpus": self.gpus,
            "driver": self.driver,
            "seconds": round(self.seconds, 1),
            "changed": self.changed,
            "steps": list(self.steps),
            "changes": list(self.changes),
        }


@dataclass(frozen=True)
class FleetResult:
    name: str
    tf: str
    release: str
    path: str
    check: bool
    seconds: float
    ansible_rc: int
    hosts: tuple[HostResult, ...]
    bundle: str = ""  # the offline bundle the hosts installed from (its file name), or ""
    files: dict[str, str] = field(default_factory=dict)
    drift: bool = False  # a drift check (fleet --drift), not a roll-out

    @property
    def ok(self) -> bool:
        return bool(self.hosts) and all(h.status.ok for h in self.hosts)

    def counts(self) -> dict[str, int]:
        return dict(Counter(h.status.value for h in self.hosts))

    def as_json(self) -> dict[str, object]:
        from provision import __version__

        return {
            "schema": 1,
            "environment": {"name": self.name, "tf": self.tf, "release": self.release,
                            "path": self.path},
            "provision": __version__,
            "check": self.check,
            "drift": self.drift,
            "bundle": self.bundle or None,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "ansible_rc": self.ansible_rc,
            "summary": self.counts(),
            "hosts": [h.as_json() for h in self.hosts],
        }  # fmt: skip


# -- reading a run ------------------------------------------------------------------------------


def _read_json(path: Path) -> JSONObject:
    try:
        data = diskread.read_json(path, REPORT_LIMIT)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _events(path: Path) -> list[JSONObject]:
    out = []
    try:
        text = diskread.read_text(path, REPORT_LIMIT)
    except (OSError, ValueError):
        return []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut short when the run was killed
        if isinstance(event, dict) and isinstance(event.get("host"), str):
            out.append(event)
    return out


def _gpus(doctor: JSONObject) -> tuple[str, str]:
    host = doctor.get("host") if isinstance(doctor.get("host"), dict) else {}
    assert isinstance(host, dict)
    listed = host.get("gpus")
    names = [
        str(g.get("name", "?"))
        for g in (listed if isinstance(listed, list) else [])
        if isinstance(g, dict)
    ]
    counted = Counter(names)
    gpus = ", ".join(f"{n} x {name}" if n > 1 else name for name, n in counted.items())
    driver = host.get("driver") if isinstance(host.get("driver"), dict) else {}
    assert isinstance(driver, dict)
    return gpus or "none", str(driver.get("version") or "none")


def _last_line(text: object) -> str:
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line.removeprefix("provision: error: ")[:400]


def _scalar(value: JSON) -> int | float | str:
    """A value float() and int() take; TypeError for another, as they would raise."""
    if isinstance(value, (int, float, str)):
        return value
    raise TypeError(f"not a number: {value!r:.40}")


def _verify_detail(verify: JSONObject) -> str:
    report = verify.get("report")
    if not isinstance(report, dict):
        return _last_line(verify.get("error")) or "the smoke test did not run"
    outcomes = [report.get("checks", []), report.get("findings", [])]
    failed = [
        f"{o.get('name')}: {o.get('reason')}"
        for part in outcomes
        for o in (part if isinstance(part, list) else [])
        if isinstance(o, dict) and not o.get("ok", True)
    ]
    if report.get("ok"):
        return "smoke test passed" + (f" ({report['cpu_only']})" if report.get("cpu_only") else "")
    return "; ".join(failed)[:400] or "the smoke test failed"


def _judge(host: str, events: list[JSONObject], reports: Path, check: bool) -> HostResult:
    mine = [e for e in events if e["host"] == host]
    steps = tuple(
        StepEvent(step=e["step"], status=e["status"], seconds=e["seconds"], detail=e["detail"])
        for e in mine
        if "step" in e
    )
    stats = next((e for e in mine if e.get("event") == "stats"), {})
    verdict = next((e for e in mine if e.get("event") == "verdict"), None)
    dry = next((e for e in mine if e.get("event") == "check"), None)
    copies = any(e.get("event") == "bundle" for e in mine)
    times = [float(_scalar(e["t"])) for e in mine if "t" in e]
    doctor = _read_json(reports / host / "doctor.json").get("report") or {}
    doctor = doctor if isinstance(doctor, dict) else {}
    verify = _read_json(reports / host / "verify.json")
    install = _read_json(reports / host / "install.json")
    gpus, driver = _gpus(doctor) if doctor else ("?", "?")
    bad = next((s for s in steps if s["status"] in ("FAILED", "UNREACHABLE")), None)
    if bad is not None and bad["status"] == "UNREACHABLE":
        status, detail = Status.UNREACHABLE, f"at {bad['step']}: {bad['detail']}"
    elif verdict is not None and verdict.get("status") == "cannot":
        status, detail = Status.REFUSED, str(verdict.get("reasons") or "cannot run the release")
    elif bad is not None and bad["step"] == "install":
        status = Status.INSTALL_FAILED
        detail = _last_line(install.get("error")) or str(bad["detail"])
    elif bad is not None and bad["step"] == "verify":
        status, detail = Status.VERIFY_FAILED, _verify_detail(verify)
    elif bad is not None:
        status, detail = Status.FAILED, f"at {bad['step']}: {bad['detail']}"
    elif check and dry is not None:
        would = Status.WOULD_BUILD if dry.get("result") == "would build" else Status.UP_TO_DATE
        status, detail = would, str(verdict.get("status") if verdict else "")
        detail = f"{detail}; would copy the bundle first" if copies else detail
    elif check and stats:
        status, detail = Status.WOULD_SET_UP, "provision is not on the host yet"
        detail += "; would copy the bundle, then install provision from it" if copies else ""
    elif verify.get("rc") == 0:
        status, detail = Status.READY, _verify_detail(verify)
    else:
        status, detail = Status.UNFINISHED, "the run ended before this host's result"
    return HostResult(
        host=host,
        status=status,
        detail=detail,
        gpus=gpus,
        driver=driver,
        seconds=(max(times) - min(times)) if times else 0.0,
        changed=int(_scalar(stats.get("changed", 0))),
        steps=steps,
    )


def _drift_host(host: str, events: list[JSONObject], reports: Path) -> HostResult:
    """A host of `fleet --drift`: what `provision check` said there."""
    ran = _judge(host, events, reports, False)
    if ran.status in (Status.UNREACHABLE, Status.FAILED):
        return ran
    checked = _read_json(reports / host / "check.json")
    report = checked.get("report")
    if not isinstance(report, dict):
        said = _last_line(checked.get("error")) or "provision check did not run"
        status = Status.NOT_BUILT if checked else Status.UNFINISHED
        return HostResult(host, status, said, "?", "?", ran.seconds, ran.changed, ran.steps)
    facts = report.get("host") if isinstance(report.get("host"), dict) else {}
    assert isinstance(facts, dict)
    listed = facts.get("gpus") if isinstance(facts.get("gpus"), list) else []
    assert isinstance(listed, list)
    names = Counter(str(g.get("name", "?")) for g in listed if isinstance(g, dict))
    gpus = ", ".join(f"{n} x {name}" if n > 1 else name for name, n in names.items()) or "none"
    driver = str(facts.get("driver") or "none")
    envs = [e for e in report.get("environments") or [] if isinstance(e, dict)]  # type: ignore[union-attr]
    if not envs:
        return HostResult(host, Status.NOT_BUILT, "no environment registered", gpus, driver,
                          ran.seconds, ran.changed, ran.steps)  # fmt: skip
    one = envs[0]
    items = [c for c in one.get("changes") or [] if isinstance(c, dict)]  # type: ignore[union-attr]
    lines = tuple(f"{c.get('severity')}: {c.get('line')}" for c in items)
    breaks = sum(c.get("severity") == "breaks" for c in items)
    state = one.get("state")
    if state == "ok":
        status, detail = Status.UNCHANGED, f"unchanged since {one.get('baseline')}"
    elif state == "drift":
        status = Status.REGRESSED if breaks else Status.CHANGED
        detail = f"{len(items)} change(s) since {one.get('baseline')}" + (
            f", {breaks} break it" if breaks else ""
        )
    else:
        status, detail = Status.REGRESSED, str(one.get("problem") or state)
    return HostResult(host, status, detail, gpus, driver, ran.seconds, ran.changed, ran.steps,
                      lines)  # fmt: skip


def collect(
    env: EnvDir, events_file: Path, reports: Path, *, check: bool, seconds: float, ansible_rc: int,
    bundle: str = "", drift: bool = False,
) -> FleetResult:  # fmt: skip
    events = _events(events_file)
    hosts = sorted({str(e["host"]) for e in events})  # each a string (_events)
    if drift:
        found = [_drift_host(h, events, reports) for h in hosts]
        found.sort(key=lambda r: (DRIFT_ORDER.index(r.status) if r.status in DRIFT_ORDER
                                  else len(DRIFT_ORDER), r.host))  # fmt: skip
        return FleetResult(
            name=env.name, tf=env.request.tf, release=env.spec.tf_version, path=env.path,
            check=False, seconds=seconds, ansible_rc=ansible_rc, hosts=tuple(found), drift=True,
        )  # fmt: skip
    return FleetResult(
        name=env.name,
        tf=env.request.tf,
        release=env.spec.tf_version,
        path=env.path,
        check=check,
        seconds=seconds,
        ansible_rc=ansible_rc,
        hosts=tuple(_judge(h, events, reports, check) for h in hosts),
        bundle=bundle,
    )


# -- showing it ---------------------------------------------------------------------------------

COLUMNS = ("host", "GPUs", "driver", "release", "path", "result", "time")


def row(r: FleetResult, h: HostResult) -> list[str]:
    """One host's line of the summary, in COLUMNS' order (the terminal table and the page)."""
    return [h.host, h.gpus, h.driver, r.release, r.path, h.status.value, f"{h.seconds:.1f} s"]


TEMPLATE = "fleet.html.j2"  # beside this module, shipped in the package (and selfwheel's wheel)


def _badge(status: Status) -> str:
    """The badge's class: ok, warn or bad."""
    warn = (Status.REFUSED, Status.CHANGED, Status.NOT_BUILT)
    return "ok" if status.ok else "warn" if status in warn else "bad"


def page(r: FleetResult) -> str:
    """A static page: no script, no external resource; every value escaped (the template's
    autoescape)."""
    import jinja2

    from provision import __version__

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template(TEMPLATE).render(
        r=r, version=__version__, columns=COLUMNS, row=row, badge=_badge
    )


def write(r: FleetResult, out: Path) -> None:
    """fleet.json and fleet.html in `out`, each replaced whole."""
    write_atomic(out / "fleet.json", json.dumps(r.as_json(), indent=2) + "\n")
    write_atomic(out / "fleet.html", page(r))
    r.files.update(json=str(out / "fleet.json"), html=str(out / "fleet.html"))
