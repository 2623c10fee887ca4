#include "server/server_core.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "audit/bundle.h"
#include "common/crypto.h"
#include "common/inventory.h"
#include "market/gpu_labels.h"
#include "market/perf.h"
#include "server/accounts.h"
#include "server/node_trust.h"

namespace sluice::server {
namespace {

using store::AttemptRecord;
using store::AttemptState;
using store::JobRecord;
using store::WriteBatch;
namespace st = store;

std::string NewId(const char* prefix) { return std::string(prefix) + RandomHex(6); }

std::string Money(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.4g/h", v);
  return buf;
}

std::string GpuList(const std::vector<int>& gpus) {
  std::string s;
  for (int g : gpus) s += (s.empty() ? "" : ",") + std::to_string(g);
  return s;
}

double GiB(uint64_t mib) { return static_cast<double>(mib) / 1024.0; }

// An attempt's cause while its preemption is under way. Stored with the attempt, so an exit that
// arrives after a server restart is still recognised as the end of a preemption.
constexpr std::string_view kPreemptingPrefix = "preempting: ";

// What a node sells when idle (sched::NodeCapacity::offers): one offer per GPU label, or one CPU
// offer. Every label and capability comes from the probed inventory, never from a claim.
std::vector<market::Offer> IdleOffers(const store::NodeRecord& node, const Inventory& inv,
                                      const sched::NodeCapacity& cap, const audit::Verdict* verdict,
                                      double reliability) {
  market::Offer base;
  base.provider = node.name;
  base.node = cap.node_id;
  base.region = node.region;
  base.cpus = cap.total_cpus;
  base.memory_gb = cap.total_memory_gb;
  base.disk_gb = GiB(inv.disk_free_mib);
  base.price_per_gpu_hour = node.price_per_gpu_hour;
  base.price_per_cpu_hour = node.price_per_cpu_hour;
  base.interruptible_price_per_gpu_hour = node.interruptible_price_per_gpu_hour;
  base.interruptible_price_per_cpu_hour = node.interruptible_price_per_cpu_hour;
  base.driver_version = inv.driver_version;
  base.cuda_version = inv.cuda_version;
  // Software the server's verdict found the driver can run; before a verdict, what was probed
  // (such a node is not placeable anyway).
  base.toolkits = verdict ? verdict->usable_toolkits : inv.cuda_toolkits;
  base.torch_builds = verdict ? verdict->usable_torch_builds : inv.torch_builds;
  base.python_version = inv.python_version;
  base.sandbox = inv.sandbox;
  base.verified = node.verification == kVerified     ? market::VerifiedState::kVerified
                  : node.verification == kDeverified ? market::VerifiedState::kDeverified
                                                     : market::VerifiedState::kUnverified;
  base.reliability = reliability;
  base.source = market::OfferSource::kAgent;
  if (cap.gpus.empty()) {
    base.id = cap.node_id + "/cpu";
    base.perf_score = 0;
    return {base};
  }
  std::map<std::string, market::Offer> by_label;
  for (const auto& g : cap.gpus) {
    auto [it, fresh] = by_label.try_emplace(g.label, base);
    market::Offer& o = it->second;
    if (fresh) {
      o.id = cap.node_id + "/" + g.label;
      o.gpu_label = g.label;
      o.gpu_model = g.label.substr(0, g.label.rfind('-'));
      o.vram_gb = g.vram_gb;
      for (const auto& gi : inv.gpus) {
        if (gi.index != g.index) continue;
        o.form_factor = market::FormFactor(gi.name);
        o.compute_capability = gi.compute_capability;
      }
      o.perf_score = market::PerfScore(g.label, o.form_factor);
    }
    o.gpus++;
    o.gpus_available++;
  }
  std::vector<market::Offer> out;
  for (auto& [label, o] : by_label) out.push_back(std::move(o));
  return out;
}

}  // namespace

ServerCore::ServerCore(store::Store* store, const Clock* clock, CoreOptions options)
    : store_(store), clock_(clock), options_(options) {}

Status ServerCore::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(auto nodes, store_->LoadNodes());
  int64_t now_mono = clock_->MonotonicMillis();
  for (auto& n : nodes) {
    NodeState ns;
    if (n.state == st::NodeState::kOnline) n.state = st::NodeState::kOffline;
    auto inv = InventoryFromJson(n.inventory);
    auto report = conformance::ReportFromJson(n.conformance);
    if (inv.ok() && report.ok() && n.verified_ms > 0) {
      ns.verdict = audit::Evaluate(*inv, *report, options_.verification_rules);
      ns.has_verdict = true;
    }
    ns.record = std::move(n);
    // Counted from now plus a lease: every agent has its lease to notice we are back and the
    // whole grace to reconnect, so a server outage alone never loses a node (or its work).
    ns.last_seen_mono = now_mono + options_.lease_ms;
    nodes_[ns.record.id] = std::move(ns);
  }
  SLUICE_ASSIGN_OR_RETURN(auto jobs, store_->LoadJobs());
  for (auto& j : jobs) {
    JobState js;
    auto spec = spec::JobSpecFromJson(j.spec);
    if (spec.ok()) js.spec = *spec;
    // It compiled when submitted. Should a label have left the registry since, the job keeps a
    // query that matches nothing, so it waits with a reason instead of running anywhere.
    auto market = CompileJob(js.spec);
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
    jobs_[js.record.id] = std::move(js);
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
    active_attempts_[a.id] = std::move(a);
  }
  RefreshReliabilityLocked();
  return Status::Ok();
}

// ---------------------------------------------------------------- helpers (mu_ held)

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
  PublishLocked(batch);
  if (!batch.dropped_checkpoints.empty()) {
    std::vector<std::string> dropped;
    for (const auto& c : batch.dropped_checkpoints) dropped.push_back(c.manifest);
    CollectBlobsLocked(dropped);
  }
  return Status::Ok();
}

// The chunk digests a checkpoint manifest (agent/checkpoint_sync.h) refers to; empty when it
// cannot be read, which keeps its chunks (never delete what cannot be accounted for).
std::vector<std::string> ManifestChunks(const store::BlobStore& blobs, const std::string& m) {
  std::vector<std::string> out;
  auto text = blobs.Get(m);
  if (!text.ok()) return out;
  auto j = ParseJson(*text);
  if (!j.ok() || !j->is_object() || !j->contains("files") || !(*j)["files"].is_array()) return out;
  for (const auto& f : (*j)["files"]) {
    if (!f.is_object() || !f.contains("chunks") || !f["chunks"].is_array()) continue;
    for (const auto& c : f["chunks"]) {
      if (c.is_string()) out.push_back(c.get<std::string>());
    }
  }
  return out;
}

void ServerCore::CollectBlobsLocked(const std::vector<std::string>& manifests) {
  if (blobs_ == nullptr || manifests.empty()) return;
  // Everything still referenced: kept checkpoints (manifests and chunks) and workdirs. Chunks are
  // content-addressed, so two jobs (or a job and a workdir) may share one.
  std::set<std::string> used;
  for (const auto& [job, kept] : checkpoints_) {
    for (const auto& c : kept) {
      used.insert(c.manifest);
      for (auto& chunk : ManifestChunks(*blobs_, c.manifest)) used.insert(std::move(chunk));
    }
  }
  for (const auto& [id, js] : jobs_) {
    if (!js.record.workdir_blob.empty()) used.insert(js.record.workdir_blob);
  }
  for (const auto& m : manifests) {
    if (used.count(m) != 0) continue;
    for (const auto& chunk : ManifestChunks(*blobs_, m)) {
      if (used.count(chunk) == 0) (void)blobs_->Delete(chunk);
    }
    (void)blobs_->Delete(m);
  }
}

