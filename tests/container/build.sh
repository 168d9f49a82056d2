#!/usr/bin/env bash
# Build Dockerfile.test with podman where there is no Docker engine and no image registry.
#
# The base image is made here: debootstrap a minimal Debian with Python from the Debian mirror
# apt already uses, and `podman import` it (skipped when the image exists). The image is built
# with `--isolation chroot`, so the test suite runs as a build step; the build fails when a
# test fails. The host's TLS bundle and pip's http(s) index settings are passed into the build.
#
#   tests/container/build.sh                              # the whole suite
#   PYTEST_ARGS='-m "not slow"' QUICKSTART=0 tests/container/build.sh
#   tests/container/build.sh --dry-run                    # print what would run
#
# Environment: PYTEST_ARGS, QUICKSTART (1|0), TAG (localhost/provision-test), BASE_IMAGE
# (localhost/bookworm-py; any existing image skips debootstrap), DEBIAN_SUITE (bookworm),
# DEBIAN_MIRROR (default: from apt's configuration), PYTHON (python3: whose pip config is read).
# Arguments after `--` go to `podman build` unchanged. Needs root, podman and debootstrap.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

dry_run=0
rebuild_base=0
extra=()
while (($#)); do
    case $1 in
        --dry-run) dry_run=1 ;;
        --rebuild-base) rebuild_base=1 ;;
        -h | --help) usage; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "build.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tag=${TAG:-localhost/provision-test}
base_image=${BASE_IMAGE:-localhost/bookworm-py}
suite=${DEBIAN_SUITE:-bookworm}
python=${PYTHON:-python3}
quickstart=${QUICKSTART:-1}
pytest_args=${PYTEST_ARGS:-}

die() { echo "build.sh: $*" >&2; exit 1; }

# Print a command as one shell-quoted line (what --dry-run shows, and a log of what runs).
show() { printf '+'; printf ' %q' "$@"; printf '\n'; }

