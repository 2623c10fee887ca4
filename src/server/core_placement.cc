// Placement: what every node has free, the scheduler's plan turned into attempts, and when an
// interruptible job may fall back to on-demand capacity. Members of ServerCore.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/inventory.h"
#include "ledger/metering.h"
#include "market/gpu_identity.h"
#include "market/perf.h"
#include "sched/requeue_policy.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

// What GPU `index` measured in the node's last verification, folded into its label's offer
// (docs/design-notes.md, "GPU speed"). The offer carries its slowest GPU's figure. It ranks by
// the spec unless a GPU was flagged (measured below half its spec: ranked by spec × the measured
// ratio) or the spec has no figure (ranked by what was measured, capped at FastestSpecPerf).
void ApplyMeasuredSpeed(market::Offer& o, int index, const audit::Verdict& verdict, bool first) {
  const audit::GpuSpeed* speed = nullptr;
  for (const auto& s : verdict.gpu_speeds) {
    if (s.index == index) speed = &s;
  }
  // One GPU of the label without a measurement leaves the whole offer unmeasured.
  double measured = 0;
  if (speed != nullptr) {
    if (speed->matmul_mode == 1 && speed->measured_tflops > 0) {
      measured = market::PerfFromTflops(speed->measured_tflops);
    } else if (speed->ratio > 0) {
      measured = o.spec_perf * speed->ratio;  // an FMA figure, judged by its memory ratio
    }
  }
  if (first) {
    o.measured_perf = measured;
  } else if (o.measured_perf > 0) {
    o.measured_perf = measured > 0 ? std::min(o.measured_perf, measured) : 0;
  }
  double rank = o.spec_perf;
  if (speed != nullptr && speed->flagged) {
    rank = o.spec_perf * speed->ratio;
    if (o.perf_flag.empty()) o.perf_flag = speed->note;
  }
  // No spec to hold the measurement against: what the agent reported, but never above the
  // fastest GPU the specs know, so a forged figure cannot buy first place.
  if (o.spec_perf <= 0) rank = std::min(o.measured_perf, market::FastestSpecPerf());
  o.perf_score = first ? rank : std::min(o.perf_score, rank);
}

// What a node sells when idle (sched::NodeCapacity::offers): one offer per GPU label, or one CPU
// offer. Every label and capability comes from the probed inventory, never from a claim.
std::vector<market::Offer> IdleOffers(const store::NodeRecord& node, const Inventory& inv,
                                      const sched::NodeCapacity& cap, const audit::Verdict* verdict,
                                      double reliability) {
  market::Offer base;
  base.provider = node.name;
  base.node = cap.node_id;
  base.node_name = node.name;
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
        o.form_factor = market::IdentifyGpu(gi).form_factor;
        o.compute_capability = gi.compute_capability;
      }
      o.spec_perf = market::PerfScore(g.label, o.form_factor);
      o.perf_score = o.spec_perf;
    }
    if (verdict) ApplyMeasuredSpeed(o, g.index, *verdict, o.gpus == 0);
    o.gpus++;
    o.gpus_available++;
  }
  std::vector<market::Offer> out;
  for (auto& [label, o] : by_label) out.push_back(std::move(o));
  return out;
}

}  // namespace

