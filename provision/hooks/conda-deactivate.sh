# shellcheck shell=sh
# provision: conda sources this on `conda deactivate` (etc/conda/deactivate.d/provision.sh).
# shellcheck disable=SC1091
. "$CONDA_PREFIX/etc/provision/deactivate.sh"
