// slurmctl's all_reduce_perf: an NCCL all-reduce bus-bandwidth benchmark for one node, a compatible subset of
// nccl-tests' all_reduce_perf (https://github.com/NVIDIA/nccl-tests), written for slurmctl because nccl-tests needs
// nvcc and no CUDA toolkit image can be had where slurmctl's images are built. It is a host-side program only: the
// CUDA runtime API moves and times data, NCCL's own kernels reduce it, so g++ and the headers and libraries of
// NVIDIA's wheels (nvidia-nccl-cu12, nvidia-cuda-runtime-cu12, nvidia-cuda-cccl-cu12) build it.
//
// One process drives every GPU it sees (or the first -g of them) through ncclCommInitAll, as nccl-tests built without
// MPI does. For each size from -b to -e (times -f each step) it runs -w warm-up all-reduces, then times -n of them
// with the host's monotonic clock, out of place and then in place (float, sum), and prints nccl-tests' table:
//   time   mean time of one all-reduce of `size` bytes per GPU (us)
//   algbw  size / time (GB/s, 1e9 bytes)
//   busbw  algbw * 2*(n-1)/n, nccl-tests' bus bandwidth for n GPUs (the factor is 0 with one GPU: an all-reduce over
//          one rank moves nothing between GPUs, and the output says so rather than invent a figure)
//   #wrong elements of the result that differ from the exact sum (each rank's buffer holds small integers, so the sum
//          is exact in float whatever order NCCL reduces in), checked after the timed runs unless -c 0
// then "# Out of bounds values : K OK|FAILED" and "# Avg bus bandwidth : X" (the mean busbw over every size and both
// placements), the two lines slurmctl's benchmark driver (images/scripts/nccl_benchmark.py) reads.
//
// Options: -b MIN (default 32M), -e MAX (default 32M), -f FACTOR (2), -g GPUS (every visible GPU), -w WARMUP (5),
// -n ITERS (20), -c CHECK (1), -t THREADS (only 1), -h. Sizes take K, M, G or T (powers of 1024).
// Exit status: 0 measured, results correct; 1 a CUDA or NCCL error, fewer GPUs than -g asks for, or wrong results;
// 2 could not run: no GPU visible to CUDA (or no usable driver), or bad arguments.
#include <cuda_runtime_api.h>
#include <getopt.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitNotRun = 2;
constexpr int kMaxGpus = 64;
// Host staging of the check: 16 MiB per copy. Each rank's pattern repeats every kPeriod elements and a chunk holds a
// whole number of periods, so every chunk of a buffer, and of the expected result, is the same.
constexpr size_t kChunkElems = size_t{4} << 20;
constexpr size_t kPeriod = 256;

char g_host[256] = "localhost";

[[noreturn]] void cuda_failure(int line, cudaError_t err) {
    // nccl-tests' wording, and the error's name as well: the benchmark driver tells "no GPU" from a broken GPU by it.
    fprintf(stderr, "%s: Test CUDA failure all_reduce_perf.cc:%d '%s' (%s)\n", g_host, line, cudaGetErrorString(err),
            cudaGetErrorName(err));
    exit(kExitFailed);
}

[[noreturn]] void nccl_failure(int line, ncclResult_t res) {
    fprintf(stderr, "%s: Test NCCL failure all_reduce_perf.cc:%d '%s'\n", g_host, line, ncclGetErrorString(res));
    exit(kExitFailed);
}

#define CUDACHECK(cmd)                                  \
    do {                                                \
        cudaError_t err_ = (cmd);                       \
        if (err_ != cudaSuccess) cuda_failure(__LINE__, err_); \
    } while (0)

#define NCCLCHECK(cmd)                                  \
    do {                                                \
        ncclResult_t res_ = (cmd);                      \
        if (res_ != ncclSuccess) nccl_failure(__LINE__, res_); \
    } while (0)

[[noreturn]] void usage(const char* why) {
    if (why != nullptr) fprintf(stderr, "all_reduce_perf: %s\n", why);
    fprintf(stderr,
            "usage: all_reduce_perf [-b MINBYTES] [-e MAXBYTES] [-f STEPFACTOR] [-g NGPUS] [-w WARMUP] [-n ITERS]"
            " [-c CHECK] [-t 1]\n");
    exit(why == nullptr ? 0 : kExitNotRun);
}

