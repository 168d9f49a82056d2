"""provision fleet: roll one environment out to many hosts with Ansible, verify each, report.

The role's logic ships once, in the package (ansible/roles/provision_env, in ansible-galaxy's
layout: on each host doctor, install from the committed lock, GPU policy, verify). What belongs to
one environment is small and written here, next to it, to be committed with it:
envs/NAME/ansible/vars.yml (what the role needs to know) and playbook.yml (how to run it, also with
an admin's own Ansible). `run` executes that playbook with ansible-core (the pinned `fleet` extra,
imported by nobody: it runs as its own program), with provision's progress callback, then reads
the reports the role wrote back to this machine and summarises them (fleet_report).

Hosts need Python but not provision: the role copies a wheel of the running provision
(selfwheel) and installs it into a venv of its own on each host; its dependencies and the
environment's packages come from the host's own package index configuration. With --bundle, hosts
need no index at all: the role copies the offline bundle (provision bundle NAME; skipped where the
host holds the same bytes), installs provision from it alone (the bundle's bootstrap, stopped
before the environment so that the doctor still judges the host first), then builds the
environment with `provision install --from-bundle`. The bundle is checked here first: whole, and
of this environment's committed lock.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from provision import _proc, environment
from provision.bundlefile import selfwheel
from provision.environment import EnvDir
from provision.errors import ProvisionError, ToolMissing, UsageError
from provision.fileio import dump_yaml_for_people, sha256_file, write_atomic
from provision.fleet import fleet_report

if TYPE_CHECKING:
    from provision.bundlefile.bundle_sign import Trust

ANSIBLE_DIR = Path(__file__).parent.parent / "ansible"
ROLES = ANSIBLE_DIR / "roles"
CALLBACKS = ANSIBLE_DIR / "callback_plugins"
ROLE = "provision_env"
ANSIBLE_CORE = "ansible-core==2.17.14"  # the `fleet` extra pins the same
FOLDER = environment.FLEET_DIR  # envs/NAME/ansible/
GENERATED = (f"{FOLDER}/vars.yml", f"{FOLDER}/playbook.yml")
EVENTS = "events.jsonl"


class FleetError(ProvisionError):
    """The roll-out could not start or could not finish (not a host's own failure)."""


@dataclass(frozen=True)
class Options:
    inventory: Path
    limit: str | None = None
    check: bool = False
    forks: int | None = None
    bundle: Path | None = None
    report_dir: Path | None = None
    timeout: float = 3600
    drift: bool = False  # only `provision check` on each host: what changed since the roll-out
    schedule: bool = False  # a daily `provision check` on each host (systemd timer, else cron)
    trust: Path | None = None  # allowed_signers: the bundle's signer, checked here and on hosts
    revoked: Path | None = None


# -- what is generated next to the environment ------------------------------------------------


def vars_text(env: EnvDir) -> str:
    """envs/NAME/ansible/vars.yml: the environment as the role sees it. No hosts, no secrets."""
    files = env.own_files()  # packages.in too: the role builds what the lock holds
    r = env.request
    values = {
        "provision_env_name": env.name,
        "provision_env_tf": r.tf,
        "provision_env_path": r.path,
        "provision_env_python": r.python,
        "provision_env_lock_sha256": sha256_file(env.lock),
        "provision_env_gpu_memory": r.gpu_memory or "",
        "provision_env_gpus": r.gpus or "",
        # The install runs as root where it puts the CUDA toolkit on the host (the system path).
        "provision_env_install_as_root": env.kind.host_toolkit,
    }
    lines = [
        f"# provision fleet: {env.name} for the {ROLE} role that ships with provision.",
        f"# Written by `provision fleet {env.name}`, which rewrites it. No hosts, no secrets.",
    ]
    return "\n".join(lines) + "\n" + dump_yaml_for_people({**values, "provision_env_files": files})


def playbook_text(env: EnvDir) -> str:
    """envs/NAME/ansible/playbook.yml: every host of the inventory gets the environment."""
    return f"""---
# Roll out {env.name}: doctor, install from the committed lock, GPU policy, verify; per host.
# `provision fleet {env.name} --inventory FILE` runs it. With your own ansible-core >= 2.15:
#   provision fleet --wheel DIR   # provision's wheel, what the hosts install
#   ANSIBLE_ROLES_PATH="$(provision fleet --roles-path)" ansible-playbook -i INVENTORY \\
#     envs/{env.name}/ansible/playbook.yml -e provision_env_wheel=DIR/WHEEL \\
#     -e provision_env_report_dir=REPORTS
# Hosts with no network: instead of the wheel, an offline bundle (provision bundle {env.name};
# its parts, if split, all of them in order):
#     -e '{{"provision_env_bundle": ["/path/to/{env.name}.bundle.tar"]}}'
""" + dump_yaml_for_people([{
        "name": f"Roll out {env.name}", "hosts": "all", "gather_facts": False,
        "vars_files": ["vars.yml"], "roles": [{"role": ROLE}],
    }])  # fmt: skip


def generated(env: EnvDir) -> dict[str, str]:
    """Relative path inside envs/NAME -> text, for everything fleet writes next to it."""
    return dict(zip(GENERATED, (vars_text(env), playbook_text(env)), strict=True))


def write_generated(env: EnvDir) -> list[Path]:
    """Write (atomically) what changed; return the paths written."""
    written = []
    for rel, text in generated(env).items():
        path = env.root / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
        written.append(path)
    return written


# -- running ansible-playbook -----------------------------------------------------------------


def ansible_playbook() -> str:
    """The ansible-playbook of the ansible-core installed with provision (or on PATH)."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ansible-playbook")
    if found is None:
        raise ToolMissing(
            f"provision fleet runs Ansible, which is not installed: pip install 'provision[fleet]' "
            f"(or pip install '{ANSIBLE_CORE}')"
        )
    return found


def playbook_argv(program: str, env: EnvDir, options: Options, extra_vars: Path) -> list[str]:
    argv = [program, "-i", str(options.inventory), str(env.root / FOLDER / "playbook.yml")]
    argv += ["-e", f"@{extra_vars}"]
    if options.limit:
        argv += ["--limit", options.limit]
    if options.forks:
        argv += ["--forks", str(options.forks)]
    if options.check:
        argv.append("--check")
    return argv


def ansible_env(events: Path, local_tmp: Path, control_dir: Path) -> dict[str, str]:
    """Settings that make the run provision's: its role and progress, host keys always checked."""
    return {
        "ANSIBLE_ROLES_PATH": str(ROLES),
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_STDOUT_CALLBACK": "provision_progress",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "True",  # an unknown or changed host key fails that host
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_LOCAL_TEMP": str(local_tmp),
        # This run's own SSH connections: none is reused from an earlier run (whose host keys
        # may have changed since), and close_connections() ends them all.
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
        "PROVISION_FLEET_EVENTS": str(events),
        "PYTHONUNBUFFERED": "1",
    }


def close_connections(control: Path) -> None:
    """End the SSH connections ansible kept open for the run, so none outlives provision."""
    for sock in control.iterdir():
        _proc.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "provision-fleet"],
            timeout=10,
            check=False,
        )
    shutil.rmtree(control, ignore_errors=True)


