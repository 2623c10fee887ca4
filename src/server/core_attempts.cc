// The attempt lifecycle: running, exits, requeues, node loss, preemption and checkpoints.
// Members of ServerCore.
#include <algorithm>
#include <cstdio>

#include "sched/requeue_policy.h"
#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

sched::AttemptEnd ToAttemptEnd(AttemptState state) {
  switch (state) {
    case AttemptState::kSucceeded:
      return sched::AttemptEnd::kSucceeded;
    case AttemptState::kCancelled:
      return sched::AttemptEnd::kCancelled;
    case AttemptState::kLost:
      return sched::AttemptEnd::kLost;
    case AttemptState::kPreempted:
      return sched::AttemptEnd::kPreempted;
    default:
      return sched::AttemptEnd::kFailed;
  }
}

}  // namespace

void ServerCore::FinishAttemptLocked(const std::string& attempt_id, AttemptState state,
                                     std::optional<int> exit_code, const std::string& cause,
                                     Edit& edit) {
  WriteBatch& batch = edit.batch;
  int64_t now = clock_->NowMillis();
  AttemptRecord att = StagedAttemptLocked(edit, attempt_id);
  att.state = state;
  att.exit_code = exit_code;
  att.ended_ms = now;
  att.cause = cause;
  batch.attempts.push_back(att);
  edit.attempts[attempt_id].reset();  // it leaves the active set
  const JobState* view = ViewJobLocked(edit, att.job_id);
  if (view != nullptr && view->record.attempt_id == att.id && !st::IsTerminal(view->record.state)) {
    JobState& js = StagedJobLocked(edit, att.job_id);
    JobRecord& job = js.record;
    // Capacity that went away under the job is not its fault: it runs again elsewhere, from its
    // last complete checkpoint, unless its restarts are used up (sched/requeue_policy.h).
    if (state == AttemptState::kPreempted && StoppedByMoney(cause)) {
      // Stopped by its budget or its account's credit (issue 15 item 1): it keeps its
      // checkpoint and waits, using none of its restarts, until the budget is raised or credit
      // added.
      const bool credit = cause.find(kCreditStop) != std::string::npos;
      const bool monthly = cause.find(kMonthlyStop) != std::string::npos;
      job.state = st::JobState::kBudgetExhausted;
      job.reason =
          cause.substr(cause.find(credit    ? kCreditStop
                                  : monthly ? kMonthlyStop
                                            : kBudgetStop)) +
          "; " +
          (job.checkpoint.empty() ? "no checkpoint saved"
                                  : "checkpoint " + job.checkpoint.substr(0, 12) + " kept") +
          (credit    ? "; it runs again once the account has credit (`sluice account credit`)"
           : monthly ? "; it runs again when the monthly budget is raised (`sluice budget "
                       "--account|--team NAME --monthly USD`) or the month ends"
                     : "; `sluice budget " + job.id + " USD` raises the budget and resumes it");
      batch.jobs.push_back(job);
      batch.events.push_back(EventLocked(job.id, "budget-exhausted", job.reason));
      return;
    }
    const int max_restarts = js.spec.lifecycle.max_restarts;
    const sched::RequeueDecision next =
        sched::AfterAttempt(ToAttemptEnd(state), job.cancel_requested, job.preemptions,
                            max_restarts, clock_->MonotonicMillis(), options_.preempt_cooldown_ms);
    if (next.requeue || next.exhausted) {
      if (next.requeue) {
        job.preemptions++;
        job.state = st::JobState::kQueued;
        job.reason = "requeued after " + cause;
        js.queued_since_mono = clock_->MonotonicMillis();
        batch.jobs.push_back(job);
        edit.avoid[job.id][att.node_id] = next.avoid_until;
        batch.events.push_back(EventLocked(
            job.id, "requeued",
            "attempt " + std::to_string(att.number) + " " + std::string(st::Name(state)) + " (" +
                cause + "); restart " + std::to_string(job.preemptions) + " of " +
                std::to_string(max_restarts) + ", " +
                (job.checkpoint.empty() ? "from the beginning (no checkpoint saved)"
                                        : "from checkpoint " + job.checkpoint.substr(0, 12))));
        return;
      }
      job.state = st::JobState::kFailed;
      job.exit_code = exit_code;
      job.finished_ms = now;
      job.reason = "max_restarts (" + std::to_string(max_restarts) + ") exhausted; the last " +
                   "attempt was " + std::string(st::Name(state)) + ": " + cause;
      batch.jobs.push_back(job);
      batch.events.push_back(EventLocked(job.id, "failed", job.reason));
      return;
    }
    switch (state) {
      case AttemptState::kSucceeded:
        job.state = st::JobState::kSucceeded;
        break;
      case AttemptState::kCancelled:
        job.state = st::JobState::kCancelled;
        break;
      case AttemptState::kLost:
        job.state = st::JobState::kLost;
        break;
      default:
        job.state = st::JobState::kFailed;
        break;
    }
    job.exit_code = exit_code;
    job.finished_ms = now;
    if (state != AttemptState::kSucceeded) job.reason = cause;
    batch.jobs.push_back(job);
    std::string msg = std::string(st::Name(job.state));
    if (exit_code) msg += " with exit code " + std::to_string(*exit_code);
    if (!cause.empty()) msg += " (" + cause + ")";
    batch.events.push_back(EventLocked(job.id, std::string(st::Name(job.state)), msg));
  }
}

