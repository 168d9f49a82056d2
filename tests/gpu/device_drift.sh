#!/usr/bin/env bash
# Drift on a GPU machine (provision check): an environment built from a bundle passes verify,
# check finds nothing; a package installed into it by hand is named by check, with its effect;
# check --verify re-runs the smoke test with that environment's figures. Every output into OUT.
#
#   tests/gpu/device_drift.sh WHEELS OUT [NAME]
#
# WHEELS: a folder holding the wheel installed by hand (numpy 1.26.4 for cp312: pip download
# numpy==1.26.4 --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64).
# NAME: a built environment (default tf2.21-pip). PROVISION: how to run provision (default: the
# venv bootstrap.py made, ~/.local/share/provision/venv/bin/provision).
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set /{/^#/p}' "$0" >&2; exit 2; }
wheels=$1 out=$2 name=${3:-tf2.21-pip}
read -r -a provision <<<"${PROVISION:-$HOME/.local/share/provision/venv/bin/provision}"
uv=$(dirname "${provision[0]}")/uv
mkdir -p "$out"
step() { # file command...: stdout into OUT/file, its exit code and time on stderr and in the log
	local file=$1 started rc
	shift
	started=$EPOCHREALTIME
	"$@" >"$out/$file" 2>"$out/$file.err"
	rc=$?
	printf '%-20s exit %d in %s s: %s\n' "$file" "$rc" \
		"$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')" "$*" |
		tee -a "$out/steps.log"
}
step list.txt "${provision[@]}" list
step verify.json "${provision[@]}" verify "$name" --require-gpu --json
step check-clean.txt "${provision[@]}" check "$name"
step check-clean.json "${provision[@]}" check "$name" --json
python=$("${provision[@]}" run "$name" -- python -c 'import sys; print(sys.executable)')
step pip-install.txt "$uv" pip install --python "$python" --no-index --find-links "$wheels" \
	numpy==1.26.4
step check-numpy.txt "${provision[@]}" check "$name"
step check-numpy.json "${provision[@]}" check "$name" --json
step check-verify.json "${provision[@]}" check "$name" --verify --json --prom "$out/provision.prom"
step check-after.txt "${provision[@]}" check "$name"
