// `sluice node status|verify|revoke`, `sluice audit-log`, `sluice audit JOB -o F` and
// `sluice audit verify F` (issue 5): what a provider sees about its node's verification, and
// what an auditor gets and checks.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "audit/bundle.h"
#include "audit/signing_key.h"
#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/conformance.h"
#include "common/crypto.h"
#include "spec/job_spec.h"

namespace sluice::cli {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "sluice: %s\n", s.message().c_str());
  return 1;
}

Result<std::unique_ptr<ApiClient>> Connect(const GlobalFlags& g) {
  SLUICE_ASSIGN_OR_RETURN(ClientConfig cfg, ResolveClientConfig(g.server, g.token));
  return ApiClient::Create(cfg);
}

// The node named `node` (id or name) in GET /v1/nodes.
Result<Json> FindNode(ApiClient& api, const std::string& node) {
  SLUICE_ASSIGN_OR_RETURN(Json resp, api.Get("/v1/nodes"));
  Json found;
  for (const auto& n : resp["nodes"]) {
    if (n.value("id", "") != node && n.value("name", "") != node) continue;
    if (!found.is_null()) {
      return Status::InvalidArgument("`" + node + "` names several nodes; use the node id");
    }
    found = n;
  }
  if (found.is_null()) return Status::NotFound("no node " + node + " (see `sluice nodes`)");
  return found;
}

