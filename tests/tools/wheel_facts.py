"""Print what TensorFlow's published Linux x86-64 wheels say about themselves, per minor release.

Re-checks provision/data/matrix.toml against primary data anyone can fetch again: the package
index's simple JSON API (PEP 691) gives the file names (Python tags, manylinux tags), and HTTP
Range requests read single members of a wheel without downloading it (a few hundred KiB out of
~500 MB): the `.dist-info/METADATA` (its `and-cuda` extra, exactly as published),
`tensorflow/python/platform/build_info.py` (cuda_version, cudnn_version,
cuda_compute_capabilities) and the shipped header `third_party/gpus/cuda/cuda_config.h`
(TF_CUDA_VERSION, TF_CUDNN_VERSION, TF_CUDA_COMPUTE_CAPABILITIES).

    .venv/bin/python tests/tools/wheel_facts.py                # table, 2.4 .. newest
    .venv/bin/python tests/tools/wheel_facts.py --json         # everything, as JSON
    .venv/bin/python tests/tools/wheel_facts.py --version 2.15.0 --version 2.15.1
    .venv/bin/python tests/tools/wheel_facts.py --check        # compare with the matrix (rc 1)
    .venv/bin/python tests/tools/wheel_facts.py --resolve      # resolve every pip-path pin with uv

The index is pip's: PIP_INDEX_URL when set, else pip's own default (never a host written here).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from provision.releases import derive
from provision.releases import wheels as remote

FIRST = Version("2.4")
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
BUILD_INFO = "tensorflow/python/platform/build_info.py"
CUDA_CONFIG = "tensorflow/include/third_party/gpus/cuda/cuda_config.h"
# manylinux tag -> the glibc it promises (PEP 513/571/599/600).
LEGACY_MANYLINUX = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}


def index_url() -> str:
    """pip's configured index (PIP_INDEX_URL, pip.conf), else pip's own default."""
    from provision.lock.pylock import pip_index_url

    configured = pip_index_url()
    if configured:
        return configured.rstrip("/")
    # pip's own default, from pip itself (the test tools' venv has pip; provision does not need it).
    from pip._internal.models.index import PyPI

    return str(PyPI.simple_url).rstrip("/")


def simple(project: str, index: str | None = None) -> dict[str, Any]:
    """The project's page from the simple JSON API: file names, sizes, hashes, URLs."""
    url = f"{index or index_url()}/{project}/"
    req = urllib.request.Request(url, headers={"Accept": SIMPLE_JSON})
    with urllib.request.urlopen(req, timeout=60) as resp:
        data: dict[str, Any] = json.load(resp)
    return data


def glibc_of(platform_tag: str) -> str:
    """The lowest glibc a wheel's platform tag(s) accept: 'manylinux2014_x86_64' -> '2.17'."""
    found: list[Version] = []
    for tag in platform_tag.split("."):
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
        if m:
            found.append(Version(f"{m.group(1)}.{m.group(2)}"))
        elif tag.rsplit("_x86_64", 1)[0] in LEGACY_MANYLINUX:
            found.append(Version(LEGACY_MANYLINUX[tag.rsplit("_x86_64", 1)[0]]))
    if not found:
        raise ValueError(f"not a manylinux tag: {platform_tag}")
    return str(min(found))


