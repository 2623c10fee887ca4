// Cost anomalies (issue 15 item 2; README "Budgets"): a job whose charges run 20 % over the
// estimate its current attempt was placed on gets one `cost-anomaly` event naming the cause, so
// a surprise is seen while it is small, not on the bill. Members of ServerCore; the caller holds
// mu_.
#include <algorithm>
#include <cstdio>

#include "ledger/metering.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

constexpr int kOverPercent = 20;

std::string Usd(int64_t micros) { return ledger::FormatMicros(micros); }

}  // namespace

void ServerCore::NoteAnomaliesLocked(Edit& edit) {
  // What this edit charges, per job and kind.
  std::map<std::string, JobCharges> staged;
  for (const auto& d : edit.batch.cost_deltas) {
    if (d.charged_micros <= 0) continue;
    staged[d.job_id].Add(d);
  }
  for (const auto& [job_id, now] : staged) {
    const JobState* js = ViewJobLocked(edit, job_id);
    if (js == nullptr || js->record.attempt_id.empty()) continue;
    const std::string& attempt_id = js->record.attempt_id;
    if (auto raised = money_.anomalies_raised.find(job_id);
        raised != money_.anomalies_raised.end() && raised->second == attempt_id) {
      continue;
    }
    if (edit.anomalies.count(job_id)) continue;  // staged for this attempt already
    const store::AttemptRecord* att = ViewAttemptLocked(edit, attempt_id);
    if (att == nullptr) {
      for (const auto& a : edit.batch.attempts) {
        if (a.id == attempt_id) att = &a;  // it ends in this edit
      }
    }
    if (att == nullptr || att->expected_cost_micros <= 0) continue;
    const int64_t estimate = att->expected_cost_micros;
    const JobCharges& before = charges_.Of(job_id);
    const int64_t compute = before.compute + now.compute;
    const int64_t storage = before.storage + now.storage;
    const int64_t transfer = before.transfer + now.transfer;
    const int64_t total = compute + storage + transfer;
    if (total * 100 <= estimate * (100 + kOverPercent)) continue;
    // This attempt's own compute, and what the attempts before it cost.
    int64_t this_attempt = 0;
    if (auto m = edit.meters.find(attempt_id); m != edit.meters.end() && m->second) {
      this_attempt = m->second->charged_micros;
    } else if (auto live = money_.open_meters.find(attempt_id); live != money_.open_meters.end()) {
      this_attempt = live->second.charged_micros;
    }
    for (const auto& m : edit.batch.meters) {
      if (m.attempt_id == attempt_id) this_attempt = m.charged_micros;
    }
    const int64_t earlier = std::max<int64_t>(0, compute - this_attempt);
    // The causes, largest first: what each adds beyond the estimate's share.
    std::vector<std::pair<int64_t, std::string>> causes;
    if (earlier > 0) {
      causes.emplace_back(earlier, "restarts: " + Usd(earlier) + " on the " +
                                       std::to_string(att->number - 1) +
                                       " attempt(s) before this one");
    }
    if (this_attempt > estimate) {
      causes.emplace_back(this_attempt - estimate,
                          "ran longer than expected: " + Usd(this_attempt) + " of compute on " +
                              "this attempt alone (set expected_hours closer to the truth)");
    }
    if (storage > 0) causes.emplace_back(storage, "storage: " + Usd(storage) + " kept");
    if (transfer > 0) causes.emplace_back(transfer, "transfer: " + Usd(transfer) + " moved");
    if (causes.empty()) {
      causes.emplace_back(0, "ran longer than expected");
    }
    std::sort(causes.begin(), causes.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string why = causes.front().second;
    for (size_t i = 1; i < causes.size(); ++i) why += "; also " + causes[i].second;
    const int64_t over = (total - estimate) * 100 / estimate;
    edit.batch.events.push_back(EventLocked(job_id, "cost-anomaly",
                                            "cost " + Usd(total) + " is " + std::to_string(over) +
                                                "% over the estimate " + Usd(estimate) +
                                                " at placement of attempt " +
                                                std::to_string(att->number) + ": " + why));
    edit.anomalies[job_id] = attempt_id;  // applied with the event, once it is committed
  }
}

}  // namespace sluice::server
