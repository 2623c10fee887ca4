#include "server/reliability_history.h"

#include <algorithm>

#include "server/core_internal.h"

namespace sluice::server {

ReliabilityHistory SummarizeHistory(int64_t since, int64_t now,
                                    const std::vector<store::UptimeSpan>& uptime,
                                    const std::vector<store::AttemptRecord>& attempts) {
  ReliabilityHistory h;
  h.now = now;
  h.since = since;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> spans;
  for (const auto& u : uptime) {
    const int64_t a = std::max(u.start_ms, since), b = std::min(u.end_ms, now);
    if (b > a) spans[u.node_id].emplace_back(a, b);
  }
  for (auto& [id, list] : spans) {
    std::sort(list.begin(), list.end());
    NodeHistory& node = h.nodes[id];
    for (const auto& [a, b] : list) {
      if (!node.online.empty() && a <= node.online.back().second) {
        node.online.back().second = std::max(node.online.back().second, b);
      } else {
        node.online.emplace_back(a, b);
      }
    }
    for (const auto& [a, b] : node.online) node.online_ms += b - a;
  }
  for (const auto& a : attempts) {
    NodeHistory& node = h.nodes[a.node_id];
    node.starts++;
    const bool never_started = a.started_ms == 0;
    if (never_started &&
        (a.state == store::AttemptState::kFailed || a.state == store::AttemptState::kLost)) {
      node.start_failures++;
    } else if (!never_started && !core::StoppedByMoney(a.cause) &&
               (a.state == store::AttemptState::kPreempted ||
                a.state == store::AttemptState::kLost)) {
      // (A stop by the job's own budget or credit is not the node's doing.)
      node.preemptions++;
    }
  }
  return h;
}

int64_t OnlineMs(const ReliabilityHistory& h, const NodeHistory* node, int64_t open_since) {
  int64_t online = node != nullptr ? node->online_ms : 0;
  if (open_since <= 0) return online;
  const int64_t start = std::max(open_since, h.since);
  if (h.now <= start) return online;
  int64_t covered = 0;  // of [start, now], by stored spans: only the last few can reach it
  if (node != nullptr) {
    for (auto it = node->online.rbegin(); it != node->online.rend() && it->second > start; ++it) {
      covered += std::min(it->second, h.now) - std::max(it->first, start);
    }
  }
  return online + (h.now - start) - covered;
}

}  // namespace sluice::server
