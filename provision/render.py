"""Rendering: an EnvSpec becomes the files of envs/<name>/ (inputs, hooks/runtime.env, manifest).

`render(spec, matrix)` is pure (spec in, {relative path: text} out); `render_export` adds what a
self-contained copy for another machine carries (its README). Writing is separate and
atomic: a whole environment directory is written next to its target and renamed into place, so an
interrupted render leaves the previous files. `run()` is what `provision render` calls.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision import diskread, environment, fileio, paths, userpackages
from provision import matrix as matrix_module
from provision.errors import RenderError, UsageError
from provision.fileio import dump_yaml_for_people, sha256_bytes, sha256_text
from provision.matrix import Matrix, kinds
from provision.matrix.spec import EnvRequest, EnvSpec, all_specs, default_name, expected
from provision.steps import StepResult

if TYPE_CHECKING:
    import jinja2

META = environment.MANIFEST
# Written by `provision lock` or the user's own (packages.in), never rendered: carried over when an
# environment is re-rendered.
# Written next to the rendered files by other commands, and kept as they are.
KEPT_DIRS = environment.COMMAND_DIRS
HEADER = "common/header.j2"
SUFFIX = ".j2"
EXPORT = "export"  # templates rendered only into `provision export` copies


def family(spec: EnvSpec) -> str:
    """The template family of a spec: the conda path has one per CUDA major."""
    return spec.kind.template_family(spec.cuda.major)


def regen_command(spec: EnvSpec) -> str:
    """The exact command that renders this environment directory again."""
    rel = spec.release
    argv = ["provision", "render", "--tf", rel.tf, "--path", spec.path]
    explicit_python = spec.python != rel.python[-1]
    if explicit_python:
        argv += ["--python", spec.python]
    if spec.name != default_name(rel, spec.path, spec.python if explicit_python else None):
        argv += ["--name", spec.name]
    if spec.gpu.memory:
        argv += ["--gpu-memory", spec.gpu.memory]
    if spec.gpu.devices:
        argv += ["--gpus", spec.gpu.devices]
    if spec.jupyter:
        argv.append("--jupyter")
    if rel.prerelease:
        argv.append("--pre")
    return shlex.join(argv)


def _tojson(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _pyrepr(value: Any) -> str:
    """A Python literal (JSON's null/true/false are not Python); one sorted key a line."""
    if isinstance(value, dict):
        items = "".join(f"    {k!r}: {v!r},\n" for k, v in sorted(value.items()))
        return "{\n" + items + "}"
    return repr(value)


def _cache_folder() -> str:
    """Where compiled templates go: provision's cache folder (caches.py: under PROVISION_HOME when
    it is set), as the environment says now."""
    from provision import caches

    return str(caches.root() / "jinja")


def _bytecode_cache(folder: str) -> jinja2.BytecodeCache | None:
    """Compiled templates in `folder`: compiling them is most of a render.

    Entries are keyed by each template's source checksum and the Python version, so a stale entry
    is never used; without a writable cache folder, templates are compiled every time.
    """
    import jinja2

    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return None
    return jinja2.FileSystemBytecodeCache(folder)


def _environment(root: Path) -> jinja2.Environment:
    # Made once per (templates, cache folder): a process whose cache folder changes (a library
    # caller, a test) never writes into the folder of before, which may be gone.
    return _environment_in(root, _cache_folder())


@cache
def _environment_in(root: Path, cache_folder: str) -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,  # one process renders once; no need to stat every template again
        bytecode_cache=_bytecode_cache(cache_folder),
    )
    env.filters["shquote"] = shlex.quote
    env.filters["tojson"] = _tojson
    env.filters["pyrepr"] = _pyrepr
    env.filters["yaml"] = dump_yaml_for_people
    return env


