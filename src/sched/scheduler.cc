#include "sched/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/money.h"
#include "market/explain.h"
#include "sched/shape_rankings.h"

namespace sluice::sched {

const std::vector<market::Offer>& NodeCapacity::Offers() const {
  static const std::vector<market::Offer> kNone;
  return offers ? *offers : kNone;
}

namespace {

bool OverPriceCap(const JobRequest& job, double price_per_hour) {
  return job.max_price_per_hour && price_per_hour > *job.max_price_per_hour + 1e-9;
}

// A bid below the offer's interruptible price does not buy it.
bool BidTooLow(const JobRequest& job, const market::CostEstimate& e) {
  return job.bid && e.interruptible && e.price_per_hour > *job.bid + 1e-9;
}

// What the job needs from its budget on an offer (see JobRequest::budget_left).
double BudgetNeed(const JobRequest& job, const market::CostEstimate& e) {
  const double run = job.budget_min_hours ? e.price_per_hour * *job.budget_min_hours
                     : e.perf_known && e.expected_cost > 0
                         ? e.expected_cost
                         : e.price_per_hour * std::max(job.work.hours, 0.0);
  return run + e.price_per_hour * job.budget_reserve_hours + job.budget_reserve;
}

bool OverTotalBudget(const JobRequest& job, const market::CostEstimate& e) {
  return job.budget_left && BudgetNeed(job, e) > *job.budget_left + 1e-9;
}

bool OverBudget(const JobRequest& job, const market::CostEstimate& e) {
  return OverPriceCap(job, e.price_per_hour) || BidTooLow(job, e) || OverTotalBudget(job, e);
}

// The job's cost on `offer`: with a bid on interruptible capacity it pays its bid, so the bid
// is the price (where it is below the offer's price, BidTooLow refuses the offer).
market::CostEstimate Estimate(const market::Offer& offer, const JobRequest& job,
                              const market::Workload& work, const market::CostModel& model) {
  market::CostEstimate e = market::EstimateCost(offer, work, model);
  if (!job.bid || !e.interruptible || e.price_per_hour > *job.bid + 1e-9) return e;
  e.expected_cost = *job.bid * e.expected_hours + e.storage_cost;
  e.price_per_hour = *job.bid;
  return e;
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
std::string NeverFitsReason(const std::vector<const NodeCapacity*>& nodes, const JobRequest& job,
                            const market::CostModel& model) {
  // Empty also when nodes are registered but lost, revoked or failed verification: the core
  // leaves those out, so "none registered" would be wrong.
  if (nodes.empty()) {
    return "no node can take work: none is registered, online and verified (`sluice nodes` "
           "shows why); start an agent with `sluice agent`";
  }
  std::vector<market::Offer> offers;
  for (const NodeCapacity* n : nodes) {
    offers.insert(offers.end(), n->Offers().begin(), n->Offers().end());
  }
  std::string what = "no registered node can ever run this job (" + std::to_string(nodes.size()) +
                     " node" + (nodes.size() == 1 ? "" : "s") + "): ";
  // Offers the query matches but the job still cannot use: no interruptible capacity for
  // interruptible-only work, or over the budget.
  const market::Workload work = WorkOf(job);
  size_t no_spot = 0, over_budget = 0, low_bid = 0, over_total = 0;
  double cheapest = 0, cheapest_ask = 0, least_need = 0;
  for (const auto& o : offers) {
    if (!market::Matches(job.query, o)) continue;
    const market::CostEstimate e = Estimate(o, job, work, model);
    if (work.interruptible && !work.fallback_on_demand && !e.interruptible) {
      ++no_spot;
    } else if (OverPriceCap(job, e.price_per_hour)) {
      cheapest = over_budget++ == 0 ? e.price_per_hour : std::min(cheapest, e.price_per_hour);
    } else if (BidTooLow(job, e)) {
      cheapest_ask = low_bid++ == 0 ? e.price_per_hour : std::min(cheapest_ask, e.price_per_hour);
    } else if (OverTotalBudget(job, e)) {
      const double need = BudgetNeed(job, e);
      least_need = over_total++ == 0 ? need : std::min(least_need, need);
    }
  }
  if (no_spot + over_budget + low_bid + over_total > 0) {
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
    if (low_bid > 0) {
      parts += std::string(parts.empty() ? "" : "; ") + std::to_string(low_bid) +
               " matching offer" + (low_bid == 1 ? "" : "s") +
               " ask more than lifecycle.max_bid_per_hour " + Dollars(*job.bid) + " (cheapest " +
               Dollars(cheapest_ask) + "/h)";
    }
    if (over_total > 0) {
      parts += std::string(parts.empty() ? "" : "; ") + std::to_string(over_total) +
               " matching offer" + (over_total == 1 ? "" : "s") + " would need more than the " +
               Dollars(*job.budget_left) +
               " left of max_total_cost (the least: " + Dollars(least_need) +
               (job.budget_min_hours ? " to run a while and stop safely"
                                     : " for its expected cost and a safe stop") +
               "); raise it with `sluice budget JOB USD`";
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
// attempts makes room (its index in `nodes`). Returns false (and leaves `out` empty) when
// attempts already being preempted will make room anyway, or when no preemption can. The caller
// marks the chosen attempts as preempting, so later jobs of the plan do not count on them again.
bool PlanPreemption(const std::vector<const NodeCapacity*>& nodes, const JobRequest& job,
                    const market::Workload& work, const market::CostModel& model, Preemption* out,
                    size_t* node_index, bool* room_coming) {
  *room_coming = false;
  std::optional<std::pair<size_t, std::string>> best_key;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeCapacity& n = *nodes[i];
    if (!n.online || std::find(job.avoid_nodes.begin(), job.avoid_nodes.end(), n.node_id) !=
                         job.avoid_nodes.end()) {
      continue;
    }
    for (const auto& idle : n.Offers()) {
      if (!market::Matches(job.query, idle)) continue;
      if (OverBudget(job, Estimate(idle, job, work, model))) continue;
      if (FitsIfFreed(n, idle, job, {})) {
        *room_coming = true;
        return false;
      }
      // Fewest GPUs, then CPUs first: disturb as little as possible.
      std::vector<const RunningAttempt*> victims;
      // A bidder takes capacity only from attempts that pay less than its bid.
      for (const auto& r : n.running) {
        if (r.interruptible && !r.preempting &&
            (!work.interruptible || r.price_per_hour + 1e-9 < *job.bid)) {
          victims.push_back(&r);
        }
      }
      std::sort(victims.begin(), victims.end(),
                [](const RunningAttempt* a, const RunningAttempt* b) {
                  return std::tie(a->gpus, a->cpus, a->price_per_hour, a->attempt_id) <
                         std::tie(b->gpus, b->cpus, b->price_per_hour, b->attempt_id);
                });
      std::vector<const RunningAttempt*> chosen;
      double paying = 0;
      for (const RunningAttempt* v : victims) {
        chosen.push_back(v);
        paying += v->price_per_hour;
        if (FitsIfFreed(n, idle, job, chosen)) break;
      }
      if (chosen.empty() || !FitsIfFreed(n, idle, job, chosen)) continue;
      if (work.interruptible && paying + 1e-9 >= *job.bid) continue;  // they pay as much
      auto key = std::make_pair(chosen.size(), n.node_id);
      if (!best_key || key < *best_key) {
        best_key = key;
        *node_index = i;
        out->job_id = job.job_id;
        out->node_id = n.node_id;
        out->attempt_ids.clear();
        for (const RunningAttempt* v : chosen) out->attempt_ids.push_back(v->attempt_id);
      }
    }
  }
  return best_key.has_value();
}

// A node's offer that fits the job now. Which of its GPUs it would get is worked out only for
// the one placed (Pass::Place): the node is unchanged since it was ranked, so they are the same.
struct Candidate {
  size_t node = 0;  // index into the pass's nodes
  const market::Offer* offer = nullptr;
  market::CostEstimate estimate;
  int gpus_left = 0;
  int cpus_left = 0;
  // false: `estimate` holds only what the ranking compares (a ShapeRankings entry's); the
  // placement's price and estimate are worked out when it is placed.
  bool priced = true;
};

// Free GPUs of `offer`'s label on the node.
int FreeGpuCount(const NodeCapacity& node, const market::Offer& offer) {
  if (offer.gpu_label.empty()) return 0;
  int count = 0;
  for (const auto& g : node.gpus) count += g.free && g.label == offer.gpu_label ? 1 : 0;
  return count;
}

// Whether the node has free counts the job needs at all (any label): a cheap test that skips a
// busy node before its offers are read. Necessary, not sufficient (FitNow decides).
bool MayFitNow(const NodeCapacity& n, const JobRequest& job) {
  if (!n.online || n.free_cpus < job.cpus || n.free_memory_gb + 1e-9 < job.memory_gb) return false;
  if (job.gpus == 0) return true;
  int free = 0;
  for (const auto& g : n.gpus) free += g.free ? 1 : 0;
  return free >= job.gpus;
}

// The job on `idle` as the node stands now, when the query matches and the counts fit: only free
// GPUs, CPUs and memory count. Called only where CouldUse(idle) holds: the terms on what a node
// has free (gpus_available, cpus, memory) are then the only ones that can differ, so only they
// are checked again, on the free counts, without copying the offer; and the estimate, which
// reads no free count, is the idle offer's (`idle_cost`, from CouldUse).
std::optional<Candidate> FitNow(const NodeCapacity& n, size_t index, const market::Offer& idle,
                                const JobRequest& job, const market::CostEstimate& idle_cost) {
  if (n.free_cpus < job.cpus || n.free_memory_gb + 1e-9 < job.memory_gb) return std::nullopt;
  const int free = FreeGpuCount(n, idle);
  if (free < job.gpus) return std::nullopt;
  market::Offer now;  // the free counts only
  now.gpus_available = free;
  now.cpus = n.free_cpus;
  now.memory_gb = n.free_memory_gb;
  for (const auto& term : job.query.terms) {
    const bool on_free = term.field == market::Field::kGpus || term.field == market::Field::kCpus ||
                         term.field == market::Field::kMemory;
    if (on_free && !market::MatchesTerm(term, now)) return std::nullopt;
  }
  int free_total = 0;
  for (const auto& g : n.gpus) free_total += g.free ? 1 : 0;
  return Candidate{index, &idle, idle_cost, free_total - job.gpus, n.free_cpus - job.cpus};
}

// Whether the job could ever use `idle` (when the node is idle and online): the query matches,
// the price is within the budget, and interruptible-only work finds interruptible capacity.
// Returns the job's estimate on it then, for FitNow.
std::optional<market::CostEstimate> CouldUse(const market::Offer& idle, const JobRequest& job,
                                             const market::Workload& work,
                                             const market::CostModel& model) {
  if (!market::Matches(job.query, idle)) return std::nullopt;
  market::CostEstimate idle_cost = Estimate(idle, job, work, model);
  if (OverBudget(job, idle_cost)) return std::nullopt;
  if (work.interruptible && !work.fallback_on_demand && !idle_cost.interruptible) {
    return std::nullopt;
  }
  return idle_cost;
}

bool Avoids(const JobRequest& job, const NodeCapacity& n) {
  return std::find(job.avoid_nodes.begin(), job.avoid_nodes.end(), n.node_id) !=
         job.avoid_nodes.end();
}

// Among the offers that fit: the objective's ranking, then the tightest fit, then node and
// offer id. A strict total order, so a heap and a scan pick the same candidate.
struct Ranking {
  market::Objective objective;
  const std::vector<const NodeCapacity*>* nodes;
  // The nodes are in increasing id order (ScheduleOptions::nodes_in_id_order): a tie between
  // two nodes compares their positions, the ids' order, without reading the ids. In a busy
  // pass most comparisons of a shape's heap are such ties (alike nodes, alike estimates), and
  // comparing the ids was the scheduler's largest single cost in `bench/placement`.
  bool ids_in_order = false;
  bool Better(const Candidate& a, const Candidate& b) const {
    return Before(market::CompareRanked(objective, a.estimate, b.estimate), a, b);
  }
  // `compared`: the two estimates' order. A candidate or a heap's entry (Pass::Entry).
  template <class C>
  bool Before(int compared, const C& a, const C& b) const {
    if (compared != 0) return compared < 0;
    if (a.gpus_left != b.gpus_left) return a.gpus_left < b.gpus_left;
    if (a.cpus_left != b.cpus_left) return a.cpus_left < b.cpus_left;
    if (a.node != b.node) {
      if (ids_in_order) return a.node < b.node;
      const std::string& x = (*nodes)[a.node]->node_id;
      const std::string& y = (*nodes)[b.node]->node_id;
      if (x != y) return x < y;
    }
    return a.offer->id < b.offer->id;
  }
};

// One scheduling pass over a snapshot: see Schedule in the header. The snapshot's nodes are
// shared with the caller and never written: a node the pass changes (a placement, a preemption)
// is copied first, so a pass over 10,000 nodes copies only the few it places on.
class Pass {
 public:
  Pass(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
       const market::CostModel& model, ScheduleOptions options)
      : base_(nodes),
        own_(base_.size()),
        version_(base_.size(), 0),
        model_(model),
        options_(options) {
    nodes_.reserve(base_.size());
    for (const auto& n : base_) nodes_.push_back(n.get());
#ifndef NDEBUG
    if (options_.nodes_in_id_order &&
        std::adjacent_find(nodes_.begin(), nodes_.end(), [](const auto* a, const auto* b) {
          return !(a->node_id < b->node_id);
        }) != nodes_.end()) {
      std::fprintf(stderr, "sched: the caller's nodes are not in increasing id order\n");
      std::abort();
    }
#endif
    if (options_.exhausted_before == nullptr || options_.changed_nodes == nullptr) {
      options_.exhausted_before = nullptr;
    } else if (options_.node_index == nullptr) {
      for (size_t i = 0; i < nodes_.size(); ++i) own_index_.emplace(nodes_[i]->node_id, i);
      options_.node_index = &own_index_;
    }
    if (options_.fleet != nullptr) {
      preemptible_ = options_.fleet->preemptible;
      paused_ = options_.fleet->paused;
#ifndef NDEBUG
      const FleetFacts seen = FleetFactsOf(base_);
      if (seen.preemptible != preemptible_ || seen.paused != paused_) {
        std::fprintf(stderr, "sched: the caller's fleet facts are out of date\n");
        std::abort();
      }
#endif
    } else {
      FleetFacts seen = FleetFactsOf(base_);
      preemptible_ = seen.preemptible;
      paused_ = std::move(seen.paused);
    }
  }

  struct Shape;

  // `key`: the job's shape (empty: searched on its own); `last`: no later job of the pass has
  // its shape; `at`: its position in the caller's queue, which its answer carries; `shape`
  // (may be null): where a caller considering a run of one shape keeps it between its jobs, so
  // the shape is looked up by its (long) key once, not once per job.
  void Consider(const JobRequest& job, const std::string& key, bool last, size_t at,
                Shape** shape = nullptr) {
    const size_t answered = plan_.waiting.size();
    ConsiderJob(job, key, last, shape);
    if (plan_.waiting.size() > answered) plan_.waiting.back().at = at;
  }

  // The later jobs of the shape just answered (Settled): they wait as its last job does.
  void AnswerAlike(std::vector<size_t> at) {
    if (at.empty()) return;
    plan_.alike.push_back({plan_.waiting.size() - 1, std::move(at)});
  }

  // Whether the shape's answer is final for the pass: one of its jobs waits, and with nothing
  // anywhere interruptible or being preempted no preemption can be planned, so StillHolds holds
  // for every later job of it (and its heap, empty, is never refilled).
  bool Settled(const Shape* shape) const {
    return shape != nullptr && !preemptible_ && shape->waiting.has_value();
  }

  Plan Take() {
    for (const auto& [key, shape] : shapes_) {
      if (shape.exhausted && shape.could_ever) plan_.exhausted_shapes.insert(key);
    }
    return std::move(plan_);
  }

 private:
  void ConsiderJob(const JobRequest& job, const std::string& key, bool last, Shape** kept) {
    const market::Workload work = WorkOf(job);
    if (key.empty()) {
      bool could_ever = false;
      std::optional<Candidate> best = Scan(job, work, &could_ever);
      if (best) return Place(job, *best);
      Wait(job, work, could_ever);
      return;
    }
    bool fresh = false;
    Shape* found = kept != nullptr ? *kept : nullptr;
    if (found == nullptr) {
      auto [it, inserted] =
          shapes_.try_emplace(key, job, work, &nodes_, options_.nodes_in_id_order);
      found = &it->second;  // a map's entries stay put
      fresh = inserted;
      if (kept != nullptr) *kept = found;
    }
    Shape& shape = *found;
    if (fresh && options_.exhausted_before && options_.exhausted_before->count(key) > 0) {
      // Nothing fitted it at the end of the last pass: only a node changed since may fit now.
      shape.could_ever = true;
      shape.heap.Reserve(ChangedNodes().size());
      for (size_t i : ChangedNodes()) Push(shape, i, /*count_could_ever=*/false, /*sift=*/false);
      shape.heap.Heapify();
    } else if (fresh && last) {
      // The shape's only job in the pass (a submit's own pass, mostly): its best candidate is
      // all it needs, found by a scan without ranking every node in a heap.
      shape.done = true;
      if (std::optional<Candidate> best = Best(job, work, key, &shape.could_ever)) {
        return Place(job, *best);
      }
    } else if (fresh) {
      // Only a ranking a search for a lone job made (Best): ranking the fleet here would cost
      // more than this search, which skips the nodes without room unread.
      shape.ranked = RankedEntries(job, work, key, /*rank=*/false);
      if (shape.ranked != nullptr) {
        // Read from its ranking as far as its placements need (Fill), not every node.
        shape.could_ever = !shape.ranked->empty();
      } else {
        for (size_t i = 0; i < nodes_.size(); ++i) {
          Push(shape, i, /*count_could_ever=*/true, /*sift=*/false);
        }
        shape.heap.Heapify();
      }
    }
    while (true) {
      if (shape.ranked != nullptr) Fill(shape);
      if (shape.heap.empty()) break;
      const Entry& top = shape.heap.top();
      if (top.version != version_[top.node]) {  // the node changed since: re-ranked
        shape.heap.pop();
        continue;
      }
      Candidate c = top.ToCandidate();
      shape.heap.pop();
      return Place(job, c);
    }
    shape.exhausted = true;
    if (shape.waiting && StillHolds(shape, work)) {  // answered for an earlier job of the shape
      plan_.waiting.push_back({job.job_id, shape.waiting->never_fits, shape.waiting->reason});
      return;
    }
    Answer answer = Wait(job, work, shape.could_ever);
    if (answer == Answer::kPreemptionPlanned) {
      shape.waiting.reset();  // the next job of the shape sees the room this one is freeing
    } else {
      shape.waiting = plan_.waiting.back();
      shape.answer = answer;
      shape.placements_at = placements_;
      shape.preemptions_at = plan_.preemptions.size();
    }
  }

 private:
  // A candidate in a shape's heap: the fields the ranking compares and the placement needs, in
  // 56 bytes where a whole Candidate and its version took 144. A pass after a batch of exits
  // ranks every node that changed in each shape still placing, and copying whole candidates
  // into those heaps was most of the search (perf of bench/placement --shapes 225 --batch 256).
  // Taken out unpriced: Place works out the estimate of the one it places.
  struct Entry {
    const market::Offer* offer = nullptr;
    uint32_t node = 0;
    int32_t gpus_left = 0;
    int32_t cpus_left = 0;
    bool perf_known = true;  // what market::CompareRanked reads of the estimate
    double price_per_hour = 0;
    double expected_cost = 0;
    double expected_hours = 0;
    uint64_t version = 0;  // of its node when ranked

    static Entry Of(const Candidate& c, uint64_t version) {
      return {c.offer,
              static_cast<uint32_t>(c.node),
              c.gpus_left,
              c.cpus_left,
              c.estimate.perf_known,
              c.estimate.price_per_hour,
              c.estimate.expected_cost,
              c.estimate.expected_hours,
              version};
    }
    Candidate ToCandidate() const {
      return Candidate{node,      offer,     market::RankedEstimate(*this),
                       gpus_left, cpus_left, /*priced=*/false};
    }
  };
  struct Worse {
    Ranking ranking;
    bool operator()(const Entry& a, const Entry& b) const {
      return ranking.Before(market::CompareRanked(ranking.objective, b, a), b, a);
    }
  };
  // A shape's candidates, the best on top. Entries appended unsifted (a fresh shape's whole
  // batch) are heaped together by Heapify: linear, not a sift per entry.
  class Heap {
   public:
    explicit Heap(Worse worse) : worse_(std::move(worse)) {}
    bool empty() const { return entries_.empty(); }
    const Entry& top() const { return entries_.front(); }
    void pop() {
      std::pop_heap(entries_.begin(), entries_.end(), worse_);
      entries_.pop_back();
    }
    void push(const Entry& e, bool sift = true) {
      entries_.push_back(e);
      if (sift) std::push_heap(entries_.begin(), entries_.end(), worse_);
    }
    void Reserve(size_t n) { entries_.reserve(entries_.size() + n); }
    void Heapify() { std::make_heap(entries_.begin(), entries_.end(), worse_); }

   private:
    Worse worse_;
    std::vector<Entry> entries_;
  };
  enum class Answer { kNeverFits, kBusy, kRoomComing, kPreemptionPlanned };

 public:
  // Public so a caller can keep one between jobs of the shape (Consider); built by the pass only.
  struct Shape {
    Shape(const JobRequest& job, market::Workload w, const std::vector<const NodeCapacity*>* nodes,
          bool ids_in_order)
        : first(&job), work(w), heap(Worse{Ranking{job.objective, nodes, ids_in_order}}) {}
    const JobRequest* first;  // the job the shape's candidates were ranked for
    market::Workload work;
    bool could_ever = false;
    bool exhausted = false;  // its candidates ran out: nothing fits it for the rest of the pass
    bool done = false;       // no job of the shape is left in the pass: nothing to rank for
    Heap heap;
    // Where the caller keeps rankings: the shape's, and how far Fill has read it.
    ShapeRankings::Entries ranked;
    size_t read = 0;
    // Why the last job of the shape waits, and the pass's counts then (StillHolds).
    std::optional<Waiting> waiting;
    Answer answer = Answer::kBusy;
    size_t placements_at = 0;
    size_t preemptions_at = 0;
  };

 private:
  // Whether the shape's last answer is the answer for its next job too. Within a pass capacity
  // only shrinks and preemptions only add: "never fits" is for ever; "every node is busy" holds
  // until a preemption is planned (its room may be this shape's too); for interruptible work,
  // which never preempts, it always holds. "Room is coming" holds until anything is placed (that
  // may take the room) or preempted.
  bool StillHolds(const Shape& shape, const market::Workload& work) const {
    switch (shape.answer) {
      case Answer::kNeverFits:
        return true;
      case Answer::kBusy:
        return work.interruptible || shape.preemptions_at == plan_.preemptions.size();
      case Answer::kRoomComing:
        return shape.placements_at == placements_ &&
               shape.preemptions_at == plan_.preemptions.size();
      case Answer::kPreemptionPlanned:
        return false;
    }
    return false;
  }

  // The nodes changed since the last full pass, as indexes into the pass's nodes, in the order
  // of options_.changed_nodes: looked up once per pass, not once per shape. With 225 shapes a
  // hash of every id per shape was 8 % of bench/placement --batch 200's release (perf).
  const std::vector<size_t>& ChangedNodes() {
    if (!changed_resolved_) {
      changed_resolved_ = true;
      changed_at_.reserve(options_.changed_nodes->size());
      for (const auto& id : *options_.changed_nodes) {
        auto at = options_.node_index->find(id);
        if (at != options_.node_index->end() && at->second < nodes_.size()) {
          changed_at_.push_back(at->second);
        }
      }
    }
    return changed_at_;
  }

  // Ranks node i's offers for the shape as the node stands now.
  // `sift` false: appended only, for a fresh shape's batch (Heap::Heapify after it).
  void Push(Shape& shape, size_t i, bool count_could_ever, bool sift = true) {
    const NodeCapacity& n = *nodes_[i];
    // Once "could it ever run" is answered, a node without the free counts is skipped unread.
    if ((!count_could_ever || shape.could_ever) && !MayFitNow(n, *shape.first)) return;
    for (const auto& idle : n.Offers()) {
      auto idle_cost = CouldUse(idle, *shape.first, shape.work, model_);
      if (!idle_cost) continue;
      if (count_could_ever) shape.could_ever = true;
      if (!n.online) continue;
      if (auto c = FitNow(n, i, idle, *shape.first, *idle_cost)) {
        shape.heap.push(Entry::Of(*c, version_[i]), sift);
      }
    }
  }

  // Every node, for a job searched on its own.
  std::optional<Candidate> Scan(const JobRequest& job, const market::Workload& work,
                                bool* could_ever) {
    Ranking ranking{job.objective, &nodes_, options_.nodes_in_id_order};
    std::optional<Candidate> best;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeCapacity& n = *nodes_[i];
      if (*could_ever && !MayFitNow(n, job)) continue;
      for (const auto& idle : n.Offers()) {
        auto idle_cost = CouldUse(idle, job, work, model_);
        if (!idle_cost) continue;
        *could_ever = true;
        if (!n.online || Avoids(job, n)) continue;
        auto c = FitNow(n, i, idle, job, *idle_cost);
        if (c && (!best || ranking.Better(*c, *best))) best = c;
      }
    }
    return best;
  }

  // The shape's ranking where the caller keeps one (ScheduleOptions::rankings), brought up to
  // date with the nodes; null otherwise.
  ShapeRankings::Entries RankedEntries(const JobRequest& job, const market::Workload& work,
                                       const std::string& key, bool rank) {
    if (options_.rankings == nullptr) return nullptr;
    if (!rankings_synced_) {
      options_.rankings->Sync(base_, model_);
      rankings_synced_ = true;
    }
    return options_.rankings->Ranked(
        key, job.objective,
        [&](size_t i, std::vector<ShapeRankings::Entry>* out) {
          const std::vector<market::Offer>& offers = base_[i]->Offers();
          for (size_t o = 0; o < offers.size(); ++o) {
            if (auto cost = CouldUse(offers[o], job, work, model_)) {
              out->push_back(ShapeRankings::Entry::Of(i, o, *cost));
            }
          }
        },
        rank);
  }

  // Entry `e` of a ranking as a candidate for `job`, when its node can take the job now.
  std::optional<Candidate> FitEntry(const ShapeRankings::Entry& e, const JobRequest& job) const {
    const NodeCapacity& n = *nodes_[e.node];
    if (!n.online || !MayFitNow(n, job)) return std::nullopt;
    auto c = FitNow(n, e.node, n.Offers()[e.offer], job, e.Ranked());
    if (c) c->priced = false;  // Place prices the one it places
    return c;
  }

  // Scan's answer, from the shape's ranking where there is one: entries in order of estimate,
  // so the best candidate has the estimate of the first entry that fits now, and is the
  // tightest fit among the entries of that estimate.
  std::optional<Candidate> Best(const JobRequest& job, const market::Workload& work,
                                const std::string& key, bool* could_ever) {
    const ShapeRankings::Entries entries = RankedEntries(job, work, key, /*rank=*/true);
    if (entries == nullptr) return Scan(job, work, could_ever);
    const bool knew = *could_ever;
    *could_ever = *could_ever || !entries->empty();
    Ranking ranking{job.objective, &nodes_, options_.nodes_in_id_order};
    std::optional<Candidate> best;
    for (const ShapeRankings::Entry& e : *entries) {
      // Every later entry's estimate is as bad or worse: none can rank before the best found.
      if (best && market::CompareRanked(job.objective, e, best->estimate) != 0) break;
      auto c = FitEntry(e, job);
      if (c && (!best || ranking.Better(*c, *best))) best = c;
    }
#ifndef NDEBUG
    // Debug builds (the sanitizer run) check every ranked search against the scan it replaces.
    bool scanned_ever = knew;
    const std::optional<Candidate> scanned = Scan(job, work, &scanned_ever);
    if (scanned_ever != *could_ever || scanned.has_value() != best.has_value() ||
        (best && (scanned->node != best->node || scanned->offer != best->offer))) {
      std::fprintf(stderr, "sched: the ranked search of shape %s differs from a scan\n",
                   key.c_str());
      std::abort();
    }
#else
    (void)knew;
#endif
    return best;
  }

  // A ranked shape's heap is filled as far as its best candidate needs: the entries not yet read
  // all rank at or after the next one's estimate, so once the heap's top estimate is better than
  // that, the top is the shape's best candidate; an estimate as good is read whole first, since
  // the tightest fit among equal estimates wins. Capacity only shrinks within a pass, so an
  // entry that did not fit when read never fits later in it; a node a placement changes is
  // ranked again by Place, as for every shape.
  void Fill(Shape& shape) {
    const std::vector<ShapeRankings::Entry>& entries = *shape.ranked;
    const market::Objective objective = shape.first->objective;
    while (shape.read < entries.size()) {
      if (!shape.heap.empty()) {
        const Entry& top = shape.heap.top();
        if (top.version != version_[top.node]) {
          shape.heap.pop();
          continue;
        }
        if (market::CompareRanked(objective, entries[shape.read], top) > 0) return;
      }
      const ShapeRankings::Entry group = entries[shape.read];
      do {
        const ShapeRankings::Entry& e = entries[shape.read++];
        if (auto c = FitEntry(e, *shape.first)) shape.heap.push(Entry::Of(*c, version_[e.node]));
      } while (shape.read < entries.size() &&
               market::CompareRanked(objective, entries[shape.read], group) == 0);
    }
  }

  void Place(const JobRequest& job, const Candidate& best) {
    NodeCapacity& n = Mutable(best.node);
    std::vector<int> gpus = FreeGpus(n, *best.offer);  // as when ranked: the node is unchanged
    gpus.resize(static_cast<size_t>(job.gpus));
    for (auto& g : n.gpus) {
      if (std::find(gpus.begin(), gpus.end(), g.index) != gpus.end()) g.free = false;
    }
    n.free_cpus -= job.cpus;
    n.free_memory_gb -= job.memory_gb;
    const market::CostEstimate estimate =
        best.priced ? best.estimate : Estimate(*best.offer, job, WorkOf(job), model_);
    plan_.placements.push_back({job.job_id, n.node_id, best.offer->id, std::move(gpus),
                                estimate.price_per_hour, estimate});
    // The node changed: its old entries are stale everywhere, and every shape that still has
    // candidates sees it as it is now. (A shape already answered with a wait has none: capacity
    // only shrinks within a pass.)
    ++version_[best.node];
    ++placements_;
    for (auto& [key, shape] : shapes_) {
      if (!shape.waiting && !shape.done) Push(shape, best.node, /*count_could_ever=*/false);
    }
  }

  // Records why the job waits.
  Answer Wait(const JobRequest& job, const market::Workload& work, bool could_ever) {
    if (!could_ever) {
      plan_.waiting.push_back({job.job_id, true, NeverFitsReason(nodes_, job, model_)});
      return Answer::kNeverFits;
    }
    Preemption p;
    bool room_coming = false;
    // With no interruptible attempt anywhere there is nothing to preempt nor room coming: the
    // job did not fit, so every node that could run it is busy.
    size_t chosen = 0;
    if ((!work.interruptible || (job.bid && !work.fallback_on_demand)) && preemptible_ &&
        PlanPreemption(nodes_, job, work, model_, &p, &chosen, &room_coming)) {
      // Later jobs in this plan must not count on these attempts again.
      for (auto& r : Mutable(chosen).running) {
        if (std::find(p.attempt_ids.begin(), p.attempt_ids.end(), r.attempt_id) !=
            p.attempt_ids.end()) {
          r.preempting = true;
        }
      }
      plan_.waiting.push_back({job.job_id, false,
                               "waiting for " + std::to_string(p.attempt_ids.size()) +
                                   " interruptible attempt(s) to be preempted on " + p.node_id});
      plan_.preemptions.push_back(std::move(p));
      return Answer::kPreemptionPlanned;
    }
    if (room_coming) {
      plan_.waiting.push_back(
          {job.job_id, false, "waiting for preempted interruptible attempts to stop"});
      return Answer::kRoomComing;
    }
    // A paused node that could run it is why it waits: say so (paused nodes are few, usually none).
    for (size_t i : paused_) {
      const NodeCapacity& n = *nodes_[i];
      for (const auto& idle : n.Offers()) {
        if (!CouldUse(idle, job, work, model_)) continue;
        plan_.waiting.push_back({job.job_id, false,
                                 "waiting for capacity: " + n.name + " (" + n.node_id + ") is " +
                                     n.paused + "; every other node that can run it is busy"});
        return Answer::kBusy;
      }
    }
    plan_.waiting.push_back(
        {job.job_id, false, "waiting for capacity: every node that can run it is busy"});
    return Answer::kBusy;
  }

  // Node i as the pass sees it now: the caller's, or the pass's own copy once it changed it.
  NodeCapacity& Mutable(size_t i) {
    if (!own_[i]) {
      own_[i] = std::make_unique<NodeCapacity>(*base_[i]);
      nodes_[i] = own_[i].get();
    }
    return *own_[i];
  }

  const std::vector<std::shared_ptr<const NodeCapacity>>& base_;
  std::vector<std::unique_ptr<NodeCapacity>> own_;
  std::vector<const NodeCapacity*> nodes_;
  std::vector<uint64_t> version_;  // per node: bumped by every placement on it
  const market::CostModel& model_;
  ScheduleOptions options_;
  std::map<std::string, Shape> shapes_;
  // node id -> index, for incremental passes where the caller keeps none
  std::unordered_map<std::string, size_t> own_index_;
  std::vector<size_t> changed_at_;  // ChangedNodes()
  bool changed_resolved_ = false;
  bool rankings_synced_ = false;  // options_.rankings brought in line with the nodes
  bool preemptible_ = false;      // some attempt is interruptible or being preempted
  std::vector<size_t> paused_;    // nodes online but paused (NodeCapacity::paused)
  size_t placements_ = 0;
  Plan plan_;
};

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

bool HasPreemptible(const NodeCapacity& node) {
  return std::any_of(node.running.begin(), node.running.end(),
                     [](const RunningAttempt& r) { return r.interruptible || r.preempting; });
}

FleetFacts FleetFactsOf(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes) {
  FleetFacts facts;
  for (size_t i = 0; i < nodes.size(); ++i) {
    facts.preemptible = facts.preemptible || HasPreemptible(*nodes[i]);
    if (!nodes[i]->paused.empty()) facts.paused.push_back(i);
  }
  return facts;
}

std::string ShapeKey(const JobRequest& job) {
  if (!job.avoid_nodes.empty()) return "";
  const market::Workload& w = job.work;
  std::string key = market::ToString(job.query);
  key += '|' + std::to_string(job.gpus) + '|' + std::to_string(job.cpus) + '|' +
         Number(job.memory_gb) + '|' +
         (job.max_price_per_hour ? Number(*job.max_price_per_hour) : std::string("-")) + '|' +
         (job.budget_left ? Number(*job.budget_left) : std::string("-")) + '|' +
         (job.budget_min_hours ? Number(*job.budget_min_hours) : std::string("-")) + '|' +
         Number(job.budget_reserve_hours) + '|' + Number(job.budget_reserve) + '|' +
         (job.bid ? Number(*job.bid) : std::string("-")) + '|' + Number(w.hours) + '|' +
         (w.interruptible ? 'i' : 'o') + (w.fallback_on_demand ? 'f' : 'n') + '|' +
         (w.checkpoint_interval_hours ? Number(*w.checkpoint_interval_hours) : "-") + '|' +
         Number(w.checkpoint_size_gb) + '|' + std::to_string(static_cast<int>(job.objective));
  return key;
}

bool CouldEverRun(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
                  const JobRequest& job, const market::CostModel& model) {
  const market::Workload work = WorkOf(job);
  for (const auto& n : nodes) {
    for (const auto& idle : n->Offers()) {
      if (CouldUse(idle, job, work, model)) return true;
    }
  }
  return false;
}

Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<JobRequest>& queue,
              const market::CostModel& model) {
  std::vector<const JobRequest*> jobs;
  jobs.reserve(queue.size());
  for (const auto& j : queue) jobs.push_back(&j);
  return Schedule(std::move(nodes), jobs, model);
}

Plan Schedule(std::vector<NodeCapacity> nodes, const std::vector<const JobRequest*>& queue,
              const market::CostModel& model, ScheduleOptions options) {
  std::vector<std::shared_ptr<const NodeCapacity>> shared;
  shared.reserve(nodes.size());
  for (auto& n : nodes) shared.push_back(std::make_shared<const NodeCapacity>(std::move(n)));
  return Schedule(std::move(shared), queue, model, options);
}

namespace {

// The order jobs are considered in (see Schedule in the header); `at` (the position in the
// caller's queue) keeps it a strict order, as the stable sort it replaces.
struct Queued {
  const JobRequest* job;
  size_t at;
};

bool Before(const Queued& a, const Queued& b) {
  // On-demand work first among equals: it is what may take capacity from interruptible work,
  // so the room a preemption frees goes to it and not back to the preempted job.
  // Among interruptible work, the higher bid first: it wins contested capacity.
  return std::make_tuple(b.job->priority, a.job->work.interruptible, b.job->bid.value_or(0),
                         a.job->order,
                         a.at) < std::make_tuple(a.job->priority, b.job->work.interruptible,
                                                 a.job->bid.value_or(0), b.job->order, b.at);
}

// The queue's jobs at their positions, and every job of the runs at the positions they give.
std::vector<Queued> Everything(const std::vector<const JobRequest*>& queue,
                               const std::vector<JobRun*>& runs) {
  std::vector<Queued> all;
  all.reserve(queue.size());
  for (size_t i = 0; i < queue.size(); ++i) all.push_back({queue[i], i});
  for (JobRun* run : runs) {
    for (RunJob next = run->Next(); next.job != nullptr; next = run->Next()) {
      all.push_back({next.job, next.at});
    }
  }
  return all;
}

// Every job, one after another in order.
Plan ConsiderEach(Pass& pass, std::vector<Queued> order, bool share_shapes) {
  std::sort(order.begin(), order.end(), Before);
  // Each job's shape, and how many jobs of each shape are still to come.
  std::vector<std::string> keys;
  keys.reserve(order.size());
  std::unordered_map<std::string, size_t> left;
  for (const Queued& q : order) {
    keys.push_back(!share_shapes ? std::string() : q.job->shape ? *q.job->shape : ShapeKey(*q.job));
  }
  for (const auto& key : keys) {
    if (!key.empty()) ++left[key];
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const bool last = keys[i].empty() || --left[keys[i]] == 0;
    pass.Consider(*order[i].job, keys[i], last, order[i].at);
  }
  return pass.Take();
}

// The same order, merged from one heap per shape and one head per run, so a shape whose answer
// is settled leaves the merge with its later jobs unsorted and unconsidered, and a run with its
// later jobs never taken (ScheduleOptions::answer_alike_once).
Plan ConsiderUntilSettled(Pass& pass, const std::vector<const JobRequest*>& queue,
                          const std::vector<JobRun*>& runs) {
  struct Group {
    std::string key;               // empty: a job searched on its own
    std::vector<Queued> jobs;      // a heap: the next job on top (a run's: its next job only)
    Pass::Shape* shape = nullptr;  // the pass's, once its first job is considered
    JobRun* run = nullptr;
  };
  auto after = [](const Queued& a, const Queued& b) { return Before(b, a); };
  std::vector<Group> groups;
  std::unordered_map<std::string_view, size_t> by_key;
  std::deque<std::string> computed;  // keys the caller did not keep (a deque: they stay put)
  auto key_of = [&computed](const JobRequest& job) -> std::string_view {
    if (job.shape) return *job.shape;
    return computed.emplace_back(ShapeKey(job));
  };
  bool any_last = false;  // the last job's key, and its group
  std::string_view last_key;
  size_t last_group = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    const JobRequest* job = queue[i];
    const std::string_view key = key_of(*job);
    if (key.empty()) {
      groups.push_back({std::string(), {{job, i}}});
      continue;
    }
    // A queue is mostly runs of one shape: comparing with the last key costs less than hashing.
    if (!any_last || last_key != key) {
      auto [it, fresh] = by_key.try_emplace(key, groups.size());
      if (fresh) groups.push_back({std::string(key), {}});
      any_last = true;
      last_key = key;
      last_group = it->second;
    }
    groups[last_group].jobs.push_back({job, i});
  }
  // A shape's heap may not say "last job" while a run of the shape may still give one.
  std::unordered_set<std::string_view> run_keys;
  for (JobRun* run : runs) {
    const RunJob first = run->Next();
    if (first.job == nullptr) continue;
    const std::string_view key = key_of(*first.job);
    groups.push_back({std::string(key), {{first.job, first.at}}, nullptr, run});
    if (!key.empty()) run_keys.insert(key);
  }
  // The merge: each group's next job, the first in order on top.
  auto later = [&](size_t a, size_t b) {
    return Before(groups[b].jobs.front(), groups[a].jobs.front());
  };
  std::vector<size_t> heads;
  heads.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::make_heap(groups[g].jobs.begin(), groups[g].jobs.end(), after);
    heads.push_back(g);
  }
  std::make_heap(heads.begin(), heads.end(), later);
  while (!heads.empty()) {
    std::pop_heap(heads.begin(), heads.end(), later);
    Group& group = groups[heads.back()];
    std::pop_heap(group.jobs.begin(), group.jobs.end(), after);
    const Queued next = group.jobs.back();
    group.jobs.pop_back();
    const bool last = group.key.empty() || (group.run == nullptr && group.jobs.empty() &&
                                            run_keys.count(group.key) == 0);
    pass.Consider(*next.job, group.key, last, next.at, &group.shape);
    if (group.run != nullptr) {
      // A run settled is left where it is: the caller answers the rest.
      if (!pass.Settled(group.shape)) {
        if (const RunJob more = group.run->Next(); more.job != nullptr) {
          group.jobs.push_back({more.job, more.at});
        }
      }
    } else if (!group.jobs.empty() && pass.Settled(group.shape)) {
      std::vector<size_t> rest;
      rest.reserve(group.jobs.size());
      for (const Queued& q : group.jobs) rest.push_back(q.at);
      pass.AnswerAlike(std::move(rest));
      group.jobs.clear();
    }
    if (group.jobs.empty()) {
      heads.pop_back();
    } else {
      std::push_heap(heads.begin(), heads.end(), later);
    }
  }
  return pass.Take();
}

}  // namespace

Plan Schedule(const std::vector<std::shared_ptr<const NodeCapacity>>& nodes,
              const std::vector<const JobRequest*>& queue, const market::CostModel& model,
              ScheduleOptions options) {
  static const std::vector<JobRun*> kNoRuns;
  const std::vector<JobRun*>& runs = options.runs != nullptr ? *options.runs : kNoRuns;
  Pass pass(nodes, model, options);
  if (options.answer_alike_once && options.share_shapes) {
    return ConsiderUntilSettled(pass, queue, runs);
  }
  return ConsiderEach(pass, Everything(queue, runs), options.share_shapes);
}

}  // namespace sluice::sched
