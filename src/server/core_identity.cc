// ServerCore: node identity (issue 10 item 2; docs/design-notes.md "Node identity"). Which node
// an agent connection may speak for, `sluice node revoke`, and the nonce that ties a conformance
// report to the request it answers.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/crypto.h"
#include "server/accounts.h"
#include "server/server_core.h"

namespace sluice::server {
namespace st = store;

namespace {
// Requests a node may have outstanding at once; older ones are forgotten (their reports are then
// refused as stale), so a node that never answers cannot grow the list.
constexpr size_t kMaxOutstandingReports = 8;
}  // namespace

Result<std::string> ServerCore::AdmitNodeLocked(const proto::Hello& hello,
                                                const AgentIdentity& who) const {
  if (!who.node_id.empty()) {
    // A node credential proves exactly one node: it speaks for that node or for none.
    if (!hello.node_id.empty() && hello.node_id != who.node_id) {
      return Status::PermissionDenied("impersonation attempt: the credential of node " +
                                      who.node_id + " cannot say hello as node " + hello.node_id);
    }
    auto it = nodes_.find(who.node_id);
    if (it == nodes_.end()) {
      return Status::FailedPrecondition("node " + who.node_id +
                                        " is not registered on this server; remove the agent's "
                                        "node.credential and node.id to enrol again");
    }
    const st::NodeRecord& node = it->second.record;
    if (node.revoked) {
      return Status::FailedPrecondition("node " + node.id + " was revoked (`sluice node revoke`)");
    }
    if (node.owner != who.account_id) {
      return Status::PermissionDenied("impersonation attempt: node " + node.id +
                                      " belongs to another provider account");
    }
    return who.node_id;
  }
  // A join token enrols new nodes only.
  if (!hello.node_id.empty()) {
    auto it = nodes_.find(hello.node_id);
    if (it != nodes_.end() && !it->second.record.owner.empty()) {
      return Status::PermissionDenied(
          "impersonation attempt: node " + hello.node_id +
          " is enrolled with its own credential; a join token cannot take it over (an agent that "
          "lost its node.credential enrols again as a new node: remove node.id from its data "
          "dir)");
    }
    if (it != nodes_.end() && it->second.record.revoked) {
      return Status::FailedPrecondition("node " + hello.node_id +
                                        " was revoked (`sluice node revoke`)");
    }
    // Otherwise a node from before node identity (no owner) or an id this server never issued:
    // it enrols as a new node below, never by presenting a node id alone. A legacy record is
    // left to go lost by the heartbeat grace, which requeues its attempts.
  }
  const int owned = OwnedNodesLocked(who.account_id);
  if (owned >= options_.max_nodes_per_provider) {
    return Status::ResourceExhausted(
        "this provider account has " + std::to_string(owned) +
        " registered nodes, the most this server allows (--max-nodes-per-provider " +
        std::to_string(options_.max_nodes_per_provider) +
        "); revoke nodes no longer used with `sluice node revoke`");
  }
  return std::string();
}

void ServerCore::CountNodeLocked(const NodeState& ns, int delta) {
  if (ns.record.revoked) return;
  auto it = owned_nodes_.try_emplace(ns.record.owner, 0).first;
  if ((it->second += delta) <= 0) owned_nodes_.erase(it);
}

int ServerCore::OwnedNodesLocked(const std::string& owner) const {
  auto it = owned_nodes_.find(owner);
  const int counted = it == owned_nodes_.end() ? 0 : it->second;
#ifndef NDEBUG
  // Debug builds (the sanitizer run) check the count against a walk over every node.
  int walked = 0;
  for (const auto& [id, ns] : nodes_) walked += ns.record.owner == owner && !ns.record.revoked;
  if (walked != counted) {
    std::fprintf(stderr, "node count of %s: %d counted, %d registered\n", owner.c_str(), counted,
                 walked);
    std::abort();
  }
#endif
  return counted;
}

void ServerCore::SendReportRequestLocked(NodeState& node, const std::string& why) {
  if (!node.link) return;
  node.awaiting_report = true;  // and no longer queued: VerificationQueue::Admit took it out
  NodeChangedLocked(node.record.id);
  node.verify_admitted_mono = clock_->MonotonicMillis();
  std::string nonce = RandomHex(16);
  node.report_nonces.push_back(nonce);
  if (node.report_nonces.size() > kMaxOutstandingReports) {
    node.report_nonces.erase(node.report_nonces.begin());
  }
  node.link->Send(proto::ToJson(proto::Reverify{why, nonce}));
}

void core_state::NodeState::ConsumeReportNonce(const std::string& nonce) {
  auto& pending = report_nonces;
  auto found = std::find(pending.begin(), pending.end(), nonce);
  if (found == pending.end()) return;
  // Used once. A run answers the newest request it saw, so older ones are answered too (the
  // agent merges requests that arrive while it waits).
  pending.erase(pending.begin(), found + 1);
  awaiting_report = !pending.empty();
}

Status ServerCore::CheckReportNonceLocked(const NodeState& node, const std::string& nonce) {
  const auto& pending = node.report_nonces;
  if (!nonce.empty() && std::find(pending.begin(), pending.end(), nonce) != pending.end()) {
    return Status::Ok();
  }
  Status refused = Status::PermissionDenied(
      "conformance report does not answer this server's request (stale or replayed)");
  st::AuditEntry entry;
  entry.ts_ms = clock_->NowMillis();
  entry.actor = "agent:" + node.record.id;
  entry.action = "agent.conformance";
  entry.target = node.record.id;
  entry.params = Json{{"refused", refused.message()},
                      {"nonce", nonce.substr(0, 64)},
                      {"verification", node.record.verification}};
  entry.status = 403;
  st::WriteBatch batch;
  batch.audit.push_back(std::move(entry));
  // The refusal stands even if it cannot be recorded.
  if (Status s = CommitLocked(batch); !s.ok()) DegradedLocked("audit", "auditing a refusal", s);
  return refused;
}

Result<st::NodeRecord> ServerCore::RevokeNode(const std::string& node) {
  std::lock_guard<TimedMutex> lock(mu_);
  SLUICE_ASSIGN_OR_RETURN(NodeState * found, NodeByIdOrNameLocked(node));
  NodeState& ns = *found;
  const std::string id = ns.record.id;
  std::vector<st::TokenRecord> revocations;
  if (accounts_ != nullptr) revocations = accounts_->RevocationsForNode(id);
  if (ns.record.revoked && revocations.empty()) return ns.record;

  // Compute everything, commit once, then change memory (docs/design-notes.md "Commit, then
  // apply"): a failed commit changes nothing.
  Edit edit;
  NodeState& staged = StagedNodeLocked(edit, id);
  staged.record.revoked = true;
  staged.record.state = st::NodeState::kLost;
  edit.batch.nodes.push_back(staged.record);
  edit.batch.tokens = revocations;
  CloseUptimeLocked(staged, edit.batch);
  staged.awaiting_report = false;
  staged.report_nonces.clear();
  for (const auto& aid : AttemptsOnLocked(id)) {
    FinishAttemptLocked(aid, st::AttemptState::kLost, std::nullopt,
                        "node " + staged.record.name + " lost: revoked by its provider or an admin",
                        edit);
  }
  if (staged.link) {
    edit.close.push_back(staged.link);
    staged.link.reset();
  }
  const st::NodeRecord record = staged.record;
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  if (accounts_ != nullptr) accounts_->Apply(revocations);
  // Its jobs go elsewhere; a schedule failure does not undo the revocation.
  if (Status s = RequestScheduleLocked(); !s.ok())
    DegradedLocked("schedule", "scheduling after a revocation", s);
  return record;
}

}  // namespace sluice::server
