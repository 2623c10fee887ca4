// CudaDriver: the CUDA driver API (libcuda), loaded with dlopen at run time so one sluice binary
// runs on GPU and CPU-only hosts alike, and so tests can load a fake (fake_cuda/). Only what the
// conformance suite needs: device discovery and the calls behind its GPU memory and compute
// checks. The raw entry points are exposed through api(); Check() turns a CUresult into a Status
// that names the call and the driver's own error name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cuda_abi.h"
#include "common/status.h"

namespace sluice {

inline constexpr const char* kDefaultCudaLibrary = "libcuda.so.1";

// Resolved entry points. Every one is non-null after Load() except those marked optional.
struct CudaApi {
  cuInit_fn init = nullptr;
  cuDriverGetVersion_fn driver_version = nullptr;
  cuDeviceGetCount_fn device_count = nullptr;
  cuDeviceGet_fn device_get = nullptr;
  cuDeviceGetName_fn device_name = nullptr;
  cuDeviceGetPCIBusId_fn device_pci_bus_id = nullptr;
  cuDeviceTotalMem_v2_fn device_total_mem = nullptr;
  cuCtxCreate_v2_fn ctx_create = nullptr;
  cuCtxDestroy_v2_fn ctx_destroy = nullptr;
  cuCtxSynchronize_fn ctx_synchronize = nullptr;
  cuMemAlloc_v2_fn mem_alloc = nullptr;
  cuMemFree_v2_fn mem_free = nullptr;
  cuMemcpyHtoD_v2_fn memcpy_htod = nullptr;
  cuMemcpyDtoH_v2_fn memcpy_dtoh = nullptr;
  cuMemcpyDtoD_v2_fn memcpy_dtod = nullptr;
  cuModuleLoadDataEx_fn module_load_data_ex = nullptr;
  cuModuleUnload_fn module_unload = nullptr;
  cuModuleGetFunction_fn module_get_function = nullptr;
  cuLaunchKernel_fn launch_kernel = nullptr;
  cuEventCreate_fn event_create = nullptr;
  cuEventRecord_fn event_record = nullptr;
  cuEventQuery_fn event_query = nullptr;
  cuEventElapsedTime_fn event_elapsed_time = nullptr;
  cuEventDestroy_v2_fn event_destroy = nullptr;
  // optional
  cuGetErrorName_fn error_name = nullptr;
  cuGetErrorString_fn error_string = nullptr;
  cuDeviceGetUuid_fn device_uuid = nullptr;  // cuDeviceGetUuid_v2, else cuDeviceGetUuid
  cuDeviceGetAttribute_fn device_attribute = nullptr;
  cuMemGetInfo_v2_fn mem_get_info = nullptr;
  cuMemAllocHost_v2_fn mem_alloc_host = nullptr;  // with mem_free_host; else pageable copies
  cuMemFreeHost_fn mem_free_host = nullptr;
};

// One CUDA device as the driver enumerates it. CUDA ordinals need not follow NVML indices
// (CUDA_DEVICE_ORDER defaults to fastest first, and CUDA_VISIBLE_DEVICES renumbers), so callers
// match devices by PCI bus id or UUID, never by ordinal.
struct CudaDevice {
  int ordinal = 0;
  CUdevice handle = 0;
  std::string name;
  std::string pci_bus_id;  // as CUDA prints it: "0000:17:00.0"
  std::string uuid;        // NVML style, "GPU-8f3c2a1b-...", empty when the driver cannot say
  uint64_t total_bytes = 0;
  int cc_major = 0;  // compute capability; 0 when unknown
  int cc_minor = 0;
  int multiprocessors = 0;  // 0 when unknown
};

class CudaDriver {
 public:
  // Loads the library and resolves the entry points. NotFound when the library does not exist
  // (the usual CPU-only host); Unavailable when it exists but cannot be loaded or lacks a
  // required entry point. The library is never unloaded (RTLD_NODELETE): libcuda starts threads
  // that must not lose their code, and the agent loads it again on every suite run.
  static Result<std::unique_ptr<CudaDriver>> Load(const std::string& path = kDefaultCudaLibrary);
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  const CudaApi& api() const { return api_; }
  const std::string& path() const { return path_; }

  // "CUDA_ERROR_OUT_OF_MEMORY" (cuGetErrorName), or "CUDA error 2" when the driver cannot name it.
  std::string ErrorName(CUresult rc) const;
  // Ok for CUDA_SUCCESS, else Internal "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  Status Check(CUresult rc, std::string_view call) const;

  // cuInit(0). Idempotent in the driver.
  Status Init() const;
  // cuDriverGetVersion: 12040 means CUDA 12.4.
  Result<int> DriverVersion() const;
  // Every device the driver shows this process. After Init().
  Result<std::vector<CudaDevice>> Devices() const;

 private:
  CudaDriver(void* lib, std::string path) : lib_(lib), path_(std::move(path)) {}
  void* lib_;
  std::string path_;
  CudaApi api_;
};

// True when two PCI bus ids name the same function; the domain may have 4 (CUDA) or 8 (NVML)
// hex digits and case is ignored. False when either is malformed.
bool SamePciBusId(std::string_view a, std::string_view b);
// True when two GPU UUIDs are equal, ignoring a "GPU-" prefix, dashes and case.
bool SameGpuUuid(std::string_view a, std::string_view b);
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi print UUIDs.
std::string FormatGpuUuid(const CUuuid& uuid);

}  // namespace sluice
