#include "market/gpu_labels.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "common/text.h"
#include "market/gpu_identity.h"
#include "market/gpu_specs_data.h"

namespace sluice::market {
namespace {

// Product names seen in real nvidia-smi output (the fixtures under data/nvidia-smi in the shared
// reference set), with their FB memory totals. Their labels join the known set via
// CanonicalGpuLabel, so the registry and the agent can never disagree about a name.
struct ObservedGpu {
  std::string_view product_name;
  uint64_t memory_mib;
};
constexpr ObservedGpu kObservedGpus[] = {
    {"NVIDIA A10", 23028},
    {"NVIDIA A100-SXM4-80GB", 81920},
    {"NVIDIA A10G", 23028},
    {"NVIDIA A40", 46068},
    {"GRID P4-1Q", 1024},
    {"NVIDIA GeForce GTX 1050 Ti", 4096},
    {"GeForce GTX 1070 Ti", 4096},
    {"NVIDIA GeForce GTX 680", 2000},
    {"NVIDIA H100 NVL", 95830},
    {"NVIDIA H100 80GB HBM3", 81559},
    {"NVIDIA L4", 23034},
    {"Quadro P2000", 5120},
    {"NVIDIA RTX 2000 Ada Generation", 16380},
    {"NVIDIA GeForce RTX 2070", 8192},
    {"NVIDIA GeForce RTX 2080", 8192},
    {"NVIDIA GeForce RTX 3060", 12288},
    {"NVIDIA GeForce RTX 3080", 10240},
    {"NVIDIA GeForce RTX 3090", 24576},
    {"NVIDIA RTX 4000 SFF Ada Generation", 20475},
    {"NVIDIA RTX 4000 Ada Generation", 20475},
    {"NVIDIA GeForce RTX 4060 Ti", 16380},
    {"NVIDIA RTX 6000 Ada Generation", 49140},
    {"NVIDIA RTX A6000", 46068},
    {"Tesla T4", 15360},
};

// Marketing memory sizes in GB. A card reports less than its nominal size (ECC, reserved
// memory: an A40 "48GB" shows 46068 MiB = 45.0 GiB, a T4 "16GB" 15360 MiB), never much more.
constexpr int kNominalGb[] = {1,  2,  3,  4,  5,  6,  8,  10,  11,  12,  16,  20,  24,
                              32, 40, 48, 64, 80, 94, 96, 128, 141, 180, 192, 256, 288};

// Words in product names that say nothing about the model.
constexpr std::string_view kVendorWords[] = {"nvidia", "geforce",  "tesla",      "quadro",
                                             "amd",    "instinct", "generation", "graphics"};

bool IsMemoryTypeWord(std::string_view w) { return w.starts_with("hbm") || w.starts_with("gddr"); }

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

bool IsAlnum(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c));
  });
}

// "80gb" → 80; anything else → 0.
int MemoryWordGb(std::string_view w) {
  if (w.size() < 3 || !w.ends_with("gb")) return 0;
  std::string_view digits = w.substr(0, w.size() - 2);
  if (!AllDigits(digits) || digits.size() > 5) return 0;
  return std::stoi(std::string(digits));
}

struct ParsedProduct {
  std::string model;        // "a100", "h100nvl", "rtx6000ada", "p4vgpu"
  int memory_gb = 0;        // from the name; 0 when the name has none
  std::string form_factor;  // "sxm", "pcie", "nvl" or ""
};

ParsedProduct ParseProduct(std::string_view product_name) {
  std::string lower = ToLower(product_name);
  for (char& c : lower) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = ' ';
  }
  std::vector<std::string> words;
  for (auto& w : Split(lower, ' ')) {
    if (!w.empty()) words.push_back(w);
  }
  ParsedProduct p;
  bool vgpu = false;
  bool hbm3 = false;
  std::vector<std::string> kept;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (std::find(std::begin(kVendorWords), std::end(kVendorWords), w) != std::end(kVendorWords)) {
      continue;
    }
    // Workstation and server parts (issue 13 item 1): "RTX PRO 6000 Blackwell Max-Q Workstation
    // Edition" is the model rtxpro6000 in the form maxq; the architecture and "Edition" add
    // nothing once the model is named.
    if (w == "blackwell" || w == "edition") continue;
    if (w == "max" && i + 1 < words.size() && words[i + 1] == "q") {
      p.form_factor = "maxq";
      ++i;
      continue;
    }
    if (w == "workstation" || w == "server") {
      if (p.form_factor.empty()) p.form_factor = w;
      continue;
    }
    if (w == "grid") {
      vgpu = true;
    } else if (IsMemoryTypeWord(w)) {
      hbm3 = hbm3 || w.starts_with("hbm3");
    } else if (w.starts_with("sxm")) {
      p.form_factor = "sxm";
    } else if (w == "pcie") {
      p.form_factor = "pcie";
    } else if (int gb = MemoryWordGb(w); gb > 0) {
      p.memory_gb = gb;
    } else {
      if (w == "nvl") p.form_factor = "nvl";
      kept.push_back(w);
    }
  }
  if (vgpu && !kept.empty()) {
    // "GRID P4-1Q": a slice of a P4 with a vGPU profile, not a whole P4; the profile's memory
    // is in memory_mib.
    p.model = kept.front() + "vgpu";
  } else {
    for (const auto& w : kept) p.model += w;
  }
  // NVIDIA names the SXM5 H100 "H100 80GB HBM3" and the PCIe card "H100 PCIe".
  if (p.form_factor.empty() && hbm3 && p.model == "h100") p.form_factor = "sxm";
  // A superchip's name gives the module's memory ("GH200 480GB": Grace's LPDDR5X with the
  // GPU's HBM); a job gets the GPU's, so the label takes the memory the GPU reports.
  if (p.model == "gh200" || p.model == "gb200" || p.model == "gb300") {
    p.memory_gb = 0;
    p.form_factor = "superchip";
  }
  if (p.model.empty()) p.model = "gpu";
  return p;
}

