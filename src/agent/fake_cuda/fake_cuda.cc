// A stand-in for libcuda.so.1 that keeps "device" memory in host memory, so CudaDriver's
// dlopen/dlsym path and the conformance suite's GPU checks run in tests on machines without a
// GPU. Its kernels are the suite's own: it recognises sluice_conformance_hash and the speed
// check's sluice_perf_wmma and sluice_perf_fma (agent/gpu_perf.h) in the PTX it is given and
// computes the same results on the host, for the threads the launch asked for.
//
// It plays a GPU of a given speed: a speed-check kernel or a device-to-device copy occupies the
// device's timeline (g_free_at) for the time its work would take at FAKE_CUDA_TFLOPS /
// FAKE_CUDA_GBPS, and events are stamped on that timeline, so the agent times it as it would a
// real GPU.
//
// Read at every call, so a test can change them between checks:
//   FAKE_CUDA_DEVICES    how many devices (default 1)
//   FAKE_CUDA_PCI        comma-separated PCI bus ids by ordinal (default "0000:18:00.0",
//                        "0000:19:00.0", ...)
//   FAKE_CUDA_TOTAL_MIB  memory per device (default 81559)
//   FAKE_CUDA_CC         compute capability, "9.0" (default); below 7.0 the suite uses FMA
//   FAKE_CUDA_SMS        multiprocessors (default 132)
//   FAKE_CUDA_TFLOPS     matrix-multiply throughput the speed check sees (default 2500)
//   FAKE_CUDA_GBPS       device memory bandwidth, bytes read + written (default 10000)
//                        (the defaults are above every spec in data/gpu_specs.csv, so a fake GPU
//                        is only ever slow when a test says so)
//   FAKE_CUDA_FAIL       init | ctx | alloc | ptx | launch | wrong-result | corrupt | hang |
//                        counterfeit (the speed kernels do half their work and take half the
//                        time: fast, and wrong)
// Device i's UUID is GPU-5a1ce000-0000-0000-0000-0000000000ii (i in hex).
//
// Not CUDA entry points: fake_cuda_live_allocations() lets tests check that nothing leaked, and
// fake_cuda_reset() frees whatever is left.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/cuda_abi.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

struct CUctx_st {
  int device;
};
struct CUmod_st {
  bool has_hash, has_wmma, has_fma;
};
struct CUfunc_st {
  int unused;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded;
};

namespace {

std::mutex g_mu;
bool g_initialised = false;
std::map<uint64_t, size_t> g_device_allocs;  // address -> size
std::map<void*, size_t> g_host_allocs;
// Every live handle, so tests can count leaks and fake_cuda_reset() can reclaim them.
std::set<CUctx_st*> g_ctx_set;
std::set<CUmod_st*> g_modules;
std::set<CUevent_st*> g_events;
CUfunc_st g_kernel = {0};
CUfunc_st g_wmma_kernel = {0};
CUfunc_st g_fma_kernel = {0};
constexpr const char* kKernel = "sluice_conformance_hash";
// The speed check's kernels and their shape, as agent/gpu_perf.h defines them.
constexpr const char* kWmmaKernel = "sluice_perf_wmma";
constexpr const char* kFmaKernel = "sluice_perf_fma";
constexpr int kWmmaAccumulators = 8;
constexpr int kFmaChains = 8;
constexpr int kFmaUnroll = 4;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool Failing(const char* what) { return Env("FAKE_CUDA_FAIL") == what; }

int DeviceCount() {
  std::string v = Env("FAKE_CUDA_DEVICES");
  return v.empty() ? 1 : std::atoi(v.c_str());
}

double EnvNumber(const char* name, double fallback) {
  std::string v = Env(name);
  if (v.empty()) return fallback;
  double d = std::strtod(v.c_str(), nullptr);
  return d > 0 ? d : fallback;
}

// The device's timeline, as the real driver's stream would run it: work is queued, not waited
// for. A speed-check kernel or a device-to-device copy occupies the device for the time its work
// takes at the played speed, starting when the device is free; an event is stamped when the
// device reaches it; calls that synchronise (copies to or from the host, cuCtxSynchronize,
// frees) wait until the device is idle. So the agent's events see exactly the played speed,
// whatever the host's own cost of simulating the work. Guarded by g_mu.
std::chrono::steady_clock::time_point g_free_at;

// Queues `work` at `per_second` on the device, as if launched at `called` (when the call came
// in: the fake's own time spent computing the results is not the device's). Caller holds g_mu.
void Enqueue(std::chrono::steady_clock::time_point called, double work, double per_second) {
  const auto start = std::max(called, g_free_at);
  g_free_at = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(work / per_second));
}

