#!/usr/bin/env bash
# The GPU checks that cannot run on a machine without a GPU, in one pass on a lent GPU machine (as root, from the
# repository root; no network needed). Everything it writes goes under ${OUT:-/tmp/out}; the figures are printed at the
# end (and kept in summary.txt). Every step runs under a timeout, cut to what is left of BUDGET_SECONDS (230): the
# whole check ends within 4 minutes even when something hangs (about a minute when nothing does).
#
#   1. what is there: the GPUs and driver (nvidia-smi), nvcc, g++, make, python3, and where NCCL and the CUDA runtime
#      are (headers and libraries: the CUDA toolkit in CUDA_HOME, NVIDIA's pip packages in PYTHON's site-packages)
#   2. native/all_reduce_perf built with that toolchain through its Makefile (`make bundle`: the binary finds NCCL and
#      the CUDA runtime in its own lib/, as in the nccl-benchmark image)
#   3. all_reduce_perf on every GPU (sizes MIN_BYTES..MAX_BYTES, default 8M..1G), on one GPU when there are several,
#      and with no GPU visible (CUDA_VISIBLE_DEVICES=), which must end "could not run" (exit 2)
#   4. the benchmark driver's verdict on that output (images/scripts/nccl_benchmark.py: parsing and threshold)
#   5. images/scripts/gpu-healthcheck as slurmd runs it (HealthCheckProgram, SLURMD_NODENAME set) with a stand-in
#      scontrol, since there is no Slurm here: healthy with the GPUs it sees, and a drain asked for when it expects one
#      GPU more than there is
#
# Environment: OUT (/tmp/out), PYTHON (/opt/torch/.venv/bin/python3, else python3), CUDA_HOME (/usr/local/cuda),
# CXX (g++), MIN_BYTES (8M), MAX_BYTES (1G), SEARCH_DIRS (more directories to look for headers and libraries in),
# BUILD_DIR (/tmp/gpu-device-check/all_reduce_perf: the bundle, about 475 MB unstripped, kept out of OUT), BUDGET_SECONDS (230).
# Exit status: 0 every step did what it should, 1 a step did not (see the summary and its log), 2 nothing to build with.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/out}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CXX=${CXX:-g++}
MIN_BYTES=${MIN_BYTES:-8M}
MAX_BYTES=${MAX_BYTES:-1G}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
# The bundle (about 475 MB with libnccl) is built outside OUT: only logs go back.
BUILD=${BUILD_DIR:-/tmp/gpu-device-check/all_reduce_perf}
failures=0
deadline=$((SECONDS + ${BUDGET_SECONDS:-230}))

say() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
section() { printf '\n=== %s\n' "$*"; }
step() { # step NAME ok|FAILED DETAIL
    [ "$2" = ok ] || failures=$((failures + 1))
    say "$(printf '%-28s %-7s %s' "$1" "$2" "$3")"
}
first() { find -H "$@" -print -quit 2>/dev/null || true; }
limit() { # limit SECONDS: that, or what is left of the budget (at least 1)
    local want=$1 rest=$((deadline - SECONDS))
    [ "$rest" -lt "$want" ] && want=$rest
    [ "$want" -ge 1 ] || want=1
    echo "$want"
}

[ -x "$PYTHON" ] || PYTHON=$(command -v python3 || true)

# --- 1. what is there ----------------------------------------------------------------------------------------------
section "machine"
{
    echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -r)  arch: $(uname -m)"
    echo "repository: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
    echo "--- nvidia-smi"
    timeout 10 nvidia-smi 2>&1 || echo "(nvidia-smi: exit $?)"
    timeout 10 nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv 2>&1 || true
    timeout 10 nvidia-smi topo -m 2>&1 || true
    echo "--- nvcc";  { command -v nvcc && nvcc --version; } 2>&1 || echo "no nvcc on PATH"
    [ -x "$CUDA_HOME/bin/nvcc" ] && "$CUDA_HOME/bin/nvcc" --version 2>&1 | tail -n 2
    echo "--- $CXX"; { command -v "$CXX" && "$CXX" --version | head -n 1; } 2>&1 || echo "no $CXX"
    echo "--- make"; { command -v make && make --version | head -n 1; } 2>&1 || echo "no make"
    echo "--- python: ${PYTHON:-none} $("${PYTHON:-false}" --version 2>&1 || true)"
    echo "--- ldd: $(ldd --version 2>&1 | head -n 1)"
} 2>&1 | tee "$OUT/machine.txt"
gpus=$(timeout 10 nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '^[0-9]' || true)
gpus=${gpus:-0}