std::shared_ptr<const sched::NodeCapacity> ServerCore::NodeCapacityLocked(const std::string& id,
                                                                          const NodeState& ns,
                                                                          int64_t wall) const {
  if (ns.record.state == st::NodeState::kLost || ns.record.revoked) return nullptr;
  // Only verified nodes take work (issue 5). One whose verification is under way still counts
  // for "could this job ever run"; one that failed does not, until a new report passes.
  bool verified = ns.record.verification == kVerified;
  if (!verified && !ns.awaiting_report) return nullptr;
  if (!ns.inventory) return nullptr;  // unreadable: never placeable
  if (!ns.idle) {
    ns.now.reset();
    const Inventory* inv = ns.inventory.get();
    auto idle = std::make_shared<sched::NodeCapacity>();
    sched::NodeCapacity& cap = *idle;
    cap.node_id = id;
    cap.name = ns.record.name;
    for (const auto& g : inv->gpus) {
      cap.gpus.push_back({g.index, market::IdentifyGpu(g).label, GiB(g.memory_mib), true});
    }
    cap.total_cpus = cap.free_cpus = inv->cpu_cores;
    cap.total_memory_gb = cap.free_memory_gb = GiB(inv->memory_mib);
    cap.offers = std::make_shared<const std::vector<market::Offer>>(IdleOffers(
        ns.record, *inv, cap, ns.has_verdict ? &ns.verdict : nullptr, ns.reliability.score));
    ns.idle = std::move(idle);
  }
  // Reclaimed or noticed (issue 15 item 5): online, but no new work until the pause ends.
  const bool paused = ns.record.paused_until_ms > wall;
  const bool online =
      ns.record.state == st::NodeState::kOnline && ns.link != nullptr && verified && !paused;
  if (!ns.now || ns.now->online != online || ns.now->paused.empty() == paused) {
    auto now = std::make_shared<sched::NodeCapacity>(*ns.idle);
    now->online = online;
    if (paused) now->paused = "paused (" + ns.record.paused_reason + ")";
    // Each of its attempts charged through the node's index: O(its attempts), not all.
    for (const auto& aid : AttemptsOnLocked(id)) {
      auto a = active_attempts_.find(aid);
      if (a == active_attempts_.end()) continue;
      const AttemptRecord& att = a->second;
      now->running.push_back({aid, att.gpus, att.cpus, att.memory_gb, att.interruptible,
                              att.cause.rfind(kPreemptingPrefix, 0) == 0, att.price_per_hour});
      for (auto& g : now->gpus) {
        if (std::find(att.gpus.begin(), att.gpus.end(), g.index) != att.gpus.end()) {
          g.free = false;
        }
      }
      now->free_cpus -= att.cpus;
      now->free_memory_gb -= att.memory_gb;
    }
    ns.now = std::move(now);
  }
  return ns.now;
}

const std::vector<std::shared_ptr<const sched::NodeCapacity>>& ServerCore::CapacityLocked() const {
  const int64_t wall = clock_->NowMillis();
  auto note_pause = [&](const NodeState& ns) {
    if (ns.record.paused_until_ms > wall) {
      capacity_pause_ends_ms_ = std::min(capacity_pause_ends_ms_, ns.record.paused_until_ms);
    }
  };
  // A node's share of the view's FleetFacts, added (+1) or taken away (-1).
  auto count_facts = [&](size_t slot, const sched::NodeCapacity& cap, int sign) {
    const bool preemptible = sched::HasPreemptible(cap);
    capacity_free_gpus_ += sign * sched::FreeGpusOf(cap);
    capacity_free_cpus_ += sign * sched::FreeCpusOf(cap);
    if (sign > 0) {
      capacity_preemptible_ += preemptible ? 1 : 0;
      if (!cap.paused.empty()) capacity_paused_.insert(slot);
    } else {
      capacity_preemptible_ -= preemptible ? 1 : 0;
      if (!cap.paused.empty()) capacity_paused_.erase(slot);
    }
  };
  // The nodes changed since: each in its place, unless one joins or leaves the view (rare: a
  // node verified, lost, revoked), which builds it afresh.
  if (!capacity_stale_ && wall < capacity_pause_ends_ms_) {
    for (const auto& id : capacity_dirty_) {
      auto n = nodes_.find(id);
      auto slot = capacity_slot_.find(id);
      auto cap = n == nodes_.end() ? nullptr : NodeCapacityLocked(id, n->second, wall);
      if ((cap == nullptr) != (slot == capacity_slot_.end())) {
        capacity_stale_ = true;
        break;
      }
      if (cap == nullptr) continue;
      count_facts(slot->second, *capacity_[slot->second], -1);
      count_facts(slot->second, *cap, +1);
      capacity_[slot->second] = std::move(cap);
      note_pause(n->second);
    }
  } else {
    capacity_stale_ = true;
  }
  capacity_dirty_.clear();
  if (capacity_stale_) {
    capacity_.clear();
    capacity_slot_.clear();
    capacity_pause_ends_ms_ = std::numeric_limits<int64_t>::max();
    capacity_preemptible_ = 0;
    capacity_paused_.clear();
    capacity_free_gpus_ = capacity_free_cpus_ = 0;
    capacity_.reserve(nodes_.size());
    for (const auto& [id, ns] : nodes_) {
      auto cap = NodeCapacityLocked(id, ns, wall);
      if (cap == nullptr) continue;
      capacity_slot_[id] = capacity_.size();
      count_facts(capacity_.size(), *cap, +1);
      capacity_.push_back(std::move(cap));
      note_pause(ns);
    }
    capacity_stale_ = false;
  }
  capacity_facts_.preemptible = capacity_preemptible_ > 0;
  capacity_facts_.paused.assign(capacity_paused_.begin(), capacity_paused_.end());
  capacity_facts_.free_gpus = capacity_free_gpus_;
  capacity_facts_.free_cpus = capacity_free_cpus_;
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the kept view against one built from every node: a
  // change that was not noted (NodeChangedLocked) would show here as a node out of date.
  size_t at = 0;
  for (const auto& [id, ns] : nodes_) {
    auto cap = NodeCapacityLocked(id, ns, wall);
    if (cap == nullptr) continue;
    if (at >= capacity_.size() || capacity_[at] != cap) {
      std::fprintf(stderr, "placement view: node %s is out of date\n", id.c_str());
      std::abort();
    }
    ++at;
  }
  if (at != capacity_.size()) {
    std::fprintf(stderr, "placement view: %zu nodes, %zu expected\n", capacity_.size(), at);
    std::abort();
  }
#endif
  return capacity_;
}

