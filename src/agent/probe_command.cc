#include "agent/probe_command.h"

#include <cstdio>

#include "agent/host_info.h"
#include "common/inventory.h"
#include "common/json.h"

namespace sluice {
namespace {

std::string OrUnknown(const std::string& s) { return s.empty() ? "unknown" : s; }

std::string Gib(uint64_t mib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(mib) / 1024.0);
  return buf;
}

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

void PrintSummary(const Inventory& inv, std::ostream& out) {
  out << "host:    " << OrUnknown(inv.hostname) << "\n"
      << "os:      " << OrUnknown(inv.os) << " (kernel " << OrUnknown(inv.kernel) << ", "
      << OrUnknown(inv.arch) << ")\n"
      << "cpu:     " << OrUnknown(inv.cpu_model) << ", " << inv.cpu_cores << " logical cores\n"
      << "memory:  " << Gib(inv.memory_mib) << "\n"
      << "disk:    " << Gib(inv.disk_free_mib) << " free in the data directory\n"
      << "gpus:    " << inv.gpus.size() << " (source: " << inv.gpu_source << ")";
  if (!inv.gpus.empty() || !inv.driver_version.empty()) {
    out << ", driver " << OrUnknown(inv.driver_version) << ", CUDA " << OrUnknown(inv.cuda_version);
  }
  out << "\n";
  for (const GpuInfo& g : inv.gpus) {
    out << "  [" << g.index << "] " << g.name << ", " << Gib(g.memory_mib) << ", " << g.uuid
        << ", MIG " << (g.mig_mode.empty() ? "N/A" : g.mig_mode) << "\n";
  }
  out << "toolkit: "
      << (inv.cuda_toolkits.empty() ? "no CUDA toolkit found" : "CUDA " + Join(inv.cuda_toolkits))
      << "\n";
  out << "python:  ";
  if (inv.python_version.empty()) {
    out << "no python3 found\n";
  } else {
    out << inv.python_version << ", "
        << (inv.torch_builds.empty() ? "no PyTorch" : "PyTorch " + Join(inv.torch_builds)) << "\n";
  }
}

}  // namespace

int ProbeCommand(const std::string& from_nvidia_smi_file, bool json, std::ostream& out,
                 std::ostream& err) {
  ProbeOptions opts;
  opts.nvidia_smi_file = from_nvidia_smi_file;
  Result<Inventory> inv = TryProbeHost(opts);
  if (!inv.ok()) {
    // The status message already starts with the file name.
    err << "sluice probe: cannot use nvidia-smi output " << inv.status().message() << "\n";
    return 1;
  }
  if (json) {
    out << DumpJson(ToJson(*inv), 2) << "\n";
  } else {
    PrintSummary(*inv, out);
  }
  return 0;
}

}  // namespace sluice
