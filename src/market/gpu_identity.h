// Which GPU a device is (issue 13 item 1): named from its PCI ids first, then from its product
// name. A driver older than the card names it "Graphics Device"; a superchip's name gives the
// module's memory; a workstation card's name runs to seven words. The PCI device id says which
// GPU it is whatever the driver prints.
//
// Tables, both compiled in: the project's supplement of newer NVIDIA device ids
// (data/nvidia_pci_supplement.csv, each row cited; consulted first, with subsystem ids where
// one device id covers several cards) and Debian's pci.ids (a 2023 snapshot; consulted next).
//
// Thread safety: safe to call concurrently (the tables are built once, on first use).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/inventory.h"

namespace sluice::market {

struct GpuIdentity {
  std::string label;        // canonical label, as CanonicalGpuLabel makes them
  std::string form_factor;  // sxm, pcie, nvl, superchip, maxq, workstation, server, or ""
  std::string name;         // the name the label was made from
  // Where the name came from: "pci-supplement", "pci.ids" or "product-name".
  std::string named_from;
};

// `pci_device_id` and `pci_subsystem_id` in NVML's encoding, as nvidia-smi prints them:
// (device << 16) | vendor, e.g. 0x233010DE; 0 when unknown (zeroed or redacted ids are 0).
// `memory_mib` is the framebuffer total the GPU reports.
GpuIdentity IdentifyGpu(std::string_view product_name, uint64_t memory_mib,
                        uint32_t pci_device_id = 0, uint32_t pci_subsystem_id = 0);

// The same for a probed GPU.
GpuIdentity IdentifyGpu(const GpuInfo& gpu);

// Every label the supplement produces (the registry knows them; gpu_labels.cc).
std::vector<std::string> SupplementLabels();

}  // namespace sluice::market