@cache
def _outputs(root: Path, fam: str, common: bool = True) -> dict[str, str]:
    """Output path -> template name for common/ plus the family; the family wins on a clash."""
    found: dict[str, str] = {}
    for base in ("common", fam) if common else (fam,):
        folder = root / base
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob(f"*{SUFFIX}")):
            rel = path.relative_to(folder)
            name = f"{base}/{rel.as_posix()}"
            if name == HEADER or any(part.startswith("_") for part in rel.parts):
                continue
            found[rel.as_posix()[: -len(SUFFIX)]] = name
    return dict(sorted(found.items()))


def render(spec: EnvSpec, matrix: Matrix) -> dict[str, str]:
    """Every file of envs/<spec.name>/ (relative path -> text), provision.json included."""
    files = _render_family(spec, matrix, family(spec))
    files[META] = _meta(spec, files)
    return files


def render_export(spec: EnvSpec, matrix: Matrix) -> dict[str, str]:
    """What `provision export` adds to an environment's files: its README."""
    return _render_family(spec, matrix, EXPORT, common=False)


def _render_family(spec: EnvSpec, matrix: Matrix, fam: str, common: bool = True) -> dict[str, str]:
    import jinja2

    root = paths.templates_dir()
    env = _environment(root)
    context = {
        "spec": spec,
        "expected": expected(spec),
        "regen": regen_command(spec),
        "matrix": matrix,
        "runtime": environment.runtime_values(spec),
    }
    files: dict[str, str] = {}
    for out_path, name in _outputs(root, fam, common).items():
        try:
            text = env.get_template(name).render(context)
        except jinja2.TemplateError as exc:
            line = f":{exc.lineno}" if isinstance(exc, jinja2.TemplateSyntaxError) else ""
            raise RenderError(f"template {name}{line}: {exc.message}") from exc
        if text.strip():
            files[out_path] = text
    return files


def _meta(spec: EnvSpec, files: Mapping[str, str]) -> str:
    request = environment.Request(
        tf=spec.release.tf,
        path=spec.path,
        python=spec.python,
        gpu_memory=spec.gpu.memory,
        gpus=spec.gpu.devices,
        jupyter=spec.jupyter,
    )
    hashes = {path: sha256_text(text) for path, text in sorted(files.items())}
    return environment.Manifest(request, hashes, spec.name).dumps()


# --- writing and checking ---------------------------------------------------------------------


@dataclass(frozen=True)
class _OnDisk:
    """An environment directory as it is now: its files and what provision.json says about them."""

    files: dict[str, bytes]  # relative path -> content, lock files excluded
    recorded: dict[str, str]  # relative path -> sha256 when last rendered

    @classmethod
    def read(cls, folder: Path) -> _OnDisk | None:
        if not folder.is_dir():
            return None
        files: dict[str, bytes] = {}
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            kept = rel.split("/", 1)[0] in KEPT_DIRS
            if path.is_file() and rel not in environment.KEPT_FILES and not kept:
                try:
                    files[rel] = path.read_bytes()
                except OSError as exc:
                    raise RenderError(f"cannot read {path}: {exc.strerror}") from exc
        recorded: dict[str, str] = {}
        try:
            meta = json.loads(files.get(META, b"{}"))
        except (ValueError, UnicodeDecodeError):
            meta = {}  # then every file counts as not rendered by provision
        if isinstance(meta, dict) and isinstance(meta.get("files"), dict):
            recorded = {str(k): str(v) for k, v in meta["files"].items()}
        return cls(files, recorded)

    def edited(self, new: Mapping[str, str]) -> list[str]:
        """Files that are neither what is about to be written nor what provision last rendered.

        provision.json is provision's own record (it cannot hold its own hash), so it never counts.
        """
        return [
            rel
            for rel, data in self.files.items()
            if rel != META
            and not (rel in new and new[rel].encode() == data)
            and self.recorded.get(rel) != sha256_bytes(data)
        ]


def _display(out: Path, *parts: str) -> str:
    return out.joinpath(*parts).as_posix()


