"""What `provision lock --check` and lock.check_lock() find in a lock that is not what provision
wrote: an old format, an edited, truncated, emptied or header-less file, a body that is not YAML,
and a lock that is not complete and closed. Locks are made by the real CLI (conda-lock with the
built-in solver against the local channel; uv against a local index) and then tampered with."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import clitools
import localchannel
import pytest
from click.testing import CliRunner

from provision import environment, matrix
from provision.cli.commands import cli
from provision.errors import LockInvalid, StaleError
from provision.lock import check_lock
from provision.matrix import kinds, spec

M = matrix.load()
CONDA_ROW = next(  # the pip part holds more than TensorFlow: a cuDNN wheel
    r.tf for r in reversed(M.finals)
    if kinds.of("conda").refusal(M, r) is None and M.cuda_of(r).major == 11
    and not M.cudnn_of(r).conda_forge
)  # fmt: skip
PIP_ROW = next(r.tf for r in reversed(M.finals) if kinds.of("pip").refusal(M, r) is None)
BODY_TAG = "# provision-body-sha256: "
END_TAG = "# provision-lock-end: "


provision = functools.partial(clitools.provision, script=True, timeout=600)


def render(out: Path, tf: str, path: str) -> str:
    result = CliRunner().invoke(cli, ["render", "--tf", tf, "--path", path, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return spec.resolve(M, tf, path).name


def check(out: Path, name: str, *flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["lock", name, "--out", str(out), "--check", *flags])
    return result.exit_code, result.output


# -- a local index whose wheels have dependencies (tensorflow -> absl-py -> six) -----------------


def wheel(root: Path, name: str, version: str, requires: list[str], extras: list[str]) -> Path:
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Provides-Extra: {e}\n" for e in extras)
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    members = {
        f"{dist}.dist-info/METADATA": metadata,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    members[f"{dist}.dist-info/RECORD"] = "".join(f"{p},,\n" for p in [*members, "RECORD"])
    out = root / "packages" / f"{dist}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as zf:
        for path in sorted(members):
            zf.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), members[path])
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    page = root / "simple" / re.sub(r"[-_.]+", "-", name).lower() / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    with page.open("a") as f:  # one link per version
        f.write(f'<a href="../../packages/{out.name}#sha256={sha}">{out.name}</a>\n')
    return out


@pytest.fixture(scope="module")
def deps_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("deps-index")
    for s in (spec.resolve(M, CONDA_ROW, "conda"), spec.resolve(M, PIP_ROW, "pip")):
        for req in s.pip_requirements:
            name, version = re.sub(r"\[.*\]", "", req).split("==")
            extras = re.findall(r"\[(.*)\]", req)
            requires = ["absl-py>=1.0"] if name == "tensorflow" else []
            wheel(root, name, version, requires, extras)
    wheel(root, "absl-py", "2.1.0", ["six>=1.16"], [])
    wheel(root, "six", "1.16.0", [], [])
    server = localchannel.Server(root)
    yield f"{server.url}/simple"
    server.stop()


@pytest.fixture(scope="module")
def locked(
    tmp_path_factory: pytest.TempPathFactory, local_channel: localchannel.Channel, deps_index: str
) -> Path:
    """envs/ with a conda lock (made with --channel) and a pip lock, both by the real CLI."""
    out = tmp_path_factory.mktemp("locked") / "envs"
    cache = str(tmp_path_factory.mktemp("cache"))
    env = {"PIP_INDEX_URL": deps_index}
    conda = render(out, CONDA_ROW, "conda")
    done = provision("lock", conda, "--out", str(out), "--channel", local_channel.url,
                     "--solver", "builtin", "--cache-dir", cache, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    pip = render(out, PIP_ROW, "pip")
    done = provision("lock", pip, "--out", str(out), "--cache-dir", cache, env=env)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def envs(locked: Path, tmp_path: Path) -> Path:
    shutil.copytree(locked, tmp_path / "envs")
    return tmp_path / "envs"


def names() -> tuple[str, str]:
    return spec.resolve(M, CONDA_ROW, "conda").name, spec.resolve(M, PIP_ROW, "pip").name


def lock_of(out: Path, path: str) -> tuple[str, Path, list[str]]:
    """(name, lock file, the flags --check needs) of the conda or the pip environment."""
    conda, pip = names()
    if path == "conda":
        data = json.loads(read_header(out / conda / "conda-lock.yml")["inputs"])
        return conda, out / conda / "conda-lock.yml", ["--channel", data["channels"][0]]
    return pip, out / pip / "requirements.lock", []


def read_header(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if line.startswith("# provision-inputs: "):
            found["inputs"] = line.removeprefix("# provision-inputs: ")
    return found


# -- tampering: the text of a lock, by package blocks ---------------------------------------------


def split(text: str, path: str) -> tuple[str, list[str], str]:
    """(everything before the first package, the packages' blocks, the end line)."""
    start = r"^- name: " if path == "conda" else r"^[A-Za-z0-9]"
    lines = text.splitlines(keepends=True)
    firsts = [i for i, line in enumerate(lines) if re.match(start, line)]
    end = next(i for i, line in enumerate(lines) if line.startswith(END_TAG))
    bounds = [*firsts, end]
    blocks = ["".join(lines[a:b]) for a, b in itertools.pairwise(bounds)]
    return "".join(lines[: firsts[0]]), blocks, "".join(lines[end:])


def extra_block(path: str, name: str = "orphan-pkg") -> str:
    if path == "conda":
        return (
            f"- name: {name}\n  version: '1.0'\n  manager: conda\n  platform: linux-64\n"
            f"  dependencies: {{}}\n  url: file:///nowhere/{name}-1.0-0.tar.bz2\n  hash:\n"
            f"    md5: {'ab' * 16}\n    sha256: {'ab' * 32}\n  category: main\n  optional: false\n"
        )
    return f"{name}==1.0 \\\n    --hash=sha256:{'0' * 64}\n"


def appended(text: str, path: str) -> str:
    head, blocks, end = split(text, path)
    return head + "".join(blocks) + extra_block(path) + end


def removed(text: str, path: str) -> str:
    head, blocks, end = split(text, path)
    return head + "".join(blocks[:1] + blocks[2:]) + end


def edited(text: str, path: str) -> str:
    head, blocks, end = split(text, path)
    bump = re.compile(r"(version: '?|==)(\d+)")
    first = bump.sub(lambda m: f"{m[1]}{int(m[2]) + 1}", blocks[0], count=1)
    assert first != blocks[0]
    return head + first + "".join(blocks[1:]) + end


def truncated(text: str, path: str) -> str:
    head, blocks, _ = split(text, path)
    return head + "".join(blocks[:-1])  # ends at a package boundary, without the rest


def emptied(text: str, path: str) -> str:
    return ""


def headerless(text: str, path: str) -> str:
    return text.split(BODY_TAG, 1)[1].split("\n", 1)[1]


def not_yaml(text: str, path: str) -> str:
    head, blocks, end = split(text, path)
    return head + blocks[0] + "- name: [unclosed\n  version: {\n" + "".join(blocks[1:]) + end


@pytest.mark.parametrize(
    ("path", "tamper", "reason"),
    [
        ("pip", appended, "the lock was edited after it was made"),
        ("pip", removed, "the lock was edited after it was made"),
        ("pip", edited, "the lock was edited after it was made"),
        ("pip", truncated, "the lock is truncated"),
        ("pip", emptied, "the lock is empty"),
        ("pip", headerless, "requirements.lock has no provision header"),
        ("conda", appended, "the lock was edited after it was made"),
        ("conda", removed, "the lock was edited after it was made"),
        ("conda", edited, "the lock was edited after it was made"),
        ("conda", truncated, "the lock is truncated"),
        ("conda", emptied, "the lock is empty"),
        ("conda", headerless, "conda-lock.yml has no provision header"),
        ("conda", not_yaml, "the lock's body is not valid YAML"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else getattr(v, "__name__", None),
)
def test_check_refuses_a_tampered_lock(
    envs: Path, path: str, tamper: Callable[[str, str], str], reason: str
) -> None:
    name, lock_file, flags = lock_of(envs, path)
    assert check(envs, name, *flags) == (0, f"envs/{name}/{lock_file.name} is up to date "
                                            f"({count(lock_file)} packages)\n")  # fmt: skip
    lock_file.write_text(tamper(lock_file.read_text(), path))
    code, output = check(envs, name, *flags)
    assert code == 1, output
    assert output.count("\n") == 1 and output.startswith(f"provision: error: envs/{name}/")
    assert reason in output
    assert f"run: provision lock {name}" in output
    with pytest.raises(LockInvalid) as caught:
        check_lock(environment.load(envs / name))
    assert reason in str(caught.value)


def count(lock_file: Path) -> int:
    return int(lock_file.read_text().rsplit(END_TAG, 1)[1].split()[0])


def test_a_lock_keeps_its_meaning_in_its_header(envs: Path) -> None:
    _, lock_file, _ = lock_of(envs, "pip")
    text = lock_file.read_text()
    body = text.split(BODY_TAG, 1)[1].split("\n", 1)[1]
    assert f"{BODY_TAG}{hashlib.sha256(body.encode()).hexdigest()}\n" in text
    assert body.endswith(f"{END_TAG}{count(lock_file)} packages\n")
    inputs = json.loads(read_header(lock_file)["inputs"])
    assert inputs["format"] == 2
    assert inputs["requirements"] == sorted(spec.resolve(M, PIP_ROW, "pip").pip_requirements)


# -- complete and closed: tampered with, then re-sealed (the body digest made to match) -----------


def reseal(lock_file: Path) -> None:
    text = lock_file.read_text()
    head, rest = text.split(BODY_TAG, 1)
    body = rest.split("\n", 1)[1]
    lock_file.write_text(f"{head}{BODY_TAG}{hashlib.sha256(body.encode()).hexdigest()}\n{body}")


def drop_block(text: str, path: str, name: str) -> str:
    head, blocks, end = split(text, path)
    kept = [b for b in blocks if not re.match(rf"(- name: )?{re.escape(name)}(==|\n)", b)]
    assert len(kept) == len(blocks) - 1, name
    return head + "".join(kept) + end


def set_version(text: str, path: str, name: str, version: str) -> str:
    if path == "conda":
        pattern = rf"(- name: {re.escape(name)}\n  version: )'?[^'\n]+'?"
        return re.sub(pattern, rf"\g<1>{version}", text, count=1)
    return re.sub(rf"^{re.escape(name)}==\S+", f"{name}=={version}", text, count=1, flags=re.M)


@pytest.mark.parametrize(
    ("path", "tamper", "reason"),
    [
        ("pip", lambda t: appended(t, "pip"),
         "orphan-pkg==1.0 is pinned but nothing in requirements.in requires it"),
        ("pip", lambda t: drop_block(t, "pip", "absl-py"),
         "six==1.16.0 is there for absl-py (# via), which is not pinned"),
        ("pip", lambda t: drop_block(t, "pip", "tensorflow"),
         "from requirements.in has no pin"),
        ("pip", lambda t: set_version(t, "pip", "tensorflow", "2.0.0"),
         "from requirements.in is not satisfied by tensorflow==2.0.0"),
        ("conda", lambda t: appended(t, "conda"),
         "linux-64: orphan-pkg 1.0 (conda) is in the lock but nothing in environment.yml "
         "requires it"),
        ("conda", lambda t: drop_block(t, "conda", "libzlib"),
         "depends on libzlib, which the lock does not hold"),
        ("conda", lambda t: drop_block(t, "conda", "absl-py"),
         "depends on absl-py, which the lock does not hold"),
        ("conda", lambda t: set_version(t, "conda", "python", "2.7.18"),
         "is not satisfied by python 2.7.18"),
    ],
    ids=["pip-orphan", "pip-dangling-via", "pip-missing", "pip-unsatisfied", "conda-orphan",
         "conda-missing-dependency", "conda-missing-pip-dependency", "conda-unsatisfied"],
)  # fmt: skip
def test_check_refuses_a_lock_that_is_not_complete_and_closed(
    envs: Path, path: str, tamper: Callable[[str], str], reason: str
) -> None:
    name, lock_file, flags = lock_of(envs, path)
    lock_file.write_text(tamper(lock_file.read_text()))
    reseal(lock_file)
    code, output = check(envs, name, *flags)
    assert code == 1, output
    assert output.count("\n") == 1 and "is not complete and closed: " in output
    assert reason in output
    with pytest.raises(LockInvalid) as caught:
        check_lock(environment.load(envs / name))
    assert reason in str(caught.value)


def test_pip_dependencies_are_recorded_so_the_closure_holds(envs: Path) -> None:
    """tensorflow -> absl-py -> six in both kinds of lock: reachable, so the lock is closed."""
    conda, pip = names()
    for name in (conda, pip):
        assert check_lock(environment.load(envs / name)) is None
    text = (envs / conda / "conda-lock.yml").read_text()
    tf = re.search(r"- name: tensorflow\n(?:  .*\n)+", text)
    assert tf is not None and "  dependencies:\n    absl-py: ''\n" in tf[0]
    absl = re.search(r"- name: absl-py\n(?:  .*\n)+", text)
    assert absl is not None and "    six: ''\n" in absl[0]
    lock = (envs / pip / "requirements.lock").read_text()
    assert "\nsix==1.16.0 \\\n" in lock and "# via absl-py" in lock


# -- an old format, and which inputs check_lock compares ------------------------------------------


def test_a_lock_in_the_old_format_is_stale(envs: Path, deps_index: str, tmp_path: Path) -> None:
    """What provision wrote before: a digest of requirements.in's bytes, no body digest."""
    _, pip = names()
    lock_file = envs / pip / "requirements.lock"
    text = lock_file.read_text()
    new = json.loads(read_header(lock_file)["inputs"])
    req = (envs / pip / "requirements.in").read_bytes()
    old = {"files": {"requirements.in": hashlib.sha256(req).hexdigest()}}
    old.update({key: new[key] for key in ("platforms", "python", "target")})
    old_json = json.dumps(old, sort_keys=True, separators=(",", ":"))
    head, rest = text.split("# provision-inputs: ", 1)
    body = rest.split(BODY_TAG, 1)[1].split("\n", 1)[1].split(END_TAG, 1)[0]
    lock_file.write_text(
        f"{head}# provision-inputs: {old_json}\n"
        f"# provision-inputs-sha256: {hashlib.sha256(old_json.encode()).hexdigest()}\n{body}"
    )
    code, output = check(envs, pip)
    assert code == 1
    assert f"envs/{pip}/requirements.lock is stale (made by an older provision; re-lock)" in output
    with pytest.raises(StaleError, match="made by an older provision"):
        check_lock(environment.load(envs / pip))
    done = provision("lock", pip, "--out", str(envs), "--cache-dir", str(tmp_path / "cache"),
                     env={"PIP_INDEX_URL": deps_index})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert check_lock(environment.load(envs / pip)) is None


def test_check_lock_compares_with_the_channels_the_lock_was_made_for(
    envs: Path, local_channel: localchannel.Channel, deps_index: str, tmp_path: Path
) -> None:
    conda, pip = names()
    env_file = envs / conda / "environment.yml"
    assert "  - conda-forge\n" in env_file.read_text()
    assert (
        check_lock(environment.load(envs / conda)) is None
    )  # made with --channel: environment.yml's are not used
    env_file.write_text(env_file.read_text().replace("  - conda-forge\n", "  - other\n"))
    assert check_lock(environment.load(envs / conda)) is None
    # made from environment.yml's channels: a change there stales it
    env_file.write_text(env_file.read_text().replace("  - other\n", f"  - {local_channel.url}\n"))
    done = provision("lock", conda, "--out", str(envs), "--solver", "builtin", "--cache-dir",
                     str(tmp_path / "cache"), env={"PIP_INDEX_URL": deps_index})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert check_lock(environment.load(envs / conda)) is None
    env_file.write_text(env_file.read_text().replace(f"  - {local_channel.url}\n", "  - other\n"))
    with pytest.raises(StaleError, match=r"channels \['file://.*'\] -> \['other'\]"):
        check_lock(environment.load(envs / conda))
    # and a changed requirement, named
    req = envs / pip / "requirements.in"
    req.write_text(req.read_text() + "six>=1.16\n")
    with pytest.raises(StaleError, match=r"\(requirements changed: added six>=1\.16\); run: "):
        check_lock(environment.load(envs / pip))
