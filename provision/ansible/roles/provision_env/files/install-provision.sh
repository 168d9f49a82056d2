#!/bin/sh
# Installs provision's wheel into a venv of its own on this host, once per wheel: a second run
# with the same wheel changes nothing. Dependencies come from the host's own pip configuration.
# usage: install-provision.sh PYTHON WHEEL VENV
set -eu
python=$1
wheel=$2
venv=$3
want=$(sha256sum "$wheel" | cut -d ' ' -f 1)
if [ -f "$venv/.provision-wheel" ] && [ "$(cat "$venv/.provision-wheel")" = "$want" ] \
    && [ -x "$venv/bin/provision" ]; then
    echo "provision: unchanged"
    exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-compile \
    "$wheel"
echo "$want" >"$venv/.provision-wheel"
echo "provision: installed"
