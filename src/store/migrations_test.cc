#include "store/migrations.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "store/sqlite_job_queries.h"
#include "store/sqlite_state_upserts.h"
#include "store/sqlite_store.h"
#include "store/store.h"
#include "store/store_test_util.h"

namespace sluice::store {
namespace {

using testing::SampleJob;
using testing::ScratchDir;

// A raw connection, for building databases the store itself would never write.
class RawDb {
 public:
  explicit RawDb(const std::string& path) { EXPECT_EQ(sqlite3_open(path.c_str(), &db_), 0); }
  ~RawDb() { sqlite3_close(db_); }
  sqlite3* get() { return db_; }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "") << " in " << sql;
    sqlite3_free(err);
  }
  int64_t Count(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
    int64_t n = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    return n;
  }

 private:
  sqlite3* db_ = nullptr;
};

TEST(MigrationsTest, StepsAreDenseAndCurrentIsTheLast) {
  const auto& steps = Migrations();
  ASSERT_FALSE(steps.empty());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].version, static_cast<int>(i) + 1);
    EXPECT_FALSE(steps[i].sql.empty());
  }
  EXPECT_EQ(CurrentSchemaVersion(), steps.back().version);
  EXPECT_GE(CurrentSchemaVersion(), 2);  // the upgrade test below needs an older version
}

TEST(MigrationsTest, NewDatabaseIsAtTheCurrentVersion) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  ASSERT_TRUE(OpenSqliteStore(path).ok());
  RawDb raw(path);
  EXPECT_EQ(*ReadSchemaVersion(raw.get()), CurrentSchemaVersion());
  EXPECT_EQ(raw.Count("SELECT count(*) FROM schema_version"), CurrentSchemaVersion());
}

TEST(MigrationsTest, VersionFourAttemptsSurviveTheRebuildAndMayBePreempted) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  {
    RawDb raw(path);
    ASSERT_TRUE(Migrate(raw.get(), 4).ok());
    raw.Exec(
        "INSERT INTO jobs (id, name, spec, workdir_blob, state, priority, submitted_ms, "
        "started_ms, finished_ms, exit_code, reason, attempt_id) VALUES ('job-a', 'a', '{}', '', "
        "'running', 0, 5, 6, 0, NULL, '', 'att-a')");
    raw.Exec(
        "INSERT INTO attempts (id, job_id, node_id, gpus, cpus, memory_gb, price_per_hour, "
        "state, created_ms, started_ms, ended_ms, exit_code, cause) VALUES ('att-a', 'job-a', "
        "'node-1', '[0,1]', 2, 4.0, 3.5, 'running', 5, 6, 0, NULL, '')");
    // v4 refuses the state v5 adds.
    EXPECT_NE(sqlite3_exec(raw.get(), "UPDATE attempts SET state = 'preempted'", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
  }
  auto store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto atts = (*store)->AttemptsForJob("job-a");
  ASSERT_TRUE(atts.ok()) << atts.status().ToString();
  ASSERT_EQ(atts->size(), 1u);
  AttemptRecord a = (*atts)[0];
  EXPECT_EQ(a.gpus, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(a.price_per_hour, 3.5);
  EXPECT_EQ(a.number, 1);  // defaults for rows older than the column
  EXPECT_EQ(a.checkpoint_restored, "");
  a.state = AttemptState::kPreempted;
  a.cause = "preempted: node reclaimed";
  WriteBatch b;
  b.attempts = {a};
  auto job = (*store)->GetJob("job-a");
  ASSERT_TRUE(job.ok() && job->has_value());
  JobRecord j = **job;
  EXPECT_EQ(j.checkpoint, "");
  j.checkpoint = std::string(64, 'a');
  j.preemptions = 1;
  b.jobs = {j};
  ASSERT_TRUE((*store)->Write(b).ok());
  EXPECT_EQ((*(*store)->AttemptsForJob("job-a"))[0].state, AttemptState::kPreempted);
  EXPECT_EQ((*(*store)->GetJob("job-a"))->preemptions, 1);
  EXPECT_EQ((*(*store)->GetJob("job-a"))->checkpoint, std::string(64, 'a'));
}

TEST(MigrationsTest, VersionOneDatabaseIsUpgradedKeepingItsRows) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  {
    // What a Sluice that only knew schema v1 left behind, with a job written in v1's shape.
    RawDb raw(path);
    ASSERT_TRUE(Migrate(raw.get(), 1).ok());
    EXPECT_EQ(*ReadSchemaVersion(raw.get()), 1);
    EXPECT_EQ(raw.Count("SELECT count(*) FROM sqlite_schema WHERE name = 'logs'"), 0);
    raw.Exec(
        "INSERT INTO jobs (id, name, spec, workdir_blob, state, priority, submitted_ms, "
        "started_ms, finished_ms, exit_code, reason, attempt_id) VALUES ('job-old', 'old', "
        "'{\"name\":\"old\"}', '', 'queued', 0, 5, 0, 0, NULL, 'waiting', '')");
  }
  auto store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto job = (*store)->GetJob("job-old");
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->spec.Parse(), Json({{"name", "old"}}));
  EXPECT_EQ((*job)->reason, "waiting");
  EXPECT_EQ((*job)->state, JobState::kQueued);
  EXPECT_FALSE((*job)->cancel_requested);  // the column added later defaults for old rows
  // v2's tables now exist and work.
  WriteBatch b;
  b.logs = {LogLine{.job_id = "job-old", .attempt_id = "att-1", .seq = 1, .text = "hi"}};
  ASSERT_TRUE((*store)->Write(b).ok());
  EXPECT_EQ(*(*store)->MaxLogSeq("att-1"), 1);
  store->reset();

  // Reopening changes nothing: no step runs twice.
  ASSERT_TRUE(OpenSqliteStore(path).ok());
  ASSERT_TRUE(OpenSqliteStore(path).ok());
  RawDb raw(path);
  EXPECT_EQ(*ReadSchemaVersion(raw.get()), CurrentSchemaVersion());
  EXPECT_EQ(raw.Count("SELECT count(*) FROM schema_version"), CurrentSchemaVersion());
  EXPECT_EQ(raw.Count("SELECT count(*) FROM jobs"), 1);
  EXPECT_EQ(raw.Count("SELECT count(*) FROM logs"), 1);
}

