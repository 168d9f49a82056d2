#!/usr/bin/env bash
# Issue 14's findings on a GPU machine: why TensorFlow 2.21 (Keras 3) trains ResNet50 slower than
# 2.13 (Keras 2) on the same GPU, and where mixed precision pays. Runs `provision bench` on
# ResNet50 at 224 px, 1 GPU, short runs, for a chosen set of settings (not the cross product),
# each configuration's JSON report into OUT; then one combined table (OUT/findings.txt) and a
# markdown table with the command of each row (OUT/findings.md).
#
#   tests/gpu/device_bench.sh OUT [OLD_ENV [NEW_ENV]]
#
# OLD_ENV, NEW_ENV: environment names `provision bench` resolves (default tf2.13-pip, tf2.21-pip),
# or interpreters (a path with a slash: passed as --python). Every setting runs in NEW_ENV; OLD_ENV
# runs the baseline, XLA and batch-256 lines that the comparison needs (ALL=1: every line in both).
# Resumable: a configuration whose OUT/<env>--<id>.json exists is skipped; one that failed or timed
# out left OUT/<env>--<id>.failed and is skipped too unless RETRY=1. Progress: OUT/<env>--<id>.log.
#
# Environment: PROVISION (how to run provision; default: python3 -m provision from this checkout),
# STEPS / WARMUP (20 / 5), TIMEOUT (seconds per configuration, 300), ONLY (a regex of ids to run),
# BENCH_ARGS (more options for every line, after the others: the CPU test uses a tiny model),
# SCALING (GPU counts, e.g. 1,2: adds a scaling line for both environments and OUT/scaling.png).
# Expected time on one H200: about 6 minutes for the lines without XLA (estimated: about 12 s to
# start a line, 15 s per precision), then the XLA lines, about 3 minutes plus XLA's first compile
# of each (once over 400 s for ResNet50 at batch 256), each line capped by TIMEOUT.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set /{/^#/p}' "$0" >&2; exit 2; }
out=$1 old=${2:-tf2.13-pip} new=${3:-tf2.21-pip}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$out"
read -r -a provision <<<"${PROVISION:-python3 -m provision}"
export PYTHONPATH="$top${PYTHONPATH:+:$PYTHONPATH}"
common=(--model resnet50 --image-size 224 --gpus 1 --steps "${STEPS:-20}" --warmup "${WARMUP:-5}")
read -r -a extra <<<"${BENCH_ARGS:-}" # later options win: tests shrink the model with these
common+=("${extra[@]}")
fp3=float32,mixed_float16,mixed_bfloat16

# id | who (both: OLD_ENV and NEW_ENV; new: NEW_ENV only) | options; the question each answers.
# The lines without XLA come first: XLA's first compile of ResNet50 is the one unknown cost.
matrix=(
	"base|both|--precision $fp3"                                 # the issue's table, with bf16
	"b256|both|--batch-per-replica 256 --precision float32,mixed_float16" # does batch make mixed pay?
	"nojit-1dev|new|--no-jit --strategy default --precision float32"      # MirroredStrategy's cost
	"spe10|new|--steps-per-execution 10 --warmup 10 --precision float32"  # per-step dispatch
	"nchw|new|--data-format channels_first --precision float32,mixed_float16" # data layout
	"custom|new|--loop custom --precision float32"               # model.fit's train-step overhead
	"tensor|new|--data synthetic-tensor --precision float32"     # the input pipeline
	"xla|both|--jit --strategy default --precision $fp3"         # XLA, and mixed precision with it
	"auto-1dev|new|--strategy default --precision float32"       # Keras 3's own default on 1 GPU
	"xla-mirrored|new|--jit --precision float32"                 # XLA under MirroredStrategy
)
if [ -n "${SCALING:-}" ]; then
	matrix+=("scaling|both|--gpus $SCALING --precision float32,mixed_float16")
fi

