#!/usr/bin/env bash
# An image from `provision image` run under a real OCI runtime (crun) with the GPU, as the NVIDIA
# Container Toolkit's CDI spec would hand it in: the device nodes /dev/nvidia* as devices of the
# container, the driver's user-space libraries (libcuda, libnvidia-ml, libnvidia-ptxjitcompiler,
# libnvidia-nvvm, libnvidia-gpucomp, ...) bind-mounted read-only into /usr/lib/x86_64-linux-gnu and
# nvidia-smi into /usr/bin, then ldconfig in the container (CDI's update-ldcache hook). No podman,
# no registry, no network:
#
#     bash tests/gpu/image_gpu.sh ARCHIVE NAME [-- COMMAND...]
#
# ARCHIVE: the OCI archive (provision image -o), NAME: its environment. Default COMMAND:
# `provision verify NAME --require-gpu --json`; its stdout is the report. Environment: CRUN (crun
# on PATH), WORK (a folder with room for the unpacked root filesystem; default a temporary one,
# removed at the end), GPU=0 to run without the GPU (the same container on a CPU machine).
# The layers are unpacked with tar in the manifest's order (provision's layers have no whiteouts).
# Where the host's cgroups are hybrid (v1 with a v2 hierarchy at /sys/fs/cgroup/unified), crun
# refuses them: it then runs in a mount namespace of its own with that hierarchy unmounted and
# --cgroup-manager=disabled. Needs root, python3 (for JSON) and tar.
set -euo pipefail
archive=${1:?usage: image_gpu.sh ARCHIVE NAME [-- COMMAND...]}
name=${2:?usage: image_gpu.sh ARCHIVE NAME [-- COMMAND...]}
shift 2
[ "${1:-}" = -- ] && shift
crun=${CRUN:-$(command -v crun || true)}
[ -x "$crun" ] || { echo "image_gpu: no crun (carry Debian's crun and the libraries ldd names)" >&2; exit 1; }
gpu=${GPU:-1}
work=${WORK:-}
if [ -z "$work" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/layout" "$work/bundle/rootfs"
tar -xf "$archive" -C "$work/layout"

# The image's layers (in order) and its config's Env.
python3 - "$work/layout" >"$work/layers" <<'EOF'
import json, sys
layout = sys.argv[1]
blob = lambda d: f"{layout}/blobs/sha256/{d.split(':', 1)[1]}"
index = json.load(open(f"{layout}/index.json"))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
for layer in manifest["layers"]:
    print(blob(layer["digest"]))
print("CONFIG", blob(manifest["config"]["digest"]))
EOF
while read -r blob; do
    case $blob in CONFIG\ *) config=${blob#CONFIG } ;; *) tar -xzf "$blob" -C "$work/bundle/rootfs" --numeric-owner ;; esac
done <"$work/layers"
cp "$config" "$work/image-config.json"
config=$work/image-config.json
rm -rf "$work/layout"

# What CDI would mount: the driver's libraries as ldconfig lists them, nvidia-smi, the devices.
libs=() devices=()
if [ "$gpu" = 1 ]; then
    mapfile -t libs < <(ldconfig -p | awk '/x86-64/ && $1 ~ /^lib(cuda|nvidia-(ml|ptxjitcompiler|nvvm|gpucomp|cfg|allocator|opencl|opticalflow))\.so\.[0-9]+$/ {print $NF}' | sort -u)
    mapfile -t devices < <(ls /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-modeset 2>/dev/null || true)
    [ "${#devices[@]}" -gt 0 ] || { echo "image_gpu: no /dev/nvidia* on this host (GPU=0 runs without)" >&2; exit 1; }
fi
if [ "$#" -eq 0 ]; then
    set -- sh -c "ldconfig 2>/dev/null; exec provision verify $name --require-gpu --json"
    [ "$gpu" = 1 ] || set -- provision verify "$name" --json
elif [ "$gpu" = 1 ]; then
    set -- sh -c 'ldconfig 2>/dev/null; exec "$@"' sh "$@"
fi

python3 - "$config" "$work/bundle/config.json" "${#libs[@]}" "${libs[@]}" "${devices[@]}" -- "$@" <<'EOF'
import json, os, sys
config_path, out, nlibs = sys.argv[1], sys.argv[2], int(sys.argv[3])
rest = sys.argv[4:]
libs, rest = rest[:nlibs], rest[nlibs:]
cut = rest.index("--")
devices, argv = rest[:cut], rest[cut + 1:]
image = json.load(open(config_path))["config"]
mounts = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
]
for lib in libs:  # the soname link and the file it names, as CDI lists both
    real = os.path.realpath(lib)
    for path in sorted({lib, real}):
        dest = "/usr/lib/x86_64-linux-gnu/" + os.path.basename(path)
        mounts.append({"destination": dest, "type": "bind", "source": real, "options": ["rbind", "ro", "nosuid", "nodev"]})
smi = "/usr/bin/nvidia-smi"
if libs and os.path.exists(smi):
    mounts.append({"destination": smi, "type": "bind", "source": smi, "options": ["rbind", "ro", "nosuid", "nodev"]})
nodes = []
for dev in devices:
    st = os.stat(dev)
    nodes.append({"path": dev, "type": "c", "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev), "fileMode": 0o666, "uid": 0, "gid": 0})
spec = {
    "ociVersion": "1.0.2",
    "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": argv, "cwd": "/",
                "env": image.get("Env", []) + ["HOME=/root", "NCCL_NVLS_ENABLE=0"],
                "capabilities": {k: ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETUID", "CAP_SETGID", "CAP_KILL"] for k in ("bounding", "effective", "permitted")},
                "noNewPrivileges": True},
    "root": {"path": "rootfs", "readonly": False},
    "hostname": "provision-image",
    "mounts": mounts,
    "linux": {"devices": nodes,
              "resources": {"devices": [{"allow": False, "access": "rwm"}] + [{"allow": True, "type": "c", "major": n["major"], "minor": n["minor"], "access": "rwm"} for n in nodes]},
              "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
              "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
              "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]},
}
json.dump(spec, open(out, "w"), indent=1)
EOF

id="provision-image-$$"
if [ -d /sys/fs/cgroup/unified ] && mountpoint -q /sys/fs/cgroup/unified 2>/dev/null; then
    # hybrid cgroups: crun refuses them; a mount namespace of its own without the v2 hierarchy
    python3 - "$work/bundle/config.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1])); spec["linux"].pop("resources", None)
json.dump(spec, open(sys.argv[1], "w"), indent=1)
EOF
    status=0
    unshare --mount sh -c 'umount /sys/fs/cgroup/unified; exec "$@"' sh \
        "$crun" --cgroup-manager=disabled run --bundle "$work/bundle" "$id" || status=$?
    exit "$status"
fi
status=0
"$crun" run --bundle "$work/bundle" "$id" || status=$?
exit "$status"
