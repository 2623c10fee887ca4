// PCI id tables compiled in at build time (see CMakeLists.txt): the project's supplement of newer
// NVIDIA device ids and the NVIDIA section of Debian's pci.ids.
#pragma once

#include <string_view>

namespace sluice::market {

extern const std::string_view kPciSupplementCsv;  // data/nvidia_pci_supplement.csv
extern const std::string_view kPciIdsNvidia;      // pci.ids lines under "10de  NVIDIA Corporation"
extern const std::string_view kPciIdsVersion;     // "# Version: 2023.04.10"

}  // namespace sluice::market
