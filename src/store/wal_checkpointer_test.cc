#include "store/wal_checkpointer.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

namespace sluice::store {
namespace {

namespace fs = std::filesystem;

// A WAL database in a fresh directory, with SQLite's own automatic checkpoint left on (as a
// store opens it): the checkpointer must replace it.
class WalCheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/wal_checkpointer_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/db.sqlite";
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db_), SQLITE_OK);
    Exec(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB);");
  }
  void TearDown() override {
    sqlite3_close(db_);
    fs::remove_all(dir_);
  }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "");
  }
  // One commit of `pages` 4 KiB rows: at least that many WAL frames.
  void Commit(int pages) {
    Exec("BEGIN");
    for (int i = 0; i < pages; ++i) Exec("INSERT INTO t (v) VALUES (zeroblob(4000))");
    Exec("COMMIT");
  }
  int64_t Rows() {
    sqlite3* other = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(other, "SELECT count(*) FROM t", -1, &s, nullptr), SQLITE_OK);
    EXPECT_EQ(sqlite3_step(s), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(other);
    return n;
  }
  uintmax_t DbBytes() {
    std::error_code ec;
    uintmax_t n = fs::file_size(path_, ec);
    return ec ? 0 : n;
  }
  uintmax_t WalBytes() {
    std::error_code ec;
    uintmax_t n = fs::file_size(path_ + "-wal", ec);
    return ec ? 0 : n;
  }
  std::string dir_, path_;
  sqlite3* db_ = nullptr;
};

TEST_F(WalCheckpointerTest, CommitsPastTheThresholdAreCopiedOnTheThreadNotInTheCommit) {
  WalCheckpointerOptions opt;
  opt.wake_frames = 100;
  opt.inline_frames = 1'000'000;  // never inline
  auto c = WalCheckpointer::Start(path_, db_, opt);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int i = 0; i < 5; ++i) Commit(60);
  // The thread is woken by a commit; wait for it with a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*c)->background_checkpoints() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT((*c)->background_checkpoints(), 0);
  EXPECT_EQ((*c)->inline_checkpoints(), 0);
  EXPECT_EQ((*c)->failures(), 0);
  // Copied for real: the rows' pages are in the database file, not only in the WAL.
  EXPECT_GT(DbBytes(), uintmax_t{100} * 4096);
  EXPECT_EQ(Rows(), 300);
}

TEST_F(WalCheckpointerTest, SqlitesOwnCheckpointNoLongerRunsInTheCommit) {
  // With the thread never woken and the inline bound far away, nothing copies the WAL: it
  // grows past SQLite's own 1,000-page checkpoint, which would have rewound it.
  WalCheckpointerOptions opt;
  opt.wake_frames = 1'000'000;
  opt.inline_frames = 1'000'000;
  auto c = WalCheckpointer::Start(path_, db_, opt);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int i = 0; i < 30; ++i) Commit(50);
  EXPECT_GT(WalBytes(), uintmax_t{1200} * 4096);
  EXPECT_LT(DbBytes(), uintmax_t{100} * 4096) << "nothing was copied into the database";
  EXPECT_EQ((*c)->background_checkpoints() + (*c)->inline_checkpoints(), 0);
}

TEST_F(WalCheckpointerTest, AWalNeverCopiedInTheBackgroundIsBoundedByTheInlineCheckpoint) {
  WalCheckpointerOptions opt;
  opt.wake_frames = 1'000'000;  // the thread never wakes
  opt.inline_frames = 200;
  auto c = WalCheckpointer::Start(path_, db_, opt);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (int i = 0; i < 40; ++i) Commit(50);  // 2,000 pages written
  EXPECT_GT((*c)->inline_checkpoints(), 0);
  // Rewound after each inline copy: never much past the bound plus one commit.
  EXPECT_LT(WalBytes(), uintmax_t{200 + 2 * 60} * 4200);
  EXPECT_EQ(Rows(), 2000);
}

TEST_F(WalCheckpointerTest, CommitsAfterItIsGoneDoNotCallIntoIt) {
  {
    auto c = WalCheckpointer::Start(path_, db_, WalCheckpointerOptions{});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Commit(10);
  }
  Commit(10);  // the hook was removed: a call into the freed object would fail under ASan
  EXPECT_EQ(Rows(), 20);
}

TEST_F(WalCheckpointerTest, AnUnopenableDatabaseIsAnError) {
  auto c = WalCheckpointer::Start(dir_ + "/missing/db.sqlite", db_, WalCheckpointerOptions{});
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace sluice::store
