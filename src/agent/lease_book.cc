#include "agent/lease_book.h"

#include <algorithm>

namespace sluice {

void LeaseBook::Sent(int64_t seq, int64_t sent_ms) {
  sent_[seq] = sent_ms;
  while (sent_.size() > kRemembered) sent_.erase(sent_.begin());
}

LeaseBook::Outcome LeaseBook::Received(int64_t seq, int64_t lease_ms,
                                       const std::set<std::string>& listed,
                                       const std::vector<std::string>& running) {
  Outcome out;
  auto it = sent_.find(seq);
  if (it == sent_.end() || lease_ms <= 0) return out;
  const int64_t until = it->second + lease_ms;
  lease_ms_ = lease_ms;
  for (const auto& id : running) {
    if (listed.count(id)) {
      int64_t& u = until_[id];
      // An older reply arriving late never shortens a lease.
      if (u == kForever || u < until) u = until;
      out.renewed.push_back(id);
    } else {
      out.not_ours.push_back(id);
    }
  }
  // Replies to older heartbeats than this one can only say less.
  sent_.erase(sent_.begin(), std::next(it));
  return out;
}

void LeaseBook::Granted(const std::string& attempt_id, int64_t now_ms) {
  until_[attempt_id] = lease_ms_ > 0 ? now_ms + lease_ms_ : kForever;
}

int64_t LeaseBook::Until(const std::string& attempt_id) const {
  auto it = until_.find(attempt_id);
  return it == until_.end() ? kForever : it->second;
}

}  // namespace sluice
