#!/bin/bash
# The doctor and two cuDNNs, on the GPU host (tests/gpu/README.md): a real venv ~/venvs/tf holding
# the real nvidia-cudnn-cu12 9.3.0.75 wheel's libcudnn.so.9 and libcudnn_graph.so.9 (and a
# TensorFlow 2.21 dist-info, metadata only), then `provision doctor --tf 2.21` of this checkout
# (after) and of an older tree (before). Reports go to $OUT.
#
#   device_doctor_cudnn.sh CARRIED OLD_TREE
#
# CARRIED holds lib/ (the two libraries), nvidia_cudnn_cu12-9.3.0.75.dist-info/ and wheels/
# (click, packaging, platformdirs and nvidia-ml-py, for the host's Python); OLD_TREE holds an older
# provision/ (git archive REV provision | tar -x -C OLD_TREE).
set -u
carried=$(cd "$1" && pwd); old=$(cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
pp=$(mktemp -d)
trap 'rm -rf "$pp"' EXIT
python3 -m pip install -q --no-index --no-deps --target "$pp" "$carried"/wheels/*.whl
python3 -m venv "$HOME/venvs/tf"
sp=$(echo "$HOME"/venvs/tf/lib/python3*/site-packages)
mkdir -p "$sp/nvidia/cudnn/lib" "$sp/tensorflow-2.21.0.dist-info"
cp "$carried"/lib/* "$sp/nvidia/cudnn/lib/"
cp -r "$carried"/nvidia_cudnn_cu12-9.3.0.75.dist-info "$sp/"
printf 'Metadata-Version: 2.1\nName: tensorflow\nVersion: 2.21.0\n' >"$sp/tensorflow-2.21.0.dist-info/METADATA"
for which in after before; do
    src=$repo
    [ "$which" = before ] && src=$old
    (cd "$src" && PYTHONPATH="$pp:$src" python3 -m provision doctor --tf 2.21 --json >"$out/doctor-$which.json" &&
        PYTHONPATH="$pp:$src" python3 -m provision doctor --tf 2.21 >"$out/doctor-$which.txt" 2>&1)
    python3 - "$out/doctor-$which.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for lib in report["host"]["libraries"]:
    if lib["kind"] == "cudnn":
        name = sys.argv[1].rsplit("/", 1)[1]
        print(name, repr(lib["env"]), lib["path"], lib["version"], lib["version_from"])
PY
done
