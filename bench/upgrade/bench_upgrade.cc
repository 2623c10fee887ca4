// bench_upgrade: store v16 (states checked by comparisons instead of IN lists) on a database of
// realistic size: how long its upgrade takes, and what a job-row write costs before and after.
//
// A database at schema v15 is filled with `--jobs` jobs (two thirds finished, each with an
// attempt) and `--nodes` nodes in one transaction: the time that took is the baseline the
// upgrade is compared with. A copy of the file is then opened by the store, which upgrades it to
// the current schema (v16 and any later step), timed. Then, in `--rounds` rounds alternating
// between the v15 file and the upgraded one so the host's drift hits both alike, `--updates` job
// rows are rewritten in each with the store's own upsert (sqlite_state_upserts.h), in
// transactions of 256, moving queued jobs to starting and back: job-row writes per second, and the
// upgraded file's ratio to the v15 one.
//
//   bench_upgrade [--jobs N] [--nodes M] [--updates U] [--rounds K]
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "../flags.h"
#include "store/migrations.h"
#include "store/sqlite_state_upserts.h"
#include "store/sqlite_store.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& what) { sluice::bench::Die("bench_upgrade", what); }

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Die(sql.substr(0, 60) + ": " + (err ? err : "?"));
  }
}

sqlite3_stmt* Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) Die(sqlite3_errmsg(db));
  return s;
}

void Step(sqlite3* db, sqlite3_stmt* s) {
  if (sqlite3_step(s) != SQLITE_DONE) Die(sqlite3_errmsg(db));
  sqlite3_reset(s);
}

std::string Hex(size_t i, const char* prefix) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016zx", prefix, i);
  return buf;
}

// Job i as the store's job upsert binds it (sqlite_store.cc's column order), in `state`.
void BindJob(sqlite3_stmt* s, size_t i, const char* state, bool finished) {
  static const std::string kSpec =
      R"({"env":{},"name":"q","priority":0,"resources":{"cpus":1,"gpus":0,"memory_gb":1.0},)"
      R"("run":"true"})";
  const std::string id = Hex(i, "job-");
  const std::string attempt = finished ? Hex(i, "att-") : "";
  const int64_t submitted = 1'796'000'000'000 + static_cast<int64_t>(i);
  sqlite3_bind_text(s, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, "q", -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, kSpec.c_str(), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 4, "", -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 5, state, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 6, 0);
  sqlite3_bind_int64(s, 7, submitted);
  sqlite3_bind_int64(s, 8, finished ? submitted + 1 : 0);
  sqlite3_bind_int64(s, 9, finished ? submitted + 2 : 0);
  if (finished) {
    sqlite3_bind_int64(s, 10, 0);
  } else {
    sqlite3_bind_null(s, 10);
  }
  sqlite3_bind_text(s, 11, finished ? "" : "no node can take work: every node is busy", -1,
                    SQLITE_STATIC);
  sqlite3_bind_text(s, 12, attempt.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 13, 0);
  sqlite3_bind_text(s, 14, "", -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 15, 0);
  sqlite3_bind_text(s, 16, "acct-admin", -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 17, "", -1, SQLITE_STATIC);
}

// Writes `count` job rows of the queued third (from `first` on), `state` each, 256 a transaction.
double RewriteJobs(sqlite3* db, size_t first, size_t count, size_t queued, const char* state) {
  sqlite3_stmt* s = Prepare(db, sluice::store::sqlite::kUpsertJob);
  const auto t = Clock::now();
  for (size_t done = 0; done < count;) {
    Exec(db, "BEGIN");
    for (size_t n = 0; n < 256 && done < count; ++n, ++done) {
      BindJob(s, first + done % queued, state, false);
      Step(db, s);
    }
    Exec(db, "COMMIT");
  }
  const double secs = Since(t);
  sqlite3_finalize(s);
  return secs;
}

}  // namespace

