// Reliability (issue 5): uptime spans, the 30-day reliability score, and on-demand
// verification. Members of ServerCore.
#include <algorithm>
#include <map>

#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

void ServerCore::CloseUptimeLocked(NodeState& node, WriteBatch& batch) {
  if (node.online_since_ms == 0) return;
  // Online until its last sign of life, not until now: a node declared lost has been silent for
  // the whole heartbeat grace.
  int64_t silent = std::max<int64_t>(0, clock_->MonotonicMillis() - node.last_seen_mono);
  int64_t end = std::max(node.online_since_ms, clock_->NowMillis() - silent);
  batch.uptime.push_back({node.record.id, node.online_since_ms, end});
  node.online_since_ms = 0;
}

// The stored spans are what survives a crash (kill -9): scores read the live open spans from
// memory (ApplyReliabilityLocked), so a round that takes a few ticks changes no score. Nothing
// in memory changes but the round's position, applied after its slice commits.
Status ServerCore::UptimeRoundStepLocked() {
  const int64_t wall = clock_->NowMillis();
  WriteBatch batch;
  auto it = nodes_.lower_bound(*uptime_next_);
  for (const size_t limit = std::max<size_t>(1, options_.uptime_slice);
       it != nodes_.end() && batch.uptime.size() < limit; ++it) {
    const NodeState& ns = it->second;
    if (ns.online_since_ms > 0) batch.uptime.push_back({it->first, ns.online_since_ms, wall});
  }
  std::optional<std::string> next;
  if (it != nodes_.end()) next = it->first;
  if (Status s = CommitLocked(batch); !s.ok()) {
    uptime_next_.reset();  // the round ends; the next minute's begins from the first node
    return s;
  }
  uptime_next_ = std::move(next);
  return Status::Ok();
}

ServerCore::ReliabilityHistory ServerCore::ReadReliabilityHistory() const {
  ReliabilityHistory h;
  h.now = clock_->NowMillis();
  h.since = h.now - market::kReliabilityWindowMs;
  // Unreadable history scores nodes on what could be read; the next refresh tries again.
  if (auto uptime = store_->LoadUptime(h.since); uptime.ok()) h.uptime = *std::move(uptime);
  if (auto attempts = store_->AttemptsSince(h.since); attempts.ok()) {
    h.attempts = *std::move(attempts);
  }
  return h;
}

void ServerCore::RefreshReliabilityLocked() { ApplyReliabilityLocked(ReadReliabilityHistory()); }

bool ServerCore::ApplyReliabilityLocked(const ReliabilityHistory& h) {
  const int64_t now = h.now;
  const int64_t since = h.since;
  std::map<std::string, market::ReliabilityInputs> in;
  for (const auto& [id, ns] : nodes_) {
    in[id].window_ms = now - std::max(since, ns.record.registered_ms);
  }
  // Spans may overlap (an open span rewritten while a closed copy exists after a restart), so
  // they are merged per node before they are summed.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> spans;
  for (const auto& u : h.uptime) spans[u.node_id].emplace_back(u.start_ms, u.end_ms);
  for (const auto& [id, ns] : nodes_) {
    if (ns.online_since_ms > 0) spans[id].emplace_back(ns.online_since_ms, now);
  }
  for (auto& [id, list] : spans) {
    if (!in.count(id)) continue;
    std::sort(list.begin(), list.end());
    int64_t covered_to = since;
    for (auto [a, b] : list) {
      a = std::max(a, covered_to);
      b = std::min(b, now);
      if (b > a) {
        in[id].online_ms += b - a;
        covered_to = b;
      }
    }
  }
  for (const auto& a : h.attempts) {
    auto it = in.find(a.node_id);
    if (it == in.end()) continue;
    it->second.starts++;
    bool never_started = a.started_ms == 0;
    if (never_started && (a.state == AttemptState::kFailed || a.state == AttemptState::kLost)) {
      it->second.start_failures++;
    } else if (!never_started && !StoppedByMoney(a.cause) &&
               (a.state == AttemptState::kPreempted || a.state == AttemptState::kLost)) {
      // (A stop by the job's own budget or credit is not the node's doing.)
      it->second.preemptions++;
    }
  }
  bool changed = false;
  for (auto& [id, ns] : nodes_) {
    market::Reliability r = market::ComputeReliability(in[id]);
    if (r.score != ns.reliability.score) {
      ns.idle.reset();  // offers carry the score
      NodeChangedLocked(id);
      changed = true;
      search_.nodes_changed = true;
    }
    ns.reliability = r;
  }
  return changed;
}

// RequestReportLocked is in core_identity.cc: every request carries a nonce.

Result<st::NodeRecord> ServerCore::VerifyNode(const std::string& node) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(NodeState * found, NodeByIdOrNameLocked(node));
  if (!found->link) {
    return Status::FailedPrecondition("node " + found->record.name + " is " +
                                      std::string(st::Name(found->record.state)) +
                                      ": its agent must be connected to run the suite");
  }
  RequestReportLocked(*found, "on-demand");
  return found->record;
}

}  // namespace sluice::server
