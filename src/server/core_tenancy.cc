// ServerCore: submissions by accounts (owners, teams, idempotency keys, quotas) and the queries
// the API's access checks need (issue 10; docs/design-notes.md "Accounts and tenancy").
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/crypto.h"
#include "server/server_core.h"

namespace sluice::server {
namespace st = store;

Result<st::JobRecord> ServerCore::SubmitJob(const spec::JobSpec& spec,
                                            const std::string& workdir_blob,
                                            const SubmitOptions& opts, bool* replayed) {
  if (replayed != nullptr) *replayed = false;
  SLUICE_ASSIGN_OR_RETURN(market::MarketRequest market, market::CompileJob(spec));
  std::lock_guard<TimedMutex> lock(mu_);
  const int64_t now = clock_->NowMillis();
  if (!opts.idempotency_key.empty()) {
    // Looked up under mu_, and the key is written in the job's own commit: two submissions with
    // one key cannot both create a job.
    SLUICE_ASSIGN_OR_RETURN(auto prior,
                            store_->GetIdempotencyKey(opts.owner, opts.idempotency_key,
                                                      now - options_.idempotency_ttl_ms));
    if (prior) {
      if (prior->body_sha256 != opts.body_sha256) {
        return Status::AlreadyExists("Idempotency-Key `" + opts.idempotency_key +
                                     "` was used for a different submission (job " + prior->job_id +
                                     "); use a new key for a new job");
      }
      SLUICE_ASSIGN_OR_RETURN(auto earlier, JobRecordLocked(prior->job_id));
      if (!earlier) {
        return Status::FailedPrecondition("Idempotency-Key `" + opts.idempotency_key +
                                          "` submitted job " + prior->job_id +
                                          ", which has since been deleted");
      }
      if (replayed != nullptr) *replayed = true;
      return *std::move(earlier);
    }
  }
  if (!CanSpendLocked(opts.owner)) {
    return Status::FailedPrecondition(CreditRefusalLocked(opts.owner));
  }
  if (std::string monthly = MonthlyRefusalLocked(opts.owner, opts.team); !monthly.empty()) {
    return Status::FailedPrecondition(monthly);
  }
  if (!opts.exempt_from_quota && options_.max_active_jobs_per_account > 0) {
    const int active = ActiveJobsOfLocked(opts.owner);
    if (active >= options_.max_active_jobs_per_account) {
      return Status::ResourceExhausted(
          "quota: this account has " + std::to_string(active) +
          " unfinished jobs, the most it may have (--max-active-jobs-per-account " +
          std::to_string(options_.max_active_jobs_per_account) +
          "); wait for some to finish or cancel them");
    }
  }
  JobState js;
  js.spec = spec;
  js.market = std::move(market);
  js.queued_since_mono = clock_->MonotonicMillis();
  if (!opts.queue_unschedulable) {
    // Refuse what can never run rather than let it queue forever (DESIGN.md §6).
    // (Its budget, its bid: what placement will read, built the way placement builds it.)
    sched::JobRequest probe = MakeRequestLocked("submitted", js, 0);
    probe.work = js.market.work;  // interruptible-then-on-demand may ever use on-demand capacity
    probe.shape = sched::ShapeKey(probe);
    // A shape nothing fitted in the last pass could run somewhere then, and no node's offers
    // changed since: only the nodes changed since are searched.
    // Most jobs match an offer among the first nodes looked at; only one that matches none
    // pays for the full answer and its reasons.
    const auto& nodes = CapacityLocked();
    if (!sched::CouldEverRun(nodes, probe, options_.cost_model)) {
      sched::Plan plan = sched::Schedule(nodes, {&probe}, options_.cost_model, IncrementalLocked());
      if (!plan.waiting.empty() && plan.waiting[0].never_fits) {
        return Status::FailedPrecondition(UnschedulableMessageLocked(js.market, plan.waiting[0]));
      }
    }
  }
  st::JobRecord& job = js.record;
  job.id = ids_.Next("job-");
  job.name = spec.name;
  job.spec = spec::ToJson(spec);
  job.workdir_blob = workdir_blob;
  job.state = st::JobState::kQueued;
  job.priority = spec.priority;
  job.submitted_ms = now;
  job.owner = opts.owner;
  job.team = opts.team;
  st::WriteBatch batch;
  batch.jobs.push_back(job);
  batch.events.push_back(EventLocked(job.id, "submitted", "submitted"));
  if (!opts.idempotency_key.empty()) {
    batch.idempotency.push_back({opts.owner, opts.idempotency_key, opts.body_sha256, job.id, now});
  }
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));  // durable before acknowledged
  js.order = next_order_++;
  std::string id = job.id;
  // Nothing was charged to a job that did not exist: its charges are known without a read of
  // the store at its first exit (ChargesByJob; a read per job was a fifth of the server's
  // time in a burst of exits). Charges committed from now on are added as they apply.
  charges_.StartEmpty(id);
  blob_refs_.SetWorkdir(id, workdir_blob);
  jobs_[id] = std::move(js);
  IndexJobLocked(id);
  // The job is durably queued: that is the answer, even if it cannot be placed this instant
  // (the tick tries again; DegradedLocked says why).
  if (Status s = ScheduleNewJobLocked(id); !s.ok())
    DegradedLocked("schedule", "scheduling after a submit", s);
  return jobs_[id].record;
}