sched::ScheduleOptions ServerCore::IncrementalLocked() const {
  // Only the nodes changed since the last full pass for the shapes nothing fitted then, unless a
  // node's offers or presence changed; 10 s after the last full search everything is searched
  // again, so a change this bookkeeping missed cannot strand a job (docs/design-notes.md
  // "Placement at scale").
  sched::ScheduleOptions how;
  how.fleet = &capacity_facts_;  // CapacityLocked's, current once it has run
  if (!nodes_changed_ && !exhausted_shapes_.empty() &&
      clock_->MonotonicMillis() - last_full_search_mono_ < kFullSearchLastsMs) {
    how.exhausted_before = &exhausted_shapes_;
    how.changed_nodes = &changed_nodes_;
    how.node_index = &capacity_slot_;  // CapacityLocked's, current once it has run
  }
  return how;
}

const std::set<std::string>& ServerCore::AttemptsOnLocked(const std::string& node_id) const {
  static const std::set<std::string> kNone;
  auto it = attempts_by_node_.find(node_id);
  return it == attempts_by_node_.end() ? kNone : it->second;
}

Status ServerCore::ScheduleLocked() {
  schedule_due_ = false;
  Status s = PlaceLocked();
  // A failed pass is tried again by the next tick, whatever caused it.
  schedule_again_ = !s.ok();
  return s;
}

Status ServerCore::RequestScheduleLocked() {
  if (!scheduler_.joinable()) return ScheduleLocked();
  schedule_due_ = true;
  scheduler_wake_.notify_one();
  return Status::Ok();
}

Status ServerCore::ScheduleNewJobLocked(const std::string& job_id) {
  if (schedule_again_) return ScheduleLocked();
  if (schedule_due_) return Status::Ok();  // the thread's pass, due already, will place it
  Status s = PlaceLocked(&job_id);
  if (!s.ok()) schedule_again_ = true;
  return s;
}

void ServerCore::StartScheduler() {
  std::lock_guard<std::mutex> lock(mu_);
  if (scheduler_.joinable()) return;
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

void ServerCore::SchedulerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    scheduler_wake_.wait(lock, [this] { return schedule_due_ || scheduler_stop_; });
    if (scheduler_stop_) return;
    auto started = std::chrono::steady_clock::now();
    if (Status s = ScheduleLocked(); !s.ok()) DegradedLocked("schedule", "a scheduling pass", s);
    // Then as long again (at least 1 ms) with the lock free: the agents' messages are handled
    // meanwhile and share the next pass, instead of each waking a pass of its own, and passes
    // never hold the lock more than about half the time. A pacing of throughput, not a timeout
    // of any logic: nothing is decided by how long this takes.
    auto took = std::chrono::steady_clock::now() - started;
    scheduler_wake_.wait_for(
        lock, std::max<std::chrono::steady_clock::duration>(took, std::chrono::milliseconds(1)),
        [this] { return scheduler_stop_; });
  }
}