// Returns once everything queued so far is done. Caller does not hold g_mu.
void WaitIdle() {
  std::chrono::steady_clock::time_point until;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    until = g_free_at;
  }
  std::this_thread::sleep_until(until);
}

// IEEE half to float, for the tiles the wmma kernel reads (normal numbers and zero suffice).
float HalfToFloat(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int frac = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(frac), -24);
  return sign * std::ldexp(1.0f + frac / 1024.0f, exp - 15);
}

uint64_t TotalBytes() {
  std::string v = Env("FAKE_CUDA_TOTAL_MIB");
  return (v.empty() ? 81559ull : std::strtoull(v.c_str(), nullptr, 10)) << 20;
}

std::string PciBusId(int ordinal) {
  std::string list = Env("FAKE_CUDA_PCI");
  if (!list.empty()) {
    std::vector<std::string> ids;
    size_t start = 0;
    for (;;) {
      size_t comma = list.find(',', start);
      ids.push_back(list.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (ordinal < static_cast<int>(ids.size())) return ids[ordinal];
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "0000:%02X:00.0", 0x18 + ordinal);
  return buf;
}

bool ValidDevice(CUdevice d) { return d >= 0 && d < DeviceCount(); }

// True when [p, p+n) lies inside one device allocation. Caller holds g_mu.
bool InDevice(CUdeviceptr p, size_t n) {
  auto it = g_device_allocs.upper_bound(p);
  if (it == g_device_allocs.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}

// Device-to-device copies not yet carried out. A copy only has to be done before anything
// reads or writes device memory, and the same copy repeated with nothing in between is done
// once: so a timed loop of copies costs the host one memmove, and the fake can play a memory
// system faster than the host's. Caller holds g_mu.
struct PendingCopy {
  CUdeviceptr dst, src;
  size_t bytes;
};
std::vector<PendingCopy> g_pending;

void FlushCopies() {
  for (const PendingCopy& c : g_pending) {
    std::memmove(reinterpret_cast<void*>(static_cast<uintptr_t>(c.dst)),
                 reinterpret_cast<const void*>(static_cast<uintptr_t>(c.src)), c.bytes);
  }
  g_pending.clear();
}

CUresult Ready() {
  if (!g_initialised) return CUDA_ERROR_NOT_INITIALIZED;
  return CUDA_SUCCESS;
}

CUresult ReadyWithContext() {
  if (!g_initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_ctx_set.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

uint32_t Hash(uint32_t in, uint32_t seed) {
  uint32_t x = in ^ seed;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

const char* NameOf(CUresult rc) {
  switch (rc) {
    case CUDA_SUCCESS:
      return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE:
      return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_PTX:
      return "CUDA_ERROR_INVALID_PTX";
    case CUDA_ERROR_INVALID_HANDLE:
      return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND:
      return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY:
      return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_LAUNCH_FAILED:
      return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_UNKNOWN:
      return "CUDA_ERROR_UNKNOWN";
    default:
      return nullptr;
  }
}

}  // namespace

EXPORT int fake_cuda_live_allocations() {
  std::lock_guard<std::mutex> lock(g_mu);
  return static_cast<int>(g_device_allocs.size() + g_host_allocs.size() + g_ctx_set.size() +
                          g_modules.size() + g_events.size());
}

// Frees every handle still alive, as process exit would with the real driver; for tests that
// leak on purpose (a hung kernel's context).
EXPORT int fake_cuda_reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pending.clear();
  for (const auto& [p, n] : g_device_allocs) std::free(reinterpret_cast<void*>(p));
  for (const auto& [p, n] : g_host_allocs) std::free(p);
  for (auto* c : g_ctx_set) delete c;
  for (auto* m : g_modules) delete m;
  for (auto* e : g_events) delete e;
  g_device_allocs.clear(), g_host_allocs.clear();
  g_ctx_set.clear(), g_modules.clear(), g_events.clear();
  return 0;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  const char* n = NameOf(error);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = n;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  switch (error) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      *text = "out of memory";
      return CUDA_SUCCESS;
    case CUDA_ERROR_LAUNCH_FAILED:
      *text = "unspecified launch failure";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *text = "no CUDA-capable device is detected";
      return CUDA_SUCCESS;
    default:
      break;
  }
  if (NameOf(error) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *text = "fake CUDA error";
  return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (Failing("init")) return CUDA_ERROR_NO_DEVICE;
  std::lock_guard<std::mutex> lock(g_mu);
  g_initialised = true;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 12040;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int* count) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  *count = DeviceCount();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU %d", dev);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::string id = PciBusId(dev);
  if (static_cast<int>(id.size()) + 1 > len) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(bus_id, id.c_str(), id.size() + 1);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const unsigned char bytes[16] = {0x5a, 0x1c, 0xe0, 0, 0, 0, 0, 0,
                                   0,    0,    0,    0, 0, 0, 0, static_cast<unsigned char>(dev)};
  std::memcpy(uuid->bytes, bytes, 16);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = TotalBytes();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: {
      std::string cc = Env("FAKE_CUDA_CC");
      if (cc.empty()) cc = "9.0";
      size_t dot = cc.find('.');
      *value = std::atoi(attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
                             ? cc.substr(0, dot).c_str()
                             : (dot == std::string::npos ? "0" : cc.substr(dot + 1).c_str()));
      return CUDA_SUCCESS;
    }
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = static_cast<int>(EnvNumber("FAKE_CUDA_SMS", 132));
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (flags != 0 || ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (Failing("ctx")) return CUDA_ERROR_UNKNOWN;
  *ctx = new CUctx_st{dev};
  g_ctx_set.insert(*ctx);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  WaitIdle();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_ctx_set.erase(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  delete ctx;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) {
  WaitIdle();
  std::lock_guard<std::mutex> lock(g_mu);
  return ReadyWithContext();
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  size_t used = 0;
  for (const auto& [p, n] : g_device_allocs) used += n;
  *total_bytes = TotalBytes();
  *free_bytes = *total_bytes > used ? *total_bytes - used : 0;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  if (bytes == 0 || dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Failing("alloc") || bytes > TotalBytes()) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = std::malloc(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *dptr = reinterpret_cast<uintptr_t>(p);
  g_device_allocs[*dptr] = bytes;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  WaitIdle();
  std::lock_guard<std::mutex> lock(g_mu);
  FlushCopies();
  auto it = g_device_allocs.find(dptr);
  if (it == g_device_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(static_cast<uintptr_t>(dptr)));
  g_device_allocs.erase(it);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void** host, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  void* p = std::malloc(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  g_host_allocs[p] = bytes;
  *host = p;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void* host) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_host_allocs.erase(host) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(host);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  WaitIdle();
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  if (!InDevice(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  FlushCopies();
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), src, bytes);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  WaitIdle();
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  if (!InDevice(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  FlushCopies();
  std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), bytes);
  if (Failing("corrupt") && bytes >= 8) static_cast<unsigned char*>(dst)[bytes / 2] ^= 0x10;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int num_options,
                                   CUjit_option* options, void** option_values) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* ptx = static_cast<const char*>(image);
  bool ok = std::strncmp(ptx, ".version ", 9) == 0 && std::strstr(ptx, ".target sm_") != nullptr &&
            !Failing("ptx");
  if (!ok) {
    char* log = nullptr;
    size_t size = 0;
    for (unsigned int i = 0; i < num_options; ++i) {
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER) log = static_cast<char*>(option_values[i]);
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
        size = reinterpret_cast<uintptr_t>(option_values[i]);
      }
    }
    if (log != nullptr && size > 0) {
      std::snprintf(log, size,
                    "ptxas application ptx input, line 1; error   : fake failure\n"
                    "ptxas fatal   : Ptx assembly aborted due to errors");
    }
    return CUDA_ERROR_INVALID_PTX;
  }
  auto has = [&](const char* name) {
    return std::strstr(ptx, (std::string(".entry ") + name + "(").c_str()) != nullptr;
  };
  *module = new CUmod_st{has(kKernel), has(kWmmaKernel), has(kFmaKernel)};
  g_modules.insert(*module);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule module) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_modules.erase(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete module;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  if (module == nullptr || fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module->has_hash && std::strcmp(name, kKernel) == 0) {
    *fn = &g_kernel;
  } else if (module->has_wmma && std::strcmp(name, kWmmaKernel) == 0) {
    *fn = &g_wmma_kernel;
  } else if (module->has_fma && std::strcmp(name, kFmaKernel) == 0) {
    *fn = &g_fma_kernel;
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

namespace {

// sluice_perf_wmma(u64 a, u64 b, u64 out, u32 iters): each warp stores 8 · iters · (A·B).
// Returns the flops the launch stands for. Caller holds g_mu.
CUresult WmmaKernel(void** params, uint64_t threads, double* flops) {
  CUdeviceptr a = *static_cast<CUdeviceptr*>(params[0]);
  CUdeviceptr b = *static_cast<CUdeviceptr*>(params[1]);
  CUdeviceptr out = *static_cast<CUdeviceptr*>(params[2]);
  uint32_t iters = *static_cast<uint32_t*>(params[3]);
  if (threads % 32 != 0) return CUDA_ERROR_INVALID_VALUE;  // wmma needs whole warps
  const uint64_t warps = threads / 32;
  if (!InDevice(a, 512) || !InDevice(b, 512) || !InDevice(out, warps * 1024)) {
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  auto* ha = reinterpret_cast<const uint16_t*>(static_cast<uintptr_t>(a));
  auto* hb = reinterpret_cast<const uint16_t*>(static_cast<uintptr_t>(b));
  float tile[256];
  // A counterfeit does half the accumulators' work.
  const double times = static_cast<double>(iters) *
                       (Failing("counterfeit") ? kWmmaAccumulators / 2 : kWmmaAccumulators);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double sum = 0;
      for (int k = 0; k < 16; ++k) sum += HalfToFloat(ha[i * 16 + k]) * HalfToFloat(hb[j * 16 + k]);
      tile[i * 16 + j] = static_cast<float>(sum * times);
    }
  }
  auto* dst = reinterpret_cast<float*>(static_cast<uintptr_t>(out));
  for (uint64_t w = 0; w < warps; ++w) std::memcpy(dst + w * 256, tile, sizeof tile);
  *flops = static_cast<double>(warps) * times * 2 * 16 * 16 * 16;
  return CUDA_SUCCESS;
}

// sluice_perf_fma(u64 out, u32 iters, f32 a, f32 b): every thread stores the sum of eight
// chains x_j = j advanced by fma(x, a, b) four times per iteration. Every thread computes the
// same, so one thread's chains are run and the result stored for all.
CUresult FmaKernel(void** params, uint64_t threads, double* flops) {
  CUdeviceptr out = *static_cast<CUdeviceptr*>(params[0]);
  uint32_t iters = *static_cast<uint32_t*>(params[1]);
  float a = *static_cast<float*>(params[2]);
  float b = *static_cast<float*>(params[3]);
  if (!InDevice(out, threads * 4)) return CUDA_ERROR_LAUNCH_FAILED;
  if (Failing("counterfeit")) iters /= 2;
  float sum = 0;
  for (int j = 0; j < kFmaChains; ++j) {
    float x = static_cast<float>(j);
    for (uint64_t i = 0; i < uint64_t{iters} * kFmaUnroll; ++i) x = std::fma(x, a, b);
    sum += x;
  }
  auto* dst = reinterpret_cast<float*>(static_cast<uintptr_t>(out));
  for (uint64_t t = 0; t < threads; ++t) dst[t] = sum;
  *flops = static_cast<double>(threads) * iters * kFmaChains * kFmaUnroll * 2;
  return CUDA_SUCCESS;
}

}  // namespace

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                               unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                               unsigned int block_z, unsigned int shared_mem_bytes, CUstream stream,
                               void** params, void** extra) {
  const auto called = std::chrono::steady_clock::now();
  double flops = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
    if ((f != &g_kernel && f != &g_wmma_kernel && f != &g_fma_kernel) || params == nullptr ||
        extra != nullptr || stream != nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (grid_x == 0 || grid_y != 1 || grid_z != 1 || block_x == 0 || block_x > 1024 ||
        block_y != 1 || block_z != 1 || shared_mem_bytes != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (Failing("launch")) return CUDA_ERROR_LAUNCH_FAILED;
    FlushCopies();
    const uint64_t threads = uint64_t{grid_x} * block_x;
    if (f == &g_wmma_kernel || f == &g_fma_kernel) {
      CUresult rc = f == &g_wmma_kernel ? WmmaKernel(params, threads, &flops)
                                        : FmaKernel(params, threads, &flops);
      if (rc != CUDA_SUCCESS) return rc;
      Enqueue(called, flops, EnvNumber("FAKE_CUDA_TFLOPS", 2500) * 1e12);
      return CUDA_SUCCESS;
    } else {
      // The hash kernel's parameters, in PTX order: u64 in, u64 out, u32 n, u32 seed.
      CUdeviceptr in = *static_cast<CUdeviceptr*>(params[0]);
      CUdeviceptr out = *static_cast<CUdeviceptr*>(params[1]);
      uint32_t n = *static_cast<uint32_t*>(params[2]);
      uint32_t seed = *static_cast<uint32_t*>(params[3]);
      uint64_t count = n < threads ? n : threads;
      if (!InDevice(in, count * 4) || !InDevice(out, count * 4)) return CUDA_ERROR_LAUNCH_FAILED;
      auto* src = reinterpret_cast<const uint32_t*>(static_cast<uintptr_t>(in));
      auto* dst = reinterpret_cast<uint32_t*>(static_cast<uintptr_t>(out));
      for (uint64_t i = 0; i < count; ++i) dst[i] = Hash(src[i], seed);
      if (Failing("wrong-result") && count > 0) dst[count / 2] ^= 1;
      return CUDA_SUCCESS;
    }
  }
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  const auto called = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(g_mu);
  {
    if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
    if (!InDevice(dst, bytes) || !InDevice(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    const bool same = !g_pending.empty() && g_pending.back().dst == dst &&
                      g_pending.back().src == src && g_pending.back().bytes == bytes;
    if (!same) g_pending.push_back({dst, src, bytes});
  }
  Enqueue(called, 2.0 * static_cast<double>(bytes), EnvNumber("FAKE_CUDA_GBPS", 10000) * 1e9);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (CUresult rc = ReadyWithContext(); rc != CUDA_SUCCESS) return rc;
  if (event == nullptr || flags != CU_EVENT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  *event = new CUevent_st{{}, false};
  g_events.insert(*event);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (event == nullptr || stream != nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(g_mu);
  event->at = std::max(std::chrono::steady_clock::now(), g_free_at);
  event->recorded = true;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventQuery(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (Failing("hang")) return CUDA_ERROR_NOT_READY;
  std::lock_guard<std::mutex> lock(g_mu);
  if (event->recorded && std::chrono::steady_clock::now() < event->at) return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (start == nullptr || end == nullptr || ms == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_events.erase(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete event;
  return CUDA_SUCCESS;
}
