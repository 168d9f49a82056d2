#!/usr/bin/env bash
# On the air-gapped GPU machine: provision itself in a venv from carried wheels, then environments
# built by `provision install` from their locks with no index (the lock's wheels carried as a tar
# in parts). Used before device_bench.sh.
#
#   tests/gpu/device_setup.sh DEPS_DIR ENVS_DIR NAME=PARTS_DIR [NAME=PARTS_DIR...]
#
# DEPS_DIR: wheels of provision's dependencies for the machine's python3. Each PARTS_DIR holds
# part.NN files of a tar of NAME's locked wheels. A Python the release needs and the machine lacks
# can be carried as a tar of its pyenv tree: PYTHON_TARS="a.tar.xz b.tar.xz" (unpacked at /).
# Work folder: PROVISION_DEVICE_WORK (default /root/provision-work); prints what to export after.
set -euo pipefail
deps=$1 envs=$(cd "$2" && pwd)
shift 2
work=${PROVISION_DEVICE_WORK:-/root/provision-work}
mkdir -p "$work"
for t in ${PYTHON_TARS:-}; do tar -xJf "$t" -C /; done
[ -x "$work/pv/bin/python" ] || {
	python3 -m venv "$work/pv"
	"$work/pv/bin/pip" install -q --no-index --find-links "$deps" click jinja2 packaging pyyaml \
		nvidia-ml-py platformdirs jupyter_client
}
export PYTHONPATH=$PWD PROVISION_HOME=$work/home
for pair in "$@"; do
	name=${pair%%=*} parts=${pair#*=}
	wheels=$work/wheels-$name
	if [ ! -f "$wheels.done" ]; then
		rm -rf "$wheels" && mkdir -p "$wheels"
		cat "$parts"/part.* | tar -x -C "$wheels"
		touch "$wheels.done"
	fi
	start=$(date +%s)
	PIP_NO_INDEX=1 PIP_FIND_LINKS=$wheels "$work/pv/bin/python" -m provision install "$name" \
		--out "$envs" --installer pip
	echo "== $name installed in $(($(date +%s) - start)) s"
done
echo "export PYTHONPATH=$PWD PROVISION_HOME=$PROVISION_HOME PROVISION='$work/pv/bin/python -m provision'"
