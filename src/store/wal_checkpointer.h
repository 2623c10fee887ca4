// WalCheckpointer: runs a SQLite database's WAL checkpoints on a thread and connection of its
// own, so that no commit pays for one (docs/design-notes.md "Off the lock").
//
// SQLite's automatic checkpoint runs inside the commit that crosses 1,000 WAL pages: it copies
// the pages into the database and fsyncs the WAL and the database file, 10-25 ms on a shared
// disk, while the committing thread holds the store's mutex and the server core's lock. At
// 10,000 agents that happened about four times a second, and each time every submit waited.
// Here a commit only notes the WAL's size (sqlite3_wal_hook); past `wake_frames` not yet
// copied, the thread copies them with a PASSIVE checkpoint, which runs beside writers. A WAL
// is only rewound from its start once a checkpoint has copied all of it, which a steady stream
// of writes can postpone; past `inline_frames` the commit checkpoints inline, as SQLite would,
// so the file stays bounded whatever the load.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace sluice::store {

struct WalCheckpointerOptions {
  // WAL pages written since the last checkpoint that wake the thread. A page rewritten by many
  // commits in that span is copied once: at 1,000 the thread took 13-14 % of a core in the
  // 10,000-agent swarm's release, at 8,000 6-7 % (docs/benchmarks.md "A longer WAL").
  int wake_frames = 8000;
  int inline_frames = 32000;  // WAL pages (128 MiB at 4 KiB) past which the commit checkpoints
  int busy_timeout_ms = 5000;
};

class WalCheckpointer {
 public:
  // Opens a second read-write connection to `path` and installs the hook on `writer` (which
  // must outlive this object; destroy this first). Replaces SQLite's automatic checkpoint.
  static Result<std::unique_ptr<WalCheckpointer>> Start(const std::string& path, sqlite3* writer,
                                                        const WalCheckpointerOptions& options);
  ~WalCheckpointer();  // removes the hook, stops the thread, closes its connection
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  // Counters, for tests and the curious.
  int64_t background_checkpoints() const { return background_.load(); }
  int64_t inline_checkpoints() const { return inline_.load(); }
  int64_t failures() const { return failures_.load(); }
  int wake_frames() const { return options_.wake_frames; }

 private:
  WalCheckpointer(sqlite3* writer, sqlite3* own, const WalCheckpointerOptions& options);
  static int OnCommit(void* self, sqlite3* db, const char* name, int frames);
  void Run();

  sqlite3* const writer_;
  sqlite3* const own_;
  const WalCheckpointerOptions options_;
  std::atomic<int64_t> copied_{0};  // WAL frames the last checkpoint had copied
  std::atomic<int64_t> background_{0}, inline_{0}, failures_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool pending_ = false;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace sluice::store