int main(int argc, char** argv) {
  if (sluice::bench::WantsHelp(argc, argv)) {
    std::printf("bench_upgrade [--jobs N] [--nodes M] [--updates U] [--rounds K]\n");
    return 0;
  }
  const size_t jobs = sluice::bench::FlagValue(argc, argv, "--jobs", 150'000);
  const size_t nodes = sluice::bench::FlagValue(argc, argv, "--nodes", 10'000);
  const size_t updates = sluice::bench::FlagValue(argc, argv, "--updates", 20'000);
  const size_t rounds = sluice::bench::FlagValue(argc, argv, "--rounds", 3);
  const size_t finished = jobs * 2 / 3;
  if (jobs < 3 || updates == 0) Die("--jobs must be at least 3 and --updates at least 1");

  std::error_code ec;
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-bench-upgrade-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  if (ec) Die("create " + dir.string() + ": " + ec.message());
  const std::string old_path = (dir / "v15.db").string();
  const std::string new_path = (dir / "upgraded.db").string();

  // The v15 database, filled in one transaction (the baseline).
  sqlite3* old_db = nullptr;
  if (sqlite3_open(old_path.c_str(), &old_db) != SQLITE_OK) Die("open " + old_path);
  Exec(old_db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;");
  if (!sluice::store::Migrate(old_db, 15).ok()) Die("lay out schema v15");
  auto t = Clock::now();
  Exec(old_db, "BEGIN");
  sqlite3_stmt* job = Prepare(old_db, sluice::store::sqlite::kUpsertJob);
  sqlite3_stmt* att = Prepare(
      old_db,
      "INSERT INTO attempts (id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, state, "
      "created_ms, started_ms, ended_ms, exit_code, cause) VALUES (?, ?, ?, '[]', 1, 1.0, 0.1, "
      "'succeeded', 1, 2, 3, 0, 'exited')");
  for (size_t i = 0; i < jobs; ++i) {
    BindJob(job, i, i < finished ? "succeeded" : "queued", i < finished);
    Step(old_db, job);
    if (i >= finished) continue;
    const std::string aid = Hex(i, "att-");
    const std::string jid = Hex(i, "job-");
    const std::string nid = Hex(i % nodes, "node-");
    sqlite3_bind_text(att, 1, aid.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(att, 2, jid.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(att, 3, nid.c_str(), -1, SQLITE_TRANSIENT);
    Step(old_db, att);
  }
  sqlite3_finalize(att);
  sqlite3_finalize(job);
  sqlite3_stmt* node =
      Prepare(old_db,
              "INSERT INTO nodes (id, name, inventory, state, registered_ms, last_seen_ms, "
              "price_per_gpu_hour, price_per_cpu_hour, region, verification) VALUES (?, ?, '{}', "
              "'online', 1, 2, 0, 0.1, 'eu', 'verified')");
  for (size_t i = 0; i < nodes; ++i) {
    const std::string nid = Hex(i, "node-");
    sqlite3_bind_text(node, 1, nid.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(node, 2, nid.c_str(), -1, SQLITE_TRANSIENT);
    Step(old_db, node);
  }
  sqlite3_finalize(node);
  Exec(old_db, "COMMIT");
  const double fill = Since(t);
  Exec(old_db, "PRAGMA wal_checkpoint(TRUNCATE)");
  fs::copy_file(old_path, new_path, ec);
  if (ec) Die("copy the v15 database: " + ec.message());

  // The upgrade, by the store itself.
  t = Clock::now();
  {
    auto store = sluice::store::OpenSqliteStore(new_path);
    if (!store.ok()) Die("upgrade: " + store.status().ToString());
  }
  const double upgrade = Since(t);
  sqlite3* new_db = nullptr;
  if (sqlite3_open(new_path.c_str(), &new_db) != SQLITE_OK) Die("open " + new_path);
  Exec(new_db, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;");
  Exec(old_db, "PRAGMA foreign_keys = ON;");
  const auto size = fs::file_size(old_path, ec);
  std::printf(
      "a v15 database of %zu jobs (%zu finished, each with an attempt) and %zu nodes, "
      "%.0f MB\n",
      jobs, finished, nodes, static_cast<double>(size) / 1e6);
  std::printf("filling it                %7.2f s  (baseline)\n", fill);
  std::printf("upgrading a copy          %7.2f s  %.2fx the baseline\n", upgrade, upgrade / fill);

  // Job-row writes, alternating between the two files.
  double secs[2] = {0, 0};
  const size_t queued = jobs - finished;
  for (size_t r = 0; r < rounds; ++r) {
    for (int which = 0; which < 2; ++which) {
      sqlite3* db = which == 0 ? old_db : new_db;
      secs[which] += RewriteJobs(db, finished, updates, queued, "starting");
      secs[which] += RewriteJobs(db, finished, updates, queued, "queued");
    }
  }
  const double writes = 2.0 * static_cast<double>(updates * rounds);
  std::printf("job-row writes, v15       %7.0f /s  (baseline)\n", writes / secs[0]);
  std::printf("job-row writes, upgraded  %7.0f /s  %.2fx the baseline\n", writes / secs[1],
              secs[0] / secs[1]);
  sqlite3_close(old_db);
  sqlite3_close(new_db);
  fs::remove_all(dir, ec);
  return 0;
}
