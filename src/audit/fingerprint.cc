#include "audit/fingerprint.h"

#include <algorithm>
#include <tuple>

#include "common/crypto.h"
#include "common/json.h"
#include "common/text.h"

namespace sluice::audit {
namespace {

// Placeholders probes report for a field the card does not have.
std::string Clean(std::string_view v) {
  std::string t = Trim(v);
  std::string lower = ToLower(t);
  if (lower == "n/a" || lower == "[n/a]" || lower == "not supported" ||
      lower == "[not supported]") {
    return "";
  }
  return t;
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

Fingerprint Seal(const Json& doc) {
  // nlohmann::json objects are std::maps: keys come out sorted; indent -1 means no whitespace.
  Fingerprint f;
  f.canonical_json = DumpJson(doc);
  f.sha256 = Sha256Hex(f.canonical_json);
  return f;
}

}  // namespace

Fingerprint HardwareFingerprint(const Inventory& inv) {
  struct Gpu {
    std::string uuid, pci_bus_id, serial, name;
    uint64_t memory_mib;
    auto Key() const { return std::tie(uuid, pci_bus_id, serial, name, memory_mib); }
  };
  std::vector<Gpu> gpus;
  for (const GpuInfo& g : inv.gpus) {
    gpus.push_back(Gpu{Clean(g.uuid), ToLower(Clean(g.pci_bus_id)), Clean(g.serial), Trim(g.name),
                       g.memory_mib});
  }
  std::sort(gpus.begin(), gpus.end(), [](const Gpu& a, const Gpu& b) { return a.Key() < b.Key(); });
  Json gj = Json::array();
  for (const Gpu& g : gpus) {
    gj.push_back(Json{{"uuid", g.uuid},
                      {"pci_bus_id", g.pci_bus_id},
                      {"serial", g.serial},
                      {"name", g.name},
                      {"memory_mib", g.memory_mib}});
  }
  uint64_t memory_gib = (inv.memory_mib + 512) / 1024;
  return Seal(Json{{"scheme", "hardware/v1"},
                   {"gpus", gj},
                   {"cpu_model", Trim(inv.cpu_model)},
                   {"cpu_cores", inv.cpu_cores},
                   {"memory_gib", memory_gib},
                   {"board", Trim(inv.board)},
                   {"arch", Trim(inv.arch)}});
}

Fingerprint SoftwareFingerprint(const Inventory& inv) {
  return Seal(Json{{"scheme", "software/v1"},
                   {"driver_version", Trim(inv.driver_version)},
                   {"cuda_version", Trim(inv.cuda_version)},
                   {"cuda_toolkits", Sorted(inv.cuda_toolkits)},
                   {"python_version", Trim(inv.python_version)},
                   {"torch_builds", Sorted(inv.torch_builds)},
                   {"container_runtimes", Sorted(inv.container_runtimes)},
                   {"os", Trim(inv.os)}});
}

}  // namespace sluice::audit