int NominalGb(uint64_t memory_mib) {
  const double gib = static_cast<double>(memory_mib) / 1024.0;
  for (int size : kNominalGb) {
    if (gib <= size + 0.5 && gib >= size * 0.92) return size;
  }
  return static_cast<int>(std::llround(gib));
}

std::string Label(const std::string& model, int gb) {
  return model + "-" + std::to_string(gb) + "gb";
}

// Every integer in "16/32" or "96 or 141".
std::vector<int> IntegersIn(std::string_view s) {
  std::vector<int> out;
  std::string cur;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      cur += s[i];
    } else if (!cur.empty()) {
      if (cur.size() <= 5) out.push_back(std::stoi(cur));
      cur.clear();
    }
  }
  return out;
}

struct Registry {
  std::vector<std::string> labels;                           // sorted
  std::map<std::string, std::vector<std::string>> by_model;  // model → sorted labels
};

Registry BuildRegistry() {
  std::set<std::pair<std::string, std::string>> model_label;
  std::vector<std::string> lines = Split(kGpuSpecsCsv, '\n');
  int model_col = -1, memory_col = -1;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (Trim(lines[n]).empty()) continue;
    std::vector<std::string> f = CsvFields(lines[n]);
    if (model_col < 0) {  // header
      for (size_t i = 0; i < f.size(); ++i) {
        if (Trim(f[i]) == "gpu_model") model_col = static_cast<int>(i);
        if (Trim(f[i]) == "memory_gb") memory_col = static_cast<int>(i);
      }
      if (model_col < 0 || memory_col < 0) break;  // not the format we know; tests catch this
      continue;
    }
    if (static_cast<int>(f.size()) <= std::max(model_col, memory_col)) continue;
    ParsedProduct p = ParseProduct(f[model_col]);
    std::vector<int> sizes = IntegersIn(f[memory_col]);
    if (sizes.empty() && p.memory_gb > 0) sizes.push_back(p.memory_gb);
    for (int gb : sizes) model_label.emplace(p.model, Label(p.model, gb));
  }
  for (const ObservedGpu& g : kObservedGpus) {
    model_label.emplace(ParseProduct(g.product_name).model,
                        CanonicalGpuLabel(g.product_name, g.memory_mib));
  }
  // Newer GPUs known by their PCI ids (gpu_identity.h): a node with one produces these labels.
  for (const std::string& label : SupplementLabels()) {
    model_label.emplace(label.substr(0, label.rfind('-')), label);
  }
  Registry r;
  for (const auto& [model, label] : model_label) {
    r.by_model[model].push_back(label);
    r.labels.push_back(label);
  }
  std::sort(r.labels.begin(), r.labels.end());
  r.labels.erase(std::unique(r.labels.begin(), r.labels.end()), r.labels.end());
  for (auto& [model, labels] : r.by_model) std::sort(labels.begin(), labels.end());
  return r;
}

const Registry& GetRegistry() {
  static const Registry* const kRegistry = new Registry(BuildRegistry());
  return *kRegistry;
}

std::string JoinLabels(const std::vector<std::string>& labels) {
  std::string out;
  for (const auto& l : labels) out += (out.empty() ? "" : ", ") + l;
  return out;
}

// User text as shown in an error: bounded, printable.
std::string Shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c;
  if (s.size() > 64) out += "...";
  return out;
}

}  // namespace

std::string CanonicalGpuLabel(std::string_view product_name, uint64_t memory_mib) {
  ParsedProduct p = ParseProduct(product_name);
  return Label(p.model, p.memory_gb > 0 ? p.memory_gb : NominalGb(memory_mib));
}

