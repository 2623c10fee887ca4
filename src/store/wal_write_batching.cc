#include "store/wal_write_batching.h"

#include <sqlite3.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

namespace sluice::store::sqlite {
namespace {

// What a WAL file holds back: contiguous bytes from `start`, not yet written.
// At most what SQLite's unix VFS passes to one pwrite (it masks a write's length with 0x1ffff):
// 29 frames of 4 KiB pages.
constexpr int kBufferBytes = 120 << 10;
constexpr int kFrameHeaderBytes = 24;
constexpr sqlite3_int64 kWalHeaderBytes = 32;

struct Batch {
  char* bytes = nullptr;  // kBufferBytes, allocated at the first write
  int used = 0;
  sqlite3_int64 start = 0;
  bool commit_pending = false;  // the last write was a commit frame's header: flush after its page
  int deferred_rc = SQLITE_OK;  // a flush that failed where no error could be returned
};

// The sqlite3_file SQLite allocates for us (szOsFile: this, then the wrapped VFS's file).
struct File {
  sqlite3_file base;
  sqlite3_file* real;  // right after this struct
  Batch* batch;        // WAL files only
  File* wal;           // main database files: their connection's WAL file while it is open
  File* db;            // WAL files: their main database file
};

sqlite3_vfs* Real(sqlite3_vfs* vfs) { return static_cast<sqlite3_vfs*>(vfs->pAppData); }
File* Of(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
const sqlite3_io_methods& RealMethods(File* f) { return *f->real->pMethods; }

std::mutex fault_mu;
std::function<bool()> fault;         // SetWalBatchWriteFaultForTest
std::atomic<bool> fault_set{false};  // so a write takes fault_mu only while a test set one
std::atomic<long long> asked{0}, written{0}, deferred{0};

int WriteThrough(File* f, const void* data, int amount, sqlite3_int64 offset) {
  if (fault_set.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(fault_mu);
    if (fault && !fault()) return SQLITE_IOERR_WRITE;
  }
  written.fetch_add(1, std::memory_order_relaxed);
  return RealMethods(f).xWrite(f->real, data, amount, offset);
}

// Writes what the buffer holds; it is empty afterwards whatever the outcome (a failed write's
// frames belong to a transaction SQLite then rolls back, and later frames overwrite them).
int Flush(File* f) {
  Batch* b = f->batch;
  if (b == nullptr || b->used == 0) return SQLITE_OK;
  const int rc = WriteThrough(f, b->bytes, b->used, b->start);
  b->used = 0;
  return rc;
}

// Where no error can be returned (the wal-index calls): the next write or read reports it.
void FlushDeferringError(File* f) {
  if (f == nullptr || f->batch == nullptr) return;
  if (int rc = Flush(f); rc != SQLITE_OK && f->batch->deferred_rc == SQLITE_OK) {
    f->batch->deferred_rc = rc;
    deferred.fetch_add(1, std::memory_order_relaxed);
  }
}

// A failure FlushDeferringError kept, once, with the buffer and its commit note dropped.
int TakeDeferredError(Batch* b) {
  const int rc = std::exchange(b->deferred_rc, SQLITE_OK);
  if (rc != SQLITE_OK) {
    b->used = 0;
    b->commit_pending = false;
  }
  return rc;
}

// Flushes before an operation that reads or reveals the file; returns an earlier failure once.
int FlushBefore(File* f) {
  if (f->batch == nullptr) return SQLITE_OK;
  if (int rc = TakeDeferredError(f->batch); rc != SQLITE_OK) return rc;
  return Flush(f);
}

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

int BatchedWrite(File* f, const void* data, int amount, sqlite3_int64 offset) {
  asked.fetch_add(1, std::memory_order_relaxed);
  Batch* b = f->batch;
  if (int rc = TakeDeferredError(b); rc != SQLITE_OK) return rc;
  // A frame's header: bytes 4-7 are the database's size in pages after a commit, 0 in any other
  // frame. The write after a commit frame's header is that frame's page, the commit's last.
  bool commit_page = false;
  if (amount == kFrameHeaderBytes && offset >= kWalHeaderBytes) {
    b->commit_pending = BigEndian32(static_cast<const unsigned char*>(data) + 4) != 0;
  } else {
    commit_page = std::exchange(b->commit_pending, false);
  }
  if (b->bytes == nullptr) b->bytes = static_cast<char*>(std::malloc(kBufferBytes));
  if (b->used > 0 && (offset != b->start + b->used || b->used + amount > kBufferBytes)) {
    if (int rc = Flush(f); rc != SQLITE_OK) return rc;
  }
  if (b->bytes == nullptr || amount > kBufferBytes) {  // no buffer to be had, or too big for it
    if (int rc = Flush(f); rc != SQLITE_OK) return rc;
    return WriteThrough(f, data, amount, offset);
  }
  if (b->used == 0) b->start = offset;
  std::memcpy(b->bytes + b->used, data, static_cast<size_t>(amount));
  b->used += amount;
  // The commit's last page goes out now, whatever the buffer held before it (a full buffer was
  // written out above): this write's error is the commit's.
  return commit_page ? Flush(f) : SQLITE_OK;
}

// --- sqlite3_io_methods: WAL files batch writes, every file forwards the rest ---

int Close(sqlite3_file* file) {
  File* f = Of(file);
  int rc = FlushBefore(f);
  if (f->batch != nullptr) {
    std::free(f->batch->bytes);
    delete f->batch;
    f->batch = nullptr;
  }
  if (f->db != nullptr && f->db->wal == f) f->db->wal = nullptr;
  if (f->wal != nullptr && f->wal->db == f) f->wal->db = nullptr;
  const int closed = RealMethods(f).xClose(f->real);
  return rc != SQLITE_OK ? rc : closed;
}

int Read(sqlite3_file* file, void* out, int amount, sqlite3_int64 offset) {
  File* f = Of(file);
  if (int rc = FlushBefore(f); rc != SQLITE_OK) return rc;
  return RealMethods(f).xRead(f->real, out, amount, offset);
}

int Write(sqlite3_file* file, const void* data, int amount, sqlite3_int64 offset) {
  File* f = Of(file);
  if (f->batch == nullptr) return RealMethods(f).xWrite(f->real, data, amount, offset);
  return BatchedWrite(f, data, amount, offset);
}

int Truncate(sqlite3_file* file, sqlite3_int64 size) {
  File* f = Of(file);
  if (int rc = FlushBefore(f); rc != SQLITE_OK) return rc;
  return RealMethods(f).xTruncate(f->real, size);
}

int Sync(sqlite3_file* file, int flags) {
  File* f = Of(file);
  if (int rc = FlushBefore(f); rc != SQLITE_OK) return rc;
  return RealMethods(f).xSync(f->real, flags);
}

int FileSize(sqlite3_file* file, sqlite3_int64* size) {
  File* f = Of(file);
  if (int rc = FlushBefore(f); rc != SQLITE_OK) return rc;
  return RealMethods(f).xFileSize(f->real, size);
}

int Lock(sqlite3_file* file, int level) {
  return RealMethods(Of(file)).xLock(Of(file)->real, level);
}
int Unlock(sqlite3_file* file, int level) {
  return RealMethods(Of(file)).xUnlock(Of(file)->real, level);
}
int CheckReservedLock(sqlite3_file* file, int* out) {
  return RealMethods(Of(file)).xCheckReservedLock(Of(file)->real, out);
}

int FileControl(sqlite3_file* file, int op, void* arg) {
  File* f = Of(file);
  if (int rc = FlushBefore(f); rc != SQLITE_OK) return rc;
  return RealMethods(f).xFileControl(f->real, op, arg);
}

int SectorSize(sqlite3_file* file) { return RealMethods(Of(file)).xSectorSize(Of(file)->real); }
int DeviceCharacteristics(sqlite3_file* file) {
  return RealMethods(Of(file)).xDeviceCharacteristics(Of(file)->real);
}

// The wal-index lives with the main database file. Every use of it may tell another connection
// of frames, so the connection's WAL buffer is written first.
int ShmMap(sqlite3_file* file, int page, int page_size, int extend, void volatile** out) {
  File* f = Of(file);
  if (RealMethods(f).iVersion < 2) return SQLITE_IOERR_SHMMAP;
  FlushDeferringError(f->wal);
  return RealMethods(f).xShmMap(f->real, page, page_size, extend, out);
}
int ShmLock(sqlite3_file* file, int offset, int n, int flags) {
  File* f = Of(file);
  if (RealMethods(f).iVersion < 2) return SQLITE_IOERR_SHMLOCK;
  FlushDeferringError(f->wal);
  return RealMethods(f).xShmLock(f->real, offset, n, flags);
}
void ShmBarrier(sqlite3_file* file) {
  File* f = Of(file);
  if (RealMethods(f).iVersion < 2) return;
  FlushDeferringError(f->wal);
  RealMethods(f).xShmBarrier(f->real);
}
int ShmUnmap(sqlite3_file* file, int delete_flag) {
  File* f = Of(file);
  if (RealMethods(f).iVersion < 2) return SQLITE_OK;
  FlushDeferringError(f->wal);
  return RealMethods(f).xShmUnmap(f->real, delete_flag);
}
int Fetch(sqlite3_file* file, sqlite3_int64 offset, int amount, void** out) {
  File* f = Of(file);
  *out = nullptr;  // "no mapping": SQLite reads instead
  if (RealMethods(f).iVersion < 3) return SQLITE_OK;
  if (int rc = FlushBefore(f); rc != SQLITE_OK) return rc;
  return RealMethods(f).xFetch(f->real, offset, amount, out);
}
int Unfetch(sqlite3_file* file, sqlite3_int64 offset, void* p) {
  File* f = Of(file);
  if (RealMethods(f).iVersion < 3) return SQLITE_OK;
  return RealMethods(f).xUnfetch(f->real, offset, p);
}

constexpr sqlite3_io_methods kMethods = {3,
                                         Close,
                                         Read,
                                         Write,
                                         Truncate,
                                         Sync,
                                         FileSize,
                                         Lock,
                                         Unlock,
                                         CheckReservedLock,
                                         FileControl,
                                         SectorSize,
                                         DeviceCharacteristics,
                                         ShmMap,
                                         ShmLock,
                                         ShmBarrier,
                                         ShmUnmap,
                                         Fetch,
                                         Unfetch};

// --- sqlite3_vfs: opens through the default VFS, forwards everything else to it ---

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  File* f = Of(file);
  std::memset(f, 0, static_cast<size_t>(vfs->szOsFile));  // ours and the wrapped file's
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  sqlite3_vfs* real = Real(vfs);
  int rc = real->xOpen(real, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK) {
    if (f->real->pMethods != nullptr) f->real->pMethods->xClose(f->real);
    return rc;
  }
  if ((flags & SQLITE_OPEN_WAL) != 0 && name != nullptr) {
    f->batch = new (std::nothrow) Batch;
    if (f->batch == nullptr) {
      f->real->pMethods->xClose(f->real);
      return SQLITE_NOMEM;
    }
    // The main database file this WAL belongs to, opened through this VFS too (SQLite opens a
    // WAL only through its database's VFS): its wal-index calls flush this file's buffer.
    if (sqlite3_file* db = sqlite3_database_file_object(name); db && db->pMethods == &kMethods) {
      f->db = Of(db);
      f->db->wal = f;
    }
  }
  f->base.pMethods = &kMethods;
  return SQLITE_OK;
}

int Delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  return Real(vfs)->xDelete(Real(vfs), name, sync_dir);
}
int Access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  return Real(vfs)->xAccess(Real(vfs), name, flags, out);
}
int FullPathname(sqlite3_vfs* vfs, const char* name, int n, char* out) {
  return Real(vfs)->xFullPathname(Real(vfs), name, n, out);
}
void* DlOpen(sqlite3_vfs* vfs, const char* name) { return Real(vfs)->xDlOpen(Real(vfs), name); }
void DlError(sqlite3_vfs* vfs, int n, char* out) { Real(vfs)->xDlError(Real(vfs), n, out); }
void (*DlSym(sqlite3_vfs* vfs, void* handle, const char* symbol))(void) {
  return Real(vfs)->xDlSym(Real(vfs), handle, symbol);
}
void DlClose(sqlite3_vfs* vfs, void* handle) { Real(vfs)->xDlClose(Real(vfs), handle); }
int Randomness(sqlite3_vfs* vfs, int n, char* out) {
  return Real(vfs)->xRandomness(Real(vfs), n, out);
}
int Sleep(sqlite3_vfs* vfs, int micros) { return Real(vfs)->xSleep(Real(vfs), micros); }
int CurrentTime(sqlite3_vfs* vfs, double* out) { return Real(vfs)->xCurrentTime(Real(vfs), out); }
int GetLastError(sqlite3_vfs* vfs, int n, char* out) {
  return Real(vfs)->xGetLastError(Real(vfs), n, out);
}
int CurrentTimeInt64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  return Real(vfs)->xCurrentTimeInt64(Real(vfs), out);
}

