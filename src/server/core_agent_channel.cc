// The agent channel: hello (registration and reconciliation), the messages of a connected
// agent, and its disconnection. Members of ServerCore.
#include <algorithm>
#include <set>

#include "common/inventory.h"
#include "server/accounts.h"
#include "server/core_internal.h"
#include "server/node_trust.h"
#include "server/server_core.h"

namespace sluice::server {

using store::AttemptRecord;
using store::AttemptState;
using store::JobRecord;
using store::WriteBatch;
namespace st = store;
using namespace core;  // NOLINT: the core's own helpers (core_internal.h)

Result<std::string> ServerCore::AgentHello(const std::shared_ptr<AgentLink>& link,
                                           const proto::Hello& hello, const AgentIdentity& who) {
  // A claim the probe contradicts is refused before anything is registered (issue 5 item 3).
  SLUICE_RETURN_IF_ERROR(CheckClaims(hello.claims, hello.inventory));
  std::lock_guard<std::mutex> lock(mu_);
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
    if (accounts_ != nullptr) {
      // Its own credential, committed with the node; only its hash is stored.
      fresh.record.owner = who.account_id;
      credential = accounts_->NewNodeCredential(node_id, who.account_id);
    }
  }
  NodeState& ns = enrolling ? fresh : it->second;
  st::NodeRecord record = ns.record;  // the node as this hello leaves it, applied after commit
  record.name = hello.name.empty() ? hello.inventory.hostname : hello.name;
  Inventory previous;
  if (auto p = InventoryFromJson(record.inventory); p.ok()) previous = *std::move(p);
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
  for (const auto& [aid, att] : active_attempts_) {
    if (att.node_id != node_id) continue;
    auto rep = reported.find(aid);
    if (rep == reported.end() || rep->second->lost) {
      FinishAttemptLocked(aid, AttemptState::kLost, std::nullopt,
                          "the agent on " + record.name + " restarted and no longer runs it", edit);
    } else {
      // Running, or finished while we were apart: either way the agent now resends the lines
      // we lack (from the log_ack below) and then its `exited`, so keep the attempt active.
      MarkRunningLocked(aid, record.name, edit);
      if (rep->second->running && jobs_[att.job_id].record.cancel_requested) {
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
  NodeState& live = enrolling ? nodes_.emplace(node_id, std::move(fresh)).first->second : ns;
  live.record = std::move(record);
  live.inventory = std::make_shared<const Inventory>(hello.inventory);
  if (trust.changed) live.has_verdict = false;  // its usable software is unknown until re-verified
  live.online_since_ms = online_since;
  // A second agent for one node: the newest wins.
  if (live.link && live.link != link) live.link->Close();
  live.link = link;
  live.last_seen_mono = clock_->MonotonicMillis();
  Json welcome{{"type", "welcome"},
               {"node_id", node_id},
               {"heartbeat_interval_ms", options_.heartbeat_interval_ms},
               {"lease_ms", options_.lease_ms},
               // Supervisors kill a job with no live agent before this runs out.
               {"heartbeat_grace_ms", options_.heartbeat_grace_ms}};
  // Shown once: the agent keeps it in its data dir and proves the node with it from now on.
  if (credential) welcome["credential"] = credential->secret;
  link->Send(welcome);
  // Registration runs the conformance suite, unless the node is verified and unchanged.
  if (live.record.verification != kVerified) {
    RequestReportLocked(live, trust.changed ? trust.what : "registration");
  }
  for (const auto& aid : to_cancel) {
    link->Send(
        Json{{"type", "cancel"}, {"attempt_id", aid}, {"grace_ms", options_.cancel_grace_ms}});
  }
  for (const auto& aid : to_kill) {
    link->Send(Json{{"type", "kill"},
                    {"attempt_id", aid},
                    {"reason", "the server no longer places it on this node"}});
  }
  for (const auto& aid : to_ack) link->Send(Json{{"type", "exit_ack"}, {"attempt_id", aid}});
  // Tell the agent where each surviving attempt's logs stand, so it resends only what we lack.
  // A preemption the server started may not have reached the agent before the link (or the
  // server) went down: ask again; stopping a process twice is harmless.
  for (const auto& [aid, att] : active_attempts_) {
    if (att.node_id != node_id) continue;
    link->Send(Json{{"type", "log_ack"}, {"attempt_id", aid}, {"seq", max_log_seq_[aid]}});
    if (att.cause.rfind(kPreemptingPrefix, 0) == 0) {
      link->Send(Json{{"type", "preempt"},
                      {"attempt_id", aid},
                      {"grace_ms", jobs_[att.job_id].spec.lifecycle.grace_period_s * 1000},
                      {"cause", att.cause.substr(kPreemptingPrefix.size())}});
    }
  }
  SLUICE_RETURN_IF_ERROR(ScheduleLocked());
  return node_id;
}

Status ServerCore::AgentMessage(const std::string& node_id, const AgentLink* link,
                                const Json& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  auto nit = nodes_.find(node_id);
  if (nit == nodes_.end() || nit->second.link.get() != link) {
    return Status::FailedPrecondition("this connection is no longer the node's agent link");
  }
  NodeState& ns = nit->second;
  ns.last_seen_mono = clock_->MonotonicMillis();
  SLUICE_ASSIGN_OR_RETURN(std::string type, GetString(msg, "type"));
  if (type == "heartbeat") {
    // The reply renews the lease of every attempt we hold placed on this node; an attempt the
    // agent runs that is not listed is not ours there any more (docs/design-notes.md "Leases
    // and fencing").
    Json ids = Json::array();
    for (const auto& [aid, att] : active_attempts_) {
      if (att.node_id == node_id) ids.push_back(aid);
    }
    // Echoed so the agent counts the lease from when it sent this heartbeat; not a number: 0.
    int64_t seq = 0;
    if (auto it = msg.find("seq"); it != msg.end() && it->is_number_integer()) {
      seq = it->get<int64_t>();
    }
    ns.link->Send(Json{{"type", "lease"},
                       {"seq", seq},
                       {"lease_ms", options_.lease_ms},
                       {"attempts", std::move(ids)}});
    return Status::Ok();
  }
  if (type == "conformance") {
    if (!msg.contains("report")) return Status::InvalidArgument("conformance: report is missing");
    SLUICE_ASSIGN_OR_RETURN(conformance::Report report,
                            conformance::ReportFromJson(msg["report"], "conformance.report"));
    if (!ns.inventory)
      return Status::FailedPrecondition("conformance: the node's inventory is unreadable");
    const Inventory& inv = *ns.inventory;
    // Only a report that answers this server's request counts: one captured from another node
    // (or an earlier run) is refused and audited (docs/design-notes.md "Node identity").
    SLUICE_RETURN_IF_ERROR(CheckReportNonceLocked(ns, msg));
    Edit edit;
    NodeState& judged = StagedNodeLocked(edit, node_id);
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
    SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
    AfterVerdictLocked(ns);
    return ScheduleLocked();
  }

  SLUICE_ASSIGN_OR_RETURN(std::string attempt_id, GetString(msg, "attempt_id"));
  auto ait = active_attempts_.find(attempt_id);
  bool ours = ait != active_attempts_.end() && ait->second.node_id == node_id;
  if (type == "exited" && !ours) {
    // Already applied (a resend after reconnect) or never ours: acknowledge so the agent forgets.
    ns.link->Send(Json{{"type", "exit_ack"}, {"attempt_id", attempt_id}});
    return Status::Ok();
  }
  if (!ours) {
    if (type == "log") {
      // Lines of an attempt we already closed; tell the agent to drop them.
      ns.link->Send(Json{{"type", "log_ack"}, {"attempt_id", attempt_id}, {"seq", INT64_MAX}});
      return Status::Ok();
    }
    return Status::NotFound("attempt " + attempt_id + " is not running on this node");
  }
  const AttemptRecord& att = ait->second;
  if (type == "started") {
    Edit edit;
    MarkRunningLocked(attempt_id, ns.record.name, edit);
    return CommitLocked(edit);
  }
  if (type == "log") {
    WriteBatch batch;
    SLUICE_ASSIGN_OR_RETURN(auto lines, proto::LogEntriesFromJson(msg));
    int64_t& max_seq = max_log_seq_[attempt_id];
    for (auto& l : lines) {
      if (l.seq <= max_seq) continue;  // a resend we already hold
      st::LogLine line;
      line.job_id = att.job_id;
      line.attempt_id = attempt_id;
      line.seq = l.seq;
      line.stream = l.stream;
      line.ts_ms = l.ts_ms ? l.ts_ms : clock_->NowMillis();
      line.text = std::move(l.text);
      batch.logs.push_back(std::move(line));
    }
    if (batch.logs.empty()) return Status::Ok();
    int64_t new_max = batch.logs.back().seq;
    SLUICE_ASSIGN_OR_RETURN(int64_t held_after, EnforceLogQuotaLocked(att, batch));
    SLUICE_RETURN_IF_ERROR(CommitLocked(batch));
    log_bytes_[attempt_id] = held_after;
    max_seq = std::max(max_seq, new_max);
    ns.link->Send(Json{{"type", "log_ack"}, {"attempt_id", attempt_id}, {"seq", max_seq}});
    return Status::Ok();
  }
  if (type == "preempt_notice") {
    // The node itself is going (a cloud spot notice, the provider's signal): the agent is
    // already stopping the job, so nothing is sent back.
    SLUICE_ASSIGN_OR_RETURN(std::string cause, GetStringOr(msg, "cause", "notice from the agent"));
    if (cause.size() > 300) cause = cause.substr(0, 300);
    return PreemptLocked(attempt_id, cause, /*tell_agent=*/false);
  }
  if (type == "checkpoint") {
    SLUICE_ASSIGN_OR_RETURN(std::string manifest, GetString(msg, "manifest"));
    Edit edit;
    SaveCheckpointLocked(att, manifest, edit);
    return CommitLocked(edit);
  }
  if (type == "exited") {
    SLUICE_ASSIGN_OR_RETURN(proto::Exited ex, proto::ExitedFromJson(msg));
    Edit edit;
    ApplyExitLocked(attempt_id, ex, edit);
    // Acknowledged only once durable: until then the agent keeps the exit and resends it.
    edit.sends.emplace_back(node_id, Json{{"type", "exit_ack"}, {"attempt_id", attempt_id}});
    SLUICE_RETURN_IF_ERROR(CommitLocked(edit));
    return ScheduleLocked();
  }
  return Status::InvalidArgument("type: unknown message type `" + type + "`");
}

void ServerCore::AgentDisconnected(const std::string& node_id, const AgentLink* link) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.link.get() != link) return;  // replaced already
  it->second.link.reset();  // a fact, whatever the store says
  if (it->second.record.state != st::NodeState::kOnline) return;
  Edit edit;
  NodeState& node = StagedNodeLocked(edit, node_id);
  node.record.state = st::NodeState::kOffline;
  node.record.last_seen_ms = clock_->NowMillis();
  edit.batch.nodes.push_back(node.record);
  CloseUptimeLocked(node, edit.batch);
  // If this cannot be recorded, the node stays online in memory without a link: it takes no
  // work (placement needs a link) and the tick declares it lost after the grace.
  if (Status s = CommitLocked(edit); !s.ok()) DegradedLocked("recording a disconnect", s);
}

}  // namespace sluice::server
