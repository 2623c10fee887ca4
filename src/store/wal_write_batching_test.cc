#include "store/wal_write_batching.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "store/store_test_util.h"

namespace sluice::store::sqlite {
namespace {

namespace fs = std::filesystem;

// A WAL database opened through the batching VFS (as the store's writer is), with a second
// connection through SQLite's default VFS to read what other connections see.
class WalWriteBatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/db.sqlite";
    db_ = Open(path_, WalBatchingVfs());
    Exec(db_, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;");
    Exec(db_, "PRAGMA wal_autocheckpoint = 0;");  // frames stay in the WAL: copies must hold them
    Exec(db_, "CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL);");
  }
  void TearDown() override {
    SetWalBatchWriteFaultForTest({});
    sqlite3_close(db_);
  }

  static sqlite3* Open(const std::string& path, const char* vfs) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs),
              SQLITE_OK);
    return db;
  }
  static int Run(sqlite3* db, const std::string& sql) {
    return sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  }
  static void Exec(sqlite3* db, const std::string& sql) {
    ASSERT_EQ(Run(db, sql), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db);
  }
  static long long Count(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    long long n = -1;
    if (sqlite3_step(stmt) == SQLITE_ROW) n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return n;
  }
  static std::string IntegrityCheck(sqlite3* db) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr), SQLITE_OK);
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }
  // `rows` rows of 2 KiB from id `from`, in one transaction: about one page each.
  static std::string InsertSql(int from, int rows) {
    return "WITH RECURSIVE n(i) AS (SELECT " + std::to_string(from) + " UNION ALL SELECT i + 1 " +
           "FROM n WHERE i < " + std::to_string(from + rows - 1) +
           ") INSERT INTO t SELECT i, randomblob(2048) FROM n;";
  }
  // The database and its WAL as they are on disk now, copied while the writer holds them open,
  // as a kill -9 would leave them; opened through SQLite's default VFS (recovery from the WAL).
  sqlite3* OpenCopyOfFiles() {
    const std::string copy = dir_.path() + "/copy-" + std::to_string(++copies_) + ".sqlite";
    fs::copy_file(path_, copy);
    fs::copy_file(path_ + "-wal", copy + "-wal");
    return Open(copy, nullptr);
  }

  testing::ScratchDir dir_;
  std::string path_;
  sqlite3* db_ = nullptr;
  int copies_ = 0;
};

TEST_F(WalWriteBatchingTest, ACommitsFramesReachTheFileInFewWritesBeforeItReturns) {
  const WalBatchCounts before = WalBatchCountsSoFar();
  Exec(db_, "BEGIN; " + InsertSql(1, 600) + " COMMIT;");
  const WalBatchCounts after = WalBatchCountsSoFar();
  const long long asked = after.asked - before.asked, written = after.written - before.written;
  // Two writes a frame asked for (over 600 pages), one per 120 KiB (29 frames) reached the file.
  EXPECT_GT(asked, 1200);
  EXPECT_GE(written, 600 / 29);
  EXPECT_LE(written, asked / 50) << asked << " asked, " << written << " written";

  EXPECT_TRUE(WalBatchingLinkedForTest(db_));  // its wal-index calls flush the WAL's buffer
  // Every committed byte is in the files when COMMIT returns: a copy taken now, with the writer
  // still open and nothing closed or synced, holds every row.
  sqlite3* copy = OpenCopyOfFiles();
  EXPECT_EQ(Count(copy, "SELECT count(*) FROM t"), 600);
  EXPECT_EQ(IntegrityCheck(copy), "ok");
  sqlite3_close(copy);
  // And another connection sees them at once.
  sqlite3* other = Open(path_, nullptr);
  EXPECT_EQ(Count(other, "SELECT count(*) FROM t"), 600);
  sqlite3_close(other);
}

TEST_F(WalWriteBatchingTest, SmallCommitsEachReachTheFileAtTheirCommit) {
  for (int i = 1; i <= 20; ++i) {
    Exec(db_, "INSERT INTO t VALUES (" + std::to_string(i) + ", randomblob(100));");
    sqlite3* copy = OpenCopyOfFiles();
    EXPECT_EQ(Count(copy, "SELECT count(*) FROM t"), i) << "after commit " << i;
    sqlite3_close(copy);
  }
}

