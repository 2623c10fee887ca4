// Scheduling v1: pure placement logic (DESIGN.md §3, §10: "a scheduler only encapsulates business
// logic"). Schedule() reads a snapshot of node capacity and the queue and returns a Plan; it does
// no I/O and keeps no state, so the server applies the plan and tests check plans directly.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "market/offer.h"
#include "market/query.h"
#include "market/ranking.h"

namespace sluice::sched {

class ShapeRankings;  // sched/shape_rankings.h

struct GpuSlot {
  int index = 0;
  std::string label;  // canonical label, e.g. "h100-80gb"
  double vram_gb = 0;
  bool free = true;
};

// An attempt holding resources on a node.
struct RunningAttempt {
  std::string attempt_id;
  std::vector<int> gpus;
  int cpus = 0;
  double memory_gb = 0;
  bool interruptible = false;  // on interruptible capacity: on-demand work may preempt it
  bool preempting = false;     // a preemption is already under way; it will free its resources
  double price_per_hour = 0;   // its locked price: a higher bid may preempt it (issue 15 item 4)
  bool operator==(const RunningAttempt&) const = default;
};

struct NodeCapacity {
  std::string node_id;
  std::string name;
  bool online = true;  // only online nodes take new work; offline ones still count for
                       // "could this job ever fit" (they may come back)
  // Why an online node takes no new work for now (reclaimed by its provider, under a
  // spot-termination notice: "paused until 12:30 UTC: ..."); online is false then. Waiting jobs
  // that it could run say so.
  std::string paused;
  std::vector<GpuSlot> gpus;
  int total_cpus = 0;
  int free_cpus = 0;
  double total_memory_gb = 0;
  double free_memory_gb = 0;
  // What the node sells when idle, exactly as `sluice offers` lists it: one offer per GPU label
  // (with that label's GPU count as gpus and gpus_available), or one CPU offer for a node without
  // GPUs; cpus and memory_gb are the node's totals. The scheduler derives the "now" view of each
  // offer from the slots and free counts above, so jobs are matched by the very predicate the
  // market query uses.
  // Immutable and shared: the server builds a node's offers once per change to the node, and
  // every placement pass shares them instead of copying them (issue 12 item 3).
  std::shared_ptr<const std::vector<market::Offer>> offers;
  std::vector<RunningAttempt> running;  // what holds the GPUs, CPUs and memory not free above

  const std::vector<market::Offer>& Offers() const;
};

struct JobRequest {
  std::string job_id;
  int priority = 0;
  int64_t order = 0;  // submission order; earlier first among equals
  int gpus = 0;
  int cpus = 1;
  double memory_gb = 0;
  market::Query query;  // the spec's resources, compiled by market::QueryFromResources
  // The whole job's budget, checked against the price the ranking picks (the query bounds the
  // per-GPU price only where one price applies; see market::PriceBasis).
  std::optional<double> max_price_per_hour;
  // The job's budget as it stands (issue 15 item 1): what it may still spend, in USD. An offer
  // is used only when the job's need on it fits: its expected cost to complete (or, resuming from
  // a checkpoint, `budget_min_hours` of its price, since the work left is unknown), plus
  // `budget_reserve_hours` of its price (the grace period, so a stop never overshoots) and
  // `budget_reserve` (the final checkpoint's upload).
  std::optional<double> budget_left;
  std::optional<double> budget_min_hours;
  double budget_reserve_hours = 0;
  double budget_reserve = 0;
  // A bid on interruptible capacity (lifecycle.max_bid_per_hour): offers whose interruptible
  // price is above it are not used; where it is placed the bid is the price; it may preempt
  // interruptible attempts whose locked prices sum to less than it. Higher bids go first.
  std::optional<double> bid;
  market::Workload work;  // hours, capacity, checkpoints; gpus and cpus are taken from above
  market::Objective objective = market::Objective::kCost;
  // Nodes not to place on now (a node that just preempted this job, for a cooldown). They still
  // count for "could it ever run".
  std::vector<std::string> avoid_nodes;
  // ShapeKey(*this), when the caller keeps it between passes; computed by the pass otherwise.
  std::optional<std::string> shape;
};

struct Placement {
  std::string job_id;
  std::string node_id;
  std::string offer_id;
  std::vector<int> gpus;      // GPU indices on the node
  double price_per_hour = 0;  // locked into the allocation
  market::CostEstimate estimate;
};

struct Waiting {
  std::string job_id;
  bool never_fits = false;  // no registered node could run it even when idle
  std::string reason;       // one line a user can act on
  // The job's position in the queue given to Schedule, so a caller that keeps its own state per
  // position finds it without a lookup by id.
  size_t at = 0;
};

// Interruptible attempts to preempt so an on-demand job can be placed (DESIGN.md §6: "an
// on-demand job may preempt interruptible attempts on a node if that is the only way to place
// it"). The job itself waits until they have stopped.
struct Preemption {
  std::string job_id;  // the on-demand job that needs the room
  std::string node_id;
  std::vector<std::string> attempt_ids;
};

struct Plan {
  std::vector<Placement> placements;
  std::vector<Waiting> waiting;
  std::vector<Preemption> preemptions;
  // The shapes (ShapeKey) some node could run but none could fit when their turn came: as
  // capacity only shrinks within a pass, no node fits them at its end either. A next pass given
  // these and the nodes changed since (ScheduleOptions) searches them on those nodes only.
  std::set<std::string> exhausted_shapes;
  // With ScheduleOptions::answer_alike_once: jobs the pass did not consider one by one, because
  // an earlier job of their shape was answered and the answer holds for the rest of the pass.
  // Each waits as the entry `answer` of `waiting` says. `at`: their positions in the queue given
  // to Schedule.
  struct Alike {
    size_t answer = 0;
    std::vector<size_t> at;
  };
  std::vector<Alike> alike;
};

// Jobs are considered by priority (high first), on-demand before interruptible, higher bids
// before lower (no bid counts as 0), then submission order. A job that does not fit
// now does not block smaller jobs behind it (backfill); GPUs, CPUs and memory placed earlier in
// the same plan are no longer free for later jobs. Among the offers that match the job's query
// now, the job's objective picks (market::CompareEstimates: expected cost to complete by
// default), then the tightest fit (fewest free GPUs left, then CPUs), then node and offer id.
// An on-demand job that fits nowhere now, but would fit on a node once some interruptible
// attempts there stop, gets a Preemption of the fewest such attempts (unless attempts already
// being preempted will make the room), and waits. So does an interruptible job with a bid, on
// attempts whose locked prices sum to less than its bid.
Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<JobRequest>& queue,
              const market::CostModel& model = {});

