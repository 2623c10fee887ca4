#include "market/catalog.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "common/text.h"
#include "market/gpu_labels.h"
#include "market/perf.h"

namespace sluice::market {
namespace {

// Column order of the SkyPilot layout; the header may order them differently.
enum Column {
  kCloud,
  kInstanceType,
  kAcceleratorName,
  kAcceleratorCount,
  kGpuMemoryGib,
  kVcpus,
  kMemoryGib,
  kPrice,
  kSpotPrice,
  kRegion,
  kZone,
  kColumnCount,
};

constexpr std::string_view kColumnNames[kColumnCount] = {"cloud",
                                                         "instance_type",
                                                         "accelerator_name",
                                                         "accelerator_count",
                                                         "gpu_memory_gib",
                                                         "vcpus",
                                                         "memory_gib",
                                                         "price",
                                                         "spot_price",
                                                         "region",
                                                         "zone"};

// Catalog spellings the label registry does not derive by itself. `when_gb` limits an entry to
// one memory size (0 = any); `default_gb` is the size when the catalog gives none.
struct GpuAlias {
  std::string_view name;  // lowercase catalog accelerator_name
  int when_gb;
  std::string_view model;
  int default_gb;
  std::string_view form_factor;
};
constexpr GpuAlias kGpuAliases[] = {
    // Vast lists the H100 NVL card as "H100" with 94 GB; the registry's label is h100nvl-94gb.
    {"h100", 94, "h100nvl", 94, "nvl"},
    // SkyPilot names the 40 GB A100 and the 16 GB V100 without a size and adds one for the
    // bigger part (A100-80GB, V100-32GB); Paperspace and Nebius rows carry no memory column.
    {"h100", 0, "h100", 80, ""},
    {"a100", 0, "a100", 40, ""},
    {"v100", 0, "v100", 16, ""},
    // Fluidstack "H100-NVLINK" and GCP "H100-MEGA" (a3-megagpu) are the H100 SXM5 on HGX boards.
    {"h100-nvlink", 0, "h100", 80, "sxm"},
    {"h100-mega", 0, "h100", 80, "sxm"},
    // Lambda and Paperspace drop the "RTX" of the RTX A-series workstation cards.
    {"a6000", 0, "rtxa6000", 48, ""},
    {"a4000", 0, "rtxa4000", 16, ""},
    // Paperspace's Quadro cards have no memory column; their sizes are the cards' only ones.
    {"m4000", 0, "m4000", 8, ""},
    {"p4000", 0, "p4000", 8, ""},
    // Vast "RTX4060" with 16 GB is the 4060 Ti (the plain 4060 only has 8 GB).
    {"rtx4060", 16, "rtx4060ti", 16, ""},
};

std::string Quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 64)) out += std::iscntrl(static_cast<unsigned char>(c)) ? '?' : c;
  if (s.size() > 64) out += "...";
  return out + "\"";
}

// The marketing size in GB for a memory figure in GiB, rounded the way the registry rounds what
// NVML reports (22.4 GiB → 24, 79.6 → 80, 140.4 → 141), so both sides name a card alike.
int NominalGb(double gib) {
  const std::string label =
      CanonicalGpuLabel("gpu", static_cast<uint64_t>(std::llround(gib * 1024.0)));
  int gb = 0;
  const std::string_view digits = std::string_view(label).substr(4, label.size() - 6);
  std::from_chars(digits.data(), digits.data() + digits.size(), gb);
  return gb;
}

// "a100-80gb" → ("a100", 80); a label without a memory suffix → (label, 0).
std::pair<std::string, int> SplitLabel(const std::string& label) {
  const size_t dash = label.rfind('-');
  if (dash == std::string::npos || !label.ends_with("gb")) return {label, 0};
  int gb = 0;
  const char* begin = label.data() + dash + 1;
  const char* end = label.data() + label.size() - 2;
  auto [p, ec] = std::from_chars(begin, end, gb);
  if (ec != std::errc() || p != end || begin == end) return {label, 0};
  return {label.substr(0, dash), gb};
}

