// The slice of the CUDA driver API's C ABI that the conformance suite uses, declared here because
// Debian main ships no cuda.h. Types and values follow cuda.h as published by NVIDIA. Every
// symbol named here is a versioned entry point that libcuda keeps exporting for binaries built
// against older toolkits (cuda.h's macros map cuMemAlloc to cuMemAlloc_v2 and so on; CUDA 13 maps
// cuCtxCreate to _v4 but still exports _v2), so dlsym by these exact names works from CUDA 11
// drivers through current ones. Used by cuda_driver.cc (dlsym) and fake_cuda/ (definitions).
#pragma once

#include <cstddef>

extern "C" {

typedef int CUresult;  // an enum in cuda.h; an int in the ABI
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // 64-bit on every 64-bit host (CUdeviceptr_v2)
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;  // nullptr: the context's default stream
typedef struct CUevent_st* CUevent;

typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_UNKNOWN = 999,
};

typedef int CUdevice_attribute;
enum : int {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

typedef int CUjit_option;
enum : int {
  CU_JIT_ERROR_LOG_BUFFER = 5,             // value: char*
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,  // value: the size itself, cast to void*
};

enum : unsigned int { CU_EVENT_DEFAULT = 0 };

// Entry points, as function pointer types for dlsym. The comment names the exported symbol.
typedef CUresult (*cuInit_fn)(unsigned int flags);
typedef CUresult (*cuDriverGetVersion_fn)(int* version);  // 12040 means 12.4
typedef CUresult (*cuGetErrorName_fn)(CUresult error, const char** name);
typedef CUresult (*cuGetErrorString_fn)(CUresult error, const char** text);
typedef CUresult (*cuDeviceGetCount_fn)(int* count);
typedef CUresult (*cuDeviceGet_fn)(CUdevice* device, int ordinal);
typedef CUresult (*cuDeviceGetName_fn)(char* name, int len, CUdevice dev);
typedef CUresult (*cuDeviceGetPCIBusId_fn)(char* bus_id, int len, CUdevice dev);  // "0000:17:00.0"
typedef CUresult (*cuDeviceGetUuid_fn)(CUuuid* uuid, CUdevice dev);  // _v2, or the older plain one
typedef CUresult (*cuDeviceTotalMem_v2_fn)(size_t* bytes, CUdevice dev);
typedef CUresult (*cuDeviceGetAttribute_fn)(int* value, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*cuCtxCreate_v2_fn)(CUcontext* ctx, unsigned int flags, CUdevice dev);
typedef CUresult (*cuCtxDestroy_v2_fn)(CUcontext ctx);
typedef CUresult (*cuCtxSynchronize_fn)(void);
typedef CUresult (*cuMemGetInfo_v2_fn)(size_t* free_bytes, size_t* total_bytes);
typedef CUresult (*cuMemAlloc_v2_fn)(CUdeviceptr* dptr, size_t bytes);
typedef CUresult (*cuMemFree_v2_fn)(CUdeviceptr dptr);
typedef CUresult (*cuMemAllocHost_v2_fn)(void** host, size_t bytes);
typedef CUresult (*cuMemFreeHost_fn)(void* host);
typedef CUresult (*cuMemcpyHtoD_v2_fn)(CUdeviceptr dst, const void* src, size_t bytes);
typedef CUresult (*cuMemcpyDtoH_v2_fn)(void* dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*cuMemcpyDtoD_v2_fn)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*cuModuleLoadDataEx_fn)(CUmodule* module, const void* image,
                                          unsigned int num_options, CUjit_option* options,
                                          void** option_values);
typedef CUresult (*cuModuleUnload_fn)(CUmodule module);
typedef CUresult (*cuModuleGetFunction_fn)(CUfunction* fn, CUmodule module, const char* name);
typedef CUresult (*cuLaunchKernel_fn)(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                      unsigned int grid_z, unsigned int block_x,
                                      unsigned int block_y, unsigned int block_z,
                                      unsigned int shared_mem_bytes, CUstream stream,
                                      void** kernel_params, void** extra);
typedef CUresult (*cuEventCreate_fn)(CUevent* event, unsigned int flags);
typedef CUresult (*cuEventRecord_fn)(CUevent event, CUstream stream);
typedef CUresult (*cuEventQuery_fn)(CUevent event);  // CUDA_ERROR_NOT_READY while pending
typedef CUresult (*cuEventElapsedTime_fn)(float* ms, CUevent start, CUevent end);
typedef CUresult (*cuEventDestroy_v2_fn)(CUevent event);

}  // extern "C"
