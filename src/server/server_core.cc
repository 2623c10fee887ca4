// ServerCore (server_core.h): loading the state, committing batches, the tick, and the audit
// log. The concepts live in core_*.cc beside it (docs/design-notes.md "Server core").
#include "server/server_core.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "common/inventory.h"
#include "common/thread_name.h"
#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/node_trust.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

ServerCore::ServerCore(store::Store* store, const Clock* clock, CoreOptions options)
    : store_(store),
      clock_(clock),
      options_(options),
      monthly_(store, clock,
               [this](const std::string& id) {
                 auto a = accounts_ != nullptr ? accounts_->FindAccount(id) : std::nullopt;
                 return a ? a->name : std::string();
               }),
      inbox_(clock, options.max_agent_messages_waiting) {}

ServerCore::~ServerCore() {
  if (reliability_read_.valid()) reliability_read_.wait();  // it reads through store_
  inbox_running_.store(false, std::memory_order_release);   // no more heartbeats answered inline
  // Messages still waiting are refused: an agent resends what was not acknowledged.
  for (auto& left : inbox_.Stop()) {
    if (left.done) left.done(Status::Unavailable("the server is stopping"));
  }
  if (inbox_thread_.joinable()) inbox_thread_.join();
  {
    std::lock_guard<TimedMutex> lock(mu_);
    scheduler_.stop = true;
  }
  scheduler_.wake.notify_all();
  if (scheduler_.thread.joinable()) scheduler_.thread.join();
}

