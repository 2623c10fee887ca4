#include "audit/compat.h"

#include <algorithm>
#include <cstdio>

#include "common/text.h"

namespace sluice::audit {
namespace {

// Data rows (header dropped, blank lines skipped) with at least `min_fields` fields; a shorter row
// is skipped rather than crashing; compat_test checks the row counts, so a bad file fails there.
std::vector<std::vector<std::string>> CsvRows(std::string_view csv, size_t min_fields) {
  std::vector<std::vector<std::string>> rows;
  bool header = true;
  for (const std::string& raw : Split(csv, '\n')) {
    std::string line = Trim(raw);
    if (line.empty()) continue;
    if (header) {
      header = false;
      continue;
    }
    auto f = CsvFields(line);
    if (f.size() >= min_fields) rows.push_back(std::move(f));
  }
  return rows;
}

std::string StripGe(std::string_view v) {
  std::string t = Trim(v);
  if (t.starts_with(">=")) t = Trim(std::string_view(t).substr(2));
  return t;
}

// "CUDA 12.2 GA" from "NVIDIA ... Table 3 'CUDA 12.2 GA' (docs...)"; the toolkit when absent.
std::string LabelFromSource(std::string_view source, std::string_view toolkit) {
  size_t a = source.find('\'');
  size_t b = a == std::string_view::npos ? a : source.find('\'', a + 1);
  if (b == std::string_view::npos) return "CUDA " + std::string(toolkit);
  return std::string(source.substr(a + 1, b - a - 1));
}

std::vector<std::string> Parts(std::string_view v) { return Split(v, '.'); }

// "12" from "12.1"; the family minor-version compatibility works within.
std::string Major(std::string_view v) { return Parts(v).front(); }

}  // namespace

const std::vector<CudaDriverRow>& CudaDriverTable() {
  static const std::vector<CudaDriverRow> table = [] {
    std::vector<CudaDriverRow> t;
    for (auto& f : CsvRows(kCudaDriverCompatCsv, 4)) {
      CudaDriverRow r;
      r.toolkit = Trim(f[0]);
      r.min_driver = StripGe(f[1]);
      r.min_driver_minor_compat = StripGe(f[2]);
      r.label = LabelFromSource(f[3], r.toolkit);
      t.push_back(std::move(r));
    }
    return t;
  }();
  return table;
}

const std::vector<TorchBuildRow>& TorchBuildTable() {
  static const std::vector<TorchBuildRow> table = [] {
    std::vector<TorchBuildRow> t;
    for (auto& f : CsvRows(kTorchCudaBuildsCsv, 4)) {
      t.push_back(TorchBuildRow{Trim(f[0]), Trim(f[1]), Trim(f[2]), Trim(f[3])});
    }
    return t;
  }();
  return table;
}

bool IsDottedVersion(std::string_view v) {
  if (v.empty() || v.size() > 32) return false;
  std::vector<std::string> parts = Parts(v);
  if (parts.size() > 4) return false;
  for (const std::string& p : parts) {
    if (p.empty() || p.size() > 6) return false;
    if (!std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
  }
  return true;
}

int CompareDottedVersions(std::string_view a, std::string_view b) {
  // common/text's comparison is numeric per part and pads missing parts with 0.
  return CompareVersions(a, b);
}

Result<CudaDriverRow> MinimumDriverFor(std::string_view cuda) {
  if (!IsDottedVersion(cuda) || Parts(cuda).size() < 2 || Parts(cuda).size() > 3) {
    return Status::InvalidArgument("not a CUDA version: `" + std::string(cuda.substr(0, 64)) + "`");
  }
  const CudaDriverRow* best = nullptr;
  bool major_minor = Parts(cuda).size() == 2;
  for (const CudaDriverRow& r : CudaDriverTable()) {
    std::vector<std::string> rp = Parts(r.toolkit);
    if (rp.size() != 3) continue;
    bool match = major_minor ? CompareDottedVersions(rp[0] + "." + rp[1], cuda) == 0
                             : CompareDottedVersions(r.toolkit, cuda) == 0;
    if (!match) continue;
    if (best == nullptr || CompareDottedVersions(r.toolkit, best->toolkit) < 0) best = &r;
  }
  if (best == nullptr) {
    return Status::NotFound("CUDA " + std::string(cuda) +
                            " is not in the table (data/cuda_driver_compat.csv)");
  }
  return *best;
}

CompatVerdict DriverSupportsCuda(std::string_view driver, std::string_view cuda) {
  CompatVerdict v;
  Result<CudaDriverRow> req = MinimumDriverFor(cuda);
  if (!req.ok()) {
    v.reason = std::string(req.status().message());
    return v;
  }
  const CudaDriverRow& row = *req;
  std::string needs =
      "CUDA " + std::string(cuda) + " needs driver >= " + row.min_driver + " (" + row.label + ")";
  std::string compat =
      ">= " + row.min_driver_minor_compat + " for CUDA " + Major(row.toolkit) + ".x";
  if (driver.empty()) {
    v.known = true;
    v.reason = needs + "; there is no NVIDIA driver";
    return v;
  }
  if (!IsDottedVersion(driver)) {
    v.reason = "driver version `" + std::string(driver.substr(0, 64)) + "` is not a version";
    return v;
  }
  v.known = true;
  std::string is = "; driver is " + std::string(driver);
  if (CompareDottedVersions(driver, row.min_driver) >= 0) {
    v.ok = true;
    v.reason = needs + is;
  } else if (!row.min_driver_minor_compat.empty() &&
             CompareDottedVersions(driver, row.min_driver_minor_compat) >= 0) {
    v.ok = true;
    v.minor_compat_only = true;
    v.reason = needs + is + ": runs only through CUDA minor-version compatibility (" + compat +
               "; no PTX JIT of newer code, no features that need a newer driver)";
  } else {
    v.reason = needs + ", or " + compat + " through minor-version compatibility" + is;
  }
  return v;
}

std::string TorchCudaVersion(std::string_view torch) {
  size_t plus = torch.find('+');
  if (plus == std::string_view::npos) return "";
  std::string_view tag = torch.substr(plus + 1);
  if (!tag.starts_with("cu")) return "";
  std::string_view digits = tag.substr(2);
  // cu92, cu102, cu121, cu130: the last digit is the minor version, the rest the major.
  if (digits.size() < 2 || digits.size() > 4 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "";
  }
  return std::string(digits.substr(0, digits.size() - 1)) + "." +
         std::string(digits.substr(digits.size() - 1));
}

CompatVerdict TorchBuildRuns(std::string_view torch, std::string_view driver) {
  CompatVerdict v;
  std::string shown = std::string(torch.substr(0, 64));
  size_t plus = torch.find('+');
  std::string_view tag = plus == std::string_view::npos ? "" : torch.substr(plus + 1);
  if (plus == std::string_view::npos || tag == "cpu" || tag.starts_with("cpu.")) {
    v.ok = true;
    v.known = true;
    v.reason = "torch " + shown + ": CPU build";
    return v;
  }
  std::string cuda = TorchCudaVersion(torch);
  if (cuda.empty()) {
    v.reason = "torch " + shown + ": the build tag `" + std::string(tag.substr(0, 32)) +
               "` names no CUDA version";
    return v;
  }
  // "2.1" from "2.1.0" (or "2.1.0a0"): the matrix lists releases by major.minor.
  std::string_view release_full = torch.substr(0, plus);
  std::vector<std::string> rp = Parts(release_full);
  std::string release = rp.size() >= 2 ? rp[0] + "." + rp[1] : std::string(release_full);
  std::string variant = std::string(tag);
  bool listed =
      std::any_of(TorchBuildTable().begin(), TorchBuildTable().end(), [&](const TorchBuildRow& r) {
        return r.torch_version == release && r.cuda_variant == variant;
      });
  CompatVerdict d = DriverSupportsCuda(driver, cuda);
  v = d;
  v.reason = "torch " + shown + " (CUDA " + cuda + "): " + d.reason;
  if (!listed) {
    v.unlisted_build = true;
    v.reason += " (note: torch " + release + " " + variant +
                " is not in PyTorch's release matrix, data/torch_cuda_builds.csv)";
  }
  return v;
}

}  // namespace sluice::audit