Json ServerCore::EndItemLocked(const JobRecord& job) const {
  Json end{{"type", "end"}, {"job", JobToJson(job)}};
  return end;
}

// Delivers what a committed batch changed to the streams that follow those jobs.
void ServerCore::PublishLocked(const WriteBatch& batch) {
  if (subscribers_.empty()) return;
  std::vector<uint64_t> dead;
  for (auto& [id, sub] : subscribers_) {
    bool alive = true;
    if (sub.events) {
      for (const auto& ev : batch.events) {
        if (ev.job_id == sub.job_id && alive) {
          Json item = EventToJson(ev);
          item["type"] = "event";
          alive = sub.sink(item);
        }
      }
    }
    if (sub.logs) {
      for (const auto& line : batch.logs) {
        if (line.job_id == sub.job_id && alive) alive = sub.sink(LogToJson(line));
      }
    }
    for (const auto& job : batch.jobs) {
      if (job.id == sub.job_id && st::IsTerminal(job.state) && alive) {
        sub.sink(EndItemLocked(job));
        alive = false;
      }
    }
    if (!alive) dead.push_back(id);
  }
  for (uint64_t id : dead) subscribers_.erase(id);
}

void ServerCore::SendLocked(const std::string& node_id, const Json& msg) {
  auto it = nodes_.find(node_id);
  if (it != nodes_.end() && it->second.link) it->second.link->Send(msg);
}

std::vector<sched::NodeCapacity> ServerCore::CapacityLocked() const {
  std::vector<sched::NodeCapacity> out;
  for (const auto& [id, ns] : nodes_) {
    if (ns.record.state == st::NodeState::kLost || ns.record.revoked) continue;
    // Only verified nodes take work (issue 5). One whose verification is under way still counts
    // for "could this job ever run"; one that failed does not, until a new report passes.
    bool verified = ns.record.verification == kVerified;
    if (!verified && !ns.awaiting_report) continue;
    auto inv = InventoryFromJson(ns.record.inventory);
    if (!inv.ok()) continue;
    sched::NodeCapacity cap;
    cap.node_id = id;
    cap.name = ns.record.name;
    cap.online = ns.record.state == st::NodeState::kOnline && ns.link != nullptr && verified;
    for (const auto& g : inv->gpus) {
      cap.gpus.push_back(
          {g.index, market::CanonicalGpuLabel(g.name, g.memory_mib), GiB(g.memory_mib), true});
    }
    cap.total_cpus = cap.free_cpus = inv->cpu_cores;
    cap.total_memory_gb = cap.free_memory_gb = GiB(inv->memory_mib);
    cap.offers = IdleOffers(ns.record, *inv, cap, ns.has_verdict ? &ns.verdict : nullptr,
                            ns.reliability.score);
    out.push_back(std::move(cap));
  }
  for (const auto& [aid, att] : active_attempts_) {
    for (auto& cap : out) {
      if (cap.node_id != att.node_id) continue;
      cap.running.push_back({aid, att.gpus, att.cpus, att.memory_gb, att.interruptible,
                             att.cause.rfind(kPreemptingPrefix, 0) == 0});
      for (auto& g : cap.gpus) {
        if (std::find(att.gpus.begin(), att.gpus.end(), g.index) != att.gpus.end()) g.free = false;
      }
      cap.free_cpus -= att.cpus;
      cap.free_memory_gb -= att.memory_gb;
    }
  }
  return out;
}

Status ServerCore::ScheduleLocked() {
  WriteBatch batch;
  // Interruptible-then-on-demand jobs that have waited or been preempted enough may now use
  // on-demand capacity; the switch is an event, never silent (DESIGN.md §6).
  for (auto& [id, js] : jobs_) {
    if (js.record.state != st::JobState::kQueued || js.fell_back) continue;
    std::string why = FallbackReasonLocked(js);
    if (why.empty()) continue;
    js.fell_back = true;
    batch.events.push_back(
        EventLocked(id, "fallback", "falling back to on-demand capacity: " + why));
  }
  std::vector<sched::JobRequest> queue;
  for (const auto& [id, js] : jobs_) {
    if (js.record.state != st::JobState::kQueued) continue;
    sched::JobRequest r;
    r.job_id = id;
    r.priority = js.record.priority;
    r.order = js.order;
    r.gpus = js.spec.resources.gpus;
    r.cpus = js.spec.resources.cpus;
    r.memory_gb = js.spec.resources.memory_gb;
    r.query = js.market.query;
    r.max_price_per_hour = js.market.max_price_per_hour;
    r.work = js.market.work;
    r.objective = js.market.objective;
    if (js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand) {
      r.work.fallback_on_demand = js.fell_back;
    }
    auto avoid = avoid_.find(id);
    if (avoid != avoid_.end()) {
      for (const auto& [node, until] : avoid->second) {
        if (until > clock_->MonotonicMillis()) r.avoid_nodes.push_back(node);
      }
    }
    queue.push_back(std::move(r));
  }
  if (queue.empty()) return CommitLocked(batch);
  sched::Plan plan = sched::Schedule(CapacityLocked(), queue, options_.cost_model);

  std::vector<proto::Assign> assigns;
  std::vector<std::string> assign_nodes;
  int64_t now = clock_->NowMillis();
  for (const auto& p : plan.placements) {
    JobState& js = jobs_[p.job_id];
    AttemptRecord att;
    att.id = NewId("att-");
    att.job_id = p.job_id;
    att.node_id = p.node_id;
    att.gpus = p.gpus;
    att.cpus = js.spec.resources.cpus;
    att.memory_gb = js.spec.resources.memory_gb;
    att.price_per_hour = p.price_per_hour;
    att.state = AttemptState::kStarting;
    att.created_ms = now;
    att.number = ++js.attempts;
    att.interruptible = p.estimate.interruptible;
    att.checkpoint_restored = js.record.checkpoint;
    // What it runs on, frozen now: the audit bundle must show this, not the node as it is later.
    st::NodeSnapshot snap = Snapshot(nodes_[p.node_id].record);
    att.node_snapshot = snap.digest;
    batch.snapshots.push_back(std::move(snap));
    js.record.state = st::JobState::kStarting;
    js.record.attempt_id = att.id;
    js.record.reason.clear();
    js.never_fits = false;
    const std::string& node_name = nodes_[p.node_id].record.name;
    std::string msg = "placed on " + node_name + " (" + p.node_id + ")";
    if (!p.gpus.empty()) msg += ", GPUs " + GpuList(p.gpus);
    msg += ", price locked at " + Money(p.price_per_hour);
    // Why here: the ranking that chose this offer, in the words `sluice estimate` uses.
    msg += "; best by " + std::string(market::Name(js.market.objective)) + ": " +
           market::Why(p.estimate, js.market.work);
    if (js.market.hours_assumed) msg += " (assuming 1 h of work; set expected_hours)";
    if (att.number > 1) {
      msg = "attempt " + std::to_string(att.number) + " " + msg +
            (att.checkpoint_restored.empty()
                 ? "; no checkpoint saved, so it starts from the beginning"
                 : "; resumes from checkpoint " + att.checkpoint_restored.substr(0, 12));
    }
    batch.events.push_back(EventLocked(p.job_id, "placed", msg));
    batch.jobs.push_back(js.record);
    batch.attempts.push_back(att);

    proto::Assign a;
    a.attempt_id = att.id;
    a.job_id = p.job_id;
    a.run = js.spec.run;
    a.env = js.spec.env;
    a.gpus = p.gpus;
    a.cpus = att.cpus;
    a.memory_gb = att.memory_gb;
    a.workdir_blob = js.record.workdir_blob;
    a.attempt = att.number;
    a.checkpoint = att.checkpoint_restored;
    a.checkpoint_interval_ms = js.spec.lifecycle.checkpoint_interval_s.value_or(0) * 1000;
    a.grace_ms = js.spec.lifecycle.grace_period_s * 1000;
    assigns.push_back(std::move(a));
    assign_nodes.push_back(p.node_id);
    max_log_seq_[att.id] = 0;
    active_attempts_[att.id] = std::move(att);
  }
  for (sched::Waiting w : plan.waiting) {
    JobState& js = jobs_[w.job_id];
    if (js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand && !js.fell_back) {
      // Not for ever: it may use on-demand capacity later.
      const auto& lc = js.spec.lifecycle;
      w.never_fits = false;
      w.reason = "waiting for interruptible capacity (" + w.reason + "); on-demand after " +
                 std::to_string(lc.fallback_after_preemptions) + " preemptions or " +
                 std::to_string(lc.fallback_after_s) + "s";
    }
    if (js.record.reason != w.reason) {
      js.record.reason = w.reason;
      batch.jobs.push_back(js.record);
      if (w.never_fits != js.never_fits || w.never_fits) {
        batch.events.push_back(
            EventLocked(w.job_id, w.never_fits ? "unschedulable" : "waiting", w.reason));
      }
    }
    js.never_fits = w.never_fits;
  }
  Status s = CommitLocked(batch);
  if (!s.ok()) {
    // The allocation is not durable, so it must not exist in memory either.
    for (const auto& att : batch.attempts) {
      active_attempts_.erase(att.id);
      max_log_seq_.erase(att.id);
      log_bytes_.erase(att.id);
      jobs_[att.job_id].record.state = st::JobState::kQueued;
      jobs_[att.job_id].attempts--;
    }
    return s;
  }
  for (size_t i = 0; i < assigns.size(); ++i)
    SendLocked(assign_nodes[i], proto::ToJson(assigns[i]));
  // On-demand work displacing interruptible attempts (DESIGN.md §6); the job is placed once
  // they have stopped and freed the room.
  for (const auto& pre : plan.preemptions) {
    for (const auto& aid : pre.attempt_ids) {
      auto it = active_attempts_.find(aid);
      if (it == active_attempts_.end()) continue;
      SLUICE_RETURN_IF_ERROR(
          PreemptLocked(it->second, "making room for on-demand job " + pre.job_id));
    }
  }
  return Status::Ok();
}

