#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/market_view.h"
#include "cli/table.h"
#include "common/clock.h"

namespace sluice::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "sluice: %s\n", s.message().c_str());
  return 1;
}

#define SLUICE_ASSIGN_OR_RETURN_CLI(lhs, expr)                                                    \
  auto SLUICE_CONCAT(_cfg_, __LINE__) = (expr);                                                   \
  if (!SLUICE_CONCAT(_cfg_, __LINE__).ok()) return Fail(SLUICE_CONCAT(_cfg_, __LINE__).status()); \
  lhs = std::move(SLUICE_CONCAT(_cfg_, __LINE__)).value()

// How an agent offer's jobs are boxed, where it is less than the full sandbox: " (sandbox: none)"
// (--no-sandbox) or " (sandbox: bwrap-open-network)" (--allow-unfiltered-network).
std::string SandboxNote(const std::string& sandbox) {
  if (sandbox.empty() || sandbox == "bwrap") return "";
  return " (sandbox: " + sandbox + ")";
}

std::string UrlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<Json> Fetch(const GlobalFlags& g, const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  SLUICE_ASSIGN_OR_RETURN(auto api, ApiClient::Create(cfg));
  return api->Get(path);
}

std::string Gb(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// `sluice estimate --fail-over USD`: 3 when the best-ranked offer's expected cost to complete
// is over `limit` or unknown, 0 under it, 1 when nothing matches. Its verdict goes to stderr
// so --json output stays parseable.
int CostGate(const Json& estimate, double limit) {
  const Json& offers = estimate.contains("offers") ? estimate["offers"] : Json::array();
  char limit_text[32];
  std::snprintf(limit_text, sizeof limit_text, "$%.2f", limit);
  if (!offers.is_array() || offers.empty()) {
    std::fprintf(stderr, "sluice: cost gate: no offer matches the job, so nothing is under %s\n",
                 limit_text);
    return 1;
  }
  const Json& best = offers[0];
  const Json& o = best["offer"];
  const Json& e = best["estimate"];
  const std::string gpu = o.value("gpu_label", "");
  const std::string what = o.value("provider", "") + " " + o.value("node", "") + " (" +
                           (gpu.empty() ? "cpu only" : gpu) + ")";
  const std::string why = best.value("why", "");
  if (!e.contains("expected_cost") || !e["expected_cost"].is_number()) {
    std::fprintf(stderr,
                 "sluice: cost gate failed: the best offer, %s, has no expected cost (its "
                 "speed is unknown), so it cannot be shown to be under %s: %s\n",
                 what.c_str(), limit_text, why.c_str());
    return 3;
  }
  const double cost = e["expected_cost"].get<double>();
  const bool over = cost > limit;
  std::fprintf(stderr,
               "sluice: cost gate %s: the best offer, %s, is expected to cost $%.2f, %s %s: %s\n",
               over ? "failed" : "passed", what.c_str(), cost, over ? "over" : "within", limit_text,
               why.c_str());
  return over ? 3 : 0;
}

}  // namespace

