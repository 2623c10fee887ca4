#include "agent/nvidia_smi_parser.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <pugixml.hpp>
#include <string>
#include <vector>

#include "common/text.h"

namespace sluice {
namespace {

constexpr size_t kMaxGpus = 1024;  // same bound Inventory accepts from JSON

Status Invalid(std::string_view format, std::string message) {
  return Status::InvalidArgument(std::string(format) + ": " + std::move(message));
}

// Rejects what no real nvidia-smi prints, before any parsing: oversized input, invalid UTF-8
// (which would otherwise leak into names and JSON) and control bytes such as NUL.
Status CheckBytes(std::string_view in, std::string_view format) {
  if (in.empty()) return Invalid(format, "empty input");
  if (in.size() > kMaxNvidiaSmiBytes) {
    return Invalid(format, "input is " + std::to_string(in.size()) + " bytes, more than the " +
                               std::to_string(kMaxNvidiaSmiBytes) + " accepted");
  }
  size_t bad = FirstInvalidUtf8(in);
  if (bad != std::string_view::npos) {
    return Invalid(format, "invalid UTF-8 at byte " + std::to_string(bad));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return Invalid(format, std::string("control byte ") + hex + " at byte " + std::to_string(i));
    }
  }
  return Status::Ok();
}

// nvidia-smi spells "no value" several ways depending on the driver generation.
bool IsNotAvailable(std::string_view v) {
  return v.empty() || v == "N/A" || v.front() == '[' || v == "Unknown Error" ||
         v == "Not Supported";
}

std::optional<uint64_t> ParseUint(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "81559 MiB" -> 81559.
Result<uint64_t> ParseMib(std::string_view v, std::string_view what) {
  std::string t = Trim(v);
  constexpr std::string_view kUnit = " MiB";
  if (t.size() <= kUnit.size() || std::string_view(t).substr(t.size() - kUnit.size()) != kUnit) {
    return Status::InvalidArgument(std::string(what) + ": expected \"<n> MiB\", got \"" + t + "\"");
  }
  auto n = ParseUint(std::string_view(t).substr(0, t.size() - kUnit.size()));
  if (!n || *n > (uint64_t{1} << 40)) {
    return Status::InvalidArgument(std::string(what) + ": bad MiB value \"" + t + "\"");
  }
  return *n;
}

// "700.00 W" -> 700; N/A -> 0 (unknown).
Result<int> ParseWatts(std::string_view v, std::string_view what) {
  std::string t = Trim(v);
  if (IsNotAvailable(t)) return 0;
  constexpr std::string_view kUnit = " W";
  if (t.size() <= kUnit.size() || std::string_view(t).substr(t.size() - kUnit.size()) != kUnit) {
    return Status::InvalidArgument(std::string(what) + ": expected \"<n> W\", got \"" + t + "\"");
  }
  std::string_view num = std::string_view(t).substr(0, t.size() - kUnit.size());
  double w = 0;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), w);
  if (ec != std::errc() || p != num.data() + num.size() || !(w >= 0 && w <= 100000)) {
    return Status::InvalidArgument(std::string(what) + ": bad power value \"" + t + "\"");
  }
  return static_cast<int>(std::lround(w));
}

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// "GPU-" + 8-4-4-4-12 hex. Checked strictly because the UUID is how the scheduler pins a job
// to a device; a cut-off UUID must not reach it.
bool IsGpuUuid(std::string_view u) {
  if (u.size() != 40 || u.substr(0, 4) != "GPU-") return false;
  for (size_t i = 4; i < u.size(); ++i) {
    size_t k = i - 4;
    bool dash = k == 8 || k == 13 || k == 18 || k == 23;
    if (dash ? u[i] != '-' : !IsHex(u[i])) return false;
  }
  return true;
}

bool IsVersion(std::string_view v) {
  if (v.empty() || v.size() > 32) return false;
  for (char c : v) {
    if (!(c >= '0' && c <= '9') && c != '.') return false;
  }
  return v.front() != '.' && v.back() != '.';
}

// One GPU as it is being assembled, with the bookkeeping needed to validate it at the end.
struct GpuDraft {
  GpuInfo info;
  bool have_memory = false;
  int power_rank = 0;  // rank of the power field that set power_limit_w; higher wins
  std::string label;   // how error messages name this GPU
};

