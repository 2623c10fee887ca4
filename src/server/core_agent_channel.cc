// The agent channel: hello (registration and reconciliation), the messages of a connected
// agent, and its disconnection. Members of ServerCore.
#include <algorithm>
#include <set>
#include <variant>

#include "common/inventory.h"
#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

Result<std::string> ServerCore::AgentHello(const std::shared_ptr<AgentLink>& link,
                                           const proto::Hello& hello, const AgentIdentity& who) {
  // A claim the probe contradicts is refused before anything is registered (issue 5 item 3).
  SLUICE_RETURN_IF_ERROR(CheckClaims(hello.claims, hello.inventory));
  std::lock_guard<TimedMutex> lock(mu_);
  int64_t now = clock_->NowMillis();
  std::string node_id = hello.node_id;
  // Which node this connection may speak for, decided before anything changes: a refused hello
  // leaves the node it named (its link, attempts and state) untouched. Without accounts (unit
  // tests), the node id is trusted as before.
  if (accounts_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(node_id, AdmitNodeLocked(hello, who));
  }
  auto it = node_id.empty() ? nodes_.end() : nodes_.find(node_id);
  const bool enrolling = it == nodes_.end();
  NodeState fresh;  // a new node enters nodes_ only once its record is committed
  std::optional<MintedToken> credential;
  if (enrolling) {
    // A node id we never issued (or none): register as new. An id from a wiped server is not
    // trusted as-is, so a node cannot claim another node's history.
    node_id = NewId("node-");
    fresh.record.id = node_id;
    fresh.record.registered_ms = now;
    fresh.record.owner = who.account_id;  // the provider paid for its work
    if (accounts_ != nullptr) {
      // Its own credential, committed with the node; only its hash is stored.
      credential = accounts_->NewNodeCredential(node_id, who.account_id);
    }
  }
  NodeState& ns = enrolling ? fresh : it->second;
  st::NodeRecord record = ns.record;  // the node as this hello leaves it, applied after commit
  record.name = hello.name.empty() ? hello.inventory.hostname : hello.name;
  Inventory previous;
  if (auto p = InventoryFromJson(record.inventory.Parse()); p.ok()) previous = *std::move(p);
  HelloTrust trust = ApplyHelloTrust(record, previous, hello.inventory);
  record.inventory = ToJson(hello.inventory);
  record.state = st::NodeState::kOnline;
  record.last_seen_ms = now;
  record.price_per_gpu_hour = hello.price_per_gpu_hour;
  record.price_per_cpu_hour = hello.price_per_cpu_hour;
  record.interruptible_price_per_gpu_hour = hello.interruptible_price_per_gpu_hour;
  record.interruptible_price_per_cpu_hour = hello.interruptible_price_per_cpu_hour;
  record.region = hello.region;
  const int64_t online_since = ns.online_since_ms == 0 ? now : ns.online_since_ms;

  // Reconcile: the agent's account of its attempts against ours.
  Edit edit;
  WriteBatch& batch = edit.batch;
  batch.nodes.push_back(record);
  if (credential) batch.tokens.push_back(credential->record);
  batch.uptime.push_back({node_id, online_since, now});
  std::map<std::string, const proto::AttemptReport*> reported;
  for (const auto& r : hello.attempts) reported[r.attempt_id] = &r;
  std::vector<std::string> to_cancel, to_kill, to_ack;  // attempt ids
  for (const auto& aid : AttemptsOnLocked(node_id)) {
    auto live = active_attempts_.find(aid);
    if (live == active_attempts_.end()) continue;  // the index and the map change together
    const AttemptRecord& att = live->second;
    auto rep = reported.find(aid);
    if (rep == reported.end() || rep->second->lost) {
      FinishAttemptLocked(aid, AttemptState::kLost, std::nullopt,
                          "the agent on " + record.name + " restarted and no longer runs it", edit);
    } else {
      // Running, or finished while we were apart: either way the agent now resends the lines
      // we lack (from the log_ack below) and then its `exited`, so keep the attempt active.
      MarkRunningLocked(aid, record.name, edit);
      const JobState* js = ViewJobLocked(edit, att.job_id);
      if (rep->second->running && js != nullptr && js->record.cancel_requested) {
        to_cancel.push_back(aid);
      }
    }
  }
  for (const auto& r : hello.attempts) {
    auto a = active_attempts_.find(r.attempt_id);
    bool ours = a != active_attempts_.end() && a->second.node_id == node_id;
    if (ours) continue;
    // Not active here: finished, lost, or unknown. A running one must die at once so a job never
    // runs twice: not `cancel`, whose grace period would thaw a fenced copy that another node
    // may be running by now. A finished one is acknowledged so the agent forgets it.
    if (r.running)
      to_kill.push_back(r.attempt_id);
    else
      to_ack.push_back(r.attempt_id);
  }
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  if (credential) accounts_->Apply({credential->record});
  NodeState* entry = &ns;
  bool counted = !enrolling;  // the node's record as it was is in owned_nodes_
  if (enrolling) {
    auto [at, inserted] = nodes_.emplace(node_id, std::move(fresh));
    entry = &at->second;
    counted = !inserted;
  }
  NodeState& live = *entry;
  if (counted) CountNodeLocked(live, -1);
  live.record = std::move(record);
  live.snapshot_digest.clear();
  CountNodeLocked(live, +1);
  live.inventory = std::make_shared<const Inventory>(hello.inventory);
  live.idle.reset();
  NodeChangedLocked(node_id);
  search_.nodes_changed = true;
  if (trust.changed) live.has_verdict = false;  // its usable software is unknown until re-verified
  live.online_since_ms = online_since;
  // A second agent for one node: the newest wins.
  if (live.link && live.link != link) live.link->Close();
  live.link = link;
  live.last_seen_mono = clock_->MonotonicMillis();
  live.since_restart = false;
  last_hello_mono_ = live.last_seen_mono;
  proto::Welcome welcome;
  welcome.node_id = node_id;
  welcome.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  welcome.lease_ms = options_.lease_ms;
  leases_.Renewed(node_id);
  // Supervisors kill a job with no live agent before this runs out.
  welcome.heartbeat_grace_ms = options_.heartbeat_grace_ms;
  // Shown once: the agent keeps it in its data dir and proves the node with it from now on.
  if (credential) welcome.credential = credential->secret;
  link->Send(proto::ToJson(welcome));
  // Registration runs the conformance suite, unless the node is verified and unchanged.
  if (live.record.verification != kVerified) {
    RequestReportLocked(live, trust.changed ? trust.what : "registration");
  }
  for (const auto& aid : to_cancel) {
    link->Send(proto::CancelMessage({aid, options_.cancel_grace_ms}));
  }
  for (const auto& aid : to_kill) {
    link->Send(proto::ToJson(proto::Kill{aid, "the server no longer places it on this node"}));
  }
  for (const auto& aid : to_ack) link->Send(proto::ToJson(proto::ExitAck{aid}));
  // Tell the agent where each surviving attempt's logs stand, so it resends only what we lack.
  // A preemption the server started may not have reached the agent before the link (or the
  // server) went down: ask again; stopping a process twice is harmless.
  for (const auto& aid : AttemptsOnLocked(node_id)) {
    auto live = active_attempts_.find(aid);
    if (live == active_attempts_.end()) continue;  // the index and the map change together
    const AttemptRecord& att = live->second;
    link->Send(proto::ToJson(proto::LogAck{aid, max_log_seq_[aid]}));
    if (att.cause.rfind(kPreemptingPrefix, 0) == 0) {
      auto js = jobs_.find(att.job_id);
      const int64_t grace_s = js != jobs_.end() ? js->second.spec.lifecycle.grace_period_s
                                                : spec::Lifecycle{}.grace_period_s;
      link->Send(
          proto::PreemptMessage({aid, grace_s * 1000, att.cause.substr(kPreemptingPrefix.size())}));
    }
  }
  SLUICE_RETURN_IF_ERROR(RequestScheduleLocked());
  return node_id;
}

