// bench_placement: what one placement costs the server core when the queue behind it is deep
// (issue 12: placements per second must not fall with the queue's length).
//
// Two worlds are built side by side, each a ServerCore on its own SQLite store with a fake clock:
// `--nodes` verified CPU nodes, every one holding a running job, and behind them a queue of
// waiting jobs of the same shape, `--shallow` deep (the baseline) in one world and `--queued` deep
// in the other. Then, in rounds that alternate between the worlds so the host's drift hits both
// alike, one running job at a time exits; the core commits the exit, runs its placement pass and
// places the next queued job on the freed node, and the agent reports it started. That is one
// placement, timed from the exit to the `started` commit.
//
// Without the scheduler thread every exit runs a pass of its own, so this is the cost of a pass
// and its commits, not the batched rate of a real server (bench/swarm measures that end to end).
// Prints placements/s per world and the deep world's ratio to the baseline: 1.0 means a deep
// queue costs a placement nothing.
//
// With `--batch B` (B > 1), B running jobs exit together instead, as a busy fleet's do: their
// exits are handled as one inbox batch (one commit), one pass places B queued jobs, and their B
// `started` messages are handled as one batch too. That is the core's share of the swarm's
// release (bench/swarm) without the sockets, the TLS and the simulated agents.
//
// Then, in the same rounds, `--submits` jobs are submitted into each world while every node is
// full: what a submit costs the core (its commit, never-fits probe and own pass) with that queue.
// The queue is the admin's; with `--as-user 1` the timed submits are a user's, so they also pay
// for the per-account quota on unfinished jobs (--max-active-jobs-per-account) as a tenant's
// submit does; without it they are the admin's, exempt from it, as before.
//
// With `--wal-batching 0` both worlds' stores write each WAL frame as SQLite does (two writes)
// instead of a commit's frames together (store/wal_write_batching.h): runs with 0 and 1,
// alternating, compare the two. Either way the WAL writes SQLite asked for and those that reached
// the files are printed per placement and per submit.
//
//   bench_placement [--nodes N] [--queued Q] [--shallow S] [--releases R] [--rounds K]
//                   [--submits M] [--shapes H] [--batch B] [--as-user 1] [--wal-batching 0|1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../core_world.h"
#include "../flags.h"
#include "server/server_core.h"
#include "server/test_fleet.h"
#include "store/wal_write_batching.h"

using sluice::Json;
using sluice::server::CoreOptions;
using sluice::server::ServerCore;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) { sluice::bench::Die("bench_placement", what); }

// Job k of a queue of `shapes` shapes (they differ in memory only; all take a whole node).
sluice::spec::JobSpec Spec(size_t k = 0, size_t shapes = 1) {
  sluice::spec::JobSpec s;
  s.name = "bench";
  s.run = "true";
  s.resources.cpus = 4;  // a whole node: one job per node
  s.resources.memory_gb = 1 + static_cast<double>(k % shapes) / 1000;
  return s;
}

// WAL writes SQLite asked for, and those that reached the files (store/wal_write_batching.h
// counts them; with --wal-batching 0 its VFS is not used and both stay 0).
struct WalWrites {
  long long asked = 0, written = 0;
  void Add(const sluice::store::sqlite::WalBatchCounts& before,
           const sluice::store::sqlite::WalBatchCounts& after) {
    asked += after.asked - before.asked;
    written += after.written - before.written;
  }
};

// One core with its fleet: node i's agent is links[i].
struct World : sluice::bench::CoreWorld {
  std::vector<std::string> running;  // node i's running attempt
  size_t queued = 0;                 // jobs still waiting
  double seconds = 0;                // timed
  size_t placed = 0;
  int64_t commits = 0;      // the store's, during the timed placements
  int64_t pages = 0;        // pages those commits wrote
  int64_t full_passes = 0;  // the placement passes during them, by how far they searched
  int64_t incremental_passes = 0;
  int64_t rechecked_nodes = 0;  // the nodes incremental passes searched again
  double submit_seconds = 0;    // timed, submits into the full fleet
  size_t submitted = 0;
  WalWrites release_wal, submit_wal;  // WAL writes asked for and made, timed placements / submits

  // The attempt the core last assigned to node i, started as its agent would (queued behind
  // the node's other messages when the core holds them: --batch).
  void StartLast(size_t i) {
    const std::vector<std::string> assigned = sluice::server::testing::TakeAssigned(*links[i]);
    const std::string att = assigned.empty() ? "" : assigned.back();
    if (att.empty() || att == running[i]) Die(name + ": node " + nodes[i] + " was assigned no job");
    running[i] = att;
    Post(i, sluice::proto::Started{att}, "started");
  }

