// Checkpoint sync: saves a job's checkpoint directory ($SLUICE_CHECKPOINT_DIR) to the server's
// content-addressed blob store and restores it before a later attempt, possibly on another
// machine.
//
// Layout in the blob store: every file is cut into fixed-size chunks (kChunkBytes), each stored
// as a blob named by its SHA-256. A manifest (JSON, below) lists the files with their modes,
// sizes and chunk digests; it is stored last, and its own digest is the checkpoint's identity.
// Because chunks are content-addressed, a second upload sends only the chunks the server does
// not have yet: after a checkpoint that rewrote one region of a big file, only the chunks that
// changed travel. Because the manifest goes last, a checkpoint whose upload was cut short has no
// manifest digest anyone could point at, so it can never replace a complete one.
//
// Manifest, version 1 (keys sorted, compact, so the same tree always yields the same digest):
//   {"files":[{"chunks":["<sha256>",...],"mode":420,"path":"sub/model.pt","size":123}],
//    "total_bytes":123,"version":1}
// Paths are relative, '/'-separated, strictly increasing in byte order; directories are
// implied by the paths (empty directories are not kept). `mode` holds permission bits only
// (0..0777). A file of `size` bytes has ceil(size / kChunkBytes) chunks, all kChunkBytes long
// except the last; an empty file has none.
//
// Consistency: UploadCheckpoint reads each file once and stores exactly the bytes it read, so a
// file the job is still writing is captured half-written. Jobs should write checkpoints
// atomically: write to a temporary name, fsync, rename into place (and upload after the job
// reports the checkpoint done). Renames are what the reader can rely on; in-place writes are not.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "net/http_types.h"

namespace sluice {

class HttpClient;

namespace checkpoint {

// Size of every chunk but a file's last. 4 MiB keeps a changed region's re-upload small while
// a 64 GiB checkpoint still needs only 16384 chunk blobs.
inline constexpr size_t kChunkBytes = size_t{4} << 20;
// Limits on one checkpoint, enforced on upload and (against hostile manifests) on restore.
inline constexpr size_t kMaxFiles = 100000;
inline constexpr uint64_t kMaxTotalBytes = uint64_t{64} << 30;
// Digests per Missing() call, so one request body stays small (about 67 KB of JSON).
inline constexpr size_t kMissingBatch = 1000;
// A manifest larger than this is refused before parsing (100000 long paths fit easily).
inline constexpr size_t kMaxManifestBytes = size_t{64} << 20;

// Where the blobs live. Implementations report transport failures as Unavailable /
// DeadlineExceeded (retry may help) and server answers with the Status code the HTTP status
// maps to. Not required to be thread-safe: the functions below call it from one thread.
class BlobTransport {
 public:
  virtual ~BlobTransport() = default;
  // The subset of `digests` the store does not hold (any order).
  virtual Result<std::vector<std::string>> Missing(const std::vector<std::string>& digests) = 0;
  // Stores `bytes` under `digest` (the store may verify that sha256(bytes) == digest).
  virtual Status Put(const std::string& digest, std::string bytes) = 0;
  // The bytes stored under `digest`; NotFound when absent. Callers verify the digest.
  virtual Result<std::string> Get(const std::string& digest) = 0;
};

// BlobTransport over the server's HTTP API:
//   PUT  /v1/blobs/<sha256>  raw bytes → 201
//   GET  /v1/blobs/<sha256>  → 200 raw bytes
//   POST /v1/blobs/missing   {"digests":[...]} → 200 {"missing":[...]}
// A server without the missing endpoint (404, 405 or 501) is treated as holding nothing, so
// everything is uploaded: slower, never wrong. Non-success answers become a Status whose code
// maps from the HTTP status and whose message names the request and the HTTP status.
// Not thread-safe (it owns one keep-alive HttpClient); make one per thread.
class HttpBlobTransport : public BlobTransport {
 public:
  // `server` is the server's base URL (ParseUrl); `timeout` bounds each request, so it must
  // allow a 4 MiB chunk to cross the slowest link the agent is expected on.
  HttpBlobTransport(Url server, std::string bearer_token,
                    std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // Same, parsing `server_url` ("http://host:port"); InvalidArgument / Unimplemented as ParseUrl.
  static Result<std::unique_ptr<HttpBlobTransport>> Create(
      std::string_view server_url, std::string bearer_token,
      std::chrono::milliseconds timeout = std::chrono::seconds(120));
  ~HttpBlobTransport() override;

  Result<std::vector<std::string>> Missing(const std::vector<std::string>& digests) override;
  Status Put(const std::string& digest, std::string bytes) override;
  Result<std::string> Get(const std::string& digest) override;

 private:
  std::unique_ptr<HttpClient> http_;
};

struct UploadResult {
  std::string manifest_digest;  // the checkpoint's identity: hand this to RestoreCheckpoint
  size_t files = 0;             // regular files in the manifest
  uint64_t total_bytes = 0;     // their bytes
  uint64_t uploaded_bytes = 0;  // chunk bytes actually sent (the manifest not counted)
  size_t chunks = 0;            // chunk references in the manifest (duplicates counted)
  size_t uploaded_chunks = 0;   // chunks actually sent (the manifest not counted)
  // Relative paths left out: symlinks, sockets, fifos, devices, names that are not valid UTF-8
  // (JSON could not carry them faithfully), and files that vanished during the walk. Sorted.
  std::vector<std::string> skipped;
};

// Uploads the tree under `dir`: walks it (never following symlinks), reads and chunks every
// regular file, asks t.Missing() which chunks the store lacks (at most kMissingBatch digests per
// call), Puts only those, and Puts the manifest last. Memory stays bounded (chunks are held only
// until their batch is sent), whatever the checkpoint's size.
// Errors: NotFound (no `dir`), InvalidArgument (`dir` not a directory), ResourceExhausted (more
// than kMaxFiles files or kMaxTotalBytes bytes, or a tree nested too deep), PermissionDenied /
// Internal (I/O), and whatever the transport returns. On error the manifest is not stored, so
// no checkpoint identity exists for a partial upload; chunks already sent are simply reused by
// the next attempt.
Result<UploadResult> UploadCheckpoint(const std::string& dir, BlobTransport& t);

// Replaces the contents of `dir` with the checkpoint `manifest_digest`. The manifest and every
// chunk are fetched and verified against their SHA-256 while being written into a fresh sibling
// directory (`dir` + ".restore-XXXXXX"); files are fsynced and only once everything checked out
// is `dir` swapped for it (atomically via renameat2(RENAME_EXCHANGE) where the filesystem
// supports it, else two renames), and the old contents removed. `dir` need not exist; its parent
// is created if missing. If `dir` is a symlink, the directory it points to is replaced.
// Any failure leaves `dir` exactly as it was and removes the temporary directory.
// Errors: InvalidArgument (malformed digest or manifest, naming the field; unsafe paths such as
// "../x" or "/etc/x"; a chunk or manifest whose bytes do not match its digest, naming the file:
// the checkpoint is corrupt), ResourceExhausted (manifest over the limits, or a full disk),
// NotFound (a blob the manifest needs is absent, naming the file), FailedPrecondition (`dir`
// exists and is not a directory), Internal / PermissionDenied (I/O), and transport errors.
// A crash mid-restore can leave a ".restore-*" sibling behind; `dir` itself stays intact.
Status RestoreCheckpoint(const std::string& manifest_digest, const std::string& dir,
                         BlobTransport& t);

}  // namespace checkpoint
}  // namespace sluice