int OffersCommand(const GlobalFlags& g, const std::string& query, const std::string& sort,
                  int limit) {
  SLUICE_ASSIGN_OR_RETURN_CLI(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  auto api = ApiClient::Create(cfg);
  if (!api.ok()) return Fail(api.status());
  std::string path = "/v1/offers?limit=" + std::to_string(limit) + "&q=" + UrlEncode(query);
  if (!sort.empty()) path += "&sort=" + UrlEncode(sort);
  auto resp = (*api)->Get(path);
  if (!resp.ok()) {
    // Query errors carry a caret line under the query; print them as they are.
    std::fprintf(stderr, "sluice: %s\n", resp.status().message().c_str());
    return resp.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (g.json) {
    std::cout << DumpJson((*resp)["offers"], 2) << "\n";
    return 0;
  }
  Table t({"PROVIDER", "NODE/TYPE", "REGION", "GPU", "GPUS", "VRAM", "CPUS", "$/GPU-H",
           "SPOT $/GPU-H", "CUDA", "PERF", "MEASURED", "SOURCE"});
  std::vector<std::string> flagged;  // "node/label: why it ranks by what it measured"
  for (const auto& o : (*resp)["offers"]) {
    std::string gpu = o.value("gpu_label", "");
    double spot = o.value("interruptible_price_per_gpu_hour", 0.0);
    t.Add({o.value("provider", ""), o.value("node", ""),
           o.value("region", "").empty() ? "-" : o.value("region", ""),
           gpu.empty() ? "(cpu only)" : gpu,
           std::to_string(o.value("gpus_available", 0)) + "/" + std::to_string(o.value("gpus", 0)),
           gpu.empty() ? "-" : Gb(o.value("vram_gb", 0.0)), std::to_string(o.value("cpus", 0)),
           gpu.empty() ? "-" : Dollars(o.value("price_per_gpu_hour", 0.0)),
           spot > 0 ? Dollars(spot) : "-",
           o.value("cuda_version", "").empty() ? "-" : o.value("cuda_version", ""), PerfText(o),
           MeasuredPerfText(o), o.value("source", "") + SandboxNote(o.value("sandbox", ""))});
    if (!o.value("perf_flag", "").empty()) {
      flagged.push_back(o.value("id", "") + ": " + o.value("perf_flag", ""));
    }
  }
  size_t matched = (*resp).value("matched", size_t{0});
  if (t.empty()) {
    if (query.empty()) {
      std::cout << "no offers: no agent is connected and no catalog is imported (start `sluice "
                   "agent` or run `sluice catalog import FILE.csv`)\n";
      return 0;
    }
    std::cout << "no offer matches `" << query << "`\n";
    if ((*resp).contains("explain")) PrintExplanation(std::cout, (*resp)["explain"]);
    return 0;
  }
  t.Print(std::cout);
  for (const auto& f : flagged) {
    std::cout << "slow: " << f << "; PERF is what it measured\n";
  }
  if (matched > t.size()) {
    std::cout << "(" << t.size() << " of " << matched << " matching offers; --limit shows more)\n";
  }
  return 0;
}

int EstimateCommand(const GlobalFlags& g, const EstimateFlags& f) {
  auto spec = ReadJobSpec(f.spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().message().c_str());
    return 2;
  }
  Json body{{"spec", spec::ToJson(*spec)}, {"limit", f.limit}};
  if (f.hours > 0) body["hours"] = f.hours;
  if (!f.objective.empty()) body["objective"] = f.objective;
  SLUICE_ASSIGN_OR_RETURN_CLI(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  auto api = ApiClient::Create(cfg);
  if (!api.ok()) return Fail(api.status());
  auto resp = (*api)->Post("/v1/estimate", body);
  if (!resp.ok()) {
    std::fprintf(stderr, "sluice: %s\n", resp.status().message().c_str());
    return resp.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
  } else {
    PrintEstimate(std::cout, *resp);
  }
  return f.fail_over > 0 ? CostGate(*resp, f.fail_over) : 0;
}

int CatalogImportCommand(const GlobalFlags& g, const std::vector<std::string>& files) {
  SLUICE_ASSIGN_OR_RETURN_CLI(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  auto api = ApiClient::Create(cfg);
  if (!api.ok()) return Fail(api.status());
  int rc = 0;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "sluice: cannot read %s\n", file.c_str());
      rc = 1;
      continue;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string name = std::filesystem::path(file).filename().string();
    auto resp = (*api)->PostText("/v1/catalogs?name=" + UrlEncode(name), ss.str(), "text/csv");
    if (!resp.ok()) {
      std::fprintf(stderr, "sluice: %s\n", resp.status().message().c_str());
      rc = 1;
      continue;
    }
    if (g.json) {
      std::cout << DumpJson(*resp) << "\n";
      continue;
    }
    std::cout << "imported " << resp->value("offers", 0) << " offers from " << file
              << " as provider " << resp->value("provider", "") << "\n";
    for (const auto& w : (*resp)["warnings"]) {
      std::cerr << "  warning: " << w.get<std::string>() << "\n";
    }
  }
  return rc;
}

int NodesCommand(const GlobalFlags& g) {
  auto resp = Fetch(g, "/v1/nodes");
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson((*resp)["nodes"], 2) << "\n";
    return 0;
  }
  Table t({"ID", "NAME", "STATE", "VERIFIED", "RELIABILITY", "GPUS", "CPUS", "MEMORY GB", "RUNNING",
           "LAST SEEN"});
  int64_t now = RealClock::Get()->NowMillis();
  std::vector<std::string> any_paused;  // takes no new work: why, for each
  for (const auto& n : (*resp)["nodes"]) {
    const Json& inv = n["inventory"];
    std::string gpus = "0";
    if (inv.is_object() && inv.contains("gpus") && inv["gpus"].is_array() && !inv["gpus"].empty()) {
      gpus = std::to_string(n.value("gpus_free", 0)) + "/" + std::to_string(inv["gpus"].size()) +
             " " + inv["gpus"][0].value("name", "");
    }
    int cores = inv.is_object() ? inv.value("cpu_cores", 0) : 0;
    double mem = inv.is_object() ? inv.value("memory_mib", 0.0) / 1024.0 : 0;
    std::string state = n.value("state", "");
    const bool paused = n.value("paused_until_ms", int64_t{0}) > now;
    std::string verified = n.value("verification", "unverified");
    if (n.value("verification_queued", false)) {
      verified += " (queued)";
    } else if (n.value("verifying", false)) {
      verified += " (checking)";
    }
    char rel[16] = "-";
    if (n.contains("reliability") && n["reliability"].is_object()) {
      std::snprintf(rel, sizeof rel, "%.2f", n["reliability"].value("score", 0.0));
    }
    if (paused) any_paused.push_back(n.value("name", "") + ": " + n.value("paused_reason", ""));
    t.Add({n.value("id", ""), n.value("name", ""), paused ? state + " (paused)" : state, verified,
           rel, gpus, std::to_string(n.value("cpus_free", 0)) + "/" + std::to_string(cores),
           Gb(n.value("memory_free_gb", 0.0)) + "/" + Gb(mem),
           std::to_string(n.value("running_attempts", 0)),
           state == "online" ? "now"
                             : HumanDuration(now - n.value("last_seen_ms", int64_t{0})) + " ago"});
  }
  if (t.empty()) {
    std::cout << "no nodes registered (start one with `sluice agent`)\n";
    return 0;
  }
  t.Print(std::cout);
  for (const auto& p : any_paused) std::cout << "paused " << p << "\n";
  std::cout << "(`sluice node status NODE` shows why a node is not verified)\n";
  return 0;
}

}  // namespace sluice::cli
