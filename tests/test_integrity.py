"""What gets installed is what the reviewed files and the committed lock say (issue 17).

A corpus of tamperings of a sealed environment directory: each is refused by `provision install`
before anything is downloaded or written, with one line and no traceback. And kill -9 at random
points of an install: the re-run completes, and nothing writes into the prefix once provision is
dead. Real venvs, a small real wheel from the test's own index (tests/test_install.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from clitools import run_cli
from tinyindex import Env, Index

from provision import environment
from provision.install.place import state_of

LOCK = "requirements.lock"


def _edit(rel: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / rel
        path.write_text(change(path.read_text()))

    return apply


def _manifest(change: Callable[[dict[str, object]], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / environment.MANIFEST
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return apply


def _request(key: str, value: object) -> Callable[[Path], None]:
    def change(data: dict[str, object]) -> None:
        request = data["request"]
        assert isinstance(request, dict)
        request[key] = value

    return _manifest(change)


def _header_line(tag: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    return _edit(
        LOCK,
        lambda t: "".join(change(ln) if ln.startswith(tag) else ln for ln in t.splitlines(True)),
    )


def _flip_hex(line: str) -> str:
    head, _, digest = line.rpartition(" ")
    return f"{head} {'0' if digest[0] != '0' else '1'}{digest[1:]}"


def _append(extra: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        end = text.rindex("# provision-lock-end")
        return text[:end] + extra + text[end:]

    return change


def _remove(folder_rel: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / folder_rel).unlink()

    return apply


def _symlink_lock(folder: Path) -> None:
    other = folder.parent / "elsewhere.lock"
    other.write_text((folder / LOCK).read_text().replace("1.0", "2.0"))
    (folder / LOCK).unlink()
    (folder / LOCK).symlink_to(other)


OTHER_WHEEL = "colorama==0.4.6 \\\n    --hash=sha256:" + "a" * 64 + "\n"
# case -> (tampering, a phrase the one-line refusal must hold)
CORPUS: dict[str, tuple[Callable[[Path], None], str]] = {
    # the lock's body
    "package appended, via an existing pin": (
        _edit(LOCK, _append(OTHER_WHEEL + "    # via provision-tiny\n")), "edited after"),
    "package appended, no provenance": (
        _edit(LOCK, _append(OTHER_WHEEL)), "edited after it was made"),
    "pinned version changed": (
        _edit(LOCK, lambda t: t.replace("provision-tiny==1.0", "provision-tiny==1.1")), "edited"),
    "hash changed": (_edit(LOCK, lambda t: t.replace("--hash=sha256:", "--hash=sha256:0", 1)),
                     "edited"),
    "hash removed": (
        _edit(LOCK, lambda t: re.sub(r" \\\n +--hash=sha256:[0-9a-f]+", "", t)), "edited"),
    "via comment removed": (_edit(LOCK, lambda t: t.replace("# via -r requirements.in", "")),
                            "edited"),
    "end marker count changed": (
        _header_line("# provision-lock-end", lambda ln: ln.replace("1 packages", "2 packages")),
        "edited"),
    "cut before the end marker": (
        _edit(LOCK, lambda t: t[: t.rindex("# provision-lock-end")]), "truncated"),
    "cut in the middle of a pin": (_edit(LOCK, lambda t: t[: t.index("--hash") + 20]),
                                   "truncated"),
    "emptied": (_edit(LOCK, lambda t: ""), "the lock is empty"),
    "only blank lines": (_edit(LOCK, lambda t: "\n\n\n"), "empty"),
    "header removed": (
        _edit(LOCK, lambda t: "".join(ln for ln in t.splitlines(True) if not ln.startswith("#"))),
        "no provision header"),
    "body digest changed": (_header_line("# provision-body-sha256", _flip_hex), "edited"),
    "body digest line removed": (_header_line("# provision-body-sha256", lambda ln: ""),
                                 "incomplete provision header"),
    "input digest changed": (_header_line("# provision-inputs-sha256", _flip_hex), "stale"),
    "recorded inputs changed": (
        _header_line("# provision-inputs:", lambda ln: ln.replace("3.", "2.", 1)), "stale"),
    "lock deleted": (_remove(LOCK), "does not exist"),
    "lock is a symlink to another lock": (_symlink_lock, "edited"),
    "binary garbage": (_edit(LOCK, lambda t: "\x00\x01garbage\x02"), "refusing to install"),
    # the inputs the lock was made from
    "requirement added to requirements.in": (
        _edit("requirements.in", lambda t: t + "six==1.16.0\n"), "changed since provision"),
    "requirements.in emptied": (_edit("requirements.in", lambda t: ""), "changed since provision"),
    "requirements.in deleted": (_remove("requirements.in"), "requirements.in (missing)"),
    # the runtime the hooks apply
    "runtime: a GPU added": (
        _edit(environment.RUNTIME, lambda t: t + "PROVISION_GPUS='1'\n"), "changed since"),
    "runtime: library folder changed": (
        _edit(environment.RUNTIME, lambda t: t.replace("nvidia/*/lib", "/tmp/*")),
        "changed since"),
    "runtime deleted": (_remove(environment.RUNTIME), "hooks/runtime.env (missing)"),
    # the manifest
    "manifest: name pointing outside": (
        _manifest(lambda d: d.__setitem__("name", "../../escaped-env")), "a copied directory"),
    "manifest: another environment's name": (
        _manifest(lambda d: d.__setitem__("name", "tf2.13-pip")), "a copied directory"),
    "manifest: unknown schema": (
        _manifest(lambda d: d.__setitem__("schema", 99)), "not a provision manifest"),
    "manifest: not JSON": (_edit(environment.MANIFEST, lambda t: t[:-5]), "not a provision"),
    "manifest: unknown path": (_request("path", "docker"), "not a provision manifest"),
    "manifest: another release": (_request("tf", "2.99"), "not in the matrix"),
    "manifest: a file's hash changed": (
        _manifest(lambda d: d["files"].__setitem__("requirements.in", "0" * 64)),  # type: ignore[union-attr]
        "changed since provision"),
    "manifest deleted": (_remove(environment.MANIFEST), "no environment 'tiny'"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CORPUS))
def test_a_tampered_environment_is_refused_before_anything_happens(
    index: Index, env: Env, case: str
) -> None:
    env.lock(index.add("1.0"))
    tamper, reason = CORPUS[case]
    tamper(env.dir)
    done = subprocess.run(
        [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("provision: error: "), (
        done.stderr
    )
    assert reason in done.stderr, done.stderr
    assert "network" not in done.stderr
    assert not env.prefix.exists() and not (env.home / "envs" / "escaped-env").exists()
    assert not index.requested.is_set()  # nothing was downloaded


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30


def _tree(prefix: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for path in prefix.rglob("*"):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        out[str(path)] = (st.st_size, st.st_mtime_ns)
    return out


def _descendants(pid: int) -> set[int]:
    """The processes below pid now (Linux /proc), however deep."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                kids = {int(k) for k in children.read_text().split()}
            except OSError:
                continue
            todo += kids - found
            found |= kids
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_kill_9_at_random_points_then_the_rerun_completes(index: Index, env: Env) -> None:
    """Ten installs killed (SIGKILL to provision alone) at random points: after each kill nothing
    writes into the prefix any more (a watcher compares the tree over a second), and the re-run
    completes; the built environment imports its package."""
    env.lock(index.add("1.0", payload=4_000_000))
    argv = [sys.executable, "-m", "provision", "install", env.name, "--out", str(env.out)]
    started = time.monotonic()
    code, out = run_cli("install", env.name, "--out", str(env.out), "--force")
    assert code == 0, out
    whole = time.monotonic() - started
    rng = random.Random(17)
    for _ in range(10):
        proc = subprocess.Popen(
            [*argv, "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.05, max(0.1, whole)))
        below = _descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # Its children die with it (PR_SET_PDEATHSIG); on a loaded machine a dying child may
        # still finish the write it was in, so wait until they are gone, then watch the tree.
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in below):
            assert time.monotonic() < deadline, f"outlived provision: {below}"
            time.sleep(0.05)
        time.sleep(0.3)  # what the kernel still had in flight
        before = _tree(env.prefix) if env.prefix.exists() else {}
        time.sleep(1.0)
        after = _tree(env.prefix) if env.prefix.exists() else {}
        assert before == after, "something wrote into the prefix after provision was killed"
        code, out = run_cli("install", env.name, "--out", str(env.out))
        assert code == 0, out
        assert state_of(env.prefix) == "complete"
        shown = subprocess.run(
            [env.prefix / "bin" / "python", "-c", "import provision_tiny as t; print(t.VERSION)"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert shown == "1.0"
        assert not list(env.prefix.parent.glob("*.provision-old"))
    assert os.listdir(env.home / "envs") == [env.name]
