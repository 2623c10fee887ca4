// File helpers for the server's secrets: token files, keys and server.url are written atomically
// (temp file + fsync + rename) with an exact mode. Accounts and tokens live in server/accounts.h.
#pragma once

#include <string>

#include "common/status.h"

namespace sluice::server {

// Writes `content` to `path` atomically (temp file + rename) with the given mode.
Status WriteFileAtomic(const std::string& path, const std::string& content, int mode);

}  // namespace sluice::server
