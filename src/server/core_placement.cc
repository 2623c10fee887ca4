// Placement: the scheduler's plan turned into attempts, by passes that read the queue's groups
// only as far as can matter (docs/design-notes.md "Placement at scale"). Members of ServerCore.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/thread_name.h"
#include "ledger/metering.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

namespace {

// A QueueIndex group handed to a pass a member at a time, in the group's order (sched::JobRun):
// with nothing preemptible the pass stops asking once the group's shape is settled, so a pass
// reads what it places plus one job per group, however deep the groups (docs/design-notes.md
// "Placement at scale"). The members it did not ask for are the group's tail, answered by the
// core. Members the pass reads on their own (`alone`) are skipped.
class GroupRun final : public sched::JobRun {
 public:
  // Files a member into the pass (its request, at the next position) and returns them.
  using Feed = std::function<sched::RunJob(const QueueIndex::Member&)>;
  GroupRun(const QueueIndex::Group& group, const std::unordered_set<std::string>& alone, int tail,
           Feed feed)
      : at_(group.members.begin()),
        end_(group.members.end()),
        alone_(alone),
        tail_(tail),
        feed_(std::move(feed)) {}

  sched::RunJob Next() override {
    SkipAlone();
    if (at_ == end_) return {};
    const QueueIndex::Member& member = (at_++)->second;
    return feed_(member);
  }
  // The first member the pass did not ask for; null when it asked for them all.
  const QueueIndex::Order* FirstUnread() {
    SkipAlone();
    return at_ == end_ ? nullptr : &at_->first;
  }
  int tail() const { return tail_; }  // the group's entry in the pass's tails

 private:
  void SkipAlone() {
    while (!alone_.empty() && at_ != end_ && alone_.count(at_->second.id) > 0) ++at_;
  }
  std::map<QueueIndex::Order, QueueIndex::Member>::const_iterator at_, end_;
  const std::unordered_set<std::string>& alone_;
  int tail_;
  Feed feed_;
};

}  // namespace

Status ServerCore::ScheduleLocked() {
  scheduler_.due = false;
  Status s = PlaceLocked();
  // A failed pass is tried again by the next tick, whatever caused it.
  schedule_again_ = !s.ok();
  return s;
}

Status ServerCore::RequestScheduleLocked() {
  if (!scheduler_.thread.joinable()) return ScheduleLocked();
  scheduler_.due = true;
  scheduler_.wake.notify_one();
  return Status::Ok();
}

Status ServerCore::ScheduleNewJobLocked(const std::string& job_id) {
  if (schedule_again_) return ScheduleLocked();
  if (scheduler_.due) return Status::Ok();  // the thread's pass, due already, will place it
  Status s = PlaceLocked(&job_id);
  if (!s.ok()) schedule_again_ = true;
  return s;
}

void ServerCore::StartScheduler() {
  std::lock_guard<TimedMutex> lock(mu_);
  if (scheduler_.thread.joinable()) return;
  scheduler_.thread = std::thread([this] {
    NameThisThread("sluice-sched");
    SchedulerLoop();
  });
}

