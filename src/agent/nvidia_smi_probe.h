// NvidiaSmiGpuProbe: runs `nvidia-smi -q -x` and parses its output. The fallback for hosts whose
// NVML cannot be loaded by us (containers that mount only the binary, unusual library paths).
#pragma once

#include <chrono>
#include <string>

#include "agent/probe.h"

namespace sluice {

class NvidiaSmiGpuProbe : public GpuProbe {
 public:
  // `binary` is a path, or a bare name looked up in $PATH. nvidia-smi can hang for tens of
  // seconds when the driver is wedged; the timeout keeps the agent's startup bounded.
  explicit NvidiaSmiGpuProbe(std::string binary = "nvidia-smi",
                             std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : binary_(std::move(binary)), timeout_(timeout) {}

  // Unavailable: binary absent or not executable, or it exited non-zero (no driver).
  // DeadlineExceeded: it ran past the timeout and was killed. InvalidArgument: bad output.
  Result<ProbedGpus> Probe() override;

 private:
  const std::string binary_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace sluice
