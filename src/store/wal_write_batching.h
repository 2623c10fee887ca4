// A SQLite VFS that writes each transaction's WAL frames to the file in a few large writes
// instead of two small ones per frame (docs/design-notes.md "WAL frames in one write").
//
// SQLite appends a WAL frame as two pwrite calls, its 24-byte header and then its page. A
// commit of the swarm's inbox writes hundreds of frames, so the writer made twice as many system
// calls as pages; on a paravirtualized VM each costs several microseconds of the core's lock.
// This VFS wraps SQLite's default one and, for WAL files only, gathers contiguous writes in a
// buffer that goes to the file in one write:
//
//   * when a commit's last frame is complete (its header carries the database size, which only a
//     commit frame's does; sqlite.org/fileformat2.html "WAL File Format"), so the commit's own
//     write reports any failure and SQLite rolls the transaction back;
//   * before anything that reads or publishes the file: a read, sync, truncate, size query, file
//     control, close, and any use of the connection's wal-index (shared memory), which is how
//     other connections learn of frames: none can be told of a frame still in the buffer;
//   * when a write does not continue the buffer, or the buffer is full.
//
// Nothing else changes: the same bytes reach the same offsets before SQLite publishes them, and
// the database file and journals go straight through. Durability is SQLite's own (a commit's
// bytes are in the operating system when it returns; synchronous=FULL still syncs them).
#pragma once

#include <functional>

struct sqlite3;

namespace sluice::store::sqlite {

// The VFS's name for sqlite3_open_v2, registered on first use (not as the default); null, which
// sqlite3_open_v2 reads as the default VFS, if SQLite has none to wrap.
const char* WalBatchingVfs();

// Tests: called before each buffered write reaches the file; returning false fails that write
// as the disk would (SQLITE_IOERR_WRITE). Empty: no faults. Not for concurrent use with opens.
void SetWalBatchWriteFaultForTest(std::function<bool()> fault);

// Tests: whether `db`'s main database file was opened through this VFS and knows its open WAL
// file, whose buffer its wal-index calls then flush.
bool WalBatchingLinkedForTest(sqlite3* db);

// The writes SQLite asked of WAL files opened through this VFS since the process started, and
// those that reached the files (for tests and benchmarks: the second over the first is the
// saving).
struct WalBatchCounts {
  long long asked = 0;     // pwrite calls SQLite made on WAL files
  long long written = 0;   // pwrite calls that reached the files
  long long deferred = 0;  // failed flushes kept for the next write or read (wal-index calls)
};
WalBatchCounts WalBatchCountsSoFar();

}  // namespace sluice::store::sqlite