def run(
    *,
    out: Path,
    request: EnvRequest | None,
    check: bool = False,
    force: bool = False,
    packages: Sequence[str] = (),
) -> StepResult:
    """`provision render`: resolve the request (None: every release on every path that can serve
    it, at its defaults: the CLI refuses --all with anything else), render everything in memory,
    then check or write. Done when a file was written, skipped when every file was already as
    rendered, stale when --check finds one that is not. packages: the user's (`--with`, `-r`),
    added to the requested environment's packages.in."""
    m = matrix_module.load()
    result = StepResult("render")
    if request is None:
        specs = all_specs(m)
        for rel in m.finals:
            for kind in kinds.KINDS.values():
                why = kind.refusal(m, rel)
                if why:
                    result.lines.append(f"skipped {default_name(rel, kind.name)}: {why}")
    else:
        specs = [request.resolve(m)]
    return write(
        out, specs, m, result, all_=request is None, check=check, force=force, packages=packages
    )


def write(
    out: Path,
    specs: Sequence[EnvSpec],
    m: Matrix,
    result: StepResult,
    *,
    all_: bool = False,
    check: bool = False,
    force: bool = False,
    packages: Sequence[str] = (),
) -> StepResult:
    """Render resolved specs: every file in memory first, then compare (check) or write them;
    `result` gets a line per file; all_: they are the whole matrix (`render --all`). `create`
    calls this with the spec it has resolved."""
    # The inputs are judged before anything is written, the template cache included.
    if check and packages:
        raise UsageError("--check compares rendered files; it takes no --with or -r")
    _check_out_dir(out, writing=not check)
    user = {s.name: _user_text(out / s.name, s, packages) for s in specs if packages}
    rendered = {s.name: render(s, m) for s in specs}
    if check:
        _check(out, rendered, all_, result)
    else:
        _write_all(out, rendered, all_, force, result, user)
        if not any(line.startswith("rendered ") for line in result.lines):
            result.outcome = "skipped"
    return result


def _user_text(folder: Path, spec: EnvSpec, packages: Sequence[str]) -> str:
    """packages.in with the packages given added (the user's lines kept); UsageError before
    anything is written when one is not a package spec."""
    wanted = [userpackages.parse_spec(p, spec.kind.conda_env, "--with") for p in packages]
    path = folder / environment.USER_FILE
    try:
        text = path.read_text(encoding="utf-8") if os.path.lexists(path) else None
    except (OSError, UnicodeDecodeError) as exc:
        raise RenderError(f"cannot read {path}: {exc}") from exc
    if text is not None:
        userpackages.parse(
            text, spec.kind.conda_env, str(path)
        )  # the user's own lines must read first
    return userpackages.added(text, wanted, spec.name, spec.kind.conda_env)


