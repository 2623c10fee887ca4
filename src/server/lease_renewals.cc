#include "server/lease_renewals.h"

namespace sluice::server {

int64_t LeaseRenewals::End(const std::string& node_id, int64_t fallback) const {
  auto it = renewed_mono_.find(node_id);
  if (it == renewed_mono_.end()) return fallback;
  const int64_t since = clock_->MonotonicMillis() - it->second;
  return clock_->NowMillis() - since + lease_ms_;
}

}  // namespace sluice::server