Status ServerCore::Load() {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(auto nodes, store_->LoadNodes());
  int64_t now_mono = clock_->MonotonicMillis();
  for (auto& n : nodes) {
    NodeState ns;
    if (n.state == st::NodeState::kOnline) n.state = st::NodeState::kOffline;
    auto inv = InventoryFromJson(n.inventory.Parse());
    auto report = conformance::ReportFromJson(n.conformance.Parse());
    if (inv.ok() && report.ok() && n.verified_ms > 0) {
      ns.verdict = JudgeReport(*inv, *report, options_.verification_rules);
      ns.has_verdict = true;
    }
    if (inv.ok()) ns.inventory = std::make_shared<const Inventory>(*std::move(inv));
    ns.record = std::move(n);
    // Counted from now plus a lease: every agent has its lease to notice we are back and the
    // whole grace to reconnect, so a server outage alone never loses a node (or its work).
    ns.last_seen_mono = now_mono + options_.lease_ms;
    ns.since_restart = true;
    if (auto old = nodes_.find(ns.record.id); old != nodes_.end()) CountNodeLocked(old->second, -1);
    CountNodeLocked(ns, +1);
    nodes_[ns.record.id] = std::move(ns);
  }
  loaded_mono_ = now_mono;
  view_.stale = true;
  SLUICE_ASSIGN_OR_RETURN(auto jobs, store_->LoadJobs());
  // Finished jobs stay out of memory (core_finished.cc) unless an attempt of theirs is active:
  // decided once the active attempts are loaded.
  std::vector<st::JobRecord> finished;
  auto resident = [&](st::JobRecord j) -> Status {
    JobState js;
    auto spec = spec::JobSpecFromJson(j.spec.Parse());
    if (spec.ok()) js.spec = *spec;
    // It compiled when submitted. Should a label have left the registry since, the job keeps a
    // query that matches nothing, so it waits with a reason instead of running anywhere.
    auto market = market::CompileJob(js.spec);
    if (market.ok()) {
      js.market = *std::move(market);
    } else {
      js.market.query = *market::ParseQuery("id=''");
    }
    js.order = next_order_++;
    js.queued_since_mono = clock_->MonotonicMillis();
    js.record = std::move(j);
    if (!st::IsTerminal(js.record.state)) {
      // Attempt numbers continue across restarts (SLUICE_ATTEMPT).
      SLUICE_ASSIGN_OR_RETURN(auto atts, store_->AttemptsForJob(js.record.id));
      js.attempts = static_cast<int>(atts.size());
    }
    const std::string id = js.record.id;
    jobs_[id] = std::move(js);
    IndexJobLocked(id);
    return Status::Ok();
  };
  for (auto& j : jobs) {
    if (st::IsTerminal(j.state)) {
      finished.push_back(std::move(j));
    } else {
      SLUICE_RETURN_IF_ERROR(resident(std::move(j)));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(auto checkpoints, store_->LoadCheckpoints());
  for (auto& c : checkpoints) checkpoints_[c.job_id].push_back(std::move(c));
  SLUICE_ASSIGN_OR_RETURN(auto catalogs, store_->LoadCatalogs());
  for (const auto& c : catalogs) {
    auto parsed = market::ParseCatalog(c.csv, c.source_name);
    if (!parsed.ok()) return parsed.status();  // it parsed when imported: the store is damaged
    catalog_index_.UpsertAll(parsed->offers);
    catalog_offers_[c.provider] = std::move(parsed->offers);
  }
  SLUICE_ASSIGN_OR_RETURN(auto attempts, store_->LoadActiveAttempts());
  for (auto& a : attempts) {
    SLUICE_ASSIGN_OR_RETURN(int64_t seq, store_->MaxLogSeq(a.id));
    max_log_seq_[a.id] = seq;
    attempts_by_node_[a.node_id].insert(a.id);
    ++finished_.active_attempts[a.job_id];
    active_attempts_[a.id] = std::move(a);
  }
  for (auto& j : finished) {
    if (finished_.active_attempts.count(j.id)) {
      SLUICE_RETURN_IF_ERROR(resident(std::move(j)));
    } else {
      finished_.jobs.Add(j);
    }
  }
  for (const auto& [id, js] : jobs_) NoteJobBlobsLocked(id);
  for (const auto& [id, f] : finished_.jobs.all()) NoteJobBlobsLocked(id);
  for (const auto& [id, kept] : checkpoints_) NoteJobBlobsLocked(id);  // whatever their job
  SLUICE_ASSIGN_OR_RETURN(auto meters, store_->LoadMeters(""));
  for (auto& m : meters) money_.open_meters[m.attempt_id] = std::move(m);
  SLUICE_ASSIGN_OR_RETURN(auto balances, store_->LoadBalances());
  for (auto& [account, balance] : balances) money_.balances[account] = balance;
  SLUICE_ASSIGN_OR_RETURN(auto budgets, store_->LoadBudgets());
  monthly_.set_month_seen(monthly_.Month());
  SLUICE_ASSIGN_OR_RETURN(auto alerts, store_->LoadBudgetAlerts(monthly_.month_seen(), false));
  monthly_.Load(std::move(budgets), alerts);
  money_.last_settle_mono = now_mono;
  RefreshReliabilityLocked();
  return Status::Ok();
}

st::JobEvent ServerCore::EventLocked(const std::string& job_id, std::string type,
                                     std::string message) {
  st::JobEvent ev;
  ev.job_id = job_id;
  ev.ts_ms = clock_->NowMillis();
  ev.type = std::move(type);
  ev.message = std::move(message);
  return ev;
}

Status ServerCore::CommitLocked(WriteBatch& batch) {
  if (batch.empty()) return Status::Ok();
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  followers_.Publish(batch);
  if (!batch.dropped_checkpoints.empty()) {
    std::vector<std::string> dropped;
    for (const auto& c : batch.dropped_checkpoints) dropped.push_back(c.manifest);
    CollectBlobsLocked(dropped);
  }
  return Status::Ok();
}

// The chunk digests a checkpoint manifest (agent/checkpoint_sync.h) refers to.
Result<std::vector<std::string>> ReadManifestChunks(const store::BlobStore* blobs,
                                                    const std::string& m) {
  if (blobs == nullptr) return Status::FailedPrecondition("no blob store");
  SLUICE_ASSIGN_OR_RETURN(std::string text, blobs->Get(m));
  auto j = ParseJson(text);
  if (!j.ok() || !j->is_object() || !j->contains("files") || !(*j)["files"].is_array()) {
    return Status::Internal("checkpoint manifest " + m + " is not a manifest");
  }
  std::vector<std::string> out;
  for (const auto& f : (*j)["files"]) {
    if (!f.is_object() || !f.contains("chunks") || !f["chunks"].is_array()) continue;
    for (const auto& c : f["chunks"]) {
      if (c.is_string()) out.push_back(c.get<std::string>());
    }
  }
  return out;
}

// Empty when it cannot be read, which keeps its chunks (never delete what cannot be accounted
// for).
std::vector<std::string> ManifestChunks(const store::BlobStore& blobs, const std::string& m) {
  auto chunks = ReadManifestChunks(&blobs, m);
  return chunks.ok() ? *std::move(chunks) : std::vector<std::string>{};
}

void ServerCore::CollectBlobsLocked(const std::vector<std::string>& manifests) {
  if (blobs_ == nullptr || manifests.empty()) return;
  // What is still used (kept checkpoints, their chunks, every job's workdir) is counted as it
  // changes (blob_refs_): a collection reads only the manifests it drops. Chunks are
  // content-addressed, so two jobs (or a job and a workdir) may share one.
  blob_refs_.Refresh();
  for (const auto& m : manifests) {
    if (blob_refs_.Referenced(m)) continue;
    for (const auto& chunk : ManifestChunks(*blobs_, m)) {
      if (!blob_refs_.Referenced(chunk)) (void)blobs_->Delete(chunk);
    }
    (void)blobs_->Delete(m);
  }
}

void ServerCore::NoteJobBlobsLocked(const std::string& job_id) {
  auto job = jobs_.find(job_id);
  const FinishedJob* done = job == jobs_.end() ? finished_.jobs.Find(job_id) : nullptr;
  blob_refs_.SetWorkdir(job_id, job != jobs_.end() ? job->second.record.workdir_blob
                                : done != nullptr  ? done->workdir_blob
                                                   : "");
  std::vector<std::string> manifests;
  if (auto kept = checkpoints_.find(job_id); kept != checkpoints_.end()) {
    for (const auto& c : kept->second) manifests.push_back(c.manifest);
  }
  blob_refs_.SetCheckpoints(job_id, manifests);
}

void ServerCore::SendLocked(const std::string& node_id, const Json& msg) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && it->second.link) it->second.link->Send(msg);
}

