// The user's job API: submit, estimate, list, get, cancel, delete. Members of ServerCore.
#include <algorithm>

#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

Result<JobRecord> ServerCore::SubmitJob(const spec::JobSpec& spec, const std::string& workdir_blob,
                                        bool queue_unschedulable) {
  SubmitOptions o;
  o.queue_unschedulable = queue_unschedulable;
  o.exempt_from_quota = true;
  return SubmitJob(spec, workdir_blob, o);
}

std::string ServerCore::UnschedulableMessageLocked(const market::MarketRequest& market,
                                                   const sched::Waiting& waiting) const {
  std::string msg = waiting.reason;
  // Catalog offers are not launchable, but they tell the user where such capacity exists.
  auto refs = catalog_index_.Search(market.query, {{market::Field::kPrice, false}},
                                    market::OfferIndex::kNoLimit);
  if (!refs.empty()) {
    const market::Offer& o = *refs.front();
    char price[32];
    std::snprintf(price, sizeof price, "%.4g", o.price_per_gpu_hour);
    msg += "\n" + std::to_string(refs.size()) + " catalog offer" + (refs.size() == 1 ? "" : "s") +
           " match it (listed for comparison, not launchable); the cheapest is " + o.provider +
           " " + o.node + (o.region.empty() ? "" : " in " + o.region) + " at $" + price + "/GPU-h";
  }
  // Nodes left out because they are not verified: say so, with the server's reasons.
  for (const auto& [id, ns] : nodes_) {
    if (ns.record.state == st::NodeState::kLost || ns.record.verification == kVerified ||
        ns.awaiting_report) {
      continue;
    }
    std::string why;
    for (const auto& r : ns.record.verification_reasons) {
      if (r.is_string() && r.get<std::string>().rfind("note: ", 0) != 0) {
        why += (why.empty() ? "" : "; ") + r.get<std::string>();
      }
    }
    msg += "\nnode " + ns.record.name + " is " + ns.record.verification + " and takes no work" +
           (why.empty() ? "" : ": " + why);
  }
  msg +=
      "\nsee `sluice estimate` for what fits, or submit with `sluice run --queue` to wait for "
      "a node that can run it";
  return msg;
}

Result<EstimatePage> ServerCore::Estimate(const spec::JobSpec& spec, std::optional<double> hours,
                                          std::optional<market::Objective> objective,
                                          size_t limit) {
  EstimatePage page;
  SLUICE_ASSIGN_OR_RETURN(page.request, market::CompileJob(spec, hours, objective));
  const market::MarketRequest& req = page.request;
  std::vector<market::Offer> candidates;
  {
    std::lock_guard<TimedMutex> lock(mu_);
    for (auto& o : AgentOffersLocked()) {
      if (market::Matches(req.query, o)) candidates.push_back(std::move(o));
    }
    for (const auto& ref : catalog_index_.Search(req.query, {}, market::OfferIndex::kNoLimit)) {
      candidates.push_back(*ref);
    }
  }
  if (req.max_price_per_hour) {
    // The query bounds the per-GPU price where one price applies; the budget is for the whole
    // allocation at the price the cost model picks.
    std::erase_if(candidates, [&](const market::Offer& o) {
      bool over = market::EstimateCost(o, req.work, options_.cost_model).price_per_hour >
                  *req.max_price_per_hour + 1e-9;
      page.over_budget += over;
      return over;
    });
  }
  page.matched = candidates.size();
  page.ranked = market::Rank(candidates, req.work, options_.cost_model, req.objective, limit);
  if (page.matched == 0 && page.over_budget == 0) {
    page.explanation = market::Explain(req.query, ListOffers(), 3);
  }
  return page;
}

Status ServerCore::DeleteJob(const std::string& id) {
  std::lock_guard<TimedMutex> lock(mu_);
  auto it = jobs_.find(id);
  const FinishedJob* done = it == jobs_.end() ? finished_.jobs.Find(id) : nullptr;
  if (it == jobs_.end() && done == nullptr) return Status::NotFound("no job " + id);
  if (it != jobs_.end() && !st::IsTerminal(it->second.record.state)) {
    return Status::FailedPrecondition("job " + id + " is " +
                                      std::string(st::Name(it->second.record.state)) +
                                      "; cancel it first (sluice cancel " + id + ")");
  }
  WriteBatch batch;
  batch.deleted_jobs.push_back(id);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  std::vector<std::string> manifests;
  if (auto kept = checkpoints_.find(id); kept != checkpoints_.end()) {
    for (const auto& c : kept->second) manifests.push_back(c.manifest);
  }
  const std::string workdir =
      it != jobs_.end() ? it->second.record.workdir_blob : done->workdir_blob;
  checkpoints_.erase(id);
  avoid_.erase(id);
  charges_.Forget(id);
  money_.anomalies_raised.erase(id);
  if (it != jobs_.end()) jobs_.erase(it);
  finished_.jobs.Erase(id);
  IndexJobLocked(id);
  NoteJobBlobsLocked(id);  // neither its workdir nor its checkpoints are used by it any more
  CollectBlobsLocked(manifests);
  if (!workdir.empty() && blobs_ != nullptr && !blob_refs_.Referenced(workdir)) {
    (void)blobs_->Delete(workdir);
  }
  return Status::Ok();
}

Result<JobDetail> ServerCore::GetJob(const std::string& id) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(auto job, JobRecordLocked(id));
  if (!job) return Status::NotFound("no job " + id);
  JobDetail d;
  d.job = *std::move(job);
  SLUICE_ASSIGN_OR_RETURN(d.attempts, store_->AttemptsForJob(id));
  SLUICE_ASSIGN_OR_RETURN(d.events, store_->ReadEvents(id, 0, 10000));
  return d;
}

Result<JobRecord> ServerCore::CancelJob(const std::string& id) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(JobState * unfinished, UnfinishedJobLocked(id));
  const JobRecord& live = unfinished->record;
  if (live.cancel_requested) return live;  // idempotent
  Edit edit;
  JobRecord& job = StagedJobLocked(edit, id).record;
  if (job.state == st::JobState::kQueued || job.state == st::JobState::kBudgetExhausted) {
    job.state = st::JobState::kCancelled;
    job.finished_ms = clock_->NowMillis();
    job.reason = "cancelled by user";
    edit.batch.jobs.push_back(job);
    edit.batch.events.push_back(
        EventLocked(id, "cancelled", "cancelled while " + std::string(st::Name(live.state))));
  } else {
    job.cancel_requested = true;
    edit.batch.jobs.push_back(job);
    edit.batch.events.push_back(
        EventLocked(id, "cancel_requested",
                    "cancel requested: SIGTERM to the process group, SIGKILL after " +
                        std::to_string(options_.cancel_grace_ms / 1000) + "s"));
    if (auto att = active_attempts_.find(job.attempt_id); att != active_attempts_.end()) {
      edit.sends.emplace_back(att->second.node_id,
                              proto::CancelMessage({att->first, options_.cancel_grace_ms}));
    }
  }
  const JobRecord out = job;
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  return out;
}

}  // namespace sluice::server
