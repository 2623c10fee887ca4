#include "cli/dry_run.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "agent/probe.h"
#include "agent/software_probe.h"
#include "cli/api_client.h"
#include "cli/market_view.h"
#include "cli/table.h"
#include "market/job_market.h"
#include "market/query.h"

namespace sluice::cli {
namespace {

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// This machine's value of `fact`, or why there is none.
std::string LocalValue(spec::RuntimeFact fact, const LocalFacts& local) {
  const bool no_driver = local.driver_version.empty();
  switch (fact) {
    case spec::RuntimeFact::kCuda:
      if (!local.cuda_version.empty()) return local.cuda_version;
      return no_driver ? "none (no NVIDIA driver)" : "none (the driver does not say)";
    case spec::RuntimeFact::kDriver:
      return no_driver ? "none (no NVIDIA driver)" : local.driver_version;
    case spec::RuntimeFact::kTorch:
      if (!local.torch_builds.empty()) return Joined(local.torch_builds);
      return local.python_version.empty() ? "none (no python3)"
                                          : "none (python3 cannot import torch)";
    case spec::RuntimeFact::kPython:
      return local.python_version.empty() ? "none (no python3 on PATH)" : local.python_version;
  }
  return "none";
}

void PrintFingerprint(const spec::JobSpec& spec, const std::string& path) {
  const spec::Fingerprint fp = spec::EnvironmentFingerprint(spec.runtime);
  std::cout << "spec " << path << " (" << spec.name << "): parsed; nothing is submitted or "
            << "uploaded\n"
            << "environment fingerprint:\n"
            << "  runtime: " << fp.canonical_json
            << (spec.runtime.empty() ? "  (no runtime block: any software will do)" : "") << "\n"
            << "  sha256:  " << fp.sha256 << "\n";
}

void PrintLocal(const std::vector<LocalCheck>& checks, const LocalFacts& local) {
  std::cout << "\nthis machine";
  if (local.gpu_source == "none") {
    std::cout << " (no NVIDIA driver found):\n";
    for (const auto& a : local.gpu_attempts) std::cout << "  tried " << a << "\n";
  } else {
    std::cout << " (driver facts from " << local.gpu_source << "):\n";
  }
  if (checks.empty()) {
    std::cout << "  nothing to check: the spec has no runtime block\n";
    return;
  }
  Table t({"FACT", "WANTS", "TERM", "LOCAL", "RESULT"});
  for (const auto& c : checks) {
    t.Add({std::string(spec::Name(c.fact)), c.wants, c.term, c.local, c.ok ? "ok" : "mismatch"});
  }
  std::ostringstream table;
  t.Print(table);
  // Indent the table under its heading.
  std::string line;
  std::istringstream lines(table.str());
  while (std::getline(lines, line)) std::cout << "  " << line << "\n";
}

}  // namespace

LocalFacts ProbeLocalFacts() {
  LocalFacts facts;
  GpuProbeOutcome gpus = ProbeGpus();
  facts.gpu_source = gpus.source;
  facts.gpu_attempts = std::move(gpus.attempts);
  facts.driver_version = std::move(gpus.probed.driver_version);
  facts.cuda_version = std::move(gpus.probed.cuda_version);
  SoftwareProbeOptions opts;
  opts.nvcc = "";  // toolkits are not part of the contract; skip the slow part of finding them
  SoftwareFacts sw = ProbeSoftware(opts);
  facts.python_version = std::move(sw.python_version);
  facts.torch_builds = std::move(sw.torch_builds);
  return facts;
}

std::vector<LocalCheck> CheckLocal(const spec::RuntimeContract& contract, const LocalFacts& local) {
  // This machine as an offer, so each fact is judged by the very term the server uses.
  market::Offer here;
  here.driver_version = local.driver_version;
  here.cuda_version = local.cuda_version;
  here.torch_builds = local.torch_builds;
  here.python_version = local.python_version;
  std::vector<LocalCheck> out;
  for (spec::RuntimeFact fact : spec::kRuntimeFacts) {
    const auto& c = contract.Get(fact);
    if (!c) continue;
    LocalCheck check;
    check.fact = fact;
    check.wants = spec::ToString(fact, *c);
    check.local = LocalValue(fact, local);
    spec::RuntimeContract one;
    one.Get(fact) = c;
    auto q = market::CompileRuntime(one);
    if (q.ok() && q->terms.size() == 1) {
      check.term = market::ToString(*q);
      check.ok = market::MatchesTerm(q->terms[0], here);
    } else {
      check.term = q.ok() ? "?" : q.status().message();
    }
    out.push_back(std::move(check));
  }
  return out;
}

Json ToJson(const LocalCheck& c) {
  return Json{{"fact", std::string(spec::Name(c.fact))},
              {"wants", c.wants},
              {"term", c.term},
              {"local", c.local},
              {"ok", c.ok}};
}

int DryRunCommand(const GlobalFlags& g, const RunFlags& f) {
  auto spec = ReadJobSpec(f.spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().message().c_str());
    return 2;
  }
  if (!f.objective.empty()) spec->objective = f.objective;