bool IsKnownLabel(const std::string& label) {
  static const std::vector<std::string>* const kKnown =
      new std::vector<std::string>(KnownGpuLabels());
  return std::binary_search(kKnown->begin(), kKnown->end(), label);
}

// Lowercase letters and digits of `s`, runs of anything else as one `-`, no edge dashes.
std::string Slug(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "gpu" : out;
}

// "sxm", "pcie" or "nvl" when the instance type names the card (Lambda gpu_1x_h100_sxm5,
// Cudo ...-a100-pcie_..., Vast 1x-H100_NVL-..., Nebius gpu-h100-sxm_...), else "".
std::string FormFactorFromInstance(std::string_view instance_type) {
  std::string lower = ToLower(instance_type);
  for (char& c : lower) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = ' ';
  }
  for (const std::string& w : Split(lower, ' ')) {
    if (w.starts_with("sxm")) return "sxm";
    if (w == "pcie" || w == "pci") return "pcie";
    if (w == "nvl") return "nvl";
  }
  return "";
}

// What the provider's naming tells about the form factor when the instance type has no token:
// AWS P-family instances from p3 on are HGX (SXM) boards and G-family ones use PCIe cards; on GCP,
// A100, H100, H200 and B200 only come in the A2/A3/A4 HGX machine series, the rest are PCIe cards.
std::string FormFactorFromProvider(std::string_view cloud, std::string_view instance_type,
                                   std::string_view model) {
  const std::string c = ToLower(cloud);
  if (c == "aws" && !instance_type.empty()) {
    // p3 and later; g4dn, g5, gr6, g7e...
    if (instance_type[0] == 'p' && instance_type.size() >= 2 && instance_type[1] >= '3' &&
        instance_type[1] <= '9') {
      return "sxm";
    }
    if (instance_type[0] == 'g') return "pcie";
  }
  if (c == "gcp") {
    if (model == "a100" || model == "h100" || model == "h200" || model == "b200") return "sxm";
    if (model == "l4" || model == "t4" || model == "p4" || model == "p100") return "pcie";
  }
  return "";
}

// A number cell. Empty → nullopt (the caller decides whether that is allowed); anything else
// must be a finite, non-negative decimal.
Result<std::optional<double>> ParseNumber(std::string_view cell, std::string_view where,
                                          std::string_view column) {
  const std::string t = Trim(cell);
  if (t.empty()) return std::optional<double>();
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v) || v < 0) {
    return Status::InvalidArgument(std::string(where) + ": " + std::string(column) +
                                   ": expected a number, got " + Quoted(cell));
  }
  return std::optional<double>(v);
}

// Everything a row says, checked; offers are built once every row has parsed.
struct Row {
  int line = 0;
  std::string cloud, instance_type, accelerator_name, region, zone;
  int count = 0;
  double gpu_memory_gib = 0, vcpus = 0, memory_gib = 0;
  std::optional<double> price, spot_price;
};

