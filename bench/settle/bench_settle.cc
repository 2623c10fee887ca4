// bench_settle: what billing a busy fleet costs the server core's lock (issue 12: nothing slow
// under the lock; docs/design-notes.md "Metering and the ledger").
//
// Two worlds are built side by side, each a ServerCore on its own SQLite store with a fake
// clock: `--nodes` verified 64-CPU nodes running `--attempts` one-CPU jobs between them, so
// that many meters are open. Then, in rounds that alternate between the worlds, the clock moves
// on by the settle interval and every node heartbeats (its lease renewed); then
//
//   * the baseline world bills every open meter in one commit (ServerCore::SettleMeters, what
//     the tick did before settlement went in slices), timed;
//   * the other world ticks, 200 ms of fake time apart, until its settlement round has billed
//     every meter, settle_slice meters a tick; each tick is timed.
//
// Each call runs under the core's lock, so its wall time is how long everything else (heartbeats,
// exits, submits) would have waited; once a minute a tick also reads the reliability history off
// the lock, which is timed with it (against the slices, never for them). Prints the longest wait in
// each world and its ratio, and the round's total time against the one commit's.
//
//   bench_settle [--nodes N] [--attempts A] [--rounds K] [--slice S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../core_world.h"
#include "../flags.h"
#include "../timing.h"
#include "server/server_core.h"
#include "server/test_fleet.h"

using sluice::Json;
using sluice::server::CoreOptions;
using Clock = std::chrono::steady_clock;
using sluice::bench::Ms;

namespace {

constexpr int64_t kIntervalMs = 30'000;
constexpr int64_t kTickMs = 200;  // the server's tick (server_command.cc)
constexpr int kCores = 64;

[[noreturn]] void Die(const std::string& what) { sluice::bench::Die("bench_settle", what); }

struct World : sluice::bench::CoreWorld {
  // The interval passes; every node's agent heartbeats, as live agents would have.
  void Live() {
    clock.Advance(kIntervalMs);
    for (size_t i = 0; i < nodes.size(); ++i) {
      auto s = core->AgentMessage(nodes[i], links[i].get(), Json{{"type", "heartbeat"}});
      if (!s.ok()) Die(name + ": heartbeat: " + s.ToString());
    }
  }
};

void Build(World& w, size_t nodes, size_t attempts, size_t slice) {
  CoreOptions options;
  options.settle_interval_ms = kIntervalMs;
  options.settle_slice = slice;
  options.heartbeat_grace_ms = 2 * kIntervalMs;
  options.lease_ms = 2 * kIntervalMs;
  options.budget_check_interval_ms = 0;  // only the settlement is measured
  w.Open("bench_settle", options);
  w.EnrolBusyFleet(nodes, attempts, kCores);
  w.core->Tick();  // the first tick's once-a-minute work, out of the way of the timed ones
}

// The baseline: every meter billed in one commit.
void SettleAtOnce(World& w) {
  w.Live();
  const auto start = Clock::now();
  if (auto s = w.core->SettleMeters(); !s.ok()) Die(w.name + ": settle: " + s.ToString());
  const double ms = Ms(Clock::now() - start);
  w.rounds.push_back({ms, ms, 1});
}

// Ticks until the round has billed every meter (a tick that commits nothing ends it).
void SettleInSlices(World& w) {
  w.Live();
  w.TickThroughRound(kTickMs);
}

using sluice::bench::FlagValue;

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_settle [--nodes N] [--attempts A] [--rounds K] [--slice S]\n"
        "  the longest hold of the core's lock while A running attempts on N 64-CPU nodes are\n"
        "  billed S meters a tick, against all of them in one commit (the baseline); medians\n"
        "  of K rounds\n");
    return 0;
  }
  const size_t attempts = FlagValue(argc, argv, "--attempts", 10000);
  const size_t nodes = FlagValue(argc, argv, "--nodes", (attempts + kCores - 1) / kCores);
  const size_t rounds = std::max<size_t>(1, FlagValue(argc, argv, "--rounds", 5));
  const size_t slice = std::max<size_t>(1, FlagValue(argc, argv, "--slice", 512));

  World once, sliced;
  once.name = "one commit";
  sliced.name = "slices of " + std::to_string(slice);
  const auto setup = Clock::now();
  Build(once, nodes, attempts, slice);
  Build(sliced, nodes, attempts, slice);
  std::printf("set up %zu nodes running %zu attempts, twice, in %.1f s\n", nodes, attempts,
              std::chrono::duration<double>(Clock::now() - setup).count());
  for (size_t r = 0; r < rounds; ++r) {
    SettleAtOnce(once);
    SettleInSlices(sliced);
  }
  using sluice::bench::RoundTimes;
  const double once_longest = once.MedianOf(&RoundTimes::longest_ms);
  const double sliced_longest = sliced.MedianOf(&RoundTimes::longest_ms);
  const double once_total = once.MedianOf(&RoundTimes::total_ms);
  const double sliced_total = sliced.MedianOf(&RoundTimes::total_ms);
  std::printf("%-16s longest hold %8.1f ms  (baseline); the round %8.1f ms in 1 commit\n",
              once.name.c_str(), once_longest, once_total);
  std::printf(
      "%-16s longest hold %8.1f ms  %.3fx the baseline; the round %8.1f ms over %zu ticks "
      "(%.2fx the baseline's time)\n",
      sliced.name.c_str(), sliced_longest, sliced_longest / once_longest, sliced_total,
      sliced.rounds.empty() ? 0 : sliced.rounds.back().ticks, sliced_total / once_total);
  return 0;
}
