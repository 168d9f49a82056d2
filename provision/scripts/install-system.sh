#!/usr/bin/env bash
# provision's install script for the system path, one for every environment: NVIDIA's CUDA runfile
# (toolkit only, never the driver), NVIDIA's cuDNN archive unpacked into the toolkit tree, loader
# (ld.so.conf.d) and login-shell (profile.d) configuration, and a venv with TensorFlow. What to
# install (versions, file names, URLs, checksums) comes from the environment's system.env, given
# with --vars and read as data (KEY=value lines, each value checked), never run as shell code. Every
# step first checks whether it is already done, so a second run changes nothing, and a run that was
# interrupted is completed by running the script again. `--help` lists the options.
set -euo pipefail

readonly SCRIPT_NAME=install-system.sh

# --- output ----------------------------------------------------------------------------------------
say() { printf '%s\n' "$*"; }
step() { printf '[%s] %s\n' "$1" "$2"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}
usage_error() {
	printf 'error: %s (see --help)\n' "$*" >&2
	exit 2
}

# --- the environment's variables (--vars FILE) ------------------------------------------------------
# What provision's render writes into system.env, from its matrix. Each value is one shell word as
# Python's shlex.quote writes it (bare, or in single quotes), so that sourcing the file would give
# the same values; this script does not source it: it parses each line and matches each value
# against its pattern (bash ERE, the whole value), so a vars file cannot run code.
readonly VARS_SCHEMA_READ=1
_version='[0-9]+(\.[0-9]+)+'
_specifier='(===|==|!=|<=|>=|~=|<|>)[A-Za-z0-9.*+!_-]+'
_requirement="[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?($_specifier(,$_specifier)*)?"
_file_name='[A-Za-z0-9][A-Za-z0-9._+-]*'
_url='https?://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%+-]*)+'
declare -rA VAR_PATTERNS=(
	[VARS_SCHEMA]='[0-9]+'
	[ENV_NAME]='[A-Za-z0-9][A-Za-z0-9._-]{0,63}'
	[TF_PIN]='[0-9]+(\.[0-9]+)+((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?'
	[PYTHON_VERSION]='[0-9]+\.[0-9]+'
	[PYTHON_SUPPORTED]='[0-9]+\.[0-9]+( [0-9]+\.[0-9]+)*'
	[PIP_REQUIREMENTS]="$_requirement( $_requirement)*"
	[CUDA_VERSION]='[0-9]+\.[0-9]+'
	[CUDA_FULL]='[0-9]+\.[0-9]+\.[0-9]+'
	[CUDA_MAJOR]='[0-9]+'
	[DRIVER_MIN]="$_version"
	[DRIVER_COMPAT_MIN]="$_version"
	[RUNFILE_NAME]="$_file_name"
	[RUNFILE_URL]="$_url"
	[RUNFILE_SHA256]='([0-9a-fA-F]{64})?'
	[RUNFILE_MD5]='([0-9a-fA-F]{32})?'
	[CUDNN_FULL]='[0-9]+(\.[0-9]+){2,3}'
	[CUDNN_MAJOR]='[0-9]+'
	[CUDNN_ARCHIVE_NAME]="$_file_name"
	[CUDNN_URL]="$_url"
	[CUDNN_SHA256]='([0-9a-fA-F]{64})?'
)
# What a value that does not match its pattern should have been (for the error message).
declare -rA VAR_WANTED=(
	[VARS_SCHEMA]="a number"
	[ENV_NAME]="an environment name: letters, digits, '.', '_', '-'"
	[TF_PIN]="a version"
	[PYTHON_VERSION]="major.minor"
	[PYTHON_SUPPORTED]="major.minor versions separated by single spaces"
	[PIP_REQUIREMENTS]="pip requirements (name[extras]==version) separated by single spaces"
	[CUDA_VERSION]="major.minor"
	[CUDA_FULL]="major.minor.patch"
	[CUDA_MAJOR]="a number"
	[DRIVER_MIN]="numbers separated by dots"
	[DRIVER_COMPAT_MIN]="numbers separated by dots"
	[RUNFILE_NAME]="a file name"
	[RUNFILE_URL]="an http(s) URL without query"
	[RUNFILE_SHA256]="64 hex digits, or nothing"
	[RUNFILE_MD5]="32 hex digits, or nothing"
	[CUDNN_FULL]="three or four numbers separated by dots"
	[CUDNN_MAJOR]="a number"
	[CUDNN_ARCHIVE_NAME]="a file name"
	[CUDNN_URL]="an http(s) URL without query"
	[CUDNN_SHA256]="64 hex digits, or nothing"
)
unset _version _specifier _requirement _file_name _url

vars_error() {
	# vars_error WHERE MESSAGE: the vars file is unusable; one line, exit 2, nothing was done.
	local text="$1: $2"
	printf 'error: %s\n' "${text//[![:print:]]/?}" >&2
	exit 2
}

