#!/usr/bin/env bash
# On the air-gapped GPU machine: an environment holding TensorFlow and PyTorch (or JAX), built from a
# provision bundle with the host's python3 and no network, then proven: `provision verify
# --require-gpu` (its frameworks check runs PyTorch on the GPU beside TensorFlow and compares the
# cuDNN it loaded with the lock), and one process that runs both frameworks on the GPU and lists
# which cuDNN/cuBLAS/NCCL files it mapped (tests/gpu/frameworks_probe.py, both import orders), the
# interpreter alone under `env -i` as cron runs it. Writes what it saw to OUT.
#
#   tests/gpu/device_frameworks.sh PARTS_DIR OUT
#
# PARTS_DIR holds NAME.bundle.tar.001 ... (provision bundle NAME --split 56M).
set -uo pipefail
acc=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
log() { printf '== %s\n' "$*" | tee -a "$out/steps.log"; }
first=$(ls "$acc"/*.bundle.tar.001)
name=$(basename "$first" .bundle.tar.001)
log "$name: $(ls "$acc"/"$name".bundle.tar.* | wc -l) parts, $(du -sh "$acc" | cut -f1)"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader; python3 -V; } | tee -a "$out/steps.log"

tail -c +513 "$first" | tar -xO --occurrence=1 provision-bundle/bootstrap.py >/tmp/bootstrap.py
start=$(date +%s)
python3 /tmp/bootstrap.py "$first" --require-gpu >"$out/bootstrap.log" 2>&1
log "bootstrap + install + verify: exit $? in $(($(date +%s) - start)) s"
tail -40 "$out/bootstrap.log"

cd /tmp
pv=$HOME/.local/share/provision/venv/bin/provision
prefix=$HOME/.local/share/provision/envs/$name
start=$(date +%s)
"$pv" verify "$name" --require-gpu --json >"$out/verify.json"
log "verify --require-gpu: exit $? in $(($(date +%s) - start)) s"
"$pv" verify "$name" --require-gpu 2>&1 | tail -30 | tee "$out/verify.txt"
"$pv" show "$name" >>"$out/steps.log" 2>&1
other=$("$prefix/bin/python" -c 'import importlib.util as u; print("torch" if u.find_spec("torch") else "jax")')
for order in tf-first "$other-first"; do
	env -i HOME=/root PATH=/usr/bin:/bin "$prefix/bin/python" "$here/frameworks_probe.py" "$order" "$other" \
		>"$out/one-process-$order.json" 2>>"$out/probe.stderr"
	log "one process, $order: exit $?"
	cat "$out/one-process-$order.json"
done
