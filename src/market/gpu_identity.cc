#include "market/gpu_identity.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "common/text.h"
#include "market/gpu_labels.h"
#include "market/pci_ids_data.h"

namespace sluice::market {
namespace {

constexpr uint32_t kNvidia = 0x10de;

struct SupplementRow {
  uint32_t device = 0;     // the device id alone (0x2335)
  uint32_t subsystem = 0;  // NVML encoding; 0 matches any
  std::string name;
  int memory_gb = 0;  // 0: the memory the GPU reports
  std::string form;   // sxm, pcie, nvl, superchip, maxq, workstation, server or ""
};

struct Tables {
  std::vector<SupplementRow> supplement;
  std::map<uint32_t, std::string> pci_ids;  // NVIDIA device id → its pci.ids name
};

// A 16-bit id of the tables ("10de", "2335"); 0 when it is not one.
uint32_t HexField(std::string_view s) {
  const std::string t = Trim(s);
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 16);
  return t.empty() || ec != std::errc() || end != t.data() + t.size() || v > 0xffff ? 0 : v;
}

// "PCIe workstation" → "pcie"; what the supplement's form column says, in label words.
std::string FormWord(std::string_view column) {
  std::string first = ToLower(Trim(column));
  first = first.substr(0, first.find(' '));
  for (const char* known : {"sxm", "pcie", "nvl", "superchip", "maxq", "workstation", "server"}) {
    if (first == known) return first;
  }
  return "";
}

Tables BuildTables() {
  Tables t;
  std::vector<std::string> lines = Split(kPciSupplementCsv, '\n');
  std::map<std::string, int> col;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (Trim(lines[n]).empty()) continue;
    std::vector<std::string> f = CsvFields(lines[n]);
    if (col.empty()) {
      for (size_t i = 0; i < f.size(); ++i) col[Trim(f[i])] = static_cast<int>(i);
      continue;
    }
    auto field = [&](const char* name) -> std::string {
      auto c = col.find(name);
      return c != col.end() && c->second < static_cast<int>(f.size()) ? Trim(f[c->second]) : "";
    };
    SupplementRow r;
    if (HexField(field("vendor_id")) != kNvidia) continue;
    r.device = HexField(field("device_id"));
    const uint32_t sub_vendor = HexField(field("subsystem_vendor_id"));
    const uint32_t sub_device = HexField(field("subsystem_device_id"));
    if (sub_vendor != 0 && sub_device != 0) r.subsystem = (sub_device << 16) | sub_vendor;
    r.name = field("name");
    const std::string memory = field("memory_gb");
    r.memory_gb = memory.empty() ? 0 : std::atoi(memory.c_str());
    r.form = FormWord(field("form_factor"));
    if (r.device != 0 && !r.name.empty()) t.supplement.push_back(std::move(r));
  }
  // pci.ids: "\t2216  GA102 [GeForce RTX 3080 Lite Hash Rate]" (one tab: a device; two: a
  // subsystem, whose names are boards, not GPUs).
  for (const std::string& line : Split(kPciIdsNvidia, '\n')) {
    if (line.size() < 8 || line[0] != '\t' || line[1] == '\t' || line.substr(5, 2) != "  ") {
      continue;
    }
    if (uint32_t device = HexField(line.substr(1, 4)); device != 0) {
      t.pci_ids[device] = Trim(line.substr(7));
    }
  }
  return t;
}

const Tables& GetTables() {
  static const Tables* const kTables = new Tables(BuildTables());
  return *kTables;
}

// The model part of a label ("rtx3080-10gb" → "rtx3080").
std::string ModelOf(const std::string& label) { return label.substr(0, label.rfind('-')); }

// The GPU a pci.ids name gives: the text in brackets, without the words that name a revision
// rather than a GPU ("Lite Hash Rate", "Rev. A"), and where it lists alternatives ("L6000 / RTX
// 6000 Ada Generation") the one the product name agrees with, else the first. "" when the name
// is a chip only ("GH100").
std::string PciIdsGpuName(const std::string& entry, std::string_view product_name) {
  const size_t open = entry.find('[');
  const size_t close = entry.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  std::string inner = entry.substr(open + 1, close - open - 1);
  for (const char* noise : {" Lite Hash Rate", " Rev. A", " LHR"}) {
    if (size_t at = inner.find(noise); at != std::string::npos) {
      inner.erase(at, std::string_view(noise).size());
    }
  }
  std::vector<std::string> alternatives;
  for (const auto& a : Split(inner, '/')) {
    if (!Trim(a).empty()) alternatives.push_back(Trim(a));
  }
  if (alternatives.empty()) return "";
  const std::string product_model = ModelOf(CanonicalGpuLabel(product_name, 1024));
  for (const auto& a : alternatives) {
    if (ModelOf(CanonicalGpuLabel(a, 1024)) == product_model) return a;
  }
  return alternatives.front();
}

GpuIdentity Named(std::string name, uint64_t memory_mib, int memory_gb, std::string form,
                  std::string from) {
  GpuIdentity id;
  // The table's memory, where it states one, over what a MIG slice or a vGPU profile reports.
  const uint64_t mib = memory_gb > 0 ? static_cast<uint64_t>(memory_gb) * 1024 : memory_mib;
  id.label = CanonicalGpuLabel(name, mib);
  id.form_factor = FormFactor(name);
  if (id.form_factor.empty()) id.form_factor = std::move(form);
  id.name = std::move(name);
  id.named_from = std::move(from);
  return id;
}

}  // namespace

GpuIdentity IdentifyGpu(std::string_view product_name, uint64_t memory_mib, uint32_t pci_device_id,
                        uint32_t pci_subsystem_id) {
  const std::string product = Trim(product_name);
  // A vGPU reports its parent's device id with a slice of its memory: the product name ("GRID
  // P4-1Q") is the only thing that says it is a slice.
  const bool vgpu = ToLower(product).starts_with("grid ");
  if (!vgpu && (pci_device_id & 0xffff) == kNvidia) {
    const uint32_t device = pci_device_id >> 16;
    const Tables& t = GetTables();
    const SupplementRow* any = nullptr;
    for (const auto& r : t.supplement) {
      if (r.device != device) continue;
      if (r.subsystem != 0 && r.subsystem == pci_subsystem_id) {
        return Named(r.name, memory_mib, r.memory_gb, r.form, "pci-supplement");
      }
      if (r.subsystem == 0 && any == nullptr) any = &r;
    }
    if (any != nullptr)
      return Named(any->name, memory_mib, any->memory_gb, any->form, "pci-supplement");
    if (auto e = t.pci_ids.find(device); e != t.pci_ids.end()) {
      if (std::string name = PciIdsGpuName(e->second, product); !name.empty()) {
        return Named(std::move(name), memory_mib, 0, "", "pci.ids");
      }
    }
  }
  return Named(product, memory_mib, 0, "", "product-name");
}

GpuIdentity IdentifyGpu(const GpuInfo& gpu) {
  return IdentifyGpu(gpu.name, gpu.memory_mib, gpu.pci_device_id, gpu.pci_subsystem_id);
}

std::vector<std::string> SupplementLabels() {
  std::vector<std::string> out;
  for (const auto& r : GetTables().supplement) {
    if (r.memory_gb > 0) out.push_back(CanonicalGpuLabel(r.name, uint64_t(r.memory_gb) * 1024));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace sluice::market
