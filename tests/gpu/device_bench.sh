#!/usr/bin/env bash
# The Keras 2 / Keras 3 findings on a GPU machine: why TensorFlow 2.21 (Keras 3) trains ResNet50
# slower than 2.13 (Keras 2) on the same GPU. Runs `provision bench` on ResNet50 at 224 px, 1 GPU,
# short runs, for a chosen set of settings (not the cross product), each line's JSON report into
# OUT; then one combined table (OUT/findings.txt), a markdown table with the command of each row
# (OUT/findings.md) and a plot of the two releases' base lines (OUT/two-releases.png).
#
#   tests/gpu/device_bench.sh OUT [OLD_ENV [NEW_ENV]]
#
# OLD_ENV, NEW_ENV: environment names `provision bench` resolves (default tf2.13-pip, tf2.21-pip),
# or interpreters (a path with a slash: passed as --python); "-" leaves that release out.
# SET picks the lines: "gap" (issue 25, the default): the causes of the gap, each its own line:
# BatchNormalization fused / unfused / none in both releases, Keras 2's XLA optimizer update off,
# and XLA on 2.21 at a batch that finishes (32, then 64 when 32 did), with TF's persistent
# compilation cache (--xla-cache) and XLA's per-fusion autotuning cache, so a second attempt
# starts where the first stopped; when batch 32 does not finish, once more without autotuning
# (XLA_FLAGS=--xla_gpu_autotune_level=0), to see whether autotuning is the time; last, a profile
# of each release's default step (--profile: the op types by GPU self-time, the trace in OUT).
# SET=findings: issue 14's lines (strategy, steps per execution, layout, loop, input pipeline).
# Every line is bounded: --max-seconds BOUND (a first step, i.e. an XLA compile, still running
# then is stopped and recorded as "compile over BOUND s"), and TIMEOUT seconds for the whole line.
# Resumable: a line whose OUT/<env>--<id>.json exists is skipped; one that failed or timed out
# left OUT/<env>--<id>.failed and is skipped too unless RETRY=1. Progress: OUT/<env>--<id>.log.
#
# The whole GPU: --gpu-memory GPU_MEMORY (growth), whatever limit the environment sets (an
# environment rendered with --gpu-memory 4096 cannot hold ResNet50 at batch 128 within it).
# Environment: PROVISION (how to run provision; default: python3 -m provision from this checkout),
# STEPS / WARMUP (20 / 5), BOUND (--max-seconds, 180), TIMEOUT (seconds per line, 420), BUDGET
# (seconds: no line starts after that many since the script started), ONLY (a regex of ids to
# run), BENCH_ARGS (option-value pairs for every line, replacing the defaults: the CPU test
# uses a tiny model), SCALING (GPU counts, e.g. 1,2: adds a scaling line for both environments and
# OUT/scaling.png).
# Expected time on one H200 (SET=gap), from the 2026-11-30 runs (a line without XLA: about 40 s,
# a child process per configuration included): 2.21 about 2 minutes for its three lines without
# XLA, then XLA at batch 32: its compile (unknown; stopped at BOUND) plus about 40 s; then either
# the cached rerun and batch 64 (best case 4 minutes in all for 2.21, worst about 10 with BOUND
# 180) or the run without autotuning (worst about 7 minutes in all). 2.13: five lines, about 4
# minutes, plus up to 2 minutes once for the driver's JIT of its PTX on a cold cache (the script
# raises CUDA_CACHE_MAXSIZE so every later process finds it).
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set /{/^#/p}' "$0" >&2; exit 2; }
out=$1 old=${2:-tf2.13-pip} new=${3:-tf2.21-pip}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$out"
read -r -a provision <<<"${PROVISION:-python3 -m provision}"
export PYTHONPATH="$top${PYTHONPATH:+:$PYTHONPATH}"
common=(--model resnet50 --image-size 224 --gpus 1 --steps "${STEPS:-20}" --warmup "${WARMUP:-5}"
	--max-seconds "${BOUND:-180}" --gpu-memory "${GPU_MEMORY:-growth}")
read -r -a extra <<<"${BENCH_ARGS:-}" # later options win: tests shrink the model with these
overridden() { # OPTION-VALUE PAIRS -- ARGS...: the pairs whose option ARGS do not give again
	local pairs=() given i
	while [ "$1" != -- ]; do pairs+=("$1"); shift; done
	shift
	given=" $* "
	for ((i = 0; i < ${#pairs[@]}; i += 2)); do
		case $given in *" ${pairs[i]} "*) ;; *) printf '%s\n' "${pairs[i]}" "${pairs[i + 1]}" ;; esac
	done
}
# provision refuses an option given twice: what BENCH_ARGS (or a line) gives replaces the default
mapfile -t common < <(overridden "${common[@]}" -- "${extra[@]}")
common+=("${extra[@]}")
fp3=float32,mixed_float16,mixed_bfloat16
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296} # the PTX JIT cache of TF 2.13 on Hopper
xla_cache=$out/xla-cache # 2.21's only: 2.13 compiles in under a minute
autotune="XLA_FLAGS=--xla_gpu_per_fusion_autotune_cache_dir=$out/autotune-cache" # XLA of 2.16+

# id | who (both: OLD_ENV and NEW_ENV; new or old: that one) | condition (if:ID / unless:ID: run
# only when line ID of the same environment gave a run / did not) | VAR=value ... | options.
# The lines without XLA come first: XLA's first compile of ResNet50 is the one unknown cost.
if [ "${SET:-gap}" = findings ]; then
	matrix=(
		"base|both|||--precision $fp3"                                 # the table, with bf16
		"b256|both|||--batch-per-replica 256 --precision float32,mixed_float16" # batch, mixed
		"nojit-1dev|new|||--no-jit --strategy default --precision float32"      # MirroredStrategy
		"spe10|new|||--steps-per-execution 10 --warmup 10 --precision float32"  # dispatch
		"nchw|new|||--data-format channels_first --precision float32,mixed_float16" # layout
		"custom|new|||--loop custom --precision float32"               # model.fit's train step
		"tensor|new|||--data synthetic-tensor --precision float32"     # the input pipeline
		"xla|both|||--jit --strategy default --precision $fp3"         # XLA, with mixed precision
		"auto-1dev|new|||--strategy default --precision float32"       # Keras 3's default, 1 GPU
		"xla-mirrored|new|||--jit --precision float32"                 # XLA under MirroredStrategy
	)
else
	xla32="--jit --strategy default --batch-per-replica 32 --xla-cache $xla_cache"
	xla64="--jit --strategy default --batch-per-replica 64 --xla-cache $xla_cache"
	matrix=(
		"base|both|||--precision float32"                    # each release's default, today
		"bn-fused|new|||--batchnorm fused --precision float32"      # Keras 3 with cuDNN's kernel
		"bn-none|both|||--batchnorm none --precision float32"       # what BatchNormalization costs
		"bn-unfused|old|||--batchnorm unfused --precision float32"  # Keras 2 without its kernel
		"opt-nojit|old|||--no-optimizer-jit --precision float32"    # Keras 2's XLA update, off
		"xla32|old|||--jit --strategy default --batch-per-replica 32 --precision float32,mixed_float16"
		"xla32|new||$autotune|$xla32 --precision float32"           # does 2.21's compile finish?
		"xla32-cached|new|if:xla32|$autotune|$xla32 --precision float32" # the cache's worth
		"xla-mixed|new|if:xla32|$autotune|$xla32 --precision mixed_float16" # 2.13's best setting
		"xla64|new|if:xla32|$autotune|$xla64 --precision float32"   # a larger batch, if it compiles
		"xla32-noautotune|new|unless:xla32|XLA_FLAGS=--xla_gpu_autotune_level=0|$xla32 --precision float32"
		"profile|both|||--precision float32 --profile PROFILE_DIR" # where the time goes (op types)
	)
fi
if [ -n "${SCALING:-}" ]; then
	matrix+=("scaling|both|||--gpus $SCALING --precision float32,mixed_float16")
fi

label() { # what a report file is named after: the environment's name, or its prefix's folder
	case $1 in */*) basename "$(dirname "$(dirname "$1")")" ;; *) printf '%s\n' "$1" ;; esac
}
target() { case $1 in */*) printf '%s\n' --python "$1" ;; *) printf '%s\n' "$1" ;; esac; }