Status ServerCore::OnHeartbeatLocked(NodeState& ns, const proto::Heartbeat& hb) {
  // The reply renews the lease of every attempt we hold placed on this node; an attempt the
  // agent runs that is not listed is not ours there any more (docs/design-notes.md "Leases and
  // fencing"). The seq is echoed so the agent counts the lease from when it sent the heartbeat.
  proto::Lease lease{hb.seq, options_.lease_ms, {}};
  leases_.Renewed(ns.record.id);
  const auto& on = AttemptsOnLocked(ns.record.id);
  lease.attempts.assign(on.begin(), on.end());
  ns.link->Send(proto::ToJson(lease));
  return Status::Ok();
}

Status ServerCore::OnConformanceLocked(NodeState& ns, const proto::ConformanceMessage& m) {
  const std::string node_id = ns.record.id;
  SLUICE_ASSIGN_OR_RETURN(conformance::Report report,
                          conformance::ReportFromJson(m.report, "conformance.report"));
  if (!ns.inventory) {
    return Status::FailedPrecondition("conformance: the node's inventory is unreadable");
  }
  const Inventory& inv = *ns.inventory;
  // Only a report that answers this server's request counts: one captured from another node (or
  // an earlier run) is refused and audited (docs/design-notes.md "Node identity").
  SLUICE_RETURN_IF_ERROR(CheckReportNonceLocked(ns, m.nonce));
  Edit edit;
  NodeState& judged = StagedNodeLocked(edit, node_id);
  judged.ConsumeReportNonce(m.nonce);  // only once the verdict is committed
  judged.verdict =
      ApplyReport(judged.record, inv, report, options_.verification_rules, clock_->NowMillis());
  judged.has_verdict = true;
  WriteBatch& batch = edit.batch;
  batch.nodes.push_back(judged.record);
  st::AuditEntry entry;
  entry.ts_ms = clock_->NowMillis();
  entry.actor = "agent:" + node_id;
  entry.action = "agent.conformance";
  entry.target = node_id;
  entry.params = Json{{"trigger", report.trigger},
                      {"checks", report.checks.size()},
                      {"verification", judged.record.verification},
                      {"reasons", judged.record.verification_reasons}};
  entry.status = 200;
  batch.audit.push_back(std::move(entry));
  if (!judged.verdict.verified) {
    // SLA (issue 15 item 3): what ran on a node that failed verification is credited in full.
    const std::string why =
        "node " + judged.record.name + " failed verification while running it" +
        (judged.verdict.failures.empty() ? "" : " (" + judged.verdict.failures.front() + ")");
    for (const auto& aid : AttemptsOnLocked(node_id)) CreditInFullLocked(edit, aid, why);
  }
  SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  AfterVerdictLocked(ns);
  return RequestScheduleLocked();
}