void ServerCore::Tick() {
  if (reliability_read_.valid() &&
      reliability_read_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    ApplyReliability(reliability_read_.get());
  }
  if (!TickState()) return;
  // Reliability reads 30 days of history: from the store without the lock, applied under it.
  if (!options_.reliability_in_background) {
    ApplyReliability(ReadReliabilityHistory());
  } else if (!reliability_read_.valid()) {
    reliability_read_ = std::async(std::launch::async, [this] {
      NameThisThread("sluice-history");
      return ReadReliabilityHistory();
    });
  }
}

void ServerCore::ApplyReliability(const ReliabilityHistory& history) {
  std::lock_guard<TimedMutex> lock(mu_);
  mu_.HoldingFor(kHeldForTick);
  // A query may name reliability (`reliability>=0.99`): a waiting job may fit now.
  if (ApplyReliabilityLocked(history) && !queued_.empty()) {
    if (Status s = RequestScheduleLocked(); !s.ok())
      DegradedLocked("schedule", "scheduling after a reliability refresh", s);
  }
}

bool ServerCore::TickState() {
  std::lock_guard<TimedMutex> lock(mu_);
  mu_.HoldingFor(kHeldForTick);
  RetireFinishedLocked();
  followers_.Probe();
  int64_t now = clock_->MonotonicMillis();
  const int64_t gap = tick_times_.last_tick_mono > 0 ? now - tick_times_.last_tick_mono : 0;
  tick_times_.last_tick_mono = now;
  if (options_.stall_credit_after_ms > 0 && gap > options_.stall_credit_after_ms) {
    // Only the excess: a server merely slow on every tick still loses a dead node, late.
    const int64_t credit = gap - options_.stall_credit_after_ms;
    std::fprintf(stderr,
                 "sluice server: stalled for %.1f s (no tick ran); %.1f s not counted against "
                 "nodes\n",
                 static_cast<double>(gap) / 1000, static_cast<double>(credit) / 1000);
    for (auto& [id, ns] : nodes_) ns.last_seen_mono += credit;
  }
  // Ticks on time do not mean the io threads read on time: starved of CPU, they read a
  // heartbeat seconds after it came, and it may still sit unread in its socket. Their lag beyond
  // a threshold is not counted as any node's silence (docs/design-notes.md "Read lag").
  const int64_t read_lag = options_.read_lag_ms ? options_.read_lag_ms() : 0;
  const int64_t read_credit = std::max<int64_t>(0, read_lag - options_.read_lag_credit_after_ms);
  size_t deferred = 0;
  for (auto& [id, ns] : nodes_) {
    if (ns.record.state == st::NodeState::kLost) continue;
    // Silence counts from the last message's arrival (last_seen_mono is set from it when the
    // message is handled; HeardMono covers one still waiting in the inbox).
    int64_t silent = now - ns.last_seen_mono;
    if (silent > options_.heartbeat_grace_ms) {
      silent = std::min(silent, now - inbox_.HeardMono(id));
    }
    // Still coming back after a restart, while the reconnect storm goes on: every node's hello
    // is a sign that the others are queued behind it (docs/design-notes.md "Agent messages").
    if (ns.since_restart && silent > options_.heartbeat_grace_ms) {
      silent = std::min(
          silent, now - std::min(last_hello_mono_, loaded_mono_ + options_.reconnect_window_ms));
    }
    // A node is never lost for the server's own backlog: what it sent is read before judging.
    if (silent > options_.heartbeat_grace_ms && inbox_.WaitingFrom(id) > 0) continue;
    if (silent > options_.heartbeat_grace_ms &&
        silent - read_credit <= options_.heartbeat_grace_ms) {
      ++deferred;  // late, not never: once the io threads catch up the lag falls
      continue;
    }
    if (silent > options_.heartbeat_grace_ms) {
      std::fprintf(stderr,
                   "sluice server: node %s (%s) lost: nothing heard for %.1f s (grace %.1f s; "
                   "%zu agent messages waiting for the core)\n",
                   ns.record.name.c_str(), id.c_str(), static_cast<double>(silent) / 1000,
                   static_cast<double>(options_.heartbeat_grace_ms) / 1000, inbox_.Waiting());
      Status lost = LoseNodeLocked(id, "no heartbeat for " + std::to_string(silent / 1000) + "s");
      if (!lost.ok()) DegradedLocked("node_loss", "declaring node " + id + " lost", lost);
    }
  }
  if (deferred > 0) ++degraded_["read_lag"];  // ticks that held a loss back: a degraded path
  if (deferred > 0 && now - tick_times_.read_lag_logged_mono >= 5000) {
    tick_times_.read_lag_logged_mono = now;
    std::fprintf(stderr,
                 "sluice server: reading agents %.1f s late (io threads behind); %zu silent "
                 "nodes not declared lost until that is caught up\n",
                 static_cast<double>(read_lag) / 1000, deferred);
  }
  AdmitVerificationsLocked();
  EndPausesLocked();
  NewMonthLocked();
  if (options_.budget_check_interval_ms > 0 &&
      now - money_.last_budget_check_mono >= options_.budget_check_interval_ms) {
    if (Status s = EnforceBudgetsLocked(); !s.ok()) {
      DegradedLocked("budget", "stopping attempts at their budget or credit", s);
    }
  }
  if (options_.settle_interval_ms > 0) {
    if (Status s = SettleRoundStepLocked(); !s.ok()) {
      DegradedLocked("settle", "settling running attempts' meters", s);
    }
  }
  bool refresh_reliability = false;
  // Once a minute: ask for scheduled re-verification, begin a round that extends the stored
  // uptime spans (a slice a tick: UptimeRoundStepLocked), and recompute reliability scores.
  if (now - reliability_refreshed_mono_ >= 60000 || reliability_refreshed_mono_ == 0) {
    reliability_refreshed_mono_ = now;
    int64_t wall = clock_->NowMillis();
    for (auto& [id, ns] : nodes_) {
      if (options_.reverify_interval_ms > 0 && ns.link && !ns.awaiting_report &&
          ns.record.verification == kVerified &&
          wall - ns.record.verified_ms >= options_.reverify_interval_ms) {
        RequestReportLocked(ns, "scheduled");
      }
    }
    if (!uptime_next_) uptime_next_ = std::string();  // a round still going goes on
    refresh_reliability = true;
  }
  if (uptime_next_) {
    if (Status s = UptimeRoundStepLocked(); !s.ok())
      DegradedLocked("uptime", "extending uptime spans", s);
  }
  // A cooldown that ended may let a waiting job go back to that node.
  bool expired = false;
  for (auto job = avoid_.begin(); job != avoid_.end();) {
    for (auto it = job->second.begin(); it != job->second.end();) {
      if (it->second <= now) {
        expired = true;
        it = job->second.erase(it);
      } else {
        ++it;
      }
    }
    job = job->second.empty() ? avoid_.erase(job) : std::next(job);
  }
  for (const auto& [id, js] : may_fall_back_) {
    if (!FallbackReasonLocked(*js).empty()) {
      expired = true;  // a job may fall back to on-demand capacity now
      break;
    }
  }
  // Renew the full search incremental passes lean on before it is too old for them
  // (IncrementalLocked): on the scheduler thread, off any request, so that a submit's own pass
  // searches the nodes changed since, not every node (docs/design-notes.md "Placement at scale").
  // Also when no full search has found a shape exhausted yet: with every node holding its jobs
  // nothing else runs one, and every submit searched all nodes.
  if (!queued_.empty() && !search_.full_due && now - search_.last_full_mono >= kFullSearchRenewMs) {
    search_.full_due = true;
    if (Status s = RequestScheduleLocked(); !s.ok()) {
      DegradedLocked("schedule", "renewing the full search", s);
    }
  }
  if (expired || schedule_again_) {
    if (Status s = ScheduleLocked(); !s.ok())
      DegradedLocked("schedule", "scheduling from the tick", s);
  }
  return refresh_reliability;
}

std::vector<std::pair<std::string, DurationHistogram::Snapshot>> ServerCore::LockHoldsByHolder()
    const {
  std::vector<std::pair<std::string, DurationHistogram::Snapshot>> out;
  for (size_t i = 0; i < mu_.holders().size(); ++i)
    out.emplace_back(mu_.holders()[i], mu_.Holds(i));
  return out;
}

Status ServerCore::RecordAudit(st::AuditEntry entry) {
  std::lock_guard<TimedMutex> lock(mu_);
  if (entry.ts_ms == 0) entry.ts_ms = clock_->NowMillis();
  WriteBatch batch;
  batch.audit.push_back(std::move(entry));
  return store_->Write(batch);
}

Result<std::vector<st::AuditEntry>> ServerCore::ReadAudit(int64_t since_ms, int64_t after_id,
                                                          int limit) {
  return store_->ReadAudit(since_ms, after_id, limit);
}

std::string core::GpuList(const std::vector<int>& gpus) {
  std::string s;
  for (int g : gpus) s += (s.empty() ? "" : ",") + std::to_string(g);
  return s;
}

}  // namespace sluice::server
