// Storm-proof verification (issue 12 item 5; docs/design-notes.md "Storm-proof verification"):
// a bounded number of conformance suites at once, the rest queued, and a failed verification
// retried with backoff before the node settles on `unverified`. Admission itself is
// server/verification_queue.h; here the policy around it. Members of ServerCore; the caller holds
// mu_.
#include <cstdio>
#include <random>

#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

void ServerCore::RequestReportLocked(NodeState& node, const std::string& why) {
  if (!node.link) return;
  verification_.Enqueue(node.record.id, node, why);
  NodeChangedLocked(node.record.id);
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
  verification_.Track(node.record.id, node);
  AdmitVerificationsLocked();
}

void ServerCore::AdmitVerificationsLocked() {
  verification_.Admit(
      nodes_, clock_->MonotonicMillis(), options_.max_concurrent_verifications,
      [this](const std::string&, NodeState& n) { SendReportRequestLocked(n, n.verify_reason); },
      [this](const std::string& id) { NodeChangedLocked(id); });
}

}  // namespace sluice::server