// Power limit fields across driver generations, best first: the enforced limit is what the
// GPU actually runs under; "Power Limit" (old drivers) is the configured one.
int PowerRank(std::string_view key) {
  if (key == "current_power_limit" || key == "Current Power Limit") return 3;
  if (key == "enforced_power_limit" || key == "Enforced Power Limit") return 2;
  if (key == "power_limit" || key == "Power Limit") return 1;
  return 0;
}

Status SetPower(GpuDraft& d, std::string_view key, std::string_view value) {
  int rank = PowerRank(key);
  if (rank == 0) return Status::Ok();
  auto w = ParseWatts(value, d.label + " " + std::string(key));
  if (!w.ok()) return w.status();
  if (*w > 0 && rank > d.power_rank) {
    d.info.power_limit_w = *w;
    d.power_rank = rank;
  }
  return Status::Ok();
}

Status SetMig(GpuDraft& d, std::string_view value) {
  std::string v = Trim(value);
  if (v != "Enabled" && v != "Disabled" && v != "N/A") {
    return Status::InvalidArgument(
        d.label + " MIG mode: expected Enabled, Disabled or N/A, got \"" + v + "\"");
  }
  d.info.mig_mode = v;
  return Status::Ok();
}

Status SetMemory(GpuDraft& d, std::string_view value) {
  auto m = ParseMib(value, d.label + " FB memory total");
  if (!m.ok()) return m.status();
  d.info.memory_mib = *m;
  d.have_memory = true;
  return Status::Ok();
}

void SetSerial(GpuDraft& d, std::string_view value) {
  std::string v = Trim(value);
  d.info.serial = IsNotAvailable(v) ? "" : v;
}

void SetOptional(std::string& field, std::string_view value) {
  std::string v = Trim(value);
  field = IsNotAvailable(v) ? "" : v;
}

// The fields the rest of Sluice cannot do without; everything else may be unknown.
Status FinishGpu(GpuDraft& d, std::string_view format) {
  if (d.info.name.empty()) return Invalid(format, d.label + ": missing product name");
  if (d.info.uuid.empty()) return Invalid(format, d.label + ": missing GPU UUID");
  if (!IsGpuUuid(d.info.uuid)) {
    return Invalid(format, d.label + ": malformed GPU UUID \"" + d.info.uuid + "\"");
  }
  if (!d.have_memory) return Invalid(format, d.label + ": missing FB memory total");
  if (d.info.mig_mode.empty()) d.info.mig_mode = "N/A";  // drivers before MIG existed
  return Status::Ok();
}

Status CheckVersions(const ProbedGpus& out, std::string_view format) {
  if (!out.driver_version.empty() && !IsVersion(out.driver_version)) {
    return Invalid(format, "malformed driver version \"" + out.driver_version + "\"");
  }
  if (!out.cuda_version.empty() && !IsVersion(out.cuda_version)) {
    return Invalid(format, "malformed CUDA version \"" + out.cuda_version + "\"");
  }
  return Status::Ok();
}

// ---- XML ----

constexpr std::string_view kXml = "nvidia-smi XML";

std::string_view ChildText(const pugi::xml_node& n, const char* name) {
  return n.child(name).text().get();
}

Status ParseXmlGpu(const pugi::xml_node& g, GpuDraft& d) {
  d.info.name = Trim(ChildText(g, "product_name"));
  d.info.uuid = Trim(ChildText(g, "uuid"));
  if (auto total = g.child("fb_memory_usage").child("total")) {
    SLUICE_RETURN_IF_ERROR(SetMemory(d, total.text().get()));
  }
  std::string bus = Trim(ChildText(g.child("pci"), "pci_bus_id"));
  d.info.pci_bus_id = bus.empty() ? Trim(g.attribute("id").value()) : bus;
  // Zeroed or redacted ids ("000000DE", "[REDACTED]") are unknown, not an error.
  d.info.pci_device_id = ParsePciId(ChildText(g.child("pci"), "pci_device_id"));
  d.info.pci_subsystem_id = ParsePciId(ChildText(g.child("pci"), "pci_sub_system_id"));
  if (g.child("serial")) SetSerial(d, ChildText(g, "serial"));
  if (auto mig = g.child("mig_mode").child("current_mig")) {
    SLUICE_RETURN_IF_ERROR(SetMig(d, mig.text().get()));
  }
  SetOptional(d.info.vbios_version, ChildText(g, "vbios_version"));
  SetOptional(d.info.compute_capability, ChildText(g, "compute_cap"));
  // Drivers >= 535 split readings into gpu_/module_ sections; module limits are for the whole
  // board (Grace Hopper) and are not the GPU's own, so only these two sections count.
  for (const char* section : {"gpu_power_readings", "power_readings"}) {
    for (const pugi::xml_node& f : g.child(section).children()) {
      SLUICE_RETURN_IF_ERROR(SetPower(d, f.name(), f.text().get()));
    }
  }
  return Status::Ok();
}

