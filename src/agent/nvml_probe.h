// NvmlGpuProbe: asks the NVIDIA driver directly through NVML, loaded with dlopen at run time so
// one sluice binary runs on GPU and CPU-only hosts alike (DESIGN.md §9).
#pragma once

#include <string>

#include "agent/probe.h"

namespace sluice {

inline constexpr const char* kDefaultNvmlLibrary = "libnvidia-ml.so.1";

// Each Probe() loads the library, initialises NVML, reads every device and shuts NVML down
// again, so nothing stays loaded between probes. Not thread-safe against other NVML users in
// the same process (nvmlInit/nvmlShutdown are reference counted by NVML, but the agent has
// only one caller).
class NvmlGpuProbe : public GpuProbe {
 public:
  explicit NvmlGpuProbe(std::string library = kDefaultNvmlLibrary) : library_(std::move(library)) {}

  // Unavailable: the library cannot be loaded, lacks a required entry point, or nvmlInit fails
  // (no driver). Optional entry points that are missing or NOT_SUPPORTED leave their field
  // unknown (serial, MIG mode "N/A", compute capability, VBIOS, power limit, CUDA version).
  Result<ProbedGpus> Probe() override;

 private:
  const std::string library_;
};

}  // namespace sluice
