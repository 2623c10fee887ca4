// Commit, then apply (issue 12 item 1; docs/design-notes.md "Commit, then apply"): a state
// change is staged in an Edit beside its store writes, the writes are committed, and only then
// is memory changed. Members of ServerCore; the caller holds mu_.
#include <cstdio>
#include <utility>

#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

ServerCore::JobState& ServerCore::StagedJobLocked(Edit& edit, const std::string& job_id) {
  auto staged = edit.jobs.find(job_id);
  if (staged != edit.jobs.end()) return staged->second;
  auto live = jobs_.find(job_id);
  return edit.jobs.emplace(job_id, live != jobs_.end() ? live->second : JobState{}).first->second;
}

ServerCore::NodeState& ServerCore::StagedNodeLocked(Edit& edit, const std::string& node_id) {
  auto staged = edit.nodes.find(node_id);
  if (staged != edit.nodes.end()) return staged->second;
  auto live = nodes_.find(node_id);
  return edit.nodes.emplace(node_id, live != nodes_.end() ? live->second : NodeState{})
      .first->second;
}

AttemptRecord& ServerCore::StagedAttemptLocked(Edit& edit, const std::string& attempt_id) {
  auto& slot = edit.attempts[attempt_id];
  if (!slot) {
    auto live = active_attempts_.find(attempt_id);
    slot = live != active_attempts_.end() ? live->second : AttemptRecord{};
  }
  return *slot;
}

std::vector<store::CheckpointRecord>& ServerCore::StagedCheckpointsLocked(
    Edit& edit, const std::string& job_id) {
  auto staged = edit.checkpoints.find(job_id);
  if (staged != edit.checkpoints.end()) return staged->second;
  auto live = checkpoints_.find(job_id);
  return edit.checkpoints
      .emplace(job_id,
               live != checkpoints_.end() ? live->second : std::vector<store::CheckpointRecord>{})
      .first->second;
}

const ServerCore::JobState* ServerCore::ViewJobLocked(const Edit& edit,
                                                      const std::string& job_id) const {
  if (auto staged = edit.jobs.find(job_id); staged != edit.jobs.end()) return &staged->second;
  auto live = jobs_.find(job_id);
  return live != jobs_.end() ? &live->second : nullptr;
}

const AttemptRecord* ServerCore::ViewAttemptLocked(const Edit& edit,
                                                   const std::string& attempt_id) const {
  if (auto staged = edit.attempts.find(attempt_id); staged != edit.attempts.end()) {
    return staged->second ? &*staged->second : nullptr;  // ended in this edit
  }
  auto live = active_attempts_.find(attempt_id);
  return live != active_attempts_.end() ? &live->second : nullptr;
}

Status ServerCore::CommitLocked(Edit& edit) {
  MeterLocked(edit);  // meters open and close in the commit of the change that starts or ends them
  if (!edit.batch.empty()) SLUICE_RETURN_IF_ERROR(store_->Write(edit.batch));
  ApplyLocked(edit);
  followers_.Publish(edit.batch);
  if (!edit.batch.dropped_checkpoints.empty()) {
    std::vector<std::string> dropped;
    for (const auto& c : edit.batch.dropped_checkpoints) dropped.push_back(c.manifest);
    CollectBlobsLocked(dropped);
  }
  for (const auto& link : edit.close) link->Close();
  for (const auto& [node_id, msg] : edit.sends) SendLocked(node_id, msg);
  return Status::Ok();
}