void ServerCore::FinishAttemptLocked(AttemptRecord& att, AttemptState state,
                                     std::optional<int> exit_code, const std::string& cause,
                                     WriteBatch& batch) {
  int64_t now = clock_->NowMillis();
  att.state = state;
  att.exit_code = exit_code;
  att.ended_ms = now;
  att.cause = cause;
  batch.attempts.push_back(att);
  auto jit = jobs_.find(att.job_id);
  if (jit != jobs_.end() && jit->second.record.attempt_id == att.id &&
      !st::IsTerminal(jit->second.record.state)) {
    JobRecord& job = jit->second.record;
    if ((state == AttemptState::kLost || state == AttemptState::kPreempted) &&
        !job.cancel_requested) {
      // Capacity went away under the job, not the job's fault: run it again elsewhere, from its
      // last complete checkpoint, unless its restarts are used up (DESIGN.md §6, §7).
      const int max_restarts = jit->second.spec.lifecycle.max_restarts;
      if (job.preemptions < max_restarts) {
        job.preemptions++;
        job.state = st::JobState::kQueued;
        job.reason = "requeued after " + cause;
        jit->second.queued_since_mono = clock_->MonotonicMillis();
        batch.jobs.push_back(job);
        avoid_[job.id][att.node_id] = clock_->MonotonicMillis() + options_.preempt_cooldown_ms;
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

void ServerCore::MarkRunningLocked(AttemptRecord& att, const std::string& node_name,
                                   WriteBatch& batch) {
  if (att.state != AttemptState::kStarting) return;  // a resent `started` changes nothing
  att.state = AttemptState::kRunning;
  att.started_ms = clock_->NowMillis();
  batch.attempts.push_back(att);
  JobRecord& job = jobs_[att.job_id].record;
  if (job.state == st::JobState::kStarting) {
    job.state = st::JobState::kRunning;
    job.started_ms = att.started_ms;
    batch.jobs.push_back(job);
    batch.events.push_back(EventLocked(job.id, "started", "started on " + node_name));
  }
}

Status ServerCore::ApplyExitLocked(AttemptRecord& att, const proto::Exited& ex, WriteBatch& batch) {
  if (!ex.checkpoint.empty()) SaveCheckpointLocked(att, ex.checkpoint, batch);
  const JobState& js = jobs_[att.job_id];
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
  FinishAttemptLocked(att, state, code, cause, batch);
  return Status::Ok();
}

Status ServerCore::LoseNodeLocked(NodeState& node, const std::string& why) {
  WriteBatch batch;
  node.record.state = st::NodeState::kLost;
  batch.nodes.push_back(node.record);
  CloseUptimeLocked(node, batch);
  std::vector<std::string> lost;
  for (auto& [aid, att] : active_attempts_) {
    if (att.node_id != node.record.id) continue;
    FinishAttemptLocked(att, AttemptState::kLost, std::nullopt,
                        "node " + node.record.name + " lost: " + why, batch);
    lost.push_back(aid);
  }
  SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
  for (const auto& aid : lost) {
    active_attempts_.erase(aid);
    max_log_seq_.erase(aid);
    log_bytes_.erase(aid);
  }
  if (node.link) {
    node.link->Close();
    node.link.reset();
  }
  return ScheduleLocked();
}

// ---------------------------------------------------------------- user API

Result<JobRecord> ServerCore::SubmitJob(const spec::JobSpec& spec, const std::string& workdir_blob,
                                        bool queue_unschedulable) {
  SubmitOptions o;
  o.queue_unschedulable = queue_unschedulable;
  o.exempt_from_quota = true;
  return SubmitJob(spec, workdir_blob, o);
}

std::string ServerCore::UnschedulableMessageLocked(const MarketRequest& market,
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
  SLUICE_ASSIGN_OR_RETURN(page.request, CompileJob(spec, hours, objective));
  const MarketRequest& req = page.request;
  std::vector<market::Offer> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  if (!st::IsTerminal(it->second.record.state)) {
    return Status::FailedPrecondition("job " + id + " is " +
                                      std::string(st::Name(it->second.record.state)) +
                                      "; cancel it first (sluice cancel " + id + ")");
  }
  WriteBatch batch;
  batch.deleted_jobs.push_back(id);
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  std::vector<std::string> manifests;
  for (const auto& c : checkpoints_[id]) manifests.push_back(c.manifest);
  const std::string workdir = it->second.record.workdir_blob;
  checkpoints_.erase(id);
  avoid_.erase(id);
  jobs_.erase(it);
  CollectBlobsLocked(manifests);
  if (!workdir.empty() && blobs_ != nullptr) {
    bool shared = false;
    for (const auto& [other, js] : jobs_) shared |= js.record.workdir_blob == workdir;
    if (!shared) (void)blobs_->Delete(workdir);
  }
  return Status::Ok();
}

std::vector<JobRecord> ServerCore::ListJobs(std::optional<st::JobState> state, size_t limit) {
  return ListJobs(state, limit, nullptr);
}

Result<JobDetail> ServerCore::GetJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  JobDetail d;
  d.job = it->second.record;
  SLUICE_ASSIGN_OR_RETURN(d.attempts, store_->AttemptsForJob(id));
  SLUICE_ASSIGN_OR_RETURN(d.events, store_->ReadEvents(id, 0, 10000));
  return d;
}

Result<JobRecord> ServerCore::CancelJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  JobRecord& job = it->second.record;
  if (st::IsTerminal(job.state)) {
    return Status::FailedPrecondition("job " + id + " already " + std::string(st::Name(job.state)));
  }
  WriteBatch batch;
  if (job.state == st::JobState::kQueued) {
    job.state = st::JobState::kCancelled;
    job.finished_ms = clock_->NowMillis();
    job.reason = "cancelled by user";
    batch.jobs.push_back(job);
    batch.events.push_back(EventLocked(id, "cancelled", "cancelled while queued"));
    SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
    return job;
  }
  if (job.cancel_requested) return job;  // idempotent
  job.cancel_requested = true;
  batch.jobs.push_back(job);
  batch.events.push_back(
      EventLocked(id, "cancel_requested",
                  "cancel requested: SIGTERM to the process group, SIGKILL after " +
                      std::to_string(options_.cancel_grace_ms / 1000) + "s"));
  SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
  auto att = active_attempts_.find(job.attempt_id);
  if (att != active_attempts_.end()) {
    SendLocked(att->second.node_id, Json{{"type", "cancel"},
                                         {"attempt_id", att->first},
                                         {"grace_ms", options_.cancel_grace_ms}});
  }
  return job;
}

std::vector<NodeView> ServerCore::ListNodes() {
  std::lock_guard<std::mutex> lock(mu_);
  auto caps = CapacityLocked();
  std::vector<NodeView> out;
  for (const auto& [id, ns] : nodes_) {
    NodeView v;
    v.node = ns.record;
    v.reliability = ns.reliability;
    v.verifying = ns.awaiting_report;
    v.verify_queued = ns.verify_queued;
    for (const auto& c : caps) {
      if (c.node_id != id) continue;
      for (const auto& g : c.gpus) v.gpus_free += g.free ? 1 : 0;
      v.cpus_free = c.free_cpus;
      v.memory_free_gb = c.free_memory_gb;
    }
    for (const auto& [aid, att] : active_attempts_) v.running_attempts += att.node_id == id;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<market::Offer> ServerCore::ListOffers() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<market::Offer> out = AgentOffersLocked();
  for (const auto& [provider, offers] : catalog_offers_) {
    out.insert(out.end(), offers.begin(), offers.end());
  }
  return out;
}

std::vector<market::Offer> ServerCore::AgentOffersLocked() const {
  std::vector<market::Offer> out;
  for (const auto& cap : CapacityLocked()) {
    if (!cap.online) continue;  // offers from disconnected or lost nodes are withdrawn
    for (market::Offer o : cap.offers) {
      // As free right now.
      o.gpus_available = 0;
      for (const auto& g : cap.gpus) o.gpus_available += g.free && g.label == o.gpu_label;
      o.cpus = cap.free_cpus;
      o.memory_gb = cap.free_memory_gb;
      out.push_back(std::move(o));
    }
  }
  return out;
}

OfferPage ServerCore::SearchOffers(const market::Query& query,
                                   const std::vector<market::SortKey>& sort, size_t limit) {
  OfferPage page;
  // Catalog offers are answered by the index; only the few live agent offers are filtered here,
  // so a query never copies the whole catalog.
  std::vector<market::Offer> agent;
  std::vector<market::OfferRef> catalog;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& o : AgentOffersLocked()) {
      if (market::Matches(query, o)) agent.push_back(std::move(o));
    }
    catalog = catalog_index_.Search(query, sort, market::OfferIndex::kNoLimit);
  }
  page.matched = agent.size() + catalog.size();
  // Merge the two ordered lists (agent offers sorted here) up to `limit`.
  std::sort(agent.begin(), agent.end(), [&](const market::Offer& a, const market::Offer& b) {
    return market::OfferLess(sort, a, b);
  });
  size_t i = 0, j = 0;
  while (page.offers.size() < limit && (i < agent.size() || j < catalog.size())) {
    bool take_agent = j >= catalog.size() ||
                      (i < agent.size() && !market::OfferLess(sort, *catalog[j], agent[i]));
    page.offers.push_back(take_agent ? agent[i++] : *catalog[j++]);
  }
  if (page.matched == 0 && !query.terms.empty()) {
    page.explanation = market::Explain(query, ListOffers(), 3);
  }
  return page;
}

Result<market::CatalogImport> ServerCore::ImportCatalog(const std::string& source_name,
                                                        const std::string& csv) {
  SLUICE_ASSIGN_OR_RETURN(market::CatalogImport imported, market::ParseCatalog(csv, source_name));
  if (imported.offers.empty()) {
    return Status::InvalidArgument(source_name + ": no priced rows; nothing imported");
  }
  for (const auto& o : imported.offers) {
    if (o.provider != imported.provider) {
      return Status::InvalidArgument(source_name + ": rows from both `" + imported.provider +
                                     "` and `" + o.provider +
                                     "`; import one provider per file so a re-import replaces "
                                     "exactly that provider");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  WriteBatch batch;
  batch.catalogs.push_back({imported.provider, source_name, csv, clock_->NowMillis()});
  SLUICE_RETURN_IF_ERROR(store_->Write(batch));
  for (const auto& old : catalog_offers_[imported.provider]) catalog_index_.Remove(old.id);
  catalog_index_.UpsertAll(imported.offers);
  catalog_offers_[imported.provider] = imported.offers;
  return imported;
}

Result<std::vector<st::LogLine>> ServerCore::ReadLogs(const std::string& job_id, int64_t after_id,
                                                      int limit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!jobs_.count(job_id)) return Status::NotFound("no job " + job_id);
  }
  return store_->ReadLogs(job_id, after_id, limit);
}

Result<uint64_t> ServerCore::Subscribe(const std::string& job_id, bool events, bool logs,
                                       StreamSink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + job_id);
  // Replay under mu_: nothing new can be committed meanwhile, so replay + live has no gap and
  // no duplicate.
  if (events) {
    int64_t after = 0;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto batch, store_->ReadEvents(job_id, after, 1000));
      for (const auto& ev : batch) {
        Json item = EventToJson(ev);
        item["type"] = "event";
        if (!sink(item)) return Status::Cancelled("reader went away");
        after = ev.id;
      }
      if (batch.size() < 1000) break;
    }
  }
  if (logs) {
    int64_t after = 0;
    while (true) {
      SLUICE_ASSIGN_OR_RETURN(auto batch, store_->ReadLogs(job_id, after, 1000));
      for (const auto& line : batch) {
        if (!sink(LogToJson(line))) return Status::Cancelled("reader went away");
        after = line.id;
      }
      if (batch.size() < 1000) break;
    }
  }
  if (st::IsTerminal(it->second.record.state)) {
    sink(EndItemLocked(it->second.record));
    return uint64_t{0};
  }
  uint64_t id = next_subscriber_++;
  subscribers_[id] = Subscriber{job_id, events, logs, std::move(sink)};
  return id;
}