sqlite3_vfs vfs;  // WalBatchingVfs

}  // namespace

const char* WalBatchingVfs() {
  static std::once_flag once;
  std::call_once(once, [] {
    sqlite3_vfs* real = sqlite3_vfs_find(nullptr);
    if (real == nullptr) return;  // SQLite failed to initialize: the open will say so
    vfs.iVersion = 2;  // through xCurrentTimeInt64; the system-call overrides are the real VFS's
    vfs.szOsFile = static_cast<int>(sizeof(File)) + real->szOsFile;
    vfs.mxPathname = real->mxPathname;
    vfs.zName = "sluice-wal-batch";
    vfs.pAppData = real;
    vfs.xOpen = Open;
    vfs.xDelete = Delete;
    vfs.xAccess = Access;
    vfs.xFullPathname = FullPathname;
    vfs.xDlOpen = DlOpen;
    vfs.xDlError = DlError;
    vfs.xDlSym = DlSym;
    vfs.xDlClose = DlClose;
    vfs.xRandomness = Randomness;
    vfs.xSleep = Sleep;
    vfs.xCurrentTime = CurrentTime;
    vfs.xGetLastError = GetLastError;
    vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    sqlite3_vfs_register(&vfs, /*makeDflt=*/0);
  });
  return vfs.zName;  // null when not registered: sqlite3_open_v2 then uses the default VFS
}

void SetWalBatchWriteFaultForTest(std::function<bool()> f) {
  std::lock_guard<std::mutex> lock(fault_mu);
  fault = std::move(f);
  fault_set.store(static_cast<bool>(fault), std::memory_order_release);
}

bool WalBatchingLinkedForTest(sqlite3* db) {
  sqlite3_file* file = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK) return false;
  if (file == nullptr || file->pMethods != &kMethods) return false;
  const File* f = Of(file);
  return f->wal != nullptr && f->wal->db == f && f->wal->batch != nullptr;
}

WalBatchCounts WalBatchCountsSoFar() {
  return {asked.load(std::memory_order_relaxed), written.load(std::memory_order_relaxed),
          deferred.load(std::memory_order_relaxed)};
}

}  // namespace sluice::store::sqlite