void ServerCore::ApplyLocked(Edit& edit) {
  // Assignment, never erase-and-insert, for entries that stay: callers may be iterating the
  // live maps (the tick over nodes, a reclaim over attempts).
  for (auto& [id, js] : edit.jobs) {
    if (store::IsTerminal(js.record.state)) finished_.retiring.push_back(id);  // at the tick
    auto live = jobs_.find(id);
    if (live == jobs_.end() || live->second.record.workdir_blob != js.record.workdir_blob) {
      blob_refs_.SetWorkdir(id, js.record.workdir_blob);  // only when it may have changed
    }
    if (live != jobs_.end()) {
      live->second = std::move(js);
    } else {
      jobs_.emplace(id, std::move(js));
    }
    IndexJobLocked(id);
  }
  if (!edit.nodes.empty()) search_.nodes_changed = true;
  for (auto& [id, ns] : edit.nodes) {
    ns.idle.reset();  // staged from the live entry: its idle capacity may describe the old one
    ns.snapshot_digest.clear();  // and its record may have changed
    if (auto old = nodes_.find(id); old != nodes_.end()) CountNodeLocked(old->second, -1);
    NodeState& live = nodes_[id] = std::move(ns);
    CountNodeLocked(live, +1);
    verification_.Track(id, live);
    NodeChangedLocked(id);
  }
  for (auto& [id, checkpoints] : edit.checkpoints) {
    if (checkpoints.empty()) {
      checkpoints_.erase(id);
    } else {
      checkpoints_[id] = std::move(checkpoints);
    }
    NoteJobBlobsLocked(id);
  }
  for (auto& [job, nodes] : edit.avoid) {
    for (auto& [node, until] : nodes) avoid_[job][node] = until;
  }
  for (auto& [id, meter] : edit.meters) {
    if (meter) {
      money_.open_meters[id] = std::move(*meter);
    } else {
      money_.open_meters.erase(id);
    }
  }
  for (const auto& [account, delta] : edit.balance_deltas) money_.balances[account] += delta;
  for (const auto& d : edit.batch.cost_deltas) charges_.NoteCommitted(d);
  for (const auto& [job, attempt] : edit.anomalies) money_.anomalies_raised[job] = attempt;
  monthly_.NoteRaised(edit.alerts);
  if (!monthly_.empty()) {
    // Each budgeted scope's spend this month, kept with the committed charges.
    for (const auto& d : edit.batch.cost_deltas) {
      auto job = jobs_.find(d.job_id);
      const FinishedJob* done = job == jobs_.end() ? finished_.jobs.Find(d.job_id) : nullptr;
      const std::string team = job != jobs_.end() ? job->second.record.team
                               : done != nullptr  ? done->team
                                                  : "";
      monthly_.NoteCharged(d.payer, team, d.day, d.charged_micros - d.credited_micros);
    }
  }
  for (auto& [id, seq] : edit.max_log_seq) max_log_seq_[id] = seq;
  for (auto& [id, bytes] : edit.log_bytes) log_bytes_[id] = bytes;
  for (auto& [id, att] : edit.attempts) {
    auto was = active_attempts_.find(id);
    const AttemptRecord* before = was != active_attempts_.end() ? &was->second : nullptr;
    // The nodes it was and is on: their capacity now differs, unless nothing the capacity reads
    // of the attempt changed (a `started`). Marking those changed made every pass re-rank each
    // exhausted shape on every node whose job had just started.
    if (before == nullptr || !att || !SameRoomOnNode(*before, *att)) {
      for (const std::string* node :
           {before ? &before->node_id : nullptr, att ? &std::as_const(att->node_id) : nullptr}) {
        if (node == nullptr) continue;
        search_.changed_nodes.insert(*node);
        if (auto n = nodes_.find(*node); n != nodes_.end()) n->second.now.reset();
        NodeChangedLocked(*node);
      }
    }
    if (att) {
      if (before == nullptr) {
        attempts_by_node_[att->node_id].insert(id);
        ++finished_.active_attempts[att->job_id];
        active_attempts_.emplace(id, std::move(*att));
      } else {
        if (before->node_id != att->node_id) {  // never in practice: kept exact all the same
          if (auto on = attempts_by_node_.find(before->node_id); on != attempts_by_node_.end()) {
            on->second.erase(id);
            if (on->second.empty()) attempts_by_node_.erase(on);
          }
          attempts_by_node_[att->node_id].insert(id);
        }
        was->second = std::move(*att);
      }
    } else {
      if (auto live = active_attempts_.find(id); live != active_attempts_.end()) {
        auto on = attempts_by_node_.find(live->second.node_id);
        if (on != attempts_by_node_.end()) {
          on->second.erase(id);
          if (on->second.empty()) attempts_by_node_.erase(on);
        }
        const std::string& job = live->second.job_id;
        auto count = finished_.active_attempts.find(job);
        if (count != finished_.active_attempts.end() && --count->second <= 0) {
          finished_.active_attempts.erase(count);
          finished_.retiring.push_back(job);  // its job may have finished before this attempt
        }
      }
      active_attempts_.erase(id);
      max_log_seq_.erase(id);
      log_bytes_.erase(id);
    }
  }
}

void ServerCore::IndexJobLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) {
    live_index_.Update(it->second.record);
  } else {
    live_index_.Drop(job_id);  // gone from the map: finished and retired, or deleted
  }
  if (it != jobs_.end() && it->second.spec.max_total_cost) {
    money_.budgeted_jobs.insert(job_id);
  } else {
    money_.budgeted_jobs.erase(job_id);
  }
  if (it != jobs_.end() && it->second.record.state == store::JobState::kQueued) {
    queued_.insert_or_assign(job_id, &it->second);
  } else {
    queued_.erase(job_id);
    may_fall_back_.erase(job_id);
    queue_index_.Drop(job_id);
    return;
  }
  const JobState& js = it->second;
  if (options_.group_queue) {
    queue_index_.File(job_id, QueueGroupLocked(job_id, js),
                      {-int64_t{js.record.priority}, js.order}, js.record.reason, js.never_fits,
                      &js);
  }
  if (!js.fell_back && js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand) {
    may_fall_back_.insert_or_assign(job_id, &it->second);
  } else {
    may_fall_back_.erase(job_id);
  }
}

