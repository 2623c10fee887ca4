// Leases (issue 11 item 2; docs/design-notes.md "Leases and fencing"): each heartbeat's reply
// (and a hello) renews for CoreOptions::lease_ms the right of a node's attempts to run; an agent
// that hears nothing for that long freezes them. Metering stops where the lease ran out, so a
// node cut off from the server is not paid for time its attempts could not run. This keeps when
// each node's lease was last renewed. No lock of its own: the core's guards it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/clock.h"

namespace sluice::server {

class LeaseRenewals {
 public:
  LeaseRenewals(const Clock* clock, int64_t lease_ms) : clock_(clock), lease_ms_(lease_ms) {}
  // The node's lease was renewed now.
  void Renewed(const std::string& node_id) { renewed_mono_[node_id] = clock_->MonotonicMillis(); }
  // When the node's lease runs out, in wall ms: its last renewal plus the lease, measured on the
  // monotonic clock (a wall clock step does not move it). `fallback` when it was not renewed
  // since the server started.
  int64_t End(const std::string& node_id, int64_t fallback) const;

 private:
  const Clock* const clock_;
  const int64_t lease_ms_;
  std::unordered_map<std::string, int64_t> renewed_mono_;
};

}  // namespace sluice::server