std::string FormFactor(std::string_view product_name) {
  return ParseProduct(product_name).form_factor;
}

std::vector<std::string> KnownGpuLabels() { return GetRegistry().labels; }

std::vector<std::string> NearestGpuLabels(std::string_view label) {
  const Registry& reg = GetRegistry();
  std::string model = ToLower(Trim(label));
  if (size_t dash = model.rfind('-');
      dash != std::string::npos && MemoryWordGb(model.substr(dash + 1)) > 0) {
    model.resize(dash);
  }
  size_t best = std::numeric_limits<size_t>::max();
  std::vector<std::string> suggestions;
  for (const auto& [known, labels] : reg.by_model) {
    const size_t d = EditDistance(model.substr(0, 64), known);
    if (d < best) {
      best = d;
      suggestions.clear();
    }
    if (d == best) suggestions.insert(suggestions.end(), labels.begin(), labels.end());
  }
  constexpr size_t kMaxSuggestions = 6;
  if (best > std::max<size_t>(2, model.size() / 3)) return {};
  std::sort(suggestions.begin(), suggestions.end());
  if (suggestions.size() > kMaxSuggestions) suggestions.resize(kMaxSuggestions);
  return suggestions;
}

Result<LabelResolution> ResolveGpuLabel(std::string_view user_text) {
  const Registry& reg = GetRegistry();
  const std::string text = ToLower(Trim(user_text));
  if (text.empty()) return Status::InvalidArgument("empty GPU label");
  if (std::binary_search(reg.labels.begin(), reg.labels.end(), text)) {
    return LabelResolution{{text}, ""};
  }
  // Short form: vendor words dropped, the remaining words run together ("nvidia a100" → a100,
  // "rtx 4090" → rtx4090). Dashes are kept: `rtx-4090` is not a spelling we accept silently.
  std::string s;
  bool vendor_prefix = true;
  for (const auto& w : Split(text, ' ')) {
    if (w.empty()) continue;
    if (vendor_prefix &&
        std::find(std::begin(kVendorWords), std::end(kVendorWords), w) != std::end(kVendorWords)) {
      continue;
    }
    vendor_prefix = false;
    s += w;
  }
  if (std::binary_search(reg.labels.begin(), reg.labels.end(), s)) {
    return LabelResolution{{s}, "`" + Shown(user_text) + "` is " + s};
  }
  if (IsAlnum(s)) {
    if (auto it = reg.by_model.find(s); it != reg.by_model.end()) {
      return LabelResolution{it->second, s + " covers " + JoinLabels(it->second)};
    }
  }
  // A full product name as nvidia-smi prints it ("NVIDIA A100-SXM4-80GB").
  if (text.find(' ') != std::string::npos) {
    ParsedProduct p = ParseProduct(text);
    if (auto it = reg.by_model.find(p.model); it != reg.by_model.end()) {
      if (p.memory_gb == 0) {
        return LabelResolution{it->second, p.model + " covers " + JoinLabels(it->second)};
      }
      const std::string label = Label(p.model, p.memory_gb);
      if (std::binary_search(it->second.begin(), it->second.end(), label)) {
        return LabelResolution{{label}, "`" + Shown(user_text) + "` is " + label};
      }
    }
  }
  // A memory size without its unit ("a100-40", "h100 80", "a100-40g"): the label it almost is.
  {
    std::string spaced = text;
    std::replace(spaced.begin(), spaced.end(), '-', ' ');
    std::vector<std::string> words;
    for (const auto& w : Split(spaced, ' ')) {
      if (!w.empty() && std::find(std::begin(kVendorWords), std::end(kVendorWords), w) ==
                            std::end(kVendorWords)) {
        words.push_back(w);
      }
    }
    if (words.size() >= 2) {
      std::string size = words.back();
      if (size.ends_with('g')) size.pop_back();
      if (AllDigits(size) && size.size() <= 4) {
        std::string near;
        for (size_t i = 0; i + 1 < words.size(); ++i) near += words[i];
        near += "-" + std::to_string(std::stoi(size)) + "gb";
        if (std::binary_search(reg.labels.begin(), reg.labels.end(), near)) {
          return Status::InvalidArgument("unknown GPU `" + Shown(user_text) + "`; did you mean " +
                                         near + "? (memory is written with its unit)");
        }
      }
    }
  }
  // Unknown: suggest every label of the nearest model(s).
  std::string msg = "unknown GPU `" + Shown(user_text) + "`";
  if (std::vector<std::string> suggestions = NearestGpuLabels(s); !suggestions.empty()) {
    msg += "; did you mean " + JoinLabels(suggestions) + "?";
  } else {
    msg += "; known labels look like a100-80gb (see `sluice offers`)";
  }
  return Status::InvalidArgument(std::move(msg));
}

}  // namespace sluice::market