  // Queues node i's message; with the core holding messages (--batch) it waits for Handle().
  void Post(size_t i, sluice::proto::AgentMessage msg, const char* what) {
    auto s = core->PostAgentMessage(nodes[i], links[i], std::move(msg),
                                    [this, what](const sluice::Status& st) {
                                      if (!st.ok()) Die(name + ": " + what + ": " + st.ToString());
                                    });
    if (!s.ok()) Die(name + ": post: " + s.ToString());
  }
  void Handle() { core->HandleWaitingAgentMessages(); }
};

void Build(World& w, size_t nodes, size_t queued, size_t shapes, bool hold, bool wal_batching) {
  w.store_options.wal_write_batching = wal_batching;
  CoreOptions options;
  options.hold_agent_messages = hold;  // --batch: messages wait for World::Handle
  // The quota is checked (--as-user), never reached: the user's submits all queue.
  options.max_active_jobs_per_account = 1 << 30;
  w.Open("bench_placement", options);
  for (size_t i = 0; i < nodes; ++i) {
    w.Enrol(sluice::server::testing::CpuHello("node-" + std::to_string(i)));
    w.running.emplace_back();
  }
  // One job per node, placed and started; then the queue.
  for (size_t i = 0; i < nodes + queued; ++i) {
    auto job = w.core->SubmitJob(Spec(i, shapes), "", /*queue_unschedulable=*/true);
    if (!job.ok()) Die("submit: " + job.status().ToString());
  }
  for (size_t i = 0; i < nodes; ++i) w.StartLast(i);
  w.Handle();
  w.queued = queued;
}

// `count` submits of jobs that wait (every node is full): the submit's commit, its never-fits
// probe and its own placement pass.
void Submit(World& w, size_t count, size_t shapes, bool as_user) {
  sluice::server::SubmitOptions o;
  o.exempt_from_quota = !as_user;  // the admin's are
  if (as_user) o.owner = "bench-user";
  const auto wal_before = sluice::store::sqlite::WalBatchCountsSoFar();
  auto start = Clock::now();
  for (size_t k = 0; k < count; ++k, ++w.submitted, ++w.queued) {
    auto job = w.core->SubmitJob(Spec(k, shapes), "", o);
    if (!job.ok()) Die(w.name + ": submit: " + job.status().ToString());
  }
  w.submit_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  w.submit_wal.Add(wal_before, sluice::store::sqlite::WalBatchCountsSoFar());
}

// `count` placements: node after node, its job exits and the next queued one takes its place;
// `batch` nodes at a time (their exits handled together, then their `started`).
void Release(World& w, size_t& next, size_t count, size_t batch) {
  const sluice::store::StoreCounters before = w.store->Counters();
  const auto passes_before = w.core->PlacementPasses();
  const auto wal_before = sluice::store::sqlite::WalBatchCountsSoFar();
  auto start = Clock::now();
  size_t done = 0;
  while (done < count && w.queued > 0) {
    const size_t n = std::min({batch, count - done, w.queued});
    std::vector<size_t> freed;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = next++ % w.nodes.size();
      freed.push_back(i);
      w.Post(i, sluice::proto::Exited{w.running[i], 0, 0}, "exited");
    }
    w.Handle();  // the exits' commit, and the pass they call for
    for (size_t i : freed) w.StartLast(i);
    w.Handle();
    done += n;
    w.queued -= n;
    w.placed += n;
  }
  w.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  w.release_wal.Add(wal_before, sluice::store::sqlite::WalBatchCountsSoFar());
  const sluice::store::StoreCounters after = w.store->Counters();
  w.commits += after.commits - before.commits;
  w.pages += after.pages_written - before.pages_written;
  const auto passes = w.core->PlacementPasses();
  w.full_passes += passes.full - passes_before.full;
  w.incremental_passes += passes.incremental - passes_before.incremental;
  w.rechecked_nodes += passes.rechecked_nodes - passes_before.rechecked_nodes;
}