std::string Utc(int64_t ms) {
  if (ms <= 0) return "never";
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "speed        GPU 0: 612.3 TFLOPS FP16 tensor (62% of its spec 989), memory 2950 GB/s (88% of
// 3350)", one line per GPU the last verification measured.
void PrintGpuSpeeds(const Json& n) {
  if (!n.contains("gpu_speeds") || !n["gpu_speeds"].is_array()) return;
  bool first = true;
  for (const auto& s : n["gpu_speeds"]) {
    auto part = [&](const char* measured, const char* spec, const char* unit) {
      const double m = s.value(measured, 0.0), sp = s.value(spec, 0.0);
      char buf[96];
      if (sp > 0) {
        std::snprintf(buf, sizeof buf, "%.1f %s (%.0f%% of its spec %.0f)", m, unit, m / sp * 100,
                      sp);
      } else {
        std::snprintf(buf, sizeof buf, "%.1f %s (no spec figure)", m, unit);
      }
      return std::string(buf);
    };
    const bool tensor = s.value("matmul_mode", "") == "fp16-tensor";
    std::cout << (first ? "speed        " : "             ") << "GPU " << s.value("index", 0)
              << ": "
              << part("measured_tflops", "spec_tflops",
                      tensor ? "TFLOPS FP16 tensor" : "TFLOPS FP32 FMA")
              << ", memory " << part("measured_gb_s", "spec_gb_s", "GB/s")
              << (s.value("flagged", false) ? "  FLAGGED: ranked by what it measured" : "") << "\n";
    first = false;
  }
}

void PrintNodeStatus(const Json& n) {
  std::cout << "node         " << n.value("name", "") << " (" << n.value("id", "") << "), "
            << n.value("state", "") << "\n";
  std::cout << "verification " << n.value("verification", "unverified")
            << (n.value("verifying", false) ? " (a conformance run is under way)" : "") << "\n";
  if (n.contains("verification_reasons")) {
    for (const auto& r : n["verification_reasons"]) {
      if (r.is_string()) std::cout << "  - " << r.get<std::string>() << "\n";
    }
  }
  std::cout << "last report  " << Utc(n.value("verified_ms", int64_t{0})) << "\n";
  std::cout << "hardware     " << n.value("hardware_fingerprint", "") << "\n";
  std::cout << "software     " << n.value("software_fingerprint", "") << "\n";
  if (n.contains("reliability") && n["reliability"].is_object()) {
    std::cout << "reliability  " << n["reliability"].value("explain", "") << "\n";
  }
  PrintGpuSpeeds(n);
  auto report = conformance::ReportFromJson(n.value("conformance", Json::object()));
  if (report.ok() && !report->checks.empty()) {
    std::cout << "\nconformance suite (" << report->trigger << ", " << report->duration_ms
              << " ms; the agent's own reading, judged by the server above):\n"
              << conformance::FormatReport(*report);
  }
}

// --since: "1h"/"30m"/"2d" ago, an RFC 3339 UTC time "2026-11-30T00:00:00Z", or Unix ms.
Result<int64_t> ParseSince(const std::string& text) {
  if (text.empty()) return int64_t{0};
  if (text.find_first_not_of("0123456789") == std::string::npos && text.size() > 6) {
    return static_cast<int64_t>(std::stoll(text));
  }
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) end = strptime(text.c_str(), "%Y-%m-%d", &(tm = std::tm{}));
  if (end != nullptr && (*end == '\0' || std::string(end) == "Z")) {
    return static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  auto ago = spec::ParseDurationSeconds(text);
  if (ago.ok()) return RealClock::Get()->NowMillis() - *ago * 1000;
  return Status::InvalidArgument(
      "--since: expected a duration ago (1h, 30m, 7d), a UTC time "
      "(2026-11-30T08:00:00Z or 2026-11-30) or Unix milliseconds, "
      "got `" +
      text + "`");
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int NodeStatusCommand(const GlobalFlags& g, const std::string& node) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto n = FindNode(**api, node);
  if (!n.ok()) return Fail(n.status());
  if (g.json) {
    std::cout << DumpJson(*n, 2) << "\n";
    return 0;
  }
  PrintNodeStatus(*n);
  return n->value("verification", "") == "verified" ? 0 : 2;
}

int NodeVerifyCommand(const GlobalFlags& g, const std::string& node, bool wait, double timeout_s) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto before = FindNode(**api, node);
  if (!before.ok()) return Fail(before.status());
  const std::string id = before->value("id", "");
  const int64_t last = before->value("verified_ms", int64_t{0});
  auto resp = (*api)->Post("/v1/nodes/" + id + "/verify", Json::object());
  if (!resp.ok()) return Fail(resp.status());
  if (!wait) {
    std::cout << "asked " << before->value("name", "") << " to run its conformance suite\n";
    return 0;
  }
  std::cerr << "waiting for " << before->value("name", "") << "'s conformance report...\n";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    auto n = FindNode(**api, id);
    if (!n.ok()) return Fail(n.status());
    if (n->value("verified_ms", int64_t{0}) != last && !n->value("verifying", false)) {
      if (g.json) {
        std::cout << DumpJson(*n, 2) << "\n";
      } else {
        PrintNodeStatus(*n);
      }
      return n->value("verification", "") == "verified" ? 0 : 2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return Fail(Status::DeadlineExceeded("no conformance report within " +
                                       std::to_string(static_cast<int>(timeout_s)) +
                                       "s; see `sluice node status " + id + "` later"));
}

int NodeRevokeCommand(const GlobalFlags& g, const std::string& node) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto n = FindNode(**api, node);
  if (!n.ok()) return Fail(n.status());
  const std::string id = n->value("id", "");
  auto resp = (*api)->Post("/v1/nodes/" + id + "/revoke", Json::object());
  if (!resp.ok()) return Fail(resp.status());
  if (g.json) {
    std::cout << DumpJson(*resp, 2) << "\n";
    return 0;
  }
  std::cout << "revoked node " << n->value("name", "") << " (" << id
            << "): its credential no longer works, its agent is disconnected and its running "
               "jobs are requeued elsewhere\n";
  return 0;
}

