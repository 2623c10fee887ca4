// Each node's 30-day history (uptime spans, attempts), summarized off the core's lock for its
// reliability score (issue 5; docs/design-notes.md, the reliability notes under "Trust").
// A refresh reads the window from the store and summarizes it on a thread of its own; under the
// lock the core then only adds each node's open span (kept in memory) and scores it. At 10,000
// nodes, building the summary under the lock held it 32-58 ms a minute (bench/uptime).
// Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace sluice::server {

struct NodeHistory {
  // The stored spans clipped to the window, merged (they may overlap: an open span rewritten
  // while a closed copy exists after a restart), ascending.
  std::vector<std::pair<int64_t, int64_t>> online;
  int64_t online_ms = 0;  // their total
  int starts = 0;
  int start_failures = 0;  // ended failed or lost before they started
  int preemptions = 0;     // preempted or lost once started, not by the job's budget or credit
};

struct ReliabilityHistory {
  int64_t now = 0;                           // the window's end (wall ms)
  int64_t since = 0;                         // its start
  std::map<std::string, NodeHistory> nodes;  // by node id; nodes without history are absent
};

// Summarizes what the store holds for the window [since, now].
ReliabilityHistory SummarizeHistory(int64_t since, int64_t now,
                                    const std::vector<store::UptimeSpan>& uptime,
                                    const std::vector<store::AttemptRecord>& attempts);

// Time online within [h.since, h.now]: the node's stored spans (`node`: null when it has
// none) and, when `open_since` > 0, its open span [open_since, h.now], counted once where they
// overlap.
int64_t OnlineMs(const ReliabilityHistory& h, const NodeHistory* node, int64_t open_since);

}  // namespace sluice::server
