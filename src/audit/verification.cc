#include "audit/verification.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>

#include "audit/compat.h"

namespace sluice::audit {
namespace {

using conformance::Check;
using conformance::Outcome;

// "812.35", "20", "0.25": at most two decimals, no trailing zeros, no exponent.
std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string WithUnit(double v, std::string_view unit) {
  return unit.empty() ? Num(v) : Num(v) + " " + std::string(unit);
}

std::string Quote(std::string_view agent_reason) {
  std::string r(agent_reason.substr(0, 200));
  return r.empty() ? "" : " (the agent said: " + r + ")";
}

// Judges one report. Each method records its own failures, so Evaluate reads as the rule list.
class Judge {
 public:
  Judge(const conformance::Report& report, Verdict& v) : report_(report), v_(v) {}

  void Fail(std::string line) { v_.failures.push_back(std::move(line)); }
  // A failure of check `c`: "<name>: <what>".
  void Fail(const Check& c, const std::string& what) {
    failed_.insert(c.name);
    Fail(c.name + ": " + what);
  }
  void Note(std::string line) { v_.notes.push_back(std::move(line)); }

  // The one check called `name`, or nullptr after recording why it cannot be judged.
  const Check* Require(const std::string& name) {
    required_.insert(name);
    const Check* found = nullptr;
    int count = 0;
    for (const Check& c : report_.checks) {
      if (c.name != name) continue;
      if (found == nullptr) found = &c;
      ++count;
    }
    if (found == nullptr) {
      Fail("check `" + name + "` missing from the report");
      return nullptr;
    }
    if (count > 1) {
      Fail("check `" + name + "` appears " + std::to_string(count) +
           " times in the report; which one was measured cannot be told");
      return nullptr;
    }
    if (found->outcome == Outcome::kSkip) {
      Fail("check `" + name + "` was skipped, so nothing was measured" + Quote(found->reason));
      return nullptr;
    }
    return found;
  }

  // The measurement `key` of `c`, or nullopt after recording that it is missing or negative.
  std::optional<double> Get(const Check& c, const std::string& key) {
    auto it = c.measurements.find(key);
    if (it == c.measurements.end()) {
      Fail(c, "measurement `" + key + "` missing" +
                  (c.outcome == Outcome::kFail ? Quote(c.reason) : ""));
      return std::nullopt;
    }
    if (it->second < 0) {
      Fail(c, key + " " + Num(it->second) + " is negative");
      return std::nullopt;
    }
    return it->second;
  }

  void AtLeast(const Check& c, const std::string& key, double min, std::string_view unit) {
    if (auto x = Get(c, key); x && *x < min) {
      Fail(c, key + " " + WithUnit(*x, unit) + " is below the minimum " + WithUnit(min, unit));
    }
  }

  void AtMost(const Check& c, const std::string& key, double max, std::string_view unit) {
    if (auto x = Get(c, key); x && *x > max) {
      Fail(c, key + " " + WithUnit(*x, unit) + " is above the maximum " + WithUnit(max, unit));
    }
  }

  // `key` must be within `skew` (a fraction) of what the inventory probed.
  void Near(const Check& c, const std::string& key, double probed, double skew,
            std::string_view probed_name) {
    auto x = Get(c, key);
    if (!x) return;
    if (std::fabs(*x - probed) > skew * probed) {
      Fail(c, key + " " + Num(*x) + " contradicts the inventory's " + std::string(probed_name) +
                  " " + Num(probed) + " (allowed difference " + Num(skew * 100) + "%)");
    }
  }