void ServerCore::SchedulerLoop() {
  std::unique_lock<TimedMutex> lock(mu_);
  while (true) {
    scheduler_.wake.wait(lock, [this] { return scheduler_.due || scheduler_.stop; });
    if (scheduler_.stop) return;
    mu_.HoldingFor(kHeldForPlacement);
    auto started = std::chrono::steady_clock::now();
    if (Status s = ScheduleLocked(); !s.ok()) DegradedLocked("schedule", "a scheduling pass", s);
    // Then as long again (at least 1 ms) with the lock free: the agents' messages are handled
    // meanwhile and share the next pass, instead of each waking a pass of its own, and passes
    // never hold the lock more than about half the time. A pacing of throughput, not a timeout
    // of any logic: nothing is decided by how long this takes.
    auto took = std::chrono::steady_clock::now() - started;
    scheduler_.wake.wait_for(
        lock, std::max<std::chrono::steady_clock::duration>(took, std::chrono::milliseconds(1)),
        [this] { return scheduler_.stop; });
  }
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
  pass_.states.clear();
  pass_.queue.clear();
  pass_.copies.clear();
  pass_.tails.clear();
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
    if (monthly_.empty()) return {nullptr, {}};
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
    pass_.states.push_back(js);
    pass_.queue.push_back(request.get());
    pass_.tails.push_back(tail);
    if (request != js->request) pass_.copies.push_back(std::move(request));  // this pass's own
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
    std::string refusal;    // the whole line, for a refused group
    bool read_all = false;  // the pass read every member: no tail
  };
  std::vector<Tail> tails;
  std::unordered_set<std::string> alone;        // jobs read on their own this pass, outside a group
  std::deque<GroupRun> runs;                    // one per group not refused (grouped passes)
  std::vector<const sched::JobRequest*> eager;  // what the pass reads before any run (grouped)
  // A group is read only as far as can matter when nothing in the fleet is preemptible (then no
  // room comes in the pass, and a shape's later jobs wait as its first waiting one does:
  // sched::JobRun); a submit's own pass reads its job alone.
  const bool grouped = only == nullptr && options_.group_queue && !view_.facts.preemptible;
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
      // Read by the pass as far as it asks (sched::JobRun); the rest is the group's tail.
      tails.push_back({&key, &group, {}, std::nullopt, {}});
      const int tail = static_cast<int>(tails.size() - 1);
      runs.emplace_back(group, alone, tail, [&, tail](const QueueIndex::Member& m) {
        feed(m.id, member_job(m), tail);
        return sched::RunJob{pass_.queue.back(), pass_.queue.size() - 1};
      });
    }
    eager.assign(pass_.queue.begin(), pass_.queue.end());  // the jobs read alone
  }
  // Every job read, by its position: the queue's first, then the runs' as the pass asks for them.
  const std::vector<const sched::JobRequest*>& queue = pass_.queue;
  if (queue.empty() && runs.empty() && tails.empty()) return CommitLocked(edit);
  // Nothing to search when every group was refused: their answers only.
  const bool searched = !queue.empty() || !runs.empty();
  const int64_t now_mono = clock_->MonotonicMillis();
  // The tick's renewal is a full search; a submit's pass (only) stays incremental meanwhile.
  const sched::ScheduleOptions how =
      only == nullptr && search_.full_due ? sched::ScheduleOptions{} : IncrementalLocked();
  const bool incremental = how.exhausted_before != nullptr;
  const size_t rechecked = incremental ? how.changed_nodes->size() : 0;
  sched::ScheduleOptions alike = how;
  alike.answer_alike_once = true;      // a deep queue costs a pass what changed, not its length
  alike.fleet = &view_.facts;          // a full search's too
  alike.nodes_in_id_order = true;      // the view is in nodes_' (id) order
  alike.rankings = &search_.rankings;  // a shape's search reads its ranking, not every node
  std::vector<sched::JobRun*> handed;
  for (GroupRun& run : runs) handed.push_back(&run);
  if (grouped) alike.runs = &handed;
  sched::Plan plan;
  if (searched) {
    plan = sched::Schedule(capacity, grouped ? eager : queue, options_.cost_model, alike);
  }
  // A group's tail: its members the pass did not ask for (none when it read them all).
  for (size_t r = 0; r < runs.size(); ++r) {
    Tail& tail = tails[static_cast<size_t>(runs[r].tail())];
    if (const QueueIndex::Order* from = runs[r].FirstUnread()) {
      tail.from = *from;
    } else {
      tail.read_all = true;
    }
  }

  int64_t now = clock_->NowMillis();
  std::map<std::string, std::string> snapshots_written;  // node id -> digest, in this edit
  for (const auto& p : plan.placements) {
    JobState& js = StagedJobLocked(edit, p.job_id);
    AttemptRecord att;
    att.id = ids_.Next("att-");
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
    const JobState& js = seen != edit.jobs.end() ? seen->second : *pass_.states[at];
    std::string reworded;
    auto [nf, why] = wording(js, never_fits, reason, reworded);
    if (pass_.tails[at] >= 0) {
      Tail& tail = tails[static_cast<size_t>(pass_.tails[at])];
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
    if (tail.read_all) continue;  // every member was read, and answered or placed on its own
    if (!tail.answer) {
      // The pass stopped reading a group none of whose read jobs waited: sched::JobRun says it
      // never does. Leave the rest as they are, searched again by the next pass, and say so.
      DegradedLocked("schedule",
                     "answering a queue group (" + std::to_string(tail.group->members.size()) +
                         " jobs) whose read jobs were all placed",
                     Status::Internal("a run was cut short before its shape was settled"));
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
    // The next pass searches everything.
    if (only == nullptr && searched) search_.exhausted_shapes.clear();
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
    search_.exhausted_shapes = std::move(plan.exhausted_shapes);
    search_.changed_nodes.clear();
    search_.nodes_changed = false;
    if (!incremental) {
      search_.last_full_mono = now_mono;
      search_.full_due = false;
    }
  }
  ++(incremental ? passes_.incremental : passes_.full);
  passes_.rechecked_nodes += static_cast<int64_t>(rechecked);
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
  std::lock_guard<TimedMutex> lock(mu_);
  return passes_;
}

}  // namespace sluice::server