Status ServerCore::StageAttemptMessageLocked(const NodeState& ns, const proto::AgentMessage& msg,
                                             Edit& edit, bool& exited) {
  const std::string& node_id = ns.record.id;
  const std::string attempt_id = std::visit(
      [](const auto& m) -> std::string {
        if constexpr (requires { m.attempt_id; }) {
          return m.attempt_id;
        } else {
          return "";
        }
      },
      msg);
  // As this edit leaves it: an exit earlier in the same edit has ended it already.
  const AttemptRecord* view = ViewAttemptLocked(edit, attempt_id);
  if (view == nullptr || view->node_id != node_id) {
    // Acknowledgements wait for the edit's commit like any other: an exit acknowledged before an
    // earlier copy of it is durable could be forgotten by the agent and lost with that commit.
    if (std::holds_alternative<proto::Exited>(msg)) {
      // Already applied (a resend after reconnect) or never ours: the agent may forget it.
      edit.sends.emplace_back(node_id, proto::ToJson(proto::ExitAck{attempt_id}));
      return Status::Ok();
    }
    if (std::holds_alternative<proto::LogBatch>(msg)) {
      // Lines of an attempt we already closed; tell the agent to drop them.
      edit.sends.emplace_back(node_id, proto::ToJson(proto::LogAck{attempt_id, INT64_MAX}));
      return Status::Ok();
    }
    return Status::NotFound("attempt " + attempt_id + " is not running on this node");
  }
  const AttemptRecord att = *view;  // staging below may replace the entry it points to
  if (std::holds_alternative<proto::Started>(msg)) {
    MarkRunningLocked(attempt_id, ns.record.name, edit);
    return Status::Ok();
  }
  if (const auto* log = std::get_if<proto::LogBatch>(&msg)) {
    auto staged_seq = edit.max_log_seq.find(attempt_id);
    auto live_seq = max_log_seq_.find(attempt_id);
    const int64_t max_seq = staged_seq != edit.max_log_seq.end() ? staged_seq->second
                            : live_seq != max_log_seq_.end()     ? live_seq->second
                                                                 : 0;
    WriteBatch lines;
    for (const auto& l : log->lines) {
      if (l.seq <= max_seq) continue;  // a resend we already hold
      st::LogLine line;
      line.job_id = att.job_id;
      line.attempt_id = attempt_id;
      line.seq = l.seq;
      line.stream = l.stream;
      line.ts_ms = l.ts_ms ? l.ts_ms : clock_->NowMillis();
      line.text = l.text;
      lines.logs.push_back(std::move(line));
    }
    if (lines.logs.empty()) return Status::Ok();
    const int64_t new_max = std::max(max_seq, lines.logs.back().seq);
    std::optional<int64_t> held;
    if (auto b = edit.log_bytes.find(attempt_id); b != edit.log_bytes.end()) held = b->second;
    SLUICE_ASSIGN_OR_RETURN(int64_t held_after, EnforceLogQuotaLocked(att, lines, held));
    for (auto& l : lines.logs) edit.batch.logs.push_back(std::move(l));
    for (auto& t : lines.log_trims) edit.batch.log_trims.push_back(t);
    edit.log_bytes[attempt_id] = held_after;
    edit.max_log_seq[attempt_id] = new_max;
    edit.sends.emplace_back(node_id, proto::ToJson(proto::LogAck{attempt_id, new_max}));
    return Status::Ok();
  }
  if (const auto* cp = std::get_if<proto::CheckpointSaved>(&msg)) {
    SaveCheckpointLocked(att, cp->manifest, edit);
    return Status::Ok();
  }
  const auto& ex = std::get<proto::Exited>(msg);
  ApplyExitLocked(attempt_id, ex, edit);
  // Acknowledged only once durable: until then the agent keeps the exit and resends it.
  edit.sends.emplace_back(node_id, proto::ToJson(proto::ExitAck{attempt_id}));
  exited = true;
  return Status::Ok();
}

