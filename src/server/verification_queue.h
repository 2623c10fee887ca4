// Which nodes run their conformance suite now (issue 12 item 5; docs/design-notes.md
// "Storm-proof verification"): at most a set number at once, the other requests first come,
// first served, and a failed verification's retry joining the queue once it is due.
//
// The queue holds indexes over the nodes' own flags (core_state::NodeState: verify_queued,
// verify_queue_order, awaiting_report, verify_retry_mono), never a copy of them: an entry is
// checked against its node when met, so an entry left stale by a change elsewhere does no harm,
// and admission costs what is queued, admitted or due, not a walk over every node (a fleet
// enrolling together admits once per hello and per verdict).
//
// Pure: no clock, no I/O. Thread safety: none; the core calls it under its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "server/core_state.h"

namespace sluice::server {

class VerificationQueue {
 public:
  using NodeState = core_state::NodeState;
  using Nodes = std::map<std::string, NodeState>;
  // An admitted suite that has not reported after this long (a hung agent) stops holding its
  // slot. A real suite takes seconds to a few minutes, GPU burn-in included.
  static constexpr int64_t kSlotMs = 10 * 60 * 1000;

  // Queues a request for node `id` (`why`: its trigger). The node is under way from now
  // (awaiting_report: jobs may wait for it) and a retry it had scheduled is dropped. It queues
  // even when its last suite was admitted (after a reconnect storm every node would otherwise
  // skip the queue at once); a node already queued keeps its turn.
  void Enqueue(const std::string& id, NodeState& node, const std::string& why);
  // Files node `id` in the indexes its flags call for: after they were set elsewhere (a failed
  // verdict's retry) or its entry was replaced.
  void Track(const std::string& id, const NodeState& node);
  // Retries due by `now_mono` join the queue (`changed` is told of each: its flags changed);
  // then queued requests are admitted, oldest first, while fewer than `max_running` suites run.
  // `admit` sends a request (and stamps verify_admitted_mono). A node without a link holds no
  // slot and keeps its turn until it is back.
  void Admit(Nodes& nodes, int64_t now_mono, int max_running,
             const std::function<void(const std::string&, NodeState&)>& admit,
             const std::function<void(const std::string&)>& changed);

 private:
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the indexes against a scan of every node.
  void Check(const Nodes& nodes, int64_t now_mono, int running) const;
#endif
  int64_t seq_ = 0;                                    // the last NodeState::verify_queue_order
  std::set<std::pair<int64_t, std::string>> queue_;    // by queue order
  std::set<std::string> admitted_;                     // admitted, maybe running
  std::set<std::pair<int64_t, std::string>> retries_;  // by due time
};

}  // namespace sluice::server