void ServerCore::Unsubscribe(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.erase(id);
}

// ---------------------------------------------------------------- agent channel

Result<std::string> ServerCore::AgentHello(const std::shared_ptr<AgentLink>& link,
                                           const proto::Hello& hello, const AgentIdentity& who) {
  // A claim the probe contradicts is refused before anything is registered (issue 5 item 3).
  SLUICE_RETURN_IF_ERROR(CheckClaims(hello.claims, hello.inventory));
  std::lock_guard<std::mutex> lock(mu_);
  int64_t now = clock_->NowMillis();
  std::string node_id = hello.node_id;
  // Which node this connection may speak for, decided before anything changes: a refused hello
  // leaves the node it named (its link, attempts and state) untouched. Without accounts (unit
  // tests), the node id is trusted as before.
  if (accounts_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(node_id, AdmitNodeLocked(hello, who));
  }
  auto it = node_id.empty() ? nodes_.end() : nodes_.find(node_id);
  const bool enrolling = it == nodes_.end();
  NodeState fresh;  // a new node enters nodes_ only once its record is committed
  std::optional<MintedToken> credential;
  if (enrolling) {
    // A node id we never issued (or none): register as new. An id from a wiped server is not
    // trusted as-is, so a node cannot claim another node's history.
    node_id = NewId("node-");
    fresh.record.id = node_id;
    fresh.record.registered_ms = now;
    if (accounts_ != nullptr) {
      // Its own credential, committed with the node; only its hash is stored.
      fresh.record.owner = who.account_id;
      credential = accounts_->NewNodeCredential(node_id, who.account_id);
    }
  }
  NodeState& ns = enrolling ? fresh : it->second;
  st::NodeRecord record = ns.record;  // the node as this hello leaves it, applied after commit
  record.name = hello.name.empty() ? hello.inventory.hostname : hello.name;
  Inventory previous;
  if (auto p = InventoryFromJson(record.inventory); p.ok()) previous = *std::move(p);
  HelloTrust trust = ApplyHelloTrust(record, previous, hello.inventory);
  record.inventory = ToJson(hello.inventory);
  record.state = st::NodeState::kOnline;
  record.last_seen_ms = now;
  record.price_per_gpu_hour = hello.price_per_gpu_hour;
  record.price_per_cpu_hour = hello.price_per_cpu_hour;
  record.interruptible_price_per_gpu_hour = hello.interruptible_price_per_gpu_hour;
  record.interruptible_price_per_cpu_hour = hello.interruptible_price_per_cpu_hour;
  record.region = hello.region;
  const int64_t online_since = ns.online_since_ms == 0 ? now : ns.online_since_ms;

  // Reconcile: the agent's account of its attempts against ours.
  WriteBatch batch;
  batch.nodes.push_back(record);
  if (credential) batch.tokens.push_back(credential->record);
  batch.uptime.push_back({node_id, online_since, now});
  std::map<std::string, const proto::AttemptReport*> reported;
  for (const auto& r : hello.attempts) reported[r.attempt_id] = &r;
  std::vector<std::string> finished, to_cancel, to_kill, to_ack;  // attempt ids
  for (auto& [aid, att] : active_attempts_) {
    if (att.node_id != node_id) continue;
    auto rep = reported.find(aid);
    if (rep == reported.end() || rep->second->lost) {
      FinishAttemptLocked(att, AttemptState::kLost, std::nullopt,
                          "the agent on " + record.name + " restarted and no longer runs it",
                          batch);
      finished.push_back(aid);
    } else {
      // Running, or finished while we were apart: either way the agent now resends the lines
      // we lack (from the log_ack below) and then its `exited`, so keep the attempt active.
      MarkRunningLocked(att, record.name, batch);
      if (rep->second->running && jobs_[att.job_id].record.cancel_requested) {
        to_cancel.push_back(aid);
      }
    }
  }
  for (const auto& r : hello.attempts) {
    auto a = active_attempts_.find(r.attempt_id);
    bool ours = a != active_attempts_.end() && a->second.node_id == node_id;
    if (ours) continue;
    // Not active here: finished, lost, or unknown. A running one must die at once so a job never
    // runs twice: not `cancel`, whose grace period would thaw a fenced copy that another node
    // may be running by now. A finished one is acknowledged so the agent forgets it.
    if (r.running)
      to_kill.push_back(r.attempt_id);
    else
      to_ack.push_back(r.attempt_id);
  }
  SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
  if (credential) accounts_->Apply({credential->record});
  NodeState& live = enrolling ? nodes_.emplace(node_id, std::move(fresh)).first->second : ns;
  live.record = std::move(record);
  if (trust.changed) live.has_verdict = false;  // its usable software is unknown until re-verified
  live.online_since_ms = online_since;
  // A second agent for one node: the newest wins.
  if (live.link && live.link != link) live.link->Close();
  live.link = link;
  live.last_seen_mono = clock_->MonotonicMillis();
  for (const auto& aid : finished) {
    active_attempts_.erase(aid);
    max_log_seq_.erase(aid);
    log_bytes_.erase(aid);
  }
  Json welcome{{"type", "welcome"},
               {"node_id", node_id},
               {"heartbeat_interval_ms", options_.heartbeat_interval_ms},
               {"lease_ms", options_.lease_ms},
               // Supervisors kill a job with no live agent before this runs out.
               {"heartbeat_grace_ms", options_.heartbeat_grace_ms}};
  // Shown once: the agent keeps it in its data dir and proves the node with it from now on.
  if (credential) welcome["credential"] = credential->secret;
  link->Send(welcome);
  // Registration runs the conformance suite, unless the node is verified and unchanged.
  if (live.record.verification != kVerified) {
    RequestReportLocked(live, trust.changed ? trust.what : "registration");
  }
  for (const auto& aid : to_cancel) {
    link->Send(
        Json{{"type", "cancel"}, {"attempt_id", aid}, {"grace_ms", options_.cancel_grace_ms}});
  }
  for (const auto& aid : to_kill) {
    link->Send(Json{{"type", "kill"},
                    {"attempt_id", aid},
                    {"reason", "the server no longer places it on this node"}});
  }
  for (const auto& aid : to_ack) link->Send(Json{{"type", "exit_ack"}, {"attempt_id", aid}});
  // Tell the agent where each surviving attempt's logs stand, so it resends only what we lack.
  // A preemption the server started may not have reached the agent before the link (or the
  // server) went down: ask again; stopping a process twice is harmless.
  for (const auto& [aid, att] : active_attempts_) {
    if (att.node_id != node_id) continue;
    link->Send(Json{{"type", "log_ack"}, {"attempt_id", aid}, {"seq", max_log_seq_[aid]}});
    if (att.cause.rfind(kPreemptingPrefix, 0) == 0) {
      link->Send(Json{{"type", "preempt"},
                      {"attempt_id", aid},
                      {"grace_ms", jobs_[att.job_id].spec.lifecycle.grace_period_s * 1000},
                      {"cause", att.cause.substr(kPreemptingPrefix.size())}});
    }
  }
  SLUICE_RETURN_IF_ERROR(ScheduleLocked());
  return node_id;
}

