#!/usr/bin/env bash
# On the GPU machine (no network), from a signed split bundle whose parts are in ACC:
#   device_best.sh install NAME TRUST_DIR  the trust refusals, then bootstrap.py with the trust file
#   device_best.sh repro NAME              tests/gpu/fp16_softmax.py with NAME's interpreter
#   device_best.sh best NAME BUDGET        provision bench --best NAME (ResNet50 at 224 px)
# Results go to $RES (default /root/w/res), kept between calls, and are copied to $OUT at the end.
# TRUST_DIR holds allowed_signers (the signing key) and stranger_signers (another key only).
set -uo pipefail
what=$1 name=$2
acc=${ACC:-/root/acc} res=${RES:-/root/w/res} out=${OUT:-/tmp/out}
export PROVISION_HOME=${PROVISION_HOME:-/root/ph}
mkdir -p "$res" "$out"
checkout=$(pwd)
venv=$PROVISION_HOME/venv
log() { echo "== $*" | tee -a "$res/$name-$what.log"; }
copy_out() { cp -r "$res"/. "$out"/; }
trap copy_out EXIT

case $what in
install)
    trust=$3
    first=$acc/$name.bundle.tar.001
    nvidia-smi >"$res/nvidia-smi.txt" 2>&1
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv \
        >"$res/gpu.csv" 2>&1
    command -v ssh-keygen >"$res/ssh-keygen.txt" 2>&1 || echo "no ssh-keygen" >"$res/ssh-keygen.txt"
    tail -c +513 "$first" | tar -xO --occurrence=1 provision-bundle/bootstrap.py >"$res/bootstrap.py"
    # 1. Signed by a key the trust file does not hold: refused before anything is unpacked.
    log "refusal: another signer's trust file"
    before=$(find "$PROVISION_HOME" 2>/dev/null | wc -l)
    python3 "$res/bootstrap.py" "$first" --trust "$trust/stranger_signers" \
        >"$res/$name-refused-signer.txt" 2>&1
    echo "exit $? ; files under PROVISION_HOME before $before after $(find "$PROVISION_HOME" 2>/dev/null | wc -l)" \
        >>"$res/$name-refused-signer.txt"
    # 2. A copy whose manifest changed after signing (one byte of its JSON): refused.
    log "refusal: manifest changed after signing"
    tampered=/root/w/tampered && rm -rf "$tampered" && mkdir -p "$tampered"
    for f in "$acc/$name".bundle.tar.*; do ln -s "$f" "$tampered/"; done
    rm "$tampered/$name.bundle.tar.001" && cp "$first" "$tampered/"
    python3 - "$tampered/$name.bundle.tar.001" <<'EOF'
import sys
p = sys.argv[1]
data = bytearray(open(p, "rb").read())
at = data.index(b'"sha256"', 512)  # inside manifest.json, the first member after the part header
data[at + 12] ^= 0x01
open(p, "wb").write(data)
EOF
    python3 "$res/bootstrap.py" "$tampered/$name.bundle.tar.001" --trust "$trust/allowed_signers" \
        >"$res/$name-refused-tampered.txt" 2>&1
    echo "exit $?" >>"$res/$name-refused-tampered.txt"
    rm -rf "$tampered"
    # 3. The real install, trusted, verified on the GPU.
    log "bootstrap with the trust file"
    start=$(date +%s)
    python3 "$res/bootstrap.py" "$first" --trust "$trust/allowed_signers" --require-gpu \
        >"$res/$name-bootstrap.txt" 2>&1
    echo "exit $? in $(($(date +%s) - start)) s" >>"$res/$name-bootstrap.txt"
    tail -5 "$res/$name-bootstrap.txt"
    PYTHONPATH=$checkout "$venv/bin/provision" verify "$name" --require-gpu --json \
        >"$res/$name-verify.json" 2>"$res/$name-verify.err"
    echo "verify exit $?"
    ;;
repro)
    py=$PROVISION_HOME/envs/$name/bin/python
    [ -x "$py" ] || py=$(PYTHONPATH=$checkout "$venv/bin/provision" show "$name" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["built"]["prefix"] + "/bin/python")')
    log "fp16 softmax reproduction with $py"
    timeout 540 env -u PYTHONPATH "$py" tests/gpu/fp16_softmax.py --steps 30 --batch 64 \
        >"$res/$name-fp16-softmax.json" 2>"$res/$name-fp16-softmax.err"
    echo "exit $?"
    tail -c 1500 "$res/$name-fp16-softmax.json"
    ;;
best)
    budget=$3
    log "bench --best $name, budget $budget s"
    PYTHONPATH=$checkout timeout 590 "$venv/bin/provision" bench --best "$name" --model resnet50 \
        --image-size 224 --steps 15 --warmup 5 --budget "$budget" --json \
        >"$res/$name-best.json" 2>"$res/$name-best.log"
    echo "exit $?"
    grep -v "^  " "$res/$name-best.log" | tail -30
    ;;
esac
