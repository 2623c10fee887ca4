// Storm-proof verification (issue 12 item 5; docs/design-notes.md "Storm-proof verification"):
// a bounded number of conformance suites at once, the rest queued, and a failed verification
// retried with backoff before the node settles on `unverified`. Members of ServerCore; the
// caller holds mu_.
#include <algorithm>
#include <cstdio>
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
  node.verify_queued = true;
  node.verify_reason = why;
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
  AdmitVerificationsLocked();
}

void ServerCore::AdmitVerificationsLocked() {
  const int64_t now = clock_->MonotonicMillis();
  int running = 0;
  std::vector<NodeState*> queued;
  for (auto& [id, ns] : nodes_) {
    if (!ns.link) continue;
    if (ns.verify_retry_mono > 0 && ns.verify_retry_mono <= now && !ns.awaiting_report) {
      ns.verify_retry_mono = 0;
      ns.awaiting_report = true;
      ns.verify_queued = true;
      ns.verify_queue_order = ++verify_queue_seq_;
      ns.verify_reason =
          "retry " + std::to_string(ns.verify_failures) + " after a failed verification";
    }
    // A suite that never reports (a hung agent) stops holding its slot after a while.
    if (ns.awaiting_report && !ns.verify_queued &&
        now - ns.verify_admitted_mono < kVerificationSlotMs) {
      ++running;
    }
    if (ns.verify_queued) queued.push_back(&ns);
  }
  std::sort(queued.begin(), queued.end(), [](const NodeState* a, const NodeState* b) {
    return a->verify_queue_order < b->verify_queue_order;
  });
  for (NodeState* ns : queued) {
    if (running >= options_.max_concurrent_verifications) break;
    SendReportRequestLocked(*ns, ns->verify_reason);
    ++running;
  }
}

}  // namespace sluice::server
