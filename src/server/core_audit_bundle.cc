// Signed audit bundles (issue 5): what ran where, from the snapshots frozen at placement.
#include <map>

#include "audit/bundle.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {
constexpr int kEventPage = 5000;
}  // namespace

Result<std::string> ServerCore::AuditBundle(const std::string& job_id) {
  SigningIdentity identity;
  {
    std::lock_guard<TimedMutex> lock(mu_);
    identity = signing_;
  }
  if (identity.key_pem.empty()) {
    return Status::FailedPrecondition("this server has no audit signing key");
  }
  SLUICE_ASSIGN_OR_RETURN(JobDetail detail, GetJob(job_id));
  // What ran where, from the snapshots frozen at placement.
  Json attempts = Json::array();
  Json hardware = Json::array();
  std::string conformance_log;
  std::map<std::string, Json> snapshots;
  for (const auto& a : detail.attempts) {
    Json snap;
    if (!a.node_snapshot.empty()) {
      if (!snapshots.count(a.node_snapshot)) {
        SLUICE_ASSIGN_OR_RETURN(auto row, store_->GetSnapshot(a.node_snapshot));
        if (!row) return Status::Internal("snapshot " + a.node_snapshot + " is missing");
        SLUICE_ASSIGN_OR_RETURN(snapshots[a.node_snapshot], ParseJson(row->json));
      }
      snap = snapshots[a.node_snapshot];
    }
    Json att{{"attempt", a.number},
             {"attempt_id", a.id},
             {"node_id", a.node_id},
             {"state", st::Name(a.state)},
             {"gpus", a.gpus},
             {"started_ms", a.started_ms},
             {"ended_ms", a.ended_ms},
             {"price_per_hour", a.price_per_hour},
             {"node_snapshot", a.node_snapshot}};
    if (snap.is_object()) {
      att["node_name"] = snap.value("node_name", "");
      att["hardware_fingerprint"] = snap.value("hardware_fingerprint", "");
      att["software_fingerprint"] = snap.value("software_fingerprint", "");
      att["verification"] = snap.value("verification", "");
      hardware.push_back(Json{{"attempt", a.number},
                              {"attempt_id", a.id},
                              {"node_id", a.node_id},
                              {"node_name", snap.value("node_name", "")},
                              {"inventory", snap["inventory"]}});
      conformance_log += "== attempt " + std::to_string(a.number) + " (" + a.id + ") on " +
                         snap.value("node_name", "") + " (" + a.node_id + ")\n";
      conformance_log += "verification: " + snap.value("verification", "") + "\n";
      if (snap.contains("verification_reasons")) {
        for (const auto& r : snap["verification_reasons"]) {
          if (r.is_string()) conformance_log += "  " + r.get<std::string>() + "\n";
        }
      }
      auto report = conformance::ReportFromJson(snap["conformance"]);
      if (report.ok() && !report->checks.empty()) {
        conformance_log += "report: trigger " + report->trigger + ", started " +
                           std::to_string(report->started_ms) + " ms, took " +
                           std::to_string(report->duration_ms) + " ms\n";
        conformance_log += conformance::FormatReport(*report);
      } else {
        conformance_log += "no conformance report on record\n";
      }
      conformance_log += "\n";
    } else {
      conformance_log += "== attempt " + std::to_string(a.number) + " (" + a.id +
                         "): placed before node snapshots existed; no record\n\n";
    }
    attempts.push_back(std::move(att));
  }
  const Json spec_doc = detail.job.spec.Parse();
  Json env{{"job_id", detail.job.id},
           {"job_name", detail.job.name},
           {"runtime", spec_doc.value("runtime", Json::object())},
           {"attempts", attempts}};
  if (auto spec = spec::JobSpecFromJson(spec_doc); spec.ok()) {
    auto fp = spec::EnvironmentFingerprint(spec->runtime);
    env["runtime_fingerprint"] = fp.sha256;
  }
  std::string events;
  // Every event, page by page: GetJob shows a job's first 10,000, a bundle must hold them all.
  for (int64_t after = 0;;) {
    SLUICE_ASSIGN_OR_RETURN(auto page, store_->ReadEvents(job_id, after, kEventPage));
    for (const auto& e : page) events += DumpJson(EventToJson(e)) + "\n";
    if (page.size() < static_cast<size_t>(kEventPage)) break;
    after = page.back().id;
  }
  Json job = JobToJson(detail.job);
  job["spec"] = spec_doc;
  // The bill (issue 14): each attempt's meter at its locked price, and the totals, in integer
  // micro-dollars, so the statement is signed with the hardware it paid for.
  SLUICE_ASSIGN_OR_RETURN(JobCost cost, CostOfJob(job_id));
  Json meters = Json::array();
  for (const auto& m : cost.meters) {
    meters.push_back(Json{{"attempt_id", m.attempt_id},
                          {"node_id", m.node_id},
                          {"resource", m.resource},
                          {"units", m.units},
                          {"memory_gb", m.memory_gb},
                          {"price_micros_per_hour", m.price_micros_per_hour},
                          {"capacity", m.interruptible ? "interruptible" : "on-demand"},
                          {"start_ms", m.start_ms},
                          {"end_ms", m.end_ms},
                          {"billed_until_ms", m.settled_ms},
                          {"charged_micros", m.charged_micros},
                          {"fee_micros", m.fee_micros},
                          {"lost_micros", m.lost_micros},
                          {"credited_micros", m.credited_micros},
                          {"credit_reason", m.credit_reason},
                          {"end_cause", m.end_cause}});
  }
  Json statement{{"job_id", job_id},
                 {"currency", "USD"},
                 {"unit", "micro-dollars"},
                 {"rules", "README \"Bills and earnings\", \"SLA credits\""},
                 {"meters", meters},
                 {"charged_micros", cost.charged_micros},
                 {"accruing_micros", cost.accruing_micros},
                 {"fee_micros", cost.fee_micros},
                 {"lost_micros", cost.lost_micros},
                 {"credited_micros", cost.credited_micros},
                 {"estimate_micros", cost.estimate_micros}};
  std::vector<std::pair<std::string, std::string>> files = {
      {"environment-fingerprint.json", DumpJson(env, 2) + "\n"},
      {"hardware-inventory.json", DumpJson(Json{{"attempts", hardware}}, 2) + "\n"},
      {"conformance-log.txt", conformance_log},
      {"cost-statement.json", DumpJson(statement, 2) + "\n"},
      {"events.jsonl", events},
      {"job.json", DumpJson(job, 2) + "\n"},
  };
  return WriteBundle(files, identity);
}

}  // namespace sluice::server
