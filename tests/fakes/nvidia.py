"""NVIDIA's installables, rebuilt for tests: a CUDA runfile, a cuDNN archive, and nvidia-smi.

- `build_runfile` writes a self-contained installer named exactly like NVIDIA's runfile: a POSIX
  shell script with a tar.gz payload (the makeself layout NVIDIA uses) that accepts NVIDIA's
  documented options, refuses `--driver` and anything unknown, and writes a toolkit tree with
  NVIDIA's layout (`lib64 -> targets/x86_64-linux/lib`): `bin/ptxas`, `nvvm/libdevice/`,
  `version.json`/`version.txt`, and NVIDIA's real `libcudart` taken from the
  `nvidia-cuda-runtime-cuXX` wheel (so its SONAME and `cudaRuntimeGetVersion` are real).
- `build_cudnn_archive` writes `cudnn-linux-x86_64-<full>_cuda<major>-archive.tar.xz` with
  NVIDIA's layout (`<top>/include`, `<top>/lib` with the libcudnn.so -> .so.N -> .so.N.M.P links)
  holding the real headers and the real `libcudnn.so.N` from the `nvidia-cudnn-cuXX` wheel.
  Only the dispatcher library is taken: the sub-libraries (ops/cnn/adv) are 75-630 MB each.
- `install_nvidia_smi` puts a fake `nvidia-smi` reporting a given driver (or failing) on a PATH.

Wheel members are read with HTTP Range requests (a few hundred KiB, not the 700 MB wheel) from
pip's configured index and cached under $PROVISION_TEST_CACHE or ~/.cache/provision-tests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import struct
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename
from packaging.version import Version
from tools.wheel_facts import SIMPLE_JSON, index_url

from provision.matrix import Cuda, Cudnn
from provision.releases.wheels import Counter, RangeReader

PAYLOAD_MARK = "__PAYLOAD_BELOW__"
FIXED_MTIME = 1_600_000_000  # archives are byte-identical from run to run


# --- the package index and wheel members ---------------------------------------------------------


def cache_dir() -> Path:
    configured = os.environ.get("PROVISION_TEST_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "provision-tests"


@dataclass(frozen=True)
class Wheel:
    project: str
    version: str
    filename: str
    url: str
    size: int


def linux_wheels(project: str) -> list[Wheel]:
    """The project's non-yanked manylinux x86-64 wheels, oldest version first."""
    req = urllib.request.Request(f"{index_url()}/{project}/", headers={"Accept": SIMPLE_JSON})
    with urllib.request.urlopen(req, timeout=60) as resp:
        page: dict[str, Any] = json.load(resp)
    found = []
    for entry in page["files"]:
        name = entry["filename"]
        if not name.endswith(".whl") or entry.get("yanked") or "x86_64" not in name:
            continue
        _, version, _, _ = parse_wheel_filename(name)
        found.append(Wheel(project, str(version), name, entry["url"], int(entry["size"])))
    return sorted(found, key=lambda w: (Version(w.version), w.filename))


def wheel_members(wheel: Wheel, patterns: Iterable[str]) -> Path:
    """A cached directory holding the wheel's members that match any glob pattern.

    zipfile checks each member's CRC while reading; the directory is renamed into place only when
    complete, so an interrupted fetch is fetched again.
    """
    wanted = tuple(sorted(patterns))
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    dest = cache_dir() / "wheel-members" / f"{wheel.filename}-{key}"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    try:
        raw = io.BufferedReader(RangeReader(wheel.url, wheel.size, Counter()), buffer_size=1 << 16)
        with zipfile.ZipFile(raw) as zf:
            names = [n for n in zf.namelist() if any(fnmatch(n, p) for p in wanted)]
            if not names:
                raise LookupError(f"{wheel.filename} has no member matching {wanted}")
            for name in names:
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
        try:
            tmp.rename(dest)
        except OSError:  # another process finished first
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# --- ELF -----------------------------------------------------------------------------------------


