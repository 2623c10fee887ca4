#include "server/verification_queue.h"

#include <cstdio>
#include <cstdlib>

namespace sluice::server {

void VerificationQueue::Enqueue(const std::string& id, NodeState& node, const std::string& why) {
  node.verify_retry_mono = 0;  // this request replaces a scheduled retry
  if (!node.verify_queued) node.verify_queue_order = ++seq_;
  node.awaiting_report = true;
  node.verify_queued = true;
  node.verify_reason = why;
  Track(id, node);
}

void VerificationQueue::Track(const std::string& id, const NodeState& node) {
  if (node.verify_queued) queue_.emplace(node.verify_queue_order, id);
  if (node.awaiting_report && !node.verify_queued) admitted_.insert(id);
  if (node.verify_retry_mono > 0) retries_.emplace(node.verify_retry_mono, id);
}

void VerificationQueue::Admit(Nodes& nodes, int64_t now_mono, int max_running,
                              const std::function<void(const std::string&, NodeState&)>& admit,
                              const std::function<void(const std::string&)>& changed) {
  // Retries that are due: queued like any request. One still waiting for a report, or without
  // a link, keeps its turn for later.
  for (auto it = retries_.begin(); it != retries_.end() && it->first <= now_mono;) {
    auto n = nodes.find(it->second);
    if (n == nodes.end() || n->second.verify_retry_mono != it->first) {
      it = retries_.erase(it);
      continue;
    }
    NodeState& ns = n->second;
    if (!ns.link || ns.awaiting_report) {
      ++it;
      continue;
    }
    ns.verify_retry_mono = 0;
    ns.awaiting_report = true;
    ns.verify_queued = true;
    ns.verify_queue_order = ++seq_;
    ns.verify_reason =
        "retry " + std::to_string(ns.verify_failures) + " after a failed verification";
    queue_.emplace(ns.verify_queue_order, n->first);
    changed(n->first);
    it = retries_.erase(it);
  }
  // Suites admitted and not yet reported.
  int running = 0;
  for (auto it = admitted_.begin(); it != admitted_.end();) {
    auto n = nodes.find(*it);
    if (n == nodes.end() || !n->second.awaiting_report || n->second.verify_queued ||
        now_mono - n->second.verify_admitted_mono >= kSlotMs) {
      it = admitted_.erase(it);
      continue;
    }
    running += n->second.link ? 1 : 0;
    ++it;
  }
#ifndef NDEBUG
  Check(nodes, now_mono, running);
#endif
  // Then the queue, first come, first served.
  for (auto it = queue_.begin(); it != queue_.end() && running < max_running;) {
    auto n = nodes.find(it->second);
    if (n == nodes.end() || !n->second.verify_queued || n->second.verify_queue_order != it->first) {
      it = queue_.erase(it);
      continue;
    }
    if (!n->second.link) {  // its turn waits for its agent
      ++it;
      continue;
    }
    n->second.verify_queued = false;
    admit(n->first, n->second);
    admitted_.insert(n->first);
    ++running;
    it = queue_.erase(it);
  }
}

#ifndef NDEBUG
void VerificationQueue::Check(const Nodes& nodes, int64_t now_mono, int running) const {
  int scanned = 0;
  for (const auto& [id, ns] : nodes) {
    if (!ns.link) continue;
    if (ns.awaiting_report && !ns.verify_queued && now_mono - ns.verify_admitted_mono < kSlotMs) {
      ++scanned;
    }
    if (ns.verify_queued && queue_.count({ns.verify_queue_order, id}) == 0) {
      std::fprintf(stderr, "verification index: queued node %s is not filed\n", id.c_str());
      std::abort();
    }
    if (ns.verify_retry_mono > 0 && !ns.awaiting_report &&
        retries_.count({ns.verify_retry_mono, id}) == 0) {
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
