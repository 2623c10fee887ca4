#include "agent/nvml_probe.h"

#include <dlfcn.h>

#include <memory>

#include "agent/nvml_abi.h"

namespace sluice {
namespace {

// Buffer for NVML string getters: larger than every NVML_*_BUFFER_SIZE (the largest is 96).
constexpr unsigned int kBuf = 256;

struct DlCloser {
  void operator()(void* h) const { dlclose(h); }
};

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

// Resolved entry points. Required ones are non-null after Load(); optional ones may be null.
struct Nvml {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlSystemGetDriverVersion_fn driver_version = nullptr;
  nvmlDeviceGetCount_v2_fn count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn handle = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetUUID_fn uuid = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory = nullptr;
  // optional
  nvmlErrorString_fn error_string = nullptr;
  nvmlSystemGetCudaDriverVersion_v2_fn cuda_version = nullptr;
  nvmlDeviceGetPciInfo_v3_fn pci = nullptr;
  nvmlDeviceGetSerial_fn serial = nullptr;
  nvmlDeviceGetMigMode_fn mig = nullptr;
  nvmlDeviceGetCudaComputeCapability_fn cc = nullptr;
  nvmlDeviceGetVbiosVersion_fn vbios = nullptr;
  nvmlDeviceGetPowerManagementLimit_fn power = nullptr;