def elf_soname(path: Path) -> str | None:
    """The DT_SONAME of a 64-bit little-endian ELF shared object (x86-64), or None without one."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None
    strtab = soname = None
    for off in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:  # DT_NULL
            break
        if tag == 5:  # DT_STRTAB (an address)
            strtab = val
        elif tag == 14:  # DT_SONAME (an offset into the string table)
            soname = val
    if strtab is None or soname is None:
        return None
    for vaddr, offset, size in loads:
        if vaddr <= strtab < vaddr + size:
            start = offset + (strtab - vaddr) + soname
            return data[start : data.index(b"\0", start)].decode()
    raise ValueError(f"{path}: DT_STRTAB {strtab:#x} is outside every loaded segment")


# --- checksums -----------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def md5_file(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


# --- deterministic tar ---------------------------------------------------------------------------


def _add_tree(tar: tarfile.TarFile, root: Path, arcroot: str) -> None:
    for path in [root, *sorted(root.rglob("*"))]:
        rel = path.relative_to(root).as_posix()
        name = arcroot if rel == "." else f"{arcroot}/{rel}" if arcroot else rel
        if not name:
            continue
        info = tar.gettarinfo(str(path), arcname=name)
        info.mtime = FIXED_MTIME
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        if info.isfile():
            with path.open("rb") as fh:
                tar.addfile(info, fh)
        else:
            tar.addfile(info)


def _write_file(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


# --- the CUDA runfile ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaRuntime:
    """NVIDIA's real libcudart of one CUDA minor, from the nvidia-cuda-runtime-cuXX wheel."""

    path: Path
    version: str  # the wheel's version, e.g. 11.8.89: the toolkit names the library after it
    soname: str


def cuda_runtime(cuda: Cuda) -> CudaRuntime:
    """The newest runtime wheel of the toolkit's major.minor (libcudart.so.11.0 for 11.8)."""
    project = f"nvidia-cuda-runtime-cu{cuda.major}"
    same_minor = [w for w in linux_wheels(project) if w.version.startswith(f"{cuda.version}.")]
    if not same_minor:
        raise LookupError(f"the index has no {project} wheel of CUDA {cuda.version}")
    wheel = same_minor[-1]
    folder = wheel_members(wheel, ["nvidia/cuda_runtime/lib/libcudart.so.*"])
    (lib,) = sorted((folder / "nvidia/cuda_runtime/lib").glob("libcudart.so.*"))
    soname = elf_soname(lib)
    if soname is None:
        raise ValueError(f"{lib} has no SONAME")
    return CudaRuntime(lib, wheel.version, soname)


_RUNFILE_SCRIPT = r"""#!/bin/sh
# A stand-in for NVIDIA's CUDA @VERSION@ runfile, made by provision's tests (tests/fakes/nvidia.py):
# NVIDIA's documented options, a toolkit-only install from the payload below, never a driver.
# FAKE_CUDA_RUNFILE_LOG=FILE appends the options it got; FAKE_CUDA_RUNFILE_CRASH=1 dies (SIGKILL)
# halfway through unpacking, like an interrupted install.
set -eu
silent=0
toolkit=0
path=/usr/local/cuda-@VERSION@
for arg in "$@"; do
	case $arg in
	--silent) silent=1 ;;
	--toolkit) toolkit=1 ;;
	--toolkitpath=* | --installpath=*) path=${arg#*=} ;;
	--tmpdir=*)
		if [ ! -d "${arg#*=}" ]; then
			echo "ERROR: --tmpdir ${arg#*=} is not a directory" >&2
			exit 1
		fi
		;;
	--defaultroot=* | --samplespath=* | --kernel-source-path=* | --kernel-object-path=*) ;;
	--samples | --override | --override-driver-check | --no-opengl-libs | --no-man-page) ;;
	--no-drm | --run-nvidia-xconfig) ;;
	--driver | --uninstall)
		echo "fake CUDA runfile: $arg was passed; provision never installs or removes" \
			"the NVIDIA driver" >&2
		exit 3
		;;
	--help)
		echo "Options: --silent --driver --toolkit --toolkitpath=<path> --installpath=<path>"
		echo "  --defaultroot=<path> --samples --samplespath=<path> --override --no-opengl-libs"
		echo "  --no-man-page --no-drm --tmpdir=<path>"
		exit 0
		;;
	*)
		echo "Unknown option: $arg" >&2
		exit 1
		;;
	esac
done
if [ -n "${FAKE_CUDA_RUNFILE_LOG:-}" ]; then
	printf '%s\n' "$*" >>"$FAKE_CUDA_RUNFILE_LOG"
fi
if [ "$silent" != 1 ]; then
	echo "fake CUDA runfile: only silent installs are supported (pass --silent)" >&2
	exit 1
fi
if [ "$toolkit" != 1 ]; then
	echo "fake CUDA runfile: nothing selected; pass --toolkit" >&2
	exit 1
fi
line=$(awk '/^@MARK@$/ { print NR + 1; exit }' "$0")
mkdir -p "$path"
if [ -n "${FAKE_CUDA_RUNFILE_CRASH:-}" ]; then
	tail -n +"$line" "$0" | tar -xzf - -C "$path" bin version.json
	kill -KILL $$
fi
tail -n +"$line" "$0" | tar -xzf - -C "$path"
echo "==========="
echo "= Summary ="
echo "==========="
echo ""
echo "Driver:   Not Selected"
echo "Toolkit:  Installed in $path/"
exit 0
"""