sched::JobRequest ServerCore::MakeRequestLocked(const std::string& id, const JobState& js,
                                                int64_t spent) const {
  const bool fallback =
      js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand && js.fell_back;
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
    r.work.fallback_on_demand = fallback;
  }
  // The budget left changes as the job is charged; a job resuming from a checkpoint needs only
  // room to run a while and stop safely (its remaining work is unknown).
  if (const auto budget = BudgetMicrosLocked(js)) {
    r.budget_left = static_cast<double>(std::max<int64_t>(0, *budget - spent)) / 1e6;
    if (!js.record.checkpoint.empty()) {
      const int64_t min_s = std::max<int64_t>(js.spec.lifecycle.checkpoint_interval_s.value_or(600),
                                              2 * options_.budget_margin_ms / 1000);
      r.budget_min_hours = static_cast<double>(min_s) / 3600;
    }
    // The stop's reserve: the grace period (and the check's margin) in hours of the price, and
    // the final checkpoint's upload.
    r.budget_reserve_hours =
        static_cast<double>(js.spec.lifecycle.grace_period_s * 1000 + options_.budget_margin_ms) /
        3.6e6;
    r.budget_reserve = static_cast<double>(ledger::TransferCharge(
                           static_cast<int64_t>(js.spec.lifecycle.checkpoint_size_gb * 1e9),
                           ledger::PricePerHourMicros(options_.transfer_price_per_gb))) /
                       1e6;
  }
  if (!fallback) r.bid = js.spec.lifecycle.max_bid_per_hour;  // on-demand is sold at its price
  r.shape = sched::ShapeKey(r);
  return r;
}

std::shared_ptr<const sched::JobRequest> ServerCore::RequestLocked(const std::string& id,
                                                                   const JobState& js) const {
  const bool fallback =
      js.spec.lifecycle.capacity == spec::Capacity::kInterruptibleThenOnDemand && js.fell_back;
  const auto budget = BudgetMicrosLocked(js);
  const int64_t spent = budget ? JobSpentLocked(id) : 0;
  const double left = budget ? static_cast<double>(std::max<int64_t>(0, *budget - spent)) / 1e6 : 0;
  // Rebuilt when an input that changes while a job is queued did: fell_back, the budget left,
  // a checkpoint saved (MakeRequestLocked).
  if (!js.request || js.request->work.fallback_on_demand != fallback ||
      js.request->budget_left.has_value() != budget.has_value() ||
      js.request->budget_left.value_or(0) != left ||
      js.request->budget_min_hours.has_value() != (budget && !js.record.checkpoint.empty())) {
    js.request = std::make_shared<sched::JobRequest>(MakeRequestLocked(id, js, spent));
  }
  auto avoid = avoid_.find(id);
  if (avoid == avoid_.end()) return js.request;
  // Cooldowns change by the second: a copy for this pass, never cached, searched on its own.
  auto r = std::make_shared<sched::JobRequest>(*js.request);
  r->shape.reset();
  for (const auto& [node, until] : avoid->second) {
    if (until > clock_->MonotonicMillis()) r->avoid_nodes.push_back(node);
  }
  return r;
}