# Where headers and libraries may be: the toolkit, the pip packages (nvidia.* in PYTHON's site-packages), the system.
roots=()
for d in "$CUDA_HOME" "$CUDA_HOME/targets/x86_64-linux" ${SEARCH_DIRS:-}; do [ -d "$d" ] && roots+=("$d"); done
if [ -n "$PYTHON" ]; then
    while IFS= read -r d; do [ -d "$d" ] && roots+=("$d"); done < <("$PYTHON" - <<'EOF' 2>/dev/null || true
import importlib, site, sys
dirs = []
for name in ("nvidia.nccl", "nvidia.cu13", "nvidia.cuda_runtime", "nvidia"):
    try:
        dirs += list(importlib.import_module(name).__path__)
    except ImportError:
        pass
dirs += site.getsitepackages()
print("\n".join(dict.fromkeys(dirs)))
EOF
)
fi
for d in /usr/local/cuda*/targets/x86_64-linux /usr/include /usr/lib/x86_64-linux-gnu; do [ -d "$d" ] && roots+=("$d"); done
# The toolkit's own CUDA headers first (they match its libcudart), NCCL wherever it is.
runtime_h=$(first "${roots[@]}" -path '*/include/cuda_runtime_api.h')
cuda_include=${runtime_h%/*}
crt=$(first "$cuda_include" "${roots[@]}" -path '*/crt/host_defines.h')
target=$(first "$cuda_include" "${roots[@]}" -path '*/nv/target' -type f)
nccl_h=$(first "${roots[@]}" -path '*/include/nccl.h')  # not torch/include/torch/csrc/cuda/nccl.h
cudart_version=$(sed -n 's/^#define CUDART_VERSION *\([0-9]*\).*/\1/p' "${runtime_h:-/dev/null}" 2>/dev/null | head -n 1)
cudart_major=$((${cudart_version:-0} / 1000))
cudart=$(first "${runtime_h%/include/*}" "${roots[@]}" -name "libcudart.so.$cudart_major")
libnccl=$(first "${nccl_h%/include/*}" "${roots[@]}" -name libnccl.so.2)
{
    echo "search roots: ${roots[*]}"
    echo "cuda_runtime_api.h: ${runtime_h:-NOT FOUND} (CUDART_VERSION ${cudart_version:-?})"
    echo "crt/host_defines.h: ${crt:-NOT FOUND}"
    echo "nv/target:          ${target:-NOT FOUND}"
    echo "nccl.h:             ${nccl_h:-NOT FOUND} ($(grep -h -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "${nccl_h:-/dev/null}" 2>/dev/null | awk '{printf "%s%s", sep, $3; sep="."}'))"
    echo "libcudart.so.$cudart_major:   ${cudart:-NOT FOUND}"
    echo "libnccl.so.2:       ${libnccl:-NOT FOUND}"
} | tee "$OUT/paths.txt"
say "GPUs visible to nvidia-smi: $gpus"

# --- 2. build --------------------------------------------------------------------------------------------------------
section "build native/all_reduce_perf"
for found in "$runtime_h" "$crt" "$target" "$nccl_h" "$cudart" "$libnccl"; do
    if [ -z "$found" ]; then
        step build FAILED "a header or library was not found (see $OUT/paths.txt); set CUDA_HOME, PYTHON or SEARCH_DIRS"
        exit 2
    fi
done
includes="${nccl_h%/*} $cuda_include ${crt%/crt/*} ${target%/nv/target}"
make_args=(-C "$ROOT/native/all_reduce_perf" bundle "CXX=$CXX" "OUT=$BUILD" "INCLUDE_DIRS=$includes"
    "NCCL_LIB_DIR=${libnccl%/*}" "CUDART_LIB_DIR=${cudart%/*}" "CUDART=libcudart.so.$cudart_major")
command -v strip >/dev/null 2>&1 || make_args+=(STRIP=true)
rm -rf "$BUILD"
built=FAILED
if ! command -v make >/dev/null 2>&1; then
    # The Makefile's compile line, by hand (no make in this image).
    mkdir -p "$BUILD/bin" "$BUILD/lib" "$OUT"
    # shellcheck disable=SC2086  # the include list splits on purpose
    read -ra isystem <<<"$(printf -- '-isystem %s ' $includes)"
    # shellcheck disable=SC2016  # $ORIGIN is for the linker
    if timeout "$(limit 90)" "$CXX" -std=c++17 -Wall -Wextra -Werror -O2 "${isystem[@]}" \
        -o "$BUILD/bin/all_reduce_perf" "$ROOT/native/all_reduce_perf/all_reduce_perf.cc" -static-libstdc++ \
        -static-libgcc -Wl,--disable-new-dtags -Wl,-rpath,'$ORIGIN/../lib' -L"${libnccl%/*}" -L"${cudart%/*}" \
        -l:libnccl.so.2 -l:"libcudart.so.$cudart_major" >"$OUT/build.log" 2>&1; then
        cp -L "$libnccl" "$cudart" "$BUILD/lib/" && built=ok
    fi
elif timeout "$(limit 90)" make "${make_args[@]}" >"$OUT/build.log" 2>&1; then
    built=ok
else
    # Once more without -Werror, to tell a new compiler's warning from a real error.
    timeout "$(limit 60)" make "${make_args[@]}" WARN="-Wall -Wextra" >>"$OUT/build.log" 2>&1 &&
        built="ok (warnings with -Werror: see build.log)"
fi
cat "$OUT/build.log"
if [ "${built%% *}" != ok ]; then
    step build FAILED "see $OUT/build.log"
    exit 1
fi
step build ok "${built#ok}needs $(readelf -d "$BUILD/bin/all_reduce_perf" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
ARP=$BUILD/bin/all_reduce_perf

# --- 3. runs -------------------------------------------------------------------------------------------------------
figures() { # the largest size's row and the summary lines of a run's log
    grep -E '^ +[0-9]+ ' "$1" | tail -n 1 | awk '{printf "largest %s B: out-of-place %s us algbw %s busbw %s, in-place %s us algbw %s busbw %s; ", $1, $6, $7, $8, $10, $11, $12}'
    grep -E '^# (Out of bounds|Avg bus)' "$1" | tr -s ' ' | tr '\n' ' '
}
run_arp() { # run_arp NAME EXPECTED_RC TIMEOUT ARGS... (env set by the caller)
    local name=$1 expect=$2 limit=$3 rc=0
    shift 3
    section "all_reduce_perf: $name ($*)"
    timeout "$(limit "$limit")" "$ARP" "$@" >"$OUT/arp-$name.log" 2>&1 || rc=$?
    echo "$rc" >"$OUT/arp-$name.rc"
    cat "$OUT/arp-$name.log"
    if [ "$rc" = "$expect" ]; then
        step "run: $name" ok "exit $rc; $(figures "$OUT/arp-$name.log")"
    else
        step "run: $name" FAILED "exit $rc, expected $expect (see $OUT/arp-$name.log)"
    fi
    return 0
}
if [ "$gpus" -gt 0 ]; then
    run_arp all-gpus 0 100 -b "$MIN_BYTES" -e "$MAX_BYTES" -f 2
    if [ "$gpus" -gt 1 ]; then
        run_arp one-gpu 0 40 -b "$MIN_BYTES" -e "$MAX_BYTES" -f 2 -g 1
    fi
    if ! grep -q '^# Avg bus bandwidth' "$OUT/arp-all-gpus.log"; then
        section "again, small, with NCCL_DEBUG=INFO (for the log)"
        NCCL_DEBUG=INFO timeout "$(limit 30)" "$ARP" -b 8M -e 8M -w 1 -n 1 >"$OUT/arp-nccl-debug.log" 2>&1 || true
        tail -n 60 "$OUT/arp-nccl-debug.log"
    fi
else
    step "run: all-gpus" FAILED "no GPU visible to nvidia-smi: nothing to measure (see $OUT/machine.txt)"
fi
CUDA_VISIBLE_DEVICES='' run_arp no-gpu 2 20 -b 8M -e 8M

# --- 4. the driver's verdict ---------------------------------------------------------------------------------------
section "the benchmark driver's verdict (images/scripts/nccl_benchmark.py)"
verdict() { # verdict LOG REQUIRED_GBPS RC
    "$PYTHON" - "$ROOT/images/scripts/nccl_benchmark.py" "$1" "$2" "$3" <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("nccl_benchmark", sys.argv[1])
nb = importlib.util.module_from_spec(spec)
sys.modules["nccl_benchmark"] = nb
spec.loader.exec_module(nb)
output = open(sys.argv[2], errors="replace").read()
settings = nb.Settings.from_env({"NCCL_MIN_BUS_BANDWIDTH_GBPS": sys.argv[3]})
o = nb.judge(settings, "devicecheck", returncode=int(sys.argv[4]), output=output)
state = "passed" if o.passed else "not run" if o.not_run else "failed"
print(f"{state} | {o.detail} | ranks {nb.parse_ranks(output)}")
EOF
}
for name in all-gpus one-gpu no-gpu; do
    log=$OUT/arp-$name.log
    [ -f "$log" ] || continue
    rc=$(cat "$OUT/arp-$name.rc")
    said=$(verdict "$log" 1 "$rc" 2>&1) || true
    echo "$name: $said"
    case "$name:$said" in
        "no-gpu:not run | could not run: no GPU visible to CUDA"*) step "verdict: $name" ok "$said" ;;
        no-gpu:*) step "verdict: $name" FAILED "$said" ;;
        *:"passed | "*) step "verdict: $name" ok "$said" ;;
        *) step "verdict: $name" FAILED "$said" ;;
    esac
