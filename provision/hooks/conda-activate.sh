# shellcheck shell=sh
# provision: conda sources this on `conda activate` (etc/conda/activate.d/provision.sh).
_provision_root=$CONDA_PREFIX
# shellcheck disable=SC1091
. "$CONDA_PREFIX/etc/provision/activate.sh"