TEST_F(WalWriteBatchingTest, AFailedWriteFailsTheCommitAndLeavesTheDatabaseAsItWas) {
  Exec(db_, "BEGIN; " + InsertSql(1, 50) + " COMMIT;");
  int faults = 0;
  SetWalBatchWriteFaultForTest([&] {
    ++faults;
    return false;
  });
  // A commit that fits in the buffer (its failure is the commit frame's write) and one that
  // fills it (the failure comes from a write before the commit's last frame).
  for (int rows : {3, 50}) {
    const int rc = Run(db_, "BEGIN; " + InsertSql(51, rows) + " COMMIT;");
    EXPECT_EQ(rc & 0xff, SQLITE_IOERR) << rows << " rows: " << sqlite3_errmsg(db_);
    EXPECT_GT(faults, 0);
    Run(db_, "ROLLBACK;");  // if the failed COMMIT left the transaction open
    faults = 0;
    EXPECT_EQ(Count(db_, "SELECT count(*) FROM t"), 50);
  }
  SetWalBatchWriteFaultForTest({});

  EXPECT_EQ(Count(db_, "SELECT count(*) FROM t"), 50);
  sqlite3* other = Open(path_, nullptr);
  EXPECT_EQ(Count(other, "SELECT count(*) FROM t"), 50);
  sqlite3_close(other);
  // The next commit goes through and overwrites the failed one's frames.
  Exec(db_, "BEGIN; " + InsertSql(51, 50) + " COMMIT;");
  sqlite3* copy = OpenCopyOfFiles();
  EXPECT_EQ(Count(copy, "SELECT count(*) FROM t"), 100);
  EXPECT_EQ(IntegrityCheck(copy), "ok");
  sqlite3_close(copy);
  EXPECT_EQ(IntegrityCheck(db_), "ok");
}

// A disk that fails partway through a commit, after any number of the commit's writes went
// through: the commit either fails, leaving the rows as they were, or succeeds with every row in
// the file. Commits of 1 to 70 pages put the commit's last frame at every place in a buffer,
// the end of a full one included, where the buffer is written out before the last page goes in.
TEST_F(WalWriteBatchingTest, ACommitFailingAfterAnyOfItsWritesFailsWholeOrIsWhollyInTheFile) {
  Exec(db_, "INSERT INTO t VALUES (0, randomblob(10));");  // the row every failure must leave
  sqlite3* other = Open(path_, nullptr);
  int committed = 0;
  for (int pages = 1; pages <= 70; ++pages) {
    for (int allowed = 0; allowed <= 3; ++allowed) {
      int writes = 0;
      SetWalBatchWriteFaultForTest([&] { return writes++ < allowed; });
      // Rows of 3,000 bytes: one leaf page each.
      const int rc = Run(db_,
                         "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
                         "FROM n WHERE i < " +
                             std::to_string(pages) +
                             ") INSERT INTO t SELECT i, randomblob(3000) FROM n; COMMIT;");
      SetWalBatchWriteFaultForTest({});
      const std::string where =
          std::to_string(pages) + " pages, " + std::to_string(allowed) + " writes allowed";
      if (rc != SQLITE_OK) {
        Run(db_, "ROLLBACK;");
        ASSERT_EQ(Count(other, "SELECT count(*) FROM t"), 1) << where << ": failed";
        continue;
      }
      ++committed;
      sqlite3* copy = OpenCopyOfFiles();  // what a kill -9 now would leave
      EXPECT_EQ(Count(copy, "SELECT count(*) FROM t"), pages + 1) << where << ": committed";
      EXPECT_EQ(IntegrityCheck(copy), "ok") << where;
      sqlite3_close(copy);
      fs::remove(dir_.path() + "/copy-" + std::to_string(copies_) + ".sqlite");
      fs::remove(dir_.path() + "/copy-" + std::to_string(copies_) + ".sqlite-wal");
      // Back to the one row, with the WAL emptied, so the next copy stays small.
      Exec(db_, "DELETE FROM t WHERE id > 0; PRAGMA wal_checkpoint(TRUNCATE);");
    }
  }
  sqlite3_close(other);
  EXPECT_GT(committed, 0);  // those whose writes all fit the allowance
  EXPECT_EQ(IntegrityCheck(db_), "ok");
}

// A transaction larger than the page cache spills frames to the WAL before its commit; it reads
// them back (through the buffer's flush) and may still roll them back.
TEST_F(WalWriteBatchingTest, SpilledFramesAreReadBackAndARollbackLeavesNoTrace) {
  Exec(db_, "PRAGMA cache_size = 10;");
  Exec(db_, "BEGIN; " + InsertSql(1, 400) + ";");
  EXPECT_EQ(Count(db_, "SELECT count(*) FROM t WHERE length(v) = 2048"), 400);
  Exec(db_, "ROLLBACK;");
  EXPECT_EQ(Count(db_, "SELECT count(*) FROM t"), 0);

  Exec(db_, "BEGIN; " + InsertSql(1, 300) + " UPDATE t SET v = zeroblob(10) WHERE id % 2 = 0;");
  EXPECT_EQ(Count(db_, "SELECT count(*) FROM t WHERE length(v) = 10"), 150);
  Exec(db_, "COMMIT;");
  sqlite3* copy = OpenCopyOfFiles();
  EXPECT_EQ(Count(copy, "SELECT count(*) FROM t"), 300);
  EXPECT_EQ(Count(copy, "SELECT count(*) FROM t WHERE length(v) = 10"), 150);
  EXPECT_EQ(IntegrityCheck(copy), "ok");
  sqlite3_close(copy);
}