Result<ServerCore::JobAccess> ServerCore::JobAccessOf(const std::string& id) {
  std::lock_guard<TimedMutex> lock(mu_);
  auto it = jobs_.find(id);
  const FinishedJob* done = it == jobs_.end() ? finished_.jobs.Find(id) : nullptr;
  if (it == jobs_.end() && done == nullptr) return Status::NotFound("no job " + id);
  JobAccess a;
  a.owner = done != nullptr ? done->owner : it->second.record.owner;
  a.team = done != nullptr ? done->team : it->second.record.team;
  if (done == nullptr && it->second.attempts == 0 && it->second.record.attempt_id.empty()) {
    return a;
  }
  SLUICE_ASSIGN_OR_RETURN(auto attempts, store_->AttemptsForJob(id));
  for (const auto& att : attempts) {
    auto n = nodes_.find(att.node_id);
    if (n == nodes_.end() || n->second.record.owner.empty()) continue;
    if (std::find(a.node_owners.begin(), a.node_owners.end(), n->second.record.owner) ==
        a.node_owners.end()) {
      a.node_owners.push_back(n->second.record.owner);
    }
  }
  return a;
}

Result<ServerCore::NodeState*> ServerCore::NodeByIdOrNameLocked(const std::string& id_or_name) {
  auto it = nodes_.find(id_or_name);
  if (it != nodes_.end()) return &it->second;
  NodeState* found = nullptr;
  for (auto& [id, ns] : nodes_) {
    if (ns.record.name != id_or_name) continue;
    if (found != nullptr) {
      return Status::InvalidArgument("`" + id_or_name + "` names several nodes; use the node id");
    }
    found = &ns;
  }
  if (found == nullptr) return Status::NotFound("no node " + id_or_name);
  return found;
}

Result<st::NodeRecord> ServerCore::FindNode(const std::string& id_or_name) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(NodeState * found, NodeByIdOrNameLocked(id_or_name));
  return found->record;
}

bool ServerCore::NodeNeedsBlob(const std::string& node_id, const std::string& digest) {
  std::lock_guard<TimedMutex> lock(mu_);
  for (const auto& aid : AttemptsOnLocked(node_id)) {
    auto live = active_attempts_.find(aid);
    if (live == active_attempts_.end()) continue;  // the index and the map change together
    const st::AttemptRecord& att = live->second;
    auto js = jobs_.find(att.job_id);
    if (js != jobs_.end() && js->second.record.workdir_blob == digest) return true;
    if (att.checkpoint_restored.empty()) continue;
    if (att.checkpoint_restored == digest) return true;
    if (blobs_ != nullptr) {
      for (const auto& chunk : ManifestChunks(*blobs_, att.checkpoint_restored)) {
        if (chunk == digest) return true;
      }
    }
  }
  return false;
}

std::set<std::string> ServerCore::ReferencedBlobs() {
  std::lock_guard<TimedMutex> lock(mu_);
  // Workdirs, kept checkpoints and their chunks, as counted (blob_refs_); then the manifests a
  // job names or an attempt restores that are not kept, with their chunks.
  blob_refs_.Refresh();
  std::set<std::string> used = blob_refs_.All();
  std::set<std::string> manifests;
  LatestCheckpointsLocked(manifests);  // every job's, finished ones' too
  for (const auto& [aid, att] : active_attempts_) {
    if (!att.checkpoint_restored.empty()) manifests.insert(att.checkpoint_restored);
  }
  for (const auto& m : manifests) {
    used.insert(m);
    if (blob_refs_.ChunksCounted(m) || blobs_ == nullptr) continue;  // in `used` already
    for (auto& chunk : ManifestChunks(*blobs_, m)) used.insert(std::move(chunk));
  }
  return used;
}