Status ServerCore::AgentMessage(const std::string& node_id, const AgentLink* link,
                                const Json& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  auto nit = nodes_.find(node_id);
  if (nit == nodes_.end() || nit->second.link.get() != link) {
    return Status::FailedPrecondition("this connection is no longer the node's agent link");
  }
  NodeState& ns = nit->second;
  ns.last_seen_mono = clock_->MonotonicMillis();
  SLUICE_ASSIGN_OR_RETURN(std::string type, GetString(msg, "type"));
  if (type == "heartbeat") {
    // The reply renews the lease of every attempt we hold placed on this node; an attempt the
    // agent runs that is not listed is not ours there any more (docs/design-notes.md "Leases
    // and fencing").
    Json ids = Json::array();
    for (const auto& [aid, att] : active_attempts_) {
      if (att.node_id == node_id) ids.push_back(aid);
    }
    // Echoed so the agent counts the lease from when it sent this heartbeat; not a number: 0.
    int64_t seq = 0;
    if (auto it = msg.find("seq"); it != msg.end() && it->is_number_integer()) {
      seq = it->get<int64_t>();
    }
    ns.link->Send(Json{{"type", "lease"},
                       {"seq", seq},
                       {"lease_ms", options_.lease_ms},
                       {"attempts", std::move(ids)}});
    return Status::Ok();
  }
  if (type == "conformance") {
    if (!msg.contains("report")) return Status::InvalidArgument("conformance: report is missing");
    SLUICE_ASSIGN_OR_RETURN(conformance::Report report,
                            conformance::ReportFromJson(msg["report"], "conformance.report"));
    SLUICE_ASSIGN_OR_RETURN(Inventory inv, InventoryFromJson(ns.record.inventory));
    // Only a report that answers this server's request counts: one captured from another node
    // (or an earlier run) is refused and audited (docs/design-notes.md "Node identity").
    SLUICE_RETURN_IF_ERROR(CheckReportNonceLocked(ns, msg));
    ns.verdict =
        ApplyReport(ns.record, inv, report, options_.verification_rules, clock_->NowMillis());
    ns.has_verdict = true;
    WriteBatch batch;
    batch.nodes.push_back(ns.record);
    st::AuditEntry entry;
    entry.ts_ms = clock_->NowMillis();
    entry.actor = "agent:" + node_id;
    entry.action = "agent.conformance";
    entry.target = node_id;
    entry.params = Json{{"trigger", report.trigger},
                        {"checks", report.checks.size()},
                        {"verification", ns.record.verification},
                        {"reasons", ns.record.verification_reasons}};
    entry.status = 200;
    batch.audit.push_back(std::move(entry));
    SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
    AfterVerdictLocked(ns);
    return ScheduleLocked();
  }

  SLUICE_ASSIGN_OR_RETURN(std::string attempt_id, GetString(msg, "attempt_id"));
  auto ait = active_attempts_.find(attempt_id);
  bool ours = ait != active_attempts_.end() && ait->second.node_id == node_id;
  if (type == "exited" && !ours) {
    // Already applied (a resend after reconnect) or never ours: acknowledge so the agent forgets.
    ns.link->Send(Json{{"type", "exit_ack"}, {"attempt_id", attempt_id}});
    return Status::Ok();
  }
  if (!ours) {
    if (type == "log") {
      // Lines of an attempt we already closed; tell the agent to drop them.
      ns.link->Send(Json{{"type", "log_ack"}, {"attempt_id", attempt_id}, {"seq", INT64_MAX}});
      return Status::Ok();
    }
    return Status::NotFound("attempt " + attempt_id + " is not running on this node");
  }
  AttemptRecord& att = ait->second;
  WriteBatch batch;
  if (type == "started") {
    MarkRunningLocked(att, ns.record.name, batch);
    return CommitLocked(batch);
  }
  if (type == "log") {
    SLUICE_ASSIGN_OR_RETURN(auto lines, proto::LogEntriesFromJson(msg));
    int64_t& max_seq = max_log_seq_[attempt_id];
    for (auto& l : lines) {
      if (l.seq <= max_seq) continue;  // a resend we already hold
      st::LogLine line;
      line.job_id = att.job_id;
      line.attempt_id = attempt_id;
      line.seq = l.seq;
      line.stream = l.stream;
      line.ts_ms = l.ts_ms ? l.ts_ms : clock_->NowMillis();
      line.text = std::move(l.text);
      batch.logs.push_back(std::move(line));
    }
    if (batch.logs.empty()) return Status::Ok();
    int64_t new_max = batch.logs.back().seq;
    SLUICE_ASSIGN_OR_RETURN(int64_t held_after, EnforceLogQuotaLocked(att, batch));
    SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
    log_bytes_[attempt_id] = held_after;
    max_seq = std::max(max_seq, new_max);
    ns.link->Send(Json{{"type", "log_ack"}, {"attempt_id", attempt_id}, {"seq", max_seq}});
    return Status::Ok();
  }
  if (type == "preempt_notice") {
    // The node itself is going (a cloud spot notice, the provider's signal): the agent is
    // already stopping the job, so nothing is sent back.
    SLUICE_ASSIGN_OR_RETURN(std::string cause, GetStringOr(msg, "cause", "notice from the agent"));
    if (cause.size() > 300) cause = cause.substr(0, 300);
    return PreemptLocked(att, cause, /*tell_agent=*/false);
  }
  if (type == "checkpoint") {
    SLUICE_ASSIGN_OR_RETURN(std::string manifest, GetString(msg, "manifest"));
    SaveCheckpointLocked(att, manifest, batch);
    return CommitLocked(batch);
  }
  if (type == "exited") {
    SLUICE_ASSIGN_OR_RETURN(proto::Exited ex, proto::ExitedFromJson(msg));
    SLUICE_RETURN_IF_ERROR(ApplyExitLocked(att, ex, batch));
    SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
    active_attempts_.erase(attempt_id);
    max_log_seq_.erase(attempt_id);
    log_bytes_.erase(attempt_id);
    ns.link->Send(Json{{"type", "exit_ack"}, {"attempt_id", attempt_id}});
    return ScheduleLocked();
  }
  return Status::InvalidArgument("type: unknown message type `" + type + "`");
}

