#include "common/inventory.h"

#include <charconv>

#include "common/text.h"

namespace sluice {

uint32_t UsablePciId(uint32_t id) { return (id >> 16) == 0 || (id & 0xffff) == 0 ? 0 : id; }

uint32_t ParsePciId(std::string_view text) {
  std::string t = ToLower(Trim(text));
  if (t.starts_with("0x")) t = t.substr(2);
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 16);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) return 0;
  return UsablePciId(v);
}

Json ToJson(const GpuInfo& g) {
  return Json{{"index", g.index},
              {"uuid", g.uuid},
              {"name", g.name},
              {"memory_mib", g.memory_mib},
              {"pci_bus_id", g.pci_bus_id},
              {"pci_device_id", g.pci_device_id},
              {"pci_subsystem_id", g.pci_subsystem_id},
              {"serial", g.serial},
              {"mig_mode", g.mig_mode},
              {"compute_capability", g.compute_capability},
              {"vbios_version", g.vbios_version},
              {"power_limit_w", g.power_limit_w}};
}

Json ToJson(const Inventory& inv) {
  Json gpus = Json::array();
  for (const auto& g : inv.gpus) gpus.push_back(ToJson(g));
  return Json{{"hostname", inv.hostname},
              {"os", inv.os},
              {"kernel", inv.kernel},
              {"arch", inv.arch},
              {"board", inv.board},
              {"cpu_model", inv.cpu_model},
              {"cpu_cores", inv.cpu_cores},
              {"memory_mib", inv.memory_mib},
              {"disk_free_mib", inv.disk_free_mib},
              {"driver_version", inv.driver_version},
              {"cuda_version", inv.cuda_version},
              {"gpu_source", inv.gpu_source},
              {"gpus", gpus},
              {"cuda_toolkits", inv.cuda_toolkits},
              {"python_version", inv.python_version},
              {"sandbox", inv.sandbox},
              {"torch_builds", inv.torch_builds},
              {"container_runtimes", inv.container_runtimes}};
}