// ---- text ----

constexpr std::string_view kText = "nvidia-smi -q text";

struct TextLine {
  size_t indent = 0;
  std::string key;  // or a section name when !has_value
  std::string value;
  bool has_value = false;
};

// "    Product Name      : NVIDIA A10" -> indent 4, key, value. A line whose first ':' is not
// preceded by a space ("GPU 00000000:18:00.0") is a section header, not a key.
TextLine SplitLine(std::string_view line) {
  TextLine out;
  while (out.indent < line.size() && (line[out.indent] == ' ' || line[out.indent] == '\t')) {
    ++out.indent;
  }
  std::string_view rest = line.substr(out.indent);
  size_t colon = rest.find(':');
  if (colon != std::string_view::npos && colon > 0 && rest[colon - 1] == ' ') {
    out.key = Trim(rest.substr(0, colon));
    out.value = Trim(rest.substr(colon + 1));
    out.has_value = true;
  } else {
    out.key = Trim(rest);
  }
  return out;
}

Status ApplyTextField(GpuDraft& d, const std::string& path, const std::string& key,
                      const std::string& value) {
  if (path == "Product Name") {
    d.info.name = value;
  } else if (path == "GPU UUID") {
    d.info.uuid = value;
  } else if (path == "Serial Number") {
    SetSerial(d, value);
  } else if (path == "VBIOS Version") {
    SetOptional(d.info.vbios_version, value);
  } else if (path == "Compute Capability") {
    SetOptional(d.info.compute_capability, value);
  } else if (path == "MIG Mode/Current") {
    return SetMig(d, value);
  } else if (path == "PCI/Bus Id") {
    if (!value.empty()) d.info.pci_bus_id = value;
  } else if (path == "PCI/Device Id") {
    d.info.pci_device_id = ParsePciId(value);
  } else if (path == "PCI/Sub System Id") {
    d.info.pci_subsystem_id = ParsePciId(value);
  } else if (path == "FB Memory Usage/Total") {
    return SetMemory(d, value);
  } else if (path.starts_with("GPU Power Readings/") || path.starts_with("Power Readings/")) {
    // Same reasoning as XML: "Module Power Readings" is the board, not this GPU.
    if (path.find('/') == path.rfind('/')) return SetPower(d, key, value);
  }
  return Status::Ok();
}

}  // namespace

Result<ProbedGpus> ParseNvidiaSmiXml(std::string_view xml) {
  SLUICE_RETURN_IF_ERROR(CheckBytes(xml, kXml));
  pugi::xml_document doc;
  // parse_default without parse_doctype: the DTD reference nvidia-smi emits is skipped, never
  // fetched or expanded.
  pugi::xml_parse_result pr =
      doc.load_buffer(xml.data(), xml.size(), pugi::parse_default, pugi::encoding_utf8);
  if (!pr) {
    return Invalid(kXml, std::string(pr.description()) + " at byte " + std::to_string(pr.offset) +
                             " (truncated or not XML?)");
  }
  pugi::xml_node root = doc.child("nvidia_smi_log");
  if (!root) return Invalid(kXml, "no <nvidia_smi_log> root element");

  ProbedGpus out;
  out.driver_version = Trim(ChildText(root, "driver_version"));
  out.cuda_version = Trim(ChildText(root, "cuda_version"));
  if (IsNotAvailable(out.cuda_version)) out.cuda_version.clear();
  SLUICE_RETURN_IF_ERROR(CheckVersions(out, kXml));
  // <attached_gpus> is not cross-checked: XML is self-delimiting, so a cut shows up as a parse
  // error, and published samples are sometimes trimmed to one <gpu> of several.
  for (const pugi::xml_node& g : root.children("gpu")) {
    if (out.gpus.size() >= kMaxGpus) return Invalid(kXml, "more than 1024 GPUs");
    GpuDraft d;
    d.info.index = static_cast<int>(out.gpus.size());
    d.label = "GPU " + std::to_string(d.info.index);
    Status st = ParseXmlGpu(g, d);
    if (!st.ok()) return Invalid(kXml, st.message());
    SLUICE_RETURN_IF_ERROR(FinishGpu(d, kXml));
    out.gpus.push_back(std::move(d.info));
  }
  return out;
}