void ServerCore::AgentDisconnected(const std::string& node_id, const AgentLink* link) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.link.get() != link) return;  // replaced already
  it->second.link.reset();
  if (it->second.record.state == st::NodeState::kOnline) {
    it->second.record.state = st::NodeState::kOffline;
    it->second.record.last_seen_ms = clock_->NowMillis();
    WriteBatch batch;
    batch.nodes.push_back(it->second.record);
    CloseUptimeLocked(it->second, batch);
    (void)CommitLocked(batch);  // best effort: a restart treats every node as offline anyway
  }
}

Status ServerCore::PreemptLocked(AttemptRecord& att, const std::string& cause, bool tell_agent) {
  if (att.cause.rfind(kPreemptingPrefix, 0) == 0) return Status::Ok();  // already under way
  const JobState& js = jobs_[att.job_id];
  att.cause = std::string(kPreemptingPrefix) + cause;
  WriteBatch batch;
  batch.attempts.push_back(att);
  const int64_t grace_ms = js.spec.lifecycle.grace_period_s * 1000;
  batch.events.push_back(EventLocked(att.job_id, "preempting",
                                     "attempt " + std::to_string(att.number) + " on " +
                                         nodes_[att.node_id].record.name + " is being preempted (" +
                                         cause + "): SIGTERM, then SIGKILL after " +
                                         std::to_string(grace_ms / 1000) + "s"));
  SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
  if (!tell_agent) return Status::Ok();
  SendLocked(
      att.node_id,
      Json{{"type", "preempt"}, {"attempt_id", att.id}, {"grace_ms", grace_ms}, {"cause", cause}});
  return Status::Ok();
}