WORD=""
shell_word() {
	# shell_word TEXT: sets WORD to the value of TEXT, one word as shlex.quote writes it (runs of
	# [A-Za-z0-9_@%+=:,./-], '...' and "'"), or returns 1. Nothing is expanded.
	local rest=$1 bare='^[A-Za-z0-9_@%+=:,./-]+' single="^'([^']*)'"
	WORD=""
	[[ -n $rest ]] || return 1
	while [[ -n $rest ]]; do
		if [[ $rest =~ $bare ]]; then
			WORD+=${BASH_REMATCH[0]}
			rest=${rest:${#BASH_REMATCH[0]}}
		elif [[ $rest =~ $single ]]; then
			WORD+=${BASH_REMATCH[1]}
			rest=${rest:${#BASH_REMATCH[0]}}
		elif [[ $rest == \"\'\"* ]]; then
			WORD+="'"
			rest=${rest:3}
		else
			return 1
		fi
	done
}

VARS_LOADED=0
load_vars() {
	# load_vars FILE: every variable of VAR_PATTERNS, from FILE, each checked; then read-only.
	local file=$1 line key n=0 value v ok
	local blank='^[[:space:]]*(#.*)?$' assignment='^([A-Za-z_][A-Za-z0-9_]*)=(.*)$'
	local LC_ALL=C # the patterns' ranges are ASCII ranges
	local -A seen=()
	local -a missing=()
	for key in "${!VAR_PATTERNS[@]}"; do unset -v "$key"; done # nothing from the environment
	[[ -f $file && -r $file ]] || vars_error "--vars $file" "no such readable file"
	while IFS= read -r line || [[ -n $line ]]; do
		n=$((n + 1))
		[[ $line =~ $blank ]] && continue
		[[ $line =~ $assignment ]] ||
			vars_error "$file:$n" "not a KEY=value line: $line"
		key=${BASH_REMATCH[1]} # an identifier: safe as a subscript and for printf -v
		value=${BASH_REMATCH[2]}
		[[ -n ${VAR_PATTERNS[$key]+set} ]] || vars_error "$file:$n" "unknown variable $key"
		[[ -z ${seen[$key]:-} ]] || vars_error "$file:$n" "$key is set twice (also on line ${seen[$key]})"
		seen[$key]=$n
		if [[ -z $value ]]; then
			WORD=""
		elif ! shell_word "$value"; then
			vars_error "$file:$n" "$key=$value is not one shell word as provision writes it (bare, or in single quotes)"
		fi
		[[ $WORD =~ ^(${VAR_PATTERNS[$key]})$ ]] ||
			vars_error "$file:$n" "$key=$value is malformed: want ${VAR_WANTED[$key]}"
		printf -v "$key" '%s' "$WORD"
	done <"$file"
	for key in "${!VAR_PATTERNS[@]}"; do
		[[ -n ${seen[$key]:-} ]] || missing+=("$key")
	done
	if ((${#missing[@]})); then
		mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort)
		v=$(printf ', %s' "${missing[@]}")
		vars_error "$file" "lacks ${v#, }; re-render it (provision render)"
	fi
	# Values that must agree with each other (render writes them from one matrix row).
	if [[ $VARS_SCHEMA != "$VARS_SCHEMA_READ" ]]; then
		vars_error "$file" "VARS_SCHEMA is $VARS_SCHEMA, but this $SCRIPT_NAME reads $VARS_SCHEMA_READ; re-render it with this provision"
	fi
	[[ $CUDA_VERSION == "$CUDA_MAJOR".* ]] || vars_error "$file" "CUDA_VERSION $CUDA_VERSION is not of CUDA_MAJOR $CUDA_MAJOR"
	[[ $CUDA_FULL == "$CUDA_VERSION".* ]] || vars_error "$file" "CUDA_FULL $CUDA_FULL is not of CUDA_VERSION $CUDA_VERSION"
	[[ $CUDNN_FULL == "$CUDNN_MAJOR".* ]] || vars_error "$file" "CUDNN_FULL $CUDNN_FULL is not of CUDNN_MAJOR $CUDNN_MAJOR"
	[[ $RUNFILE_URL == */"$RUNFILE_NAME" ]] || vars_error "$file" "RUNFILE_URL does not end in /$RUNFILE_NAME"
	[[ $CUDNN_URL == */"$CUDNN_ARCHIVE_NAME" ]] || vars_error "$file" "CUDNN_URL does not end in /$CUDNN_ARCHIVE_NAME"
	ok=0
	for v in $PYTHON_SUPPORTED; do
		if [[ $v == "$PYTHON_VERSION" ]]; then ok=1; fi
	done
	((ok)) || vars_error "$file" "PYTHON_VERSION $PYTHON_VERSION is not among PYTHON_SUPPORTED ($PYTHON_SUPPORTED)"
	VARS_LOADED=1
}

usage() {
	local cuda=X.Y name=NAME python="python<PYTHON_VERSION>" tf="<TF_PIN>"
	if ((VARS_LOADED)); then
		cuda=$CUDA_VERSION name=$ENV_NAME python=python$PYTHON_VERSION tf=$TF_PIN
	fi
	cat <<EOF
Usage: $SCRIPT_NAME --vars FILE [options]

Installs one environment of provision's system path: the CUDA toolkit from NVIDIA's runfile (the
toolkit only: the NVIDIA driver is never installed or touched), cuDNN into the toolkit tree,
ld.so.conf.d and profile.d entries, and a venv with TensorFlow. Checksums of both downloads are
verified before anything runs. Every step is skipped when it is already done; run the script again
to complete an interrupted install.

What to install comes from FILE, the environment's system.env (envs/NAME/system.env, written by
provision render): KEY=value lines, read as data and never run. A file that lacks a variable or
holds a malformed value is refused (exit 2) before anything else happens. When requirements.lock
is next to FILE, the venv is installed from it with --require-hashes; otherwise from the
requirements FILE names.

Options:
  --vars FILE           the environment's system.env (required; a file, not its directory)
  --prefix DIR          install without root under DIR: toolkit in DIR/cuda-$cuda, loader and
                        shell configuration in DIR/etc/ld.so.conf.d and DIR/etc/profile.d, venv in
                        DIR/venvs/$name, downloads in DIR/downloads. Default: / (needs root:
                        /usr/local/cuda-$cuda, /etc, /opt/provision/venvs, /var/cache/provision)
  --runfile FILE        a local copy of NVIDIA's CUDA runfile, instead of downloading it
  --cudnn-archive FILE  a local copy of NVIDIA's cuDNN archive, instead of downloading it
  --download-dir DIR    where downloads go (resumable; partial files end in .part)
  --venv DIR            where the venv goes
  --python EXE          the interpreter the venv is made from (default: $python)
  --skip-venv           install CUDA and cuDNN only
  --skip-driver-check   do not require an NVIDIA driver (building an image on a machine
                        without a GPU); the driver is still never installed
  --allow-unverified    accept a download whose checksum the matrix does not record
  --dry-run             print what would be done, change nothing
  -h, --help            this text (with --vars: and what that environment installs)

Environment (for tests): PROVISION_VENV_PACKAGE=NAME==VERSION replaces the package the venv is
checked for (default tensorflow==$tf); without a lock it is also what gets installed.
EOF
	if ((!VARS_LOADED)); then
		return 0
	fi
	cat <<EOF

$ENV_NAME ($VARS_FILE):
  TensorFlow $TF_PIN for Python $PYTHON_VERSION (supported: ${PYTHON_SUPPORTED[*]}); without a
  lock the venv gets: ${PIP_REQUIREMENTS[*]}
  CUDA $CUDA_FULL: $RUNFILE_NAME
  cuDNN $CUDNN_FULL: $CUDNN_ARCHIVE_NAME
  The driver must be at least $DRIVER_MIN (CUDA $CUDA_VERSION's own minimum); from
  $DRIVER_COMPAT_MIN on it runs through CUDA's minor-version compatibility (with a warning).
EOF
}

# --- options ---------------------------------------------------------------------------------------
VARS_FILE=""
PREFIX=/
RUNFILE=""
CUDNN_ARCHIVE=""
DOWNLOAD_DIR=""
VENV_DIR=""
PYTHON_EXE=""
SKIP_VENV=0
SKIP_DRIVER_CHECK=0
ALLOW_UNVERIFIED=0
DRY_RUN=0
SHOW_HELP=0

value_of() {
	# $1 is the option, $2 its value
	if (($# < 2)) || [[ -z $2 ]]; then
		usage_error "$1 needs a value"
	fi
	printf '%s' "$2"
}

while (($# > 0)); do
	if [[ $1 == --*=* ]]; then
		set -- "${1%%=*}" "${1#*=}" "${@:2}"
	fi
	case $1 in
	--vars)
		VARS_FILE=$(value_of "$@")
		shift 2
		;;
	--prefix)
		PREFIX=$(value_of "$@")
		shift 2
		;;
	--runfile)
		RUNFILE=$(value_of "$@")
		shift 2
		;;
	--cudnn-archive)
		CUDNN_ARCHIVE=$(value_of "$@")
		shift 2
		;;
	--download-dir)
		DOWNLOAD_DIR=$(value_of "$@")
		shift 2
		;;
	--venv)
		VENV_DIR=$(value_of "$@")
		shift 2
		;;
	--python)
		PYTHON_EXE=$(value_of "$@")
		shift 2
		;;
	--skip-venv)
		SKIP_VENV=1
		shift
		;;
	--skip-driver-check)
		SKIP_DRIVER_CHECK=1
		shift
		;;
	--allow-unverified)
		ALLOW_UNVERIFIED=1
		shift
		;;
	--dry-run)
		DRY_RUN=1
		shift
		;;
	-h | --help)
		SHOW_HELP=1
		shift
		;;
	*) usage_error "unknown option: $1" ;;
	esac