def linux_x86_64(files: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Version -> its non-yanked Linux x86-64 wheels (entries with 'py' and 'platform' added)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in files:
        name = entry["filename"]
        if not name.endswith(".whl") or entry.get("yanked"):
            continue
        _, version, _, tags = parse_wheel_filename(name)
        platforms = {t.platform for t in tags}
        if not any(p.startswith("manylinux") and p.endswith("_x86_64") for p in platforms):
            continue
        interp = sorted({t.interpreter for t in tags})
        platform = name[: -len(".whl")].split("-")[-1]
        out.setdefault(str(version), []).append({**entry, "py": interp, "platform": platform})
    return out


def pythons_of(wheels: list[dict[str, Any]]) -> list[str]:
    """cp310 -> 3.10, ascending; wheels tagged py3 (pure) give nothing here."""
    found = set()
    for wheel in wheels:
        for tag in wheel["py"]:
            m = re.fullmatch(r"cp3(\d+)", tag)
            if m:
                found.add(f"3.{m.group(1)}")
    return sorted(found, key=Version)


def read_members(url: str, size: int) -> tuple[str, str | None, str | None, int]:
    """METADATA, build_info.py and cuda_config.h of one wheel, read remotely."""
    counter = remote.Counter()
    raw = remote.RangeReader(url, size, counter)
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 20)) as zf:
        names = set(zf.namelist())
        meta_name = next(n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        metadata = zf.read(meta_name).decode()
        build_info = zf.read(BUILD_INFO).decode() if BUILD_INFO in names else None
        cuda_config = zf.read(CUDA_CONFIG).decode() if CUDA_CONFIG in names else None
    return metadata, build_info, cuda_config, counter.requests


def parse_build_info(text: str) -> dict[str, Any]:
    """The literal `build_info = collections.OrderedDict([...])` of build_info.py, as a dict."""
    return dict(derive.parse_build_info(text, "build_info.py"))


def parse_cuda_config(text: str) -> dict[str, str]:
    return {
        m.group(1): m.group(2).strip().strip('"')
        for m in re.finditer(r"^#define (TF_\w+) (.*)$", text, re.MULTILINE)
    }


def extra_requirements(metadata: str, extra: str) -> list[str]:
    """Requires-Dist values whose marker names `extra`, exactly as the wheel publishes them."""
    headers = HeaderParser().parsestr(metadata)
    out = []
    for value in headers.get_all("Requires-Dist") or []:
        req = Requirement(value)
        if (
            req.marker is not None
            and req.marker.evaluate({"extra": extra})
            and not (req.marker.evaluate({"extra": ""}))
        ):
            out.append(value)
    return out


def wheel_facts(entry: dict[str, Any]) -> dict[str, Any]:
    metadata, build_info, cuda_config, requests = read_members(entry["url"], entry["size"])
    headers = HeaderParser().parsestr(metadata)
    return {
        "wheel": entry["filename"],
        "sha256": entry["hashes"].get("sha256", ""),
        "upload_time": entry.get("upload-time", ""),
        "requires_python": headers.get("Requires-Python", ""),
        # PyPI shows these labels; they are not always the CUDA the wheel was built with.
        "cuda_classifiers": [
            c.split("::", 1)[1].strip()
            for c in headers.get_all("Classifier") or []
            if "NVIDIA CUDA" in c
        ],
        "and_cuda": extra_requirements(metadata, "and-cuda"),
        "build_info": parse_build_info(build_info) if build_info is not None else None,
        "cuda_config": parse_cuda_config(cuda_config) if cuda_config is not None else None,
        "range_requests": requests,
    }


def version_facts(version: str, wheels: list[dict[str, Any]]) -> dict[str, Any]:
    """One version: Pythons and glibc from file names, the rest from its newest-Python wheel."""
    newest = max(wheels, key=lambda w: max(Version(p) for p in pythons_of([w])))
    return {
        "version": version,
        "python": pythons_of(wheels),
        "platform_tags": sorted({w["platform"] for w in wheels}),
        "glibc_min": str(max(Version(glibc_of(w["platform"])) for w in wheels)),
        **wheel_facts(newest),
    }


def minor_of(version: str) -> str:
    v = Version(version)
    return f"{v.major}.{v.minor}"


def releases(page: dict[str, Any], first: Version = FIRST) -> dict[str, list[str]]:
    """'2.15' -> its final versions with Linux x86-64 wheels, ascending."""
    wheels = linux_x86_64(page["files"])
    out: dict[str, list[str]] = {}
    for text in sorted(wheels, key=Version):
        v = Version(text)
        if v.is_prerelease or v.is_devrelease or v < first:
            continue
        out.setdefault(minor_of(text), []).append(text)
    return out


def collect(versions: list[str] | None = None, first: Version = FIRST) -> dict[str, Any]:
    """Facts for each minor's latest patch (and for `versions`, when given, instead)."""
    page = simple("tensorflow")
    wheels = linux_x86_64(page["files"])
    minors = releases(page, first)
    wanted = versions or [patches[-1] for patches in minors.values()]
    missing = [v for v in wanted if v not in wheels]
    if missing:
        raise SystemExit(f"no Linux x86-64 wheels on the index for tensorflow {', '.join(missing)}")
    with ThreadPoolExecutor(max_workers=8) as pool:
        facts = list(pool.map(lambda v: version_facts(v, wheels[v]), wanted))
    return {"minors": minors, "facts": facts}


def wheel_exists(pages: dict[str, dict[str, Any]], name: str, version: str) -> list[str]:
    """Pythons ('py3' for pure tags) for which `name==version` has a Linux x86-64 wheel."""
    for ver, wheels in linux_x86_64(pages[name]["files"]).items():
        try:
            same = Version(ver) == Version(version)
        except InvalidVersion:
            continue
        if same:
            return sorted({t for w in wheels for t in w["py"]})
    return []


def check(data: dict[str, Any]) -> list[str]:
    """Differences between the matrix and the wheels; [] when they agree."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from provision.matrix import load

    matrix = load()
    problems: list[str] = []
    by_version = {f["version"]: f for f in data["facts"]}

    def differ(rel_tf: str, field: str, ours: object, wheels: object) -> None:
        if ours != wheels:
            problems.append(
                f"release {rel_tf}: {field} {ours!r} in the matrix, {wheels!r} in wheels"
            )

    for rel in matrix.releases:
        patches = data["minors"].get(rel.tf, [])
        differ(rel.tf, "latest", rel.latest, patches[-1] if patches else None)
        facts = by_version.get(rel.pin)
        if facts is None:
            problems.append(f"release {rel.tf}: pin {rel.pin} was not read (pass --version)")
            continue
        differ(rel.tf, "python", list(rel.python), facts["python"])
        differ(rel.tf, "glibc_min", rel.glibc_min, facts["glibc_min"])
        differ(rel.tf, "and_cuda", list(rel.and_cuda), facts["and_cuda"])
        info = facts["build_info"] or {}
        if not info.get("is_cuda_build"):
            problems.append(f"release {rel.tf}: the wheel's build_info says no CUDA build")
            continue
        differ(rel.tf, "cuda", rel.cuda, minor_of(info["cuda_version"]))
        differ(rel.tf, "cudnn major", rel.cudnn.split(".")[0], info["cudnn_version"].split(".")[0])
        differ(
            rel.tf, "compute_targets", list(rel.compute_targets), info["cuda_compute_capabilities"]
        )
    names = sorted({n for rel in matrix.releases for n in rel.pip_wheels})
    with ThreadPoolExecutor(max_workers=8) as pool:
        pages = dict(zip(names, pool.map(simple, names), strict=True))
    for rel in matrix.releases:
        for name, version in sorted(rel.pip_wheels.items()):
            if not wheel_exists(pages, name, version):
                problems.append(f"release {rel.tf}: {name}=={version} has no Linux x86-64 wheel")
    return problems


# uv's --python-platform targets, lowest glibc first; a target accepts wheels for older glibc.
UV_LINUX_TARGETS = ("2.17", "2.28", "2.31", "2.32", "2.33", "2.34", "2.35")


def uv_platform(glibc_min: str) -> str:
    for target in UV_LINUX_TARGETS:
        if Version(target) >= Version(glibc_min):
            return "x86_64-manylinux_" + target.replace(".", "_")
    raise ValueError(f"no uv target for glibc {glibc_min}")


def resolve(only: list[str] | None = None) -> list[str]:
    """Resolve, with uv against the index, what the pip path installs for every release and
    Python: `tensorflow==pin` plus pip_wheels, and the same with the and-cuda extra."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from provision.matrix import load

    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("uv is not installed (it is a dependency of provision)")
    index = index_url()
    problems = []
    for rel in load().releases:
        if only and rel.tf not in only:
            continue
        pins = [f"{n}=={v}" for n, v in sorted(rel.pip_wheels.items())]
        forms = {"plain": [f"tensorflow=={rel.pin}", *pins]}
        if rel.and_cuda:
            forms["and-cuda"] = [f"tensorflow[and-cuda]=={rel.pin}", *pins]
        for python in rel.python:
            for form, reqs in forms.items():
                argv = [uv, "pip", "compile", "-", "--quiet", "--no-header", "--no-annotate",
                        "--python-version", python, "--python-platform", uv_platform(rel.glibc_min),
                        "--index-url", index]  # fmt: skip
                done = subprocess.run(
                    argv, input="\n".join(reqs), capture_output=True, text=True, check=False
                )
                status = "ok" if done.returncode == 0 else "FAILS"
                print(f"{rel.tf:5} py{python:5} {form:8} {status}", flush=True)
                if done.returncode:
                    why = (done.stderr.strip().splitlines() or ["?"])[-1]
                    problems.append(f"release {rel.tf} py{python} {form}: {why}")
    return problems


def table(data: dict[str, Any]) -> str:
    rows = [("version", "python", "glibc", "cuda", "cudnn", "compute", "and-cuda")]
    for f in data["facts"]:
        info = f["build_info"] or {}
        conf = f["cuda_config"] or {}
        rows.append(
            (
                f["version"],
                ",".join(f["python"]),
                f["glibc_min"],
                str(info.get("cuda_version", "-")) + f" (h:{conf.get('TF_CUDA_VERSION', '-')})",
                str(info.get("cudnn_version", "-")) + f" (h:{conf.get('TF_CUDNN_VERSION', '-')})",
                ",".join(info.get("cuda_compute_capabilities", [])) or "-",
                str(len(f["and_cuda"])),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="append", help="read these versions, not each latest")
    parser.add_argument("--json", action="store_true", help="print every fact as JSON")
    parser.add_argument("--check", action="store_true", help="compare with the matrix")
    parser.add_argument(
        "--resolve", action="store_true", help="resolve each pip-path pin with uv (slow)"
    )
    parser.add_argument("--tf", action="append", help="with --resolve: only these X.Y rows")
    args = parser.parse_args(argv)
    if args.resolve:
        problems = resolve(args.tf)
        print("\n".join(problems) if problems else "every pin resolves", file=sys.stderr)
        return 1 if problems else 0
    versions = args.version
    if args.check and not versions:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from provision.matrix import load

        versions = sorted({r.pin for r in load().releases} | set(), key=Version)
        page = simple("tensorflow")
        versions = sorted(set(versions) | {p[-1] for p in releases(page).values()}, key=Version)
    data = collect(versions)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(table(data))
        for f in data["facts"]:
            print(f"\n{f['version']}  ({f['wheel']})")
            for req in f["and_cuda"]:
                print(f"  and-cuda: {req}")
    if args.check:
        problems = check(data)
        print("\n".join(problems) if problems else "matrix agrees with the wheels", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