done

# --- 5. gpu-healthcheck --------------------------------------------------------------------------------------------
section "gpu-healthcheck (HealthCheckProgram), with a stand-in scontrol"
stub=$OUT/stand-in-bin
mkdir -p "$stub"
cat >"$stub/scontrol" <<EOF
#!/bin/sh
echo "scontrol \$*" >>"$OUT/healthcheck-scontrol.log"
case "\$1" in show) printf 'NodeName=devicecheck Arch=x86_64\n   Gres=gpu:$gpus\n   State=IDLE ThreadsPerCore=1\n' ;; esac
EOF
chmod 0755 "$stub/scontrol"
timeout 10 nvidia-smi --query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.failure \
    --format=csv,noheader,nounits >"$OUT/healthcheck-query.txt" 2>&1 || true
echo "the query it makes:"
cat "$OUT/healthcheck-query.txt"
healthcheck() { # healthcheck NAME EXPECTED_RC [ENV=VALUE...]
    local name=$1 expect=$2 rc=0 t0 t1
    shift 2
    : >"$OUT/healthcheck-scontrol.log"
    t0=$(date +%s.%N)
    # bash, as the file mode may not survive the copy to the GPU machine; the check sources lib.sh beside it.
    env "$@" SLURMD_NODENAME=devicecheck PATH="$stub:$PATH" timeout "$(limit 20)" bash "$ROOT/images/scripts/gpu-healthcheck" \
        >"$OUT/healthcheck-$name.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    cat "$OUT/healthcheck-$name.log" "$OUT/healthcheck-scontrol.log"
    local took updates
    took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    updates=$(grep 'scontrol update' "$OUT/healthcheck-scontrol.log" | tr '\n' ' ' || true)
    if [ "$rc" = "$expect" ]; then
        step "healthcheck: $name" ok "exit $rc in ${took}s; ${updates:-no scontrol update}"
    else
        step "healthcheck: $name" FAILED "exit $rc, expected $expect, in ${took}s (see $OUT/healthcheck-$name.log)"
    fi
}
if [ "$gpus" -gt 0 ]; then
    healthcheck healthy 0
    healthcheck one-missing 1 GPU_HEALTHCHECK_EXPECTED_GPUS=$((gpus + 1))
else
    healthcheck no-gpu 2 GPU_HEALTHCHECK_EXPECTED_GPUS=1
fi

section "summary (also in $SUMMARY)"
cat "$SUMMARY"
if [ "$failures" -gt 0 ]; then
    echo "$failures step(s) did not do what they should"
    exit 1
fi
echo "every step did what it should"
