// SqliteStore: the default Store, one SQLite file in WAL mode.
//
// Durability: every Write() is one transaction. With the default synchronous=NORMAL, a
// transaction that Write() returned OK for survives the process being killed (kill -9, a crash):
// it is in the WAL file, which SQLite replays on the next open. It may be lost if the machine
// itself loses power before the next checkpoint, because NORMAL does not fsync the WAL on every
// commit. Set `sync_on_every_commit` (synchronous=FULL) where that matters more than commit
// latency.
//
// Thread safety: one connection guarded by a mutex; every method may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/store.h"
#include "store/wal_checkpointer.h"

namespace sluice::store {

struct SqliteStoreOptions {
  // synchronous=FULL: fsync the WAL on every commit, so a committed batch survives power loss.
  bool sync_on_every_commit = false;
  // How long a statement waits for another process's lock before failing with Unavailable.
  int busy_timeout_ms = 5000;
  // WAL checkpoints on a thread of their own instead of inside the commit that crosses 1,000
  // pages (store/wal_checkpointer.h). Files only; :memory: has no WAL.
  bool background_checkpoints = true;
  // A commit's WAL frames go to the file in a few large writes instead of two small ones per
  // frame (store/wal_write_batching.h). Off: SQLite's own writes, for comparison.
  bool wal_write_batching = true;
  // The writer connection's page cache, MiB; 0: SQLite's default (2 MiB). Pages a commit finds
  // here are not read back from the kernel (docs/design-notes.md "The writer's page cache").
  int page_cache_mib = 0;
  // WAL pages written since the last checkpoint that wake the checkpointer's thread
  // (WalCheckpointerOptions::wake_frames). A longer WAL between checkpoints copies a page that
  // many commits rewrote once, not once per thousand pages (docs/design-notes.md "Off the
  // lock"); it also makes the WAL file that much longer (4 KiB a page) and its replay after a
  // crash. 0 or less: the default.
  int wal_checkpoint_pages = WalCheckpointerOptions{}.wake_frames;
  // Told of each schema step an existing file is upgraded by, before it runs: the version it
  // brings, its description, the file's version before the upgrade (store/migrations.h). A new
  // file's layout is not told. The server prints them: a step may index a large table.
  std::function<void(int version, std::string_view description, int from_version)>
      on_upgrade_step{};
};

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const SqliteStoreOptions& options);

}  // namespace sluice::store