ran() { # env id: the line gave a report with a run
	[ -s "$out/$(label "$1")--$2.json" ]
}

run() { # env id VAR=value... -- options...
	local env=$1 id=$2 name file started rc vars=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
	shift
	name="$(label "$env")--$id"
	file=$out/$name.json
	if [ -s "$file" ]; then echo "== $name: done before"; return 0; fi
	if [ -f "$out/$name.failed" ] && [ -z "${RETRY:-}" ]; then
		echo "== $name: failed before (RETRY=1 runs it again): $(tail -n 1 "$out/$name.failed")"
		return 0
	fi
	local where
	mapfile -t where < <(target "$env")
	set -- "${@//PROFILE_DIR/$out/profile-$(label "$env")}" # a trace folder per release
	local line_common
	mapfile -t line_common < <(overridden "${common[@]}" -- "$@")
	echo "== $name: ${vars[*]} provision bench ${where[*]} ${line_common[*]} $*"
	started=$(date +%s)
	env "${vars[@]}" timeout -k 20 "${TIMEOUT:-420}" "${provision[@]}" bench "${where[@]}" \
		"${line_common[@]}" "$@" --json >"$out/$name.tmp" 2>"$out/$name.log"
	rc=$?
	if python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["runs"]' "$out/$name.tmp" 2>/dev/null; then
		mv "$out/$name.tmp" "$file"
		rm -f "$out/$name.failed"
		summary "$file" "$(($(date +%s) - started))"
	else
		if [ -s "$out/$name.tmp" ]; then # no run, but a report: "compile over N s" is a finding
			mv "$out/$name.tmp" "$out/$name.norun.json"
		else
			rm -f "$out/$name.tmp"
		fi
		{
			echo "exit $rc after $(($(date +%s) - started)) s$([ $rc -eq 124 ] && echo ": timed out (TIMEOUT=${TIMEOUT:-420})")"
			[ -s "$out/$name.norun.json" ] && summary "$out/$name.norun.json" "$(($(date +%s) - started))"
			grep -v -e 'I0000' -e 'W0000' "$out/$name.log" | tail -n 5
		} >"$out/$name.failed"
		echo "   failed: $(head -n 2 "$out/$name.failed" | tr '\n' ' ')"
	fi
}