void ServerCore::DegradedLocked(const char* kind, const std::string& what, const Status& status) {
  const int64_t n = ++degraded_[kind];
  std::fprintf(stderr, "sluice server: %s failed (%s); %s failures so far: %lld\n", what.c_str(),
               status.ToString().c_str(), kind, static_cast<long long>(n));
}

Json ServerCore::StateDump() {
  std::lock_guard<TimedMutex> lock(mu_);
  Json nodes = Json::object();
  for (const auto& [id, ns] : nodes_) {
    NodeView view;
    view.node = ns.record;
    Json node = NodeToJson(view);
    node.erase("reliability");
    node["owner"] = ns.record.owner;
    node["interruptible_price_per_gpu_hour"] = ns.record.interruptible_price_per_gpu_hour;
    node["interruptible_price_per_cpu_hour"] = ns.record.interruptible_price_per_cpu_hour;
    nodes[id] = Json{{"record", std::move(node)},
                     {"connected", ns.link != nullptr},
                     {"last_seen_mono", ns.last_seen_mono},
                     {"awaiting_report", ns.awaiting_report},
                     {"has_verdict", ns.has_verdict},
                     {"online_since_ms", ns.online_since_ms},
                     {"report_nonces", ns.report_nonces},
                     {"verify_queued", ns.verify_queued},
                     {"verify_failures", ns.verify_failures},
                     {"verify_retry_mono", ns.verify_retry_mono}};
  }
  Json jobs = Json::object();
  for (const auto& [id, js] : jobs_) {
    jobs[id] = Json{{"record", JobToJson(js.record)},
                    {"owner", js.record.owner},
                    {"team", js.record.team},
                    {"attempts", js.attempts},
                    {"fell_back", js.fell_back},
                    {"queued_since_mono", js.queued_since_mono},
                    {"order", js.order},
                    {"never_fits", js.never_fits}};
  }
  Json finished = Json::object();
  for (const auto& [id, f] : finished_.jobs.all()) {
    finished[id] = Json{{"state", store::Name(f.state)},
                        {"owner", f.owner},
                        {"team", f.team},
                        {"workdir_blob", f.workdir_blob},
                        {"checkpoint", f.checkpoint}};
  }
  Json per_job = Json::object();  // keys in order, whatever the map's
  for (const auto& [id, n] : finished_.active_attempts) per_job[id] = n;
  Json attempts = Json::object();
  for (const auto& [id, att] : active_attempts_) attempts[id] = AttemptToJson(att);
  Json checkpoints = Json::object();
  for (const auto& [job, kept] : checkpoints_) {
    Json list = Json::array();
    for (const auto& c : kept)
      list.push_back(Json{{"manifest", c.manifest}, {"attempt", c.attempt_id}});
    checkpoints[job] = std::move(list);
  }
  return Json{{"nodes", std::move(nodes)},
              {"jobs", std::move(jobs)},
              {"finished_jobs", std::move(finished)},
              {"active_attempts", std::move(attempts)},
              {"active_attempts_per_job", std::move(per_job)},
              {"max_log_seq", max_log_seq_},
              {"log_bytes", log_bytes_},
              {"checkpoints", std::move(checkpoints)},
              {"blob_refs", blob_refs_.ToJson()},
              {"avoid", avoid_},
              {"queued",
               [this] {
                 Json ids = Json::array();
                 for (const auto& [id, js] : queued_) ids.push_back(id);
                 return ids;
               }()},
              {"attempts_by_node", attempts_by_node_},
              {"unfinished", live_index_.ToJson()},
              {"open_meters",
               [this] {
                 Json meters = Json::object();
                 for (const auto& [id, m] : money_.open_meters) {
                   meters[id] = Json{{"settled_ms", m.settled_ms},
                                     {"charged_micros", m.charged_micros},
                                     {"fee_micros", m.fee_micros},
                                     {"start_ms", m.start_ms}};
                 }
                 return meters;
               }()},
              {"balances", money_.balances},
              {"anomalies_raised", money_.anomalies_raised},
              {"next_order", next_order_}};
}

std::map<std::string, int64_t> ServerCore::DegradedCounts() {
  std::lock_guard<TimedMutex> lock(mu_);
  return degraded_;
}

}  // namespace sluice::server
