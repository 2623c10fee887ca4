// Reclaimed nodes leave the market (issue 15 item 5; docs/design-notes.md "Paused nodes"): a
// node whose provider took it back whole, or whose agent reported a spot-termination notice,
// takes no new work until its provider resumes it or the cool-down passes. Members of
// ServerCore; the caller holds mu_ unless a method takes it.
#include <algorithm>
#include <cstdio>

#include "server/core_internal.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

void ServerCore::PauseNodeLocked(Edit& edit, const std::string& node_id, const std::string& why) {
  if (options_.reclaim_cooldown_ms <= 0 || nodes_.count(node_id) == 0) return;
  NodeState& node = StagedNodeLocked(edit, node_id);
  const int64_t until = clock_->NowMillis() + options_.reclaim_cooldown_ms;
  node.record.paused_until_ms = std::max(node.record.paused_until_ms, until);
  node.record.paused_reason = why + "; until " +
                              Utc(node.record.paused_until_ms, "%Y-%m-%d %H:%M:%S UTC") +
                              " or `sluice node resume`";
  edit.batch.nodes.push_back(node.record);
  std::fprintf(stderr, "sluice server: node %s (%s) takes no new work: %s\n",
               node.record.name.c_str(), node_id.c_str(), node.record.paused_reason.c_str());
}

Result<store::NodeRecord> ServerCore::ResumeNode(const std::string& node) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(const NodeState* found, NodeByIdOrNameLocked(node));
  if (found->record.paused_until_ms == 0) return found->record;
  const std::string id = found->record.id;
  Edit edit;
  NodeState& staged = StagedNodeLocked(edit, id);
  staged.record.paused_until_ms = 0;
  staged.record.paused_reason.clear();
  edit.batch.nodes.push_back(staged.record);
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  SLUICE_RETURN_IF_ERROR(RequestScheduleLocked());
  return nodes_.at(id).record;
}

void ServerCore::EndPausesLocked() {
  const int64_t now = clock_->NowMillis();
  Edit edit;
  for (const auto& [id, ns] : nodes_) {
    if (ns.record.paused_until_ms == 0 || ns.record.paused_until_ms > now) continue;
    NodeState& staged = StagedNodeLocked(edit, id);
    staged.record.paused_until_ms = 0;
    staged.record.paused_reason.clear();
    edit.batch.nodes.push_back(staged.record);
  }
  if (edit.batch.nodes.empty()) return;
  if (Status s = CommitLocked(edit); !s.ok()) {
    DegradedLocked("pause", "ending node pauses", s);
    return;
  }
  if (Status s = RequestScheduleLocked(); !s.ok()) {
    DegradedLocked("schedule", "scheduling after node pauses ended", s);
  }
}

}  // namespace sluice::server