int ServerCore::ActiveJobsOf(const std::string& account_id) {
  std::lock_guard<TimedMutex> lock(mu_);
  return ActiveJobsOfLocked(account_id);
}

int ServerCore::ActiveJobsOfLocked(const std::string& account_id) const {
  const int n = live_index_.Of(account_id);
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the count against the walk it replaces.
  int walked = 0;
  for (const auto& [id, js] : jobs_) {
    walked += js.record.owner == account_id && !st::IsTerminal(js.record.state);
  }
  if (walked != n) {
    std::fprintf(stderr, "server: account %s has %d unfinished jobs, counted %d\n",
                 account_id.c_str(), walked, n);
    std::abort();
  }
#endif
  return n;
}

Result<int64_t> ServerCore::EnforceLogQuotaLocked(const st::AttemptRecord& att,
                                                  st::WriteBatch& batch,
                                                  std::optional<int64_t> staged) {
  const int64_t cap = options_.max_log_bytes_per_attempt;
  auto known = log_bytes_.find(att.id);
  int64_t held = 0;
  if (staged) {
    held = *staged;
  } else if (known != log_bytes_.end()) {
    held = known->second;
  } else {
    SLUICE_ASSIGN_OR_RETURN(held, store_->LogBytes(att.id));
  }
  int64_t incoming = 0;
  for (const auto& l : batch.logs) incoming += static_cast<int64_t>(l.text.size());
  if (cap <= 0 || held + incoming <= cap) return held + incoming;
  // Over quota: keep the newest lines (what a user looks at first), down to 3/4 of the quota so
  // that trimming happens once per quarter, not on every message.
  const int64_t target = cap / 4 * 3;
  int64_t dropped_lines = 0, dropped_bytes = 0, cut_seq = 0;
  int64_t to_free = held + incoming - target;
  if (held > 0) {
    auto point = store_->FindLogTrim(att.id, std::min(to_free, held));
    if (!point.ok() && point.status().code() != StatusCode::kNotFound) return point.status();
    if (!point.ok() && !batch.logs.empty()) {
      // Fewer bytes stored than counted: drop every stored line (their seqs all precede this
      // message's), never the new ones for want of old ones.
      cut_seq = batch.logs.front().seq;
      dropped_bytes += held;
      to_free -= held;
      held = 0;
    }
    if (point.ok()) {
      cut_seq = point->before_seq;
      dropped_lines += point->lines;
      dropped_bytes += point->bytes;
      held -= point->bytes;
      to_free -= point->bytes;
    }
  }
  // Still over: this message alone passes the target; drop its oldest lines too.
  size_t first_kept = 0;
  while (to_free > 0 && first_kept < batch.logs.size()) {
    const auto& l = batch.logs[first_kept++];
    to_free -= static_cast<int64_t>(l.text.size());
    incoming -= static_cast<int64_t>(l.text.size());
    dropped_bytes += static_cast<int64_t>(l.text.size());
    ++dropped_lines;
    cut_seq = std::max(cut_seq, l.seq + 1);
  }
  batch.logs.erase(batch.logs.begin(), batch.logs.begin() + static_cast<ptrdiff_t>(first_kept));
  if (cut_seq > 0) batch.log_trims.push_back({att.id, cut_seq});
  // The marker takes the seq of the last dropped line, which no kept line uses.
  st::LogLine marker;
  marker.job_id = att.job_id;
  marker.attempt_id = att.id;
  marker.seq = cut_seq - 1;
  marker.stream = "stderr";
  marker.ts_ms = clock_->NowMillis();
  marker.text = "[sluice] " + std::to_string(dropped_lines) + " older log lines (" +
                std::to_string(dropped_bytes) + " bytes) of this attempt were dropped: its log " +
                "quota is " + std::to_string(cap) + " bytes (--max-log-mib-per-attempt)";
  int64_t marker_bytes = 0;
  if (marker.seq > 0) {
    marker_bytes = static_cast<int64_t>(marker.text.size());
    batch.logs.insert(batch.logs.begin(), std::move(marker));
  }
  return held + incoming + marker_bytes;
}

}  // namespace sluice::server