Result<Row> ParseRow(const CsvRecord& rec, const int (&col)[kColumnCount],
                     std::string_view source_name) {
  const std::string where = std::string(source_name) + ":" + std::to_string(rec.line);
  auto cell = [&](Column c) -> const std::string& { return rec.fields[col[c]]; };
  Row row;
  row.line = rec.line;
  row.cloud = Trim(cell(kCloud));
  row.instance_type = Trim(cell(kInstanceType));
  row.accelerator_name = Trim(cell(kAcceleratorName));
  row.region = Trim(cell(kRegion));
  row.zone = Trim(cell(kZone));
  if (row.cloud.empty()) return Status::InvalidArgument(where + ": cloud: empty");
  if (row.accelerator_name.empty()) {
    return Status::InvalidArgument(where + ": accelerator_name: empty (GPU rows only)");
  }
  auto number = [&](Column c) { return ParseNumber(cell(c), where, kColumnNames[c]); };

  SLUICE_ASSIGN_OR_RETURN(std::optional<double> count, number(kAcceleratorCount));
  if (!count || *count < 1 || *count > 1024 || *count != std::floor(*count)) {
    return Status::InvalidArgument(where + ": accelerator_count: expected a whole number of " +
                                   "GPUs from 1 to 1024, got " + Quoted(cell(kAcceleratorCount)));
  }
  row.count = static_cast<int>(*count);
  // Bounds far above any real machine keep the integer conversions below defined.
  auto bounded = [&](Column c, double max) -> Result<double> {
    SLUICE_ASSIGN_OR_RETURN(std::optional<double> v, number(c));
    if (v.value_or(0) > max) {
      return Status::InvalidArgument(where + ": " + std::string(kColumnNames[c]) +
                                     ": implausibly large, got " + Quoted(cell(c)));
    }
    return v.value_or(0);
  };
  SLUICE_ASSIGN_OR_RETURN(row.gpu_memory_gib, bounded(kGpuMemoryGib, 1e4));
  SLUICE_ASSIGN_OR_RETURN(row.vcpus, bounded(kVcpus, 1e6));
  SLUICE_ASSIGN_OR_RETURN(row.memory_gib, bounded(kMemoryGib, 1e9));
  SLUICE_ASSIGN_OR_RETURN(row.price, number(kPrice));
  SLUICE_ASSIGN_OR_RETURN(row.spot_price, number(kSpotPrice));
  return row;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

Result<std::vector<CsvRecord>> ReadCsv(std::string_view text, std::string_view source_name) {
  if (size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n'));
    return Status::InvalidArgument(std::string(source_name) + ":" + std::to_string(line) +
                                   ": invalid UTF-8");
  }
  // Spreadsheet exports start with a UTF-8 byte order mark; it is not part of the first column.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<CsvRecord> records;
  CsvRecord rec;
  std::string field;
  int line = 1;
  bool in_record = false;  // any character of the current record seen
  bool quoted = false;     // inside a quoted field
  bool closed = false;     // the current field's closing quote was seen
  auto where = [&] { return std::string(source_name) + ":" + std::to_string(line); };
  auto end_record = [&] {
    rec.fields.push_back(std::move(field));
    field.clear();
    records.push_back(std::move(rec));
    rec = CsvRecord{};
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_record) {
      if (c == '\n' || c == '\r') {  // blank line
        if (c == '\n') ++line;
        continue;
      }
      in_record = true;
      rec.line = line;
    }
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
        closed = true;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == ',') {
      rec.fields.push_back(std::move(field));
      field.clear();
      closed = false;
    } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      if (c == '\r') ++i;
      end_record();
      ++line;
      in_record = false;
      closed = false;
    } else if (closed) {
      return Status::InvalidArgument(where() + ": text after a closing quote");
    } else if (c == '"') {
      if (!field.empty()) {
        return Status::InvalidArgument(where() + ": quote inside an unquoted field");
      }
      quoted = true;
    } else {
      field += c;
    }
  }
  if (quoted) {
    return Status::InvalidArgument(std::string(source_name) + ":" + std::to_string(rec.line) +
                                   ": unterminated quoted field");
  }
  if (in_record) end_record();
  return records;
}