using sluice::bench::FlagValue;

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_placement [--nodes N] [--queued Q] [--shallow S] [--releases R] "
        "[--rounds K] [--submits M] [--shapes H] [--batch B] [--as-user 1] [--wal-batching 0|1]\n"
        "  placements/s of the server core with Q jobs queued behind N full nodes, against "
        "the same with S queued (the baseline); the jobs are of H shapes (default 1); B jobs "
        "exit "
        "together (default 1); --as-user 1: the timed submits are a user's (quota checked), "
        "not the admin's; --wal-batching 0: WAL frames written as SQLite does, two writes each "
        "(default 1: a commit's frames together)\n");
    return 0;
  }
  const size_t nodes = FlagValue(argc, argv, "--nodes", 2000);
  const size_t queued = FlagValue(argc, argv, "--queued", 50000);
  const size_t shallow = FlagValue(argc, argv, "--shallow", 100);
  const size_t rounds = FlagValue(argc, argv, "--rounds", 5);
  const size_t releases = std::min<size_t>(FlagValue(argc, argv, "--releases", 500), shallow);
  const size_t submits = FlagValue(argc, argv, "--submits", 100);
  const size_t shapes = std::max<size_t>(1, FlagValue(argc, argv, "--shapes", 1));
  const size_t batch = std::max<size_t>(1, FlagValue(argc, argv, "--batch", 1));
  const bool as_user = FlagValue(argc, argv, "--as-user", 0) != 0;
  const bool wal_batching = FlagValue(argc, argv, "--wal-batching", 1) != 0;
  if (nodes == 0 || releases == 0 || rounds == 0)
    Die("--nodes, --releases and --rounds must be > 0");
  if (releases * rounds > shallow) Die("--shallow must be at least --releases × --rounds");

  World base, deep;
  base.name = "queue of " + std::to_string(shallow);
  deep.name = "queue of " + std::to_string(queued);
  auto setup = Clock::now();
  Build(base, nodes, shallow, shapes, batch > 1, wal_batching);
  Build(deep, nodes, queued, shapes, batch > 1, wal_batching);
  std::printf("WAL writes %s\n", wal_batching ? "batched per commit (store/wal_write_batching.h)"
                                              : "as SQLite makes them (--wal-batching 0)");
  std::printf("set up %zu nodes and %zu + %zu jobs of %zu shapes in %.1f s\n", nodes,
              nodes + shallow, nodes + queued, shapes,
              std::chrono::duration<double>(Clock::now() - setup).count());
  size_t next_base = 0, next_deep = 0;
  for (size_t r = 0; r < rounds; ++r) {
    Release(base, next_base, releases, batch);
    Release(deep, next_deep, releases, batch);
    Submit(base, submits, shapes, as_user);
    Submit(deep, submits, shapes, as_user);
  }
  const double base_rate = static_cast<double>(base.placed) / base.seconds;
  const double deep_rate = static_cast<double>(deep.placed) / deep.seconds;
  std::printf("%-20s %8zu placements  %9.0f placements/s  (baseline)\n", base.name.c_str(),
              base.placed, base_rate);
  std::printf("%-20s %8zu placements  %9.0f placements/s  %.2fx the baseline\n", deep.name.c_str(),
              deep.placed, deep_rate, deep_rate / base_rate);
  for (const World* w : {&base, &deep}) {
    const double placed = static_cast<double>(std::max<size_t>(w->placed, 1));
    std::printf("%-20s %8.2f commits and %.1f pages written per placement\n", w->name.c_str(),
                static_cast<double>(w->commits) / placed, static_cast<double>(w->pages) / placed);
    std::printf(
        "%-20s %8lld full and %lld incremental passes, %.2f nodes searched again per "
        "placement\n",
        w->name.c_str(), static_cast<long long>(w->full_passes),
        static_cast<long long>(w->incremental_passes),
        static_cast<double>(w->rechecked_nodes) / placed);
    if (wal_batching) {
      std::printf(
          "%-20s %8.1f WAL writes asked for and %.2f made per placement; %.1f and %.2f "
          "per submit\n",
          w->name.c_str(), static_cast<double>(w->release_wal.asked) / placed,
          static_cast<double>(w->release_wal.written) / placed,
          static_cast<double>(w->submit_wal.asked) /
              static_cast<double>(std::max<size_t>(w->submitted, 1)),
          static_cast<double>(w->submit_wal.written) /
              static_cast<double>(std::max<size_t>(w->submitted, 1)));
    }
  }
  const double base_submits = static_cast<double>(base.submitted) / base.submit_seconds;
  const double deep_submits = static_cast<double>(deep.submitted) / deep.submit_seconds;
  std::printf("%-20s %8zu submits     %9.0f submits/s     (baseline; every node full)\n",
              base.name.c_str(), base.submitted, base_submits);
  std::printf("%-20s %8zu submits     %9.0f submits/s     %.2fx the baseline\n", deep.name.c_str(),
              deep.submitted, deep_submits, deep_submits / base_submits);
  return 0;
}
