// Ranking: what an offer would cost and how long a job would take on it (issue 3 item 5). Pure
// logic; `sluice estimate`, the offers API and the scheduler all rank through here, so what a
// user is shown is what the scheduler does.
//
// The cost model, per offer:
//
//   compute_hours  = hours ÷ perf               (hours of work on the reference GPU, a100-80gb)
//   expected_hours = compute_hours × (1 + overhead)
//   overhead       = expected extra time from interruptions: with λ interruptions per hour,
//                    checkpoints every τ hours (τ = the whole run without checkpoints) and r
//                    hours to restart elsewhere, each τ-segment takes (e^{λτ} − 1)(1/λ + r)
//                    hours on average (exponential interruptions; work since the last
//                    checkpoint is lost), so for whole segments overhead = (e^{λτ} − 1)(1 + λr)
//                    ÷ (λτ) − 1 (≈ λτ/2 + λr when small); a shorter last segment is counted
//                    at its own length. λ = 0 on on-demand capacity.
//   expected_cost  = price_per_hour × expected_hours + storage
//   storage        = checkpoint_size_gb × storage price (per GB-month) × expected_hours ÷ 730
//
// λ comes from the offer's observed interruptions (Offer::interruptions_per_hour) or, without
// history, from CostModel::prior_interruptions_per_hour — the estimate says which.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "market/offer.h"

namespace sluice::market {

// What to minimise. kCost: expected cost to complete (the default). kTime: expected time to
// complete. kPrice: the hourly price, as other brokers rank.
enum class Objective { kCost, kTime, kPrice };
std::string_view Name(Objective o);  // "cost" | "time" | "price"
std::optional<Objective> ObjectiveFromName(std::string_view name);

// The job, as the cost model sees it.
struct Workload {
  double hours = 1;  // on `gpus` reference GPUs (CPU-only jobs: on `cpus` CPUs)
  int gpus = 0;
  int cpus = 1;
  bool interruptible = false;       // priced on interruptible capacity where the offer sells it
  bool fallback_on_demand = false;  // with `interruptible`: on-demand where it does not
  std::optional<double> checkpoint_interval_hours;  // none: an interruption restarts from zero
  double checkpoint_size_gb = 0;
};

// Market-wide assumptions; the server's options set them.
struct CostModel {
  double storage_price_per_gb_month = 0.02;    // checkpoint storage
  double restart_hours = 1.0 / 60;             // re-placement + checkpoint restore
  double prior_interruptions_per_hour = 0.05;  // interruptible capacity without history
};

struct CostEstimate {
  bool interruptible = false;  // priced on interruptible capacity
  double price_per_hour = 0;   // for the whole allocation
  bool perf_known = true;      // false: the GPU has no perf score, so time and cost are unknown
  double perf = 1;
  double compute_hours = 0;
  double interruptions_per_hour = 0;
  bool rate_from_history = false;
  double overhead = 0;  // fraction of compute_hours
  // The node's reliability score (market/reliability.h) and what it adds: each placement fails
  // with probability 1 − r, so (1/r − 1) extra restarts are expected, each costing a restart and
  // on average half a checkpoint segment of lost work. Fraction of compute_hours.
  double reliability = 1;
  double reliability_overhead = 0;
  double expected_hours = 0;
  double storage_cost = 0;
  double expected_cost = 0;
};

// The hourly price of `work`'s allocation on `offer`: GPUs × per-GPU price; for CPU-only work,
// CPUs × the per-CPU price, or the whole instance where the offer is not sold by CPU.
double AllocationPrice(const Offer& offer, const Workload& work, bool interruptible);
// Whether `offer` sells `work`'s allocation as interruptible capacity (per GPU, per CPU for CPU
// work where the offer is sold by CPU, else the whole instance).
bool SellsInterruptible(const Offer& offer, const Workload& work);

CostEstimate EstimateCost(const Offer& offer, const Workload& work, const CostModel& model);

// < 0 when `a` ranks before `b` under `objective`, > 0 after, 0 when tied (callers break ties:
// the scheduler by tightness of fit, lists by offer id). Offers with unknown perf rank after
// known ones for kCost and kTime.
int CompareEstimates(Objective objective, const CostEstimate& a, const CostEstimate& b);

// CompareEstimates on anything that holds the four fields it reads (perf_known, price_per_hour,
// expected_cost, expected_hours): the scheduler keeps only those of its candidates, since
// copying whole estimates into a shape's heap was most of a deep queue's search (perf of
// bench/placement). CompareEstimates is this on two CostEstimates.
template <class A, class B>
int CompareRanked(Objective objective, const A& a, const B& b) {
  auto sign = [](double d) { return d < 0 ? -1 : (d > 0 ? 1 : 0); };
  if (objective == Objective::kPrice) {
    if (int c = sign(a.price_per_hour - b.price_per_hour)) return c;
    if (a.perf_known != b.perf_known) return a.perf_known ? -1 : 1;
    return sign(a.expected_cost - b.expected_cost);
  }
  if (a.perf_known != b.perf_known) return a.perf_known ? -1 : 1;
  if (!a.perf_known) return sign(a.price_per_hour - b.price_per_hour);
  if (objective == Objective::kTime) {
    if (int c = sign(a.expected_hours - b.expected_hours)) return c;
    return sign(a.expected_cost - b.expected_cost);
  }
  if (int c = sign(a.expected_cost - b.expected_cost)) return c;
  return sign(a.expected_hours - b.expected_hours);
}

// An estimate holding only the fields CompareRanked reads of `r`: for ranking, not for a price.
template <class R>
CostEstimate RankedEstimate(const R& r) {
  CostEstimate e;
  e.perf_known = r.perf_known;
  e.price_per_hour = r.price_per_hour;
  e.expected_cost = r.expected_cost;
  e.expected_hours = r.expected_hours;
  return e;
}

struct RankedOffer {
  Offer offer;
  CostEstimate estimate;
};

// Estimates every offer and returns the best `limit`, best first (ties by offer id).
std::vector<RankedOffer> Rank(const std::vector<Offer>& offers, const Workload& work,
                              const CostModel& model, Objective objective, size_t limit);

// One line on how the estimate was reached:
// "$4.00/h interruptible × 2.59 h (4 h ÷ perf 1.60, +3.4% for interruptions: 0.05/h assumed,
// no history, checkpoint every 30m) + $0.01 storage = $10.37".
std::string Why(const CostEstimate& e, const Workload& work);

Json ToJson(const CostEstimate& e);

}  // namespace sluice::market