def _check_out_dir(out: Path, *, writing: bool) -> None:
    if out.exists() and not out.is_dir():
        raise RenderError(f"--out {out} is a file, not a directory")
    if not writing:
        return
    existing = out
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise RenderError(f"--out {out}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RenderError(f"--out {out}: {existing} is not writable")


def _extra_dirs(out: Path, names: Iterable[str]) -> list[str]:
    if not out.is_dir():
        return []
    wanted = set(names)
    return sorted(
        p.name
        for p in out.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in wanted
    )


def _check(
    out: Path, rendered: Mapping[str, Mapping[str, str]], all_: bool, result: StepResult
) -> None:
    stale = 0
    for env_name, files in rendered.items():
        disk = _OnDisk.read(out / env_name)
        if disk is None:
            result.lines.append(f"missing: {_display(out, env_name)} (not rendered)")
            stale += 1
            continue
        problems = []
        edited = set(disk.edited({}))
        for rel, text in files.items():
            if rel not in disk.files:
                problems.append(f"missing: {_display(out, env_name, rel)}")
            elif disk.files[rel] != text.encode():
                what = "edited" if rel in edited else "stale"
                suffix = " (changed by hand since rendering)" if what == "edited" else ""
                problems.append(f"{what}: {_display(out, env_name, rel)}{suffix}")
        for rel in disk.files:
            if rel not in files:
                problems.append(f"extra: {_display(out, env_name, rel)}")
        if problems:
            stale += 1
            result.lines.extend(problems)
        else:
            result.lines.append(f"fresh {_display(out, env_name)} ({len(files)} files)")
    if all_:
        for extra in _extra_dirs(out, rendered):
            result.lines.append(f"extra: {_display(out, extra)} (not produced by --all)")
            stale += 1
    if stale:
        again = "provision render --all" if all_ else "the command in each file's header"
        result.outcome, result.hint = "stale", f"regenerate with {again}"
        result.lines.append(f"{stale} environment(s) not as rendered; regenerate with {again}")


def _write_all(
    out: Path,
    rendered: Mapping[str, Mapping[str, str]],
    all_: bool,
    force: bool,
    result: StepResult,
    user: Mapping[str, str] | None = None,
) -> None:
    # Refuse before writing anything: a render either replaces every hand edit (--force) or none.
    plans: dict[str, _OnDisk | None] = {}
    conflicts: list[str] = []
    for env_name, files in rendered.items():
        _finish_interrupted(out, env_name)
        if (out / env_name).exists() and not (out / env_name).is_dir():
            raise RenderError(f"{_display(out, env_name)} is a file, not an environment directory")
        disk = _OnDisk.read(out / env_name)
        plans[env_name] = disk
        if disk is not None:
            conflicts += [_display(out, env_name, rel) for rel in disk.edited(files)]
    if conflicts and not force:
        shown = ", ".join(conflicts[:5]) + (
            f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
        )
        them = "them" if len(conflicts) > 1 else "it"
        raise RenderError(
            f"{shown}: edited by hand or not rendered by provision; move {them} away, "
            f"or re-run with --force to overwrite {them}"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RenderError(f"cannot create --out {out}: {exc.strerror}") from exc
    for env_name, files in rendered.items():
        disk = plans[env_name]
        where = _display(out, env_name)
        mine = (user or {}).get(env_name)
        users = out / env_name / environment.USER_FILE
        same_user = mine is None or diskread.text_or_none(users, environment.RENDERED_LIMIT) == mine
        same_files = disk is not None and disk.files == {k: v.encode() for k, v in files.items()}
        if same_files and same_user:
            result.lines.append(f"unchanged {where} ({len(files)} files)")
            continue
        _write_env(out, env_name, files, mine)
        result.lines.append(f"rendered {where} ({len(files)} files)")
        if not same_user:
            result.lines.append(f"wrote {where}/{environment.USER_FILE} (your packages)")
    if all_:
        for extra in _extra_dirs(out, rendered):
            result.lines.append(
                f"extra: {_display(out, extra)} is not produced by --all (left as it is)"
            )


def _finish_interrupted(out: Path, env_name: str) -> None:
    """What a render of env_name killed mid-way left goes (fileio.finish_swap)."""
    try:
        fileio.finish_swap(out / env_name, "render")
    except OSError as exc:
        raise RenderError(f"cannot finish an interrupted render of {env_name}: {exc}") from exc


def _write_env(
    out: Path, env_name: str, files: Mapping[str, str], user_text: str | None = None
) -> None:
    """Write the directory beside its target, then swap it in; the old one survives any failure."""
    target = out / env_name
    try:
        with fileio.swap_dir(target, "render") as tmp:
            for folder in sorted({os.path.dirname(rel) for rel in files} - {""}):
                (tmp / folder).mkdir(parents=True, exist_ok=True)
            for rel, text in files.items():
                # The umask applies to this mode; scripts with a shebang are executable.
                mode = 0o777 if text.startswith("#!") else 0o666
                fd = os.open(tmp / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                with open(fd, "wb") as f:
                    f.write(text.encode())
            for lock in environment.KEPT_FILES:
                if (target / lock).is_file():
                    shutil.copy2(target / lock, tmp / lock)
            if user_text is not None:
                (tmp / environment.USER_FILE).write_text(user_text, encoding="utf-8")
            for kept in KEPT_DIRS:
                if (target / kept).is_dir():
                    shutil.copytree(target / kept, tmp / kept)
    except OSError as exc:
        raise RenderError(f"cannot write {target}: {exc.strerror or exc}") from exc
