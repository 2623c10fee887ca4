// bench_wal_writes: what one store commit costs with the WAL frames written as SQLite writes them
// (two pwrite calls a page: the baseline) and gathered per commit (store/wal_write_batching.h).
//
// Two SQLite stores side by side, alike but for that option, each seeded with `--jobs` job rows.
// Then, in rounds that alternate between them so the host's drift hits both alike, `--commits`
// batches are committed into each, every batch like an agent-message batch of the swarm's
// release: `--batch` jobs picked at random (the same ones in both stores) change state, and each
// gets an event appended. Random jobs mean random pages, as in the swarm, where the jobs placed
// together lie far apart in the table. Prints commits/s per store and the ratio, the pages each
// commit wrote, and the WAL writes SQLite asked for and those made.
//
// With `--cache-mib M` the two stores both gather their writes and differ instead in the
// writer's page cache: SQLite's default (2 MiB, the baseline) against M MiB.
//
//   bench_wal_writes [--jobs N] [--batch B] [--commits C] [--rounds K] [--cache-mib M]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "../flags.h"
#include "common/crypto.h"
#include "store/sqlite_store.h"
#include "store/wal_write_batching.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace st = sluice::store;

[[noreturn]] void Die(const std::string& what) { sluice::bench::Die("bench_wal_writes", what); }

st::JobRecord Job(size_t i) {
  st::JobRecord j;
  j.id = "job-" + std::to_string(1000000 + i);
  j.name = "bench " + std::to_string(i);
  j.spec = sluice::Json{{"name", "bench"},
                        {"resources", {{"cpus", 4}, {"memory_gb", 1}}},
                        {"run", "python train.py --epochs 10"}};
  j.workdir_blob = std::string(64, 'a');
  j.state = st::JobState::kQueued;
  j.priority = 0;
  j.submitted_ms = 1000 + static_cast<int64_t>(i);
  j.owner = "admin";
  return j;
}

struct Side {
  std::string name;
  fs::path dir;
  std::unique_ptr<st::Store> store;
  std::vector<st::JobRecord> jobs;
  double seconds = 0;
  int64_t commits = 0, pages = 0;
  long long asked = 0, made = 0;

  ~Side() {
    store.reset();
    std::error_code ignored;
    if (!dir.empty()) fs::remove_all(dir, ignored);
  }
};

void Open(Side& s, const std::string& name, bool batching, int cache_mib, size_t jobs) {
  s.name = name;
  s.dir = fs::temp_directory_path() / ("bench_wal_writes-" + sluice::RandomHex(6));
  fs::create_directories(s.dir);
  st::SqliteStoreOptions options;
  options.wal_write_batching = batching;
  options.page_cache_mib = cache_mib;
  auto store = st::OpenSqliteStore((s.dir / "sluice.db").string(), options);
  if (!store.ok()) Die("open: " + store.status().ToString());
  s.store = std::move(*store);
  for (size_t i = 0; i < jobs; i += 1000) {
    st::WriteBatch batch;
    for (size_t k = i; k < std::min(jobs, i + 1000); ++k) batch.jobs.push_back(Job(k));
    if (auto w = s.store->Write(batch); !w.ok()) Die("seed: " + w.ToString());
  }
  s.jobs.reserve(jobs);
  for (size_t i = 0; i < jobs; ++i) s.jobs.push_back(Job(i));
}

// `commits` batches of `batch` random jobs' state changes and events; `seed` picks the jobs.
void Round(Side& s, size_t commits, size_t batch, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, s.jobs.size() - 1);
  std::vector<st::WriteBatch> batches(commits);
  for (st::WriteBatch& b : batches) {
    for (size_t k = 0; k < batch; ++k) {
      st::JobRecord& j = s.jobs[pick(rng)];
      j.state = j.state == st::JobState::kQueued ? st::JobState::kRunning : st::JobState::kQueued;
      j.reason = j.state == st::JobState::kQueued ? "waiting for a node" : "";
      b.jobs.push_back(j);
      b.events.push_back({0, j.id, 2000, "started", "on node-1 (4 CPUs)"});
    }
  }
  const st::StoreCounters before = s.store->Counters();
  const auto wal_before = sluice::store::sqlite::WalBatchCountsSoFar();
  const auto start = Clock::now();
  for (st::WriteBatch& b : batches) {
    if (auto w = s.store->Write(b); !w.ok()) Die(s.name + ": commit: " + w.ToString());
  }
  s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  const auto wal_after = sluice::store::sqlite::WalBatchCountsSoFar();
  const st::StoreCounters after = s.store->Counters();
  s.commits += after.commits - before.commits;
  s.pages += after.pages_written - before.pages_written;
  s.asked += wal_after.asked - wal_before.asked;
  s.made += wal_after.written - wal_before.written;
}

}  // namespace

int main(int argc, char** argv) {
  using sluice::bench::FlagValue;
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf(
        "usage: bench_wal_writes [--jobs N] [--batch B] [--commits C] [--rounds K] "
        "[--cache-mib M]\n"
        "  store commits/s with each commit's WAL frames gathered into few writes, against "
        "SQLite's own two writes a page (the baseline); each commit changes B random jobs of N "
        "and appends B events. --cache-mib: both gather, and a writer's page cache of M MiB is "
        "compared with SQLite's default (the baseline)\n");
    return 0;
  }
  const size_t jobs = std::max<size_t>(1, FlagValue(argc, argv, "--jobs", 100000));
  const size_t batch = std::max<size_t>(1, FlagValue(argc, argv, "--batch", 60));
  const size_t commits = std::max<size_t>(1, FlagValue(argc, argv, "--commits", 200));
  const size_t rounds = std::max<size_t>(1, FlagValue(argc, argv, "--rounds", 5));
  const int cache_mib = static_cast<int>(FlagValue(argc, argv, "--cache-mib", 0));

  Side plain, batched;
  const auto setup = Clock::now();
  if (cache_mib > 0) {
    Open(plain, "2 MiB page cache", true, 0, jobs);
    Open(batched, std::to_string(cache_mib) + " MiB page cache", true, cache_mib, jobs);
  } else {
    Open(plain, "SQLite's writes", false, 0, jobs);
    Open(batched, "gathered per commit", true, 0, jobs);
  }
  std::printf("seeded two stores with %zu jobs each in %.1f s\n", jobs,
              std::chrono::duration<double>(Clock::now() - setup).count());
  for (size_t r = 0; r < rounds; ++r) {
    const unsigned seed = static_cast<unsigned>(r + 1);
    if (r % 2 == 0) {
      Round(plain, commits, batch, seed);
      Round(batched, commits, batch, seed);
    } else {
      Round(batched, commits, batch, seed);
      Round(plain, commits, batch, seed);
    }
  }
  const double base = static_cast<double>(plain.commits) / plain.seconds;
  for (const Side* s : {&plain, &batched}) {
    const double rate = static_cast<double>(s->commits) / s->seconds;
    const double n = static_cast<double>(std::max<int64_t>(s->commits, 1));
    char ratio[32] = "(baseline)";
    if (s != &plain) std::snprintf(ratio, sizeof ratio, "%.2fx", rate / base);
    std::printf("%-20s %6lld commits of %zu jobs  %8.0f commits/s  %-10s  %.1f pages each",
                s->name.c_str(), static_cast<long long>(s->commits), batch, rate, ratio,
                static_cast<double>(s->pages) / n);
    if (s == &batched) {
      std::printf("; WAL writes asked %.0f, made %.1f a commit", static_cast<double>(s->asked) / n,
                  static_cast<double>(s->made) / n);
    }
    std::printf("\n");
  }
  return 0;
}
