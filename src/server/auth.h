// Bearer-token authentication. On first start the server mints an admin token and a provider
// join token, stores only their SHA-256, and writes the secrets to DIR/admin.token and
// DIR/join.token with mode 0600 (the only copies).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"

namespace sluice::server {

enum class Role { kNone, kAdmin, kAgent };

class TokenAuth {
 public:
  // Loads token hashes from the store, creating and writing the tokens when there are none.
  static Result<TokenAuth> Bootstrap(store::Store* store, const std::string& data_dir,
                                     const Clock* clock);
  // Role granted by an `Authorization: Bearer <token>` header value; kNone when absent/invalid.
  // `token_id` (may be null) receives the matching token's id, for the audit log.
  Role Authenticate(std::string_view authorization_header, std::string* token_id = nullptr) const;

 private:
  std::vector<store::TokenRecord> tokens_;  // constant after Bootstrap
};

// Writes `content` to `path` atomically (temp file + rename) with the given mode.
Status WriteFileAtomic(const std::string& path, const std::string& content, int mode);

}  // namespace sluice::server
