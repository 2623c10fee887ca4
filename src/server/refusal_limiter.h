// Rate limit for refused requests (issue 10 item 5): a token bucket per client address, so a
// client hammering the server with bad or missing tokens gets 429s and costs nothing but a
// counter. Addresses are forgotten oldest-first past a bound, so the table cannot grow without
// end. Time comes from an injectable Clock.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"

namespace sluice::server {

class RefusalLimiter {
 public:
  struct Options {
    double per_second = 5;         // refusals an address may earn per second, sustained
    double burst = 50;             // and at once
    size_t max_addresses = 65536;  // remembered addresses; the least recently refused go first
  };
  RefusalLimiter(const Clock* clock, Options options);

  // Counts one refusal from `remote_addr` ("127.0.0.1:5555", "[::1]:5555"; the port is ignored).
  // False when the address is over its limit: answer 429 instead of 401/403.
  bool Allow(std::string_view remote_addr);
  uint64_t limited() const;

  // "127.0.0.1:5555" -> "127.0.0.1", "[::1]:5555" -> "::1".
  static std::string HostOf(std::string_view remote_addr);

 private:
  struct Bucket {
    double tokens = 0;
    int64_t refilled_ms = 0;
    std::list<std::string>::iterator lru;
  };
  const Clock* const clock_;
  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // guarded by mu_
  std::list<std::string> lru_;                       // most recent first; guarded by mu_
  uint64_t limited_ = 0;                             // guarded by mu_
};

}  // namespace sluice::server
