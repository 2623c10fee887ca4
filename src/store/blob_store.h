// BlobStore: content-addressed files (workdir archives now; checkpoints later). A blob is named
// by the SHA-256 of its bytes, written to a temporary file, fsynced and renamed into place, so a
// reader never sees a half-written blob.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice::store {

class BlobStore {
 public:
  explicit BlobStore(std::string root_dir);

  // Stores `data`; returns its lowercase hex SHA-256.
  Result<std::string> Put(std::string_view data);
  // Stores `data` only if its SHA-256 equals `digest` (InvalidArgument otherwise).
  Status PutVerified(std::string_view digest, std::string_view data);
  Result<std::string> Get(std::string_view digest) const;
  bool Has(std::string_view digest) const;
  Status Delete(std::string_view digest);
  // True for 64 lowercase hex characters; anything else is never used as a path.
  static bool IsValidDigest(std::string_view digest);

 private:
  std::string PathFor(std::string_view digest) const;
  const std::string root_;
};

}  // namespace sluice::store