// "512", "512M", "8G", "64KB": a number of bytes, K/M/G/T in powers of 1024 (as nccl-tests reads them). Digits are
// read by hand: strtoull would tie the binary to a newer glibc than the jail may have (C23 symbol versions).
bool parse_size(const char* text, uint64_t* out) {
    uint64_t value = 0;
    const char* p = text;
    if (*p < '0' || *p > '9') return false;
    for (; *p >= '0' && *p <= '9'; ++p) {
        if (value > (UINT64_MAX - 9) / 10) return false;
        value = value * 10 + static_cast<uint64_t>(*p - '0');
    }
    int shift = 0;
    switch (*p) {
        case 'k': case 'K': shift = 10; ++p; break;
        case 'm': case 'M': shift = 20; ++p; break;
        case 'g': case 'G': shift = 30; ++p; break;
        case 't': case 'T': shift = 40; ++p; break;
        default: break;
    }
    if (*p == 'b' || *p == 'B') ++p;
    if (*p != '\0') return false;
    if (shift > 0 && value > (UINT64_MAX >> shift)) return false;
    *out = value << shift;
    return true;
}

bool parse_int(const char* text, int minimum, int* out) {
    uint64_t value = 0;
    const char* p = text;
    if (*p == '\0') return false;
    for (; *p != '\0'; ++p) {
        if (*p < '0' || *p > '9' || value > 1000000) return false;
        value = value * 10 + static_cast<uint64_t>(*p - '0');
    }
    if (value < static_cast<uint64_t>(minimum)) return false;
    *out = static_cast<int>(value);
    return true;
}

double now_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Options {
    uint64_t min_bytes = uint64_t{32} << 20;
    uint64_t max_bytes = uint64_t{32} << 20;
    int step_factor = 2;
    int gpus = 0;  // 0: every visible GPU
    int warmup = 5;
    int iters = 20;
    int check = 1;
};

Options parse_options(int argc, char** argv) {
    Options o;
    int opt;
    int threads = 1;
    while ((opt = getopt(argc, argv, "b:e:f:g:w:n:c:t:h")) != -1) {
        bool ok = true;
        switch (opt) {
            case 'b': ok = parse_size(optarg, &o.min_bytes); break;
            case 'e': ok = parse_size(optarg, &o.max_bytes); break;
            case 'f': ok = parse_int(optarg, 2, &o.step_factor); break;
            case 'g': ok = parse_int(optarg, 1, &o.gpus); break;
            case 'w': ok = parse_int(optarg, 0, &o.warmup); break;
            case 'n': ok = parse_int(optarg, 1, &o.iters); break;
            case 'c': ok = parse_int(optarg, 0, &o.check); break;
            case 't': ok = parse_int(optarg, 1, &threads) && threads == 1; break;
            case 'h': usage(nullptr);
            default: usage("unknown option");
        }
        if (!ok) {
            char why[160];
            snprintf(why, sizeof why, "bad value '%s' for -%c", optarg, opt);
            usage(why);
        }
    }
    if (optind != argc) usage("unexpected argument");
    if (o.max_bytes < o.min_bytes) usage("-e (maximum size) is below -b (minimum size)");
    if (o.max_bytes < sizeof(float)) usage("-e must be at least 4 bytes (one float)");
    if (o.gpus > kMaxGpus) usage("-g is above 64");
    return o;
}

struct Rank {
    int device = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    float* send = nullptr;
    float* recv = nullptr;
};

struct Bench {
    Rank ranks[kMaxGpus];
    int n = 0;
    float* host_pattern = nullptr;   // one rank's chunk
    float* host_expected = nullptr;  // the sum of every rank's chunk
    float* host_result = nullptr;

    void all_reduce(const float* const* send, float* const* recv, size_t count) {
        NCCLCHECK(ncclGroupStart());
        for (int r = 0; r < n; ++r) {
            NCCLCHECK(ncclAllReduce(send[r], recv[r], count, ncclFloat, ncclSum, ranks[r].comm, ranks[r].stream));
        }
        NCCLCHECK(ncclGroupEnd());
    }

    void synchronize() {
        for (int r = 0; r < n; ++r) {
            CUDACHECK(cudaSetDevice(ranks[r].device));
            CUDACHECK(cudaStreamSynchronize(ranks[r].stream));
        }
    }