Result<ProbedGpus> ParseNvidiaSmiText(std::string_view text) {
  SLUICE_RETURN_IF_ERROR(CheckBytes(text, kText));
  ProbedGpus out;
  bool banner = false;
  std::optional<uint64_t> attached;
  std::optional<GpuDraft> cur;
  std::vector<std::pair<size_t, std::string>> sections;  // open sections inside the GPU

  auto finish = [&]() -> Status {
    if (!cur) return Status::Ok();
    SLUICE_RETURN_IF_ERROR(FinishGpu(*cur, kText));
    out.gpus.push_back(std::move(cur->info));
    cur.reset();
    return Status::Ok();
  };

  size_t line_no = 0;
  for (std::string_view rest = text; !rest.empty();) {
    size_t nl = rest.find('\n');
    std::string_view raw = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    TextLine l = SplitLine(raw);
    if (l.key.empty() && !l.has_value) continue;

    if (l.indent == 0) {
      SLUICE_RETURN_IF_ERROR(finish());
      sections.clear();
      if (!l.has_value && l.key.find("NVSMI LOG") != std::string::npos) {
        banner = true;
      } else if (!l.has_value && l.key.starts_with("GPU ")) {
        if (!banner) return Invalid(kText, "GPU section before the NVSMI LOG banner");
        if (out.gpus.size() >= kMaxGpus) return Invalid(kText, "more than 1024 GPUs");
        cur.emplace();
        cur->info.index = static_cast<int>(out.gpus.size());
        cur->info.pci_bus_id = Trim(std::string_view(l.key).substr(4));
        cur->label =
            "GPU " + std::to_string(cur->info.index) + " (line " + std::to_string(line_no) + ")";
      } else if (l.key == "Driver Version") {
        out.driver_version = l.value;
      } else if (l.key == "CUDA Version") {
        out.cuda_version = IsNotAvailable(l.value) ? "" : l.value;
      } else if (l.key == "Attached GPUs") {
        attached = ParseUint(l.value);
        if (!attached) {
          return Invalid(kText, "line " + std::to_string(line_no) + ": bad Attached GPUs value \"" +
                                    l.value + "\"");
        }
      }
      continue;  // other top-level lines (Timestamp, Unit sections) carry nothing we publish
    }
    if (!cur) continue;
    while (!sections.empty() && sections.back().first >= l.indent) sections.pop_back();
    if (!l.has_value) {
      sections.emplace_back(l.indent, l.key);
      continue;
    }
    std::string path;
    for (const auto& s : sections) path += s.second + "/";
    path += l.key;
    Status st = ApplyTextField(*cur, path, l.key, l.value);
    if (!st.ok()) {
      return Invalid(kText, "line " + std::to_string(line_no) + ": " + st.message());
    }
  }
  SLUICE_RETURN_IF_ERROR(finish());
  if (!banner) return Invalid(kText, "no \"NVSMI LOG\" banner: not nvidia-smi -q output");
  if (attached && *attached != out.gpus.size()) {
    return Invalid(kText, "Attached GPUs is " + std::to_string(*attached) + " but " +
                              std::to_string(out.gpus.size()) +
                              " GPU sections were found (truncated output?)");
  }
  SLUICE_RETURN_IF_ERROR(CheckVersions(out, kText));
  return out;
}

Result<ProbedGpus> ParseNvidiaSmi(std::string_view output) {
  std::string_view s = output;
  if (s.starts_with("\xEF\xBB\xBF")) s.remove_prefix(3);  // BOM from files saved on Windows
  size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    return Status::InvalidArgument("nvidia-smi output: empty input");
  }
  if (s[first] == '<') return ParseNvidiaSmiXml(s);
  return ParseNvidiaSmiText(s);
}

}  // namespace sluice
