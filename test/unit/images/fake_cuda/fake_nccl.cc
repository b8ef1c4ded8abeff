// A fake libnccl.so.2 for testing native/all_reduce_perf without a GPU: an all-reduce (float, sum) over every rank of a
// group, done on the host when the group ends. FAKE_CORRUPT=1 adds 1 to the first element of every result.
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

struct ncclComm {
    int rank;
};

namespace {
struct Call {
    const float* send;
    float* recv;
    size_t count;
};
std::vector<Call> pending;
int depth = 0;

void reduce() {
    if (pending.empty()) return;
    size_t count = pending[0].count;
    std::vector<float> sum(count, 0.0f);
    for (const Call& c : pending) {
        for (size_t i = 0; i < count; ++i) sum[i] += c.send[i];
    }
    bool corrupt = getenv("FAKE_CORRUPT") != nullptr && strcmp(getenv("FAKE_CORRUPT"), "1") == 0;
    for (const Call& c : pending) {
        memcpy(c.recv, sum.data(), count * sizeof(float));
        if (corrupt) c.recv[0] += 1.0f;
    }
    pending.clear();
}
}  // namespace

extern "C" {
ncclResult_t ncclGetVersion(int* version) { *version = 23203; return ncclSuccess; }
const char* ncclGetErrorString(ncclResult_t) { return "invalid usage"; }
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int*) {
    for (int r = 0; r < ndev; ++r) comms[r] = new ncclComm{r};
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) { delete comm; return ncclSuccess; }
ncclResult_t ncclGroupStart(void) { ++depth; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
    if (--depth == 0) reduce();
    return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t, ncclRedOp_t,
                           ncclComm_t, cudaStream_t) {
    if (!pending.empty() && pending[0].count != count) return ncclInvalidUsage;
    pending.push_back({static_cast<const float*>(sendbuff), static_cast<float*>(recvbuff), count});
    if (depth == 0) reduce();
    return ncclSuccess;
}
}
