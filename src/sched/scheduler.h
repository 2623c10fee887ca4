// Scheduling v1: pure placement logic (DESIGN.md §3, §10: "a scheduler only encapsulates business
// logic"). Schedule() reads a snapshot of node capacity and the queue and returns a Plan; it does
// no I/O and keeps no state, so the server applies the plan and tests check plans directly.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sluice::sched {

struct GpuSlot {
  int index = 0;
  std::string label;  // canonical label, e.g. "h100-80gb"
  double vram_gb = 0;
  bool free = true;
};

struct NodeCapacity {
  std::string node_id;
  std::string name;
  bool online = true;  // only online nodes take new work; offline ones still count for
                       // "could this job ever fit" (they may come back)
  std::vector<GpuSlot> gpus;
  int total_cpus = 0;
  int free_cpus = 0;
  double total_memory_gb = 0;
  double free_memory_gb = 0;
  double price_per_gpu_hour = 0;
  double price_per_cpu_hour = 0;
};

struct JobRequest {
  std::string job_id;
  int priority = 0;
  int64_t order = 0;  // submission order; earlier first among equals
  int gpus = 0;
  int cpus = 1;
  double memory_gb = 0;
  std::vector<std::string> gpu_labels;  // acceptable labels; empty = any
  std::optional<double> min_vram_gb;
  std::optional<double> max_price_per_hour;
};

struct Placement {
  std::string job_id;
  std::string node_id;
  std::vector<int> gpus;      // GPU indices on the node
  double price_per_hour = 0;  // locked into the allocation
};

struct Waiting {
  std::string job_id;
  bool never_fits = false;  // no registered node could run it even when idle
  std::string reason;       // one line a user can act on
};

struct Plan {
  std::vector<Placement> placements;
  std::vector<Waiting> waiting;
};

// Jobs are considered by priority (high first), then submission order. A job that does not fit
// now does not block smaller jobs behind it (backfill); GPUs, CPUs and memory placed earlier in
// the same plan are no longer free for later jobs. Among nodes that fit, the cheapest allocation
// wins, then the tightest fit (fewest free GPUs, then CPUs left), then node id for determinism.
Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<JobRequest>& queue);

// The hourly price a job would pay on a node: GPUs at the GPU price, or CPUs at the CPU price
// for CPU-only jobs.
double AllocationPrice(const NodeCapacity& node, const JobRequest& job);

}  // namespace sluice::sched
