// Conformance reports (issue 5): what the agent's suite measured on its machine. The agent
// records raw facts and measurements and its own reading of them; the server never trusts that
// reading: it re-evaluates every check against its own rules (audit/verification.h) and decides
// whether the node is verified.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace sluice::conformance {

enum class Outcome { kPass, kFail, kSkip };

std::string_view Name(Outcome o);  // "pass" | "fail" | "skip"
Result<Outcome> OutcomeFromName(std::string_view name);

// Check names used by the agent's suite. GPU checks carry the GPU index: "gpu-memory.0".
inline constexpr std::string_view kCheckCpu = "cpu";
inline constexpr std::string_view kCheckMemory = "memory";
inline constexpr std::string_view kCheckDisk = "disk";
inline constexpr std::string_view kCheckLink = "link";
inline constexpr std::string_view kCheckGpuMemory = "gpu-memory";    // + "." + index
inline constexpr std::string_view kCheckGpuCompute = "gpu-compute";  // + "." + index
inline constexpr std::string_view kCheckGpuPerf = "gpu-perf";        // + "." + index
inline constexpr std::string_view kCheckDriverCuda = "driver-cuda";
inline constexpr std::string_view kCheckTorchCuda = "torch-cuda";

struct Check {
  std::string name;
  Outcome outcome = Outcome::kSkip;
  // Raw measurements, the unit in the key: "write_mib_s", "rtt_ms", "allocated_mib".
  std::map<std::string, double> measurements;
  // One line, always set: what was measured, or why the check failed or was skipped.
  std::string reason;

  bool operator==(const Check&) const = default;
};

struct Report {
  std::string trigger;      // "registration" | "schedule" | "on-demand"
  int64_t started_ms = 0;   // wall clock (Unix ms) when the suite started
  int64_t duration_ms = 0;  // how long the whole suite took
  std::vector<Check> checks;

  bool operator==(const Report&) const = default;
  const Check* Find(std::string_view name) const;
};

Json ToJson(const Check& c);
Json ToJson(const Report& r);
// Strict: wrong types are errors naming the field ("report.checks[2].measurements.rtt_ms: ...").
// Unknown outcomes are errors; more than 256 checks or 64 measurements per check are refused.
Result<Report> ReportFromJson(const Json& j, std::string_view path = "report");

// Human-readable: one line per check, "PASS disk  write 812.3 MiB/s ... — reason".
std::string FormatReport(const Report& r);

}  // namespace sluice::conformance