  std::string Error(nvmlReturn_t rc) const {
    std::string s = "NVML error " + std::to_string(rc);
    if (error_string != nullptr) {
      if (const char* m = error_string(rc)) s += std::string(" (") + m + ")";
    }
    return s;
  }
};

Status Load(void* lib, const std::string& path, Nvml& n) {
  std::string missing;
  auto req = [&](auto& slot, const char* name) {
    slot = Symbol<std::remove_reference_t<decltype(slot)>>(lib, name);
    if (slot == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  req(n.init, "nvmlInit_v2");
  req(n.shutdown, "nvmlShutdown");
  req(n.driver_version, "nvmlSystemGetDriverVersion");
  req(n.count, "nvmlDeviceGetCount_v2");
  req(n.handle, "nvmlDeviceGetHandleByIndex_v2");
  req(n.name, "nvmlDeviceGetName");
  req(n.uuid, "nvmlDeviceGetUUID");
  req(n.memory, "nvmlDeviceGetMemoryInfo");
  if (!missing.empty()) {
    return Status::Unavailable(path + ": not a usable NVML library, missing " + missing);
  }
  using E = nvmlErrorString_fn;
  n.error_string = Symbol<E>(lib, "nvmlErrorString");
  n.cuda_version =
      Symbol<nvmlSystemGetCudaDriverVersion_v2_fn>(lib, "nvmlSystemGetCudaDriverVersion_v2");
  n.pci = Symbol<nvmlDeviceGetPciInfo_v3_fn>(lib, "nvmlDeviceGetPciInfo_v3");
  n.serial = Symbol<nvmlDeviceGetSerial_fn>(lib, "nvmlDeviceGetSerial");
  n.mig = Symbol<nvmlDeviceGetMigMode_fn>(lib, "nvmlDeviceGetMigMode");
  n.cc = Symbol<nvmlDeviceGetCudaComputeCapability_fn>(lib, "nvmlDeviceGetCudaComputeCapability");
  n.vbios = Symbol<nvmlDeviceGetVbiosVersion_fn>(lib, "nvmlDeviceGetVbiosVersion");
  n.power = Symbol<nvmlDeviceGetPowerManagementLimit_fn>(lib, "nvmlDeviceGetPowerManagementLimit");
  return Status::Ok();
}

// Calls a string getter; empty on any failure. NUL-terminates even if the library does not.
template <typename Fn, typename... Args>
std::string GetString(Fn fn, Args... args) {
  if (fn == nullptr) return "";
  char buf[kBuf] = {};
  if (fn(args..., buf, kBuf) != NVML_SUCCESS) return "";
  buf[kBuf - 1] = '\0';
  return buf;
}

Result<GpuInfo> ReadDevice(const Nvml& n, unsigned int i) {
  std::string where = "NVML device " + std::to_string(i) + ": ";
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t rc = n.handle(i, &dev);
  if (rc != NVML_SUCCESS) return Status::Unavailable(where + "get handle: " + n.Error(rc));
  GpuInfo g;
  g.index = static_cast<int>(i);
  g.name = GetString(n.name, dev);
  g.uuid = GetString(n.uuid, dev);
  if (g.name.empty() || g.uuid.empty()) {
    return Status::Unavailable(where + "no name or UUID (GPU lost or not permitted?)");
  }
  nvmlMemory_t mem = {};
  rc = n.memory(dev, &mem);
  if (rc != NVML_SUCCESS) return Status::Unavailable(where + "memory info: " + n.Error(rc));
  g.memory_mib = mem.total / (1024 * 1024);

  if (n.pci != nullptr) {
    nvmlPciInfo_t pci = {};
    if (n.pci(dev, &pci) == NVML_SUCCESS) {
      pci.busId[sizeof(pci.busId) - 1] = '\0';
      g.pci_bus_id = pci.busId;
      g.pci_device_id = UsablePciId(pci.pciDeviceId);
      g.pci_subsystem_id = UsablePciId(pci.pciSubSystemId);
    }
  }
  g.serial = GetString(n.serial, dev);
  g.mig_mode = "N/A";  // also what nvidia-smi prints on GPUs without MIG
  if (n.mig != nullptr) {
    unsigned int current = 0, pending = 0;
    if (n.mig(dev, &current, &pending) == NVML_SUCCESS) {
      g.mig_mode = current == NVML_DEVICE_MIG_ENABLE ? "Enabled" : "Disabled";
    }
  }
  if (n.cc != nullptr) {
    int major = 0, minor = 0;
    if (n.cc(dev, &major, &minor) == NVML_SUCCESS && major > 0) {
      g.compute_capability = std::to_string(major) + "." + std::to_string(minor);
    }
  }
  g.vbios_version = GetString(n.vbios, dev);
  if (n.power != nullptr) {
    unsigned int mw = 0;
    if (n.power(dev, &mw) == NVML_SUCCESS) g.power_limit_w = static_cast<int>((mw + 500) / 1000);
  }
  return g;
}

}  // namespace

Result<ProbedGpus> NvmlGpuProbe::Probe() {
  dlerror();  // clear any stale error so the message below is ours
  std::unique_ptr<void, DlCloser> lib(dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!lib) {
    const char* e = dlerror();
    return Status::Unavailable("cannot load " + library_ + ": " + (e ? e : "unknown error"));
  }
  Nvml n;
  SLUICE_RETURN_IF_ERROR(Load(lib.get(), library_, n));
  nvmlReturn_t rc = n.init();
  if (rc != NVML_SUCCESS) return Status::Unavailable("nvmlInit_v2: " + n.Error(rc));

  // Everything after a successful init runs in this lambda so shutdown happens on every path.
  auto read_all = [&]() -> Result<ProbedGpus> {
    ProbedGpus out;
    out.driver_version = GetString(n.driver_version);
    if (n.cuda_version != nullptr) {
      int v = 0;
      if (n.cuda_version(&v) == NVML_SUCCESS && v > 0) {
        out.cuda_version = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
      }
    }
    unsigned int count = 0;
    nvmlReturn_t c = n.count(&count);
    if (c != NVML_SUCCESS) return Status::Unavailable("nvmlDeviceGetCount_v2: " + n.Error(c));
    if (count > 1024) return Status::Internal("NVML reports " + std::to_string(count) + " GPUs");
    for (unsigned int i = 0; i < count; ++i) {
      SLUICE_ASSIGN_OR_RETURN(GpuInfo g, ReadDevice(n, i));
      out.gpus.push_back(std::move(g));
    }
    return out;
  };
  Result<ProbedGpus> result = read_all();
  n.shutdown();
  return result;
}

}  // namespace sluice
