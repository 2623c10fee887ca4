// bench_budget: what the per-second budget check (ServerCore::EnforceBudgetsLocked) costs the
// server core's lock while a big fleet's attempts run (issue 12: nothing slow under the lock).
//
// One world: a ServerCore on its own SQLite store with a fake clock, `--attempts` one-CPU jobs
// running on 64-CPU nodes. In each of `--rounds` rounds the clock moves on 200 ms and the core
// ticks (no check: the baseline, a plain tick of the same world, in the same round), then the
// rest of the second and it ticks again (the check is due: it walks every running attempt). Each
// tick runs under the core's lock, so its wall time is how long heartbeats, exits and submits would
// wait. Prints the medians, the check's cost (the difference) and the ratio of the two ticks.
//
//   bench_budget [--attempts A] [--rounds K]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../core_world.h"
#include "../flags.h"
#include "../timing.h"

using sluice::server::CoreOptions;
using Clock = std::chrono::steady_clock;
using sluice::bench::FlagValue;
using sluice::bench::Median;
using sluice::bench::Ms;

namespace {

constexpr int kCores = 64;
constexpr int64_t kTickMs = 200;  // the server's tick (server_command.cc)

double TimedTick(sluice::bench::CoreWorld& w) {
  const auto start = Clock::now();
  w.core->Tick();
  return Ms(Clock::now() - start);
}

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_budget [--attempts A] [--rounds K]\n"
        "  a tick that runs the per-second budget check over A running attempts, against a\n"
        "  plain tick of the same world (the baseline); medians of K rounds\n");
    return 0;
  }
  const size_t attempts = std::max<size_t>(1, FlagValue(argc, argv, "--attempts", 33000));
  const size_t rounds = std::max<size_t>(1, FlagValue(argc, argv, "--rounds", 20));
  const size_t nodes = (attempts + kCores - 1) / kCores;

  sluice::bench::CoreWorld w;
  CoreOptions options;
  options.budget_check_interval_ms = 1000;  // the server's
  options.settle_interval_ms = 0;           // only the check is measured
  options.heartbeat_grace_ms = 3'600'000;   // no heartbeats needed in the timed hour
  options.lease_ms = 3'600'000;
  options.reliability_in_background = true;
  const auto setup = Clock::now();
  w.Open("bench_budget", options);
  w.EnrolBusyFleet(nodes, attempts, kCores);
  std::printf("set up %zu nodes running %zu attempts in %.1f s\n", nodes, attempts,
              std::chrono::duration<double>(Clock::now() - setup).count());
  w.clock.Advance(60'000);
  w.core->Tick();  // the first tick's once-a-minute work, out of the way of the timed ones
  std::vector<double> check, plain;
  for (size_t r = 0; r < rounds; ++r) {
    w.clock.Advance(kTickMs);  // the check ran at the last tick: not due
    plain.push_back(TimedTick(w));
    w.clock.Advance(1000 - kTickMs);  // a second since it ran: due
    check.push_back(TimedTick(w));
  }
  const double with = Median(check), without = Median(plain);
  std::printf("plain tick                %8.2f ms  (baseline)\n", without);
  std::printf(
      "tick with the check       %8.2f ms  %.1fx the baseline; the check %.2f ms over %zu "
      "attempts\n",
      with, with / without, with - without, attempts);
  return 0;
}
