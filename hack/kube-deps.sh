#!/usr/bin/env bash
# hack/kube-deps.sh VERSION: write hack/deps/kube-<minor>/ for Kubernetes VERSION (e.g. 1.37.2), the module
# hack/control-plane.sh builds that minor from (docs/kubernetes.md). k8s.io/kubernetes replaces its k8s.io/* staging
# modules with directories its module zip does not hold; the module written here replaces each with its published
# v0.<minor>.<patch> instead, the list taken from upstream's own go.mod. Then `go mod tidy` pins every dependency in
# go.sum. Commit the directory; KUBE_VERSION=<minor> selects it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}
LOG_PREFIX=kube-deps
# shellcheck source=hack/lib.sh
. "$ROOT/hack/lib.sh"

[ $# -eq 1 ] && [[ $1 =~ ^1\.([0-9]+)\.([0-9]+)$ ]] || die "usage: hack/kube-deps.sh VERSION (e.g. 1.37.2)"
version=$1
minor=1.${BASH_REMATCH[1]}
dir=$ROOT/hack/deps/kube-$minor
mkdir -p "$dir"

upstream=$(cd "$dir" && go_env mod download -json "k8s.io/kubernetes@v$version" | awk -F'"' '/"GoMod":/ {print $4}')
[ -f "$upstream" ] || die "k8s.io/kubernetes@v$version: the module proxy gave no go.mod"
go_directive=$(awk '$1 == "go" {print $2; exit}' "$upstream")

{
    printf '// The Kubernetes %s binaries of the test cluster, built from the Go module proxy (hack/control-plane.sh\n' "$minor"
    printf '// build). Written by hack/kube-deps.sh %s: k8s.io/kubernetes replaces its staging modules with directories\n' "$version"
    printf '// its module zip lacks; this module pins them to their published v0 versions instead.\n'
    printf 'module slurmctl.local/kube\n\ngo %s\n\ngodebug default=go%s\n\n' "$go_directive" "$(cut -d. -f1,2 <<<"$go_directive")"
    printf 'require k8s.io/kubernetes v%s\n\nreplace (\n' "$version"
    awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$upstream" | sort -u |
        while read -r m; do printf '\t%s => %s v0.%s\n' "$m" "$m" "${version#1.}"; done
    printf ')\n'
} >"$dir/go.mod"

cat >"$dir/tools.go" <<'EOF'
//go:build tools

// Package tools names the commands this module builds, so `go mod tidy` keeps their dependencies in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
rm -f "$dir/go.sum"
(cd "$dir" && GO_MOD_MODE=mod go_env mod tidy) || die "go mod tidy failed in $dir (is every staging module served at v0.${version#1.}?)"
log "wrote $dir (Kubernetes $version); KUBE_VERSION=$minor selects it"
