// Which of this node's attempts may run now (issue 11 item 2, fencing; docs/design-notes.md
// "Leases and fencing"). Every heartbeat the agent sends is numbered; the server's reply lists
// the attempts it holds placed on this node and a lease length. A listed attempt may run until
// the reply's heartbeat was *sent* plus the lease: counting from the send, not the receipt,
// keeps the agent's deadline at or before the one the server assumes, however slow the reply.
// An attempt the agent runs that the reply does not list is not placed here any more.
//
// Pure logic over steady-clock milliseconds the caller passes in; no I/O, no threads.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace sluice {

class LeaseBook {
 public:
  static constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

  // Heartbeat `seq` left at `sent_ms`. Only the newest few are remembered.
  void Sent(int64_t seq, int64_t sent_ms);

  struct Outcome {
    std::vector<std::string> renewed;   // listed and running here: lease extended
    std::vector<std::string> not_ours;  // running here but not listed: the server moved them
  };
  // The reply to heartbeat `seq`. `running` are the attempts whose processes run here. A reply to
  // a heartbeat we never sent (or forgot) renews nothing and disowns nothing.
  Outcome Received(int64_t seq, int64_t lease_ms, const std::set<std::string>& listed,
                   const std::vector<std::string>& running);

  // The server's lease length as told in `welcome`; 0 (an older server): leases never run out.
  void SetLeaseLength(int64_t lease_ms) { lease_ms_ = lease_ms; }
  // A new attempt, assigned at `now_ms` (the assignment is the server's word that it is ours).
  void Granted(const std::string& attempt_id, int64_t now_ms);
  void Forget(const std::string& attempt_id) { until_.erase(attempt_id); }

  // The lease of `attempt_id` ends at this time (kForever: no lease to enforce).
  int64_t Until(const std::string& attempt_id) const;
  bool Expired(const std::string& attempt_id, int64_t now_ms) const {
    return Until(attempt_id) <= now_ms;
  }

 private:
  static constexpr size_t kRemembered = 64;
  std::map<int64_t, int64_t> sent_;  // seq -> sent_ms
  std::map<std::string, int64_t> until_;
  int64_t lease_ms_ = 0;
};

}  // namespace sluice