def bundle_files(env: EnvDir, path: Path, trust: Trust | None = None) -> tuple[Path, ...]:
    """The files of the offline bundle at `path` (one tar, or every part in order, from any part),
    once every part is there and its manifest says it holds this environment's committed lock
    (and, with `trust`, was signed by a signer it lists: bundle_sign.check)."""
    import tarfile

    from provision.bundlefile import bundle_sign
    from provision.bundlefile.bundle_format import (
        CHUNK,
        MANIFEST,
        BundleError,
        BundleManifest,
        member_name,
    )
    from provision.bundlefile.bundle_io import Reader, open_source
    from provision.bundlefile.bundle_sign import SIG_LIMIT, SIGNATURE

    source = open_source(path)  # every part present, of one bundle, of its size
    reader = Reader(source)
    try:
        with tarfile.open(fileobj=reader, mode="r|", bufsize=CHUNK) as tar:  # type: ignore[call-overload]
            info = tar.next()
            fh = tar.extractfile(info) if info and member_name(info) == MANIFEST else None
            if fh is None:
                raise BundleError(f"{source.shown} is not a provision bundle (no manifest first)")
            data = fh.read()
            after = tar.next() if trust is not None else None
            sig = tar.extractfile(after) if after and member_name(after) == SIGNATURE else None
            bundle_sign.check(data, sig.read(SIG_LIMIT) if sig else None, trust, source.shown)
            manifest = BundleManifest.loads(data, source.shown)
    except (tarfile.TarError, EOFError) as exc:
        raise BundleError(f"{source.shown} is damaged ({exc}): copy or bundle it again") from exc
    finally:
        reader.close()
    if manifest.name != env.name:
        raise FleetError(f"{source.shown} is a bundle of {manifest.name}, not of {env.name}")
    if manifest.lock_sha256 != sha256_file(env.lock):
        raise FleetError(
            f"{source.shown} holds another {manifest.lock} than {env.name}'s committed one: "
            f"bundle it again (provision bundle {env.name})"
        )
    return tuple(f.absolute() for f in source.files)


