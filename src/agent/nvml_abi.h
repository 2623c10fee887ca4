// The slice of NVML's public C ABI that the probe uses, declared here because Debian main ships
// no NVML headers. Layouts and values follow nvml.h as published by NVIDIA; they are part of a
// stable ABI (versioned entry points such as _v2/_v3 exist precisely so these never change).
// Used by nvml_probe.cc (dlsym) and by the fake library in fake_nvml/ (definitions).
#pragma once

extern "C" {

typedef int nvmlReturn_t;  // an enum in nvml.h; an int in every supported ABI
typedef struct nvmlDevice_st* nvmlDevice_t;

enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_UNKNOWN = 999,
};

enum : unsigned int { NVML_DEVICE_MIG_DISABLE = 0, NVML_DEVICE_MIG_ENABLE = 1 };

typedef struct nvmlMemory_st {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE; "00000000:18:00.0"
} nvmlPciInfo_t;

// Entry points, as function pointer types for dlsym.
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_fn)(char*, unsigned int);
typedef nvmlReturn_t (*nvmlSystemGetCudaDriverVersion_v2_fn)(int*);  // 12070 means 12.7
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int*);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*nvmlDeviceGetPciInfo_v3_fn)(nvmlDevice_t, nvmlPciInfo_t*);
typedef nvmlReturn_t (*nvmlDeviceGetSerial_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetMigMode_fn)(nvmlDevice_t, unsigned int* current,
                                                unsigned int* pending);
typedef nvmlReturn_t (*nvmlDeviceGetCudaComputeCapability_fn)(nvmlDevice_t, int* major, int* minor);
typedef nvmlReturn_t (*nvmlDeviceGetVbiosVersion_fn)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetPowerManagementLimit_fn)(nvmlDevice_t,
                                                             unsigned int* milliwatts);

}  // extern "C"
