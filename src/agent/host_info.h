// Host facts the agent publishes: who the machine is, what it runs, and how much CPU, memory and
// disk a job can have. The /proc and /etc readers are split into pure parse functions over
// strings so they are tested with canned text from other machines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/inventory.h"
#include "common/status.h"

namespace sluice {

struct ProbeOptions {
  std::string data_dir = ".";   // disk_free_mib is measured on the filesystem holding this
  std::string nvidia_smi_file;  // when set, GPUs come from this recorded output
  bool skip_gpus = false;       // no GPU probing at all (gpu_source "none")
  bool skip_software = false;   // no toolkit/Python/PyTorch probing (they are reported empty)
};

// Fills every field; never fails. An unreadable fact is left empty/zero, and GPU probing falls
// back through NVML, nvidia-smi and "none". A bad nvidia_smi_file yields no GPUs; callers that
// must report it use TryProbeHost.
Inventory ProbeHost(const ProbeOptions& opts);

// As ProbeHost, but a set nvidia_smi_file that cannot be read or parsed is an error (NotFound or
// InvalidArgument, message naming the file) rather than an empty GPU list.
Result<Inventory> TryProbeHost(const ProbeOptions& opts);

// PRETTY_NAME from os-release(5) text, unquoted ("Debian GNU/Linux 12 (bookworm)"); empty when
// absent.
std::string ParseOsReleasePrettyName(std::string_view os_release);

// The CPU model from /proc/cpuinfo text: "model name" (x86), else "Model" or "Hardware"
// (Arm/Raspberry Pi), else "cpu" (POWER). Empty when none is present.
std::string ParseCpuModel(std::string_view cpuinfo);

// MemTotal from /proc/meminfo text, in MiB. InvalidArgument when absent or malformed.
Result<uint64_t> ParseMemTotalMib(std::string_view meminfo);

// The machine's DMI identity from the four /sys/class/dmi/id values: "<sys_vendor>
// <product_name>", then " / <board_vendor> <board_name>" when the baseboard says something the
// product does not ("Dell Inc. PowerEdge R750xa / Dell Inc. 0PJ5NY"). Values are trimmed and
// firmware placeholders ("To Be Filled By O.E.M.", "Default string", "System Product Name", ...)
// are dropped: they name no machine. Empty when nothing is left.
std::string FormatDmiBoard(std::string_view sys_vendor, std::string_view product_name,
                           std::string_view board_vendor, std::string_view board_name);

// FormatDmiBoard over the files in `dmi_dir`; a missing or unreadable file counts as empty.
std::string ProbeDmiBoard(const std::string& dmi_dir = "/sys/class/dmi/id");

// Number of logical CPUs this process may run on (affinity mask, else online CPUs).
int AvailableCpuCores();

}  // namespace sluice
