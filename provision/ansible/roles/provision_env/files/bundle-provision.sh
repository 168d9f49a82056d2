#!/bin/sh
# Installs provision from an offline bundle into HOME/venv, and nothing else: the bundle's own
# bootstrap.py with --provision-only (pip, no index; once per provision wheel, so a second run with
# the same bundle changes nothing). The environment is built later, after the doctor has judged
# the host, by `provision install --from-bundle`, which checks the whole bundle first.
# With --trust FILE [--revoked FILE] after HOME, bootstrap.py checks the bundle's signature first.
# usage: bundle-provision.sh PYTHON BUNDLE|FIRST_PART HOME [--trust FILE [--revoked FILE]]
set -eu
python=$1
bundle=$2
home=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# bootstrap.py is the tar's second member; a part starts with a 512-byte header of its own.
if [ "$(head -c 23 "$bundle")" = "provision-bundle-part 1" ]; then
    tail -c +513 "$bundle" | tar -xO --occurrence=1 provision-bundle/bootstrap.py >"$tmp/bootstrap.py"
else
    tar -xOf "$bundle" --occurrence=1 provision-bundle/bootstrap.py >"$tmp/bootstrap.py"
fi
PROVISION_HOME=$home "$python" "$tmp/bootstrap.py" "$bundle" --provision-only "$@"
