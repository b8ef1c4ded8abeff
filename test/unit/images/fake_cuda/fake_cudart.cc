// A fake libcudart.so.12 for testing native/all_reduce_perf without a GPU: "device" memory is host memory.
// FAKE_GPUS (default 2) devices are visible; FAKE_CUDA=nodriver makes cudaGetDeviceCount fail as without a driver.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {
int visible() {
    const char* gpus = getenv("FAKE_GPUS");
    return gpus != nullptr ? atoi(gpus) : 2;
}
int current = 0;
}  // namespace

extern "C" {
cudaError_t cudaGetDeviceCount(int* count) {
    const char* mode = getenv("FAKE_CUDA");
    *count = 0;
    if (mode != nullptr && strcmp(mode, "nodriver") == 0) return cudaErrorInsufficientDriver;
    *count = visible();
    return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= visible()) return cudaErrorInvalidDevice;
    current = device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "Fake GPU %d", device);
    prop->pciBusID = 4 + device;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) { *version = 12090; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int* version) { *version = 13000; return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
    *stream = reinterpret_cast<cudaStream_t>(static_cast<size_t>(current) + 1);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMalloc(void** ptr, size_t size) {
    *ptr = malloc(size);
    return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) { free(ptr); return cudaSuccess; }
cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaMalloc(ptr, size); }
cudaError_t cudaFreeHost(void* ptr) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
    memmove(dst, src, count);
    return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        default: return "no error";
    }
}
const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        default: return "cudaSuccess";
    }
}
}