namespace {

// An optional array of strings: absent or null is empty (inventories from older agents).
Result<std::vector<std::string>> GetStringListOr(const Json& j, std::string_view key,
                                                 std::string_view path, size_t max_items) {
  std::vector<std::string> out;
  auto it = j.find(std::string(key));
  if (it == j.end() || it->is_null()) return out;
  std::string field = std::string(path) + "." + std::string(key);
  if (!it->is_array()) {
    return Status::InvalidArgument(field + ": expected an array, got " + it->type_name());
  }
  if (it->size() > max_items) {
    return Status::InvalidArgument(field + ": more than " + std::to_string(max_items) + " entries");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& e = (*it)[i];
    if (!e.is_string()) {
      return Status::InvalidArgument(field + "[" + std::to_string(i) +
                                     "]: expected a string, got " + e.type_name());
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

Result<GpuInfo> GpuInfoFromJson(const Json& j, std::string_view path) {
  GpuInfo g;
  SLUICE_ASSIGN_OR_RETURN(int64_t index, GetInt(j, "index", path));
  if (index < 0 || index > 1024) {
    return Status::InvalidArgument(std::string(path) + ".index: out of range");
  }
  g.index = static_cast<int>(index);
  SLUICE_ASSIGN_OR_RETURN(g.uuid, GetStringOr(j, "uuid", "", path));
  SLUICE_ASSIGN_OR_RETURN(g.name, GetString(j, "name", path));
  SLUICE_ASSIGN_OR_RETURN(int64_t mem, GetInt(j, "memory_mib", path));
  if (mem < 0) return Status::InvalidArgument(std::string(path) + ".memory_mib: negative");
  g.memory_mib = static_cast<uint64_t>(mem);
  SLUICE_ASSIGN_OR_RETURN(g.pci_bus_id, GetStringOr(j, "pci_bus_id", "", path));
  // Absent from agents older than issue 13: unknown.
  for (auto [key, field] : {std::pair{"pci_device_id", &g.pci_device_id},
                            std::pair{"pci_subsystem_id", &g.pci_subsystem_id}}) {
    SLUICE_ASSIGN_OR_RETURN(int64_t id, GetIntOr(j, key, 0, path));
    if (id < 0 || id > 0xffffffffLL) {
      return Status::InvalidArgument(std::string(path) + "." + key + ": not a 32-bit PCI id");
    }
    *field = static_cast<uint32_t>(id);
  }
  SLUICE_ASSIGN_OR_RETURN(g.serial, GetStringOr(j, "serial", "", path));
  SLUICE_ASSIGN_OR_RETURN(g.mig_mode, GetStringOr(j, "mig_mode", "N/A", path));
  SLUICE_ASSIGN_OR_RETURN(g.compute_capability, GetStringOr(j, "compute_capability", "", path));
  SLUICE_ASSIGN_OR_RETURN(g.vbios_version, GetStringOr(j, "vbios_version", "", path));
  SLUICE_ASSIGN_OR_RETURN(int64_t pl, GetIntOr(j, "power_limit_w", 0, path));
  g.power_limit_w = static_cast<int>(pl);
  return g;
}

Result<Inventory> InventoryFromJson(const Json& j, std::string_view path) {
  if (!j.is_object()) return Status::InvalidArgument(std::string(path) + ": expected an object");
  Inventory inv;
  SLUICE_ASSIGN_OR_RETURN(inv.hostname, GetStringOr(j, "hostname", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.os, GetStringOr(j, "os", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.kernel, GetStringOr(j, "kernel", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.arch, GetStringOr(j, "arch", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.board, GetStringOr(j, "board", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.cpu_model, GetStringOr(j, "cpu_model", "", path));
  SLUICE_ASSIGN_OR_RETURN(int64_t cores, GetInt(j, "cpu_cores", path));
  if (cores < 0 || cores > 1'000'000) {
    return Status::InvalidArgument(std::string(path) + ".cpu_cores: out of range");
  }
  inv.cpu_cores = static_cast<int>(cores);
  SLUICE_ASSIGN_OR_RETURN(int64_t mem, GetInt(j, "memory_mib", path));
  if (mem < 0) return Status::InvalidArgument(std::string(path) + ".memory_mib: negative");
  inv.memory_mib = static_cast<uint64_t>(mem);
  SLUICE_ASSIGN_OR_RETURN(int64_t disk, GetIntOr(j, "disk_free_mib", 0, path));
  if (disk < 0) return Status::InvalidArgument(std::string(path) + ".disk_free_mib: negative");
  inv.disk_free_mib = static_cast<uint64_t>(disk);
  SLUICE_ASSIGN_OR_RETURN(inv.driver_version, GetStringOr(j, "driver_version", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.cuda_version, GetStringOr(j, "cuda_version", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.gpu_source, GetStringOr(j, "gpu_source", "none", path));
  if (j.contains("gpus") && !j["gpus"].is_null()) {
    if (!j["gpus"].is_array()) {
      return Status::InvalidArgument(std::string(path) + ".gpus: expected an array");
    }
    if (j["gpus"].size() > 1024) {
      return Status::InvalidArgument(std::string(path) + ".gpus: more than 1024 GPUs");
    }
    int i = 0;
    for (const auto& gj : j["gpus"]) {
      std::string p = std::string(path) + ".gpus[" + std::to_string(i++) + "]";
      SLUICE_ASSIGN_OR_RETURN(GpuInfo g, GpuInfoFromJson(gj, p));
      inv.gpus.push_back(std::move(g));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(inv.cuda_toolkits, GetStringListOr(j, "cuda_toolkits", path, 64));
  SLUICE_ASSIGN_OR_RETURN(inv.python_version, GetStringOr(j, "python_version", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.sandbox, GetStringOr(j, "sandbox", "", path));
  SLUICE_ASSIGN_OR_RETURN(inv.torch_builds, GetStringListOr(j, "torch_builds", path, 64));
  SLUICE_ASSIGN_OR_RETURN(inv.container_runtimes,
                          GetStringListOr(j, "container_runtimes", path, 16));
  return inv;
}

}  // namespace sluice
