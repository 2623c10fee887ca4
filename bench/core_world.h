// One server core for a bench: its own SQLite store in a fresh temp dir, a fake clock, and the
// fleet it enrols (node i's agent is links[i]). The benches that time the core in-process
// (bench/placement, bench/settle, bench/uptime, bench/budget) build their worlds on it.
// Header-only, bench-only; a failure exits with `program: what` (bench/flags.h's Die).
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "common/clock.h"
#include "common/crypto.h"
#include "flags.h"
#include "server/server_core.h"
#include "server/test_fleet.h"
#include "spec/job_spec.h"
#include "store/sqlite_store.h"
#include "store/store.h"
#include "timing.h"

namespace sluice::bench {

// What the ticks of one round held the core's lock (each tick runs under it): a round of work the
// tick does in slices (settlement, uptime), or a baseline's one call.
struct RoundTimes {
  double longest_ms = 0;  // the longest tick
  double total_ms = 0;    // all of them together
  size_t ticks = 0;       // how many ticks committed
};

struct CoreWorld {
  std::string name;
  std::filesystem::path dir;
  FakeClock clock;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<server::ServerCore> core;
  std::vector<std::string> nodes;
  std::vector<std::shared_ptr<server::testing::RecordingLink>> links;
  std::vector<RoundTimes> rounds;           // kept by TickThroughRound (or a bench's own baseline)
  store::SqliteStoreOptions store_options;  // how Open opens the store

  CoreWorld() = default;
  CoreWorld(const CoreWorld&) = delete;
  CoreWorld& operator=(const CoreWorld&) = delete;
  ~CoreWorld() {
    core.reset();
    store.reset();
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }

  // A store under a fresh temp dir named for `program`, and a core on it with `options`, loaded.
  void Open(const char* program, const server::CoreOptions& options) {
    program_ = program;
    dir = std::filesystem::temp_directory_path() / (std::string(program) + "-" + RandomHex(6));
    std::filesystem::create_directories(dir);
    auto st = store::OpenSqliteStore((dir / "sluice.db").string(), store_options);
    if (!st.ok()) Fail("store: " + st.status().ToString());
    store = std::move(*st);
    core = std::make_unique<server::ServerCore>(store.get(), &clock, options);
    if (auto s = core->Load(); !s.ok()) Fail("load: " + s.ToString());
  }

  // Enrols a node as an agent would (server/test_fleet.h's EnrolNode); it becomes nodes.back().
  void Enrol(const proto::Hello& hello) {
    auto link = std::make_shared<server::testing::RecordingLink>();
    auto node = server::testing::EnrolNode(*core, link, hello);
    if (!node.ok()) Fail("enrol: " + node.status().ToString());
    nodes.push_back(*node);
    links.push_back(std::move(link));
  }

  // A busy fleet: `node_count` nodes of `cores` CPUs (priced $0.05 a CPU-hour) running `attempts`
  // one-CPU jobs between them, every assignment started as its agent would.
  void EnrolBusyFleet(size_t node_count, size_t attempts, int cores) {
    for (size_t i = 0; i < node_count; ++i) {
      proto::Hello h = server::testing::CpuHello("node-" + std::to_string(i));
      h.inventory.cpu_cores = cores;
      h.inventory.memory_mib = 512 * 1024;
      h.price_per_cpu_hour = 0.05;
      Enrol(h);
    }
    spec::JobSpec spec;
    spec.name = "bench";
    spec.run = "true";
    spec.resources.cpus = 1;
    spec.resources.memory_gb = 1;
    for (size_t k = 0; k < attempts; ++k) {
      auto job = core->SubmitJob(spec, "");
      if (!job.ok()) Fail("submit: " + job.status().ToString());
    }
    size_t started = 0;
    for (size_t i = 0; i < node_count; ++i) {
      for (const auto& att : server::testing::TakeAssigned(*links[i])) {
        auto s = core->AgentMessage(nodes[i], links[i].get(),
                                    Json{{"type", "started"}, {"attempt_id", att}});
        if (!s.ok()) Fail("started: " + s.ToString());
        ++started;
      }
    }
    if (started != attempts) {
      Fail("placed " + std::to_string(started) + " of " + std::to_string(attempts) +
           " jobs: give more nodes");
    }
  }

  // Ticks `tick_ms` of fake time apart until a tick commits nothing: the round is over. `timed`
  // runs one tick and returns its wall time, or nothing for a tick the figures leave out (it
  // still counts toward the round's end); without it, each core->Tick() is timed. Keeps the
  // figures in `rounds`.
  RoundTimes TickThroughRound(int64_t tick_ms,
                              const std::function<std::optional<double>()>& timed = {}) {
    RoundTimes r;
    for (;;) {
      const int64_t commits = store->Counters().commits;
      std::optional<double> ms;
      if (timed) {
        ms = timed();
      } else {
        const auto start = std::chrono::steady_clock::now();
        core->Tick();
        ms = Ms(std::chrono::steady_clock::now() - start);
      }
      if (store->Counters().commits == commits) break;
      if (ms) {
        r.longest_ms = std::max(r.longest_ms, *ms);
        r.total_ms += *ms;
      }
      ++r.ticks;
      clock.Advance(tick_ms);
      if (r.ticks > 100000) Fail(name + ": the round does not end");
    }
    rounds.push_back(r);
    return r;
  }
  // The median over `rounds` of one of their figures.
  double MedianOf(double RoundTimes::*figure) const {
    std::vector<double> v;
    for (const RoundTimes& r : rounds) v.push_back(r.*figure);
    return Median(std::move(v));
  }

  [[noreturn]] void Fail(const std::string& what) const { Die(program_.c_str(), what); }

 private:
  std::string program_ = "bench";
};

}  // namespace sluice::bench
