#include "market/ranking.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/text.h"

namespace sluice::market {
namespace {

constexpr double kHoursPerMonth = 730;  // 365 × 24 ÷ 12, the usual cloud billing month
// e^x overflows a double near x = 709; an exponent this large already means "never finishes"
// (the estimate is astronomically long), so clamp rather than produce inf.
constexpr double kMaxExponent = 600;

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Short(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string Duration(double hours) {
  const double seconds = hours * 3600;
  if (seconds < 120) return Short(seconds) + "s";
  if (seconds < 2 * 3600) return Short(seconds / 60) + "m";
  return Short(hours) + "h";
}

// Expected wall time to get one segment of `hours` of work past interruptions (see the header).
double SegmentHours(double rate, double hours, double restart_hours) {
  if (hours <= 0) return 0;
  if (rate <= 0) return hours;
  const double x = std::min(rate * hours, kMaxExponent);
  return std::expm1(x) * (1 / rate + restart_hours);
}

// Expected extra fraction of time lost to interruptions: the work runs as whole segments of
// `segment_hours` between checkpoints plus a shorter last one (treating the last one as whole
// would overstate the loss; bench/spot_savings found that gap).
double InterruptionOverhead(double rate, double work_hours, double segment_hours,
                            double restart_hours) {
  if (rate <= 0 || work_hours <= 0 || segment_hours <= 0) return 0;
  const double whole = std::floor(work_hours / segment_hours);
  const double rest = work_hours - whole * segment_hours;
  const double expected = whole * SegmentHours(rate, segment_hours, restart_hours) +
                          SegmentHours(rate, rest, restart_hours);
  return expected / work_hours - 1;
}

}  // namespace

std::string_view Name(Objective o) {
  switch (o) {
    case Objective::kCost:
      return "cost";
    case Objective::kTime:
      return "time";
    case Objective::kPrice:
      return "price";
  }
  return "cost";
}

std::optional<Objective> ObjectiveFromName(std::string_view name) {
  const std::string n = ToLower(name);
  for (Objective o : {Objective::kCost, Objective::kTime, Objective::kPrice}) {
    if (n == Name(o)) return o;
  }
  return std::nullopt;
}

namespace {
// CPU work is priced per CPU where the offer sells CPUs, else as the whole instance.
bool SoldByCpu(const Offer& offer) {
  return offer.price_per_cpu_hour > 0 || offer.interruptible_price_per_cpu_hour > 0;
}
}  // namespace

bool SellsInterruptible(const Offer& offer, const Workload& work) {
  if (work.gpus <= 0 && SoldByCpu(offer)) return offer.interruptible_price_per_cpu_hour > 0;
  return offer.interruptible_price_per_gpu_hour > 0;
}

double AllocationPrice(const Offer& offer, const Workload& work, bool interruptible) {
  const double per_gpu =
      interruptible ? offer.interruptible_price_per_gpu_hour : offer.price_per_gpu_hour;
  if (work.gpus > 0) return work.gpus * per_gpu;
  if (SoldByCpu(offer)) {
    return work.cpus *
           (interruptible ? offer.interruptible_price_per_cpu_hour : offer.price_per_cpu_hour);
  }
  return offer.gpus * per_gpu;  // a GPU instance rented whole for CPU work
}

CostEstimate EstimateCost(const Offer& offer, const Workload& work, const CostModel& model) {
  CostEstimate e;
  // Interruptible work on an offer without interruptible capacity runs on-demand: only
  // `fallback_on_demand` work is ever matched with such offers (the query excludes them
  // otherwise), and on-demand capacity is not interrupted.
  e.interruptible = work.interruptible && SellsInterruptible(offer, work);
  e.price_per_hour = AllocationPrice(offer, work, e.interruptible);
  if (work.gpus > 0) {
    e.perf = offer.perf_score;
    e.perf_known = offer.perf_score > 0;
  }
  if (!e.perf_known) return e;
  e.compute_hours = work.hours / e.perf;
  if (e.interruptible) {
    e.rate_from_history = offer.interruptions_per_hour >= 0;
    e.interruptions_per_hour =
        e.rate_from_history ? offer.interruptions_per_hour : model.prior_interruptions_per_hour;
  }
  double segment = e.compute_hours;
  if (work.checkpoint_interval_hours && *work.checkpoint_interval_hours > 0) {
    segment = std::min(segment, *work.checkpoint_interval_hours);
  }
  e.overhead =
      InterruptionOverhead(e.interruptions_per_hour, e.compute_hours, segment, model.restart_hours);
  e.reliability = std::clamp(offer.reliability, 0.05, 1.0);
  if (e.reliability < 1 && e.compute_hours > 0) {
    e.reliability_overhead =
        (1 / e.reliability - 1) * (model.restart_hours + segment / 2) / e.compute_hours;
  }
  e.expected_hours = e.compute_hours * (1 + e.overhead + e.reliability_overhead);
  if (work.checkpoint_interval_hours) {
    e.storage_cost = work.checkpoint_size_gb * model.storage_price_per_gb_month * e.expected_hours /
                     kHoursPerMonth;
  }
  e.expected_cost = e.price_per_hour * e.expected_hours + e.storage_cost;
  return e;
}

int CompareEstimates(Objective objective, const CostEstimate& a, const CostEstimate& b) {
  return CompareRanked(objective, a, b);
}

std::vector<RankedOffer> Rank(const std::vector<Offer>& offers, const Workload& work,
                              const CostModel& model, Objective objective, size_t limit) {
  std::vector<RankedOffer> ranked;
  ranked.reserve(offers.size());
  for (const Offer& o : offers) ranked.push_back({o, EstimateCost(o, work, model)});
  auto less = [&](const RankedOffer& a, const RankedOffer& b) {
    if (int c = CompareEstimates(objective, a.estimate, b.estimate)) return c < 0;
    return a.offer.id < b.offer.id;
  };
  const size_t keep = std::min(limit, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + keep, ranked.end(), less);
  ranked.resize(keep);
  return ranked;
}

std::string Why(const CostEstimate& e, const Workload& work) {
  const std::string price =
      "$" + Fixed(e.price_per_hour, 2) + "/h" + (e.interruptible ? " interruptible" : " on-demand");
  if (!e.perf_known) {
    return price + "; no perf score for this GPU, so time and cost to complete are unknown";
  }
  std::string s = price + " × " + Fixed(e.expected_hours, 2) + " h (" + Short(work.hours) +
                  " h ÷ perf " + Fixed(e.perf, 2);
  if (e.overhead > 0) {
    s += ", +" + Short(e.overhead * 100) +
         "% for interruptions: " + Short(e.interruptions_per_hour) + "/h " +
         (e.rate_from_history ? "observed" : "assumed, no history") + ", " +
         (work.checkpoint_interval_hours
              ? "checkpoint every " + Duration(*work.checkpoint_interval_hours)
              : std::string("no checkpoints: an interruption restarts from zero"));
  }
  if (e.reliability_overhead > 0) {
    s += ", +" + Short(e.reliability_overhead * 100) + "% for reliability " +
         Fixed(e.reliability, 2);
  }
  s += ")";
  if (e.storage_cost > 0) s += " + $" + Fixed(e.storage_cost, 2) + " storage";
  return s + " = $" + Fixed(e.expected_cost, 2);
}

Json ToJson(const CostEstimate& e) {
  Json j = Json::object();
  j["capacity"] = e.interruptible ? "interruptible" : "on-demand";
  j["price_per_hour"] = e.price_per_hour;
  j["perf"] = e.perf;
  j["reliability"] = e.reliability;
  j["reliability_overhead"] = e.reliability_overhead;
  j["interruptions_per_hour"] = e.interruptions_per_hour;
  j["interruption_rate_source"] =
      e.interruptions_per_hour <= 0 ? "none" : (e.rate_from_history ? "history" : "prior");
  if (e.perf_known) {
    j["compute_hours"] = e.compute_hours;
    j["overhead"] = e.overhead;
    j["expected_hours"] = e.expected_hours;
    j["storage_cost"] = e.storage_cost;
    j["expected_cost"] = e.expected_cost;
  } else {
    for (const char* k :
         {"compute_hours", "overhead", "expected_hours", "storage_cost", "expected_cost"}) {
      j[k] = nullptr;
    }
  }
  return j;
}

}  // namespace sluice::market
