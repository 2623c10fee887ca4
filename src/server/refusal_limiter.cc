#include "server/refusal_limiter.h"

#include <algorithm>

namespace sluice::server {

RefusalLimiter::RefusalLimiter(const Clock* clock, Options options)
    : clock_(clock), options_(options) {}

std::string RefusalLimiter::HostOf(std::string_view addr) {
  if (!addr.empty() && addr.front() == '[') {
    size_t close = addr.find(']');
    return std::string(addr.substr(1, close == std::string_view::npos ? addr.npos : close - 1));
  }
  size_t colon = addr.rfind(':');
  // More than one colon without brackets: a bare IPv6 address with no port.
  if (colon == std::string_view::npos || addr.find(':') != colon) return std::string(addr);
  return std::string(addr.substr(0, colon));
}

bool RefusalLimiter::Allow(std::string_view remote_addr) {
  std::string host = HostOf(remote_addr);
  int64_t now = clock_->MonotonicMillis();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(host);
  if (it == buckets_.end()) {
    if (buckets_.size() >= std::max<size_t>(1, options_.max_addresses)) {
      buckets_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(host);
    it = buckets_.emplace(host, Bucket{options_.burst, now, lru_.begin()}).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  Bucket& b = it->second;
  double elapsed_s = static_cast<double>(std::max<int64_t>(0, now - b.refilled_ms)) / 1000.0;
  b.tokens = std::min(options_.burst, b.tokens + elapsed_s * options_.per_second);
  b.refilled_ms = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  ++limited_;
  return false;
}

uint64_t RefusalLimiter::limited() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limited_;
}

}  // namespace sluice::server