void ServerCore::MarkRunningLocked(const std::string& attempt_id, const std::string& node_name,
                                   Edit& edit) {
  const AttemptRecord* view = ViewAttemptLocked(edit, attempt_id);
  // A resent `started` changes nothing.
  if (view == nullptr || view->state != AttemptState::kStarting) return;
  WriteBatch& batch = edit.batch;
  AttemptRecord& att = StagedAttemptLocked(edit, attempt_id);
  att.state = AttemptState::kRunning;
  att.started_ms = clock_->NowMillis();
  batch.attempts.push_back(att);
  const JobState* js = ViewJobLocked(edit, att.job_id);
  if (js != nullptr && js->record.state == st::JobState::kStarting) {
    JobRecord& job = StagedJobLocked(edit, att.job_id).record;
    job.state = st::JobState::kRunning;
    job.started_ms = att.started_ms;
    batch.jobs.push_back(job);
    batch.events.push_back(EventLocked(job.id, "started", "started on " + node_name));
  }
}

void ServerCore::ApplyExitLocked(const std::string& attempt_id, const proto::Exited& ex,
                                 Edit& edit) {
  const AttemptRecord att = StagedAttemptLocked(edit, attempt_id);
  if (!ex.checkpoint.empty()) SaveCheckpointLocked(att, ex.checkpoint, edit);
  const JobState* found = ViewJobLocked(edit, att.job_id);
  const JobState none;  // a job no longer in memory: its attempt still ends
  const JobState& js = found != nullptr ? *found : none;
  AttemptState state;
  std::string cause;
  std::optional<int> code = ex.exit_code;
  if (!ex.error.empty()) {
    state = AttemptState::kFailed;
    cause = "could not start: " + ex.error;
    code.reset();
  } else if (js.record.cancel_requested) {
    state = AttemptState::kCancelled;
    cause = "cancelled by user";
  } else if (att.cause.rfind(kPreemptingPrefix, 0) == 0) {
    // Whatever its exit code: a training script that saves on SIGTERM and exits 0 has not
    // finished its work (as Kubernetes marks disrupted pods failed, not succeeded). The next
    // attempt restores the checkpoint; if the work was in fact done, it finishes at once
    // (the README's checkpoint contract).
    state = AttemptState::kPreempted;
    cause = "preempted: " + att.cause.substr(kPreemptingPrefix.size());
    if (ex.exit_code == 0 && ex.signal == 0) cause += " (exited with code 0 while being preempted)";
  } else if (ex.exit_code == 0 && ex.signal == 0) {
    state = AttemptState::kSucceeded;
    cause = "exited";
  } else if (ex.out_of_memory) {
    state = AttemptState::kFailed;
    char gb[32];
    std::snprintf(gb, sizeof gb, "%g", js.spec.resources.memory_gb);
    cause = std::string("out of memory: the job needed more than the ") + gb +
            " GB it was allocated (resources.memory_gb)";
  } else {
    state = AttemptState::kFailed;
    cause = ex.signal ? "killed by signal " + std::to_string(ex.signal)
                      : "exited with code " + std::to_string(ex.exit_code);
  }
  FinishAttemptLocked(attempt_id, state, code, cause, edit);
}

Status ServerCore::LoseNodeLocked(const std::string& node_id, const std::string& why) {
  Edit edit;
  NodeState& node = StagedNodeLocked(edit, node_id);
  node.record.state = st::NodeState::kLost;
  edit.batch.nodes.push_back(node.record);
  CloseUptimeLocked(node, edit.batch);
  for (const auto& aid : AttemptsOnLocked(node_id)) {
    FinishAttemptLocked(aid, AttemptState::kLost, std::nullopt,
                        "node " + node.record.name + " lost: " + why, edit);
  }
  if (node.link) {
    edit.close.push_back(node.link);
    node.link.reset();
  }
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  return RequestScheduleLocked();
}