summary() { # report seconds: one line per configuration, compile time included
	python3 - "$1" "$2" <<-'EOF'
		import json, sys
		r = json.load(open(sys.argv[1]))
		rows = [f"{x['precision']} {x['images_per_s']:,.0f} img/s (first step {x.get('first_step_s')} s) acc {x['accuracy']:.2f}"
		        for x in r["runs"]]
		rows += [f"{x['precision']} failed: {x['error'][:80]}" for x in r["failed"]]
		rows += [f"{x['precision']} skipped: {x['reason'][:80]}" for x in r["skipped"]]
		print(f"   {sys.argv[2]} s: " + "; ".join(rows))
	EOF
}

start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
	sed 's/^/   GPU: /' || echo "   no nvidia-smi"
for line in "${matrix[@]}"; do
	IFS='|' read -r id who cond vars opts <<<"$line"
	if [ -n "${ONLY:-}" ] && ! [[ $id =~ $ONLY ]]; then continue; fi
	read -r -a args <<<"$opts"
	read -r -a assign <<<"$vars"
	for env in "$old" "$new"; do
		[ "$env" = - ] && continue
		if [ -n "${BUDGET:-}" ] && [ $(($(date +%s) - start)) -ge "$BUDGET" ]; then
			echo "== $(label "$env")--$id: not run (BUDGET=$BUDGET s spent)"
			continue
		fi
		mine=new
		[ "$env" = "$old" ] && mine=old
		[ "$who" = both ] || [ "$who" = "$mine" ] || [ -n "${ALL:-}" ] || continue
		case $cond in
		if:*) ran "$env" "${cond#if:}" || { echo "== $(label "$env")--$id: not run (${cond#if:} gave no run)"; continue; } ;;
		unless:*) ran "$env" "${cond#unless:}" && continue ;;
		esac
		run "$env" "$id" "${assign[@]}" -- "${args[@]}"
	done
done
echo "== matrix took $(($(date +%s) - start)) s"

reports=()
for line in "${matrix[@]}"; do
	id=${line%%|*}
	for env in "$old" "$new"; do
		[ "$env" = - ] && continue
		f="$out/$(label "$env")--$id"
		[[ " ${reports[*]} " == *" $f."* ]] && continue # an id of two lines (one per release)
		if [ -s "$f.json" ]; then
			reports+=(--report "$f.json")
		elif [ -s "$f.norun.json" ]; then # what stopped it ("compile over N s") is in the table
			reports+=(--report "$f.norun.json")
		fi
	done
done
[ ${#reports[@]} -gt 0 ] || { echo "no report to show" >&2; exit 1; }
"${provision[@]}" bench "${reports[@]}" | tee "$out/findings.txt"
"${provision[@]}" bench "${reports[@]}" --markdown >"$out/findings.md"
echo "== $out/findings.txt, $out/findings.md"
two=()
for env in "$old" "$new"; do
	[ "$env" = - ] && continue
	f="$out/$(label "$env")--base.json"
	if [ -s "$f" ]; then two+=(--report "$f"); fi
done
if [ ${#two[@]} -gt 0 ]; then
	"${provision[@]}" bench "${two[@]}" --plot "$out/two-releases.png" >"$out/two-releases.txt" &&
		echo "== $out/two-releases.txt, $out/two-releases.png" ||
		echo "no two-release plot (it needs matplotlib: provision[bench])"
fi
if [ -n "${SCALING:-}" ]; then
	scaling=()
	for env in "$old" "$new"; do
		[ "$env" = - ] && continue
		f="$out/$(label "$env")--scaling.json"
		if [ -s "$f" ]; then scaling+=(--report "$f"); fi
	done
	if [ ${#scaling[@]} -gt 0 ]; then
		"${provision[@]}" bench "${scaling[@]}" --plot "$out/scaling.png" >/dev/null &&
			echo "== $out/scaling.png" || echo "no plot (it needs matplotlib: provision[bench])"
	fi
fi