Status ServerCore::PlaceLocked(const std::string* only) {
  Edit edit;
  WriteBatch& batch = edit.batch;
  // The view first: its fleet facts decide how much of the queue this pass reads.
  const std::vector<std::shared_ptr<const sched::NodeCapacity>>& capacity = CapacityLocked();
  // The pass's queue, position by position: the request and the job as this edit sees it, so
  // the answers below find a job by its position, not by a lookup per job. Members reused by
  // every pass: nothing before the answers below runs a pass (a nested one comes only after the
  // commit, from PreemptLocked, when they are no longer read).
  pass_states_.clear();
  pass_queue_.clear();
  pass_copies_.clear();
  pass_tails_.clear();
  // Credit per owner, asked once a pass: a deep queue is mostly a few accounts' jobs, in runs.
  std::unordered_map<std::string, bool> can_spend;
  const std::string* owner = nullptr;  // the last job's, and whether it may spend
  bool owner_can_spend = false;
  // Why the job's account may start nothing now (issue 14: past its credit limit; issue 15: its
  // account or team spent its monthly budget): the wording's fixed prefix, and the whole line.
  auto refusal = [&](const JobState& js) -> std::pair<const char*, std::string> {
    if (owner == nullptr || *owner != js.record.owner) {
      owner = &js.record.owner;
      auto credit = can_spend.find(*owner);
      if (credit == can_spend.end()) {
        credit = can_spend.emplace(*owner, CanSpendLocked(*owner)).first;
      }
      owner_can_spend = credit->second;
    }
    if (!owner_can_spend) {
      return {"waiting for credit: ",
              "waiting for credit: " + CreditRefusalLocked(js.record.owner)};
    }
    if (budgets_.empty()) return {nullptr, {}};
    std::string monthly = MonthlyRefusalLocked(js.record.owner, js.record.team);
    if (monthly.empty()) return {nullptr, {}};
    return {"waiting for budget: ", "waiting for budget: " + monthly};
  };
  // The job says why it waits, once: the amounts in it change with every settlement, the
  // reason does not.
  auto refuse = [&](const std::string& id, const JobState& js, const char* prefix,
                    const std::string& why) {
    if (js.record.reason.rfind(prefix, 0) == 0) return;
    JobState& waiting = StagedJobLocked(edit, id);
    waiting.record.reason = why;
    batch.jobs.push_back(waiting.record);
    batch.events.push_back(EventLocked(id, "waiting", why));
  };
  // Interruptible-then-on-demand jobs that have waited or been preempted enough may now use
  // on-demand capacity; the switch is an event, never silent (DESIGN.md §6). Whether it did.
  auto fall_back = [&](const std::string& id, const JobState& live) {
    if (live.fell_back ||
        live.spec.lifecycle.capacity != spec::Capacity::kInterruptibleThenOnDemand) {
      return false;
    }
    std::string why = FallbackReasonLocked(live);
    if (why.empty()) return false;
    StagedJobLocked(edit, id).fell_back = true;
    batch.events.push_back(
        EventLocked(id, "fallback", "falling back to on-demand capacity: " + why));
    return true;
  };
  // Into the pass's queue, at the next position; `tail`: its group's entry in `tails` below.
  auto feed = [&](const std::string& id, const JobState* js, int tail) {
    std::shared_ptr<const sched::JobRequest> request = RequestLocked(id, *js);
    pass_states_.push_back(js);
    pass_queue_.push_back(request.get());
    pass_tails_.push_back(tail);
    if (request != js->request) pass_copies_.push_back(std::move(request));  // this pass's own
  };
  // A job considered on its own: fallback, refusal, then into the queue.
  auto consider = [&](const std::string& id, const JobState* live) {
    fall_back(id, *live);
    const JobState* js = ViewJobLocked(edit, id);
    if (auto [prefix, why] = refusal(*js); prefix != nullptr) return refuse(id, *js, prefix, why);
    feed(id, js, -1);
  };
  // A group's jobs this pass did not read (QueueIndex): from `from` on, with the answer they all
  // get, taken from the first of its read jobs to wait (or the group's refusal).
  struct Tail {
    const std::string* key;
    const QueueIndex::Group* group;
    QueueIndex::Order from;
    std::optional<QueueIndex::Answer> answer;
    std::string refusal;  // the whole line, for a refused group
  };
  std::vector<Tail> tails;
  std::unordered_set<std::string> alone;  // jobs read on their own this pass, outside a group
  // A group is read only as far as can matter when nothing in the fleet is preemptible (then no
  // room comes in the pass, and a shape's later jobs wait as its first waiting one does:
  // sched::MostPlacements); a submit's own pass reads its job alone.
  const bool grouped = only == nullptr && options_.group_queue && !capacity_facts_.preemptible;
  if (only != nullptr) {
    if (auto it = queued_.find(*only); it != queued_.end()) consider(it->first, it->second);
  } else if (!grouped) {
    // One walk over the queue (a deep one is walked once a pass, not once per concern).
    for (const auto& [id, live] : queued_) consider(id, live);
  } else {
    // Jobs that fall back now are read alone (their shape changes with this edit), as are jobs
    // with a cooldown (searched on their own) and jobs outside any group.
    for (const auto& [id, live] : may_fall_back_) {
      if (fall_back(id, *live)) alone.insert(id);
    }
    for (const auto& [id, until] : avoid_) {
      if (queued_.count(id) > 0) alone.insert(id);
    }
    alone.insert(queue_index_.alone().begin(), queue_index_.alone().end());
    for (const std::string& id : alone) {
      const JobState* js = ViewJobLocked(edit, id);
      if (auto [prefix, why] = refusal(*js); prefix != nullptr) {
        refuse(id, *js, prefix, why);
      } else {
        feed(id, js, -1);
      }
    }
    // Members carry their JobState (IndexJobLocked files it): no lookup by id per job.
    auto member_job = [](const QueueIndex::Member& m) {
      return static_cast<const JobState*>(m.job);
    };
    for (const auto& [key, group] : queue_index_.groups()) {
      // Owner and team are the group's: its first member answers for all.
      const JobState& first = *member_job(group.members.begin()->second);
      if (auto [prefix, why] = refusal(first); prefix != nullptr) {
        tails.push_back({&key, &group, group.members.begin()->first,
                         QueueIndex::Answer{prefix, false, true}, std::move(why)});
        continue;
      }
      const size_t most = sched::MostPlacements(
          capacity_facts_, *RequestLocked(group.members.begin()->second.id, first));
      size_t read = 0;
      for (const auto& [order, member] : group.members) {
        if (!alone.empty() && alone.count(member.id) > 0) continue;
        if (most != std::numeric_limits<size_t>::max() && read > most) {
          tails.push_back({&key, &group, order, std::nullopt, {}});
          break;
        }
        feed(member.id, member_job(member), -1);
        ++read;
      }
      // Its read jobs carry their tail's entry, so the first to wait gives the tail its answer.
      if (!tails.empty() && tails.back().group == &group) {
        for (size_t at = pass_tails_.size() - read; at < pass_tails_.size(); ++at) {
          pass_tails_[at] = static_cast<int>(tails.size() - 1);
        }
      }
    }
  }
  const std::vector<const sched::JobRequest*>& queue = pass_queue_;
  if (queue.empty() && tails.empty()) return CommitLocked(edit);
  // Nothing to search when every group was refused: their answers only.
  const bool searched = !queue.empty();
  const int64_t now_mono = clock_->MonotonicMillis();
  // The tick's renewal is a full search; a submit's pass (only) stays incremental meanwhile.
  const sched::ScheduleOptions how =
      only == nullptr && full_search_due_ ? sched::ScheduleOptions{} : IncrementalLocked();
  const bool incremental = how.exhausted_before != nullptr;
  sched::ScheduleOptions alike = how;
  alike.answer_alike_once = true;  // a deep queue costs a pass what changed, not its length
  alike.fleet = &capacity_facts_;  // a full search's too
  sched::Plan plan;
  if (searched) plan = sched::Schedule(capacity, queue, options_.cost_model, alike);

  int64_t now = clock_->NowMillis();
  std::map<std::string, std::string> snapshots_written;  // node id -> digest, in this edit
  for (const auto& p : plan.placements) {
    JobState& js = StagedJobLocked(edit, p.job_id);
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
    if (std::isfinite(p.estimate.expected_cost) && p.estimate.expected_cost > 0 &&
        p.estimate.expected_cost < 1e12) {
      att.expected_cost_micros = std::llround(p.estimate.expected_cost * 1e6);
    }
    // What it runs on, frozen now: the audit bundle must show this, not the node as it is later.
    const NodeState& node = nodes_.at(p.node_id);  // the plan places on known nodes only
    if (!node.snapshot_digest.empty()) {
      att.node_snapshot = node.snapshot_digest;  // in the store already
#ifndef NDEBUG
      if (Snapshot(node.record).digest != node.snapshot_digest) {
        std::fprintf(stderr, "node %s: kept snapshot digest is out of date\n", p.node_id.c_str());
        std::abort();
      }
#endif
    } else if (auto written = snapshots_written.find(p.node_id);
               written != snapshots_written.end()) {
      att.node_snapshot = written->second;  // written by this edit
    } else {
      st::NodeSnapshot snap = Snapshot(node.record);
      att.node_snapshot = snap.digest;
      snapshots_written.emplace(p.node_id, snap.digest);
      batch.snapshots.push_back(std::move(snap));
    }
    js.record.state = st::JobState::kStarting;
    js.record.attempt_id = att.id;
    js.record.reason.clear();
    js.never_fits = false;
    const std::string& node_name = node.record.name;
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
    edit.sends.emplace_back(p.node_id, proto::ToJson(a));
    edit.max_log_seq[att.id] = 0;
    edit.attempts[att.id] = std::move(att);
  }
  // How the job says the scheduler's answer: an interruptible-then-on-demand job not fallen back
  // yet waits for interruptible capacity, not for ever (it may use on-demand capacity later).
  // QueueGroupLocked keeps jobs apart that would say one answer differently.
  // `reworded` holds the new wording where there is one (most jobs keep the reason as it is).
  auto wording = [](const JobState& js, bool never_fits, const std::string& reason,
                    std::string& reworded) -> std::pair<bool, const std::string*> {
    if (js.spec.lifecycle.capacity != spec::Capacity::kInterruptibleThenOnDemand || js.fell_back) {
      return {never_fits, &reason};
    }
    const auto& lc = js.spec.lifecycle;
    reworded = "waiting for interruptible capacity (" + reason + "); on-demand after " +
               std::to_string(lc.fallback_after_preemptions) + " preemptions or " +
               std::to_string(lc.fallback_after_s) + "s";
    return {false, &reworded};
  };
  // A waiting job's answer, staged where it changed.
  auto answer_job = [&](const std::string& job_id, const JobState& js, bool never_fits,
                        const std::string& why) {
    if (js.record.reason == why && js.never_fits == never_fits) return;
    JobState& staged = StagedJobLocked(edit, job_id);
    if (staged.record.reason != why) {
      if (never_fits != staged.never_fits || never_fits) {
        batch.events.push_back(EventLocked(job_id, never_fits ? "unschedulable" : "waiting", why));
      }
      staged.record.reason = why;
      batch.jobs.push_back(staged.record);
    }
    staged.never_fits = never_fits;
  };
  // `at`: the job's position in the pass's queue.
  auto answer = [&](size_t at, bool never_fits, const std::string& reason) {
    const std::string& job_id = queue[at]->job_id;
    // As the queue was built, unless staged since (by an earlier answer: only placements are
    // staged in between, and a placed job is not answered).
    auto seen = edit.jobs.find(job_id);
    const JobState& js = seen != edit.jobs.end() ? seen->second : *pass_states_[at];
    std::string reworded;
    auto [nf, why] = wording(js, never_fits, reason, reworded);
    if (pass_tails_[at] >= 0) {
      Tail& tail = tails[static_cast<size_t>(pass_tails_[at])];
      if (!tail.answer) tail.answer = QueueIndex::Answer{*why, nf, false};
    }
    answer_job(job_id, js, nf, *why);
  };
  for (const sched::Waiting& w : plan.waiting) answer(w.at, w.never_fits, w.reason);
  for (const auto& group : plan.alike) {
    const sched::Waiting& w = plan.waiting[group.answer];
    for (size_t at : group.at) answer(at, w.never_fits, w.reason);
  }
  // The jobs the pass did not read wait as their group's first waiting one does: all of them
  // when the group's answer changed, else only those that may not hold it yet.
  std::vector<std::pair<std::string, QueueIndex::Answer>> settle;  // keys copied: the commit
                                                                   // may erase emptied groups
  for (const Tail& tail : tails) {
    if (!tail.answer) {
      // No read job waited, so MostPlacements was wrong: leave the rest as they are, searched
      // again by the next pass, and say so.
      DegradedLocked("schedule",
                     "answering a queue group (" + std::to_string(tail.group->members.size()) +
                         " jobs) whose read jobs were all placed",
                     Status::Internal("sched::MostPlacements bound exceeded"));
      continue;
    }
    const bool same = tail.group->settled == tail.answer;
    auto answer_member = [&](const std::string& id) {
      if (!alone.empty() && alone.count(id) > 0) return;  // answered on its own
      const JobState& js = *ViewJobLocked(edit, id);
      if (tail.answer->prefix) {
        refuse(id, js, tail.answer->reason.c_str(), tail.refusal);
      } else {
        answer_job(id, js, tail.answer->never_fits, tail.answer->reason);
      }
    };
    if (same) {
      const auto& todo = tail.group->unsettled;
      for (auto it = todo.lower_bound(tail.from); it != todo.end(); ++it) answer_member(it->second);
    } else {
      const auto& todo = tail.group->members;
      for (auto it = todo.lower_bound(tail.from); it != todo.end(); ++it) {
        answer_member(it->second.id);
      }
    }
    if (!same) settle.emplace_back(*tail.key, *tail.answer);
  }
  // The allocation exists in memory, and its assignments are sent, only once it is durable.
  if (Status s = CommitLocked(edit); !s.ok()) {
    if (only == nullptr && searched) exhausted_shapes_.clear();  // the next searches everything
    return s;
  }
  // Every member of these groups now holds its answer (or is listed as not holding it).
  for (const auto& [key, settled] : settle) {
    queue_index_.Settle(key, settled, [this](const std::string& id) { return ReasonOfLocked(id); });
  }
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the groups against every queued job.
  if (options_.group_queue) CheckQueueIndexLocked();
#endif
  // The snapshots are durable now: later placements on these nodes refer to them.
  for (const auto& [node_id, digest] : snapshots_written) {
    if (auto n = nodes_.find(node_id); n != nodes_.end()) n->second.snapshot_digest = digest;
  }
  if (!searched) return Status::Ok();
  if (only == nullptr) {
    // What the plan saw is now the state: the next pass starts from it.
    exhausted_shapes_ = std::move(plan.exhausted_shapes);
    changed_nodes_.clear();
    nodes_changed_ = false;
    if (!incremental) {
      last_full_search_mono_ = now_mono;
      full_search_due_ = false;
    }
  }
  ++(incremental ? passes_.incremental : passes_.full);
  // On-demand work displacing interruptible attempts (DESIGN.md §6); the job is placed once
  // they have stopped and freed the room.
  // An interruptible job's higher bid does the same (issue 15 item 4).
  for (const auto& pre : plan.preemptions) {
    auto taker = jobs_.find(pre.job_id);
    const bool bidder = taker != jobs_.end() &&
                        taker->second.spec.lifecycle.capacity != spec::Capacity::kOnDemand &&
                        taker->second.spec.lifecycle.max_bid_per_hour.has_value();
    const double bid = bidder ? taker->second.spec.lifecycle.max_bid_per_hour.value_or(0) : 0;
    for (const auto& aid : pre.attempt_ids) {
      auto victim = active_attempts_.find(aid);
      if (victim == active_attempts_.end()) continue;
      const std::string cause = bidder
                                    ? "outbid by job " + pre.job_id + " (" + Money(bid) +
                                          " against " + Money(victim->second.price_per_hour) + ")"
                                    : "making room for on-demand job " + pre.job_id;
      SLUICE_RETURN_IF_ERROR(PreemptLocked(aid, cause));
    }
  }
  return Status::Ok();
}