def _check_ready(env: EnvDir, options: Options) -> tuple[Path, ...]:
    """Refuse what cannot be rolled out, before Ansible starts; the bundle's files, if any."""
    from provision import lock
    from provision.errors import StaleError

    env.check_reviewed()
    if not env.lock.is_file():
        raise FleetError(f"{env.name} has no lock yet: run `provision lock {env.name}` first")
    try:
        lock.check_lock(env)
    except StaleError as exc:
        raise FleetError(f"refusing to roll out {env.name}: {exc}") from exc
    if not options.inventory.is_file():
        raise UsageError(f"no inventory at {options.inventory}")
    check_report_dir(options.report_dir or default_report_dir(env))
    bundle: tuple[Path, ...] = ()
    if options.bundle is not None:
        from provision.bundlefile import bundle_sign

        trust = bundle_sign.trust_from(options.trust, options.revoked) if options.trust else None
        bundle = bundle_files(env, options.bundle, trust)
    hosts = inventory_hosts(options.inventory, options.limit)
    if not hosts:
        which = f" match --limit {options.limit}" if options.limit else ""
        raise UsageError(
            f"the inventory {options.inventory} names no hosts{which}; nothing was written"
        )
    return bundle


def check_report_dir(out: Path) -> None:
    """The reports' folder is new, empty, or an earlier fleet run's (its events file says so):
    a run replaces its own reports there, and never a folder of someone else's."""
    try:
        names = set(os.listdir(out))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"--report-dir {out}: {exc.strerror}") from None
    if names and EVENTS not in names:
        raise UsageError(
            f"--report-dir {out} holds files that are not a fleet report "
            f"({', '.join(sorted(names)[:3])}); choose a new or empty folder"
        )


