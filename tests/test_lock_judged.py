"""The lock is judged by what it does, not only by its digest (issue 23, item 5).

Each lock here is a real one, sealed by provision for tinyindex's wheel, then edited as an
adversary would: the body changed and its digest recomputed, so every digest still matches.
- A marker that is never true on the target leaves the environment without its one package:
  refused by `lock --check` and `install`, and nothing is registered as built.
- A hash that is the sha256 of no file the index lists for the release is refused when the index
  lists the whole release (as many files as the lock has hashes, each with its sha256), even when
  the added hash keeps uv's order. An index that lists fewer (a mirror of the locked wheels only,
  as the fleet serves) cannot tell a file it does not carry from an added hash: such a lock
  installs, each file checked against the lock by the installer.
- A lock whose hashes are uv's own (one per file of the release: here a wheel and an sdist)
  installs.
- A header line that is not provision's is never echoed: the error names the line's number only.
(tests/test_hostile.py runs many more such edits as a corpus.)
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from clitools import run_cli
from tinyindex import TINY, Env, Index

from provision import registry


def reseal(lock: Path, edit: object) -> None:
    text = lock.read_text()
    tag = "# provision-body-sha256: "
    head, rest = text.split(tag, 1)
    _, body = rest.split("\n", 1)
    body = edit(body)  # type: ignore[operator]
    lock.write_text(f"{head}{tag}{hashlib.sha256(body.encode()).hexdigest()}\n{body}")


def test_a_marker_never_true_on_the_target_is_refused(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    lock = env.dir / "requirements.lock"
    reseal(lock, lambda b: b.replace(f"{TINY}==1.0 ", f'{TINY}==1.0 ; python_version < "2" '))
    for args in (("lock", "tiny", "--check"), ("install", "tiny")):
        code, out = run_cli(*args, "--out", str(env.out))
        assert code == 1, out
        assert "marker that is false on the target" in out and "python_version < " in out, out
    assert registry.get("tiny") is None
    assert not env.prefix.exists()


def test_a_marker_true_on_the_target_is_kept(index: Index, env: Env) -> None:
    env.lock(index.add("1.0"))
    lock = env.dir / "requirements.lock"
    reseal(lock, lambda b: b.replace(f"{TINY}==1.0 ", f'{TINY}==1.0 ; sys_platform == "linux" '))
    code, out = run_cli("lock", "tiny", "--check", "--out", str(env.out))
    assert code == 0, out


def test_a_mirror_of_the_locked_wheels_only_installs(index: Index, env: Env) -> None:
    """The lock has the hashes of a wheel and an sdist; the index serves only the wheel (a lab's
    mirror): it installs, since no listed file is missing from the lock."""
    env.lock(index.add("1.0"))
    lock = env.dir / "requirements.lock"
    other = "f" * 64  # the sdist's, say: this index does not carry it (and it keeps uv's order)
    reseal(lock, lambda b: b.replace("\n    # via", f" \\\n    --hash=sha256:{other}\n    # via"))
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 0, out
    assert registry.get("tiny") is not None


def test_a_hash_of_no_file_on_the_index_is_refused(index: Index, env: Env) -> None:
    """Two files of the release on the index (a wheel and an sdist), two hashes in the lock, but
    one of them is of neither file."""
    env.lock(index.add("1.0"))
    _sdist(index.root, "1.0")
    lock = env.dir / "requirements.lock"
    stranger = "f" * 64
    reseal(
        lock, lambda b: b.replace("\n    # via", f" \\\n    --hash=sha256:{stranger}\n    # via")
    )
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 1, out
    assert "the sha256 of no file the index lists" in out, out


def test_one_hash_per_file_of_the_release_installs(index: Index, env: Env) -> None:
    """As uv writes them: the wheel's hash and the sdist's, in sorted order."""
    text = index.add("1.0")
    sdist = _sdist(index.root, "1.0")
    hashes = sorted(
        [text.split("sha256:")[1].strip(), hashlib.sha256(sdist.read_bytes()).hexdigest()]
    )
    both = f"{TINY}==1.0 \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hashes) + "\n"
    env.lock(both)
    code, out = run_cli("install", "tiny", "--out", str(env.out))
    assert code == 0, out


def _sdist(folder: Path, version: str) -> Path:
    path = folder / f"provision_tiny-{version}.tar.gz"
    data = f"Metadata-Version: 2.1\nName: {TINY}\nVersion: {version}\n".encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"provision_tiny-{version}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_a_header_that_is_not_provisions_is_refused_and_never_echoed(
    index: Index, env: Env
) -> None:
    env.lock(index.add("1.0"))
    lock = env.dir / "requirements.lock"
    text = lock.read_text()
    lock.write_text(
        text.replace("regenerate with: provision lock tiny", "regenerate with: rm -rf ~")
    )
    for args in (("lock", "tiny", "--check"), ("install", "tiny"), ("show", "tiny")):
        code, out = run_cli(*args, "--out", str(env.out))
        assert "rm -rf" not in out, out
    code, out = run_cli("lock", "tiny", "--check", "--out", str(env.out))
    assert code == 1 and "line 3 of its header is not what provision writes" in out, out
    lock.write_text(text)
    code, out = run_cli("lock", "tiny", "--check", "--out", str(env.out))
    assert code == 0, out
