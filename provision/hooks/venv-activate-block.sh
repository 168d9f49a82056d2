
# >>> provision hooks >>>
# Added by `provision install`: the environment's set-up (library path, XLA flags, GPU policy).
# bin/activate redefines deactivate before calling it, so hooks of an environment that is still
# active (this one again, or another provision venv) are undone here, from the path recorded below.
if [ -n "${_PROVISION_HOOKED:-}" ] && [ -f "$_PROVISION_HOOKED/etc/provision/deactivate.sh" ]; then
    . "$_PROVISION_HOOKED/etc/provision/deactivate.sh"
fi
_PROVISION_HOOKED="$VIRTUAL_ENV"
if [ -f "$VIRTUAL_ENV/etc/provision/activate.sh" ]; then
    _provision_root="$VIRTUAL_ENV"
    . "$VIRTUAL_ENV/etc/provision/activate.sh"
fi
eval "_provision_$(declare -f deactivate)"
deactivate () {
    if [ -n "${_PROVISION_HOOKED:-}" ] \
        && [ -f "$_PROVISION_HOOKED/etc/provision/deactivate.sh" ]; then
        . "$_PROVISION_HOOKED/etc/provision/deactivate.sh"
    fi
    unset _PROVISION_HOOKED
    _provision_deactivate "$@"
    if [ "${1:-}" != "nondestructive" ]; then
        unset -f _provision_deactivate
    fi
}
# <<< provision hooks <<<