// One column of every row `explain` ("EXPLAIN" or "EXPLAIN QUERY PLAN") gives for `sql`.
std::vector<std::string> Explained(sqlite3* db, const std::string& explain, const std::string& sql,
                                   int column) {
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, (explain + " " + sql).c_str(), -1, &stmt, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  std::vector<std::string> out;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, column)));
  }
  sqlite3_finalize(stmt);
  return out;
}

// What EXPLAIN QUERY PLAN says of `sql`, one line a step.
std::string QueryPlan(sqlite3* db, const std::string& sql) {
  std::string out;
  for (const std::string& step : Explained(db, "EXPLAIN QUERY PLAN", sql, 3)) out += step + "\n";
  return out;
}

// v14 drops the index of jobs by state, which nothing read and every state change wrote; the
// queries on jobs still find their rows by index, not by scanning the table.
TEST(MigrationsTest, VersionThirteenLosesTheJobStateIndexAndReadsStillUseAnIndex) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  {
    RawDb raw(path);
    ASSERT_TRUE(Migrate(raw.get(), 13).ok());
    EXPECT_EQ(raw.Count("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_by_state'"), 1);
  }
  JobRecord job = SampleJob("job-1");
  {
    auto store = OpenSqliteStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Write({.jobs = {job}}).ok());
    EXPECT_EQ(*(*store)->GetJob("job-1"), job);
    EXPECT_EQ((*store)->LoadJobs()->size(), 1u);
  }
  RawDb raw(path);
  EXPECT_EQ(*ReadSchemaVersion(raw.get()), CurrentSchemaVersion());
  EXPECT_EQ(raw.Count("SELECT count(*) FROM sqlite_schema WHERE name = 'jobs_by_state'"), 0);
  // The plans of the store's two reads of jobs (sqlite_job_queries.h): by id, and all of them in
  // submission order. A plan with "SCAN jobs" and no index would read every row.
  const std::string by_id = QueryPlan(raw.get(), sqlite::kSelectJob);
  EXPECT_NE(by_id.find("USING INDEX"), std::string::npos) << by_id;
  const std::string all = QueryPlan(raw.get(), sqlite::kSelectJobs);
  EXPECT_NE(all.find("jobs_by_submitted"), std::string::npos) << all;
}

