// BlobStore: content-addressed files (workdir archives now; checkpoints later). A blob is named
// by the SHA-256 of its bytes, written to a temporary file, fsynced and renamed into place, so a
// reader never sees a half-written blob.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice::store {

class BlobStore {
 public:
  explicit BlobStore(std::string root_dir);

  // Stores `data`; returns its lowercase hex SHA-256. Storing bytes already present is a no-op.
  Result<std::string> Put(std::string_view data);
  // Stores `data` only if its SHA-256 equals `digest` (InvalidArgument otherwise).
  Status PutVerified(std::string_view digest, std::string_view data);
  // NotFound when absent; Internal "blob <digest> is corrupt" when the file's bytes no longer
  // hash to `digest`. Invalid digests are InvalidArgument for every method (Has: false).
  Result<std::string> Get(std::string_view digest) const;
  bool Has(std::string_view digest) const;
  // Its size in bytes; 0 when absent (or the digest is invalid).
  int64_t Size(std::string_view digest) const;
  // NotFound when absent.
  Status Delete(std::string_view digest);
  // True for 64 lowercase hex characters; anything else is never used as a path.
  static bool IsValidDigest(std::string_view digest);

 private:
  std::string PathFor(std::string_view digest) const;
  const std::string root_;
};

}  // namespace sluice::store
