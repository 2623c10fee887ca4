// Writing a file so that a crash leaves either the old contents or the new, never a mix: a
// temp file with the exact mode, fsync, rename, fsync of the directory. The one copy of this for
// the server's secrets, the agent's state and the CLI's downloads.
#pragma once

#include <string>

#include "common/status.h"

namespace sluice {

enum class Durability {
  kPowerLoss,     // fsync of the file and its directory: the write survives a crash of the host
  kProcessCrash,  // no fsync: it survives the writer's crash, not the host's; for files that
                  // mean nothing after a reboot (a supervisor's), and cost no disk flush
};

// Writes `content` to `path` with `mode` (exact: neither the umask nor an old file changes it).
Status WriteFileAtomic(const std::string& path, const std::string& content, int mode = 0644,
                       Durability durability = Durability::kPowerLoss);

}  // namespace sluice
