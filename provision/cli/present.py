"""How built environments are shown: the list, one environment in full, and JSON for machines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from provision import environment
from provision.built import Listed
from provision.caches import Cache, human
from provision.cli.columns import columns
from provision.errors import ProvisionError
from provision.fleet.fleet_report import COLUMNS, FleetResult, row
from provision.payload import report as smoke_report
from provision.registry import Record
from provision.verify import VerifyResult


def grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return "\n".join(columns([list(header), *([str(c) for c in r] for r in rows)], rule=True))


def _device(rec: Record) -> str:
    last = rec.last_verify
    if last is None:
        return "?"
    return f"{last.gpus} GPU" if last.gpus else "CPU"


def _verified(rec: Record) -> str:
    last = rec.last_verify
    if last is None:
        return "never verified"
    if not last.ok and last.cpu_ok:
        return f"CPU ok, GPU required: FAIL {last.when}"
    return f"{'PASS' if last.ok else 'FAIL'} {last.when}"


def caches_line(found: Sequence[Cache]) -> str:
    """One line: what provision's caches hold, where, and how to free it."""
    ours = [c for c in found if c.owned]
    theirs = [c for c in found if not c.owned and c.size]
    where = str(ours[0].path.parent) if ours else "?"
    line = f"caches: {human(sum(c.size for c in ours))} in {where} (provision cache prune frees it)"
    if theirs:
        line += "; yours: " + ", ".join(f"{c.name} {human(c.size)} in {c.path}" for c in theirs)
    return line


def listing(items: Sequence[Listed], sizes: Mapping[str, int], found: Sequence[Cache]) -> str:
    if not items:
        return "no environments built yet (provision create --tf X.Y builds one)\n" + caches_line(
            found
        )
    rows = []
    for item in items:
        rec = item.record
        if rec is None:
            rows.append([item.name, "?", "?", "?", "?", "?", f"unreadable: {item.problem}"])
            continue
        state = "" if item.state == "built" else f" ({item.state})"
        size = human(sizes[item.name]) if item.name in sizes else "?"
        rows.append(
            [item.name, rec.tf, rec.path, rec.prefix + state, size, _device(rec), _verified(rec)]
        )
    table = grid(("name", "TensorFlow", "path", "prefix", "size", "device", "last verify"), rows)
    return table + "\n" + caches_line(found)


def listing_json(items: Sequence[Listed], sizes: Mapping[str, int]) -> list[dict[str, object]]:
    return [
        {"name": i.name, "state": i.state, "problem": i.problem or None, "size": sizes.get(i.name)}
        | (i.record.to_json() if i.record else {})
        for i in items
    ]


def _row(label: str, value: str) -> str:
    return f"  {label:<12} {value}"


def lock_state(env: environment.EnvDir) -> str:
    """The lock's name and whether it is fresh for the inputs as they are now (offline)."""
    from provision import lock
    from provision.errors import StaleError

    if not env.lock.is_file():
        return f"none yet (provision lock {env.name})"
    try:
        lock.check_lock(env)
    except StaleError as exc:
        return str(exc)
    except ProvisionError as exc:
        return f"{env.lock.name}: cannot be checked ({exc})"
    return f"{env.lock.name} (up to date)"


