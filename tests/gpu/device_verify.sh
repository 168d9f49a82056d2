#!/usr/bin/env bash
# The smoke test on a GPU machine where TensorFlow 2.21 and its CUDA 12 wheels were installed with
# `pip install --no-deps --target $SITE` (nothing else there: no venv, no activation). Run from the
# repository root:
#
#     OUT=/some/dir [SITE=/root/site] [PYTHON=python3] [TIMEOUT=300] bash tests/gpu/device_verify.sh
#
# 1. with every $SITE/nvidia/*/lib on LD_LIBRARY_PATH: every check must pass (--require-gpu);
# 2. without LD_LIBRARY_PATH: it must fail, naming libcusolver.so.11 as the library that cannot be
#    opened (TensorFlow's own search path has no cusolver folder; its log does not say which);
# 3. as 1, plus a hard memory limit through the start-up hook (PROVISION_GPU_MEMORY_LIMIT_MIB):
#    the gpu_policy and memory checks must show the limit in effect.
# Expectations: the matrix's for TF 2.21 on the pip path at this machine's Python, passed to the
# payload's smoke test (its zipapp, built from this checkout) with --expected. Reports:
# $OUT/smoke-ldpath.json, smoke-no-ldpath.json, smoke-memlimit.json (+ .txt: summary and any
# stderr). XLA_FLAGS points at $SITE/nvidia/cuda_nvcc in every run, as the pip activation does.
# Exit 0 when all three behave as said, 1 otherwise.
set -u
SITE=${SITE:-/root/site}
PY=${PYTHON:-python3}
TIMEOUT=${TIMEOUT:-300}
: "${OUT:?set OUT to the directory for the reports}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # never NVLink multicast on shared hosts
# ptxas and libdevice for XLA, as the pip path's activation sets it (all three runs).
export XLA_FLAGS="--xla_gpu_cuda_data_dir=$SITE/nvidia/cuda_nvcc"
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! "$PY" -m provision render --tf 2.21 --path pip --python "$pyver" --name tf2.21 \
	--out "$work/envs" >/dev/null ||
	! "$PY" -m provision render --tf 2.21 --path pip --python "$pyver" --name memlimit \
		--gpu-memory 4096 --out "$work/envs" >/dev/null; then
	echo "device_verify: cannot render the environments with this Python" >&2
	exit 1
fi
libs=$(find "$SITE/nvidia" -mindepth 2 -maxdepth 2 -type d -name lib | LC_ALL=C sort | paste -sd:)
# The zipapp provision runs, and the spec's expectations of each environment, as verify passes them.
if ! "$PY" - "$work" "$pyver" <<'EOF'; then
import json, pathlib, sys
from provision import matrix, payload_app
from provision.matrix import spec
work, python = pathlib.Path(sys.argv[1]), sys.argv[2]
payload_app.write_zipapp(work / "payload.pyz")
m = matrix.load()
for name, policy in (("tf2.21", spec.GpuPolicy(None, None)), ("memlimit", spec.GpuPolicy("4096", None))):
    want = spec.expected(spec.resolve(m, "2.21", "pip", python, name, policy))
    (work / f"expected-{name}.json").write_text(json.dumps(want))
EOF
	echo "device_verify: cannot build the payload or its expectations with this Python" >&2
	exit 1
fi

smoke() { # NAME ENV [VAR=VALUE...]: one run with ENV's expectations, JSON and summary into $OUT
	local name=$1 exp=$work/expected-$2.json
	shift 2
	env "$@" "$PY" "$work/payload.pyz" smoke --expected "$exp" --require-gpu --timeout "$TIMEOUT" \
		--out "$OUT/$name.json" >"$OUT/$name.txt" 2>&1
	local rc=$?
	cat "$OUT/$name.txt"
	return $rc
}

echo "== 1. LD_LIBRARY_PATH holds every nvidia/*/lib: everything must pass"
if ! smoke smoke-ldpath tf2.21 LD_LIBRARY_PATH="$libs"; then
	echo "device_verify: FAILED: run 1 did not pass" >&2
	status=1
fi

echo "== 2. no LD_LIBRARY_PATH: must fail, naming libcusolver.so.11"
if smoke smoke-no-ldpath tf2.21 -u LD_LIBRARY_PATH; then
	echo "device_verify: FAILED: run 2 passed" >&2
	status=1
elif ! "$PY" - "$OUT/smoke-no-ldpath.json" <<'EOF'; then
import json, sys
checks = {c["name"]: c for c in json.load(open(sys.argv[1]))["checks"]}
libs = checks["cuda_libraries"]
ok = libs["status"] == "fail" and "libcusolver.so.11" in libs["details"].get("cannot_open", [])
print("cuda_libraries:", libs["status"], "-", libs["reason"])
sys.exit(0 if ok and "libcusolver.so.11" in libs["reason"] else 1)
EOF
	echo "device_verify: FAILED: run 2 did not name libcusolver.so.11" >&2
	status=1
fi

echo "== 3. hard memory limit of 4096 MiB through the start-up hook"
mkdir -p "$work/site" "$work/boot"
cp "$work/envs/memlimit/hooks/provision_gpu_policy.py" "$work/envs/memlimit/hooks/provision_gpu_policy.pth" "$work/site/"
# What `provision install` does (the .pth in site-packages), for a --target install.
printf 'import site\nsite.addsitedir(%s)\n' "'$work/site'" >"$work/boot/sitecustomize.py"
if ! smoke smoke-memlimit memlimit LD_LIBRARY_PATH="$libs" \
	PYTHONPATH="$work/boot:$PYTHONPATH" PROVISION_GPU_MEMORY_LIMIT_MIB=4096; then
	echo "device_verify: FAILED: run 3 did not pass" >&2
	status=1
fi

[ "$status" = 0 ] && echo "device_verify: all three runs behaved as expected"
exit "$status"