Result<std::vector<std::string>> ServerCore::ReclaimNode(const std::string& node,
                                                         const std::vector<int>& gpus,
                                                         const std::string& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  const NodeState* found = nullptr;
  for (const auto& [id, ns] : nodes_) {
    if (id == node || ns.record.name == node) {
      if (found != nullptr) {
        return Status::InvalidArgument("`" + node + "` names several nodes; use the node id");
      }
      found = &ns;
    }
  }
  if (found == nullptr) return Status::NotFound("no node " + node);
  std::vector<std::string> preempted;
  for (auto& [aid, att] : active_attempts_) {
    if (att.node_id != found->record.id) continue;
    bool hit = gpus.empty();
    for (int g : gpus) hit |= std::find(att.gpus.begin(), att.gpus.end(), g) != att.gpus.end();
    if (!hit) continue;
    SLUICE_RETURN_IF_ERROR(PreemptLocked(att, cause));
    preempted.push_back(aid);
  }
  return preempted;
}

void ServerCore::SaveCheckpointLocked(const AttemptRecord& att, const std::string& manifest,
                                      WriteBatch& batch) {
  JobState& js = jobs_[att.job_id];
  if (js.record.attempt_id != att.id || manifest == js.record.checkpoint) return;
  // The agent sends the manifest only after every chunk and the manifest itself were stored, so
  // a manifest present in the blob store is a complete checkpoint; anything else is refused and
  // the previous complete one stays current.
  if (!store::BlobStore::IsValidDigest(manifest) || (blobs_ != nullptr && !blobs_->Has(manifest))) {
    batch.events.push_back(EventLocked(att.job_id, "checkpoint_rejected",
                                       "checkpoint " + manifest.substr(0, 12) +
                                           " is not in the blob store; keeping the previous one"));
    return;
  }
  js.record.checkpoint = manifest;
  batch.jobs.push_back(js.record);
  store::CheckpointRecord rec{att.job_id, manifest, att.id, clock_->NowMillis()};
  auto& kept = checkpoints_[att.job_id];
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

std::string ServerCore::FallbackReasonLocked(const JobState& js) const {
  const auto& lc = js.spec.lifecycle;
  if (lc.capacity != spec::Capacity::kInterruptibleThenOnDemand) return "";
  if (js.record.preemptions >= lc.fallback_after_preemptions) {
    return "preempted " + std::to_string(js.record.preemptions) +
           " times (fallback_after_preemptions " + std::to_string(lc.fallback_after_preemptions) +
           ")";
  }
  if (clock_->MonotonicMillis() - js.queued_since_mono >= lc.fallback_after_s * 1000) {
    return "no interruptible capacity for " + std::to_string(lc.fallback_after_s) +
           "s (fallback_after)";
  }
  return "";
}

void ServerCore::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = subscribers_.begin(); it != subscribers_.end();) {
    it = it->second.sink(Json()) ? std::next(it) : subscribers_.erase(it);
  }
  int64_t now = clock_->MonotonicMillis();
  const int64_t gap = last_tick_mono_ > 0 ? now - last_tick_mono_ : 0;
  last_tick_mono_ = now;
  if (options_.stall_credit_after_ms > 0 && gap > options_.stall_credit_after_ms) {
    // Only the excess: a server merely slow on every tick still loses a dead node, late.
    const int64_t credit = gap - options_.stall_credit_after_ms;
    std::fprintf(stderr,
                 "sluice server: stalled for %.1f s (no tick ran); %.1f s not counted against "
                 "nodes\n",
                 static_cast<double>(gap) / 1000, static_cast<double>(credit) / 1000);
    for (auto& [id, ns] : nodes_) ns.last_seen_mono += credit;
  }
  for (auto& [id, ns] : nodes_) {
    if (ns.record.state == st::NodeState::kLost) continue;
    int64_t silent = now - ns.last_seen_mono;
    if (silent > options_.heartbeat_grace_ms) {
      (void)LoseNodeLocked(ns, "no heartbeat for " + std::to_string(silent / 1000) + "s");
    }
  }
  AdmitVerificationsLocked();
  // Once a minute: extend the open uptime spans, ask for scheduled re-verification, and
  // recompute reliability scores.
  if (now - reliability_refreshed_mono_ >= 60000 || reliability_refreshed_mono_ == 0) {
    reliability_refreshed_mono_ = now;
    int64_t wall = clock_->NowMillis();
    WriteBatch batch;
    for (auto& [id, ns] : nodes_) {
      if (ns.online_since_ms > 0) batch.uptime.push_back({id, ns.online_since_ms, wall});
      if (options_.reverify_interval_ms > 0 && ns.link && !ns.awaiting_report &&
          ns.record.verification == kVerified &&
          wall - ns.record.verified_ms >= options_.reverify_interval_ms) {
        RequestReportLocked(ns, "scheduled");
      }
    }
    (void)CommitLocked(batch);
    RefreshReliabilityLocked();
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
  for (const auto& [id, js] : jobs_) {
    if (js.record.state == st::JobState::kQueued && !js.fell_back &&
        !FallbackReasonLocked(js).empty()) {
      expired = true;  // a job may fall back to on-demand capacity now
    }
  }
  if (expired) (void)ScheduleLocked();
}

// ---------------------------------------------------------------- trust (issue 5)

void ServerCore::CloseUptimeLocked(NodeState& node, WriteBatch& batch) {
  if (node.online_since_ms == 0) return;
  // Online until its last sign of life, not until now: a node declared lost has been silent for
  // the whole heartbeat grace.
  int64_t silent = std::max<int64_t>(0, clock_->MonotonicMillis() - node.last_seen_mono);
  int64_t end = std::max(node.online_since_ms, clock_->NowMillis() - silent);
  batch.uptime.push_back({node.record.id, node.online_since_ms, end});
  node.online_since_ms = 0;
}