def show(env: environment.EnvDir, rec: Record | None, size: int = 0, cache_bytes: int = 0) -> str:
    s = env.spec
    lines = [
        f"{env.name}: TensorFlow {s.release.pin}, {s.path} path, Python {s.python}",
        f"  CUDA {s.cuda.version}, cuDNN {s.cudnn.version}; driver >= {s.cuda.driver_min}; "
        f"GPU compute capability >= {s.release.compute_min}",
        _row("directory", str(env.root)),
        _row("lock", lock_state(env)),
    ]
    try:
        mine = [p.line for p in env.packages()]
    except ProvisionError as exc:
        mine = [f"(unreadable: {exc})"]
    if mine:
        lines.append(_row("packages", f"{', '.join(mine)} ({environment.USER_FILE}, yours)"))
    edited = env.edited()
    if edited:
        lines.append(_row("edited", f"{', '.join(edited)} (since provision rendered them)"))
    runtime = environment.runtime_values(s)
    for key in ("PROVISION_LIBRARY_DIRS", "PROVISION_XLA_DIR", "PROVISION_GPUS"):
        if runtime.get(key):
            lines.append(
                _row(key.removeprefix("PROVISION_").lower().replace("_", " "), runtime[key])
            )
    if s.gpu.memory:
        unit = " MiB per GPU" if s.gpu.memory.isdigit() else ""
        lines.append(_row("gpu memory", s.gpu.memory + unit))
    if rec is None:
        lines.append(_row("built", f"no (provision install {env.name})"))
        return "\n".join(lines)
    exists = Path(rec.interpreter).exists()
    verified = _verified(rec)
    if rec.last_verify:
        verified += f", {_device(rec)}: {rec.last_verify.summary}"
    enter = env.kind.enter_command(rec.prefix)
    lines += [
        _row("prefix", rec.prefix + ("" if exists else " (missing)")),
        _row("python", rec.interpreter),
        _row("installer", rec.installer),
        *bundle_lines(rec),
        _row("size", f"{human(size)} (caches: {human(cache_bytes)}, provision cache info)"),
        _row("verify", verified),
        _row("activate", enter),
        _row("run", f"provision run {env.name} -- python train.py"),
    ]
    return "\n".join(lines)


def bundle_lines(rec: Record) -> list[str]:
    """Which bundle built it, who signed it, what it came from (install --from-bundle's record)."""
    b = rec.bundle
    if b is None:
        return []
    signed = {"unsigned": "not signed", "unverified": f"signed by {b.key}, not checked"}
    return [
        _row("bundle", f"manifest sha256 {b.manifest_sha256}, made by provision "
             f"{b.provision_version} for {b.platform} ({b.machine}, glibc >= {b.glibc})"),
        _row("signed", signed.get(b.signature, f"by {b.signer} ({b.key}), trusted")),
        _row("from", b.matrix_row),
        *(_row("cites", c) for c in b.citations),
    ]  # fmt: skip


def bundle_json(env: environment.EnvDir | None) -> dict[str, object] | None:
    """verify --json's "bundle": the built environment's origin, when a bundle built it."""
    from dataclasses import asdict

    from provision import registry

    record = registry.get(env.name) if env is not None else None
    return asdict(record.bundle) if record is not None and record.bundle else None


# -- a fleet run's summary ------------------------------------------------------------------


def fleet_table(r: FleetResult) -> str:
    lines = [grid(COLUMNS, [row(r, h) for h in r.hosts])]
    for h in r.hosts:
        if h.detail and not h.status.ok:
            lines.append(f"  {h.host}: {h.detail}")
            lines += [f"    {c}" for c in h.changes]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(r.counts().items()))
    mode = " (dry run: nothing was changed)" if r.check else ""
    mode = " (drift since the roll-out)" if r.drift else mode
    lines.append(f"{r.name}: {len(r.hosts)} host(s): {counts or 'none reached'}{mode}")
    return "\n".join(lines)


# -- a verify -----------------------------------------------------------------------------------


def verify_lines(result: VerifyResult) -> list[str]:
    """The smoke test's report as text, the facts compared with the spec, and the verdict."""
    out = smoke_report.render_text(result.report).rstrip("\n").splitlines()
    if result.findings:
        out.append(f"compared with the spec{f' of {result.name}' if result.name else ''}:")
        out += [f"  {o.status.upper():<4}  {o.name:<18} {o.reason}" for o in result.findings]
    verdict = "PASS" if result.ok else "FAIL"
    notes = [", ".join(o.name for o in result.failures), result.cpu_only]
    shown = "; ".join(n for n in notes if n)
    out.append(f"verify: {verdict}" + (f" ({shown})" if shown else ""))
    if result.still_broken:
        out.append(result.still_broken)
    return out
