#include "agent/probe.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "agent/nvidia_smi_parser.h"
#include "agent/nvidia_smi_probe.h"
#include "agent/nvml_probe.h"

namespace sluice {

GpuProbe::~GpuProbe() = default;

Result<ProbedGpus> FileGpuProbe::Probe() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Status::NotFound(path_ + ": cannot open");
  std::string data;
  // Read at most one byte past the limit so a huge file is refused without loading it whole.
  data.resize(kMaxNvidiaSmiBytes + 1);
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (in.bad()) return Status::NotFound(path_ + ": read error");
  data.resize(static_cast<size_t>(in.gcount()));
  auto parsed = ParseNvidiaSmi(data);
  if (!parsed.ok()) return Status(parsed.status().code(), path_ + ": " + parsed.status().message());
  return parsed;
}

GpuProbeOutcome ProbeGpusWith(std::vector<NamedGpuProbe> probes) {
  GpuProbeOutcome out;
  for (auto& p : probes) {
    if (!p.probe) continue;
    auto r = p.probe->Probe();
    if (r.ok()) {
      out.source = p.source;
      out.probed = std::move(r).value();
      return out;
    }
    out.attempts.push_back(p.source + ": " + r.status().ToString());
  }
  out.source = "none";
  return out;
}

GpuProbeOutcome ProbeGpus() {
  const char* lib = std::getenv("SLUICE_NVML_LIBRARY");
  const char* smi = std::getenv("SLUICE_NVIDIA_SMI");
  std::vector<NamedGpuProbe> chain;
  chain.push_back(
      {"nvml", std::make_unique<NvmlGpuProbe>(lib && *lib ? lib : kDefaultNvmlLibrary)});
  chain.push_back(
      {"nvidia-smi", std::make_unique<NvidiaSmiGpuProbe>(smi && *smi ? smi : "nvidia-smi")});
  return ProbeGpusWith(std::move(chain));
}

}  // namespace sluice