    // Rank r's value at element i: (i % kPeriod) + r + 1, small integers.
    void fill(int r, float* dst, size_t count) {
        for (size_t i = 0; i < kChunkElems; ++i) host_pattern[i] = static_cast<float>(i % kPeriod + r + 1);
        CUDACHECK(cudaSetDevice(ranks[r].device));
        for (size_t off = 0; off < count; off += kChunkElems) {
            size_t len = count - off < kChunkElems ? count - off : kChunkElems;
            CUDACHECK(cudaMemcpy(dst + off, host_pattern, len * sizeof(float), cudaMemcpyHostToDevice));
        }
    }

    // Elements of each rank's result that are not the exact sum.
    uint64_t wrong(float* const* result, size_t count) {
        uint64_t bad = 0;
        for (int r = 0; r < n; ++r) {
            CUDACHECK(cudaSetDevice(ranks[r].device));
            for (size_t off = 0; off < count; off += kChunkElems) {
                size_t len = count - off < kChunkElems ? count - off : kChunkElems;
                CUDACHECK(cudaMemcpy(host_result, result[r] + off, len * sizeof(float), cudaMemcpyDeviceToHost));
                if (memcmp(host_result, host_expected, len * sizeof(float)) == 0) continue;
                for (size_t i = 0; i < len; ++i) bad += host_result[i] != host_expected[i];
            }
        }
        return bad;
    }

    // Mean seconds of one all-reduce over `iters`, after `warmup` untimed ones.
    double measure(const float* const* send, float* const* recv, size_t count, const Options& o) {
        for (int i = 0; i < o.warmup; ++i) all_reduce(send, recv, count);
        synchronize();
        double start = now_seconds();
        for (int i = 0; i < o.iters; ++i) all_reduce(send, recv, count);
        synchronize();
        return (now_seconds() - start) / o.iters;
    }
};

