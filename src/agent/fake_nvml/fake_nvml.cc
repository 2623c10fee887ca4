// A stand-in for libnvidia-ml.so.1 with canned data for two H100 SXM5 GPUs, so NvmlGpuProbe's
// dlopen/dlsym path runs in tests on machines without a GPU. Values are those of the first two
// GPUs in tests/fixtures/nvidia-smi/h100-sxm5-80gb-1.txt, except that GPU 1 has MIG enabled and
// a 699.5 W limit so the probe's MIG and milliwatt-rounding paths run too. Built twice:
// FAKE_NVML_MINIMAL leaves out every optional entry point, to test that their absence means
// "unknown", not failure.
//
// Env FAKE_NVML_INIT_FAIL=1 makes nvmlInit_v2 fail as it does when no driver is loaded.
#include <cstdlib>
#include <cstring>

#include "agent/nvml_abi.h"

struct nvmlDevice_st {
  const char* name;
  const char* uuid;
  const char* bus_id;
  const char* serial;
  const char* vbios;
  unsigned long long memory_bytes;
  unsigned int mig_mode;
  unsigned int power_mw;
  unsigned int pci_device_id;  // as the recorded H100 SXM5 reports it (tests/fixtures)
  unsigned int pci_subsystem_id;
};

namespace {

nvmlDevice_st kDevices[2] = {
    {"NVIDIA H100 80GB HBM3", "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1", "00000000:18:00.0",
     "1654423001593", "96.00.74.00.01", 81559ull << 20, NVML_DEVICE_MIG_DISABLE, 700000, 0x233010DE,
     0x16C110DE},
    {"NVIDIA H100 80GB HBM3", "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd", "00000000:2A:00.0",
     "1654223054577", "96.00.74.00.01", 81559ull << 20, NVML_DEVICE_MIG_ENABLE, 699500, 0x233010DE,
     0x16C110DE},
};
int g_initialised = 0;

nvmlReturn_t CopyString(const char* s, char* buf, unsigned int len) {
  if (buf == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, s, std::strlen(s) + 1);
  return NVML_SUCCESS;
}

bool Valid(nvmlDevice_t d) { return g_initialised > 0 && (d == &kDevices[0] || d == &kDevices[1]); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) {
  const char* fail = std::getenv("FAKE_NVML_INIT_FAIL");
  if (fail != nullptr && *fail == '1') return NVML_ERROR_DRIVER_NOT_LOADED;
  ++g_initialised;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown(void) {
  if (g_initialised == 0) return NVML_ERROR_UNINITIALIZED;
  --g_initialised;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* v,
                                                                               unsigned int n) {
  if (g_initialised == 0) return NVML_ERROR_UNINITIALIZED;
  return CopyString("565.57.01", v, n);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (g_initialised == 0) return NVML_ERROR_UNINITIALIZED;
  *count = 2;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i,
                                                                                  nvmlDevice_t* d) {
  if (g_initialised == 0) return NVML_ERROR_UNINITIALIZED;
  if (i >= 2) return NVML_ERROR_INVALID_ARGUMENT;
  *d = &kDevices[i];
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* b,
                                                                      unsigned int n) {
  return Valid(d) ? CopyString(d->name, b, n) : NVML_ERROR_INVALID_ARGUMENT;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* b,
                                                                      unsigned int n) {
  return Valid(d) ? CopyString(d->uuid, b, n) : NVML_ERROR_INVALID_ARGUMENT;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d,
                                                                            nvmlMemory_t* m) {
  if (!Valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
  m->total = d->memory_bytes;
  m->used = 1ull << 20;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_MINIMAL

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t rc) {
  return rc == NVML_ERROR_DRIVER_NOT_LOADED ? "Driver Not Loaded" : "Unknown Error";
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  if (g_initialised == 0) return NVML_ERROR_UNINITIALIZED;
  *v = 12070;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d,
                                                                            nvmlPciInfo_t* p) {
  if (!Valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(p, 0, sizeof *p);
  std::strncpy(p->busId, d->bus_id, sizeof p->busId - 1);
  std::strncpy(p->busIdLegacy, d->bus_id + 4, sizeof p->busIdLegacy - 1);
  p->pciDeviceId = d->pci_device_id;
  p->pciSubSystemId = d->pci_subsystem_id;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char* b,
                                                                        unsigned int n) {
  return Valid(d) ? CopyString(d->serial, b, n) : NVML_ERROR_INVALID_ARGUMENT;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d,
                                                                         unsigned int* current,
                                                                         unsigned int* pending) {
  if (!Valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = d->mig_mode;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCudaComputeCapability(
    nvmlDevice_t d, int* major, int* minor) {
  if (!Valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
  *major = 9;
  *minor = 0;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d,
                                                                              char* b,
                                                                              unsigned int n) {
  return Valid(d) ? CopyString(d->vbios, b, n) : NVML_ERROR_INVALID_ARGUMENT;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerManagementLimit(
    nvmlDevice_t d, unsigned int* mw) {
  if (!Valid(d)) return NVML_ERROR_INVALID_ARGUMENT;
  *mw = d->power_mw;
  return NVML_SUCCESS;
}

#endif  // FAKE_NVML_MINIMAL

}  // extern "C"
