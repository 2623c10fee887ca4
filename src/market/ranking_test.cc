#include "market/ranking.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

namespace sluice::market {
namespace {

Offer MakeOffer(std::string id, double price, double perf, double spot = 0) {
  Offer o;
  o.id = std::move(id);
  o.gpu_label = "a100-80gb";
  o.gpus = o.gpus_available = 8;
  o.price_per_gpu_hour = price;
  o.interruptible_price_per_gpu_hour = spot;
  o.perf_score = perf;
  return o;
}

Workload Gpus(int gpus, double hours) {
  Workload w;
  w.gpus = gpus;
  w.hours = hours;
  return w;
}

TEST(RankingTest, OnDemandCostIsPriceTimesWorkOverPerf) {
  CostEstimate e = EstimateCost(MakeOffer("o", 3.0, 2.0), Gpus(2, 4), CostModel{});
  EXPECT_FALSE(e.interruptible);
  EXPECT_DOUBLE_EQ(e.price_per_hour, 6.0);  // 2 GPUs × $3
  EXPECT_DOUBLE_EQ(e.compute_hours, 2.0);   // 4 h ÷ perf 2
  EXPECT_DOUBLE_EQ(e.overhead, 0.0);        // on-demand is not interrupted
  EXPECT_DOUBLE_EQ(e.expected_hours, 2.0);
  EXPECT_DOUBLE_EQ(e.expected_cost, 12.0);
}

TEST(RankingTest, AnUnreliableNodeCostsTheRestartsItIsExpectedToCause) {
  CostModel model;  // restart 1 min
  Offer shaky = MakeOffer("shaky", 3.0, 2.0);
  shaky.reliability = 0.5;  // one extra placement expected
  Workload w = Gpus(2, 4);
  w.checkpoint_interval_hours = 0.5;
  CostEstimate e = EstimateCost(shaky, w, model);
  // (1/0.5 − 1) × (1/60 h + 0.5/2 h) ÷ 2 compute hours.
  EXPECT_NEAR(e.reliability_overhead, (1.0 / 60 + 0.25) / 2, 1e-12);
  EXPECT_NEAR(e.expected_hours, 2 * (1 + e.reliability_overhead), 1e-12);
  EXPECT_NE(Why(e, w).find("for reliability 0.50"), std::string::npos) << Why(e, w);
  // At the same price, the reliable node ranks first.
  Offer steady = MakeOffer("steady", 3.0, 2.0);
  auto ranked = Rank({shaky, steady}, w, model, Objective::kCost, 10);
  ASSERT_EQ(ranked.size(), 2u);
  EXPECT_EQ(ranked[0].offer.id, "steady");
  EXPECT_DOUBLE_EQ(ranked[0].estimate.reliability_overhead, 0.0);
}

TEST(RankingTest, CpuWorkIsPricedPerCpuOrByTheWholeInstance) {
  Workload w;
  w.cpus = 4;
  w.hours = 2;
  Offer agent = MakeOffer("agent", 0, 0);
  agent.gpus = 0;
  agent.price_per_cpu_hour = 0.05;
  CostEstimate e = EstimateCost(agent, w, CostModel{});
  EXPECT_TRUE(e.perf_known);  // CPU work has no GPU perf to know
  EXPECT_DOUBLE_EQ(e.price_per_hour, 0.2);
  EXPECT_DOUBLE_EQ(e.expected_cost, 0.4);
  // A catalog GPU instance is not sold by CPU: CPU work rents all of it.
  EXPECT_DOUBLE_EQ(AllocationPrice(MakeOffer("inst", 1.5, 1), w, false), 12.0);
}

TEST(RankingTest, CpuWorkOnInterruptibleCapacityUsesTheInterruptibleCpuPrice) {
  Workload w;
  w.cpus = 4;
  w.interruptible = true;
  Offer node = MakeOffer("node", 0, 0);
  node.gpus = 0;
  node.price_per_cpu_hour = 0.05;
  EXPECT_FALSE(SellsInterruptible(node, w));
  EXPECT_FALSE(EstimateCost(node, w, CostModel{}).interruptible);
  node.interruptible_price_per_cpu_hour = 0.02;
  EXPECT_TRUE(SellsInterruptible(node, w));
  CostEstimate e = EstimateCost(node, w, CostModel{});
  EXPECT_TRUE(e.interruptible);
  EXPECT_DOUBLE_EQ(e.price_per_hour, 0.08);
}

TEST(RankingTest, InterruptibleUsesTheSpotPriceAndThePriorWithoutHistory) {
  Workload w = Gpus(1, 10);
  w.interruptible = true;
  w.checkpoint_interval_hours = 1.0;
  CostModel model;
  model.prior_interruptions_per_hour = 0.1;
  model.restart_hours = 0;
  CostEstimate e = EstimateCost(MakeOffer("o", 3.0, 1.0, 1.0), w, model);
  EXPECT_TRUE(e.interruptible);
  EXPECT_FALSE(e.rate_from_history);
  EXPECT_DOUBLE_EQ(e.price_per_hour, 1.0);
  EXPECT_DOUBLE_EQ(e.interruptions_per_hour, 0.1);
  // (e^{λτ} − 1) / (λτ) − 1 with λτ = 0.1.
  EXPECT_NEAR(e.overhead, std::expm1(0.1) / 0.1 - 1, 1e-12);
  EXPECT_NEAR(e.expected_hours, 10 * std::expm1(0.1) / 0.1, 1e-9);

  Offer with_history = MakeOffer("h", 3.0, 1.0, 1.0);
  with_history.interruptions_per_hour = 0.0;  // observed: never interrupted
  CostEstimate h = EstimateCost(with_history, w, model);
  EXPECT_TRUE(h.rate_from_history);
  EXPECT_DOUBLE_EQ(h.overhead, 0.0);
  EXPECT_DOUBLE_EQ(h.expected_cost, 10.0);
}

TEST(RankingTest, WithoutSpotCapacityInterruptibleWorkIsPricedOnDemand) {
  Workload w = Gpus(1, 1);
  w.interruptible = true;
  w.fallback_on_demand = true;
  CostEstimate e = EstimateCost(MakeOffer("o", 3.0, 1.0), w, CostModel{});
  EXPECT_FALSE(e.interruptible);
  EXPECT_DOUBLE_EQ(e.price_per_hour, 3.0);
  EXPECT_DOUBLE_EQ(e.overhead, 0.0);
}

TEST(RankingTest, CheckpointsShrinkTheOverheadAndStorageIsPriced) {
  Workload w = Gpus(1, 20);
  w.interruptible = true;
  CostModel model;
  model.prior_interruptions_per_hour = 0.1;
  Offer o = MakeOffer("o", 3.0, 1.0, 1.0);
  CostEstimate none = EstimateCost(o, w, model);
  w.checkpoint_interval_hours = 0.5;
  w.checkpoint_size_gb = 730;  // × $0.02/GB-month ÷ 730 h = $0.02 per expected hour
  CostEstimate half_hour = EstimateCost(o, w, model);
  // Restarting 20 h of work from zero at 0.1/h costs (e^2 − 1)/2 − 1 ≈ 219% extra; half-hour
  // checkpoints cut that to a few percent.
  EXPECT_GT(none.overhead, 2.0);
  EXPECT_LT(half_hour.overhead, 0.05);
  EXPECT_NEAR(half_hour.storage_cost, 0.02 * half_hour.expected_hours, 1e-9);
  EXPECT_NEAR(half_hour.expected_cost, 1.0 * half_hour.expected_hours + half_hour.storage_cost,
              1e-9);
}

// The closed form against a simulation of the process it models: exponential interruptions,
// work since the last checkpoint lost, a fixed restart time. Independent of the formula.
TEST(RankingTest, OverheadMatchesASimulation) {
  struct Case {
    double rate, interval, restart, work;
  };
  // The last two leave a shorter final segment: 10 h = 4 + 4 + 2, 7.6 h = 2 + 2 + 2 + 1.6.
  for (const Case c :
       {Case{0.5, 1.0, 0.1, 10}, Case{0.05, 4.0, 0.02, 24}, Case{2.0, 0.25, 0, 3},
        Case{0.3, 10.0, 0.05, 10}, Case{0.5, 4.0, 0.05, 10}, Case{1.0, 2.0, 0.02, 7.6}}) {
    std::mt19937_64 rng(42);
    std::exponential_distribution<double> next(c.rate);
    const int runs = 20000;
    double total = 0;
    for (int r = 0; r < runs; ++r) {
      double left = c.work;
      while (left > 1e-12) {
        const double segment = std::min(c.interval, left);
        const double t = next(rng);
        if (t >= segment) {
          total += segment;
          left -= segment;
        } else {
          total += t + c.restart;
        }
      }
    }
    Workload w = Gpus(1, c.work);
    w.interruptible = true;
    w.checkpoint_interval_hours = c.interval;
    Offer o = MakeOffer("o", 1, 1, 1);
    o.interruptions_per_hour = c.rate;
    CostModel model;
    model.restart_hours = c.restart;
    const double simulated = total / runs;
    EXPECT_NEAR(EstimateCost(o, w, model).expected_hours / simulated, 1.0, 0.02)
        << "rate " << c.rate << " interval " << c.interval;
  }
}

TEST(RankingTest, ObjectivesOrderDifferently) {
  // cheap_slow: $1 × 4 h = $4; fast: $3 × 1 h = $3 (cheapest to complete, fastest);
  // mid: $1.5 × 2 h = $3, 2 h.
  std::vector<Offer> offers = {MakeOffer("cheap_slow", 1.0, 0.25), MakeOffer("fast", 3.0, 1.0),
                               MakeOffer("mid", 1.5, 0.5)};
  Workload w = Gpus(1, 1);
  auto ids = [](const std::vector<RankedOffer>& r) {
    std::vector<std::string> out;
    for (const auto& x : r) out.push_back(x.offer.id);
    return out;
  };
  // Cost ties between fast and mid at $3; the shorter time wins.
  EXPECT_EQ(ids(Rank(offers, w, CostModel{}, Objective::kCost, 10)),
            (std::vector<std::string>{"fast", "mid", "cheap_slow"}));
  EXPECT_EQ(ids(Rank(offers, w, CostModel{}, Objective::kTime, 10)),
            (std::vector<std::string>{"fast", "mid", "cheap_slow"}));
  EXPECT_EQ(ids(Rank(offers, w, CostModel{}, Objective::kPrice, 10)),
            (std::vector<std::string>{"cheap_slow", "mid", "fast"}));
  offers[1].price_per_gpu_hour = 3.2;  // now $3.2 to complete: mid is cheaper, fast is faster
  EXPECT_EQ(ids(Rank(offers, w, CostModel{}, Objective::kCost, 1)),
            (std::vector<std::string>{"mid"}));
  EXPECT_EQ(ids(Rank(offers, w, CostModel{}, Objective::kTime, 1)),
            (std::vector<std::string>{"fast"}));
}

TEST(RankingTest, UnknownPerfRanksLastAndSaysWhy) {
  std::vector<Offer> offers = {MakeOffer("unknown", 0.1, 0), MakeOffer("known", 5, 1)};
  auto r = Rank(offers, Gpus(1, 1), CostModel{}, Objective::kCost, 10);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].offer.id, "known");
  EXPECT_FALSE(r[1].estimate.perf_known);
  EXPECT_NE(Why(r[1].estimate, Gpus(1, 1)).find("no perf score"), std::string::npos);
  EXPECT_TRUE(ToJson(r[1].estimate)["expected_cost"].is_null());
  // By hourly price the unknown one is simply cheaper.
  EXPECT_EQ(Rank(offers, Gpus(1, 1), CostModel{}, Objective::kPrice, 1)[0].offer.id, "unknown");
}