// Jobs no search can tell apart: the same query, counts, budget, workload and objective, and no
// nodes to avoid. ShapeKey is equal for exactly such jobs, and empty for a job that avoids nodes
// (it is searched on its own).
std::string ShapeKey(const JobRequest& job);

// What a pass would otherwise learn by reading every node, for a caller that keeps its nodes
// between passes and these facts with them (the server's placement view): whether some attempt
// anywhere is interruptible or being preempted, and the positions of the paused nodes, in order.
struct FleetFacts {
  bool preemptible = false;
  std::vector<size_t> paused;
};
// A node's share of them.
bool HasPreemptible(const NodeCapacity& node);
FleetFacts FleetFactsOf(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes);

// A caller's run of jobs of one shape (one ShapeKey), handed to a pass one job at a time in the
// order the pass considers them (Schedule's order; within one shape: priority, then submission
// order). With answer_alike_once and nothing preemptible, a pass reads a run only until its
// shape's answer is settled (the shape's job waits and no later job of it can place), so a deep
// queue of one shape costs a pass the jobs it places plus one, not the run's length
// (docs/design-notes.md "Placement at scale"). The jobs a pass did not
// take wait as the last one it took does; the caller, which knows how far it handed the run out,
// answers them. Without answer_alike_once every job of every run is taken.
struct RunJob {
  const JobRequest* job = nullptr;  // null: the run has no more jobs
  size_t at = 0;  // the position its Waiting carries; distinct from the queue's and other runs'
};
class JobRun {
 public:
  virtual ~JobRun() = default;
  virtual RunJob Next() = 0;
};

struct ScheduleOptions {
  // Search once per shape (issue 12 item 3; docs/design-notes.md "Placement at scale"): the
  // candidates of a shape are kept in a heap for the rest of the pass, and a placement re-ranks
  // only the node it changed. A shape that fits nowhere is answered once. false: every job scans
  // every node, the original algorithm, kept as the oracle the tests compare against (the plans
  // are identical).
  bool share_shapes = true;
  // Incremental passes: the previous pass's Plan::exhausted_shapes, and every node whose
  // capacity, offers or attempts changed since it ended (added nodes included). A node that was
  // in the previous pass may not be missing from this one: the caller passes neither then.
  const std::set<std::string>* exhausted_before = nullptr;
  const std::set<std::string>* changed_nodes = nullptr;
  // For incremental passes: node id -> its position in the nodes passed, where the caller keeps
  // one (the pass builds its own otherwise: O(nodes) strings per pass, a submit's pass included).
  const std::unordered_map<std::string, size_t>* node_index = nullptr;
  // A deep queue in O(what changes), not O(queue) (docs/design-notes.md "Placement at scale"):
  // once a shape's job waits and nothing in the pass can change that answer (no attempt anywhere
  // is interruptible or being preempted, so no preemption can be planned and no room is coming),
  // the shape's later jobs are not considered one by one but reported together in Plan::alike.
  // The placements and preemptions are the very ones of the pass without it, and each job's
  // answer is the same; only the order of the waiting entries differs.
  bool answer_alike_once = false;
  // The nodes' FleetFacts where the caller keeps them: a pass then reads no node it does not
  // search, so a submit's own pass does not read all 10,000 nodes' attempts first. Debug builds
  // check them against the nodes and abort on a difference.
  const FleetFacts* fleet = nullptr;
  // Runs of alike jobs considered with the queue, in the one order (JobRun). Their jobs' answers
  // and placements are reported as the queue's are, by the positions the runs gave.
  const std::vector<JobRun*>* runs = nullptr;
  // Where the caller keeps its shapes' rankings between passes (sched/shape_rankings.h): a
  // shape's search then reads its ranked offers from the best estimate, only as far as its
  // placements in the pass need, instead of every node. The placements are the same.
  ShapeRankings* rankings = nullptr;
  // The nodes passed are in strictly increasing node_id order (the core's view is built from its
  // id-ordered map): ties between nodes are then broken by position, which is the same order,
  // without comparing ids. Debug builds check it and abort if it does not hold.
  bool nodes_in_id_order = false;
};

// The same, over a queue the caller keeps (the server's queued jobs are not copied per pass).
Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<const JobRequest*>& queue,
              const market::CostModel& model, ScheduleOptions options = {});
// The same, over nodes the caller keeps and shares (never written: the pass copies a node it
// changes), so a pass does not copy every node.
Plan Schedule(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
              const std::vector<const JobRequest*>& queue, const market::CostModel& model,
              ScheduleOptions options = {});

// Whether some node could ever run the job: one of its offers matches the query within the
// job's budget, the node busy or not (what Schedule's "never fits" answer rests on), found
// without ranking anything and stopping at the first such offer.
bool CouldEverRun(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
                  const JobRequest& job, const market::CostModel& model);

}  // namespace sluice::sched