// v15 indexes finished jobs by submission, owner and team: a page of the job list (the store's
// own statements, sqlite_job_queries.h) is a range of one index read backwards from the cursor,
// with no sort and no unfinished row stepped over. A statement whose condition drifted from the
// indexes' would scan, and fail here (the indexes as v16 rebuilt them, their condition an OR
// chain).
TEST(MigrationsTest, VersionFifteenPagesFinishedJobsFromAnIndexWithoutASort) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  ASSERT_TRUE(OpenSqliteStore(path).ok());
  RawDb raw(path);
  struct Case {
    const char* sql;
    std::string index;
  };
  for (const Case& c :
       {Case{sqlite::kSelectFinishedJobs, "jobs_finished ((submitted_ms,id)<(?,?))"},
        Case{sqlite::kSelectFinishedJobsOfOwner,
             "jobs_finished_by_owner (owner=? AND (submitted_ms,id)<(?,?))"},
        Case{sqlite::kSelectFinishedJobsOfTeam,
             "jobs_finished_by_team (team=? AND (submitted_ms,id)<(?,?))"}}) {
    const std::string plan = QueryPlan(raw.get(), c.sql);
    EXPECT_NE(plan.find(c.index), std::string::npos) << c.sql << "\n" << plan;
    EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << c.sql << "\n" << plan;
  }
}

// How many of the opcodes SQLite compiled `sql` to open a temporary B-tree (OpenEphemeral).
int TemporaryBTrees(sqlite3* db, const std::string& sql) {
  const std::vector<std::string> opcodes = Explained(db, "EXPLAIN", sql, 1);
  return static_cast<int>(std::count(opcodes.begin(), opcodes.end(), "OpenEphemeral"));
}

// v16 checks states with comparisons, not IN lists: SQLite builds a temporary B-tree for an IN
// list of more than two constants every time a statement evaluating it runs, and the upserts of
// jobs, attempts and nodes evaluate their table's CHECKs and the finished-jobs indexes' condition
// on every write. A v15 database's rows (rowids too) survive the rebuild, and the checks still
// refuse a state no code writes.
TEST(MigrationsTest, VersionSixteenWritesStateRowsWithoutATemporaryBTree) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  {
    RawDb raw(path);
    ASSERT_TRUE(Migrate(raw.get(), 15).ok());
    // The statements v15 ran: the test would prove nothing if they had no temporary B-tree.
    EXPECT_GT(TemporaryBTrees(raw.get(), sqlite::kUpsertJob), 0);
    EXPECT_GT(TemporaryBTrees(raw.get(), sqlite::kUpsertAttempt), 0);
    EXPECT_GT(TemporaryBTrees(raw.get(), sqlite::kUpsertNode), 0);
    raw.Exec(
        "INSERT INTO jobs (rowid, id, name, spec, workdir_blob, state, priority, submitted_ms, "
        "started_ms, finished_ms, exit_code, reason, attempt_id, owner, team) VALUES (7, "
        "'job-a', 'a', '{}', '', 'succeeded', 0, 5, 6, 9, 0, '', 'att-a', 'acct-1', 'team-1')");
    raw.Exec(
        "INSERT INTO attempts (rowid, id, job_id, node_id, gpus, cpus, memory_gb, "
        "price_per_hour, state, created_ms, started_ms, ended_ms, exit_code, cause, "
        "interruptible) VALUES (11, 'att-a', 'job-a', 'node-1', '[0]', 2, 4.0, 3.5, "
        "'succeeded', 5, 6, 9, 0, 'exited', 1)");
    raw.Exec(
        "INSERT INTO nodes (rowid, id, name, inventory, state, registered_ms, last_seen_ms, "
        "price_per_gpu_hour, price_per_cpu_hour, region, verification, paused_reason) VALUES "
        "(3, 'node-1', 'n1', '{}', 'online', 1, 2, 2.5, 0.1, 'eu', 'verified', 'why')");
  }
  auto store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto job = (*store)->GetJob("job-a");
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->state, JobState::kSucceeded);
  EXPECT_EQ((*job)->team, "team-1");
  auto atts = (*store)->AttemptsForJob("job-a");
  ASSERT_TRUE(atts.ok() && atts->size() == 1u);
  EXPECT_TRUE((*atts)[0].interruptible);
  EXPECT_EQ((*atts)[0].cause, "exited");
  auto nodes = (*store)->LoadNodes();
  ASSERT_TRUE(nodes.ok() && nodes->size() == 1u);
  EXPECT_EQ((*nodes)[0].verification, "verified");
  EXPECT_EQ((*nodes)[0].paused_reason, "why");
  store->reset();

  RawDb raw(path);
  EXPECT_EQ(*ReadSchemaVersion(raw.get()), CurrentSchemaVersion());
  EXPECT_EQ(raw.Count("SELECT rowid FROM jobs WHERE id = 'job-a'"), 7);
  EXPECT_EQ(raw.Count("SELECT rowid FROM attempts WHERE id = 'att-a'"), 11);
  EXPECT_EQ(raw.Count("SELECT rowid FROM nodes WHERE id = 'node-1'"), 3);
  // The finished job is in each of its indexes again (read through them, not the table).
  EXPECT_EQ(raw.Count("SELECT count(*) FROM jobs INDEXED BY jobs_finished_by_team WHERE "
                      "(state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR "
                      "state = 'lost') AND team != '' AND team = 'team-1'"),
            1);
  EXPECT_EQ(raw.Count("PRAGMA foreign_key_check"), -1);  // no row: nothing refers to nothing
  for (const char* sql : {sqlite::kUpsertJob, sqlite::kUpsertAttempt, sqlite::kUpsertNode}) {
    EXPECT_EQ(TemporaryBTrees(raw.get(), sql), 0) << sql;
  }
  for (const char* bad :
       {"UPDATE jobs SET state = 'paused'", "UPDATE attempts SET state = 'queued'",
        "UPDATE attempts SET interruptible = 2", "UPDATE nodes SET state = 'verified'",
        "UPDATE nodes SET verification = 'online'"}) {
    EXPECT_EQ(sqlite3_exec(raw.get(), bad, nullptr, nullptr, nullptr), SQLITE_CONSTRAINT) << bad;
  }
  for (const char* good :
       {"UPDATE jobs SET state = 'budget-exhausted'", "UPDATE attempts SET state = 'preempted'",
        "UPDATE nodes SET verification = 'deverified'"}) {
    EXPECT_EQ(sqlite3_exec(raw.get(), good, nullptr, nullptr, nullptr), SQLITE_OK) << good;
  }
}

