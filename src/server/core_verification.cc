// Storm-proof verification (issue 12 item 5; docs/design-notes.md "Storm-proof verification"):
// a bounded number of conformance suites at once, the rest queued, and a failed verification
// retried with backoff before the node settles on `unverified`. Members of ServerCore; the
// caller holds mu_.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

namespace {
// How long an admitted suite may hold its slot without reporting. A real suite takes seconds to
// a few minutes (GPU burn-in included).
constexpr int64_t kVerificationSlotMs = 10 * 60 * 1000;
}  // namespace

void ServerCore::RequestReportLocked(NodeState& node, const std::string& why) {
  if (!node.link) return;
  node.verify_retry_mono = 0;  // this request replaces a scheduled retry
  // Even a node whose suite was already admitted queues again: after a reconnect storm every
  // node would otherwise skip the queue at once.
  if (!node.verify_queued) node.verify_queue_order = ++verify_queue_seq_;
  node.awaiting_report = true;  // under way: jobs may wait for it
  NodeChangedLocked(node.record.id);
  node.verify_queued = true;
  node.verify_reason = why;
  TrackVerificationLocked(node.record.id, node);
  AdmitVerificationsLocked();
}

void ServerCore::AfterVerdictLocked(NodeState& node) {
  if (node.record.verification == kVerified) {
    node.verify_failures = 0;
    node.verify_retry_mono = 0;
  } else if (node.verify_failures < options_.verify_retries) {
    // A suite can fail for reasons that pass (a neighbour's suite on the same link or disk, a
    // busy moment): ask again later, each time twice as late, with jitter so a fleet that
    // failed together does not retry together.
    ++node.verify_failures;
    static thread_local std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    int64_t delay =
        static_cast<int64_t>(static_cast<double>(options_.verify_retry_ms) *
                             static_cast<double>(1 << (node.verify_failures - 1)) * jitter(rng));
    node.verify_retry_mono = clock_->MonotonicMillis() + delay;
    std::fprintf(stderr,
                 "sluice server: node %s failed verification (%d of %d tries); asking again in "
                 "%.0f s\n",
                 node.record.name.c_str(), node.verify_failures, options_.verify_retries + 1,
                 static_cast<double>(delay) / 1000);
  } else {
    node.verify_retry_mono = 0;  // settled: unverified until re-verified or changed
  }
  TrackVerificationLocked(node.record.id, node);
  AdmitVerificationsLocked();
}

void ServerCore::TrackVerificationLocked(const std::string& node_id, const NodeState& node) {
  if (node.verify_queued) verify_queue_.emplace(node.verify_queue_order, node_id);
  if (node.awaiting_report && !node.verify_queued) verify_admitted_.insert(node_id);
  if (node.verify_retry_mono > 0) verify_retries_.emplace(node.verify_retry_mono, node_id);
}

void ServerCore::AdmitVerificationsLocked() {
  const int64_t now = clock_->MonotonicMillis();
  // Retries that are due: queued like any request. One still waiting for a report, or without
  // a link, keeps its turn for later.
  for (auto it = verify_retries_.begin(); it != verify_retries_.end() && it->first <= now;) {
    auto n = nodes_.find(it->second);
    if (n == nodes_.end() || n->second.verify_retry_mono != it->first) {
      it = verify_retries_.erase(it);
      continue;
    }
    NodeState& ns = n->second;
    if (!ns.link || ns.awaiting_report) {
      ++it;
      continue;
    }
    ns.verify_retry_mono = 0;
    ns.awaiting_report = true;
    NodeChangedLocked(n->first);
    ns.verify_queued = true;
    ns.verify_queue_order = ++verify_queue_seq_;
    ns.verify_reason =
        "retry " + std::to_string(ns.verify_failures) + " after a failed verification";
    verify_queue_.emplace(ns.verify_queue_order, n->first);
    it = verify_retries_.erase(it);
  }
  // Suites admitted and not yet reported. A suite that never reports (a hung agent) stops
  // holding its slot after a while; a node without a link holds none until it is back.
  int running = 0;
  for (auto it = verify_admitted_.begin(); it != verify_admitted_.end();) {
    auto n = nodes_.find(*it);
    if (n == nodes_.end() || !n->second.awaiting_report || n->second.verify_queued ||
        now - n->second.verify_admitted_mono >= kVerificationSlotMs) {
      it = verify_admitted_.erase(it);
      continue;
    }
    running += n->second.link ? 1 : 0;
    ++it;
  }
#ifndef NDEBUG
  CheckVerificationIndexesLocked(now, running);
#endif
  // Then the queue, first come, first served.
  for (auto it = verify_queue_.begin();
       it != verify_queue_.end() && running < options_.max_concurrent_verifications;) {
    auto n = nodes_.find(it->second);
    if (n == nodes_.end() || !n->second.verify_queued ||
        n->second.verify_queue_order != it->first) {
      it = verify_queue_.erase(it);
      continue;
    }
    if (!n->second.link) {  // its turn waits for its agent
      ++it;
      continue;
    }
    SendReportRequestLocked(n->second, n->second.verify_reason);
    verify_admitted_.insert(n->first);
    ++running;
    it = verify_queue_.erase(it);
  }
}

#ifndef NDEBUG
// Debug builds (the sanitizer run) check the indexes against a scan of every node, the way
// admission worked before them: the same running count, and every queued node filed.
void ServerCore::CheckVerificationIndexesLocked(int64_t now, int running) const {
  int scanned = 0;
  for (const auto& [id, ns] : nodes_) {
    if (!ns.link) continue;
    if (ns.awaiting_report && !ns.verify_queued &&
        now - ns.verify_admitted_mono < kVerificationSlotMs) {
      ++scanned;
    }
    if (ns.verify_queued && verify_queue_.count({ns.verify_queue_order, id}) == 0) {
      std::fprintf(stderr, "verification index: queued node %s is not filed\n", id.c_str());
      std::abort();
    }
    if (ns.verify_retry_mono > 0 && !ns.awaiting_report &&
        verify_retries_.count({ns.verify_retry_mono, id}) == 0) {
      std::fprintf(stderr, "verification index: retry of node %s is not filed\n", id.c_str());
      std::abort();
    }
  }
  if (scanned != running) {
    std::fprintf(stderr, "verification index: %d running by the index, %d by a scan\n", running,
                 scanned);
    std::abort();
  }
}
#endif

}  // namespace sluice::server