label() { # what a report file is named after: the environment's name, or its prefix's folder
	case $1 in */*) basename "$(dirname "$(dirname "$1")")" ;; *) printf '%s\n' "$1" ;; esac
}
target() { case $1 in */*) printf '%s\n' --python "$1" ;; *) printf '%s\n' "$1" ;; esac; }

run() { # env id options...
	local env=$1 id=$2 name file started rc
	shift 2
	name="$(label "$env")--$id"
	file=$out/$name.json
	if [ -s "$file" ]; then echo "== $name: done before"; return 0; fi
	if [ -f "$out/$name.failed" ] && [ -z "${RETRY:-}" ]; then
		echo "== $name: failed before (RETRY=1 runs it again): $(tail -n 1 "$out/$name.failed")"
		return 0
	fi
	local where
	mapfile -t where < <(target "$env")
	echo "== $name: provision bench ${where[*]} ${common[*]} $*"
	started=$(date +%s)
	timeout -k 20 "${TIMEOUT:-300}" "${provision[@]}" bench "${where[@]}" "${common[@]}" "$@" \
		--json >"$out/$name.tmp" 2>"$out/$name.log"
	rc=$?
	if python3 -c 'import json, sys; json.load(open(sys.argv[1]))["runs"]' "$out/$name.tmp" 2>/dev/null; then
		mv "$out/$name.tmp" "$file"
		rm -f "$out/$name.failed"
		python3 - "$file" "$(($(date +%s) - started))" <<-'EOF'
			import json, sys
			r = json.load(open(sys.argv[1]))
			rows = [f"{x['precision']} {x['images_per_s']:,.0f} img/s acc {x['accuracy']:.2f}"
			        for x in r["runs"]]
			rows += [f"{x['precision']} failed: {x['error'][:80]}" for x in r["failed"]]
			print(f"   {sys.argv[2]} s: " + "; ".join(rows))
		EOF
	else
		rm -f "$out/$name.tmp"
		{
			echo "exit $rc after $(($(date +%s) - started)) s$([ $rc -eq 124 ] && echo ": timed out (TIMEOUT=${TIMEOUT:-300})")"
			grep -v -e 'I0000' -e 'W0000' "$out/$name.log" | tail -n 5
		} >"$out/$name.failed"
		echo "   failed: $(head -n 1 "$out/$name.failed")"
	fi
}

start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
	sed 's/^/   GPU: /' || echo "   no nvidia-smi"
for line in "${matrix[@]}"; do
	IFS='|' read -r id who opts <<<"$line"
	if [ -n "${ONLY:-}" ] && ! [[ $id =~ $ONLY ]]; then continue; fi
	read -r -a args <<<"$opts"
	if [ "$who" = both ] || [ -n "${ALL:-}" ]; then run "$old" "$id" "${args[@]}"; fi
	run "$new" "$id" "${args[@]}"
done
echo "== matrix took $(($(date +%s) - start)) s"

reports=()
for line in "${matrix[@]}"; do
	id=${line%%|*}
	for env in "$old" "$new"; do
		f="$out/$(label "$env")--$id.json"
		if [ -s "$f" ]; then reports+=(--report "$f"); fi
	done
done
[ ${#reports[@]} -gt 0 ] || { echo "no report to show" >&2; exit 1; }
"${provision[@]}" bench "${reports[@]}" | tee "$out/findings.txt"
"${provision[@]}" bench "${reports[@]}" --markdown >"$out/findings.md"
echo "== $out/findings.txt, $out/findings.md"
if [ -n "${SCALING:-}" ]; then
	scaling=()
	for env in "$old" "$new"; do
		f="$out/$(label "$env")--scaling.json"
		if [ -s "$f" ]; then scaling+=(--report "$f"); fi
	done
	if [ ${#scaling[@]} -gt 0 ]; then
		"${provision[@]}" bench "${scaling[@]}" --plot "$out/scaling.png" >/dev/null &&
			echo "== $out/scaling.png" || echo "no plot (it needs matplotlib: provision[bench])"
	fi
fi
