#!/usr/bin/env bash
# On the air-gapped GPU machine: build an environment with `provision install` from its lock, with
# no network, then use it as people do: its bare interpreter (no activation) under verify, a cron-like
# empty environment, and a Jupyter kernel started through jupyter_client. Writes what it saw to OUT.
#
#   tests/gpu/device_env.sh WHEEL_PARTS_DIR ENVS_DIR NAME DEPS_DIR OUT
#
# WHEEL_PARTS_DIR holds part.NN files: a tar of the lock's wheels (pip download --require-hashes
# --no-deps -r ENVS_DIR/NAME/requirements.lock ...), split to travel; DEPS_DIR holds the wheels of
# provision's own dependencies for the machine's Python. provision itself runs from this checkout.
set -euo pipefail
parts=$1 envs=$(cd "$2" && pwd) name=$3 deps=$4 out=$5
work=${PROVISION_DEVICE_WORK:-/root/provision-work}
mkdir -p "$work" "$out"
log() { printf '== %s\n' "$*" | tee -a "$out/steps.log"; }

if [ ! -f "$work/wheels.done" ]; then
	log "unpacking $(find "$parts" -name 'part.*' | wc -l) parts"
	rm -rf "$work/wheels" && mkdir -p "$work/wheels"
	cat "$parts"/part.* | tar -x -C "$work/wheels"
	touch "$work/wheels.done"
fi
log "$(find "$work/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$work/wheels" | cut -f1)"

python3 -m venv "$work/pv"
"$work/pv/bin/pip" install -q --no-index --find-links "$deps" click jinja2 packaging pyyaml \
	nvidia-ml-py platformdirs jupyter_client
export PYTHONPATH=$PWD PROVISION_HOME=$work/home JUPYTER_DATA_DIR=$work/jupyter
provision() { "$work/pv/bin/python" -m provision "$@"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"; } | tee "$out/gpu.txt"

log "provision install $name (no index, no network)"
start=$(date +%s)
PIP_NO_INDEX=1 PIP_FIND_LINKS=$work/wheels provision install "$name" --out "$envs" \
	--installer pip --json | tee "$out/install.json"
log "install took $(($(date +%s) - start)) s"
prefix=$PROVISION_HOME/envs/$name

cd /tmp  # from anywhere: names come from the registry
log "verify with the bare interpreter, no activation"
set +e
provision verify --python "$prefix/bin/python" --require-gpu --json >"$out/verify-bare.json"
echo "exit $?" | tee -a "$out/steps.log"
provision verify --python "$prefix/bin/python" --require-gpu | tail -25 | tee "$out/verify-bare.txt"
log "verify by name, from /tmp"
provision verify "$name" --require-gpu | tail -3 | tee "$out/verify-name.txt"
set -e

log "cron-like: an empty environment, the interpreter alone"
env -i HOME=/root PATH=/usr/bin:/bin "$prefix/bin/python" -c '
import json, time
t = time.time()
import tensorflow as tf
import provision_env_hook as h
gpus = tf.config.list_physical_devices("GPU")
conf = [tf.config.get_logical_device_configuration(g) for g in gpus]
print(json.dumps({"gpus": [g.name for g in gpus], "limits_mib": [c[0].memory_limit if c else None for c in conf],
  "hook_loaded": len(h.state["loaded"]), "hook_failed": h.state["failed"], "hook_seconds": h.state["seconds"],
  "import_seconds": round(time.time() - t, 2)}))' 2>"$out/cron.stderr" | tee "$out/cron.json"

log "provision kernel $name, then a kernel started by jupyter_client"
provision kernel "$name" | tee "$out/kernel.txt"
"$work/pv/bin/python" - "$name" <<'EOF' | tee "$out/kernel.json"
import json, sys
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="provision-" + sys.argv[1].lower(), startup_timeout=180)
out = []
code = """
import json, os, tensorflow as tf, provision_env_hook as h
gpus = tf.config.list_physical_devices("GPU")
conf = [tf.config.get_logical_device_configuration(g) for g in gpus]
x = tf.linalg.matmul(tf.ones([4096, 4096]), tf.ones([4096, 4096]))
print(json.dumps({"gpus": [g.name for g in gpus], "limits_mib": [c[0].memory_limit if c else None for c in conf],
  "matmul_on": x.device, "hook_loaded": len(h.state["loaded"]), "activated": "VIRTUAL_ENV" in os.environ}))
"""
try:
    reply = kc.execute_interactive(code, timeout=300, output_hook=lambda m: out.append(
        m["content"]["text"]) if m["msg_type"] == "stream" and m["content"].get("name") == "stdout" else None)
    print("".join(out).strip().splitlines()[-1] if reply["content"]["status"] == "ok" else reply["content"])
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
EOF

log "list, show, doctor"
provision list | tee "$out/list.txt"
provision show "$name" | tee "$out/show.txt"
provision doctor --tf 2.21 >"$out/doctor.txt" || true
log "start-up cost of the hook"
(cd "$OLDPWD" && "$work/pv/bin/python" tests/bench/bench_hook.py --runs 30) | tee "$out/bench-hook.txt"