void ServerCore::RefreshReliabilityLocked() {
  const int64_t now = clock_->NowMillis();
  const int64_t since = now - market::kReliabilityWindowMs;
  std::map<std::string, market::ReliabilityInputs> in;
  for (const auto& [id, ns] : nodes_) {
    in[id].window_ms = now - std::max(since, ns.record.registered_ms);
  }
  // Spans may overlap (an open span rewritten while a closed copy exists after a restart), so
  // they are merged per node before they are summed.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> spans;
  if (auto uptime = store_->LoadUptime(since); uptime.ok()) {
    for (const auto& u : *uptime) spans[u.node_id].emplace_back(u.start_ms, u.end_ms);
  }
  for (const auto& [id, ns] : nodes_) {
    if (ns.online_since_ms > 0) spans[id].emplace_back(ns.online_since_ms, now);
  }
  for (auto& [id, list] : spans) {
    if (!in.count(id)) continue;
    std::sort(list.begin(), list.end());
    int64_t covered_to = since;
    for (auto [a, b] : list) {
      a = std::max(a, covered_to);
      b = std::min(b, now);
      if (b > a) {
        in[id].online_ms += b - a;
        covered_to = b;
      }
    }
  }
  if (auto attempts = store_->AttemptsSince(since); attempts.ok()) {
    for (const auto& a : *attempts) {
      auto it = in.find(a.node_id);
      if (it == in.end()) continue;
      it->second.starts++;
      bool never_started = a.started_ms == 0;
      if (never_started && (a.state == AttemptState::kFailed || a.state == AttemptState::kLost)) {
        it->second.start_failures++;
      } else if (!never_started &&
                 (a.state == AttemptState::kPreempted || a.state == AttemptState::kLost)) {
        it->second.preemptions++;
      }
    }
  }
  for (auto& [id, ns] : nodes_) ns.reliability = market::ComputeReliability(in[id]);
}

// RequestReportLocked is in core_identity.cc: every request carries a nonce.

Result<st::NodeRecord> ServerCore::VerifyNode(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  NodeState* found = nullptr;
  for (auto& [id, ns] : nodes_) {
    if (id == node || ns.record.name == node) {
      if (found != nullptr) {
        return Status::InvalidArgument("`" + node + "` names several nodes; use the node id");
      }
      found = &ns;
    }
  }
  if (found == nullptr) return Status::NotFound("no node " + node);
  if (!found->link) {
    return Status::FailedPrecondition("node " + found->record.name + " is " +
                                      std::string(st::Name(found->record.state)) +
                                      ": its agent must be connected to run the suite");
  }
  RequestReportLocked(*found, "on-demand");
  return found->record;
}

Status ServerCore::RecordAudit(st::AuditEntry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entry.ts_ms == 0) entry.ts_ms = clock_->NowMillis();
  WriteBatch batch;
  batch.audit.push_back(std::move(entry));
  return store_->Write(batch);
}

Result<std::vector<st::AuditEntry>> ServerCore::ReadAudit(int64_t since_ms, int64_t after_id,
                                                          int limit) {
  return store_->ReadAudit(since_ms, after_id, limit);
}

Result<std::string> ServerCore::AuditBundle(const std::string& job_id) {
  SigningIdentity identity;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  Json env{{"job_id", detail.job.id},
           {"job_name", detail.job.name},
           {"runtime", detail.job.spec.value("runtime", Json::object())},
           {"attempts", attempts}};
  if (auto spec = spec::JobSpecFromJson(detail.job.spec); spec.ok()) {
    auto fp = spec::EnvironmentFingerprint(spec->runtime);
    env["runtime_fingerprint"] = fp.sha256;
  }
  std::string events;
  for (const auto& e : detail.events) events += DumpJson(EventToJson(e)) + "\n";
  Json job = JobToJson(detail.job);
  job["spec"] = detail.job.spec;
  std::vector<std::pair<std::string, std::string>> files = {
      {"environment-fingerprint.json", DumpJson(env, 2) + "\n"},
      {"hardware-inventory.json", DumpJson(Json{{"attempts", hardware}}, 2) + "\n"},
      {"conformance-log.txt", conformance_log},
      {"events.jsonl", events},
      {"job.json", DumpJson(job, 2) + "\n"},
  };
  return WriteBundle(files, identity);
}

// ---------------------------------------------------------------- views

Json JobToJson(const JobRecord& j) {
  Json out{{"id", j.id},
           {"name", j.name},
           {"state", st::Name(j.state)},
           {"priority", j.priority},
           {"submitted_ms", j.submitted_ms},
           {"started_ms", j.started_ms},
           {"finished_ms", j.finished_ms},
           {"exit_code", j.exit_code ? Json(*j.exit_code) : Json(nullptr)},
           {"reason", j.reason},
           {"attempt_id", j.attempt_id},
           {"cancel_requested", j.cancel_requested},
           {"workdir_blob", j.workdir_blob},
           {"checkpoint", j.checkpoint},
           {"preemptions", j.preemptions},
           {"spec", j.spec}};
  return out;
}

Json AttemptToJson(const AttemptRecord& a) {
  return Json{{"id", a.id},
              {"job_id", a.job_id},
              {"node_id", a.node_id},
              {"gpus", a.gpus},
              {"cpus", a.cpus},
              {"memory_gb", a.memory_gb},
              {"price_per_hour", a.price_per_hour},
              {"state", st::Name(a.state)},
              {"created_ms", a.created_ms},
              {"started_ms", a.started_ms},
              {"ended_ms", a.ended_ms},
              {"exit_code", a.exit_code ? Json(*a.exit_code) : Json(nullptr)},
              {"cause", a.cause},
              {"number", a.number},
              {"checkpoint_restored", a.checkpoint_restored},
              {"interruptible", a.interruptible}};
}

Json EventToJson(const st::JobEvent& e) {
  return Json{{"id", e.id},
              {"job_id", e.job_id},
              {"ts_ms", e.ts_ms},
              {"event", e.type},
              {"message", e.message}};
}

Json LogToJson(const st::LogLine& l) {
  return Json{{"type", "log"}, {"id", l.id},         {"attempt_id", l.attempt_id},
              {"seq", l.seq},  {"stream", l.stream}, {"ts_ms", l.ts_ms},
              {"text", l.text}};
}

Json NodeToJson(const NodeView& v) {
  const auto& n = v.node;
  return Json{{"id", n.id},
              {"name", n.name},
              {"state", st::Name(n.state)},
              {"registered_ms", n.registered_ms},
              {"last_seen_ms", n.last_seen_ms},
              {"price_per_gpu_hour", n.price_per_gpu_hour},
              {"price_per_cpu_hour", n.price_per_cpu_hour},
              {"region", n.region},
              {"gpus_free", v.gpus_free},
              {"cpus_free", v.cpus_free},
              {"memory_free_gb", v.memory_free_gb},
              {"running_attempts", v.running_attempts},
              {"inventory", n.inventory},
              {"verification", n.verification},
              {"verification_reasons", n.verification_reasons},
              {"verifying", v.verifying},
              {"verification_queued", v.verify_queued},
              {"verified_ms", n.verified_ms},
              {"hardware_fingerprint", n.hardware_fingerprint},
              {"software_fingerprint", n.software_fingerprint},
              {"conformance", n.conformance},
              {"revoked", n.revoked},
              {"reliability", market::ToJson(v.reliability)}};
}

}  // namespace sluice::server