Status ServerCore::PreemptLocked(const std::string& attempt_id, const std::string& cause,
                                 bool tell_agent) {
  auto live = active_attempts_.find(attempt_id);
  if (live == active_attempts_.end()) return Status::Ok();
  if (live->second.cause.rfind(kPreemptingPrefix, 0) == 0) return Status::Ok();  // under way
  Edit edit;
  AttemptRecord& att = StagedAttemptLocked(edit, attempt_id);
  auto job = jobs_.find(att.job_id);
  att.cause = std::string(kPreemptingPrefix) + cause;
  edit.batch.attempts.push_back(att);
  // The job's grace period; an attempt whose job is not in memory gets the spec's default.
  const int64_t grace_ms = (job != jobs_.end() ? job->second.spec.lifecycle.grace_period_s
                                               : spec::Lifecycle{}.grace_period_s) *
                           1000;
  auto node = nodes_.find(att.node_id);
  edit.batch.events.push_back(
      EventLocked(att.job_id, "preempting",
                  "attempt " + std::to_string(att.number) + " on " +
                      (node != nodes_.end() ? node->second.record.name : att.node_id) +
                      " is being preempted (" + cause + "): SIGTERM, then SIGKILL after " +
                      std::to_string(grace_ms / 1000) + "s"));
  if (tell_agent) {
    edit.sends.emplace_back(att.node_id, proto::PreemptMessage({att.id, grace_ms, cause}));
  }
  return CommitLocked(edit);
}

Result<std::vector<std::string>> ServerCore::ReclaimNode(const std::string& node,
                                                         const std::vector<int>& gpus,
                                                         const std::string& cause) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(const NodeState* found, NodeByIdOrNameLocked(node));
  if (gpus.empty()) {
    // Taken back whole: out of the market until its provider resumes it or the cool-down passes.
    Edit edit;
    PauseNodeLocked(edit, found->record.id, "reclaimed by its provider (" + cause + ")");
    SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  }
  std::vector<std::string> preempted;
  for (const auto& aid : AttemptsOnLocked(found->record.id)) {
    auto live = active_attempts_.find(aid);
    if (live == active_attempts_.end()) continue;  // the index and the map change together
    const AttemptRecord& att = live->second;
    bool hit = gpus.empty();
    for (int g : gpus) hit |= std::find(att.gpus.begin(), att.gpus.end(), g) != att.gpus.end();
    if (hit) preempted.push_back(aid);
  }
  for (const auto& aid : preempted) SLUICE_RETURN_IF_ERROR(PreemptLocked(aid, cause));
  return preempted;
}

void ServerCore::SaveCheckpointLocked(const AttemptRecord& att, const std::string& manifest,
                                      Edit& edit) {
  const JobState* view = ViewJobLocked(edit, att.job_id);
  if (view == nullptr || view->record.attempt_id != att.id || manifest == view->record.checkpoint) {
    return;
  }
  WriteBatch& batch = edit.batch;
  // The agent sends the manifest only after every chunk and the manifest itself were stored, so
  // a manifest present in the blob store is a complete checkpoint; anything else is refused and
  // the previous complete one stays current.
  if (!store::BlobStore::IsValidDigest(manifest) || (blobs_ != nullptr && !blobs_->Has(manifest))) {
    batch.events.push_back(EventLocked(att.job_id, "checkpoint_rejected",
                                       "checkpoint " + manifest.substr(0, 12) +
                                           " is not in the blob store; keeping the previous one"));
    return;
  }
  JobState& js = StagedJobLocked(edit, att.job_id);
  js.record.checkpoint = manifest;
  batch.jobs.push_back(js.record);
  store::CheckpointRecord rec{att.job_id, manifest, att.id, clock_->NowMillis()};
  auto& kept = StagedCheckpointsLocked(edit, att.job_id);
  std::erase_if(kept, [&](const store::CheckpointRecord& c) { return c.manifest == manifest; });
  kept.push_back(rec);
  batch.checkpoints.push_back(rec);
  // Retention: the oldest beyond the limit go (never the one just accepted).
  const size_t keep = static_cast<size_t>(std::max(1, options_.checkpoint_retention));
  while (kept.size() > keep) {
    batch.dropped_checkpoints.push_back(kept.front());
    kept.erase(kept.begin());
  }
  batch.events.push_back(EventLocked(
      att.job_id, "checkpoint",
      "attempt " + std::to_string(att.number) + " saved checkpoint " + manifest.substr(0, 12)));
}

}  // namespace sluice::server