  const LocalFacts local = ProbeLocalFacts();
  const std::vector<LocalCheck> checks = CheckLocal(spec->runtime, local);
  const spec::Fingerprint fp = spec::EnvironmentFingerprint(spec->runtime);
  Json out;  // --json: one object with all three parts
  if (g.json) {
    Json local_json = Json::array();
    for (const auto& c : checks) local_json.push_back(ToJson(c));
    out = Json{{"fingerprint", {{"runtime", fp.canonical_json}, {"sha256", fp.sha256}}},
               {"local", {{"gpu_source", local.gpu_source}, {"checks", local_json}}}};
  } else {
    PrintFingerprint(*spec, f.spec_path);
    PrintLocal(checks, local);
  }

  // The server compiles the spec through server/job_market, runtime terms included, so its
  // answer and its explanation are the ones a real submission would get.
  auto cfg = ResolveClientConfig(g.server, g.token);
  const std::string where = cfg.ok() ? cfg->server : "(no server configured)";
  Result<Json> resp = Status::Unavailable("");
  if (!cfg.ok()) {
    resp = cfg.status();
  } else if (auto api = ApiClient::Create(*cfg); !api.ok()) {
    resp = api.status();
  } else {
    resp = (*api)->Post("/v1/estimate", Json{{"spec", spec::ToJson(*spec)}, {"limit", 10}});
  }
  if (!resp.ok()) {
    const StatusCode code = resp.status().code();
    const bool unreachable =
        code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded || !cfg.ok();
    std::string msg = unreachable ? "cannot ask the server at " + where + " for offers: "
                                  : "the server at " + where + " refused the estimate: ";
    msg += resp.status().message();
    if (g.json) {
      out["error"] = msg;
      std::cout << DumpJson(out, 2) << "\n";
    }
    std::fprintf(stderr, "\nsluice: %s\n", msg.c_str());
    return code == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const bool satisfied = resp->contains("offers") && !(*resp)["offers"].empty();
  if (g.json) {
    out["estimate"] = *resp;
    out["satisfied"] = satisfied;
    std::cout << DumpJson(out, 2) << "\n";
    return satisfied ? 0 : 1;
  }
  std::cout << "\nthe market (" << where << "): offers that satisfy the whole job\n";
  PrintEstimate(std::cout, *resp);
  bool launchable = false;
  for (const auto& r : (*resp)["offers"]) launchable = launchable || r.value("launchable", false);
  if (satisfied && !launchable) {
    std::cout << "(none of these is launchable now: catalog offers are listed for comparison; a "
                 "real run needs a node that satisfies the job)\n";
  }
  if (!satisfied) {
    std::fprintf(stderr, "\nsluice: no offer satisfies %s; a real run would be refused\n",
                 f.spec_path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace sluice::cli
