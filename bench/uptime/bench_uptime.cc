// bench_uptime: what the once-a-minute extension of every online node's stored uptime span costs
// the server core's lock (issue 12: nothing slow under the lock; docs/design-notes.md, the
// reliability notes under "Trust").
//
// Two worlds are built side by side, each a ServerCore on its own SQLite store with a fake clock
// and `--nodes` verified, connected, idle nodes:
//
//   * the baseline extends every node's span in one commit (uptime_slice as large as the fleet:
//     what the tick did before the extension went in slices);
//   * the other, `--slice` nodes a tick (uptime_slice).
//
// In rounds that alternate between the worlds, a minute of fake time passes (every node
// heartbeats, as live agents would), then the world ticks 200 ms of fake time apart until its
// round has committed every span. Each tick runs under the core's lock, so its wall time is how
// long everything else (heartbeats, exits, submits) would have waited. The minute's tick also
// starts the reliability history's read, off the lock on a thread of its own as in the server;
// a later tick applies the scores under the lock. That tick (told by the lock's count of tick
// holds: two, not one) is timed apart and left out of the round's, in both worlds: it is the
// same work in both, and a round waits for it to be done before it begins. Prints the median
// over rounds of each world's longest tick and the ratio, and the scores' apply.
//
//   bench_uptime [--nodes N] [--rounds K] [--slice S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
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
using sluice::bench::Median;
using sluice::bench::Ms;

namespace {

constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kTickMs = 200;  // the server's tick (server_command.cc)

[[noreturn]] void Die(const std::string& what) { sluice::bench::Die("bench_uptime", what); }

struct World : sluice::bench::CoreWorld {
  std::vector<double> apply_ms;  // each tick that applied a reliability read
};

void Build(World& w, size_t nodes, size_t slice) {
  CoreOptions options;
  options.uptime_slice = slice;
  options.reliability_in_background = true;  // as the server reads it (server_command.cc)
  options.heartbeat_grace_ms = 3 * kMinuteMs;
  options.lease_ms = 3 * kMinuteMs;
  options.settle_interval_ms = 0;  // only the uptime round is measured
  options.budget_check_interval_ms = 0;
  w.Open("bench_uptime", options);
  for (size_t i = 0; i < nodes; ++i) {
    w.Enrol(sluice::server::testing::CpuHello("node-" + std::to_string(i)));
  }
}

// How many times a tick has held the core's lock (TickState, and ApplyReliability when a read
// is done).
uint64_t TickHolds(const World& w) {
  for (const auto& [holder, holds] : w.core->LockHoldsByHolder()) {
    if (holder == "tick") return holds.count();
  }
  Die("the core's lock keeps no \"tick\" holder");
}

// One tick, timed; true when it applied a reliability read (its time goes to apply_ms).
bool TimedTick(World& w, double& ms) {
  const uint64_t holds = TickHolds(w);
  const auto start = Clock::now();
  w.core->Tick();
  ms = Ms(Clock::now() - start);
  const bool applied = TickHolds(w) - holds >= 2;
  if (applied) w.apply_ms.push_back(ms);
  return applied;
}

// A minute passes with every node heartbeating; then ticks until the round has committed every
// span (a tick that commits nothing ends it), and until the minute's reliability read is
// applied.
void Round(World& w) {
  w.clock.Advance(kMinuteMs);
  for (size_t i = 0; i < w.nodes.size(); ++i) {
    auto s = w.core->AgentMessage(w.nodes[i], w.links[i].get(), Json{{"type", "heartbeat"}});
    if (!s.ok()) Die(w.name + ": heartbeat: " + s.ToString());
  }
  bool applied = false;
  double ms = 0;
  const sluice::bench::RoundTimes r = w.TickThroughRound(kTickMs, [&]() -> std::optional<double> {
    if (!TimedTick(w, ms)) return ms;
    applied = true;
    return std::nullopt;  // timed apart, in apply_ms
  });
  if (r.ticks == 0) Die(w.name + ": the minute's tick committed nothing");
  // The read runs on its own thread: wait for a tick to apply it, so the next round begins
  // without it.
  for (const auto deadline = Clock::now() + std::chrono::seconds(60); !applied;) {
    if (Clock::now() > deadline) Die(w.name + ": the reliability read never ended");
    applied = TimedTick(w, ms);
  }
}

using sluice::bench::FlagValue;

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_uptime [--nodes N] [--rounds K] [--slice S]\n"
        "  the longest tick (a hold of the core's lock) while the uptime spans of N online\n"
        "  nodes are extended S a tick, against all of them in one commit (the baseline);\n"
        "  medians of K rounds\n");
    return 0;
  }
  const size_t nodes = std::max<size_t>(1, FlagValue(argc, argv, "--nodes", 10000));
  const size_t rounds = std::max<size_t>(1, FlagValue(argc, argv, "--rounds", 5));
  const size_t slice = std::max<size_t>(1, FlagValue(argc, argv, "--slice", 512));

  World once, sliced;
  once.name = "one commit";
  sliced.name = "slices of " + std::to_string(slice);
  const auto setup = Clock::now();
  Build(once, nodes, nodes);
  Build(sliced, nodes, slice);
  std::printf("set up %zu online nodes, twice, in %.1f s\n", nodes,
              std::chrono::duration<double>(Clock::now() - setup).count());
  // The first tick's round (and the first reliability read), out of the way of the timed ones.
  Round(once);
  Round(sliced);
  for (World* w : {&once, &sliced}) {
    w->rounds.clear();
    w->apply_ms.clear();
  }
  for (size_t r = 0; r < rounds; ++r) {
    Round(once);
    Round(sliced);
  }
  using sluice::bench::RoundTimes;
  const double once_longest = once.MedianOf(&RoundTimes::longest_ms);
  const double sliced_longest = sliced.MedianOf(&RoundTimes::longest_ms);
  const double once_total = once.MedianOf(&RoundTimes::total_ms);
  const double sliced_total = sliced.MedianOf(&RoundTimes::total_ms);
  std::printf("%-16s longest tick %8.1f ms  (baseline); the round %8.1f ms over %zu tick(s)\n",
              once.name.c_str(), once_longest, once_total, once.rounds.back().ticks);
  std::printf(
      "%-16s longest tick %8.1f ms  %.3fx the baseline; the round %8.1f ms over %zu ticks "
      "(%.2fx the baseline's time)\n",
      sliced.name.c_str(), sliced_longest, sliced_longest / once_longest, sliced_total,
      sliced.rounds.back().ticks, sliced_total / once_total);
  std::printf("the reliability scores' apply (a tick of its own, both worlds): median %.1f ms\n",
              Median([&] {
                std::vector<double> all = once.apply_ms;
                all.insert(all.end(), sliced.apply_ms.begin(), sliced.apply_ms.end());
                return all;
              }()));
  return 0;
}
