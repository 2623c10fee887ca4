#include "agent/cuda_driver.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <type_traits>

namespace sluice {
namespace {

// Large enough for any PCI bus id ("0000:17:00.0" needs 13) and device name (CUDA uses 256).
constexpr int kBuf = 256;

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

struct PciAddress {
  unsigned long domain = 0, bus = 0, device = 0, function = 0;
};

// "DDDD:BB:DD.F" with a domain of 4 (CUDA) or 8 (NVML) hex digits; strict, so junk never
// matches anything.
bool ParsePci(std::string_view s, PciAddress& out) {
  unsigned long* fields[] = {&out.domain, &out.bus, &out.device, &out.function};
  const char seps[] = {':', ':', '.', '\0'};
  const size_t max_digits[] = {8, 2, 2, 1};
  size_t pos = 0;
  for (int f = 0; f < 4; ++f) {
    size_t digits = 0;
    unsigned long v = 0;
    while (pos < s.size() && std::isxdigit(static_cast<unsigned char>(s[pos]))) {
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[pos])));
      v = v * 16 + static_cast<unsigned long>(c <= '9' ? c - '0' : c - 'a' + 10);
      ++pos, ++digits;
    }
    if (digits == 0 || digits > max_digits[f]) return false;
    *fields[f] = v;
    if (seps[f] == '\0') return pos == s.size();
    if (pos >= s.size() || s[pos] != seps[f]) return false;
    ++pos;
  }
  return false;
}

std::string UuidHex(std::string_view s) {
  if (s.size() >= 4 && (s.substr(0, 4) == "GPU-" || s.substr(0, 4) == "gpu-")) s.remove_prefix(4);
  std::string hex;
  for (char c : s) {
    if (c == '-') continue;
    hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return hex;
}

}  // namespace

Result<std::unique_ptr<CudaDriver>> CudaDriver::Load(const std::string& path) {
  dlerror();  // clear any stale error so the message below is ours
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* e = dlerror();
    std::string why = e != nullptr ? e : "unknown error";
    if (why.find("No such file") != std::string::npos) {
      return Status::NotFound(path + " not found");
    }
    return Status::Unavailable("cannot load " + path + ": " + why);
  }
  std::unique_ptr<CudaDriver> d(new CudaDriver(lib, path));
  CudaApi& a = d->api_;
  std::string missing;
  auto req = [&](auto& slot, const char* name) {
    slot = Symbol<std::remove_reference_t<decltype(slot)>>(lib, name);
    if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  req(a.init, "cuInit");
  req(a.driver_version, "cuDriverGetVersion");
  req(a.device_count, "cuDeviceGetCount");
  req(a.device_get, "cuDeviceGet");
  req(a.device_name, "cuDeviceGetName");
  req(a.device_pci_bus_id, "cuDeviceGetPCIBusId");
  req(a.device_total_mem, "cuDeviceTotalMem_v2");
  req(a.ctx_create, "cuCtxCreate_v2");
  req(a.ctx_destroy, "cuCtxDestroy_v2");
  req(a.ctx_synchronize, "cuCtxSynchronize");
  req(a.mem_alloc, "cuMemAlloc_v2");
  req(a.mem_free, "cuMemFree_v2");
  req(a.memcpy_htod, "cuMemcpyHtoD_v2");
  req(a.memcpy_dtoh, "cuMemcpyDtoH_v2");
  req(a.memcpy_dtod, "cuMemcpyDtoD_v2");
  req(a.module_load_data_ex, "cuModuleLoadDataEx");
  req(a.module_unload, "cuModuleUnload");
  req(a.module_get_function, "cuModuleGetFunction");
  req(a.launch_kernel, "cuLaunchKernel");
  req(a.event_create, "cuEventCreate");
  req(a.event_record, "cuEventRecord");
  req(a.event_query, "cuEventQuery");
  req(a.event_elapsed_time, "cuEventElapsedTime");
  req(a.event_destroy, "cuEventDestroy_v2");
  if (!missing.empty()) {
    return Status::Unavailable(path + ": not a usable CUDA driver, missing " + missing);
  }
  a.error_name = Symbol<cuGetErrorName_fn>(lib, "cuGetErrorName");
  a.error_string = Symbol<cuGetErrorString_fn>(lib, "cuGetErrorString");
  a.device_uuid = Symbol<cuDeviceGetUuid_fn>(lib, "cuDeviceGetUuid_v2");
  if (a.device_uuid == nullptr) a.device_uuid = Symbol<cuDeviceGetUuid_fn>(lib, "cuDeviceGetUuid");
  a.device_attribute = Symbol<cuDeviceGetAttribute_fn>(lib, "cuDeviceGetAttribute");
  a.mem_get_info = Symbol<cuMemGetInfo_v2_fn>(lib, "cuMemGetInfo_v2");
  a.mem_alloc_host = Symbol<cuMemAllocHost_v2_fn>(lib, "cuMemAllocHost_v2");
  a.mem_free_host = Symbol<cuMemFreeHost_fn>(lib, "cuMemFreeHost");
  if (a.mem_alloc_host == nullptr || a.mem_free_host == nullptr) {
    a.mem_alloc_host = nullptr;
    a.mem_free_host = nullptr;
  }
  return d;
}

