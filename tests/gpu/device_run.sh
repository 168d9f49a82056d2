#!/usr/bin/env bash
# provision's GPU measurements on a machine with NVIDIA GPUs and no network (see tests/gpu/README.md).
# The wheels (TensorFlow 2.21 + its CUDA 12.5 / cuDNN 9.3 wheels) arrive as split parts in $ACC.
#   device_run.sh install   join the parts, check the tar's sha256, pip install --target $SITE
#   device_run.sh verify    smoke test: 2 GPUs, GPU 0 only, and without the nvidia/*/lib fix
#   device_run.sh doctor    provision doctor --json, the host as it is
#   device_run.sh bench ARGS...   the payload's benchmark with ARGS
# The smoke test and the benchmark run from the payload's zipapp (provision/payload_app.py), as
# provision ships them; not isolated (-I) here, since TensorFlow is found through PYTHONPATH.
set -uo pipefail
acc=${ACC:-/root/acc}
site=${SITE:-/root/site}
out=${OUT:-/tmp/provision-gpu}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$out"
libpath() { find "$site/nvidia" -mindepth 2 -maxdepth 2 -type d -name lib | sort | paste -sd: -; }
pyz=$out/payload.pyz
zipapp() { # the payload's zipapp, built from this checkout (stdlib only)
    PYTHONPATH="$top" python3 -c 'import sys, pathlib; from provision.payload_app import write_zipapp
write_zipapp(pathlib.Path(sys.argv[1]))' "$pyz"
}

case ${1:-} in
install)
    [ -d "$site/tensorflow" ] && { echo "already installed in $site"; exit 0; }
    cat "$acc"/p?? > /root/wheels.tar || exit 1
    echo "$(cat "$here/wheels.sha256")  /root/wheels.tar" | sha256sum -c - || exit 1
    tar -xf /root/wheels.tar -C /root && rm -f /root/wheels.tar "$acc"/p??
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" /root/gpuwheels/*.whl
    ;;
verify)
    exp=$here/expected-tf2.21-pip.json
    zipapp || exit 1
    run() { # name, then env assignments
        local name=$1; shift
        env "$@" PYTHONPATH="$site" python3 "$pyz" smoke --expected "$exp" \
            --require-gpu --out "$out/$name.json" > "$out/$name.txt" 2>&1
        echo "== $name: exit $?"; tail -n 25 "$out/$name.txt"
    }
    run verify-h200x2 LD_LIBRARY_PATH="$(libpath)"
    run verify-h200 LD_LIBRARY_PATH="$(libpath)" CUDA_VISIBLE_DEVICES=0
    run verify-h200-nolibpath LD_LIBRARY_PATH= CUDA_VISIBLE_DEVICES=0
    ;;
doctor)
    (cd "$top" && python3 -m provision doctor --json > "$out/doctor.json"; echo "doctor exit $?"
     python3 -m provision doctor --tf 2.21 | tail -n 30)
    ;;
bench)
    shift
    name=$1; shift
    zipapp || exit 1
    PYTHONPATH="$site" LD_LIBRARY_PATH="$(libpath)" python3 "$pyz" bench \
        --json "$out/$name.json" "$@" 2>&1 | grep -v -e '^WARNING' -e 'I0000\|W0000' | tail -n 20
    ;;
*) echo "usage: $0 install|verify|doctor|bench NAME ARGS..." >&2; exit 2 ;;
esac