bool ServerCore::LogTrimNeedsCommitLocked(const Edit& edit, const proto::LogBatch& log) const {
  const int64_t cap = options_.max_log_bytes_per_attempt;
  auto staged = edit.log_bytes.find(log.attempt_id);
  if (cap <= 0 || staged == edit.log_bytes.end()) return false;
  int64_t incoming = 0;
  for (const auto& l : log.lines) incoming += static_cast<int64_t>(l.text.size());
  return staged->second + incoming > cap;
}

Status ServerCore::OnPreemptNoticeLocked(const NodeState& ns, const proto::PreemptNotice& m) {
  auto att = active_attempts_.find(m.attempt_id);
  if (att == active_attempts_.end() || att->second.node_id != ns.record.id) {
    return Status::NotFound("attempt " + m.attempt_id + " is not running on this node");
  }
  // The node itself is going (a cloud spot notice, the provider's signal): the agent is already
  // stopping the job, so nothing is sent back, and the node takes no new work for a while.
  if (ns.record.paused_until_ms <= clock_->NowMillis()) {
    Edit edit;
    PauseNodeLocked(edit, ns.record.id, "under a termination notice (" + m.cause + ")");
    SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
  }
  return PreemptLocked(m.attempt_id, m.cause, /*tell_agent=*/false);
}

void ServerCore::DisconnectLocked(const std::string& node_id, const AgentLink* link) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.link.get() != link) return;  // replaced already
  it->second.link.reset();  // a fact, whatever the store says
  NodeChangedLocked(node_id);
  if (it->second.record.state != st::NodeState::kOnline) return;
  Edit edit;
  NodeState& node = StagedNodeLocked(edit, node_id);
  node.record.state = st::NodeState::kOffline;
  node.record.last_seen_ms = clock_->NowMillis();
  edit.batch.nodes.push_back(node.record);
  CloseUptimeLocked(node, edit.batch);
  // If this cannot be recorded, the node stays online in memory without a link: it takes no
  // work (placement needs a link) and the tick declares it lost after the grace.
  if (Status s = CommitLocked(edit); !s.ok())
    DegradedLocked("disconnect", "recording a disconnect", s);
}

}  // namespace sluice::server
