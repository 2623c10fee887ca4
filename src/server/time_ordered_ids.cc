#include "server/time_ordered_ids.h"

#include <algorithm>
#include <cstdio>

#include "common/crypto.h"

namespace sluice::server {

std::string TimeOrderedIds::Next(const char* prefix) {
  constexpr uint64_t kOrdered = (uint64_t{1} << 48) - 1;  // 12 hex digits
  const int64_t now = clock_->NowMillis();
  const uint64_t from_clock = (static_cast<uint64_t>(std::max<int64_t>(0, now)) << 4) & kOrdered;
  last_ = std::max(from_clock, (last_ + 1) & kOrdered);
  char ordered[13];
  std::snprintf(ordered, sizeof ordered, "%012llx", static_cast<unsigned long long>(last_));
  return std::string(prefix) + ordered + RandomHex(2);
}

}  // namespace sluice::server
