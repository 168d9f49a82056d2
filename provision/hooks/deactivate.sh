# shellcheck shell=sh
# provision: undoes activate.sh. Every variable it changed goes back to its value before
# activation, unset if it was unset (shipped once, in provision).
_provision_saved=
for _provision_var in LD_LIBRARY_PATH XLA_FLAGS CUDA_VISIBLE_DEVICES TF_FORCE_GPU_ALLOW_GROWTH \
    PROVISION_GPU_MEMORY_LIMIT_MIB; do
    eval "_provision_saved=\${_PROVISION_SAVED_$_provision_var-}"
    case "$_provision_saved" in
        set:*) eval "$_provision_var=\${_provision_saved#set:}"; export "${_provision_var?}" ;;
        unset:) unset "$_provision_var" ;;
    esac
    unset "_PROVISION_SAVED_$_provision_var"
done
unset _provision_var _provision_saved