CatalogGpu MapCatalogGpu(std::string_view accelerator_name, double memory_gib) {
  const std::string name = ToLower(Trim(accelerator_name));
  const int gb = memory_gib > 0 ? NominalGb(memory_gib) : 0;
  CatalogGpu gpu;
  std::string label;
  const GpuAlias* alias = nullptr;
  for (const GpuAlias& a : kGpuAliases) {
    if (a.name == name && (a.when_gb == 0 || a.when_gb == gb)) {
      alias = &a;
      break;
    }
  }
  if (alias != nullptr) {
    label =
        std::string(alias->model) + "-" + std::to_string(gb > 0 ? gb : alias->default_gb) + "gb";
    gpu.form_factor = alias->form_factor;
  } else {
    // The registry's own derivation: a size in the name wins ("A100-80GB"), else the memory.
    label = CanonicalGpuLabel(name, static_cast<uint64_t>(std::llround(memory_gib * 1024.0)));
    gpu.form_factor = FormFactor(name);
    if (SplitLabel(label).second == 0) {
      // No size anywhere: a model with a single label (B200 → b200-180gb) is still certain.
      auto resolved = ResolveGpuLabel(name);
      if (resolved.ok() && resolved->labels.size() == 1) {
        label = resolved->labels.front();
      } else {
        label = Slug(name);
      }
    }
  }
  auto [model, label_gb] = SplitLabel(label);
  gpu.known = IsKnownLabel(label);
  if (gpu.known && model.ends_with("nvl")) gpu.form_factor = "nvl";
  gpu.label = std::move(label);
  gpu.model = std::move(model);
  gpu.vram_gb = memory_gib > 0 ? memory_gib : label_gb;
  return gpu;
}