# pip's settings on this host, read once: `pip config list` shows config files and PIP_*
# variables alike (sections global < install < :env:, the later winning, as in pip itself).
declare -A pip_config=()
load_pip_config() {
    local line section key rank
    local -A best=()
    local -A ranks=([global]=1 [install]=2 [:env:]=3)
    "$python" -m pip --version >/dev/null 2>&1 || return 0
    while IFS= read -r line; do
        [[ $line =~ ^([^.]+)\.([a-z-]+)=\'(.*)\'$ ]] || continue
        section=${BASH_REMATCH[1]} key=${BASH_REMATCH[2]}
        rank=${ranks[$section]:-0}
        if ((rank && rank >= ${best[$key]:-0})); then
            pip_config[$key]=${BASH_REMATCH[3]}
            best[$key]=$rank
        fi
    done < <("$python" -m pip config list 2>/dev/null)
}

# The effective value of one pip setting: its PIP_* variable, else pip's configuration.
pip_setting() {
    local key=$1 var
    var=PIP_$(tr 'a-z-' 'A-Z_' <<<"$key")
    printf '%s\n' "${!var:-${pip_config[$key]:-}}"
}

# Only http(s) indexes mean anything inside the image; file:// paths name this host's disk.
http_urls() {
    local url out=()
    for url in $1; do
        [[ $url =~ ^https?:// ]] && out+=("$url")
    done
    printf '%s' "${out[*]:-}"
}

# The Debian archive apt already fetches from (its mirror, proxy or snapshot), never a fixed host.
debian_mirror() {
    if [[ -n ${DEBIAN_MIRROR:-} ]]; then
        printf '%s\n' "$DEBIAN_MIRROR"
        return
    fi
    command -v apt-get >/dev/null || die "no apt here: set DEBIAN_MIRROR to a Debian mirror URL"
    local uri
    # shellcheck disable=SC2016  # $(REPO_URI) is apt's format field, not shell
    uri=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' \
        "Codename: $suite" 'Label: Debian' | head -n 1)
    [[ -n $uri ]] || die "apt has no Debian '$suite' source (run apt-get update, or set DEBIAN_MIRROR)"
    printf '%s\n' "$uri"
}

build_args=(
    --build-arg "BASE=$base_image"
    --build-arg "PYTEST_ARGS=$pytest_args"
    --build-arg "QUICKSTART=$quickstart"
    # The debootstrapped Debian's python3 is externally managed: prove the quick start there.
    --build-arg "REQUIRE_PEP668=$([[ $base_image == localhost/bookworm-py ]] && echo 1 || echo 0)"
)

load_pip_config
cert=$(pip_setting cert)
if [[ -n $cert ]]; then
    [[ -r $cert ]] || die "pip's cert $cert is not readable"
    build_args+=(--volume "$cert:/etc/extra-ca.pem:ro" --build-arg PIP_CERT=/etc/extra-ca.pem)
fi
index_url=$(http_urls "$(pip_setting index-url)")
[[ -z $index_url ]] || build_args+=(--build-arg "PIP_INDEX_URL=$index_url")
extra_index_urls=$(http_urls "$(pip_setting extra-index-url)")
[[ -z $extra_index_urls ]] || build_args+=(--build-arg "PIP_EXTRA_INDEX_URL=$extra_index_urls")

if ((!dry_run)); then
    ((EUID == 0)) || die "needs root (debootstrap, and podman's chroot isolation)"
    command -v podman >/dev/null || die "podman is not installed (apt-get install podman)"
fi

have_base=0
if ((!rebuild_base)) && command -v podman >/dev/null && podman image exists "$base_image"; then
    have_base=1
fi

if ((!have_base)); then
    [[ $base_image == localhost/* ]] \
        || die "base image $base_image does not exist; only localhost/ images are made here"
    mirror=$(debian_mirror)
    rootfs=ROOTFS
    if ((!dry_run)); then
        rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/provision-rootfs.XXXXXX")
        # shellcheck disable=SC2064  # expand now: the path is fixed once made
        trap "rm -rf -- '$rootfs'" EXIT
    fi
    # shellcheck disable=SC2054  # the commas belong to --include
    debootstrap_cmd=(debootstrap --variant=minbase
        --include=python3,python3-venv,ca-certificates "$suite" "$rootfs" "$mirror")
    # An imported tarball carries no config: give it the PATH and locale a Debian image has.
    import_cmd=(podman import
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
        --change 'ENV LANG=C.UTF-8'
        --change 'CMD ["/bin/bash"]'
        - "$base_image")
    if ((dry_run)); then
        show "${debootstrap_cmd[@]}"
        printf '+ tar -C %q -c . |\n' "$rootfs"
        show "${import_cmd[@]}"
    else
        command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
        show "${debootstrap_cmd[@]}"
        start=$SECONDS
        "${debootstrap_cmd[@]}"
        # Downloaded .debs and apt lists are only weight in the image.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | "${import_cmd[@]}"
        echo "build.sh: base image $base_image made in $((SECONDS - start)) s"
    fi
    build_args+=(--pull=never)
elif [[ $base_image == localhost/* ]]; then
    build_args+=(--pull=never)
fi

# --layers=false: no step is taken from a cache (a cached test step is a test that did not run),
# and no intermediate images pile up; the image is the base plus one layer.
build_cmd=(podman build --isolation chroot --layers=false "${build_args[@]}"
    -f "$root/Dockerfile.test" -t "$tag" "${extra[@]}" "$root")
show "${build_cmd[@]}"
((dry_run)) && exit 0
previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
start=$SECONDS
"${build_cmd[@]}"
echo "build.sh: $tag built in $((SECONDS - start)) s, $(podman image inspect --format '{{.Size}}' "$tag") bytes"
# The image this build replaced under the same tag, unless something else still uses it.
if [[ -n $previous && $previous != "$(podman image inspect --format '{{.Id}}' "$tag")" ]]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
fi
