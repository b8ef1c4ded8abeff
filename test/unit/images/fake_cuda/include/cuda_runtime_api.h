// A stand-in for the CUDA runtime API: only what native/all_reduce_perf uses, with the real names and values, so the
// program builds and runs on a machine without CUDA against fake_cudart.cc (host memory for device memory).
#pragma once
#include <stddef.h>

enum cudaError { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
                 cudaErrorInvalidDevice = 101, cudaErrorNoDevice = 100 };
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
typedef struct CUstream_st* cudaStream_t;
#define cudaStreamNonBlocking 0x01

struct cudaDeviceProp {
    char name[256];
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
};

extern "C" {
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaMalloc(void** ptr, size_t size);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
}