// An existing database's upgrade is announced a step at a time, before each runs (the server
// prints them: a step may index a large table); a new file's layout is not.
TEST(MigrationsTest, AnUpgradeTellsOfEachStepBeforeItRunsAndANewFileTellsNothing) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  {
    RawDb raw(path);
    ASSERT_TRUE(Migrate(raw.get(), CurrentSchemaVersion() - 2).ok());
  }
  std::vector<std::string> told;
  SqliteStoreOptions options;
  options.on_upgrade_step = [&](int version, std::string_view description, int from_version) {
    RawDb raw(path);  // before the step: the file is still at the version before it
    told.push_back(std::to_string(from_version) + ">" + std::to_string(version) + " " +
                   std::string(description) + " at " +
                   std::to_string(raw.Count("SELECT max(version) FROM schema_version")));
  };
  ASSERT_TRUE(OpenSqliteStore(path, options).ok());
  const int v = CurrentSchemaVersion();
  const auto& steps = Migrations();
  EXPECT_EQ(told, (std::vector<std::string>{
                      std::to_string(v - 2) + ">" + std::to_string(v - 1) + " " +
                          std::string(steps[v - 2].description) + " at " + std::to_string(v - 2),
                      std::to_string(v - 2) + ">" + std::to_string(v) + " " +
                          std::string(steps[v - 1].description) + " at " + std::to_string(v - 1)}));
  told.clear();
  ASSERT_TRUE(OpenSqliteStore(path, options).ok());  // already current
  EXPECT_TRUE(told.empty());
  ASSERT_TRUE(OpenSqliteStore(dir.path() + "/new.db", options).ok());
  EXPECT_TRUE(told.empty());
}

TEST(MigrationsTest, NewerDatabaseIsRefusedNamingBothVersions) {
  ScratchDir dir;
  const std::string path = dir.path() + "/db";
  ASSERT_TRUE(OpenSqliteStore(path).ok());
  const int future = CurrentSchemaVersion() + 1;
  {
    RawDb raw(path);
    raw.Exec("INSERT INTO schema_version (version, description, applied_ms) VALUES (" +
             std::to_string(future) + ", 'from the future', 0)");
  }
  auto store = OpenSqliteStore(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = store.status().message();  // status() returns a copy
  EXPECT_NE(msg.find("version " + std::to_string(future)), std::string::npos) << msg;
  EXPECT_NE(msg.find("(" + std::to_string(CurrentSchemaVersion()) + ")"), std::string::npos) << msg;
}

TEST(MigrationsTest, UnknownTargetVersionIsRefused) {
  ScratchDir dir;
  RawDb raw(dir.path() + "/db");
  EXPECT_EQ(Migrate(raw.get(), CurrentSchemaVersion() + 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ReadSchemaVersion(raw.get()), 0);
}

}  // namespace
}  // namespace sluice::store