done

absolute() {
	case $1 in
	/*) printf '%s' "$1" ;;
	*) printf '%s/%s' "$PWD" "$1" ;;
	esac
}

if [[ -z $VARS_FILE ]]; then
	if ((SHOW_HELP)); then
		usage
		exit 0
	fi
	usage_error "--vars FILE is required: the environment's system.env (envs/NAME/system.env)"
fi
if [[ -d $VARS_FILE ]]; then
	usage_error "--vars wants the environment's variables file, not a directory: --vars ${VARS_FILE%/}/system.env"
fi
VARS_FILE=$(absolute "$VARS_FILE")
readonly VARS_FILE
load_vars "$VARS_FILE"
read -r -a PYTHON_SUPPORTED <<<"$PYTHON_SUPPORTED"
read -r -a PIP_REQUIREMENTS <<<"$PIP_REQUIREMENTS"
readonly VARS_SCHEMA ENV_NAME TF_PIN PYTHON_VERSION PYTHON_SUPPORTED PIP_REQUIREMENTS CUDA_VERSION \
	CUDA_FULL CUDA_MAJOR DRIVER_MIN DRIVER_COMPAT_MIN RUNFILE_NAME RUNFILE_URL RUNFILE_SHA256 RUNFILE_MD5 \
	CUDNN_FULL CUDNN_MAJOR CUDNN_ARCHIVE_NAME CUDNN_URL CUDNN_SHA256
if ((SHOW_HELP)); then
	usage
	exit 0
fi
# The lock belongs to the environment: it is next to its vars file.
readonly LOCK_FILE="${VARS_FILE%/*}/requirements.lock"

PREFIX=$(absolute "$PREFIX")
while [[ $PREFIX == */ && $PREFIX != / ]]; do PREFIX=${PREFIX%/}; done
# ld.so.conf, PATH and XLA_FLAGS cannot carry these characters.
unsafe='[[:space:]:"'"'"'\\]'
if [[ $PREFIX =~ $unsafe ]]; then
	usage_error "--prefix must not contain whitespace, ':', quotes or backslashes: $PREFIX"
fi
if [[ $PREFIX == / ]]; then
	SYSTEM_WIDE=1
	CUDA_HOME="/usr/local/cuda-$CUDA_VERSION"
	ETC_DIR=/etc
	: "${VENV_DIR:=/opt/provision/venvs/$ENV_NAME}"
	: "${DOWNLOAD_DIR:=/var/cache/provision}"
else
	SYSTEM_WIDE=0
	CUDA_HOME="$PREFIX/cuda-$CUDA_VERSION"
	ETC_DIR="$PREFIX/etc"
	: "${VENV_DIR:=$PREFIX/venvs/$ENV_NAME}"
	: "${DOWNLOAD_DIR:=$PREFIX/downloads}"
fi
VENV_DIR=$(absolute "$VENV_DIR")
DOWNLOAD_DIR=$(absolute "$DOWNLOAD_DIR")
readonly PREFIX SYSTEM_WIDE CUDA_HOME ETC_DIR VENV_DIR DOWNLOAD_DIR
readonly LIB_DIR="$CUDA_HOME/lib64"
readonly STATE_DIR="$CUDA_HOME/.provision"
readonly CONF_NAME="provision-cuda-$CUDA_VERSION"
readonly LD_CONF="$ETC_DIR/ld.so.conf.d/$CONF_NAME.conf"
readonly PROFILE="$ETC_DIR/profile.d/$CONF_NAME.sh"
readonly VENV_PACKAGE="${PROVISION_VENV_PACKAGE:-tensorflow==$TF_PIN}"
if [[ $VENV_PACKAGE != ?*==?* ]]; then
	usage_error "PROVISION_VENV_PACKAGE must look like name==version, not $VENV_PACKAGE"
fi

WORK_TMP=""
cleanup() {
	if [[ -n $WORK_TMP ]]; then rm -rf -- "$WORK_TMP"; fi
}
trap cleanup EXIT
work_tmp() {
	# Scratch space outside the prefix (the runfile unpacks several GB here): TMPDIR or /tmp.
	if [[ -z $WORK_TMP ]]; then
		WORK_TMP=$(mktemp -d "${TMPDIR:-/tmp}/provision-install.XXXXXX")
	fi
}

