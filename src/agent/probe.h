// GpuProbe: the seam between the agent and whatever tells it which GPUs a machine has (NVML,
// the nvidia-smi binary, a recorded file, or a fake in tests). Probes never throw; every expected
// failure is a Status so the agent can fall back to the next source.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/inventory.h"
#include "common/status.h"

namespace sluice {

// What one GPU source reports. Host facts (CPU, memory, disk) live in Inventory, not here.
struct ProbedGpus {
  std::string driver_version;  // "565.57.01"; empty when the source does not say
  std::string cuda_version;    // highest CUDA the driver supports, "12.7"; empty when unknown
  std::vector<GpuInfo> gpus;   // index i is GPU i in minor-number order

  bool operator==(const ProbedGpus&) const = default;
};

class GpuProbe {
 public:
  virtual ~GpuProbe();
  // Unavailable: this source does not exist on the machine (no library, no binary); the caller
  // should try the next one. InvalidArgument: the source answered with something unparseable.
  virtual Result<ProbedGpus> Probe() = 0;
};

// Reads a recorded `nvidia-smi -q` or `nvidia-smi -q -x` output. Lets a provider preview an
// inventory, and tests exercise real outputs, on a machine without a GPU.
class FileGpuProbe : public GpuProbe {
 public:
  explicit FileGpuProbe(std::string path) : path_(std::move(path)) {}
  // NotFound when the file cannot be read; InvalidArgument naming the file on a parse error.
  Result<ProbedGpus> Probe() override;

 private:
  const std::string path_;
};

// A probe with the name it is reported under in Inventory::gpu_source.
struct NamedGpuProbe {
  std::string source;  // "nvml", "nvidia-smi", ...
  std::unique_ptr<GpuProbe> probe;
};

struct GpuProbeOutcome {
  std::string source;  // the NamedGpuProbe::source that answered, or "none"
  ProbedGpus probed;   // empty when source is "none"
  // One line per source that was tried and failed, in order ("nvml: UNAVAILABLE: ..."), so an
  // operator can see why the agent fell back.
  std::vector<std::string> attempts;
};

// Tries each probe in order and returns the first success. A failure of any kind moves on to the
// next source: a machine whose NVML is broken but whose nvidia-smi works should still be offered.
// With no success the outcome is empty with source "none" (a CPU-only host is not an error).
GpuProbeOutcome ProbeGpusWith(std::vector<NamedGpuProbe> probes);

// The agent's default chain: NVML (library from $SLUICE_NVML_LIBRARY, else libnvidia-ml.so.1),
// then `nvidia-smi -q -x` (binary from $SLUICE_NVIDIA_SMI, else nvidia-smi on PATH).
GpuProbeOutcome ProbeGpus();

}  // namespace sluice
