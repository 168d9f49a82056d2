"""`provision check` of many environments (issue 24): the whole command, timed from outside.

    python tests/bench/bench_check.py [--envs 10] [--packages 120] [--files 80] [--repeat 3]
                                      [--home PROVISION_HOME] [--json FILE]

Without --home it builds --envs prefixes the size of a TensorFlow venv (--packages dist-infos of
--files files each, every file in its RECORD with its sha256, NVIDIA-style nvidia/*/lib folders
holding real ELF libraries copied from this interpreter's own, the hooks provision installs, a
pyvenv.cfg and a bin/python), registers them in a temporary PROVISION_HOME and records their facts
as `provision install` does. With --home it checks the environments registered there instead (a
real machine's). Then it runs `python -m provision check` --repeat times in a fresh process each
(start-up, the driver probe, every prefix) and reports the fastest and the slowest run.
Target: <= 2 s for 10 environments. Exits 1 when it is missed, or when check does not exit 0.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 2.0


def record_line(site: Path, rel: str) -> str:
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def make_prefix(prefix: Path, packages: int, files: int, python: str) -> None:
    site = prefix / "lib" / f"python{python}" / "site-packages"
    site.mkdir(parents=True)
    (prefix / "bin").mkdir()
    (prefix / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (prefix / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion_info = {python}.0\n")
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib")
    elf = next((p for p in sorted(libdir.glob("libpython3*.so*")) if p.is_file()), None)
    for i in range(packages):
        name = f"pkg{i:03d}"
        dist = site / f"{name}-1.{i}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.{i}\n"
            f"Requires-Dist: pkg{(i + 1) % packages:03d}>=1.0\n"
        )
        (dist / "INSTALLER").write_text("uv\n")
        rels = [f"{dist.name}/METADATA", f"{dist.name}/INSTALLER"]
        for j in range(files):
            rel = f"{name}/mod{j:03d}.py"
            (site / rel).parent.mkdir(exist_ok=True)
            (site / rel).write_text(f"X = {j}\n" * 40)
            rels.append(rel)
        if i < 8 and elf is not None:  # NVIDIA's wheels: nvidia/<part>/lib/lib*.so.N
            rel = f"nvidia/part{i}/lib/libcudnn_part{i}.so.9"
            (site / rel).parent.mkdir(parents=True)
            shutil.copyfile(elf, site / rel)
            rels.append(rel)
        lines = [record_line(site, r) for r in rels] + [f"{dist.name}/RECORD,,"]
        (dist / "RECORD").write_text("\n".join(lines) + "\n")
    etc = prefix / "etc" / "provision"
    etc.mkdir(parents=True)
    (etc / "runtime.env").write_text("PROVISION_GPU_MEMORY='growth'\n")
    for hook in ("activate.sh", "deactivate.sh"):
        (etc / hook).write_text("# hook\n")
    (site / "provision_env_hook.py").write_text("# hook\n")
    (site / "provision_env_hook.pth").write_text("import provision_env_hook\n")


def build(home: Path, count: int, packages: int, files: int) -> None:
    os.environ["PROVISION_HOME"] = str(home)
    from provision import matrix, registry
    from provision.facts import store

    rel = matrix.load().newest
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    for n in range(count):
        name = f"bench{n:02d}"
        prefix = home / "envs" / name
        make_prefix(prefix, packages, files, python)
        registry.put(registry.Record(
            name=name, env_dir=str(home / "no-envs" / name), path="pip", tf=rel.pin,
            python=python, prefix=str(prefix), interpreter=str(prefix / "bin" / "python"),
            installer="uv", lock_sha256="0" * 64, built_at=time.time(),
        ))  # fmt: skip
        store.record(registry.get(name), "install")  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--packages", type=int, default=120)
    parser.add_argument("--files", type=int, default=80)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--home", type=Path, help="check the environments registered here")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        home = args.home or Path(tmp) / "home"
        if args.home is None:
            t0 = time.monotonic()
            build(home, args.envs, args.packages, args.files)
            print(f"built {args.envs} environments in {time.monotonic() - t0:.1f} s", flush=True)
        env = {**os.environ, "PROVISION_HOME": str(home)}
        runs, code, out = [], 0, ""
        for _ in range(args.repeat):
            t0 = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "provision", "check", "--json"],
                capture_output=True, text=True, env=env, cwd=ROOT,
            )  # fmt: skip
            runs.append(time.monotonic() - t0)
            code, out = done.returncode, done.stdout
            if code not in (0, 1) or not out:
                sys.exit(f"bench: provision check failed (exit {code}):\n{done.stderr[-2000:]}")
        report = json.loads(out)
        count = len(report["environments"])
        per_env = sorted(e["seconds"] for e in report["environments"])
        result = {
            "environments": count,
            "files_per_environment": args.packages * (args.files + 2) if args.home is None
            else None,
            "fastest_s": round(min(runs), 3), "slowest_s": round(max(runs), 3),
            "slowest_environment_s": per_env[-1] if per_env else 0.0,
            "check_exit": code, "target_s": TARGET_S,
        }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = min(runs) <= TARGET_S * max(count, 1) / 10 and (code == 0 or args.home is not None)
    print(f"check of {count} environments: {min(runs):.2f} s (target <= {TARGET_S:g} s for 10): "
          + ("ok" if ok else "MISSED"))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