CudaDriver::~CudaDriver() {
  // RTLD_NODELETE keeps the code mapped; this only drops our reference.
  if (lib_ != nullptr) dlclose(lib_);
}

std::string CudaDriver::ErrorName(CUresult rc) const {
  const char* name = nullptr;
  if (api_.error_name != nullptr && api_.error_name(rc, &name) == CUDA_SUCCESS && name != nullptr) {
    return name;
  }
  return "CUDA error " + std::to_string(rc);
}

Status CudaDriver::Check(CUresult rc, std::string_view call) const {
  if (rc == CUDA_SUCCESS) return Status::Ok();
  std::string msg = std::string(call) + ": " + ErrorName(rc);
  const char* text = nullptr;
  if (api_.error_string != nullptr && api_.error_string(rc, &text) == CUDA_SUCCESS &&
      text != nullptr) {
    msg += std::string(" (") + text + ")";
  }
  return Status::Internal(msg);
}

Status CudaDriver::Init() const { return Check(api_.init(0), "cuInit"); }

Result<int> CudaDriver::DriverVersion() const {
  int v = 0;
  SLUICE_RETURN_IF_ERROR(Check(api_.driver_version(&v), "cuDriverGetVersion"));
  return v;
}

Result<std::vector<CudaDevice>> CudaDriver::Devices() const {
  int count = 0;
  SLUICE_RETURN_IF_ERROR(Check(api_.device_count(&count), "cuDeviceGetCount"));
  if (count < 0 || count > 1024) {
    return Status::Internal("cuDeviceGetCount reports " + std::to_string(count) + " devices");
  }
  std::vector<CudaDevice> out;
  for (int i = 0; i < count; ++i) {
    CudaDevice d;
    d.ordinal = i;
    SLUICE_RETURN_IF_ERROR(Check(api_.device_get(&d.handle, i), "cuDeviceGet"));
    char buf[kBuf] = {};
    if (api_.device_name(buf, kBuf, d.handle) == CUDA_SUCCESS) {
      buf[kBuf - 1] = '\0';
      d.name = buf;
    }
    char bus[kBuf] = {};
    SLUICE_RETURN_IF_ERROR(
        Check(api_.device_pci_bus_id(bus, kBuf, d.handle), "cuDeviceGetPCIBusId"));
    bus[kBuf - 1] = '\0';
    d.pci_bus_id = bus;
    size_t total = 0;
    SLUICE_RETURN_IF_ERROR(Check(api_.device_total_mem(&total, d.handle), "cuDeviceTotalMem_v2"));
    d.total_bytes = total;
    if (api_.device_uuid != nullptr) {
      CUuuid u = {};
      if (api_.device_uuid(&u, d.handle) == CUDA_SUCCESS) d.uuid = FormatGpuUuid(u);
    }
    if (api_.device_attribute != nullptr) {
      auto attr = [&](CUdevice_attribute a) {
        int v = 0;
        return api_.device_attribute(&v, a, d.handle) == CUDA_SUCCESS ? v : 0;
      };
      d.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
      d.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
      d.multiprocessors = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    }
    out.push_back(std::move(d));
  }
  return out;
}

bool SamePciBusId(std::string_view a, std::string_view b) {
  PciAddress x, y;
  if (!ParsePci(a, x) || !ParsePci(b, y)) return false;
  return x.domain == y.domain && x.bus == y.bus && x.device == y.device && x.function == y.function;
}

bool SameGpuUuid(std::string_view a, std::string_view b) {
  std::string x = UuidHex(a), y = UuidHex(b);
  return !x.empty() && x == y;
}

std::string FormatGpuUuid(const CUuuid& uuid) {
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    out += hex;
  }
  return out;
}

}  // namespace sluice
