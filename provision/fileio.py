"""The small file operations every part of provision shares: sha256 digests, replacing a file in
one rename, YAML through libyaml, and whether the file system can hold a path at all. Imports
nothing of provision's (the walls, payload/, scripts/, hooks/ and ansible/, keep their own
copies: they import nothing of provision's at all).

write_atomic writes a temporary file beside the target (same folder, so the rename cannot cross
file systems), flushes and fsyncs it, gives it its mode and renames it over the target: a reader
sees the old file or the new one, never half, and an interrupted write leaves the old one. The
temporary is removed on any failure. Parent folders are not created: a missing one is an error
the caller states.

swap_dir does the same for a whole directory (render's environment directories, an install from
a bundle, an export): written beside its target and renamed into place, and finish_swap puts
right what a swap killed between its two renames left."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

CHUNK = 1 << 20  # sha256_file reads this much at a time


def sha256_bytes(data: bytes) -> str:
    """The hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """The hex sha256 of `text` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB chunks (a runfile is gigabytes)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def umask() -> int:
    """The process's umask, read where Linux shows it (/proc/self/status), not by setting it and
    back: that round trip gives every other thread's new files the stand-in mask for a moment."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc (or a kernel before 4.7): the round trip
    os.umask(mask)
    return mask


def write_atomic(
    path: str | os.PathLike[str],
    data: str | bytes,
    mode: int | None = None,
    *,
    temp: str | os.PathLike[str] | None = None,
) -> None:
    """Replace `path` with `data` in one rename; on failure the old file is untouched and no
    temporary is left. Text is written as UTF-8 with its newlines as they are ("\\n" stays "\\n").
    `mode` is the new file's permissions; None: what a plain open() would give (0o666 less the
    umask). A symlink at `path` is replaced, not followed. `temp`: the temporary's own name, for
    a file whose interrupted write a reader must recognize (an install's marker); created or
    emptied, never followed; None: a fresh name beside `path` (.NAME.XXXXXXXX.tmp)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if temp is None:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    else:
        tmp = os.fspath(temp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~umask() if mode is None else mode)
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- a directory replaced whole ----------------------------------------------------------------

TEMP = "[a-z0-9_]" * 8  # the suffix mkdtemp gives: the only names of leftovers a swap touches


def finish_swap(target: Path, tag: str) -> None:
    """Put right what a swap_dir(target, tag) killed mid-way left (a kill has no chance to clean
    up): the old directory moved aside goes back where the swap took it from, unless the new one
    got there; then it, and a half-written new one, are removed. Only directories with swap_dir's
    names (mkdtemp's suffix) are touched, never a symlink. OSError as it comes."""
    parent, name = target.parent, target.name
    aside = [p for p in parent.glob(f".{name}.old-{TEMP}") if not p.is_symlink() and p.is_dir()]
    if len(aside) == 1 and not os.path.lexists(target):
        os.rename(aside.pop(), target)
    for left in [*aside, *parent.glob(f".{name}.{tag}-{TEMP}")]:
        if not left.is_symlink() and left.is_dir():
            shutil.rmtree(left)


@contextlib.contextmanager
def swap_dir(target: Path, tag: str, *, replace: bool = True) -> Iterator[Path]:
    """An empty directory (.NAME.TAG-XXXXXXXX beside `target`, so no rename crosses file systems,
    with an ordinary directory's mode) that replaces `target` when the block ends: renamed in
    where there is none; else the old one is renamed aside (.NAME.old-XXXXXXXX), the new one in,
    and only then the old one removed. An error in the block or the swap removes the new one and
    leaves the old one in place; a kill between the two renames leaves the old one aside, where
    finish_swap finds it. replace=False: an existing target is an error (FileExistsError), never
    replaced, even one made while the block ran."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{tag}-", dir=target.parent))
    old = target.parent / f".{target.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
    swapped = False
    try:
        tmp.chmod(0o777 & ~umask())  # mkdtemp makes it private
        yield tmp
        if not replace and os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
        if not target.exists():
            os.rename(tmp, target)
            return
        os.rename(target, old)
        try:
            os.rename(tmp, target)
        except BaseException:
            os.rename(old, target)
            raise
        swapped = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if swapped:  # only once the new directory is in place may the old one go
            shutil.rmtree(old, ignore_errors=True)


def load_yaml(path: Path | str) -> object:
    """YAML through libyaml where PyYAML has it (20x faster on a lock than the pure loader); a
    Path is read as UTF-8, a str is the document itself.

    A document of any shape (mapping, list, scalar, dates, keys that are no strings): the reader
    narrows it with isinstance."""
    import yaml

    text = path.read_text(encoding="utf-8") if isinstance(path, Path) else path
    data: object = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return data


def dump_yaml(data: object) -> str:
    """What conda-lock's writer produces (PyYAML's dump, insertion order), through libyaml; the
    safe dumper: a lock holds plain data only."""
    import yaml

    return str(
        yaml.dump(data, sort_keys=False, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    )


@cache
def _indented_dumper() -> Any:
    import yaml

    class Indented(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)

    return Indented


def dump_yaml_for_people(data: object) -> str:
    """YAML that people read and tools parse (environment.yml, the fleet's vars and playbook):
    written by the safe dumper from plain data, so every value is quoted as YAML needs (a name
    like `1.10` or `yes` stays a string), keys keep their order, lines are not folded, and lists
    are indented under their key as ansible-lint's yamllint and conda's own files have them."""
    import yaml

    return str(yaml.dump(data, Dumper=_indented_dumper(), sort_keys=False, width=1000))


# -- what the file system can hold ---------------------------------------------------------


NAME_MAX = 255
PATH_MAX = 4096


def _limits(path: str) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the file system the path is on (its nearest existing folder)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
    except (OSError, ValueError):
        return NAME_MAX, PATH_MAX


def path_problem(path: str) -> str | None:
    """Why the file system cannot hold this path, or None."""
    if not path.strip():
        return "is empty"
    if "\0" in path:
        return "holds a NUL character"
    if "\n" in path or "\r" in path:
        return "holds a line break (scripts, records and activation hooks would split it)"
    name_max, path_max = _limits(path)
    longest = max((len(os.fsencode(p)) for p in Path(path).parts), default=0)
    if longest > name_max:
        return f"has a name of {longest} bytes; this file system allows {name_max}"
    if len(os.fsencode(os.path.abspath(path))) >= path_max:
        return f"is longer than this file system allows ({path_max} bytes)"
    return None