Result<CatalogImport> ParseCatalog(std::string_view csv_text, std::string_view source_name) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<CsvRecord> records, ReadCsv(csv_text, source_name));
  if (records.empty()) {
    return Status::InvalidArgument(std::string(source_name) + ": empty file (no header)");
  }
  int col[kColumnCount];
  const std::vector<std::string>& header = records.front().fields;
  for (int c = 0; c < kColumnCount; ++c) {
    col[c] = -1;
    for (size_t i = 0; i < header.size(); ++i) {
      if (ToLower(Trim(header[i])) == kColumnNames[c]) col[c] = static_cast<int>(i);
    }
    if (col[c] < 0) {
      return Status::InvalidArgument(std::string(source_name) + ":" +
                                     std::to_string(records.front().line) + ": missing column " +
                                     Quoted(kColumnNames[c]));
    }
  }

  CatalogImport out;
  std::vector<Row> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    const CsvRecord& rec = records[r];
    const std::string where = std::string(source_name) + ":" + std::to_string(rec.line);
    if (rec.fields.size() == 1 && Trim(rec.fields[0]).empty()) continue;  // a line of spaces
    if (rec.fields.size() != header.size()) {
      return Status::InvalidArgument(where + ": expected " + std::to_string(header.size()) +
                                     " columns, got " + std::to_string(rec.fields.size()));
    }
    SLUICE_ASSIGN_OR_RETURN(Row row, ParseRow(rec, col, source_name));
    if (!row.price || *row.price <= 0) {
      out.warnings.push_back(where + ": " + row.instance_type + " in " + row.region +
                             (row.zone.empty() ? "" : "/" + row.zone) +
                             " has no on-demand price; skipped");
      continue;
    }
    rows.push_back(std::move(row));
  }

  std::map<std::pair<std::string, std::string>, int> unmapped;  // (label, name) → offers
  for (const Row& row : rows) {
    const CatalogGpu gpu = MapCatalogGpu(row.accelerator_name, row.gpu_memory_gib);
    Offer o;
    o.source = OfferSource::kCatalog;
    o.verified = VerifiedState::kUnverified;
    o.provider = row.cloud;
    // GCP prices the GPU attachment, not a machine type, so its rows have no instance type.
    o.node = !row.instance_type.empty() ? row.instance_type
                                        : ToLower(row.cloud) + "-" + Slug(row.accelerator_name) +
                                              "-x" + std::to_string(row.count);
    o.region = row.region;
    o.zone = row.zone;
    o.gpu_label = gpu.label;
    o.gpu_model = gpu.model;
    o.gpus = o.gpus_available = row.count;
    o.vram_gb = gpu.vram_gb;
    o.form_factor =
        !gpu.form_factor.empty() ? gpu.form_factor : FormFactorFromInstance(row.instance_type);
    if (o.form_factor.empty()) {
      o.form_factor = FormFactorFromProvider(row.cloud, row.instance_type, gpu.model);
    }
    // Several SXM GPUs in one machine share an NVLink fabric; PCIe cards talk over PCIe.
    if (row.count > 1 && o.form_factor == "sxm") o.interconnect = "nvlink";
    if (row.count > 1 && o.form_factor == "pcie") o.interconnect = "pcie";
    o.cpus = static_cast<int>(row.vcpus);
    o.memory_gb = row.memory_gib;
    o.price_per_gpu_hour = *row.price / row.count;
    o.interruptible_price_per_gpu_hour = row.spot_price.value_or(0) / row.count;
    o.reliability = 1.0;
    o.perf_score = PerfScore(gpu.label, o.form_factor);
    o.spec_perf = o.perf_score;
    if (!gpu.known) {
      ++out.unmapped_gpu_names;
      ++unmapped[{gpu.label, row.accelerator_name}];
    }
    out.offers.push_back(std::move(o));
  }
  for (const auto& [label_name, n] : unmapped) {
    std::string closest;
    for (const auto& l : NearestGpuLabels(label_name.first)) {
      closest += (closest.empty() ? "" : ", ") + l;
    }
    out.warnings.push_back(
        std::string(source_name) + ": GPU " + Quoted(label_name.second) +
        " maps to no known label; kept as " + Quoted(label_name.first) + " on " +
        std::to_string(n) + (n == 1 ? " offer" : " offers") +
        (closest.empty() ? "; no known label is close" : "; closest known: " + closest));
  }

  // Health: the seed formula with no latency or failure history yet, so only the premium over
  // the cheapest offer of the same GPU in this import counts.
  std::map<std::string, double> cheapest;
  for (const Offer& o : out.offers) {
    auto [it, inserted] = cheapest.emplace(o.gpu_label, o.price_per_gpu_hour);
    if (!inserted) it->second = std::min(it->second, o.price_per_gpu_hour);
  }
  for (Offer& o : out.offers) {
    const double low = cheapest[o.gpu_label];
    o.health_score = HealthScore(0, 0, (o.price_per_gpu_hour - low) / low);
  }

  // Ids: provider/node/region/zone; catalogs repeat that key (Vast lists one instance type
  // several times per region), and then every copy gets its line so none is favoured.
  std::map<std::string, int> seen;
  std::vector<std::string> keys;
  for (const Offer& o : out.offers) {
    keys.push_back(o.provider + "/" + o.node + "/" + o.region + "/" + o.zone);
    ++seen[keys.back()];
  }
  for (size_t i = 0; i < out.offers.size(); ++i) {
    out.offers[i].id = seen[keys[i]] == 1 ? keys[i] : keys[i] + "#" + std::to_string(rows[i].line);
  }
  if (!out.offers.empty()) out.provider = out.offers.front().provider;
  return out;
}

Result<std::vector<Offer>> ParseCatalogCsv(std::string_view csv_text,
                                           std::string_view source_name) {
  SLUICE_ASSIGN_OR_RETURN(CatalogImport import, ParseCatalog(csv_text, source_name));
  return std::move(import.offers);
}

Result<CatalogImport> ImportCatalogFile(const std::string& path) {
  const std::string name = BaseName(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open catalog file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::Unavailable(path + ": read failed");
  SLUICE_ASSIGN_OR_RETURN(CatalogImport import, ParseCatalog(text.str(), name));
  if (import.offers.empty()) {
    return Status::InvalidArgument(name +
                                   ": no priced rows; importing it would delete the provider's "
                                   "offers");
  }
  for (const Offer& o : import.offers) {
    if (o.provider != import.provider) {
      return Status::InvalidArgument(name + ": rows of two providers (\"" + import.provider +
                                     "\" and \"" + o.provider +
                                     "\"); a catalog file holds one provider");
    }
  }
  return import;
}

}  // namespace sluice::market
