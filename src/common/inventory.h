// Inventory: what a probe found on one machine. The agent fills it from NVML / nvidia-smi /
// /proc; the server stores it and derives offers from it. Labels are never taken from a
// provider's claim: the server derives them from `name` and `memory_mib` here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace sluice {

struct GpuInfo {
  int index = 0;            // NVML / nvidia-smi minor order; what CUDA_VISIBLE_DEVICES uses
  std::string uuid;         // "GPU-8f3c..."
  std::string name;         // product name as reported: "NVIDIA H100 80GB HBM3"
  uint64_t memory_mib = 0;  // total framebuffer memory
  std::string pci_bus_id;   // "00000000:17:00.0"
  // PCI ids in NVML's encoding, (device << 16) | vendor: 0x233010DE is NVIDIA's device 0x2330
  // (nvmlPciInfo_t.pciDeviceId / pciSubSystemId, nvidia-smi "Device Id" / "Sub System Id").
  // 0 when unknown (hypervisors zero them; published outputs redact them). The server names
  // the GPU from them first (market/gpu_identity.h).
  uint32_t pci_device_id = 0;
  uint32_t pci_subsystem_id = 0;
  std::string serial;              // may be empty (consumer cards report N/A)
  std::string mig_mode;            // "Enabled", "Disabled" or "N/A"
  std::string compute_capability;  // "9.0" when known, else empty
  std::string vbios_version;
  int power_limit_w = 0;  // 0 when unknown

  bool operator==(const GpuInfo&) const = default;
};

// "0x233010DE" (any case, with or without 0x) → 0x233010DE; 0 for anything else, including ids
// whose device or vendor half is zero ("0x000000DE", "[REDACTED]", "N/A").
uint32_t ParsePciId(std::string_view text);
// `id` when both halves are set, else 0 (a hypervisor's zeroed id is no id).
uint32_t UsablePciId(uint32_t id);

struct Inventory {
  std::string hostname;
  std::string os;      // PRETTY_NAME from /etc/os-release
  std::string kernel;  // uname -r
  std::string arch;    // uname -m
  // DMI identity of the machine, "<sys_vendor> <product_name> / <board_vendor> <board_name>"
  // (/sys/class/dmi/id); empty where the firmware exposes none (Arm boards, most containers).
  std::string board;
  std::string cpu_model;
  int cpu_cores = 0;           // logical CPUs available to this process
  uint64_t memory_mib = 0;     // MemTotal
  uint64_t disk_free_mib = 0;  // free space where jobs run (the agent's data dir)
  std::string driver_version;  // "550.54.15"; empty with no GPU
  std::string cuda_version;    // highest CUDA the driver supports: "12.4"; empty with no GPU
  std::string gpu_source;      // "nvml", "nvidia-smi", "nvidia-smi-file" or "none"
  std::vector<GpuInfo> gpus;
  // Software a job can use, probed on the machine (agent/software_probe.h), never claimed.
  std::vector<std::string> cuda_toolkits;  // installed toolkits, "12.1", "11.8": newest first
  std::string python_version;              // python3 on the agent's PATH, "3.11.2"; empty if none
  std::vector<std::string> torch_builds;   // torch.__version__ as reported: "2.1.0+cu121", "2.0.1"
  // Container runtimes on the agent's PATH, "<name> <version>": "docker 24.0.7", "podman 4.3.1".
  std::vector<std::string> container_runtimes;
  // How the agent boxes jobs: "bwrap" (agent/sandbox.h), "bwrap-open-network" (boxed, but the
  // network filter could not be installed: --allow-unfiltered-network) or "none" (started with
  // --no-sandbox: jobs see what the agent sees). Empty from agents older than the sandbox.
  std::string sandbox;

  bool operator==(const Inventory&) const = default;
};

Json ToJson(const GpuInfo& gpu);
Json ToJson(const Inventory& inv);
// Strict: wrong types are errors naming the field ("inventory.gpus[1].memory_mib: ...").
Result<GpuInfo> GpuInfoFromJson(const Json& j, std::string_view path);
Result<Inventory> InventoryFromJson(const Json& j, std::string_view path = "inventory");

}  // namespace sluice
