// The placement view: what every node sells when idle and has free now, kept between passes
// and brought up to date node by node, with the fleet's facts (docs/design-notes.md "Placement
// at scale"). Members of ServerCore.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "common/inventory.h"
#include "market/gpu_identity.h"
#include "market/perf.h"
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

// What a node's capacity reads of an attempt on it; SameRoomOnNode (core_internal.h) compares
// exactly these fields.
sched::RunningAttempt RunningOf(const AttemptRecord& att) {
  return {att.id,
          att.gpus,
          att.cpus,
          att.memory_gb,
          att.interruptible,
          att.cause.rfind(kPreemptingPrefix, 0) == 0,
          att.price_per_hour};
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
      now->running.push_back(RunningOf(att));
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
      view_.pause_ends_ms = std::min(view_.pause_ends_ms, ns.record.paused_until_ms);
    }
  };
  // A node's share of the view's FleetFacts, added (+1) or taken away (-1).
  auto count_facts = [&](size_t slot, const sched::NodeCapacity& cap, int sign) {
    const bool preemptible = sched::HasPreemptible(cap);
    if (sign > 0) {
      view_.preemptible += preemptible ? 1 : 0;
      if (!cap.paused.empty()) view_.paused.insert(slot);
    } else {
      view_.preemptible -= preemptible ? 1 : 0;
      if (!cap.paused.empty()) view_.paused.erase(slot);
    }
  };
  // The nodes changed since: each in its place, unless one joins or leaves the view (rare: a
  // node verified, lost, revoked), which builds it afresh.
  if (!view_.stale && wall < view_.pause_ends_ms) {
    for (const auto& id : view_.dirty) {
      auto n = nodes_.find(id);
      auto slot = view_.slot.find(id);
      auto cap = n == nodes_.end() ? nullptr : NodeCapacityLocked(id, n->second, wall);
      if ((cap == nullptr) != (slot == view_.slot.end())) {
        view_.stale = true;
        break;
      }
      if (cap == nullptr) continue;
      count_facts(slot->second, *view_.nodes[slot->second], -1);
      count_facts(slot->second, *cap, +1);
      view_.nodes[slot->second] = std::move(cap);
      note_pause(n->second);
    }
  } else {
    view_.stale = true;
  }
  view_.dirty.clear();
  if (view_.stale) {
    view_.nodes.clear();
    view_.slot.clear();
    view_.pause_ends_ms = std::numeric_limits<int64_t>::max();
    view_.preemptible = 0;
    view_.paused.clear();
    view_.nodes.reserve(nodes_.size());
    for (const auto& [id, ns] : nodes_) {
      auto cap = NodeCapacityLocked(id, ns, wall);
      if (cap == nullptr) continue;
      view_.slot[id] = view_.nodes.size();
      count_facts(view_.nodes.size(), *cap, +1);
      view_.nodes.push_back(std::move(cap));
      note_pause(ns);
    }
    view_.stale = false;
  }
  view_.facts.preemptible = view_.preemptible > 0;
  view_.facts.paused.assign(view_.paused.begin(), view_.paused.end());
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the kept view against one built from every node: a
  // change that was not noted (NodeChangedLocked) would show here as a node out of date.
  size_t at = 0;
  for (const auto& [id, ns] : nodes_) {
    auto cap = NodeCapacityLocked(id, ns, wall);
    if (cap == nullptr) continue;
    if (at >= view_.nodes.size() || view_.nodes[at] != cap) {
      std::fprintf(stderr, "placement view: node %s is out of date\n", id.c_str());
      std::abort();
    }
    // And a kept node's attempts as they are now: an attempt change left unnoted because it
    // kept the attempt's room (SameRoomOnNode) must not have changed what the view reads.
    std::vector<sched::RunningAttempt> running;
    for (const auto& aid : AttemptsOnLocked(id)) {
      if (auto a = active_attempts_.find(aid); a != active_attempts_.end()) {
        running.push_back(RunningOf(a->second));
      }
    }
    if (running != cap->running) {
      std::fprintf(stderr, "placement view: node %s holds stale attempts\n", id.c_str());
      std::abort();
    }
    ++at;
  }
  if (at != view_.nodes.size()) {
    std::fprintf(stderr, "placement view: %zu nodes, %zu expected\n", view_.nodes.size(), at);
    std::abort();
  }
#endif
  return view_.nodes;
}

sched::ScheduleOptions ServerCore::IncrementalLocked() const {
  // Only the nodes changed since the last full pass for the shapes nothing fitted then, unless a
  // node's offers or presence changed; 10 s after the last full search everything is searched
  // again, so a change this bookkeeping missed cannot strand a job (docs/design-notes.md
  // "Placement at scale").
  sched::ScheduleOptions how;
  how.fleet = &view_.facts;      // CapacityLocked's, current once it has run
  how.nodes_in_id_order = true;  // CapacityLocked's view is built in nodes_' (id) order
  if (!search_.nodes_changed && !search_.exhausted_shapes.empty() &&
      clock_->MonotonicMillis() - search_.last_full_mono < kFullSearchLastsMs) {
    how.exhausted_before = &search_.exhausted_shapes;
    how.changed_nodes = &search_.changed_nodes;
    how.node_index = &view_.slot;  // CapacityLocked's, current once it has run
  }
  return how;
}

const std::set<std::string>& ServerCore::AttemptsOnLocked(const std::string& node_id) const {
  static const std::set<std::string> kNone;
  auto it = attempts_by_node_.find(node_id);
  return it == attempts_by_node_.end() ? kNone : it->second;
}

}  // namespace sluice::server
