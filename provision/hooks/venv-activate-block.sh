
# >>> provision hooks >>>
# shellcheck shell=sh
# Added by `provision install`: the environment's set-up (library path, XLA flags, GPU policy).
# POSIX sh; deactivate (above) undoes it through the line provision added at its top.
_PROVISION_HOOKED="$VIRTUAL_ENV"
if [ -f "$VIRTUAL_ENV/etc/provision/activate.sh" ]; then
    _provision_root="$VIRTUAL_ENV"
    # shellcheck disable=SC1091
    . "$VIRTUAL_ENV/etc/provision/activate.sh"
fi
# <<< provision hooks <<<
