#include "cli/market_view.h"

#include <cstdio>
#include <string>

#include "cli/table.h"

namespace sluice::cli {
namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string NumberOr(const Json& j, const char* key, int digits, const char* prefix = "") {
  if (!j.contains(key) || !j[key].is_number()) return "?";
  return prefix + Fixed(j[key].get<double>(), digits);
}

}  // namespace

void PrintExplanation(std::ostream& out, const Json& ex) {
  if (!ex.is_object()) return;
  out << "of " << ex.value("offers_considered", 0) << " offers, each condition alone rules out:\n";
  for (const auto& term : ex["terms"]) {
    out << "  " << term.value("term", "") << ": " << term.value("eliminated", 0) << " offers\n";
  }
  if (ex.contains("nearest") && !ex["nearest"].empty()) out << "nearest offers:\n";
  for (const auto& n : ex["nearest"]) {
    const Json& o = n["offer"];
    std::string fails;
    for (const auto& f : n["fails"]) fails += (fails.empty() ? "" : ", ") + f.get<std::string>();
    std::string gpu = o.value("gpu_label", "");
    out << "  " << o.value("provider", "") << " " << o.value("node", "") << " "
        << (gpu.empty() ? "(cpu only)" : gpu + " x" + std::to_string(o.value("gpus_available", 0)))
        << " at " << Dollars(o.value("price_per_gpu_hour", 0.0)) << "/GPU-h: lacks " << fails
        << "\n";
  }
}

void PrintEstimate(std::ostream& out, const Json& est) {
  const double hours = est.value("hours", 0.0);
  out << "ranked by expected " << est.value("objective", "cost")
      << (est.value("objective", "") == "price" ? " per hour" : " to complete") << " for "
      << Fixed(hours, hours < 10 ? 2 : 1) << " h of work on the reference GPU (a100-80gb)"
      << (est.value("hours_assumed", false)
              ? ", assumed: set expected_hours in the spec or pass --hours"
              : "")
      << "\nquery: " << (est.value("query", "").empty() ? "(any offer)" : est.value("query", ""))
      << "\n";
  const Json& offers = est["offers"];
  if (offers.empty()) {
    size_t over = est.value("over_budget", size_t{0});
    if (over > 0) {
      out << "no offer fits: " << over
          << " match the resources but cost more than max_price_per_hour\n";
    } else {
      out << "no offer matches\n";
      if (est.contains("explain")) PrintExplanation(out, est["explain"]);
    }
    return;
  }
  Table t({"#", "PROVIDER", "NODE/TYPE", "REGION", "GPU", "CAPACITY", "$/H", "PERF", "EXP. HOURS",
           "EXP. COST", "LAUNCH"});
  int rank = 0;
  for (const auto& r : offers) {
    const Json& o = r["offer"];
    const Json& e = r["estimate"];
    std::string gpu = o.value("gpu_label", "");
    t.Add({std::to_string(++rank), o.value("provider", ""), o.value("node", ""),
           o.value("region", "").empty() ? "-" : o.value("region", ""),
           gpu.empty() ? "(cpu only)" : gpu + " x" + std::to_string(o.value("gpus_available", 0)),
           e.value("capacity", ""), Dollars(e.value("price_per_hour", 0.0)),
           NumberOr(e, "perf", 2) + (o.value("perf_flag", "").empty() ? "" : " (measured)"),
           NumberOr(e, "expected_hours", 2), NumberOr(e, "expected_cost", 2, "$"),
           r.value("launchable", false) ? "yes" : "catalog"});
  }
  t.Print(out);
  out << "why:\n";
  rank = 0;
  for (const auto& r : offers) {
    out << "  " << ++rank << ". " << r.value("why", "") << "\n";
    const std::string flag = r["offer"].value("perf_flag", "");
    if (!flag.empty()) out << "     perf is what the node measured: it " << flag << "\n";
  }
  size_t matched = est.value("matched", size_t{0});
  if (matched > offers.size()) {
    out << "(" << offers.size() << " of " << matched << " matching offers; --limit shows more)\n";
  }
  if (size_t over = est.value("over_budget", size_t{0}); over > 0) {
    out << "(" << over << " more match the resources but cost more than max_price_per_hour)\n";
  }
}

std::string PerfText(const Json& offer) {
  const double perf = offer.value("perf_score", 0.0);
  if (!(perf > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", perf);
  const bool measured = !offer.value("perf_flag", "").empty() ||
                        (offer.value("spec_perf", 0.0) <= 0 && offer.contains("measured_perf") &&
                         offer["measured_perf"].is_number());
  return std::string(buf) + (measured ? " (measured)" : "");
}

std::string MeasuredPerfText(const Json& offer) {
  if (!offer.contains("measured_perf") || !offer["measured_perf"].is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", offer["measured_perf"].get<double>());
  return buf;
}

}  // namespace sluice::cli