  // After the required checks: a check the agent failed that the server passed deserves a note,
  // and checks the server does not judge are named so an operator sees they were ignored.
  bool RequiresGpuChecks() const {
    for (const auto& name : required_) {
      if (name.rfind("gpu-", 0) == 0) return true;
    }
    return false;
  }
  void NoteTheRest() {
    for (const Check& c : report_.checks) {
      if (required_.count(c.name)) {
        if (c.outcome == Outcome::kFail && !failed_.count(c.name)) {
          Note(c.name + ": the agent reported fail" + Quote(c.reason) +
               ", but its measurements meet the rules");
        }
        continue;
      }
      if (c.name == conformance::kCheckDriverCuda || c.name == conformance::kCheckTorchCuda) {
        continue;  // the server reads the compatibility tables itself
      }
      // The suite's "no GPU on this host" marker; the inventory already says so.
      if (c.name == "gpu" && c.outcome == Outcome::kSkip && !RequiresGpuChecks()) continue;
      Note("check `" + c.name + "` is not one the server requires; ignored");
    }
  }

 private:
  const conformance::Report& report_;
  Verdict& v_;
  std::set<std::string> required_;
  std::set<std::string> failed_;
};

void JudgeCpu(Judge& j, const Inventory& inv, const VerificationRules& r) {
  const Check* c = j.Require(std::string(conformance::kCheckCpu));
  if (!c) return;
  if (auto cores = j.Get(*c, "cores"); cores && *cores != inv.cpu_cores) {
    j.Fail(*c, "cores " + Num(*cores) + " contradicts the inventory's cpu_cores " +
                   std::to_string(inv.cpu_cores));
  }
  j.AtLeast(*c, "ops_per_s", r.min_cpu_ops_per_s, "ops/s");
}

void JudgeMemory(Judge& j, const Inventory& inv, const VerificationRules& r) {
  const Check* c = j.Require(std::string(conformance::kCheckMemory));
  if (!c) return;
  j.Near(*c, "total_mib", static_cast<double>(inv.memory_mib), r.max_memory_total_skew,
         "memory_mib");
  auto total = c->measurements.find("total_mib");
  if (auto avail = j.Get(*c, "available_mib");
      avail && total != c->measurements.end() && *avail > total->second) {
    j.Fail(*c, "available_mib " + Num(*avail) + " exceeds total_mib " + Num(total->second));
  }
  j.AtLeast(*c, "touched_mib", r.min_memory_touched_mib, "MiB");
  j.AtLeast(*c, "touch_mib_s", r.min_memory_touch_mib_s, "MiB/s");
}

void JudgeDisk(Judge& j, const VerificationRules& r) {
  const Check* c = j.Require(std::string(conformance::kCheckDisk));
  if (!c) return;
  j.AtLeast(*c, "write_mib_s", r.min_disk_write_mib_s, "MiB/s");
  j.AtMost(*c, "fsync_ms", r.max_disk_fsync_ms, "ms");
  j.AtLeast(*c, "read_mib_s", r.min_disk_read_mib_s, "MiB/s");
  j.AtLeast(*c, "free_mib", r.min_disk_free_mib, "MiB");
}

void JudgeLink(Judge& j, const VerificationRules& r) {
  const Check* c = j.Require(std::string(conformance::kCheckLink));
  if (!c) return;
  j.AtMost(*c, "rtt_ms", r.max_link_rtt_ms, "ms");
  j.AtMost(*c, "rtt_max_ms", r.max_link_rtt_max_ms, "ms");
  j.AtLeast(*c, "download_mib_s", r.min_link_download_mib_s, "MiB/s");
  j.AtLeast(*c, "upload_mib_s", r.min_link_upload_mib_s, "MiB/s");
}

void JudgeGpu(Judge& j, const GpuInfo& g, const VerificationRules& r) {
  std::string n = std::to_string(g.index);
  if (const Check* c = j.Require(std::string(conformance::kCheckGpuMemory) + "." + n)) {
    j.Near(*c, "total_mib", static_cast<double>(g.memory_mib), r.max_gpu_memory_skew,
           "memory_mib of GPU " + n);
    auto total = c->measurements.find("total_mib");
    if (auto alloc = j.Get(*c, "allocated_mib"); alloc) {
      if (*alloc < r.min_gpu_allocated_mib) {
        j.Fail(*c, "allocated_mib " + Num(*alloc) + " MiB is below the minimum " +
                       Num(r.min_gpu_allocated_mib) + " MiB");
      } else if (total != c->measurements.end() && *alloc > total->second) {
        j.Fail(*c, "allocated_mib " + Num(*alloc) + " exceeds total_mib " + Num(total->second));
      }
    }
    j.AtLeast(*c, "h2d_gib_s", r.min_gpu_h2d_gib_s, "GiB/s");
  }
  if (const Check* c = j.Require(std::string(conformance::kCheckGpuCompute) + "." + n)) {
    j.AtLeast(*c, "elements", r.min_gpu_elements, "");
    j.AtMost(*c, "mismatches", r.max_gpu_mismatches, "");
    if (auto ms = j.Get(*c, "kernel_ms"); ms) {
      if (*ms <= 0) {
        j.Fail(*c, "kernel_ms " + Num(*ms) + " ms: no kernel time was measured");
      } else if (*ms > r.max_gpu_kernel_ms) {
        j.Fail(*c, "kernel_ms " + Num(*ms) + " ms is above the maximum " +
                       Num(r.max_gpu_kernel_ms) + " ms");
      }
    }
  }
}

// gpu-perf.N: right answers first, then speed against the spec.
void JudgeGpuPerf(Judge& j, const GpuInfo& g, const VerificationRules& r, const GpuSpecSpeed* spec,
                  Verdict& v) {
  const std::string name = std::string(conformance::kCheckGpuPerf) + "." + std::to_string(g.index);
  const Check* c = j.Require(name);
  if (!c) return;
  j.AtMost(*c, "mismatches", r.max_gpu_mismatches, "");
  auto mode = j.Get(*c, "matmul_mode");
  auto tflops = j.Get(*c, "matmul_tflops");
  auto gb_s = j.Get(*c, "mem_gb_s");
  if (!mode || !tflops || !gb_s) return;
  if (*mode != 1 && *mode != 2) {
    j.Fail(*c, "matmul_mode " + Num(*mode) + " is not one the server knows (1 or 2)");
    return;
  }
  if (*tflops <= 0 || *gb_s <= 0) {
    j.Fail(*c, "nothing was measured (matmul_tflops " + Num(*tflops) + ", mem_gb_s " + Num(*gb_s) +
                   ")");
    return;
  }
  GpuSpeed s;
  s.index = g.index;
  s.matmul_mode = static_cast<int>(*mode);
  s.measured_tflops = *tflops;
  s.measured_gb_s = *gb_s;
  const std::string label = spec && !spec->label.empty() ? spec->label : "its model";
  if (*tflops > r.max_gpu_tflops) {
    j.Note(name + ": matmul_tflops " + Num(*tflops) + " is not credible (above " +
           Num(r.max_gpu_tflops) + "); not used to rank the GPU");
    s.measured_tflops = 0;
  }
  // Each ratio that can be judged: the tensor figure only against a tensor spec (an FP32 FMA
  // figure has no spec column to meet), bandwidth whenever the spec has one.
  std::vector<std::pair<double, std::string>> ratios;
  if (spec && spec->tensor_tflops > 0 && s.matmul_mode == 1 && s.measured_tflops > 0) {
    s.spec_tflops = spec->tensor_tflops;
    ratios.push_back({s.measured_tflops / spec->tensor_tflops,
                      "matrix multiply " + Num(s.measured_tflops) + " of " +
                          Num(spec->tensor_tflops) + " TFLOPS"});
  }
  if (spec && spec->mem_gb_s > 0) {
    s.spec_gb_s = spec->mem_gb_s;
    ratios.push_back(
        {*gb_s / spec->mem_gb_s, "memory " + Num(*gb_s) + " of " + Num(spec->mem_gb_s) + " GB/s"});
  }
  if (ratios.empty()) {
    if (spec)
      j.Note(name + ": no spec figure for " + label + " to compare with; measured " + Num(*tflops) +
             " TFLOPS, " + Num(*gb_s) + " GB/s");
    v.gpu_speeds.push_back(s);
    return;
  }
  auto worst = std::min_element(ratios.begin(), ratios.end());
  s.ratio = worst->first;
  std::string what;
  for (const auto& [ratio, text] : ratios) what += (what.empty() ? "" : ", ") + text;
  const std::string pct = Num(std::round(s.ratio * 100)) + "%";
  if (s.ratio < r.gpu_perf_floor_ratio) {
    j.Fail(*c, "measures " + pct + " of the " + label + " spec (" + what + "); the floor is " +
                   Num(r.gpu_perf_floor_ratio * 100) + "%");
  } else if (s.ratio < r.gpu_perf_flag_ratio) {
    s.flagged = true;
    s.note = "measures " + pct + " of the " + label + " spec (" + what + ")";
    j.Note(name + ": flagged: " + s.note + ", below " + Num(r.gpu_perf_flag_ratio * 100) +
           "%; its offers are ranked by what it measured");
  }
  v.gpu_speeds.push_back(s);
}

// The driver against the CUDA version it reports, and what software it can run.
void JudgeCompat(Judge& j, const Inventory& inv, Verdict& v) {
  if (!inv.gpus.empty() && inv.driver_version.empty()) {
    j.Fail("driver-cuda: the inventory lists GPUs but no driver version");
  }
  if (!inv.driver_version.empty()) {
    if (inv.cuda_version.empty()) {
      j.Note("driver-cuda: the driver reports no CUDA version; nothing to check against the table");
    } else {
      CompatVerdict d = DriverSupportsCuda(inv.driver_version, inv.cuda_version);
      if (!d.known) {
        j.Note("driver-cuda: cannot check the driver's CUDA " + inv.cuda_version + ": " + d.reason);
      } else if (!d.ok || d.minor_compat_only) {
        // The CUDA version is the driver's own claim; only native support makes it true.
        j.Fail("driver-cuda: the driver reports CUDA " + inv.cuda_version +
               ", but the table disagrees: " + d.reason);
      }
    }
  }
  for (const std::string& t : inv.cuda_toolkits) {
    CompatVerdict d = DriverSupportsCuda(inv.driver_version, t);
    if (!d.ok) {
      j.Note("toolkit " + t + " left out: " + d.reason);
      continue;
    }
    v.usable_toolkits.push_back(t);
    if (d.minor_compat_only) j.Note("toolkit " + t + ": " + d.reason);
  }
  for (const std::string& t : inv.torch_builds) {
    CompatVerdict d = TorchBuildRuns(t, inv.driver_version);
    if (!d.ok) {
      j.Note("torch build " + t + " left out: " + d.reason);
      continue;
    }
    v.usable_torch_builds.push_back(t);
    if (d.minor_compat_only || d.unlisted_build) j.Note(d.reason);
  }
}

}  // namespace

Verdict Evaluate(const Inventory& inv, const conformance::Report& report,
                 const VerificationRules& rules, const std::map<int, GpuSpecSpeed>& specs) {
  Verdict v;
  Judge j(report, v);
  JudgeCpu(j, inv, rules);
  JudgeMemory(j, inv, rules);
  JudgeDisk(j, rules);
  JudgeLink(j, rules);
  for (const GpuInfo& g : inv.gpus) {
    JudgeGpu(j, g, rules);
    auto spec = specs.find(g.index);
    JudgeGpuPerf(j, g, rules, spec == specs.end() ? nullptr : &spec->second, v);
  }
  JudgeCompat(j, inv, v);
  j.NoteTheRest();
  v.verified = v.failures.empty();
  return v;
}

}  // namespace sluice::audit
