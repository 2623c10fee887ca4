#include "store/wal_checkpointer.h"

#include <cstdio>

#include "common/thread_name.h"
#include "store/sqlite_query.h"

namespace sluice::store {

Result<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(
    const std::string& path, sqlite3* writer, const WalCheckpointerOptions& options) {
  sqlite3* own = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &own, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status st = sqlite::Error(own, rc, "open " + path + " for WAL checkpoints");
    sqlite3_close(own);
    return st;
  }
  sqlite3_busy_timeout(own, options.busy_timeout_ms);
  // A connection learns that the database is in WAL mode from its first read; until then a
  // checkpoint through it returns SQLITE_OK having copied nothing (log and copied = -1).
  rc = sqlite3_exec(own, "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    Status st = sqlite::Error(own, rc, "open " + path + " for WAL checkpoints: first read");
    sqlite3_close(own);
    return st;
  }
  std::unique_ptr<WalCheckpointer> c(new WalCheckpointer(writer, own, options));
  // Replaces the automatic checkpoint, which is itself a WAL hook.
  sqlite3_wal_hook(writer, &WalCheckpointer::OnCommit, c.get());
  c->thread_ = std::thread([p = c.get()] {
    NameThisThread("sluice-walckpt");
    p->Run();
  });
  return c;
}

WalCheckpointer::WalCheckpointer(sqlite3* writer, sqlite3* own,
                                 const WalCheckpointerOptions& options)
    : writer_(writer), own_(own), options_(options) {}

WalCheckpointer::~WalCheckpointer() {
  sqlite3_wal_hook(writer_, nullptr, nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  sqlite3_close(own_);
}

// Runs in the committing thread, with the writer's connection (and its owner's lock) held.
int WalCheckpointer::OnCommit(void* self, sqlite3* db, const char* name, int frames) {
  auto* c = static_cast<WalCheckpointer*>(self);
  if (frames >= c->options_.inline_frames) {
    // The WAL has not been rewound for a long time: copy it here, where no other commit can
    // run, so the next writer may start it over.
    int log = 0, copied = 0;
    int rc = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
    if (rc == SQLITE_OK) {
      c->inline_.fetch_add(1);
      c->copied_.store(copied);
    } else if ((rc & 0xff) != SQLITE_BUSY) {  // busy: the thread is copying it right now
      c->failures_.fetch_add(1);
    }
    return SQLITE_OK;  // the commit itself succeeded either way
  }
  const int64_t copied = c->copied_.load();
  // After a rewind the WAL counts from 0 again, below what was copied before.
  const int64_t waiting = frames >= copied ? frames - copied : frames;
  if (waiting >= c->options_.wake_frames) {
    {
      std::lock_guard<std::mutex> lock(c->mu_);
      c->pending_ = true;
    }
    c->wake_.notify_one();
  }
  return SQLITE_OK;
}

void WalCheckpointer::Run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stop_ || pending_; });
      if (stop_) return;
      pending_ = false;
    }
    int log = 0, copied = 0;
    int rc = sqlite3_wal_checkpoint_v2(own_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
    if (rc == SQLITE_OK && log >= 0) {
      background_.fetch_add(1);
      copied_.store(copied);
    } else if ((rc & 0xff) != SQLITE_BUSY && failures_.fetch_add(1) == 0) {
      // Said once: the inline checkpoint past inline_frames still bounds the WAL.
      std::fprintf(stderr, "sluice store: background WAL checkpoint failed: %s\n",
                   rc == SQLITE_OK ? "the connection does not see a WAL" : sqlite3_errmsg(own_));
    }
  }
}

}  // namespace sluice::store
