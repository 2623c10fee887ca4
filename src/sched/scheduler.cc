#include "sched/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "market/explain.h"

namespace sluice::sched {
namespace {

std::string Money(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.2f", v);
  return buf;
}

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
  for (const auto& n : nodes) offers.insert(offers.end(), n.offers.begin(), n.offers.end());
  std::string what = "no registered node can ever run this job (" + std::to_string(nodes.size()) +
                     " node" + (nodes.size() == 1 ? "" : "s") + "): ";
  size_t matching = 0;
  double cheapest = 0;
  for (const auto& o : offers) {
    if (!market::Matches(job.query, o)) continue;
    const double price = market::EstimateCost(o, WorkOf(job), model).price_per_hour;
    cheapest = matching++ == 0 ? price : std::min(cheapest, price);
  }
  if (matching > 0) {
    return what + std::to_string(matching) + " matching offer" + (matching == 1 ? "" : "s") +
           " cost more than max_price_per_hour " + Money(*job.max_price_per_hour) + " (cheapest " +
           Money(cheapest) + "/h)";
  }
  return what + market::Summary(market::Explain(job.query, offers, 1));
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
    return std::tie(b->priority, a->order) < std::tie(a->priority, b->order);
  });

  Plan plan;
  for (const JobRequest* job : order) {
    const market::Workload work = WorkOf(*job);
    std::optional<Candidate> best;
    bool could_ever = false;
    for (auto& n : nodes) {
      for (const auto& idle : n.offers) {
        if (!market::Matches(job->query, idle)) continue;
        if (OverBudget(*job, market::EstimateCost(idle, work, model).price_per_hour)) continue;
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
      plan.waiting.push_back(
          {job->job_id, false, "waiting for capacity: every node that can run it is busy"});
    }
  }
  return plan;
}

}  // namespace sluice::sched
