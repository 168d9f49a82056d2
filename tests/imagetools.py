"""Running an OCI archive here without a registry and without `podman run` (it fails on these build
machines: setrlimit): the archive is unpacked into a layout, `umoci unpack` makes the runtime bundle
(config.json + rootfs) from it, and crun, the runtime podman itself starts, runs a command in it.

crun refuses this machine's hybrid cgroup set-up ("cgroups in hybrid mode not supported"): it runs
in a mount namespace of its own where the cgroup2 hierarchy at /sys/fs/cgroup/unified is unmounted,
with --cgroup-manager=disabled and no cgroup mount in the container. Nothing of the host changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path


def why_no_crun() -> str | None:
    for tool in ("umoci", "crun", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install umoci crun)"
    return None


def unpack(archive: Path, into: Path) -> Path:
    """The runtime bundle (config.json, rootfs/) of the archive's one image, under into/."""
    layout = into / "layout"
    layout.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    index = json.loads((layout / "index.json").read_text())
    ref = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
    bundle = into / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{ref}", str(bundle)],
                   check=True, capture_output=True, timeout=900)  # fmt: skip
    shutil.rmtree(layout)
    return bundle


def crun(bundle: Path, argv: list[str], name: str, timeout: float = 900,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """argv in the image (its Env, no network: the config's own network namespace)."""
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["args"] = argv
    config["process"]["terminal"] = False
    config["process"]["env"] += [f"{k}={v}" for k, v in (env or {}).items()]
    config["mounts"] = [m for m in config["mounts"] if m.get("type") != "cgroup"]
    config["linux"].pop("resources", None)
    (bundle / "config.json").write_text(json.dumps(config))
    script = (
        "umount /sys/fs/cgroup/unified 2>/dev/null || true; "
        'exec crun --cgroup-manager=disabled run --bundle "$1" "$2"'
    )
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", str(bundle), name],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