void print_devices(const Bench& b) {
    printf("#\n# Using devices\n");
    for (int r = 0; r < b.n; ++r) {
        cudaDeviceProp prop{};
        CUDACHECK(cudaGetDeviceProperties(&prop, b.ranks[r].device));
        printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n", r, static_cast<int>(getpid()),
               g_host, b.ranks[r].device, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name);
    }
}

}  // namespace

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    gethostname(g_host, sizeof g_host - 1);
    Options o = parse_options(argc, argv);

    int nccl_version = 0;
    int runtime_version = 0;
    int driver_version = 0;
    NCCLCHECK(ncclGetVersion(&nccl_version));
    cudaRuntimeGetVersion(&runtime_version);
    cudaDriverGetVersion(&driver_version);  // 0 when no driver is loaded
    printf("# slurmctl all_reduce_perf (nccl-tests compatible): NCCL %d.%d.%d (built with %d.%d.%d), CUDA runtime "
           "%d.%d, driver %d.%d\n",
           nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
           runtime_version / 1000, runtime_version % 1000 / 10, driver_version / 1000, driver_version % 1000 / 10);

    int visible = 0;
    cudaError_t err = cudaGetDeviceCount(&visible);
    if (err == cudaSuccess && visible == 0) err = cudaErrorNoDevice;
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        // No device, or no driver the runtime can use (libcuda missing or too old): nothing was measured. Any other
        // error (e.g. cudaErrorSystemNotReady: the fabric manager of an NVSwitch node is down) is the node's.
        fprintf(stderr, "%s: Test CUDA failure all_reduce_perf.cc:%d '%s' (%s): could not run, no GPU to measure\n",
                g_host, __LINE__, cudaGetErrorString(err), cudaGetErrorName(err));
        return kExitNotRun;
    }
    CUDACHECK(err);
    Bench b;
    b.n = o.gpus == 0 ? (visible < kMaxGpus ? visible : kMaxGpus) : o.gpus;
    if (b.n > visible) {
        fprintf(stderr, "%s: Test failure: %d GPUs requested (-g %d) but only %d visible to CUDA\n", g_host, b.n, b.n,
                visible);
        return kExitFailed;
    }
    printf("# nThread 1 nGpus %d minBytes %llu maxBytes %llu step: %d(factor) warmup iters: %d iters: %d agg iters: 1 "
           "validation: %d graph: 0\n",
           b.n, static_cast<unsigned long long>(o.min_bytes), static_cast<unsigned long long>(o.max_bytes),
           o.step_factor, o.warmup, o.iters, o.check);
    int devices[kMaxGpus];
    for (int r = 0; r < b.n; ++r) devices[r] = b.ranks[r].device = r;
    print_devices(b);

    ncclComm_t comms[kMaxGpus];
    NCCLCHECK(ncclCommInitAll(comms, b.n, devices));
    size_t max_count = o.max_bytes / sizeof(float);
    const float* send[kMaxGpus];
    float* recv[kMaxGpus];
    for (int r = 0; r < b.n; ++r) {
        Rank& rank = b.ranks[r];
        rank.comm = comms[r];
        CUDACHECK(cudaSetDevice(rank.device));
        CUDACHECK(cudaStreamCreateWithFlags(&rank.stream, cudaStreamNonBlocking));
        CUDACHECK(cudaMalloc(reinterpret_cast<void**>(&rank.send), max_count * sizeof(float)));
        CUDACHECK(cudaMalloc(reinterpret_cast<void**>(&rank.recv), max_count * sizeof(float)));
        send[r] = rank.send;
        recv[r] = rank.recv;
    }
    if (o.check) {
        CUDACHECK(cudaMallocHost(reinterpret_cast<void**>(&b.host_pattern), kChunkElems * sizeof(float)));
        CUDACHECK(cudaMallocHost(reinterpret_cast<void**>(&b.host_expected), kChunkElems * sizeof(float)));
        CUDACHECK(cudaMallocHost(reinterpret_cast<void**>(&b.host_result), kChunkElems * sizeof(float)));
        // sum over r of (i % P + r + 1) = n * (i % P) + n * (n + 1) / 2: exact, below 2^24.
        for (size_t i = 0; i < kChunkElems; ++i) {
            b.host_expected[i] = static_cast<float>(b.n * (i % kPeriod) + static_cast<size_t>(b.n) * (b.n + 1) / 2);
        }
    }

    printf("#\n#                                                              out-of-place                       in-place\n");
    printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n");
    const double factor = 2.0 * (b.n - 1) / b.n;
    double bw_sum = 0;
    int bw_count = 0;
    uint64_t wrong_total = 0;
    for (uint64_t size = o.min_bytes; size <= o.max_bytes; size *= static_cast<uint64_t>(o.step_factor)) {
        size_t count = size / sizeof(float);
        if (count == 0) count = 1;
        uint64_t bytes = count * sizeof(float);
        printf("%12llu  %12zu     float     sum      -1", static_cast<unsigned long long>(bytes), count);
        for (int in_place = 0; in_place < 2; ++in_place) {
            const float* const* src = in_place ? recv : send;
            if (o.check && !in_place) {
                for (int r = 0; r < b.n; ++r) b.fill(r, b.ranks[r].send, count);
            }
            double seconds = b.measure(src, recv, count, o);
            char wrong_text[24] = "N/A";
            if (o.check) {
                if (in_place) {  // the timed runs summed the sums: start again from the pattern
                    for (int r = 0; r < b.n; ++r) b.fill(r, b.ranks[r].recv, count);
                    b.all_reduce(src, recv, count);
                    b.synchronize();
                }
                uint64_t bad = b.wrong(recv, count);
                wrong_total += bad;
                snprintf(wrong_text, sizeof wrong_text, "%llu", static_cast<unsigned long long>(bad));
            }
            double algbw = static_cast<double>(bytes) / seconds / 1e9;
            double busbw = algbw * factor;
            bw_sum += busbw;
            ++bw_count;
            printf("  %7.1f  %6.2f  %6.2f  %5s", seconds * 1e6, algbw, busbw, wrong_text);
        }
        printf("\n");
        if (size > o.max_bytes / static_cast<uint64_t>(o.step_factor)) break;  // the next step would pass -e
    }

    for (int r = 0; r < b.n; ++r) {
        CUDACHECK(cudaSetDevice(b.ranks[r].device));
        CUDACHECK(cudaFree(b.ranks[r].send));
        CUDACHECK(cudaFree(b.ranks[r].recv));
        CUDACHECK(cudaStreamDestroy(b.ranks[r].stream));
        ncclCommDestroy(b.ranks[r].comm);
    }
    if (o.check) {
        cudaFreeHost(b.host_pattern);
        cudaFreeHost(b.host_expected);
        cudaFreeHost(b.host_result);
    }
    printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong_total),
           wrong_total == 0 ? "OK" : "FAILED");
    if (b.n == 1) {
        printf("# One GPU: bus bandwidth is 0 by nccl-tests' definition (busbw = algbw * 2*(n-1)/n), as nothing moves "
               "between GPUs; algbw is only the local copy rate\n");
    }
    printf("# Avg bus bandwidth    : %g \n#\n", bw_count ? bw_sum / bw_count : 0.0);
    return wrong_total == 0 ? 0 : kExitFailed;
}
