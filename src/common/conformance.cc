#include "common/conformance.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace sluice::conformance {
namespace {

constexpr size_t kMaxChecks = 256;
constexpr size_t kMaxMeasurements = 64;
constexpr size_t kMaxText = 4096;

Status Bad(std::string_view path, std::string_view what) {
  return Status::InvalidArgument(std::string(path) + ": " + std::string(what));
}

Result<Check> CheckFromJson(const Json& j, const std::string& path) {
  if (!j.is_object()) return Bad(path, "expected an object");
  Check c;
  SLUICE_ASSIGN_OR_RETURN(c.name, GetString(j, "name", path));
  if (c.name.empty() || c.name.size() > 64) return Bad(path + ".name", "1 to 64 characters");
  SLUICE_ASSIGN_OR_RETURN(std::string outcome, GetString(j, "outcome", path));
  auto o = OutcomeFromName(outcome);
  if (!o.ok()) return Bad(path + ".outcome", o.status().message());
  c.outcome = *o;
  SLUICE_ASSIGN_OR_RETURN(c.reason, GetStringOr(j, "reason", "", path));
  if (c.reason.size() > kMaxText) c.reason.resize(kMaxText);
  if (j.contains("measurements")) {
    const Json& m = j["measurements"];
    std::string mpath = path + ".measurements";
    if (!m.is_object()) return Bad(mpath, "expected an object of numbers");
    if (m.size() > kMaxMeasurements) return Bad(mpath, "more than 64 measurements");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>())) {
        return Bad(mpath + "." + it.key(), "expected a finite number");
      }
      if (it.key().empty() || it.key().size() > 64) return Bad(mpath, "key of 1 to 64 characters");
      c.measurements[it.key()] = it.value().get<double>();
    }
  }
  return c;
}

}  // namespace

std::string_view Name(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kFail:
      return "fail";
    case Outcome::kSkip:
      return "skip";
  }
  return "skip";
}

Result<Outcome> OutcomeFromName(std::string_view name) {
  if (name == "pass") return Outcome::kPass;
  if (name == "fail") return Outcome::kFail;
  if (name == "skip") return Outcome::kSkip;
  return Status::InvalidArgument("expected pass, fail or skip, got `" + std::string(name) + "`");
}

const Check* Report::Find(std::string_view name) const {
  for (const auto& c : checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Json ToJson(const Check& c) {
  Json m = Json::object();
  for (const auto& [k, v] : c.measurements) m[k] = v;
  return Json{{"name", c.name},
              {"outcome", std::string(Name(c.outcome))},
              {"measurements", m},
              {"reason", c.reason}};
}

Json ToJson(const Report& r) {
  Json checks = Json::array();
  for (const auto& c : r.checks) checks.push_back(ToJson(c));
  return Json{{"trigger", r.trigger},
              {"started_ms", r.started_ms},
              {"duration_ms", r.duration_ms},
              {"checks", checks}};
}

Result<Report> ReportFromJson(const Json& j, std::string_view path_view) {
  std::string path(path_view);
  if (!j.is_object()) return Bad(path, "expected an object");
  Report r;
  SLUICE_ASSIGN_OR_RETURN(r.trigger, GetStringOr(j, "trigger", "", path));
  if (r.trigger.size() > 64) return Bad(path + ".trigger", "too long");
  SLUICE_ASSIGN_OR_RETURN(r.started_ms, GetIntOr(j, "started_ms", 0, path));
  SLUICE_ASSIGN_OR_RETURN(r.duration_ms, GetIntOr(j, "duration_ms", 0, path));
  if (!j.contains("checks") || !j["checks"].is_array()) {
    return Bad(path + ".checks", "expected an array");
  }
  if (j["checks"].size() > kMaxChecks) return Bad(path + ".checks", "more than 256 checks");
  for (size_t i = 0; i < j["checks"].size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(
        Check c, CheckFromJson(j["checks"][i], path + ".checks[" + std::to_string(i) + "]"));
    r.checks.push_back(std::move(c));
  }
  return r;
}

std::string FormatReport(const Report& r) {
  std::string out;
  for (const auto& c : r.checks) {
    std::string line = std::string(Name(c.outcome));
    for (auto& ch : line) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    line += " " + c.name;
    for (const auto& [k, v] : c.measurements) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s=%.6g", k.c_str(), v);
      line += buf;
    }
    if (!c.reason.empty()) line += " - " + c.reason;
    out += line + "\n";
  }
  return out;
}

}  // namespace sluice::conformance