def build_runfile(dest_dir: Path, cuda: Cuda, runtime: CudaRuntime | None = None) -> Path:
    """dest_dir/<cuda.runfile>: a self-contained installer of a CUDA toolkit tree."""
    runtime = runtime or cuda_runtime(cuda)
    major, minor = (int(x) for x in cuda.version.split("."))
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        version = {
            "cuda": {"name": "CUDA SDK", "version": cuda.full},
            "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": runtime.version},
        }
        _write_file(tree / "version.json", json.dumps(version, indent=3) + "\n")
        _write_file(tree / "version.txt", f"CUDA Version {cuda.full}\n")
        banner = (
            f"Cuda compilation tools, release {cuda.version}, V{runtime.version}\\n"
            f"Build cuda_{cuda.version}.r{cuda.version}/compiler (fake for provision's tests)"
        )
        for tool, title in (
            ("ptxas", "Ptx optimizing assembler"),
            ("nvcc", "Cuda compiler driver"),
        ):
            _write_file(
                tree / "bin" / tool,
                "#!/bin/sh\n"
                f'if [ "${{1:-}}" = --version ]; then\n'
                f'\tprintf "{tool}: NVIDIA (R) {title}\\n{banner}\\n"\n'
                "\texit 0\nfi\n"
                f'echo "{tool}: a stand-in from provision\'s tests; it cannot compile" >&2\n'
                "exit 1\n",
                0o755,
            )
        # LLVM bitcode magic, so a file-type check sees bitcode.
        _write_file(tree / "nvvm/libdevice/libdevice.10.bc", b"BC\xc0\xde" + bytes(60))
        lib = tree / "targets/x86_64-linux/lib"
        real = f"libcudart.so.{runtime.version}"
        _write_file(lib / real, runtime.path.read_bytes(), 0o755)
        (lib / runtime.soname).symlink_to(real)
        (lib / "libcudart.so").symlink_to(runtime.soname)
        _write_file(
            tree / "targets/x86_64-linux/include/cuda_runtime_api.h",
            f"#define CUDART_VERSION {major * 1000 + minor * 10}\n",
        )
        (tree / "lib64").symlink_to("targets/x86_64-linux/lib")
        (tree / "include").symlink_to("targets/x86_64-linux/include")
        payload = io.BytesIO()
        with (
            gzip.GzipFile(fileobj=payload, mode="wb", mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
        ):
            _add_tree(tar, tree, "")
    script = _RUNFILE_SCRIPT.replace("@VERSION@", cuda.version).replace("@MARK@", PAYLOAD_MARK)
    out = Path(dest_dir) / cuda.runfile
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(script.encode() + PAYLOAD_MARK.encode() + b"\n" + payload.getvalue())
    out.chmod(0o755)
    return out


# --- the cuDNN archive ---------------------------------------------------------------------------


def cudnn_wheel(cudnn: Cudnn, version: str | None = None) -> Wheel:
    """NVIDIA's cuDNN wheel of this cuDNN (the matrix's pip requirement when it has one)."""
    project, _, pinned = (
        cudnn.pip or f"nvidia-cudnn-cu{cudnn.cuda_major}=={cudnn.full}"
    ).partition("==")
    version = version or pinned
    for wheel in reversed(linux_wheels(project)):
        if wheel.version == version:
            return wheel
    raise LookupError(f"the index has no {project} {version} wheel for cuDNN {cudnn.full}")


def build_cudnn_archive(dest_dir: Path, cudnn: Cudnn, wheel_version: str | None = None) -> Path:
    """dest_dir/<cudnn.archive>: NVIDIA's archive layout with the real headers and libcudnn.so.N.

    The layout follows the name: `cudnn-linux-x86_64-<full>_cuda<major>-archive.tar.xz`
    (cuDNN >= 8.3) holds `<name>/include` and `<name>/lib`; the older
    `cudnn-<cuda>-linux-x64-v<full>.tgz` holds `cuda/include` and `cuda/lib64`. `wheel_version`
    takes the libraries from another wheel version (a row whose cuDNN has no wheel; the headers
    then say that other version).
    """
    new_style = re.fullmatch(
        r"(cudnn-linux-x86_64-[\d.]+_cuda\d+-archive)\.tar\.(xz|gz)", cudnn.archive
    )
    if new_style:
        top, lib_dir = new_style.group(1), "lib"
    elif re.fullmatch(r"cudnn-[\d.]+-linux-x64-v[\d.]+\.tgz", cudnn.archive):
        top, lib_dir = "cuda", "lib64"
    else:
        raise ValueError(f"{cudnn.archive} is not named like NVIDIA's cuDNN archives")
    wheel = cudnn_wheel(cudnn, wheel_version)
    major = Version(wheel.version).major
    folder = wheel_members(
        wheel,
        [
            "nvidia/cudnn/include/*.h",
            f"nvidia/cudnn/lib/libcudnn.so.{major}",
            "*.dist-info/License.txt",
            "*.dist-info/licenses/License.txt",
        ],
    )
    mmp = ".".join([*wheel.version.split("."), "0", "0"][:3])
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / top
        for header in sorted((folder / "nvidia/cudnn/include").glob("*.h")):
            _write_file(tree / "include" / header.name, header.read_bytes())
        real = f"libcudnn.so.{mmp}"
        lib = tree / lib_dir
        _write_file(
            lib / real, (folder / f"nvidia/cudnn/lib/libcudnn.so.{major}").read_bytes(), 0o755
        )
        (lib / f"libcudnn.so.{major}").symlink_to(real)
        (lib / "libcudnn.so").symlink_to(f"libcudnn.so.{major}")
        for licence in sorted(folder.glob("*.dist-info/**/License.txt")):
            _write_file(tree / "LICENSE", licence.read_bytes())
        out = Path(dest_dir) / cudnn.archive
        out.parent.mkdir(parents=True, exist_ok=True)
        mode = "w:xz" if cudnn.archive.endswith(".xz") else "w:gz"
        with tarfile.open(out, mode, format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
            _add_tree(tar, tree, top)
    return out


@dataclass(frozen=True)
class Artifacts:
    """A fake runfile and cuDNN archive for one (CUDA, cuDNN) pair, with their checksums."""

    runfile: Path
    cudnn_archive: Path

    @property
    def runfile_sha256(self) -> str:
        return sha256_file(self.runfile)

    @property
    def runfile_md5(self) -> str:
        return md5_file(self.runfile)

    @property
    def cudnn_sha256(self) -> str:
        return sha256_file(self.cudnn_archive)


def build_artifacts(dest_dir: Path, cuda: Cuda, cudnn: Cudnn) -> Artifacts:
    return Artifacts(build_runfile(dest_dir, cuda), build_cudnn_archive(dest_dir, cudnn))


# --- nvidia-smi ----------------------------------------------------------------------------------

SMI_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def install_nvidia_smi(bin_dir: Path, driver: str | None, *, gpus: int = 2) -> Path:
    """bin_dir/nvidia-smi answering the driver query for `gpus` GPUs; driver None: it fails as
    nvidia-smi does when no kernel module is loaded (exit 9)."""
    if driver is None:
        body = f'echo "{SMI_FAILURE}"\nexit 9\n'
    else:
        body = (
            'case "$*" in\n'
            f'*--query-gpu=driver_version*) for i in $(seq {gpus}); do echo "{driver}"; done ;;\n'
            f'*) echo "| NVIDIA-SMI {driver}    Driver Version: {driver} |" ;;\n'
            "esac\n"
        )
    path = Path(bin_dir) / "nvidia-smi"
    _write_file(path, "#!/bin/sh\n# a fake from provision's tests\n" + body, 0o755)
    return path
