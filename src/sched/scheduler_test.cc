#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "sched/shape_rankings.h"

namespace sluice::sched {
namespace {

// A node of `gpus` identical GPUs, with the offer the server would derive from it.
NodeCapacity Node(std::string id, int gpus, int cpus, double mem, std::string label = "h100-80gb",
                  double price = 2.0, double perf = 1.0, double vram = 80) {
  NodeCapacity n;
  n.node_id = id;
  n.name = id;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back({i, label, vram, true});
  n.total_cpus = n.free_cpus = cpus;
  n.total_memory_gb = n.free_memory_gb = mem;
  market::Offer o;
  o.id = id + "/" + (gpus > 0 ? label : "cpu");
  o.node = id;
  if (gpus > 0) {
    o.gpu_label = label;
    o.gpu_model = label.substr(0, label.rfind('-'));
    o.vram_gb = vram;
  }
  o.gpus = o.gpus_available = gpus;
  o.cpus = cpus;
  o.memory_gb = mem;
  o.price_per_gpu_hour = price;
  o.price_per_cpu_hour = 0.05;
  o.perf_score = gpus > 0 ? perf : 0;
  n.offers = std::make_shared<std::vector<market::Offer>>(std::vector<market::Offer>{o});
  return n;
}

// A node's offers to change in a test (they are shared and immutable in NodeCapacity).
std::vector<market::Offer>& EditOffers(NodeCapacity& n) {
  auto copy = std::make_shared<std::vector<market::Offer>>(n.Offers());
  n.offers = copy;
  return *copy;
}

JobRequest Job(std::string id, int gpus, int cpus = 1, double mem = 1, int prio = 0,
               int64_t order = 0, std::vector<std::string> labels = {},
               std::optional<double> min_vram = std::nullopt,
               std::optional<double> max_price = std::nullopt) {
  JobRequest j;
  j.job_id = id;
  j.gpus = gpus;
  j.cpus = cpus;
  j.memory_gb = mem;
  j.priority = prio;
  j.order = order;
  j.max_price_per_hour = max_price;
  auto q = market::QueryFromResources(labels, min_vram, gpus, cpus, mem, max_price);
  EXPECT_TRUE(q.ok()) << q.status().message();
  if (q.ok()) j.query = *q;
  return j;
}

TEST(SchedulerTest, GpusAreExclusive) {
  auto plan = Schedule({Node("n1", 2, 16, 64)},
                       {Job("a", 1, 1, 1, 0, 1), Job("b", 1, 1, 1, 0, 2), Job("c", 1, 1, 1, 0, 3)});
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_NE(plan.placements[0].gpus, plan.placements[1].gpus);
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_EQ(plan.waiting[0].job_id, "c");
  EXPECT_FALSE(plan.waiting[0].never_fits);
}

TEST(SchedulerTest, PriorityThenOrder) {
  auto plan =
      Schedule({Node("n1", 1, 4, 8)}, {Job("old", 1, 1, 1, 0, 1), Job("urgent", 1, 1, 1, 5, 2)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "urgent");
}

TEST(SchedulerTest, CpuAndMemoryAreAccounted) {
  auto plan = Schedule({Node("cpu", 0, 4, 8)}, {Job("a", 0, 3, 1, 0, 1), Job("b", 0, 2, 1, 0, 2),
                                                Job("c", 0, 1, 7.5, 0, 3)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "a");
  EXPECT_EQ(plan.waiting.size(), 2u);
}

TEST(SchedulerTest, NeverFitsSaysWhy) {
  auto plan = Schedule({Node("cpu", 0, 4, 8)}, {Job("big", 2, 1, 1)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  // The same explanation `sluice offers 'gpus>=2 ...'` gives.
  EXPECT_NE(plan.waiting[0].reason.find("`gpus>=2` rules out 1"), std::string::npos)
      << plan.waiting[0].reason;
  EXPECT_NE(plan.waiting[0].reason.find("nearest: cpu/cpu lacks gpus>=2"), std::string::npos)
      << plan.waiting[0].reason;
}

TEST(SchedulerTest, NoNodesSaysSo) {
  auto plan = Schedule({}, {Job("a", 0)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("no node can take work"), std::string::npos);
}

TEST(SchedulerTest, LabelAndVramAndPriceFilter) {
  auto a100 = Node("a", 1, 8, 32, "a100-40gb", 1.0, 1.0, 40);
  auto h100 = Node("h", 1, 8, 32, "h100-80gb", 3.0);
  auto plan = Schedule({a100, h100}, {Job("j", 1, 1, 1, 0, 0, {}, 48.0)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "h");
  EXPECT_EQ(plan.placements[0].offer_id, "h/h100-80gb");
  EXPECT_DOUBLE_EQ(plan.placements[0].price_per_hour, 3.0);

  plan = Schedule({a100, h100}, {Job("j", 1, 1, 1, 0, 0, {}, 48.0, 2.0)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("`price<=2` rules out 1"), std::string::npos)
      << plan.waiting[0].reason;

  plan = Schedule({a100, h100}, {Job("k", 1, 1, 1, 0, 0, {"a100"})});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "a");
}

TEST(SchedulerTest, CpuJobBudgetIsCheckedOnTheCpuPrice) {
  // 4 CPUs × $0.05 = $0.20/h.
  auto plan = Schedule({Node("c", 0, 8, 16)}, {Job("ok", 0, 4, 1, 0, 0, {}, {}, 0.25)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.placements[0].price_per_hour, 0.2);
  plan = Schedule({Node("c", 0, 8, 16)}, {Job("poor", 0, 4, 1, 0, 0, {}, {}, 0.1)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(
      plan.waiting[0].reason.find("cost more than max_price_per_hour $0.10 (cheapest $0.20/h)"),
      std::string::npos)
      << plan.waiting[0].reason;
}

TEST(SchedulerTest, PlacesByExpectedCostToCompleteNotHourlyPrice) {
  // slow: $1/GPU-h at a quarter of the reference speed → $4 for a 1-hour job; fast: $2 → $2.
  auto slow = Node("slow", 1, 8, 32, "t4-16gb", 1.0, 0.25, 16);
  auto fast = Node("fast", 1, 8, 32, "h100-80gb", 2.0, 1.0);
  JobRequest j = Job("j", 1);
  j.work.hours = 1;
  auto plan = Schedule({slow, fast}, {j});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "fast");
  EXPECT_DOUBLE_EQ(plan.placements[0].estimate.expected_cost, 2.0);
  j.objective = market::Objective::kPrice;
  EXPECT_EQ(Schedule({slow, fast}, {j}).placements[0].node_id, "slow");
  j.objective = market::Objective::kTime;
  EditOffers(fast)[0].price_per_gpu_hour = 10;  // fastest, but no longer cheapest to complete
  EXPECT_EQ(Schedule({slow, fast}, {j}).placements[0].node_id, "fast");
  j.objective = market::Objective::kCost;
  EXPECT_EQ(Schedule({slow, fast}, {j}).placements[0].node_id, "slow");
}

TEST(SchedulerTest, TightestFitBreaksTies) {
  auto big = Node("big", 4, 8, 32, "h100-80gb", 1.0);
  auto small = Node("small", 1, 8, 32, "h100-80gb", 1.0);
  auto plan = Schedule({big, small}, {Job("j", 1)});
  EXPECT_EQ(plan.placements[0].node_id, "small");
}

TEST(SchedulerTest, AnAllocationIsOneGpuModel) {
  // One a100 and one h100 on a node are two offers of one GPU each: a 2-GPU job fits neither.
  NodeCapacity n = Node("mixed", 1, 8, 32, "a100-80gb", 1.0);
  NodeCapacity h = Node("mixed", 1, 8, 32, "h100-80gb", 2.0);
  n.gpus.push_back({1, "h100-80gb", 80, true});
  EditOffers(n).push_back(h.Offers()[0]);
  auto plan = Schedule({n}, {Job("two", 2)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  plan = Schedule({n}, {Job("one", 1, 1, 1, 0, 0, {"h100"})});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].gpus, std::vector<int>{1});
}

TEST(SchedulerTest, OfflineNodeCountsForNeverFitButTakesNoWork) {
  auto n = Node("n", 1, 4, 8);
  n.online = false;
  auto plan = Schedule({n}, {Job("j", 1)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_FALSE(plan.waiting[0].never_fits);
  EXPECT_TRUE(plan.placements.empty());
}

TEST(SchedulerTest, BusyGpusAreSkipped) {
  auto n = Node("n", 2, 4, 8);
  n.gpus[0].free = false;
  auto plan = Schedule({n}, {Job("j", 1)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].gpus, std::vector<int>{1});
}

// A 2-GPU node whose GPUs are held by attempts: `interruptible` says on which capacity.
NodeCapacity BusyNode(bool interruptible, bool preempting = false) {
  NodeCapacity n = Node("busy", 2, 8, 32);
  for (int i = 0; i < 2; ++i) {
    n.gpus[i].free = false;
    n.running.push_back({"att-" + std::to_string(i), {i}, 1, 1, interruptible, preempting});
  }
  n.free_cpus = 6;
  n.free_memory_gb = 30;
  return n;
}

TEST(SchedulerTest, OnDemandJobPreemptsTheFewestInterruptibleAttempts) {
  Plan plan = Schedule({BusyNode(true)}, {Job("od", 1)});
  EXPECT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].job_id, "od");
  EXPECT_EQ(plan.preemptions[0].node_id, "busy");
  EXPECT_EQ(plan.preemptions[0].attempt_ids, std::vector<std::string>{"att-0"});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_FALSE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("preempted"), std::string::npos);
  // Two GPUs need both.
  plan = Schedule({BusyNode(true)}, {Job("od2", 2)});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].attempt_ids, (std::vector<std::string>{"att-0", "att-1"}));
}

TEST(SchedulerTest, OnlyInterruptibleAttemptsAndOnlyForOnDemandJobs) {
  EXPECT_TRUE(Schedule({BusyNode(false)}, {Job("od", 1)}).preemptions.empty());
  JobRequest spot = Job("spot", 1);
  spot.work.interruptible = true;
  spot.work.fallback_on_demand = true;  // may run on on-demand offers, yet never preempts
  EXPECT_TRUE(Schedule({BusyNode(true)}, {spot}).preemptions.empty());
}

TEST(SchedulerTest, RoomAlreadyBeingFreedIsWaitedFor) {
  Plan plan = Schedule({BusyNode(true, /*preempting=*/true)}, {Job("od", 1)});
  EXPECT_TRUE(plan.preemptions.empty());
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_NE(plan.waiting[0].reason.find("preempted interruptible attempts to stop"),
            std::string::npos);
  // Two on-demand jobs in one plan do not both count on the same victims.
  plan = Schedule({BusyNode(true)}, {Job("a", 2, 1, 1, 0, 1), Job("b", 2, 1, 1, 0, 2)});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].job_id, "a");
}

TEST(SchedulerTest, OnDemandGoesFirstAmongEquals) {
  JobRequest spot = Job("spot", 1, 1, 1, 0, /*order=*/1);
  spot.work.interruptible = true;
  spot.work.fallback_on_demand = true;
  Plan plan = Schedule({Node("n", 1, 4, 8)}, {spot, Job("od", 1, 1, 1, 0, /*order=*/2)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "od");
}

TEST(SchedulerTest, InterruptibleOnlyWorkNeedsInterruptibleCapacity) {
  JobRequest spot = Job("spot", 0, 2);
  spot.work.interruptible = true;
  NodeCapacity n = Node("cpu", 0, 4, 8);
  Plan plan = Schedule({n}, {spot});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("1 matching offer sell no interruptible capacity"),
            std::string::npos)
      << plan.waiting[0].reason;
  EditOffers(n)[0].interruptible_price_per_cpu_hour = 0.01;
  plan = Schedule({n}, {spot});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_TRUE(plan.placements[0].estimate.interruptible);
  EXPECT_DOUBLE_EQ(plan.placements[0].price_per_hour, 0.02);
}

// A random fleet of mixed shapes: labels, GPU counts, CPUs, memory, prices, offline nodes, and
// running attempts (some interruptible, some already preempting).
std::vector<NodeCapacity> RandomFleet(std::mt19937& rng, int count) {
  const char* labels[] = {"h100-80gb", "a100-80gb", "l4-24gb", "rtx4090-24gb"};
  const double vram[] = {80, 80, 24, 24};
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < count; ++i) {
    int kind = static_cast<int>(rng() % 5);  // 4: a CPU node
    int gpus = kind == 4 ? 0 : 1 << (rng() % 4);
    int cpus = 4 << (rng() % 4);
    double price = 0.5 + static_cast<double>(rng() % 8) * 0.25;
    NodeCapacity n =
        Node("n" + std::to_string(i), gpus, cpus, cpus * 4.0, kind == 4 ? "" : labels[kind], price,
             1.0 + kind * 0.5, kind == 4 ? 0 : vram[kind]);
    n.online = rng() % 10 != 0;
    if (rng() % 3 == 0) EditOffers(n)[0].interruptible_price_per_gpu_hour = price / 3;
    if (rng() % 3 == 0) EditOffers(n)[0].interruptible_price_per_cpu_hour = 0.01;
    if (gpus > 1 && rng() % 2 == 0) {  // half its GPUs held by one attempt
      RunningAttempt r{"att-" + std::to_string(i), {}, 1, 2, rng() % 2 == 0, rng() % 4 == 0};
      for (int g = 0; g < gpus / 2; ++g) {
        r.gpus.push_back(g);
        n.gpus[g].free = false;
      }
      n.free_cpus -= 1;
      n.free_memory_gb -= 2;
      n.running.push_back(r);
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

std::vector<JobRequest> RandomQueue(std::mt19937& rng, int count, int nodes) {
  std::vector<JobRequest> jobs;
  for (int i = 0; i < count; ++i) {
    int shape = static_cast<int>(rng() % 9);
    std::vector<std::string> label;
    if (shape == 1) label = {"h100-80gb"};
    if (shape == 2) label = {"l4-24gb"};
    std::optional<double> max_price;
    if (shape == 3) max_price = 2.0;
    int gpus = shape == 0 || shape == 5 ? 0 : 1 << (rng() % 3);
    JobRequest j = Job("j" + std::to_string(i), gpus, 1 + static_cast<int>(rng() % 4),
                       static_cast<double>(1 + rng() % 8), static_cast<int>(rng() % 3),
                       static_cast<int64_t>(i), label, std::nullopt, max_price);
    if (shape == 4 || shape == 5) {
      j.work.interruptible = true;
      j.work.fallback_on_demand = rng() % 2 == 0;
    }
    if (shape == 6) j.objective = market::Objective::kTime;
    if (shape == 7) j.avoid_nodes = {"n" + std::to_string(rng() % nodes)};
    if (shape == 8) j.gpus = 64;  // fits nowhere, ever
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// The plans of two searches, field by field.
void ExpectSamePlan(const Plan& fast, const Plan& slow, int round) {
  ASSERT_EQ(fast.placements.size(), slow.placements.size()) << "round " << round;
  for (size_t i = 0; i < fast.placements.size(); ++i) {
    EXPECT_EQ(fast.placements[i].job_id, slow.placements[i].job_id) << round;
    EXPECT_EQ(fast.placements[i].node_id, slow.placements[i].node_id) << round;
    EXPECT_EQ(fast.placements[i].offer_id, slow.placements[i].offer_id) << round;
    EXPECT_EQ(fast.placements[i].gpus, slow.placements[i].gpus) << round;
    EXPECT_EQ(fast.placements[i].price_per_hour, slow.placements[i].price_per_hour) << round;
    // The whole estimate, which the placement locks in and reports.
    const market::CostEstimate& a = fast.placements[i].estimate;
    const market::CostEstimate& b = slow.placements[i].estimate;
    EXPECT_EQ(std::tie(a.interruptible, a.perf, a.compute_hours, a.overhead, a.reliability,
                       a.expected_hours, a.storage_cost, a.expected_cost),
              std::tie(b.interruptible, b.perf, b.compute_hours, b.overhead, b.reliability,
                       b.expected_hours, b.storage_cost, b.expected_cost))
        << round;
  }
  ASSERT_EQ(fast.waiting.size(), slow.waiting.size()) << round;
  for (size_t i = 0; i < fast.waiting.size(); ++i) {
    EXPECT_EQ(fast.waiting[i].job_id, slow.waiting[i].job_id) << round;
    EXPECT_EQ(fast.waiting[i].never_fits, slow.waiting[i].never_fits) << round;
    EXPECT_EQ(fast.waiting[i].reason, slow.waiting[i].reason) << round;
  }
  ASSERT_EQ(fast.preemptions.size(), slow.preemptions.size()) << round;
  for (size_t i = 0; i < fast.preemptions.size(); ++i) {
    EXPECT_EQ(fast.preemptions[i].job_id, slow.preemptions[i].job_id) << round;
    EXPECT_EQ(fast.preemptions[i].attempt_ids, slow.preemptions[i].attempt_ids) << round;
  }
}

// The same placements and preemptions, in the same order, and the same answer for every job
// that waits, whether listed on its own or answered with its shape (Plan::alike).
// `queue` is the one both were given: every answer's position (Waiting::at, Alike::at) names
// its job there.
void ExpectSameAnswers(const Plan& fast, const Plan& slow,
                       const std::vector<const JobRequest*>& queue, int round) {
  Plan listed = fast;
  listed.waiting.clear();
  listed.alike.clear();
  ExpectSamePlan(listed, Plan{slow.placements, {}, slow.preemptions, {}, {}}, round);
  std::map<std::string, std::pair<bool, std::string>> fast_answers, slow_answers;
  for (const Plan* plan : {&fast, &slow}) {
    for (const auto& w : plan->waiting) {
      ASSERT_LT(w.at, queue.size()) << round;
      EXPECT_EQ(queue[w.at]->job_id, w.job_id) << round << ": answer at the wrong position";
    }
  }
  for (const auto& w : fast.waiting) fast_answers[w.job_id] = {w.never_fits, w.reason};
  for (const auto& a : fast.alike) {
    ASSERT_LT(a.answer, fast.waiting.size()) << round;
    for (size_t at : a.at) {
      ASSERT_LT(at, queue.size()) << round;
      const std::string& id = queue[at]->job_id;
      EXPECT_EQ(fast_answers.count(id), 0u) << round << ": answered twice: " << id;
      fast_answers[id] = {fast.waiting[a.answer].never_fits, fast.waiting[a.answer].reason};
    }
  }
  for (const auto& w : slow.waiting) slow_answers[w.job_id] = {w.never_fits, w.reason};
  EXPECT_EQ(fast_answers, slow_answers) << round;
}

// Answering a settled shape's later jobs together is an optimisation only: the same plan as the
// original scan, on fleets with interruptible attempts (nothing is settled early there) and
// without (most waiting jobs are answered with their shape).
TEST(SchedulerTest, AlikeJobsAnsweredOnceGetTheAnswersOfTheOriginalScan) {
  std::mt19937 rng(78);
  size_t alike = 0;
  for (int round = 0; round < 60; ++round) {
    int node_count = 1 + static_cast<int>(rng() % 40);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    if (round % 2 == 0) {
      for (auto& n : nodes) {
        for (auto& r : n.running) r.interruptible = r.preempting = false;
      }
    }
    std::vector<JobRequest> queue = RandomQueue(rng, 1 + static_cast<int>(rng() % 300), node_count);
    std::vector<const JobRequest*> ptrs;
    for (const auto& j : queue) ptrs.push_back(&j);
    Plan fast = Schedule(nodes, ptrs, {}, {.answer_alike_once = true});
    Plan shared = Schedule(nodes, ptrs, {}, {});
    Plan slow = Schedule(nodes, ptrs, {}, {.share_shapes = false});
    ExpectSameAnswers(fast, slow, ptrs, round);
    EXPECT_EQ(fast.exhausted_shapes, shared.exhausted_shapes) << round;
    if (HasFatalFailure()) return;
    bool preemptible = false;
    for (const auto& n : nodes) {
      for (const auto& r : n.running) preemptible |= r.interruptible || r.preempting;
    }
    if (preemptible) {
      EXPECT_TRUE(fast.alike.empty()) << round;  // room may come: never settled
    }
    for (const auto& a : fast.alike) alike += a.at.size();
  }
  EXPECT_GT(alike, 100u);  // the shortcut was taken, often
}

// Searching once per shape is an optimisation only: on random fleets and queues it gives the
// very plan the original every-job-every-node scan gives.
TEST(SchedulerTest, SharedShapesGiveTheSamePlanAsScanningEveryNode) {
  std::mt19937 rng(12);
  for (int round = 0; round < 40; ++round) {
    int node_count = 1 + static_cast<int>(rng() % 40);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    std::vector<JobRequest> queue = RandomQueue(rng, 1 + static_cast<int>(rng() % 200), node_count);
    std::vector<const JobRequest*> ptrs;
    for (const auto& j : queue) ptrs.push_back(&j);
    Plan fast = Schedule(nodes, ptrs, {}, {.share_shapes = true});
    Plan slow = Schedule(nodes, ptrs, {}, {.share_shapes = false});
    ExpectSamePlan(fast, slow, round);
    if (HasFatalFailure()) return;
  }
}

// With the caller's word that its nodes are in id order (the core's view is), ties between nodes
// are broken by position instead of by comparing ids: the very same plans, on random fleets
// sorted by id, and on a fleet of identical nodes where every placement is decided by the tie.
TEST(SchedulerTest, NodesInIdOrderBreakTiesByPositionWithTheSamePlan) {
  std::mt19937 rng(21);
  for (int round = 0; round < 40; ++round) {
    int node_count = 1 + static_cast<int>(rng() % 40);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    std::sort(nodes.begin(), nodes.end(),
              [](const auto& a, const auto& b) { return a.node_id < b.node_id; });
    std::vector<JobRequest> queue = RandomQueue(rng, 1 + static_cast<int>(rng() % 200), node_count);
    std::vector<const JobRequest*> ptrs;
    for (const auto& j : queue) ptrs.push_back(&j);
    Plan by_position = Schedule(nodes, ptrs, {}, {.nodes_in_id_order = true});
    Plan by_id = Schedule(nodes, ptrs, {}, {});
    ExpectSamePlan(by_position, by_id, round);
    if (HasFatalFailure()) return;
  }
  std::vector<NodeCapacity> alike;
  for (int i = 0; i < 30; ++i) {
    char id[8];
    std::snprintf(id, sizeof id, "n%02d", i);
    alike.push_back(Node(id, 1, 8, 32, "h100-80gb", 2.0));
  }
  std::vector<JobRequest> jobs;
  for (int i = 0; i < 10; ++i) jobs.push_back(Job("j" + std::to_string(i), 1));
  std::vector<const JobRequest*> ptrs;
  for (const auto& j : jobs) ptrs.push_back(&j);
  Plan plan = Schedule(alike, ptrs, {}, {.nodes_in_id_order = true});
  ASSERT_EQ(plan.placements.size(), 10u);
  std::vector<std::string> placed;
  for (const auto& p : plan.placements) placed.push_back(p.node_id);
  std::sort(placed.begin(), placed.end());
  EXPECT_EQ(placed, (std::vector<std::string>{"n00", "n01", "n02", "n03", "n04", "n05", "n06",
                                              "n07", "n08", "n09"}));
  ExpectSamePlan(plan, Schedule(alike, ptrs, {}, {}), 0);
#ifndef NDEBUG
  // Debug builds (the sanitizer run) refuse the word when it is not true.
  std::reverse(alike.begin(), alike.end());
  EXPECT_DEATH(Schedule(alike, ptrs, {}, {.nodes_in_id_order = true}), "not in increasing id");
#endif
}

// The nodes as a pass shares them.
std::vector<std::shared_ptr<const NodeCapacity>> Shared(const std::vector<NodeCapacity>& nodes) {
  std::vector<std::shared_ptr<const NodeCapacity>> shared;
  for (const auto& n : nodes) shared.push_back(std::make_shared<const NodeCapacity>(n));
  return shared;
}

// A submit's own pass holds one job: its shape's only job, found by a single scan rather than a
// heap. The same placement as the original scan, and the never-fits probe (CouldEverRun) says
// "could ever run" exactly when that pass does not answer "never fits".
TEST(SchedulerTest, AJobAloneGetsTheOriginalPlanAndTheProbeAgrees) {
  std::mt19937 rng(56);
  int placed = 0, never = 0;
  for (int round = 0; round < 30; ++round) {
    int node_count = 1 + static_cast<int>(rng() % 40);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    const auto shared = Shared(nodes);
    std::vector<JobRequest> queue = RandomQueue(rng, 40, node_count);
    for (size_t i = 0; i < queue.size(); ++i) {
      Plan fast = Schedule(nodes, {&queue[i]}, {}, {.share_shapes = true});
      Plan slow = Schedule(nodes, {&queue[i]}, {}, {.share_shapes = false});
      ExpectSamePlan(fast, slow, round * 100 + static_cast<int>(i));
      if (HasFatalFailure()) return;
      const bool never_fits = !slow.waiting.empty() && slow.waiting[0].never_fits;
      EXPECT_EQ(CouldEverRun(shared, queue[i], {}), !never_fits) << round << "/" << i;
      placed += static_cast<int>(slow.placements.size());
      never += never_fits ? 1 : 0;
    }
  }
  // Both answers were seen often: the comparison is live.
  EXPECT_GT(placed, 100);
  EXPECT_GT(never, 20);
}

// A plan takes effect on `nodes`: each placement holds its GPUs, CPUs and memory (the node's
// offers stay the same object).
void Apply(const Plan& plan, const std::vector<const JobRequest*>& queue,
           std::vector<NodeCapacity>& nodes) {
  for (const auto& p : plan.placements) {
    const JobRequest* job = nullptr;
    for (const JobRequest* j : queue) job = j->job_id == p.job_id ? j : job;
    ASSERT_NE(job, nullptr);
    for (auto& n : nodes) {
      if (n.node_id != p.node_id) continue;
      for (auto& g : n.gpus) {
        if (std::find(p.gpus.begin(), p.gpus.end(), g.index) != p.gpus.end()) g.free = false;
      }
      n.free_cpus -= job->cpus;
      n.free_memory_gb -= job->memory_gb;
      n.running.push_back(
          {"att-" + p.job_id, p.gpus, job->cpus, job->memory_gb, job->work.interruptible, false});
    }
  }
}

// The last attempt on `n` ends and frees what it held.
void EndLastAttempt(NodeCapacity& n) {
  RunningAttempt r = n.running.back();
  n.running.pop_back();
  for (auto& g : n.gpus) {
    if (std::find(r.gpus.begin(), r.gpus.end(), g.index) != r.gpus.end()) g.free = true;
  }
  n.free_cpus += r.cpus;
  n.free_memory_gb += r.memory_gb;
}

// An incremental pass (the shapes nothing fitted last time searched only on the nodes changed
// since) gives the plan a full scan gives, over passes where placements land, attempts end and
// new jobs arrive.
TEST(SchedulerTest, IncrementalPassesGiveTheSamePlanAsScanningEveryNode) {
  std::mt19937 rng(34);
  int exhausted_seen = 0;
  for (int round = 0; round < 30; ++round) {
    int node_count = 1 + static_cast<int>(rng() % 30);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    std::vector<JobRequest> queue = RandomQueue(rng, 1 + static_cast<int>(rng() % 150), node_count);
    Plan last = Schedule(nodes, queue);
    for (int pass = 0; pass < 5; ++pass) {
      std::set<std::string> changed;
      // The plan takes effect: its placements hold their resources from now on.
      std::vector<const JobRequest*> was;
      for (const auto& j : queue) was.push_back(&j);
      Apply(last, was, nodes);
      if (HasFatalFailure()) return;
      std::set<std::string> placed;
      for (const auto& p : last.placements) placed.insert(p.job_id);
      // Some attempts end and free their node; those nodes are the changed ones.
      for (auto& n : nodes) {
        if (n.running.empty() || rng() % 3 != 0) continue;
        EndLastAttempt(n);
        changed.insert(n.node_id);
      }
      std::vector<JobRequest> next;
      for (auto& j : queue) {
        if (placed.count(j.job_id) == 0) next.push_back(j);
      }
      for (auto& j : RandomQueue(rng, static_cast<int>(rng() % 20), node_count)) {
        j.job_id += "-" + std::to_string(pass);
        j.order += 1000 * (pass + 1);
        next.push_back(j);
      }
      queue = std::move(next);
      std::vector<const JobRequest*> ptrs;
      for (const auto& j : queue) ptrs.push_back(&j);
      exhausted_seen += static_cast<int>(last.exhausted_shapes.size());
      ScheduleOptions incremental;
      incremental.exhausted_before = &last.exhausted_shapes;
      incremental.changed_nodes = &changed;
      incremental.answer_alike_once = pass % 2 == 1;
      Plan fast = Schedule(nodes, ptrs, {}, incremental);
      Plan slow = Schedule(nodes, ptrs, {}, {.share_shapes = false});
      if (incremental.answer_alike_once) {
        ExpectSameAnswers(fast, slow, ptrs, round * 10 + pass);
      } else {
        ExpectSamePlan(fast, slow, round * 10 + pass);
      }
      if (HasFatalFailure()) return;
      last = std::move(fast);
    }
  }
  EXPECT_GT(exhausted_seen, 100);  // the incremental path was taken, often
}

TEST(SchedulerTest, ATotalBudgetPlacesOnlyWhereTheExpectedCostAndAStopFit) {
  // Two 1-GPU nodes at $2/h and $4/h with the same speed; 3 h of work.
  NodeCapacity cheap = Node("cheap", 1, 4, 8, "h100-80gb", 2.0);
  NodeCapacity dear = Node("dear", 1, 4, 8, "h100-80gb", 4.0);
  JobRequest j = Job("j", 1);
  j.work.hours = 3;
  j.budget_left = 6.5;            // $6 expected on `cheap`, $12 on `dear`
  j.budget_reserve_hours = 0.25;  // a 15 min grace period: $0.50 more on `cheap`
  cheap.gpus[0].free = false;     // only `dear` is free: too dear for the budget
  Plan plan = Schedule({cheap, dear}, {j});
  ASSERT_TRUE(plan.placements.empty());
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_FALSE(plan.waiting[0].never_fits);  // `cheap` would do once free
  cheap.gpus[0].free = true;
  plan = Schedule({cheap, dear}, {j});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "cheap");
  // The reserve counts: $6 + $0.50 does not fit in $6.40, so nothing ever does, and says so.
  j.budget_left = 6.4;
  plan = Schedule({cheap, dear}, {j});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("2 matching offers would need more than the $6.40 left "
                                        "of max_total_cost (the least: $6.50"),
            std::string::npos)
      << plan.waiting[0].reason;
  EXPECT_NE(plan.waiting[0].reason.find("sluice budget"), std::string::npos);
  // Resuming from a checkpoint, only a minimum run and the reserve must fit.
  j.budget_left = 1.0;
  j.budget_min_hours = 0.25;
  plan = Schedule({cheap, dear}, {j});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "cheap");
  // The budget is part of the shape: two jobs with different budgets are searched apart.
  JobRequest k = j;
  k.budget_left = 2.0;
  EXPECT_NE(ShapeKey(j), ShapeKey(k));
}

// A 1-GPU node that sells interruptible capacity at $1/h, held by an interruptible attempt
// paying `paying` per hour.
NodeCapacity SpotNode(double paying) {
  NodeCapacity n = Node("spot", 1, 4, 8, "h100-80gb", 3.0);
  EditOffers(n)[0].interruptible_price_per_gpu_hour = 1.0;
  n.gpus[0].free = false;
  n.running.push_back({"att-low", {0}, 1, 1, /*interruptible=*/true, false, paying});
  n.free_cpus = 3;
  n.free_memory_gb = 7;
  return n;
}

JobRequest Bidder(std::string id, std::optional<double> bid, int64_t order = 0) {
  JobRequest j = Job(id, 1, 1, 1, 0, order);
  j.work.interruptible = true;
  j.bid = bid;
  return j;
}

TEST(SchedulerTest, ABidIsThePriceAndMustMeetTheAsk) {
  NodeCapacity n = SpotNode(0);
  n.gpus[0].free = true;
  n.running.clear();
  Plan plan = Schedule({n}, {Bidder("b", 1.75)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.placements[0].price_per_hour, 1.75);  // pays its bid
  EXPECT_TRUE(plan.placements[0].estimate.interruptible);
  plan = Schedule({n}, {Bidder("b", 0.5)});  // under the $1 ask
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("ask more than lifecycle.max_bid_per_hour $0.50"),
            std::string::npos)
      << plan.waiting[0].reason;
  // Without a bid it pays the ask.
  plan = Schedule({n}, {Bidder("plain", std::nullopt)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.placements[0].price_per_hour, 1.0);
}

TEST(SchedulerTest, AHigherBidPreemptsALowerOneAndNeverTheReverse) {
  Plan plan = Schedule({SpotNode(1.5)}, {Bidder("high", 2.0)});
  ASSERT_EQ(plan.preemptions.size(), 1u);
  EXPECT_EQ(plan.preemptions[0].job_id, "high");
  EXPECT_EQ(plan.preemptions[0].attempt_ids, std::vector<std::string>{"att-low"});
  // An equal or lower bid, or no bid, takes nothing from it.
  for (std::optional<double> bid :
       {std::optional<double>(1.5), std::optional<double>(1.2), std::optional<double>()}) {
    plan = Schedule({SpotNode(1.5)}, {Bidder("other", bid)});
    EXPECT_TRUE(plan.preemptions.empty()) << bid.value_or(0);
    ASSERT_EQ(plan.waiting.size(), 1u);
    EXPECT_FALSE(plan.waiting[0].never_fits);
  }
  // Contested free capacity goes to the higher bid, whatever the order of submission.
  NodeCapacity n = SpotNode(0);
  n.gpus[0].free = true;
  n.running.clear();
  plan = Schedule({n}, {Bidder("low", 1.2, /*order=*/1), Bidder("high", 1.9, /*order=*/2)});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].job_id, "high");
  JobRequest a = Bidder("a", 1.2), b = Bidder("b", 1.3);
  EXPECT_NE(ShapeKey(a), ShapeKey(b));
}

TEST(SchedulerTest, ShapeKeyTellsApartWhatPlacementReads) {
  JobRequest a = Job("a", 1, 2, 4);
  JobRequest b = Job("b", 1, 2, 4, /*prio=*/5, /*order=*/9);
  EXPECT_EQ(ShapeKey(a), ShapeKey(b));  // priority and order decide when, not where
  JobRequest c = b;
  c.memory_gb = 4.5;
  EXPECT_NE(ShapeKey(a), ShapeKey(c));
  c = b;
  c.work.interruptible = true;
  EXPECT_NE(ShapeKey(a), ShapeKey(c));
  c = b;
  c.objective = market::Objective::kTime;
  EXPECT_NE(ShapeKey(a), ShapeKey(c));
  c = b;
  c.max_price_per_hour = 3;
  EXPECT_NE(ShapeKey(a), ShapeKey(c));
  c = Job("c", 1, 2, 4, 0, 0, {"h100-80gb"});
  EXPECT_NE(ShapeKey(a), ShapeKey(c));
  c = b;
  c.avoid_nodes = {"n1"};
  EXPECT_EQ(ShapeKey(c), "");  // searched on its own
}

// What a caller keeps with its nodes so a pass need not read them all (ScheduleOptions::fleet):
// read off the nodes, and given back, the same plan as the pass finding them itself.
TEST(SchedulerTest, FleetFactsAreWhatThePassWouldFindAndGiveTheSamePlan) {
  std::vector<std::shared_ptr<const NodeCapacity>> nodes;
  nodes.push_back(std::make_shared<NodeCapacity>(Node("a", 1, 4, 8)));
  NodeCapacity paused = Node("b", 1, 4, 8);
  paused.online = false;
  paused.paused = "paused (reclaimed)";
  nodes.push_back(std::make_shared<NodeCapacity>(paused));
  FleetFacts calm = FleetFactsOf(nodes);
  EXPECT_FALSE(calm.preemptible);
  EXPECT_EQ(calm.paused, std::vector<size_t>{1});
  NodeCapacity spot = Node("c", 1, 4, 8);
  spot.running.push_back({"att-1", {0}, 1, 1, /*interruptible=*/true});
  spot.gpus[0].free = false;
  nodes.push_back(std::make_shared<NodeCapacity>(spot));
  const FleetFacts facts = FleetFactsOf(nodes);
  EXPECT_TRUE(facts.preemptible);
  EXPECT_TRUE(HasPreemptible(*nodes[2]));
  EXPECT_FALSE(HasPreemptible(*nodes[0]));
  std::vector<JobRequest> queue = {Job("j1", 1), Job("j2", 1), Job("j3", 1)};
  std::vector<const JobRequest*> ptrs;
  for (const auto& j : queue) ptrs.push_back(&j);
  ScheduleOptions given;
  given.fleet = &facts;
  given.answer_alike_once = true;
  Plan with = Schedule(nodes, ptrs, {}, given);
  Plan without = Schedule(nodes, ptrs, {}, {.answer_alike_once = true});
  ExpectSameAnswers(with, without, ptrs, 0);
  // j1 takes a; j2 preempts the interruptible attempt on c (so nothing is settled early).
  ASSERT_EQ(with.placements.size(), 1u);
  EXPECT_EQ(with.placements[0].node_id, "a");
  EXPECT_EQ(with.preemptions.size(), 1u);
}

// A caller's run of jobs (JobRun) over a list it keeps, counting what the pass took.
class ListRun : public JobRun {
 public:
  ListRun(std::vector<const JobRequest*> jobs, std::vector<size_t> at)
      : jobs_(std::move(jobs)), at_(std::move(at)) {}
  RunJob Next() override {
    if (taken_ == jobs_.size()) return {};
    ++taken_;
    return {jobs_[taken_ - 1], at_[taken_ - 1]};
  }
  size_t taken() const { return taken_; }
  const std::vector<const JobRequest*>& jobs() const { return jobs_; }

 private:
  std::vector<const JobRequest*> jobs_;
  std::vector<size_t> at_;
  size_t taken_ = 0;
};

// Runs (ScheduleOptions::runs) are read only until their shape is settled: on random fleets,
// with each shape's jobs split between the queue and one or two runs, the pass places the same
// jobs in the same places as with the whole queue given at once, answers every job it took as
// that pass does, and every job a run was not asked for waits in that pass as the run's last
// taken job does. With interruptible attempts running (nothing is settled early) and without
// answer_alike_once, every run is taken whole.
TEST(SchedulerTest, RunsAreReadOnlyUntilTheirShapeIsSettled) {
  std::mt19937 rng(1207);
  size_t untaken = 0, whole_runs_checked = 0;
  for (int round = 0; round < 120; ++round) {
    const bool calm = round % 3 != 2;  // else interruptible attempts may run
    int node_count = 1 + static_cast<int>(rng() % (round % 2 == 0 ? 30 : 4));
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    if (calm) {
      for (auto& n : nodes) {
        for (auto& r : n.running) r.interruptible = r.preempting = false;
      }
    }
    std::vector<std::shared_ptr<const NodeCapacity>> shared;
    for (const auto& n : nodes) shared.push_back(std::make_shared<const NodeCapacity>(n));
    const FleetFacts facts = FleetFactsOf(shared);
    std::vector<JobRequest> queue = RandomQueue(rng, 1 + static_cast<int>(rng() % 300), node_count);
    if (round % 2 == 1) {
      for (auto& j : queue) j.cpus = 1, j.memory_gb = 1;  // fewer shapes, deeper ones
    }
    for (auto& j : queue) j.shape = ShapeKey(j);  // as the server keeps them
    std::vector<const JobRequest*> all;
    for (const auto& j : queue) all.push_back(&j);
    // Each shape's jobs in order, dealt to the queue (one in five), or to one of two runs.
    std::map<std::string, std::vector<const JobRequest*>> shapes;
    for (const JobRequest* j : all) shapes[ShapeKey(*j)].push_back(j);
    std::vector<const JobRequest*> eager;
    std::vector<const JobRequest*> by_position;  // the queue's positions, then the runs'
    std::vector<std::vector<const JobRequest*>> dealt;
    for (auto& [key, jobs] : shapes) {
      if (key.empty()) {
        eager.insert(eager.end(), jobs.begin(), jobs.end());
        continue;
      }
      std::sort(jobs.begin(), jobs.end(), [](const JobRequest* a, const JobRequest* b) {
        return std::make_pair(-a->priority, a->order) < std::make_pair(-b->priority, b->order);
      });
      const size_t first = dealt.size();
      dealt.resize(first + 2);
      for (const JobRequest* j : jobs) {
        const auto to = rng() % 5;
        if (to == 0) {
          eager.push_back(j);
        } else {
          dealt[first + (to % 2)].push_back(j);
        }
      }
    }
    by_position = eager;
    std::vector<std::unique_ptr<ListRun>> runs;
    std::vector<JobRun*> handed;
    for (auto& jobs : dealt) {
      if (jobs.empty()) continue;
      std::vector<size_t> at;
      for (const JobRequest* j : jobs) {
        at.push_back(by_position.size());
        by_position.push_back(j);
      }
      runs.push_back(std::make_unique<ListRun>(jobs, at));
      handed.push_back(runs.back().get());
    }
    ScheduleOptions how{.answer_alike_once = round % 5 != 4, .fleet = &facts};
    Plan whole = Schedule(shared, all, {}, how);
    how.runs = &handed;
    Plan part = Schedule(shared, eager, {}, how);
    Plan listed = part;
    listed.waiting.clear();
    listed.alike.clear();
    ExpectSamePlan(listed, Plan{whole.placements, {}, whole.preemptions, {}, {}}, round);
    EXPECT_EQ(part.exhausted_shapes, whole.exhausted_shapes) << round;
    // Every answer of the whole queue's pass, by job id.
    std::map<std::string, std::pair<bool, std::string>> whole_answers;
    for (const auto& w : whole.waiting) whole_answers[w.job_id] = {w.never_fits, w.reason};
    for (const auto& a : whole.alike) {
      for (size_t at : a.at) {
        whole_answers[all[at]->job_id] = {whole.waiting[a.answer].never_fits,
                                          whole.waiting[a.answer].reason};
      }
    }
    std::map<std::string, std::pair<bool, std::string>> part_answers;
    for (const auto& w : part.waiting) {
      ASSERT_LT(w.at, by_position.size()) << round;
      EXPECT_EQ(by_position[w.at]->job_id, w.job_id) << round << ": answer at the wrong position";
      part_answers[w.job_id] = {w.never_fits, w.reason};
    }
    for (const auto& a : part.alike) {
      for (size_t at : a.at) {
        part_answers[by_position[at]->job_id] = {part.waiting[a.answer].never_fits,
                                                 part.waiting[a.answer].reason};
      }
    }
    for (const auto& [id, answer] : part_answers) {
      ASSERT_EQ(whole_answers.count(id), 1u) << round << ": " << id;
      EXPECT_EQ(whole_answers.at(id), answer) << round << ": " << id;
    }
    for (const auto& run : runs) {
      if (facts.preemptible || !how.answer_alike_once) {
        EXPECT_EQ(run->taken(), run->jobs().size()) << round << ": a run was cut short";
        ++whole_runs_checked;
        continue;
      }
      if (run->taken() == run->jobs().size()) continue;
      ASSERT_GT(run->taken(), 0u) << round;
      const std::string& last_id = run->jobs()[run->taken() - 1]->job_id;
      ASSERT_EQ(part_answers.count(last_id), 1u) << round << ": a run stopped at a placed job";
      for (size_t k = run->taken(); k < run->jobs().size(); ++k) {
        const std::string& id = run->jobs()[k]->job_id;
        EXPECT_EQ(part_answers.count(id), 0u) << round << ": " << id;
        ASSERT_EQ(whole_answers.count(id), 1u) << round << ": " << id;
        EXPECT_EQ(whole_answers.at(id), part_answers.at(last_id)) << round << ": " << id;
        ++untaken;
      }
    }
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(untaken, 150u);  // runs were cut short, often: the comparison is live
  EXPECT_GT(whole_runs_checked, 50u);
}

// One change to a random node between passes: an attempt ends, its provider reprices (a new
// offers object), it goes offline or comes back, or a node joins before it (positions move).
void Disturb(std::mt19937& rng, std::vector<NodeCapacity>& nodes, const std::string& tag) {
  const int change = static_cast<int>(rng() % 10);
  NodeCapacity& n = nodes[rng() % nodes.size()];
  if (change < 4 && !n.running.empty()) {
    EndLastAttempt(n);
  } else if (change < 6) {
    EditOffers(n)[0].price_per_gpu_hour = 0.25 + static_cast<double>(rng() % 12) * 0.25;
  } else if (change == 6) {
    n.online = !n.online;
  } else if (change == 7) {
    std::vector<NodeCapacity> more = RandomFleet(rng, 1);
    more[0].node_id = more[0].name = "m" + tag;
    for (auto& o : EditOffers(more[0])) {
      o.id = more[0].node_id + o.id.substr(o.id.find('/'));
      o.node = more[0].node_id;
    }
    nodes.insert(nodes.begin() + static_cast<std::ptrdiff_t>(rng() % nodes.size()),
                 std::move(more[0]));
  }
}

// A shape's ranking kept between passes (ShapeRankings) is an optimisation only: over a stream
// of one-job passes (submits) while placements land, attempts end, nodes' offers change and
// nodes join, every pass given the kept rankings places as the original scan does.
TEST(SchedulerTest, RankedShapesKeptBetweenPassesGiveTheSamePlanAsAScan) {
  std::mt19937 rng(91);
  size_t ranked_passes = 0, placed = 0;
  for (int round = 0; round < 12; ++round) {
    int node_count = 5 + static_cast<int>(rng() % 40);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    // A few shapes, asked for again and again, as a user's sweep submits them.
    std::vector<JobRequest> shapes = RandomQueue(rng, 6, node_count);
    for (auto& j : shapes) j.avoid_nodes.clear();
    ShapeRankings rankings;
    for (int pass = 0; pass < 60; ++pass) {
      JobRequest job = shapes[rng() % shapes.size()];
      job.job_id = "p" + std::to_string(pass);
      const auto shared = Shared(nodes);
      const size_t entries_before = rankings.entries();
      Plan fast = Schedule(shared, {&job}, {}, {.rankings = &rankings});
      Plan slow = Schedule(shared, {&job}, {}, {.share_shapes = false});
      ExpectSamePlan(fast, slow, round * 100 + pass);
      if (HasFatalFailure()) return;
      ranked_passes += rankings.entries() > 0 && entries_before > 0 ? 1 : 0;
      placed += slow.placements.size();
      Apply(slow, {&job}, nodes);
      if (HasFatalFailure()) return;
      Disturb(rng, nodes, std::to_string(pass));
    }
  }
  EXPECT_GT(ranked_passes, 300u);  // the rankings were used, not only built
  EXPECT_GT(placed, 200u);
}

// The same for passes of many jobs: a shape with several jobs reads its ranking (made by a pass
// of one job of the shape) only as far as its placements need, its heap filled from it, with and
// without alike jobs answered once, and gives the plan of the original scan.
TEST(SchedulerTest, RankedShapesInPassesOfManyJobsGiveTheSamePlanAsAScan) {
  std::mt19937 rng(93);
  size_t placed = 0, ranked = 0;
  for (int round = 0; round < 10; ++round) {
    int node_count = 5 + static_cast<int>(rng() % 40);
    std::vector<NodeCapacity> nodes = RandomFleet(rng, node_count);
    if (round % 2 == 0) {
      for (auto& n : nodes) {
        for (auto& r : n.running) r.interruptible = r.preempting = false;
      }
    }
    std::vector<JobRequest> shapes = RandomQueue(rng, 5, node_count);
    ShapeRankings rankings;
    for (int pass = 0; pass < 30; ++pass) {
      std::vector<JobRequest> queue;
      // Passes of one job rank their shape (on its second ask); the others read the rankings.
      const int jobs = pass % 3 == 0 ? 1 : 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < jobs; ++i) {
        queue.push_back(shapes[rng() % shapes.size()]);
        queue.back().job_id = "p" + std::to_string(pass) + "-" + std::to_string(i);
        queue.back().order = pass * 100 + i;
      }
      std::vector<const JobRequest*> ptrs;
      for (const auto& j : queue) ptrs.push_back(&j);
      const auto shared = Shared(nodes);
      const bool alike = pass % 2 == 1;
      Plan fast = Schedule(shared, ptrs, {}, {.answer_alike_once = alike, .rankings = &rankings});
      Plan slow = Schedule(shared, ptrs, {}, {.share_shapes = false});
      if (alike) {
        ExpectSameAnswers(fast, slow, ptrs, round * 100 + pass);
      } else {
        ExpectSamePlan(fast, slow, round * 100 + pass);
      }
      if (HasFatalFailure()) return;
      ranked += rankings.entries() > 0 ? 1 : 0;
      placed += slow.placements.size();
      Apply(slow, ptrs, nodes);
      if (HasFatalFailure()) return;
      for (int d = 0; d < 3; ++d)
        Disturb(rng, nodes, std::to_string(pass) + "-" + std::to_string(d));
    }
  }
  EXPECT_GT(ranked, 200u);
  EXPECT_GT(placed, 300u);
}

}  // namespace
}  // namespace sluice::sched
