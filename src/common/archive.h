// Workdir archives: the CLI packs a job's working directory for upload, the agent unpacks it.
// The format is a gzip'd pax tar, built deterministically because the server content-addresses
// it (same directory -> same bytes -> same blob). Unpacking treats the archive as untrusted input.
// All functions are thread-safe (no chdir, no umask changes, no global state).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice {

// Packs the contents of `dir` (paths relative to it, without a leading "./"). Regular files,
// directories and symlinks (stored as symlinks, never followed) are kept; sockets, fifos and
// devices are skipped. Entries are sorted and carry no mtime, owner or group, and the gzip header
// has no timestamp, so packing the same tree twice yields identical bytes.
// Errors: NotFound (no such dir), InvalidArgument (not a directory), ResourceExhausted (the
// compressed archive would exceed `max_bytes`), PermissionDenied / Internal (I/O).
Result<std::string> PackDirectory(const std::string& dir, size_t max_bytes);

// Unpacks a gzip'd (or plain) tar into `dest_dir`, which must exist and be empty. Permission bits
// are kept (scripts stay executable) except setuid/setgid/sticky; owners are never restored.
// Refuses absolute paths, ".." components, and anything that would be written through a symlink,
// so nothing is ever written outside `dest_dir`. Device nodes and fifos are skipped.
// Errors: InvalidArgument (corrupt, truncated or unsafe archive), ResourceExhausted (more than
// `max_entries` entries or more than `max_total_bytes` of file data: zip-bomb guard; also a
// full disk), FailedPrecondition (dest_dir missing, not a directory, or not empty).
// On error, whatever was already extracted is removed again, leaving dest_dir empty.
Status UnpackArchive(std::string_view data, const std::string& dest_dir, size_t max_total_bytes,
                     size_t max_entries);

}  // namespace sluice
