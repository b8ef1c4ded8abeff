#!/usr/bin/env bash
# Create the project's virtual environment and install slurmctl with its dev extras (from requirements/dev.lock). Works
# on a fresh Debian 12 (where venv and pip come from apt) and on machines whose python3 already has them.
set -euo pipefail
VENV=${1:-.venv}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

log() { printf 'setup: %s\n' "$*" >&2; }

# System tools the tests call (checked with dpkg so a warm machine does not touch apt): ssh for logins to the login
# pods, munge for the container scripts' munged tests, rsync for populate-jail's (test/unit/images).
SYSTEM_PACKAGES=(openssh-client munge rsync)
missing=()
for pkg in "${SYSTEM_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from apt"
    apt-get -o DPkg::Lock::Timeout=300 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

# promtool, for `promtool check metrics` on the operator's /metrics (test/e2e/pods/test_slurm.py): only the binary,
# taken out of Debian's prometheus package (installing the package would also install and start a Prometheus server).
PROMTOOL=${SLURMCTL_CACHE:-$HOME/.cache/slurmctl}/promtool/promtool
if [ ! -x "$PROMTOOL" ]; then
    log "fetching promtool from Debian's prometheus package"
    unpack=$(mktemp -d)
    if ! (cd "$unpack" && apt-get download prometheus >/dev/null 2>&1); then
        apt-get -o DPkg::Lock::Timeout=300 update >/dev/null
        (cd "$unpack" && apt-get download prometheus >/dev/null 2>&1)
    fi
    dpkg-deb --fsys-tarfile "$unpack"/prometheus_*.deb | tar -x -C "$unpack" ./usr/bin/promtool
    mkdir -p "$(dirname "$PROMTOOL")"
    install -m 0755 "$unpack/usr/bin/promtool" "$PROMTOOL"
    rm -rf "$unpack"
fi

# The container scripts run as the images' fixed users; the tests run them here, so the same users exist here.
getent group slurm >/dev/null || groupadd --system --gid 64030 slurm
getent passwd slurm >/dev/null || useradd --system --uid 64030 --gid slurm --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin slurm

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    log "installing python3, python3-venv and python3-pip from apt"
    apt-get -o DPkg::Lock::Timeout=300 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends python3 python3-venv python3-pip >/dev/null
    PY=python3
fi
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
    log "error: slurmctl needs Python >= 3.11 ($PY is $("$PY" --version))"
    exit 1
}
# Helm, at the version hack/deps/helm pins (cached; `make lint` and test/e2e/test_helm_chart.py run the chart through
# it): hack/helm.sh fetches and verifies it, and is how everything else finds it.
PYTHON="$PY" "$ROOT/hack/helm.sh" install
if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
fi
# Every package at the version and with the hashes of requirements/dev.lock (`make lock` makes it from pyproject.toml;
# `make lint` fails when it drifted), pip, setuptools and wheel included; then slurmctl itself, built with those
# (no build isolation, which would fetch an unpinned setuptools) and without resolving anything more.
log "installing requirements/dev.lock and slurmctl into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements/dev.lock
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
touch "$VENV/.installed"
