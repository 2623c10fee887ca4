#include "sched/scheduler.h"

#include <gtest/gtest.h>

namespace sluice::sched {
namespace {

NodeCapacity Node(std::string id, int gpus, int cpus, double mem, std::string label = "h100-80gb",
                  double price = 2.0) {
  NodeCapacity n;
  n.node_id = id;
  n.name = id;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back({i, label, 80, true});
  n.total_cpus = n.free_cpus = cpus;
  n.total_memory_gb = n.free_memory_gb = mem;
  n.price_per_gpu_hour = price;
  n.price_per_cpu_hour = 0.05;
  return n;
}

JobRequest Job(std::string id, int gpus, int cpus = 1, double mem = 1, int prio = 0,
               int64_t order = 0) {
  JobRequest j;
  j.job_id = id;
  j.gpus = gpus;
  j.cpus = cpus;
  j.memory_gb = mem;
  j.priority = prio;
  j.order = order;
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
  EXPECT_NE(plan.waiting[0].reason.find("1 lack 2 GPUs"), std::string::npos)
      << plan.waiting[0].reason;
}

TEST(SchedulerTest, NoNodesSaysSo) {
  auto plan = Schedule({}, {Job("a", 0)});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("no nodes"), std::string::npos);
}

TEST(SchedulerTest, LabelAndVramAndPriceFilter) {
  auto a100 = Node("a", 1, 8, 32, "a100-40gb", 1.0);
  a100.gpus[0].vram_gb = 40;
  auto h100 = Node("h", 1, 8, 32, "h100-80gb", 3.0);
  JobRequest j = Job("j", 1);
  j.min_vram_gb = 48;
  auto plan = Schedule({a100, h100}, {j});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "h");
  EXPECT_DOUBLE_EQ(plan.placements[0].price_per_hour, 3.0);

  j.max_price_per_hour = 2.0;
  plan = Schedule({a100, h100}, {j});
  ASSERT_EQ(plan.waiting.size(), 1u);
  EXPECT_TRUE(plan.waiting[0].never_fits);
  EXPECT_NE(plan.waiting[0].reason.find("max_price_per_hour"), std::string::npos);

  JobRequest k = Job("k", 1);
  k.gpu_labels = {"a100-40gb"};
  plan = Schedule({a100, h100}, {k});
  ASSERT_EQ(plan.placements.size(), 1u);
  EXPECT_EQ(plan.placements[0].node_id, "a");
}

TEST(SchedulerTest, CheapestThenTightestFit) {
  auto cheap = Node("cheap", 4, 8, 32, "h100-80gb", 1.0);
  auto pricey = Node("pricey", 1, 8, 32, "h100-80gb", 2.0);
  auto plan = Schedule({pricey, cheap}, {Job("j", 1)});
  EXPECT_EQ(plan.placements[0].node_id, "cheap");
  auto small = Node("small", 1, 8, 32, "h100-80gb", 1.0);
  plan = Schedule({cheap, small}, {Job("j", 1)});
  EXPECT_EQ(plan.placements[0].node_id, "small");
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

}  // namespace
}  // namespace sluice::sched