def inventory_hosts(inventory: Path, limit: str | None = None) -> list[str]:
    """The hosts Ansible reads from the inventory (and --limit), before anything is written: an
    inventory Ansible cannot parse is refused (it would only warn, and reach no host)."""
    from provision.fleet import inventory_bounds

    inventory_bounds.check(inventory)  # an alias bomb would keep ansible-inventory busy
    program = str(Path(ansible_playbook()).with_name("ansible-inventory"))
    argv = [program, "-i", str(inventory), "--list"]
    if limit:
        argv += ["--limit", limit]
    with tempfile.TemporaryDirectory(prefix="provision-inventory-") as tmp:
        done = _proc.run(
            argv, check=False, timeout=120,
            env={
                "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
                "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
                "ANSIBLE_LOCAL_TEMP": tmp,
                "ANSIBLE_HOME": tmp,  # else ~/.ansible is made, and stays, for an inventory refused
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_DEPRECATION_WARNINGS": "False",
            },
        )  # fmt: skip
    if not done:
        text = " ".join(done.stderr.split())
        why = (text[text.index("ERROR!") + 6 :] if "ERROR!" in text else text).strip()[-300:]
        why = why or f"exit {done.returncode}"
        raise UsageError(f"the inventory {inventory} cannot be read by Ansible: {why}")
    try:
        data = json.loads(done.stdout)
    except ValueError as exc:
        raise FleetError(f"ansible-inventory printed no JSON for {inventory}") from exc
    hostvars = data.get("_meta", {}).get("hostvars", {}) if isinstance(data, dict) else {}
    hosts = set(hostvars) if isinstance(hostvars, dict) else set()
    for group in data.values() if isinstance(data, dict) else ():
        if isinstance(group, dict):
            hosts.update(h for h in group.get("hosts", []) if isinstance(h, str))
    return sorted(hosts)


def default_report_dir(env: EnvDir) -> Path:
    return Path("fleet-reports") / env.name


def run(env: EnvDir, options: Options) -> fleet_report.FleetResult:
    """Generate, run, collect. The run's progress goes to this process's stdout as it happens."""
    bundle = _check_ready(env, options)
    program = ansible_playbook()
    write_generated(env)
    out = (options.report_dir or default_report_dir(env)).absolute()
    hosts_dir = out / "hosts"
    shutil.rmtree(hosts_dir, ignore_errors=True)  # this run's reports only
    (out / ".ansible").mkdir(parents=True, exist_ok=True)
    events = out / EVENTS
    events.write_text("", encoding="utf-8")
    # From the bundle alone, or provision's own wheel with the rest from each host's index.
    source: dict[str, object] = (
        {}
        if options.drift
        else {"provision_env_bundle": [str(f) for f in bundle]}
        if bundle
        else {"provision_env_wheel": str(selfwheel.build(out / ".wheel"))}
    )
    if bundle and options.trust is not None:  # checked again on each host, before anything runs
        source["provision_env_trust"] = str(options.trust.absolute())
        if options.revoked is not None:
            source["provision_env_revoked"] = str(options.revoked.absolute())
    source["provision_env_mode"] = "drift" if options.drift else "rollout"
    source["provision_env_schedule"] = options.schedule
    extra = out / ".ansible" / "run-vars.json"
    extra.write_text(
        json.dumps(
            {
                **source,
                "provision_env_report_dir": str(hosts_dir),
                "provision_env_src": str(env.root.absolute()),
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    argv = playbook_argv(program, env, options, extra)
    started = time.monotonic()
    control = Path(tempfile.mkdtemp(prefix="pvf-ssh-"))  # short: socket paths are limited
    try:
        done = _proc.run(
            argv,
            env=ansible_env(events, out / ".ansible" / "tmp", control),
            timeout=options.timeout,
            check=False,
            capture=False,
        )
    finally:
        close_connections(control)
    seconds = time.monotonic() - started
    if done.returncode not in (0, 2, 4, 8):  # ok, a host failed, a host unreachable, both
        raise FleetError(
            f"ansible-playbook failed before the hosts' results (exit {done.returncode}); "
            f"its message is above: check the inventory {options.inventory}"
        )
    result = fleet_report.collect(
        env, events, hosts_dir, check=options.check, seconds=seconds, ansible_rc=done.returncode,
        bundle=bundle[0].name if bundle else "", drift=options.drift,
    )  # fmt: skip
    fleet_report.write(result, out)
    return result
