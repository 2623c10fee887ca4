// Reliability (issue 5): uptime spans, the 30-day reliability score, and on-demand
// verification. Members of ServerCore.
#include <algorithm>

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

ReliabilityHistory ServerCore::ReadReliabilityHistory() const {
  const int64_t now = clock_->NowMillis();
  const int64_t since = now - market::kReliabilityWindowMs;
  // Unreadable history scores nodes on what could be read; the next refresh tries again.
  std::vector<store::UptimeSpan> uptime;
  if (auto read = store_->LoadUptime(since); read.ok()) uptime = *std::move(read);
  std::vector<store::AttemptRecord> attempts;
  if (auto read = store_->AttemptsSince(since); read.ok()) attempts = *std::move(read);
  return SummarizeHistory(since, now, uptime, attempts);
}

void ServerCore::RefreshReliabilityLocked() { ApplyReliabilityLocked(ReadReliabilityHistory()); }

bool ServerCore::ApplyReliabilityLocked(const ReliabilityHistory& h) {
  bool changed = false;
  // Both maps are in node-id order: one pass over the two, no lookups.
  auto hist = h.nodes.begin();
  for (auto& [id, ns] : nodes_) {
    while (hist != h.nodes.end() && hist->first < id) ++hist;
    const NodeHistory* node = hist != h.nodes.end() && hist->first == id ? &hist->second : nullptr;
    market::ReliabilityInputs in;
    in.window_ms = h.now - std::max(h.since, ns.record.registered_ms);
    in.online_ms = OnlineMs(h, node, ns.online_since_ms);
    if (node != nullptr) {
      in.starts = node->starts;
      in.start_failures = node->start_failures;
      in.preemptions = node->preemptions;
    }
    market::Reliability r = market::ComputeReliability(in);
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