// A spilled frame's flush that fails inside a wal-index call, where SQLite takes no error, is
// reported by the connection's next write or read, so the transaction fails whole even if the
// disk works again at once. A transaction that spills past the wal-index's first page (4,062
// frames) maps its second page while the buffer holds frames. A first run without faults counts
// the flushes and notes those near that map; each run after it, on a fresh database, fails only
// one of them, so one run's lost write is the map's flush, whichever it is.
TEST_F(WalWriteBatchingTest, AFlushFailingInsideAWalIndexCallFailsTheTransactionWhole) {
  // 512-byte pages and rows of 400 bytes, one a leaf: 4,200 frames are 2 MiB, not 17.
  const auto run = [&](int round, std::function<bool()> fault) {
    const std::string path = dir_.path() + "/spill-" + std::to_string(round) + ".sqlite";
    sqlite3* db = Open(path, WalBatchingVfs());
    Exec(db, "PRAGMA page_size = 512; PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;");
    Exec(db, "CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL);");
    Exec(db, "INSERT INTO t VALUES (0, randomblob(10)); PRAGMA wal_checkpoint(TRUNCATE);");
    Exec(db, "PRAGMA cache_size = 10;");  // every page of the transaction spills
    SetWalBatchWriteFaultForTest(std::move(fault));
    const int rc = Run(db,
                       "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                       "WHERE i < 4200) INSERT INTO t SELECT i, randomblob(400) FROM n; COMMIT;");
    SetWalBatchWriteFaultForTest({});
    if (rc != SQLITE_OK) Run(db, "ROLLBACK;");
    sqlite3_close(db);
    sqlite3* reopened = Open(path, nullptr);  // reads the WAL's frames as recovery does
    const long long rows = Count(reopened, "SELECT count(*) FROM t");
    EXPECT_EQ(IntegrityCheck(reopened), "ok") << "round " << round;
    sqlite3_close(reopened);
    return std::make_pair(rc, rows);
  };
  // The transaction's flushes whose asked-write count is near the map's (8,560 with Debian 12's
  // SQLite), by their place in the run.
  std::vector<int> near_map;
  int flushes = 0;
  const long long base = WalBatchCountsSoFar().asked;
  const auto [probe_rc, probe_rows] = run(0, [&] {
    const long long at = WalBatchCountsSoFar().asked - base;
    ++flushes;
    if (at > 8000 && at < 9500) near_map.push_back(flushes);
    return true;
  });
  ASSERT_EQ(probe_rc, SQLITE_OK);
  ASSERT_EQ(probe_rows, 4201);
  ASSERT_FALSE(near_map.empty());

  const long long deferred_before = WalBatchCountsSoFar().deferred;
  int round = 0;
  for (int lost : near_map) {
    int n = 0;
    const auto [rc, rows] = run(++round, [&n, lost] { return ++n != lost; });
    EXPECT_NE(rc, SQLITE_OK) << "flush " << lost << " lost";
    EXPECT_EQ(rows, 1) << "flush " << lost << " lost";
    if (WalBatchCountsSoFar().deferred > deferred_before) break;  // the map's flush was it
  }
  // The path this test is for was taken: a lost write was first met in a wal-index call.
  EXPECT_GT(WalBatchCountsSoFar().deferred, deferred_before) << round << " flushes tried";
}

// After a checkpoint the writer starts the WAL over from its first frame: those writes go
// backwards in the file, and each commit is still whole on disk when it returns.
TEST_F(WalWriteBatchingTest, TheWalStartedOverAfterACheckpointHoldsEachCommit) {
  Exec(db_, "BEGIN; " + InsertSql(1, 200) + " COMMIT;");
  Exec(db_, "PRAGMA wal_checkpoint(TRUNCATE);");
  for (int round = 0; round < 3; ++round) {
    Exec(db_, "BEGIN; " + InsertSql(201 + round * 100, 100) + " COMMIT;");
    Exec(db_, "PRAGMA wal_checkpoint(PASSIVE);");
  }
  Exec(db_, "INSERT INTO t VALUES (1000, randomblob(10));");
  sqlite3* copy = OpenCopyOfFiles();
  EXPECT_EQ(Count(copy, "SELECT count(*) FROM t"), 501);
  EXPECT_EQ(IntegrityCheck(copy), "ok");
  sqlite3_close(copy);
}

}  // namespace
}  // namespace sluice::store::sqlite