# --- small helpers ---------------------------------------------------------------------------------
version_ge() {
	# version_ge A B: whether A >= B, comparing dot-separated numbers, each as an integer.
	local -a a b
	local i n x y
	IFS=. read -r -a a <<<"$1"
	IFS=. read -r -a b <<<"$2"
	n=$((${#a[@]} > ${#b[@]} ? ${#a[@]} : ${#b[@]}))
	for ((i = 0; i < n; i++)); do
		x=$((10#${a[i]:-0}))
		y=$((10#${b[i]:-0}))
		if ((x != y)); then
			((x > y))
			return
		fi
	done
	return 0
}

sh_quote() {
	# Single-quote $1 for POSIX sh (profile.d is read by sh, not only bash).
	printf "'%s'" "${1//\'/\'\\\'\'}"
}

write_file() {
	# write_file PATH MODE: stdin to PATH, atomically (a temp file beside it, then rename).
	local dest=$1 mode=$2 tmp
	mkdir -p -- "$(dirname "$dest")"
	tmp=$(mktemp "$(dirname "$dest")/.$(basename "$dest").XXXXXX")
	cat >"$tmp"
	chmod "$mode" "$tmp"
	mv -f -- "$tmp" "$dest"
}

find_ldconfig() {
	local c
	for c in "$(command -v ldconfig || true)" /sbin/ldconfig /usr/sbin/ldconfig; do
		if [[ -n $c && -x $c ]]; then
			printf '%s' "$c"
			return 0
		fi
	done
	return 1
}

# --- 1. the driver (read only: this script never installs or changes it) ---------------------------
DRIVER_VERSION=""
DRIVER_PROBLEM=""
read_driver_version() {
	local out first proc_version=""
	if [[ -r /proc/driver/nvidia/version ]]; then
		proc_version=$(head -n 1 /proc/driver/nvidia/version | grep -Eo '[0-9]{3,}\.[0-9]+(\.[0-9]+)?' | head -n 1 || true)
	fi
	if command -v nvidia-smi >/dev/null 2>&1; then
		if out=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1); then
			first=${out%%$'\n'*}
			first=${first//[[:space:]]/}
			if [[ $first =~ ^[0-9]+(\.[0-9]+)+$ ]]; then
				DRIVER_VERSION=$first
				if [[ -n $proc_version && $proc_version != "$DRIVER_VERSION" ]]; then
					warn "the loaded kernel module is driver $proc_version but nvidia-smi reports $DRIVER_VERSION: reboot (or reload the nvidia module) after a driver upgrade"
				fi
				return 0
			fi
			DRIVER_PROBLEM="nvidia-smi printed no driver version (${first:-nothing})"
		else
			DRIVER_PROBLEM="nvidia-smi failed: ${out%%$'\n'*}"
		fi
	else
		DRIVER_PROBLEM="nvidia-smi is not installed"
	fi
	if [[ -n $proc_version ]]; then
		warn "$DRIVER_PROBLEM; using the kernel module's version $proc_version from /proc/driver/nvidia/version"
		DRIVER_VERSION=$proc_version
		return 0
	fi
	DRIVER_PROBLEM="$DRIVER_PROBLEM, and /proc/driver/nvidia/version does not exist"
	return 1
}

# Every program a step needs, checked before anything is downloaded or written.
check_tools() {
	local missing=() t
	for t in tar sha256sum md5sum; do
		command -v "$t" >/dev/null 2>&1 || missing+=("$t")
	done
	case $CUDNN_ARCHIVE_NAME in
	*.tar.xz) command -v xz >/dev/null 2>&1 || missing+=("xz (package xz-utils)") ;;
	esac
	if ((${#missing[@]})); then
		if ((DRY_RUN)); then
			warn "missing program(s): ${missing[*]}; a real run would stop here"
		else
			die "missing program(s): ${missing[*]}; install them and run this script again"
		fi
	fi
}

check_driver() {
	local needs="CUDA $CUDA_VERSION needs NVIDIA driver >= $DRIVER_MIN (its own minimum), or at least >= $DRIVER_COMPAT_MIN (CUDA $CUDA_MAJOR minor-version compatibility)"
	if ((SKIP_DRIVER_CHECK)); then
		step driver "not checked (--skip-driver-check); $needs on the machine that runs it"
		return 0
	fi
	if ! read_driver_version; then
		die "no NVIDIA driver found ($DRIVER_PROBLEM). $needs. Install the driver first (this script never installs it), or run \`${PROVISION_VIA:+$PROVISION_VIA }--skip-driver-check\` to build without a GPU, e.g. an image"
	fi
	if version_ge "$DRIVER_VERSION" "$DRIVER_MIN"; then
		step driver "NVIDIA driver $DRIVER_VERSION >= $DRIVER_MIN (CUDA $CUDA_VERSION's minimum): ok"
	elif version_ge "$DRIVER_VERSION" "$DRIVER_COMPAT_MIN"; then
		step driver "NVIDIA driver $DRIVER_VERSION: ok through CUDA minor-version compatibility (>= $DRIVER_COMPAT_MIN)"
		warn "driver $DRIVER_VERSION is older than $DRIVER_MIN, CUDA $CUDA_VERSION's own minimum: code that needs PTX JIT of newer PTX will fail; upgrade the driver to >= $DRIVER_MIN when you can"
	else
		die "NVIDIA driver $DRIVER_VERSION is too old: $needs. Upgrade the driver first (this script never touches it)"
	fi
}

# --- state of each step (read only) ------------------------------------------------------------------
toolkit_version() {
	# The toolkit's major.minor from version.json (newer toolkits) or version.txt, or nothing.
	local home=$1
	if [[ -f $home/version.json ]]; then
		sed -n '/"cuda"[[:space:]]*:/,/}/ s/.*"version"[[:space:]]*:[[:space:]]*"\([0-9]*\.[0-9]*\).*/\1/p' "$home/version.json" | head -n 1
	elif [[ -f $home/version.txt ]]; then
		sed -n 's/^CUDA Version \([0-9]*\.[0-9]*\).*/\1/p' "$home/version.txt" | head -n 1
	fi
}

toolkit_complete() {
	# The files TensorFlow and XLA need from a toolkit: ptxas, libdevice, the CUDA runtime.
	local f
	[[ $(toolkit_version "$CUDA_HOME") == "$CUDA_VERSION" ]] || return 1
	[[ -x $CUDA_HOME/bin/ptxas ]] || return 1
	for f in "$CUDA_HOME"/nvvm/libdevice/libdevice.*.bc "$LIB_DIR"/libcudart.so."$CUDA_MAJOR"*; do
		[[ -e $f ]] || return 1
	done
}

toolkit_state() {
	if [[ -f $STATE_DIR/toolkit.started ]]; then
		echo interrupted
	elif [[ -f $STATE_DIR/toolkit.done ]] && toolkit_complete; then
		echo complete
	elif toolkit_complete; then
		echo present
	elif [[ -e $CUDA_HOME ]]; then
		echo incomplete
	else
		echo missing
	fi
}

cudnn_header_version() {
	# major.minor.patch from cudnn_version.h (cuDNN >= 8) in directory $1.
	local h=$1/cudnn_version.h major minor patch
	[[ -f $h ]] || return 0
	major=$(sed -n 's/^#define CUDNN_MAJOR[[:space:]]*\([0-9]*\).*/\1/p' "$h")
	minor=$(sed -n 's/^#define CUDNN_MINOR[[:space:]]*\([0-9]*\).*/\1/p' "$h")
	patch=$(sed -n 's/^#define CUDNN_PATCHLEVEL[[:space:]]*\([0-9]*\).*/\1/p' "$h")
	if [[ -n $major && -n $minor && -n $patch ]]; then
		printf '%s.%s.%s' "$major" "$minor" "$patch"
	fi
}

# cudnn_version.h carries major.minor.patch of the full four-part version.
CUDNN_MMP=$(IFS=. read -r a b c _ <<<"$CUDNN_FULL" && printf '%s.%s.%s' "$a" "$b" "${c:-0}")
readonly CUDNN_MMP

cudnn_complete() {
	[[ $(cudnn_header_version "$CUDA_HOME/include") == "$CUDNN_MMP" ]] && [[ -e $LIB_DIR/libcudnn.so.$CUDNN_MAJOR ]]
}

cudnn_state() {
	if [[ -f $STATE_DIR/cudnn.started ]]; then
		echo interrupted
	elif cudnn_complete; then
		if [[ -f $STATE_DIR/cudnn.done ]]; then echo complete; else echo present; fi
	else
		echo missing
	fi
}

ld_conf_text() {
	printf '# CUDA %s toolkit, written by provision'"'"'s install script; running it again rewrites this file.\n' "$CUDA_VERSION"
	printf '%s\n' "$LIB_DIR"
}

profile_text() {
	local q
	q=$(sh_quote "$CUDA_HOME")
	cat <<EOF
# CUDA $CUDA_VERSION toolkit for TensorFlow, written by provision's install script; running it
# again rewrites this file. Safe to source more than once.
CUDA_HOME=$q
export CUDA_HOME
case ":\${PATH:-}:" in
*":\${CUDA_HOME}/bin:"*) ;;
*) PATH="\${CUDA_HOME}/bin\${PATH:+:\${PATH}}" && export PATH ;;
esac
EOF
	if ((!SYSTEM_WIDE)); then
		cat <<'EOF'
# Installed under a prefix, outside the loader's cache: the library path finds the toolkit.
case ":${LD_LIBRARY_PATH:-}:" in
*":${CUDA_HOME}/lib64:"*) ;;
*) LD_LIBRARY_PATH="${CUDA_HOME}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" && export LD_LIBRARY_PATH ;;
esac
EOF
	fi
	cat <<'EOF'
# XLA looks for ptxas and libdevice here (else: "libdevice not found", "Couldn't invoke ptxas").
# Like PATH and CUDA_HOME, the toolkit sourced last wins; other XLA flags are kept.
case $- in
*f*) _provision_glob=off ;;
*) _provision_glob=on && set -f ;;
esac
_provision_flags=
# shellcheck disable=SC2086 # split into flags on purpose (globbing is off)
for _provision_flag in ${XLA_FLAGS:-}; do
	case $_provision_flag in
	--xla_gpu_cuda_data_dir=*) ;;
	*) _provision_flags="${_provision_flags:+${_provision_flags} }${_provision_flag}" ;;
	esac
done
XLA_FLAGS="${_provision_flags:+${_provision_flags} }--xla_gpu_cuda_data_dir=${CUDA_HOME}"
export XLA_FLAGS
if [ "$_provision_glob" = on ]; then set +f; fi
unset _provision_glob _provision_flags _provision_flag
EOF
}

file_is() {
	# file_is PATH TEXT: whether PATH holds exactly TEXT.
	[[ -f $1 ]] && cmp -s -- "$1" <(printf '%s' "$2")
}

cuda_soname() {
	# The runtime's soname link (libcudart.so.<major>[.0]): the shortest versioned name.
	local f best=""
	for f in "$LIB_DIR"/libcudart.so."$CUDA_MAJOR"*; do
		[[ -e $f ]] || continue
		f=${f##*/}
		if [[ -z $best || ${#f} -lt ${#best} ]]; then best=$f; fi
	done
	printf '%s' "$best"
}

loader_done() {
	local soname lib ldconfig cache
	soname=$(cuda_soname)
	[[ -n $soname && -e $LIB_DIR/$soname && -e $LIB_DIR/libcudnn.so.$CUDNN_MAJOR ]] || return 1
	if ((SYSTEM_WIDE)); then
		# The loader's cache lists both libraries from this toolkit (read whole: no SIGPIPE).
		ldconfig=$(find_ldconfig) || return 1
		cache=$("$ldconfig" -p 2>/dev/null) || return 1
		for lib in "$soname" "libcudnn.so.$CUDNN_MAJOR"; do
			grep -qF "$lib (" <<<"$cache" || return 1
			grep -F "$lib (" <<<"$cache" | grep -qF "=> $LIB_DIR/" || return 1
		done
	fi
}

venv_python_version() {
	"$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

venv_record() {
	# What the venv is installed from; a different lock or requirement means reinstall.
	if [[ -f $LOCK_FILE ]]; then
		printf 'lock sha256 %s\n' "$(sha256sum <"$LOCK_FILE" | cut -d' ' -f1)"
	elif [[ -n ${PROVISION_VENV_PACKAGE:-} ]]; then
		printf 'requirement %s\n' "$VENV_PACKAGE"
	else
		printf 'requirement %s\n' "${PIP_REQUIREMENTS[*]}"
	fi
}

installed_version() {
	# installed_version PYTHON DIST: the distribution's version in that interpreter, or nothing.
	"$1" -c 'import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass' "$2" 2>/dev/null || true
}

venv_state() {
	local py="$VENV_DIR/bin/python"
	if [[ ! -x $py ]]; then
		echo missing
	elif [[ $(venv_python_version "$py") != "$PYTHON_CHOSEN_VERSION" ]]; then
		echo other-python
	elif [[ -f $VENV_DIR/.provision-venv ]] && file_is "$VENV_DIR/.provision-venv" "$(venv_record)"$'\n' &&
		[[ $(installed_version "$py" "${VENV_PACKAGE%%==*}") == "${VENV_PACKAGE#*==}" ]]; then
		echo complete
	else
		echo incomplete
	fi
}

# --- the Python the venv is made from ------------------------------------------------------------------
PYTHON_CHOSEN=""
PYTHON_CHOSEN_VERSION=""
choose_python() {
	local candidates=() c v
	if [[ -n $PYTHON_EXE ]]; then
		candidates=("$PYTHON_EXE")
	else
		candidates=("python$PYTHON_VERSION" python3)
	fi
	for c in "${candidates[@]}"; do
		command -v "$c" >/dev/null 2>&1 || continue
		v=$(venv_python_version "$c")
		if [[ -n $PYTHON_EXE || $v == "$PYTHON_VERSION" ]]; then
			PYTHON_CHOSEN=$(command -v "$c")
			PYTHON_CHOSEN_VERSION=$v
			break
		fi
	done
	if [[ -z $PYTHON_CHOSEN ]]; then
		if [[ -n $PYTHON_EXE ]]; then
			die "--python $PYTHON_EXE: no such interpreter"
		fi
		die "Python $PYTHON_VERSION not found (looked for python$PYTHON_VERSION and python3 on PATH); install it with its venv module (e.g. apt install python$PYTHON_VERSION-venv), or pass --python EXE, or --skip-venv"
	fi
	local ok=0
	for v in "${PYTHON_SUPPORTED[@]}"; do
		if [[ $v == "$PYTHON_CHOSEN_VERSION" ]]; then ok=1; fi
	done
	if ((!ok)); then
		die "$PYTHON_CHOSEN is Python ${PYTHON_CHOSEN_VERSION:-?}; TensorFlow $TF_PIN supports Python ${PYTHON_SUPPORTED[*]}"
	fi
	if [[ -f $LOCK_FILE && $PYTHON_CHOSEN_VERSION != "$PYTHON_VERSION" ]]; then
		die "$LOCK_FILE was locked for Python $PYTHON_VERSION, and $PYTHON_CHOSEN is Python $PYTHON_CHOSEN_VERSION; pass --python with a Python $PYTHON_VERSION interpreter"
	fi
}

# --- 2. downloads and checksums --------------------------------------------------------------------------
verify() {
	# verify FILE LABEL SHA256 MD5: refuse FILE unless it matches the matrix's checksum.
	local file=$1 label=$2 sha256=$3 md5=$4 algo want got
	if [[ -n $sha256 ]]; then
		algo=sha256 want=$sha256
	elif [[ -n $md5 ]]; then
		algo=md5 want=$md5
	elif ((ALLOW_UNVERIFIED)); then
		warn "the matrix records no checksum for $label; using $file unverified (--allow-unverified)"
		return 0
	else
		die "the matrix records no checksum for $label, so $file cannot be verified; nothing was installed. Pass --allow-unverified to use it anyway, at your own risk"
	fi
	got=$("${algo}sum" <"$file" | cut -d' ' -f1)
	if [[ $got != "${want,,}" ]]; then
		die "checksum mismatch for $file: $algo $got, but the matrix says $want for $label; nothing was installed. Delete the file if it is a broken download, and run this script again"
	fi
	step verify "$label: $algo ok"
}

download() {
	# download URL DEST: resumable (DEST.part survives a failure), with retries and timeouts.
	local url=$1 dest=$2 rc=0
	mkdir -p -- "$(dirname "$dest")"
	step download "$url -> $dest"
	if command -v curl >/dev/null 2>&1; then
		curl --fail --location --continue-at - --retry 5 --retry-delay 10 --retry-connrefused \
			--connect-timeout 30 --speed-limit 1024 --speed-time 60 \
			--show-error --silent --output "$dest.part" "$url" || rc=$?
	elif command -v wget >/dev/null 2>&1; then
		wget --continue --tries=5 --waitretry=10 --timeout=60 --no-verbose \
			--output-document="$dest.part" "$url" || rc=$?
	else
		die "neither curl nor wget is installed: install one, or download $url yourself and pass it with --runfile / --cudnn-archive"
	fi
	if ((rc != 0)); then
		local kept="nothing arrived"
		if [[ -s $dest.part ]]; then
			kept="what arrived is kept in $dest.part: run this again to resume"
		else
			rm -f -- "$dest.part"
		fi
		die "download failed (exit $rc): $url; $kept, or download the file yourself and pass --runfile / --cudnn-archive"
	fi
	mv -f -- "$dest.part" "$dest"
}

ARTIFACT=""
artifact() {
	# artifact OPTION LOCAL NAME URL SHA256 MD5: sets ARTIFACT to the verified file to use.
	local option=$1 local_file=$2 name=$3 url=$4 sha256=$5 md5=$6
	ARTIFACT=""
	if [[ -n $local_file ]]; then
		[[ -f $local_file && -r $local_file ]] || die "$option $local_file: no such readable file"
		verify "$local_file" "$name" "$sha256" "$md5"
		ARTIFACT=$(absolute "$local_file")
		return 0
	fi
	ARTIFACT="$DOWNLOAD_DIR/$name"
	if [[ ! -f $ARTIFACT ]]; then
		if ((DRY_RUN)); then
			step download "would download $url to $ARTIFACT"
			return 0
		fi
		download "$url" "$ARTIFACT"
	fi
	verify "$ARTIFACT" "$name" "$sha256" "$md5"
}

# --- 3. the steps ---------------------------------------------------------------------------------------
CHANGED=0

install_toolkit() {
	local runfile=$1 state=$2 log rc=0
	case $state in
	complete)
		step toolkit "nothing to do: CUDA $CUDA_VERSION is installed in $CUDA_HOME"
		return 0
		;;
	present)
		step toolkit "nothing to do: CUDA $CUDA_VERSION is already in $CUDA_HOME (not installed by this script; using it)"
		return 0
		;;
	esac
	local argv=(--silent --toolkit "--toolkitpath=$CUDA_HOME" --no-man-page --override)
	if ((DRY_RUN)); then
		step toolkit "would run: sh $RUNFILE_NAME ${argv[*]} --tmpdir=<temporary dir> ($state)"
		return 0
	fi
	if [[ $state == interrupted ]]; then
		step toolkit "a previous run was interrupted while installing the toolkit: installing it again"
	fi
	work_tmp
	mkdir -p -- "$STATE_DIR"
	: >"$STATE_DIR/toolkit.started"
	rm -f -- "$STATE_DIR/toolkit.done"
	log="$STATE_DIR/runfile.log"
	step toolkit "running $RUNFILE_NAME (toolkit only, never the driver) into $CUDA_HOME; log: $log"
	TMPDIR="$WORK_TMP" sh "$runfile" "${argv[@]}" "--tmpdir=$WORK_TMP" >"$log" 2>&1 || rc=$?
	if ((rc != 0)); then
		tail -n 5 "$log" >&2 || true
		die "the CUDA runfile failed (exit $rc); see $log. Run this script again to retry"
	fi
	toolkit_complete || die "the CUDA runfile finished, but $CUDA_HOME does not hold a CUDA $CUDA_VERSION toolkit (version.json, bin/ptxas, nvvm/libdevice, lib64/libcudart); see $log"
	printf 'CUDA %s\n' "$CUDA_FULL" >"$STATE_DIR/toolkit.done"
	rm -f -- "$STATE_DIR/toolkit.started"
	CHANGED=1
	step toolkit "installed CUDA $CUDA_VERSION in $CUDA_HOME"
}

install_cudnn() {
	local archive=$1 state=$2 unpack top found libs
	case $state in
	complete)
		step cudnn "nothing to do: cuDNN $CUDNN_MMP is in $CUDA_HOME"
		return 0
		;;
	present)
		step cudnn "nothing to do: cuDNN $CUDNN_MMP is already in $CUDA_HOME (not installed by this script; using it)"
		return 0
		;;
	esac
	if ((DRY_RUN)); then
		step cudnn "would unpack $CUDNN_ARCHIVE_NAME into $CUDA_HOME/include and $LIB_DIR ($state)"
		return 0
	fi
	mkdir -p -- "$STATE_DIR"
	: >"$STATE_DIR/cudnn.started"
	rm -f -- "$STATE_DIR/cudnn.done"
	unpack=$(mktemp -d "$STATE_DIR/cudnn.XXXXXX")
	tar --no-same-owner -xf "$archive" -C "$unpack" || die "cannot unpack $archive (a broken download? delete it and run this script again)"
	top=""
	for found in "$unpack"/*/include/cudnn_version.h; do
		[[ -f $found ]] && top=${found%/include/cudnn_version.h}
	done
	# Newer cuDNN archives: <name>/include and <name>/lib; older .tgz ones: cuda/include, cuda/lib64.
	libs=""
	for found in "$top/lib" "$top/lib64"; do
		[[ -d $found ]] && libs=$found
	done
	[[ -n $top && -n $libs ]] || die "$archive does not have the layout of NVIDIA's cuDNN archives (<name>/include/cudnn_version.h and <name>/lib)"
	found=$(cudnn_header_version "$top/include")
	[[ $found == "$CUDNN_MMP" ]] || die "$archive holds cuDNN ${found:-of unknown version}, not $CUDNN_MMP"
	mkdir -p -- "$CUDA_HOME/include" "$LIB_DIR"
	# -P keeps NVIDIA's symlinks (libcudnn.so -> libcudnn.so.N -> libcudnn.so.N.M.P) as links.
	cp -Pf -- "$top"/include/* "$CUDA_HOME/include/"
	cp -Pf -- "$libs"/* "$LIB_DIR/"
	rm -rf -- "$unpack"
	cudnn_complete || die "cuDNN was copied, but $LIB_DIR/libcudnn.so.$CUDNN_MAJOR is missing"
	printf 'cuDNN %s for CUDA %s\n' "$CUDNN_FULL" "$CUDA_MAJOR" >"$STATE_DIR/cudnn.done"
	rm -f -- "$STATE_DIR/cudnn.started"
	CHANGED=1
	step cudnn "installed cuDNN $CUDNN_MMP into $CUDA_HOME"
}

other_trees_warning() {
	# Several CUDA trees on the loader path or in login shells make which one loads an accident.
	local f
	for f in "$ETC_DIR"/ld.so.conf.d/provision-cuda-*.conf "$ETC_DIR"/profile.d/provision-cuda-*.sh; do
		[[ -e $f && $f != "$LD_CONF" && $f != "$PROFILE" ]] || continue
		warn "$f configures another CUDA toolkit; libraries with the same soname then come from whichever is found first. Remove it if that toolkit is no longer used"
	done
}

write_conf() {
	local label=$1 dest=$2 text=$3 mode=$4
	if file_is "$dest" "$text"; then
		step "$label" "nothing to do: $dest is up to date"
	elif ((DRY_RUN)); then
		step "$label" "would write $dest:"
		printf '%s' "$text" | sed 's/^/    /'
	else
		printf '%s' "$text" | write_file "$dest" "$mode"
		CHANGED=1
		step "$label" "wrote $dest"
	fi
}

configure() {
	write_conf ld.so.conf "$LD_CONF" "$(ld_conf_text)"$'\n' 644
	write_conf profile.d "$PROFILE" "$(profile_text)"$'\n' 644
	other_trees_warning
}

run_ldconfig() {
	local ldconfig
	if loader_done; then
		step ldconfig "nothing to do: the loader finds libcudart and libcudnn.so.$CUDNN_MAJOR in $LIB_DIR"
		return 0
	fi
	if ! ldconfig=$(find_ldconfig); then
		if ((SYSTEM_WIDE)); then
			die "ldconfig not found; the loader cannot be told about $LIB_DIR"
		fi
		step ldconfig "skipped: ldconfig not found; $PROFILE puts $LIB_DIR on LD_LIBRARY_PATH"
		return 0
	fi
	if ((SYSTEM_WIDE)); then
		if ((DRY_RUN)); then
			step ldconfig "would run: $ldconfig"
			return 0
		fi
		"$ldconfig"
		step ldconfig "ran $ldconfig: the loader's cache lists $LIB_DIR"
	else
		# Without root the system cache stays as it is: create the soname links in the toolkit only;
		# LD_LIBRARY_PATH (profile.d) makes the loader look there.
		if ((DRY_RUN)); then
			step ldconfig "would run: $ldconfig -n $LIB_DIR"
			return 0
		fi
		"$ldconfig" -n "$LIB_DIR"
		step ldconfig "ran $ldconfig -n $LIB_DIR (soname links; $PROFILE puts it on LD_LIBRARY_PATH)"
	fi
	CHANGED=1
}

make_venv() {
	local state=$1 py="$VENV_DIR/bin/python" got
	if ((SKIP_VENV)); then
		step venv "skipped (--skip-venv)"
		return 0
	fi
	if [[ $state == complete ]]; then
		step venv "nothing to do: $VENV_DIR has ${VENV_PACKAGE%%==*} ${VENV_PACKAGE#*==} (Python $PYTHON_CHOSEN_VERSION)"
		return 0
	fi
	local -a how
	if [[ -f $LOCK_FILE ]]; then
		how=(--require-hashes -r "$LOCK_FILE")
	elif [[ -n ${PROVISION_VENV_PACKAGE:-} ]]; then
		how=("$VENV_PACKAGE")
	else
		how=("${PIP_REQUIREMENTS[@]}")
	fi
	if ((DRY_RUN)); then
		step venv "would create $VENV_DIR with $PYTHON_CHOSEN (Python $PYTHON_CHOSEN_VERSION) and pip install ${how[*]} ($state)"
		return 0
	fi
	if [[ $state == other-python ]]; then
		die "$VENV_DIR is a venv of another Python than $PYTHON_CHOSEN_VERSION; remove it or pass --venv DIR"
	fi
	rm -f -- "$VENV_DIR/.provision-venv"
	if [[ ! -x $py ]]; then
		step venv "creating $VENV_DIR with $PYTHON_CHOSEN"
		"$PYTHON_CHOSEN" -m venv "$VENV_DIR" || die "$PYTHON_CHOSEN -m venv failed; install Python's venv module (e.g. apt install python$PYTHON_CHOSEN_VERSION-venv)"
	fi
	step venv "pip install ${how[*]}"
	"$py" -m pip install --disable-pip-version-check --no-input "${how[@]}" ||
		die "pip install into $VENV_DIR failed (see above); run this script again to retry"
	got=$(installed_version "$py" "${VENV_PACKAGE%%==*}")
	if [[ $got != "${VENV_PACKAGE#*==}" ]]; then
		local hint=""
		if [[ -f $LOCK_FILE ]]; then hint=" (is $LOCK_FILE out of date? run provision lock $ENV_NAME)"; fi
		die "$VENV_DIR has ${VENV_PACKAGE%%==*} ${got:-not at all}, expected ${VENV_PACKAGE#*==}$hint"
	fi
	venv_record | write_file "$VENV_DIR/.provision-venv" 644
	CHANGED=1
	step venv "$VENV_DIR has ${VENV_PACKAGE%%==*} $got"
}

# Loads the libraries the way TensorFlow will (by soname, through the loader): each must come from
# this toolkit and be the expected version, and every cuDNN sub-library must load too (they need
# libcublas, libz, ...: "Could not load library libcudnn_cnn_infer.so.N" otherwise).
# cudnnGetVersion is not called: cuDNN answers it from a sub-library and exits the process when that
# sub-library does not load.
readonly LIBCHECK_PY='import ctypes, glob, os, sys
home, cudart, cudnn, cuda_version, cudnn_mmp = sys.argv[1:6]
real_home = os.path.realpath(home) + os.sep
bad = []
def load(soname):
    try:
        lib = ctypes.CDLL(soname)
    except OSError as exc:
        bad.append("%s does not load: %s" % (soname, exc))
        return None, ""
    stem = soname.split(".so.")[0] + ".so."
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if "/" in line})
    path = next((p for p in paths if os.path.basename(p).startswith(stem)), "")
    if not os.path.realpath(path).startswith(real_home):
        bad.append("%s loads from %s, not from %s" % (soname, path or "?", home))
    return lib, os.path.basename(os.path.realpath(path))[len(stem):]
rt, rt_file_version = load(cudart)
if rt is not None:
    v = ctypes.c_int(0)
    major, minor = (int(x) for x in cuda_version.split("."))
    if rt.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
        print("%s: cudaRuntimeGetVersion %d" % (cudart, v.value))
        if v.value != major * 1000 + minor * 10:
            bad.append("%s is CUDA runtime %d, expected CUDA %s" % (cudart, v.value, cuda_version))
    else:  # no usable driver (an image build): the file name carries the version
        print("%s: libcudart.so.%s (no driver to ask)" % (cudart, rt_file_version))
        if not rt_file_version.startswith(cuda_version + "."):
            bad.append("%s is libcudart.so.%s, expected CUDA %s" % (cudart, rt_file_version, cuda_version))
dn, dn_file_version = load(cudnn)
if dn is not None:
    print("%s: libcudnn.so.%s" % (cudnn, dn_file_version))
    if dn_file_version != cudnn_mmp:
        bad.append("%s is libcudnn.so.%s, expected cuDNN %s" % (cudnn, dn_file_version, cudnn_mmp))
subs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(home, "lib64", "libcudnn_*" + cudnn[len("libcudnn"):])))
for sub in subs:
    load(sub)
if subs:
    print("cuDNN sub-libraries load: %s" % ", ".join(subs))
if bad:
    sys.exit("; ".join(bad))'

other_providers() {
	# Libraries of the same soname elsewhere in the loader's cache: which one a process gets then
	# depends on the cache's order (and on LD_LIBRARY_PATH), a classic cause of version mismatches.
	local cache lib line
	cache=$("$(find_ldconfig)" -p 2>/dev/null) || return 0
	for lib in "$@"; do
		while IFS= read -r line; do
			[[ $line == *"$lib ("*"=> "* && $line != *"=> $LIB_DIR/"* ]] || continue
			warn "$lib is also in ${line##*=> }; processes get whichever the loader finds first (now: $(grep -F "$lib (" <<<"$cache" | head -n 1 | sed 's/.*=> //'))"
		done <<<"$cache"
	done
}

check_result() {
	local soname checker="" out rc=0 f
	if ((DRY_RUN)); then
		step check "would check that libcudart and libcudnn.so.$CUDNN_MAJOR load from $LIB_DIR"
		return 0
	fi
	soname=$(cuda_soname)
	[[ -n $soname ]] || die "no libcudart.so.$CUDA_MAJOR* in $LIB_DIR"
	[[ -e $LIB_DIR/libcudnn.so.$CUDNN_MAJOR ]] || die "$LIB_DIR/libcudnn.so.$CUDNN_MAJOR is missing"
	[[ -x $CUDA_HOME/bin/ptxas ]] || die "$CUDA_HOME/bin/ptxas is missing (XLA needs it)"
	for f in "$CUDA_HOME"/nvvm/libdevice/libdevice.*.bc; do
		[[ -e $f ]] || die "$CUDA_HOME/nvvm/libdevice/libdevice.*.bc is missing (XLA needs it)"
	done
	if ((SYSTEM_WIDE)); then
		loader_done || die "ldconfig -p does not list $soname and libcudnn.so.$CUDNN_MAJOR from $LIB_DIR"
		other_providers "$soname" "libcudnn.so.$CUDNN_MAJOR"
	fi
	if [[ -x $VENV_DIR/bin/python ]]; then
		checker="$VENV_DIR/bin/python"
	elif [[ -n $PYTHON_CHOSEN ]]; then
		checker=$PYTHON_CHOSEN
	elif command -v python3 >/dev/null 2>&1; then
		checker=$(command -v python3)
	fi
	if [[ -z $checker ]]; then
		step check "$soname and libcudnn.so.$CUDNN_MAJOR are in $LIB_DIR (no Python here to load them)"
		return 0
	fi
	if ((SYSTEM_WIDE)); then
		out=$("$checker" -c "$LIBCHECK_PY" "$CUDA_HOME" "$soname" "libcudnn.so.$CUDNN_MAJOR" "$CUDA_VERSION" "$CUDNN_MMP" 2>&1) || rc=$?
	else
		out=$(LD_LIBRARY_PATH="$LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$checker" -c "$LIBCHECK_PY" "$CUDA_HOME" "$soname" "libcudnn.so.$CUDNN_MAJOR" "$CUDA_VERSION" "$CUDNN_MMP" 2>&1) || rc=$?
	fi
	if ((rc != 0)); then
		die "the installed libraries do not load as expected: ${out//$'\n'/; }"
	fi
	while IFS= read -r f; do step check "$f"; done <<<"$out"
}

# --- main ---------------------------------------------------------------------------------------------------
if ((DRY_RUN)); then
	say "$ENV_NAME: TensorFlow $TF_PIN, CUDA $CUDA_VERSION, cuDNN $CUDNN_FULL, Python $PYTHON_VERSION (dry run: nothing is changed)"
else
	say "$ENV_NAME: TensorFlow $TF_PIN, CUDA $CUDA_VERSION, cuDNN $CUDNN_FULL, Python $PYTHON_VERSION"
fi
if ((SYSTEM_WIDE)); then
	if ((EUID != 0)); then
		if ((DRY_RUN)); then
			warn "installing into / needs root; run it with sudo, or pass --prefix DIR"
		else
			die "installing into / needs root: run it with sudo, or pass --prefix DIR to install without root"
		fi
	fi
	say "system-wide: toolkit $CUDA_HOME, configuration in $ETC_DIR, venv $VENV_DIR"
else
	say "under $PREFIX: toolkit $CUDA_HOME, configuration in $ETC_DIR, venv $VENV_DIR"
fi

check_tools
check_driver
if ((!SKIP_VENV)); then
	choose_python
fi

TOOLKIT_STATE=$(toolkit_state)
CUDNN_STATE=$(cudnn_state)
VENV_STATE=missing
if ((!SKIP_VENV)); then
	VENV_STATE=$(venv_state)
fi

# Everything that will run is verified before anything runs.
RUNFILE_PATH=""
CUDNN_PATH=""
case $TOOLKIT_STATE in
complete | present) ;;
*)
	artifact --runfile "$RUNFILE" "$RUNFILE_NAME" "$RUNFILE_URL" "$RUNFILE_SHA256" "$RUNFILE_MD5"
	RUNFILE_PATH=$ARTIFACT
	;;
esac
case $CUDNN_STATE in
complete | present) ;;
*)
	artifact --cudnn-archive "$CUDNN_ARCHIVE" "$CUDNN_ARCHIVE_NAME" "$CUDNN_URL" "$CUDNN_SHA256" ""
	CUDNN_PATH=$ARTIFACT
	;;
esac

install_toolkit "$RUNFILE_PATH" "$TOOLKIT_STATE"
install_cudnn "$CUDNN_PATH" "$CUDNN_STATE"
configure
run_ldconfig
make_venv "$VENV_STATE"
check_result

if ((DRY_RUN)); then
	say "dry run: nothing was changed"
elif ((CHANGED)); then
	say "done. New login shells get the toolkit from $PROFILE; in this shell: . $PROFILE"
	if ((!SKIP_VENV)); then
		say "activate the venv: . $VENV_DIR/bin/activate; verify: provision verify $ENV_NAME"
	fi
else
	say "nothing to do: $ENV_NAME is installed and up to date"
fi
