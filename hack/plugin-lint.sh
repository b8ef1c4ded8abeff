#!/usr/bin/env bash
# Static analysis of the chroot SPANK plugin and job_container/jail (native/spank_chroot): cppcheck and clang-tidy, any finding fails.
# The analysers are the host's (cppcheck and clang-tidy are apt-installed when missing; another agent may hold the dpkg
# lock); the Slurm headers are those of SLURM_LINE (24.11 by default), from the root filesystem hack/local-slurm.sh builds the plugin in (the
# host's own libslurm-dev, 22.05 on Debian 12, is never used: the plugin refuses to compile against it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$ROOT/native/spank_chroot
FILES=("$SRC/chroot.c" "$SRC/job_container_jail.c" "$SRC/jail.c" "$SRC/args.c" "$SRC/confine.c" "$SRC/test/args_harness.c")
# The same language mode and macros the Makefile builds with, so the analysers see the code that ships.
SLURM_INCLUDE=$("$ROOT/hack/local-slurm.sh" include-dir)
CFLAGS=(-std=gnu11 -D_GNU_SOURCE -O2 -D_FORTIFY_SOURCE=2 "-I$SRC" "-isystem" "$SLURM_INCLUDE")
# Checks left out, and why:
#   DeprecatedOrUnsafeBufferHandling  asks for Annex K *_s functions, which glibc does not have
#   easily-swappable-parameters       flags every function with two parameters of one type
#   readability-*                     style; the plugin follows the kernel's C style (no braces on one-line ifs)
TIDY_CHECKS='-*,clang-analyzer-*,bugprone-*,cert-*,misc-*,performance-*,portability-*,readability-function-cognitive-complexity,readability-misleading-indentation,readability-non-const-parameter,-clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling,-bugprone-easily-swappable-parameters'

need=()
command -v cppcheck >/dev/null 2>&1 || need+=(cppcheck)
command -v clang-tidy >/dev/null 2>&1 || need+=(clang-tidy)
if [ ${#need[@]} -gt 0 ]; then
    printf 'plugin-lint: installing %s\n' "${need[*]}" >&2
    apt-get -o DPkg::Lock::Timeout=300 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need[@]}" \
        >/dev/null
fi

status=0
printf 'plugin-lint: cppcheck\n' >&2
# cppcheck defines no architecture: confine.c's seccomp filter is checked for the one the images build for.
cppcheck --quiet --error-exitcode=1 --enable=warning,style,performance,portability --inline-suppr \
    --std=c11 --suppress=missingIncludeSystem -D_GNU_SOURCE -D__x86_64__ -D__BYTE_ORDER__=1234 \
    -D__ORDER_LITTLE_ENDIAN__=1234 "-I$SRC" "-I$SLURM_INCLUDE" "${FILES[@]}" || status=1

# One file per run: clang-tidy 14 reports a false valist.Uninitialized in the second of several files in one run.
for f in "${FILES[@]}"; do
    printf 'plugin-lint: clang-tidy %s\n' "${f#"$ROOT"/}" >&2
    tidy_out=$(clang-tidy --quiet --checks="$TIDY_CHECKS" --warnings-as-errors='*' "$f" -- "${CFLAGS[@]}" 2>&1) ||
        status=1
    # Suppressed system-header findings still print "N warnings generated"; show only the real ones.
    grep -E 'warning:|error:' <<<"$tidy_out" && status=1
done

if [ "$status" -ne 0 ]; then
    printf 'plugin-lint: findings above\n' >&2
    exit 1
fi
printf 'plugin-lint: clean\n' >&2
