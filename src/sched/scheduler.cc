#include "sched/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace sluice::sched {
namespace {

bool GpuMatches(const GpuSlot& gpu, const JobRequest& job) {
  if (!job.gpu_labels.empty() &&
      std::find(job.gpu_labels.begin(), job.gpu_labels.end(), gpu.label) == job.gpu_labels.end()) {
    return false;
  }
  if (job.min_vram_gb && gpu.vram_gb + 1e-9 < *job.min_vram_gb) return false;
  return true;
}

// GPU indices that could serve the job; `only_free` restricts to currently free ones.
std::vector<int> MatchingGpus(const NodeCapacity& node, const JobRequest& job, bool only_free) {
  std::vector<int> out;
  for (const auto& g : node.gpus) {
    if ((!only_free || g.free) && GpuMatches(g, job)) out.push_back(g.index);
  }
  return out;
}

bool PriceOk(const NodeCapacity& node, const JobRequest& job) {
  return !job.max_price_per_hour || AllocationPrice(node, job) <= *job.max_price_per_hour + 1e-9;
}

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Why a job can never run on any registered node: which constraint rules out how many nodes.
std::string NeverFitsReason(const std::vector<NodeCapacity>& nodes, const JobRequest& job) {
  if (nodes.empty()) return "no nodes are registered; start an agent with `sluice agent`";
  int no_gpus = 0, few_cpus = 0, little_mem = 0, too_pricey = 0;
  for (const auto& n : nodes) {
    if (static_cast<int>(MatchingGpus(n, job, false).size()) < job.gpus) ++no_gpus;
    if (n.total_cpus < job.cpus) ++few_cpus;
    if (n.total_memory_gb + 1e-9 < job.memory_gb) ++little_mem;
    if (!PriceOk(n, job)) ++too_pricey;
  }
  std::string what = "no registered node can ever run this job (" + std::to_string(nodes.size()) +
                     " node" + (nodes.size() == 1 ? "" : "s") + "):";
  auto add = [&](int count, const std::string& text) {
    if (count > 0) what += " " + std::to_string(count) + " lack " + text + ";";
  };
  std::string gpu_desc = std::to_string(job.gpus) + " GPU" + (job.gpus == 1 ? "" : "s");
  if (!job.gpu_labels.empty()) {
    gpu_desc += " of ";
    for (size_t i = 0; i < job.gpu_labels.size(); ++i) {
      gpu_desc += (i ? "|" : "") + job.gpu_labels[i];
    }
  }
  if (job.min_vram_gb) gpu_desc += " with >= " + Fmt(*job.min_vram_gb) + " GB VRAM";
  add(no_gpus, gpu_desc);
  add(few_cpus, std::to_string(job.cpus) + " CPUs");
  add(little_mem, Fmt(job.memory_gb) + " GB memory");
  if (too_pricey > 0) {
    what += " " + std::to_string(too_pricey) + " cost more than max_price_per_hour " +
            Fmt(*job.max_price_per_hour) + ";";
  }
  if (!what.empty() && what.back() == ';') what.pop_back();
  return what;
}

}  // namespace

double AllocationPrice(const NodeCapacity& node, const JobRequest& job) {
  if (job.gpus > 0) return job.gpus * node.price_per_gpu_hour;
  return job.cpus * node.price_per_cpu_hour;
}

Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<JobRequest>& queue) {
  std::vector<const JobRequest*> order;
  order.reserve(queue.size());
  for (const auto& j : queue) order.push_back(&j);
  std::stable_sort(order.begin(), order.end(), [](const JobRequest* a, const JobRequest* b) {
    return std::tie(b->priority, a->order) < std::tie(a->priority, b->order);
  });

  Plan plan;
  for (const JobRequest* job : order) {
    NodeCapacity* best = nullptr;
    std::vector<int> best_gpus;
    auto best_key = std::make_tuple(0.0, 0, 0, std::string());
    bool could_ever = false;
    for (auto& n : nodes) {
      bool fits_idle = static_cast<int>(MatchingGpus(n, *job, false).size()) >= job->gpus &&
                       n.total_cpus >= job->cpus && n.total_memory_gb + 1e-9 >= job->memory_gb &&
                       PriceOk(n, *job);
      if (!fits_idle) continue;
      could_ever = true;
      if (!n.online) continue;
      std::vector<int> free = MatchingGpus(n, *job, true);
      if (static_cast<int>(free.size()) < job->gpus || n.free_cpus < job->cpus ||
          n.free_memory_gb + 1e-9 < job->memory_gb) {
        continue;
      }
      int free_gpus_total = 0;
      for (const auto& g : n.gpus) free_gpus_total += g.free ? 1 : 0;
      auto key = std::make_tuple(AllocationPrice(n, *job), free_gpus_total - job->gpus,
                                 n.free_cpus - job->cpus, n.node_id);
      if (!best || key < best_key) {
        best = &n;
        best_key = key;
        free.resize(job->gpus);
        best_gpus = std::move(free);
      }
    }
    if (best) {
      for (auto& g : best->gpus) {
        if (std::find(best_gpus.begin(), best_gpus.end(), g.index) != best_gpus.end()) {
          g.free = false;
        }
      }
      best->free_cpus -= job->cpus;
      best->free_memory_gb -= job->memory_gb;
      plan.placements.push_back(
          {job->job_id, best->node_id, best_gpus, AllocationPrice(*best, *job)});
    } else if (!could_ever) {
      plan.waiting.push_back({job->job_id, true, NeverFitsReason(nodes, *job)});
    } else {
      plan.waiting.push_back(
          {job->job_id, false, "waiting for capacity: every node that can run it is busy"});
    }
  }
  return plan;
}

}  // namespace sluice::sched
