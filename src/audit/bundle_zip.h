// Zip files in memory (libarchive): the container of audit bundles. Zip rather than tar because
// every desktop opens it. This layer only moves named byte strings in and out; what names are
// allowed and what the files mean is bundle.h's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sluice {

// (name, content) pairs, in archive order.
using ZipEntries = std::vector<std::pair<std::string, std::string>>;

// Bounds for reading a zip that came from anywhere.
struct ZipLimits {
  size_t max_entries = 10000;
  uint64_t max_total_bytes = 256ull << 20;  // uncompressed, all entries together
};

// A deflated zip of regular files (mode 0644), in the given order, names as given (nothing is
// checked: tests build hostile zips with this). Entries carry mtime 0 and no owner, so the
// same entries always give the same bytes.
// Errors: InvalidArgument (empty name), Internal (libarchive).
Result<std::string> WriteZip(const ZipEntries& entries);

// Every entry of a zip, in archive order, duplicates included. Treats the input as untrusted.
// Errors: InvalidArgument (not a zip, corrupt data or CRC, encrypted entries, entries that are
// not regular files), ResourceExhausted (more than the limits allow).
Result<ZipEntries> ReadZip(std::string_view zip, const ZipLimits& limits = {});

}  // namespace sluice
