"""provision image against podman build (issue 36, Timings), as ratios, from one bundle and base.

    python tests/bench/bench_image.py --bundle B --base ROOTFS [--repeat 1] [--work DIR] [--json F]

- provision: `provision image --from-bundle B --base ROOTFS -o WORK/p.oci.tar` (checks the bundle,
  unpacks the base, runs bootstrap.py chrooted with no network, writes the layers and the archive).
  Cold: --no-layer-cache. Warm: the layer cache of an earlier run (the layers' gzip is skipped).
- podman: `podman build --isolation chroot` of the equivalent Containerfile (FROM
  the same root filesystem, imported with `podman import`; one RUN of the same bootstrap.py with
  the bundle's folder bind-mounted, PROVISION_HOME=/opt/provision), then `podman save --format
  oci-archive` to a file, so that both end with an OCI archive. Cold: --no-cache. Warm: podman's
  build cache of an earlier run. (podman refuses --network none with --isolation chroot: the
  build could reach the network, but bootstrap.py installs with --no-index and asks nothing.)
Goal: provision <= 1.0x podman, warm. Sizes of the two archives are reported too. Needs root,
podman and a base made with debootstrap --include=python3,python3-venv,ca-certificates. The
images and the work folder are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clitools

BASE_IMAGE = "localhost/provision-bench-base:latest"
TAG = "localhost/provision-bench-image:latest"
GOAL = 1.0
CONTAINERFILE = """\
FROM {base}
RUN --mount=type=bind,source=.,target=/run/provision-image \\
    env PROVISION_HOME=/opt/provision SOURCE_DATE_EPOCH=1577836800 \\
    python3 /run/provision-image/bootstrap.py /run/provision-image/{bundle} --no-verify
ENV PATH=/opt/provision/envs/{name}/bin:/opt/provision/venv/bin:/usr/local/sbin:/usr/local/bin:\
/usr/sbin:/usr/bin:/sbin:/bin PROVISION_HOME=/opt/provision
CMD ["python"]
"""


def run(argv: list[str], cwd: Path | None = None) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=False)
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:6])} ... failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - start


def provision_image(bundle: Path, base: Path, out: Path, cold: bool) -> float:
    """`provision image` through clitools (the one way the tests run provision), timed."""
    out.unlink(missing_ok=True)
    args = ["image", "--from-bundle", bundle, "--base", base, "-o", out, "-q"]
    start = time.monotonic()
    done = clitools.provision(*args, *(["--no-layer-cache"] if cold else []), timeout=3600)
    if done.returncode != 0:
        sys.exit(f"bench: provision image ... failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - start


def podman(context: Path, out: Path, cold: bool) -> float:
    out.unlink(missing_ok=True)
    build = ["podman", "build", "--isolation", "chroot", "-t", TAG,
             "-f", str(context / "Containerfile"), str(context)]  # fmt: skip
    took = run(build[:2] + (["--no-cache"] if cold else []) + build[2:])
    return took + run(["podman", "save", "--format", "oci-archive", "-o", str(out), TAG])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--base", type=Path, required=True, help="a root filesystem folder")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("podman"):
        sys.exit("bench: needs root and podman (apt-get install podman)")
    work = Path(tempfile.mkdtemp(prefix="bench-image-", dir=args.work))
    try:
        context = work / "context"
        context.mkdir()
        bundle = context / args.bundle.name
        os.link(args.bundle, bundle) if _same_fs(args.bundle, context) else shutil.copy(
            args.bundle, bundle
        )
        with tarfile.open(bundle) as tar:
            member = tar.extractfile("provision-bundle/bootstrap.py")
            assert member is not None
            (context / "bootstrap.py").write_bytes(member.read())
            manifest = json.loads(tar.extractfile("provision-bundle/manifest.json").read())  # type: ignore[union-attr]
        (context / "Containerfile").write_text(
            CONTAINERFILE.format(base=BASE_IMAGE, bundle=bundle.name, name=manifest["name"])
        )
        imported = subprocess.run(
            f"tar -C {args.base} -c . | podman import - {BASE_IMAGE}", shell=True,
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if imported.returncode != 0:
            sys.exit(f"bench: podman import failed: {imported.stderr[-2000:]}")
        figures: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for cold in (True, False):
                mode = "cold" if cold else "warm"
                figures.setdefault(f"podman_{mode}", []).append(
                    podman(context, work / "q.oci.tar", cold)
                )
                figures.setdefault(f"provision_{mode}", []).append(
                    provision_image(bundle, args.base, work / "p.oci.tar", cold)
                )
        best = {k: min(v) for k, v in figures.items()}
        result = {
            "seconds": {k: round(v, 1) for k, v in best.items()},
            "ratio_cold": round(best["provision_cold"] / best["podman_cold"], 2),
            "ratio_warm": round(best["provision_warm"] / best["podman_warm"], 2),
            "size_provision": (work / "p.oci.tar").stat().st_size,
            "size_podman": (work / "q.oci.tar").stat().st_size,
            "size_bundle": args.bundle.stat().st_size,
            "goal_warm": GOAL,
        }
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
        return 0 if result["ratio_warm"] <= GOAL else 1
    finally:
        for image in (TAG, BASE_IMAGE):
            subprocess.run(["podman", "rmi", "--ignore", "--force", image], capture_output=True,
                           check=False)  # fmt: skip
        subprocess.run(["podman", "image", "prune", "-f"], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


def _same_fs(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


if __name__ == "__main__":
    sys.exit(main())