ServerCore::PassCounts ServerCore::PlacementPasses() {
  std::lock_guard<std::mutex> lock(mu_);
  return passes_;
}

std::string ServerCore::QueueGroupLocked(const std::string& id, const JobState& js) const {
  // A budget left changes as the job is charged, outside any change to the job.
  if (js.spec.max_total_cost) return "";
  RequestLocked(id, js);  // its cached request, without a cooldown's copy
  if (!js.request || !js.request->shape || js.request->shape->empty()) return "";
  // Everything the pass's answer and its wording read besides the shape.
  const auto& lc = js.spec.lifecycle;
  std::string wording = "-";
  if (lc.capacity == spec::Capacity::kInterruptibleThenOnDemand && !js.fell_back) {
    wording =
        std::to_string(lc.fallback_after_preemptions) + "," + std::to_string(lc.fallback_after_s);
  }
  return js.record.owner + '\n' + js.record.team + '\n' + wording + '\n' + *js.request->shape;
}

std::pair<std::string_view, bool> ServerCore::ReasonOfLocked(const std::string& id) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return {std::string_view(), false};
  return {it->second.record.reason, it->second.never_fits};
}

void ServerCore::CheckQueueIndexLocked() const {
  if (queue_index_.size() != queued_.size()) {
    std::fprintf(stderr, "queue index: %zu jobs, %zu queued\n", queue_index_.size(),
                 queued_.size());
    std::abort();
  }
  for (const auto& [id, js] : queued_) {
    if (!queue_index_.Has(id)) {
      std::fprintf(stderr, "queue index: queued job %s is not filed\n", id.c_str());
      std::abort();
    }
  }
  for (const auto& [key, group] : queue_index_.groups()) {
    for (const auto& [order, member] : group.members) {
      auto job = queued_.find(member.id);
      if (job == queued_.end() || member.job != job->second) {
        std::fprintf(stderr, "queue index: job %s's handle is out of date\n", member.id.c_str());
        std::abort();
      }
    }
  }
  if (auto astray =
          queue_index_.FirstAstray([this](const std::string& id) { return ReasonOfLocked(id); })) {
    std::fprintf(stderr, "queue index: job %s does not hold its group's answer\n", astray->c_str());
    std::abort();
  }
}

std::string ServerCore::FallbackReasonLocked(const JobState& js) const {
  const auto& lc = js.spec.lifecycle;
  sched::FallbackRule rule{lc.capacity == spec::Capacity::kInterruptibleThenOnDemand,
                           lc.fallback_after_preemptions, lc.fallback_after_s * 1000};
  return sched::FallbackReason(rule, js.record.preemptions,
                               clock_->MonotonicMillis() - js.queued_since_mono);
}

}  // namespace sluice::server
