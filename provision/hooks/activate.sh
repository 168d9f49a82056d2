# shellcheck shell=sh
# provision: activation of an environment built by `provision install` (shipped once, in provision).
# Sourced by the venv's bin/activate or conda's activate.d with _provision_root set to the prefix.
# POSIX sh: conda sources activate.d scripts in the user's shell (sh, bash, zsh), so no arrays, no
# bash-only syntax and no unmatched globs. Each variable changed is saved once, as "set:<value>" or
# "unset:", in _PROVISION_SAVED_<VAR>; deactivate.sh puts back exactly that.
if [ -z "${_provision_root:-}" ] || [ ! -f "$_provision_root/etc/provision/runtime.env" ]; then
    echo "provision activate.sh: no etc/provision/runtime.env under '${_provision_root:-}'" >&2
    unset _provision_root
    return 1
fi
PROVISION_LIBRARY_DIRS='' PROVISION_XLA_DIR='' PROVISION_GPUS='' PROVISION_GPU_MEMORY='' PROVISION_CUDA_HOME=''
# shellcheck disable=SC1091
. "$_provision_root/etc/provision/runtime.env"

_provision_save() {
    eval "_provision_had=\${_PROVISION_SAVED_$1+x}"
    if [ -z "$_provision_had" ]; then
        eval "_provision_isset=\${$1+x}"
        if [ -n "$_provision_isset" ]; then
            eval "_PROVISION_SAVED_$1=\"set:\${$1}\""
        else
            eval "_PROVISION_SAVED_$1=unset:"
        fi
        export "_PROVISION_SAVED_$1"
    fi
}
# The value a variable had before the first activation ("" when it was unset).
_provision_original() {
    eval "_provision_old=\${_PROVISION_SAVED_$1-}"
    case "$_provision_old" in
        set:*) _provision_old=${_provision_old#set:} ;;
        *) _provision_old= ;;
    esac
}

# Library folders: DIR, or DIR/*/lib for every lib folder one level below DIR (NVIDIA's wheels).
_provision_libs=
_provision_rest="$PROVISION_LIBRARY_DIRS"
while [ -n "$_provision_rest" ]; do
    _provision_one=${_provision_rest%%:*}
    if [ "$_provision_one" = "$_provision_rest" ]; then _provision_rest=; else _provision_rest=${_provision_rest#*:}; fi
    case "$_provision_one" in
        /*) ;;
        *) _provision_one="$_provision_root/$_provision_one" ;;
    esac
    case "$_provision_one" in
        */\*/lib)
            _provision_found=$(find "${_provision_one%/\*/lib}" -mindepth 2 -maxdepth 2 -type d -name lib 2>/dev/null | LC_ALL=C sort | tr '\n' ':')
            _provision_found=${_provision_found%:} ;;
        *) _provision_found=$_provision_one ;;
    esac
    if [ -n "$_provision_found" ]; then
        _provision_libs="${_provision_libs:+$_provision_libs:}$_provision_found"
    fi
done
if [ -n "$PROVISION_CUDA_HOME" ]; then
    _provision_libs="${_provision_libs:+$_provision_libs:}$PROVISION_CUDA_HOME/lib64"
fi

_provision_save LD_LIBRARY_PATH
_provision_original LD_LIBRARY_PATH
if [ -n "$_provision_libs" ]; then
    # Never leave an empty entry: it would mean "the current directory" to the loader.
    LD_LIBRARY_PATH="$_provision_libs${_provision_old:+:$_provision_old}"
    export LD_LIBRARY_PATH
fi

# XLA looks for bin/ptxas and nvvm/libdevice/libdevice.10.bc under this folder.
_provision_xla=
case "$PROVISION_XLA_DIR" in
    "") _provision_xla=$PROVISION_CUDA_HOME ;;
    .) _provision_xla=$_provision_root ;;
    /*) _provision_xla=$PROVISION_XLA_DIR ;;
    *) _provision_xla="$_provision_root/$PROVISION_XLA_DIR" ;;
esac
if [ -n "$_provision_xla" ]; then
    _provision_save XLA_FLAGS
    _provision_original XLA_FLAGS
    case "$_provision_old" in
        *--xla_gpu_cuda_data_dir*) ;;  # the user's own choice wins, as with no activation
        *)
            XLA_FLAGS="${_provision_old:+$_provision_old }--xla_gpu_cuda_data_dir=$_provision_xla"
            export XLA_FLAGS ;;
    esac
fi
if [ -n "$PROVISION_GPUS" ]; then
    _provision_save CUDA_VISIBLE_DEVICES
    CUDA_VISIBLE_DEVICES=$PROVISION_GPUS
    export CUDA_VISIBLE_DEVICES
fi
case "$PROVISION_GPU_MEMORY" in
    "") ;;
    growth)
        # TensorFlow allocates GPU memory as it needs it instead of taking it all at start.
        _provision_save TF_FORCE_GPU_ALLOW_GROWTH
        TF_FORCE_GPU_ALLOW_GROWTH=true
        export TF_FORCE_GPU_ALLOW_GROWTH ;;
    *)
        # TensorFlow has no variable for a hard limit: provision_env_hook applies this one when
        # TensorFlow is imported.
        _provision_save PROVISION_GPU_MEMORY_LIMIT_MIB
        PROVISION_GPU_MEMORY_LIMIT_MIB=$PROVISION_GPU_MEMORY
        export PROVISION_GPU_MEMORY_LIMIT_MIB ;;
esac
unset _provision_root _provision_libs _provision_rest _provision_one _provision_found \
    _provision_xla _provision_old _provision_had _provision_isset \
    PROVISION_ENV PROVISION_LIBRARY_DIRS PROVISION_XLA_DIR PROVISION_GPUS PROVISION_GPU_MEMORY \
    PROVISION_CUDA_HOME
unset -f _provision_save _provision_original