int AuditLogCommand(const GlobalFlags& g, const std::string& since_text, bool csv) {
  auto since = ParseSince(since_text);
  if (!since.ok()) return Fail(since.status());
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  int64_t after = 0;
  bool header = true;
  Table t({"TIME", "ACTOR", "SOURCE", "ACTION", "TARGET", "STATUS", "PARAMS"});
  Json all = Json::array();
  for (;;) {
    std::string q =
        "?since=" + std::to_string(*since) + "&after=" + std::to_string(after) + "&limit=1000";
    if (csv) {
      auto body = (*api)->GetBytes("/v1/audit-log" + q + "&format=csv");
      if (!body.ok()) return Fail(body.status());
      // Every page starts with the header; print it once.
      size_t nl = body->find('\n');
      std::string rows = nl == std::string::npos ? "" : body->substr(nl + 1);
      if (header) std::cout << body->substr(0, nl + 1);
      header = false;
      std::cout << rows;
      if (rows.empty()) break;
      // The last row's id is its first field.
      size_t last = rows.rfind('\n', rows.size() - 2);
      std::string line = rows.substr(last == std::string::npos ? 0 : last + 1);
      after = std::stoll(line.substr(0, line.find(',')));
      continue;
    }
    auto page = (*api)->Get("/v1/audit-log" + q);
    if (!page.ok()) return Fail(page.status());
    const Json& entries = (*page)["entries"];
    if (entries.empty()) break;
    for (const auto& e : entries) {
      all.push_back(e);
      std::string params = DumpJson(e["params"]);
      if (params.size() > 80) params = params.substr(0, 77) + "...";
      t.Add({Utc(e.value("ts_ms", int64_t{0})), e.value("actor", ""), e.value("source", ""),
             e.value("action", ""), e.value("target", ""), std::to_string(e.value("status", 0)),
             params});
    }
    after = (*page)["next"].get<int64_t>();
  }
  if (csv) return 0;
  if (g.json) {
    std::cout << DumpJson(all, 2) << "\n";
  } else if (t.empty()) {
    std::cout << "no audit entries" << (since_text.empty() ? "" : " since " + since_text) << "\n";
  } else {
    t.Print(std::cout);
  }
  return 0;
}

int AuditBundleCommand(const GlobalFlags& g, const std::string& job, const std::string& out) {
  auto api = Connect(g);
  if (!api.ok()) return Fail(api.status());
  auto zip = (*api)->GetBytes("/v1/jobs/" + job + "/audit");
  if (!zip.ok()) return Fail(zip.status());
  std::string path = out.empty() ? job + "-audit.zip" : out;
  if (Status s = WriteFileAtomic(path, *zip); !s.ok()) return Fail(s);
  auto files = ReadBundleFiles(*zip);
  if (!files.ok()) return Fail(files.status());
  std::cout << "wrote " << path << " (" << zip->size() << " bytes, sha256 "
            << Sha256Hex(*zip).substr(0, 16) << "...):\n";
  for (const auto& [name, data] : *files) {
    std::cout << "  " << name << " (" << data.size() << " bytes)\n";
  }
  std::cout << "check it with `sluice audit verify " << path
            << "` or with plain openssl (README: \"Trust: verified nodes, reliability, audit\")\n";
  return 0;
}

int AuditVerifyCommand(const GlobalFlags& g, const std::string& path,
                       const std::string& cert_path) {
  auto zip = ReadFile(path);
  if (!zip.ok()) return Fail(zip.status());
  std::string cert;
  if (!cert_path.empty()) {
    auto c = ReadFile(cert_path);
    if (!c.ok()) return Fail(c.status());
    cert = *c;
  } else {
    // Without --cert, the server's published certificate; pin it with --cert for independence.
    auto api = Connect(g);
    if (!api.ok()) return Fail(api.status());
    auto c = (*api)->GetBytes("/v1/audit/certificate");
    if (!c.ok()) {
      return Fail(Status(c.status().code(), "fetching the signing certificate from " +
                                                (*api)->server() + ": " + c.status().message() +
                                                " (or pass --cert FILE)"));
    }
    cert = *c;
  }
  auto fp = CertificateSha256(cert);
  if (!fp.ok()) return Fail(fp.status());
  auto report = VerifyBundle(*zip, cert);
  if (!report.ok()) return Fail(report.status());
  if (g.json) {
    Json files = Json::array();
    for (const auto& f : report->files) {
      files.push_back({{"name", f.name}, {"status", std::string(BundleFileStatusName(f.status))}});
    }
    std::cout << DumpJson(Json{{"ok", report->ok},
                               {"signature_ok", report->signature_ok},
                               {"certificate_sha256", *fp},
                               {"files", files},
                               {"failure", report->failure}},
                          2)
              << "\n";
    return report->ok ? 0 : 1;
  }
  std::cout << "signer certificate sha256 " << *fp << "\n";
  std::cout << "signature    " << (report->signature_ok ? "ok" : "INVALID") << "\n";
  for (const auto& f : report->files) {
    std::cout << "  " << BundleFileStatusName(f.status) << "  " << f.name << "\n";
  }
  if (!report->ok) {
    std::cout << "FAILED: " << report->failure << "\n";
    return 1;
  }
  std::cout << "bundle verified: every file matches the signed manifest\n";
  return 0;
}

}  // namespace sluice::cli
