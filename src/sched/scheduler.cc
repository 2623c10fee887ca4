#include "sched/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "common/money.h"
#include "market/explain.h"

namespace sluice::sched {

const std::vector<market::Offer>& NodeCapacity::Offers() const {
  static const std::vector<market::Offer> kNone;
  return offers ? *offers : kNone;
}

namespace {

bool OverBudget(const JobRequest& job, double price_per_hour) {
  return job.max_price_per_hour && price_per_hour > *job.max_price_per_hour + 1e-9;
}

market::Workload WorkOf(const JobRequest& job) {
  market::Workload w = job.work;
  w.gpus = job.gpus;
  w.cpus = job.cpus;
  return w;
}

// The free GPUs of `offer`'s label on the node, lowest index first.
std::vector<int> FreeGpus(const NodeCapacity& node, const market::Offer& offer) {
  std::vector<int> out;
  if (offer.gpu_label.empty()) return out;
  for (const auto& g : node.gpus) {
    if (g.free && g.label == offer.gpu_label) out.push_back(g.index);
  }
  return out;
}

// Why a job can never run on any registered node, from the same explanation `sluice offers`
// gives, plus offers that match but cost more than the job's budget.
std::string NeverFitsReason(const std::vector<NodeCapacity>& nodes, const JobRequest& job,
                            const market::CostModel& model) {
  if (nodes.empty()) return "no nodes are registered; start an agent with `sluice agent`";
  std::vector<market::Offer> offers;
  for (const auto& n : nodes) offers.insert(offers.end(), n.Offers().begin(), n.Offers().end());
  std::string what = "no registered node can ever run this job (" + std::to_string(nodes.size()) +
                     " node" + (nodes.size() == 1 ? "" : "s") + "): ";
  // Offers the query matches but the job still cannot use: no interruptible capacity for
  // interruptible-only work, or over the budget.
  const market::Workload work = WorkOf(job);
  size_t no_spot = 0, over_budget = 0;
  double cheapest = 0;
  for (const auto& o : offers) {
    if (!market::Matches(job.query, o)) continue;
    const market::CostEstimate e = market::EstimateCost(o, work, model);
    if (work.interruptible && !work.fallback_on_demand && !e.interruptible) {
      ++no_spot;
    } else if (OverBudget(job, e.price_per_hour)) {
      cheapest = over_budget++ == 0 ? e.price_per_hour : std::min(cheapest, e.price_per_hour);
    }
  }
  if (no_spot + over_budget > 0) {
    std::string parts;
    if (no_spot > 0) {
      parts = std::to_string(no_spot) + " matching offer" + (no_spot == 1 ? "" : "s") +
              " sell no interruptible capacity (lifecycle.capacity: interruptible)";
    }
    if (over_budget > 0) {
      parts += std::string(parts.empty() ? "" : "; ") + std::to_string(over_budget) +
               " matching offer" + (over_budget == 1 ? "" : "s") +
               " cost more than max_price_per_hour " + Dollars(*job.max_price_per_hour) +
               " (cheapest " + Dollars(cheapest) + "/h)";
    }
    return what + parts;
  }
  return what + market::Summary(market::Explain(job.query, offers, 1));
}

// What `idle` would offer the job if the attempts in `freed` (and those already preempting)
// had stopped: true when the job's query then matches and its counts fit.
bool FitsIfFreed(const NodeCapacity& n, const market::Offer& idle, const JobRequest& job,
                 const std::vector<const RunningAttempt*>& freed) {
  std::vector<const RunningAttempt*> gone = freed;
  for (const auto& r : n.running) {
    if (r.preempting) gone.push_back(&r);
  }
  int gpus = 0;
  for (const auto& g : n.gpus) {
    if (g.label != idle.gpu_label || idle.gpu_label.empty()) continue;
    bool freed_slot = g.free;
    for (const RunningAttempt* r : gone) {
      freed_slot |= std::find(r->gpus.begin(), r->gpus.end(), g.index) != r->gpus.end();
    }
    gpus += freed_slot;
  }
  int cpus = n.free_cpus;
  double memory = n.free_memory_gb;
  for (const RunningAttempt* r : gone) {
    cpus += r->cpus;
    memory += r->memory_gb;
  }
  market::Offer then = idle;
  then.gpus_available = gpus;
  then.cpus = cpus;
  then.memory_gb = memory;
  return market::Matches(job.query, then) && gpus >= job.gpus && cpus >= job.cpus &&
         memory + 1e-9 >= job.memory_gb;
}

// For an on-demand job that fits nowhere now: the node where preempting the fewest interruptible
// attempts makes room. Returns false (and leaves `out` empty) when attempts already being
// preempted will make room anyway, or when no preemption can.
bool PlanPreemption(std::vector<NodeCapacity>& nodes, const JobRequest& job,
                    const market::Workload& work, const market::CostModel& model, Preemption* out,
                    bool* room_coming) {
  *room_coming = false;
  std::optional<std::pair<size_t, std::string>> best_key;
  for (auto& n : nodes) {
    if (!n.online || std::find(job.avoid_nodes.begin(), job.avoid_nodes.end(), n.node_id) !=
                         job.avoid_nodes.end()) {
      continue;
    }
    for (const auto& idle : n.Offers()) {
      if (!market::Matches(job.query, idle)) continue;
      if (OverBudget(job, market::EstimateCost(idle, work, model).price_per_hour)) continue;
      if (FitsIfFreed(n, idle, job, {})) {
        *room_coming = true;
        return false;
      }
      // Fewest GPUs, then CPUs first: disturb as little as possible.
      std::vector<const RunningAttempt*> victims;
      for (const auto& r : n.running) {
        if (r.interruptible && !r.preempting) victims.push_back(&r);
      }
      std::sort(victims.begin(), victims.end(),
                [](const RunningAttempt* a, const RunningAttempt* b) {
                  return std::tie(a->gpus, a->cpus, a->attempt_id) <
                         std::tie(b->gpus, b->cpus, b->attempt_id);
                });
      std::vector<const RunningAttempt*> chosen;
      for (const RunningAttempt* v : victims) {
        chosen.push_back(v);
        if (FitsIfFreed(n, idle, job, chosen)) break;
      }
      if (chosen.empty() || !FitsIfFreed(n, idle, job, chosen)) continue;
      auto key = std::make_pair(chosen.size(), n.node_id);
      if (!best_key || key < *best_key) {
        best_key = key;
        out->job_id = job.job_id;
        out->node_id = n.node_id;
        out->attempt_ids.clear();
        for (const RunningAttempt* v : chosen) out->attempt_ids.push_back(v->attempt_id);
      }
    }
  }
  if (!best_key) return false;
  // Later jobs in this plan must not count on these attempts again.
  for (auto& n : nodes) {
    if (n.node_id != out->node_id) continue;
    for (auto& r : n.running) {
      if (std::find(out->attempt_ids.begin(), out->attempt_ids.end(), r.attempt_id) !=
          out->attempt_ids.end()) {
        r.preempting = true;
      }
    }
  }
  return true;
}

struct Candidate {
  NodeCapacity* node = nullptr;
  const market::Offer* offer = nullptr;
  std::vector<int> gpus;
  market::CostEstimate estimate;
  int gpus_left = 0;
  int cpus_left = 0;
};

bool Better(market::Objective objective, const Candidate& a, const Candidate& b) {
  if (int c = market::CompareEstimates(objective, a.estimate, b.estimate)) return c < 0;
  return std::tie(a.gpus_left, a.cpus_left, a.node->node_id, a.offer->id) <
         std::tie(b.gpus_left, b.cpus_left, b.node->node_id, b.offer->id);
}

}  // namespace

Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<JobRequest>& queue,
              const market::CostModel& model) {
  std::vector<const JobRequest*> order;
  order.reserve(queue.size());
  for (const auto& j : queue) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(), [](const JobRequest* a, const JobRequest* b) {
    // On-demand work first among equals: it is what may take capacity from interruptible work,
    // so the room a preemption frees goes to it and not back to the preempted job.
    return std::make_tuple(b->priority, a->work.interruptible, a->order) <
           std::make_tuple(a->priority, b->work.interruptible, b->order);
  });

  Plan plan;
  for (const JobRequest* job : order) {
    const market::Workload work = WorkOf(*job);
    std::optional<Candidate> best;
    bool could_ever = false;
    for (auto& n : nodes) {
      for (const auto& idle : n.Offers()) {
        if (!market::Matches(job->query, idle)) continue;
        const market::CostEstimate idle_cost = market::EstimateCost(idle, work, model);
        if (OverBudget(*job, idle_cost.price_per_hour)) continue;
        // Interruptible-only work runs only where interruptible capacity is sold.
        if (work.interruptible && !work.fallback_on_demand && !idle_cost.interruptible) continue;
        could_ever = true;
        if (!n.online || std::find(job->avoid_nodes.begin(), job->avoid_nodes.end(), n.node_id) !=
                             job->avoid_nodes.end()) {
          continue;
        }
        // The offer as it stands now: only free GPUs, CPUs and memory count.
        market::Offer now = idle;
        std::vector<int> free = FreeGpus(n, idle);
        now.gpus_available = static_cast<int>(free.size());
        now.cpus = n.free_cpus;
        now.memory_gb = n.free_memory_gb;
        if (!market::Matches(job->query, now) || static_cast<int>(free.size()) < job->gpus ||
            n.free_cpus < job->cpus || n.free_memory_gb + 1e-9 < job->memory_gb) {
          continue;
        }
        int free_total = 0;
        for (const auto& g : n.gpus) free_total += g.free ? 1 : 0;
        free.resize(job->gpus);
        Candidate c{&n,
                    &idle,
                    std::move(free),
                    market::EstimateCost(now, work, model),
                    free_total - job->gpus,
                    n.free_cpus - job->cpus};
        if (!best || Better(job->objective, c, *best)) best = std::move(c);
      }
    }
    if (best) {
      for (auto& g : best->node->gpus) {
        if (std::find(best->gpus.begin(), best->gpus.end(), g.index) != best->gpus.end()) {
          g.free = false;
        }
      }
      best->node->free_cpus -= job->cpus;
      best->node->free_memory_gb -= job->memory_gb;
      plan.placements.push_back({job->job_id, best->node->node_id, best->offer->id, best->gpus,
                                 best->estimate.price_per_hour, best->estimate});
    } else if (!could_ever) {
      plan.waiting.push_back({job->job_id, true, NeverFitsReason(nodes, *job, model)});
    } else {
      Preemption p;
      bool room_coming = false;
      if (!work.interruptible && PlanPreemption(nodes, *job, work, model, &p, &room_coming)) {
        plan.waiting.push_back({job->job_id, false,
                                "waiting for " + std::to_string(p.attempt_ids.size()) +
                                    " interruptible attempt(s) to be preempted on " + p.node_id});
        plan.preemptions.push_back(std::move(p));
      } else if (room_coming) {
        plan.waiting.push_back(
            {job->job_id, false, "waiting for preempted interruptible attempts to stop"});
      } else {
        plan.waiting.push_back(
            {job->job_id, false, "waiting for capacity: every node that can run it is busy"});
      }
    }
  }
  return plan;
}

}  // namespace sluice::sched
