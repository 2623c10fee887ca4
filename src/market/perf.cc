#include "market/perf.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <string>
#include <vector>

#include "common/text.h"
#include "market/catalog.h"
#include "market/gpu_labels.h"
#include "market/gpu_specs_data.h"

namespace sluice::market {
namespace {

struct CardTflops {
  std::string form_factor;  // of the spec row's card: "sxm", "pcie", ""
  double tflops = 0;        // dense BF16, else FP16; 0 = no figure
  double mem_gb_s = 0;      // memory bandwidth; 0 = no figure
};

using PerfTable = std::map<std::string, std::vector<CardTflops>, std::less<>>;

double ParseTflops(std::string_view text) {
  const std::string t = Trim(text);
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || !(v > 0)) return 0;
  return v;
}

// Every integer in a memory cell such as "16/32" or "96 or 141".
std::vector<int> MemorySizes(std::string_view s) {
  std::vector<int> out;
  int cur = -1;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      if (cur < 100000) cur = (cur < 0 ? 0 : cur * 10) + (s[i] - '0');
    } else if (cur >= 0) {
      out.push_back(cur);
      cur = -1;
    }
  }
  return out;
}

// Labels come from CanonicalGpuLabel over the spec row's model name and each memory size, the
// same derivation the label registry uses, so a label the registry knows finds its figure here.
PerfTable BuildTable() {
  PerfTable table;
  auto records = ReadCsv(kGpuSpecsCsv, "gpu_specs.csv");
  if (!records.ok() || records->empty()) return table;  // tests pin the reference score
  const std::vector<std::string>& header = records->front().fields;
  auto column = [&](std::string_view name) -> int {
    for (size_t i = 0; i < header.size(); ++i) {
      if (Trim(header[i]) == name) return static_cast<int>(i);
    }
    return -1;
  };
  const int model_col = column("gpu_model");
  const int memory_col = column("memory_gb");
  const int fp16_col = column("fp16_dense_tflops");
  const int bf16_col = column("bf16_dense_tflops");
  const int bandwidth_col = column("mem_bandwidth_gbps");
  if (model_col < 0 || memory_col < 0 || fp16_col < 0 || bf16_col < 0 || bandwidth_col < 0) {
    return table;
  }
  const size_t need = std::max({model_col, memory_col, fp16_col, bf16_col, bandwidth_col}) + 1;
  for (size_t r = 1; r < records->size(); ++r) {
    const std::vector<std::string>& f = (*records)[r].fields;
    if (f.size() < need) continue;
    double tflops = ParseTflops(f[bf16_col]);
    if (tflops == 0) tflops = ParseTflops(f[fp16_col]);
    const std::string& model = f[model_col];
    for (int gb : MemorySizes(f[memory_col])) {
      table[CanonicalGpuLabel(model, static_cast<uint64_t>(gb) * 1024)].push_back(
          {FormFactor(model), tflops, ParseTflops(f[bandwidth_col])});
    }
  }
  return table;
}

const PerfTable& Table() {
  static const PerfTable* const kTable = new PerfTable(BuildTable());
  return *kTable;
}

// The figure `field` picks from the card matching `form_factor`, else the lowest of the label's
// cards (so a figure never overstates a GPU); 0 when none has one.
double Figure(std::string_view label, std::string_view form_factor, double CardTflops::*field) {
  const PerfTable& table = Table();
  auto it = table.find(label);
  if (it == table.end()) return 0;
  double lowest = 0;
  for (const CardTflops& card : it->second) {
    if (card.*field <= 0) continue;
    if (!form_factor.empty() && card.form_factor == form_factor) return card.*field;
    if (lowest == 0 || card.*field < lowest) lowest = card.*field;
  }
  return lowest;
}

double Tflops(std::string_view label, std::string_view form_factor) {
  return Figure(label, form_factor, &CardTflops::tflops);
}

double ReferenceTflops() {
  static const double kReference = Tflops(kPerfReferenceLabel, "");
  return kReference;
}

}  // namespace

double PerfScore(std::string_view gpu_label, std::string_view form_factor) {
  if (ReferenceTflops() <= 0) return 0;
  return Tflops(ToLower(Trim(gpu_label)), ToLower(Trim(form_factor))) / ReferenceTflops();
}

SpecSpeed SpecSpeedOf(std::string_view gpu_label, std::string_view form_factor) {
  const std::string label = ToLower(Trim(gpu_label));
  const std::string form = ToLower(Trim(form_factor));
  return {Tflops(label, form), Figure(label, form, &CardTflops::mem_gb_s)};
}

double FastestSpecPerf() {
  static const double kFastest = [] {
    double most = 0;
    for (const auto& [label, cards] : Table()) {
      for (const CardTflops& card : cards) most = std::max(most, card.tflops);
    }
    return ReferenceTflops() > 0 ? most / ReferenceTflops() : 0;
  }();
  return kFastest;
}

double PerfFromTflops(double tflops) {
  if (ReferenceTflops() <= 0 || !(tflops > 0)) return 0;
  return tflops / ReferenceTflops();
}

}  // namespace sluice::market