TEST(RankingTest, WhySpellsOutTheArithmetic) {
  Workload w = Gpus(1, 4);
  w.interruptible = true;
  w.checkpoint_interval_hours = 0.5;
  Offer o = MakeOffer("o", 8, 1.6, 4);
  CostEstimate e = EstimateCost(o, w, CostModel{});
  std::string why = Why(e, w);
  EXPECT_NE(why.find("$4.00/h interruptible"), std::string::npos) << why;
  EXPECT_NE(why.find("4 h ÷ perf 1.60"), std::string::npos) << why;
  EXPECT_NE(why.find("0.05/h assumed, no history"), std::string::npos) << why;
  EXPECT_NE(why.find("checkpoint every 30m"), std::string::npos) << why;
  char total[32];
  std::snprintf(total, sizeof total, "= $%.2f", e.expected_cost);
  EXPECT_NE(why.find(total), std::string::npos) << why;
}

// Property: on random offers, Rank returns the top k in exactly the order the objective defines,
// recomputed here from the formula (on-demand: cost = gpus × price × hours ÷ perf).
TEST(RankingTest, RandomOffersRankInTheObjectivesOrder) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> price(0.2, 8), perf(0, 4);
  for (int round = 0; round < 200; ++round) {
    std::vector<Offer> offers;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      // Prices on a coarse grid so ties happen and the id tie-break is exercised.
      double p = std::round(price(rng) * 4) / 4;
      double f = rng() % 5 == 0 ? 0 : std::round(perf(rng) * 4) / 4;  // some unknown perf
      offers.push_back(MakeOffer("o" + std::to_string(i), p, f));
    }
    Workload w = Gpus(1 + static_cast<int>(rng() % 8), 1 + static_cast<double>(rng() % 48));
    for (Objective obj : {Objective::kCost, Objective::kTime, Objective::kPrice}) {
      // The oracle's sort key: (unknown perf last unless by price, primary, secondary, id).
      auto key = [&](const Offer& o) {
        const double hourly = w.gpus * o.price_per_gpu_hour;
        const bool known = o.perf_score > 0;
        const double hours = known ? w.hours / o.perf_score : 0;
        const double cost = hourly * hours;
        if (obj == Objective::kPrice)
          return std::make_tuple(0, hourly, known ? 0.0 : 1.0, cost, o.id);
        if (!known) return std::make_tuple(1, hourly, 0.0, 0.0, o.id);
        if (obj == Objective::kTime) return std::make_tuple(0, hours, cost, 0.0, o.id);
        return std::make_tuple(0, cost, hours, 0.0, o.id);
      };
      std::vector<Offer> oracle = offers;
      std::sort(oracle.begin(), oracle.end(),
                [&](const Offer& a, const Offer& b) { return key(a) < key(b); });
      const size_t k = 1 + rng() % offers.size();
      auto ranked = Rank(offers, w, CostModel{}, obj, k);
      ASSERT_EQ(ranked.size(), k);
      for (size_t i = 0; i < k; ++i) {
        ASSERT_EQ(ranked[i].offer.id, oracle[i].id)
            << "round " << round << " objective " << Name(obj) << " position " << i;
      }
    }
  }
}

TEST(RankingTest, ObjectiveNames) {
  EXPECT_EQ(ObjectiveFromName("Cost"), Objective::kCost);
  EXPECT_EQ(ObjectiveFromName("time"), Objective::kTime);
  EXPECT_EQ(ObjectiveFromName("price"), Objective::kPrice);
  EXPECT_EQ(ObjectiveFromName("cheap"), std::nullopt);
  EXPECT_EQ(Name(Objective::kTime), "time");
}

}  // namespace
}  // namespace sluice::market
