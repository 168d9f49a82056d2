"""A conda-forge-like channel whose environments really run: real CPython, real pip, real CUDA libs.

tests/localchannel.py gives conda-forge's names, versions and dependency metadata with (mostly)
empty packages. Building an environment that runs needs more, and this module puts real files into
the same catalogue:

- `python` X.Y: this host's own CPython, repackaged from a pyenv-style installation tree (bin/,
  lib/libpythonX.Y.so.1.0, the standard library with lib-dynload; no tests, caches or site
  packages). Its ELF RUNPATH entries point at the original tree; they are rewritten to
  $ORIGIN-relative paths (padded with NULs, as conda's own binary prefix replacement does), so the
  environment's interpreter loads the environment's libpython.
- `pip`: the pip wheel that interpreter bundles (ensurepip), as a noarch: python package, with a
  bin/pip that runs `python -m pip` of the environment.
- `cudatoolkit` (CUDA 11), `cuda-cudart` (CUDA 12), `cudnn`: NVIDIA's real libcudart and libcudnn
  from the nvidia-cuda-runtime-cuXX / nvidia-cudnn-cuXX wheels (members fetched with range
  requests and cached by tests/fakes/nvidia.py), under conda-forge's file names and links.
  Only cuDNN's dispatcher (and, for cuDNN 9, libcudnn_graph, which cudnnGetVersion needs) is
  taken: the other sub-libraries are hundreds of MB each and are loaded only for real work.

Used by tests/test_install.py, tests/test_create.py and tests/bench/bench_install.py.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import localchannel as lc
from fakes import nvidia

from provision.matrix import Matrix
from provision.matrix.spec import EnvSpec

# Parts of a CPython tree an environment never needs; the test suite alone is 120 MB.
_SKIP_DIRS = {
    "__pycache__", "test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo",
    "site-packages", "ensurepip", "lib2to3",
}  # fmt: skip


def python_tree(version: str) -> Path | None:
    """The installation prefix of this host's CPython X.Y when it is a self-contained tree."""
    from provision import tools
    from provision.errors import InstallError

    try:
        exe = tools.find_python(version)
    except InstallError:
        return None
    prefix = Path(
        subprocess.run(
            [exe, "-c", "import sys; print(sys.base_prefix)"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    needed = (
        prefix / "bin" / f"python{version}",
        prefix / "lib" / f"libpython{version}.so.1.0",
        prefix / "lib" / f"python{version}" / "os.py",
    )
    return prefix if all(p.is_file() for p in needed) else None


def _relative_runpath(data: bytes, old: str, new: str) -> bytes:
    """Replace the NUL-terminated string `old` (an RUNPATH entry) by `new`, keeping the length."""
    before, after = old.encode() + b"\0", new.encode() + b"\0"
    if len(after) > len(before):
        raise ValueError(f"{new!r} is longer than {old!r}")
    return data.replace(before, after + b"\0" * (len(before) - len(after)))


def python_files(tree: Path, version: str) -> dict[str, lc.FileContent]:
    libdir = str(tree / "lib")
    files: dict[str, lc.FileContent] = {
        f"bin/python{version}": _relative_runpath(
            (tree / "bin" / f"python{version}").read_bytes(), libdir, "$ORIGIN/../lib"
        ),
        "bin/python3": lc.Symlink(f"python{version}"),
        "bin/python": lc.Symlink(f"python{version}"),
        f"lib/libpython{version}.so.1.0": _relative_runpath(
            (tree / "lib" / f"libpython{version}.so.1.0").read_bytes(), libdir, "$ORIGIN"
        ),
        f"lib/libpython{version}.so": lc.Symlink(f"libpython{version}.so.1.0"),
        f"lib/python{version}/site-packages/README.txt": "This is the site-packages folder.\n",
    }
    stdlib = tree / "lib" / f"python{version}"
    for dirpath, dirnames, filenames in os.walk(stdlib):
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("config-")
        )
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            rel = path.relative_to(tree).as_posix()
            if path.parent.name == "lib-dynload" and name.endswith(".so"):
                files[rel] = _relative_runpath(path.read_bytes(), libdir, "$ORIGIN/../..")
            else:
                files[rel] = path
    return files


def pip_files(tree: Path, version: str) -> tuple[str, dict[str, lc.FileContent]]:
    """(pip's version, the files of a noarch: python pip package) from the bundled wheel."""
    wheel = next((tree / "lib" / f"python{version}" / "ensurepip" / "_bundled").glob("pip-*.whl"))
    pip_version = wheel.name.split("-")[1]
    files: dict[str, lc.FileContent] = {
        # bin/ (not python-scripts/): localchannel makes bin/* executable.
        "bin/pip": '#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n'
    }
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.endswith("/"):
                files[f"site-packages/{name}"] = zf.read(name)
    return pip_version, files


def _lib_files(folder: Path, names: list[str]) -> dict[str, lc.FileContent]:
    return {f"lib/{p.name}": p for n in names for p in sorted(folder.glob(n))}


def cudart_files(matrix: Matrix, line: str) -> dict[str, lc.FileContent]:
    """lib/libcudart.so.<full> and its SONAME link (conda-forge's layout), from NVIDIA's wheel."""
    runtime = nvidia.cuda_runtime(matrix.cuda[line])
    full = f"libcudart.so.{runtime.version}"
    return {f"lib/{full}": runtime.path, f"lib/{runtime.soname}": lc.Symlink(full)}


def cudnn_files(version: str, cuda_major: int) -> dict[str, lc.FileContent]:
    project = f"nvidia-cudnn-cu{cuda_major}"
    wheels = nvidia.linux_wheels(project)
    same = [w for w in wheels if w.version == version] or [
        w for w in wheels if w.version.split(".")[:2] == version.split(".")[:2]
    ]
    if not same:
        raise LookupError(f"the index has no {project} wheel of cuDNN {version}")
    major = version.split(".")[0]
    patterns = [
        f"nvidia/cudnn/lib/libcudnn.so.{major}",
        f"nvidia/cudnn/lib/libcudnn_graph.so.{major}",
    ]
    folder = nvidia.wheel_members(same[-1], patterns if int(major) >= 9 else patterns[:1])
    return _lib_files(folder / "nvidia" / "cudnn" / "lib", [f"libcudnn*.so.{major}"])


def build(root: Path, matrix: Matrix, spec: EnvSpec) -> lc.Channel:
    """The conda-forge-like catalogue with the spec's python, real pip, and NVIDIA's real libcudart
    and libcudnn in the packages of the spec's CUDA stack (other packages stay as localchannel
    makes them)."""
    python = spec.python
    tree = python_tree(python)
    if tree is None:
        raise LookupError(f"this host has no self-contained CPython {python} tree to repackage")
    real_version = subprocess.run(
        [tree / "bin" / f"python{python}", "-c", "import platform as p; print(p.python_version())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    pip_version, pip = pip_files(tree, python)
    cuda = spec.cuda
    cudart_package = "cudatoolkit" if cuda.major == 11 else "cuda-cudart"
    cudart_version = cuda.conda.get("cudatoolkit", "")
    pkgs = []
    for pkg in lc.conda_forge_packages(matrix):
        line = ".".join(pkg.version.split(".")[:2])
        if pkg.name == "python" and line == python:
            pkg = replace(pkg, version=real_version, files=python_files(tree, python))
        elif pkg.name == "pip":
            pkg = replace(pkg, version=pip_version, files=pip)
        elif pkg.name == cudart_package and (pkg.version == cudart_version or line == cuda.version):
            pkg = replace(pkg, files=cudart_files(matrix, cuda.version))
        elif (
            pkg.name == "cudnn"
            and pkg.version == spec.cudnn.conda_forge
            and pkg.build_string == f"cuda{cuda.major}_0"
        ):
            pkg = replace(pkg, files=cudnn_files(pkg.version, cuda.major))
        pkgs.append(pkg)
    return lc.build_channel(root, pkgs)


def e2e_spec(matrix: Matrix) -> EnvSpec | None:
    """The conda environment the end-to-end tests build: the newest release whose cuDNN comes from
    the channel (so both libcudart and libcudnn are channel packages), at the newest Python it
    supports that this host can repackage."""
    from provision.matrix import kinds
    from provision.matrix import spec as spec_mod

    for release in reversed(matrix.releases):
        if kinds.of("conda").refusal(matrix, release) or not matrix.cudnn_of(release).conda_forge:
            continue
        for python in reversed(release.python):
            if python_tree(python) is not None:
                return spec_mod.resolve(matrix, release.tf, "conda", python)
    return None
